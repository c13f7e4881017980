//! Everything the traffic teaches the bridge, in one owner: the client's
//! requests in flight ([`Pending`], with the batches), the app's requests
//! to the client, open and stale ([`AppRequests`]), the session to give a
//! new instance ([`Record`]), the bridge's own requests to the app, and
//! what the bridge owes each side.
//!
//! Each line is decided here once, by the same code whether the bridge is
//! relaying it, holding it or answering it itself. A client line is
//! [classified](Line::of) when it ends, [decided](Ledger::decide) at once
//! (it goes on, it is taken out, or the bridge answers it), and what it
//! teaches is applied when it has reached an app instance
//! ([`Ledger::sent`]) or been answered by the bridge ([`Ledger::refused`]):
//! a line the app never got teaches nothing. An app line is decided as
//! early as its first members allow ([`Ledger::app_partial`]), and its
//! lesson is taken at its end ([`Ledger::app_line`]).
//!
//! Its state changes only through its methods: the fields are private, and
//! what the I/O side must write or say is handed over by a `take_` method
//! ([`Ledger::take_owed_client`], [`Ledger::take_owed_app`],
//! [`Ledger::take_taken_back`], [`Ledger::take_lost`],
//! [`Ledger::take_learnt`]). So a list of ids is kept in one place only (a
//! cancel among held lines is matched here too, [`Ledger::refuse_held`]),
//! and the rules of a line cannot be bypassed by a caller who writes a
//! field. The replay to a new instance (`resume.rs`) is part of it for the
//! same reason: every step reads the record and writes the ledger.

mod id;
mod pending;
mod record;
mod resume;

use id::key as id_key;
use pending::{IdMap, Pending};
use record::{listed, Era, ListenState, Record, Recorded, Told};

use super::answer::{self, Answer, Reason};
use super::answers::{Answers, Learnt};
use crate::envelope::json::member;
use crate::envelope::{BatchIds, BatchScanner, Envelope, Kind, Partial};

/// Most ids of open app-to-client requests remembered per session: an app
/// has a handful open at a time.
const STALE_LIMIT: usize = 4096;

/// The start of the ids the bridge gives an app's question whose own id
/// the client may still answer for a gone instance (see [`AppRequests`]).
const MAPPED_PREFIX: &str = "mcp-bridge-question-";

/// The methods whose requests and notifications the client scanner
/// records whole: the session's state, and the requests that only read
/// (sent again to the next instance when the app goes away while they
/// are in flight).
pub(super) const RECORDED: &[&str] = &[
    "initialize",
    "notifications/initialized",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "notifications/cancelled",
    "subscriptions/listen",
    "server/discover",
    "ping",
    "tools/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
];

/// What a client request asks, as far as the bridge cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    Initialize,
    Discover,
    Listen,
    SetLevel,
    Subscribe,
    Unsubscribe,
    Initialized,
    Cancelled,
    /// A request that only reads: safe to send again.
    ReadOnly,
    /// A list (`tools/list`, `prompts/list`, `resources/list`,
    /// `resources/templates/list`): it only reads, and the cache keeps it.
    List,
    Other,
}

impl Method {
    fn of(name: Option<&str>) -> Method {
        match name {
            Some("initialize") => Method::Initialize,
            Some("server/discover") => Method::Discover,
            Some("subscriptions/listen") => Method::Listen,
            Some("logging/setLevel") => Method::SetLevel,
            Some("resources/subscribe") => Method::Subscribe,
            Some("resources/unsubscribe") => Method::Unsubscribe,
            Some("notifications/initialized") => Method::Initialized,
            Some("notifications/cancelled") => Method::Cancelled,
            Some("tools/list" | "prompts/list" | "resources/list" | "resources/templates/list") => {
                Method::List
            }
            Some("ping" | "prompts/get" | "resources/read" | "completion/complete") => {
                Method::ReadOnly
            }
            _ => Method::Other,
        }
    }

    /// Whether a request in flight when the app went away is sent to the
    /// next instance rather than answered with an error: it only reads, or
    /// it is the session's own (`initialize`, `server/discover`), so the
    /// app cannot have done anything twice.
    pub(super) fn repeatable(self) -> bool {
        matches!(
            self,
            Method::Initialize
                | Method::Discover
                | Method::SetLevel
                | Method::Subscribe
                | Method::Unsubscribe
                | Method::ReadOnly
                | Method::List
        )
    }

    /// Whether the cache keeps the app's answer (read whole, then).
    fn cached(self) -> bool {
        matches!(self, Method::Initialize | Method::Discover | Method::List)
    }
}

/// A whole client line, as the ledger sees it.
#[derive(Clone, Debug)]
pub(super) enum Line {
    /// A request: its id (`None`: too long to keep), what it asks, and its
    /// text when the scanner recorded it.
    Request {
        id: Option<Vec<u8>>,
        method: Method,
        text: Option<Recorded>,
    },
    /// A notification, and its text when recorded.
    Notification {
        method: Method,
        text: Option<Recorded>,
    },
    /// The client's answer to a request of the app's.
    Reply(Vec<u8>),
    /// A batch, by the ids of the requests in it.
    Batch(Vec<u8>),
    /// A batch holding the client's answers to the app's requests, by
    /// their ids (some of them may be for an instance that is gone).
    Replies(Vec<u8>),
    /// The client's answer (or array of answers) as the bridge rewrote it
    /// for the instance that asked ([`Ledger::reply_line`]): what it
    /// teaches was taken when it was rewritten, and it is for that
    /// instance only.
    Rewritten,
    /// Anything else (an empty line, not JSON-RPC): passed on as it is.
    Other,
}

