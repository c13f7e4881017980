//! Windows named pipes (`\\.\pipe\NAME`): the client end the bridge
//! connects with, and the pipe connection itself (its two halves), which the
//! host's `PipeListener` (in `host/windows.rs`) hands out too.
//!
//! # Full duplex without deadlock
//!
//! The relay waits for the app's next message while it sends the client's
//! next request, on the same pipe. A handle opened without
//! `FILE_FLAG_OVERLAPPED` is a *synchronous* handle, and Windows serializes
//! all I/O on it: a `WriteFile` waits until the pending `ReadFile` is done.
//! A bridge waiting for a reply could then never send the request that
//! produces it. The `CreateFileW` documentation says so for
//! `FILE_FLAG_OVERLAPPED`: "If this flag is specified, the file can be used
//! for simultaneous read and write operations. If this flag is not
//! specified, then I/O operations are serialized, even if the calls to the
//! read and write functions specify an OVERLAPPED structure." (See also
//! Raymond Chen, "All I/O on a synchronous file handle is serialized; that's
//! why it's called a synchronous file handle", The Old New Thing,
//! 2013-08-22.) Wine does *not* serialize, so a test under Wine cannot catch
//! this mistake: the design has to rule it out.
//!
//! So each connection is one handle opened with `FILE_FLAG_OVERLAPPED`, and
//! each direction has its own `OVERLAPPED` structure, its own completion
//! event, and its own thread from `blocking`'s pool (through
//! [`Unblock`]). The reading thread issues an overlapped `ReadFile` and
//! waits for *its* event; the writing thread issues an overlapped
//! `WriteFile` and waits for *its* event. Neither waits on the handle
//! itself, and on an overlapped handle neither operation waits for the
//! other, so a pending read never delays a write. (async-io's reactor cannot
//! help here: on Windows it watches sockets only. One `Unblock<File>` cannot
//! either: it runs one operation at a time.) Each direction buffers at most
//! [`BUFFER_SIZE`] bytes, the relay's own bound, not `Unblock`'s 8 MiB
//! default.
//!
//! The price is threads: a connection pins one pool thread for as long as
//! its reader waits for data (nearly always), and a second one while a write
//! is under way. `blocking`'s pool stops at 500 threads ("The default number
//! of threads (set to 500) can be altered by setting BLOCKING_MAX_THREADS",
//! its crate docs), after which every other blocking call of the process
//! (accepting, waiting for a busy pipe, stdio) queues behind them. A bridge
//! has one connection; the host side caps its connections well below the
//! pool: [`pipe_connections_allowed`], a fifth of it (see `host/windows.rs`),
//! and `serve`, whose connections each hold a command's pipes too, fewer
//! ([`serve_connections_allowed`]).
//!
//! Dropping a half sets its `stop` event: its thread cancels the pending
//! operation (`CancelIoEx`) and waits for it to finish before letting go of
//! the buffer. The handle closes when both halves are gone, so the peer sees
//! the end of the stream.
//!
//! # What ends a stream
//!
//! Only the errors that say the other end is gone (`ERROR_BROKEN_PIPE`,
//! `ERROR_PIPE_NOT_CONNECTED`, `ERROR_NO_DATA`). A read that completes with
//! zero bytes does not: on a pipe it means the other end wrote zero bytes,
//! which message-oriented servers (.NET's, WCF's) do. ReadFile's
//! documentation: "If the lpNumberOfBytesRead parameter is zero when
//! ReadFile returns TRUE on a pipe, the other end of the pipe called the
//! WriteFile function with nNumberOfBytesToWrite set to zero." Such a read
//! is simply issued again. A read into an empty buffer is answered with 0 at
//! once instead, without a `ReadFile`, which would wait for data that the
//! caller has no room for.
//!
//! # No half-close
//!
//! Named pipes have no `shutdown(SHUT_WR)`: the only end-of-stream a pipe can
//! send is closing the handle, which would also cut off the replies still on
//! their way. So closing a [`Writer`] only flushes it; the app sees nothing.
//! When the bridge's stdin ends, the relay keeps passing replies to stdout
//! for the drain grace ([`DRAIN_GRACE`](crate::bridge::DRAIN_GRACE)); then the
//! bridge exits, the handle closes, and the app's next read fails with
//! `ERROR_BROKEN_PIPE` (its end of stream). A reply in flight within the grace
//! reaches the client, as on Unix; unlike Unix, the app cannot use our EOF as
//! its cue to close, so the bridge takes the whole grace to exit unless the
//! app closes first.
//!
//! # Connecting
//!
//! A pipe whose instances are all taken answers `ERROR_PIPE_BUSY`: we wait
//! with `WaitNamedPipeW` (on a pool thread, since it blocks) and try again.
//! Each wait is given only the time left before the caller's deadline, so no
//! pool thread stays blocked after the bridge has given up. A pipe that does
//! not exist fails at once with `NotFound`, unless we saw it busy before:
//! a single-instance server closes its instance and creates the next one,
//! and in between the name does not exist ("If no instances of the specified
//! named pipe exist, the WaitNamedPipe function returns immediately,
//! regardless of the time-out value", and "A subsequent CreateFile call to
//! the pipe can fail, because the instance was closed by the server or
//! opened by another client"); so after a busy answer, "not found" is
//! retried until the deadline. The pipe is opened with `SECURITY_SQOS_PRESENT
//! | SECURITY_IDENTIFICATION`, so the server may learn who we are but cannot
//! impersonate us.
//!
//! # Who serves the pipe
//!
//! Pipe names are one namespace for the whole machine, so anyone could have
//! created the name first. Two checks run on our connected handle before any
//! byte is sent, and both must pass.
//!
//! **The pipe's owner** ([`server_principal`]): the SID that whoever created
//! the name's first instance made the owner of its security descriptor.
//! [`trusted_by_default`] accepts only our own user. The owner is what the
//! creator's token allows: the `TOKEN_OWNER` rule, "The Owner must be a
//! legally formed SID and must match one of the user or group SIDs already in
//! the token. If it is a group SID, the Owner must match a group SID in the
//! token, where the attributes on the group must include SE_GROUP_OWNER and
//! must not include SE_GROUP_USE_FOR_DENY_ONLY" (ntifs.h, `TOKEN_OWNER`,
//! Remarks). Another user's token does not hold our SID, so it cannot make us
//! the owner; only a process with `SE_RESTORE_NAME` enabled can name any SID
//! as the owner (Microsoft's "Owner of a New Object"), which ordinary users
//! lack. A pipe without an owner is refused.
//!
//! **The instance's server process** ([`check_instance`]). Windows keeps
//! one security descriptor per pipe *name*, set by the creator of the first
//! instance; anyone its DACL lets write may add instances (`FILE_GENERIC_WRITE`
//! includes `FILE_CREATE_PIPE_INSTANCE`), and a client may land on theirs,
//! which the owner check would pass. So we also ask which process serves
//! *our* instance (`GetNamedPipeServerProcessId`: "Retrieves the server
//! process identifier for the specified named pipe"), open it with
//! `PROCESS_QUERY_LIMITED_INFORMATION` (what `OpenProcessToken` needs: "The
//! handle must have PROCESS_QUERY_LIMITED_INFORMATION access"), and read its
//! token: its user must be one we trust (our own, or the one given with
//! `--trust-server-user`), and its integrity level at least ours, since a
//! process of our own user at Low integrity (a sandboxed renderer) can add an
//! instance too. A process or token we cannot open is refused, with the
//! reason. The id is read while we are connected to the instance, so the
//! server is alive (its instance would be broken otherwise), and the process
//! is checked to be still running once opened: the handle then pins that
//! process, and an id reused in between cannot pass for it.

