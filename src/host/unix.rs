//! Unix domain sockets: a 0600 socket file, stale-file recovery, and a peer
//! uid check.
//!
//! # Creating the socket file 0600 with no wider moment
//!
//! `bind(2)` creates the file with mode `0777 & !umask`, and Linux ignores a
//! `fchmod` on the socket before `bind`, so the mode cannot be set up front.
//! Two ways were weighed:
//!
//! - A restrictive umask around `bind`. The umask is process-wide: another
//!   thread creating a file at that moment (the app's own threads, in a
//!   library) would silently get the wrong mode, and its own umask change
//!   could undo ours. Rejected.
//! - Bind inside a fresh private directory (mode 0700, created next to the
//!   endpoint so it is on the same file system), `chmod` the socket to 0600
//!   while only we can reach it, then give it its public name. Chosen.
//!
//! The public name is given with `link(2)`, not `rename(2)`: `link` fails
//! when the name exists, so a socket that another process bound there in
//! the meantime is never replaced. A Unix socket is found by its inode, so
//! connecting through the link reaches our listener; the private name and
//! directory are then removed. The cost: the private path
//! (`<dir>/.mcpb<pid>.<n>/s`) can be a few bytes longer than the endpoint,
//! which matters only for paths within ~10 bytes of the OS limit (108 bytes
//! on Linux, 104 on macOS); `bind` then says so.
//!
//! As with any socket, the endpoint's directory should be writable by its
//! owner only (`$XDG_RUNTIME_DIR`, an app data directory): whoever can write
//! there can rename the file away, even if they cannot connect to it.
//!
//! # An existing file at the endpoint
//!
//! A socket whose listener is gone (connect says `ECONNREFUSED`) is stale
//! and removed; one that accepts, or is busy, is live and makes `bind` fail
//! with `AddrInUse`. Anything that is not a socket fails with
//! `AlreadyExists` and is left alone. The file is only removed if it is
//! still the same inode that was probed, and on drop only if it is still our
//! own, so a listener never deletes another's socket.
//!
//! # Leaving nothing behind
//!
//! A bind is most likely to fail at the descriptor limit (`EMFILE`), so
//! cleaning up after one must not need a descriptor: the private directory
//! is removed by name (`unlink` of its one entry, then `rmdir`), never by a
//! recursive removal, which opens the directory and would, at the limit,
//! leave it behind, holding a second link to the live socket when only the
//! socket's own descriptor was left. The file is removed at drop by the
//! path it had at bind time, made absolute and with the symbolic links of
//! its directory resolved then (`realpath`, which opens nothing): a change
//! of working directory since, or a link in the path pointed elsewhere,
//! cannot make the drop miss our file (or remove another).
//!
//! # The path's length
//!
//! A socket address holds at most [`MAX_PATH_BYTES`] bytes of path (107 on
//! Linux, 103 elsewhere), and the bridge refuses a longer endpoint before
//! trying it. `bind` checks the same limit, from the same constant, so it
//! never creates a socket no bridge can reach (`link` would happily give it
//! a longer name). The private path is shorter than that unless the file
//! name is very short; `bind` then says which path did not fit.
//!
//! # Noticing that a peer has gone
//!
//! [`hangup`] completes when the peer has closed both directions. On Linux
//! (and Android) the kernel reports exactly that as `POLLHUP` on our end
//! of a Unix stream socket (it sets it once the socket is shut down both
//! ways, which the peer's close does); the bridge's half-close after its
//! stdin ends shows only as `POLLIN`/`POLLRDHUP`, so it is not mistaken for
//! a hang-up (our own side never shuts its writing down while a session
//! runs, so that half of `POLLHUP` is always the peer's doing). The watcher waits for readability on the reactor (no wake-up
//! at all while the connection is idle), then asks `poll(2)` with a zero
//! timeout whether `POLLHUP` (or `POLLERR`) is set. If not, the socket is
//! readable for another reason: bytes the relay has not read yet (it may be
//! stuck writing to a command that does not read), or a half-close. Both
//! can last, and readability would then wake the watcher at once, again
//! and again; so it sleeps [`HANGUP_RECHECK`] before looking again.
//! Other kernels do not all keep `POLLHUP` for the full close (some raise
//! it as soon as the peer's writing side is shut, which would cut the
//! bridge's drain short), so there the watcher never completes and a
//! session ends as before, when its relay sees the end.
//!
//! # Peer credentials
//!
//! File permissions are the first gate; the second is the peer's uid from
//! the kernel (`SO_PEERCRED` on Linux and Android through rustix,
//! `getpeereid` on macOS and the BSDs). Only our own uid is let in, root
//! included: root can reach the file anyway, but need not reach the app.

