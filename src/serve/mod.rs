//! `mcp-bridge serve`: any stdio MCP server, behind an endpoint, one child
//! per connection.
//!
//! Each bridge that connects gets its own run of the command, with the
//! handshake in `MCP_BRIDGE_PROJECT` and `MCP_BRIDGE_REQUESTER` (and where
//! the bridge learned them from its CLI, if it did, in
//! `MCP_BRIDGE_PROJECT_FROM` and `MCP_BRIDGE_REQUESTER_FROM`), and its
//! connection relayed to the child's stdin and from its stdout by the same
//! [`relay`] the bridge itself uses. The listening side is
//! [`host::Listener`], so only this user gets in.
//!
//! Lifetimes are tied both ways: when the bridge goes, the child is stopped
//! with [`GroupChild::shutdown`] (stdin closed, a grace, SIGTERM to its
//! process group, SIGKILL, always reaped), so helpers the command started
//! go with it; when the child exits, the connection is closed.
//! SIGINT or SIGTERM stop the whole server the same way, and exit cleanly.
//! On Windows there is no SIGTERM step (a child still past the grace is
//! terminated), and Ctrl+C or Ctrl+Break stop the server; ended any other
//! way (its console closed, `TerminateProcess`), it cleans nothing up, but
//! each child sees its stdin close, which is its cue to exit.
//!
//! [`host::Listener`]: crate::host::Listener
//! [`GroupChild::shutdown`]: crate::process::GroupChild::shutdown
//!
//! The child's stderr is read line by line and copied to ours behind a
//! `[<requester>]` prefix, within a budget per child so that one child's
//! flood cannot slow the others (`stderr.rs`).
//!
//! # Faults kept to their own connection
//!
//! - **The log never stalls a session.** Log lines and the children's
//!   stderr lines go through [`diag`]'s bounded queue: a stderr nobody
//!   reads drops lines (and says how many), it never blocks relaying,
//!   accepting or shutdown; a stderr whose reader went away is ignored.
//! - **One command's stderr cannot slow the others.** Each child's stderr
//!   is copied within a budget a second of its own, the rest counted, and
//!   read within a larger one, beyond which the child waits on its own
//!   stderr (`stderr.rs`).
//! - **A client's ids cannot flood the log.** The requester and project
//!   shown in log lines and in the stderr prefix are escaped and cut to
//!   [`LABEL_LIMIT`] characters, followed by `…` and the id's full length
//!   in bytes when cut.
//! - **A bridge that goes away frees its slot**, even while the relay is
//!   stuck writing to a command that stopped reading its stdin (the write
//!   would never end, so the relay would never read the socket's end): a
//!   watcher beside the relay sees the bridge close the connection
//!   completely, and at most a second later (as long as the bridge's own
//!   drain) the session ends and the command is stopped as on any
//!   disconnect. The watcher exists on Linux and Android only: elsewhere
//!   `POLLHUP` does not tell a full close from the bridge's half-close, and
//!   Windows pipes are not watched yet, so there such a session still
//!   lasts until serve stops.
//! - **A refusal says why.** The command is looked up when serve starts
//!   (a path that is an executable file, or a name found on `PATH`), and
//!   serve refuses to start, naming it, if it is not there. A bridge that
//!   is turned away (the connection limit, a command that fails to start,
//!   a handshake whose ids cannot be put in the environment because they
//!   contain a NUL) gets the protocol's refusal line before the close,
//!   `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"<why>"}}`
//!   (see [`host::Connection::refuse`]), so its CLI can show why.
//!
//! [`diag`]: crate::diag
//! [`host::Connection::refuse`]: crate::host::Connection::refuse
//!
//! # The traffic log
//!
//! With [`Config::log`], every message each connection carries is recorded
//! (see [`traffic_log`](crate::traffic_log)), both ways, with the
//! connection's number (`conn=N`), and so is each line serve writes on
//! stderr, plus the start and each connection accepted. The relay knows
//! nothing of it: its streams are wrapped in [`TapRead`]s.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use smol::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::bridge::DRAIN_GRACE;
use crate::diag;
use crate::handshake::Handshake;
use crate::host::{BindError, Connection, Listener};
use crate::process::{self, GroupChild};
use crate::relay::{self, Ending};
use crate::traffic_log::{Direction, LogOptions, TapRead, TrafficLog};
use crate::wait;

