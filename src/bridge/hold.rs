//! The client's side of the session while no app is relayed to: stdin read
//! line by line, each line held for the app or answered by the bridge.
//!
//! Lines are whole or absent: a line is held only if all of it fits in
//! [`HOLD_LIMIT`]; a line that does not, or whose start went to an app that
//! closed, is dropped to its last byte (the rest of it is read and
//! discarded here, never relayed to the next app), and a dropped request is
//! owed its error the moment its line ends. The session writes what is
//! owed at once, with stdout's backpressure.

use std::time::Instant;

use futures_lite::io::{AsyncRead, AsyncReadExt};

use super::ledger::{Dest, Ledger, Verdict, RECORDED};
use super::{BridgeError, BATCH_LIMIT, ERROR_CODE, HOLD_LIMIT};
use crate::envelope::{self, batch_errors, first_byte_after_space, Envelope, Kind, Scanner};
use crate::io::BUFFER_SIZE;
use crate::relay;

/// What becomes of the client line being read offline.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum LineFate {
    /// Held for the app.
    Hold,
    /// Dropped: it did not fit in [`HOLD_LIMIT`].
    Overflow,
    /// Dropped: its start went to an app that closed the connection.
    Interrupted,
    /// Answered with an error: the app cannot be reached.
    Fail(String),
}

/// The client's input and what the bridge holds of it.
pub(super) struct Client<R> {
    pub(super) stdin: R,
    /// The client-to-app scanner, for the whole session: online it sees the
    /// relayed chunks, offline the lines read here.
    pub(super) up: Scanner,
    /// Client bytes held for the app: whole lines, and the start of the
    /// current one if it is held.
    pub(super) held: Vec<u8>,
    /// Raw ids of the requests in `held` (empty: too long to keep).
    pub(super) held_ids: Vec<Vec<u8>>,
    /// The batch lines in `held` (in flight as [`Batches`] once
    /// delivered).
    ///
    /// [`Batches`]: super::pending::Batches
    held_batches: Vec<Vec<u8>>,
    /// Where the current line starts in `held`.
    line_start: usize,
    /// What happens to the current line.
    pub(super) line: LineFate,
    /// The current line when it is a batch (`[`), for answering offline.
    pub(super) batch: Option<Vec<u8>>,
    /// Error responses to write to stdout at the next chance (whole lines).
    pub(super) owed: Vec<u8>,
    /// When stdin ended, if it has.
    pub(super) eof: Option<Instant>,
}

impl<R: AsyncRead + Unpin> Client<R> {
    pub(super) fn new(stdin: R) -> Client<R> {
        Client {
            stdin,
            up: Scanner::recording(RECORDED),
            held: Vec::new(),
            held_ids: Vec::new(),
            held_batches: Vec::new(),
            line_start: 0,
            line: LineFate::Hold,
            batch: None,
            owed: Vec::new(),
            eof: None,
        }
    }

    /// Whether holding anything that awaits an answer (a request), which is
    /// worth waiting for the app after stdin ended.
    pub(super) fn holds_requests(&self) -> bool {
        !self.held_ids.is_empty() || !self.held_batches.is_empty()
    }

    /// The held bytes go to the app: takes them, and moves their requests'
    /// ids to `pending`.
    pub(super) fn take_held(&mut self, ledger: &mut Ledger) -> Vec<u8> {
        let pending = &mut ledger.pending;
        for id in self.held_ids.drain(..) {
            match id.is_empty() {
                true => pending.long_id(true),
                false => pending.insert(&id),
            }
        }
        for batch in self.held_batches.drain(..) {
            pending.batches.sent(&batch);
        }
        // The held start of the current line: the rest is relayed.
        let seen = self.held.len() - self.line_start;
        pending.batches.up.carry(self.batch.take(), seen as u64);
        self.line_start = 0;
        std::mem::take(&mut self.held)
    }

    /// Answers every held request with `message` and drops what is held
    /// (whole lines; the current line, if held, is dropped as well and
    /// answered when it ends).
    pub(super) fn refuse_held(&mut self, message: &str) {
        for id in self.held_ids.drain(..) {
            let id = if id.is_empty() { &b"null"[..] } else { &id };
            self.owed
                .extend_from_slice(&envelope::error_response_line(id, ERROR_CODE, message));
        }
        for batch in self.held_batches.drain(..) {
            self.owed.extend(batch_errors(&batch, ERROR_CODE, message));
        }
        self.held.clear();
        self.line_start = 0;
        if self.line == LineFate::Hold && self.up.mid_line() {
            self.line = LineFate::Fail(message.to_string());
        }
    }