use std::fs;
use std::future::Future;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::time::Duration;

use async_io::Async;
use rustix::io::Errno;
use smol::net::unix::{UnixListener, UnixStream};

use super::accept::Accepted;
use super::LogSink;
use crate::endpoint::peer_uid;
use crate::endpoint::MAX_PATH_BYTES;

pub(super) type Reader = UnixStream;
pub(super) type Writer = UnixStream;

/// Mode of the socket file: read and write (connect) for the owner only.
const SOCKET_MODE: u32 = 0o600;

/// How often an existing file at the endpoint is probed and, if stale,
/// removed before giving up (another process may be starting at the same
/// moment and win each race).
const BIND_ATTEMPTS: usize = 3;

/// Names tried for the private directory before giving up: a few are taken
/// only if an earlier process with our pid crashed mid-bind, or if someone
/// who can write to the endpoint's directory is squatting them.
const PRIVATE_DIR_ATTEMPTS: usize = 64;

/// Distinguishes the private directories of concurrent binds in one process.
static PRIVATE_DIRS: AtomicUsize = AtomicUsize::new(0);

/// How long the hang-up watcher sleeps when the socket is readable but not
/// hung up (unread bytes, or a half-close), before it looks again: four
/// cheap checks a second while that lasts, and a full close noticed within
/// this much after it.
#[cfg(any(target_os = "linux", target_os = "android"))]
const HANGUP_RECHECK: Duration = Duration::from_millis(250);

/// The listening socket, owned by the accept loop.
pub(super) struct Acceptor {
    listener: UnixListener,
    uid: u32,
}

/// The socket file: removed on drop if it is still ours.
#[derive(Debug)]
pub(super) struct SocketFile {
    /// Absolute, with the links of its directory resolved at bind time.
    path: PathBuf,
    dev: u64,
    ino: u64,
}

pub(super) fn bind(path: &Path, log: &LogSink) -> io::Result<(Acceptor, SocketFile)> {
    if path.file_name().is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the endpoint must be a file path",
        ));
    }
    // `Path` ignores a trailing '/', and the bind would then fail in a
    // directory it names "x.sock/", with a misleading "no such directory".
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path ends with '/', which names a directory; a socket path names a file",
        ));
    }
    // Bridges connect by this path, so it must fit in a socket address
    // (linking it into place would not mind its length): the bridge's own
    // limit, so neither side accepts a path the other refuses.
    let len = path.as_os_str().len();
    if len > MAX_PATH_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Unix socket path can have at most {} bytes, this one has {}",
                MAX_PATH_BYTES, len
            ),
        ));
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    // Where the file is removed at drop: the same file however the working
    // directory or a symlink in the path changes meanwhile.
    let lasting = lasting_path(path, parent);
    let private = PrivateDir::create(parent)?;
    let temporary = private.socket();
    let listener = match std::os::unix::net::UnixListener::bind(&temporary) {
        Ok(listener) => listener,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the socket path is too long: the socket is first bound at '{}' \
                     ({} bytes), and the OS allows about 100",
                    temporary.display(),
                    temporary.as_os_str().len()
                ),
            ))
        }
        Err(e) => return Err(e),
    };
    fs::set_permissions(&temporary, fs::Permissions::from_mode(SOCKET_MODE))?;
    let metadata = fs::symlink_metadata(&temporary)?;
    publish(&temporary, path, log)?;
    drop(private);

    let file = SocketFile {
        path: lasting,
        dev: metadata.dev(),
        ino: metadata.ino(),
    };
    listener.set_nonblocking(true)?;
    let acceptor = Acceptor {
        listener: UnixListener::try_from(listener)?,
        uid: rustix::process::getuid().as_raw(),
    };
    Ok((acceptor, file))
}

