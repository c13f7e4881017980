//! Windows named pipes (`\\.\pipe\NAME`), served by [`PipeListener`]: the
//! server end on which an app accepts bridges, and on which [`Listener`]
//! (with its handshake reading) is built, so there is one implementation to
//! get right. The connection it hands out is the same pipe connection the
//! bridge uses (`endpoint/windows.rs`).
//!
//! [`Listener`]: super::Listener
//!
//! # Who gets in
//!
//! Unix has two gates, the socket file's mode and the peer's uid. A pipe has
//! one, and it is the stronger kind: its DACL grants access to our own user
//! only (see [`PipeListener`]), and the system checks it when the peer opens
//! the pipe, before anything reaches us. So every peer accept sees is ours;
//! `PIPE_REJECT_REMOTE_CLIENTS` keeps other machines out as well. The pipe
//! names our user as its owner too, which is what a bridge checks before it
//! trusts the pipe (see `endpoint/windows.rs`).
//!
//! # Never without a listening instance
//!
//! A pipe name exists while some instance of it does. If ours had none for a
//! moment, bridges would fail with "does not exist", and another local user
//! could create the name in the gap: a pipe created later without
//! `FILE_FLAG_FIRST_PIPE_INSTANCE` would then *join* that user's pipe, and
//! our clients would talk to them. So the listener always owns one listening
//! instance: the first is created with `FILE_FLAG_FIRST_PIPE_INSTANCE` by
//! [`bind`](PipeListener::bind) (the only moment it holds none), and an
//! instance that a client connected to is handed out only once its
//! replacement exists. While any instance of ours exists, nobody else can add
//! one: creating an instance of an existing pipe needs
//! `FILE_CREATE_PIPE_INSTANCE` access, which our DACL grants our user alone.
//!
//! A cancelled accept does not give the instance up either: the pool thread
//! that waits in `ConnectNamedPipe` only borrows it (holding the listener's
//! lock until its cancelled wait has finished), and the instance stays in
//! the listener, listening, for the next accept; a client that connected in
//! that moment is handed out by it (`ERROR_PIPE_CONNECTED`: "If a client
//! connects before the function is called, the function returns zero and
//! GetLastError returns ERROR_PIPE_CONNECTED. ... In this situation, there is
//! a good connection between client and server").
//!
//! # A bounded number of connections
//!
//! Each connection pins a thread of `blocking`'s pool for reading, and one
//! more while writing (see `endpoint/windows.rs`). The pool stops at 500
//! threads, and then every blocking call in the process waits, accepting
//! included: the host would stall for everyone. So at most a fifth of the
//! pool's threads in connections live at once (100 with the default pool;
//! `endpoint::pipe_connections_allowed`; a connection counts until both of
//! its halves are dropped). A client beyond that gets the protocol's
//! refusal line and the end of the stream at once, with a log line. The
//! line is written without a pool thread: an overlapped write of a few
//! bytes into the new instance's empty buffer completes at once, and one
//! that does not is cancelled, so accepting never waits for a client that
//! does not read.

//! # Binding again while connections live
//!
//! A pipe's name exists while any of its instances does, connected ones
//! included, so an app that drops its listener and binds again (a restart
//! within the process) would find its own name "in use", and a bridge
//! meanwhile finds every instance taken (busy, which it waits for, within
//! its connect timeout). So the listeners of this process remember their
//! names: binding a name whose listener is gone but whose connections of
//! ours live adds a new listening instance to our own pipe (no
//! `FILE_FLAG_FIRST_PIPE_INSTANCE`, which would fail), checks that the
//! instance's owner is our user (were ours all closed in between and the
//! name taken by someone else, we would have joined theirs: refused as in
//! use), and counts the old connections against the new listener's limit.
//! A bridge connected to an old connection reconnects to the new listener
//! once the app drops that connection. Another process (a restarted app)
//! never meets this: its predecessor's connections died with it.
//!
//! # Nothing to clean up, nothing stale
//!
//! A pipe exists while some handle to it is open, and vanishes with the
//! last one: a crashed app leaves nothing behind, and dropping the listener
//! frees the name for the next bind. Not at the very instant of the drop,
//! though: while an accept is pending, the waiting instance is closed by the
//! pool thread that waits on it, once the drop has stopped that wait, a
//! moment later; a bind in that moment fails. A live pipe of the same name,
//! another process's or a live listener's, makes `bind` fail with
//! `AddrInUse`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_COMMITMENT_LIMIT, ERROR_NONPAGED_SYSTEM_RESOURCES,
    ERROR_NOT_ENOUGH_MEMORY, ERROR_NOT_ENOUGH_QUOTA, ERROR_NO_SYSTEM_RESOURCES, ERROR_OUTOFMEMORY,
    ERROR_PAGED_SYSTEM_RESOURCES, ERROR_SEM_TIMEOUT, ERROR_TOO_MANY_OPEN_FILES,
};

