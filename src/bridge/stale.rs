//! Client replies addressed to an app instance that is gone.
//!
//! The app asks the client things too (elicitation, sampling, roots), under
//! ids of its own. When it restarts with such a request open, the client's
//! answer, when it comes, belongs to the old instance: the new one would
//! take it for the answer to its own request with the same id. So the ids
//! of the old instance's open requests are kept as *stale*, and client
//! replies carrying one are dropped, whole: offline by the line handling,
//! online by [`Filtered`], a reader between stdin and the relay that works
//! line by line only while stale ids are left (and passes chunks straight
//! through, at no cost, otherwise). A new instance that asks under a stale
//! id takes it back: from then on a reply with that id is its.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::io::AsyncRead;
use futures_lite::ready;

use super::offline::HOLD_LIMIT;
use super::pending::IdSet;
use crate::envelope::{Kind, Scanner};
use crate::io::BUFFER_SIZE;

/// Most ids of open app-to-client requests remembered per session: an app
/// has a handful open at a time.
pub(super) const STALE_LIMIT: usize = 4096;

/// Ids of requests the app has open with the client (`open`), and those
/// of instances that are gone (`stale`).
#[derive(Debug, Default)]
pub(super) struct AppRequests {
    pub(super) open: IdSet,
    pub(super) stale: IdSet,
}

impl AppRequests {
    /// The app asked the client something.
    pub(super) fn app_asked(&mut self, id: &[u8]) {
        self.stale.remove(id);
        if self.open.len() < STALE_LIMIT {
            self.open.insert(id.to_vec());
        }
    }

    /// The client replied to `id`: whether the reply is for a gone
    /// instance (and is to be dropped).
    pub(super) fn client_replied(&mut self, id: &[u8]) -> bool {
        self.open.remove(id);
        self.stale.remove(id)
    }

    /// The app instance hung up: its open requests are stale.
    pub(super) fn hung_up(&mut self) {
        for id in self.open.drain() {
            if self.stale.len() < STALE_LIMIT {
                self.stale.insert(id);
            }
        }
    }
}

/// stdin, with client replies to stale ids taken out (see the module
/// docs). Lines are buffered only while stale ids are left, each up to
/// [`HOLD_LIMIT`]; a longer line is passed on as it comes.
pub(super) struct Filtered<'a, R> {
    inner: &'a mut R,
    requests: &'a RefCell<AppRequests>,
    scanner: Scanner,
    line: Vec<u8>,
    /// The current line is too long to buffer: passed on as it comes.
    passing: bool,
    out: Vec<u8>,
    taken: usize,
    chunk: Vec<u8>,
}

impl<'a, R: AsyncRead + Unpin> Filtered<'a, R> {
    pub(super) fn new(inner: &'a mut R, requests: &'a RefCell<AppRequests>) -> Self {
        Filtered {
            inner,
            requests,
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
            let stale = reply_to.map_or(false, |id| self.requests.borrow_mut().client_replied(&id));
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
            if idle && this.requests.borrow().stale.is_empty() {
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
