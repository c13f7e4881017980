//! The session engine driven over in-memory pipes: a scripted client on
//! one side, scripted app instances on the other, handed out by a fake
//! [`Connector`]. Each test is one branch of the state machine.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use serde_json::{json, Value};

use super::answers::{Answers, Learnt};
use super::cache::Cache;
use super::outage::Bounds;
use super::session::Session;
use super::{BridgeError, Config, Connected, Connecting, Connector, HOLD_LIMIT};
use crate::relay::Ending;

/// Longest any one step may take before the test fails as hung.
const GUARD: Duration = Duration::from_secs(30);

/// Pipe capacity: small, so a bridge that writes before it reads blocks.
const PIPE: usize = 16 * 1024;

/// Hands out in-memory app instances while `open`; otherwise each attempt
/// fails as a connection reset before the handshake would.
struct Fake {
    open: Rc<Cell<bool>>,
    attempts: Rc<Cell<u32>>,
    /// Every instance is this process (a dying listener's backlog, or one
    /// app that closes connections), when set.
    same: Rc<Cell<Option<u64>>>,
    apps: smol::channel::Sender<App>,
}

impl Connector for Fake {
    type Reader = piper::Reader;
    type Writer = piper::Writer;

    fn connect(
        &mut self,
        _resumed: bool,
        _budget: Duration,
    ) -> Connecting<'_, piper::Reader, piper::Writer> {
        self.attempts.set(self.attempts.get() + 1);
        if !self.open.get() {
            return Box::pin(async {
                Err(BridgeError::Handshake {
                    endpoint: "/fake".into(),
                    source: io::ErrorKind::ConnectionReset.into(),
                })
            });
        }
        let (app_reader, bridge_writer) = piper::pipe(PIPE);
        let (bridge_reader, app_writer) = piper::pipe(PIPE);
        let app = App {
            reader: BufReader::new(app_reader),
            writer: app_writer,
        };
        self.apps.try_send(app).unwrap();
        let instance = self
            .same
            .get()
            .or_else(|| Some(u64::from(self.attempts.get())));
        Box::pin(async move {
            Ok(Connected {
                reader: bridge_reader,
                writer: bridge_writer,
                instance,
                server: crate::endpoint::ServerUser::own().ok(),
            })
        })
    }
}

/// One app instance's end of its connection. Dropping it hangs up.
struct App {
    reader: BufReader<piper::Reader>,
    writer: piper::Writer,
}

impl App {
    async fn line(&mut self) -> Value {
        let mut line = String::new();
        within(self.reader.read_line(&mut line)).await.unwrap();
        assert!(
            line.ends_with('\n'),
            "the app got no whole line: {:?}",
            line
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {:?}", e, line))
    }

    async fn send(&mut self, message: Value) {
        self.try_send(message).await.unwrap();
    }

    async fn try_send(&mut self, message: Value) -> io::Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        within(self.writer.write_all(line.as_bytes())).await
    }

    /// Reads the replayed session's requests and answers them, declaring
    /// `capabilities`; returns the requests.
    async fn accept_replay(&mut self, capabilities: Value, requests: usize) -> Vec<Value> {
        let mut seen = Vec::new();
        for n in 0..requests {
            let request = self.line().await;
            let id = request["id"].as_str().unwrap_or_default();
            assert!(id.starts_with("mcp-bridge-replay-"), "{}", request);
            let result = if n == 0 {
                json!({"protocolVersion":"2025-06-18","capabilities": capabilities})
            } else {
                json!({})
            };
            self.send(json!({"jsonrpc":"2.0","id":request["id"],"result":result}))
                .await;
            seen.push(request);
            if n == 0 {
                assert_eq!(self.line().await["method"], "notifications/initialized");
            }
        }
        seen
    }
}

/// The client's end, and the test's handles on the fake connector.
struct Harness {
    stdin: Option<piper::Writer>,
    stdout: BufReader<piper::Reader>,
    apps: smol::channel::Receiver<App>,
    open: Rc<Cell<bool>>,
    attempts: Rc<Cell<u32>>,
    same: Rc<Cell<Option<u64>>>,
}

impl Harness {
    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.send_raw(line.as_bytes()).await;
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        within(stdin.write_all(bytes)).await.unwrap();
    }

    async fn line(&mut self) -> Value {
        let mut line = String::new();
        within(self.stdout.read_line(&mut line)).await.unwrap();
        assert!(line.ends_with('\n'), "no whole line on stdout: {:?}", line);
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {:?}", e, line))
    }

    async fn app(&mut self) -> App {
        within(self.apps.recv()).await.unwrap()
    }

    /// Starts a session: the client's `initialize` (id 0) answered by the
    /// first app with `capabilities`, then `notifications/initialized`.
    async fn initialized(&mut self, capabilities: Value) -> App {
        self.send(initialize(0, "t")).await;
        let mut app = self.app().await;
        assert_eq!(app.line().await["method"], "initialize");
        let result = json!({"protocolVersion":"2025-06-18","capabilities": capabilities});
        app.send(json!({"jsonrpc":"2.0","id":0,"result":result}))
            .await;
        assert_eq!(self.line().await["id"], 0);
        self.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
        assert_eq!(app.line().await["method"], "notifications/initialized");
        app
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Closes stdin and waits for the session to end (its stdout closes),
    /// with the apps still up; returns what it wrote meanwhile.
    async fn finish(mut self) -> Vec<Value> {
        self.stdin = None;
        let mut rest = Vec::new();
        loop {
            let mut line = String::new();
            within(self.stdout.read_line(&mut line)).await.unwrap();
            if line.is_empty() {
                return rest;
            }
            rest.push(serde_json::from_str(&line).unwrap());
        }
    }
}

async fn within<T>(work: impl Future<Output = T>) -> T {
    crate::wait::timeout(GUARD, work)
        .await
        .expect("a step of the test hung")
}

fn initialize(id: u64, name: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize",
           "params":{"protocolVersion":"2025-06-18","capabilities":{},
                     "clientInfo":{"name":name,"version":"1"}}})
}

fn call(id: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo"}})
}

fn reply(id: &Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}})
}

/// Bounds small enough for tests to go through many attempts quickly.
fn quick() -> Bounds {
    Bounds {
        reply_timeout: Duration::from_secs(2),
        stayed_up: Duration::from_millis(500),
        first_pause: Duration::from_millis(5),
        pause_cap: Duration::from_millis(40),
        crash_loop_limit: 1000,
        look_interval: Duration::from_millis(50),
    }
}