use super::accept::Accepted;
use crate::endpoint::{pipe_connections_allowed, pipe_halves, pipe_name, PipeReader, PipeWriter};
use crate::ffi::windows::{
    self as win, has_code, Event, Overlapped, Pipe, SecurityDescriptor, SetOnDrop,
};
use crate::io::BUFFER_SIZE;

/// The reading half of a connection accepted on a pipe. Holds the
/// connection's place under the listener's limit (held, never read: its
/// drop gives the place back).
#[derive(Debug)]
pub(super) struct Reader(PipeReader, #[allow(dead_code)] Arc<Slot>);

/// The writing half of a connection accepted on a pipe. Holds the
/// connection's place under the listener's limit, as [`Reader`] does.
#[derive(Debug)]
pub(super) struct Writer(PipeWriter, #[allow(dead_code)] Arc<Slot>);

forward_async_read!(Reader);
forward_async_write!(Writer);

/// One live connection's place under the limit, given back when both halves
/// (which share it) are gone.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place among at most `max` live connections counted in `live`, or
    /// `None` if all are taken.
    fn take(live: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        if live.fetch_add(1, Ordering::SeqCst) >= max {
            live.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(live.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The pipe server, owned by the accept loop.
pub(super) struct Acceptor(PipeListener);

/// What must be released when the listener drops: nothing, since a pipe
/// goes away with its last handle.
#[derive(Debug)]
pub(super) struct SocketFile;

/// (Nothing to log while binding a pipe: there is no stale file to replace.)
pub(super) fn bind(path: &Path, _log: &super::LogSink) -> io::Result<(Acceptor, SocketFile)> {
    Ok((Acceptor(PipeListener::bind(path)?), SocketFile))
}

/// The most peers that may wait for their handshake at once: `most`
/// (handles are not counted against a small per-process limit here).
pub(super) fn pending_limit(most: usize) -> usize {
    most
}

/// Ready at once: a pipe's overlapped read needs its buffer up front.
pub(super) fn readable(
    _reader: &Reader,
) -> impl std::future::Future<Output = io::Result<()>> + Send + 'static {
    futures_lite::future::ready(Ok(()))
}

/// Whether the peer has sent something already: not asked here (the
/// listener never runs out of descriptors to make room for), so `false`.
pub(super) fn has_spoken(_reader: &Reader) -> bool {
    false
}

/// Completes once the peer has closed its end: pipes have no half-close,
/// so that is unambiguous (see `PipeReader::hangup`). A session stuck
/// writing to a command that stopped reading then ends all the same.
pub(super) fn hangup(reader: &Reader) -> impl std::future::Future<Output = ()> + Send + 'static {
    reader.0.hangup()
}

impl Acceptor {
    pub(super) async fn accept(&self) -> io::Result<Accepted> {
        match self.0.next_connection().await {
            // The client's pid as the system recorded it
            // (`GetNamedPipeClientProcessId`); no uid: Windows users are
            // SIDs, and the pipe's DACL already let in our user only.
            Ok(Some((reader, writer))) => {
                let peer = super::Peer {
                    pid: reader.0.client_process_id(),
                    uid: None,
                };
                Ok(Accepted::Peer(Box::new((reader, writer, peer))))
            }
            Ok(None) => Ok(Accepted::Refused(self.0.refusal())),
            Err(e) if is_transient(&e) => Ok(Accepted::Retry(e)),
            Err(e) => Err(e),
        }
    }
}

/// The server end of a named pipe: where an app accepts bridges on Windows,
/// one connection at a time, without reading any handshake ([`Listener`]
/// does that, on top of this).
///
/// [`Listener`]: super::Listener
///
/// Every instance is created for overlapped, full-duplex, byte-mode I/O, and
/// with `PIPE_REJECT_REMOTE_CLIENTS`, so only processes on this machine can
/// connect.
///
/// **Only our own user can open it.** Every instance is created with a
/// security descriptor whose DACL holds a single entry: full access for the
/// user this process runs as (the SID of the process token's user, not the
/// `OWNER RIGHTS` SID, which would follow the object's *owner*: for an
/// elevated process that is the Administrators group). The default
/// descriptor would instead grant *read* access to Everyone. Nobody else,
/// LocalSystem and administrators included, is granted anything, so the
/// system refuses their `CreateFileW` with `ERROR_ACCESS_DENIED` before we
/// ever see them. The DACL is protected: nothing inheritable is merged in.
/// The descriptor also names that user as the pipe's owner, which bridges
/// check. (Wine 8 stores the descriptor but does not enforce it.)
///
/// **A live pipe is never joined.** [`bind`](PipeListener::bind) first asks
/// whether a pipe of that name exists (`WaitNamedPipeW`, which does not
/// connect), then creates the first instance with
/// `FILE_FLAG_FIRST_PIPE_INSTANCE`, which on Windows closes the race between
/// the two; either way it fails with `AddrInUse`. (Wine 8 ignores the flag,
/// so under Wine only the first check holds.) There is nothing stale to
/// clean up: a pipe disappears with its last handle.
///
/// **The name is never left without an instance.** One instance always
/// listens for the next client, owned by the listener from `bind` to drop:
/// a client that arrives while the app is between two
/// [`accept`](PipeListener::accept)s, or while an accept is being cancelled,
/// is connected at once, and the next accept returns it. Further clients
/// find the pipe busy and wait (the bridge does, within its connect timeout)
/// until an accept readies another instance. Dropping the listener closes
/// the listening instance; connections already accepted live on.
///
/// **At most 100 connections at once** (a fifth of the threads of the pool
/// behind `smol::unblock`, 500 unless `BLOCKING_MAX_THREADS` says
/// otherwise; a connection lives until both of its halves are dropped):
/// each holds one of its threads, two while writing. A client beyond that
/// gets the refusal line and is disconnected at once, and the refusal is
/// logged on stderr; accept goes on waiting for the next one.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use futures_lite::io::{AsyncBufReadExt, BufReader};
/// use mcp_bridge::host::PipeListener;
///
/// smol::block_on(async {
///     let listener = PipeListener::bind(r"\\.\pipe\my-app-mcp")?;
///     let (reader, _writer) = listener.accept().await?;
///     let mut handshake = String::new();
///     BufReader::new(reader).read_line(&mut handshake).await?;
///     Ok(())
/// })
/// # }
/// ```
pub struct PipeListener {
    path: PathBuf,
    /// `path` as NUL-terminated UTF-16.
    name: Vec<u16>,
    /// What every instance is created with: access for our user only.
    security: SecurityDescriptor,
    /// The listening instance, always there. Locked for a whole accept, by
    /// the pool thread that waits in `ConnectNamedPipe` too, so a cancelled
    /// accept's wait has finished before the next accept uses the instance.
    listening: Arc<smol::lock::Mutex<Listening>>,
    /// Connections handed out and still alive.
    live: Arc<AtomicUsize>,
    /// The most of them at once: `endpoint::pipe_connections_allowed`, or
    /// less in tests.
    max_connections: usize,
    /// Alive while this listener is: tells [`OWN_PIPES`] that the name has
    /// a listener, so it is not joined.
    _mark: Arc<()>,
}

/// The pipes this process serves, by name: whether a listener of that name
/// lives, and its connection count, which every connection shares (so it
/// lives while any connection does). Lets a listener bind a name again
/// while connections of an earlier one live (see the module docs).
static OWN_PIPES: std::sync::Mutex<Vec<OwnPipe>> = std::sync::Mutex::new(Vec::new());

struct OwnPipe {
    /// The pipe's name, ASCII-lowercased (pipe names ignore case).
    key: Vec<u16>,
    live: std::sync::Weak<AtomicUsize>,
    listener: std::sync::Weak<()>,
}

fn registry_key(name: &[u16]) -> Vec<u16> {
    name.iter()
        .map(|&c| {
            if (u16::from(b'A')..=u16::from(b'Z')).contains(&c) {
                c + 32
            } else {
                c
            }
        })
        .collect()
}

/// A poisoned lock only means a panic elsewhere; the data is still sound.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The instance clients connect to next, and the `OVERLAPPED` its
/// `ConnectNamedPipe` runs with.
struct Listening {
    pipe: Pipe,
    op: Overlapped,
}

impl PipeListener {
    /// Creates the pipe `path`, which must look like `\\.\pipe\NAME`,
    /// reachable by this process's user only.
    ///
    /// # Errors
    ///
    /// `AddrInUse` if a pipe of that name already exists (another process,
    /// or another listener of ours, serves it); `InvalidInput` for a name
    /// that is not a pipe name; otherwise the OS error.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<PipeListener> {
        PipeListener::with_limit(path.as_ref(), pipe_connections_allowed())
    }

    /// [`bind`](PipeListener::bind), with at most `max_connections` live
    /// connections.
    fn with_limit(path: &Path, max_connections: usize) -> io::Result<PipeListener> {
        let name = pipe_name(path)?;
        // Our own connections from an earlier listener of this name, if
        // they still live and that listener does not (see "Binding again
        // while connections live").
        let mut registry = lock(&OWN_PIPES);
        registry.retain(|own| own.live.strong_count() > 0);
        let key = registry_key(&name);
        let inherited = registry
            .iter()
            .find(|own| own.key == key && own.listener.strong_count() == 0)
            .and_then(|own| own.live.upgrade());
        if inherited.is_none() && pipe_exists(&name)? {
            return Err(pipe_in_use());
        }
        let security = SecurityDescriptor::owner_only()?;
        // Without live instances of ours, the listener holds none yet: only
        // the first-instance flag makes sure the pipe we create is ours
        // alone. With them, we add an instance to our own pipe, and check
        // that it is ours (its owner) in case ours all closed meanwhile and
        // someone else created the name.
        let first = inherited.is_none();
        let listening = match Pipe::create(&name, first, BUFFER_SIZE as u32, &security) {
            // What FILE_FLAG_FIRST_PIPE_INSTANCE says when the pipe exists:
            // someone created it since we looked.
            Err(e) if has_code(&e, ERROR_ACCESS_DENIED) && first => return Err(pipe_in_use()),
            other => other?,
        };
        if !first && listening.owner_sid()? != Some(win::current_user_sid()?) {
            return Err(pipe_in_use());
        }
        let live = inherited.unwrap_or_else(|| Arc::new(AtomicUsize::new(0)));
        let mark = Arc::new(());
        registry.retain(|own| own.key != key);
        registry.push(OwnPipe {
            key,
            live: Arc::downgrade(&live),
            listener: Arc::downgrade(&mark),
        });
        Ok(PipeListener {
            path: path.to_path_buf(),
            name,
            security,
            listening: Arc::new(smol::lock::Mutex::new(Listening {
                pipe: listening,
                op: Overlapped::new()?,
            })),
            live,
            max_connections,
            _mark: mark,
        })
    }

    /// The pipe's name, as given to [`bind`](PipeListener::bind).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next client and returns the two halves of its
    /// connection. Dropping both halves closes it; the client then reads the
    /// end of the stream. Cancelling the returned future (dropping it) stops
    /// the wait, and the pipe goes on listening.
    pub async fn accept(&self) -> io::Result<(super::Reader, super::Writer)> {
        loop {
            match self.next_connection().await? {
                Some((reader, writer)) => {
                    let reader = super::Reader {
                        early: Vec::new(),
                        early_pos: 0,
                        inner: reader,
                    };
                    return Ok((reader, super::Writer(writer)));
                }
                None => super::log(format_args!("refused {}", self.refusal())),
            }
        }
    }

    /// The next client's connection, or `None` if it was refused (and
    /// disconnected) because the most connections allowed are open.
    async fn next_connection(&self) -> io::Result<Option<(Reader, Writer)>> {
        let pipe = self.next_client().await?;
        let slot = match Slot::take(&self.live, self.max_connections) {
            Some(slot) => Arc::new(slot),
            None => {
                refuse_at_once(&pipe, &self.refusal_reason());
                // Closing our end then disconnects the client: after the
                // line, its reads end.
                return Ok(None);
            }
        };
        let (reader, writer) = pipe_halves(pipe)?;
        Ok(Some((Reader(reader, slot.clone()), Writer(writer, slot))))
    }

    /// What a client refused for the limit is told.
    fn refusal_reason(&self) -> String {
        format!(
            "the app is busy: {} connections are open, the most it serves at once; try again later",
            self.max_connections
        )
    }

    /// What the log says about a client refused for the limit.
    fn refusal(&self) -> String {
        format!(
            "a connection: {} connections are open, the most this host serves at once",
            self.max_connections
        )
    }

    /// Waits until a client is connected to the listening instance, puts a
    /// new listening instance in its place, and returns the connected one.
    /// If the new instance cannot be created, the connected one stays where
    /// it is and the error is returned: the name keeps its instance, and the
    /// next call hands the same client out at once.
    async fn next_client(&self) -> io::Result<Pipe> {
        let listening = self.listening.lock_arc().await;
        let stop = Arc::new(Event::new()?);
        // Dropping this future sets `stop`: the pool thread cancels its wait
        // and then lets go of the lock, the instance still in its place.
        let _cancel_on_drop = SetOnDrop(stop.clone());
        let (connected, mut listening) = smol::unblock(move || {
            let mut listening = listening;
            let Listening { pipe, op } = &mut *listening;
            (pipe.connect(op, &stop), listening)
        })
        .await;
        connected?;
        let next = Pipe::create(&self.name, false, BUFFER_SIZE as u32, &self.security)?;
        Ok(std::mem::replace(&mut listening.pipe, next))
    }
}

impl fmt::Debug for PipeListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipeListener")
            .field("path", &self.path)
            .field("live_connections", &self.live.load(Ordering::SeqCst))
            .finish()
    }
}

