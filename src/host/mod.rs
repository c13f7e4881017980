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
//! - **No byte is lost.** Bytes that arrive right behind the handshake line
//!   are handed over at the front of the connection's [`Reader`].
//!
//! Log lines go to stderr, prefixed `mcp-bridge:`, because a refused peer
//! is something the app's operator must be able to see, and accept() has
//! no one else to tell.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt};
use smol::channel::{self, Receiver, Sender};
use smol::lock::Semaphore;
use smol::Task;

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
/// the app. Beyond it, new peers wait in the kernel's backlog. Bounds our
/// memory at this many handshake buffers when the app stops calling accept.
const MAX_PENDING: usize = 256;

/// How long the accept loop pauses after a transient failure (such as
/// running out of file descriptors) so it does not spin while it lasts.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Bytes read per call while looking for the end of the handshake.
const READ_CHUNK: usize = 4096;

/// Settings of a [`Listener`], for [`Listener::bind_with`]. New settings
/// are added as fields with a default, so build it from `default()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long a peer has, from being accepted, to send its whole
    /// handshake line. Default: [`HANDSHAKE_TIMEOUT`].
    pub handshake_timeout: Duration,
    /// Longest handshake line accepted, final `\n` included. Default:
    /// [`HANDSHAKE_LIMIT`].
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
    /// The accept loop; dropping it cancels the loop.
    _accepting: Task<()>,
    /// Fires on drop, which ends every handshake still being read.
    _stop: wait::StopOnDrop,
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
        let (stop, stopped) = wait::stop_signal();
        let accepting = smol::spawn(accept_loop(acceptor, options, ready_sender, stopped));
        Ok(Listener {
            endpoint: endpoint.to_path_buf(),
            ready,
            _file: file,
            _accepting: accepting,
            _stop: stop,
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

/// Writes one diagnostic line on stderr.
fn log(message: fmt::Arguments<'_>) {
    eprintln!("mcp-bridge: {}", message);
}

/// Accepts peers for as long as the listener lives, reading each one's
/// handshake in its own task so a slow peer holds up nobody else.
async fn accept_loop(
    acceptor: platform::Acceptor,
    options: Options,
    ready: Sender<io::Result<Connection>>,
    stopped: wait::Stopped,
) {
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    loop {
        let permit = pending.acquire_arc().await;
        let (reader, writer) = match acceptor.accept().await {
            Ok(Accepted::Peer(streams)) => *streams,
            Ok(Accepted::Refused(why)) => {
                log(format_args!("refused {}", why));
                continue;
            }
            Ok(Accepted::Retry(e)) => {
                log(format_args!("accepting a connection failed: {}", e));
                Timer::after(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => {
                log(format_args!("stopped accepting connections: {}", e));
                let _ = ready.send(Err(e)).await;
                return;
            }
        };
        let ready = ready.clone();
        let stopped = stopped.clone();
        smol::spawn(async move {
            let handshake =
                read_handshake(reader, options.handshake_limit, options.handshake_timeout);
            let stopped = async {
                stopped.wait().await;
                Err(HandshakeFailure::Stopped)
            };
            match future::or(handshake, stopped).await {
                Ok((handshake, reader)) => {
                    let connection = Connection {
                        handshake,
                        reader,
                        writer: Writer(writer),
                    };
                    // Fails only when the listener is gone: the peer is
                    // then dropped, which is all there is left to do.
                    let _ = ready.send(Ok(connection)).await;
                }
                // Not worth a line: a shutdown, or a liveness probe (such as
                // another `Listener::bind` checking whether we are alive).
                Err(HandshakeFailure::Stopped) | Err(HandshakeFailure::Probe) => {}
                Err(failure) => log(format_args!("dropped a connection: {}", failure)),
            }
            drop(permit);
        })
        .detach();
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
    /// The listener was dropped while waiting: not worth a log line.
    Stopped,
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
            HandshakeFailure::Stopped => f.write_str("the listener stopped"),
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
        let mut buffer = Vec::new();
        let mut chunk = [0u8; READ_CHUNK];
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
    let (buffer, end) = match wait::timeout(timeout, reading).await {
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
    fn bind_error_texts_give_a_hint() {
        let e = BindError {
            endpoint: PathBuf::from("/tmp/x.sock"),
            source: io::Error::new(io::ErrorKind::AddrInUse, "in use"),
        };
        assert!(e.to_string().contains("another process is listening there"));
        assert!(e.to_string().contains("/tmp/x.sock"));
    }
}
