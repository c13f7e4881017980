//! The session the app accepted, recorded as it passes, for a new app
//! instance to be given ([`super::super::resume`]).
//!
//! An MCP session's state lives in a few client messages. In the legacy era
//! (`initialize`, protocol versions up to 2025-11-25): `initialize` (with
//! the client's capabilities), `notifications/initialized`, the log level
//! (`logging/setLevel`) and resource subscriptions (`resources/subscribe`,
//! `resources/unsubscribe`). In the 2026-07-28 era every request carries
//! its own context, and what lasts is the open `subscriptions/listen`
//! requests. A restarted app knows none of it.
//!
//! What is recorded is what the app *accepted*: an `initialize` counts once
//! the app (or the cache, for a client that came before the app) answers it
//! with a result, the latest log level, subscriptions net of unsubscribes
//! (keyed by `params.uri`), and the listens until they end. Lines are
//! recorded whole up to [`RECORD_CAP`](crate::envelope::RECORD_CAP) (1 MiB,
//! the hold limit); an accepted `initialize` longer than that cannot be
//! replayed, and the session says so at the next restart rather than
//! handing the client an app that was never initialised.

use crate::envelope::json::member;
use crate::envelope::Envelope;

/// Most bytes of `resources/subscribe` requests replayed after a restart;
/// subscriptions beyond it are not renewed.
const SUBSCRIBE_LIMIT: usize = 256 * 1024;

/// Most `subscriptions/listen` requests kept open at once; a client has a
/// handful.
const LISTEN_LIMIT: usize = 64;

/// Which protocol era the session speaks, as its traffic shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::bridge) enum Era {
    /// Nothing told yet.
    Unknown,
    /// An `initialize` was accepted.
    Legacy,
    /// A `server/discover` was answered with a result, or a
    /// `subscriptions/listen` was opened: 2026-07-28.
    Modern,
}

/// One recorded client message, and where its `id` sits in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::bridge) struct Recorded {
    pub(in crate::bridge) line: Vec<u8>,
    id: Option<(usize, usize)>,
}

impl Recorded {
    /// The line the scanner recorded, if it did.
    pub(in crate::bridge) fn of(envelope: &Envelope<'_>) -> Option<Recorded> {
        let line = envelope.line?.to_vec();
        let id = envelope.id.map(|id| {
            let start = envelope.id_offset as usize;
            (start, start + id.len())
        });
        Some(Recorded { line, id })
    }

    /// A line recorded with no id to replace.
    #[cfg(test)]
    pub(in crate::bridge) fn plain(line: Vec<u8>) -> Recorded {
        Recorded { line, id: None }
    }

    /// The line with its id replaced by `raw_id` (a request), or as it is
    /// (a notification).
    pub(in crate::bridge) fn with_id(&self, raw_id: &[u8]) -> Vec<u8> {
        match self.id {
            Some((start, end)) => [&self.line[..start], raw_id, &self.line[end..]].concat(),
            None => self.line.clone(),
        }
    }

    /// A member of `params`, raw.
    pub(in crate::bridge) fn param(&self, key: &str) -> Option<&[u8]> {
        member(member(&self.line, "params")?, key)
    }
}

/// Where a `subscriptions/listen` stands with the app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::bridge) enum ListenState {
    /// Not sent to any instance yet (the app was away).
    Unsent,
    /// Sent to the current instance; its acknowledgement is for the client.
    Sent,
    /// Acknowledged by the current instance.
    Acked,
    /// Sent again to a new instance; the client already has an
    /// acknowledgement, so this one is the bridge's.
    Resent,
}

/// An open `subscriptions/listen` request.
#[derive(Clone, Debug)]
pub(in crate::bridge) struct Listen {
    /// Its raw id (the subscription's id).
    pub(in crate::bridge) id: Vec<u8>,
    pub(in crate::bridge) text: Recorded,
    pub(in crate::bridge) state: ListenState,
    /// `params.notifications` of the last acknowledgement, raw.
    pub(in crate::bridge) honored: Option<Vec<u8>>,
    /// Whether the instance that acknowledged it came after a restart (or
    /// after the cache answered for the app): the client is then told the
    /// lists may have changed.
    pub(in crate::bridge) after_resume: bool,
}

