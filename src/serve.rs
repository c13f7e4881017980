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

use std::fmt;
use std::io::{self, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use smol::channel::{self, Receiver, Sender};
use smol::process::{ChildStderr, Command};

use crate::app_server::shutdown_child;
use crate::bridge::DRAIN_GRACE;
use crate::cli::ServeArgs;
use crate::handshake::Handshake;
use crate::host::{BindError, Connection, Listener, StopSignals};
use crate::relay::{self, Ending};

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
            ServeError::Signals(e) => write!(
                f,
                "cannot catch the stop signals (SIGINT and SIGTERM; Ctrl+C on Windows): {}",
                e
            ),
            ServeError::Bind(e) => e.fmt(f),
            ServeError::Accept(e) => write!(f, "accepting connections failed: {}", e),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Signals(e) | ServeError::Accept(e) => Some(e),
            ServeError::Bind(e) => Some(e),
        }
    }
}

/// Serves until SIGINT or SIGTERM, then stops every child and removes the
/// endpoint. Blocks the calling thread; this is what `main` calls.
pub fn run(args: &ServeArgs) -> Result<(), ServeError> {
    // Caught before binding: a signal at any later moment still ends in the
    // clean shutdown that removes the socket file.
    let mut signals = StopSignals::new().map_err(ServeError::Signals)?;
    smol::block_on(serve(args, async move {
        let name = signals.next().await;
        log(format_args!("{} received: shutting down", name));
    }))
}

/// Serves connections on `args.endpoint` until `stop` completes, then stops
/// accepting, removes the endpoint, and stops every child before returning.
/// [`run`] calls it with SIGINT/SIGTERM as `stop`; embedders and tests can
/// pass any future.
pub async fn serve(
    args: &ServeArgs,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listener = Listener::bind(&args.endpoint).map_err(ServeError::Bind)?;
    log(format_args!(
        "serving {} on '{}' (at most {} connections)",
        command_line(args),
        args.endpoint.display(),
        args.max_connections
    ));
    let command = Arc::new(args.clone());
    // Closing `stop_children` tells every connection to stop; `finished`
    // closes once every connection task has dropped its sender.
    let (stop_children, stop_child) = channel::bounded::<()>(1);
    let (finished_sender, finished) = channel::bounded::<()>(1);
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
        if open >= args.max_connections {
            log(format_args!(
                "{}: refused, {} connections already open (--max-connections {})",
                label, open, args.max_connections
            ));
            continue;
        }
        let slot = Slot {
            active: active.clone(),
            _finished: finished_sender.clone(),
        };
        active.fetch_add(1, Ordering::SeqCst);
        let command = command.clone();
        let stop = stop_child.clone();
        smol::spawn(async move {
            let _slot = slot;
            serve_connection(connection, label, &command, stop).await;
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
    drop(finished_sender);
    // Returns (with an error) once every connection task is done.
    let _ = finished.recv().await;
    result
}

/// Held by each connection task: counts it as open, and marks it finished
/// when dropped (however the task ends).
struct Slot {
    active: Arc<AtomicUsize>,
    _finished: Sender<()>,
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

async fn serve_connection(
    connection: Connection,
    label: Label,
    args: &ServeArgs,
    stop: Receiver<()>,
) {
    let Connection {
        handshake,
        reader,
        writer,
    } = connection;
    let mut command = Command::new(&args.program);
    command
        .args(&args.args)
        .env("MCP_BRIDGE_PROJECT", &handshake.project)
        .env("MCP_BRIDGE_REQUESTER", &handshake.requester)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            log(format_args!(
                "{}: cannot start {}: {}",
                label,
                command_line(args),
                e
            ));
            return;
        }
    };
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (stdin, stdout, stderr) = match pipes {
        (Some(stdin), Some(stdout), Some(stderr)) => (stdin, stdout, stderr),
        _ => {
            log(format_args!("{}: the command's stdio is not piped", label));
            let _ = shutdown_child(&mut child).await;
            return;
        }
    };
    log(format_args!("{}: started pid {}", label, child.id()));
    let copying = smol::spawn(copy_stderr(stderr, label.prefix()));

    let relayed =
        async { Outcome::Relayed(relay::relay(reader, writer, stdout, stdin, DRAIN_GRACE).await) };
    let exited = async {
        let _ = child.status().await;
        Timer::after(AFTER_EXIT_GRACE).await;
        Outcome::ChildExited
    };
    let stopped = async {
        // Nothing is ever sent: this returns when serve shuts down.
        let _ = stop.recv().await;
        Outcome::Stopped
    };
    // The relay owns both ends; when this returns they are dropped, which
    // closes the connection and the child's stdin.
    let outcome = future::or(relayed, future::or(exited, stopped)).await;
    let why = match outcome {
        Outcome::Relayed(Ok(Ending::ClientClosed { .. })) => "the bridge disconnected".to_string(),
        Outcome::Relayed(Ok(Ending::ClientGone)) => "the bridge went away".to_string(),
        Outcome::Relayed(Ok(Ending::ServerClosed)) => "the command closed its stdout".to_string(),
        Outcome::Relayed(Err(e)) => format!("relaying failed: {}", e),
        Outcome::ChildExited => "the command exited".to_string(),
        Outcome::Stopped => "serve is shutting down".to_string(),
    };
    let status = shutdown_child(&mut child).await;
    future::or(
        async {
            copying.await;
        },
        async {
            Timer::after(STDERR_SETTLE).await;
        },
    )
    .await;
    match status {
        Ok(status) => log(format_args!(
            "{}: ended ({}); command {}",
            label, why, status
        )),
        Err(e) => log(format_args!(
            "{}: ended ({}); stopping the command failed: {}",
            label, why, e
        )),
    }
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

fn command_line(args: &ServeArgs) -> String {
    let mut line = format!("'{}'", args.program.to_string_lossy());
    for arg in &args.args {
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
    use std::ffi::OsString;

    #[test]
    fn command_line_quotes_each_word() {
        let args = ServeArgs {
            endpoint: "/x".into(),
            max_connections: 1,
            program: OsString::from("sh"),
            args: vec![OsString::from("-c"), OsString::from("exec cat")],
        };
        assert_eq!(command_line(&args), "'sh' '-c' 'exec cat'");
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
