//! A deterministic simulation of whole sessions: the real session engine,
//! scripted clients and app instances on in-memory pipes, one thread, one
//! executor, and a [virtual clock](crate::clock::Virtual).
//!
//! The binary fuzzer (tests/model.rs) checks the same promises through the
//! real binary, in real time: a seed fixes its script but not the
//! interleaving, so a failure there may not come back. Here nothing runs
//! but the executor's tasks, in the order they are woken, and time moves
//! only when every task waits: [`play`] runs the tasks until none can go
//! on, then moves the clock to the earliest deadline anything waits for
//! (quinn-proto's `Pair::step`), so a session of minutes of virtual time
//! takes a few milliseconds, every deadline is met or missed exactly, and
//! a seed replays its session event by event (`MCP_BRIDGE_SIM_SEED`).
//!
//! What the scripts do, drawn from the seed: the app's instances answer
//! late and out of order, die (quietly, mid-line, right after they
//! accepted), turn the client away with a refusal line, are away for a
//! while between instances, and take the session back from the replay; the
//! client sends requests under number and string ids, batches,
//! cancellations, `tools/list` now and then, writes in chunks of any size
//! and stops reading stdout for seconds. One session in ten has the real
//! answers cache (on disk, in a directory of its own), mostly holding what
//! an earlier app answered an earlier client, so that a client that comes
//! before the app is answered from it. The judge is tests/model's
//! (`tests/model/judge.rs`, shared): one answer per request, its own
//! result, a result the app wrote whole never replaced by an error, a list
//! one the app gave (also from the cache), lines in order, batches answered
//! in one array, ids echoed byte for byte, no torn line on either side; and
//! here also that the session ends within the drain grace of stdin's end,
//! in virtual time.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future;
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use serde_json::{json, Value};

use super::cache::Cache;
use super::session::Session;
use super::{BridgeError, Config, Connected, Connecting, Connector};
use crate::clock::{self, Virtual};

#[allow(dead_code)]
#[path = "../../tests/model/judge.rs"]
mod judge;
#[allow(dead_code)]
#[path = "../../tests/model/rng.rs"]
mod rng;

use judge::Judge;
use rng::Rng;

/// The protocol era a simulated client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Era {
    Legacy,
    Modern,
}

/// Most virtual time a session may take before it counts as hung.
const HUNG: Duration = Duration::from_secs(600);

/// One app instance's end of a connection, handed to the app's script.
struct Conn {
    reader: piper::Reader,
    writer: piper::Writer,
    instance: u64,
}

/// The endpoint: hands connections to the app's script while the app is
/// up; otherwise fails each attempt as a reset before the handshake, or,
/// while another user's process has taken the endpoint, as the server
/// check's refusal.
struct SimConnector {
    up: Rc<Cell<bool>>,
    squatted: Rc<Cell<bool>>,
    attempts: Rc<Cell<u64>>,
    conns: smol::channel::Sender<Conn>,
    rng: Rng,
}

impl Connector for SimConnector {
    type Reader = piper::Reader;
    type Writer = piper::Writer;

    fn connect(&mut self, _: bool, _: Duration) -> Connecting<'_, piper::Reader, piper::Writer> {
        self.attempts.set(self.attempts.get() + 1);
        if self.squatted.get() {
            return Box::pin(async {
                Err(BridgeError::Connect(crate::endpoint::ConnectError {
                    endpoint: "/sim".into(),
                    timeout: Duration::from_secs(5),
                    source: io::ErrorKind::PermissionDenied.into(),
                    fault: crate::endpoint::Fault::Untrusted {
                        server: "uid 1001".into(),
                        me: "uid 1000".into(),
                    },
                }))
            });
        }
        if !self.up.get() {
            return Box::pin(async {
                Err(BridgeError::Handshake {
                    endpoint: "/sim".into(),
                    source: io::ErrorKind::ConnectionReset.into(),
                })
            });
        }
        // Small pipes now and then, so that writes are partial and a
        // reader that stops holds the writer up.
        let capacity = if self.rng.chance(30) {
            self.rng.between(64, 4096) as usize
        } else {
            64 * 1024
        };
        let (app_reader, bridge_writer) = piper::pipe(capacity);
        let (bridge_reader, app_writer) = piper::pipe(capacity);
        let instance = self.attempts.get();
        let _ = self.conns.try_send(Conn {
            reader: app_reader,
            writer: app_writer,
            instance,
        });
        Box::pin(async move {
            Ok(Connected {
                reader: bridge_reader,
                writer: bridge_writer,
                instance: Some(instance),
                // The user the tests run as, whom the bridge trusts: what
                // the app answers may be kept and served from the cache.
                server: crate::endpoint::ServerUser::own().ok(),
            })
        })
    }
}

/// The bridge's stdout as another process's pipe: now and then a write or
/// a flush is put off to the next poll, so that the client (which, on a
/// real machine, runs beside the bridge) may read what was written before
/// the bridge goes on: what the bridge does after writing a reply (and
/// would not do if it were killed then) is then seen not done.
struct Preempted {
    inner: piper::Writer,
    rng: Rng,
}

impl Preempted {
    fn put_off(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let put_off = self.rng.chance(20);
        if put_off {
            cx.waker().wake_by_ref();
        }
        put_off
    }
}

impl futures_lite::AsyncWrite for Preempted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        if self.put_off(cx) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        if self.put_off(cx) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Where a long call's line says its length (as many digits).
const LEN_PLACEHOLDER: &str = "@@@@@@@@@@";

