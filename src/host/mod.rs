//! The app's side of the endpoint: bind it, accept each bridge, read its
//! handshake, and hand the rest of the stream to the app's own MCP server.
//!
//! ```no_run
//! use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
//! use futures_lite::StreamExt;
//! use mcp_bridge::host::Listener;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! smol::block_on(async {
//!     let listener = Listener::bind("/run/user/1000/my-app/mcp.sock")?;
//!     loop {
//!         let connection = listener.accept().await?;
//!         smol::spawn(async move {
//!             let who = connection.handshake; // project and requester
//!             let mut replies = connection.writer;
//!             let mut requests = BufReader::new(connection.reader).lines();
//!             while let Some(Ok(request)) = requests.next().await {
//!                 // ... hand `request` to the app's MCP server for `who` ...
//! #               let _ = (&who, request);
//!                 replies.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").await?;
//!             }
//!             Ok::<(), std::io::Error>(())
//!         })
//!         .detach();
//!     }
//! })
//! # }
//! ```
//!
//! What [`Listener`] takes care of, so that each app does not get it wrong:
//!
//! - **Only the owner gets in.** On Unix the socket file is created with
//!   mode 0600 with no moment in which it is wider (see `unix.rs` for how),
//!   and every peer's uid is checked against ours with the kernel's peer
//!   credentials; a foreign peer is dropped and logged, never handed out.
//!   On Windows the endpoint is a named pipe (`\\.\pipe\NAME`) whose
//!   DACL has one entry, full access for the user this process runs as
//!   (the process token's user SID), so the system refuses every other
//!   user, LocalSystem and administrators included, when they open it;
//!   `PIPE_REJECT_REMOTE_CLIENTS` refuses other machines (see
//!   `PipeListener` (Windows only), on which the Windows side is built).
//! - **Restarts just work, and never steal.** A stale socket file left by a
//!   crashed app (nothing listening) is replaced; a live one is never
//!   replaced: [`Listener::bind`] fails with [`BindError`] instead. The file
//!   is removed when the listener is dropped. On Windows there is no file:
//!   a pipe vanishes with its last handle, and binding the name of a live
//!   pipe fails with `AddrInUse`.
//! - **One bad peer cannot hurt the others.** Handshakes are read
//!   concurrently, each capped at [`HANDSHAKE_LIMIT`] bytes and
//!   [`HANDSHAKE_TIMEOUT`]. A peer that sends an oversized, invalid, or
//!   unfinished handshake is dropped with a log line while other peers keep
//!   being accepted.
//! - **Idle peers cannot starve real ones.** Accepting never stops to wait
//!   for slow handshakes: a bridge sends its handshake the moment it
//!   connects, so it is read at once however many silent peers are being
//!   held. At most [`MAX_PENDING`] peers may wait for their handshake (or
//!   for the app to take them) at once, and on Unix at most half the
//!   process's file descriptor limit (so silent peers never take the
//!   descriptors the app needs to serve the bridges it accepted); beyond
//!   that, the *oldest* one is dropped, which is never a bridge that just
//!   connected. A silent peer costs a socket and a small task, no buffer:
//!   the read buffer is only allocated once its first bytes arrive.
//! - **No byte is lost.** Bytes that arrive right behind the handshake line
//!   are handed over at the front of the connection's [`Reader`].
//!
//! # Refusing a bridge
//!
//! An app that will not serve a bridge (a limit reached, a server that
//! cannot start) should say why rather than just close: a bare close looks
//! to the MCP CLI like a server that ended normally, and its user sees
//! nothing. [`Connection::refuse`] writes the protocol's refusal line, one
//! JSON-RPC error response with a `null` id (the id of an error that
//! belongs to no request), then closes:
//!
//! ```text
//! {"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"<why>"}}\n
//! ```
//!
//! The bridge relays it to the CLI like any other line, and the CLI shows
//! the message. [`REFUSAL_CODE`] is `-32000`, the first of JSON-RPC's
//! "server error" codes; `<why>` is a JSON string escaped by `serde_json`.
//!
//! # Log lines
//!
//! Log lines go to stderr, prefixed `mcp-bridge:`, through [`diag`] (so a
//! stderr nobody reads never stalls accepting), because a refused peer is
//! something the app's operator must be able to see, and accept() has no
//! one else to tell. Lines about single peers (refused, dropped) are
//! limited to one per second; the others are counted, and the count is
//! logged once the second is over, so a flood of bad peers cannot flood
//! the log.
//!
//! When accepting fails for a while (the process ran out of file
//! descriptors, say), no connection is lost: they wait in the kernel's
//! queue, accepting is tried again every 100 ms, and they are accepted once
//! it passes. The log says exactly that, in one line when it begins
//! (`cannot accept connections for now: ...`) and one when it ends
//! (`accepting connections again after N failed attempt(s) ...: the
//! connections that waited meanwhile were delayed, not dropped`), limited
//! like the lines about peers.
//!
//! [`diag`]: crate::diag

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use serde_json::Value;
use smol::channel::{self, Receiver, Sender};
use smol::Task;

