//! One scripted MCP host for the bridge's tests (`tests/sessions.rs`,
//! `tests/survive.rs`): an app's side written in the test, on a real Unix
//! socket, that answers as a [`Script`] says and reports every connection
//! and line as an event. It runs in the test's process ([`Host::start`]),
//! or, where a process must die or exit as an app does, in one of its own
//! ([`Host::spawn`]: the test binary again, as its [`HOST_TEST`] helper).
//! Built on [`bridge_host`](super::bridge_host), not the library's `host`,
//! so the bridge's tests run against the bridge-only build too.
//!
//! Also what the client says to it: [`INITIALIZE`], [`INITIALIZED`],
//! [`call`].

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use futures_lite::{future, StreamExt};
use serde_json::{json, Value};
use smol::channel::{Receiver, Sender};
use smol::process::{Child, ChildStdin, Command};
use smol::Task;

use super::bridge_host::{Connection, Listener};
use super::{helper, is_helper, within};

/// How many times in a row a test that races (a restart, a death) goes
/// through it.
pub const ROUNDS: usize = 20;

/// The client's `initialize` (id 1) and `notifications/initialized`.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{},"elicitation":{}},"clientInfo":{"name":"test-client","version":"1"}}}"#;
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// `tools/call` of `echo` with `text` under `id` (a host answers the text
/// `big` with 1 MiB, and never answers the text `never`).
pub fn call(id: u32, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}).to_string()
}

/// How a scripted host behaves; a JSON object on its way to a host process
/// (see [`Script::to_json`]).
#[derive(Clone, Debug)]
pub struct Script {
    /// `serverInfo.name`, and `servedBy` in its answers to calls and lists:
    /// who answered.
    pub name: String,
    /// The `protocolVersion` it answers `initialize` with.
    pub protocol: String,
    pub capabilities: Value,
    /// How long it takes to answer `initialize`.
    pub init_delay_ms: u64,
    /// For this long after it started, it answers `initialize` with an
    /// error ("still loading").
    pub reject_init_ms: u64,
    /// It dies on reading a line with this method (a host process exits;
    /// in this process, the connection closes).
    pub die_on: String,
    /// On `notifications/initialized` it asks the client `roots/list`
    /// (id 0) and answers nothing else until the client replies.
    pub roots_on_initialized: bool,
    /// It answers `resources/subscribe` one after the other, each this long
    /// after the one before (reading on meanwhile); at once when 0.
    pub subscribe_delay_ms: u64,
    /// Methods it never answers.
    pub ignore: Vec<String>,
    /// Lines it sends when `notifications/initialized` comes.
    pub on_initialized: Vec<Value>,
    /// It turns every bridge away: with this refusal line's message (a
    /// JSON-RPC error with a `null` id), or, when empty, by closing the
    /// connection without a word. `None`: it serves.
    pub refuse: Option<String>,
    /// When a host process is told to stop, it closes its connections, then
    /// keeps its listener this long without accepting (a bridge reconnecting
    /// at once lands in a backlog never served), then exits; at once when 0.
    pub linger_ms: u64,
}

impl Script {
    /// A well-behaved app called `name`: protocol 2025-06-18, tools with
    /// `listChanged`.
    pub fn named(name: &str) -> Script {
        Script {
            name: name.to_string(),
            protocol: "2025-06-18".into(),
            capabilities: json!({"tools": {"listChanged": true}}),
            init_delay_ms: 0,
            reject_init_ms: 0,
            die_on: String::new(),
            roots_on_initialized: false,
            subscribe_delay_ms: 0,
            ignore: Vec::new(),
            on_initialized: Vec::new(),
            refuse: None,
            linger_ms: 0,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "protocol": self.protocol,
            "capabilities": self.capabilities,
            "init_delay_ms": self.init_delay_ms,
            "reject_init_ms": self.reject_init_ms,
            "die_on": self.die_on,
            "roots_on_initialized": self.roots_on_initialized,
            "subscribe_delay_ms": self.subscribe_delay_ms,
            "ignore": self.ignore,
            "on_initialized": self.on_initialized,
            "refuse": self.refuse,
            "linger_ms": self.linger_ms,
        })
    }

    fn from_json(value: &Value) -> Script {
        let text = |key: &str| value[key].as_str().unwrap().to_string();
        let number = |key: &str| value[key].as_u64().unwrap();
        Script {
            name: text("name"),
            protocol: text("protocol"),
            capabilities: value["capabilities"].clone(),
            init_delay_ms: number("init_delay_ms"),
            reject_init_ms: number("reject_init_ms"),
            die_on: text("die_on"),
            roots_on_initialized: value["roots_on_initialized"].as_bool().unwrap(),
            subscribe_delay_ms: number("subscribe_delay_ms"),
            ignore: value["ignore"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_string())
                .collect(),
            on_initialized: value["on_initialized"].as_array().unwrap().clone(),
            refuse: value["refuse"].as_str().map(str::to_string),
            linger_ms: number("linger_ms"),
        }
    }

    /// Its answer to `server/discover`.
    pub fn discovered(&self) -> Value {
        json!({"supportedVersions": ["2026-07-28"], "capabilities": self.capabilities, "serverInfo": {"name": self.name, "version": "1"}, "resultType": "complete"})
    }
}