/// The length a long call's line says it has, once its start is in `buf`.
fn said_len(buf: &[u8]) -> Option<usize> {
    let key = b"\"_len\":\"";
    let at = buf.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = buf.get(at..at + LEN_PLACEHOLDER.len())?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The largest read a script makes.
const CHUNK: [u8; 8192] = [0; 8192];

/// Reads whole lines from a pipe in chunks of the script's choosing.
struct Lines {
    reader: piper::Reader,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    rng: Rng,
    /// Stop this many bytes short of the end of a long call that says its
    /// length ([`Lines::next`] then ends, `cut` set).
    short_of: Option<usize>,
    cut: bool,
}

impl Lines {
    /// The next whole line (without its newline), or `None` at the end
    /// (what is left without a newline is returned as a last line).
    async fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + at;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                self.scanned = 0;
                return Some(line);
            }
            self.scanned = self.buf.len();
            let mut want = self.rng.between(1, CHUNK.len() as u64) as usize;
            if let (Some(short), Some(len)) = (self.short_of, said_len(&self.buf)) {
                let stop = len.saturating_sub(short).max(1);
                if self.buf.len() >= stop {
                    self.cut = true;
                    return None;
                }
                want = want.min(stop - self.buf.len());
            }
            let mut chunk = [0; CHUNK.len()];
            match self.reader.read(&mut chunk[..want]).await {
                Ok(0) | Err(_) if self.buf.is_empty() => return None,
                Ok(0) | Err(_) => {
                    self.scanned = 0;
                    return Some(std::mem::take(&mut self.buf));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

impl Lines {
    /// Reads on, taking no line out, until `most` bytes are in, the end,
    /// or `wait` has passed: how many are in. A long call that says its
    /// length is read to `short` bytes before its end instead.
    async fn part(&mut self, mut most: usize, short: usize, wait: Duration) -> usize {
        let deadline = clock::now() + wait;
        let mut told = false;
        while self.buf.len() < most && clock::now() < deadline {
            if let (false, Some(len)) = (told, said_len(&self.buf)) {
                told = true;
                most = len.saturating_sub(short).max(1);
                continue;
            }
            let want =
                (self.rng.between(1, CHUNK.len() as u64) as usize).min(most - self.buf.len());
            let mut chunk = [0; CHUNK.len()];
            let read = async { Some(self.reader.read(&mut chunk[..want]).await) };
            let late = async {
                clock::at(deadline).await;
                None
            };
            match future::or(read, late).await {
                Some(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
        self.buf.len()
    }
}

/// Writes `bytes` in chunks of random size, with pauses; `false` when the
/// reader is gone.
async fn write_chunked(writer: &mut piper::Writer, bytes: &[u8], rng: &mut Rng) -> bool {
    let mut rest = bytes;
    let most = if bytes.len() > 64 * 1024 {
        64 * 1024
    } else {
        4096
    };
    while !rest.is_empty() {
        let n = (rng.between(1, most) as usize).min(rest.len());
        if writer.write_all(&rest[..n]).await.is_err() {
            return false;
        }
        rest = &rest[n..];
        if rng.chance(5) {
            clock::after(Duration::from_millis(rng.between(1, 50))).await;
        }
    }
    true
}

/// How one app instance ends.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// It serves until the bridge hangs up.
    Never,
    /// After this many lines read, it closes with what is unread.
    Quietly(u64),
    /// After this many lines read, it writes half an answer and closes.
    MidLine(u64),
    /// After this many lines read, it reads part of what follows (this
    /// many bytes at most: to the middle of a long line, where the bridge
    /// may have read the line's end from the client already) and closes.
    InLine(u64, usize),
    /// At the first long call that says its length, this many bytes short
    /// of its end, it closes.
    InLong(usize),
    /// It turns the client away: a refusal line first, then it closes.
    Refuses,
}

/// The app's script: instances one after another, as the bridge reaches
/// them, each drawn from the seed; between two, the app may be away.
async fn app(
    conns: smol::channel::Receiver<Conn>,
    legacy: bool,
    up: Rc<Cell<bool>>,
    squatted: Rc<Cell<bool>>,
    waits: SharedWaits,
    judge: Rc<Judge>,
    mut rng: Rng,
) {
    while let Ok(conn) = conns.recv().await {
        let death = match rng.below(20) {
            0..=11 => Death::Never,
            12..=15 => Death::Quietly(rng.between(1, 12)),
            16 => Death::Refuses,
            17 => Death::MidLine(rng.between(1, 12)),
            18 => Death::InLong(rng.between(1, 96 * 1024) as usize),
            _ => Death::InLine(
                rng.between(1, 12),
                match rng.chance(50) {
                    true => rng.between(1, 4096),
                    false => rng.between(4096, 700 * 1024),
                } as usize,
            ),
        };
        judge.event(format!("app: instance {} ({:?})", conn.instance, death));
        let served = instance(conn, death, legacy, &waits, &judge, rng.fork()).await;
        if served && rng.chance(40) {
            // Away for a while: restarting, or gone past the bounds.
            up.set(false);
            let away = match rng.below(10) {
                0..=6 => rng.between(10, 3000),
                7 | 8 => rng.between(3000, 12_000),
                _ => rng.between(12_000, 40_000),
            };
            // Now and then another user's process takes the endpoint
            // meanwhile (the bridge must not talk to it).
            let squat = rng.chance(15);
            judge.event(format!(
                "app: away for {} ms{}",
                away,
                if squat {
                    ", another user's process on the endpoint"
                } else {
                    ""
                }
            ));
            if squat {
                judge.endpoint_taken();
            }
            squatted.set(squat);
            clock::after(Duration::from_millis(away)).await;
            squatted.set(false);
            up.set(true);
        }
    }
}

/// One instance: answers what it is asked
/// (late, in any order) until it dies or the bridge hangs up. Whether it
/// died (as opposed to being left).
async fn instance(
    conn: Conn,
    death: Death,
    legacy: bool,
    waits: &SharedWaits,
    judge: &Rc<Judge>,
    mut rng: Rng,
) -> bool {
    let Conn {
        reader,
        writer,
        instance,
    } = conn;
    // An app upgraded now and then: its lists change between instances.
    let version = instance / 3;
    let answer = |message: &Value| answer(message, version, legacy);
    if let Death::Refuses = death {
        judge.app_refuses();
        let mut writer = writer;
        let refusal = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"project \"sim\" is not open"}}"#;
        let _ = write_chunked(&mut writer, &[&refusal[..], b"\n"].concat(), &mut rng).await;
        return true;
    }
    let writer = Rc::new(smol::lock::Mutex::new(writer));
    let mut lines = Lines {
        reader,
        buf: Vec::new(),
        scanned: 0,
        rng: rng.fork(),
        short_of: None,
        cut: false,
    };
    // No identity line: the connector stands for the endpoint's, which
    // sends it (tests/bridge.rs checks it through the binary).
    let mut read = 0u64;
    let mut questions = 0u64;
    let mut asked = std::collections::HashMap::new();
    // The requests handed to this instance before it served: once it
    // serves, their waits start again (a new outage, if it hangs up).
    let handed: Rc<std::cell::RefCell<Option<Vec<Value>>>> = Rc::default();
    *handed.borrow_mut() = Some(Vec::new());
    let answers = smol::LocalExecutor::new();
    let serve = async {
        if let Death::InLong(short) = death {
            lines.short_of = Some(short);
        }
        while let Some(line) = lines.next().await {
            read += 1;
            judge.event(format!(
                "app {} <- {}",
                instance,
                String::from_utf8_lossy(&line[..line.len().min(160)])
            ));
            let value: Value = match serde_json::from_slice(&line) {
                Ok(value) => value,
                Err(_) => {
                    judge.fail(format!(
                        "instance {} got a line that is not JSON: {}",
                        instance,
                        String::from_utf8_lossy(&line)
                    ));
                    continue;
                }
            };
            match death {
                Death::Quietly(n) if read >= n => return true,
                Death::InLine(n, most) if read >= n => {
                    // Bounded: what it waits for may wait for its answer.
                    let wait = Duration::from_millis(rng.between(0, 500));
                    let short = rng.between(1, 96 * 1024) as usize;
                    let cut = lines.part(most, short, wait).await;
                    judge.event(format!(
                        "app {} dies {} bytes into what follows",
                        instance, cut
                    ));
                    return true;
                }
                Death::MidLine(n) if read >= n => {
                    // Part of the answer to what it was just asked (past
                    // its id, so a bridge that streams it would tear it).
                    let mut half = match answer(&value) {
                        Some((reply, _)) => as_javascript_writes(&reply),
                        None => br#"{"jsonrpc":"2.0","id":"#.to_vec(),
                    };
                    half.truncate(rng.between(1, half.len() as u64 - 1) as usize);
                    judge.event(format!(
                        "app {} dies writing {}",
                        instance,
                        String::from_utf8_lossy(&half)
                    ));
                    let _ = writer.lock().await.write_all(&half).await;
                    return true;
                }
                _ => {}
            }
            let requests = match &value {
                Value::Array(items) => items.iter().collect(),
                one => vec![one],
            };
            let ids: Vec<Value> = requests
                .iter()
                .filter(|r| r.get("method").is_some())
                .filter_map(|r| r.get("id").cloned())
                .collect();
            match handed.borrow_mut().as_mut() {
                Some(before) => before.extend(ids),
                None => Waits::restart(waits, &ids),
            }
            if value.get("method").is_none() && value.get("id").is_some() {
                // The client's reply to a question of ours: ours, and to
                // that very question.
                let key = judge::id_key(&value["id"]);
                match asked.remove(&key) {
                    Some(nonce) if value["result"]["nonce"] == json!(nonce) => {}
                    Some(nonce) => judge.fail(format!(
                        "instance {} got a reply to its question {} ({}) carrying another \
                         question's answer: {}",
                        instance, value["id"], nonce, value
                    )),
                    None => judge.fail(format!(
                        "instance {} got a reply to a question it never asked (or asked \
                         and had answered): {}",
                        instance, value
                    )),
                }
                continue;
            }
            if value.get("id").is_some() && rng.chance(15) {
                // A question of its own, under the ids every instance
                // uses (the SDKs number theirs from 0).
                let id = questions;
                questions += 1;
                let nonce = format!("i{}-q{}", instance, id);
                asked.insert(judge::id_key(&json!(id)), nonce.clone());
                let question = json!({"jsonrpc":"2.0","id":id,"method":"elicitation/create",
                                      "params":{"message":nonce}});
                let mut line = serde_json::to_vec(&question).unwrap();
                line.push(b'\n');
                judge.event(format!("app {} asks {} ({})", instance, id, nonce));
                let mut writer = writer.lock().await;
                let _ = write_chunked(&mut writer, &line, &mut rng).await;
            }
            if let Some((reply, token)) = answer(&value) {
                for token in &token {
                    judge.app_got(token, instance as usize);
                }
                let delay = match rng.below(10) {
                    0..=5 => 0,
                    6..=8 => rng.between(1, 400),
                    _ => rng.between(400, 3000),
                };
                let writer = writer.clone();
                let judge = judge.clone();
                let (handed, waits) = (handed.clone(), waits.clone());
                let mut rng = rng.fork();
                answers
                    .spawn(async move {
                        if delay > 0 {
                            clock::after(Duration::from_millis(delay)).await;
                        }
                        let mut line = as_javascript_writes(&reply);
                        line.push(b'\n');
                        let mut writer = writer.lock().await;
                        judge.app_writes(&token, instance as usize);
                        let results = match &reply {
                            Value::Array(items) => items.iter().collect(),
                            one => vec![one],
                        };
                        for result in results.iter().filter_map(|r| r.get("result")) {
                            if result.get("tools").is_some() {
                                judge.app_listed(result);
                            }
                        }
                        judge.event(format!(
                            "app {} -> {}",
                            instance,
                            String::from_utf8_lossy(&line[..line.len().min(120)]).trim_end()
                        ));
                        if write_chunked(&mut writer, &line, &mut rng).await {
                            for token in token {
                                judge.app_answered(&token, instance as usize);
                            }
                            let before = handed.borrow_mut().take();
                            if let Some(before) = before {
                                Waits::restart(&waits, &before);
                            }
                        }
                    })
                    .detach();
            }
        }
        if lines.cut {
            judge.event(format!("app {} dies short of a long call's end", instance));
        }
        lines.cut
    };
    answers.run(serve).await
}

/// `message` as a JavaScript app writes it: ids that are no exact integer
/// (the double a large one was read into) in JavaScript's shortest form
/// (`18446744073709552000`, `2.234567890123457e+29`), not serde_json's.
fn as_javascript_writes(message: &Value) -> Vec<u8> {
    let mut text = serde_json::to_string(message).unwrap();
    let ids = match message {
        Value::Array(items) => items.iter().map(|item| &item["id"]).collect(),
        one => vec![&one["id"]],
    };
    for id in ids {
        if let Some(double) = id.as_f64().filter(|_| id.is_f64()) {
            let js = if double.abs() < 1e21 {
                format!("{}", double)
            } else {
                let e = format!("{:e}", double);
                match e.find("e-") {
                    Some(_) => e,
                    None => e.replacen('e', "e+", 1),
                }
            };
            let serde = serde_json::to_string(id).unwrap();
            text = text.replace(&format!("\"id\":{}", serde), &format!("\"id\":{}", js));
        }
    }
    text.into_bytes()
}

/// The app's answer to a message (by an app at `version`), and the tokens
/// of the results in it.
fn answer(message: &Value, version: u64, legacy: bool) -> Option<(Value, Vec<String>)> {
    if let Value::Array(items) = message {
        let mut replies = Vec::new();
        let mut tokens = Vec::new();
        for item in items {
            if let Some((reply, mut more)) = answer(item, version, legacy) {
                replies.push(reply);
                tokens.append(&mut more);
            }
        }
        return match replies.is_empty() {
            true => None,
            false => Some((Value::Array(replies), tokens)),
        };
    }
    let id = message.get("id")?.clone();
    let method = message.get("method")?.as_str()?;
    if legacy && method == "server/discover" {
        // An app of the 2025 era (an SDK 1.x server): no such method.
        let reply = json!({"jsonrpc":"2.0","id":id,
                           "error":{"code":-32601,"message":"Method not found"}});
        return Some((reply, Vec::new()));
    }
    let (result, token) = match method {
        "initialize" => (
            json!({"protocolVersion":"2025-06-18","capabilities":{"tools":{}},
                   "serverInfo":{"name":"sim","version":"1"}}),
            None,
        ),
        "server/discover" => (
            json!({"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},
                   "serverInfo":{"name":"sim","version":"1"}}),
            None,
        ),
        "tools/call" => {
            let token = message["params"]["arguments"]["token"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (
                json!({"content":[{"type":"text","text":token}]}),
                Some(token),
            )
        }
        // The token rides in params (no part of the cache's key), so the
        // judge can follow the request; the result does not carry it: a
        // cached one is given to later requests.
        "tools/list" => (
            json!({"tools":[{"name":"echo","description":format!("version {}", version),
                             "inputSchema":{"type":"object"}}]}),
            message["params"]["token"].as_str().map(str::to_string),
        ),
        _ => (json!({}), None),
    };
    let reply = json!({"jsonrpc":"2.0","id":id,"result":result});
    Some((reply, token.into_iter().collect()))
}

/// How long each request waited for its answer, net of the time the
/// client did not read stdout: the bridge's bounds hold in virtual time.
#[derive(Default)]
struct Waits {
    /// By id key: when its line was written, and `paused` then.
    sent: std::collections::HashMap<String, (Instant, Duration)>,
    /// How long the client has not read stdout, in all.
    paused: Duration,
    /// The longest wait so far, and its request.
    longest: (Duration, String),
    /// Longest a request may wait (see [`Waits::bound`]).
    bound: Duration,
}

type SharedWaits = Rc<std::cell::RefCell<Waits>>;

impl Waits {
    /// Longest a request may wait for its answer under `config`, net of the
    /// client's pauses in reading stdout, counted from when it was sent or
    /// last with an instance that serves (whose hang-up starts a new
    /// outage: docs/bridge.md, "The bounds"):
    /// held at most `--connect-timeout` at first, or through an outage of
    /// at most `--reconnect-timeout` (met within half a second), which an
    /// instance that reached the bridge just before the first bound may
    /// start; plus what the app itself takes (up to 3 s in this script)
    /// and half a second more for the deadline's tolerance.
    fn bound(config: &Config) -> Duration {
        config.connect_timeout
            + config.reconnect_timeout
            + Duration::from_secs(3)
            + Duration::from_millis(500)
    }

    fn sent(waits: &SharedWaits, ids: &[Value]) {
        let mut w = waits.borrow_mut();
        let at = (clock::now(), w.paused);
        for id in ids {
            w.sent.insert(judge::id_key(id), at);
        }
    }

    /// The requests `ids` are with an instance that serves: a hang-up of
    /// it starts a new outage, so their waits start again.
    fn restart(waits: &SharedWaits, ids: &[Value]) {
        let mut w = waits.borrow_mut();
        let at = (clock::now(), w.paused);
        for id in ids {
            if let Some(sent) = w.sent.get_mut(&judge::id_key(id)) {
                *sent = at;
            }
        }
    }

    /// The answer to `id` came: how long it waited.
    fn answered(waits: &SharedWaits, id: &Value) -> Option<Duration> {
        let mut w = waits.borrow_mut();
        let key = judge::id_key(id);
        let (at, paused) = w.sent.remove(&key)?;
        let waited = (clock::now() - at).saturating_sub(w.paused - paused);
        if waited > w.longest.0 {
            w.longest = (waited, key);
        }
        Some(waited)
    }
}

/// What the answer to the client's opening `server/discover` said: set
/// once it came, `true` when it was a 2026-07-28 result.
type Probe = Rc<Cell<Option<bool>>>;

/// The client's stdin, shared by its writing side and the replies to the
/// app's questions; `None` once closed.
type Stdin = Rc<smol::lock::Mutex<Option<piper::Writer>>>;

/// Writes one whole message to stdin (in chunks); `false` once stdin is
/// closed or its reader gone.
async fn send(stdin: &Stdin, bytes: &[u8], rng: &mut Rng) -> bool {
    match stdin.lock().await.as_mut() {
        Some(writer) => write_chunked(writer, bytes, rng).await,
        None => false,
    }
}

/// The client's reading side: every line on stdout is one whole JSON
/// value, every answer is judged, every question of the app's is answered
/// (mostly: in any of the forms SDKs write); stops reading for a while now
/// and then. Ends at stdout's end.
async fn client_reader(
    stdout: piper::Reader,
    stdin: Stdin,
    probe: Probe,
    waits: SharedWaits,
    kept: Option<(Config, Era)>,
    judge: Rc<Judge>,
    mut rng: Rng,
) {
    let mut lines = Lines {
        reader: stdout,
        buf: Vec::new(),
        scanned: 0,
        rng: rng.fork(),
        short_of: None,
        cut: false,
    };
    let mut number = 0u64;
    while let Some(line) = lines.next().await {
        number += 1;
        let (items, raws, array) = match serde_json::from_slice::<Value>(&line) {
            Ok(Value::Array(items)) => (items, judge::elements(&line), true),
            Ok(value) => (vec![value], vec![&line[..]], false),
            Err(_) => {
                judge.fail(format!(
                    "a line on stdout that is not JSON: {}",
                    String::from_utf8_lossy(&line)
                ));
                continue;
            }
        };
        for (item, raw) in items.iter().zip(raws) {
            match (item.get("method"), item.get("id")) {
                (Some(_), Some(id)) if rng.chance(90) => {
                    let reply = question_reply(id, &item["params"]["message"], &mut rng);
                    judge.event(format!(
                        "client answers {}",
                        String::from_utf8_lossy(&reply).trim_end()
                    ));
                    send(&stdin, &reply, &mut rng).await;
                }
                (Some(_), _) => judge.event(format!("client <- {}", item)),
                (None, id) => {
                    if id == Some(&json!(0)) && probe.get().is_none() {
                        let modern = item["result"]["supportedVersions"].is_array();
                        probe.set(Some(modern));
                    }
                    if let (Some((config, era)), Some(_)) = (&kept, item.get("result")) {
                        if id == Some(&json!(0)) {
                            opening_kept(config, *era, &judge);
                        }
                    }
                    if let Some(waited) = id.and_then(|id| Waits::answered(&waits, id)) {
                        let bound = waits.borrow().bound;
                        if waited > bound {
                            judge.fail(format!(
                                "request {} waited {:?} for its answer (at most {:?})",
                                item["id"], waited, bound
                            ));
                        }
                    }
                    judge.client_got_answer_as(item, raw, number, array)
                }
            }
        }
        if rng.chance(3) {
            let pause = Duration::from_millis(rng.between(200, 1500));
            clock::after(pause).await;
            waits.borrow_mut().paused += pause;
        }
    }
}

/// The client has a result to its opening: the cache holds one by now
/// (kept before the client has it), so that a client that kills the bridge
/// the moment it has its answer (the TypeScript 2.x SDK's probe) does not
/// take the answer with it.
fn opening_kept(config: &Config, era: Era, judge: &Judge) {
    let request = serde_json::to_vec(&opening(era)).unwrap();
    if Cache::of(config, None).answer(&request).is_none() {
        judge.fail("the client has a result to its opening, but the cache holds none: a bridge killed now would have lost it".to_string());
    }
}

/// The client's answer to the app's question `id`, carrying the question's
/// nonce: as the Python SDK writes it, in an array of one, or result first
/// with the id repeated inside (as the TypeScript SDK orders members, and
/// as a result may well contain).
fn question_reply(id: &Value, nonce: &Value, rng: &mut Rng) -> Vec<u8> {
    let (id, nonce) = (id.to_string(), nonce.to_string());
    let mut line = match rng.below(3) {
        0 => format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"nonce":{}}}}}"#,
            id, nonce
        ),
        1 => format!(
            r#"[{{"jsonrpc":"2.0","id":{},"result":{{"nonce":{}}}}}]"#,
            id, nonce
        ),
        _ => format!(
            r#"{{"jsonrpc":"2.0","result":{{"nonce":{},"id":{}}},"id":{}}}"#,
            nonce, id, id
        ),
    }
    .into_bytes();
    line.push(b'\n');
    line
}