use crate::diag;
use crate::handshake::Handshake;
use crate::wait;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;
#[cfg(windows)]
pub use windows::PipeListener;

/// Longest handshake line accepted, final `\n` included. A real one is well
/// under 1 KiB; the cap only stops a peer from filling our memory.
pub const HANDSHAKE_LIMIT: usize = 64 * 1024;

/// How long a peer has, from being accepted, to send its whole handshake
/// line. A bridge sends it at once after connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most connections that may be between "accepted" and "taken by
/// [`Listener::accept`]" at once: reading their handshake, or waiting for
/// the app (on Unix, half the soft limit of open files if that is lower).
/// Beyond it, the oldest is dropped to make room for the newest, so
/// accepting never stops. Bounds our memory (a socket, a small task and at
/// most one handshake each) when peers connect and say nothing, or the app
/// stops calling accept; high enough that hundreds of silent peers do not
/// push out a bridge whose handshake is already on its way.
pub const MAX_PENDING: usize = 1024;

/// Lines about single peers (refused, dropped) are written at most once
/// per this interval; the rest are counted into one line at its end.
const PEER_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// How long [`Connection::refuse`] may take to write its line. It fits in
/// any socket buffer, so only a peer that filled ours without reading
/// could hold it up.
const REFUSAL_WRITE_LIMIT: Duration = Duration::from_secs(1);

/// The JSON-RPC error code of the refusal line: the first of the range the
/// specification leaves to servers ("server error").
pub const REFUSAL_CODE: i64 = -32000;

/// How long the accept loop pauses after a transient failure (such as
/// running out of file descriptors) so it does not spin while it lasts.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How many connections the accept loop takes in a row before it lets the
/// other tasks on its thread run.
const ACCEPTS_BEFORE_YIELD: u32 = 32;

/// Bytes read per call while looking for the end of the handshake.
const READ_CHUNK: usize = 4096;

/// Settings of a [`Listener`], for [`Listener::bind_with`]. New settings
/// are added as fields with a default, so build it from `default()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long a peer has, from being accepted, to send its whole
    /// handshake line. Default: [`HANDSHAKE_TIMEOUT`].
    ///
    /// `Duration::ZERO` means no time limit, as does `Duration::MAX`: a
    /// silent peer is then only dropped when [`MAX_PENDING`] others are
    /// waiting behind it (it is the oldest) or when the listener is dropped.
    pub handshake_timeout: Duration,
    /// Longest handshake line accepted, final `\n` included. Default:
    /// [`HANDSHAKE_LIMIT`].
    ///
    /// `usize::MAX` means no limit (a peer that never ends its line can
    /// then fill memory until the timeout); `0` refuses every handshake.
    pub handshake_limit: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            handshake_limit: HANDSHAKE_LIMIT,
        }
    }
}