impl Line {
    /// Classifies a line the scanner ended; `batch` is its ids when it is
    /// an array (a batch).
    pub(super) fn of(envelope: &Envelope<'_>, batch: Option<BatchIds>) -> Line {
        let method = Method::of(envelope.method);
        match (envelope.kind, envelope.id) {
            (Kind::Request, id) => Line::Request {
                id: id.map(<[u8]>::to_vec),
                method,
                text: Recorded::of(envelope),
            },
            (Kind::Notification, _) => Line::Notification {
                method,
                text: Recorded::of(envelope),
            },
            (Kind::Response | Kind::ErrorResponse, Some(id)) => Line::Reply(id.to_vec()),
            _ => match batch {
                Some(ids) if !ids.responses.is_empty() => Line::Replies(ids.responses),
                Some(ids) => Line::Batch(ids.requests),
                None => Line::Other,
            },
        }
    }

    /// Whether the line awaits an answer (worth waiting for the app after
    /// stdin ended).
    pub(super) fn asks(&self) -> bool {
        match self {
            Line::Request { method, .. } => *method != Method::Listen,
            Line::Batch(ids) => !ids.is_empty(),
            _ => false,
        }
    }

    /// The request a `notifications/cancelled` line cancels.
    pub(super) fn cancels(&self) -> Option<&[u8]> {
        match self {
            Line::Notification {
                method: Method::Cancelled,
                text: Some(text),
            } => text.param("requestId"),
            _ => None,
        }
    }
}

/// Where the client side is, which decides what a line may become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Relaying to an app instance.
    Online,
    /// Holding lines for the next instance.
    Holding,
    /// No app: requests are answered by the bridge.
    Absent,
}

/// What becomes of a client line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It goes on (or is held for the app).
    Forward,
    /// It is taken out: a reply to an instance that is gone, or a line the
    /// bridge took care of itself.
    Drop,
    /// The bridge answers it with an error.
    Refuse,
}

/// What becomes of the client's answer to the app (see
/// [`Ledger::reply_line`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Rewrite {
    /// It goes on as it is.
    Keep,
    /// It is taken out.
    Drop,
    /// This goes in its place.
    Replace(Vec<u8>),
}

/// What an app line needs before it can be decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Early {
    /// Pass it on as it comes.
    Forward,
    /// Take it out as it comes.
    Drop,
    /// Wait for the line's end: it is decided there.
    Wait,
}

impl Early {
    /// What is decided of a line in progress `len` bytes long: a line still
    /// undecided past [`UNDECIDED_LIMIT`] goes on as it comes.
    pub(super) fn for_line(self, len: usize) -> Early {
        match self {
            Early::Wait if len > UNDECIDED_LIMIT => Early::Forward,
            other => other,
        }
    }

    /// Applies the decision to the line in progress: kept from `start` (if
    /// `kept`) to `end` in its side's buffer, decided so far `decided`.
    /// Taken out, its bytes go and no more are kept.
    pub(super) fn apply(
        self,
        start: usize,
        end: &mut usize,
        kept: &mut bool,
        decided: &mut Option<Early>,
    ) {
        match self {
            Early::Wait => {}
            Early::Drop => {
                *end = start;
                *kept = false;
                *decided = Some(Early::Drop);
            }
            Early::Forward => *decided = Some(Early::Forward),
        }
    }
}

/// Longest start of a line (either way) kept undecided before it is
/// passed on all the same: a reply whose `id` comes after its `result` (as
/// the TypeScript SDK writes them) can only be placed at its end.
pub(super) const UNDECIDED_LIMIT: usize = 64 * 1024;

/// A request of the bridge's own to the app instance (the replay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Ours {
    Initialize,
    SetLevel,
    Subscribe(Vec<u8>),
}

/// The new instance's answer to the replayed `initialize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum TakenBack {
    /// Its `result`, raw.
    Accepted(Vec<u8>),
    /// It said no: its error message.
    Rejected(String),
}

