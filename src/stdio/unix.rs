//! Unix: stdin and stdout as reactor-driven streams, without setting
//! `O_NONBLOCK` on the descriptors we inherited.
//!
//! `O_NONBLOCK` is a property of the open file description, which our parent
//! (and anything else it handed the same pipe to) shares. Flipping it under
//! them can make *their* reads fail with `EAGAIN`. So each kind of stdio gets
//! non-blocking I/O its own way:
//!
//! - **Socket** (Node.js and some IDEs spawn children with socketpairs):
//!   `recv`/`send` with `MSG_DONTWAIT` make one call non-blocking without
//!   touching the description.
//! - **Pipe** (Rust, Python and Go spawners): on Linux, opening
//!   `/proc/self/fd/N` creates a *new* description of the same pipe, private
//!   to us, which we may make non-blocking.
//! - **Anything else** (a terminal, a regular file, `/dev/null`, a pipe where
//!   `/proc` is unavailable): a thread of its own (`io/thread.rs`), with one
//!   relay buffer of capacity.
//!
//! Why not `splice(2)` for pipes: it holds the pipe's lock while waiting for
//! socket data, which stalls a client trying to read a reply already in the
//! pipe: a deadlock for request/response traffic.

use std::fs::File;
use std::io;
use std::os::unix::io::{BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use async_io::Async;
use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::ready;
use rustix::fs::FileType;
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};
// A thread of its own per stream, not `blocking`'s pool: see io/thread.rs.
use crate::io::thread::Threaded as Unblock;

use crate::ffi::unix::standard_stream;
use crate::io::readiness::ReadReadiness;
use crate::io::BUFFER_SIZE;

pub(super) type Input = Stdio;
pub(super) type Output = Stdio;

/// One standard stream, driven in the best way its file type allows.
#[derive(Debug)]
pub(super) struct Stdio {
    kind: Kind,
    readiness: ReadReadiness,
}

#[derive(Debug)]
enum Kind {
    /// A socket used with per-call `MSG_DONTWAIT`, its flags left alone.
    Socket(Async<OwnedFd>),
    Pipe(Async<File>),
    Thread(Unblock<File>),
}

/// Runs a `MSG_DONTWAIT` socket call, waiting for readiness (`poll_ready`)
/// while it would block.
fn poll_socket<T>(
    cx: &mut Context<'_>,
    mut call: impl FnMut() -> rustix::io::Result<T>,
    mut poll_ready: impl FnMut(&mut Context<'_>) -> Poll<io::Result<()>>,
) -> Poll<io::Result<T>> {
    loop {
        match call() {
            Err(Errno::AGAIN) => ready!(poll_ready(cx))?,
            Err(Errno::INTR) => {}
            other => return Poll::Ready(other.map_err(io::Error::from)),
        }
    }
}

/// `MSG_NOSIGNAL` makes a closed reader an `EPIPE` error rather than a
/// `SIGPIPE`. Apple systems lack the flag; a Rust binary ignores `SIGPIPE`
/// anyway, so there plain `MSG_DONTWAIT` behaves the same for the bridge.
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
fn send_flags() -> SendFlags {
    SendFlags::DONTWAIT | SendFlags::NOSIGNAL
}

#[cfg(any(target_os = "macos", target_os = "ios"))]
fn send_flags() -> SendFlags {
    SendFlags::DONTWAIT
}

pub(super) fn stdin() -> io::Result<Stdio> {
    open(standard_stream(0), false)
}

pub(super) fn stdout() -> io::Result<Stdio> {
    open(standard_stream(1), true)
}

fn open(fd: BorrowedFd<'_>, write: bool) -> io::Result<Stdio> {
    open_kind(fd, write).map(|kind| Stdio {
        kind,
        readiness: ReadReadiness::default(),
    })
}

fn open_kind(fd: BorrowedFd<'_>, write: bool) -> io::Result<Kind> {
    let file_type = FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode);
    // Registration fails for descriptors epoll cannot watch; the thread
    // fallback below still works for those.
    if file_type == FileType::Socket {
        if let Ok(socket) = Async::new_nonblocking(fd.try_clone_to_owned()?) {
            return Ok(Kind::Socket(socket));
        }
    }
    if file_type == FileType::Fifo {
        if let Some(pipe) = reopen_private(fd, write) {
            if let Ok(pipe) = Async::new(pipe) {
                return Ok(Kind::Pipe(pipe));
            }
        }
    }
    let file = File::from(fd.try_clone_to_owned()?);
    Ok(Kind::Thread(Unblock::with_capacity(BUFFER_SIZE, file)))
}