mod stderr;
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
    /// The app's name (`--app`), when the endpoint is the one named after
    /// it ([`endpoint::for_app`](crate::endpoint::for_app)): serve then
    /// binds with [`Listener::bind_app`], which also makes the socket's
    /// directory, and `endpoint` only names it in the log. Default: none.
    pub app: Option<String>,
    /// Connections served at once; more are refused. Default:
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// The program run for each connection.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Where to append the traffic log, if anywhere (see the [module
    /// docs](self)). Default: none.
    pub log: Option<PathBuf>,
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
            app: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            log: None,
        }
    }
}

/// After the child exits, how long its stdout may still be relayed before
/// the connection is closed: its last replies are usually already in the
/// pipe; only a grandchild holding the pipe open needs this bound.
const AFTER_EXIT_GRACE: Duration = Duration::from_secs(1);

/// After the child is stopped, how long its stderr may still be copied
/// (a grandchild may hold the pipe open).
const STDERR_SETTLE: Duration = Duration::from_secs(1);

/// After the bridge has closed the connection completely, how long the
/// relay may still finish on its own (delivering what the bridge sent
/// before it went, to a command that reads it) before the session is
/// ended for it. As long as the bridge's own drain.
const AFTER_HANGUP_GRACE: Duration = DRAIN_GRACE;

/// Longest requester or project shown in a log line or a stderr prefix, in
/// characters of its escaped form: ids are short names, and one client's
/// 60 KiB id must not be copied into every line its server writes.
pub const LABEL_LIMIT: usize = 64;

/// Why `serve` stopped with a failure (exit code 1).
#[derive(Debug)]
pub enum ServeError {
    /// SIGINT and SIGTERM (Ctrl+C on Windows) could not be caught.
    Signals(io::Error),
    /// The endpoint could not be bound.
    Bind(BindError),
    /// Accepting connections failed for good.
    Accept(io::Error),
    /// The command cannot be run: it is not on `PATH`, or the path given
    /// is not an executable file. `source` says which.
    Command {
        /// The program as given.
        program: OsString,
        /// Why it cannot be run.
        source: io::Error,
    },
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
            ServeError::Command { program, .. } => {
                write!(f, "cannot run '{}'", program.to_string_lossy())
            }
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Signals(e) | ServeError::Accept(e) => Some(e),
            ServeError::Command { source, .. } => Some(source),
            ServeError::Bind(e) => e.source(),
        }
    }
}

/// Serves until SIGINT, SIGTERM or SIGHUP, then stops every child and
/// removes the endpoint. Blocks the calling thread; this is what `main`
/// calls. On Unix it first raises the process's soft limit of open files
/// toward the hard one (see `serve/unix.rs`). Log lines may still be
/// queued for stderr when it returns: a caller about to exit gives them
/// [`diag::flush`] (the binary gives them a second, once; a second wait
/// here as well made an exit with a stderr nobody reads take two).
///
/// [`diag::flush`]: crate::diag::flush
pub fn run(config: &Config) -> Result<(), ServeError> {
    // Caught before binding: a signal at any later moment still ends in the
    // clean shutdown that removes the socket file.
    let mut signals = platform::StopSignals::new().map_err(ServeError::Signals)?;
    // The process is serve's own here, so its limits are too (an embedder
    // calling `serve` keeps its own).
    platform::raise_descriptor_limit();
    let config = config.clone();
    // Everything runs on smol's executor thread, accepting included, and
    // this thread only waits, with a plain parker rather than smol's
    // `block_on`, so that it takes no part in polling the reactor either.
    // Otherwise each accepted connection crossed from the executor to this
    // thread and back, and each I/O event could arrive on the thread not
    // running its task: two thread wake-ups per event, which at one child
    // per session were most of serve's CPU.
    let serving = smol::spawn(async move {
        serve(&config, async move {
            let name = signals.next().await;
            log(None, format_args!("{} received: shutting down", name));
        })
        .await
    });
    future::block_on(serving)
}