/// The lists a listen filter (a `notifications` object) asks for.
pub(in crate::bridge) fn listed(filter: &[u8]) -> Vec<&'static str> {
    [
        ("toolsListChanged", "tools"),
        ("promptsListChanged", "prompts"),
        ("resourcesListChanged", "resources"),
    ]
    .iter()
    .filter(|(key, _)| member(filter, key) == Some(b"true"))
    .map(|(_, list)| *list)
    .collect()
}

/// The lists a client can be told have changed, in the order of
/// [`Record::listed`].
pub(in crate::bridge) const LISTS: [&str; 3] = ["tools", "prompts", "resources"];

/// What the client was told by the `initialize` result it got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::bridge) struct Told {
    /// `result.capabilities`, raw.
    pub(in crate::bridge) capabilities: Vec<u8>,
    /// `result.protocolVersion`, raw.
    pub(in crate::bridge) protocol: Vec<u8>,
}

impl Told {
    /// From an `initialize` result, raw.
    pub(in crate::bridge) fn of(result: &[u8]) -> Told {
        Told {
            capabilities: member(result, "capabilities").unwrap_or(b"{}").to_vec(),
            protocol: member(result, "protocolVersion").unwrap_or(b"").to_vec(),
        }
    }

    /// Whether `list` (tools, prompts, resources) was declared, and
    /// whether with `listChanged: true`.
    pub(in crate::bridge) fn declares(&self, list: &str) -> (bool, bool) {
        match member(&self.capabilities, list) {
            Some(object) => (true, member(object, "listChanged") == Some(b"true")),
            None => (false, false),
        }
    }

    /// Whether a capability (`logging`, `resources`...) was declared.
    pub(in crate::bridge) fn has(&self, capability: &str) -> bool {
        member(&self.capabilities, capability).is_some()
    }

    /// Whether `resources.subscribe` was declared true.
    pub(in crate::bridge) fn subscribes(&self) -> bool {
        member(&self.capabilities, "resources")
            .and_then(|r| member(r, "subscribe"))
            .map_or(false, |v| v == b"true")
    }
}

/// What is given to a new app instance (see the [module docs](self)).
#[derive(Clone, Debug)]
pub(in crate::bridge) struct Record {
    pub(in crate::bridge) era: Era,
    /// The `initialize` that was answered with a result.
    pub(in crate::bridge) initialize: Option<Recorded>,
    /// An `initialize` too long to record was accepted (and none since):
    /// the session cannot be replayed.
    pub(in crate::bridge) too_long: bool,
    /// The `initialize` was answered from the cache and no app instance
    /// has seen the session yet.
    pub(in crate::bridge) by_bridge: bool,
    /// What that answer told the client.
    pub(in crate::bridge) told: Option<Told>,
    pub(in crate::bridge) initialized: Option<Recorded>,
    pub(in crate::bridge) set_level: Option<Recorded>,
    pub(in crate::bridge) subscribe: Vec<Recorded>,
    pub(in crate::bridge) listens: Vec<Listen>,
    /// The lists ([`LISTS`]) the client was given a page of, by an app
    /// instance or from the cache: after a restart it is told they may
    /// have changed, whatever the app declared.
    pub(in crate::bridge) listed: [bool; 3],
}

impl Default for Record {
    fn default() -> Self {
        Record {
            era: Era::Unknown,
            initialize: None,
            too_long: false,
            by_bridge: false,
            told: None,
            initialized: None,
            set_level: None,
            subscribe: Vec::new(),
            listens: Vec::new(),
            listed: [false; 3],
        }
    }
}

impl Record {
    /// An `initialize` was answered with `result` (raw): by the app, or by
    /// the bridge from the cache (`by_bridge`).
    pub(in crate::bridge) fn accepted(
        &mut self,
        text: Option<Recorded>,
        result: &[u8],
        by_bridge: bool,
    ) {
        self.too_long = text.is_none();
        self.initialize = text;
        self.by_bridge = by_bridge;
        self.told = Some(Told::of(result));
        self.era = Era::Legacy;
    }

    /// The session is a 2026-07-28 one.
    pub(in crate::bridge) fn modern(&mut self) {
        if self.era == Era::Unknown {
            self.era = Era::Modern;
        }
    }

