//! Windows named pipes (`\\.\pipe\NAME`): the client end the bridge
//! connects with, and the server end, [`PipeListener`], on which an app (and
//! our tests) accepts bridges.
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
//! Dropping a half sets its `stop` event: its thread cancels the pending
//! operation (`CancelIoEx`) and waits for it to finish before letting go of
//! the buffer. The handle closes when both halves are gone, so the peer sees
//! the end of the stream.
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
//! with `WaitNamedPipeW` (on a pool thread, since it blocks) and try again,
//! within the caller's connect timeout. A pipe that does not exist fails at
//! once with `NotFound`. The pipe is opened with `SECURITY_SQOS_PRESENT |
//! SECURITY_IDENTIFICATION`, so the server may learn who we are but cannot
//! impersonate us.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::io::{AsyncRead, AsyncWrite};
use smol::Unblock;
use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_BROKEN_PIPE, ERROR_NO_DATA, ERROR_PIPE_BUSY,
    ERROR_PIPE_NOT_CONNECTED, ERROR_SEM_TIMEOUT,
};

use crate::ffi::windows::{self as win, Event, Overlapped, Pipe, SecurityDescriptor};
use crate::relay::BUFFER_SIZE;

pub(super) type Reader = PipeReader;
pub(super) type Writer = PipeWriter;

/// What every pipe name starts with (compared without regard to case).
const PIPE_PREFIX: &str = r"\\.\pipe\";

/// One connection attempt. `WouldBlock` means "busy, try again" (another
/// client took the instance we waited for); every other error is final.
pub(super) async fn connect(path: &Path, timeout: Duration) -> io::Result<(Reader, Writer)> {
    let name = pipe_name(path)?;
    let pipe = match Pipe::open(path) {
        Err(e) if has_code(&e, ERROR_PIPE_BUSY) => {
            smol::unblock(move || win::wait_named_pipe(&name, timeout))
                .await
                .map_err(|e| {
                    if has_code(&e, ERROR_SEM_TIMEOUT) {
                        io::ErrorKind::TimedOut.into()
                    } else {
                        e
                    }
                })?;
            Pipe::open(path).map_err(|e| {
                if has_code(&e, ERROR_PIPE_BUSY) {
                    io::ErrorKind::WouldBlock.into()
                } else {
                    e
                }
            })?
        }
        other => other?,
    };
    split(pipe)
}

/// The server end of a named pipe: where an app accepts bridges on Windows.
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
/// (Wine 8 stores the descriptor but does not enforce it.)
///
/// **A live pipe is never joined.** [`bind`](PipeListener::bind) first asks
/// whether a pipe of that name exists (`WaitNamedPipeW`, which does not
/// connect), then creates the first instance with
/// `FILE_FLAG_FIRST_PIPE_INSTANCE`, which on Windows closes the race between
/// the two; either way it fails with `AddrInUse`. (Wine 8 ignores the flag,
/// so under Wine only the first check holds.) There is nothing stale to
/// clean up: a pipe disappears with its last handle.
///
/// One instance always waits for the next client: a client that arrives
/// while the app is between two [`accept`](PipeListener::accept)s is
/// connected at once, and the next accept returns it. Further clients find
/// the pipe busy and wait (the bridge does, within its connect timeout)
/// until an accept readies another instance. Dropping the listener closes
/// the waiting instance; connections already accepted live on.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use futures_lite::io::{AsyncBufReadExt, BufReader};
/// use mcp_bridge::endpoint::PipeListener;
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
    /// The instance the next client connects to.
    next: Mutex<Option<Pipe>>,
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
        let path = path.as_ref().to_path_buf();
        let name = pipe_name(&path)?;
        if pipe_exists(&name)? {
            return Err(pipe_in_use());
        }
        let security = SecurityDescriptor::owner_only()?;
        let first = match Pipe::create(&name, true, BUFFER_SIZE as u32, &security) {
            // What FILE_FLAG_FIRST_PIPE_INSTANCE says when the pipe exists:
            // someone created it since we looked.
            Err(e) if has_code(&e, ERROR_ACCESS_DENIED) => return Err(pipe_in_use()),
            other => other?,
        };
        Ok(PipeListener {
            path,
            name,
            security,
            next: Mutex::new(Some(first)),
        })
    }

    /// The pipe's name, as given to [`bind`](PipeListener::bind).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next client and returns the two halves of its
    /// connection. Dropping both halves closes it; the client then reads the
    /// end of the stream. Cancelling the returned future (dropping it) stops
    /// the wait.
    pub async fn accept(&self) -> io::Result<(super::Reader, super::Writer)> {
        let waiting = self.take_next();
        let pipe = match waiting {
            Some(pipe) => pipe,
            None => self.create_instance()?,
        };
        let stop = Arc::new(Event::new()?);
        let _cancel_on_drop = StopOnDrop(stop.clone());
        let mut op = Overlapped::new()?;
        let pipe = smol::unblock(move || pipe.connect(&mut op, &stop).map(|()| pipe)).await?;
        // Have the next instance ready before handing this one out. If that
        // fails (out of handles, say), the next accept tries again and
        // reports the error.
        let next = self.create_instance().ok();
        *self.next.lock().unwrap_or_else(PoisonError::into_inner) = next;
        let (reader, writer) = split(pipe)?;
        Ok((super::Reader(reader), super::Writer(writer)))
    }

    fn create_instance(&self) -> io::Result<Pipe> {
        Pipe::create(&self.name, false, BUFFER_SIZE as u32, &self.security)
    }

    fn take_next(&self) -> Option<Pipe> {
        self.next
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl fmt::Debug for PipeListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipeListener")
            .field("path", &self.path)
            .finish()
    }
}

