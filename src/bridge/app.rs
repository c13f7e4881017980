//! The app's side of a connection: what the app instance sends, decided
//! line by line by the [ledger](super::ledger) before it reaches the
//! client.
//!
//! Nearly every line goes on unchanged, and as it comes: the ledger
//! decides from a line's first members ([`Ledger::app_partial`]) and the
//! rest streams through. A line is held back only until it can be decided,
//! and taken out only when it is not the client's: the reply to one of the
//! bridge's own replayed requests, a second answer to a request (one the
//! bridge answered already, or one the instance never got), or a request
//! under an id the client may still answer for the app's previous
//! instance. A line whose `id` only comes at its end (the TypeScript SDK
//! writes `result` first) is decided there, if it ends within
//! [`UNDECIDED_LIMIT`](super::ledger::UNDECIDED_LIMIT); a longer one is passed on as it comes.
//!
//! Like the client's side, it works in its buffer, in place: bytes move
//! only when a line is taken out. And like it, it never reads: the caller
//! reads into [`AppSide::spare`] and says what came
//! ([`AppSide::filled`]) or that the connection ended, and whether with a
//! reset ([`AppSide::closed`]): that is the caller's to tell from the
//! error, so this side judges facts, never error kinds.

use super::ledger::{Early, Ledger};
use crate::envelope::{first_byte_after_space, BatchIds, BatchScanner, Kind, Scanner};
use crate::io::BUFFER_SIZE;

/// The line in progress.
#[derive(Debug)]
struct Down {
    /// Where it starts in the buffer (while `kept`).
    start: usize,
    /// Its bytes so far.
    len: usize,
    /// Decided before its end.
    early: Option<Early>,
    /// Every byte of it so far is in the buffer from `start`.
    kept: bool,
}

impl Down {
    fn at(start: usize) -> Down {
        Down {
            start,
            len: 0,
            early: None,
            kept: true,
        }
    }
}

/// The app's side of one connection (see the [module docs](self)).
#[derive(Debug)]
pub(super) struct AppSide {
    scanner: Scanner,
    /// `buf[..end]` is data, `buf[..written]` of it went to the client.
    buf: Vec<u8>,
    end: usize,
    written: usize,
    cur: Down,
    /// The line in progress when it is an array (a batch's answer): its
    /// ids, read as it streams.
    array: Option<BatchScanner>,
    /// Where each line the chunk being decided ends, whether it goes on,
    /// and where the lines the bridge owes the client because of it end in
    /// the ledger's queue (reused).
    ended: Vec<(usize, bool, usize)>,
    /// The bridge's lines that follow a line of the app's (a tagged
    /// `list_changed` after an acknowledgement): where in the data they go,
    /// and the lines.
    after: std::collections::VecDeque<(usize, Vec<u8>)>,
    /// Bytes the instance sent.
    pub(super) heard: u64,
    /// Lines it sent.
    lines: u64,
    /// Its first line was a refusal (an error with a `null` id): its
    /// message.
    pub(super) refusal: Option<String>,
    /// The connection ended with a reset: the app went away with some of
    /// what it was sent unread (on Linux, a Unix socket closed with bytes
    /// in its receive queue resets its peer).
    pub(super) reset: bool,
    /// What went to the client so far ends a line (or nothing went).
    boundary: bool,
}

impl Default for AppSide {
    fn default() -> Self {
        AppSide {
            scanner: Scanner::new(),
            buf: Vec::new(),
            end: 0,
            written: 0,
            cur: Down::at(0),
            array: None,
            ended: Vec::new(),
            after: std::collections::VecDeque::new(),
            heard: 0,
            lines: 0,
            refusal: None,
            reset: false,
            boundary: true,
        }
    }
}

