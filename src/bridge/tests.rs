//! The session engine driven over in-memory pipes: a scripted client on
//! one side, scripted app instances on the other, handed out by a fake
//! [`Connector`]. Each test is one branch of the state machine.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use serde_json::{json, Value};

use super::session::{Bounds, Session};
use super::{BridgeError, Config, Connecting, Connector, HOLD_LIMIT};
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
        Box::pin(async move { Ok((bridge_reader, bridge_writer)) })
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
            assert_eq!(request["id"], format!("mcp-bridge-replay-{}", n + 1));
            let result = if n == 0 {
                json!({"capabilities": capabilities})
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
        let result = json!({"capabilities": capabilities});
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
        crash_loop_window: Duration::from_secs(60),
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
    let mut config = Config::new("/fake");
    config.reconnect_timeout = Duration::from_secs(20);
    config.drain_grace = Duration::from_millis(200);
    configure(&mut config);
    let (stdin_reader, stdin_writer) = piper::pipe(PIPE);
    let (stdout_reader, stdout_writer) = piper::pipe(PIPE);
    let (apps, app_receiver) = smol::channel::unbounded();
    let open = Rc::new(Cell::new(open));
    let attempts = Rc::new(Cell::new(0));
    let fake = Fake {
        open: open.clone(),
        attempts: attempts.clone(),
        apps,
    };
    let harness = Harness {
        stdin: Some(stdin_writer),
        stdout: BufReader::new(stdout_reader),
        apps: app_receiver,
        open,
        attempts,
    };
    smol::block_on(async {
        let mut session = Session::new(&config, fake, stdin_reader, stdout_writer, None, None);
        session.bounds = bounds;
        let (ended, out) = future::zip(session.run(), script(harness)).await;
        (ended, out)
    })
}

#[test]
fn a_failed_resume_attempt_is_retried_and_lists_are_announced_as_declared() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let app = h.initialized(json!({"tools":{}})).await;
            drop(app);
            // An instance that takes the connection and dies on the replay (a
            // dying app's backlog), then one that resets it, then a good one.
            let mut dying = h.app().await;
            assert_eq!(dying.line().await["method"], "initialize");
            drop(dying);
            h.open.set(false);
            while h.attempts.get() < 4 {
                future::yield_now().await;
                async_io::Timer::after(Duration::from_millis(5)).await;
            }
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({"tools":{},"prompts":{}}), 1).await;
            // Once per resumed instance, for the lists it declares.
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
    assert!(
        matches!(ended, Ok(Ending::ClientClosed { .. })),
        "{:?}",
        ended
    );
}

#[test]
fn an_app_that_resumes_and_dies_again_is_a_crash_loop_and_stops_being_reconnected() {
    let bounds = Bounds {
        crash_loop_limit: 4,
        ..quick()
    };
    let (ended, notices) = run(
        bounds,
        |_| {},
        |mut h| async move {
            drop(h.initialized(json!({"tools":{}})).await);
            let mut notices = 0;
            for _ in 0..4 {
                let mut app = h.app().await;
                app.accept_replay(json!({"tools":{}}), 1).await;
                assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
                notices += 1;
                drop(app);
            }
            // The fifth hang-up is one too many: every request gets the reason.
            h.send(call(7)).await;
            let answer = h.line().await;
            assert_eq!(answer["id"], 7);
            let message = answer["error"]["message"].as_str().unwrap().to_string();
            assert!(message.contains("crash-looping"), "{}", message);
            assert!(
                h.apps.try_recv().is_err(),
                "reconnected after the crash loop"
            );
            assert_eq!(h.finish().await, Vec::<Value>::new());
            notices
        },
    );
    assert_eq!(notices, 4);
    match ended {
        Err(BridgeError::CrashLoop { hang_ups: 5, .. }) => {}
        other => panic!("{:?}", other),
    }
}

