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
//! - only a refusal line is a refusal (`app_refused`);
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

/// One request of the client's.
#[derive(Debug)]
struct Request {
    token: String,
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
            s.requests.insert(
                id_key(id),
                Request {
                    token: token.to_string(),
                    cancelled: false,
                    answers: 0,
                },
            );
        });
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
            if let Some(reason) = &reason {
                if let Some(instance) = s.app_answered.get(&token) {
                    return Some(format!(
                        "request {} ({}): instance {} wrote its result whole, the client got {}",
                        id, token, instance, reason
                    ));
                }
                if reason == "app_refused" {
                    return Some(format!("silence read as a refusal: {}", message));
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
