//! The model of what docs/bridge.md promises, held against one session as
//! both sides see it. The client and the app report what they send and
//! receive; the judge says what breaks a promise:
//!
//! - every request the client sends gets exactly one answer (at most one
//!   when the client cancelled it), carrying the result of that request;
//! - a result the app wrote whole reaches the client, never an error in
//!   its place;
//! - the client's reply to a question of the app reaches only the
//!   instance that asked it, under the id it asked with;
//! - only a refusal line is a refusal (`app_refused`), and every error
//!   the bridge writes names one of the reasons docs/bridge.md lists;
//! - the bridge's own answers echo the request's id byte for byte;
//! - lines keep their order: each instance gets the client's requests in
//!   the order the client sent them (never one twice), and the client
//!   gets each instance's answers in the order that instance wrote them;
//! - every line either side receives is one whole JSON value, and the app
//!   receives only what the client sent or the bridge's own replay.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use serde_json::Value;

/// How a JSON-RPC id is compared: as a JSON value. Numbers by value (as
/// the double a JavaScript app reads them into, so `1e300` is `1e+300`),
/// strings by content, and a number is never a string.
pub fn id_key(id: &Value) -> String {
    match id {
        Value::Number(n) => format!("n:{:016x}", n.as_f64().unwrap_or(f64::NAN).to_bits()),
        Value::String(s) => format!("s:{}", s),
        other => format!("o:{}", other),
    }
}

/// The reasons docs/bridge.md lists for the bridge's errors to the client
/// (`id_in_use` goes to the app, never to the client).
pub const REASONS: &[&str] = &[
    "app_not_running",
    "app_restarting",
    "app_refused",
    "untrusted_server",
    "crash_loop",
    "resume_rejected",
    "unreachable",
    "hold_limit",
    "stdin_closed",
    "too_long_to_replay",
    "app_closed_silently",
    "legacy_app",
];

/// A list result as the judge compares it: compact, its `ttlMs` left out
/// (the bridge serves a kept one with `ttlMs` 0).
fn list_text(result: &Value) -> String {
    let mut result = result.clone();
    if let Some(object) = result.as_object_mut() {
        object.remove("ttlMs");
    }
    result.to_string()
}

/// One request of the client's.
#[derive(Debug)]
struct Request {
    token: String,
    /// The id as the client wrote it, when the client said.
    spelled: Option<String>,
    /// The batch it was sent in, if any (a number per batch).
    batch: Option<u64>,
    cancelled: bool,
    answers: usize,
}

#[derive(Debug, Default)]
struct State {
    requests: HashMap<String, Request>,
    tokens: HashSet<String>,
    /// Tokens of the requests whose result the app wrote whole, and the
    /// instance that did.
    app_answered: HashMap<String, usize>,
    /// The place of each token among the client's requests, in the
    /// order sent.
    sent_at: HashMap<String, u64>,
    /// Per instance: the place of the last request it got, and the
    /// tokens it got.
    instance_got: HashMap<usize, (u64, HashSet<String>)>,
    /// Per token: the instance that wrote its answer and the place of
    /// that line among everything the app's instances wrote.
    written_at: HashMap<String, (usize, u64)>,
    lines_written: u64,
    /// An instance wrote a refusal line.
    refused: bool,
    /// Another user's process served the endpoint for a while.
    squatted: bool,
    /// The lists the app wrote (each result as compact JSON, `ttlMs` out).
    listed: HashSet<String>,
    batches: u64,
    /// Per batch: the stdout line its first answer came in.
    batch_line: HashMap<u64, u64>,
    /// Per instance: the place of the last of its lines the client got.
    client_got_from: HashMap<usize, u64>,
    failures: Vec<String>,
    events: Vec<String>,
}

/// The model (see the module docs); shared by the session's threads.
#[derive(Debug, Default)]
pub struct Judge {
    state: Mutex<State>,
}

/// Most events kept for a failure's report.
const EVENTS: usize = 400;

