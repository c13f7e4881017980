//! The scripted app: a run of instances on one Unix socket path, each a
//! listener bound anew (a restart), that answer the client's requests now,
//! late or out of order, re-serialise ids as a JavaScript app does, ask the
//! client questions under ids every instance reuses (and now and then take
//! one back with `notifications/cancelled`), accept and close
//! connections, and die: at once with lines unread, in the middle of an
//! answer, or after going quiet. The last instance stays until the session
//! ends. Every line it receives is checked by the [`Judge`].

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::judge::elements;
use super::judge::{id_key, Judge};
use super::rng::Rng;

/// How an instance that is not the last one goes.
#[derive(Clone, Copy, Debug)]
pub enum Death {
    /// It closes with what it was sent unread.
    Abrupt,
    /// It writes half of an answer, then closes.
    MidLine,
    /// It stops reading, waits a little, then closes.
    Quiet,
}

/// One instance's script.
#[derive(Clone, Debug)]
pub struct Instance {
    /// No listener for this long before it binds (the app is away).
    pub gap: Duration,
    /// Connections accepted and closed without a word before it serves.
    pub silent_closes: u32,
    /// Dies after this many client lines or this long after it accepted,
    /// whichever comes first; `None`: the last instance.
    pub life: Option<(usize, Duration)>,
    pub death: Death,
    /// Writes numeric ids back as a JavaScript app does (`1e+300`).
    pub reserialize: bool,
    /// Questions it asks the client after its first line.
    pub questions: u32,
    /// Percent of its answers it holds back, to give later in another order.
    pub defer: u64,
}

impl Instance {
    pub fn draw(rng: &mut Rng, last: bool, questions: bool) -> Instance {
        Instance {
            gap: Duration::from_millis(if rng.chance(30) {
                rng.between(0, 400)
            } else {
                0
            }),
            silent_closes: if rng.chance(15) {
                rng.between(1, 2) as u32
            } else {
                0
            },
            life: if last {
                None
            } else {
                Some((
                    rng.between(1, 12) as usize,
                    Duration::from_millis(rng.between(50, 900)),
                ))
            },
            death: match rng.below(3) {
                0 => Death::Abrupt,
                1 => Death::MidLine,
                _ => Death::Quiet,
            },
            reserialize: rng.chance(40),
            questions: if questions {
                rng.between(0, 2) as u32
            } else {
                0
            },
            defer: if rng.chance(50) {
                rng.between(10, 60)
            } else {
                0
            },
        }
    }
}

/// What the app's run shares with the session.
#[derive(Debug, Default)]
pub struct Shared {
    /// The session is over: the last instance goes.
    pub stop: AtomicBool,
    /// Every question the last instance asked has its reply.
    pub last_settled: AtomicBool,
    /// An app of the legacy era: `server/discover` is no method of its.
    pub legacy: AtomicBool,
    /// The client is closing stdin: the bridge's next hang-up is the
    /// session's end, not a connection it gave up on.
    pub ending: AtomicBool,
}

/// Runs `script` at `path` until `shared.stop`, then checks that the last
/// instance's questions were answered.
pub fn run(
    path: PathBuf,
    script: Vec<Instance>,
    seed: u64,
    judge: Arc<Judge>,
    shared: Arc<Shared>,
) {
    let mut rng = Rng::new(seed);
    let count = script.len();
    for (n, plan) in script.into_iter().enumerate() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(plan.gap);
        let _ = std::fs::remove_file(&path);
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) => {
                return judge.fail(format!("the app could not bind {}: {}", path.display(), e))
            }
        };
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        judge.event(format!("app: instance {} listens ({:?})", n, plan));
        let mut served = Served::new(n, plan, n + 1 == count, &judge, &shared, rng.fork());
        served.run(&listener);
        drop(listener);
        let _ = std::fs::remove_file(&path);
    }
}

