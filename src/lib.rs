//! mcp-bridge: a transparent tube between an MCP CLI's stdio and an MCP server
//! that lives inside a long-running desktop app, behind a local socket.
//!
//! An MCP CLI (Claude Code, Codex CLI, Cursor, VS Code, Gemini CLI) can only
//! *spawn* a stdio server. The app's server is already running and listens on a
//! Unix domain socket (or a named pipe on Windows). The CLI therefore spawns
//! `mcp-bridge mcp-server --endpoint <path>` (or `--app <name>`, the same
//! line for every user and OS: [`endpoint::for_app`]), which connects, sends
//! one identity line ([`handshake`], learned from the CLI where not given:
//! [`identity`]), and then relays bytes both ways without looking at them
//! ([`relay`]).
//!
//! The same crate is also the app's toolkit for the rest of the job: the
//! app's side of the endpoint ([`host`]: an owner-only socket or pipe, peer
//! checks, handshake reading), `mcp-bridge serve` ([`serve`]: any stdio MCP
//! server behind an endpoint), and driving "app-server" child processes over
//! newline-delimited JSON-RPC ([`app_server`]).
//!
//! The relay is generic over `AsyncRead`/`AsyncWrite`, so the bridge's stdio
//! and socket can be replaced by anything, here a socket pair standing in for
//! the app:
//!
//! ```
//! # #[cfg(unix)] fn main() {
//! use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Cursor};
//! use mcp_bridge::relay::{relay, Ending};
//! use std::time::Duration;
//!
//! smol::block_on(async {
//!     let (bridge_side, app_side) = smol::net::unix::UnixStream::pair().unwrap();
//!     // The app answers the one request it gets.
//!     let app = smol::spawn(async move {
//!         let mut requests = BufReader::new(app_side.clone()).lines();
//!         let request = futures_lite::StreamExt::next(&mut requests).await.unwrap().unwrap();
//!         let mut app_out = app_side;
//!         app_out.write_all(b"{\"id\":1,\"result\":{}}\n").await.unwrap();
//!         request
//!     });
//!
//!     let client_in = Cursor::new(b"{\"id\":1,\"method\":\"ping\"}\n".to_vec());
//!     let mut client_out = Vec::new();
//!     let ending = relay(
//!         client_in,
//!         &mut client_out,
//!         bridge_side.clone(),
//!         bridge_side,
//!         Duration::from_secs(1),
//!     )
//!     .await
//!     .unwrap();
//!
//!     assert_eq!(app.await, "{\"id\":1,\"method\":\"ping\"}");
//!     assert_eq!(client_out, b"{\"id\":1,\"result\":{}}\n");
//!     assert_eq!(ending, Ending::ClientClosed { drained: true });
//! });
//! # }
//! # #[cfg(not(unix))] fn main() {}
//! ```
//!
//! # Using it from tokio
//!
//! Nothing here needs the app to run smol. What works in the background
//! (the [`host`] listener's accept loop, the [`app_server`] client's reader
//! and stderr drain) runs on threads of its own, smol's global executor and
//! `async-io`'s reactor, so a tokio app awaits the crate's futures as they
//! are. The host's streams implement the `futures-io` traits, which
//! `tokio_util::compat` turns into tokio's. `docs/host.md` ("From tokio")
//! shows it with rmcp, the official Rust MCP SDK, and `examples/tokio-app`
//! is a whole tokio app, in a crate of its own, that CI runs through the
//! bridge.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_code)]
// A build without some features (the bridge-only one) cannot resolve the
// documentation's links to what it left out; the default build checks them.
#![cfg_attr(
    not(all(
        feature = "serve",
        feature = "host",
        feature = "app-server",
        feature = "log"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

// First, so that its macros are in scope in every module after it.
#[macro_use]
mod io;

// Each feature's modules (Cargo.toml says what each feature is for); the
// bridge's own are always in.
#[cfg(feature = "app-server")]
pub mod app_server;
pub mod bridge;
mod clock;
// Who made a request, from its `_meta`: public through `host`, and read by
// the traffic log.
#[cfg(any(feature = "host", feature = "log"))]
mod caller;
#[cfg(any(feature = "doctor", feature = "log"))]
mod decimal;
pub mod diag;
// Who else can redirect a path: the log's directories, the socket's, the
// answers cache's.
#[cfg(unix)]
mod dir_trust;
#[cfg(feature = "doctor")]
pub mod doctor;
// The binary's flag hints, which doctor prints after its failed step as
// `mcp-server` does after the same message (src/cli/hint.rs says why).
pub mod endpoint;
mod envelope;
/// The FFI boundary: the only module allowed `unsafe`.
#[allow(unsafe_code, dead_code)]
mod ffi;
pub mod handshake;
#[cfg(feature = "doctor")]
#[path = "cli/hint.rs"]
mod hint;
#[cfg(feature = "host")]
#[cfg_attr(not(feature = "serve"), allow(dead_code))] // parts only serve uses
pub mod host;
pub mod identity;
#[cfg(any(feature = "serve", feature = "app-server"))]
pub mod process;
pub mod relay;
#[cfg(feature = "serve")]
pub mod serve;
pub mod stdio;
// Without the `log` feature, a module of the same shape whose log never
// opens, so the bridge's calls into it compile to nothing.
#[cfg_attr(not(feature = "log"), path = "traffic_log_off.rs")]
pub mod traffic_log;
mod wait;

/// `smol::spawn` for the toolkit's tasks, each boxed to one type: the
/// executor's task machinery (`async_task::RawTask`'s run, wake and drop,
/// a few hundred bytes each) is then in the binary once instead of once per
/// kind of task.
#[cfg(any(feature = "host", feature = "app-server"))]
pub(crate) fn spawn(
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> smol::Task<()> {
    let task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = Box::pin(task);
    smol::spawn(task)
}

/// One line for an error and every cause behind it, joined by `": "`: what
/// the binary prints on stderr.
///
/// Every error in this crate follows one rule: its Display text describes
/// its own layer and `source()` returns the cause (or, for a wrapper that
/// only adds a variant, the wrapped error's cause), so no sentence appears
/// twice in the chain.
///
/// ```
/// use std::io;
/// let e = io::Error::new(io::ErrorKind::Other, "disk on fire");
/// assert_eq!(mcp_bridge::error_chain(&e), "disk on fire");
/// ```
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

/// The README's and `docs/`'s code blocks, compiled as doctests so their
/// Rust examples cannot rot (and a block left untagged, which rustdoc takes
/// for Rust, is caught). A page whose examples use a feature's API is
/// compiled only with that feature. A block that needs a crate these
/// doctests lack (tokio) is marked `ignore`; `.ci/doc-blocks.sh` compiles
/// every block, those too, as written in a new crate with the dependency
/// lines its page shows.
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[cfg(feature = "app-server")]
    #[doc = include_str!("../docs/app-server.md")]
    struct AppServer;
    #[doc = include_str!("../docs/bridge.md")]
    struct Bridge;
    #[doc = include_str!("../docs/bundling.md")]
    struct Bundling;
    #[doc = include_str!("../docs/configure.md")]
    struct Configure;
    #[doc = include_str!("../docs/doctor.md")]
    struct Doctor;
    #[doc = include_str!("../docs/handshake.md")]
    struct Handshake;
    #[cfg(feature = "host")]
    #[doc = include_str!("../docs/host.md")]
    struct Host;
    #[doc = include_str!("../docs/layout.md")]
    struct Layout;
    #[doc = include_str!("../docs/security.md")]
    struct Security;
    #[doc = include_str!("../docs/serve.md")]
    struct Serve;
    #[doc = include_str!("../docs/traffic-log.md")]
    struct TrafficLog;
    #[doc = include_str!("../docs/windows.md")]
    struct Windows;
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::io;
    use std::path::PathBuf;
    use std::time::Duration;

    use crate::bridge::BridgeError;
    use crate::endpoint::ConnectError;
    #[cfg(feature = "host")]
    use crate::host::BindError;
    use crate::relay::{RelayError, Stage};
    #[cfg(feature = "serve")]
    use crate::serve::ServeError;

    fn os(kind: io::ErrorKind) -> io::Error {
        io::Error::new(kind, format!("the OS says {:?}", kind))
    }

    fn connect(kind: io::ErrorKind) -> ConnectError {
        ConnectError {
            endpoint: PathBuf::from("/run/app.sock"),
            timeout: Duration::from_secs(5),
            source: os(kind),
            fault: crate::endpoint::Fault::Io,
        }
    }

    /// Every public error of the crate (app_server's have their own test):
    /// the chain printed the way the binary prints it never says one thing
    /// twice, which is what happens when a wrapper both prints its cause and
    /// returns it from `source()`.
    #[test]
    fn error_chains_never_repeat_a_sentence() {
        use io::ErrorKind::*;
        let mut errors: Vec<Box<dyn Error>> = Vec::new();
        for kind in [
            NotFound,
            ConnectionRefused,
            PermissionDenied,
            InvalidInput,
            TimedOut,
            Other,
        ] {
            errors.push(Box::new(connect(kind)));
            errors.push(Box::new(BridgeError::Connect(connect(kind))));
            let mut untrusted = connect(kind);
            untrusted.fault = crate::endpoint::Fault::Untrusted {
                server: "uid 65534".into(),
                me: "uid 0".into(),
            };
            errors.push(Box::new(untrusted));
            let mut unidentified = connect(kind);
            unidentified.fault = crate::endpoint::Fault::Unidentified;
            errors.push(Box::new(unidentified));
            #[cfg(feature = "host")]
            let bind = || BindError {
                endpoint: PathBuf::from("/run/app.sock"),
                source: os(kind),
            };
            #[cfg(feature = "host")]
            errors.push(Box::new(bind()));
            #[cfg(feature = "serve")]
            errors.push(Box::new(ServeError::Bind(bind())));
        }
        for stage in [
            Stage::ReadClient,
            Stage::WriteServer,
            Stage::ReadServer,
            Stage::WriteClient,
        ] {
            let relay = || RelayError {
                stage,
                source: os(Other),
            };
            errors.push(Box::new(relay()));
            errors.push(Box::new(BridgeError::Relay(relay())));
        }
        errors.push(Box::new(BridgeError::Stdio(os(Other))));
        errors.push(Box::new(BridgeError::Handshake {
            endpoint: PathBuf::from("/run/app.sock"),
            source: os(BrokenPipe),
        }));
        #[cfg(feature = "serve")]
        errors.push(Box::new(ServeError::Signals(os(Other))));
        #[cfg(feature = "serve")]
        errors.push(Box::new(ServeError::Accept(os(Other))));
        #[cfg(feature = "host")]
        errors.push(Box::new(
            crate::handshake::Handshake::parse(b"[]").unwrap_err(),
        ));
        for name in ["", "a/b", "..", "x\u{1b}", &"x".repeat(40)] {
            errors.push(Box::new(crate::endpoint::for_app(name).unwrap_err()));
            #[cfg(feature = "host")]
            errors.push(Box::new(crate::host::Listener::bind_app(name).unwrap_err()));
        }

        for error in &errors {
            let line = crate::error_chain(&**error);
            let mut said: Vec<String> = Vec::new();
            let mut layer: Option<&(dyn Error + 'static)> = Some(&**error);
            while let Some(e) = layer {
                let text = e.to_string();
                for earlier in &said {
                    assert!(
                        !earlier.contains(&text) && !text.contains(earlier.as_str()),
                        "'{}' is said twice in: {}",
                        text,
                        line
                    );
                }
                said.push(text);
                layer = e.source();
            }
        }
    }
}