impl AppSide {
    /// Room for the next chunk from the app, at the end of the data (the
    /// caller reads into it, then says how much came with
    /// [`AppSide::filled`]).
    pub(super) fn spare(&mut self) -> &mut [u8] {
        self.compact();
        if self.buf.len() < self.end + BUFFER_SIZE {
            self.buf.resize(self.end + BUFFER_SIZE, 0);
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes from the app came into [`AppSide::spare`]: what of them
    /// goes on is decided.
    pub(super) fn filled(&mut self, n: usize, ledger: &mut Ledger) {
        self.heard += n as u64;
        self.take(n, ledger);
    }

    /// The app's end of the connection; `reset`: it was a reset, so the
    /// app went away with some of what it was sent unread (the caller
    /// knows it from the error; on Linux, a Unix socket closed with bytes
    /// in its receive queue resets its peer). `false` when nothing more
    /// comes; `true` when the end completed a last line (see
    /// [`AppSide::end_last_line`]), and the next read sees the end again.
    pub(super) fn closed(&mut self, reset: bool, ledger: &mut Ledger) -> bool {
        self.reset |= reset;
        self.end_last_line(ledger)
    }

    /// The app's end, in the middle of a line: when that line is a whole
    /// message (an app that writes its last one without `\n`), it is ended
    /// with the newline the client's line reader needs and decided like any
    /// line; `true` then, and the next read sees the end. A line the app
    /// cut stays undecided, and never reaches the client in part.
    fn end_last_line(&mut self, ledger: &mut Ledger) -> bool {
        if self.cur.len == 0 || !self.scanner.object_ended() {
            return false;
        }
        // Room for it: the spare room the end was read into.
        self.buf[self.end] = b'\n';
        self.take(1, ledger);
        true
    }

    fn take(&mut self, n: usize, ledger: &mut Ledger) {
        let from = self.end;
        let to = from + n;
        let mut ended = std::mem::take(&mut self.ended);
        let mut array = self.array.take();
        // What the bridge owed the client before this chunk goes first; what
        // a line of it makes the bridge owe goes after that line.
        let owed_before = ledger.owed_client_len();
        if self.cur.len == 0 {
            self.cur = Down::at(from);
        }
        {
            let buf = &self.buf;
            let cur = &self.cur;
            let (lines, refusal) = (&mut self.lines, &mut self.refusal);
            let mut at = from;
            let mut first = true;
            self.scanner.feed(&buf[from..to], |envelope| {
                let start = if first { cur.start } else { at };
                let end = if first {
                    from + envelope.len as usize - cur.len
                } else {
                    at + envelope.len as usize
                };
                let early = if first { cur.early } else { None };
                let kept_array = if first { array.take() } else { None };
                let text = if first && !cur.kept {
                    None
                } else {
                    Some(&buf[start..end])
                };
                *lines += 1;
                if *lines == 1
                    && envelope.kind == Kind::ErrorResponse
                    && envelope.id == Some(b"null")
                {
                    *refusal = Some(
                        envelope
                            .error_message
                            .unwrap_or("(no reason given)")
                            .to_string(),
                    );
                }
                if envelope.kind == Kind::Other {
                    // An array: a batch's answer, which settles that batch.
                    let ids = match kept_array {
                        Some(mut batch) => {
                            batch.feed(&buf[from..end]);
                            batch.finish()
                        }
                        None => text.and_then(BatchIds::of),
                    };
                    if let Some(ids) = ids {
                        ledger.app_array(&ids.responses);
                    }
                }
                let goes_on = ledger.app_line(&envelope, text.filter(|_| early.is_none()), early);
                let goes_on = match early {
                    Some(Early::Forward) => true,
                    Some(Early::Drop) => false,
                    _ => goes_on,
                };
                ended.push((end, goes_on, ledger.owed_client_len()));
                at = end;
                first = false;
            });
        }
        let mut read = from;
        let mut owed = ledger.take_owed_client_after(owed_before);
        let mut owed_from = 0;
        for (line_end, goes_on, owed_to) in ended.drain(..) {
            self.keep(read, line_end - read);
            read = line_end;
            if !goes_on && self.cur.kept {
                self.end = self.cur.start;
            }
            self.cur = Down::at(self.end);
            let owed_to = owed_to - owed_before;
            if owed_to > owed_from {
                let lines = owed[owed_from..owed_to].to_vec();
                self.after.push_back((self.end, lines));
                owed_from = owed_to;
            }
        }
        // Owed by the line in progress (none, as its end is not seen): kept
        // for the next boundary.
        let rest = owed.split_off(owed_from);
        ledger.owe_client(&rest);
        if read < to {
            // The line in progress: decided as soon as it can be.
            let tail = &self.buf[read..to];
            if self.cur.len == 0 && first_byte_after_space(tail) == Some(b'[') {
                array = Some(BatchScanner::new());
            }
            if let Some(batch) = &mut array {
                batch.feed(tail);
            }
            self.keep(read, to - read);
            if self.cur.early.is_none() {
                // A line goes out whole: one the app cuts by going away
                // never reaches the client in part. Only a line longer
                // than UNDECIDED_LIMIT streams as it comes.
                let partial = self.scanner.partial();
                let early = match ledger.app_partial(&partial) {
                    // Not JSON-RPC (nothing to tear): as it comes. A batch
                    // of answers is JSON-RPC too, held whole like one.
                    Early::Forward if !partial.other || array.is_some() => Early::Wait,
                    early => early,
                };
                let cur = &mut self.cur;
                early.for_line(cur.len).apply(
                    cur.start,
                    &mut self.end,
                    &mut cur.kept,
                    &mut cur.early,
                );
            }
        }
        self.array = array;
        self.ended = ended;
    }

    /// Adds `len` bytes at `read` to the line in progress.
    fn keep(&mut self, read: usize, len: usize) {
        if self.cur.len == 0 {
            self.cur = Down::at(self.end);
        }
        self.cur.len += len;
        if self.cur.early == Some(Early::Drop) {
            return;
        }
        if read != self.end {
            self.buf.copy_within(read..read + len, self.end);
        }
        self.end += len;
    }

    /// What may go to the client now: everything but a line in progress
    /// still undecided, up to where the bridge's own lines go in.
    pub(super) fn sendable(&self) -> &[u8] {
        let mut limit = if self.cur.len > 0 && self.cur.early.is_none() {
            self.cur.start
        } else {
            self.end
        };
        if let Some((at, _)) = self.after.front() {
            limit = limit.min(*at);
        }
        &self.buf[self.written.min(limit)..limit]
    }

    /// The bridge's lines due where the client's stream is now (after the
    /// app's line they follow), if any.
    pub(super) fn due(&mut self) -> Option<Vec<u8>> {
        match self.after.front() {
            Some((at, _)) if *at <= self.written => self.after.pop_front().map(|(_, lines)| lines),
            _ => None,
        }
    }

    /// The client took `n` more bytes (of [`AppSide::sendable`]).
    pub(super) fn written(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.written += n;
        self.boundary = self.buf[self.written - 1] == b'\n';
        if self.cur.early == Some(Early::Forward) && self.written > self.cur.start {
            // Going out: no longer needed whole.
            self.cur.kept = false;
        }
    }

    /// Whether the client's stream is between lines: the bridge's own lines
    /// may go in.
    pub(super) fn at_boundary(&self) -> bool {
        self.boundary
    }

    fn compact(&mut self) {
        let floor = if self.cur.len > 0 && self.cur.kept && self.cur.early.is_none() {
            self.cur.start.min(self.written)
        } else {
            self.written.min(self.end)
        };
        // Bytes move only when the room to read into runs short, or for
        // free when nothing is left: most reads then move nothing.
        let room = self.buf.len() - self.end;
        if floor == 0 || (floor < self.end && room >= BUFFER_SIZE) {
            return;
        }
        self.buf.copy_within(floor..self.end, 0);
        self.end -= floor;
        self.written -= floor;
        self.cur.start = self.cur.start.saturating_sub(floor);
        for (at, _) in &mut self.after {
            *at = at.saturating_sub(floor);
        }
        if self.buf.len() > 4 * BUFFER_SIZE && self.end < BUFFER_SIZE {
            self.buf.truncate(self.end + BUFFER_SIZE);
            self.buf.shrink_to_fit();
        }
    }
}