/// Where a host's events go: `{"event": "ready" | "connected" | "line" |
/// "partial" | "junk" | "answered" | "dying" | "closed", "conn": n, ...}`.
type Emit = Arc<dyn Fn(Value) + Send + Sync>;

/// The lines the test gives a host to send, to its latest connection.
type Latest = Arc<Mutex<Option<Sender<String>>>>;

/// Accepts bridges at `listener` until `stop` fires (or the returned task
/// is cancelled), serving each as `script` says (see [`Conn`]); gives the
/// listener back, still bound, when stopped.
fn serve(
    listener: Listener,
    script: Script,
    emit: Emit,
    latest: Latest,
    connections: Arc<Mutex<Vec<Task<()>>>>,
    exit_on_die: bool,
    stop: Receiver<()>,
) -> Task<Listener> {
    let script = Arc::new(script);
    let started = Instant::now();
    smol::spawn(async move {
        let mut number = 0;
        loop {
            let next = future::or(async { Some(listener.accept().await) }, async {
                let _ = stop.recv().await;
                None
            });
            let connection = match next.await {
                None => return listener,
                Some(Ok(connection)) => connection,
                Some(Err(_)) => continue,
            };
            let (conn, outbox) = Conn::new(
                number,
                &connection,
                script.clone(),
                emit.clone(),
                &latest,
                started,
                exit_on_die,
            );
            connections
                .lock()
                .unwrap()
                .push(smol::spawn(conn.run(connection, outbox)));
            number += 1;
        }
    })
}

/// One bridge's connection to a scripted host: every line it reads is an
/// event (with how many subscriptions it had answered by then), and is
/// answered as the script says, in order.
struct Conn {
    n: usize,
    script: Arc<Script>,
    emit: Emit,
    out: Sender<String>,
    started: Instant,
    exit_on_die: bool,
    /// Waiting for the client's answer to `roots/list`.
    blocked: bool,
    queue: VecDeque<Value>,
    /// Subscriptions to answer, one after the other.
    subscriber: Option<Sender<Value>>,
    answered: Arc<AtomicUsize>,
    tasks: Vec<Task<()>>,
}

impl Conn {
    fn new(
        n: usize,
        connection: &Connection,
        script: Arc<Script>,
        emit: Emit,
        latest: &Latest,
        started: Instant,
        exit_on_die: bool,
    ) -> (Conn, Receiver<String>) {
        let handshake = String::from_utf8(connection.handshake.to_line()).unwrap();
        emit(json!({"event": "connected", "conn": n, "handshake": handshake}));
        let (out, outbox) = smol::channel::unbounded::<String>();
        *latest.lock().unwrap() = Some(out.clone());
        let mut tasks = Vec::new();
        let answered = Arc::new(AtomicUsize::new(0));
        let subscriber = if script.subscribe_delay_ms > 0 {
            let (ids, queued) = smol::channel::unbounded::<Value>();
            let (out, answered, emit) = (out.clone(), answered.clone(), emit.clone());
            let pause = Duration::from_millis(script.subscribe_delay_ms);
            tasks.push(smol::spawn(async move {
                while let Ok(id) = queued.recv().await {
                    Timer::after(pause).await;
                    let _ = out.try_send(result(&id, json!({})).to_string());
                    let count = answered.fetch_add(1, Ordering::SeqCst) + 1;
                    emit(json!({"event": "answered", "conn": n, "count": count}));
                }
            }));
            Some(ids)
        } else {
            None
        };
        let conn = Conn {
            n,
            script,
            emit,
            out,
            started,
            exit_on_die,
            blocked: false,
            queue: VecDeque::new(),
            subscriber,
            answered,
            tasks,
        };
        (conn, outbox)
    }

