//! The session the app accepted, recorded as it passes and replayed to a new
//! app instance.
//!
//! An MCP session's state lives in a few client messages: `initialize`
//! (with the client's capabilities), `notifications/initialized`, the log
//! level (`logging/setLevel`) and resource subscriptions
//! (`resources/subscribe`, `resources/unsubscribe`). A restarted app knows
//! none of it, so the bridge replays them, under ids of its own, before
//! anything else reaches the new instance.
//!
//! What is recorded is what the app *accepted*: an `initialize` counts once
//! the app answers it with a result (a rejected one and the client's retry
//! leave the retry), the latest log level, and subscriptions net of
//! unsubscribes (keyed by `params.uri`). Lines are recorded whole up to
//! [`RECORD_CAP`](crate::envelope::RECORD_CAP) (1 MiB, the hold limit); an
//! accepted `initialize` longer than that cannot be replayed, and the
//! session then fails at the next restart with an error saying so, rather
//! than handing the client an app that was never initialised.
//!
//! No JSON library here (the bridge-only build has none): the few values
//! read from whole, bounded lines (a reply's `result.capabilities`, a
//! subscription's `params.uri`) are found by [`member`], a small walker.

use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::session::send;
use crate::envelope::{Envelope, Kind, Scanner};
use crate::io::BUFFER_SIZE;