/// Runs `script` against a session with `bounds` and `config` (endpoint
/// `/fake`, reconnect timeout 20 s unless changed), the door open; returns
/// how the session ended and what the script returned.
fn run<T, F: Future<Output = T>>(
    bounds: Bounds,
    configure: impl FnOnce(&mut Config),
    script: impl FnOnce(Harness) -> F,
) -> (Result<Ending, BridgeError>, T) {
    run_with(true, bounds, configure, script)
}

/// [`run`], with the door closed at the start when `open` is false.
fn run_with<T, F: Future<Output = T>>(
    open: bool,
    bounds: Bounds,
    configure: impl FnOnce(&mut Config),
    script: impl FnOnce(Harness) -> F,
) -> (Result<Ending, BridgeError>, T) {
    let disk =
        |config: &Config, _: Written| -> Box<dyn Answers> { Box::new(Cache::of(config, None)) };
    run_answering(open, bounds, configure, disk, script)
}

/// What the session has written to stdout so far (whether or not the
/// client read it).
type Written = Rc<RefCell<Vec<u8>>>;

/// [`run_with`], the session answering from what `answers` makes of the
/// configuration and of what stdout was given.
fn run_answering<T, F: Future<Output = T>>(
    open: bool,
    bounds: Bounds,
    configure: impl FnOnce(&mut Config),
    answers: impl FnOnce(&Config, Written) -> Box<dyn Answers>,
    script: impl FnOnce(Harness) -> F,
) -> (Result<Ending, BridgeError>, T) {
    let mut config = Config::new("/fake");
    config.reconnect_timeout = Duration::from_secs(20);
    config.connect_timeout = Duration::from_millis(300);
    config.drain_grace = Duration::from_millis(200);
    // Not the user's own cache.
    config.cache = None;
    configure(&mut config);
    let (stdin_reader, stdin_writer) = piper::pipe(PIPE);
    let (stdout_reader, stdout_writer) = piper::pipe(PIPE);
    let written = Written::default();
    let stdout_writer = Tee {
        inner: stdout_writer,
        written: written.clone(),
    };
    let (apps, app_receiver) = smol::channel::unbounded();
    let open = Rc::new(Cell::new(open));
    let attempts = Rc::new(Cell::new(0));
    let same = Rc::new(Cell::new(None));
    let fake = Fake {
        open: open.clone(),
        attempts: attempts.clone(),
        same: same.clone(),
        apps,
    };
    let harness = Harness {
        stdin: Some(stdin_writer),
        stdout: BufReader::new(stdout_reader),
        apps: app_receiver,
        open,
        attempts,
        same,
    };
    smol::block_on(async {
        let answers = answers(&config, written);
        let mut session = Session::new(
            &config,
            fake,
            answers,
            stdin_reader,
            stdout_writer,
            None,
            None,
        );
        session.engine.bounds = bounds;
        let (ended, out) = future::zip(session.run(), script(harness)).await;
        (ended, out)
    })
}

/// A writer that keeps a copy of what it was given.
struct Tee<W> {
    inner: W,
    written: Written,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Tee<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let wrote = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = wrote {
            this.written.borrow_mut().extend_from_slice(&buf[..n]);
        }
        wrote
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Answers kept in memory, noting for each answer learnt whether its
/// reply had been written to stdout by then, and by the time it was
/// settled.
#[derive(Default)]
struct Remembered {
    kept: Vec<(Vec<u8>, Vec<u8>)>,
    /// Each [`Answers::learn`]: the request, whether stdout had the app's
    /// reply to it when it came, and whether it had it at the
    /// [`Answers::settle`] after (`None`: not settled).
    learnt: Kept,
    written: Written,
}

/// See [`Remembered::learnt`].
type Kept = Rc<RefCell<Vec<(Learnt, bool, Option<bool>)>>>;

impl Remembered {
    fn replied(&self, learnt: &Learnt) -> bool {
        match &learnt.result {
            Some(result) => contains(&self.written.borrow(), result),
            None => false,
        }
    }
}

impl Answers for Remembered {
    fn answer(&mut self, request: &[u8]) -> Option<Vec<u8>> {
        let method = crate::envelope::json::member(request, "method")?;
        self.kept
            .iter()
            .find(|(kept, _)| kept.as_slice() == method)
            .map(|(_, result)| result.clone())
    }

    fn learn(&mut self, learnt: Learnt) {
        let replied = self.replied(&learnt);
        self.learnt.borrow_mut().push((learnt, replied, None));
    }

    fn settle(&mut self) {
        for (learnt, _, settled) in self.learnt.borrow_mut().iter_mut() {
            if settled.is_none() {
                *settled = Some(self.replied(learnt));
            }
        }
    }

    fn served_by(&mut self, _: crate::endpoint::ServerUser) {}
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn ended_well<T: std::fmt::Debug>(ended: Result<Ending, BridgeError>, out: T) -> T {
    assert!(
        matches!(ended, Ok(Ending::ClientClosed { .. })),
        "{:?}",
        ended
    );
    out
}

/// `data.reason` of a bridge's error, checking it says it is the bridge's.
fn reason(line: &Value) -> &str {
    let data = &line["error"]["data"];
    assert_eq!(data["source"], "mcp-bridge", "{}", line);
    assert_eq!(data["endpoint"], "/fake", "{}", line);
    data["reason"].as_str().unwrap_or_default()
}

fn listing(tools: bool, prompts: bool) -> Value {
    let mut caps = json!({});
    if tools {
        caps["tools"] = json!({"listChanged": true});
    }
    if prompts {
        caps["prompts"] = json!({"listChanged": true});
    }
    caps
}

#[test]
fn a_failed_resume_attempt_is_retried_and_lists_are_announced_as_the_client_was_told() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut told = listing(true, true);
            told["resources"] = json!({});
            let app = h.initialized(told).await;
            drop(app);
            // An instance that takes the connection and dies on the replay
            // (a dying app's backlog), then some resets, then a good one.
            let mut dying = h.app().await;
            assert_eq!(dying.line().await["method"], "initialize");
            drop(dying);
            h.open.set(false);
            while h.attempts.get() < 4 {
                async_io::Timer::after(Duration::from_millis(5)).await;
            }
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({"tools":{}}), 1).await;
            // The lists the client was told change, not those the new
            // instance has (resources had no listChanged).
            assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
            assert_eq!(
                h.line().await["method"],
                "notifications/prompts/list_changed"
            );
            h.send(call(1)).await;
            let request = app.line().await;
            assert_eq!(request["id"], 1);
            app.send(reply(&request["id"])).await;
            assert_eq!(h.line().await["id"], 1);
            assert_eq!(h.finish().await, Vec::<Value>::new());
            drop(app);
        },
    );
    ended_well(ended, ());
}