/// What the traffic taught the bridge so far (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The client's requests the current instance has not answered.
    pending: Pending,
    batches: pending::Batches,
    /// The app's requests to the client.
    app_requests: AppRequests,
    /// The session as the app accepted it.
    record: Record,
    /// The bridge's requests to the current instance, by raw id.
    ours: IdMap<Ours>,
    next_ours: u64,
    /// The answer to the replayed `initialize`, when it came.
    taken_back: Option<TakenBack>,
    /// Whether the current instance answered a client request.
    served: bool,
    /// Whether the current instance came after a hang-up (or after the
    /// cache answered for the app): what it answers is checked against what
    /// it was asked.
    resumed: bool,
    /// `initialize` and `server/discover` requests in flight: their
    /// answers are read whole (for the record and the cache).
    whole_wanted: usize,
    /// The app's last answers, for a client that comes before the app:
    /// asked, never written (see [`super::answers`]).
    answers: Box<dyn Answers>,
    /// What the app answered that the answers cache keeps, for the I/O
    /// side to write before the reply goes out ([`Ledger::take_learnt`]).
    learnt: Vec<Learnt>,
    /// The app is known not to be there: the cache may answer.
    app_absent: bool,
    /// Whole lines the bridge owes the client (error responses,
    /// notifications), written at the next line boundary.
    owed_client: Vec<u8>,
    /// Whole lines the bridge owes the app (its requests, error responses
    /// to the app's), written at the next line boundary.
    owed_app: Vec<u8>,
    /// What could not be carried over to the new instance, to be said.
    lost: Vec<String>,
    /// The endpoint, for the errors the bridge writes.
    endpoint: std::path::PathBuf,
    /// The instance that hung up last did so on a `server/discover` probe,
    /// before any `initialize`: a legacy app, not a failure.
    probe_refused: bool,
}

impl Ledger {
    /// A ledger for a session with `endpoint`, answering from `answers`.
    pub(super) fn new(answers: Box<dyn Answers>, endpoint: std::path::PathBuf) -> Ledger {
        Ledger {
            answers,
            endpoint,
            ..Ledger::default()
        }
    }

    /// What the app answered that the cache is to keep, oldest first; the
    /// I/O side hands each to [`Answers::learn`] before the replies it came
    /// with are written.
    pub(super) fn take_learnt(&mut self) -> Vec<Learnt> {
        std::mem::take(&mut self.learnt)
    }

    /// The app answered `request` with `result` (none: an error, or too
    /// long to keep): queued for the cache.
    pub(super) fn learnt(&mut self, request: &[u8], result: Option<&[u8]>) {
        self.learnt.push(Learnt {
            request: request.to_vec(),
            result: result.map(<[u8]>::to_vec),
        });
    }

