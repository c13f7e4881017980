//! The session the app accepted, recorded as it passes, for replay to a
//! new app instance.
//!
//! An MCP session's state lives in a few client messages: `initialize`
//! (with the client's capabilities), `notifications/initialized`, the log
//! level (`logging/setLevel`) and resource subscriptions
//! (`resources/subscribe`, `resources/unsubscribe`). A restarted app knows
//! none of it, so the bridge replays them ([`super::super::resume`]).
//!
//! What is recorded is what the app *accepted*: an `initialize` counts once
//! the app answers it with a result (a rejected one and the client's retry
//! leave the retry), the latest log level, and subscriptions net of
//! unsubscribes (keyed by `params.uri`). Lines are recorded whole up to
//! [`RECORD_CAP`](crate::envelope::RECORD_CAP) (1 MiB, the hold limit); an
//! accepted `initialize` longer than that cannot be replayed, and the
//! session then fails at the next restart with an error saying so, rather
//! than handing the client an app that was never initialised.

use crate::envelope::json::member;
use crate::envelope::{Envelope, Kind};

/// The client messages the session's state depends on, recorded whole as
/// they pass.
pub(in crate::bridge) const RECORDED: &[&str] = &[
    "initialize",
    "notifications/initialized",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    // Not replayed: recorded so a cancelled request's id can be read.
    "notifications/cancelled",
];

/// Most bytes of `resources/subscribe` requests replayed after a restart;
/// subscriptions beyond it are not renewed.
const SUBSCRIBE_LIMIT: usize = 256 * 1024;

/// One recorded client message, and where its `id` sits in it.
#[derive(Clone, Debug)]
pub(in crate::bridge) struct Recorded {
    pub(in crate::bridge) line: Vec<u8>,
    id: Option<(usize, usize)>,
}

impl Recorded {
    fn of(envelope: &Envelope<'_>) -> Option<Recorded> {
        let line = envelope.line?.to_vec();
        let id = envelope.id.map(|id| {
            let start = envelope.id_offset as usize;
            (start, start + id.len())
        });
        Some(Recorded { line, id })
    }

    fn raw_id(&self) -> Option<&[u8]> {
        self.id.map(|(start, end)| &self.line[start..end])
    }

    /// The line with its id replaced by `raw_id` (a request), or as it is
    /// (a notification).
    pub(in crate::bridge) fn with_id(&self, raw_id: &[u8]) -> Vec<u8> {
        match self.id {
            Some((start, end)) => [&self.line[..start], raw_id, &self.line[end..]].concat(),
            None => self.line.clone(),
        }
    }

    /// `params.uri`, raw, for keying subscriptions.
    fn uri(&self) -> Option<&[u8]> {
        member(member(&self.line, "params")?, "uri")
    }
}

/// The `initialize` the client sent last, until the app answers it.
#[derive(Clone, Debug)]
enum Candidate {
    /// Recorded whole.
    Line(Recorded),
    /// Too long to record; its raw id.
    TooLong(Vec<u8>),
}

/// What is replayed to a new app instance.
#[derive(Clone, Debug, Default)]
pub(in crate::bridge) struct Record {
    /// The `initialize` the app last answered with a result.
    pub(in crate::bridge) initialize: Option<Recorded>,
    /// The app accepted an `initialize` too long to record (and none
    /// since): the session cannot be replayed.
    pub(in crate::bridge) too_long: bool,
    candidate: Option<Candidate>,
    pub(in crate::bridge) initialized: Option<Recorded>,
    pub(in crate::bridge) set_level: Option<Recorded>,
    pub(in crate::bridge) subscribe: Vec<Recorded>,
}

impl Record {
    /// A client message on its way to the app (whole lines only).
    pub(in crate::bridge) fn client_sent(&mut self, envelope: &Envelope<'_>) {
        let method = match (envelope.kind, envelope.method) {
            (Kind::Request | Kind::Notification, Some(method)) => method,
            _ => return,
        };
        if method == "initialize" {
            self.candidate = match (Recorded::of(envelope), envelope.id) {
                (Some(recorded), Some(_)) => Some(Candidate::Line(recorded)),
                (None, Some(id)) => Some(Candidate::TooLong(id.to_vec())),
                _ => None,
            };
            return;
        }
        let recorded = match Recorded::of(envelope) {
            Some(recorded) => recorded,
            None => return,
        };
        match method {
            "notifications/initialized" => self.initialized = Some(recorded),
            "logging/setLevel" => self.set_level = Some(recorded),
            "resources/subscribe" => {
                let uri = recorded.uri().map(<[u8]>::to_vec);
                if let Some(uri) = &uri {
                    self.subscribe.retain(|r| r.uri() != Some(uri));
                }
                let used: usize = self.subscribe.iter().map(|r| r.line.len()).sum();
                if used + recorded.line.len() <= SUBSCRIBE_LIMIT {
                    self.subscribe.push(recorded);
                }
            }
            "resources/unsubscribe" => {
                if let Some(uri) = recorded.uri() {
                    self.subscribe.retain(|r| r.uri() != Some(uri));
                }
            }
            _ => {}
        }
    }

    /// A reply of the app's on its way to the client: settles the pending
    /// `initialize` when it answers that.
    pub(in crate::bridge) fn app_replied(&mut self, kind: Kind, id: &[u8]) {
        let answers = match &self.candidate {
            Some(Candidate::Line(recorded)) => recorded.raw_id() == Some(id),
            Some(Candidate::TooLong(raw)) => raw.as_slice() == id,
            None => false,
        };
        if !answers {
            return;
        }
        match (kind, self.candidate.take()) {
            (Kind::Response, Some(Candidate::Line(recorded))) => {
                self.initialize = Some(recorded);
                self.too_long = false;
            }
            (Kind::Response, Some(Candidate::TooLong(_))) => {
                self.initialize = None;
                self.too_long = true;
            }
            _ => {}
        }
    }
}