/// One instance at work.
struct Served<'a> {
    n: usize,
    plan: Instance,
    last: bool,
    judge: &'a Judge,
    shared: &'a Shared,
    rng: Rng,
    /// Questions asked and not yet replied to: id key -> nonce.
    asked: HashMap<String, String>,
    /// Questions it took back (`notifications/cancelled`): id keys. A
    /// reply may still come, crossing the cancel.
    withdrawn: HashSet<String>,
    /// Nonces of the questions replied to: progress for one of them came
    /// after its reply, out of the client's order.
    replied: HashSet<String>,
    /// Answers held back: (line, token).
    deferred: Vec<(Vec<u8>, Option<String>)>,
    lines: usize,
}

impl<'a> Served<'a> {
    fn new(
        n: usize,
        plan: Instance,
        last: bool,
        judge: &'a Judge,
        shared: &'a Shared,
        rng: Rng,
    ) -> Served<'a> {
        // Unsettled from its start while it has questions to ask: the
        // client must not close stdin between its start and its questions
        // (it asks them after its first line, the replayed session, which
        // the bridge sends on every connection it makes).
        if last {
            let settled = plan.questions == 0;
            shared.last_settled.store(settled, Ordering::SeqCst);
        }
        Served {
            n,
            plan,
            last,
            judge,
            shared,
            rng,
            asked: HashMap::new(),
            withdrawn: HashSet::new(),
            replied: HashSet::new(),
            deferred: Vec::new(),
            lines: 0,
        }
    }

    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// Accepts until it serves one connection to its end (or its death).
    fn run(&mut self, listener: &UnixListener) {
        let mut silent = self.plan.silent_closes;
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.stopped() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => return self.judge.fail(format!("accept: {}", e)),
            };
            if silent > 0 {
                silent -= 1;
                self.judge.event(format!(
                    "app: instance {} closes a connection silently",
                    self.n
                ));
                drop(stream);
                continue;
            }
            if self.serve(stream) {
                return;
            }
        }
    }

    /// Serves one connection: whether the instance is done (it died, or
    /// the session ended), rather than waiting for another connection.
    fn serve(&mut self, stream: UnixStream) -> bool {
        stream.set_nonblocking(false).expect("blocking stream");
        stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .expect("read timeout");
        let mut out = stream.try_clone().expect("clone stream");
        let mut reader = BufReader::new(stream);
        let born = Instant::now();
        let mut line = Vec::new();
        let mut handshake = true;
        loop {
            if self.last && self.stopped() {
                self.settle_last();
                return true;
            }
            if let Some((lines, time)) = self.plan.life {
                if self.lines >= lines || born.elapsed() >= time {
                    self.die(&mut out);
                    return true;
                }
            }
            self.maybe_flush(&mut out);
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => {
                    // The bridge closed: the session is over, or it gave up
                    // on this connection.
                    self.judge
                        .event(format!("app: instance {} read EOF", self.n));
                    if self.last && !self.shared.ending.load(Ordering::SeqCst) {
                        // The bridge gave up on this connection (it came
                        // past a deadline): it will look again, and this
                        // instance serves the next connection as a real
                        // app does. Its questions went with this one.
                        self.asked.clear();
                        self.withdrawn.clear();
                        self.lines = 0;
                        let settled = self.plan.questions == 0;
                        self.shared.last_settled.store(settled, Ordering::SeqCst);
                        return false;
                    }
                    if self.last {
                        self.settle_last();
                    }
                    return self.last || !line.is_empty();
                }
                Ok(_) if line.last() == Some(&b'\n') => {
                    let text = std::mem::take(&mut line);
                    if handshake {
                        handshake = false;
                        if serde_json::from_slice::<Value>(&text).is_err() {
                            self.judge
                                .fail(format!("a handshake that is not JSON: {}", show(&text)));
                        }
                        continue;
                    }
                    self.lines += 1;
                    self.line(&text, &mut out);
                    if self.lines == 1 {
                        self.ask(&mut out);
                    }
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => {
                    self.judge
                        .event(format!("app: instance {} read error {}", self.n, e));
                    return self.last;
                }
            }
        }
    }

    /// The last instance at the end of the session.
    fn settle_last(&mut self) {
        if !self.asked.is_empty() {
            let mut open: Vec<&String> = self.asked.keys().collect();
            open.sort();
            self.judge.fail(format!(
                "the last instance's questions {:?} never got the client's reply",
                open
            ));
        }
    }

    fn die(&mut self, out: &mut UnixStream) {
        self.judge.event(format!(
            "app: instance {} dies ({:?})",
            self.n, self.plan.death
        ));
        // Some held-back answers go out first, in another order.
        self.rng_shuffle();
        let give = self.rng.below(self.deferred.len() as u64 + 1) as usize;
        for (line, token) in std::mem::take(&mut self.deferred).into_iter().take(give) {
            self.write(out, &line, token.as_deref());
        }
        match self.plan.death {
            Death::Abrupt => {}
            Death::MidLine => {
                let line = self.result_line(b"\"mcp-model-half\"", "half");
                let _ = out.write_all(&line[..line.len() / 2]);
            }
            Death::Quiet => std::thread::sleep(Duration::from_millis(self.rng.between(10, 80))),
        }
        let _ = out.shutdown(std::net::Shutdown::Both);
    }

    fn rng_shuffle(&mut self) {
        for i in (1..self.deferred.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            self.deferred.swap(i, j);
        }
    }

    /// Now and then, held-back answers go out, in another order.
    fn maybe_flush(&mut self, out: &mut UnixStream) {
        if self.deferred.is_empty() || !(self.last || self.rng.chance(20)) {
            return;
        }
        self.rng_shuffle();
        for (line, token) in std::mem::take(&mut self.deferred) {
            self.write(out, &line, token.as_deref());
        }
    }

    fn write(&self, out: &mut UnixStream, line: &[u8], token: Option<&str>) {
        if let Some(token) = token {
            self.judge.app_writes(&[token.to_string()], self.n);
        }
        if out.write_all(line).is_ok() {
            if let Some(token) = token {
                self.judge.app_answered(token, self.n);
            }
        }
    }

    /// The questions this instance asks the client, ids from 0 as every
    /// SDK numbers them.
    fn ask(&mut self, out: &mut UnixStream) {
        if self.last && self.plan.questions > 0 {
            self.shared.last_settled.store(false, Ordering::SeqCst);
        }
        for q in 0..self.plan.questions {
            let nonce = format!("i{}-q{}", self.n, q);
            let line = format!(
                "{}\n",
                json!({"jsonrpc":"2.0","id":q,"method":"elicitation/create","params":{"message":format!("question {}", nonce),"nonce":nonce,"requestedSchema":{"type":"object","properties":{}},"_meta":{"progressToken":nonce}}})
            );
            self.asked.insert(id_key(&json!(q)), nonce.clone());
            self.judge
                .event(format!("app: instance {} asks {} ({})", self.n, q, nonce));
            let _ = out.write_all(line.as_bytes());
            // Now and then it takes the question back: the client must get
            // the cancel under the id it knows the question by (the
            // reason names the question, for the client to check).
            if self.rng.chance(15) {
                self.asked.remove(&id_key(&json!(q)));
                self.withdrawn.insert(id_key(&json!(q)));
                self.judge.event(format!(
                    "app: instance {} takes back {} ({})",
                    self.n, q, nonce
                ));
                let cancel = format!(
                    "{}\n",
                    json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":q,"reason":format!("withdrawn {}", nonce)}})
                );
                let _ = out.write_all(cancel.as_bytes());
            }
        }
        if self.last && self.asked.is_empty() {
            self.shared.last_settled.store(true, Ordering::SeqCst);
        }
    }

    /// One whole line from the bridge.
    fn line(&mut self, text: &[u8], out: &mut UnixStream) {
        let value: Value = match serde_json::from_slice(text) {
            Ok(v) => v,
            Err(_) => {
                return self.judge.fail(format!(
                    "instance {} got a line that is not JSON: {}",
                    self.n,
                    show(text)
                ))
            }
        };
        match value {
            Value::Array(items) => {
                let mut answers = Vec::new();
                let mut tokens = Vec::new();
                for (item, raw) in items.iter().zip(elements(text)) {
                    if let Some((answer, token)) = self.message(item, raw) {
                        answers.push(answer);
                        tokens.extend(token);
                    }
                }
                if !answers.is_empty() {
                    let mut line = b"[".to_vec();
                    for (n, answer) in answers.iter().enumerate() {
                        if n > 0 {
                            line.push(b',');
                        }
                        line.extend_from_slice(&answer[..answer.len() - 1]);
                    }
                    line.extend_from_slice(b"]\n");
                    self.judge.app_writes(&tokens, self.n);
                    if out.write_all(&line).is_ok() {
                        for token in tokens {
                            self.judge.app_answered(&token, self.n);
                        }
                    }
                }
            }
            item => {
                if item["method"] == "tools/call" && self.rng.chance(5) {
                    // A stray reply, under the id's text as a string: the
                    // client never sent that id.
                    if let Some(id) = raw_id(text).filter(|id| !id.starts_with('"')) {
                        let stray = format!(
                            "{{\"jsonrpc\":\"2.0\",\"id\":\"{}\",\"result\":{{\"stray\":true}}}}\n",
                            id
                        );
                        let _ = out.write_all(stray.as_bytes());
                    }
                }
                if let Some((answer, token)) = self.message(&item, text) {
                    if self.rng.chance(self.plan.defer) {
                        self.deferred.push((answer, token));
                    } else {
                        self.write(out, &answer, token.as_deref());
                    }
                }
            }
        }
    }

    /// One message: the answer to write, if it asks one, and the token of
    /// the client request it answers.
    fn message(&mut self, item: &Value, raw: &[u8]) -> Option<(Vec<u8>, Option<String>)> {
        let method = item["method"].as_str();
        let id = item.get("id");
        match (method, id) {
            (Some(method), Some(_)) => {
                let raw_id = self.id_out(raw_id(raw)?);
                if method == "server/discover" && self.shared.legacy.load(Ordering::SeqCst) {
                    let error = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":-32601,\"message\":\"Method not found\"}}}}\n",
                        raw_id
                    );
                    return Some((error.into_bytes(), None));
                }
                let result = match method {
                    "initialize" => {
                        json!({"protocolVersion": item["params"]["protocolVersion"], "capabilities": {"tools": {"listChanged": true}}, "serverInfo": {"name": "model-app", "version": "1"}})
                    }
                    "server/discover" => {
                        json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "serverInfo": {"name": "model-app", "version": "1"}, "resultType": "complete"})
                    }
                    "tools/call" => {
                        let token = item["params"]["arguments"]["token"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        if !self.judge.sent_token(&token) {
                            self.judge.fail(format!(
                                "instance {} got a call the client never sent: {}",
                                self.n,
                                show(raw)
                            ));
                        }
                        self.judge
                            .event(format!("app: instance {} got {}", self.n, token));
                        self.judge.app_got(&token, self.n);
                        let pad = item["params"]["arguments"]["reply_pad"]
                            .as_u64()
                            .unwrap_or(0) as usize;
                        return Some((
                            self.result_line_padded(raw_id.as_bytes(), &token, pad),
                            Some(token),
                        ));
                    }
                    _ => json!({}),
                };
                let mut line = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{}}}",
                    raw_id, result
                )
                .into_bytes();
                line.push(b'\n');
                Some((line, None))
            }
            (Some("notifications/progress"), None) => {
                let token = item["params"]["progressToken"].as_str().unwrap_or("");
                if self.replied.contains(token) {
                    self.judge.fail(format!(
                        "instance {} got progress for its question {} after the reply the client sent after it",
                        self.n, token
                    ));
                }
                None
            }
            (Some(_), None) => None,
            (None, Some(id)) => {
                self.reply(id, item);
                None
            }
            (None, None) => {
                self.judge.fail(format!(
                    "instance {} got a line that is no JSON-RPC message: {}",
                    self.n,
                    show(raw)
                ));
                None
            }
        }
    }

    /// The client's reply to a question of this instance's.
    fn reply(&mut self, id: &Value, item: &Value) {
        let nonce = match self.asked.remove(&id_key(id)) {
            Some(nonce) => nonce,
            None if self.withdrawn.remove(&id_key(id)) => {
                return self.judge.event(format!(
                    "app: instance {} got a reply to {} after it took it back",
                    self.n, id
                ))
            }
            None => {
                return self.judge.fail(format!(
                    "instance {} got a reply to a question it never asked (or asked and had answered): {}",
                    self.n, item
                ))
            }
        };
        if let Some(error) = item.get("error") {
            if self.last {
                self.judge.fail(format!(
                    "the last instance's question {} ({}) was answered with an error: {}",
                    id, nonce, error
                ));
            }
        } else if item["result"]["content"]["nonce"].as_str() != Some(nonce.as_str()) {
            self.judge.fail(format!(
                "instance {}'s question {} ({}) got the reply to another question: {}",
                self.n, id, nonce, item
            ));
        } else if !inner_id_intact(&item["result"]["content"]) {
            self.judge.fail(format!(
                "instance {}'s question {} ({}) got a reply whose result was changed: {}",
                self.n, id, nonce, item
            ));
        } else {
            self.judge.event(format!(
                "app: instance {} got the reply to {}",
                self.n, nonce
            ));
        }
        self.replied.insert(nonce);
        if self.last && self.asked.is_empty() {
            self.shared.last_settled.store(true, Ordering::SeqCst);
        }
    }

    /// The id as this instance writes it back.
    fn id_out(&self, raw: &str) -> String {
        if !self.plan.reserialize || raw.starts_with('"') {
            return raw.to_string();
        }
        match raw.parse::<f64>() {
            Ok(v) => js_number(v),
            Err(_) => raw.to_string(),
        }
    }

    fn result_line(&self, raw_id: &[u8], token: &str) -> Vec<u8> {
        self.result_line_padded(raw_id, token, 0)
    }

    fn result_line_padded(&self, raw_id: &[u8], token: &str, pad: usize) -> Vec<u8> {
        let mut line = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
        line.extend_from_slice(raw_id);
        line.extend_from_slice(
            format!(
                ",\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}],\"instance\":{},\"pad\":\"",
                token, self.n
            )
            .as_bytes(),
        );
        line.extend(std::iter::repeat(b'x').take(pad));
        line.extend_from_slice(b"\"}}\n");
        line
    }
}