    /// The bridge's lines owed to the client, taken to be written.
    pub(super) fn take_owed_client(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.owed_client)
    }

    /// Whether the bridge owes the client lines.
    pub(super) fn owes_client(&self) -> bool {
        !self.owed_client.is_empty()
    }

    /// Where the lines owed to the client end now: a mark to take the
    /// ones owed after it ([`Ledger::take_owed_client_after`]).
    pub(super) fn owed_client_len(&self) -> usize {
        self.owed_client.len()
    }

    /// The lines owed to the client since the mark `at`, taken.
    pub(super) fn take_owed_client_after(&mut self, at: usize) -> Vec<u8> {
        self.owed_client.split_off(at)
    }

    /// Lines owed to the client that the caller took and did not place:
    /// owed again, after what is owed now.
    pub(super) fn owe_client(&mut self, lines: &[u8]) {
        self.owed_client.extend_from_slice(lines);
    }

    /// The client's stream was cut mid-line (the app died while sending
    /// one): a line end is owed first, so what the bridge writes next is a
    /// line of its own.
    pub(super) fn owe_client_line_end(&mut self) {
        self.owed_client.insert(0, b'\n');
    }

    /// The bridge's lines owed to the app, taken to be written.
    pub(super) fn take_owed_app(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.owed_app)
    }

    /// The current instance's answer to the replayed `initialize`, taken.
    pub(super) fn take_taken_back(&mut self) -> Option<TakenBack> {
        self.taken_back.take()
    }

    /// Whether what the app sent left work for the writer to the app: the
    /// answer to the replay, or lines the bridge owes the app.
    pub(super) fn has_work_for_app(&self) -> bool {
        self.taken_back.is_some() || !self.owed_app.is_empty()
    }

    /// Whether the app is known not to be there (the cache may answer).
    pub(super) fn set_app_absent(&mut self, absent: bool) {
        self.app_absent = absent;
    }

    /// Whether the current instance answered a client request.
    pub(super) fn served(&self) -> bool {
        self.served
    }

    /// Whether the instance that hung up last did so on a
    /// `server/discover` probe, before any `initialize`.
    pub(super) fn probe_refused(&self) -> bool {
        self.probe_refused
    }

    /// Whether the client's `initialize` was too long to keep for a
    /// replay.
    pub(super) fn too_long_to_replay(&self) -> bool {
        self.record.too_long
    }

    /// What could not be carried over to the new instance, taken to be
    /// said on stderr; when the client's session has logging, it is also
    /// owed a warning for each.
    pub(super) fn take_lost(&mut self) -> Vec<String> {
        let lost = std::mem::take(&mut self.lost);
        if self
            .record
            .told
            .as_ref()
            .map_or(false, |t| t.has("logging"))
        {
            for lost in &lost {
                self.owed_client.extend_from_slice(&answer::warning(lost));
            }
        }
        lost
    }

    /// No app: the held `lines` that ask are answered with `answer`, all
    /// but a request the client cancelled among them.
    pub(super) fn refuse_held(&mut self, lines: Vec<Line>, answer: &Answer) {
        let cancelled: Vec<&[u8]> = lines.iter().filter_map(Line::cancels).collect();
        for line in &lines {
            let is_cancelled = match line {
                Line::Request { id: Some(id), .. } => cancelled.iter().any(|c| *c == &id[..]),
                _ => false,
            };
            if !is_cancelled && self.decide(line, Mode::Absent) == Verdict::Refuse {
                self.refused(line, answer);
            }
        }
    }

    /// How many client requests the current instance has not answered.
    #[cfg(test)]
    pub(super) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The app's last answers, for the I/O side (to [learn](Answers::learn)
    /// what [`Ledger::take_learnt`] gave, to say who serves).
    pub(super) fn answers(&mut self) -> &mut dyn Answers {
        &mut *self.answers
    }

    /// Decides a client line (see the [module docs](self)): lines the
    /// bridge takes care of itself (an `initialize` or `server/discover`
    /// the cache answers while the app is away, a listen kept for the app)
    /// take their effect here; the others when they are [sent](Self::sent)
    /// or [refused](Self::refused).
    pub(super) fn decide(&mut self, line: &Line, mode: Mode) -> Verdict {
        let online = mode == Mode::Online;
        match line {
            Line::Rewritten => Verdict::Drop,
            // An answer to a gone instance's question (not for the next
            // one, which may ask under the same id) is taken out by
            // `reply_line`.
            Line::Reply(_) | Line::Replies(_) if mode == Mode::Absent => Verdict::Drop,
            Line::Request {
                id: Some(id),
                method: Method::Listen,
                text: Some(text),
            } if !online => {
                self.record.listen(id, text.clone(), ListenState::Unsent);
                Verdict::Drop
            }
            Line::Request {
                id: Some(id),
                method,
                text,
            } if !online && method.cached() => match self.answer_from_cache(id, *method, text) {
                true => Verdict::Drop,
                false if mode == Mode::Absent => Verdict::Refuse,
                false => Verdict::Forward,
            },
            Line::Notification {
                method: Method::Initialized,
                text: Some(text),
            } if self.record.by_bridge => {
                // The replay sends it to the app with the `initialize` the
                // cache answered.
                self.record.initialized(text.clone());
                Verdict::Drop
            }
            Line::Notification { .. } | Line::Other if mode == Mode::Absent => {
                if let Some(id) = line.cancels() {
                    self.record.end_listen(id);
                }
                Verdict::Drop
            }
            Line::Request { .. } | Line::Batch(_) if mode == Mode::Absent => Verdict::Refuse,
            _ => {
                if let Some(id) = line.cancels() {
                    // A cancelled listen is not sent again.
                    self.record.end_listen(id);
                }
                Verdict::Forward
            }
        }
    }

    /// What becomes of a client line that goes on, when it is the client's
    /// answer (or an array of answers) to the app's questions: `text` is
    /// the whole line (`None`: not kept whole, already going out). An
    /// answer to a gone instance's question is taken out (from an array:
    /// the array goes on without it); one to a question whose id the bridge
    /// mapped goes to the app under the app's own id, in the line's place,
    /// and what it teaches is taken now (the line is then
    /// [`Line::Rewritten`]). Any other line goes on as it is.
    pub(super) fn reply_line(&mut self, line: &Line, text: Option<&[u8]>) -> Rewrite {
        if !self.app_requests.may_drop() {
            return Rewrite::Keep;
        }
        match (line, text) {
            (Line::Reply(id), text) => self.one_reply(id, text),
            (Line::Replies(_), Some(text)) => self.replies_in(text),
            _ => Rewrite::Keep,
        }
    }

    /// Decides the client's answer `id` in progress from its first
    /// members: taken out (a gone instance's question), read whole (a
    /// mapped one), or passed on as it comes.
    pub(super) fn reply_early(&mut self, id: &[u8]) -> Early {
        if self.app_requests.is_stale(id) {
            self.app_requests.client_replied(id);
            Early::Drop
        } else if self.app_requests.mapped(id).is_some() {
            Early::Wait
        } else {
            Early::Forward
        }
    }

    /// One answer `text` (a line, or an element of an array) under `id`.
    fn one_reply(&mut self, id: &[u8], text: Option<&[u8]>) -> Rewrite {
        let stale = self.app_requests.is_stale(id);
        // Answered now (it goes on, if it does, to the instance that asked).
        let app_id = match self.app_requests.client_replied(id) {
            _ if stale => return Rewrite::Drop,
            Some(app_id) => app_id,
            None => return Rewrite::Keep,
        };
        // The envelope's own id, never a value inside the result.
        let rewritten = text.and_then(|text| Some(replace_at(text, member(text, "id")?, &app_id)));
        match rewritten {
            Some(line) => Rewrite::Replace(line),
            None => {
                self.id_in_use(
                    &app_id,
                    "mcp-bridge: the client's reply was too long to carry under this \
                     request's own id; ask again",
                );
                Rewrite::Drop
            }
        }
    }

    /// An array of the client's answers, whole: each decided as one.
    fn replies_in(&mut self, text: &[u8]) -> Rewrite {
        let mut out = b"[".to_vec();
        let mut changed = false;
        BatchScanner::for_each_element(text, &mut |at, id| {
            let element = &text[at];
            let decided = match id {
                Some(id) => self.one_reply(id, Some(element)),
                None => Rewrite::Keep,
            };
            let kept = match &decided {
                Rewrite::Keep => element,
                Rewrite::Replace(element) => element,
                Rewrite::Drop => &[],
            };
            changed |= !matches!(decided, Rewrite::Keep);
            if !kept.is_empty() {
                if out.len() > 1 {
                    out.push(b',');
                }
                out.extend_from_slice(kept);
            }
        });
        match (changed, out.len() > 1) {
            (false, _) => Rewrite::Keep,
            (true, false) => Rewrite::Drop,
            (true, true) => {
                out.extend_from_slice(b"]\n");
                Rewrite::Replace(out)
            }
        }
    }

    /// Answers an `initialize`, `server/discover` or list from the cache,
    /// while the app is known to be away: whether it did.
    fn answer_from_cache(&mut self, id: &[u8], method: Method, text: &Option<Recorded>) -> bool {
        if !self.app_absent {
            return false;
        }
        let result = match text
            .as_ref()
            .and_then(|text| self.answers.answer(&text.line))
        {
            Some(result) => result,
            None => return false,
        };
        self.owed_client
            .extend_from_slice(&answer::result_line(id, &result));
        match (method, text) {
            (Method::Initialize, _) => self.record.accepted(text.clone(), &result, true),
            (Method::Discover, _) => self.record.modern(),
            (Method::List, Some(text)) => self.record.given_list(&text.line),
            _ => {}
        }
        true
    }

    /// A client line reached the current app instance: what it teaches.
    pub(super) fn sent(&mut self, line: Line) {
        match line {
            Line::Request {
                id: Some(id),
                method: Method::Listen,
                text: Some(text),
            } => self.record.listen(&id, text, ListenState::Sent),
            Line::Request { id, method, text } => {
                match method {
                    Method::SetLevel => {
                        if let Some(text) = &text {
                            self.record.set_level(text.clone());
                        }
                    }
                    Method::Subscribe => {
                        if let Some(text) = &text {
                            self.record.subscribe(text.clone());
                        }
                    }
                    Method::Unsubscribe => {
                        if let Some(text) = &text {
                            self.record.unsubscribe(text);
                        }
                    }
                    _ => {}
                }
                match id {
                    Some(id) => {
                        if method.cached() {
                            self.whole_wanted += 1;
                        }
                        let keep = text.filter(|_| method.repeatable());
                        self.pending.insert(&id, method, keep);
                    }
                    None => self.pending.long_id(true),
                }
            }
            Line::Notification { method, text } => {
                if let Some(id) = (Line::Notification {
                    method,
                    text: text.clone(),
                })
                .cancels()
                {
                    self.pending.remove(id);
                }
                if let (Method::Initialized, Some(text)) = (method, text) {
                    self.record.initialized(text);
                }
            }
            Line::Reply(id) => {
                self.app_requests.client_replied(&id);
            }
            Line::Replies(ids) => {
                for id in ids.split(|&b| b == b'\n').filter(|id| !id.is_empty()) {
                    self.app_requests.client_replied(id);
                }
            }
            Line::Batch(ids) => self.batches.sent(ids),
            Line::Rewritten | Line::Other => {}
        }
    }

    /// A client line the bridge answers itself with `answer`.
    pub(super) fn refused(&mut self, line: &Line, answer: &Answer) {
        match line {
            Line::Request { id, .. } => {
                let id = id.as_deref().unwrap_or(b"null");
                self.owed_client.extend_from_slice(&answer.to(id));
            }
            Line::Batch(ids) => self.owed_client.extend(answer.to_ids(ids)),
            _ => {}
        }
    }

    /// Whether a client line may still be taken out (a reply to a gone
    /// instance): if not, every line goes on as it comes.
    pub(super) fn may_drop_client_lines(&self) -> bool {
        self.app_requests.may_drop()
    }

    /// A line the current instance took whole but never read (it went away
    /// with it unread): it teaches nothing it taught when it was taken.
    /// Whether it goes to the next instance: a reply or a batch of replies
    /// was for the instance that asked, which is gone, so it goes nowhere.
    pub(super) fn unread(&mut self, line: &Line) -> bool {
        match line {
            Line::Request { id: Some(id), .. } => {
                self.pending.remove(id);
                true
            }
            Line::Request { id: None, .. } => {
                self.pending.long_id(false);
                true
            }
            Line::Batch(ids) => {
                self.batches.unsent(ids);
                true
            }
            Line::Reply(_) | Line::Replies(_) | Line::Rewritten => false,
            Line::Notification { .. } | Line::Other => true,
        }
    }

    /// Decides an app line from its first members (see [`Early`]).
    pub(super) fn app_partial(&self, partial: &Partial<'_>) -> Early {
        if partial.other {
            return Early::Forward;
        }
        if partial.answer {
            return match partial.id {
                Some(id) if self.wants_whole(id) => Early::Wait,
                Some(id) if self.placed(id) => Early::Forward,
                Some(_) => Early::Drop,
                // Not placed yet: decided at its end.
                None => Early::Wait,
            };
        }
        if partial.method {
            if partial.method_name == Some("notifications/subscriptions/acknowledged") {
                return Early::Wait;
            }
            // A request under an id the client may still answer for a gone
            // instance is given another id, at its end.
            if !self.app_requests.may_drop() {
                return Early::Forward;
            }
        }
        Early::Wait
    }

    /// Whether the reply to `id` is read whole by the ledger (the replay's,
    /// an `initialize` or `server/discover` result for the cache).
    fn wants_whole(&self, id: &[u8]) -> bool {
        self.ours.contains_key(&id_key(id))
            || self.pending.method_of(id).map_or(false, Method::cached)
    }

    /// Whether a reply with `id` goes to the client: it answers something
    /// the current instance was asked (or the bridge cannot tell, having
    /// forgotten some). Ids are compared as JSON values ([`id_key`]): a
    /// reply under an id the client never sent (`"1"` for `1`) is not its.
    fn placed(&self, id: &[u8]) -> bool {
        self.pending.contains(id)
            || self.batches.contains(id)
            || self
                .record
                .listens
                .iter()
                .any(|l| id_key(&l.id) == id_key(id))
            || self.pending.forgot
    }

    /// A whole app line (`text`, as far as it was kept, when it was
    /// [waited for](Early::Wait)): what it teaches, and whether it goes on
    /// to the client. `decided` is what [`Ledger::app_partial`] said, if it
    /// said anything but wait: the line is then already on its way or
    /// gone, and only teaches.
    pub(super) fn app_line(
        &mut self,
        envelope: &Envelope<'_>,
        text: Option<&[u8]>,
        decided: Option<Early>,
    ) -> bool {
        if decided == Some(Early::Drop) {
            return false;
        }
        match (envelope.kind, envelope.id) {
            (Kind::Response | Kind::ErrorResponse, Some(id)) => self.app_reply(envelope, id, text),
            (Kind::Response | Kind::ErrorResponse, None) => {
                self.pending.long_id(false);
                true
            }
            (Kind::Request, Some(id)) => {
                if !self.app_requests.collides(id) {
                    self.app_requests.app_asked(id, None);
                    return true;
                }
                // The client may still answer a gone instance's question
                // under this id: the question goes to the client under an
                // id of the bridge's, and the reply comes back under the
                // app's own.
                let start = envelope.id_offset as usize;
                let mapped = match text {
                    Some(text) if decided.is_none() && start + id.len() <= text.len() => {
                        let shown = self.app_requests.next_mapped();
                        let at = &text[start..start + id.len()];
                        let mut line = replace_at(text, at, &shown);
                        if line.last() != Some(&b'\n') {
                            line.push(b'\n');
                        }
                        self.app_requests.app_asked(&shown, Some(id.to_vec()));
                        Some(line)
                    }
                    _ => None,
                };
                match mapped {
                    Some(line) => {
                        self.owed_client.extend_from_slice(&line);
                        false
                    }
                    None if decided == Some(Early::Forward) => {
                        self.app_requests.app_asked(id, None);
                        true
                    }
                    None => {
                        self.id_in_use(
                            id,
                            "mcp-bridge: the client may still answer this id for the app's \
                             previous instance, and this request is too long to give another; \
                             ask again under another id",
                        );
                        false
                    }
                }
            }
            (Kind::Notification, _)
                if envelope.method == Some("notifications/subscriptions/acknowledged") =>
            {
                text.map_or(true, |text| self.acknowledged(text))
            }
            (Kind::Notification, _) if envelope.method == Some("notifications/cancelled") => {
                text.map_or(true, |text| self.app_cancelled(text))
            }
            _ => true,
        }
    }

    fn app_reply(&mut self, envelope: &Envelope<'_>, id: &[u8], text: Option<&[u8]>) -> bool {
        let result = || text.and_then(|text| member(text, "result"));
        if let Some(ours) = self.ours.remove(&id_key(id)) {
            self.our_reply(ours, envelope, result());
            return false;
        }
        if let Some(sent) = self.pending.remove(id) {
            self.served = true;
            if sent.method.cached() {
                self.whole_wanted = self.whole_wanted.saturating_sub(1);
                if let Some(text) = &sent.text {
                    let answered = envelope.kind == Kind::Response;
                    let result = if answered { result() } else { None };
                    self.learnt(&text.line, result);
                }
            }
            if let (Kind::Response, Some(result)) = (envelope.kind, result()) {
                match sent.method {
                    Method::Initialize => self.record.accepted(sent.text, result, false),
                    Method::Discover => self.record.modern(),
                    Method::List => {
                        if let Some(text) = &sent.text {
                            self.record.given_list(&text.line);
                        }
                    }
                    _ => {}
                }
            }
            return true;
        }
        if self.record.end_listen(id) {
            return true;
        }
        if self.batches.answered_one(id) {
            // One request of a batch, answered on a line of its own.
            self.served = true;
            return true;
        }
        // Answered already (by the bridge, at a restart), or never asked of
        // this instance: one answer per request.
        self.pending.forgot
    }

    fn our_reply(&mut self, ours: Ours, envelope: &Envelope<'_>, result: Option<&[u8]>) {
        let failed = envelope.kind == Kind::ErrorResponse;
        let why = || envelope.error_message.unwrap_or("(no message)").to_string();
        match ours {
            Ours::Initialize => {
                self.taken_back = Some(match (failed, result) {
                    (false, Some(result)) => TakenBack::Accepted(result.to_vec()),
                    (false, None) => TakenBack::Accepted(b"{}".to_vec()),
                    (true, _) => TakenBack::Rejected(why()),
                });
            }
            Ours::SetLevel if failed => self.lost.push(format!(
                "the new instance rejected the log level: {}",
                why()
            )),
            Ours::Subscribe(uri) if failed => self.lost.push(format!(
                "the new instance rejected the subscription to {}: {}",
                String::from_utf8_lossy(&uri),
                why()
            )),
            _ => {}
        }
    }

    /// Answers the app's question `id` with `id_in_use`, saying `why`
    /// (a sentence of the bridge's own, `mcp-bridge: ` first).
    fn id_in_use(&mut self, id: &[u8], why: &'static str) {
        let answer = Answer::new(Reason::IdInUse, why, &self.endpoint);
        self.owed_app.extend_from_slice(&answer.to(id));
    }

    /// The app's `notifications/cancelled` (whole): whether it goes on to
    /// the client as it is. One for a question the client knows under an id
    /// of the bridge's goes out under that id instead, in its place.
    fn app_cancelled(&mut self, text: &[u8]) -> bool {
        let id = match member(text, "params").and_then(|p| member(p, "requestId")) {
            Some(id) => id,
            None => return true,
        };
        let shown = match self.app_requests.app_cancelled(id) {
            Some(shown) => shown,
            None => return true,
        };
        let mut line = replace_at(text, id, &shown);
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        self.owed_client.extend_from_slice(&line);
        false
    }

    /// `notifications/subscriptions/acknowledged`: whether it goes on to
    /// the client.
    fn acknowledged(&mut self, text: &[u8]) -> bool {
        let params = member(text, "params");
        let id = params
            .and_then(|p| member(p, "_meta"))
            .and_then(|m| member(m, "io.modelcontextprotocol/subscriptionId"));
        let honored = params
            .and_then(|p| member(p, "notifications"))
            .map(<[u8]>::to_vec);
        let listen = match id.and_then(|id| self.record.listen_mut(id)) {
            Some(listen) => listen,
            None => return true,
        };
        let before = std::mem::replace(&mut listen.honored, honored.clone());
        let was = std::mem::replace(&mut listen.state, ListenState::Acked);
        let resumed = listen.after_resume;
        let id = listen.id.clone();
        if resumed {
            let filter = honored
                .clone()
                .or_else(|| listen.text.param("notifications").map(<[u8]>::to_vec))
                .unwrap_or_default();
            for list in listed(&filter) {
                self.owed_client
                    .extend_from_slice(&answer::list_changed(list, Some(&id)));
            }
        }
        match was {
            ListenState::Resent if before == honored => false,
            ListenState::Resent => {
                self.lost.push(format!(
                    "the new instance honours less of the subscription {}",
                    String::from_utf8_lossy(&id)
                ));
                // The client is told what is honoured now (before the
                // notifications above, which follow it).
                true
            }
            _ => true,
        }
    }

    /// An array line from the app (a batch's answer), by the ids of the
    /// responses in it: the batch it answers is settled.
    pub(super) fn app_array(&mut self, responses: &[u8]) {
        self.batches.answered(responses);
    }

    /// A request of the bridge's own for the current instance: its id.
    pub(super) fn ours(&mut self, what: Ours) -> Vec<u8> {
        self.next_ours += 1;
        let id = format!("\"mcp-bridge-replay-{}\"", self.next_ours).into_bytes();
        self.ours.insert(id_key(&id), what);
        id
    }

    /// A new app instance takes over (`resumed`: after a hang-up or the
    /// cache's answers): nothing of the old one's is pending with it.
    pub(super) fn new_instance(&mut self, resumed: bool) {
        self.ours.clear();
        self.taken_back = None;
        self.served = false;
        self.whole_wanted = 0;
        self.owed_app.clear();
        self.resumed = resumed;
    }

    /// The app instance hung up: what was in flight with it. Requests that
    /// may be sent again come back, in order, to be held for the next
    /// instance; the others are answered with `answer`; the app's open
    /// requests to the client are cancelled towards the client and their
    /// ids go stale.
    pub(super) fn hung_up(&mut self, answer: &Answer) -> Vec<Line> {
        let mut again = Vec::new();
        let legacy_so_far = self.record.initialize.is_none() && self.record.era != Era::Modern;
        self.probe_refused = false;
        for (id, sent) in self.pending.drain() {
            if sent.method == Method::Discover && legacy_so_far {
                // A probe the app hung up on: a legacy app. Answered, never
                // sent again (it would be hung up on again).
                self.probe_refused = true;
                self.owed_client
                    .extend_from_slice(&answer::not_modern(&id, &self.endpoint));
                continue;
            }
            match sent.text {
                Some(text) if sent.method.repeatable() => again.push(Line::Request {
                    method: sent.method,
                    text: Some(text),
                    id: Some(id),
                }),
                _ => self.owed_client.extend_from_slice(&answer.to(&id)),
            }
        }
        for ids in self.batches.drain() {
            self.owed_client.extend(answer.to_ids(&ids));
        }
        for id in self.app_requests.hung_up() {
            self.owed_client.extend_from_slice(&answer::cancelled(&id));
        }
        for listen in &mut self.record.listens {
            listen.state = match listen.state {
                ListenState::Acked | ListenState::Resent => ListenState::Resent,
                _ => ListenState::Unsent,
            };
        }
        self.new_instance(true);
        again
    }

    /// Whether the session so far teaches anything the next instance must
    /// be given (an accepted `initialize`, open listens).
    pub(super) fn has_session(&self) -> bool {
        self.record.initialize.is_some() || self.record.too_long || !self.record.listens.is_empty()
    }
}

