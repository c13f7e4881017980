//! Everything the traffic teaches the bridge, in one owner: the client's
//! requests in flight ([`Pending`], with the batches), the app's requests
//! to the client, open and stale ([`AppRequests`]), and the session to
//! replay ([`Record`]).
//!
//! Each line is decided here once, by the same code whether the bridge is
//! relaying it or holding it: [`Ledger::client_line`] for what the client
//! sends, [`Ledger::app_line`] for what the app sends. The callers (the
//! relay's watchers online, the held stdin offline) only say where the line
//! goes.

mod pending;
mod record;

pub(super) use pending::{IdSet, Pending};
pub(super) use record::{Record, RECORDED};

use crate::envelope::json::member;
use crate::envelope::{Envelope, Kind};

/// Most ids of open app-to-client requests remembered per session: an app
/// has a handful open at a time.
const STALE_LIMIT: usize = 4096;

/// Where a whole client line went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dest {
    /// Relayed to the app instance online.
    App,
    /// Held for the next instance.
    Held,
    /// Nowhere: answered by the bridge or dropped.
    Nowhere,
}

/// What becomes of a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It goes on.
    Forward,
    /// It is taken out of the stream: a reply to an app instance that is
    /// gone.
    Drop,
}

/// What the traffic taught the bridge so far (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The client's requests the app has not answered.
    pub(super) pending: Pending,
    /// The app's requests to the client.
    pub(super) app_requests: AppRequests,
    /// The session as the app accepted it.
    pub(super) record: Record,
}

impl Ledger {
    /// A whole client line, going to `dest`: what it teaches, and whether it
    /// goes on.
    pub(super) fn client_line(&mut self, envelope: &Envelope<'_>, dest: Dest) -> Verdict {
        match (envelope.kind, envelope.id) {
            (Kind::Response | Kind::ErrorResponse, Some(id)) => {
                if self.app_requests.client_replied(id) {
                    return Verdict::Drop;
                }
            }
            (Kind::Request, id) => {
                if dest == Dest::App {
                    match id {
                        Some(id) => self.pending.insert(id),
                        None => self.pending.long_id(true),
                    }
                }
                if dest != Dest::Nowhere {
                    self.record.client_sent(envelope);
                }
            }
            (Kind::Notification, _) if envelope.method == Some("notifications/cancelled") => {
                if dest == Dest::App {
                    if let Some(id) = cancelled_id(envelope) {
                        self.pending.remove(id);
                    }
                }
            }
            _ => {
                if dest != Dest::Nowhere {
                    self.record.client_sent(envelope);
                }
            }
        }
        Verdict::Forward
    }

    /// A whole app line on its way to the client: what it teaches.
    pub(super) fn app_line(&mut self, envelope: &Envelope<'_>) {
        match (envelope.kind, envelope.id) {
            (Kind::Response | Kind::ErrorResponse, Some(id)) => {
                self.pending.remove(id);
                self.record.app_replied(envelope.kind, id);
            }
            (Kind::Response | Kind::ErrorResponse, None) => self.pending.long_id(false),
            (Kind::Request, Some(id)) => self.app_requests.app_asked(id),
            _ => {}
        }
    }

    /// Whether a client reply to `id` is for a gone instance, and is to be
    /// taken out (the same rule [`Ledger::client_line`] applies).
    pub(super) fn drops_reply_to(&mut self, id: &[u8]) -> bool {
        self.app_requests.client_replied(id)
    }
}

/// The id a `notifications/cancelled` line names (`params.requestId`).
fn cancelled_id<'a>(envelope: &Envelope<'a>) -> Option<&'a [u8]> {
    envelope
        .line
        .and_then(|line| member(member(line, "params")?, "requestId"))
}

/// Ids of requests the app has open with the client (`open`), and those
/// of instances that are gone (`stale`).
///
/// The app asks the client things too (elicitation, sampling, roots), under
/// ids of its own. When it restarts with such a request open, the client's
/// answer, when it comes, belongs to the old instance: the new one would
/// take it for the answer to its own request with the same id. So the ids
/// of the old instance's open requests are kept as *stale*, and client
/// replies carrying one are dropped, whole. A new instance that asks under
/// a stale id takes it back: from then on a reply with that id is its.
#[derive(Debug, Default)]
pub(super) struct AppRequests {
    open: IdSet,
    stale: IdSet,
}

impl AppRequests {
    /// The app asked the client something.
    fn app_asked(&mut self, id: &[u8]) {
        self.stale.remove(id);
        if self.open.len() < STALE_LIMIT {
            self.open.insert(id.to_vec());
        }
    }

    /// The client replied to `id`: whether the reply is for a gone
    /// instance (and is to be dropped).
    fn client_replied(&mut self, id: &[u8]) -> bool {
        self.open.remove(id);
        self.stale.remove(id)
    }

    /// Whether there are stale ids left (replies to filter out).
    pub(super) fn any_stale(&self) -> bool {
        !self.stale.is_empty()
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