use std::future::Future;
use std::io::{self, Read, Write};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::io::{AsyncRead, AsyncWrite};
use smol::Unblock;
use windows_sys::Win32::Foundation::{
    ERROR_BROKEN_PIPE, ERROR_NO_DATA, ERROR_PIPE_BUSY, ERROR_PIPE_NOT_CONNECTED, ERROR_SEM_TIMEOUT,
};

use crate::ffi::windows::{self as win, has_code, Event, Overlapped, Pipe, SetOnDrop};
use crate::io::BUFFER_SIZE;

pub(super) type Reader = PipeReader;
pub(super) type Writer = PipeWriter;

/// What every pipe name starts with (compared without regard to case).
const PIPE_PREFIX: &str = r"\\.\pipe\";

/// Connects to the pipe `path` within `time_left`. Busy instances are
/// waited for and a pipe that vanishes after a busy answer is retried (see
/// the module docs), so this never returns `WouldBlock`; it returns
/// `TimedOut` when the time runs out while the pipe is busy.
pub(super) async fn connect(path: &Path, time_left: Duration) -> io::Result<(Reader, Writer)> {
    let name = pipe_name(path)?;
    let deadline = Instant::now() + time_left;
    let pipe = open_within(
        deadline,
        || Pipe::open(path),
        |left| {
            let name = name.clone();
            smol::unblock(move || win::wait_named_pipe(&name, left))
        },
    )
    .await?;
    pipe_halves(pipe)
}

