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
//! - **Restarts just work, and never steal.** A stale socket file of ours
//!   left by a crashed app (nothing listening) is replaced; a live one, or
//!   another user's, is never replaced: [`Listener::bind`] fails with
//!   [`BindError`] instead. Nothing the bind does follows a name another
//!   user could change (it works in directories it holds open), and a
//!   directory others can write is one line on stderr (see `unix.rs`). The
//!   file is removed when the listener is dropped. On Windows there is no file:
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
//!   that, the *oldest* one that has sent nothing yet is dropped (or, if
//!   all have spoken, the oldest), which is never a bridge that just
//!   connected. At the descriptor limit itself, the oldest silent peer
//!   gives its descriptor up for the next connection, and with none left
//!   a spare descriptor the listener keeps is let go for it (Unix), so the
//!   connections behind the silent ones are accepted at once, not after
//!   [`HANDSHAKE_TIMEOUT`]. A silent peer costs a socket and a small task,
//!   no buffer: the read buffer is only allocated once its first bytes
//!   arrive.
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
//! "server error" codes, the one the bridge's own error responses use
//! ([`bridge::ERROR_CODE`](crate::bridge::ERROR_CODE), the same code);
//! `<why>` is a JSON string, written by the bridge's error-line writer.
//!
//! # Who is calling
//!
//! The handshake names the CLI session a bridge belongs to, not the agent
//! behind each call: one Codex bridge carries all of a session's threads
//! (its sub-agents), and VS Code serves every chat through one server. The
//! CLIs name the caller in each tool call's `params._meta`, and [`caller`]
//! reads it (docs/handshake.md, "Who is calling, per request", says what
//! each CLI sends and what it proves: nothing, it is not authenticated).
//!
//! # Log lines
//!
//! Log lines go to stderr, prefixed `mcp-bridge:`, through [`diag`] (so a
//! stderr nobody reads never stalls accepting), or to the app's own log
//! through [`Options::log`], because a refused peer is
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

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_lite::io::AsyncRead;
use smol::channel::{self, Receiver};
use smol::Task;

use crate::diag;
use crate::handshake::Handshake;

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

// By concern: the accept loop, reading a handshake, the limited log about
// peers, the listener's settings, and turning a bridge away.
mod accept;
mod handshake_line;
mod options;
mod peer_log;
mod refusal;

pub use crate::caller::{caller, Caller};
/// The JSON-RPC error code of the refusal line: the crate's one error
/// code (`-32000`, the bridge's errors use it too), under the name the
/// host's users know it by.
pub use crate::envelope::ERROR_CODE as REFUSAL_CODE;
pub use accept::MAX_PENDING;
pub use options::{Options, HANDSHAKE_LIMIT, HANDSHAKE_TIMEOUT};
pub use peer_log::LogSink;

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
    /// Who is calling: the project and the requesting agent, as the peer
    /// wrote them. Any process of our user may connect and write any
    /// line: it says which agent the bridge speaks for, and proves
    /// nothing (see [`peer`](Self::peer) for what the kernel knows).
    pub handshake: Handshake,
    /// The process that connected, as the kernel recorded it: what an app
    /// that wants more than the identity line can check itself.
    pub peer: Peer,
    /// What the bridge sends after the handshake: the MCP client's messages.
    pub reader: Reader,
    /// Where the MCP server's messages go. Closing it (`close()`) tells the
    /// bridge no more will come; dropping both halves closes the connection.
    pub writer: Writer,
}

/// The process at the other end of a [`Connection`], as the kernel
/// recorded it when it connected, not as the peer says: on Linux its pid
/// and uid (`SO_PEERCRED`); on the other Unix systems its uid
/// (`getpeereid`), no pid; on Windows its pid
/// (`GetNamedPipeClientProcessId`), no uid (Windows users are SIDs, and
/// the pipe admits our own user only). The uid is always ours: the
/// listener refuses any other. A pid can be reused once that process
/// exits; check it while the connection is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Peer {
    /// The peer's process id, where the system says it (Linux, Windows).
    pub pid: Option<u32>,
    /// The peer's user id (Unix), where the system says it.
    pub uid: Option<u32>,
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

impl Listener {
    /// Binds `endpoint` (a socket path on Unix, a pipe name on Windows) and
    /// starts accepting in the background.
    ///
    /// The app need not run smol, or any runtime: the accept loop runs on
    /// smol's global executor, which has a thread of its own (`smol-1`), and
    /// the sockets are driven by `async-io`'s reactor thread, so `accept()`
    /// can be awaited from tokio or any other runtime (docs/host.md, "From
    /// tokio").
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
        Listener::bind_path(endpoint.as_ref(), options)
    }

    /// [`Listener::bind_with`] past its generic argument: one copy however
    /// many ways a caller binds (`serve` binds a path or an app's endpoint).
    #[inline(never)]
    fn bind_path(endpoint: &Path, options: Options) -> Result<Listener, BindError> {
        let (acceptor, file) =
            platform::bind(endpoint, &options.log).map_err(|source| BindError {
                endpoint: endpoint.to_path_buf(),
                source,
            })?;
        let (ready_sender, ready) = channel::bounded(1);
        let accepting = crate::spawn(accept::accept_loop(acceptor, options, ready_sender));
        Ok(Listener {
            endpoint: endpoint.to_path_buf(),
            ready,
            _file: file,
            _accepting: accepting,
        })
    }

    /// Binds the endpoint of the app named `name` for the user this process
    /// runs as: exactly where `mcp-bridge mcp-server --app <name>` looks
    /// ([`endpoint::for_app`](crate::endpoint::for_app)), so one MCP
    /// configuration serves every user and OS. On Unix the socket's
    /// directory (`<runtime dir>/<name>/`) and, for the `/tmp` fallback, the
    /// one above it are created owner-only where missing.
    ///
    /// ```no_run
    /// let listener = mcp_bridge::host::Listener::bind_app("myapp")?;
    /// println!("listening on {}", listener.endpoint().display());
    /// # Ok::<(), mcp_bridge::host::BindError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Listener::bind`], and `InvalidInput` for a name outside the
    /// rule, `PermissionDenied` for a directory on the way that another
    /// user owns or that others may write (someone else got there first).
    pub fn bind_app(name: &str) -> Result<Listener, BindError> {
        Listener::bind_app_with(name, Options::default())
    }

    /// [`Listener::bind_app`] with settings other than the defaults.
    pub fn bind_app_with(name: &str, options: Options) -> Result<Listener, BindError> {
        let endpoint = crate::endpoint::for_app(name).map_err(|e| BindError {
            endpoint: PathBuf::from(name),
            source: io::Error::new(io::ErrorKind::InvalidInput, e),
        })?;
        match crate::endpoint::prepare_app_endpoint(&endpoint) {
            Ok(()) => Listener::bind_with(endpoint, options),
            Err(source) => Err(BindError { endpoint, source }),
        }
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
            // (`get` and `zip`: no panic sites for positions kept in range.)
            let early = this.early.get(this.early_pos..).unwrap_or_default();
            let n = early.len().min(buf.len());
            for (to, from) in buf.iter_mut().zip(early) {
                *to = *from;
            }
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
    /// listening there; `AlreadyExists` means something that is not ours to
    /// replace is in the way: a file that is not a socket, or another
    /// user's stale socket.
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
                "something that is not ours to replace is in the way; it was left untouched"
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
