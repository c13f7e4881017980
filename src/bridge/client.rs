//! The client's side of the session: stdin, read in chunks and decided
//! line by line by the [ledger](super::ledger), the same way whether the
//! lines go to an app instance, wait for one, or are answered by the
//! bridge.
//!
//! One buffer holds what the app is to get: the whole lines no instance
//! has taken yet, then the line in progress. Online, the session writes
//! it to the app as it comes and tells the client side how much the app
//! took ([`ClientSide::accepted`]); only then does a line teach the ledger
//! anything (a request is in flight once the app has it). Offline, the
//! same buffer is what is held. So when the app goes away
//! ([`ClientSide::hung_up`]):
//!
//! - a line no instance took (read just as the app died) is still here,
//!   whole, and goes to the next instance;
//! - the line being sent when it died is kept from its start (up to
//!   [`HOLD_LIMIT`]) and goes whole to the next instance: none of it is
//!   lost, and no fragment reaches anyone;
//! - the lines still waiting are decided again (a reply to the gone
//!   instance is taken out).
//!
//! Lines are whole or absent: a line that does not fit in what may be held
//! is dropped to its last byte and its request answered, the moment its
//! line ends.
//!
//! The side never reads: the caller reads stdin into
//! [`ClientSide::spare`] and hands over the count
//! ([`ClientSide::filled`]), or the end and its time
//! ([`ClientSide::closed`]), and each decision takes the ledger as `&mut`.
//! So the decisions run the same under the session's pumps, a test's
//! chunks or a simulation's clock, with no reader or shared cell to fake.
//!
//! Reading and deciding happen in the buffer, in place: a chunk is scanned
//! where it was read, and bytes move only when a line is taken out, or
//! rewritten: the client's answer to a question the bridge gave an id of
//! its own goes to the app under the app's id in the line's own place, so
//! it overtakes none of the client's lines before it. A batch's ids are
//! read as the line streams ([`BatchScanner`]), so every request in it is
//! followed whatever its length, and a line the bridge answers keeps none
//! of its bytes.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use super::answer::Answer;
use super::ledger::{Early, Ledger, Line, Mode, Rewrite, Verdict, RECORDED};
use super::HOLD_LIMIT;
use crate::envelope::{first_byte_after_space, BatchIds, BatchScanner, Scanner};
use crate::io::BUFFER_SIZE;

/// Longest line kept whole while it is relayed, so that an app that goes
/// away in the middle of it does not cost it: the next instance gets it
/// whole. A longer line cut by a hang-up is answered with an error. Small
/// beside the hold limit, because every line up to it is kept until its
/// end, and the bridge's memory is a few MiB.
const KEEP_LIMIT: usize = 256 * 1024;

/// What becomes of the line in progress, fixed when it starts.
#[derive(Clone, Debug)]
enum Fate {
    /// Its bytes go to the app (now, or when one comes).
    Relay,
    /// The bridge answers it (there is no app); its bytes are not kept
    /// (a batch's ids are read as it streams).
    Refuse(Rc<Answer>),
    /// It did not fit in what may be held: dropped, and answered.
    Overflow,
    /// The app went away while it was being sent and it was too long to
    /// keep whole: dropped, and answered.
    Interrupted,
}

/// A line read to its end that no instance has taken all of yet.
#[derive(Debug)]
struct Held {
    start: usize,
    end: usize,
    line: Line,
    /// All of it is in `start..end`. A line relayed as it came and too
    /// long to keep has only its end there (`start == end`): part of it
    /// went to the instance already, so if that instance goes away, the
    /// rest can follow it nowhere and its request is answered.
    whole: bool,
}

/// The line in progress.
#[derive(Debug)]
struct Current {
    /// Where it starts in the buffer (meaningful while `kept`).
    start: usize,
    /// Its bytes so far.
    len: usize,
    fate: Fate,
    /// Every byte of it so far is in the buffer from `start`.
    kept: bool,
    /// Decided before its end (online: it goes on as it comes, or is
    /// taken out).
    early: Option<Early>,
}

impl Current {
    fn at(start: usize) -> Current {
        Current {
            start,
            len: 0,
            fate: Fate::Relay,
            kept: true,
            early: None,
        }
    }
}

/// Answers for the lines the bridge refuses on its own: one over the hold
/// limit, one the app cut that was too long to keep whole.
#[derive(Debug)]
pub(super) struct Refusals {
    pub(super) overflow: Answer,
    pub(super) interrupted: Answer,
}