/// The client's writing side: the era's opening, then requests (single,
/// batched, cancelled) with pauses; then waits for every answer, at most
/// `patience`, and closes stdin. Returns when stdin was closed.
async fn client_writer(
    stdin: Stdin,
    era: Era,
    probe: Option<Probe>,
    waits: SharedWaits,
    judge: Rc<Judge>,
    mut rng: Rng,
) -> Instant {
    let mut meta = meta(era);
    let opening = opening(era);
    judge.client_sent(&json!(0), "opening");
    let mut bytes = serde_json::to_vec(&opening).unwrap();
    bytes.push(b'\n');
    if era == Era::Legacy {
        bytes.extend_from_slice(INITIALIZED);
    }
    let mut alive = send(&stdin, &bytes, &mut rng).await;
    Waits::sent(&waits, &[json!(0)]);
    if let Some(probe) = probe {
        // A client that probes waits for the probe's answer; anything but
        // a 2026-07-28 result (the app's -32601, the bridge's error while
        // the app is away) and it falls back to the legacy era.
        let waited = clock::now();
        while probe.get().is_none() && clock::now() - waited < Duration::from_secs(120) {
            clock::after(Duration::from_millis(50)).await;
        }
        if probe.get() != Some(true) {
            judge.event("client: the probe failed; falls back to initialize");
            meta = json!({});
            let mut initialize = self::opening(Era::Legacy);
            initialize["id"] = json!("init");
            judge.client_sent(&json!("init"), "opening2");
            let mut bytes = serde_json::to_vec(&initialize).unwrap();
            bytes.push(b'\n');
            bytes.extend_from_slice(INITIALIZED);
            alive = alive && send(&stdin, &bytes, &mut rng).await;
            Waits::sent(&waits, &[json!("init")]);
        }
    }
    let requests = rng.between(1, 25);
    let mut next = 1u64;
    let mut open: Vec<Value> = Vec::new();
    while alive && next <= requests {
        let before = open.len();
        // Ids too large for a double to hold exactly, written as digits
        // and put in after serialising (serde_json would round them).
        let mut exact: Vec<(String, String)> = Vec::new();
        let mut call = |rng: &mut Rng| {
            let (id, spelled) = match rng.below(10) {
                0..=2 => {
                    let id = json!(format!("s-{}", next));
                    (id.clone(), id.to_string())
                }
                3 => {
                    let digits = match rng.below(2) {
                        0 => format!("{}8446744073709551616", next),
                        _ => format!("{}23456789012345678901234567", next),
                    };
                    let placeholder = format!("@id{}@", next);
                    exact.push((format!("\"{}\"", placeholder), digits.clone()));
                    (serde_json::from_str(&digits).unwrap(), digits)
                }
                _ => (json!(next), next.to_string()),
            };
            let token = format!("t{}", next);
            judge.client_sent(&id, &token);
            judge.client_spelled(&id, &spelled);
            open.push(id.clone());
            let shown = match id.is_f64() {
                true => json!(format!("@id{}@", next)),
                false => id,
            };
            next += 1;
            match rng.chance(10) {
                true => json!({"jsonrpc":"2.0","id":shown,"method":"tools/list",
                               "params":{"token":token,"_meta":meta}}),
                false => {
                    // Now and then a call longer than the bridge holds for an
                    // absent app (its hold limit is 1 MiB), or a batch past it.
                    // It says its line's length first, so that an app
                    // can die in it where the bridge may have read its end
                    // already (keys are written in order: `_len` leads).
                    match rng.chance(1) {
                        true => {
                            let pad = "x".repeat(rng.between(200 * 1024, 1300 * 1024) as usize);
                            json!({"jsonrpc":"2.0","id":shown,"method":"tools/call",
                                   "params":{"_len":LEN_PLACEHOLDER,"name":"echo",
                                             "arguments":{"token":token,"pad":pad},"_meta":meta}})
                        }
                        false => json!({"jsonrpc":"2.0","id":shown,"method":"tools/call",
                                        "params":{"name":"echo",
                                                  "arguments":{"token":token,"pad":""},
                                                  "_meta":meta}}),
                    }
                }
            }
        };
        let message = if rng.chance(15) {
            let n = rng.between(1, 4);
            let batch = Value::Array((0..n).map(|_| call(&mut rng)).collect());
            judge.client_batched(&open[open.len() - n as usize..]);
            batch
        } else {
            call(&mut rng)
        };
        let mut text = serde_json::to_string(&message).unwrap();
        for (placeholder, digits) in exact.drain(..) {
            text = text.replace(&placeholder, &digits);
        }
        let len = format!("{:01$}", text.len() + 1, LEN_PLACEHOLDER.len());
        text = text.replace(LEN_PLACEHOLDER, &len);
        let mut bytes = text.into_bytes();
        bytes.push(b'\n');
        if rng.chance(10) && !open.is_empty() {
            let id = open[rng.below(open.len() as u64) as usize].clone();
            judge.client_cancelled(&id);
            let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                                "params":{"requestId":id}});
            bytes.extend_from_slice(&serde_json::to_vec(&cancel).unwrap());
            bytes.push(b'\n');
        }
        alive = send(&stdin, &bytes, &mut rng).await;
        Waits::sent(&waits, &open[before..]);
        if rng.chance(50) {
            clock::after(Duration::from_millis(rng.between(1, 2000))).await;
        }
    }
    // Every request is answered while stdin is open: wait for the answers
    // (the bridge's bounds are tens of seconds), then close.
    let waited = clock::now();
    while !judge.unanswered().is_empty() && clock::now() - waited < Duration::from_secs(120) {
        clock::after(Duration::from_millis(500)).await;
    }
    judge.event("client: stdin closed");
    stdin.lock().await.take();
    clock::now()
}

