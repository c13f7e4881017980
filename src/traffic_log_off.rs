//! The traffic log's stand-in for a build without the `log` feature (the
//! bridge-only build an app bundles).
//!
//! It has the real module's shape, so the bridge calls it unchanged, but a
//! log never opens: [`TrafficLog`] and [`LineTap`] have no values, so every
//! call the bridge makes on one is dead code the compiler removes, and the
//! real module's writer thread, record format and JSON go with it. A bridge
//! asked for a log anyway (`--log`, `MCP_BRIDGE_LOG`) says once on stderr
//! that this build has none and relays as ever: a log is never a reason not
//! to relay.

use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::diag;

/// Size at which the real log rotates its file, kept so the usage text and
/// callers compile the same in both builds.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the MCP CLI to the app.
    CliToApp,
    /// From the app to the MCP CLI.
    AppToCli,
}

/// How the real log bounds itself; nothing to bound here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LogOptions {}

impl LogOptions {
    /// The defaults (the real module reads `MCP_BRIDGE_LOG_MAX_BYTES`).
    pub fn from_env() -> LogOptions {
        LogOptions {}
    }
}

/// Why [`TrafficLog::open`] failed: always, in this build.
#[derive(Debug)]
pub struct LogError {
    path: PathBuf,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot open the traffic log '{}': this mcp-bridge was built without \
             the traffic log (the 'log' feature)",
            self.path.display()
        )
    }
}

impl Error for LogError {}

/// A traffic log that cannot exist: no value of this type is ever made.
#[derive(Debug, Clone)]
pub enum TrafficLog {}

impl TrafficLog {
    /// Fails: this build has no traffic log.
    pub fn open(path: &Path, _options: LogOptions) -> Result<TrafficLog, LogError> {
        Err(LogError {
            path: path.to_path_buf(),
        })
    }

    /// One warning on stderr, and `None`.
    pub fn open_or_warn(path: &Path, options: LogOptions) -> Option<TrafficLog> {
        match TrafficLog::open(path, options) {
            Ok(log) => Some(log),
            Err(e) => {
                diag::log(format_args!("{}; going on without one", e));
                None
            }
        }
    }

    /// See the real module.
    pub fn for_connection(&self, _conn: u64) -> TrafficLog {
        match *self {}
    }

    /// See the real module.
    pub fn tap(&self, _direction: Direction) -> LineTap {
        match *self {}
    }

    /// See the real module.
    pub fn event(&self, _text: fmt::Arguments<'_>) {
        match *self {}
    }

    /// See the real module.
    pub fn flush(&self, _limit: Duration) -> bool {
        match *self {}
    }

    /// See the real module.
    pub fn start(&self) {
        match *self {}
    }

    /// See the real module.
    pub fn connect_attempt(&self, _attempt: u32, _endpoint: &Path) {
        match *self {}
    }

    /// See the real module.
    pub fn connect_outcome(
        &self,
        _attempt: u32,
        _elapsed: Duration,
        _outcome: Result<(), &(dyn Error + 'static)>,
    ) {
        match *self {}
    }

    /// See the real module.
    pub fn handshake_sent(&self, _line: &[u8]) {
        match *self {}
    }

    /// See the real module.
    pub fn stdin_eof(&self) {
        match *self {}
    }

    /// See the real module.
    pub fn app_hung_up(&self) {
        match *self {}
    }

    /// See the real module.
    pub fn reconnect(&self, _attempt: u32, _delay: Duration, _why: &dyn fmt::Display) {
        match *self {}
    }

    /// See the real module.
    pub fn replayed(&self, _method: &str, _len: usize) {
        match *self {}
    }

    /// See the real module.
    pub fn error_response_sent(&self, _raw_id: &[u8], _code: i64, _message: &str) {
        match *self {}
    }

    /// See the real module.
    pub fn exit(&self, _code: i32, _reason: &dyn fmt::Display) {
        match *self {}
    }
}

/// A tap on a stream that cannot exist, like its log.
#[derive(Debug)]
pub enum LineTap {}

impl LineTap {
    /// See the real module.
    pub fn feed(&mut self, _chunk: &[u8]) {
        match *self {}
    }

    /// See the real module.
    pub fn finish(&mut self) {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_never_opens_and_says_why() {
        let e = TrafficLog::open(Path::new("/tmp/x.log"), LogOptions::from_env()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("'/tmp/x.log'"), "{}", text);
        assert!(text.contains("without the traffic log"), "{}", text);
        assert!(TrafficLog::open_or_warn(Path::new("/tmp/x.log"), LogOptions::default()).is_none());
    }
}
