//! `mcp-bridge serve`: any stdio MCP server, behind an endpoint, one child
//! per connection.
//!
//! Each bridge that connects gets its own run of the command, with the
//! handshake in `MCP_BRIDGE_PROJECT` and `MCP_BRIDGE_REQUESTER`, and its
//! connection relayed to the child's stdin and from its stdout by the same
//! [`relay`] the bridge itself uses. The listening side is
//! [`host::Listener`], so only this user gets in.
//!
//! Lifetimes are tied both ways: when the bridge goes, the child is stopped
//! with [`app_server::shutdown_child`] (stdin closed, a grace, SIGTERM,
//! SIGKILL, always reaped); when the child exits, the connection is closed.
//! SIGINT or SIGTERM stop the whole server the same way, and exit cleanly.
//! On Windows there is no SIGTERM step (a child still past the grace is
//! terminated), and Ctrl+C or Ctrl+Break stop the server; ended any other
//! way (its console closed, `TerminateProcess`), it cleans nothing up, but
//! each child sees its stdin close, which is its cue to exit.
//!
//! [`host::Listener`]: crate::host::Listener
//! [`app_server::shutdown_child`]: crate::app_server::shutdown_child
//!
//! The child's stderr is read line by line and copied to ours behind a
//! `[<requester>]` prefix: it must be drained anyway (a full pipe would stall
//! the child), and an operator watching several agents needs to know whose
//! server said what.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use smol::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::app_server::shutdown_child;
use crate::bridge::DRAIN_GRACE;
use crate::handshake::Handshake;
use crate::host::{BindError, Connection, Listener};
use crate::relay::{self, Ending};
use crate::wait;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

/// How many connections are served at once unless told otherwise. Each one
/// is a child process; this is plenty for the agents of one user, and stops
/// a runaway client from forking without bound.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// What `serve` listens on and runs. Built by the binary from `serve`'s
/// options, or by an embedder directly:
///
/// ```
/// let config = mcp_bridge::serve::Config::new("/tmp/app.sock", "my-mcp-server", ["--stdio"]);
/// assert_eq!(config.max_connections, mcp_bridge::serve::DEFAULT_MAX_CONNECTIONS);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Socket path (Unix) or pipe name (Windows) to listen on.
    pub endpoint: PathBuf,
    /// Connections served at once; more are refused. Default:
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// The program run for each connection.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl Config {
    /// Serve `program args...` on `endpoint`, every other setting at its
    /// documented default.
    pub fn new<A: Into<OsString>>(
        endpoint: impl Into<PathBuf>,
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = A>,
    ) -> Config {
        Config {
            endpoint: endpoint.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }
}

/// Longest stderr line copied in one piece; a longer one is split. Keeps a
/// child that never writes a newline from growing our memory.
const STDERR_LINE_LIMIT: usize = 64 * 1024;

/// After the child exits, how long its stdout may still be relayed before
/// the connection is closed: its last replies are usually already in the
/// pipe; only a grandchild holding the pipe open needs this bound.
const AFTER_EXIT_GRACE: Duration = Duration::from_secs(1);

/// After the child is stopped, how long its stderr may still be copied
/// (a grandchild may hold the pipe open).
const STDERR_SETTLE: Duration = Duration::from_secs(1);

/// Why `serve` stopped with a failure (exit code 1).
#[derive(Debug)]
pub enum ServeError {
    /// SIGINT and SIGTERM (Ctrl+C on Windows) could not be caught.
    Signals(io::Error),
    /// The endpoint could not be bound.
    Bind(BindError),
    /// Accepting connections failed for good.
    Accept(io::Error),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Signals(_) => f.write_str(
                "cannot catch the stop signals (SIGINT, SIGTERM, SIGHUP; Ctrl+C on Windows)",
            ),
            // Transparent: the bind error says it all.
            ServeError::Bind(e) => e.fmt(f),
            ServeError::Accept(_) => f.write_str("accepting connections failed"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Signals(e) | ServeError::Accept(e) => Some(e),
            ServeError::Bind(e) => e.source(),
        }
    }
}

/// Serves until SIGINT or SIGTERM, then stops every child and removes the
/// endpoint. Blocks the calling thread; this is what `main` calls.
pub fn run(config: &Config) -> Result<(), ServeError> {
    // Caught before binding: a signal at any later moment still ends in the
    // clean shutdown that removes the socket file.
    let mut signals = platform::StopSignals::new().map_err(ServeError::Signals)?;
    smol::block_on(serve(config, async move {
        let name = signals.next().await;
        log(format_args!("{} received: shutting down", name));
    }))
}