/// Gives the socket at `temporary` the name `path`, replacing a stale socket
/// there but never a live one or a file that is not a socket.
fn publish(temporary: &Path, path: &Path, log: &LogSink) -> io::Result<()> {
    for _ in 0..BIND_ATTEMPTS {
        match fs::hard_link(temporary, path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let existing = match fs::symlink_metadata(path) {
            Ok(metadata) => metadata,
            // Removed in the meantime: try again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !existing.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket exists at this path",
            ));
        }
        match probe(path) {
            Probe::Live => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "a live socket is listening at this path",
                ))
            }
            Probe::Gone => continue,
            Probe::Failed(e) => return Err(e),
            Probe::Stale => {}
        }
        // Remove only the file just probed: another process may have bound
        // a fresh socket there since.
        match fs::symlink_metadata(path) {
            Ok(now) if now.dev() == existing.dev() && now.ino() == existing.ino() => {
                match fs::remove_file(path) {
                    Ok(()) => log.line(format_args!(
                        "removed a stale socket at '{}' (nothing was listening)",
                        path.display()
                    )),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            _ => {}
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "another process keeps creating a socket at this path",
    ))
}

enum Probe {
    Live,
    Stale,
    Gone,
    Failed(io::Error),
}

/// Connects without blocking to find out whether anyone listens at `path`.
/// A non-blocking connect never waits for a busy listener: Linux says
/// `EAGAIN` when its backlog is full, which still means "live".
fn probe(path: &Path) -> Probe {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    let attempt = || -> Result<(), Errno> {
        let socket = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None)?;
        rustix::io::ioctl_fionbio(&socket, true)?;
        rustix::net::connect(&socket, &SocketAddrUnix::new(path)?)
    };
    match attempt() {
        Ok(()) | Err(Errno::INPROGRESS) | Err(Errno::AGAIN) => Probe::Live,
        Err(Errno::CONNREFUSED) => Probe::Stale,
        Err(Errno::NOENT) => Probe::Gone,
        Err(e) => Probe::Failed(e.into()),
    }
}

/// `path` as an absolute path with no symbolic link in its directory part,
/// as it is now, so that removing the socket file at drop finds the file
/// that was bound, not whatever a relative path or a re-targeted link names
/// by then. Resolving needs no descriptor (glibc's `realpath` walks the path
/// with `readlink`); if it fails, the path is only made absolute, which
/// covers a change of working directory.
fn lasting_path(path: &Path, parent: &Path) -> PathBuf {
    let name = match path.file_name() {
        Some(name) => name,
        None => return path.to_path_buf(),
    };
    if let Ok(parent) = fs::canonicalize(parent) {
        return parent.join(name);
    }
    match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    }
}

/// The one entry a private directory ever holds: the socket, one letter so
/// that the private path is as short as it can be.
const PRIVATE_SOCKET: &str = "s";

/// A directory only we can enter, removed (with the socket in it) on drop.
///
/// Removed entry by entry, by name (`unlink`, then `rmdir`): a recursive
/// removal would open the directory, and at the descriptor limit, which is
/// when a bind is most likely to fail, that fails and leaves the directory
/// behind, holding a second link to a live socket if the bind succeeded.
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create(parent: &Path) -> io::Result<PrivateDir> {
        let mut builder = fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        for _ in 0..PRIVATE_DIR_ATTEMPTS {
            // Short, to stay clear of the socket path length limit.
            let n = PRIVATE_DIRS.fetch_add(1, Ordering::Relaxed);
            let path = parent.join(format!(".mcpb{}.{}", std::process::id(), n));
            match builder.create(&path) {
                Ok(()) => return Ok(PrivateDir { path }),
                // Left behind by an earlier process with our pid.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "cannot create a private directory beside the endpoint: every name tried is taken",
        ))
    }
}