/// The app's questions to the client: open ones of the current instance,
/// and the ids of gone instances' that the client may still answer
/// (`stale`).
///
/// The app asks the client things too (elicitation, sampling, roots), under
/// ids of its own, and both official SDKs number them from 0 in each
/// instance. When the app restarts with such a question open, the client's
/// answer, when it comes, belongs to the old instance: the new one would
/// take it for the answer to its own question under the same id (a "Create
/// file?" accepted as the answer to "Delete the repository?"). So at a
/// hang-up the client is told the old questions are cancelled and their
/// ids go stale: a client reply under one is taken out. A new instance
/// that asks under a stale id is not held up: its question reaches the
/// client under an id of the bridge's ([`MAPPED_PREFIX`] and a number),
/// and the client's reply goes back to it under its own id. Ids are
/// compared as JSON values ([`id_key`]).
#[derive(Debug, Default)]
struct AppRequests {
    /// Open questions by the id the client sees: the app's own id, when
    /// the bridge gave the question another.
    open: IdMap<(Vec<u8>, Option<Vec<u8>>)>,
    stale: IdMap<()>,
    mapped: u64,
}

impl AppRequests {
    /// Whether a client reply may be taken out or redirected: every line
    /// of the client's goes on as it comes otherwise.
    fn may_drop(&self) -> bool {
        !self.stale.is_empty() || self.open.values().any(|(_, app)| app.is_some())
    }

