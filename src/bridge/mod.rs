//! `mcp-bridge mcp-server`: connect, check, identify, relay, and survive
//! the app.
//!
//! This is the job an MCP CLI spawns us for, with no business logic: the
//! bridge connects to the app's endpoint (waiting, boundedly, for an app
//! that is starting), checks that the app runs as our user
//! ([`endpoint::verify_server`]), writes the
//! [`handshake`](crate::handshake) line, and hands both byte streams to the
//! [`relay`](crate::relay), which forwards every byte unchanged and at once.
//! It reads each message's JSON-RPC envelope as it passes (never changing a
//! byte) so that when the app cannot be reached, refuses, or restarts, the
//! client is told why in the protocol and the session is carried over:
//! `session.rs` has the whole story (the state machine, as a shell that
//! awaits), `engine.rs` its decisions (each a handler taking `now`),
//! `outage.rs` its rules and bounds, `ledger/` everything the traffic teaches (requests in
//! flight, the session to replay, and, in `ledger/resume.rs`, what a new
//! instance is given), `client.rs` and `app.rs` each side's lines (handed
//! their bytes: they never read), `online.rs` the relaying and the reads,
//! `answer.rs` the bridge's own words, `cache/` the app's last answers. `--no-reconnect` is `plain.rs`, a plain relay. stdout carries
//! relayed bytes and those whole-line error responses only; every
//! diagnostic is a [`BridgeError`] for the caller to print on stderr.
//!
//! The rooms: the **core** (`engine.rs`, `ledger/`, `client.rs`, `app.rs`,
//! `outage.rs`, `answer.rs`, `answers.rs`) never awaits, never reads the
//! clock, never writes: it is handed bytes, ends and times, and says what
//! follows (`.ci/core-check.sh` holds its files to naming no async I/O, no
//! clock and no file). The **shell** (`session.rs`, `online.rs`) never
//! decides what a line is: it reads, writes, waits and feeds the core.
//! The ledger's state changes only through its methods. Not there yet
//! (issue 41, step 5): the relay's own decisions (taking the session back,
//! the drains) are still made in `online.rs`, in the order of its races.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

mod answer;
mod answers;
mod app;
mod cache;
mod client;
mod engine;
mod ledger;
mod online;
mod outage;
mod plain;
mod session;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use answer::{Reason, ERROR_CODE};
pub use cache::{
    default_dir as default_cache_dir, FILE_LIMIT as CACHE_FILE_LIMIT,
    VALUE_LIMIT as CACHE_VALUE_LIMIT,
};
pub use outage::{
    CRASH_LOOP_LIMIT, FIRST_PAUSE, LOOK_INTERVAL, PAUSE_CAP, RESUME_REPLY_TIMEOUT, STAYED_UP,
};

use crate::endpoint::{self, ConnectError, Reader, ServerUser, Writer};
use crate::handshake::Handshake;
use crate::relay::{Ending, RelayError, Stage};
use crate::stdio;
use crate::traffic_log::{LogOptions, TrafficLog};

/// Most bytes of client messages held while the app is away. A client
/// sends a handful of small requests while it waits for a reply; more than
/// this is answered with an error instead of held.
pub const HOLD_LIMIT: usize = 1024 * 1024;

/// How long the bridge waits for the app's endpoint unless told otherwise.
/// Long enough for an app that is still starting its listener, short enough
/// that a CLI showing "starting MCP server..." never hangs.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a restarting app is waited for unless told otherwise: what
/// Claude Code allows a server to start, so an app that restarts within a
/// CLI's own patience keeps its sessions.
pub const DEFAULT_RECONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// After the CLI closes stdin, how long replies already on their way are
/// still relayed. The CLI has closed its side, so this only exists to deliver
/// a last in-flight reply; a second is ample for a local server and short
/// enough that a CLI waiting for us to exit never notices.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// What the bridge connects to, and how. Built by the binary from
/// `mcp-server`'s options, or by an embedder directly:
///
/// ```
/// use std::time::Duration;
/// let mut config = mcp_bridge::bridge::Config::new("/run/user/1000/app/mcp.sock");
/// config.handshake.project = "my-project".into();
/// config.handshake.requester = "agent-1".into();
/// config.connect_timeout = Duration::from_secs(2);
/// assert_eq!(config.drain_grace, mcp_bridge::bridge::DRAIN_GRACE);
/// ```
///
/// New options are added as fields with a default in [`Config::new`], so
/// the struct cannot be built literally outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Socket path (Unix) or pipe name (`\\.\pipe\NAME`, Windows) of the
    /// app's MCP server.
    pub endpoint: PathBuf,
    /// Who is calling, sent as the first line of the connection. Empty
    /// fields by default.
    pub handshake: Handshake,
    /// Upper bound on reaching the endpoint. Default:
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// How long replies are still relayed after stdin closes. Default:
    /// [`DRAIN_GRACE`].
    pub drain_grace: Duration,
    /// A user besides our own (and root, on Unix) whose server is trusted
    /// at the endpoint, for an app that serves from another account on
    /// purpose. Default: none. See
    /// [`endpoint::verify_server`].
    pub trusted_server: Option<ServerUser>,
    /// Whether the session survives the app: wait for an app that is not
    /// there yet, answer requests with errors when it cannot be reached or
    /// refuses, and reconnect and resume when it closes the connection.
    /// Default: `true`. `false` is a plain relay: connect once (failing at
    /// once if nothing listens), end when the app hangs up.
    pub reconnect: bool,
    /// How long a restarting app is waited for before the session fails.
    /// Default: [`DEFAULT_RECONNECT_TIMEOUT`].
    pub reconnect_timeout: Duration,
    /// Where to append the traffic log, if anywhere. Default: none.
    pub log: Option<PathBuf>,
    /// The directory of the answers cache (the app's last `server/discover`
    /// and `initialize` results, answered for an app that is not there
    /// yet; see docs/bridge.md), or none. Default: [`default_cache_dir`].
    pub cache: Option<PathBuf>,
}

