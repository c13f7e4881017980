//! The byte pump between a client (an MCP CLI's stdio) and a server (the
//! app's socket), used by the bridge and by anything else that needs a
//! transparent, full-duplex, bounded-shutdown relay.
//!
//! Why it looks the way it does:
//!
//! - **Two independent pumps, never lockstep.** JSON-RPC is not one reply per
//!   request: notifications get no reply and servers push messages of their
//!   own. A relay that waits for "the reply" after each line deadlocks on the
//!   first notification. Each direction therefore runs on its own and the two
//!   are raced with `futures_lite::future::or`.
//! - **Bytes, not lines.** Nothing is decoded or re-framed: whatever `read`
//!   returns is written out at once, so invalid UTF-8, CRLF, NUL bytes, a last
//!   line without `\n`, and a 256 MiB line all pass unchanged, with memory
//!   bounded by one [`BUFFER_SIZE`] buffer per direction, and nothing ever
//!   waits in a buffer for "the rest of the line".
//! - **Every ending is bounded.** Client EOF half-closes the server side and
//!   then keeps relaying replies for at most the drain grace; server EOF ends
//!   the relay at once; a client that stopped reading its output ends it too.
//! - **A half-close the server can see.** `close()` means different things
//!   to different streams: a socket's shuts its writing side down, a pipe's
//!   only flushes. So at client EOF the server side's writer is closed and
//!   then dropped, which closes a pipe's descriptor; a server that answers
//!   at its stdin's end (and a `cat` that exits there) sees the end at once
//!   instead of the drain grace later. The tests check this on real pipes
//!   and sockets: in-memory pipes signal EOF on `close` and would hide it.

use std::fmt;
use std::io;
use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::wait;

// Part of the relay's API, defined with the I/O helpers every stream shares.
pub use crate::io::BUFFER_SIZE;

/// How the relay ended when it ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The client closed its input (stdin EOF). `drained` tells whether the
    /// server then closed its side within the drain grace (`true`) or the
    /// grace ran out first (`false`).
    ClientClosed {
        /// The server's EOF arrived within the grace.
        drained: bool,
    },
    /// The server closed the connection (EOF or reset) first.
    ServerClosed,
    /// Whoever reads the client's output went away (broken pipe): nobody is
    /// left to receive replies, so there is no reason to go on.
    ClientGone,
}

/// The step of the relay that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading what the client sends (the bridge's stdin).
    ReadClient,
    /// Writing to the server (the app's socket).
    WriteServer,
    /// Reading what the server sends (the app's socket).
    ReadServer,
    /// Writing to the client (the bridge's stdout).
    WriteClient,
}

/// An I/O error that stopped the relay, with the step it happened in. Its
/// Display text names the step; `source()` is the I/O error.
#[derive(Debug)]
pub struct RelayError {
    pub(crate) stage: Stage,
    pub(crate) source: io::Error,
}

impl RelayError {
    /// Which step failed.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The underlying I/O error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl fmt::Display for RelayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.stage {
            Stage::ReadClient => "reading from the client",
            Stage::WriteServer => "writing to the server",
            Stage::ReadServer => "reading from the server",
            Stage::WriteClient => "writing to the client",
        };
        write!(f, "{} failed", what)
    }
}

impl std::error::Error for RelayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Errors that mean "the other end went away", not "something broke".
/// `WriteZero` is `write_all`'s word for a writer that takes nothing more:
/// a stream whose reader is gone for good (an in-memory pipe's, where a
/// socket says `EPIPE`).
pub(crate) fn is_hangup(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::WriteZero
    )
}