#[test]
fn an_outage_whose_instances_never_stay_up_fails_at_its_deadline_with_bounded_attempts() {
    let (ended, ()) = run(
        quick(),
        |config| config.reconnect_timeout = Duration::from_millis(600),
        |mut h| async move {
            drop(h.initialized(json!({})).await);
            // Every instance answers the replay and hangs up at once.
            let answer = loop {
                let next = future::or(async { Ok(h.app().await) }, async {
                    smol::Timer::after(Duration::from_millis(50)).await;
                    Err(())
                });
                match next.await {
                    Ok(mut app) => {
                        // The bridge may give up on this one first.
                        let mut request = String::new();
                        let _ = app.reader.read_line(&mut request).await;
                        if let Ok(request) = serde_json::from_str::<Value>(&request) {
                            let result = json!({"capabilities":{}});
                            let answer =
                                json!({"jsonrpc":"2.0","id":request["id"],"result":result});
                            let _ = app.try_send(answer).await;
                        }
                        drop(app);
                    }
                    Err(()) => {
                        h.send(call(3)).await;
                        let line = h.line().await;
                        if line.get("error").is_some() && line["id"] == 3 {
                            break line;
                        }
                    }
                }
            };
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("did not take the session back"),
                "{}",
                message
            );
            // 600 ms of pauses of 5..40 ms: a few dozen attempts, not
            // thousands.
            assert!(h.attempts.get() < 60, "{} attempts", h.attempts.get());
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(
        matches!(ended, Err(BridgeError::Resume { .. })),
        "{:?}",
        ended
    );
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
    assert!(
        matches!(ended, Ok(Ending::ClientClosed { .. })),
        "{:?}",
        ended
    );
}

#[test]
fn no_fragment_of_an_interrupted_line_reaches_the_next_app() {
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
            let error = h.line().await;
            assert_eq!(error["id"], 5);
            let message = error["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("while this request was being sent"),
                "{}",
                message
            );
            h.send(call(6)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let next = app.line().await;
            assert_eq!(next["id"], 6, "{}", next);
            app.send(reply(&next["id"])).await;
            assert_eq!(h.line().await["id"], 6);
            // A second restart: the first request held in it goes through.
            drop(app);
            h.send(call(7)).await;
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            let next = app.line().await;
            assert_eq!(next["id"], 7, "{}", next);
            app.send(reply(&next["id"])).await;
            let answer = h.line().await;
            assert_eq!(answer["id"], 7);
            assert!(answer.get("result").is_some(), "{}", answer);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(
        matches!(ended, Ok(Ending::ClientClosed { .. })),
        "{:?}",
        ended
    );
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
            assert!(error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cannot hold more than"));
            h.send(call(10)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            assert_eq!(app.line().await["id"], 10);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(ended.is_ok(), "{:?}", ended);
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
            app.send(json!({"jsonrpc":"2.0","id":1,"result":{"capabilities":{"resources":{}}}}))
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
            let replayed = app.accept_replay(json!({"resources":{}}), 3).await;
            assert_eq!(replayed[0]["params"]["clientInfo"]["name"], "second");
            assert_eq!(replayed[1]["method"], "logging/setLevel");
            assert_eq!(replayed[2]["method"], "resources/subscribe");
            assert_eq!(replayed[2]["params"]["uri"], "b://y");
            // Resources only: the new instance declares no tools.
            assert_eq!(
                h.line().await["method"],
                "notifications/resources/list_changed"
            );
            h.send(call(6)).await;
            assert_eq!(app.line().await["id"], 6);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(ended.is_ok(), "{:?}", ended);
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
            assert!(error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("stdin closed"));
        },
    );
    assert_eq!(ended.unwrap(), Ending::ClientClosed { drained: false });
}

#[test]
fn a_cancelled_request_is_not_answered_by_the_bridge_at_a_restart() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({"tools":{}})).await;
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
            let mut app = h.app().await;
            app.accept_replay(json!({"tools":{}}), 1).await;
            assert_eq!(h.line().await["method"], "notifications/tools/list_changed");
            h.send(call(4)).await;
            let request = app.line().await;
            app.send(reply(&request["id"])).await;
            assert_eq!(h.line().await["id"], 4);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(ended.is_ok(), "{:?}", ended);
}

#[test]
fn every_request_is_answered_when_the_app_cannot_be_reached() {
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
                h.send(call(3)).await;
                assert_eq!(h.line().await["id"], 3);
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
fn a_client_reply_to_a_gone_instance_never_reaches_the_next_one() {
    let (ended, ()) = run(
        quick(),
        |_| {},
        |mut h| async move {
            let mut app = h.initialized(json!({})).await;
            for id in ["e1", "e2"] {
                app.send(
                    json!({"jsonrpc":"2.0","id":id,"method":"elicitation/create","params":{}}),
                )
                .await;
                assert_eq!(h.line().await["id"], id);
            }
            drop(app);
            h.open.set(false);
            // Answered while the app is away: dropped, not held.
            h.send(json!({"jsonrpc":"2.0","id":"e1","result":{"action":"accept"}}))
                .await;
            h.send(call(5)).await;
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            assert_eq!(app.line().await["id"], 5);
            // Answered once the new instance is there: dropped too; the new
            // instance's own request is answered.
            app.send(json!({"jsonrpc":"2.0","id":"e9","method":"roots/list"}))
                .await;
            assert_eq!(h.line().await["id"], "e9");
            h.send(json!({"jsonrpc":"2.0","id":"e2","result":{"action":"decline"}}))
                .await;
            h.send(json!({"jsonrpc":"2.0","id":"e9","result":{"roots":[]}}))
                .await;
            h.send(call(6)).await;
            let next = app.line().await;
            assert_eq!(next["id"], "e9", "{}", next);
            assert_eq!(app.line().await["id"], 6);
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(ended.is_ok(), "{:?}", ended);
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
        hang_ups: 11,
        window: Duration::from_secs(60),
    };
    let chain = crate::error_chain(&crash);
    assert!(chain.contains("crash-looping: it closed the connection 11 times within 60s"));
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
            // Cut by the hang-up.
            h.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"id\":31,\"me")
                .await;
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
            let message = errors[1]["error"]["message"].as_str().unwrap();
            assert!(message.contains("before answering"), "{}", message);
            h.send_raw(b"thod\":\"b\"}]\n").await;
            let errors = h.line().await;
            assert_eq!(errors.as_array().unwrap().len(), 2, "{}", errors);
            assert_eq!(errors[0]["id"], 30);
            assert_eq!(errors[1]["id"], 31);
            let message = errors[1]["error"]["message"].as_str().unwrap();
            assert!(message.contains("being sent"), "{}", message);
            h.open.set(true);
            let mut app = h.app().await;
            app.accept_replay(json!({}), 1).await;
            assert_eq!(h.finish().await, Vec::<Value>::new());
        },
    );
    assert!(ended.is_ok(), "{:?}", ended);
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
            // Offline, at once.
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
    assert!(ended.is_ok(), "{:?}", ended);
}