/// A number as JavaScript's `JSON.stringify` writes it.
pub fn js_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e21 {
        format!("{}", v)
    } else {
        let text = format!("{:e}", v);
        if text.contains("e-") {
            text
        } else {
            text.replace('e', "e+")
        }
    }
}

/// The raw text of a message's top-level `id` (the traffic here is compact
/// and names no other `id`).
fn raw_id(line: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(line).ok()?;
    let at = text.find("\"id\":")? + 5;
    let rest = &text[at..];
    let end = match rest.strip_prefix('"') {
        Some(quoted) => quoted.find('"')? + 2,
        None => rest.find([',', '}'])?,
    };
    Some(&rest[..end])
}

/// A line, shortened for a report.
pub fn show(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned();
    if line.len() > 300 {
        format!("{}... ({} bytes)", text, line.len())
    } else {
        text
    }
}

/// Whether a reply's result still holds what the client put in it: the
/// client writes the question's id (as it knew it) inside the result too,
/// with its text beside it, so a bridge that rewrote a value inside the
/// result instead of the envelope's id is seen.
fn inner_id_intact(content: &Value) -> bool {
    match content.get("spelled").and_then(Value::as_str) {
        Some(spelled) => serde_json::from_str::<Value>(spelled).ok().as_ref() == content.get("id"),
        None => true,
    }
}