/// A bound endpoint that accepts bridges. Dropping it stops accepting and
/// removes the socket file.
pub struct Listener {
    endpoint: PathBuf,
    ready: Receiver<io::Result<Connection>>,
    /// Removes the socket file on drop (before the accept loop below closes
    /// the socket itself, so no new peer can connect in between).
    _file: platform::SocketFile,
    /// The accept loop; dropping it cancels the loop, and with it every
    /// handshake still being read.
    _accepting: Task<()>,
}

/// One accepted bridge whose handshake has been read.
#[derive(Debug)]
pub struct Connection {
    /// Who is calling: the project and the requesting agent.
    pub handshake: Handshake,
    /// What the bridge sends after the handshake: the MCP client's messages.
    pub reader: Reader,
    /// Where the MCP server's messages go. Closing it (`close()`) tells the
    /// bridge no more will come; dropping both halves closes the connection.
    pub writer: Writer,
}

/// The reading half of a [`Connection`], starting right after the
/// handshake line.
pub struct Reader {
    /// Bytes read together with the handshake, handed out first.
    early: Vec<u8>,
    early_pos: usize,
    inner: platform::Reader,
}

/// The writing half of a [`Connection`].
#[derive(Debug)]
pub struct Writer(platform::Writer);

/// Why [`Listener::bind`] failed. Its Display text names the endpoint and
/// what that means; `source()` is the OS error behind it.
#[derive(Debug)]
pub struct BindError {
    pub(crate) endpoint: PathBuf,
    pub(crate) source: io::Error,
}

/// What the platform's accept produced.
enum Accepted {
    /// A peer that passed the platform's checks (same user). Boxed: the
    /// streams are large, and the other variants are common under attack.
    Peer(Box<(platform::Reader, platform::Writer)>),
    /// A peer that was refused and already dropped; the text says why.
    Refused(String),
    /// A failure that may heal (out of file descriptors, an aborted
    /// connection); the loop logs it, pauses and carries on.
    Retry(io::Error),
}

impl Listener {
    /// Binds `endpoint` (a socket path on Unix, a pipe name on Windows) and
    /// starts accepting in the background on smol's global executor.
    ///
    /// # Errors
    ///
    /// A [`BindError`] if another process is listening there, if something
    /// other than a socket is in the way, or if the OS refuses.
    pub fn bind(endpoint: impl AsRef<Path>) -> Result<Listener, BindError> {
        Listener::bind_with(endpoint, Options::default())
    }

    /// [`Listener::bind`] with settings other than the defaults.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let mut options = mcp_bridge::host::Options::default();
    /// options.handshake_timeout = Duration::from_secs(1);
    /// let listener = mcp_bridge::host::Listener::bind_with("/tmp/app.sock", options)?;
    /// # Ok::<(), mcp_bridge::host::BindError>(())
    /// ```
    pub fn bind_with(endpoint: impl AsRef<Path>, options: Options) -> Result<Listener, BindError> {
        let endpoint = endpoint.as_ref();
        let (acceptor, file) = platform::bind(endpoint).map_err(|source| BindError {
            endpoint: endpoint.to_path_buf(),
            source,
        })?;
        let (ready_sender, ready) = channel::bounded(1);
        let accepting = smol::spawn(accept_loop(acceptor, options, ready_sender));
        Ok(Listener {
            endpoint: endpoint.to_path_buf(),
            ready,
            _file: file,
            _accepting: accepting,
        })
    }

    /// Waits for the next peer whose handshake has arrived.
    ///
    /// Peers that are refused or send a bad handshake never come out of
    /// here; they are logged and dropped. Several tasks may call this at
    /// once through a shared reference.
    ///
    /// # Errors
    ///
    /// Only if accepting itself failed for good (the listening socket is
    /// broken); the listener is then useless.
    pub async fn accept(&self) -> io::Result<Connection> {
        match self.ready.recv().await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::Other,
                "the listener stopped accepting after an earlier error",
            )),
        }
    }

    /// The endpoint this listener is bound to.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Writes one diagnostic line on stderr, without waiting for it.