    fn is_stale(&self, id: &[u8]) -> bool {
        !self.stale.is_empty() && self.stale.contains_key(&id_key(id))
    }

    /// The app's own id of the open question the client sees as `id`, if
    /// the bridge gave it another.
    fn mapped(&self, id: &[u8]) -> Option<&[u8]> {
        self.open.get(&id_key(id))?.1.as_deref()
    }

    /// Whether a question under `id` must reach the client under another.
    fn collides(&self, id: &[u8]) -> bool {
        if self.stale.is_empty() {
            return false;
        }
        let key = id_key(id);
        self.stale.contains_key(&key) || self.open.contains_key(&key)
    }

    /// A new id of the bridge's for a question, as written.
    fn next_mapped(&mut self) -> Vec<u8> {
        self.mapped += 1;
        format!("\"{}{}\"", MAPPED_PREFIX, self.mapped).into_bytes()
    }

    /// The app asked the client something, which the client sees under
    /// `shown` (the app's own id, or one of the bridge's: `app_id`).
    fn app_asked(&mut self, shown: &[u8], app_id: Option<Vec<u8>>) {
        if self.open.len() < STALE_LIMIT {
            self.open.insert(id_key(shown), (shown.to_vec(), app_id));
        }
    }

    /// The client replied to `id`: the app's own id, when it was mapped.
    /// A mapped id then goes stale: a second reply to it reaches nobody.
    fn client_replied(&mut self, id: &[u8]) -> Option<Vec<u8>> {
        let key = id_key(id);
        self.stale.remove(&key);
        let app_id = self.open.remove(&key).and_then(|(_, app_id)| app_id);
        if app_id.is_some() {
            self.go_stale(key);
        }
        app_id
    }