/// Opens a pipe with `open` until it succeeds, fails for good, or `deadline`
/// passes. While it is busy, `wait(time left)` waits for a free instance
/// (`WaitNamedPipeW`). Once it has been seen busy, "not found" means the
/// server is between two instances, and is retried after [`BUSY_RETRY`];
/// before that, it is final. Generic over the steps so that tests can drive
/// each case.
///
/// [`BUSY_RETRY`]: super::BUSY_RETRY
async fn open_within<P, F>(
    deadline: Instant,
    mut open: impl FnMut() -> io::Result<P>,
    mut wait: impl FnMut(Duration) -> F,
) -> io::Result<P>
where
    F: Future<Output = io::Result<()>>,
{
    let mut seen_busy = false;
    loop {
        let e = match open() {
            Ok(pipe) => return Ok(pipe),
            Err(e) => e,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if has_code(&e, ERROR_PIPE_BUSY) {
            seen_busy = true;
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            match wait(left).await {
                // Free now; another client may still beat us to it.
                Ok(()) => continue,
                Err(e) if has_code(&e, ERROR_SEM_TIMEOUT) => {
                    return Err(io::ErrorKind::TimedOut.into())
                }
                // Gone while we waited: between two instances.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        } else if !(seen_busy && e.kind() == io::ErrorKind::NotFound) || left.is_zero() {
            return Err(e);
        }
        Timer::after(super::BUSY_RETRY.min(left)).await;
    }
}

/// The reading half of a pipe connection.
#[derive(Debug)]
pub(crate) struct PipeReader {
    io: Unblock<Half>,
    /// The handle, for questions about the pipe itself (its owner).
    pipe: Arc<Pipe>,
    _stop: SetOnDrop,
}

impl PipeReader {
    /// The process at the client end, where this is a server's connection
    /// (the host's `Connection::peer`).
    #[cfg_attr(not(feature = "host"), allow(dead_code))]
    pub(crate) fn client_process_id(&self) -> Option<u32> {
        self.pipe.client_process_id().ok()
    }
}

/// The writing half of a pipe connection. Closing it only flushes (see the
/// module docs: pipes have no half-close).
#[derive(Debug)]
pub(crate) struct PipeWriter {
    io: Unblock<Half>,
    _stop: SetOnDrop,
}

/// How often a connection's far end is asked whether it has closed (see
/// [`PipeReader::hangup`]).
#[cfg_attr(not(feature = "host"), allow(dead_code))] // host and serve only
const HANGUP_POLL: Duration = Duration::from_millis(100);

impl PipeReader {
    /// Completes once the other end has closed the connection, noticed
    /// without reading: pipes have no half-close, so a closed end is the
    /// whole end. The pipe is asked every [`HANGUP_POLL`] on a timer, not a
    /// thread: its state (`FILE_PIPE_CLOSING_STATE`, which Windows reports
    /// even while bytes the peer wrote wait unread), and failing that,
    /// whether a peek fails with a hang-up error (what Wine reports, once
    /// nothing is left unread). Never completes if the pipe cannot be
    /// asked.
    #[cfg_attr(not(feature = "host"), allow(dead_code))] // host and serve only
    pub(crate) fn hangup(&self) -> impl Future<Output = ()> + Send + 'static {
        let pipe = self.pipe.clone();
        async move {
            loop {
                match peer_closed(&pipe) {
                    Some(true) => return,
                    Some(false) => {}
                    None => futures_lite::future::pending::<()>().await,
                }
                Timer::after(HANGUP_POLL).await;
            }
        }
    }
}

/// Whether the other end of `pipe` has closed; `None` if the pipe cannot
/// tell.
fn peer_closed(pipe: &Pipe) -> Option<bool> {
    match win::other_end_closed(pipe.handle()) {
        Ok(Some(closed)) => return Some(closed),
        Ok(None) => {}
        Err(_) => return None,
    }
    match win::bytes_waiting(pipe.handle()) {
        Ok(_) => Some(false),
        Err(e) if is_hangup(&e) => Some(true),
        Err(_) => None,
    }
}

/// Splits a connected pipe (either end) into its two directions, each with
/// its own `OVERLAPPED`, event and pool thread.
pub(crate) fn pipe_halves(pipe: Pipe) -> io::Result<(PipeReader, PipeWriter)> {
    let pipe = Arc::new(pipe);
    let (read_half, read_stop) = Half::new(pipe.clone())?;
    let (write_half, write_stop) = Half::new(pipe.clone())?;
    Ok((
        PipeReader {
            io: Unblock::with_capacity(BUFFER_SIZE, read_half),
            pipe,
            _stop: read_stop,
        },
        PipeWriter {
            io: Unblock::with_capacity(BUFFER_SIZE, write_half),
            _stop: write_stop,
        },
    ))
}

/// One direction of a pipe, used with blocking calls from a pool thread.
#[derive(Debug)]
struct Half {
    pipe: Arc<Pipe>,
    op: Overlapped,
    stop: Arc<Event>,
}

impl Half {
    fn new(pipe: Arc<Pipe>) -> io::Result<(Half, SetOnDrop)> {
        let stop = Arc::new(Event::new()?);
        let half = Half {
            pipe,
            op: Overlapped::new()?,
            stop: stop.clone(),
        };
        Ok((half, SetOnDrop(stop)))
    }
}

impl Read for Half {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Half { pipe, op, stop } = self;
        read_past_empty_writes(buf, |buf| pipe.read(op, buf, stop))
    }
}

/// Reads with `read_once` until it brings bytes or the stream ends: a
/// zero-byte completion is the other end's zero-byte write, not the end
/// (see the module docs), so it is read again; the hang-up errors are the
/// end, `Ok(0)`. An empty `buf` gets `Ok(0)` without a read.
fn read_past_empty_writes(
    buf: &mut [u8],
    mut read_once: impl FnMut(&mut [u8]) -> io::Result<usize>,
) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    loop {
        match read_once(buf) {
            Ok(0) => continue,
            Err(e) if is_hangup(&e) => return Ok(0),
            other => return other,
        }
    }
}

impl Write for Half {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.pipe.write(&mut self.op, buf, &self.stop).map_err(|e| {
            if is_hangup(&e) {
                io::Error::new(io::ErrorKind::BrokenPipe, e)
            } else {
                e
            }
        })
    }

    /// Nothing to do: a completed `WriteFile` has handed its bytes to the
    /// pipe. (`FlushFileBuffers` would wait for the peer to read them all.)
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsyncRead for PipeReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Flushes, and keeps the pipe open for the replies still to come.
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