fn log(message: fmt::Arguments<'_>) {
    diag::log(message);
}

/// A poisoned lock only means a panic elsewhere; the data is still sound.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The tasks of the peers accepted but not yet taken by the app (reading
/// their handshake, or waiting for [`Listener::accept`]), by accept order,
/// so the oldest is the first one found. Dropping a task cancels it, which
/// drops its peer; each task removes itself when it ends.
type Pending = Mutex<BTreeMap<u64, Task<()>>>;

/// Accepts peers for as long as the listener lives, reading each one's
/// handshake in its own task so a slow peer holds up nobody else.
///
/// It never waits for a handshake before accepting the next peer: a silent
/// peer must not keep a bridge that has already sent its handshake waiting
/// in the kernel's backlog. Memory and descriptors are bounded by dropping
/// the oldest pending peer instead (see [`MAX_PENDING`] and
/// `platform::pending_limit`). Dropping the loop drops `pending`, which
/// cancels every handshake still being read.
async fn accept_loop(
    acceptor: platform::Acceptor,
    options: Options,
    ready: Sender<io::Result<Connection>>,
) {
    let most_pending = platform::pending_limit(MAX_PENDING);
    let pending: Arc<Pending> = Arc::new(Mutex::new(BTreeMap::new()));
    let peer_log = Arc::new(PeerLog::new(PEERS_HELD_BACK));
    let accept_log = Arc::new(PeerLog::new(ACCEPTING_HELD_BACK));
    let mut outage: Option<Outage> = None;
    let mut next_id: u64 = 0;
    let mut accepted_in_a_row = 0u32;
    loop {
        // With connections always queued, accept never waits: a flood of them
        // (refused ones included) would otherwise keep this loop from ever
        // returning to the executor, stalling every task that shares it.
        accepted_in_a_row += 1;
        if accepted_in_a_row >= ACCEPTS_BEFORE_YIELD {
            accepted_in_a_row = 0;
            futures_lite::future::yield_now().await;
        }
        let accepted = acceptor.accept().await;
        if !matches!(accepted, Ok(Accepted::Retry(_))) {
            if let Some(outage) = outage.take() {
                outage.ended();
            }
        }
        let (reader, writer) = match accepted {
            Ok(Accepted::Peer(streams)) => *streams,
            Ok(Accepted::Refused(why)) => {
                peer_log.line(format_args!("refused {}", why));
                continue;
            }
            Ok(Accepted::Retry(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(Accepted::Retry(e)) if e.kind() == io::ErrorKind::ConnectionAborted => {
                peer_log.line(format_args!(
                    "a connection was closed by its peer before it could be accepted ({})",
                    e
                ));
                continue;
            }
            Ok(Accepted::Retry(e)) => {
                // Out of descriptors or memory: the connections stay in the kernel's
                // queue meanwhile, and are accepted once it passes. Say so, once per
                // outage, rather than a line per attempt.
                match &mut outage {
                    Some(outage) => outage.attempts += 1,
                    None => outage = Some(Outage::began(e, &accept_log)),
                }
                Timer::after(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => {
                log(format_args!("stopped accepting connections: {}", e));
                let _ = ready.send(Err(e)).await;
                return;
            }
        };
        next_id += 1;
        let id = next_id;
        let work = take_handshake(reader, writer, options, ready.clone(), peer_log.clone());
        let registry = Arc::downgrade(&pending);
        let crowded = {
            // Locked across the spawn, so the task cannot try to remove
            // itself before it is in the map.
            let mut peers = lock(&pending);
            let task = smol::spawn(async move {
                work.await;
                forget(&registry, id);
            });
            peers.insert(id, task);
            peers.len() > most_pending
        };
        if crowded && drop_oldest(&pending).await {
            peer_log.line(format_args!(
                "dropped a connection: more than {} were waiting for their handshake \
                 or for the app, and it was the oldest",
                most_pending
            ));
        }
    }
}

/// A time in which accepting fails for a reason that may heal (out of file
/// descriptors, say). Connections are not lost meanwhile: they wait in the
/// kernel's queue, and are accepted once it passes, so the log says that,
/// once when it begins and once when it ends.
///
/// The two lines of an outage go together: the first is limited like the
/// lines about single peers (so outages that come and go quickly are
/// counted, not each logged), and the second is written exactly when the
/// first was.
#[derive(Debug)]
struct Outage {
    began: Instant,
    attempts: u64,
    error: io::Error,
    /// Whether its first line was written (not held back).
    logged: bool,
}

impl Outage {
    fn began(error: io::Error, log: &Arc<PeerLog>) -> Outage {
        let logged = log.line(format_args!(
            "cannot accept connections for now: {}; connections wait in the kernel's \
             queue meanwhile, and accepting is tried again every {:?}",
            error, RETRY_PAUSE
        ));
        Outage {
            began: Instant::now(),
            attempts: 1,
            error,
            logged,
        }
    }

    fn ended(self) {
        if self.logged {
            log(format_args!(
                "accepting connections again after {} failed attempt(s) in {:.1?} ({}): \
                 the connections that waited meanwhile were delayed, not dropped",
                self.attempts,
                self.began.elapsed(),
                self.error
            ));
        }
    }
}

/// Removes a finished handshake task from the pending map.
fn forget(registry: &Weak<Pending>, id: u64) {
    if let Some(pending) = registry.upgrade() {
        // The running task's own handle: let it finish on its own.
        if let Some(task) = lock(&pending).remove(&id) {
            task.detach();
        }
    }
}

/// Cancels the oldest pending peer's task and waits until it is gone (its
/// socket closed); `false` if no peer is pending.
async fn drop_oldest(pending: &Pending) -> bool {
    let oldest = {
        let mut peers = lock(pending);
        let first = peers.keys().next().copied();
        first.and_then(|id| peers.remove(&id))
    };
    match oldest {
        Some(task) => {
            task.cancel().await;
            true
        }
        None => false,
    }
}

/// Reads one peer's handshake and hands the connection to the app.
async fn take_handshake(
    reader: platform::Reader,
    writer: platform::Writer,
    options: Options,
    ready: Sender<io::Result<Connection>>,
    peer_log: Arc<PeerLog>,
) {
    match read_handshake(reader, options.handshake_limit, options.handshake_timeout).await {
        Ok((handshake, reader)) => {
            let connection = Connection {
                handshake,
                reader,
                writer: Writer(writer),
            };
            // Fails only when the listener is gone: the peer is then
            // dropped, which is all there is left to do.
            let _ = ready.send(Ok(connection)).await;
        }
        // Not worth a line: a liveness probe (such as another
        // `Listener::bind` checking whether we are alive).
        Err(HandshakeFailure::Probe) => {}
        Err(failure) => {
            peer_log.line(format_args!("dropped a connection: {}", failure));
        }
    }
}

/// Log lines about single peers, at most one per [`PEER_LOG_INTERVAL`]:
/// one bad peer is worth a line, a thousand are worth one line and a
/// count. The lines held back are counted and logged in one line at the
/// end of the interval (which starts a new one), which says what they were
/// about.
#[derive(Debug)]
struct PeerLog {
    state: Mutex<PeerLogState>,
    /// What the held-back lines were about, after their count.
    held_back: &'static str,
}

/// The count line of the log about single peers.
const PEERS_HELD_BACK: &str = "more connection(s) dropped or refused";

/// The count line of the log about accepting failing for a while.
const ACCEPTING_HELD_BACK: &str = "more time(s) accepting connections failed for a while \
     (the connections waited in the kernel's queue meanwhile, and were not dropped)";

#[derive(Debug, Default)]
struct PeerLogState {
    /// Until when lines are counted instead of written.
    quiet_until: Option<Instant>,
    /// Lines held back since the last line written.
    held_back: u64,
}

impl PeerLog {
    fn new(held_back: &'static str) -> PeerLog {
        PeerLog {
            state: Mutex::default(),
            held_back,
        }
    }

    /// Writes the line, or counts it if one was written less than
    /// [`PEER_LOG_INTERVAL`] ago; `true` if it was written.
    fn line(self: &Arc<Self>, message: fmt::Arguments<'_>) -> bool {
        let now = Instant::now();
        let mut state = lock(&self.state);
        match state.quiet_until {
            Some(until) if now < until => {
                state.held_back += 1;
                if state.held_back == 1 {
                    let log = self.clone();
                    smol::spawn(async move {
                        Timer::at(until).await;
                        log.count_held_back();
                    })
                    .detach();
                }
                false
            }
            _ => {
                state.quiet_until = Some(now + PEER_LOG_INTERVAL);
                drop(state);
                log(message);
                true
            }
        }
    }

    /// Logs how many lines were held back, if any; that line starts a new
    /// quiet interval of its own.
    fn count_held_back(&self) {
        let mut state = lock(&self.state);
        let count = std::mem::take(&mut state.held_back);
        if count > 0 {
            state.quiet_until = Some(Instant::now() + PEER_LOG_INTERVAL);
            drop(state);
            log(format_args!(
                "{} {} (such lines are limited to one every {:?})",
                count, self.held_back, PEER_LOG_INTERVAL
            ));
        }
    }
}

/// Why a peer's handshake was not accepted.
#[derive(Debug)]
enum HandshakeFailure {
    TooLong(usize),
    TimedOut(Duration),
    /// Closed after sending part of a handshake.
    Closed,
    /// Closed without sending a byte: someone checking that we listen.
    Probe,
    Io(io::Error),
    Invalid(crate::handshake::HandshakeError),
}

impl fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeFailure::TooLong(limit) => {
                write!(f, "handshake longer than {} bytes", limit)
            }
            HandshakeFailure::TimedOut(limit) => {
                write!(f, "no complete handshake within {:?}", limit)
            }
            HandshakeFailure::Closed => f.write_str("closed in the middle of its handshake"),
            HandshakeFailure::Probe => f.write_str("closed without sending anything"),
            HandshakeFailure::Io(e) => write!(f, "reading its handshake failed: {}", e),
            HandshakeFailure::Invalid(e) => e.fmt(f),
        }
    }
}

/// Reads one handshake line of at most `limit` bytes within `timeout`, and
/// returns it parsed, with a [`Reader`] that yields every byte after it.
async fn read_handshake(
    mut inner: platform::Reader,
    limit: usize,
    timeout: Duration,
) -> Result<(Handshake, Reader), HandshakeFailure> {
    let reading = async {
        // A silent peer costs no buffer: allocated once bytes arrive. (The
        // future is made in a statement of its own, so no borrow of
        // `inner` is held across the wait.)
        let readable = platform::readable(&inner);
        readable.await.map_err(HandshakeFailure::Io)?;
        let mut buffer = Vec::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let n = match inner.read(&mut chunk).await {
                Ok(0) if buffer.is_empty() => return Err(HandshakeFailure::Probe),
                Ok(0) => return Err(HandshakeFailure::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HandshakeFailure::Io(e)),
            };
            let searched = buffer.len();
            buffer.extend_from_slice(&chunk[..n]);
            if let Some(i) = buffer[searched..].iter().position(|&b| b == b'\n') {
                let end = searched + i + 1;
                if end > limit {
                    return Err(HandshakeFailure::TooLong(limit));
                }
                return Ok((buffer, end));
            }
            if buffer.len() >= limit {
                return Err(HandshakeFailure::TooLong(limit));
            }
        }
    };
    let (buffer, end) = match wait::timeout_unless_zero(timeout, reading).await {
        Some(read) => read?,
        None => return Err(HandshakeFailure::TimedOut(timeout)),
    };
    let handshake = Handshake::parse(&buffer[..end]).map_err(HandshakeFailure::Invalid)?;
    let reader = Reader {
        early: buffer,
        early_pos: end,
        inner,
    };
    Ok((handshake, reader))
}

