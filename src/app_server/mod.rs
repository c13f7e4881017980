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
//! A child is also a process that can crash, hang, flood a pipe or ignore its input,
//! and each of those is handled on purpose:
//!
//! - its stderr is drained from the moment it is spawned (an undrained pipe blocks a
//!   talkative child) and its last 64 KiB travel with the errors that say it died or
//!   went silent, so a crash explains itself;
//! - when it exits, every pending request fails at once instead of waiting out a
//!   timeout, even if a grandchild keeps its stdout open;
//! - memory is bounded ([`AppServerClient`] says how): a line may not exceed a limit
//!   (64 MiB by default), a line is routed from its top-level members without decoding what
//!   nobody receives, a message whose decoded form would exceed a memory limit (128 MiB
//!   by default) is refused before it is decoded, and the messages waiting to be
//!   received hold at most that much together; exceeding a limit ends the connection
//!   with an error naming it, so the routing of responses never waits for the caller;
//! - every write the caller makes is bounded by the request timeout, so a child that
//!   stops reading cannot block a notification or an answer for ever, and no loop of
//!   the client can run without returning to the executor (a child that floods a pipe,
//!   or a write retried against a timeout that has passed), so one child can never
//!   stall the other tasks of the app;
//! - a response that cannot be decoded (a lone surrogate, `1e400`, nesting too deep)
//!   fails the request it answers at once, with the reason;
//! - a request from the child whose id is invalid gets JSON-RPC's "Invalid Request"
//!   error rather than silence;
//! - it runs in a process group of its own ([`crate::process`]), and shutting it down
//!   closes stdin, then sends SIGTERM to the group, then SIGKILL, and always reaps, so
//!   neither it nor a helper it started is left behind; dropping the client stops
//!   every task it started and closes every pipe, even one a helper that left the
//!   group keeps open.
//!
//! # Zero and maximal settings
//!
//! A timeout of `Duration::ZERO` means no timeout, as does `Duration::MAX`; a size
//! limit of `usize::MAX` means no limit, and `0` refuses everything. Each setting's
//! documentation says what its extremes do.
//!
//! For callers that drive the stdio by hand, one exchange at a time: [`spawn_app_server`]
//! (the spawning the client does), the lockstep helpers [`write_json_line`] and
//! [`wait_for_response_line`], and [`shutdown_child`] for a child spawned elsewhere.
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
mod inbox;
mod lines;
mod lockstep;
mod members;
mod message;
mod spawn;
mod stderr;

pub use client::{AppServerClient, ClientBuilder};
pub use error::{AppServerError, IoStep};
pub use inbox::{Inbox, MAX_INCOMING_MEMORY};
pub use lines::{LineReader, MAX_LINE_LENGTH};
pub use lockstep::{wait_for_response_line, write_json_line};
pub use message::{extract_json_error_message, response_id_matches, Incoming, RequestId};
pub use spawn::{shutdown_child, spawn_app_server, AppServerProcess};
pub use stderr::{StderrTail, STDERR_TAIL_BYTES};

/// How long to wait for the answer to a start-up request such as `initialize`, and the
/// client's default for every request: 5 minutes.
///
/// A cold start may install tools, load models or migrate state before the first
/// answer, so the budget is minutes, not seconds: aborting a healthy but slow start is
/// worse than waiting for a dead one, which is noticed at once anyway when it exits.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long to wait for the answer to a request that runs a whole agent turn: 4 hours.
///
/// A turn may plan, run tools and compact its context for a long time while staying
/// healthy (its notifications show progress), so only a runaway turn should hit this.
pub const TURN_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);
