//! The client's side of the session while no app is relayed to: stdin read
//! line by line, each line held for the app or answered by the bridge.
//!
//! Lines are whole or absent: a line is held only if all of it fits in
//! [`HOLD_LIMIT`]; a line that does not, or whose start went to an app that
//! closed, is dropped to its last byte (the rest of it is read and
//! discarded here, never relayed to the next app), and a dropped request is
//! owed its error the moment its line ends. The session writes what is
//! owed at once, with stdout's backpressure.

use std::cell::RefCell;
use std::time::Instant;

use futures_lite::io::{AsyncRead, AsyncReadExt};

use super::pending::Pending;
use super::replay::{Replay, RECORDED};
use super::stale::AppRequests;
use super::{BridgeError, ERROR_CODE};
use crate::envelope::{self, Envelope, Kind, Scanner};
use crate::io::BUFFER_SIZE;
use crate::relay;

/// Most bytes of client messages held while the app is away. A client
/// sends a handful of small requests while it waits for a reply; more than
/// this is answered with an error instead of held.
pub const HOLD_LIMIT: usize = 1024 * 1024;

/// Most bytes of one line starting with `[` (a JSON-RPC batch) kept while
/// it is read offline, so that each request in it can be answered.
pub(super) const BATCH_LIMIT: usize = HOLD_LIMIT;

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
    /// The session as the app accepted it, for replay.
    pub(super) replay: Replay,
    /// When stdin ended, if it has.
    pub(super) eof: Option<Instant>,
    /// The app's requests to the client, open and stale.
    pub(super) app_requests: RefCell<AppRequests>,
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
            replay: Replay::default(),
            eof: None,
            app_requests: RefCell::default(),
        }
    }

    /// Whether holding anything that awaits an answer (a request), which is
    /// worth waiting for the app after stdin ended.
    pub(super) fn holds_requests(&self) -> bool {
        !self.held_ids.is_empty() || !self.held_batches.is_empty()
    }

    /// The held bytes go to the app: takes them, and moves their requests'
    /// ids to `pending`.
    pub(super) fn take_held(&mut self, pending: &mut Pending) -> Vec<u8> {
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
            self.owed.extend(batch_errors(&batch, message));
        }
        self.held.clear();
        self.line_start = 0;
        if self.line == LineFate::Hold && self.up.mid_line() {
            self.line = LineFate::Fail(message.to_string());
        }
    }

    /// Reads one chunk of stdin and deals with each line in it as its fate
    /// says; lines that start later get `next`. `Ok(false)`: stdin ended.
    pub(super) async fn read_offline(&mut self, next: &LineFate) -> Result<bool, BridgeError> {
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
            let replay = &mut self.replay;
            let hold = self.line == LineFate::Hold;
            self.up.finish(|envelope| {
                if hold {
                    replay.client_sent(&envelope);
                }
                last = Some(Owned::of(&envelope));
            });
            if let Some(envelope) = last {
                self.line_done(envelope, next);
            }
            return Ok(false);
        }
        for segment in chunk[..n].split_inclusive(|&b| b == b'\n') {
            self.take_segment(segment, next);
        }
        Ok(true)
    }

    /// One piece of a line (ending with its `\n` or with the chunk).
    fn take_segment(&mut self, segment: &[u8], next: &LineFate) {
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
        let replay = &mut self.replay;
        let hold = self.line == LineFate::Hold;
        self.up.feed(segment, |envelope| {
            if hold {
                replay.client_sent(&envelope);
            }
            done = Some(Owned::of(&envelope));
        });
        if let Some(envelope) = done {
            self.line_done(envelope, next);
        }
    }

    /// The current line has ended: hold its id, or answer it.
    fn line_done(&mut self, envelope: Owned, next: &LineFate) {
        let fate = std::mem::replace(&mut self.line, next.clone());
        if let (Kind::Response | Kind::ErrorResponse, Some(id)) = (envelope.kind, &envelope.id) {
            let stale = self.app_requests.get_mut().client_replied(id);
            if stale && fate == LineFate::Hold {
                // A reply to an app instance that is gone: not for the next.
                self.held.truncate(self.line_start);
            }
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
            (_, _, Some(batch)) => self.owed.extend(batch_errors(&batch, &message)),
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

pub(super) fn first_byte_after_space(bytes: &[u8]) -> Option<u8> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r'))
}

/// The raw ids of the requests (or, with `responses`, of the responses) in
/// an array line, in order, each after a `\n` (an id is JSON, so it has
/// none); a request whose id is too long to keep is `null`.
pub(super) fn batch_ids(line: &[u8], responses: bool) -> Vec<u8> {
    let mut ids = Vec::new();
    let mut scanner = Scanner::new();
    envelope::for_each_array_element(line, &mut |element| {
        let mut element = element.to_vec();
        element.push(b'\n');
        let mut push = |id: &[u8]| {
            ids.push(b'\n');
            ids.extend_from_slice(id);
        };
        scanner.feed(&element, |envelope| match (envelope.kind, envelope.id) {
            (Kind::Request, id) if !responses => push(id.unwrap_or(b"null")),
            (Kind::Response | Kind::ErrorResponse, Some(id)) if responses => push(id),
            _ => {}
        });
    });
    ids
}

/// The answer to a batch the bridge cannot pass on, as JSON-RPC 2.0 says:
/// one array with an error response per request in it, on one line, or
/// nothing when it holds no request.
pub(super) fn batch_errors(line: &[u8], message: &str) -> Vec<u8> {
    array_of_errors(&batch_ids(line, false), message)
}

/// One array with an error response per id in `ids` (as [`batch_ids`]
/// gives them), on one line, or nothing when there is none.
pub(super) fn array_of_errors(ids: &[u8], message: &str) -> Vec<u8> {
    if ids.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for id in ids[1..].split(|&b| b == b'\n') {
        out.push(if out.is_empty() { b'[' } else { b',' });
        envelope::push_error_response(&mut out, id, ERROR_CODE, message);
    }
    out.extend_from_slice(b"]\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_answered_per_request_in_one_array() {
        let line = br#" [{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"}, {"id":"x,]","method":"b","params":[1,{"c":"]"}]}]
"#;
        assert_eq!(batch_ids(line, false), b"\n1\n\"x,]\"".to_vec());
        let answer = batch_errors(line, "gone");
        let parsed: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(parsed[0]["id"], 1);
        assert_eq!(parsed[1]["id"], "x,]");
        assert_eq!(parsed[1]["error"]["message"], "gone");
        assert!(answer.ends_with(b"]\n"));
        assert!(batch_errors(br#"[{"method":"n"}]"#, "gone").is_empty());
    }
}