/// Serves connections on `config.endpoint` until `stop` completes, then stops
/// accepting, removes the endpoint, and stops every child before returning.
/// [`run`] calls it with SIGINT/SIGTERM as `stop`; embedders and tests can
/// pass any future.
///
/// # Errors
///
/// [`ServeError::Command`] if the command cannot be found, before anything
/// is bound; [`ServeError::Bind`] if the endpoint cannot be bound;
/// [`ServeError::Accept`] if accepting fails for good.
pub async fn serve(
    config: &Config,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    platform::find_command(&config.program).map_err(|source| ServeError::Command {
        program: config.program.clone(),
        source,
    })?;
    // On Windows each connection pins threads of a bounded pool.
    #[cfg(windows)]
    let config = &platform::fit_thread_pool(config);
    let traffic = config
        .log
        .as_deref()
        .and_then(|path| TrafficLog::open_or_warn(path, LogOptions::from_env()));
    if let Some(traffic) = &traffic {
        traffic.start();
    }
    let result = accept_until_stopped(config, &traffic, stop).await;
    if let Some(traffic) = &traffic {
        match &result {
            Ok(()) => traffic.exit(0, &"stopped"),
            Err(e) => traffic.exit(1, &crate::error_chain(e)),
        }
    }
    result
}

/// [`serve`] once its log is open.
async fn accept_until_stopped(
    config: &Config,
    traffic: &Option<TrafficLog>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listener = listen(config, traffic.as_ref())?;
    let mut connections = Connections::new(config);
    futures_lite::pin!(stop);
    let result = loop {
        match accept_or_stop(&listener, &mut stop).await {
            None => break Ok(()),
            Some(Err(e)) => break Err(ServeError::Accept(e)),
            Some(Ok(connection)) => connections.admit(connection, traffic.as_ref()),
        }
    };
    // Stop accepting and remove the socket first, so no new bridge is
    // accepted into a server that is going away.
    drop(listener);
    connections.stop_all(traffic.as_ref()).await;
    result
}

/// Binds `config.endpoint` and says what is served there.
fn listen(config: &Config, traffic: Option<&TrafficLog>) -> Result<Listener, ServeError> {
    let listener = match &config.app {
        Some(app) => Listener::bind_app(app),
        None => Listener::bind(&config.endpoint),
    }
    .map_err(ServeError::Bind)?;
    log(
        traffic,
        format_args!(
            "serving {} on '{}' (at most {} connections)",
            command_line(config),
            listener.endpoint().display(),
            config.max_connections
        ),
    );
    Ok(listener)
}