/// Relays `client_in` to `server_out` and `server_in` to `client_out` at the
/// same time until one side ends, as described in the [module docs](self).
///
/// When the client's input ends, `server_out` is closed and dropped, so the
/// server sees EOF: for a socket, `close` is the half-close
/// (`shutdown(SHUT_WR)`); for a pipe, such as a child's stdin, only
/// dropping it closes the descriptor. Replies keep flowing to `client_out`
/// until the server closes too or `drain_grace` passes.
pub async fn relay<CR, CW, SR, SW>(
    client_in: CR,
    client_out: CW,
    server_in: SR,
    server_out: SW,
    drain_grace: Duration,
) -> Result<Ending, RelayError>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    SR: AsyncRead + Unpin,
    SW: AsyncWrite + Unpin,
{
    let ignore = |_: &[u8]| {};
    relay_watched(
        client_in,
        client_out,
        server_in,
        server_out,
        drain_grace,
        ignore,
        ignore,
    )
    .await
}

/// [`relay`], showing every chunk to a watcher before it is forwarded:
/// `up` sees what the client sends, `down` what the server sends, in
/// order, each chunk as it was read. They only look: the bytes are
/// forwarded unchanged whatever they do, and a watcher that needs whole
/// lines keeps its own state across chunks (the bridge feeds a JSON-RPC
/// envelope scanner).
pub(crate) async fn relay_watched<CR, CW, SR, SW>(
    client_in: CR,
    client_out: CW,
    server_in: SR,
    server_out: SW,
    drain_grace: Duration,
    up: impl FnMut(&[u8]),
    down: impl FnMut(&[u8]),
) -> Result<Ending, RelayError>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    SR: AsyncRead + Unpin,
    SW: AsyncWrite + Unpin,
{
    let up = pump(
        client_in,
        server_out,
        Stage::ReadClient,
        Stage::WriteServer,
        up,
    );
    let down = pump(
        server_in,
        client_out,
        Stage::ReadServer,
        Stage::WriteClient,
        down,
    );
    futures_lite::pin!(up);
    futures_lite::pin!(down);

    // Biased towards `down`: when both are ready, replies go out first.
    let up_ended = future::or(async { Err((&mut down).await) }, async {
        Ok((&mut up).await)
    })
    .await;

    let server_out = match up_ended {
        Err(down_result) => return down_ending(down_result),
        Ok(Ok(server_out)) => server_out,
        // The server is gone while the client is not: what it sent before
        // going may still be unread, and is relayed within the grace. It
        // is the server that closed, not the client.
        Ok(Err(e)) if e.stage == Stage::WriteServer && is_hangup(&e.source) => {
            return match wait::timeout(drain_grace, &mut down).await {
                Some(result) => down_ending(result),
                None => Ok(Ending::ServerClosed),
            };
        }
        Ok(Err(e)) => return Err(e),
    };

    // Client EOF: tell the server (half-close) and drain in-flight replies.
    let drained = close_and_drain(server_out, &mut down, drain_grace).await;
    match drained {
        None => Ok(Ending::ClientClosed { drained: false }),
        Some(result) => match down_ending(result)? {
            Ending::ServerClosed => Ok(Ending::ClientClosed { drained: true }),
            other => Ok(other),
        },
    }
}

/// At the client's EOF: half-closes `writer` (the server's side) and waits
/// for `drain` (the replies in flight), the close and the drain both bounded
/// by one `grace`; `None` when it ran out first. The close gets no say in
/// when the drain ends: a close that waits (a pipe's flush, with a server
/// that stopped reading) must not hold the deadline back.
pub(crate) async fn close_and_drain<W, T>(
    mut writer: W,
    drain: impl std::future::Future<Output = T>,
    grace: Duration,
) -> Option<T>
where
    W: AsyncWrite + Unpin,
{
    let half_close = async move {
        // An error here means the server is already gone, which the drain
        // observes as its EOF.
        let _ = writer.close().await;
        // `close` shuts a socket's writing side down, but for a pipe (a
        // child's stdin) it only flushes: its reader sees EOF once the
        // last descriptor of the writing end is closed, which is ours,
        // dropped here rather than when the drain ends.
        drop(writer);
        future::pending().await
    };
    let deadline = async {
        crate::clock::after(grace).await;
        None
    };
    future::or(
        async { Some(drain.await) },
        future::or(half_close, deadline),
    )
    .await
}