/// A list the client was given is announced changed after a restart even
/// when the app never declared `listChanged` (an app upgraded while away
/// may list other tools, and the client keeps what it has until told);
/// a list it was neither given nor told may change is not.
#[test]
fn a_list_the_client_was_given_is_announced_whatever_the_app_declared() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({"tools":{}, "prompts":{}})).await;
            h.send(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
                .await;
            assert_eq!(app.line().await["method"], "tools/list");
            app.send(json!({"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"old_a"}]}}))
                .await;
            assert_eq!(h.line().await["result"]["tools"][0]["name"], "old_a");
            drop(app);
            let mut app = h.app().await;
            app.accept_replay(json!({"tools":{}, "prompts":{}}), 1)
                .await;
            assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
            h.send(call(2)).await;
            let request = app.line().await;
            app.send(reply(&request["id"])).await;
            // The call's answer, and no prompts notification before it.
            assert_eq!(h.line().await["id"], 2);
            assert_eq!(h.finish().await, Vec::<Value>::new());
            drop(app);
        },
    );
    ended_well(ended, ());
}

#[test]
fn instances_that_die_before_they_serve_are_a_crash_loop_and_one_that_serves_is_taken_back() {
    let bounds = Bounds {
        crash_loop_limit: 4,
        ..quick()
    };
    let (ended, ()) = run(
        bounds,
        |_| {},
        |mut h| async move {
            drop(h.initialized(listing(true, false)).await);
            for _ in 0..5 {
                let mut app = h.app().await;
                app.accept_replay(json!({"tools":{}}), 1).await;
                assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
                drop(app);
            }
            // The fifth in a row is one too many: requests are answered at
            // once with the reason...
            h.send(call(7)).await;
            let answer = h.line().await;
            assert_eq!(answer["id"], 7);
            assert_eq!(reason(&answer), "crash_loop");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("crash-looping"), "{}", message);
            // ... and the bridge keeps looking: an instance that serves
            // takes the session back.
            let mut app = h.app().await;
            app.accept_replay(json!({"tools":{}}), 1).await;
            assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
            h.send(call(8)).await;
            let request = app.line().await;
            app.send(reply(&request["id"])).await;
            let answer = h.line().await;
            assert_eq!(answer["id"], 8);
            assert!(answer.get("result").is_some(), "{}", answer);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn an_app_that_restarts_after_serving_survives_every_restart() {
    let bounds = Bounds {
        crash_loop_limit: super::CRASH_LOOP_LIMIT,
        ..quick()
    };
    let (ended, ()) = run(
        bounds,
        |_| {},
        |mut h| async move {
            let mut first = Some(h.initialized(json!({})).await);
            for id in 1..=40u64 {
                let mut app = match first.take() {
                    Some(app) => app,
                    None => {
                        let mut app = h.app().await;
                        app.accept_replay(json!({}), 1).await;
                        app
                    }
                };
                h.send(call(id)).await;
                let request = app.line().await;
                app.send(reply(&request["id"])).await;
                let answer = h.line().await;
                assert_eq!(answer["id"], id);
                assert!(answer.get("result").is_some(), "{}", answer);
                drop(app);
            }
            h.open.set(false);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn an_outage_ends_at_its_deadline_and_the_bridge_then_looks_at_a_bounded_rate() {
    let started = std::time::Instant::now();
    let (ended, ()) = run(
        quick(),
        |config| config.reconnect_timeout = Duration::from_millis(600),
        |mut h| async move {
            drop(h.initialized(json!({})).await);
            h.send(call(3)).await;
            // Instances that take the connection and never answer the replay.
            let mut taken = Vec::new();
            let answer = loop {
                let next = future::or(async { Some(h.app().await) }, async {
                    smol::Timer::after(Duration::from_millis(20)).await;
                    None
                });
                match next.await {
                    Some(app) => taken.push(app),
                    None => {
                        let line = future::or(async { Some(h.line().await) }, async {
                            smol::Timer::after(Duration::from_millis(20)).await;
                            None
                        });
                        if let Some(line) = line.await {
                            break line;
                        }
                    }
                }
            };
            assert_eq!(answer["id"], 3);
            assert_eq!(reason(&answer), "app_not_running");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("did not take the session back"),
                "{}",
                message
            );
            let attempts = h.attempts.get();
            smol::Timer::after(Duration::from_millis(500)).await;
            // Absent: looked for every 50 ms here (once a second for real),
            // not in a loop.
            assert!(
                h.attempts.get() - attempts < 30,
                "{} attempts in 500 ms",
                h.attempts.get() - attempts
            );
            h.open.set(false);
            h.finish().await;
        },
    );
    // It ends when stdin does, whatever it was doing.
    let _ = ended;
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn held_requests_reach_an_app_that_answers_one_at_a_time_with_large_replies() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            drop(h.initialized(json!({})).await);
            h.open.set(false);
            // Well over the pipe's capacity held, each answered with 256 KiB.
            let padding = "p".repeat(4096);
            for id in 1..=40u64 {
                let mut request = call(id);
                request["params"]["padding"] = json!(padding);
                h.send(request).await;
            }
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let big = "r".repeat(256 * 1024);
            let serve = async {
                for id in 1..=40u64 {
                    let request = app.line().await;
                    assert_eq!(request["id"], id);
                    let answer = json!({"jsonrpc":"2.0","id":id,"result":{"text":big}});
                    app.send(answer).await;
                }
            };
            let read = async {
                for id in 1..=40u64 {
                    let line = h.line().await;
                    assert_eq!(line["id"], id, "{}", &line.to_string()[..80]);
                }
                h.close_stdin();
            };
            future::zip(serve, read).await;
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_line_cut_by_a_hang_up_goes_whole_to_the_next_instance() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({})).await;
            h.send_raw(br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"a":"#)
                .await;
            let mut start = [0u8; 8];
            app.reader.read_exact(&mut start).await.unwrap();
            drop(app);
            h.open.set(false);
            h.send_raw(b"\"tail-of-5\"}}\n").await;
            h.send(call(6)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let cut = app.line().await;
            assert_eq!(
                cut,
                json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"a":"tail-of-5"}})
            );
            assert_eq!(app.line().await["id"], 6);
            for id in [5, 6] {
                app.send(reply(&json!(id))).await;
                let answer = h.line().await;
                assert_eq!(answer["id"], id);
                assert!(answer.get("result").is_some(), "{}", answer);
            }
            // A second restart: the first request held in it goes through.
            drop(app);
            h.send(call(7)).await;
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let next = app.line().await;
            assert_eq!(next["id"], 7, "{}", next);
            app.send(reply(&next["id"])).await;
            assert_eq!(h.line().await["id"], 7);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_line_over_the_hold_limit_is_answered_at_once_and_none_of_it_is_delivered() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let app = h.initialized(json!({})).await;
            h.open.set(false);
            drop(app);
            let mut big = call(9);
            big["params"]["blob"] = json!("b".repeat(HOLD_LIMIT));
            let line = format!("{}\n", big);
            // The error comes while the app is still away.
            let (_, error) = future::zip(
                h.stdin.as_mut().unwrap().write_all(line.as_bytes()),
                async {
                    let mut text = String::new();
                    within(h.stdout.read_line(&mut text)).await.unwrap();
                    serde_json::from_str::<Value>(&text).unwrap()
                },
            )
            .await;
            assert_eq!(error["id"], 9);
            assert_eq!(reason(&error), "hold_limit");
            h.send(call(10)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            assert_eq!(app.line().await["id"], 10);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn the_replay_is_the_accepted_session_net_of_unsubscribes() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            // A rejected initialize, then the retry the app accepts.
            h.send(initialize(0, "first")).await;
            let mut app = h.app().await;
            app.line().await;
            app.send(json!({"jsonrpc":"2.0","id":0,"error":{"code":-32602,"message":"no"}}))
                .await;
            h.line().await;
            h.send(initialize(1, "second")).await;
            app.line().await;
            let caps = json!({"resources":{"subscribe":true,"listChanged":true},"logging":{}});
            app.send(json!({"jsonrpc":"2.0","id":1,"result":{"capabilities":caps}}))
                .await;
            h.line().await;
            h.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
                .await;
            app.line().await;
            let requests = [
                json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}),
                json!({"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"a://x"}}),
                json!({"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"b://y"}}),
                json!({"jsonrpc":"2.0","id":5,"method":"resources/unsubscribe","params":{"uri":"a://x"}}),
            ];
            for request in requests {
                h.send(request).await;
                let seen = app.line().await;
                app.send(reply(&seen["id"])).await;
                h.line().await;
            }
            drop(app);
            let mut app = h.app().await;
            let replayed = app.accept_replay(caps.clone(), 3).await;
            assert_eq!(replayed[0]["params"]["clientInfo"]["name"], "second");
            assert_eq!(replayed[1]["method"], "logging/setLevel");
            assert_eq!(replayed[2]["method"], "resources/subscribe");
            assert_eq!(replayed[2]["params"]["uri"], "b://y");
            assert_eq!(
                h.line().await["method"],
                "notifications/resources/list_changed"
            );
            // The replies to the replay were the bridge's: the next line the
            // client gets is the answer to its own request.
            h.send(call(6)).await;
            let request = app.line().await;
            assert_eq!(request["id"], 6);
            app.send(reply(&request["id"])).await;
            assert_eq!(h.line().await["id"], 6);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_thousand_subscriptions_are_replayed_without_waiting_for_each() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let caps = json!({"resources":{"subscribe":true}});
            let mut app = h.initialized(caps.clone()).await;
            for n in 0..1000u64 {
                let uri = format!("file:///r/{}", n);
                h.send(json!({"jsonrpc":"2.0","id":100 + n,"method":"resources/subscribe","params":{"uri":uri}}))
                    .await;
                let seen = app.line().await;
                app.send(reply(&seen["id"])).await;
                h.line().await;
            }
            drop(app);
            let mut app = h.app().await;
            let initialize = app.line().await;
            app.send(json!({"jsonrpc":"2.0","id":initialize["id"],"result":{"capabilities":caps}}))
                .await;
            assert_eq!(app.line().await["method"], "notifications/initialized");
            // All thousand arrive before any is answered.
            let mut ids = Vec::new();
            for _ in 0..1000 {
                let subscribe = app.line().await;
                assert_eq!(subscribe["method"], "resources/subscribe");
                ids.push(subscribe["id"].clone());
            }
            for id in &ids {
                app.send(reply(id)).await;
            }
            h.send(call(7)).await;
            let request = app.line().await;
            assert_eq!(request["id"], 7);
            app.send(reply(&request["id"])).await;
            assert_eq!(h.line().await["id"], 7);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn what_a_changed_app_cannot_take_back_is_said_and_not_replayed() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let told = json!({"tools":{"listChanged":true},"prompts":{},"resources":{"subscribe":true},"logging":{}});
            let mut app = h.initialized(told).await;
            for request in [
                json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}),
                json!({"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"a://x"}}),
            ] {
                h.send(request).await;
                let seen = app.line().await;
                app.send(reply(&seen["id"])).await;
                h.line().await;
            }
            drop(app);
            let mut app = h.app().await;
            let initialize = app.line().await;
            let result = json!({"protocolVersion":"2024-11-05","capabilities":{"tools":{}}});
            app.send(json!({"jsonrpc":"2.0","id":initialize["id"],"result":result}))
                .await;
            assert_eq!(app.line().await["method"], "notifications/initialized");
            let mut said = String::new();
            let mut notified = false;
            for _ in 0..6 {
                let line = h.line().await;
                match line["method"].as_str() {
                    Some("notifications/message") => {
                        assert_eq!(line["params"]["logger"], "mcp-bridge");
                        said.push_str(line["params"]["data"].as_str().unwrap());
                        said.push('\n');
                    }
                    Some("notifications/tools/list_changed") => notified = true,
                    other => panic!("{:?}: {}", other, line),
                }
            }
            assert!(notified, "{}", said);
            for lost in [
                "2024-11-05",
                "prompts",
                "resources",
                "log level",
                "subscription",
            ] {
                assert!(said.contains(lost), "{} in {}", lost, said);
            }
            // Neither the level nor the subscription was sent to it.
            h.send(call(7)).await;
            assert_eq!(app.line().await["id"], 7);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn an_app_that_asks_the_client_on_initialized_is_answered_while_it_takes_the_session_back() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            drop(h.initialized(json!({})).await);
            h.send(call(5)).await;
            let mut app = h.app().await;
            let initialize = app.line().await;
            app.send(json!({"jsonrpc":"2.0","id":initialize["id"],"result":{"capabilities":{}}}))
                .await;
            assert_eq!(app.line().await["method"], "notifications/initialized");
            app.send(json!({"jsonrpc":"2.0","id":0,"method":"roots/list"}))
                .await;
            let ask = h.line().await;
            assert_eq!(ask["method"], "roots/list");
            h.send(json!({"jsonrpc":"2.0","id":0,"result":{"roots":[]}}))
                .await;
            // The held request, then the client's answer.
            assert_eq!(app.line().await["id"], 5);
            let answer = app.line().await;
            assert_eq!(answer["result"]["roots"], json!([]));
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn stdin_eof_during_an_outage_ends_within_the_drain_grace_after_answering_what_is_held() {
    let (ended, ()) = run(
        quick(),
        |config| config.reconnect_timeout = Duration::from_secs(600),
        |mut h| async move {
            let app = h.initialized(json!({})).await;
            h.open.set(false);
            drop(app);
            h.send(call(3)).await;
            h.close_stdin();
            let error = h.line().await;
            assert_eq!(error["id"], 3);
            assert_eq!(reason(&error), "stdin_closed");
        },
    );
    assert_eq!(ended.unwrap(), Ending::ClientClosed { drained: false });
}

#[test]
fn a_cancelled_request_is_not_answered_by_the_bridge() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(listing(true, false)).await;
            h.send(call(2)).await;
            h.send(call(3)).await;
            h.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}))
            .await;
            for _ in 0..3 {
                app.line().await;
            }
            drop(app);
            let error = h.line().await;
            assert_eq!(error["id"], 3, "{}", error);
            assert_eq!(reason(&error), "app_restarting");
            // Cancelled while held: no answer from anyone.
            h.open.set(false);
            h.send(call(4)).await;
            h.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}))
            .await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({"tools":{}}), 1).await;
            assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
            assert_eq!(app.line().await["id"], 4);
            assert_eq!(app.line().await["method"], "notifications/cancelled");
            drop(app);
            h.open.set(false);
            h.send(call(5)).await;
            h.close_stdin();
            // Only 5 is owed an answer at the end.
            let error = h.line().await;
            assert_eq!(error["id"], 5, "{}", error);
        },
    );
    assert!(ended.is_ok(), "{:?}", ended);
}