/// Serves connections on `config.endpoint` until `stop` completes, then stops
/// accepting, removes the endpoint, and stops every child before returning.
/// [`run`] calls it with SIGINT/SIGTERM as `stop`; embedders and tests can
/// pass any future.
pub async fn serve(
    config: &Config,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listener = Listener::bind(&config.endpoint).map_err(ServeError::Bind)?;
    log(format_args!(
        "serving {} on '{}' (at most {} connections)",
        command_line(config),
        config.endpoint.display(),
        config.max_connections
    ));
    let config = Arc::new(config.clone());
    // Dropping `stop_children` tells every connection to stop; `finished`
    // fires once every connection task has dropped its `Slot`.
    let (stop_children, stop_child) = wait::stop_signal();
    let (running, finished) = wait::stop_signal();
    let active = Arc::new(AtomicUsize::new(0));
    let mut next_id: u64 = 0;

    futures_lite::pin!(stop);
    let result = loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            (&mut stop).await;
            None
        })
        .await;
        let connection = match accepted {
            None => break Ok(()),
            Some(Err(e)) => break Err(ServeError::Accept(e)),
            Some(Ok(connection)) => connection,
        };
        next_id += 1;
        let label = Label::new(next_id, &connection.handshake);
        let open = active.load(Ordering::SeqCst);
        if open >= config.max_connections {
            log(format_args!(
                "{}: refused, {} connections already open (the limit is {})",
                label, open, config.max_connections
            ));
            continue;
        }
        let slot = Slot::take(&active, &running);
        let config = config.clone();
        let stop = stop_child.clone();
        smol::spawn(async move {
            let _slot = slot;
            serve_connection(connection, label, &config, stop).await;
        })
        .detach();
    };

    // Stop accepting and remove the socket first, so no new bridge is
    // accepted into a server that is going away.
    drop(listener);
    let open = active.load(Ordering::SeqCst);
    if open > 0 {
        log(format_args!("stopping {} running command(s)", open));
    }
    drop(stop_children);
    drop(running);
    finished.wait().await;
    result
}

/// Held by each connection task: counts it as open, and keeps `finished`
/// from firing until dropped (however the task ends).
struct Slot {
    active: Arc<AtomicUsize>,
    _running: wait::StopOnDrop,
}

impl Slot {
    fn take(active: &Arc<AtomicUsize>, running: &wait::StopOnDrop) -> Slot {
        active.fetch_add(1, Ordering::SeqCst);
        Slot {
            active: active.clone(),
            _running: running.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a connection's relay ended.
enum Outcome {
    Relayed(Result<Ending, relay::RelayError>),
    ChildExited,
    Stopped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Relayed(Ok(Ending::ClientClosed { .. })) => {
                f.write_str("the bridge disconnected")
            }
            Outcome::Relayed(Ok(Ending::ClientGone)) => f.write_str("the bridge went away"),
            Outcome::Relayed(Ok(Ending::ServerClosed)) => {
                f.write_str("the command closed its stdout")
            }
            Outcome::Relayed(Err(e)) => write!(f, "{}", crate::error_chain(e)),
            Outcome::ChildExited => f.write_str("the command exited"),
            Outcome::Stopped => f.write_str("serve is shutting down"),
        }
    }
}

/// One connection's whole life: start its child, relay until either side
/// ends or serve stops, then stop the child and report.
async fn serve_connection(
    connection: Connection,
    label: Label,
    config: &Config,
    stop: wait::Stopped,
) {
    let (mut child, stdin, stdout, stderr) = match start_child(&connection.handshake, config) {
        Ok(started) => started,
        Err(e) => {
            log(format_args!(
                "{}: cannot start {}: {}",
                label,
                command_line(config),
                e
            ));
            return;
        }
    };
    log(format_args!("{}: started pid {}", label, child.id()));
    let copying = smol::spawn(copy_stderr(stderr, label.prefix()));
    let outcome = relay_until_end(connection, &mut child, stdin, stdout, stop).await;
    let status = shutdown_child(&mut child).await;
    // A grandchild may hold the stderr pipe open: copy what is left, boundedly.
    wait::timeout(STDERR_SETTLE, copying).await;
    match status {
        Ok(status) => log(format_args!(
            "{}: ended ({}); command {}",
            label, outcome, status
        )),
        Err(e) => log(format_args!(
            "{}: ended ({}); stopping the command failed: {}",
            label, outcome, e
        )),
    }
}

/// Runs the command for one connection, its identity in the environment
/// and every stdio piped.
fn start_child(
    handshake: &Handshake,
    config: &Config,
) -> io::Result<(Child, ChildStdin, ChildStdout, ChildStderr)> {
    let mut child = Command::new(&config.program)
        .args(&config.args)
        .env("MCP_BRIDGE_PROJECT", &handshake.project)
        .env("MCP_BRIDGE_REQUESTER", &handshake.requester)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(stdin), Some(stdout), Some(stderr)) => Ok((child, stdin, stdout, stderr)),
        // Cannot happen with every stdio piped; kill_on_drop cleans up.
        _ => Err(io::Error::new(
            io::ErrorKind::Other,
            "the command's stdio is not piped",
        )),
    }
}