/// Writes the protocol's refusal line for `reason` to the client of `pipe`
/// if the pipe takes it at once (the module docs say why it does), without
/// a pool thread; a write that would wait is cancelled. Best effort: the
/// client is disconnected either way.
fn refuse_at_once(pipe: &Pipe, reason: &str) {
    let line = super::refusal::refusal_line(reason);
    let (stop, op) = match (Event::new(), Overlapped::new()) {
        (Ok(stop), Ok(op)) => (stop, op),
        _ => return,
    };
    // Set before the write: `write` returns as soon as the write has
    // completed, or cancels it if it is still pending.
    stop.set();
    let mut op = op;
    let _ = pipe.write(&mut op, &line, &stop);
}

/// Whether a pipe called `name` (NUL-terminated UTF-16) exists, with an
/// instance free or not. Asks without connecting, so a live server sees
/// nothing.
fn pipe_exists(name: &[u16]) -> io::Result<bool> {
    // The shortest wait there is: we only want the answer.
    match win::wait_named_pipe(name, Duration::from_millis(1)) {
        Ok(()) => Ok(true),
        // Every instance busy: it exists.
        Err(e) if has_code(&e, ERROR_SEM_TIMEOUT) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn pipe_in_use() -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        "a pipe of this name already exists",
    )
}