    /// Reads the connection to its end (or the host's death), writing
    /// what `outbox` brings as it comes. One task holds the connection, so
    /// that cancelling it closes the connection.
    async fn run(mut self, connection: Connection, outbox: Receiver<String>) {
        let (mut reader, mut writer) = (connection.reader, connection.writer);
        if let Some(message) = &self.script.refuse {
            if !message.is_empty() {
                let refusal = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
                let _ = writer.write_all(format!("{}\n", refusal).as_bytes()).await;
            }
            (self.emit)(json!({"event": "closed", "conn": self.n}));
            return;
        }
        let mut pending = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        'reading: loop {
            let read = async { Ok(reader.read(&mut buf).await) };
            let write = async { Err(outbox.recv().await) };
            let n = match future::or(write, read).await {
                Err(Ok(line)) => {
                    let mut bytes = line.into_bytes();
                    bytes.push(b'\n');
                    if writer.write_all(&bytes).await.is_err() {
                        break;
                    }
                    continue;
                }
                Err(Err(_)) | Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(at) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                if !self.take(&line[..at]).await {
                    break 'reading;
                }
            }
            if !pending.is_empty() {
                let text = String::from_utf8_lossy(&pending).into_owned();
                (self.emit)(json!({"event": "partial", "conn": self.n, "text": text}));
            }
        }
        (self.emit)(json!({"event": "closed", "conn": self.n}));
        for task in self.tasks.drain(..) {
            task.cancel().await;
        }
    }

    /// One whole line: false when the host dies of it.
    async fn take(&mut self, line: &[u8]) -> bool {
        let message: Value = match serde_json::from_slice(line) {
            Ok(message) => message,
            Err(_) => {
                let text = String::from_utf8_lossy(line).into_owned();
                (self.emit)(json!({"event": "junk", "conn": self.n, "text": text}));
                return true;
            }
        };
        let answered = self.answered.load(Ordering::SeqCst);
        (self.emit)(
            json!({"event": "line", "conn": self.n, "line": message, "answered": answered}),
        );
        if self.blocked && message.get("method").is_none() && message["id"] == json!(0) {
            self.blocked = false;
        } else {
            self.queue.push_back(message);
        }
        while !self.blocked {
            match self.queue.pop_front() {
                Some(message) => {
                    if !self.act(message).await {
                        return false;
                    }
                }
                None => break,
            }
        }
        true
    }

    fn send(&self, message: Value) {
        let _ = self.out.try_send(message.to_string());
    }

    /// Does what the script says to one message: false when the host dies.
    async fn act(&mut self, message: Value) -> bool {
        let method = match message["method"].as_str() {
            Some(method) => method.to_string(),
            None => return true,
        };
        let script = self.script.clone();
        if method == script.die_on {
            (self.emit)(json!({"event": "dying", "conn": self.n}));
            if self.exit_on_die {
                std::process::exit(0);
            }
            return false;
        }
        if script.ignore.contains(&method) {
            return true;
        }
        let id = message["id"].clone();
        let served_by = &script.name;
        match method.as_str() {
            "initialize" => {
                if self.started.elapsed() < Duration::from_millis(script.reject_init_ms) {
                    self.send(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "still loading"}}));
                    return true;
                }
                Timer::after(Duration::from_millis(script.init_delay_ms)).await;
                self.send(json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": script.protocol,
                    "capabilities": script.capabilities,
                    "serverInfo": {"name": served_by, "version": "1"}}}));
            }
            "notifications/initialized" => {
                for line in &script.on_initialized {
                    self.send(line.clone());
                }
                if script.roots_on_initialized {
                    self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"}));
                    self.blocked = true;
                }
            }
            "server/discover" => self.send(json!({"jsonrpc": "2.0", "id": id, "result": script.discovered()})),
            "subscriptions/listen" => self.send(json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
                "_meta": {"io.modelcontextprotocol/subscriptionId": id},
                "notifications": message["params"]["notifications"]}})),
            "resources/subscribe" if self.subscriber.is_some() => {
                let _ = self.subscriber.as_ref().unwrap().try_send(id);
            }
            "tools/list" => self.send(result(
                &id,
                json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}], "servedBy": served_by}),
            )),
            "tools/call" => {
                let mut text = message["params"]["arguments"]["text"].clone();
                if text == "big" {
                    text = json!("b".repeat(1024 * 1024));
                }
                if text != "never" {
                    self.send(result(
                        &id,
                        json!({"content": [{"type": "text", "text": text}], "servedBy": served_by}),
                    ));
                }
            }
            _ if message.get("id").is_some() => self.send(result(&id, json!({}))),
            _ => {}
        }
        true
    }
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// The test that is a host process in each test binary that spawns one:
/// `#[test] fn scripted_host() { support::scripted::host_process() }`.
pub const HOST_TEST: &str = "scripted_host";
/// Set (to the socket path) in a host process.
const HOST_SOCKET: &str = "MCP_BRIDGE_TEST_HOST_SOCKET";
/// Set (to the script, JSON) in a host process.
const HOST_SCRIPT: &str = "MCP_BRIDGE_TEST_HOST_SCRIPT";
/// What starts a host process's events on its stdout (the test harness
/// writes its own text there too).
const EVENT_MARK: &str = "scripted-host-event ";