/// Maps the end of the server-to-client pump to the relay's ending.
fn down_ending<W>(result: Result<W, RelayError>) -> Result<Ending, RelayError> {
    match result {
        Ok(_) => Ok(Ending::ServerClosed),
        Err(e) if e.stage == Stage::WriteClient && is_hangup(&e.source) => Ok(Ending::ClientGone),
        Err(e) => Err(e),
    }
}

/// Copies `reader` to `writer` until EOF, forwarding each read at once.
/// Returns the writer, flushed, so the caller can close it.
async fn pump<R, W>(
    mut reader: R,
    mut writer: W,
    read_stage: Stage,
    write_stage: Stage,
    mut watch: impl FnMut(&[u8]),
) -> Result<W, RelayError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER_SIZE];
    let write_error = |source| RelayError {
        stage: write_stage,
        source,
    };
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A reset peer has nothing more to say: that is its EOF.
            Err(e) if is_hangup(&e) => break,
            Err(source) => {
                return Err(RelayError {
                    stage: read_stage,
                    source,
                })
            }
        };
        let chunk = buf.get(..n).unwrap_or_default();
        watch(chunk);
        writer.write_all(chunk).await.map_err(write_error)?;
        writer.flush().await.map_err(write_error)?;
    }
    writer.flush().await.map_err(write_error)?;
    Ok(writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_io::Timer;
    use futures_lite::io::{BufReader, Cursor};
    use futures_lite::AsyncBufReadExt;
    use std::time::Instant;

    /// A bounded in-memory byte pipe (the reader and writer ends of one
    /// direction), from the same `piper` crate `blocking` uses inside smol.
    fn pipe() -> (piper::Reader, piper::Writer) {
        piper::pipe(4096)
    }

    async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> String {
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        line
    }

    fn grace() -> Duration {
        Duration::from_secs(5)
    }

    #[test]
    fn both_directions() {
        smol::block_on(async {
            let client_in = Cursor::new(b"{\"id\":1,\"method\":\"tools/call\"}\n".to_vec());
            let mut client_out = Vec::new();
            let (server_in, mut server_tx) = pipe();
            let (server_rx, server_out) = pipe();

            let server = smol::spawn(async move {
                let mut rx = BufReader::new(server_rx);
                let request = read_line(&mut rx).await;
                let reply = b"{\"id\":1,\"result\":\"ok\"}\n";
                server_tx.write_all(reply).await.unwrap();
                // Our reader sees EOF once the relay half-closes.
                assert_eq!(read_line(&mut rx).await, "");
                request
            });
            let ending = relay(client_in, &mut client_out, server_in, server_out, grace())
                .await
                .unwrap();
            assert_eq!(server.await, "{\"id\":1,\"method\":\"tools/call\"}\n");
            assert_eq!(client_out, b"{\"id\":1,\"result\":\"ok\"}\n");
            assert_eq!(ending, Ending::ClientClosed { drained: true });
        });
    }

    /// The deadlock a lockstep relay has: a notification gets no reply, and
    /// the request after it must still reach the server.
    #[test]
    fn notification_does_not_stall() {
        smol::block_on(async {
            let client_in = Cursor::new(
                b"{\"id\":1,\"method\":\"initialize\"}\n\
                  {\"method\":\"notifications/initialized\"}\n\
                  {\"id\":2,\"method\":\"tools/list\"}\n"
                    .to_vec(),
            );
            let mut client_out = Vec::new();
            let (server_in, mut server_tx) = pipe();
            let (server_rx, server_out) = pipe();
            let server = smol::spawn(async move {
                let mut rx = BufReader::new(server_rx);
                let mut seen = Vec::new();
                loop {
                    let line = read_line(&mut rx).await;
                    if line.is_empty() {
                        break seen;
                    }
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                    if let Some(id) = v.get("id") {
                        let reply = format!("{{\"id\":{},\"result\":{{}}}}\n", id);
                        server_tx.write_all(reply.as_bytes()).await.unwrap();
                    }
                    seen.push(line);
                }
            });
            let ending = future::or(
                async {
                    Some(
                        relay(client_in, &mut client_out, server_in, server_out, grace())
                            .await
                            .unwrap(),
                    )
                },
                async {
                    Timer::after(Duration::from_secs(10)).await;
                    None
                },
            )
            .await
            .expect("the relay must not stall on a notification");
            assert_eq!(ending, Ending::ClientClosed { drained: true });
            assert_eq!(server.await.len(), 3);
            assert_eq!(
                client_out,
                b"{\"id\":1,\"result\":{}}\n{\"id\":2,\"result\":{}}\n".to_vec()
            );
        });
    }

    #[test]
    fn immediate_client_eof() {
        smol::block_on(async {
            let mut client_out = Vec::new();
            let (server_in, server_tx) = pipe();
            let (server_rx, server_out) = pipe();
            let server = smol::spawn(async move {
                let mut rest = Vec::new();
                let mut rx = server_rx;
                rx.read_to_end(&mut rest).await.unwrap();
                drop(server_tx);
                rest
            });
            let ending = relay(
                Cursor::new(Vec::new()),
                &mut client_out,
                server_in,
                server_out,
                grace(),
            )
            .await
            .unwrap();
            assert_eq!(ending, Ending::ClientClosed { drained: true });
            assert!(server.await.is_empty());
            assert!(client_out.is_empty());
        });
    }

    /// A reply the server sends after the client's EOF still reaches the
    /// client, even if the server takes a while (but less than the grace).
    #[test]
    fn drain_delivers_in_flight_reply() {
        smol::block_on(async {
            let client_in = Cursor::new(b"{\"id\":7,\"method\":\"slow\"}\n".to_vec());
            let mut client_out = Vec::new();
            let (server_in, mut server_tx) = pipe();
            let (server_rx, server_out) = pipe();
            let server = smol::spawn(async move {
                let mut rx = BufReader::new(server_rx);
                read_line(&mut rx).await;
                assert_eq!(read_line(&mut rx).await, "", "half-closed before the reply");
                Timer::after(Duration::from_millis(200)).await;
                server_tx
                    .write_all(b"{\"id\":7,\"result\":1}\n")
                    .await
                    .unwrap();
            });
            let ending = relay(client_in, &mut client_out, server_in, server_out, grace())
                .await
                .unwrap();
            server.await;
            assert_eq!(ending, Ending::ClientClosed { drained: true });
            assert_eq!(client_out, b"{\"id\":7,\"result\":1}\n");
        });
    }

    /// A server that never answers and never closes cannot hold the relay
    /// past the grace.
    #[test]
    fn drain_is_bounded() {
        smol::block_on(async {
            let mut client_out = Vec::new();
            let (server_in, server_tx) = pipe();
            let (_server_rx, server_out) = pipe();
            let grace = Duration::from_millis(300);
            let start = Instant::now();
            let ending = relay(
                Cursor::new(b"{\"id\":1}\n".to_vec()),
                &mut client_out,
                server_in,
                server_out,
                grace,
            )
            .await
            .unwrap();
            let took = start.elapsed();
            assert_eq!(ending, Ending::ClientClosed { drained: false });
            assert!(took >= grace, "ended before the grace: {:?}", took);
            assert!(
                took < Duration::from_secs(5),
                "drain not bounded: {:?}",
                took
            );
            drop(server_tx);
        });
    }

    #[test]
    fn server_eof_ends_relay_while_client_is_silent() {
        smol::block_on(async {
            // The client never sends anything and never closes.
            let (client_in, _client_tx) = pipe();
            let mut client_out = Vec::new();
            let (server_in, mut server_tx) = pipe();
            let (_server_rx, server_out) = pipe();
            server_tx.write_all(b"{\"method\":\"bye\"}").await.unwrap();
            drop(server_tx);
            let ending = relay(client_in, &mut client_out, server_in, server_out, grace())
                .await
                .unwrap();
            assert_eq!(ending, Ending::ServerClosed);
            assert_eq!(
                client_out, b"{\"method\":\"bye\"}",
                "partial line delivered"
            );
        });
    }

    /// Bytes that are not text, and framing that is not `\n`, pass unchanged
    /// in both directions.
    #[test]
    fn arbitrary_bytes_are_relayed_exactly() {
        smol::block_on(async {
            let up: Vec<u8> = b"\xff\xfe\x00bad utf8\r\n{\"a\":1}\r\nno newline".to_vec();
            let down: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
            let mut client_out = Vec::new();
            let (server_in, mut server_tx) = pipe();
            let (mut server_rx, server_out) = pipe();
            let expected_down = down.clone();
            let server = smol::spawn(async move {
                // The writer half stays open until the client's EOF has
                // arrived: closing it earlier would make "the server closed
                // first" a race with "the client closed first".
                let (sent, all_sent) = smol::channel::bounded::<()>(1);
                let writer = smol::spawn(async move {
                    server_tx.write_all(&down).await.unwrap();
                    drop(sent);
                    server_tx
                });
                let mut got = Vec::new();
                server_rx.read_to_end(&mut got).await.unwrap();
                let _ = all_sent.recv().await;
                drop(writer.await);
                got
            });
            let ending = relay(
                Cursor::new(up.clone()),
                &mut client_out,
                server_in,
                server_out,
                grace(),
            )
            .await
            .unwrap();
            assert_eq!(ending, Ending::ClientClosed { drained: true });
            assert_eq!(server.await, up);
            assert_eq!(client_out.len(), expected_down.len());
            assert!(client_out == expected_down);
        });
    }

    /// Longer than anything here takes on a loaded machine; a relay that
    /// needs it has missed the server's end.
    #[cfg(unix)]
    const HANG_GUARD: Duration = Duration::from_secs(60);

    /// A command that answers at its stdin's end, as a server finishing
    /// its work at EOF does: everything it read, then a last line.
    #[cfg(unix)]
    fn answers_at_eof() -> smol::process::Child {
        smol::process::Command::new("sh")
            .args(["-c", "cat; echo '{\"bye\":1}'"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The half-close on a real pipe (a child's stdin): `close` only
    /// flushes a pipe, so unless the relay also lets go of the descriptor
    /// the child never sees EOF, its last reply is lost to the drain
    /// grace, and every such session lasts the whole grace. Many times in
    /// a row, since the end races the reply.
    #[cfg(unix)]
    #[test]
    fn a_child_sees_eof_on_its_stdin_pipe_and_its_last_reply_arrives() {
        smol::block_on(async {
            for _ in 0..20 {
                let mut child = answers_at_eof();
                let stdin = child.stdin.take().unwrap();
                let stdout = child.stdout.take().unwrap();
                let mut client_out = Vec::new();
                let ending = relay(
                    Cursor::new(b"{\"id\":1}\n".to_vec()),
                    &mut client_out,
                    stdout,
                    stdin,
                    HANG_GUARD,
                )
                .await
                .unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&client_out),
                    "{\"id\":1}\n{\"bye\":1}\n"
                );
                assert_eq!(ending, Ending::ClientClosed { drained: true });
                assert!(child.status().await.unwrap().success());
            }
        });
    }

    /// The same on a real pipe as the client's input: the child's EOF
    /// comes from the relay's, not from the end of the process.
    #[cfg(unix)]
    #[test]
    fn a_pipe_client_eof_is_passed_on_to_a_pipe_server() {
        smol::block_on(async {
            // The client: a command that writes one line and exits.
            let mut client = smol::process::Command::new("sh")
                .args(["-c", "echo '{\"id\":2}'"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let client_in = client.stdout.take().unwrap();
            let mut server = answers_at_eof();
            let stdin = server.stdin.take().unwrap();
            let stdout = server.stdout.take().unwrap();
            let mut client_out = Vec::new();
            let ending = relay(client_in, &mut client_out, stdout, stdin, HANG_GUARD)
                .await
                .unwrap();
            assert_eq!(ending, Ending::ClientClosed { drained: true });
            assert_eq!(
                String::from_utf8_lossy(&client_out),
                "{\"id\":2}\n{\"bye\":1}\n"
            );
            assert!(server.status().await.unwrap().success());
            assert!(client.status().await.unwrap().success());
        });
    }

    /// The half-close on a real socket: the server reads to its EOF while
    /// the relay still holds the socket for the replies, then answers.
    #[cfg(unix)]
    #[test]
    fn a_socket_server_sees_eof_and_its_last_reply_arrives() {
        smol::block_on(async {
            for _ in 0..20 {
                let (ours, theirs) = smol::net::unix::UnixStream::pair().unwrap();
                let server = smol::spawn(async move {
                    let mut theirs = theirs;
                    let mut got = Vec::new();
                    theirs.read_to_end(&mut got).await.unwrap();
                    theirs.write_all(b"{\"bye\":1}\n").await.unwrap();
                    got
                });
                let mut client_out = Vec::new();
                let ending = relay(
                    Cursor::new(b"{\"id\":3}\n".to_vec()),
                    &mut client_out,
                    ours.clone(),
                    ours,
                    HANG_GUARD,
                )
                .await
                .unwrap();
                assert_eq!(ending, Ending::ClientClosed { drained: true });
                assert_eq!(server.await, b"{\"id\":3}\n");
                assert_eq!(client_out, b"{\"bye\":1}\n");
            }
        });
    }

    /// Writers that misbehave the ways real streams do.
    enum OddWriter {
        /// Every write fails with this kind.
        Failing(io::ErrorKind),
        /// Takes every byte, but its close never completes, like a pipe
        /// flush waiting on a server that stopped reading.
        StuckClose,
    }

    impl AsyncWrite for OddWriter {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            std::task::Poll::Ready(match *self {
                OddWriter::Failing(kind) => Err(kind.into()),
                OddWriter::StuckClose => Ok(buf.len()),
            })
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            match *self {
                OddWriter::Failing(_) => std::task::Poll::Ready(Ok(())),
                OddWriter::StuckClose => std::task::Poll::Pending,
            }
        }
    }

    #[test]
    fn closed_client_output_ends_relay() {
        smol::block_on(async {
            let (client_in, _client_tx) = pipe();
            let (server_in, mut server_tx) = pipe();
            let (_server_rx, server_out) = pipe();
            server_tx.write_all(b"{\"id\":1}\n").await.unwrap();
            let ending = relay(
                client_in,
                OddWriter::Failing(io::ErrorKind::BrokenPipe),
                server_in,
                server_out,
                grace(),
            )
            .await
            .unwrap();
            assert_eq!(ending, Ending::ClientGone);
        });
    }

    #[test]
    fn other_write_errors_are_reported_with_their_stage() {
        smol::block_on(async {
            let (server_in, _server_tx) = pipe();
            let err = relay(
                Cursor::new(b"x".to_vec()),
                Vec::new(),
                server_in,
                OddWriter::Failing(io::ErrorKind::PermissionDenied),
                grace(),
            )
            .await
            .unwrap_err();
            assert_eq!(err.stage(), Stage::WriteServer);
            assert!(
                err.to_string().starts_with("writing to the server failed"),
                "{}",
                err
            );
        });
    }

    #[test]
    fn a_close_that_never_completes_does_not_outlast_the_grace() {
        smol::block_on(async {
            let (server_in, _server_tx) = pipe();
            let grace = Duration::from_millis(200);
            let relayed = relay(
                Cursor::new(b"{\"id\":1}\n".to_vec()),
                Vec::new(),
                server_in,
                OddWriter::StuckClose,
                grace,
            );
            let hung = async {
                Timer::after(Duration::from_secs(30)).await;
                panic!("the relay outlasted its drain grace by 30 s")
            };
            let ending = future::or(relayed, hung).await.unwrap();
            assert_eq!(ending, Ending::ClientClosed { drained: false });
        });
    }
}