/// What one session showed.
pub(super) struct Played {
    /// The promises it broke, with the events before.
    pub(super) failures: Vec<String>,
    /// Virtual time it took.
    pub(super) lasted: Duration,
    /// The longest any request waited for its answer (net of the client's
    /// pauses).
    pub(super) longest_wait: Duration,
}

/// The `_meta` of the client's requests in `era`.
fn meta(era: Era) -> Value {
    match era {
        Era::Legacy => json!({}),
        Era::Modern => json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                              "io.modelcontextprotocol/clientCapabilities":{}}),
    }
}

const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// The client's first request in `era`.
fn opening(era: Era) -> Value {
    match era {
        Era::Legacy => json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":"2025-06-18","capabilities":{},
                      "clientInfo":{"name":"sim","version":"1"}}}),
        Era::Modern => json!({"jsonrpc":"2.0","id":0,"method":"server/discover",
                              "params":{"_meta":meta(era)}}),
    }
}

/// What an earlier app (at `version`) answered an earlier client, kept in
/// the cache at `config`'s directory: its opening and its `tools/list`,
/// and so one of the lists the app gave.
fn remembered(config: &Config, era: Era, legacy: bool, version: u64, judge: &Judge) {
    let mut cache = Cache::of(config, None);
    if let Ok(server) = crate::endpoint::ServerUser::own() {
        cache.served_by(server);
    }
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list",
                      "params":{"token":"earlier","_meta":meta(era)}});
    let first = opening(if legacy { Era::Legacy } else { era });
    for request in [first, list] {
        if let Some((reply, _)) = answer(&request, version, legacy) {
            if reply["result"].get("tools").is_some() {
                judge.app_listed(&reply["result"]);
            }
            let result = serde_json::to_vec(&reply["result"]).unwrap();
            cache.learn(&serde_json::to_vec(&request).unwrap(), Some(&result));
        }
    }
}