/// The most threads `blocking`'s pool runs, as it reads them:
/// `BLOCKING_MAX_THREADS` if set to a number (held to 1..=10000), else 500.
#[cfg_attr(not(feature = "host"), allow(dead_code))] // host and serve only
pub(crate) fn pool_threads() -> usize {
    std::env::var("BLOCKING_MAX_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(500, |n| n.clamp(1, 10_000))
}

/// The most pipe connections a host keeps open at once: a fifth of the
/// pool, since each may pin two of its threads (a read always, a write while
/// the peer does not read). 100 with the default pool.
#[cfg_attr(not(feature = "host"), allow(dead_code))] // host and serve only
pub(crate) fn pipe_connections_allowed() -> usize {
    (pool_threads() / 5).max(1)
}

/// The most connections `serve` serves at once: nine tenths of
/// [`pipe_connections_allowed`], the rest left for peers still sending
/// their handshake and peers being refused (so a refusal is a line, not a
/// cut). Each one served pins up to five threads: its pipe's two, and the
/// command's stdout and stderr readers and stdin writer (async-process
/// drives a child's pipes from the pool on Windows). At the limit, with
/// every other pipe connection pinning two, that is 94% of the pool, the
/// rest left for accepting, stdio and the log: 90 with the default pool
/// (450 + 20 threads of 500).
#[cfg_attr(not(feature = "host"), allow(dead_code))] // host and serve only
pub(crate) fn serve_connections_allowed() -> usize {
    (pipe_connections_allowed() * 9 / 10).max(1)
}

/// Who runs a server or a bridge: a user's SID in its canonical string form,
/// `S-1-5-21-...`, as the system writes it, so equal SIDs are equal strings.
// Called by the trust check of `endpoint::connect` (issue 14); until that
// lands, only by the tests.
pub(super) type Principal = String;

/// The id of the process serving our pipe instance (see
/// [`super::instance`]).
pub(super) fn instance(_name: &Path, reader: &Reader) -> Option<u64> {
    reader.pipe.server_process_id().ok().map(u64::from)
}

/// Who created the pipe `reader` is connected to: its owner SID (see the
/// module docs for why the owner). A pipe without an owner is an error, so
/// it is refused like a foreign one.
pub(super) fn server_principal(reader: &Reader) -> io::Result<Principal> {
    owner_required(reader.pipe.owner_sid()?)
}

/// Turns "no owner" into a refusal.
fn owner_required(owner: Option<String>) -> io::Result<Principal> {
    owner.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the pipe names no owner, so who serves it is unknown",
        )
    })
}

/// Why the process serving our pipe instance is not trusted (see
/// [`check_instance`]).
#[derive(Debug)]
pub(super) enum InstanceRefusal {
    /// Who runs it could not be told: the error says why.
    Unknown(io::Error),
    /// It runs as someone we do not trust, or below our integrity level.
    Foreign { server: String, me: String },
}

/// The per-instance check of the module docs: the process that serves the
/// instance `reader` is connected to runs as one of `trusted` (SIDs), at
/// an integrity level at least ours.
pub(super) fn check_instance(
    reader: &Reader,
    trusted: &[&Principal],
) -> Result<(), InstanceRefusal> {
    match examine_instance(reader, trusted) {
        // The server left while we asked (say, an app restarting, whose
        // old listening instance we reached as it closed): its process is
        // gone or the pipe no longer names one. Nothing written to this
        // handle can reach anyone any more, and the session sees the
        // hang-up at its first write and reconnects, as before this check.
        Err(_) if peer_closed(&reader.pipe) == Some(true) => Ok(()),
        other => other,
    }
}

fn examine_instance(reader: &Reader, trusted: &[&Principal]) -> Result<(), InstanceRefusal> {
    let unknown = |pid: Option<u32>, step: &'static str, source: io::Error| {
        InstanceRefusal::Unknown(io::Error::new(
            source.kind(),
            InstanceError { pid, step, source },
        ))
    };
    let pid = reader
        .pipe
        .server_process_id()
        .map_err(|e| unknown(None, "ask the pipe which process serves it", e))?;
    let process =
        win::Process::open(pid).map_err(|e| unknown(Some(pid), "open the server process", e))?;
    let server = process
        .token_facts()
        .map_err(|e| unknown(Some(pid), "read the server process's token", e))?;
    let running = process
        .is_running()
        .map_err(|e| unknown(Some(pid), "see whether the server process runs", e))?;
    if !running {
        let gone = io::Error::new(io::ErrorKind::NotFound, "it has exited");
        return Err(unknown(Some(pid), "check the server process", gone));
    }
    let me = win::own_token_facts().map_err(|e| unknown(None, "read our own token", e))?;
    instance_verdict(pid, &server, &me, trusted)
}

/// The verdict of [`check_instance`] on what it read, apart so that tests
/// can give it what Wine (one user, one integrity level) cannot stage.
fn instance_verdict(
    pid: u32,
    server: &win::TokenFacts,
    me: &win::TokenFacts,
    trusted: &[&Principal],
) -> Result<(), InstanceRefusal> {
    let user_trusted = trusted.iter().any(|&t| *t == server.user);
    if user_trusted && server.integrity >= me.integrity {
        return Ok(());
    }
    Err(InstanceRefusal::Foreign {
        server: format!(
            "process {} of {} at {} integrity",
            pid,
            server.user,
            integrity_name(server.integrity)
        ),
        me: format!("{} at {} integrity", me.user, integrity_name(me.integrity)),
    })
}

