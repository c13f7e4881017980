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