/// Plays the session of `seed` in `era` to its end (see the [module
/// docs](self)).
pub(super) fn play(seed: u64, era: Era) -> Played {
    let installed = Virtual::install();
    let virtual_clock = installed.0.clone();
    let mut rng = Rng::new(seed);
    let judge = Rc::new(Judge::default());
    let mut config = Config::new("/sim");
    // One session in 10 with the real answers cache, in a directory of its
    // own (the disk is slow for thousands): what it serves while the app
    // is away is judged like any answer.
    let cache_dir = match rng.chance(10) {
        true => Some(std::env::temp_dir().join(format!(
            "mcp-bridge-sim-{}-{}-{:?}",
            std::process::id(),
            seed,
            era
        ))),
        false => None,
    };
    config.cache = cache_dir.clone();
    // A modern client probes, and one in four apps is of the legacy era:
    // it answers the probe `-32601`, and the client falls back to
    // `initialize` (rmcp's `Auto`, the Python SDK 2.x's default).
    let legacy_app = era == Era::Legacy || rng.chance(25);
    if cache_dir.is_some() && rng.chance(70) {
        remembered(&config, era, legacy_app, 1000, &judge);
    }
    let (conns_tx, conns_rx) = smol::channel::unbounded();
    let up = Rc::new(Cell::new(rng.chance(80)));
    let squatted = Rc::new(Cell::new(false));
    let connector = SimConnector {
        up: up.clone(),
        squatted: squatted.clone(),
        attempts: Rc::new(Cell::new(0)),
        conns: conns_tx,
        rng: rng.fork(),
    };
    let (stdin_reader, stdin_writer) = piper::pipe(rng.between(256, 64 * 1024) as usize);
    let (stdout_reader, stdout_writer) = piper::pipe(rng.between(256, 64 * 1024) as usize);
    let started = virtual_clock.now();
    let ex = smol::LocalExecutor::new();
    let answers = Box::new(Cache::of(&config, None));
    let session = Session::new(
        &config,
        connector,
        answers,
        stdin_reader,
        Preempted {
            inner: stdout_writer,
            rng: rng.fork(),
        },
        None,
        None,
    );
    let ended_at = Rc::new(Cell::new(None));
    let ended = ended_at.clone();
    let judge_end = judge.clone();
    let session = ex.spawn(async move {
        let ending = session.run().await;
        ended.set(Some(clock::now()));
        judge_end.event(format!("session ended: {:?}", ending));
        ending
    });
    if !up.get() {
        // The app starts later; another user's process may serve the
        // endpoint meanwhile.
        let (up, delay) = (up.clone(), rng.between(10, 8000));
        let squatted = squatted.clone();
        if rng.chance(10) {
            judge.event("another user's process on the endpoint until the app starts");
            judge.endpoint_taken();
            squatted.set(true);
        }
        ex.spawn(async move {
            clock::after(Duration::from_millis(delay)).await;
            squatted.set(false);
            up.set(true);
        })
        .detach();
    }
    let waits = SharedWaits::default();
    waits.borrow_mut().bound = Waits::bound(&config);
    ex.spawn(app(
        conns_rx,
        legacy_app,
        up,
        squatted,
        waits.clone(),
        judge.clone(),
        rng.fork(),
    ))
    .detach();
    let stdin: Stdin = Rc::new(smol::lock::Mutex::new(Some(stdin_writer)));
    let probe: Probe = Rc::new(Cell::new(None));
    let reader = ex.spawn(client_reader(
        stdout_reader,
        stdin.clone(),
        probe.clone(),
        waits.clone(),
        cache_dir.as_ref().map(|_| (config.clone(), era)),
        judge.clone(),
        rng.fork(),
    ));
    let falls_back = era == Era::Modern && legacy_app;
    let writer = ex.spawn(client_writer(
        stdin,
        era,
        falls_back.then_some(probe),
        waits.clone(),
        judge.clone(),
        rng.fork(),
    ));
    loop {
        while ex.try_tick() {}
        if session.is_finished() && reader.is_finished() {
            break;
        }
        if virtual_clock.since(started) > HUNG {
            judge.fail(format!("the session did not end within {:?}", HUNG));
            break;
        }
        match virtual_clock.next() {
            Some(at) => virtual_clock.advance(at),
            None => {
                judge.fail("every task waits and nothing can wake one: the session hangs");
                break;
            }
        }
    }
    if let (Some(closed), Some(ended)) =
        (future::block_on(future::poll_once(writer)), ended_at.get())
    {
        let took = ended.saturating_duration_since(closed);
        if took > config.drain_grace {
            judge.fail(format!(
                "the session ended {:?} after stdin's end (the drain grace is {:?})",
                took, config.drain_grace
            ));
        }
    }
    let open = judge.unanswered();
    if !open.is_empty() {
        judge.fail(format!("requests never answered: {:?}", open));
    }
    let failures = judge.failures();
    let mut report = Vec::new();
    if !failures.is_empty() {
        report.push(format!("seed {} ({:?}): {:?}", seed, era, failures));
        report.extend(judge.events().into_iter().map(|e| format!("  {}", e)));
    }
    let lasted = virtual_clock.since(started);
    drop(ex);
    drop(installed);
    if let Some(dir) = cache_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let longest_wait = waits.borrow().longest.0;
    Played {
        failures: report,
        lasted,
        longest_wait,
    }
}

