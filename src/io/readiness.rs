//! Read-side readiness bookkeeping for this crate's own non-blocking Unix
//! streams (stdio and the endpoint's socket); the relay itself stays
//! generic and never sees it.

use std::io;
use std::task::{Context, Poll};

/// A read that returns fewer bytes than this (and than it asked for) is taken
/// to mean "the source is empty and the peer is waiting for an answer": the
/// size of a JSON-RPC message, not of a bulk transfer, whose partial reads
/// are larger and usually followed at once by more data.
const MESSAGE_READ: usize = 16 * 1024;

/// Read-side readiness bookkeeping shared by this crate's non-blocking
/// streams (stdio, the endpoint's socket).
///
/// A short read has emptied a pipe or a stream socket, so the next read
/// would only fail with `EAGAIN` (twice, in fact, with async-io's one-shot
/// registration: once more after the wake-up that is already stale). After
/// a message-sized short read ([`MESSAGE_READ`]) the next read therefore
/// waits for readiness first, and the pump that was not woken costs no system
/// call when it is polled: 16 system calls per 200-byte round trip instead of
/// 20. Bulk reads keep trying the read first, as the source usually has more.
/// Nothing can be missed: readiness is level-triggered when it is re-armed,
/// so bytes that arrived meanwhile wake us at once.
#[derive(Debug, Default)]
pub(crate) struct ReadReadiness {
    drained: bool,
}

impl ReadReadiness {
    /// Reads into `buf` with the non-blocking `read`, waiting with
    /// `poll_readable` while the source is (known to be) empty.
    pub(crate) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
        mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
        mut poll_readable: impl FnMut(&mut Context<'_>) -> Poll<io::Result<()>>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if self.drained {
                futures_lite::ready!(poll_readable(cx))?;
                self.drained = false;
            }
            match read(buf) {
                Ok(n) => {
                    self.drained = n < buf.len() && n < MESSAGE_READ;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future;

    /// A buffer larger than [`MESSAGE_READ`], as the streams' own are.
    const BUF: usize = 64 * 1024;

    /// Polls `readiness` once with a [`BUF`]-byte buffer and the given fake
    /// `read` and `poll_readable`.
    fn poll_once(
        readiness: &mut ReadReadiness,
        mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
        mut poll_readable: impl FnMut(&mut Context<'_>) -> Poll<io::Result<()>>,
    ) -> Poll<io::Result<usize>> {
        let mut buf = vec![0u8; BUF];
        smol::block_on(future::poll_fn(|cx| {
            Poll::Ready(readiness.poll_read(cx, &mut buf, &mut read, &mut poll_readable))
        }))
    }

    fn read_n(n: usize) -> impl FnMut(&mut [u8]) -> io::Result<usize> {
        move |_| Ok(n)
    }

    fn never_read(_: &mut [u8]) -> io::Result<usize> {
        panic!("read while the source is known to be empty")
    }

    fn never_polled(_: &mut Context<'_>) -> Poll<io::Result<()>> {
        panic!("waited for readiness although the source may have more")
    }

    fn not_ready(_: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }

    fn ready(_: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn assert_read(poll: Poll<io::Result<usize>>, expected: usize) {
        match poll {
            Poll::Ready(Ok(n)) => assert_eq!(n, expected),
            Poll::Ready(Err(e)) => panic!("read failed: {}", e),
            Poll::Pending => panic!("pending, expected a read of {}", expected),
        }
    }

    /// After a message-sized short read the source is empty and the peer
    /// waits for an answer: the next read waits for readiness first instead
    /// of costing a system call that can only fail with `EAGAIN`.
    #[test]
    fn a_short_message_sized_read_waits_for_readiness_next() {
        let mut readiness = ReadReadiness::default();
        assert_read(poll_once(&mut readiness, read_n(200), never_polled), 200);
        assert!(poll_once(&mut readiness, never_read, not_ready).is_pending());
        assert!(
            poll_once(&mut readiness, never_read, not_ready).is_pending(),
            "still waiting"
        );
        assert_read(poll_once(&mut readiness, read_n(7), ready), 7);
    }

    /// A bulk read, short or full, is usually followed at once by more data:
    /// the next read tries first.
    #[test]
    fn a_bulk_read_reads_first_next() {
        let mut readiness = ReadReadiness::default();
        assert_read(
            poll_once(&mut readiness, read_n(MESSAGE_READ), never_polled),
            MESSAGE_READ,
        );
        assert_read(poll_once(&mut readiness, read_n(BUF), never_polled), BUF);
        assert_read(poll_once(&mut readiness, read_n(100), never_polled), 100);
    }

    /// `WouldBlock` means empty: wait for readiness, then read again, and
    /// only then report what was read.
    #[test]
    fn would_block_waits_for_readiness_then_reads() {
        let mut readiness = ReadReadiness::default();
        let would_block = |_: &mut [u8]| Err(io::ErrorKind::WouldBlock.into());
        let mut waits = 0;
        let poll = poll_once(&mut readiness, would_block, |_| {
            waits += 1;
            Poll::Pending
        });
        assert!(poll.is_pending());
        assert_eq!(waits, 1, "waiting registers for the wake-up");
        // Known empty until readiness arrives: no read meanwhile.
        assert!(poll_once(&mut readiness, never_read, not_ready).is_pending());
        // Readiness arrived: one read, and its bytes come back.
        let mut reads = 0;
        let poll = poll_once(
            &mut readiness,
            |_| {
                reads += 1;
                Ok(42)
            },
            ready,
        );
        assert_read(poll, 42);
        assert_eq!(reads, 1);
    }

    /// A read interrupted by a signal is retried at once, not reported.
    #[test]
    fn an_interrupted_read_is_retried() {
        let mut readiness = ReadReadiness::default();
        let mut results = vec![Ok(9), Err(io::Error::from(io::ErrorKind::Interrupted))];
        let poll = poll_once(&mut readiness, |_| results.pop().unwrap(), never_polled);
        assert_read(poll, 9);
        assert!(results.is_empty(), "read twice");
    }

    /// Other errors, from the read or from waiting for readiness, reach the
    /// caller unchanged.
    #[test]
    fn other_errors_pass_through() {
        let mut readiness = ReadReadiness::default();
        let reset = |_: &mut [u8]| Err(io::ErrorKind::ConnectionReset.into());
        match poll_once(&mut readiness, reset, never_polled) {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
            other => panic!("expected the read's error, got {:?}", other),
        }

        assert_read(poll_once(&mut readiness, read_n(1), never_polled), 1);
        let failed = |_: &mut Context<'_>| Poll::Ready(Err(io::ErrorKind::Other.into()));
        match poll_once(&mut readiness, never_read, failed) {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::Other),
            other => panic!("expected the readiness error, got {:?}", other),
        }
    }
}
