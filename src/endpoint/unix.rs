//! Unix domain sockets, driven by async-io's reactor. Both halves share one
//! registered socket; closing the writer is `shutdown(SHUT_WR)`, a real
//! half-close. The reader skips the read that could only fail after a short
//! one (see [`ReadReadiness`]).
//!
//! The connect is done by hand rather than with `UnixStream::connect`: when
//! the listener's backlog is full, a non-blocking connect fails with `EAGAIN`,
//! which async-io turns into a confusing "not connected" error. Here it
//! becomes `WouldBlock`, which the caller retries until its timeout: a busy
//! app gets the whole connect timeout to accept us.

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_io::Async;
use futures_lite::io::{AsyncRead, AsyncWrite};
use rustix::io::Errno;
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
use rustix::net::SocketFlags;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};

use crate::readiness::ReadReadiness;

/// The reading half of a connection.
#[derive(Debug)]
pub(super) struct Reader {
    socket: Arc<Async<UnixStream>>,
    readiness: ReadReadiness,
}

/// The writing half of a connection.
#[derive(Debug)]
pub(super) struct Writer {
    socket: Arc<Async<UnixStream>>,
}

/// Room for a path in `sockaddr_un.sun_path`, less its terminating NUL: the
/// one limit both sides use, so `serve` never binds a path the bridge would
/// then refuse.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const MAX_PATH_BYTES: usize = 107;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) const MAX_PATH_BYTES: usize = 103;

/// A new non-blocking, close-on-exec Unix stream socket.
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
fn nonblocking_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Apple systems cannot set the flags atomically at creation.
#[cfg(any(target_os = "macos", target_os = "ios"))]
fn nonblocking_socket() -> io::Result<OwnedFd> {
    let socket = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None)?;
    rustix::io::fcntl_setfd(&socket, rustix::io::FdFlags::CLOEXEC)?;
    rustix::io::ioctl_fionbio(&socket, true)?;
    Ok(socket)
}

/// One connection attempt: `WouldBlock` means "busy, try again"; every other
/// error is final.
pub(super) async fn connect(path: &Path, _timeout: Duration) -> io::Result<(Reader, Writer)> {
    let len = path.as_os_str().as_bytes().len();
    if len > MAX_PATH_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Unix socket path can have at most {} bytes, this one has {}",
                MAX_PATH_BYTES, len
            ),
        ));
    }
    let address = SocketAddrUnix::new(path)?;
    let socket = nonblocking_socket()?;
    let pending = match rustix::net::connect(&socket, &address) {
        Ok(()) => false,
        Err(Errno::AGAIN) => return Err(io::ErrorKind::WouldBlock.into()),
        // Linux completes Unix connects at once; other systems may not.
        Err(Errno::INPROGRESS) => true,
        Err(e) => return Err(e.into()),
    };
    let stream = Async::new_nonblocking(UnixStream::from(socket))?;
    if pending {
        stream.writable().await?;
        if let Some(e) = stream.get_ref().take_error()? {
            return Err(e);
        }
    }
    let socket = Arc::new(stream);
    let reader = Reader {
        socket: socket.clone(),
        readiness: ReadReadiness::default(),
    };
    Ok((reader, Writer { socket }))
}

impl AsyncRead for Reader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let socket = &this.socket;
        this.readiness.poll_read(
            cx,
            buf,
            |buf| socket.get_ref().read(buf),
            |cx| socket.poll_readable(cx),
        )
    }
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.socket).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Socket writes are not buffered.
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(Shutdown::Write))
    }
}
