//! A tokio app that hosts its MCP server behind an mcp-bridge endpoint: the
//! shape of a Tauri IDE or any other desktop app whose runtime is tokio.
//!
//! `tokio-app <socket>` binds the endpoint with `mcp_bridge::host`, and on
//! each bridge that connects serves a real MCP server written with rmcp, the
//! official Rust SDK, whose tools see who is calling (the bridge's
//! handshake). It prints `listening on <socket>` once it accepts, and exits
//! cleanly (removing the socket file) on Ctrl-C or SIGTERM.
//!
//! The glue between the two crates is `serve_bridge` below: the
//! connection's halves are futures-io streams, rmcp wants tokio's, and
//! `tokio_util::compat` converts them.

use std::io;
use std::sync::Arc;

use mcp_bridge::handshake::Handshake;
use mcp_bridge::host::{Connection, Listener, LogSink, Options};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{
    schemars, serde, serde_json, tool, tool_handler, tool_router, ServerHandler, ServiceExt,
};
use tokio_util::compat::{FuturesAsyncReadCompatExt, FuturesAsyncWriteCompatExt};

/// The app's MCP server for one bridge: its tools know who called.
#[derive(Clone)]
struct AppServer {
    who: Arc<Handshake>,
    tool_router: ToolRouter<AppServer>,
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
impl AppServer {
    fn new(who: Handshake) -> AppServer {
        AppServer {
            who: Arc::new(who),
            tool_router: AppServer::tool_router(),
        }
    }

    /// The identity the bridge sent, and which app process answers.
    #[tool(
        description = "Who is calling (project and requester, from the bridge's handshake), \
                          and which app process answers"
    )]
    fn whoami(&self) -> String {
        serde_json::json!({
            "project": self.who.project,
            "requester": self.who.requester,
            "resumed": self.who.resumed,
            "app_pid": std::process::id(),
        })
        .to_string()
    }

    /// Sends its argument back.
    #[tool(description = "Send the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AppServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

// glue: begin
/// Serves one accepted bridge with rmcp until it hangs up.
async fn serve_bridge(connection: Connection) -> io::Result<()> {
    let server = AppServer::new(connection.handshake);
    let transport = (connection.reader.compat(), connection.writer.compat_write());
    let running = server.serve(transport).await.map_err(io::Error::other)?;
    running.waiting().await.map_err(io::Error::other)?;
    Ok(())
}
// glue: end

#[tokio::main]
async fn main() {
    let socket = match std::env::args_os().nth(1) {
        Some(socket) => socket,
        None => {
            eprintln!("usage: tokio-app <socket path or pipe name>");
            std::process::exit(2);
        }
    };
    // The library's log lines (a refused peer, a stale socket replaced)
    // into the app's own log; here, stderr with the app's prefix.
    let mut options = Options::default();
    options.log = LogSink::to(|line: &str| eprintln!("tokio-app: [host] {line}"));
    let listener = match Listener::bind_with(&socket, options) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("tokio-app: {}", mcp_bridge::error_chain(&e));
            std::process::exit(1);
        }
    };
    println!("listening on {}", listener.endpoint().display());

    let accepting = async {
        loop {
            match listener.accept().await {
                Ok(connection) => {
                    tokio::spawn(async move {
                        if let Err(e) = serve_bridge(connection).await {
                            eprintln!("tokio-app: a session ended with an error: {e}");
                        }
                    });
                }
                Err(e) => {
                    eprintln!("tokio-app: stopped accepting: {e}");
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = accepting => std::process::exit(1),
        () = stop_signal() => {}
    }
    // Dropping the listener removes the socket file before the exit.
    drop(listener);
}

/// Completes on Ctrl-C, and on Unix on SIGTERM too.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