/// How an integrity level (the RID of a mandatory label) is named.
fn integrity_name(rid: u32) -> String {
    match rid {
        0 => "untrusted".to_string(),
        0x1000 => "low".to_string(),
        0x2000 => "medium".to_string(),
        0x2100 => "medium-plus".to_string(),
        0x3000 => "high".to_string(),
        0x4000 => "system".to_string(),
        other => format!("0x{:x}", other),
    }
}

/// A step of [`check_instance`] that failed. Display says which step;
/// `source()` is the OS error.
#[derive(Debug)]
struct InstanceError {
    pid: Option<u32>,
    step: &'static str,
    source: io::Error,
}

impl std::fmt::Display for InstanceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "cannot {} (process {})", self.step, pid),
            None => write!(f, "cannot {}", self.step),
        }
    }
}

impl std::error::Error for InstanceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The user this process runs as: its token's user SID.
pub(super) fn own_principal() -> io::Result<Principal> {
    win::current_user_sid()
}

/// Reads a SID given by the user (for an option naming the one other
/// account to trust): the `S-1-...` form only, checked and canonicalised by
/// the system. SDDL abbreviations such as `SY` are refused, so what is
/// written is what is compared.
pub(super) fn parse_principal(text: &str) -> Result<Principal, String> {
    let invalid = || format!("'{}' is not a SID (S-1-5-21-...)", text);
    let sid_form = text
        .get(..2)
        .map_or(false, |s| s.eq_ignore_ascii_case("S-"))
        && text[2..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !sid_form {
        return Err(invalid());
    }
    win::canonical_sid(text).map_err(|_| invalid())
}

/// Whether a server run by `server` is trusted without being named: only
/// when it is our own user.
pub(super) fn trusted_by_default(server: &Principal, me: &Principal) -> bool {
    server == me
}

/// How a principal is named in messages: its SID.
pub(super) fn describe(principal: &Principal) -> String {
    principal.clone()
}

/// Pipes have no file type to report: a name that is not a pipe is simply
/// not found.
pub(super) fn not_a_socket(_path: &Path) -> Option<&'static str> {
    None
}

/// Checks that `path` names a pipe and returns it as NUL-terminated UTF-16.
pub(crate) fn pipe_name(path: &Path) -> io::Result<Vec<u16>> {
    let name = win::wide(path.as_os_str())?;
    let prefix: Vec<u16> = PIPE_PREFIX.encode_utf16().collect();
    // Longer than the prefix plus the NUL: the pipe needs a name of its own.
    let is_pipe = name.len() > prefix.len() + 1
        && name
            .iter()
            .zip(&prefix)
            .all(|(&c, &p)| ascii_lowercase(c) == p);
    if !is_pipe {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "on Windows the endpoint must be a named pipe, {}NAME",
                PIPE_PREFIX
            ),
        ));
    }
    let rest = String::from_utf16_lossy(&name[prefix.len()..name.len() - 1]);
    if let Some(why) = name_fault(&rest) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    Ok(name)
}

/// What is wrong with `rest`, a pipe's name after `\\.\pipe\`, if anything.
/// Windows resolves `.` and `..` components and turns `/` into `\` in a
/// `\\.\` path before the pipe file system sees it, so
/// `\\.\pipe\..\C:\windows\win.ini` opens a file and `..\UNC\host\share`
/// reaches another machine. Refused: `/`, and any component made of dots
/// (and spaces, which the same normalization may trim) only.
fn name_fault(rest: &str) -> Option<&'static str> {
    if rest.contains('/') {
        return Some("a pipe name must not contain '/'");
    }
    let dots_only = |c: &str| !c.is_empty() && c.chars().all(|ch| ch == '.' || ch == ' ');
    if rest.split('\\').any(dots_only) {
        return Some("a pipe name must not contain '.' or '..' components");
    }
    None
}

fn ascii_lowercase(c: u16) -> u16 {
    if (u16::from(b'A')..=u16::from(b'Z')).contains(&c) {
        c + 32
    } else {
        c
    }
}

/// The longest pipe name [`for_app`](super::for_app) resolves to:
/// CreateNamedPipeW's "The entire pipe name string can be up to 256
/// characters long".
pub(super) const MAX_APP_ENDPOINT: usize = 256;

/// The pipe of app `name` (a checked name) for this user:
/// `\\.\pipe\<NAME>-<SID>`, the SID of this process's token user (see
/// `app.rs`).
pub(super) fn app_endpoint(name: &str) -> io::Result<std::path::PathBuf> {
    let sid = win::current_user_sid()?;
    Ok(format!("{}{}-{}", PIPE_PREFIX, name, sid).into())
}

/// Pipes need no directory: nothing to prepare. Who may open the pipe is
/// the listener's DACL; who got to the name first, its bind and the
/// bridge's trust check.
#[cfg(feature = "host")]
pub(crate) fn prepare_app_endpoint(_endpoint: &Path) -> io::Result<()> {
    Ok(())
}