/// Sessions per era a test run plays when not told otherwise.
const SESSIONS: u64 = 10_000;

/// The first seed played when not told otherwise.
const SEED: u64 = 0x7369_6d2d_6d63_7062;

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{}={:?} is not a number", name, text)),
    )
}

/// Plays the sessions of one era (`MCP_BRIDGE_SIM_SEED=N` from seed N,
/// `MCP_BRIDGE_SIM_SESSIONS=N` of them) and fails with the first broken
/// promises, each with its seed and the events before it.
fn play_many(era: Era) {
    let first = env_u64("MCP_BRIDGE_SIM_SEED").unwrap_or(SEED);
    let sessions = env_u64("MCP_BRIDGE_SIM_SESSIONS").unwrap_or(SESSIONS);
    let started = std::time::Instant::now();
    let mut failed = Vec::new();
    let mut lasted = Duration::ZERO;
    let mut longest_wait = (Duration::ZERO, 0);
    for n in 0..sessions {
        let seed = first.wrapping_add(n);
        let played = play(seed, era);
        lasted += played.lasted;
        if played.longest_wait > longest_wait.0 {
            longest_wait = (played.longest_wait, seed);
        }
        if !played.failures.is_empty() {
            if failed.len() < 3 {
                eprintln!("{}", played.failures.join("\n"));
            }
            failed.push(seed);
        }
    }
    let took = started.elapsed();
    println!(
        "{} simulated {:?} sessions from seed {} ({:?} of virtual time) in {:?}: {:.0} sessions/s, \
         {} failed; the longest wait for an answer {:?} (seed {})",
        sessions,
        era,
        first,
        lasted,
        took,
        sessions as f64 / took.as_secs_f64(),
        failed.len(),
        longest_wait.0,
        longest_wait.1
    );
    assert!(
        failed.is_empty(),
        "{} of {} {:?} sessions broke a promise; replay one with MCP_BRIDGE_SIM_SEED=<seed> \
         MCP_BRIDGE_SIM_SESSIONS=1: seeds {:?}",
        failed.len(),
        sessions,
        era,
        &failed[..failed.len().min(40)]
    );
}

#[test]
fn every_simulated_legacy_session_keeps_the_promises() {
    play_many(Era::Legacy);
}

#[test]
fn every_simulated_modern_session_keeps_the_promises() {
    play_many(Era::Modern);
}
