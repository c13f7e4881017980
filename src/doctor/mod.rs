//! `mcp-bridge doctor`: run what an MCP CLI would against the live app,
//! and say what happened at each step, how long it took, and what to paste
//! into each CLI's configuration.
//!
//! For the person installing an app that bundles the bridge (or the
//! installer itself, with `--json`): "is the endpoint healthy, and would a
//! CLI's start-up budget be met?" cannot be answered by starting a CLI,
//! whose MCP start-up failures are terse and hidden. The steps, in order:
//!
//! 1. **endpoint**: it exists, is a socket (a named pipe name on Windows),
//!    its owner and mode, whether group or others may connect, whether
//!    its directory is writable by others, and the path's length against
//!    the platform's limit ([`crate::endpoint`]).
//! 2. **connect**, and **server user**: who serves it, and whether the
//!    bridge would accept that user ([`crate::endpoint::verify_server`]).
//! 3. **handshake**: the identity line the bridge would send.
//! 4. **initialize** (protocol version, server name and version,
//!    capabilities), **initialized** (the notification), then
//!    **tools/list**, **prompts/list** and **resources/list** for what the
//!    server declares, following `nextCursor` pages.
//! 5. **close**: half-close, then drain, as the bridge does when its CLI
//!    closes stdin, so no half-open connection is left on the app.
//! 6. **start-up budget**: the time from connecting to the tool list
//!    against Codex's default 10 s and Claude Code's 30 s, with a warning
//!    past half of either.
//!
//! Each step has its own time bound ([`Config::timeout`]), so a hung app
//! costs the timeout, not forever. The first step that fails ends the
//! check; its text is the one the bridge would print (the same error
//! types build it), so the fix the README gives for the bridge's message
//! applies. Steps pass with warnings for what works now but is fragile or
//! unsafe.

mod paste;
mod report;
mod session;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

use std::path::PathBuf;
use std::time::Duration;

pub use paste::Snippets;
pub use report::{Budget, DoctorError, Report, ServerInfo, Status, Step};

use crate::endpoint::ServerUser;
use crate::handshake::Handshake;

/// How long each step may take unless told otherwise: Codex's default
/// start-up budget, after which a CLI would have given up anyway.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Codex CLI's default `startup_timeout_sec`, for `initialize` and
/// `tools/list` together.
pub const CODEX_BUDGET: Duration = Duration::from_secs(10);

/// Claude Code's default MCP server start-up timeout (`MCP_TIMEOUT`).
pub const CLAUDE_CODE_BUDGET: Duration = Duration::from_secs(30);

/// What to check, and as whom. Built by the binary from `doctor`'s options,
/// or by an installer directly:
///
/// ```no_run
/// let mut config = mcp_bridge::doctor::Config::new("/run/user/1000/app/mcp.sock");
/// config.handshake.requester = "installer".into();
/// let report = mcp_bridge::doctor::run(&config);
/// println!("{}", report.to_json());
/// assert!(report.passed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The app's endpoint, as given to `mcp-server --endpoint`.
    pub endpoint: PathBuf,
    /// The identity line to send, as `mcp-server` would. Empty fields by
    /// default.
    pub handshake: Handshake,
    /// Bound on each step (the connect, each reply). Default:
    /// [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// A user besides our own (and root) trusted to serve the endpoint, as
    /// `mcp-server --trust-server-user`. Default: none.
    pub trusted_server: Option<ServerUser>,
}

impl Config {
    /// A check of `endpoint` with every other setting at its default.
    pub fn new(endpoint: impl Into<PathBuf>) -> Config {
        Config {
            endpoint: endpoint.into(),
            handshake: Handshake::default(),
            timeout: DEFAULT_TIMEOUT,
            trusted_server: None,
        }
    }
}

/// Runs every check on this thread and returns the report. Never fails: a
/// failed step is part of the report ([`Report::failure`]).
pub fn run(config: &Config) -> Report {
    smol::block_on(check(config))
}

/// The checks, for a caller that already runs an executor.
pub async fn check(config: &Config) -> Report {
    session::check(config).await
}