/// The next bridge, or `None` once `stop` has completed.
async fn accept_or_stop(
    listener: &Listener,
    stop: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Option<io::Result<Connection>> {
    future::or(async { Some(listener.accept().await) }, async {
        stop.await;
        None
    })
    .await
}

/// The connections being served: how many are open, and how to stop them
/// all and know when they have stopped.
struct Connections {
    config: Arc<Config>,
    active: Arc<AtomicUsize>,
    next_id: u64,
    /// Dropping it tells every connection to stop.
    stop_children: wait::StopOnDrop,
    /// What each connection waits on to stop.
    stop_child: wait::Stopped,
    /// Held (cloned) by every connection task's [`Slot`].
    running: wait::StopOnDrop,
    /// Fires once every connection task has dropped its [`Slot`].
    finished: wait::Stopped,
}

impl Connections {
    fn new(config: &Config) -> Connections {
        let (stop_children, stop_child) = wait::stop_signal();
        let (running, finished) = wait::stop_signal();
        Connections {
            config: Arc::new(config.clone()),
            active: Arc::new(AtomicUsize::new(0)),
            next_id: 0,
            stop_children,
            stop_child,
            running,
            finished,
        }
    }

    /// Serves `connection` in a task of its own, or turns it away if
    /// `max_connections` are already open.
    fn admit(&mut self, connection: Connection, traffic: Option<&TrafficLog>) {
        self.next_id += 1;
        let label = Label::new(self.next_id, &connection.handshake);
        let traffic = traffic.map(|t| t.for_connection(self.next_id));
        if let Some(traffic) = &traffic {
            traffic.event(format_args!("{}: accepted", label));
        }
        let open = self.active.load(Ordering::SeqCst);
        if open >= self.config.max_connections {
            refuse_busy(connection, &label, open, &self.config, traffic.as_ref());
            return;
        }
        let slot = Slot::take(&self.active, &self.running);
        let config = self.config.clone();
        let stop = self.stop_child.clone();
        crate::spawn(async move {
            let _slot = slot;
            serve_connection(connection, label, &config, traffic, stop).await;
        })
        .detach();
    }

    /// Tells every connection to stop, and waits until their tasks have
    /// ended.
    async fn stop_all(self, traffic: Option<&TrafficLog>) {
        let open = self.active.load(Ordering::SeqCst);
        if open > 0 {
            log(
                traffic,
                format_args!("stopping {} running command(s)", open),
            );
        }
        drop(self.stop_children);
        drop(self.running);
        self.finished.wait().await;
    }
}

/// Turns a bridge away because `open` connections are already open: logs
/// it, and writes the refusal line in a task of its own (the write is
/// bounded, but accepting must not wait for it).
fn refuse_busy(
    connection: Connection,
    label: &Label,
    open: usize,
    config: &Config,
    traffic: Option<&TrafficLog>,
) {
    log(
        traffic,
        format_args!(
            "{}: refused, {} connections already open (the limit is {})",
            label, open, config.max_connections
        ),
    );
    let reason = format!(
        "mcp-bridge serve is busy (connection limit: {}); try again later",
        config.max_connections
    );
    crate::spawn(async move {
        let _ = connection.refuse(&reason).await;
    })
    .detach();
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
    HungUp,
    Stopped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Relayed(Ok(Ending::ClientClosed { drained: true })) => {
                f.write_str("the bridge disconnected")
            }
            // The command saw its stdin end and did not close its stdout
            // (exit) within the bridge's own drain: it is stopped now, and
            // a bridge still waiting for its last replies has given up.
            Outcome::Relayed(Ok(Ending::ClientClosed { drained: false })) => write!(
                f,
                "the bridge disconnected, and the command kept its stdout open past the {:?} grace",
                DRAIN_GRACE
            ),
            Outcome::Relayed(Ok(Ending::ClientGone)) => f.write_str("the bridge went away"),
            Outcome::Relayed(Ok(Ending::ServerClosed)) => {
                f.write_str("the command closed its stdout")
            }
            Outcome::Relayed(Err(e)) => write!(f, "{}", crate::error_chain(e)),
            Outcome::ChildExited => f.write_str("the command exited"),
            Outcome::HungUp => f.write_str("the bridge closed the connection"),
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
    traffic: Option<TrafficLog>,
    stop: wait::Stopped,
) {
    let traffic = traffic.as_ref();
    if let Some(field) = unpassable_field(&connection.handshake) {
        log(
            traffic,
            format_args!(
                "{}: refused, its {} contains a NUL byte, which cannot be passed to \
                 the command's environment",
                label, field
            ),
        );
        let reason = format!(
            "mcp-bridge serve cannot pass this {} to its MCP server: it contains a NUL byte",
            field
        );
        let _ = connection.refuse(&reason).await;
        return;
    }
    // Spawned from a helper thread: std returns only once the child has
    // exec'd, and meanwhile the executor thread, which runs every session,
    // would stand still.
    let command = child_command(&connection.handshake, config);
    let started = smol::unblock(move || start_child(command)).await;
    let (mut child, stdin, stdout, stderr) = match started {
        Ok(started) => started,
        Err(e) => {
            log(
                traffic,
                format_args!("{}: cannot start {}: {}", label, command_line(config), e),
            );
            let reason = format!(
                "mcp-bridge serve cannot start its MCP server {}: {}",
                command_line(config),
                e
            );
            let _ = connection.refuse(&reason).await;
            return;
        }
    };
    log(
        traffic,
        format_args!("{}: started pid {}", label, child.id()),
    );
    let (running, ended) = wait::stop_signal();
    let copying = crate::spawn(stderr::copy_stderr(stderr, label.prefix(), ended));
    let outcome = relay_until_end(connection, &child, stdin, stdout, traffic, stop).await;
    // The relay has closed the child's stdin: at the bridge's EOF, after
    // which it gave the replies the drain grace (all of it, unless the
    // command closed its stdout first), or just now, dropped with it. The
    // first grace of the stop counts from then.
    let closed = match outcome {
        Outcome::Relayed(Ok(Ending::ClientClosed { drained: false })) => {
            Instant::now().checked_sub(DRAIN_GRACE)
        }
        _ => None,
    };
    let status = child
        .shutdown_since(closed.unwrap_or_else(Instant::now), process::SHUTDOWN_GRACE)
        .await;
    // A grandchild may hold the stderr pipe open: copy what is left, boundedly.
    drop(running);
    wait::timeout(STDERR_SETTLE, copying).await;
    match status {
        Ok(status) => log(
            traffic,
            format_args!("{}: ended ({}); command {}", label, outcome, status),
        ),
        Err(e) => log(
            traffic,
            format_args!(
                "{}: ended ({}); stopping the command failed: {}",
                label, outcome, e
            ),
        ),
    }
}

/// The handshake field that cannot be put in an environment variable (an
/// OS string ends at its first NUL), if any.
fn unpassable_field(handshake: &Handshake) -> Option<&'static str> {
    let nul = |from: &Option<String>| from.as_deref().map_or(false, |f| f.contains('\0'));
    if handshake.requester.contains('\0') {
        Some("requester")
    } else if handshake.project.contains('\0') {
        Some("project")
    } else if nul(&handshake.project_from) || nul(&handshake.requester_from) {
        Some("identity's origin")
    } else {
        None
    }
}