/// How a host runs.
enum Run {
    /// In this process: its tasks, cancelled to stop it.
    Here {
        accepting: Task<Listener>,
        connections: Arc<Mutex<Vec<Task<()>>>>,
        latest: Latest,
        /// Kept, so that the accepting never stops on its own.
        _stop: Sender<()>,
    },
    /// A process of its own (this test binary, as [`host_process`]).
    Process {
        child: Child,
        stdin: Option<ChildStdin>,
        _reading: Task<()>,
    },
}

/// A scripted host (see [`Script`]), and what it reported so far.
pub struct Host {
    events: Receiver<Value>,
    /// Every event so far, in order; [`Host::until`] looks from `cursor`.
    pub seen: Vec<Value>,
    cursor: usize,
    run: Run,
}

impl Host {
    /// A host in this process, listening at `socket` when this returns.
    pub fn start(socket: &Path, script: Script) -> Host {
        let listener = Listener::bind(socket).unwrap();
        let (events, received) = smol::channel::unbounded();
        let emit: Emit = Arc::new(move |event| {
            let _ = events.try_send(event);
        });
        let latest = Latest::default();
        let connections = Arc::default();
        let (stop, stopped) = smol::channel::bounded(1);
        let accepting = serve(
            listener,
            script,
            emit,
            latest.clone(),
            Arc::clone(&connections),
            false,
            stopped,
        );
        Host {
            events: received,
            seen: Vec::new(),
            cursor: 0,
            run: Run::Here {
                accepting,
                connections,
                latest,
                _stop: stop,
            },
        }
    }

