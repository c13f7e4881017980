//! Driving "app-server" child processes, such as `codex app-server`, over
//! newline-delimited JSON-RPC on their stdin and stdout.
//!
//! An app-server is a long-lived child: it takes requests, streams notifications while
//! it works, and asks its parent questions of its own (approve this command?). Treating
//! it as a request/response pipe loses exactly the messages that matter, so the
//! [`AppServerClient`] reads stdout continuously in a background task and sorts every
//! line: a response goes to the request with its id, anything with a `method` goes to
//! the caller's incoming queue, even if its id happens to equal one of ours.
//!
//! A child is also a process that can crash, hang, or flood a pipe, and each of those
//! is handled on purpose:
//!
//! - its stderr is drained from the moment it is spawned (an undrained pipe blocks a
//!   talkative child) and its last 64 KiB travel with the errors that say it died or
//!   went silent, so a crash explains itself;
//! - when its stdout ends, every pending request fails at once instead of waiting out a
//!   timeout;
//! - no line may exceed a limit (64 MiB by default), so a child that never writes a
//!   newline cannot exhaust memory;
//! - [`shutdown_child`] closes stdin, then sends SIGTERM (to the child's process group
//!   if it leads one), then kills, and always reaps, so no zombie remains.
//!
//! The lower-level helpers ([`spawn_runtime_command`], [`write_json_line`],
//! [`wait_for_response_line`]) serve callers that exchange one message at a time.
//!
//! A child spawned in its own process group has its helpers stopped with it.
//! `std::os::unix::process::CommandExt::process_group` is stable from Rust 1.64 only,
//! one release after this crate's minimum, so this module never creates the group
//! itself: the caller decides, on a newer compiler or by spawning through `setsid`.
//!
//! # Example
//!
//! `examples/app_server.rs` runs this against a small app-server written in `sh`.
//!
//! ```no_run
//! use mcp_bridge::app_server::{AppServerClient, Incoming};
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! smol::block_on(async {
//!     let mut command = std::process::Command::new("codex");
//!     command.arg("app-server");
//!     let client = AppServerClient::builder()
//!         .omit_jsonrpc_version()
//!         .spawn(command, "codex")?;
//!
//!     let info = client
//!         .request("initialize", json!({"clientInfo": {"name": "demo", "version": "1"}}))
//!         .await?;
//!     println!("initialized: {}", info);
//!     client.notify("initialized", json!({})).await?;
//!
//!     let incoming = client.incoming();
//!     while let Ok(message) = incoming.recv().await {
//!         match message {
//!             Incoming::Request { id, .. } => {
//!                 client.respond(&id, json!({"decision": "denied"})).await?
//!             }
//!             Incoming::Notification { method, .. } => println!("{}", method),
//!         }
//!     }
//!     client.shutdown().await?;
//!     Ok(())
//! })
//! # }
//! ```

use std::time::Duration;

mod client;
mod error;
mod lines;
mod message;
mod process;
mod stderr;
mod transport;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

pub use client::{AppServerClient, ClientBuilder};
pub use error::AppServerError;
pub use lines::{LineReader, MAX_LINE_LENGTH};
pub use message::{extract_json_error_message, response_id_matches, Incoming, RequestId};
pub use process::{
    shutdown_child, shutdown_child_with_grace, spawn_runtime_command, RuntimeProcess,
    SHUTDOWN_GRACE,
};
pub use stderr::{StderrTail, STDERR_TAIL_BYTES};
pub use transport::{wait_for_response_line, write_json_line};

/// How long to wait for the answer to a start-up request such as `initialize`, and the
/// client's default for every request: 5 minutes.
///
/// A cold start may install tools, load models or migrate state before the first
/// answer, so the budget is minutes, not seconds: aborting a healthy but slow start is
/// worse than waiting for a dead one, which is noticed at once anyway when its stdout
/// closes.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long to wait for the answer to a request that runs a whole agent turn: 4 hours.
///
/// A turn may plan, run tools and compact its context for a long time while staying
/// healthy (its notifications show progress), so only a runaway turn should hit this.
pub const TURN_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);