/// Accept errors that say nothing about the pipe itself: the system is out
/// of memory, handles or quota for the moment.
fn is_transient(e: &io::Error) -> bool {
    let transient = [
        ERROR_TOO_MANY_OPEN_FILES,
        ERROR_NOT_ENOUGH_MEMORY,
        ERROR_OUTOFMEMORY,
        ERROR_NO_SYSTEM_RESOURCES,
        ERROR_NONPAGED_SYSTEM_RESOURCES,
        ERROR_PAGED_SYSTEM_RESOURCES,
        ERROR_COMMITMENT_LIMIT,
        ERROR_NOT_ENOUGH_QUOTA,
    ];
    match e.raw_os_error() {
        Some(code) => transient.iter().any(|&t| t as i32 == code),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
    use std::sync::atomic::AtomicUsize;

    use crate::endpoint;

    /// A budget no healthy run comes near; only a hang exceeds it.
    const GENEROUS: Duration = Duration::from_secs(30);

    fn unique_pipe(tag: &str) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        PathBuf::from(format!(
            r"\\.\pipe\mcp-bridge-host-unit-{}-{}-{}",
            std::process::id(),
            tag,
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Runs `test`, failing instead of hanging if it takes [`GENEROUS`].
    fn run<T>(test: impl std::future::Future<Output = T>) -> T {
        smol::block_on(crate::wait::timeout(GENEROUS, test)).expect("the test hung")
    }

    #[test]
    fn transient_errors() {
        let code = |c: u32| io::Error::from_raw_os_error(c as i32);
        assert!(is_transient(&code(ERROR_NO_SYSTEM_RESOURCES)));
        assert!(is_transient(&code(ERROR_TOO_MANY_OPEN_FILES)));
        assert!(!is_transient(&code(ERROR_ACCESS_DENIED)));
        assert!(!is_transient(&io::Error::new(io::ErrorKind::Other, "x")));
    }

    /// The DACL a peer meets: one entry, full access for our own user; and
    /// the owner a bridge checks: our own user. Only the descriptor can be
    /// checked under Wine: Wine 8 keeps it but does not enforce it (in a
    /// trial, a pipe whose DACL admitted only LocalSystem opened fine), so
    /// that Windows refuses other users rests on Windows' documented access
    /// check, not on this test.
    #[test]
    fn pipes_admit_only_our_user_and_name_it_the_owner() {
        let sid = win::current_user_sid().unwrap();
        assert!(sid.starts_with("S-1-"), "{}", sid);
        let path = unique_pipe("dacl");
        let _listener = PipeListener::bind(&path).unwrap();
        let client = Pipe::open(&path).unwrap();
        let dacl = client.dacl_sddl().unwrap();
        // GA as created; FA if the system mapped the generic right to the
        // pipe's specific rights.
        let expected = [
            format!("D:P(A;;GA;;;{})", sid),
            format!("D:P(A;;FA;;;{})", sid),
        ];
        assert!(expected.contains(&dacl), "{} (our SID {})", dacl, sid);
        assert_eq!(client.owner_sid().unwrap(), Some(sid));
    }

    /// A listener dropped while its connection lives: the name binds
    /// again, the old connection still works, a new client reaches the new
    /// listener, and the old connection counts against its limit.
    #[test]
    fn a_name_binds_again_while_old_connections_live() {
        let path = unique_pipe("rebind");
        let first = PipeListener::with_limit(&path, 2).unwrap();
        run(async {
            let (mut old_client_reader, mut old_client_writer) =
                endpoint::connect(&path, GENEROUS).await.unwrap();
            let (mut old_reader, mut old_writer) = first.next_connection().await.unwrap().unwrap();
            drop(first);
            let second = loop {
                // A moment after the drop, as for any bind (module docs).
                match PipeListener::with_limit(&path, 2) {
                    Ok(listener) => break listener,
                    Err(e) => {
                        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{}", e);
                        async_io::Timer::after(Duration::from_millis(10)).await;
                    }
                }
            };
            assert_eq!(second.live.load(Ordering::SeqCst), 1, "the old one counts");
            assert!(
                PipeListener::bind(&path).is_err(),
                "a live listener is not joined"
            );

            old_client_writer.write_all(b"old").await.unwrap();
            old_client_writer.flush().await.unwrap();
            let mut got = [0u8; 3];
            old_reader.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"old");
            old_writer.write_all(b"still").await.unwrap();
            old_writer.flush().await.unwrap();
            let mut got = [0u8; 5];
            old_client_reader.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"still");

            let (_new_client_reader, mut new_client_writer) =
                endpoint::connect(&path, GENEROUS).await.unwrap();
            let (mut new_reader, _new_writer) = second.next_connection().await.unwrap().unwrap();
            new_client_writer.write_all(b"new").await.unwrap();
            new_client_writer.flush().await.unwrap();
            let mut got = [0u8; 3];
            new_reader.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"new");
        });
    }

    #[test]
    fn a_live_pipe_is_not_joined() {
        let path = unique_pipe("live");
        let _listener = PipeListener::bind(&path).unwrap();
        let e = PipeListener::bind(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{}", e);
    }

    /// With the limit reached, the next client gets the refusal line and is
    /// disconnected at once (it reads the line, then the end of the stream)
    /// instead of waiting for a pool thread; once a connection is dropped,
    /// its place is free again. The limit is 1 here.
    #[test]
    fn connections_beyond_the_limit_are_refused_at_once() {
        let path = unique_pipe("limit");
        let listener = PipeListener::with_limit(&path, 1).unwrap();
        run(async {
            let _first_client = endpoint::connect(&path, GENEROUS).await.unwrap();
            let first = listener.next_connection().await.unwrap();
            assert!(first.is_some(), "the first connection is under the limit");

            let (mut refused, _refused_writer) = endpoint::connect(&path, GENEROUS).await.unwrap();
            assert!(listener.next_connection().await.unwrap().is_none());
            let mut rest = Vec::new();
            refused.read_to_end(&mut rest).await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&rest),
                String::from_utf8_lossy(&super::super::refusal::refusal_line(
                    &listener.refusal_reason()
                ))
            );
            assert!(listener.refusal_reason().contains("1 connections are open"));
            assert!(listener.refusal().contains("1 connections are open"));

            drop(first);
            let (_third_reader, mut third_writer) =
                endpoint::connect(&path, GENEROUS).await.unwrap();
            let (mut reader, _writer) = listener
                .next_connection()
                .await
                .unwrap()
                .expect("a place is free again");
            third_writer.write_all(b"hello").await.unwrap();
            third_writer.flush().await.unwrap();
            let mut got = [0u8; 5];
            reader.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"hello");
        });
    }
}