/// The command for one connection, its identity in the environment, and
/// where the bridge learned it (`MCP_BRIDGE_PROJECT_FROM`,
/// `MCP_BRIDGE_REQUESTER_FROM`), empty when it was given; set either way,
/// so that serve's own are never inherited.
fn child_command(handshake: &Handshake, config: &Config) -> std::process::Command {
    let given = String::new();
    let mut command = std::process::Command::new(&config.program);
    command
        .args(&config.args)
        .env("MCP_BRIDGE_PROJECT", &handshake.project)
        .env("MCP_BRIDGE_REQUESTER", &handshake.requester)
        .env(
            "MCP_BRIDGE_PROJECT_FROM",
            handshake.project_from.as_ref().unwrap_or(&given),
        )
        .env(
            "MCP_BRIDGE_REQUESTER_FROM",
            handshake.requester_from.as_ref().unwrap_or(&given),
        );
    command
}

/// Runs `command` with every stdio piped, leading a process group of its
/// own so that stopping it stops whatever it started too. Blocks until the
/// child has exec'd.
fn start_child(
    command: std::process::Command,
) -> io::Result<(GroupChild, ChildStdin, ChildStdout, ChildStderr)> {
    let mut child = process::spawn_group(command)?;
    match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(stdin), Some(stdout), Some(stderr)) => Ok((child, stdin, stdout, stderr)),
        // Cannot happen: spawn_group pipes all three; dropping the child
        // kills it and its group.
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
///
/// The bridge's end is watched beside the relay as well: the relay only
/// reads the socket between writes to the child, so a child that stopped
/// reading its stdin would keep it (and this connection's slot) forever
/// after the bridge has gone.
///
/// With a traffic log, what is read from each side is tapped on its way
/// through: the bridge's connection is the CLI's side, the command the
/// app's.
async fn relay_until_end(
    connection: Connection,
    child: &GroupChild,
    stdin: ChildStdin,
    stdout: ChildStdout,
    traffic: Option<&TrafficLog>,
    stop: wait::Stopped,
) -> Outcome {
    let hangup = connection.reader.hangup();
    let tap = |direction| traffic.map(|t| t.tap(direction));
    let from_bridge = TapRead::new(connection.reader, tap(Direction::CliToApp));
    let from_command = TapRead::new(stdout, tap(Direction::AppToCli));
    let relayed = async {
        Outcome::Relayed(
            relay::relay(
                from_bridge,
                connection.writer,
                from_command,
                stdin,
                DRAIN_GRACE,
            )
            .await,
        )
    };
    let exited = async {
        let _ = child.exited().await;
        // Its last replies are usually already in the pipe; only a
        // grandchild holding the pipe open needs this bound.
        Timer::after(AFTER_EXIT_GRACE).await;
        Outcome::ChildExited
    };
    let stopped = async {
        stop.wait().await;
        Outcome::Stopped
    };
    let hung_up = async {
        hangup.await;
        // A relay that is not stuck ends on its own meanwhile, delivering
        // what the bridge sent before it went.
        Timer::after(AFTER_HANGUP_GRACE).await;
        Outcome::HungUp
    };
    future::or(relayed, future::or(exited, future::or(stopped, hung_up))).await
}