/// A new, non-blocking open file description of the same pipe.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn reopen_private(fd: BorrowedFd<'_>, write: bool) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .ok()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn reopen_private(_fd: BorrowedFd<'_>, _write: bool) -> Option<File> {
    None
}

impl AsyncRead for Stdio {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Socket(s) => this.readiness.poll_read(
                cx,
                buf,
                |buf| {
                    rustix::net::recv(s.get_ref(), buf, RecvFlags::DONTWAIT)
                        .map(|(n, _)| n)
                        .map_err(io::Error::from)
                },
                |cx| s.poll_readable(cx),
            ),
            Kind::Pipe(p) => this.readiness.poll_read(
                cx,
                buf,
                |buf| io::Read::read(&mut p.get_ref(), buf),
                |cx| p.poll_readable(cx),
            ),
            Kind::Thread(t) => Pin::new(t).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stdio {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().kind {
            Kind::Socket(s) => poll_socket(
                cx,
                || rustix::net::send(s.get_ref(), buf, send_flags()),
                |cx| s.poll_writable(cx),
            ),
            Kind::Pipe(p) => Pin::new(p).poll_write(cx, buf),
            Kind::Thread(t) => Pin::new(t).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            Kind::Socket(_) => Poll::Ready(Ok(())),
            Kind::Pipe(p) => Pin::new(p).poll_flush(cx),
            Kind::Thread(t) => Pin::new(t).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            Kind::Socket(_) => Poll::Ready(Ok(())),
            Kind::Pipe(p) => Pin::new(p).poll_close(cx),
            Kind::Thread(t) => Pin::new(t).poll_close(cx),
        }
    }
}

/// Watches fds 0 and 1 from a thread of their own, blocked in `poll(2)`
/// asking for no event at all: the kernel still reports `POLLHUP` (a pipe
/// whose writers have all gone, even with data left in it; a socket closed
/// both ways) and `POLLERR` (a pipe whose reader has gone), so the thread
/// sleeps until an end goes away. On a socket stdin, `POLLRDHUP` (Linux) is
/// asked for too: the peer's shutdown of its writing side is the socket's
/// "every writer has gone". Each event is sent once, then its descriptor is
/// left out of the poll, which would otherwise return at once for ever.
/// The thread allocates nothing, so the allocator gives it no arena.
pub(super) fn watch_hangups(
    input_closed: super::oneshot::Sender<()>,
    output_gone: super::oneshot::Sender<()>,
) {
    use rustix::event::{PollFd, PollFlags};

    let input_flags = match rustix::fs::fstat(standard_stream(0)) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Socket => rdhup(),
        _ => PollFlags::empty(),
    };
    let watching = std::thread::Builder::new()
        .name("stdio-hangups".into())
        .stack_size(crate::io::SMALL_STACK)
        .spawn(move || {
            let stdin = standard_stream(0);
            let stdout = standard_stream(1);
            let mut input = Some(input_closed);
            let mut output = Some(output_gone);
            while input.is_some() || output.is_some() {
                let mut fds = [
                    PollFd::new(&stdin, input_flags),
                    PollFd::new(&stdout, PollFlags::empty()),
                ];
                // Only the ends still watched (an entry left out keeps no
                // events).
                let watched = match (input.is_some(), output.is_some()) {
                    (true, true) => &mut fds[..],
                    (true, false) => &mut fds[..1],
                    _ => &mut fds[1..],
                };
                match rustix::event::poll(watched, None) {
                    Ok(_) => {}
                    Err(Errno::INTR) => continue,
                    // Cannot watch: drop the senders, so nothing ever fires.
                    Err(_) => return,
                }
                if input.is_some() && !fds[0].revents().is_empty() {
                    let _ = input.take().map(|s| s.try_send(()));
                }
                if output.is_some() && !fds[1].revents().is_empty() {
                    let _ = output.take().map(|s| s.try_send(()));
                }
            }
        });
    // No thread (out of resources): nothing is watched, as on Windows.
    drop(watching);
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn rdhup() -> rustix::event::PollFlags {
    rustix::event::PollFlags::RDHUP
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn rdhup() -> rustix::event::PollFlags {
    rustix::event::PollFlags::empty()
}
