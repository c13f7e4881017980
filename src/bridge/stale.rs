//! Client replies addressed to an app instance that is gone, taken out of
//! stdin online (the ledger's [`AppRequests`](super::ledger::AppRequests)
//! says which ones; the held stdin drops them offline by the same rule).
//!
//! [`Filtered`] is a reader between stdin and the relay that works line by
//! line only while stale ids are left, and passes chunks straight through,
//! at no cost, otherwise.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::io::AsyncRead;
use futures_lite::ready;

use super::ledger::Ledger;
use super::HOLD_LIMIT;
use crate::envelope::{Kind, Scanner};
use crate::io::BUFFER_SIZE;

/// stdin, with client replies to stale ids taken out (see the module
/// docs). Lines are buffered only while stale ids are left, each up to
/// [`HOLD_LIMIT`]; a longer line is passed on as it comes.
pub(super) struct Filtered<'a, R> {
    inner: &'a mut R,
    ledger: &'a RefCell<Ledger>,
    scanner: Scanner,
    line: Vec<u8>,
    /// The current line is too long to buffer: passed on as it comes.
    passing: bool,
    out: Vec<u8>,
    taken: usize,
    chunk: Vec<u8>,
}

impl<'a, R: AsyncRead + Unpin> Filtered<'a, R> {
    pub(super) fn new(inner: &'a mut R, ledger: &'a RefCell<Ledger>) -> Self {
        Filtered {
            inner,
            ledger,
            scanner: Scanner::new(),
            line: Vec::new(),
            passing: false,
            out: Vec::new(),
            taken: 0,
            chunk: Vec::new(),
        }
    }

    fn take_segment(&mut self, segment: &[u8]) {
        let mut reply_to = None;
        let mut ended = false;
        self.scanner.feed(segment, |envelope| {
            ended = true;
            if let (Kind::Response | Kind::ErrorResponse, Some(id)) = (envelope.kind, envelope.id) {
                reply_to = Some(id.to_vec());
            }
        });
        if self.passing {
            self.out.extend_from_slice(segment);
            self.passing = !ended;
            return;
        }
        self.line.extend_from_slice(segment);
        if ended {
            let stale = reply_to.map_or(false, |id| self.ledger.borrow_mut().drops_reply_to(&id));
            if !stale {
                self.out.extend_from_slice(&self.line);
            }
            self.line.clear();
        } else if self.line.len() > HOLD_LIMIT {
            self.out.append(&mut self.line);
            self.passing = true;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Filtered<'_, R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.out.len() {
                let n = buf.len().min(this.out.len() - this.taken);
                buf[..n].copy_from_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                return Poll::Ready(Ok(n));
            }
            this.out.clear();
            this.taken = 0;
            let idle = this.line.is_empty() && !this.scanner.mid_line();
            if idle && !this.ledger.borrow().app_requests.any_stale() {
                return Pin::new(&mut *this.inner).poll_read(cx, buf);
            }
            if this.chunk.is_empty() {
                this.chunk = vec![0; BUFFER_SIZE];
            }
            let n = ready!(Pin::new(&mut *this.inner).poll_read(cx, &mut this.chunk))?;
            if n == 0 {
                // A last line without `\n` is passed on as it is.
                if this.line.is_empty() {
                    return Poll::Ready(Ok(0));
                }
                this.out.append(&mut this.line);
                continue;
            }
            let chunk = std::mem::take(&mut this.chunk);
            for segment in chunk[..n].split_inclusive(|&b| b == b'\n') {
                this.take_segment(segment);
            }
            this.chunk = chunk;
        }
    }
}