impl Connection {
    /// Turns this bridge away with a reason its MCP CLI can show: writes the
    /// protocol's refusal line (see [the module docs](self#refusing-a-bridge))
    /// and closes the connection. Takes at most a second, however the peer
    /// behaves.
    ///
    /// ```no_run
    /// # async fn f(listener: mcp_bridge::host::Listener) -> std::io::Result<()> {
    /// let connection = listener.accept().await?;
    /// connection.refuse("this app serves one agent at a time").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// If the line could not be written (the peer is gone, or did not take
    /// it in time); the connection is closed all the same.
    pub async fn refuse(self, reason: &str) -> io::Result<()> {
        let mut writer = self.writer;
        let line = refusal_line(reason);
        let sent = wait::timeout(REFUSAL_WRITE_LIMIT, async {
            writer.write_all(&line).await?;
            writer.close().await
        })
        .await;
        sent.unwrap_or_else(|| Err(io::ErrorKind::TimedOut.into()))
    }
}

/// The refusal line for `reason`, final `\n` included: a JSON-RPC error
/// response with a `null` id and [`REFUSAL_CODE`].
///
/// Written by hand, like the handshake, so the key order is fixed here.
fn refusal_line(reason: &str) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":{},\"message\":{}}}}}\n",
        REFUSAL_CODE,
        Value::from(reason)
    )
    .into_bytes()
}