    /// A host process (this test binary, run as [`host_process`]),
    /// listening at `socket` when this returns.
    pub async fn spawn(socket: &Path, script: Script) -> Host {
        let mut child = Command::from(helper(HOST_TEST))
            .env(HOST_SOCKET, socket)
            .env(HOST_SCRIPT, script.to_json().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (events, received) = smol::channel::unbounded();
        let reading = smol::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next().await {
                // The harness's "test scripted_host ... " may come first.
                if let Some(at) = line.find(EVENT_MARK) {
                    let event = &line[at + EVENT_MARK.len()..];
                    let _ = events.send(serde_json::from_str(event).unwrap()).await;
                }
            }
        });
        let mut host = Host {
            events: received,
            seen: Vec::new(),
            cursor: 0,
            run: Run::Process {
                stdin: child.stdin.take(),
                child,
                _reading: reading,
            },
        };
        host.until("the host to listen", |e| e["event"] == "ready")
            .await;
        host
    }

    /// Takes in the events that came so far.
    fn drain(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.seen.push(event);
        }
    }

    /// The next event after the last one found that `matches`, waiting for
    /// it (and failing the test after [`HANG_GUARD`]).
    pub async fn until(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        loop {
            self.drain();
            if let Some(at) = self.seen[self.cursor..].iter().position(&matches) {
                self.cursor += at + 1;
                return self.seen[self.cursor - 1].clone();
            }
            let event = within(what, self.events.recv()).await;
            match event {
                Ok(event) => self.seen.push(event),
                Err(_) => panic!("the host ended before {}; it saw {:?}", what, self.seen),
            }
        }
    }

    /// The next line the host got that `matches`.
    pub async fn got(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let event = self
            .until(what, |e| e["event"] == "line" && matches(&e["line"]))
            .await;
        event["line"].clone()
    }

    /// The next line with `method` the host got.
    pub async fn got_method(&mut self, method: &str) -> Value {
        self.got(method, |line| line["method"] == method).await
    }

    /// Every line the host got so far.
    pub fn lines(&mut self) -> Vec<Value> {
        self.drain();
        let lines = self.seen.iter().filter(|e| e["event"] == "line");
        lines.map(|e| e["line"].clone()).collect()
    }

    /// Every event of `kind` so far.
    pub fn events_of(&mut self, kind: &str) -> Vec<Value> {
        self.drain();
        self.seen
            .iter()
            .filter(|e| e["event"] == kind)
            .cloned()
            .collect()
    }

    /// Sends `message` to the host's latest connection.
    pub async fn send(&mut self, message: Value) {
        match &mut self.run {
            Run::Here { latest, .. } => {
                let latest = latest.lock().unwrap();
                latest
                    .as_ref()
                    .expect("a connection")
                    .try_send(message.to_string())
                    .unwrap();
            }
            Run::Process { stdin, .. } => {
                let stdin = stdin.as_mut().unwrap();
                stdin
                    .write_all(format!("{}\n", message).as_bytes())
                    .await
                    .unwrap();
                stdin.flush().await.unwrap();
            }
        }
    }

    /// Stops the host as an app's exit does: its socket is gone and every
    /// connection closed when this returns.
    pub async fn stop(self) {
        match self.run {
            Run::Here {
                accepting,
                connections,
                ..
            } => {
                accepting.cancel().await;
                let open = std::mem::take(&mut *connections.lock().unwrap());
                for connection in open {
                    connection.cancel().await;
                }
            }
            Run::Process {
                mut child, stdin, ..
            } => {
                drop(stdin);
                within("the host to exit", child.status()).await.unwrap();
            }
        }
    }

    /// SIGKILLs a host process, without waiting for it to die.
    pub fn sigkill(&mut self) {
        match &mut self.run {
            Run::Process { child, .. } => child.kill().unwrap(),
            Run::Here { .. } => panic!("only a host process can be killed"),
        }
    }

    /// Waits for a host process to be gone (killed, or dead of its script).
    pub async fn reaped(&mut self) {
        if let Run::Process { child, .. } = &mut self.run {
            within("the host to die", child.status()).await.unwrap();
        }
    }

    /// SIGKILLs a host process and waits until it is gone.
    pub async fn kill(mut self) {
        self.sigkill();
        self.reaped().await
    }
}

/// The host process [`Host::spawn`] starts: the body of the test
/// [`HOST_TEST`] in each binary that spawns one. Run as that binary's helper
/// ([`helper`]), it serves at [`HOST_SOCKET`] as [`HOST_SCRIPT`] says,
/// writes its events on stdout, sends each line it reads on stdin to its
/// latest connection, and when stdin ends stops as the script says
/// ([`Script::linger_ms`]) and exits. Run as a plain test it does nothing:
/// every test that spawns a host checks it.
pub fn host_process() {
    if !is_helper(HOST_TEST) {
        return;
    }
    let socket = PathBuf::from(std::env::var_os(HOST_SOCKET).unwrap());
    let script: Value = serde_json::from_str(&std::env::var(HOST_SCRIPT).unwrap()).unwrap();
    let script = Script::from_json(&script);
    let linger = Duration::from_millis(script.linger_ms);
    let emit: Emit = Arc::new(|event| {
        let stdout = std::io::stdout();
        let mut stdout = stdout.lock();
        let _ = writeln!(stdout, "{}{}", EVENT_MARK, event);
        let _ = stdout.flush();
    });
    smol::block_on(async {
        let listener = Listener::bind(&socket).unwrap();
        let latest = Latest::default();
        let connections: Arc<Mutex<Vec<Task<()>>>> = Arc::default();
        let (stop, stopped) = smol::channel::bounded(1);
        let accepting = serve(
            listener,
            script,
            emit.clone(),
            latest.clone(),
            connections.clone(),
            true,
            stopped,
        );
        emit(json!({"event": "ready"}));
        let lines = smol::unblock(move || {
            use std::io::BufRead;
            for line in std::io::stdin().lock().lines() {
                let line = line.unwrap();
                if let Some(out) = latest.lock().unwrap().as_ref() {
                    let _ = out.try_send(line);
                }
            }
        });
        lines.await;
        if !linger.is_zero() {
            let _ = stop.send(()).await;
            let listener = accepting.await;
            let open = std::mem::take(&mut *connections.lock().unwrap());
            for connection in open {
                connection.cancel().await;
            }
            Timer::after(linger).await;
            drop(listener);
        }
        std::process::exit(0);
    });
}