impl Config {
    /// A configuration for `endpoint` with every other setting at its
    /// documented default.
    pub fn new(endpoint: impl Into<PathBuf>) -> Config {
        Config {
            endpoint: endpoint.into(),
            handshake: Handshake::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            drain_grace: DRAIN_GRACE,
            trusted_server: None,
            reconnect: true,
            reconnect_timeout: DEFAULT_RECONNECT_TIMEOUT,
            log: None,
            cache: default_cache_dir(),
        }
    }
}

/// Why the bridge stopped with a failure (exit code 1).
///
/// Like every error in this crate, its Display text describes this layer
/// and `source()` returns the cause, so print the whole chain (the binary
/// joins it with `": "`, see [`crate::error_chain`]).
pub enum BridgeError {
    /// Opening this process's stdin or stdout failed.
    Stdio(io::Error),
    /// The endpoint could not be reached.
    Connect(ConnectError),
    /// The connection was made but the handshake line could not be sent.
    Handshake {
        /// The endpoint that was connected to.
        endpoint: PathBuf,
        /// The write error.
        source: io::Error,
    },
    /// Relaying failed with an I/O error that is not a normal hang-up.
    Relay(RelayError),
    /// The app closed the connection without answering anything, or after
    /// nothing but a refusal line (a JSON-RPC error with `"id":null`).
    Refused {
        /// The endpoint that refused us.
        endpoint: PathBuf,
        /// The refusal line's `error.message`, if the app sent one.
        reason: Option<String>,
    },
    /// The app closed the connection and did not take the session back
    /// (it rejected the replayed `initialize`, or no instance answered it
    /// and stayed up within the reconnect timeout).
    Resume {
        /// The endpoint reconnected to.
        endpoint: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// More than [`CRASH_LOOP_LIMIT`] app instances in a row closed the
    /// connection before they served.
    CrashLoop {
        /// The endpoint.
        endpoint: PathBuf,
        /// How many instances in a row.
        instances: usize,
    },
    /// Reconnected, but sending the app the messages held while it was
    /// away failed (with an error that is not a hang-up).
    DeliverHeld {
        /// The endpoint reconnected to.
        endpoint: PathBuf,
        /// The write error.
        source: io::Error,
    },
}

/// Debug is the Display text: a derived Debug of every variant and its
/// sources is 3.9 KB of the bridge-only build, for a text no user reads
/// (the binary prints the Display chain).
impl fmt::Debug for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BridgeError::Stdio(_) => f.write_str("cannot use this process's stdio"),
            // Transparent: the connect error says it all.
            BridgeError::Connect(e) => e.fmt(f),
            BridgeError::Handshake { endpoint, .. } => write!(
                f,
                "connected to '{}' but could not send the handshake",
                endpoint.display(),
            ),
            BridgeError::Refused {
                endpoint,
                reason: Some(reason),
            } => write!(
                f,
                "the app at '{}' refused this client: {}",
                endpoint.display(),
                reason
            ),
            BridgeError::Refused {
                endpoint,
                reason: None,
            } => write!(
                f,
                "the app at '{}' closed the connection before answering anything: it refused \
                 this client (its log may say why)",
                endpoint.display()
            ),
            BridgeError::Resume { endpoint, reason } => write!(
                f,
                "the app at '{}' closed the connection and did not take the session back: {}",
                endpoint.display(),
                reason
            ),
            BridgeError::CrashLoop {
                endpoint,
                instances,
            } => write!(
                f,
                "the app at '{}' is crash-looping: {} instances in a row closed the connection \
                 before they served",
                endpoint.display(),
                instances
            ),
            BridgeError::DeliverHeld { endpoint, .. } => write!(
                f,
                "reconnected to '{}' but sending it the messages held meanwhile failed",
                endpoint.display(),
            ),
            BridgeError::Relay(e) => f.write_str(match e.stage() {
                Stage::ReadClient => "reading stdin failed",
                Stage::WriteServer => "sending to the app failed",
                Stage::ReadServer => "receiving from the app failed",
                Stage::WriteClient => "writing stdout failed",
            }),
        }
    }
}

