//! `mcp-bridge doctor`: run what an MCP CLI would against the live app,
//! and say what happened at each step, how long it took, and what to paste
//! into each CLI's configuration.
//!
//! For the person installing an app that bundles the bridge (or the
//! installer itself, with `--json`): "is the endpoint healthy, and would a
//! CLI's start-up budget be met?" cannot be answered by starting a CLI,
//! whose MCP start-up failures are terse and hidden. The steps, in order
//! (after a **traffic log** step when there is a log to append to):
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
//!    server declares, following `nextCursor` pages. A tool list too
//!    large for a model's context is a problem, not a pass, and a message
//!    whose `jsonrpc` is not `"2.0"` is flagged.
//! 5. **close**: half-close, then drain, as the bridge does when its CLI
//!    closes stdin, so no half-open connection is left on the app.
//! 6. **start-up budget**: the time from connecting to the tool list
//!    against Codex's default 10 s and Claude Code's 30 s, with a warning
//!    past half of either.
//!
//! Each step has its own time bound ([`Config::timeout`]) for the whole of
//! it (every write, every reply, every page of a list), so a hung app, one
//! that stops reading, or one whose list never ends costs the timeout, not
//! forever. What the app sends is bounded too: lines, the names kept from a
//! list, the lines quoted in warnings (counted beyond a few), so a flood
//! costs neither memory nor a report nobody can read; and everything the
//! text report prints from the app has its control characters escaped, so
//! an app cannot clear the screen or overwrite a FAIL line.
//!
//! It takes `mcp-server`'s whole command line: a user can replace
//! `mcp-server` by `doctor` in the line they configured. The options that
//! apply mean what they mean to the bridge (`--connect-timeout`,
//! `--trust-server-user`, `--log`); the report names those it ignores, and
//! why ([`Report::ignored`]: `--reconnect-timeout`, `--no-reconnect`,
//! `--cache-dir`, `--no-cache`). The configuration it prints to paste keeps
//! every option given, the ignored ones too: pasting it must run the
//! bridge the user asked for. The first step that fails ends the
//! check; its text is the one the bridge would print (the same error
//! types build it), so the fix the README gives for the bridge's message
//! applies. Steps pass with warnings for what works now but is fragile or
//! unsafe.

mod client;
mod paste;
mod raw;
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
pub use report::{Budget, DoctorError, Ignored, Listing, Report, ServerInfo, Status, Step};

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
/// println!("{}", report.to_json_text());
/// assert!(report.passed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The app's endpoint, as given to `mcp-server --endpoint`.
    pub endpoint: PathBuf,
    /// The app's name, when `endpoint` is the one named after it
    /// (`mcp-server --app`, [`for_app`](crate::endpoint::for_app)): the
    /// configurations printed then say `--app` instead of the path, the
    /// same for every user and OS. Default: none.
    pub app: Option<String>,
    /// The identity line to send, as `mcp-server` would. Empty fields by
    /// default.
    pub handshake: Handshake,
    /// Bound on each whole step: the connect (unless
    /// [`connect_timeout`](Self::connect_timeout) is given), and every
    /// write, reply and page of each step after it. Default:
    /// [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// A user besides our own (and root) trusted to serve the endpoint, as
    /// `mcp-server --trust-server-user`: the server user check accepts it.
    /// Default: none.
    pub trusted_server: Option<ServerUser>,
    /// As `mcp-server --connect-timeout`: the connect step waits up to this
    /// long for the app to be there, as the bridge does (one try when
    /// [`reconnect`](Self::reconnect) is off). Default: `None`, one try
    /// bounded by [`timeout`](Self::timeout): the app as it is now.
    pub connect_timeout: Option<Duration>,
    /// `false` for `mcp-server --no-reconnect`: the connect step tries once
    /// even with a [`connect_timeout`](Self::connect_timeout). Its other
    /// meanings (no reconnecting, no error responses) concern a session
    /// that outlives the app, which doctor's one session is not; the
    /// report says so. Default: `true`.
    pub reconnect: bool,
    /// As `mcp-server --reconnect-timeout`: doctor never waits for an app
    /// to come back, so this is only named in the report as ignored.
    /// Default: `None`.
    pub reconnect_timeout: Option<Duration>,
    /// As `mcp-server --log` (or `MCP_BRIDGE_LOG`): the traffic log the
    /// session is appended to, as the bridge's would be, so the log's own
    /// set-up is checked too. Default: none.
    pub log: Option<PathBuf>,
    /// As `mcp-server --cache-dir`: doctor asks the app itself and reads no
    /// answers cache, so this is named in the report as ignored, and kept
    /// in the configuration it prints. Default: none.
    pub cache_dir: Option<PathBuf>,
    /// `true` for `mcp-server --no-cache`: as
    /// [`cache_dir`](Self::cache_dir), ignored by the check and kept in
    /// the configuration. Default: `false`.
    pub no_cache: bool,
}

impl Config {
    /// A check of `endpoint` with every other setting at its default.
    pub fn new(endpoint: impl Into<PathBuf>) -> Config {
        Config {
            endpoint: endpoint.into(),
            app: None,
            handshake: Handshake::default(),
            timeout: DEFAULT_TIMEOUT,
            trusted_server: None,
            connect_timeout: None,
            reconnect: true,
            reconnect_timeout: None,
            log: None,
            cache_dir: None,
            no_cache: false,
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