// ---------------------------------------------------------------------------
// An instance the test drives line by line

/// An app instance the test drives line by line, where a [`Script`] cannot
/// say it (`tests/replies.rs`): it reads only when told, so that what the
/// bridge sends can be left unread when it goes
/// ([`Manual::close_unread`]), as an app that dies with lines in its
/// receive queue does (on Linux, its end then resets the bridge's read).
pub struct Manual {
    listener: Listener,
    conn: Option<Connection>,
}

impl Manual {
    /// Listens at `socket` when this returns.
    pub fn bind(socket: &Path) -> Manual {
        Manual {
            listener: Listener::bind(socket).unwrap(),
            conn: None,
        }
    }

    /// Takes the next bridge's connection.
    pub async fn accept(&mut self) {
        self.conn = Some(
            within("a bridge to connect", self.listener.accept())
                .await
                .unwrap(),
        );
    }

    /// The next line the bridge sent, parsed.
    pub async fn line(&mut self) -> Value {
        let reader = &mut self.conn.as_mut().expect("a connection").reader;
        let mut line = String::new();
        within("a line from the bridge", reader.read_line(&mut line))
            .await
            .unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {:?}", e, line))
    }

    /// Writes `message` and its newline.
    pub async fn send(&mut self, message: &Value) {
        let writer = &mut self.conn.as_mut().expect("a connection").writer;
        let line = format!("{}\n", message);
        writer.write_all(line.as_bytes()).await.unwrap();
    }

    /// Accepts the next bridge and answers its `initialize` as `name`, with
    /// tools that change; returns the `initialize` it got.
    pub async fn open(&mut self, name: &str) -> Value {
        self.accept().await;
        let initialize = self.line().await;
        assert_eq!(initialize["method"], "initialize", "{}", initialize);
        let answer = result(
            &initialize["id"],
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}}, "serverInfo": {"name": name, "version": "1"}}),
        );
        self.send(&answer).await;
        initialize
    }

    /// Waits until the bridge has sent `bytes` after what was read (they
    /// sit unread in the connection's receive queue: looked at, not
    /// taken), then goes away with them unread, listener and all.
    pub async fn close_unread(mut self, bytes: &[u8]) {
        let conn = self.conn.take().expect("a connection");
        assert!(conn.reader.buffer().is_empty(), "already read");
        let mut queued = vec![0u8; bytes.len() + 1];
        let what = format!("{:?} from the bridge", String::from_utf8_lossy(bytes));
        within(&what, async {
            loop {
                let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
                let n = match rustix::net::recv(&conn.writer, &mut queued[..], flags) {
                    Ok((n, _)) => n,
                    Err(rustix::io::Errno::AGAIN) => 0,
                    Err(e) => panic!("peeking at the connection: {}", e),
                };
                assert!(
                    bytes.starts_with(&queued[..n.min(bytes.len())]),
                    "the bridge sent {:?}",
                    String::from_utf8_lossy(&queued[..n])
                );
                if n >= bytes.len() {
                    assert_eq!(n, bytes.len(), "more than {}", what);
                    return;
                }
                // Bytes come on their own time: looked at again shortly.
                Timer::after(Duration::from_millis(5)).await;
            }
        })
        .await;
        drop(conn);
        drop(self.listener);
    }
}