/// Relays the connection to the child and back until the bridge or the
/// child ends it, or serve stops. The relay owns both ends; when this
/// returns they are dropped, which closes the connection and the child's
/// stdin.
async fn relay_until_end(
    connection: Connection,
    child: &mut Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stop: wait::Stopped,
) -> Outcome {
    let relayed = async {
        Outcome::Relayed(
            relay::relay(
                connection.reader,
                connection.writer,
                stdout,
                stdin,
                DRAIN_GRACE,
            )
            .await,
        )
    };
    let exited = async {
        let _ = child.status().await;
        // Its last replies are usually already in the pipe; only a
        // grandchild holding the pipe open needs this bound.
        Timer::after(AFTER_EXIT_GRACE).await;
        Outcome::ChildExited
    };
    let stopped = async {
        stop.wait().await;
        Outcome::Stopped
    };
    future::or(relayed, future::or(exited, stopped)).await
}

/// Copies the child's stderr to ours, one whole line at a time behind
/// `prefix`, so lines of concurrent children never interleave mid-line.
async fn copy_stderr(stderr: ChildStderr, prefix: String) {
    copy_lines(stderr, &prefix, |line| {
        // Our stderr is gone: nothing left to tell, but keep draining.
        let _ = io::stderr().lock().write_all(line);
    })
    .await;
}

/// Reads `input` to its end and hands each line to `emit` behind `prefix`,
/// with a final `\n` added where missing and a line longer than
/// [`STDERR_LINE_LIMIT`] split.
async fn copy_lines<R: AsyncRead + Unpin>(input: R, prefix: &str, mut emit: impl FnMut(&[u8])) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        line.extend_from_slice(prefix.as_bytes());
        let limit = STDERR_LINE_LIMIT as u64;
        match (&mut input).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        emit(&line);
    }
}

/// How a connection is named in log lines: its number and, from the
/// handshake, who is calling, escaped so a hostile id cannot forge lines.
struct Label {
    id: u64,
    requester: String,
    project: String,
}

impl Label {
    fn new(id: u64, handshake: &Handshake) -> Label {
        Label {
            id,
            requester: handshake.requester.escape_debug().to_string(),
            project: handshake.project.escape_debug().to_string(),
        }
    }

    /// The prefix of the child's stderr lines.
    fn prefix(&self) -> String {
        format!("[{}] ", self.requester)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connection {} (requester \"{}\", project \"{}\")",
            self.id, self.requester, self.project
        )
    }
}

fn command_line(config: &Config) -> String {
    let mut line = format!("'{}'", config.program.to_string_lossy());
    for arg in &config.args {
        line.push_str(" '");
        line.push_str(&arg.to_string_lossy());
        line.push('\'');
    }
    line
}

fn log(message: fmt::Arguments<'_>) {
    eprintln!("mcp-bridge: {}", message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_quotes_each_word() {
        let config = Config::new("/x", "sh", ["-c", "exec cat"]);
        assert_eq!(command_line(&config), "'sh' '-c' 'exec cat'");
    }

    #[test]
    fn stderr_lines_are_prefixed_and_split() {
        smol::block_on(async {
            let mut input = b"first\r\n\nsecond\n".to_vec();
            input.extend(vec![b'x'; STDERR_LINE_LIMIT + 10]);
            let mut lines = Vec::new();
            copy_lines(futures_lite::io::Cursor::new(input), "[a] ", |line| {
                lines.push(String::from_utf8_lossy(line).into_owned())
            })
            .await;
            assert_eq!(lines.len(), 5, "{:?}", &lines[..3]);
            assert_eq!(lines[0], "[a] first\r\n");
            assert_eq!(lines[1], "[a] \n");
            assert_eq!(lines[2], "[a] second\n");
            assert_eq!(
                lines[3].len(),
                4 + STDERR_LINE_LIMIT + 1,
                "split at the limit"
            );
            assert_eq!(lines[4], format!("[a] {}\n", "x".repeat(10)));
        });
    }

    #[test]
    fn labels_escape_hostile_ids() {
        let label = Label::new(3, &Handshake::new("p", "a\nmcp-bridge: forged"));
        assert_eq!(
            label.to_string(),
            "connection 3 (requester \"a\\nmcp-bridge: forged\", project \"p\")"
        );
        assert!(!label.prefix().contains('\n'));
    }
}
