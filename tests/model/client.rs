//! The scripted client: an MCP CLI that spawned the bridge. It sends
//! requests under ids of every form (numbers small and huge, exponents,
//! strings), batches up to several MiB, cancellations, replies to the
//! app's questions (late ones too, after the bridge said they were
//! cancelled; in arrays now and then, `result` first as the TypeScript SDK
//! writes them, the question's id inside the result too, and progress
//! before them), and now and then stops reading stdout for a while.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::app::show;
use super::judge::{elements, id_key, Judge};
use super::rng::Rng;

/// The protocol era the client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    Legacy,
    Modern,
}

/// The `_meta` of a 2026-07-28 request.
fn meta(era: Era) -> &'static str {
    match era {
        Era::Legacy => "",
        Era::Modern => ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}",
    }
}

/// A question of the app's, as the client got it.
#[derive(Debug, Clone)]
pub struct Question {
    pub id: Value,
    pub nonce: String,
    pub cancelled: bool,
}

/// What the stdout reader shares with the client.
#[derive(Debug, Default)]
pub struct Inbox {
    /// Questions not yet replied to, by id key.
    pub questions: Mutex<HashMap<String, Question>>,
    /// Every question got, by id key: the last one's nonce.
    pub seen: Mutex<HashMap<String, String>>,
    /// stdout is not read before this many milliseconds since `epoch`.
    pub paused_until: AtomicU64,
    /// The answer to the opening `server/discover`, once it came: whether
    /// it was a 2026-07-28 result.
    pub probe: Mutex<Option<bool>>,
}

/// Writes every line it is given to the bridge's stdin, in order; closing
/// the channel closes stdin.
pub fn writer(mut stdin: ChildStdin, lines: Receiver<Vec<u8>>, judge: Arc<Judge>) {
    for line in lines {
        if let Err(e) = stdin.write_all(&line).and_then(|_| stdin.flush()) {
            judge.event(format!("client: stdin write failed: {}", e));
            return;
        }
    }
}

/// Reads the bridge's stdout to its end, line by line.
pub fn reader(stdout: ChildStdout, inbox: Arc<Inbox>, judge: Arc<Judge>, epoch: Instant) {
    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        loop {
            let until = inbox.paused_until.load(Ordering::SeqCst);
            let now = epoch.elapsed().as_millis() as u64;
            if now >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis((until - now).min(50)));
        }
        line.clear();
        match stdout.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => return judge.fail(format!("reading stdout: {}", e)),
        }
        if line.last() != Some(&b'\n') {
            return judge.fail(format!("stdout ended inside a line: {}", show(&line)));
        }
        let value: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(_) => {
                judge.fail(format!(
                    "a line on stdout that is not JSON: {}",
                    show(&line)
                ));
                continue;
            }
        };
        number += 1;
        match value {
            Value::Array(items) => {
                for (item, raw) in items.iter().zip(elements(&line)) {
                    message(item, raw, (number, true), &inbox, &judge);
                }
            }
            item => message(&item, &line, (number, false), &inbox, &judge),
        }
    }
}

/// One message of stdout line `line.0` (`line.1`: the line is an array).
fn message(item: &Value, raw: &[u8], line: (u64, bool), inbox: &Inbox, judge: &Judge) {
    let method = item["method"].as_str();
    match (method, item.get("id")) {
        (None, Some(id)) => {
            if *id == json!("open") {
                let modern = item["result"]["supportedVersions"].is_array();
                inbox.probe.lock().unwrap().get_or_insert(modern);
            }
            judge.client_got_answer_as(item, raw, line.0, line.1)
        }
        (Some(_), Some(id)) => {
            let nonce = item["params"]["nonce"].as_str().unwrap_or("").to_string();
            judge.event(format!("client <- question {} ({})", id, nonce));
            inbox.seen.lock().unwrap().insert(id_key(id), nonce.clone());
            inbox.questions.lock().unwrap().insert(
                id_key(id),
                Question {
                    id: id.clone(),
                    nonce,
                    cancelled: false,
                },
            );
        }
        (Some("notifications/cancelled"), None) => {
            let id = &item["params"]["requestId"];
            judge.event(format!("client <- cancelled {}", id));
            // The app took its question back: the cancel names it by the
            // id the client got it under.
            if let Some(nonce) = item["params"]["reason"]
                .as_str()
                .and_then(|r| r.strip_prefix("withdrawn "))
            {
                let seen = inbox.seen.lock().unwrap().get(&id_key(id)).cloned();
                if seen.as_deref() != Some(nonce) {
                    judge.fail(format!(
                        "the app's cancel of its question {} came under id {}, which the client knows as {:?}",
                        nonce, id, seen
                    ));
                }
            }
            if let Some(q) = inbox.questions.lock().unwrap().get_mut(&id_key(id)) {
                q.cancelled = true;
            }
        }
        (Some(_), None) => {}
        (None, None) => judge.fail(format!(
            "a message on stdout that is no JSON-RPC message: {}",
            item
        )),
    }
}