/// The client's side (see the [module docs](self)).
pub(super) struct ClientSide {
    /// When stdin ended, if it has.
    pub(super) eof: Option<Instant>,
    scanner: Scanner,
    /// `buf[..end]` is data; the rest is room to read into.
    buf: Vec<u8>,
    end: usize,
    /// How much of the data the current instance has taken.
    sent: usize,
    /// The whole lines no instance has taken, in order.
    lines: VecDeque<Held>,
    cur: Current,
    mode: Mode,
    /// What requests are answered with while the mode is absent.
    absent: Option<Rc<Answer>>,
    refusals: Refusals,
    /// Lines ended by the chunk being decided (reused).
    ended: Vec<(usize, Line)>,
    /// What the current instance took so far ends a line (or it took
    /// nothing).
    boundary: bool,
    /// Where the last line the current instance took whole is in the
    /// buffer, while nothing was sent after it: if the instance goes away
    /// with what it was sent unread, this line is the unread one.
    last_taken: Option<(usize, usize)>,
    /// The line in progress, when it may be an array (a batch): its ids,
    /// read as it streams, so that every request in it is followed however
    /// long the line is, kept or not.
    batch: Option<BatchScanner>,
}

impl ClientSide {
    pub(super) fn new(refusals: Refusals) -> ClientSide {
        ClientSide {
            eof: None,
            scanner: Scanner::recording(RECORDED),
            buf: Vec::new(),
            end: 0,
            sent: 0,
            lines: VecDeque::new(),
            cur: Current::at(0),
            mode: Mode::Holding,
            absent: None,
            refusals,
            ended: Vec::new(),
            boundary: true,
            last_taken: None,
            batch: None,
        }
    }