    /// Reads one chunk of stdin and deals with each line in it as its fate
    /// says; lines that start later get `next`. `Ok(false)`: stdin ended.
    pub(super) async fn read_offline(
        &mut self,
        next: &LineFate,
        ledger: &mut Ledger,
    ) -> Result<bool, BridgeError> {
        let mut chunk = vec![0u8; BUFFER_SIZE];
        let n = loop {
            match self.stdin.read(&mut chunk).await {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(BridgeError::Relay(relay::RelayError {
                        stage: relay::Stage::ReadClient,
                        source,
                    }))
                }
            }
        };
        if n == 0 {
            self.eof = Some(Instant::now());
            // A last line without its `\n` is still a line.
            let mut last = None;
            let dest = self.dest();
            self.up.finish(|envelope| {
                last = Some((Owned::of(&envelope), ledger.client_line(&envelope, dest)));
            });
            if let Some((envelope, verdict)) = last {
                self.line_done(envelope, verdict, next);
            }
            return Ok(false);
        }
        for segment in chunk[..n].split_inclusive(|&b| b == b'\n') {
            self.take_segment(segment, next, ledger);
        }
        Ok(true)
    }

    /// One piece of a line (ending with its `\n` or with the chunk).
    fn take_segment(&mut self, segment: &[u8], next: &LineFate, ledger: &mut Ledger) {
        let starts_line = !self.up.mid_line();
        if starts_line {
            self.batch = None;
            if first_byte_after_space(segment) == Some(b'[') {
                self.batch = Some(Vec::new());
            }
        }
        if let Some(batch) = &mut self.batch {
            if batch.len() + segment.len() <= BATCH_LIMIT {
                batch.extend_from_slice(segment);
            }
        }
        if self.line == LineFate::Hold {
            if self.held.len() + segment.len() > HOLD_LIMIT {
                self.held.truncate(self.line_start);
                self.line = LineFate::Overflow;
            } else {
                self.held.extend_from_slice(segment);
            }
        }
        let mut done = None;
        let dest = self.dest();
        self.up.feed(segment, |envelope| {
            done = Some((Owned::of(&envelope), ledger.client_line(&envelope, dest)));
        });
        if let Some((envelope, verdict)) = done {
            self.line_done(envelope, verdict, next);
        }
    }

    /// Where the current line goes, for the ledger.
    fn dest(&self) -> Dest {
        match self.line {
            LineFate::Hold => Dest::Held,
            _ => Dest::Nowhere,
        }
    }

    /// The current line has ended: hold its id, or answer it.
    fn line_done(&mut self, envelope: Owned, verdict: Verdict, next: &LineFate) {
        let fate = std::mem::replace(&mut self.line, next.clone());
        if verdict == Verdict::Drop && fate == LineFate::Hold {
            // A reply to an app instance that is gone: not for the next.
            self.held.truncate(self.line_start);
        }
        self.line_start = self.held.len();
        let batch = self.batch.take();
        let message = match fate {
            LineFate::Hold => {
                if envelope.kind == Kind::Request {
                    self.held_ids.push(envelope.id.unwrap_or_default());
                } else if let Some(batch) = batch {
                    self.held_batches.push(batch);
                }
                return;
            }
            LineFate::Overflow => format!(
                "the bridge is waiting for the app and cannot hold more than {} KiB of requests",
                HOLD_LIMIT / 1024
            ),
            LineFate::Interrupted => {
                "the app closed the connection while this request was being sent".to_string()
            }
            LineFate::Fail(message) => message,
        };
        match (envelope.kind, envelope.id, batch) {
            // An id too long to keep is one that could not be determined.
            (Kind::Request, id, _) => self.owed.extend_from_slice(&envelope::error_response_line(
                id.as_deref().unwrap_or(b"null"),
                ERROR_CODE,
                &message,
            )),
            (_, _, Some(batch)) => self.owed.extend(batch_errors(&batch, ERROR_CODE, &message)),
            _ => {}
        }
    }
}

/// The parts of an [`Envelope`] kept past the scanner's next call.
pub(super) struct Owned {
    kind: Kind,
    id: Option<Vec<u8>>,
}

impl Owned {
    fn of(envelope: &Envelope<'_>) -> Owned {
        Owned {
            kind: envelope.kind,
            id: envelope.id.map(<[u8]>::to_vec),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::envelope::batch_ids;

    #[test]
    fn a_batch_is_answered_per_request_in_one_array() {
        let line = br#" [{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"}, {"id":"x,]","method":"b","params":[1,{"c":"]"}]}]
"#;
        assert_eq!(batch_ids(line, false), b"\n1\n\"x,]\"".to_vec());
        let answer = batch_errors(line, ERROR_CODE, "gone");
        let parsed: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(parsed[0]["id"], 1);
        assert_eq!(parsed[1]["id"], "x,]");
        assert_eq!(parsed[1]["error"]["message"], "gone");
        assert!(answer.ends_with(b"]\n"));
        assert!(batch_errors(br#"[{"method":"n"}]"#, ERROR_CODE, "gone").is_empty());
    }
}
