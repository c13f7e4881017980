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

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
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

use crate::io::readiness::ReadReadiness;

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

/// Who serves an endpoint: the uid of the process that listens on it.
pub(super) type Principal = u32;

/// The uid of the process at the other end of a connected Unix socket, as
/// the kernel recorded it (`SO_PEERCRED` on Linux, `getpeereid` on the BSDs
/// and macOS): for a client, the process that called `listen`. The kernel's
/// word, so the server cannot lie about it.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn peer_uid(stream: &impl AsFd) -> io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
pub(crate) fn peer_uid(stream: &impl AsFd) -> io::Result<u32> {
    crate::ffi::unix::peer_uid(stream.as_fd())
}

/// No known way to ask: the caller refuses rather than trusts.
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)))]
pub(crate) fn peer_uid(_stream: &impl AsFd) -> io::Result<u32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "peer credentials are not supported on this system",
    ))
}

/// The serving process's pid (Linux) and the socket file's inode, hashed
/// together (see [`super::instance`]).
pub(super) fn instance(path: &Path, reader: &Reader) -> Option<u64> {
    let file = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let pid = rustix::net::sockopt::socket_peercred(reader.socket.get_ref())
        .ok()
        .map(|cred| cred.pid.as_raw_nonzero().get() as u64);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let pid: Option<u64> = {
        let _ = reader;
        None
    };
    if file.is_none() && pid.is_none() {
        return None;
    }
    let (dev, ino) = file.unwrap_or((0, 0));
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for part in [dev, ino, pid.unwrap_or(0)] {
        for b in part.to_le_bytes() {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Some(hash)
}

/// The uid serving the connection `reader` belongs to.
pub(super) fn server_principal(reader: &Reader) -> io::Result<Principal> {
    peer_uid(reader.socket.get_ref())
}

/// The uid this process acts as (its effective uid, which is what a
/// server's peer credentials are compared in).
pub(super) fn own_principal() -> io::Result<Principal> {
    Ok(rustix::process::geteuid().as_raw())
}

/// A uid given by the user, as a decimal number.
pub(super) fn parse_principal(text: &str) -> Result<Principal, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("'{}' is not a uid (a whole number such as 1000)", text))
}

/// Without an explicit choice, a server is trusted when it runs as our own
/// user or as root: root can read our traffic anyway, and system-wide apps
/// run as root.
pub(super) fn trusted_by_default(server: &Principal, me: &Principal) -> bool {
    server == me || *server == 0
}

/// What a path that refused a connection is, when it is not a socket: a
/// better answer than "nothing is listening there" for a regular file, a
/// directory or a FIFO someone passed as the endpoint.
pub(super) fn not_a_socket(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::metadata(path).ok()?.file_type();
    if kind.is_socket() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_file() {
        Some("a regular file")
    } else {
        Some("a device or other special file")
    }
}

/// How a principal is named in messages.
pub(super) fn describe(principal: &Principal) -> String {
    format!("uid {}", principal)
}

/// The longest endpoint [`for_app`](super::for_app) resolves to: what a
/// socket address holds.
pub(super) const MAX_APP_ENDPOINT: usize = MAX_PATH_BYTES;

/// The endpoint of app `name` (a checked name) for this user:
/// `<dir>/<name>/mcp.sock`, `<dir>` the first of this user's runtime
/// directories that is theirs, or the fallback in `/tmp` (see `app.rs`).
pub(super) fn app_endpoint(name: &str) -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    let mut path =
        runtime_dir(uid).unwrap_or_else(|| OsString::from(format!("/tmp/mcp-bridge-{}", uid)));
    for part in ["/", name, "/mcp.sock"] {
        path.push(part);
    }
    path.into()
}

/// The user's runtime directory, if they have one of their own:
/// `$XDG_RUNTIME_DIR`, else `/run/user/<uid>`, what systemd makes it.
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
fn runtime_dir(uid: u32) -> Option<OsString> {
    let own = |dir: &OsString| is_private_dir(Path::new(dir), uid);
    absolute_var("XDG_RUNTIME_DIR")
        .filter(own)
        .or_else(|| Some(OsString::from(format!("/run/user/{}", uid))).filter(own))
}

/// The user's own temporary directory, `$TMPDIR` (`/var/folders/...`).
#[cfg(any(target_os = "macos", target_os = "ios"))]
fn runtime_dir(uid: u32) -> Option<OsString> {
    absolute_var("TMPDIR").filter(|dir| is_private_dir(Path::new(dir), uid))
}

/// The directory named by the variable `name`, without its trailing `/`;
/// `None` unless it is an absolute path (the XDG specification's rule for a
/// relative `XDG_RUNTIME_DIR`: ignore it).
fn absolute_var(name: &str) -> Option<OsString> {
    let value = std::env::var_os(name)?;
    let mut path = value.as_bytes();
    while path.len() > 1 && path.ends_with(b"/") {
        path = &path[..path.len() - 1];
    }
    path.starts_with(b"/")
        .then(|| OsStr::from_bytes(path).to_os_string())
}

/// Whether `dir` may hold an app's endpoint for `uid`: a directory itself
/// (not a link to one), owned by `uid`, that group and others may not write
/// (or they could rename the socket away and put theirs in its place).
pub(crate) fn is_private_dir(dir: &Path, uid: u32) -> bool {
    match fs::symlink_metadata(dir) {
        Ok(m) => m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0,
        Err(_) => false,
    }
}

/// The host's half of the rule: creates the app's directory and the one
/// above it where missing (mode 0700), and checks that both are ours and
/// closed to others, whoever created them (see `app.rs`, "Who can get
/// there first").
#[cfg(feature = "host")]
pub(crate) fn prepare_app_endpoint(endpoint: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let uid = rustix::process::geteuid().as_raw();
    let app_dir = endpoint.parent().unwrap_or(endpoint);
    let base = app_dir.parent().unwrap_or(app_dir);
    for dir in [base, app_dir] {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        if is_private_dir(dir, uid) {
            continue;
        }
        let metadata = fs::symlink_metadata(dir)?;
        let why = if !metadata.is_dir() {
            "is not a directory (or is a symbolic link)".to_string()
        } else if metadata.uid() != uid {
            format!(
                "belongs to uid {}, not to you (uid {}); someone else created it: \
                 remove it, or run where XDG_RUNTIME_DIR is a directory of yours",
                metadata.uid(),
                uid
            )
        } else {
            format!(
                "may be written by group or others (mode {:o}), who could put their \
                 own socket in place of yours: chmod go-w it",
                metadata.mode() & 0o7777
            )
        };
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("'{}' {}", dir.display(), why),
        ));
    }
    Ok(())
}
