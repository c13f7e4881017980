//! A legacy-era MCP server built on rmcp 2.x from crates.io, as an app
//! behind mcp-bridge: `legacy-app <socket>` listens on a Unix socket, reads
//! the bridge's identity line from each connection (docs/handshake.md), then
//! serves MCP with rmcp 2.x on the rest of it. It prints `listening on
//! <socket>` once it accepts.
//!
//! Why rmcp 2.x: its server accepts only `ping` before `initialize`; any
//! other first request (a dual-era client's `server/discover` probe) ends
//! the session with `ExpectedInitializeRequest`, that is, the app hangs up
//! on the probe. That is the case the bridge answers `legacy_app` for
//! (docs/bridge.md), and what src/bin/probe.rs checks with real clients.

use std::io;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerInfo};
use rmcp::{schemars, serde, tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The legacy server: one tool.
#[derive(Clone)]
struct Legacy {
    tool_router: ToolRouter<Legacy>,
}

/// The arguments of the `echo` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(crate = "rmcp::serde")]
#[schemars(crate = "rmcp::schemars")]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

#[tool_router]
impl Legacy {
    fn new() -> Legacy {
        Legacy {
            tool_router: Legacy::tool_router(),
        }
    }

    /// Sends its argument back.
    #[tool(description = "Send the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Legacy {
    fn get_info(&self) -> ServerInfo {
        let mut info = ServerInfo::default();
        info.capabilities = ServerCapabilities::builder().enable_tools().build();
        info
    }
}

/// Reads the identity line, then serves rmcp 2.x until the bridge hangs up
/// (or rmcp 2.x does, on a request before `initialize`).
async fn serve_bridge(stream: UnixStream) -> io::Result<()> {
    let (reader, writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut identity = String::new();
    reader.read_line(&mut identity).await?;
    eprintln!("legacy-app: identity {}", identity.trim_end());
    match Legacy::new().serve((reader, writer)).await {
        Ok(running) => {
            let _ = running.waiting().await;
            Ok(())
        }
        Err(e) => {
            eprintln!("legacy-app: rmcp 2.x ended the session before initialize: {e}");
            Ok(())
        }
    }
}

#[tokio::main]
async fn main() {
    let socket = match std::env::args_os().nth(1) {
        Some(socket) => socket,
        None => {
            eprintln!("usage: legacy-app <socket path>");
            std::process::exit(2);
        }
    };
    let _ = std::fs::remove_file(&socket);
    let listener = match UnixListener::bind(&socket) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("legacy-app: cannot listen on {socket:?}: {e}");
            std::process::exit(1);
        }
    };
    println!("listening on {}", std::path::Path::new(&socket).display());
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(async move {
                    if let Err(e) = serve_bridge(stream).await {
                        eprintln!("legacy-app: a connection failed: {e}");
                    }
                });
            }
            Err(e) => {
                eprintln!("legacy-app: stopped accepting: {e}");
                std::process::exit(1);
            }
        }
    }
}