#[test]
fn every_request_is_answered_at_once_when_the_app_cannot_be_reached() {
    let long_id = format!("\"{}\"", "i".repeat(5000));
    let (ended, ()) = run_with(
        false,
        quick(),
        |_| {},
        |mut h| {
            let long_id = long_id.clone();
            async move {
                // A batch: one array with an answer per request in it.
                h.send_raw(
                b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"method\":\"n\"},{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"c\"}]\n",
            )
            .await;
                let batch = h.line().await;
                assert_eq!(batch.as_array().unwrap().len(), 2, "{}", batch);
                assert_eq!(batch[0]["id"], 1);
                assert_eq!(batch[1]["id"], "b");
                assert_eq!(reason(&batch[1]), "app_not_running");
                // A BOM, CRLF, and an id of any length.
                h.send_raw(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"a\"}\r\n")
                    .await;
                assert_eq!(h.line().await["id"], 2);
                let line = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"a\"}}\n",
                    long_id
                );
                h.send_raw(line.as_bytes()).await;
                let mut text = String::new();
                within(h.stdout.read_line(&mut text)).await.unwrap();
                assert!(text.contains(&format!("\"id\":{},", long_id)));
                // A batch of notifications only gets no answer.
                h.send_raw(b"[{\"jsonrpc\":\"2.0\",\"method\":\"n\"}]\n")
                    .await;
                // At once, without waiting for anything.
                let asked = std::time::Instant::now();
                h.send(call(3)).await;
                assert_eq!(h.line().await["id"], 3);
                assert!(asked.elapsed() < Duration::from_secs(5));
                assert_eq!(h.finish().await, Vec::<Value>::new());
            }
        },
    );
    assert!(
        matches!(ended, Err(BridgeError::Handshake { .. })),
        "{:?}",
        ended
    );
}