    /// Room for the next chunk of stdin, at the end of the data (the
    /// caller reads into it, then says how much came with
    /// [`ClientSide::filled`]).
    pub(super) fn spare(&mut self) -> &mut [u8] {
        self.compact();
        if self.buf.len() < self.end + BUFFER_SIZE {
            self.buf.resize(self.end + BUFFER_SIZE, 0);
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes of stdin came into [`ClientSide::spare`]: every line they
    /// end is decided.
    pub(super) fn filled(&mut self, n: usize, ledger: &mut Ledger) {
        self.take(n, ledger);
    }

    /// stdin ended, at `now`. A last line without its `\n` is still a line.
    pub(super) fn closed(&mut self, now: Instant, ledger: &mut Ledger) {
        self.eof = Some(now);
        let mut last = None;
        let mut batch = self.batch.take();
        self.scanner.finish(|envelope| {
            last = Some(Line::of(
                &envelope,
                batch.as_mut().and_then(BatchScanner::finish),
            ))
        });
        if let Some(line) = last {
            self.line_ended(line, ledger);
        }
    }

    /// Decides the `n` bytes just read at `end`.
    fn take(&mut self, n: usize, ledger: &mut Ledger) {
        let from = self.end;
        let to = from + n;
        let mut ended = std::mem::take(&mut self.ended);
        let mut carried = self.batch.take();
        {
            // Where each line the chunk ends ends (in the chunk as read),
            // and what it is.
            let buf = &self.buf;
            let mut at = from;
            self.scanner.feed(&buf[from..to], |envelope| {
                let first = at == from;
                let end = at + envelope.len as usize - if first { self.cur.len } else { 0 };
                let batch = match carried.take().filter(|_| first) {
                    // Begun in an earlier chunk, as an array or blanks.
                    Some(mut batch) => {
                        batch.feed(&buf[from..end]);
                        batch.finish()
                    }
                    None if first && self.cur.len > 0 => None,
                    None => BatchIds::of(&buf[at..end]),
                };
                ended.push((end, Line::of(&envelope, batch)));
                at = end;
            });
        }
        let continuing = ended.is_empty();
        // Bytes move left only past a line taken out: `self.end` (where
        // kept bytes go) trails `read`. A line rewritten in place moves
        // what follows it by `shift`.
        let mut read = from;
        let mut shift = 0isize;
        for (line_end, line) in ended.drain(..) {
            let line_end = moved(line_end, shift);
            self.keep(read, line_end - read);
            let by = self.line_ended(line, ledger);
            read = moved(line_end, by);
            shift += by;
        }
        let to = moved(to, shift);
        if read < to {
            let tail = &self.buf[read..to];
            self.batch = match carried {
                Some(batch) if continuing => Some(batch),
                // An array, or blanks that may start one.
                _ if self.cur.len == 0
                    && matches!(first_byte_after_space(tail), Some(b'[') | None) =>
                {
                    Some(BatchScanner::new())
                }
                _ => None,
            };
            if let Some(batch) = &mut self.batch {
                batch.feed(tail);
            }
            self.keep(read, to - read);
            self.decide_early(ledger);
        }
        self.ended = ended;
    }

    /// Adds the `len` bytes at `read` to the line in progress, moved to the
    /// end of the data when they are kept.
    fn keep(&mut self, read: usize, len: usize) {
        if self.cur.len == 0 {
            self.start_line();
        }
        self.cur.len += len;
        let goes_in = match self.cur.fate {
            // Online, a line too long to keep whole still goes through.
            Fate::Relay => {
                self.cur.early != Some(Early::Drop) && (self.cur.kept || self.mode == Mode::Online)
            }
            Fate::Refuse(_) | Fate::Overflow | Fate::Interrupted => false,
        };
        if !goes_in {
            if !matches!(self.cur.fate, Fate::Relay) && self.cur.kept {
                // Answered by the bridge: none of it is kept (what was,
                // while it was to be relayed, goes).
                self.end = self.cur.start;
                self.cur.kept = false;
            }
            return;
        }
        if read != self.end {
            self.buf.copy_within(read..read + len, self.end);
        }
        self.end += len;
        let line = self.end - self.cur.start;
        match self.cur.fate {
            // Held: all that is held must fit.
            Fate::Relay if self.mode != Mode::Online && self.end - self.sent > HOLD_LIMIT => {
                self.end = self.cur.start;
                self.cur.kept = false;
                self.cur.fate = Fate::Overflow;
            }
            // Relayed as it comes; only no longer whole here (a hang-up in
            // it can no longer be repaired).
            Fate::Relay if self.mode == Mode::Online && line > KEEP_LIMIT => self.cur.kept = false,
            _ => {}
        }
    }

    fn start_line(&mut self) {
        self.cur = Current::at(self.end);
        if let (Mode::Absent, Some(answer)) = (self.mode, &self.absent) {
            self.cur.fate = Fate::Refuse(Rc::clone(answer));
        }
    }

    /// Online, the line in progress may be decided from its first members,
    /// so that it is relayed as it comes (or taken out).
    fn decide_early(&mut self, ledger: &mut Ledger) {
        if self.mode != Mode::Online
            || !matches!(self.cur.fate, Fate::Relay)
            || self.cur.early.is_some()
        {
            return;
        }
        let partial = self.scanner.partial();
        // While a reply may be taken out, a line is passed on early only
        // when it is known to be no reply (an array may hold replies).
        let early = if !ledger.may_drop_client_lines() || (partial.method && !partial.answer) {
            Early::Forward
        } else if partial.answer {
            match partial.id {
                Some(id) => ledger.reply_early(id),
                None => Early::Wait,
            }
        } else {
            Early::Wait
        };
        let cur = &mut self.cur;
        early
            .for_line(cur.len)
            .apply(cur.start, &mut self.end, &mut cur.kept, &mut cur.early);
    }

    /// The line in progress ended (its kept bytes end at `self.end`). How
    /// far what follows it in the buffer moved (a line rewritten in place).
    fn line_ended(&mut self, line: Line, ledger: &mut Ledger) -> isize {
        let cur = std::mem::replace(&mut self.cur, Current::at(self.end));
        let start = if cur.kept { cur.start } else { self.end };
        let mut shift = 0;
        match cur.fate {
            Fate::Overflow => ledger.refused(&line, &self.refusals.overflow),
            Fate::Interrupted => ledger.refused(&line, &self.refusals.interrupted),
            Fate::Refuse(answer) => {
                if ledger.decide(&line, Mode::Absent) == Verdict::Refuse {
                    ledger.refused(&line, &answer);
                }
                self.end = start;
            }
            Fate::Relay if cur.early == Some(Early::Drop) => {}
            Fate::Relay if cur.early == Some(Early::Forward) => {
                // Going out as it came: only what it teaches is decided.
                let line = match ledger.reply_line(&line, None) {
                    Rewrite::Keep => line,
                    _ => Line::Rewritten,
                };
                self.hold(start, line, cur.kept);
            }
            Fate::Relay => {
                let verdict = ledger.decide(&line, self.mode);
                let text = Some(&self.buf[start..self.end]).filter(|_| cur.kept);
                let rewrite = match verdict {
                    Verdict::Forward => ledger.reply_line(&line, text),
                    _ => Rewrite::Drop,
                };
                match rewrite {
                    Rewrite::Keep => self.hold(start, line, cur.kept),
                    // Undecided until now, so none of it was sent.
                    Rewrite::Drop => self.end = start,
                    Rewrite::Replace(bytes) => {
                        // In the line's place: it overtakes nothing.
                        let (old, new) = (self.end - start, bytes.len());
                        let len = self.buf.len();
                        if new > old {
                            self.buf.resize(len + new - old, 0);
                        }
                        self.buf.copy_within(self.end..len, start + new);
                        self.buf[start..start + new].copy_from_slice(&bytes);
                        self.end = start + new;
                        shift = new as isize - old as isize;
                        self.hold(start, Line::Rewritten, true);
                    }
                }
            }
        }
        self.cur.start = self.end;
        shift
    }

    /// The line ending at the end of the data goes on (from `start`, when
    /// it is `whole` there).
    fn hold(&mut self, start: usize, line: Line, whole: bool) {
        self.lines.push_back(Held {
            start,
            end: self.end,
            line,
            whole,
        });
    }

    /// What may go to the app now: the whole lines, and the line in
    /// progress once it is known to go on.
    pub(super) fn sendable(&self) -> &[u8] {
        let flowing =
            matches!(self.cur.fate, Fate::Relay) && self.cur.early == Some(Early::Forward);
        let limit = if self.cur.len > 0 && !flowing {
            self.cur.start.min(self.end)
        } else {
            self.end
        };
        &self.buf[self.sent.min(limit)..limit]
    }

    /// Whether a line boundary is where the app's stream is: the bridge's
    /// own lines may go in.
    pub(super) fn at_boundary(&self) -> bool {
        self.boundary
    }

    /// The current instance took `n` more bytes (of
    /// [`ClientSide::sendable`]): lines it took whole teach the ledger now.
    pub(super) fn accepted(&mut self, n: usize, ledger: &mut Ledger) {
        if n == 0 {
            return;
        }
        self.sent += n;
        self.boundary = self.buf[self.sent - 1] == b'\n';
        while self
            .lines
            .front()
            .map_or(false, |held| held.end <= self.sent)
        {
            let held = self.lines.pop_front().expect("just seen");
            self.last_taken = Some((held.start, held.end));
            ledger.sent(held.line);
        }
        if self.last_taken.map_or(false, |(_, end)| end != self.sent) {
            self.last_taken = None;
        }
    }

    /// Lines of the bridge's own went to the instance after the client's.
    pub(super) fn bridge_wrote(&mut self) {
        self.last_taken = None;
    }

    /// The instance went away with what it was sent unread, so the last
    /// line it took cannot have been read whole (its `\n` was the last
    /// byte sent): that line is held again for the next instance (and no
    /// longer in flight), rather than answered as one the app may have
    /// carried out. The lines before it may have been read: they stay as
    /// they are.
    pub(super) fn unread_last(&mut self, ledger: &mut Ledger) {
        let (start, end) = match self.last_taken.take() {
            Some(range) => range,
            None => return,
        };
        let mut scanner = Scanner::recording(RECORDED);
        let mut line = None;
        let text = &self.buf[start..end];
        // An array is decided as one too: a batch of replies goes nowhere,
        // a batch of requests is no longer in flight.
        let mut batch = BatchIds::of(text);
        scanner.feed(text, |envelope| {
            line = Some(Line::of(&envelope, batch.take()));
        });
        let line = match line {
            Some(line) => line,
            None => return,
        };
        if ledger.unread(&line) {
            self.lines.push_front(Held {
                start,
                end,
                line,
                whole: true,
            });
        }
        self.sent = start;
    }

    /// Drops the data no instance needs any more (taken whole), so the
    /// buffer holds only what may still be sent.
    fn compact(&mut self) {
        let floor = match self.lines.front() {
            Some(held) => held.start.min(self.sent),
            None if self.cur.len > 0 && self.cur.kept => self.cur.start.min(self.sent),
            None => self.sent.min(self.end),
        };
        // The last line taken stays until another follows it.
        let floor = self.last_taken.map_or(floor, |(start, _)| floor.min(start));
        // Bytes move only when the room to read into runs short, or for
        // free when nothing is left: most reads then move nothing.
        let room = self.buf.len() - self.end;
        if floor == 0 || (floor < self.end && room >= BUFFER_SIZE) {
            return;
        }
        self.buf.copy_within(floor..self.end, 0);
        self.end -= floor;
        self.sent -= floor;
        self.cur.start = self.cur.start.saturating_sub(floor);
        for held in &mut self.lines {
            held.start -= floor;
            held.end -= floor;
        }
        if let Some((start, end)) = &mut self.last_taken {
            *start -= floor;
            *end -= floor;
        }
        // A long held line leaves no big buffer behind. One relayed online
        // (kept up to KEEP_LIMIT) leaves its buffer to the next: shrunk and
        // grown again at every long line, it was zeroed and faulted in
        // anew each time, 11% of the bridge's CPU with 1 MiB lines.
        if self.buf.len() > KEEP_LIMIT + 2 * BUFFER_SIZE && self.end < BUFFER_SIZE {
            self.buf.truncate(self.end + BUFFER_SIZE);
            self.buf.shrink_to_fit();
        }
    }

    /// The session relays to an instance: what is here is for it.
    pub(super) fn go_online(&mut self, ledger: &mut Ledger) {
        self.mode = Mode::Online;
        self.absent = None;
        if self.cur.len > 0 {
            self.decide_early(ledger);
        }
    }

    /// The instance went away, or never took the session: what it did not
    /// take whole is held for the next one, with `again` (requests in
    /// flight that may be sent again) first; what is held is decided again.
    pub(super) fn hung_up(&mut self, again: Vec<Line>, ledger: &mut Ledger) {
        self.mode = Mode::Holding;
        let mut buf = Vec::with_capacity(self.end + BUFFER_SIZE);
        let mut lines = VecDeque::new();
        for line in again {
            if let Line::Request {
                text: Some(text), ..
            } = &line
            {
                let start = buf.len();
                buf.extend_from_slice(&text.line);
                if text.line.last() != Some(&b'\n') {
                    buf.push(b'\n');
                }
                lines.push_back(Held {
                    start,
                    end: buf.len(),
                    line,
                    whole: true,
                });
            }
        }
        for held in std::mem::take(&mut self.lines) {
            if !held.whole {
                // Cut by the hang-up: answered, like the line in progress
                // would be.
                ledger.refused(&held.line, &self.refusals.interrupted);
                continue;
            }
            if ledger.decide(&held.line, Mode::Holding) != Verdict::Forward {
                continue;
            }
            if matches!(held.line, Line::Reply(_) | Line::Replies(_)) {
                // The client's answers to the app are the instance's that
                // asked, which is gone: they go to no other.
                continue;
            }
            let start = buf.len();
            buf.extend_from_slice(&self.buf[held.start..held.end]);
            lines.push_back(Held {
                start,
                end: buf.len(),
                line: held.line,
                whole: true,
            });
        }
        if self.cur.len > 0 {
            if self.cur.kept {
                let start = buf.len();
                buf.extend_from_slice(&self.buf[self.cur.start..self.end]);
                self.cur.start = start;
                // Decided again at its end, for the next instance.
                self.cur.early = None;
            } else if matches!(self.cur.fate, Fate::Relay) {
                // Part of it went to the instance that left, the rest
                // cannot follow it anywhere.
                self.cur.fate = Fate::Interrupted;
                self.cur.start = buf.len();
            }
        } else {
            self.cur.start = buf.len();
        }
        self.end = buf.len();
        buf.resize(self.end + BUFFER_SIZE, 0);
        self.buf = buf;
        self.sent = 0;
        self.boundary = true;
        self.last_taken = None;
        self.lines = lines;
    }

    /// No app: every request held and to come is answered with `answer`
    /// (a request the client cancelled meanwhile is not).
    pub(super) fn go_absent(&mut self, answer: Rc<Answer>, ledger: &mut Ledger) {
        let held = self.lines.drain(..).map(|held| held.line).collect();
        ledger.refuse_held(held, &answer);
        if self.cur.len > 0 {
            if matches!(self.cur.fate, Fate::Relay) {
                self.cur.fate = Fate::Refuse(Rc::clone(&answer));
            }
            // Its envelope and a batch's ids are read as it streams: none
            // of its bytes are needed.
            self.cur.kept = false;
        }
        self.end = 0;
        self.cur.start = 0;
        self.sent = 0;
        self.mode = Mode::Absent;
        self.absent = Some(answer);
    }

    /// Whether anything held awaits an answer (worth waiting for the app
    /// after stdin ended).
    pub(super) fn holds_requests(&self) -> bool {
        self.lines.iter().any(|h| h.line.asks())
    }
}

/// A position in the buffer after what is before it moved by `shift`.
fn moved(at: usize, shift: isize) -> usize {
    (at as isize + shift) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::answer::Reason;
    use std::path::Path;

    fn side() -> ClientSide {
        let answer = |r| Answer::new(r, "x", Path::new("/e"));
        ClientSide::new(Refusals {
            overflow: answer(Reason::HoldLimit),
            interrupted: answer(Reason::AppRestarting),
        })
    }

    /// `chunk` read from stdin.
    fn feed(client: &mut ClientSide, chunk: &[u8], ledger: &mut Ledger) {
        client.spare()[..chunk.len()].copy_from_slice(chunk);
        client.filled(chunk.len(), ledger);
    }

    #[test]
    fn held_lines_are_kept_whole_and_sent_in_order() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}\n{\"method\":\"n\"}\n{\"id\":2,\"method\":\"x\"";
        for size in [1, 2, 3, 7, input.len()] {
            let mut ledger = Ledger::default();
            let mut client = side();
            for chunk in input.chunks(size) {
                feed(&mut client, chunk, &mut ledger);
            }
            // Held: the whole lines; the one in progress waits for its end.
            let whole = input.len() - b"{\"id\":2,\"method\":\"x\"".len();
            assert_eq!(client.sendable(), &input[..whole]);
            assert!(client.holds_requests());
            // Online, a request goes on as it comes.
            client.go_online(&mut ledger);
            assert_eq!(client.sendable(), &input[..]);
            let n = client.sendable().len();
            client.accepted(n, &mut ledger);
            assert_eq!(ledger.pending_len(), 1, "chunks of {}", size);
        }
    }

    #[test]
    fn a_line_the_app_did_not_take_whole_is_held_again_from_its_start() {
        let mut ledger = Ledger::default();
        let first = b"{\"id\":1,\"method\":\"tools/call\"}\n";
        let mut client = side();
        client.go_online(&mut ledger);
        feed(
            &mut client,
            b"{\"id\":1,\"method\":\"tools/call\"}\n{\"id\":2,\"method\":\"to",
            &mut ledger,
        );
        let sendable = client.sendable().to_vec();
        assert!(sendable.len() > first.len() + 4, "{:?}", sendable);
        // The app took the first line and part of the second, then died.
        client.accepted(first.len() + 4, &mut ledger);
        assert_eq!(ledger.pending_len(), 1);
        let answer = Answer::new(Reason::AppRestarting, "gone", Path::new("/e"));
        let again = ledger.hung_up(&answer);
        client.hung_up(again, &mut ledger);
        client.go_online(&mut ledger);
        assert_eq!(client.sendable(), &sendable[first.len()..]);
        // The request in flight is answered, not sent again.
        let owed = ledger.take_owed_client();
        assert!(String::from_utf8_lossy(&owed).contains("\"id\":1"));
    }

    #[test]
    fn a_long_line_the_app_took_part_of_is_answered_when_it_hangs_up() {
        // Longer than what is kept whole, read to its end before the app
        // took all of it: the app's hang-up cuts it, and its request is
        // answered (it once went to the next instance as no bytes, its
        // request waiting there for ever).
        let mut ledger = Ledger::default();
        let mut client = side();
        client.go_online(&mut ledger);
        let pad = "x".repeat(KEEP_LIMIT + 10);
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":26,\"method\":\"tools/call\",\"params\":\"{}\"}}\n",
            pad
        );
        for chunk in line.as_bytes().chunks(BUFFER_SIZE) {
            feed(&mut client, chunk, &mut ledger);
            // The app takes all but the last bytes of what it is given.
            let n = client.sendable().len().saturating_sub(100);
            client.accepted(n, &mut ledger);
        }
        let answer = Answer::new(Reason::AppRestarting, "gone", Path::new("/e"));
        let again = ledger.hung_up(&answer);
        client.hung_up(again, &mut ledger);
        let owed = String::from_utf8(ledger.take_owed_client()).unwrap();
        assert!(owed.contains("\"id\":26"), "owed: {:?}", owed);
        // Nothing of it goes to the next instance.
        client.go_online(&mut ledger);
        assert_eq!(client.sendable(), b"");
        assert!(!client.holds_requests());
    }
}
