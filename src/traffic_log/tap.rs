//! From the relay's chunks to one record per line.
//!
//! The relay forwards whatever each read returns, so a message arrives in
//! pieces cut anywhere, and one read may hold many messages. A [`LineTap`]
//! per direction is fed every chunk as it is forwarded; it keeps only the
//! start of the current line (up to the log's message cap) and, through
//! the envelope scanner, the line's kind, `id` and `method`, and writes one
//! record when the line's `\n` goes by. A 256 MiB line costs the cap, not
//! 256 MiB.
//!
//! [`TapRead`] and [`TapWrite`] put a tap around a stream, so a relay that
//! knows nothing of logging (`relay::relay`) logs what passes through it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::io::{AsyncRead, AsyncWrite};

use super::{Direction, TrafficLog};
use crate::envelope::Scanner;

/// Turns one direction of a stream into message records, one per line,
/// keeping no more of a line than the log's message cap. Made by
/// [`TrafficLog::tap`].
///
/// A line still open when the tap is dropped (or [finished](Self::finish))
/// is recorded as it is: the last line of a stream need not end in `\n`.
#[derive(Debug)]
pub struct LineTap {
    log: TrafficLog,
    direction: Direction,
    scanner: Scanner,
    /// The start of the current line, at most `cap` bytes.
    pub(super) start: Vec<u8>,
    /// The log's message cap.
    cap: usize,
    /// Bytes of the current line fed in earlier chunks.
    carried: u64,
}

impl LineTap {
    pub(super) fn new(log: TrafficLog, direction: Direction) -> LineTap {
        let cap = log.message_cap();
        LineTap {
            log,
            direction,
            scanner: Scanner::new(),
            start: Vec::with_capacity(cap),
            cap,
            carried: 0,
        }
    }

    /// Records every line that `chunk` completes, and keeps the start of
    /// the one it leaves open. Never blocks: records the log's queue has no
    /// room for are dropped and counted.
    pub fn feed(&mut self, chunk: &[u8]) {
        let LineTap {
            log,
            direction,
            scanner,
            start,
            cap,
            carried,
        } = self;
        let cap = *cap;
        // Where the current line begins in `chunk`.
        let mut from = 0;
        scanner.feed(chunk, |envelope| {
            // The scanner counts the whole line, its `\n` included.
            let end = from + (envelope.len - *carried) as usize;
            keep(start, cap, &chunk[from..end]);
            let shown = start.strip_suffix(b"\n").unwrap_or(start);
            log.message(*direction, &envelope, shown, envelope.len - 1);
            start.clear();
            *carried = 0;
            from = end;
        });
        keep(start, cap, &chunk[from..]);
        *carried += (chunk.len() - from) as u64;
    }

    /// Records the line still open (one without a final `\n`), if any; for
    /// the end of the stream. Dropping the tap does the same.
    pub fn finish(&mut self) {
        let LineTap {
            log,
            direction,
            scanner,
            start,
            carried,
            ..
        } = self;
        scanner.finish(|envelope| log.message(*direction, &envelope, start, envelope.len));
        start.clear();
        *carried = 0;
    }
}

impl Drop for LineTap {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Appends as much of `part` to `start` as fits in `cap`.
fn keep(start: &mut Vec<u8>, cap: usize, part: &[u8]) {
    let room = cap - start.len();
    start.extend_from_slice(&part[..part.len().min(room)]);
}

/// A reader whose bytes are fed to a [`LineTap`] as they are read; with
/// no tap, just the reader (one branch per read).
#[derive(Debug)]
pub struct TapRead<R> {
    inner: R,
    tap: Option<LineTap>,
}

impl<R> TapRead<R> {
    /// Taps what is read from `inner`, if `tap` is given.
    pub fn new(inner: R, tap: Option<LineTap>) -> TapRead<R> {
        TapRead { inner, tap }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TapRead<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Some(tap), Poll::Ready(Ok(n))) = (&mut this.tap, &poll) {
            match *n {
                0 => tap.finish(),
                n => tap.feed(&buf[..n]),
            }
        }
        poll
    }
}

/// A writer whose accepted bytes are fed to a [`LineTap`]; with no tap,
/// just the writer (one branch per write). For bytes the relay writes that
/// it did not read from a tapped reader (lines of its own).
#[derive(Debug)]
pub struct TapWrite<W> {
    inner: W,
    tap: Option<LineTap>,
}

impl<W> TapWrite<W> {
    /// Taps what is written to `inner`, if `tap` is given.
    pub fn new(inner: W, tap: Option<LineTap>) -> TapWrite<W> {
        TapWrite { inner, tap }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for TapWrite<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let (Some(tap), Poll::Ready(Ok(n))) = (&mut this.tap, &poll) {
            tap.feed(&buf[..*n]);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(tap) = &mut self.tap {
            tap.finish();
        }
        Pin::new(&mut self.inner).poll_close(cx)
    }
}