/// The client messages the session's state depends on, recorded whole as
/// they pass.
pub(super) const RECORDED: &[&str] = &[
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

/// Most bytes the app may send while the session is replayed, other than
/// the replies the bridge waits for (they are passed on once the session is
/// resumed); an app that sends more is treated as broken.
const REPLAY_LINE_LIMIT: usize = 4 * 1024 * 1024;

/// One recorded client message, and where its `id` sits in it.
#[derive(Clone, Debug)]
pub(super) struct Recorded {
    line: Vec<u8>,
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
    fn with_id(&self, raw_id: &[u8]) -> Vec<u8> {
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
pub(super) struct Replay {
    /// The `initialize` the app last answered with a result.
    initialize: Option<Recorded>,
    /// The app accepted an `initialize` too long to record (and none
    /// since): the session cannot be replayed.
    pub(super) too_long: bool,
    candidate: Option<Candidate>,
    initialized: Option<Recorded>,
    set_level: Option<Recorded>,
    subscribe: Vec<Recorded>,
}

impl Replay {
    /// A client message on its way to the app (whole lines only).
    pub(super) fn client_sent(&mut self, envelope: &Envelope<'_>) {
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
    pub(super) fn app_replied(&mut self, kind: Kind, id: &[u8]) {
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

/// What resuming the session on a new connection gave.
#[derive(Debug, Default)]
pub(super) struct Resumed {
    /// The lists the app's answer to the replayed `initialize` declares
    /// (in `result.capabilities`): tools, prompts, resources.
    pub(super) lists: [bool; 3],
    /// Bytes the app sent meanwhile, whole lines for the client, then the
    /// bytes after the last reply the bridge waited for.
    pub(super) forward: Vec<u8>,
    /// Whether there was a session to replay.
    pub(super) replayed: bool,
}

/// Why resuming on one connection failed, and whether another try can help.
#[derive(Debug)]
pub(super) struct ResumeFailure {
    pub(super) reason: String,
    /// The app answered, and said no: trying again will not change that.
    pub(super) rejected: bool,
}

impl ResumeFailure {
    fn io(reason: String) -> ResumeFailure {
        ResumeFailure {
            reason,
            rejected: false,
        }
    }
}

/// Replays the session on a new connection: the accepted `initialize` under
/// an id of the bridge's own, then `notifications/initialized`, the log
/// level and the subscriptions. The replies to the replayed requests are
/// the bridge's and are not forwarded; whatever else the app sends
/// meanwhile is kept, line by line, for the client.
pub(super) async fn resume(
    replay: &Replay,
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
) -> Result<Resumed, ResumeFailure> {
    let mut resumed = Resumed::default();
    let initialize = match &replay.initialize {
        Some(initialize) => initialize,
        // Nothing to resume: the app never accepted a session.
        None => return Ok(resumed),
    };
    resumed.replayed = true;
    let mut lines = AppLines::default();
    let mut requests = vec![initialize];
    requests.extend(replay.set_level.iter());
    requests.extend(replay.subscribe.iter());
    let sending = |e: std::io::Error| {
        ResumeFailure::io(format!("sending the replayed session failed: {}", e))
    };
    for (n, request) in requests.into_iter().enumerate() {
        let id = format!("\"mcp-bridge-replay-{}\"", n + 1);
        send(writer, &request.with_id(id.as_bytes()))
            .await
            .map_err(sending)?;
        let reply = lines.reply_to(id.as_bytes(), reader).await?;
        if n > 0 {
            continue;
        }
        if reply.kind == Kind::ErrorResponse {
            let message = member(&reply.line, "error")
                .and_then(|error| member(error, "message"))
                .map_or_else(|| "(no message)".into(), json_text);
            return Err(ResumeFailure {
                reason: format!("the app rejected the replayed initialize: {}", message),
                rejected: true,
            });
        }
        let capabilities =
            member(&reply.line, "result").and_then(|result| member(result, "capabilities"));
        for (declared, list) in resumed
            .lists
            .iter_mut()
            .zip(["tools", "prompts", "resources"])
        {
            *declared = capabilities.and_then(|c| member(c, list)).is_some();
        }
        if let Some(initialized) = &replay.initialized {
            send(writer, &initialized.line).await.map_err(sending)?;
        }
    }
    resumed.forward = lines.forward;
    resumed.forward.extend_from_slice(&lines.unread);
    Ok(resumed)
}

/// Lines read from the app while the session is replayed.
#[derive(Default)]
struct AppLines {
    scanner: Scanner,
    /// The line being read.
    line: Vec<u8>,
    /// Whole lines for the client.
    forward: Vec<u8>,
    /// Bytes read but not looked at yet (after a reply the bridge waited for).
    unread: Vec<u8>,
}

/// The app's reply to a replayed request.
struct Reply {
    kind: Kind,
    line: Vec<u8>,
}

impl AppLines {
    /// Reads lines until the response with `id`, keeping every other line
    /// for the client.
    async fn reply_to(
        &mut self,
        id: &[u8],
        reader: &mut (impl AsyncRead + Unpin),
    ) -> Result<Reply, ResumeFailure> {
        let mut chunk = vec![0u8; BUFFER_SIZE];
        loop {
            if self.unread.is_empty() {
                let n = reader.read(&mut chunk).await.map_err(|e| {
                    ResumeFailure::io(format!(
                        "reading the app's reply to the replayed session failed: {}",
                        e
                    ))
                })?;
                if n == 0 {
                    return Err(ResumeFailure::io(
                        "the app closed the connection while the session was replayed".into(),
                    ));
                }
                self.unread.extend_from_slice(&chunk[..n]);
            }
            let unread = std::mem::take(&mut self.unread);
            let mut looked_at = 0;
            for segment in unread.split_inclusive(|&b| b == b'\n') {
                looked_at += segment.len();
                self.line.extend_from_slice(segment);
                if self.line.len() + self.forward.len() > REPLAY_LINE_LIMIT {
                    return Err(ResumeFailure::io(format!(
                        "the app sent more than {} MiB while the session was replayed",
                        REPLAY_LINE_LIMIT >> 20
                    )));
                }
                let mut verdict = None;
                self.scanner.feed(segment, |envelope| {
                    let ours = matches!(envelope.kind, Kind::Response | Kind::ErrorResponse)
                        && envelope.id == Some(id);
                    verdict = Some((ours, envelope.kind));
                });
                let (ours, kind) = match verdict {
                    None => continue,
                    Some(verdict) => verdict,
                };
                let line = std::mem::take(&mut self.line);
                if ours {
                    self.unread = unread[looked_at..].to_vec();
                    return Ok(Reply { kind, line });
                }
                self.forward.extend_from_slice(&line);
            }
        }
    }
}

/// `notifications/<list>/list_changed` for each list the new app instance
/// declares, so the client asks it what it offers.
pub(super) fn list_changed_notifications(resumed: &Resumed) -> Vec<u8> {
    let mut out = Vec::new();
    for (list, declared) in ["tools", "prompts", "resources"].iter().zip(resumed.lists) {
        if declared {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/");
            out.extend_from_slice(list.as_bytes());
            out.extend_from_slice(b"/list_changed\"}\n");
        }
    }
    out
}

/// The raw value of member `key` of the JSON object in `object` (leading
/// and trailing whitespace allowed), the last one if it repeats, as
/// `JSON.parse` does; `None` if `object` is not an object or has no such
/// member. Keys are compared as written (an escaped key does not match).
/// Only for whole, bounded values: it walks, it does not validate.
pub(super) fn member<'a>(object: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let mut i = skip_space(object, 0);
    if object.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut found = None;
    loop {
        i = skip_space(object, i);
        match object.get(i)? {
            b'}' => return found,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = value_end(object, i)?;
        let name = &object[i + 1..key_end - 1];
        i = skip_space(object, key_end);
        if object.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(object, i + 1);
        let end = value_end(object, i)?;
        if name == key.as_bytes() {
            found = Some(&object[i..end]);
        }
        i = end;
    }
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// Where the JSON value starting at `bytes[i]` ends (one past it).
fn value_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    loop {
        match *bytes.get(j)? {
            b'"' => {
                j += 1;
                loop {
                    match *bytes.get(j)? {
                        b'\\' => j += 2,
                        b'"' => break,
                        _ => j += 1,
                    }
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return Some(j),
            b'}' | b']' => depth -= 1,
            b',' | b' ' | b'\t' | b'\r' | b'\n' if depth == 0 => return Some(j),
            _ => {}
        }
        j += 1;
        if depth == 0 && (bytes[i] == b'"' || bytes[i] == b'{' || bytes[i] == b'[') {
            return Some(j);
        }
    }
}

/// A JSON string value as text for a person: the quotes dropped and
/// simple escapes undone; anything else as written.
fn json_text(raw: &[u8]) -> String {
    let inner = raw
        .strip_prefix(b"\"")
        .and_then(|r| r.strip_suffix(b"\""))
        .unwrap_or(raw);
    String::from_utf8_lossy(inner)
        .replace("\\\"", "\"")
        .replace("\\n", " ")
        .replace("\\\\", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_finds_top_level_values_only() {
        let line = br#"{"jsonrpc":"2.0","id":"x","result":{"capabilities":{"tools":{"listChanged":true},"prompts":{}},"s":"}\"{"},"n":12}
"#;
        let result = member(line, "result").unwrap();
        let caps = member(result, "capabilities").unwrap();
        assert_eq!(member(caps, "tools"), Some(&br#"{"listChanged":true}"#[..]));
        assert_eq!(member(caps, "prompts"), Some(&b"{}"[..]));
        assert_eq!(member(caps, "resources"), None);
        assert_eq!(member(line, "n"), Some(&b"12"[..]));
        assert_eq!(member(line, "id"), Some(&br#""x""#[..]));
        assert_eq!(member(result, "listChanged"), None);
        assert_eq!(member(b"[1,2]", "a"), None);
        assert_eq!(member(b"{\"a\":", "a"), None);
        assert_eq!(
            member(b" { \"a\" : [1, {\"b\":2}] , \"a\":3 } ", "a"),
            Some(&b"3"[..])
        );
    }
}