#[test]
fn an_app_that_comes_after_the_connect_timeout_takes_the_session() {
    let (ended, ()) = run_with(
        false,
        quick(),
        |_| {},
        |mut h| async move {
            h.send(initialize(0, "early")).await;
            let error = h.line().await;
            assert_eq!(error["id"], 0);
            assert_eq!(reason(&error), "app_not_running");
            // The client tries again once the app is up.
            h.open.set(true);
            let mut app = h.app().await;
            h.send(initialize(1, "again")).await;
            let request = app.line().await;
            assert_eq!(request["id"], 1);
            app.send(json!({"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}))
                .await;
            assert!(h.line().await.get("result").is_some());
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_client_before_the_app_is_answered_from_the_cache_and_resumed_when_it_comes() {
    let dir = std::env::temp_dir().join(format!("mcp-bridge-session-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cached = json!({"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"app","version":"1"}});
    // A first session fills the cache.
    let with_cache = |config: &mut Config| config.cache = Some(dir.clone());
    let (ended, ()) = run(quick(), with_cache, |mut h| {
        let cached = cached.clone();
        async move {
            h.send(initialize(0, "first")).await;
            let mut app = h.app().await;
            app.line().await;
            app.send(json!({"jsonrpc":"2.0","id":0,"result":cached}))
                .await;
            h.line().await;
            h.finish().await;
        }
    });
    ended_well(ended, ());
    // The next one starts before the app.
    let (ended, ()) = run_with(false, quick(), with_cache, |mut h| {
        let cached = cached.clone();
        async move {
            h.send(initialize(3, "second")).await;
            let answer = h.line().await;
            assert_eq!(answer["id"], 3);
            assert_eq!(answer["result"], cached);
            h.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
                .await;
            h.send(json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}))
                .await;
            let error = h.line().await;
            assert_eq!(error["id"], 4);
            assert_eq!(reason(&error), "app_not_running");
            h.open.set(true);
            let mut app = h.app().await;
            let replayed = app
                .accept_replay(json!({"tools":{"listChanged":true}}), 1)
                .await;
            assert_eq!(replayed[0]["params"]["clientInfo"]["name"], "second");
            assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
            h.send(json!({"jsonrpc":"2.0","id":5,"method":"tools/list"}))
                .await;
            let request = app.line().await;
            assert_eq!(request["id"], 5);
            app.send(reply(&request["id"])).await;
            assert!(h.line().await.get("result").is_some());
            assert_eq!(h.finish().await, Vec::<Value>::new());
        }
    });
    ended_well(ended, ());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_requests_in_flight_go_to_the_next_instance_and_calls_get_an_error() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({})).await;
            h.send(json!({"jsonrpc":"2.0","id":10,"method":"tools/list"}))
                .await;
            h.send(call(11)).await;
            h.send(
                json!({"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"a://x"}}),
            )
            .await;
            for _ in 0..3 {
                app.line().await;
            }
            drop(app);
            let error = h.line().await;
            assert_eq!(error["id"], 11);
            assert_eq!(reason(&error), "app_restarting");
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            for id in [10, 12] {
                let again = app.line().await;
                assert_eq!(again["id"], id);
                app.send(reply(&again["id"])).await;
                assert_eq!(h.line().await["id"], id);
            }
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn the_first_request_in_flight_when_the_app_dies_goes_to_the_next_instance() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            h.send(initialize(0, "t")).await;
            let mut app = h.app().await;
            assert_eq!(app.line().await["method"], "initialize");
            drop(app);
            let mut app = h.app().await;
            let again = app.line().await;
            assert_eq!(again["method"], "initialize");
            assert_eq!(again["id"], 0);
            app.send(json!({"jsonrpc":"2.0","id":0,"result":{"capabilities":{}}}))
                .await;
            assert_eq!(h.line().await["id"], 0);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn silence_is_not_a_refusal_it_is_waited_for_and_then_said() {
    // An app whose listener is up before its MCP side: it accepts and
    // closes a few times, then serves. The request waits for it.
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            h.same.set(Some(42));
            for _ in 0..4 {
                drop(h.app().await);
            }
            h.same.set(None);
            let mut app = h.app().await;
            h.send(call(1)).await;
            let request = app.line().await;
            assert_eq!(request["id"], 1, "{}", request);
            app.send(reply(&request["id"])).await;
            let answer = h.line().await;
            assert!(answer.get("result").is_some(), "{}", answer);
            h.finish().await;
        },
    );
    ended_well(ended, ());
    // One that never serves: the request is answered when the connect
    // deadline passes, with a reason that says what happened.
    let (ended, ()) = run(
        quick(),
        |config| config.connect_timeout = Duration::from_millis(800),
        |mut h| async move {
            h.same.set(Some(42));
            h.send(call(1)).await;
            // A request in flight when an instance closes may have been
            // carried out (app_restarting); the next one is held, and
            // answered at the deadline with what happened.
            let error = loop {
                let (apps, stdout) = (&h.apps, &mut h.stdout);
                let next = future::or(async { Ok(within(apps.recv()).await.unwrap()) }, async {
                    let mut line = String::new();
                    within(stdout.read_line(&mut line)).await.unwrap();
                    Err(serde_json::from_str::<Value>(&line).unwrap())
                });
                match next.await {
                    Ok(app) => drop(app),
                    Err(line) if reason(&line) == "app_restarting" => {
                        h.send(call(line["id"].as_u64().unwrap() + 1)).await;
                    }
                    Err(line) => break line,
                }
            };
            assert_eq!(reason(&error), "app_closed_silently", "{}", error);
            h.open.set(false);
            h.finish().await;
        },
    );
    assert!(
        matches!(ended, Err(BridgeError::Resume { .. })),
        "{:?}",
        ended
    );
}

#[test]
fn a_slow_new_instance_has_the_rest_of_the_reconnect_timeout_and_a_rejection_is_retried() {
    let bounds = Bounds {
        reply_timeout: Duration::from_millis(300),
        ..quick()
    };
    let (ended, ()) = run(
        bounds,
        |_| {},
        |mut h| async move {
            drop(h.initialized(json!({})).await);
            // "Still loading": rejected, twice.
            for _ in 0..2 {
                let mut app = h.app().await;
                let initialize = app.line().await;
                app.send(json!({"jsonrpc":"2.0","id":initialize["id"],"error":{"code":-32603,"message":"loading"}}))
                    .await;
                let _ = within(app.reader.read_line(&mut String::new())).await;
            }
            // Slow: answers well after the reply timeout of a dying
            // listener.
            let mut app = h.app().await;
            let initialize = app.line().await;
            smol::Timer::after(Duration::from_millis(900)).await;
            app.send(json!({"jsonrpc":"2.0","id":initialize["id"],"result":{"capabilities":{}}}))
                .await;
            assert_eq!(app.line().await["method"], "notifications/initialized");
            h.send(call(1)).await;
            assert_eq!(app.line().await["id"], 1);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_reply_reaches_only_the_instance_that_asked() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({})).await;
            for id in [0, 1] {
                app.send(json!({"jsonrpc":"2.0","id":id,"method":"elicitation/create","params":{"message":"Create file?"}}))
                    .await;
                assert_eq!(h.line().await["id"], id);
            }
            drop(app);
            // The client is told the questions are void.
            let mut cancelled = Vec::new();
            for _ in 0..2 {
                let line = h.line().await;
                assert_eq!(line["method"], "notifications/cancelled");
                cancelled.push(line["params"]["requestId"].as_u64().unwrap());
            }
            cancelled.sort_unstable();
            assert_eq!(cancelled, vec![0, 1]);
            h.open.set(false);
            // Answered while the app is away: dropped, not held.
            h.send(json!({"jsonrpc":"2.0","id":1,"result":{"action":"accept"}}))
                .await;
            h.send(call(5)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            assert_eq!(app.line().await["id"], 5);
            // The new instance asks under ids of its own, as SDKs do, from 0:
            // the client may still answer 0 for the old one, so the question
            // reaches it under an id of the bridge's.
            app.send(json!({"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"Delete repository?"}}))
                .await;
            let asked = h.line().await;
            assert_eq!(asked["id"], "mcp-bridge-question-1", "{}", asked);
            assert_eq!(asked["params"]["message"], "Delete repository?");
            // 1 was answered (for the old instance): free again.
            app.send(json!({"jsonrpc":"2.0","id":1,"method":"roots/list"}))
                .await;
            assert_eq!(h.line().await["id"], 1);
            // The late "accept" to the old question reaches nobody; the
            // answers to the new ones reach the new instance, under its ids.
            h.send(json!({"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}))
                .await;
            h.send(
                json!({"jsonrpc":"2.0","id":"mcp-bridge-question-1","result":{"action":"decline"}}),
            )
            .await;
            h.send(json!({"jsonrpc":"2.0","id":1,"result":{"roots":[]}}))
                .await;
            h.send(call(6)).await;
            let declined = app.line().await;
            assert_eq!(declined["id"], 0, "{}", declined);
            assert_eq!(declined["result"]["action"], "decline");
            let next = app.line().await;
            assert_eq!(next["id"], 1, "{}", next);
            assert!(next.get("result").is_some());
            assert_eq!(app.line().await["id"], 6);
            // Replies to what the new instance was never asked (99), or
            // what the bridge answered already, reach nobody.
            app.send(reply(&json!(99))).await;
            app.send(reply(&json!(6))).await;
            app.send(reply(&json!(6))).await;
            assert_eq!(h.line().await["id"], 6);
            h.send(call(7)).await;
            let request = app.line().await;
            app.send(reply(&request["id"])).await;
            assert_eq!(h.line().await["id"], 7);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn the_modern_era_sends_open_listens_again_and_tags_what_changed() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28"});
            h.send(
                json!({"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":meta}}),
            )
            .await;
            let mut app = h.app().await;
            assert_eq!(app.line().await["method"], "server/discover");
            app.send(json!({"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}}}}))
                .await;
            assert!(h.line().await.get("result").is_some());
            let filter = json!({"toolsListChanged":true,"promptsListChanged":true});
            h.send(json!({"jsonrpc":"2.0","id":"listen:0","method":"subscriptions/listen","params":{"_meta":meta,"notifications":filter}}))
                .await;
            assert_eq!(app.line().await["method"], "subscriptions/listen");
            let ack = json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen:0"},"notifications":filter}});
            app.send(ack.clone()).await;
            assert_eq!(h.line().await, ack);
            drop(app);
            let mut app = h.app().await;
            // No initialize: the listen, under the client's id.
            let again = app.line().await;
            assert_eq!(again["method"], "subscriptions/listen");
            assert_eq!(again["id"], "listen:0");
            app.send(ack.clone()).await;
            let mut changed = Vec::new();
            for _ in 0..2 {
                let line = h.line().await;
                assert_eq!(
                    line["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen:0",
                    "{}",
                    line
                );
                changed.push(line["method"].as_str().unwrap().to_string());
            }
            assert_eq!(
                changed,
                vec![
                    "notifications/tools/list_changed",
                    "notifications/prompts/list_changed"
                ]
            );
            h.send(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":meta}}))
                .await;
            let request = app.line().await;
            assert_eq!(request["id"], 1);
            app.send(reply(&request["id"])).await;
            assert_eq!(h.line().await["id"], 1);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_modern_client_before_the_app_gets_discover_from_the_cache_and_its_listen_kept_open() {
    let dir = std::env::temp_dir().join(format!("mcp-bridge-modern-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let discovered =
        json!({"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}}});
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28"});
    let with_cache = |config: &mut Config| config.cache = Some(dir.clone());
    let (ended, ()) = run(quick(), with_cache, |mut h| {
        let (discovered, meta) = (discovered.clone(), meta.clone());
        async move {
            h.send(
                json!({"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":meta}}),
            )
            .await;
            let mut app = h.app().await;
            app.line().await;
            app.send(json!({"jsonrpc":"2.0","id":0,"result":discovered}))
                .await;
            h.line().await;
            h.finish().await;
        }
    });
    ended_well(ended, ());
    let (ended, ()) = run_with(false, quick(), with_cache, |mut h| {
        let (discovered, meta) = (discovered.clone(), meta.clone());
        async move {
            h.send(
                json!({"jsonrpc":"2.0","id":7,"method":"server/discover","params":{"_meta":meta}}),
            )
            .await;
            let answer = h.line().await;
            assert_eq!(answer["result"], discovered, "{}", answer);
            let filter = json!({"toolsListChanged":true});
            h.send(json!({"jsonrpc":"2.0","id":"listen:0","method":"subscriptions/listen","params":{"_meta":meta,"notifications":filter}}))
                .await;
            h.send(json!({"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"_meta":meta}}))
                .await;
            // The listen stays open; the request is answered.
            let error = h.line().await;
            assert_eq!(error["id"], 8, "{}", error);
            assert_eq!(reason(&error), "app_not_running");
            h.open.set(true);
            let mut app = h.app().await;
            let listen = app.line().await;
            assert_eq!(listen["id"], "listen:0");
            let ack = json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen:0"},"notifications":filter}});
            app.send(ack.clone()).await;
            // Its first acknowledgement is the client's, then what changed.
            assert_eq!(h.line().await, ack);
            let changed = h.line().await;
            assert_eq!(changed["method"], "notifications/tools/list_changed");
            assert_eq!(
                changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                "listen:0"
            );
            assert_eq!(h.finish().await, Vec::<Value>::new());
        }
    });
    ended_well(ended, ());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The session's own errors follow the crate's error rule: each layer says
/// its own thing, and the step that failed is named.
#[test]
fn new_failures_name_their_step_and_say_nothing_twice() {
    let endpoint = std::path::PathBuf::from("/run/app.sock");
    let held = BridgeError::DeliverHeld {
        endpoint: endpoint.clone(),
        source: io::ErrorKind::InvalidInput.into(),
    };
    let chain = crate::error_chain(&held);
    assert!(
        chain.contains("sending it the messages held meanwhile failed"),
        "{}",
        chain
    );
    assert!(!chain.contains("handshake"), "{}", chain);
    let crash = BridgeError::CrashLoop {
        endpoint,
        instances: 6,
    };
    let chain = crate::error_chain(&crash);
    assert!(chain.contains("crash-looping: 6 instances in a row closed the connection"));
    assert!(std::error::Error::source(&crash).is_none());
}

/// Reads one raw line the app got.
async fn raw_line(app: &mut App) -> String {
    let mut line = String::new();
    within(app.reader.read_line(&mut line)).await.unwrap();
    line
}

#[test]
fn batches_in_flight_at_a_hang_up_get_one_array_of_errors_each() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({})).await;
            // In flight at the hang-up, after a BOM and spaces.
            let first = "\u{feff} [{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"method\":\"n\"},{\"jsonrpc\":\"2.0\",\"id\":\"b]\",\"method\":\"c\",\"params\":[1]}]\n";
            h.send_raw(first.as_bytes()).await;
            assert_eq!(raw_line(&mut app).await, first);
            // Answered by the app (out of order): owed nothing more.
            h.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"a\"}]\n")
                .await;
            raw_line(&mut app).await;
            app.send(json!([{"jsonrpc":"2.0","id":21,"result":{}},{"jsonrpc":"2.0","id":20,"result":{}}]))
                .await;
            assert_eq!(h.line().await[0]["id"], 21);
            // An object with a batch-like param is no batch.
            h.send(json!({"jsonrpc":"2.0","id":3,"method":"a","params":[{"jsonrpc":"2.0","id":40,"method":"a"}]}))
                .await;
            app.line().await;
            // Cut by the hang-up: it goes whole to the next instance.
            let cut = b"[{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"id\":31,\"me";
            h.send_raw(cut).await;
            let mut start = [0u8; 8];
            app.reader.read_exact(&mut start).await.unwrap();
            drop(app);
            h.open.set(false);
            assert_eq!(h.line().await["id"], 3);
            let errors = h.line().await;
            assert_eq!(
                errors,
                json!([
                    {"jsonrpc":"2.0","id":10,"error":errors[0]["error"]},
                    {"jsonrpc":"2.0","id":"b]","error":errors[0]["error"]},
                ])
            );
            assert_eq!(reason(&errors[1]), "app_restarting");
            h.send_raw(b"thod\":\"b\"}]\n").await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let mut whole = cut.to_vec();
            whole.extend_from_slice(b"thod\":\"b\"}]\n");
            assert_eq!(raw_line(&mut app).await.as_bytes(), &whole[..]);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_request_whose_id_is_too_long_to_echo_is_answered_with_a_null_id() {
    let long = |n: u8| json!({"jsonrpc":"2.0","id":format!("{}{}", n, "i".repeat(crate::envelope::ID_CAP)),"method":"a"});
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({})).await;
            for n in 1..=2 {
                let (_, request) = future::zip(h.send(long(n)), app.line()).await;
                assert_eq!(request, long(n));
            }
            let answer = reply(&long(1)["id"]);
            let (_, got) = future::zip(app.send(answer.clone()), h.line()).await;
            assert_eq!(got, answer);
            drop(app);
            h.open.set(false);
            // The app's answer settled one; the other is owed one answer.
            let error = h.line().await;
            assert_eq!(error["id"], Value::Null, "{}", error);
            assert!(error.get("error").is_some(), "{}", error);
            // Held: too long to hold, answered at once.
            h.send(long(3)).await;
            let error = h.line().await;
            assert_eq!(error["id"], Value::Null, "{}", error);
            h.send(call(4)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let next = app.line().await;
            assert_eq!(next["id"], 4);
            app.send(reply(&next["id"])).await;
            assert_eq!(h.line().await["id"], 4);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    ended_well(ended, ());
}

#[test]
fn a_probe_a_legacy_app_hangs_up_on_is_answered_and_initialize_goes_on() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.app().await;
            let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
            h.send(
                json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta}}),
            )
            .await;
            assert_eq!(app.line().await["method"], "server/discover");
            // A server built on rmcp before 3 ends the session here.
            drop(app);
            let answer = h.line().await;
            assert_eq!(answer["id"], 1, "{}", answer);
            assert_eq!(answer["error"]["code"], -32601, "{}", answer);
            assert_eq!(reason(&answer), "legacy_app");
            // The fallback goes to the app on a new connection; the probe
            // is never sent again.
            h.send(initialize(2, "dual-era")).await;
            let mut app = h.app().await;
            let first = app.line().await;
            assert_eq!(first["method"], "initialize", "{}", first);
            app.send(json!({"jsonrpc":"2.0","id":first["id"],"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"legacy","version":"1"}}}))
                .await;
            let answer = h.line().await;
            assert_eq!(answer["id"], 2, "{}", answer);
            assert!(answer.get("result").is_some(), "{}", answer);
            h.finish().await;
        },
    );
    ended_well(ended, ());
}

/// An answer is kept before its reply reaches stdout (a client may kill
/// the bridge the moment it has it) and made durable after (a slow disk
/// must not hold a reply up), never from inside the decision, and what is
/// kept is what the app answered.
#[test]
fn an_answer_is_kept_before_its_reply_is_written_and_settled_after() {
    let learnt = Rc::new(RefCell::new(Vec::new()));
    let seen = learnt.clone();
    let answers = move |_: &Config, written: Written| -> Box<dyn Answers> {
        Box::new(Remembered {
            learnt: seen,
            written,
            ..Remembered::default()
        })
    };
    let (ended, ()) = run_answering(
        true,
        quick(),
        |_| {},
        answers,
        |mut h| async move {
            let mut app = h.initialized(json!({"tools":{}})).await;
            h.send(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
                .await;
            assert_eq!(app.line().await["method"], "tools/list");
            app.send(json!({"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t1"}]}}))
                .await;
            assert_eq!(h.line().await["result"]["tools"][0]["name"], "t1");
            h.finish().await;
        },
    );
    ended_well(ended, ());
    let learnt = learnt.borrow();
    let methods: Vec<_> = learnt
        .iter()
        .map(|(l, _, _)| crate::envelope::json::member(&l.request, "method").map(<[u8]>::to_vec))
        .collect();
    assert_eq!(
        methods,
        [
            Some(b"\"initialize\"".to_vec()),
            Some(b"\"tools/list\"".to_vec())
        ]
    );
    for (learnt, replied, settled) in learnt.iter() {
        let request = String::from_utf8_lossy(&learnt.request);
        assert!(!replied, "kept after its reply was written: {}", request);
        assert_eq!(
            *settled,
            Some(true),
            "settled before its reply: {}",
            request
        );
    }
    assert_eq!(
        learnt[1].0.result.as_deref(),
        Some(&br#"{"tools":[{"name":"t1"}]}"#[..])
    );
}