/// Errors that mean the other end of the pipe is gone.
fn is_hangup(e: &io::Error) -> bool {
    has_code(e, ERROR_BROKEN_PIPE)
        || has_code(e, ERROR_NO_DATA)
        || has_code(e, ERROR_PIPE_NOT_CONNECTED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use windows_sys::Win32::Foundation::{ERROR_FILE_NOT_FOUND, ERROR_OPERATION_ABORTED};

    use crate::ffi::windows::SecurityDescriptor;

    /// A budget no healthy run comes near; only a hang exceeds it.
    const GENEROUS: Duration = Duration::from_secs(30);

    fn unique_pipe(tag: &str) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        PathBuf::from(format!(
            r"\\.\pipe\mcp-bridge-unit-{}-{}-{}",
            std::process::id(),
            tag,
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Runs `f` on its own thread and fails if it has not returned within
    /// [`GENEROUS`], instead of hanging the test run.
    fn within_generous<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(GENEROUS).expect("blocked")
    }

    /// A server instance, alone under its name, and a client connected to
    /// it.
    fn connected_pair(tag: &str) -> (Pipe, Pipe) {
        let path = unique_pipe(tag);
        let name = pipe_name(&path).unwrap();
        let security = SecurityDescriptor::owner_only().unwrap();
        let server = Pipe::create(&name, true, BUFFER_SIZE as u32, &security).unwrap();
        let client = Pipe::open(&path).unwrap();
        let server = within_generous(move || {
            let stop = Event::new().unwrap();
            server
                .connect(&mut Overlapped::new().unwrap(), &stop)
                .unwrap();
            server
        });
        (server, client)
    }

    /// A read with its `stop` event already set, on a pipe where no data
    /// will come. On an overlapped handle ReadFile returns at once with the
    /// read pending, which is then cancelled. On a synchronous handle it
    /// would block until data arrives, and every write on the handle would
    /// queue behind it on Windows: the deadlock the module docs describe.
    /// Wine blocks such reads too, so this catches a lost
    /// FILE_FLAG_OVERLAPPED even though Wine does not serialize.
    fn assert_overlapped(pipe: Arc<Pipe>) {
        let err = within_generous(move || {
            let stop = Event::new().unwrap();
            stop.set();
            let mut op = Overlapped::new().unwrap();
            let mut buf = [0u8; 16];
            pipe.read(&mut op, &mut buf, &stop).unwrap_err()
        });
        assert!(has_code(&err, ERROR_OPERATION_ABORTED), "{}", err);
    }

    #[test]
    fn both_ends_of_a_connection_are_overlapped() {
        let (server, client) = connected_pair("overlapped");
        // Both stay open until the end, so neither read sees a hang-up.
        let (client, server) = (Arc::new(client), Arc::new(server));
        assert_overlapped(client.clone());
        assert_overlapped(server.clone());
        drop((client, server));
    }

    /// A client that goes away is noticed on the server's end without a
    /// read, with nothing left unread, and with bytes it wrote still unread
    /// (the pipe's state says so; Wine reports it as Windows does).
    #[test]
    fn a_closed_client_is_noticed_without_reading() {
        let (server, client) = connected_pair("hangup");
        assert_eq!(peer_closed(&server), Some(false));
        drop(client);
        assert_eq!(peer_closed(&server), Some(true));

        let (server, client) = connected_pair("hangup-data");
        let stop = Event::new().unwrap();
        client
            .write(&mut Overlapped::new().unwrap(), b"unread", &stop)
            .unwrap();
        assert_eq!(peer_closed(&server), Some(false));
        drop(client);
        assert_eq!(win::bytes_waiting(server.handle()).unwrap(), 6);
        assert_eq!(peer_closed(&server), Some(true));
        let (reader, _writer) = pipe_halves(server).unwrap();
        within_generous(move || smol::block_on(reader.hangup()));
    }

    /// A message-type server (as .NET and WCF create) writes zero bytes,
    /// then real data: our read loop, on real completions, returns the data,
    /// not an end of stream. The server repeats its zero-byte write until
    /// the reader has seen one complete with zero bytes, since Wine drops a
    /// zero-byte write that no read is waiting for (so does Wine for every
    /// zero-byte write on a byte-type pipe); the test therefore knows it
    /// exercised the case.
    #[test]
    fn a_zero_byte_write_is_not_the_end_of_the_stream() {
        let path = unique_pipe("zero-write");
        let name = pipe_name(&path).unwrap();
        let security = SecurityDescriptor::owner_only().unwrap();
        let server = Pipe::create_message_type(&name, &security).unwrap();
        let client = Arc::new(Pipe::open(&path).unwrap());
        let zero_reads = Arc::new(AtomicUsize::new(0));
        let seen = zero_reads.clone();
        let reader = std::thread::spawn(move || {
            let (mut half, _stop) = Half::new(client).unwrap();
            let Half { pipe, op, stop } = &mut half;
            let mut buf = [0u8; 64];
            let n = read_past_empty_writes(&mut buf, |buf| {
                let read = pipe.read(op, buf, stop);
                if matches!(read, Ok(0)) {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                read
            });
            n.map(|n| buf[..n].to_vec())
        });
        let server = within_generous(move || {
            let stop = Event::new().unwrap();
            let mut op = Overlapped::new().unwrap();
            server.connect(&mut op, &stop).unwrap();
            while zero_reads.load(Ordering::SeqCst) == 0 {
                assert_eq!(server.write(&mut op, &[], &stop).unwrap(), 0);
                std::thread::yield_now();
            }
            server.write(&mut op, b"after", &stop).unwrap();
            server
        });
        let received = within_generous(move || reader.join().unwrap());
        assert_eq!(received.unwrap(), b"after");
        drop(server);
    }

    /// The read loop alone, fed completions by hand: zero-byte completions
    /// are read again, a hang-up is the end, and other errors pass through.
    #[test]
    fn zero_byte_completions_are_read_again() {
        let mut completions = vec![Ok(0), Ok(0), Ok(3)].into_iter();
        let mut buf = [0u8; 8];
        let n = read_past_empty_writes(&mut buf, |_| completions.next().unwrap()).unwrap();
        assert_eq!(n, 3);

        let code = |c: u32| io::Error::from_raw_os_error(c as i32);
        let mut completions = vec![Ok(0), Err(code(ERROR_BROKEN_PIPE))].into_iter();
        let n = read_past_empty_writes(&mut buf, |_| completions.next().unwrap()).unwrap();
        assert_eq!(n, 0, "a hang-up is the end of the stream");

        let e =
            read_past_empty_writes(&mut buf, |_| Err(code(ERROR_OPERATION_ABORTED))).unwrap_err();
        assert!(has_code(&e, ERROR_OPERATION_ABORTED), "{}", e);
    }

    /// An empty buffer reads nothing, without a ReadFile that would wait
    /// for data (and, with zero-byte completions read again, spin).
    #[test]
    fn an_empty_buffer_reads_nothing_without_a_read() {
        let n = read_past_empty_writes(&mut [], |_| panic!("ReadFile issued")).unwrap();
        assert_eq!(n, 0);
    }

    fn code(c: u32) -> io::Error {
        io::Error::from_raw_os_error(c as i32)
    }

    /// A pipe that does not exist, never seen busy, fails at once.
    #[test]
    fn an_absent_pipe_is_not_waited_for() {
        let mut opens = 0;
        let e = smol::block_on(open_within(
            Instant::now() + GENEROUS,
            || -> io::Result<()> {
                opens += 1;
                Err(code(ERROR_FILE_NOT_FOUND))
            },
            |_| -> std::future::Ready<io::Result<()>> { panic!("waited for an absent pipe") },
        ))
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{}", e);
        assert_eq!(opens, 1);
    }

    /// Every wait is given at most the time left before the deadline, so
    /// a pool thread never outlives the caller's connect timeout; when the
    /// last wait times out, so does the connect.
    #[test]
    fn each_wait_gets_only_the_time_left() {
        let budget = Duration::from_secs(20);
        let deadline = Instant::now() + budget;
        let opened_at = std::cell::Cell::new(Instant::now());
        let mut given = Vec::new();
        let e = smol::block_on(open_within(
            deadline,
            || -> io::Result<()> {
                opened_at.set(Instant::now());
                Err(code(ERROR_PIPE_BUSY))
            },
            |left| {
                // What was left, at the latest, when the open failed.
                given.push((left, opened_at.get()));
                let answer = if given.len() < 3 {
                    Ok(())
                } else {
                    Err(code(ERROR_SEM_TIMEOUT))
                };
                async move { answer }
            },
        ))
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{}", e);
        assert_eq!(given.len(), 3);
        for (left, opened_at) in given {
            assert!(opened_at + left <= deadline, "{:?} given", left);
        }
    }

    /// A single-instance server between two instances: the one instance is
    /// busy, then the name is gone (the wait reports it gone, and so does
    /// the next open), then a new instance appears, and the client gets it.
    /// Real pipes under Wine; the hooks in `open` make each step happen in
    /// order.
    #[test]
    fn a_busy_pipe_that_vanishes_and_returns_is_joined() {
        let path = unique_pipe("vanish");
        let name = pipe_name(&path).unwrap();
        let security = SecurityDescriptor::owner_only().unwrap();
        let only = Pipe::create(&name, true, BUFFER_SIZE as u32, &security).unwrap();
        let taken = Pipe::open(&path).unwrap();
        let mut first_server = Some((only, taken));
        let mut second_server = None;
        let mut opens = 0;
        let client = smol::block_on(open_within(
            Instant::now() + GENEROUS,
            || {
                opens += 1;
                let result = Pipe::open(&path);
                match opens {
                    1 => {
                        let e = result.as_ref().unwrap_err();
                        assert!(has_code(e, ERROR_PIPE_BUSY), "{}", e);
                        // The server closes its only instance.
                        first_server = None;
                    }
                    2 => {
                        let e = result.as_ref().unwrap_err();
                        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{}", e);
                        // ... and creates the next one.
                        second_server =
                            Some(Pipe::create(&name, true, BUFFER_SIZE as u32, &security).unwrap());
                    }
                    _ => {}
                }
                result
            },
            |left| {
                let name = name.clone();
                smol::unblock(move || win::wait_named_pipe(&name, left))
            },
        ));
        assert!(client.is_ok(), "{:?}", client.err());
        assert!(first_server.is_none() && second_server.is_some());
        assert_eq!(opens, 3);
    }

    #[test]
    fn pipe_names_are_checked() {
        for good in [
            r"\\.\pipe\app",
            r"\\.\PIPE\App-1",
            r"\\.\Pipe\a\b",
            r"\\.\pipe\a.b",
            r"\\.\pipe\.app",
            r"\\.\pipe\app..",
        ] {
            assert!(pipe_name(Path::new(good)).is_ok(), "{}", good);
        }
        for bad in [
            r"\\.\pipe\",
            r"C:\app.sock",
            r"pipe\app",
            r"\\server\pipe\app",
            "",
            r"\\.\pipe\..\C:\windows\win.ini",
            r"\\.\pipe\..\UNC\host\share\x",
            r"\\.\pipe\a\.\b",
            r"\\.\pipe\a\..",
            r"\\.\pipe\.",
            r"\\.\pipe\. .\x",
            r"\\.\pipe\a/b",
            r"\\.\pipe\../x",
        ] {
            let err = pipe_name(Path::new(bad)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{}", bad);
        }
    }

    /// The accepting path of the trust check, for real: the pipe of the
    /// app's `host::Listener`, read from the bridge's end, is owned by our
    /// own user (Wine runs everything as one user), and so trusted.
    #[test]
    #[cfg(feature = "host")]
    fn the_app_pipe_is_served_by_our_own_user() {
        let path = unique_pipe("owner");
        let _listener = crate::host::Listener::bind(&path).unwrap();
        let (reader, _writer) = smol::block_on(connect(&path, GENEROUS)).unwrap();
        let server = server_principal(&reader).unwrap();
        let me = own_principal().unwrap();
        assert!(me.starts_with("S-1-"), "{}", me);
        assert_eq!(server, me);
        assert!(trusted_by_default(&server, &me));
    }

    /// The per-instance check, for real: the process serving the app's
    /// pipe is this one, run by our user at our integrity level, so it is
    /// trusted; it is refused when our user is not among the trusted.
    #[cfg(feature = "host")]
    #[test]
    fn the_instance_is_served_by_our_own_process() {
        let path = unique_pipe("instance");
        let _listener = crate::host::Listener::bind(&path).unwrap();
        let (reader, _writer) = smol::block_on(connect(&path, GENEROUS)).unwrap();
        assert_eq!(reader.pipe.server_process_id().unwrap(), std::process::id());
        let me = own_principal().unwrap();
        check_instance(&reader, &[&me]).unwrap();
        let system = parse_principal("S-1-5-18").unwrap();
        match check_instance(&reader, &[&system]) {
            Err(InstanceRefusal::Foreign { server, me: ours }) => {
                assert!(server.contains(&me), "{}", server);
                assert!(
                    server.contains(&std::process::id().to_string()),
                    "{}",
                    server
                );
                assert!(ours.contains(&me), "{}", ours);
            }
            other => panic!("{:?}", other),
        }
    }

    /// A server that closed its instance before the check is not a
    /// refusal (nothing can reach anyone through that handle any more): the
    /// session sees the hang-up and reconnects.
    #[test]
    fn an_instance_closed_before_the_check_is_a_hang_up_not_a_refusal() {
        let (server, client) = connected_pair("closed-check");
        drop(server);
        let (reader, _writer) = pipe_halves(client).unwrap();
        let system = parse_principal("S-1-5-18").unwrap();
        check_instance(&reader, &[&system]).unwrap();
    }

    /// What Wine cannot stage: another user's process, or ours at a lower
    /// integrity level, is refused; a higher level is fine.
    #[test]
    fn foreign_or_lower_integrity_servers_are_refused() {
        let me = own_principal().unwrap();
        let other = parse_principal("S-1-5-21-1-2-3-1001").unwrap();
        let facts = |user: &str, integrity| win::TokenFacts {
            user: user.to_string(),
            integrity,
        };
        let ours = facts(&me, 0x2000);
        assert!(instance_verdict(7, &facts(&me, 0x2000), &ours, &[&me]).is_ok());
        assert!(instance_verdict(7, &facts(&me, 0x3000), &ours, &[&me]).is_ok());
        assert!(instance_verdict(7, &facts(&other, 0x2000), &ours, &[&me, &other]).is_ok());
        for (server, why) in [
            (facts(&me, 0x1000), "low integrity"),
            (facts(&other, 0x2000), "medium integrity"),
        ] {
            match instance_verdict(7, &server, &ours, &[&me]) {
                Err(InstanceRefusal::Foreign { server, .. }) => {
                    assert!(server.contains(why), "{}", server)
                }
                other => panic!("{:?}", other),
            }
        }
    }

    /// The refusing path, which Wine (one user) cannot stage: a pipe owned by
    /// LocalSystem is not trusted by default, and neither is one without an
    /// owner.
    #[test]
    fn a_foreign_or_missing_owner_is_not_trusted() {
        let me = own_principal().unwrap();
        let system = parse_principal("S-1-5-18").unwrap();
        assert_ne!(system, me, "the tests do not run as LocalSystem");
        assert!(!trusted_by_default(&system, &me));
        let e = owner_required(None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{}", e);
        assert_eq!(owner_required(Some(me.clone())).unwrap(), me);
    }

    /// SIDs given by the user are checked and written the system's way.
    #[test]
    fn principals_are_parsed_to_one_spelling() {
        assert_eq!(parse_principal("s-1-5-18").unwrap(), "S-1-5-18");
        let me = own_principal().unwrap();
        assert_eq!(parse_principal(&me.to_lowercase()).unwrap(), me);
        for bad in ["SY", "", "S-", "S-1-x", "user", "S-1-5-18 "] {
            let e = parse_principal(bad).unwrap_err();
            assert!(e.contains("is not a SID"), "{:?}: {}", bad, e);
        }
    }
}