/// The reading half of a pipe connection.
#[derive(Debug)]
pub(crate) struct PipeReader {
    io: Unblock<Half>,
    _stop: StopOnDrop,
}

/// The writing half of a pipe connection. Closing it only flushes (see the
/// module docs: pipes have no half-close).
#[derive(Debug)]
pub(crate) struct PipeWriter {
    io: Unblock<Half>,
    _stop: StopOnDrop,
}

/// Splits a connected pipe into its two directions, each with its own
/// `OVERLAPPED`, event and pool thread.
fn split(pipe: Pipe) -> io::Result<(PipeReader, PipeWriter)> {
    let pipe = Arc::new(pipe);
    let (read_half, read_stop) = Half::new(pipe.clone())?;
    let (write_half, write_stop) = Half::new(pipe)?;
    Ok((
        PipeReader {
            io: Unblock::with_capacity(BUFFER_SIZE, read_half),
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
    fn new(pipe: Arc<Pipe>) -> io::Result<(Half, StopOnDrop)> {
        let stop = Arc::new(Event::new()?);
        let half = Half {
            pipe,
            op: Overlapped::new()?,
            stop: stop.clone(),
        };
        Ok((half, StopOnDrop(stop)))
    }
}

impl Read for Half {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.pipe.read(&mut self.op, buf, &self.stop) {
            // The other end closed or disconnected: the end of the stream.
            Err(e) if is_hangup(&e) => Ok(0),
            other => other,
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

/// Sets the event when dropped: how a dropped half (or a cancelled accept)
/// tells its pool thread to abandon the operation it waits for.
#[derive(Debug)]
struct StopOnDrop(Arc<Event>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.set();
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

/// Checks that `path` names a pipe and returns it as NUL-terminated UTF-16.
fn pipe_name(path: &Path) -> io::Result<Vec<u16>> {
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
    Ok(name)
}

fn ascii_lowercase(c: u16) -> u16 {
    if (u16::from(b'A')..=u16::from(b'Z')).contains(&c) {
        c + 32
    } else {
        c
    }
}

fn has_code(e: &io::Error, code: u32) -> bool {
    e.raw_os_error() == Some(code as i32)
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use windows_sys::Win32::Foundation::ERROR_OPERATION_ABORTED;

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
    /// a few seconds, instead of hanging the test run.
    fn within_seconds<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("blocked: the handle behaves as a synchronous one")
    }

    /// A read with its `stop` event already set, on a pipe where no data
    /// will come. On an overlapped handle ReadFile returns at once with the
    /// read pending, which is then cancelled. On a synchronous handle it
    /// would block until data arrives, and every write on the handle would
    /// queue behind it on Windows: the deadlock the module docs describe.
    /// Wine blocks such reads too, so this catches a lost
    /// FILE_FLAG_OVERLAPPED even though Wine does not serialize.
    fn assert_overlapped(pipe: Arc<Pipe>) {
        let err = within_seconds(move || {
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
        let path = unique_pipe("overlapped");
        let name = pipe_name(&path).unwrap();
        let security = SecurityDescriptor::owner_only().unwrap();
        let server = Pipe::create(&name, true, BUFFER_SIZE as u32, &security).unwrap();
        let client = Pipe::open(&path).unwrap();
        let server = within_seconds(move || {
            let stop = Event::new().unwrap();
            server
                .connect(&mut Overlapped::new().unwrap(), &stop)
                .unwrap();
            server
        });
        // Both stay open until the end, so neither read sees a hang-up.
        let (client, server) = (Arc::new(client), Arc::new(server));
        assert_overlapped(client.clone());
        assert_overlapped(server.clone());
        drop((client, server));
    }

    /// The DACL a peer meets: one entry, full access for our own user.
    /// Only the descriptor can be checked under Wine: Wine 8 keeps it but
    /// does not enforce it (in a trial, a pipe whose DACL admitted only
    /// LocalSystem opened fine), so that Windows refuses other users rests
    /// on Windows' documented access check, not on this test.
    #[test]
    fn pipes_admit_only_our_user() {
        let sid = win::current_user_sid().unwrap();
        assert!(sid.starts_with("S-1-"), "{}", sid);
        let path = unique_pipe("dacl");
        let _listener = PipeListener::bind(&path).unwrap();
        let client = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let dacl = win::dacl_sddl(std::os::windows::io::AsHandle::as_handle(&client)).unwrap();
        // GA as created; FA if the system mapped the generic right to the
        // pipe's specific rights.
        let expected = [
            format!("D:P(A;;GA;;;{})", sid),
            format!("D:P(A;;FA;;;{})", sid),
        ];
        assert!(expected.contains(&dacl), "{} (our SID {})", dacl, sid);
    }

    #[test]
    fn a_live_pipe_is_not_joined() {
        let path = unique_pipe("live");
        let _listener = PipeListener::bind(&path).unwrap();
        let e = PipeListener::bind(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{}", e);
    }

    #[test]
    fn pipe_names_are_checked() {
        for good in [r"\\.\pipe\app", r"\\.\PIPE\App-1", r"\\.\Pipe\a\b"] {
            assert!(pipe_name(Path::new(good)).is_ok(), "{}", good);
        }
        for bad in [
            r"\\.\pipe\",
            r"C:\app.sock",
            r"pipe\app",
            r"\\server\pipe\app",
            "",
        ] {
            let err = pipe_name(Path::new(bad)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{}", bad);
        }
    }
}
