//! Unix domain sockets, driven by async-io's reactor. Both halves are clones
//! of one smol `UnixStream`; closing the writer is `shutdown(SHUT_WR)`, a real
//! half-close.
//!
//! The connect is done by hand rather than with `UnixStream::connect`: when
//! the listener's backlog is full, a non-blocking connect fails with `EAGAIN`,
//! which async-io turns into a confusing "not connected" error. Here it
//! becomes `WouldBlock`, which the caller retries until its timeout: a busy
//! app gets the whole connect timeout to accept us.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::time::Duration;

use async_io::Async;
use rustix::io::Errno;
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
use rustix::net::SocketFlags;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
use smol::net::unix::UnixStream;

pub(super) type Reader = UnixStream;
pub(super) type Writer = UnixStream;

/// Room for a path in `sockaddr_un.sun_path`, less its terminating NUL.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MAX_PATH_BYTES: usize = 107;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const MAX_PATH_BYTES: usize = 103;

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
    let stream = Async::new_nonblocking(StdUnixStream::from(socket))?;
    if pending {
        stream.writable().await?;
        if let Some(e) = stream.get_ref().take_error()? {
            return Err(e);
        }
    }
    let stream = UnixStream::from(stream);
    Ok((stream.clone(), stream))
}