/// How a connection is named in log lines: its number and, from the
/// handshake, who is calling, escaped so a hostile id cannot forge lines
/// and cut to [`LABEL_LIMIT`] so a huge one cannot flood them.
struct Label {
    id: u64,
    requester: String,
    project: String,
}

impl Label {
    fn new(id: u64, handshake: &Handshake) -> Label {
        Label {
            id,
            requester: shown(&handshake.requester),
            project: shown(&handshake.project),
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

/// `id` as log lines show it: escaped (no control character gets
/// through), and if that is longer than [`LABEL_LIMIT`] characters, cut
/// there and followed by `…` and the id's full length in bytes. Escapes are
/// never cut in half.
fn shown(id: &str) -> String {
    let mut text = String::new();
    let mut length = 0;
    for c in id.chars() {
        let escaped = c.escape_debug();
        if length + escaped.len() > LABEL_LIMIT {
            return format!("{}… ({} bytes)", text, id.len());
        }
        length += escaped.len();
        text.extend(escaped);
    }
    text
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

/// Writes one diagnostic line on stderr, without waiting for it, and the
/// same line to the traffic log as an event.
fn log(traffic: Option<&TrafficLog>, message: fmt::Arguments<'_>) {
    diag::log(message);
    if let Some(traffic) = traffic {
        traffic.event(message);
    }
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
    fn labels_escape_hostile_ids() {
        let label = Label::new(3, &Handshake::new("p", "a\nmcp-bridge: forged"));
        assert_eq!(
            label.to_string(),
            "connection 3 (requester \"a\\nmcp-bridge: forged\", project \"p\")"
        );
        assert!(!label.prefix().contains('\n'));
    }

    /// A 60 KiB id would otherwise be copied into every line its server
    /// writes to stderr.
    #[test]
    fn labels_are_cut_and_say_how_long_the_id_was() {
        let long = "é".repeat(30 * 1024);
        let label = Label::new(1, &Handshake::new("p", long.as_str()));
        assert_eq!(
            label.prefix(),
            format!("[{}… (61440 bytes)] ", "é".repeat(LABEL_LIMIT))
        );
        assert_eq!(shown(&"x".repeat(LABEL_LIMIT)), "x".repeat(LABEL_LIMIT));
        // An escape is never cut in half.
        let newlines = shown(&"\n".repeat(LABEL_LIMIT));
        assert_eq!(
            newlines,
            format!("{}… ({} bytes)", "\\n".repeat(LABEL_LIMIT / 2), LABEL_LIMIT)
        );
    }

    #[test]
    fn a_missing_command_names_it_once() {
        let e = ServeError::Command {
            program: "my-server".into(),
            source: io::Error::new(io::ErrorKind::NotFound, "not on PATH"),
        };
        assert_eq!(
            crate::error_chain(&e),
            "cannot run 'my-server': not on PATH"
        );
    }

    #[test]
    fn nul_bytes_cannot_reach_the_environment() {
        assert_eq!(unpassable_field(&Handshake::new("p", "r")), None);
        assert_eq!(
            unpassable_field(&Handshake::new("p", "a\0b")),
            Some("requester")
        );
        assert_eq!(
            unpassable_field(&Handshake::new("\0", "r")),
            Some("project")
        );
        let mut learned = Handshake::new("p", "r");
        learned.requester_from = Some("a\0b".into());
        assert_eq!(unpassable_field(&learned), Some("identity's origin"));
    }
}