/// The client's own doings: what it sends.
pub struct Client {
    pub era: Era,
    pub rng: Rng,
    pub out: Sender<Vec<u8>>,
    pub judge: Arc<Judge>,
    pub inbox: Arc<Inbox>,
    pub epoch: Instant,
    next: u64,
    /// Requests sent, for cancellations.
    sent: Vec<Value>,
}

impl Client {
    pub fn new(
        era: Era,
        rng: Rng,
        out: Sender<Vec<u8>>,
        judge: Arc<Judge>,
        inbox: Arc<Inbox>,
        epoch: Instant,
    ) -> Client {
        Client {
            era,
            rng,
            out,
            judge,
            inbox,
            epoch,
            next: 0,
            sent: Vec::new(),
        }
    }

    fn send(&self, line: Vec<u8>) {
        let _ = self.out.send(line);
    }

    /// The session's opening: `initialize` and `initialized`, or a
    /// `server/discover`.
    pub fn open(&mut self) {
        let (id, token) = (json!("open"), "open");
        self.judge.client_sent(&id, token);
        let line = match self.era {
            Era::Legacy => "{\"jsonrpc\":\"2.0\",\"id\":\"open\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"elicitation\":{}},\"clientInfo\":{\"name\":\"model\",\"version\":\"1\"}}}\n\
                 {\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
            .to_string(),
            Era::Modern => format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":\"open\",\"method\":\"server/discover\",\"params\":{{{}}}}}\n",
                &meta(self.era)[1..]
            ),
        };
        self.send(line.into_bytes());
    }

    /// A client that probes (rmcp's `Auto`, the Python SDK 2.x) waits for
    /// the answer to its `server/discover`: anything but a 2026-07-28
    /// result (a legacy app's -32601, the bridge's error while the app is
    /// away) and it falls back to `initialize` and the legacy era.
    pub fn fall_back_unless_modern(&mut self) {
        let waited = Instant::now();
        while self.inbox.probe.lock().unwrap().is_none()
            && waited.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        if *self.inbox.probe.lock().unwrap() == Some(true) {
            return;
        }
        self.judge
            .event("client: the probe failed; falls back to initialize");
        self.era = Era::Legacy;
        let (id, token) = (json!("init"), "opening2");
        self.judge.client_sent(&id, token);
        self.send(
            b"{\"jsonrpc\":\"2.0\",\"id\":\"init\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"elicitation\":{}},\"clientInfo\":{\"name\":\"model\",\"version\":\"1\"}}}\n\
              {\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
                .to_vec(),
        );
    }

    /// A new id, in one of the forms real clients and apps use.
    fn id(&mut self) -> String {
        self.next += 1;
        let n = self.next;
        match self.rng.below(5) {
            0 | 1 => format!("{}", n),
            2 => format!("\"s-{}\"", n),
            // Written back by a JavaScript app as `1e+300`.
            3 => format!("{}e290", n),
            // 2^64 and up, in steps a double tells apart: written back
            // as the double's shortest form.
            _ => format!("{}", (1u128 << 64) + 4096 * u128::from(n)),
        }
    }

    /// One `tools/call`, as a line without its `\n`.
    fn call(&mut self, pad: usize, reply_pad: usize) -> String {
        let id = self.id();
        let token = format!("t{}", self.next);
        let value: Value = serde_json::from_str(&id).expect("an id is JSON");
        self.judge.client_sent(&value, &token);
        self.judge.client_spelled(&value, &id);
        self.sent.push(value);
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"token\":\"{}\",\"reply_pad\":{},\"pad\":\"{}\"}}{}}}}}",
            id,
            token,
            reply_pad,
            "x".repeat(pad),
            meta(self.era)
        )
    }

    /// One step of the session, drawn.
    pub fn step(&mut self) {
        let roll = self.rng.below(100);
        if roll < 50 {
            let reply_pad = if self.rng.chance(8) { 150 * 1024 } else { 0 };
            let line = self.call(0, reply_pad);
            self.judge
                .event(format!("client -> {}", show(line.as_bytes())));
            self.send(format!("{}\n", line).into_bytes());
        } else if roll < 65 {
            let n = self.rng.between(2, 5);
            let big = self.rng.chance(15);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    let pad = if big {
                        self.rng.between(200, 1100) as usize * 1024
                    } else {
                        0
                    };
                    self.call(pad, 0)
                })
                .collect();
            let ids = &self.sent[self.sent.len() - n as usize..];
            self.judge.client_batched(ids);
            let line = format!("[{}]\n", items.join(","));
            self.judge
                .event(format!("client -> batch of {} ({} bytes)", n, line.len()));
            self.send(line.into_bytes());
        } else if roll < 70 {
            let pad = self.rng.between(300, 1500) as usize * 1024;
            let line = self.call(pad, 0);
            self.judge
                .event(format!("client -> a call of {} bytes", line.len()));
            self.send(format!("{}\n", line).into_bytes());
        } else if roll < 78 && !self.sent.is_empty() {
            let at = self.rng.below(self.sent.len() as u64) as usize;
            let id = self.sent[at].clone();
            self.judge.client_cancelled(&id);
            self.judge.event(format!("client -> cancel {}", id));
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{},\"reason\":\"model\"}}}}\n",
                id
            );
            self.send(line.into_bytes());
        } else if roll < 82 {
            let now = self.epoch.elapsed().as_millis() as u64;
            let pause = self.rng.between(200, 1500);
            self.judge
                .event(format!("client stops reading stdout for {} ms", pause));
            self.inbox.paused_until.store(now + pause, Ordering::SeqCst);
        } else {
            std::thread::sleep(Duration::from_millis(self.rng.between(0, 60)));
        }
        self.reply_to_questions();
    }

    /// Replies to the questions the app asked: accepts, with the question's
    /// nonce; a cancelled one is mostly left alone, but now and then
    /// answered late all the same, as a slow user would.
    pub fn reply_to_questions(&mut self) {
        let questions: Vec<Question> = self
            .inbox
            .questions
            .lock()
            .unwrap()
            .drain()
            .map(|(_, q)| q)
            .collect();
        let mut replies = Vec::new();
        for q in questions {
            if q.cancelled && !self.rng.chance(40) {
                continue;
            }
            self.judge.event(format!(
                "client -> reply to {} ({}){}",
                q.id,
                q.nonce,
                if q.cancelled { " late" } else { "" }
            ));
            if self.rng.chance(30) {
                let progress = json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":q.nonce,"progress":1}});
                self.send(format!("{}\n", progress).into_bytes());
            }
            let reply = if self.rng.chance(30) {
                // The TypeScript SDK's order, the id inside the result too.
                let id = q.id.to_string();
                format!(
                    "{{\"result\":{{\"action\":\"accept\",\"content\":{{\"nonce\":{},\"id\":{},\"spelled\":{}}}}},\"id\":{},\"jsonrpc\":\"2.0\"}}",
                    json!(q.nonce),
                    id,
                    json!(id),
                    id
                )
            } else {
                json!({"jsonrpc":"2.0","id":q.id,"result":{"action":"accept","content":{"nonce":q.nonce}}}).to_string()
            };
            replies.push(reply);
        }
        if !replies.is_empty() && self.rng.chance(25) {
            self.judge
                .event(format!("client -> {} replies in one array", replies.len()));
            self.send(format!("[{}]\n", replies.join(",")).into_bytes());
        } else {
            for reply in replies {
                self.send(format!("{}\n", reply).into_bytes());
            }
        }
    }
}
