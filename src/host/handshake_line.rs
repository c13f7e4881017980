//! Reading one peer's handshake line: bounded in size and time, with no
//! buffer for a peer that has sent nothing, and every byte read past the
//! line kept for the connection's [`Reader`].

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_lite::io::AsyncReadExt;

use super::{platform, Reader};
use crate::handshake::Handshake;
use crate::wait;

/// Bytes read per call while looking for the end of the handshake.
const READ_CHUNK: usize = 4096;

/// Why a peer's handshake was not accepted.
#[derive(Debug)]
pub(super) enum HandshakeFailure {
    TooLong(usize),
    TimedOut(Duration),
    /// Closed after sending part of a handshake.
    Closed,
    /// Closed without sending a byte: someone checking that we listen.
    Probe,
    Io(io::Error),
    Invalid(crate::handshake::HandshakeError),
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
        }
    }
}

/// Reads one handshake line of at most `limit` bytes within `timeout`, and
/// returns it parsed, with a [`Reader`] that yields every byte after it.
/// `heard` is set once the peer's first bytes (or its end) have arrived: a
/// peer that has sent nothing yet is the one to drop when room is needed.
pub(super) async fn read_handshake(
    mut inner: platform::Reader,
    limit: usize,
    timeout: Duration,
    heard: &AtomicBool,
) -> Result<(Handshake, Reader), HandshakeFailure> {
    let reading = async {
        // A silent peer costs no buffer: allocated once bytes arrive. (The
        // future is made in a statement of its own, so no borrow of
        // `inner` is held across the wait.)
        let readable = platform::readable(&inner);
        readable.await.map_err(HandshakeFailure::Io)?;
        heard.store(true, Ordering::Relaxed);
        let mut buffer = Vec::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let n = match inner.read(&mut chunk).await {
                Ok(0) if buffer.is_empty() => return Err(HandshakeFailure::Probe),
                Ok(0) => return Err(HandshakeFailure::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HandshakeFailure::Io(e)),
            };
            let searched = buffer.len();
            // (`get`: no panic sites for counts kept in range.)
            buffer.extend_from_slice(chunk.get(..n).unwrap_or_default());
            let new = buffer.get(searched..).unwrap_or_default();
            if let Some(i) = new.iter().position(|&b| b == b'\n') {
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
    let (buffer, end) = match wait::timeout_unless_zero(timeout, reading).await {
        Some(read) => read?,
        None => return Err(HandshakeFailure::TimedOut(timeout)),
    };
    let handshake = Handshake::parse(buffer.get(..end).unwrap_or_default())
        .map_err(HandshakeFailure::Invalid)?;
    let reader = Reader {
        early: buffer,
        early_pos: end,
        inner,
    };
    Ok((handshake, reader))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use async_io::Timer;
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
            let (handshake, mut reader) =
                read_handshake(ours, 1024, Duration::from_secs(5), &AtomicBool::new(false))
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
            let (handshake, mut reader) =
                read_handshake(ours, 1024, Duration::from_secs(5), &AtomicBool::new(false))
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
            assert!(read_handshake(
                ours,
                line.len(),
                Duration::from_secs(5),
                &AtomicBool::new(false)
            )
            .await
            .is_ok());
            let (mut peer, ours) = pair();
            peer.write_all(line).await.unwrap();
            let e = read_handshake(
                ours,
                line.len() - 1,
                Duration::from_secs(5),
                &AtomicBool::new(false),
            )
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
            let e = read_handshake(
                ours,
                10_000,
                Duration::from_secs(5),
                &AtomicBool::new(false),
            )
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
            let e = read_handshake(
                ours,
                1024,
                Duration::from_millis(100),
                &AtomicBool::new(false),
            )
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
            let e = read_handshake(ours, 1024, Duration::from_secs(5), &AtomicBool::new(false))
                .await
                .unwrap_err();
            assert!(matches!(e, HandshakeFailure::Probe), "{}", e);

            let (mut peer, ours) = pair();
            peer.write_all(b"{\"project\"").await.unwrap();
            drop(peer);
            let e = read_handshake(ours, 1024, Duration::from_secs(5), &AtomicBool::new(false))
                .await
                .unwrap_err();
            assert!(matches!(e, HandshakeFailure::Closed), "{}", e);

            let (mut peer, ours) = pair();
            peer.write_all(b"{\"project\":\"p\"}\n").await.unwrap();
            let e = read_handshake(ours, 1024, Duration::from_secs(5), &AtomicBool::new(false))
                .await
                .unwrap_err();
            assert_eq!(e.to_string(), "invalid handshake: 'requester' is missing");
        });
    }
}