    /// The client was given a page of the list `request` (its line) asks
    /// for.
    pub(in crate::bridge) fn given_list(&mut self, request: &[u8]) {
        let method = member(request, "method").unwrap_or(b"");
        let list = match method {
            b"\"tools/list\"" => 0,
            b"\"prompts/list\"" => 1,
            // (One notification covers the resources and their templates.)
            _ => 2,
        };
        self.listed[list] = true;
    }

    /// `notifications/initialized`.
    pub(in crate::bridge) fn initialized(&mut self, text: Recorded) {
        self.initialized = Some(text);
    }

    /// `logging/setLevel`.
    pub(in crate::bridge) fn set_level(&mut self, text: Recorded) {
        self.set_level = Some(text);
    }

    /// `resources/subscribe`.
    pub(in crate::bridge) fn subscribe(&mut self, text: Recorded) {
        let uri = text.param("uri").map(<[u8]>::to_vec);
        if let Some(uri) = &uri {
            self.subscribe.retain(|r| r.param("uri") != Some(uri));
        }
        let used: usize = self.subscribe.iter().map(|r| r.line.len()).sum();
        if used + text.line.len() <= SUBSCRIBE_LIMIT {
            self.subscribe.push(text);
        }
    }

    /// `resources/unsubscribe`.
    pub(in crate::bridge) fn unsubscribe(&mut self, text: &Recorded) {
        if let Some(uri) = text.param("uri") {
            self.subscribe.retain(|r| r.param("uri") != Some(uri));
        }
    }

    /// A `subscriptions/listen` opened (`state`: sent to the app, or kept
    /// for when it comes).
    pub(in crate::bridge) fn listen(&mut self, id: &[u8], text: Recorded, state: ListenState) {
        self.modern();
        self.end_listen(id);
        if self.listens.len() < LISTEN_LIMIT {
            self.listens.push(Listen {
                id: id.to_vec(),
                text,
                state,
                honored: None,
                after_resume: false,
            });
        }
    }

    /// The listen `id`, if open.
    pub(in crate::bridge) fn listen_mut(&mut self, id: &[u8]) -> Option<&mut Listen> {
        let id = super::id::key(id);
        self.listens
            .iter_mut()
            .find(|l| super::id::key(&l.id) == id)
    }

    /// The listen `id` ended (answered, or cancelled): whether it was open.
    pub(in crate::bridge) fn end_listen(&mut self, id: &[u8]) -> bool {
        let before = self.listens.len();
        let id = super::id::key(id);
        self.listens.retain(|l| super::id::key(&l.id) != id);
        self.listens.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(line: &str) -> Recorded {
        Recorded::plain(line.as_bytes().to_vec())
    }

    #[test]
    fn subscriptions_are_kept_net_of_unsubscribes() {
        let mut record = Record::default();
        record.subscribe(recorded(
            r#"{"id":1,"method":"resources/subscribe","params":{"uri":"a"}}"#,
        ));
        record.subscribe(recorded(
            r#"{"id":2,"method":"resources/subscribe","params":{"uri":"b"}}"#,
        ));
        record.subscribe(recorded(
            r#"{"id":3,"method":"resources/subscribe","params":{"uri":"a"}}"#,
        ));
        record.unsubscribe(&recorded(
            r#"{"id":4,"method":"resources/unsubscribe","params":{"uri":"b"}}"#,
        ));
        assert_eq!(record.subscribe.len(), 1);
        assert_eq!(record.subscribe[0].param("uri"), Some(&b"\"a\""[..]));
    }

    #[test]
    fn what_the_client_was_told_is_read_from_the_result() {
        let told = Told::of(
            br#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true},"prompts":{},"resources":{"subscribe":true},"logging":{}}}"#,
        );
        assert_eq!(told.protocol, b"\"2025-06-18\"");
        assert_eq!(told.declares("tools"), (true, true));
        assert_eq!(told.declares("prompts"), (true, false));
        assert_eq!(told.declares("completions"), (false, false));
        assert!(told.has("logging"));
        assert!(told.subscribes());
        assert_eq!(
            listed(br#"{"toolsListChanged":true,"promptsListChanged":false}"#),
            vec!["tools"]
        );
    }
}