impl PrivateDir {
    fn socket(&self) -> PathBuf {
        self.path.join(PRIVATE_SOCKET)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.socket());
        let _ = fs::remove_dir(&self.path);
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        match fs::symlink_metadata(&self.path) {
            Ok(now) if now.dev() == self.dev && now.ino() == self.ino => {
                let _ = fs::remove_file(&self.path);
            }
            _ => {}
        }
    }
}

impl Acceptor {
    pub(super) async fn accept(&self) -> io::Result<Accepted> {
        let stream = match self.listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) if is_transient(&e) => return Ok(Accepted::Retry(e)),
            Err(e) => return Err(e),
        };
        Ok(match peer_uid(&stream) {
            Ok(uid) if uid == self.uid => Accepted::Peer(Box::new((stream.clone(), stream))),
            Ok(uid) => Accepted::Refused(format!(
                "a connection from uid {} (only uid {} may connect)",
                uid, self.uid
            )),
            Err(e) => Accepted::Refused(format!("a connection whose user cannot be told ({})", e)),
        })
    }
}

/// The most peers that may wait for their handshake at once: `most`, or
/// half the descriptors this process may open if that is less. Each
/// pending peer holds a descriptor; the other half is left for what the
/// app does with the bridges it accepted (`serve`'s children take four
/// each).
pub(super) fn pending_limit(most: usize) -> usize {
    let descriptors = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    match descriptors {
        Some(limit) => (limit / 2).clamp(1, most as u64) as usize,
        None => most,
    }
}

/// Completes when `stream` has bytes to read (or its end), so a silent
/// peer costs no read buffer.
pub(super) fn readable(stream: &Reader) -> impl Future<Output = io::Result<()>> + Send + 'static {
    let socket: Arc<Async<std::os::unix::net::UnixStream>> = stream.clone().into();
    async move { socket.readable().await }
}

/// Completes once the peer has closed the connection completely: see the
/// module docs.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn hangup(stream: &Reader) -> impl Future<Output = ()> + Send + 'static {
    let socket: Arc<Async<std::os::unix::net::UnixStream>> = stream.clone().into();
    async move {
        loop {
            if socket.readable().await.is_err() {
                // The reactor cannot watch it; the relay still ends the
                // session when it sees the end.
                return futures_lite::future::pending().await;
            }
            if hung_up(socket.get_ref()) {
                return;
            }
            async_io::Timer::after(HANGUP_RECHECK).await;
        }
    }
}

/// Never completes: this system's `POLLHUP` cannot tell a hang-up from a
/// half-close (see the module docs).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn hangup(_stream: &Reader) -> impl Future<Output = ()> + Send + 'static {
    futures_lite::future::pending()
}

/// Whether the kernel says the socket is shut down both ways (or failed),
/// asked without waiting.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn hung_up(socket: &std::os::unix::net::UnixStream) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(socket, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&now)) {
        Ok(_) => fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR),
        Err(_) => false,
    }
}

/// Accept errors that say nothing about the listening socket itself.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        Errno::from_io_error(e),
        Some(Errno::CONNABORTED)
            | Some(Errno::INTR)
            | Some(Errno::MFILE)
            | Some(Errno::NFILE)
            | Some(Errno::NOBUFS)
            | Some(Errno::NOMEM)
            | Some(Errno::PROTO)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors() {
        assert!(is_transient(&Errno::MFILE.into()));
        assert!(is_transient(&Errno::CONNABORTED.into()));
        assert!(!is_transient(&Errno::BADF.into()));
        assert!(!is_transient(&io::Error::new(io::ErrorKind::Other, "x")));
    }
}