impl std::error::Error for BridgeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BridgeError::Stdio(e) => Some(e),
            // Transparent: skip the layer whose text was already printed.
            BridgeError::Connect(e) => e.source(),
            BridgeError::Handshake { source, .. } | BridgeError::DeliverHeld { source, .. } => {
                Some(source)
            }
            BridgeError::Relay(e) => Some(e.io_error()),
            BridgeError::Refused { .. }
            | BridgeError::Resume { .. }
            | BridgeError::CrashLoop { .. } => None,
        }
    }
}

/// Runs the bridge on this process's stdin and stdout until the session
/// ends. Blocks the calling thread; this is what the binary's `mcp-server`
/// calls.
///
/// Beyond [`bridge`], it watches the far ends of stdio (see
/// [`stdio::watch_hangups`]): when stdout's reader goes away the bridge
/// ends at once, as nobody is left to answer; when stdin's writers go away
/// while the app has stopped reading, the drain grace starts anyway.
pub fn run(config: &Config) -> Result<Ending, BridgeError> {
    let stdin = stdio::stdin().map_err(BridgeError::Stdio)?;
    let stdout = stdio::stdout().map_err(BridgeError::Stdio)?;
    let hangups = stdio::watch_hangups();
    let log = config
        .log
        .as_ref()
        .and_then(|path| TrafficLog::open_or_warn(path, LogOptions::from_env()));
    if let Some(log) = &log {
        log.start();
    }
    let ended = async_io::block_on(async {
        let session = session(config, stdin, stdout, Some(&hangups), log.as_ref());
        let gone = async {
            hangups.output_gone().await;
            Ok(Ending::ClientGone)
        };
        future::or(gone, session).await
    });
    if let Some(log) = &log {
        match &ended {
            Ok(ending) => log.exit(0, &format_args!("{:?}", ending)),
            Err(e) => log.exit(1, &crate::error_chain(e)),
        }
    }
    ended
}

/// Runs one client's session between the given client streams and the app
/// at `config.endpoint`, as the [module docs](self) describe: connects
/// (waiting for the app), checks who serves it, sends the handshake, and
/// relays, reconnecting when the app restarts. [`run`] calls it with the
/// real stdio; tests and embedders can pass anything else.
pub async fn bridge<R, W>(
    config: &Config,
    client_in: R,
    client_out: W,
) -> Result<Ending, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    session(config, client_in, client_out, None, None).await
}

async fn session<R, W>(
    config: &Config,
    stdin: R,
    stdout: W,
    hangups: Option<&stdio::Hangups>,
    log: Option<&TrafficLog>,
) -> Result<Ending, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let connector = EndpointConnector { config, log };
    // Either way a boxed future of its own, polled through a pointer: the
    // caller's future holds a box, not the union of both (-864 bytes).
    let run: Pin<Box<dyn Future<Output = Result<Ending, BridgeError>> + '_>> = if !config.reconnect
    {
        Box::pin(plain::run(config, connector, stdin, stdout, hangups, log))
    } else {
        // The disk is the I/O side's: the session asks it through the seam.
        let answers = Box::new(cache::Cache::of(config, log));
        Box::pin(
            session::Session::new(config, connector, answers, stdin, stdout, hangups, log).run(),
        )
    };
    run.await
}

/// The streams and watchers the session and the plain relay hand to
/// [`relay::relay_watched`]: as trait objects, so that both get one copy of
/// the relay, not one per set of stream types (an indirect call per read,
/// write and flush is nothing beside the system call each of them is).
/// `serve` keeps its own copy, whose future must be `Send`.
pub(crate) type DynRead<'a> = dyn AsyncRead + Unpin + 'a;
/// See [`DynRead`].
pub(crate) type DynWrite<'a> = dyn AsyncWrite + Unpin + 'a;
/// See [`DynRead`].
pub(crate) type DynWatch<'a> = dyn FnMut(&[u8]) + 'a;

/// The other way a relay's client side ends: stdin's writers are gone while
/// the relay cannot read stdin (blocked sending to an app that stopped
/// reading), and the drain grace starts all the same. Never, without a
/// hang-up watcher. Raced against the relay by the session and the plain
/// relay alike.
pub(crate) async fn input_closed_then_grace<E>(
    hangups: Option<&stdio::Hangups>,
    grace: Duration,
) -> Result<Ending, E> {
    match hangups {
        Some(hangups) => hangups.input_closed().await,
        None => future::pending().await,
    }
    crate::clock::after(grace).await;
    Ok(Ending::ClientClosed { drained: false })
}