    /// The app cancelled its question `app_id` (its own id): if the bridge
    /// gave it an id of its own, the question is over, and that id is the
    /// one the client knows it by.
    fn app_cancelled(&mut self, app_id: &[u8]) -> Option<Vec<u8>> {
        let wanted = id_key(app_id);
        let shown = self.open.values().find_map(|(shown, app)| {
            let app = app.as_deref()?;
            (id_key(app) == wanted).then(|| shown.clone())
        })?;
        // As if the client had answered it: over, and its id stale.
        self.client_replied(&shown);
        Some(shown)
    }

    fn go_stale(&mut self, key: Vec<u8>) {
        if self.stale.len() < STALE_LIMIT {
            self.stale.insert(key, ());
        }
    }

    /// The app instance hung up: its open questions are stale. Returns
    /// their ids as the client saw them.
    fn hung_up(&mut self) -> Vec<Vec<u8>> {
        let mut gone = Vec::with_capacity(self.open.len());
        for (key, (shown, _)) in self.open.drain() {
            if self.stale.len() < STALE_LIMIT {
                self.stale.insert(key, ());
            }
            gone.push(shown);
        }
        gone
    }
}

/// `text` with `value` (a slice of it: a value [`member`] found, so the
/// one at the level it looked at, never one nested deeper) written as
/// `new`.
fn replace_at(text: &[u8], value: &[u8], new: &[u8]) -> Vec<u8> {
    let start = value.as_ptr() as usize - text.as_ptr() as usize;
    [&text[..start], new, &text[start + value.len()..]].concat()
}
