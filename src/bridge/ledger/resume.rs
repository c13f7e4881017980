//! Giving a new app instance the session: what the bridge sends it before
//! the client's held lines, and what it does with its answer.
//!
//! - **Legacy era** (the session began with `initialize`): the recorded
//!   `initialize` under an id of the bridge's own; the session is taken
//!   back when the instance answers it with a result. Then, without
//!   waiting for anything else (so an app that asks the client something
//!   on `initialized` is answered, and a thousand subscriptions cost one
//!   round trip): `notifications/initialized`, the log level and the
//!   subscriptions, under ids of the bridge's own, but only those the new
//!   instance declares it supports. The client is told the lists may have
//!   changed (`notifications/<list>/list_changed`, for each list it was
//!   told about with `listChanged`, and each it was given a page of,
//!   whatever the app declared).
//! - **2026-07-28 era**: nothing to replay but the open
//!   `subscriptions/listen` requests, sent again under the client's own
//!   ids; each acknowledgement then brings the client one tagged
//!   `list_changed` per list the listen asked for (see the ledger).
//!
//! What cannot be carried over (another protocol version, a list, the
//! log level or subscriptions the new instance does not offer, or
//! rejects) is said: on stderr, in the log, and to the client as a
//! `notifications/message` warning when its session has logging.
//!
//! Part of the ledger, not beside it: every step of a replay reads the
//! record and writes the ledger's ids, lost lines and debts, so outside it
//! this would be the record's fields made public under another name. The
//! session asks two questions ([`Ledger::start_instance`],
//! [`Ledger::taken_back`]) and writes what they return.

use super::record::LISTS;
use super::{answer, Ledger, ListenState, Ours, Told};

impl Ledger {
    /// What to send a new instance first, and whether it must take the
    /// session back (answer the replayed `initialize`) before the client's
    /// lines follow. `resumed`: the instance comes after a hang-up, or after
    /// the cache answered for the app.
    pub(in crate::bridge) fn start_instance(&mut self, resumed: bool) -> (Vec<u8>, bool) {
        self.new_instance(resumed);
        let mut first = Vec::new();
        let initialize = self.record.initialize.clone();
        if let Some(initialize) = initialize {
            let id = self.ours(Ours::Initialize);
            push_line(&mut first, &initialize.with_id(&id));
            return (first, true);
        }
        self.listens(resumed, &mut first);
        (first, false)
    }

    /// The open listens, sent again (or for the first time).
    fn listens(&mut self, resumed: bool, out: &mut Vec<u8>) {
        for listen in &mut self.record.listens {
            listen.state = match listen.state {
                ListenState::Unsent | ListenState::Sent => ListenState::Sent,
                ListenState::Acked | ListenState::Resent => ListenState::Resent,
            };
            listen.after_resume = resumed;
            push_line(out, &listen.text.line);
        }
    }

    /// The new instance answered the replayed `initialize` with `result`: the
    /// rest of the replay, to send now; what the client is owed is owed.
    pub(in crate::bridge) fn taken_back(&mut self, result: &[u8]) -> Vec<u8> {
        let new = Told::of(result);
        let told = self.record.told.clone().unwrap_or_default();
        let mut rest = Vec::new();
        if let Some(initialized) = self.record.initialized.clone() {
            push_line(&mut rest, &initialized.line);
        }
        if !told.protocol.is_empty() && new.protocol != told.protocol {
            self.lost.push(format!(
                "the app's new instance speaks protocol {}, the session was opened with {}",
                String::from_utf8_lossy(&new.protocol),
                String::from_utf8_lossy(&told.protocol)
            ));
        }
        for list in LISTS {
            if told.declares(list).0 && !new.declares(list).0 {
                self.lost
                    .push(format!("the app's new instance no longer offers {}", list));
            }
        }
        if let Some(level) = self.record.set_level.clone() {
            if new.has("logging") {
                let id = self.ours(Ours::SetLevel);
                push_line(&mut rest, &level.with_id(&id));
            } else {
                self.lost.push(
                    "the log level could not be restored: the app's new instance has no logging"
                        .into(),
                );
            }
        }
        let subscriptions = self.record.subscribe.clone();
        if !subscriptions.is_empty() {
            if new.subscribes() {
                for subscription in &subscriptions {
                    let uri = subscription.param("uri").unwrap_or(b"").to_vec();
                    let id = self.ours(Ours::Subscribe(uri));
                    push_line(&mut rest, &subscription.with_id(&id));
                }
            } else {
                self.lost.push(format!(
                    "{} resource subscription(s) could not be restored: the app's new instance \
                     does not offer resources/subscribe",
                    subscriptions.len()
                ));
            }
        }
        self.listens(true, &mut rest);
        // Each list the client was told may change, and each it was given
        // (by an instance before, or from the cache), whatever the app
        // declares: an app upgraded while it was away may list other tools,
        // and a client keeps what it was given until told.
        for (list, given) in LISTS.iter().zip(self.record.listed) {
            if told.declares(list).1 || given {
                self.owed_client
                    .extend_from_slice(&answer::list_changed(list, None));
            }
        }
        if self.record.by_bridge {
            // The client was answered from the cache: what it was told is
            // what the app says now.
            self.record.by_bridge = false;
        }
        if let Some(asked) = self.record.initialize.clone() {
            self.learnt(&asked.line, Some(result));
        }
        rest
    }
}

fn push_line(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(line);
    if line.last() != Some(&b'\n') {
        out.push(b'\n');
    }
}