impl Judge {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }

    /// Something happened, for the report of a failure.
    pub fn event(&self, text: impl Into<String>) {
        let text = text.into();
        self.with(|s| {
            if s.events.len() == EVENTS {
                s.events.remove(0);
            }
            s.events.push(text);
        });
    }

    /// A promise was broken.
    pub fn fail(&self, text: impl Into<String>) {
        let text = text.into();
        self.with(|s| {
            s.events.push(format!("FAIL {}", text));
            s.failures.push(text)
        });
    }

    pub fn failures(&self) -> Vec<String> {
        self.with(|s| s.failures.clone())
    }

    pub fn events(&self) -> Vec<String> {
        self.with(|s| s.events.clone())
    }

    /// The client sends a request under `id` carrying `token`.
    pub fn client_sent(&self, id: &Value, token: &str) {
        self.with(|s| {
            s.tokens.insert(token.to_string());
            let at = s.sent_at.len() as u64;
            s.sent_at.insert(token.to_string(), at);
            s.requests.insert(
                id_key(id),
                Request {
                    token: token.to_string(),
                    spelled: None,
                    batch: None,
                    cancelled: false,
                    answers: 0,
                },
            );
        });
    }

    /// The client wrote its request `id` as `raw`: the bridge's own
    /// answer to it must carry exactly these bytes.
    pub fn client_spelled(&self, id: &Value, raw: &str) {
        self.with(|s| {
            if let Some(r) = s.requests.get_mut(&id_key(id)) {
                r.spelled = Some(raw.to_string());
            }
        });
    }

    /// The app wrote `result` for a list request (a `tools/list`): a list
    /// the client gets, from the app or from the cache, must be one of these.
    #[allow(dead_code)] // the simulation's app lists; the fuzzer's does not yet
    pub fn app_listed(&self, result: &Value) {
        self.with(|s| s.listed.insert(list_text(result)));
    }

    /// An instance turned the client away with a refusal line: from now on
    /// `app_refused` is what the app said.
    #[allow(dead_code)] // the simulation's app refuses; the fuzzer's does not yet
    pub fn app_refuses(&self) {
        self.with(|s| s.refused = true);
    }

    /// Another user's process serves the endpoint (for a while): from now
    /// on `untrusted_server` is what the bridge found.
    #[allow(dead_code)] // the simulation's endpoint is taken; the fuzzer's is not yet
    pub fn endpoint_taken(&self) {
        self.with(|s| s.squatted = true);
    }

    /// The client sent the requests `ids` in one batch line: their answers
    /// must come in one line, an array.
    pub fn client_batched(&self, ids: &[Value]) {
        self.with(|s| {
            s.batches += 1;
            let batch = s.batches;
            for id in ids {
                if let Some(r) = s.requests.get_mut(&id_key(id)) {
                    r.batch = Some(batch);
                }
            }
        });
    }

    /// Instance `instance` got the request carrying `token`: after every
    /// request it got before it, in the client's order, and only once.
    pub fn app_got(&self, token: &str, instance: usize) {
        let failure = self.with(|s| {
            let at = *s.sent_at.get(token)?;
            let (last, got) = s
                .instance_got
                .entry(instance)
                .or_insert_with(|| (0, HashSet::new()));
            if !got.insert(token.to_string()) {
                return Some(format!("instance {} got {} twice", instance, token));
            }
            let before = *last;
            *last = at.max(before);
            match got.len() > 1 && at < before {
                true => Some(format!(
                    "instance {} got {} (sent {}th) after a request the client sent later                      ({}th): the client's lines reordered",
                    instance, token, at, before
                )),
                false => None,
            }
        });
        if let Some(f) = failure {
            self.fail(f)
        }
    }

    /// Instance `instance` begins to write one line answering the requests
    /// carrying `tokens` (its lines are written one at a time).
    pub fn app_writes(&self, tokens: &[String], instance: usize) {
        self.with(|s| {
            s.lines_written += 1;
            let at = s.lines_written;
            for token in tokens {
                s.written_at.insert(token.clone(), (instance, at));
            }
        });
    }

    /// The client got `message` (one response) written as `raw`, in its
    /// stdout line number `line` (`in_array`: the line is an array): when
    /// the bridge wrote it, its id must be the client's bytes; an answer to
    /// a batch's request comes in an array, in the same line as the rest of
    /// that batch's answers; then as [`Judge::client_got_answer`].
    pub fn client_got_answer_as(&self, message: &Value, raw: &[u8], line: u64, in_array: bool) {
        let failure = self.with(|s| {
            let batch = s.requests.get(&id_key(&message["id"]))?.batch?;
            let first = *s.batch_line.entry(batch).or_insert(line);
            match (in_array, first == line) {
                (true, true) => None,
                (false, _) => Some(format!(
                    "an answer to a request of a batch came outside an array: {}",
                    message
                )),
                (true, false) => Some(format!(
                    "a batch's answers came in more than one line: {}",
                    message
                )),
            }
        });
        if let Some(f) = failure {
            self.fail(f);
        }
        if message["error"]["data"]["source"] == "mcp-bridge" {
            let failure = self.with(|s| {
                let spelled = s.requests.get(&id_key(&message["id"]))?.spelled.clone()?;
                let prefix = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},", spelled);
                match raw.starts_with(prefix.as_bytes()) {
                    true => None,
                    false => Some(format!(
                        "the bridge's answer does not echo the id {} byte for byte: {}",
                        spelled,
                        String::from_utf8_lossy(&raw[..raw.len().min(200)])
                    )),
                }
            });
            if let Some(f) = failure {
                self.fail(f);
            }
        }
        self.client_got_answer(message)
    }

    /// The client cancels its request `id`.
    pub fn client_cancelled(&self, id: &Value) {
        self.with(|s| {
            if let Some(r) = s.requests.get_mut(&id_key(id)) {
                r.cancelled = true;
            }
        });
    }

    /// Whether the client sent a request carrying `token`.
    pub fn sent_token(&self, token: &str) -> bool {
        self.with(|s| s.tokens.contains(token))
    }

    /// The app wrote the whole result of the request carrying `token`.
    pub fn app_answered(&self, token: &str, instance: usize) {
        self.with(|s| {
            s.app_answered.insert(token.to_string(), instance);
        });
    }

    /// The client received an answer (`message`: a response object).
    pub fn client_got_answer(&self, message: &Value) {
        let id = &message["id"];
        let key = id_key(id);
        let reason = message["error"]["data"]["reason"]
            .as_str()
            .map(str::to_string);
        let carried = message["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_string);
        let failure = self.with(|s| {
            let request = match s.requests.get_mut(&key) {
                Some(r) => r,
                None => {
                    return Some(format!(
                        "an answer to no request of the client's: {}",
                        message
                    ))
                }
            };
            request.answers += 1;
            let token = request.token.clone();
            if request.answers > 1 {
                return Some(format!(
                    "request {} ({}) answered twice: {}",
                    id, token, message
                ));
            }
            if let Some(carried) = &carried {
                if *carried != token {
                    return Some(format!(
                        "request {} ({}) got the result of {}",
                        id, token, carried
                    ));
                }
            }
            if let Some(list) = message.get("result").filter(|r| r.get("tools").is_some()) {
                if !s.listed.contains(&list_text(list)) {
                    return Some(format!(
                        "request {} ({}) got a list the app never gave: {}",
                        id, token, message
                    ));
                }
            }
            if let Some(&(instance, at)) = s.written_at.get(&token) {
                if reason.is_none() {
                    let last = s.client_got_from.entry(instance).or_insert(0);
                    if at < *last {
                        return Some(format!(
                            "request {} ({}): instance {}'s answer reached the client after one \
                             it wrote later: the app's lines reordered",
                            id, token, instance
                        ));
                    }
                    *last = at;
                }
            }
            if let Some(reason) = &reason {
                if message["error"]["data"]["source"] == "mcp-bridge"
                    && !REASONS.contains(&reason.as_str())
                {
                    return Some(format!(
                        "a reason docs/bridge.md does not list: {}",
                        message
                    ));
                }
                if let Some(instance) = s.app_answered.get(&token) {
                    return Some(format!(
                        "request {} ({}): instance {} wrote its result whole, the client got {}",
                        id, token, instance, reason
                    ));
                }
                if reason == "app_refused" && !s.refused {
                    return Some(format!("silence read as a refusal: {}", message));
                }
                if reason == "untrusted_server" && !s.squatted {
                    return Some(format!(
                        "no other user served the endpoint, the client got {}",
                        message
                    ));
                }
            }
            None
        });
        match failure {
            Some(f) => self.fail(f),
            None => self.event(format!(
                "client <- answer {} {}",
                id,
                reason.unwrap_or_default()
            )),
        }
    }

    /// Requests not cancelled that have no answer yet (their ids).
    pub fn unanswered(&self) -> Vec<String> {
        self.with(|s| {
            let mut open: Vec<String> = s
                .requests
                .iter()
                .filter(|(_, r)| r.answers == 0 && !r.cancelled)
                .map(|(k, r)| format!("{} ({})", k, r.token))
                .collect();
            open.sort();
            open
        })
    }
}

/// The texts of a JSON array's elements, as written.
pub fn elements(array: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0usize);
    for (at, &b) in array.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth == 1 {
                    start = at + 1;
                }
            }
            b']' | b'}' if depth == 1 => {
                out.push(&array[start..at]);
                depth -= 1;
            }
            b']' | b'}' => depth -= 1,
            b',' if depth == 1 => {
                out.push(&array[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    out
}