impl Reader {
    /// Completes once the peer has closed the connection completely (both
    /// directions), as opposed to the half-close a bridge makes when its
    /// stdin ends; never completes where that cannot be told (see the
    /// platform module).
    ///
    /// For `serve`: its relay only notices a bridge going away when it next
    /// reads the socket, which it never does while it is stuck writing to a
    /// command that stopped reading. This watches the socket beside it.
    pub(crate) fn hangup(&self) -> impl Future<Output = ()> + Send + 'static {
        platform::hangup(&self.inner)
    }
}

impl AsyncRead for Reader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.early_pos < this.early.len() {
            let early = &this.early[this.early_pos..];
            let n = early.len().min(buf.len());
            buf[..n].copy_from_slice(&early[..n]);
            this.early_pos += n;
            if this.early_pos == this.early.len() {
                this.early = Vec::new();
                this.early_pos = 0;
            }
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("early_bytes", &(self.early.len() - self.early_pos))
            .field("inner", &self.inner)
            .finish()
    }
}

forward_async_write!(Writer);

impl BindError {
    /// The endpoint that could not be bound.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// The underlying OS error. `AddrInUse` means another process is
    /// listening there; `AlreadyExists` means something that is not a socket
    /// is in the way.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hint = match self.source.kind() {
            io::ErrorKind::AddrInUse => {
                "another process is listening there; stop it first, or choose another endpoint"
            }
            io::ErrorKind::AlreadyExists => {
                "something other than a socket is in the way; it was left untouched"
            }
            io::ErrorKind::NotFound => "its directory does not exist",
            io::ErrorKind::PermissionDenied => {
                "permission denied; the directory belongs to another user or is read-only"
            }
            io::ErrorKind::InvalidInput => "the path is too long or otherwise not a valid endpoint",
            _ => "the endpoint could not be created",
        };
        write!(
            f,
            "cannot listen on '{}': {}",
            self.endpoint.display(),
            hint
        )
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use futures_lite::io::AsyncWriteExt;
    use smol::net::unix::UnixStream;

    fn pair() -> (UnixStream, UnixStream) {
        UnixStream::pair().unwrap()
    }

    #[test]
    fn bytes_after_the_handshake_are_kept() {
        smol::block_on(async {
            let (mut peer, ours) = pair();
            peer.write_all(b"{\"project\":\"p\",\"requester\":\"r\"}\r\nfirst\nsecond")
                .await
                .unwrap();
            drop(peer);
            let (handshake, mut reader) = read_handshake(ours, 1024, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(handshake, Handshake::new("p", "r"));
            let mut rest = Vec::new();
            reader.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"first\nsecond");
        });
    }

    #[test]
    fn handshake_split_over_many_writes() {
        smol::block_on(async {
            let (mut peer, ours) = pair();
            let writer = smol::spawn(async move {
                for byte in b"{\"project\":\"p\",\"requester\":\"r\"}\nrest".iter() {
                    peer.write_all(&[*byte]).await.unwrap();
                    Timer::after(Duration::from_millis(1)).await;
                }
            });
            let (handshake, mut reader) = read_handshake(ours, 1024, Duration::from_secs(5))
                .await
                .unwrap();
            writer.await;
            assert_eq!(handshake.requester, "r");
            let mut rest = Vec::new();
            reader.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"rest");
        });
    }

    #[test]
    fn limit_counts_the_newline() {
        smol::block_on(async {
            let line = b"{\"project\":\"p\",\"requester\":\"r\"}\n";
            let (mut peer, ours) = pair();
            peer.write_all(line).await.unwrap();
            assert!(read_handshake(ours, line.len(), Duration::from_secs(5))
                .await
                .is_ok());
            let (mut peer, ours) = pair();
            peer.write_all(line).await.unwrap();
            let e = read_handshake(ours, line.len() - 1, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert!(matches!(e, HandshakeFailure::TooLong(_)), "{}", e);
        });
    }

    #[test]
    fn endless_line_stops_at_the_limit() {
        smol::block_on(async {
            let (mut peer, ours) = pair();
            let writer = smol::spawn(async move {
                let junk = vec![b'x'; 1024];
                // Stops when the reader gives up and the socket closes.
                while peer.write_all(&junk).await.is_ok() {}
            });
            let e = read_handshake(ours, 10_000, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert_eq!(e.to_string(), "handshake longer than 10000 bytes");
            writer.await;
        });
    }

    #[test]
    fn silence_times_out() {
        smol::block_on(async {
            let (mut peer, ours) = pair();
            peer.write_all(b"{\"project\":").await.unwrap();
            let e = read_handshake(ours, 1024, Duration::from_millis(100))
                .await
                .unwrap_err();
            assert!(matches!(e, HandshakeFailure::TimedOut(_)), "{}", e);
        });
    }

    #[test]
    fn eof_and_invalid_lines_are_failures() {
        smol::block_on(async {
            let (peer, ours) = pair();
            drop(peer);
            let e = read_handshake(ours, 1024, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert!(matches!(e, HandshakeFailure::Probe), "{}", e);

            let (mut peer, ours) = pair();
            peer.write_all(b"{\"project\"").await.unwrap();
            drop(peer);
            let e = read_handshake(ours, 1024, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert!(matches!(e, HandshakeFailure::Closed), "{}", e);

            let (mut peer, ours) = pair();
            peer.write_all(b"{\"project\":\"p\"}\n").await.unwrap();
            let e = read_handshake(ours, 1024, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert_eq!(e.to_string(), "invalid handshake: 'requester' is missing");
        });
    }

    #[test]
    fn the_refusal_line_is_one_json_rpc_error_with_a_null_id() {
        let line = refusal_line("busy \"now\"\n");
        assert_eq!(
            String::from_utf8(line.clone()).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\
             \"message\":\"busy \\\"now\\\"\\n\"}}\n"
        );
        let value: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["error"]["message"], "busy \"now\"\n");
    }

    #[test]
    fn bind_error_texts_give_a_hint() {
        let e = BindError {
            endpoint: PathBuf::from("/tmp/x.sock"),
            source: io::Error::new(io::ErrorKind::AddrInUse, "in use"),
        };
        assert!(e.to_string().contains("another process is listening there"));
        assert!(e.to_string().contains("/tmp/x.sock"));
    }
}
