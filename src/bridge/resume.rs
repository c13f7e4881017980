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
//!   told about with `listChanged`).
//! - **2026-07-28 era**: nothing to replay but the open
//!   `subscriptions/listen` requests, sent again under the client's own
//!   ids; each acknowledgement then brings the client one tagged
//!   `list_changed` per list the listen asked for (see the ledger).
//!
//! What cannot be carried over (another protocol version, a list, the
//! log level or subscriptions the new instance does not offer, or
//! rejects) is said: on stderr, in the log, and to the client as a
//! `notifications/message` warning when its session has logging.

use super::answer;
use super::ledger::{Ledger, ListenState, Ours, Told};
use crate::traffic_log::TrafficLog;

/// The lists a client can be told have changed.
const LISTS: [&str; 3] = ["tools", "prompts", "resources"];

/// What to send a new instance first, and whether it must take the
/// session back (answer the replayed `initialize`) before the client's
/// lines follow. `resumed`: the instance comes after a hang-up, or after
/// the cache answered for the app.
pub(super) fn start(ledger: &mut Ledger, resumed: bool) -> (Vec<u8>, bool) {
    ledger.new_instance(resumed);
    let mut first = Vec::new();
    let initialize = ledger.record.initialize.clone();
    if let Some(initialize) = initialize {
        let id = ledger.ours(Ours::Initialize);
        push_line(&mut first, &initialize.with_id(&id));
        return (first, true);
    }
    listens(ledger, resumed, &mut first);
    (first, false)
}

/// The open listens, sent again (or for the first time).
fn listens(ledger: &mut Ledger, resumed: bool, out: &mut Vec<u8>) {
    for listen in &mut ledger.record.listens {
        listen.state = match listen.state {
            ListenState::Unsent | ListenState::Sent => ListenState::Sent,
            ListenState::Acked | ListenState::Resent => ListenState::Resent,
        };
        listen.after_resume = resumed;
        push_line(out, &listen.text.line);
    }
}

/// The new instance answered the replayed `initialize` with `result`: the
/// rest of the replay, to send now, and what the client is owed.
pub(super) fn taken_back(ledger: &mut Ledger, result: &[u8], log: Option<&TrafficLog>) -> Vec<u8> {
    let new = Told::of(result);
    let told = ledger.record.told.clone().unwrap_or_default();
    let mut rest = Vec::new();
    if let Some(initialized) = ledger.record.initialized.clone() {
        push_line(&mut rest, &initialized.line);
    }
    if !told.protocol.is_empty() && new.protocol != told.protocol {
        ledger.lost.push(format!(
            "the app's new instance speaks protocol {}, the session was opened with {}",
            String::from_utf8_lossy(&new.protocol),
            String::from_utf8_lossy(&told.protocol)
        ));
    }
    for list in LISTS {
        if told.declares(list).0 && !new.declares(list).0 {
            ledger
                .lost
                .push(format!("the app's new instance no longer offers {}", list));
        }
    }
    if let Some(level) = ledger.record.set_level.clone() {
        if new.has("logging") {
            let id = ledger.ours(Ours::SetLevel);
            push_line(&mut rest, &level.with_id(&id));
        } else {
            ledger.lost.push(
                "the log level could not be restored: the app's new instance has no logging".into(),
            );
        }
    }
    let subscriptions = ledger.record.subscribe.clone();
    if !subscriptions.is_empty() {
        if new.subscribes() {
            for subscription in &subscriptions {
                let uri = subscription.param("uri").unwrap_or(b"").to_vec();
                let id = ledger.ours(Ours::Subscribe(uri));
                push_line(&mut rest, &subscription.with_id(&id));
            }
        } else {
            ledger.lost.push(format!(
                "{} resource subscription(s) could not be restored: the app's new instance \
                 does not offer resources/subscribe",
                subscriptions.len()
            ));
        }
    }
    listens(ledger, true, &mut rest);
    for list in LISTS {
        if told.declares(list).1 {
            ledger
                .owed_client
                .extend_from_slice(&answer::list_changed(list, None));
        }
    }
    if ledger.record.by_bridge {
        // The client was answered from the cache: what it was told is
        // what the app says now.
        ledger.record.by_bridge = false;
    }
    if let Some(asked) = ledger.record.initialize.clone() {
        ledger.learnt(&asked.line, Some(result));
    }
    if let Some(log) = log {
        log.event(format_args!(
            "the app's new instance took the session back (the replayed initialize was answered)"
        ));
    }
    rest
}

fn push_line(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(line);
    if line.last() != Some(&b'\n') {
        out.push(b'\n');
    }
}