/// A connection to an app instance, ready to relay.
pub(crate) struct Connected<AR, AW> {
    pub(crate) reader: AR,
    pub(crate) writer: AW,
    /// Who serves it (see [`endpoint::instance`]).
    pub(crate) instance: Option<u64>,
    /// The user serving it, who passed the trust check (none: not told).
    pub(crate) server: Option<ServerUser>,
}

/// A connection attempt's future, borrowing its connector.
pub(crate) type Connecting<'a, AR, AW> =
    Pin<Box<dyn Future<Output = Result<Connected<AR, AW>, BridgeError>> + 'a>>;

/// Where the session gets a connection to an app instance from: the real
/// endpoint for the binary, scripted in-memory apps for the session's
/// tests.
pub(crate) trait Connector {
    /// Reading from the app.
    type Reader: AsyncRead + Unpin;
    /// Writing to the app.
    type Writer: AsyncWrite + Unpin;

    /// One attempt, within `budget` (spent only on an endpoint that is
    /// busy: one that is absent or refusing fails at once): connect, check
    /// who serves it, and send the handshake (`resumed` after a restart).
    /// A failure that waiting may cure is a [`BridgeError::Connect`] whose
    /// [`may_heal`](ConnectError::may_heal) is true, or a
    /// [`BridgeError::Handshake`].
    fn connect(
        &mut self,
        resumed: bool,
        budget: Duration,
    ) -> Connecting<'_, Self::Reader, Self::Writer>;
}

/// The app's real endpoint.
struct EndpointConnector<'a> {
    config: &'a Config,
    log: Option<&'a TrafficLog>,
}

impl Connector for EndpointConnector<'_> {
    type Reader = Reader;
    type Writer = Writer;

    fn connect(&mut self, resumed: bool, budget: Duration) -> Connecting<'_, Reader, Writer> {
        let (config, log) = (self.config, self.log);
        Box::pin(async move {
            let (reader, mut writer) = endpoint::connect(&config.endpoint, budget)
                .await
                .map_err(BridgeError::Connect)?;
            let server = endpoint::verified_server(
                &config.endpoint,
                &reader,
                config.trusted_server.as_ref(),
            )
            .map_err(BridgeError::Connect)?;
            let instance = endpoint::instance(&config.endpoint, &reader);
            let mut handshake = config.handshake.clone();
            handshake.resumed = resumed;
            let line = handshake.to_line();
            if let Some(log) = log {
                log.handshake_sent(&line);
            }
            send(&mut writer, &line)
                .await
                .map_err(|source| BridgeError::Handshake {
                    endpoint: config.endpoint.clone(),
                    source,
                })?;
            Ok(Connected {
                reader,
                writer,
                instance,
                server: Some(server),
            })
        })
    }
}

/// Says on stderr, as it happens, what the session goes through, and in
/// the log: a CLI's MCP log shows a server's stderr, and nothing else
/// tells the user why the app's tools answer errors.
pub(crate) fn say(log: Option<&TrafficLog>, text: &str) {
    say_args(log, format_args!("{}", text));
}

/// [`say`], for a text still in pieces: no string is made of it first.
pub(crate) fn say_args(log: Option<&TrafficLog>, text: fmt::Arguments<'_>) {
    // A simulated session (virtual time: thousands a test run) says
    // nothing on stderr.
    #[cfg(test)]
    if crate::clock::Virtual::current().is_some() {
        return;
    }
    crate::diag::write_line(format!("mcp-bridge: {}\n", text).as_bytes());
    if let Some(log) = log {
        log.event(text);
    }
}

/// Says what could not be carried over to a new instance: on stderr, in
/// the log, and to the client as a warning when its session has logging
/// (the ledger owes those).
fn report_lost(ledger: &mut ledger::Ledger, log: Option<&TrafficLog>) {
    for lost in ledger.take_lost() {
        say(log, &lost);
    }
}

/// A phase (or the relay) as a future of its own, polled through a
/// pointer: the session's future then holds one box instead of the union
/// of every phase's state, and its code is 5.5 KB smaller (bridge-only
/// build). One allocation per phase, beside a connection's many. Here, not
/// in `session.rs`, so that the pumps (`online.rs`) box their drains too
/// without importing the session that drives them.
fn boxed<'f, T>(
    f: impl std::future::Future<Output = T> + 'f,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'f>> {
    Box::pin(f)
}

/// Writes all of `bytes` and flushes.
async fn send(out: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes).await?;
    out.flush().await
}
