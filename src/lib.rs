//! mcp-bridge: a transparent tube between an MCP CLI's stdio and an MCP server
//! that lives inside a long-running desktop app, behind a local socket.
//!
//! An MCP CLI (Claude Code, Codex CLI, Cursor, VS Code, Gemini CLI) can only
//! *spawn* a stdio server. The app's server is already running and listens on a
//! Unix domain socket (or a named pipe on Windows). The CLI therefore spawns
//! `mcp-bridge mcp-server --endpoint <path>`, which connects, sends one identity
//! line ([`handshake`]), and then relays bytes both ways without looking at them
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
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_code)]

#[macro_use]
mod forward;

pub mod app_server;
pub mod bridge;
pub mod cli;
pub mod demo;
pub mod endpoint;
/// The FFI boundary: the only module allowed `unsafe`.
#[allow(unsafe_code, dead_code)]
mod ffi;
pub mod handshake;
pub mod host;
pub mod process;
#[cfg(unix)]
mod readiness;
pub mod relay;
pub mod serve;
pub mod stdio;
#[allow(dead_code)] // until every site uses it (architecture pass in progress)
mod wait;

/// The README's Rust examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
