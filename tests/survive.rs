//! The bridge survives the app: it waits for an app that is starting,
//! tells the client why in the protocol when the app cannot be reached or
//! refuses, and carries the session across a restart. Real bridge process,
//! real socket, an MCP-shaped host in the test.
#![cfg(unix)]

mod bridge_host;
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use bridge_host::Listener;
use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use futures_lite::StreamExt;
use serde_json::{json, Value};
use smol::process::{Child, ChildStdin, ChildStdout, Command};
use smol::Task;
use support::{bridge_command, eventually, within, Bridge, TempDir};

/// What a test host saw: each connection's handshake and lines, in order.
#[derive(Default)]
struct Seen {
    connections: Vec<Vec<String>>,
}

type Shared = Arc<Mutex<Seen>>;

/// How a test host behaves.
#[derive(Clone, Copy, PartialEq)]
enum Manner {
    /// Answers like a tiny MCP server with one `echo` tool.
    Serve,
    /// Closes every connection at once, without a word.
    HangUp,
    /// Sends a refusal line (`"id":null` error), then closes.
    Refuse,
    /// Answers `initialize`, then closes the connection as soon as the
    /// client says `notifications/initialized`: a crash-looping app.
    CrashLoop,
}

/// An MCP-shaped app listening at a socket.
struct App {
    accepting: Task<()>,
    connections: Arc<Mutex<Vec<Task<()>>>>,
}

impl App {
    fn start(socket: &Path, seen: &Shared, manner: Manner) -> App {
        let listener = Listener::bind(socket).unwrap();
        let seen = seen.clone();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let tasks = connections.clone();
        let accepting = smol::spawn(async move {
            while let Ok(connection) = listener.accept().await {
                let number = {
                    let mut seen = seen.lock().unwrap();
                    let line = String::from_utf8(connection.handshake.to_line()).unwrap();
                    seen.connections.push(vec![line]);
                    seen.connections.len() - 1
                };
                let seen = seen.clone();
                tasks.lock().unwrap().push(smol::spawn(async move {
                    let mut writer = connection.writer;
                    match manner {
                        Manner::HangUp => return,
                        Manner::Refuse => {
                            let refusal = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"no room for you\"}}\n";
                            let _ = writer.write_all(refusal.as_bytes()).await;
                            return;
                        }
                        Manner::Serve | Manner::CrashLoop => {}
                    }
                    let mut lines = BufReader::new(connection.reader).lines();
                    while let Some(Ok(line)) = lines.next().await {
                        seen.lock().unwrap().connections[number].push(line.clone());
                        if manner == Manner::CrashLoop && line.contains("notifications/initialized") {
                            return;
                        }
                        if let Some(reply) = answer(&line) {
                            let mut bytes = reply.to_string().into_bytes();
                            bytes.push(b'\n');
                            if writer.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                    }
                }));
            }
        });
        App {
            accepting,
            connections,
        }
    }

    /// Stops the app as an exit would: the socket is removed and every
    /// connection closed by the time this returns.
    async fn stop(self) {
        self.accepting.cancel().await;
        let connections = std::mem::take(&mut *self.connections.lock().unwrap());
        for connection in connections {
            connection.cancel().await;
        }
    }
}

/// The host's reply to one line: `initialize`, `tools/list`, `tools/call`
/// of `echo`; `slow/never` is never answered.
fn answer(line: &str) -> Option<Value> {
    let request: Value = serde_json::from_str(line).ok()?;
    let id = request.get("id")?.clone();
    let result = match request["method"].as_str()? {
        "initialize" => {
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}, "prompts": {"listChanged": true}, "resources": {}}, "serverInfo": {"name": "test-app", "version": "1"}})
        }
        "tools/list" => json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
        "tools/call" => {
            let mut text = request["params"]["arguments"]["text"].clone();
            if text == "big" {
                text = json!("b".repeat(1024 * 1024));
            }
            json!({"content": [{"type": "text", "text": text}]})
        }
        "slow/never" => return None,
        _ => json!({}),
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The bridge to `socket`, spawned as an MCP CLI would, with `extra`
/// arguments; its stderr is returned by [`Bridge::finish_with_stderr`].
fn spawn_bridge(socket: &Path, extra: &[&str]) -> Bridge {
    Bridge::spawn(
        bridge_command(socket, "p", "r")
            .args(extra)
            .stderr(Stdio::piped()),
    )
}

/// How many times in a row each restart test goes through a restart.
const ROUNDS: usize = 20;

/// Set (to a socket path) in a host *process* this binary starts: see
/// [`host_process`].
const HOST_ENV: &str = "MCP_BRIDGE_SURVIVE_HOST";

/// Lines a host process writes on stdout for the test to wait on.
const HOST_READY: &str = "survive-host: ready";
const HOST_GOT_SLOW: &str = "survive-host: got slow";

/// How long a host process keeps its listener open after closing its
/// connections: a bridge reconnecting at once lands in the backlog of a
/// listener that will never accept it.
const LINGER: std::time::Duration = std::time::Duration::from_millis(400);

/// An MCP host in a process of its own, to be SIGKILLed or to exit as
/// apps do: it is this test binary, run as `host_process` with
/// [`HOST_ENV`] set.
struct HostProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl HostProcess {
    async fn start(socket: &Path) -> HostProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "host_process",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(HOST_ENV, socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut host = HostProcess {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
        };
        host.wait_for(HOST_READY).await;
        host
    }

    async fn wait_for(&mut self, what: &str) {
        loop {
            let line = within(what, self.stdout.next()).await;
            if line
                .expect("the host process to go on")
                .unwrap()
                .contains(what)
            {
                return;
            }
        }
    }

    /// SIGKILL, and reaped.
    async fn kill(mut self) {
        self.child.kill().unwrap();
        within("the host to die", self.child.status())
            .await
            .unwrap();
    }

    /// Exits as an app that closes its connections before its listener.
    async fn exit(mut self) {
        drop(self.stdin.take());
        within("the host to exit", self.child.status())
            .await
            .unwrap();
    }
}

/// How the restart tests stop the first host.
#[derive(Clone, Copy)]
enum Stop {
    Kill,
    Exit,
}

/// Not a test of the bridge but the host process the restart tests start
/// ([`HostProcess`]): with [`HOST_ENV`] set it serves MCP at that socket
/// until its stdin closes, then closes its connections, keeps the
/// listener open for [`LINGER`] without accepting, and exits. Run as a
/// plain test, it checks that such a host answers a bridge.
#[test]
fn host_process() {
    let socket = match std::env::var_os(HOST_ENV) {
        Some(socket) => PathBuf::from(socket),
        None => {
            let (_dir, socket, _) = setup("hostproc");
            return smol::block_on(async {
                let host = HostProcess::start(&socket).await;
                let mut bridge = spawn_bridge(&socket, &[]);
                bridge.send(INITIALIZE).await;
                assert_eq!(
                    bridge.json().await["result"]["serverInfo"]["name"],
                    "test-app"
                );
                host.exit().await;
                let (code, stderr) = bridge.finish_with_stderr().await;
                assert_eq!(code, Some(0), "{}", stderr);
            });
        }
    };
    smol::block_on(async {
        use std::io::Write;
        let listener = Listener::bind(&socket).unwrap();
        let (stop, stopped) = smol::channel::bounded::<()>(1);
        let connections: Arc<Mutex<Vec<Task<()>>>> = Arc::default();
        let tasks = connections.clone();
        let accepting = smol::spawn(async move {
            loop {
                let next =
                    futures_lite::future::or(async { Some(listener.accept().await) }, async {
                        let _ = stopped.recv().await;
                        None
                    });
                let connection = match next.await {
                    None => return listener,
                    Some(Ok(connection)) => connection,
                    Some(Err(_)) => continue,
                };
                tasks.lock().unwrap().push(smol::spawn(async move {
                    let mut writer = connection.writer;
                    let mut lines = BufReader::new(connection.reader).lines();
                    while let Some(Ok(line)) = lines.next().await {
                        if line.contains("\"slow\"") {
                            println!("{}", HOST_GOT_SLOW);
                            let _ = std::io::stdout().flush();
                        }
                        if let Some(reply) = answer(&line) {
                            let mut bytes = reply.to_string().into_bytes();
                            bytes.push(b'\n');
                            if writer.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                    }
                }));
            }
        });
        println!("{}", HOST_READY);
        let _ = std::io::stdout().flush();
        let _ = smol::unblock(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await;
        let _ = stop.send(()).await;
        let listener = accepting.await;
        let open = std::mem::take(&mut *connections.lock().unwrap());
        for connection in open {
            connection.cancel().await;
        }
        async_io::Timer::after(LINGER).await;
        drop(listener);
        std::process::exit(0);
    });
}

/// One session through a host process that dies with a `tools/call` in
/// flight (as `stop` says) and is started again on the same path: the call
/// in flight gets its error at once, the next one is answered by the new
/// host, and the bridge exits 0 when stdin closes.
async fn restart_round(socket: &Path, stop: Stop) {
    let host = HostProcess::start(socket).await;
    let mut host = host;
    let mut bridge = spawn_bridge(socket, &[]);
    bridge.send(INITIALIZE).await;
    assert_eq!(bridge.json().await["id"], 1);
    bridge.send(INITIALIZED).await;
    bridge.send(&call(2, "before")).await;
    assert_eq!(
        bridge.json().await["result"]["content"][0]["text"],
        "before"
    );
    bridge
        .send(r#"{"jsonrpc":"2.0","id":"slow","method":"slow/never"}"#)
        .await;
    host.wait_for(HOST_GOT_SLOW).await;
    match stop {
        Stop::Kill => host.kill().await,
        Stop::Exit => host.exit().await,
    }
    let error = bridge.json().await;
    assert_eq!(error["id"], "slow", "{}", error);
    let new_host = HostProcess::start(socket).await;
    let (reply, _) = call_after_restart(&mut bridge, 3, "after").await;
    assert_eq!(reply["result"]["content"][0]["text"], "after", "{}", reply);
    let (code, stderr) = bridge.finish_with_stderr().await;
    assert_eq!(code, Some(0), "{}", stderr);
    new_host.kill().await;
}

/// The issue's first report: a host SIGKILLed with a call in flight and
/// restarted on the same path. [`ROUNDS`] times in a row.
#[test]
fn a_sigkilled_host_restarted_on_the_same_path_is_resumed_every_time() {
    let (_dir, socket, _) = setup("sigkill");
    for round in 0..ROUNDS {
        smol::block_on(restart_round(&socket, Stop::Kill));
        eprintln!("sigkill: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// A JSON-RPC batch in flight when the host is SIGKILLed gets one array of
/// errors at once, one per request in it (none for its notification); the
/// next call reaches the host started again on the same path. [`ROUNDS`]
/// times in a row.
#[test]
fn a_batch_in_flight_when_the_host_is_sigkilled_gets_one_array_of_errors_every_time() {
    let (_dir, socket, _) = setup("batchkill");
    for round in 0..ROUNDS {
        smol::block_on(async {
            let mut host = HostProcess::start(&socket).await;
            let mut bridge = spawn_bridge(&socket, &[]);
            bridge.send(INITIALIZE).await;
            assert_eq!(bridge.json().await["id"], 1);
            bridge.send(INITIALIZED).await;
            // The host answers no batch: this one stays in flight.
            bridge
                .send(r#" [{"jsonrpc":"2.0","id":"slow","method":"slow/never"},{"jsonrpc":"2.0","method":"notifications/progress"},{"jsonrpc":"2.0","id":7,"method":"slow/never"}]"#)
                .await;
            host.wait_for(HOST_GOT_SLOW).await;
            host.kill().await;
            let errors = bridge.json().await;
            assert_eq!(errors.as_array().map(Vec::len), Some(2), "{}", errors);
            assert_eq!(errors[0]["id"], "slow", "{}", errors);
            assert_eq!(errors[1]["id"], 7, "{}", errors);
            let message = errors[1]["error"]["message"].as_str().unwrap();
            assert!(message.contains("before answering"), "{}", message);
            let new_host = HostProcess::start(&socket).await;
            let (reply, _) = call_after_restart(&mut bridge, 3, "after").await;
            assert_eq!(reply["result"]["content"][0]["text"], "after", "{}", reply);
            let (code, stderr) = bridge.finish_with_stderr().await;
            assert_eq!(code, Some(0), "{}", stderr);
            new_host.kill().await;
        });
        eprintln!("batch: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// The issue's second report: a host that closes its connections before its
/// listening socket, so the bridge's first reconnect lands in a backlog
/// that is never served and is reset at the exit. [`ROUNDS`] times.
#[test]
fn a_host_that_closes_its_connections_before_its_listener_is_resumed_every_time() {
    let (_dir, socket, _) = setup("linger");
    for round in 0..ROUNDS {
        smol::block_on(restart_round(&socket, Stop::Exit));
        eprintln!("linger: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// An app that answers the replayed `initialize` and closes again, over and
/// over: the bridge backs off, gives up at `--reconnect-timeout`, answers
/// the request held meanwhile with the reason, and exits 1. Connections and
/// `list_changed` notices stay few. [`ROUNDS`] times.
#[test]
fn a_crash_looping_app_is_retried_boundedly_then_reported() {
    for round in 0..ROUNDS {
        let (_dir, socket, seen) = setup("crashloop");
        smol::block_on(async {
            let _app = App::start(&socket, &seen, Manner::CrashLoop);
            let mut bridge = spawn_bridge(&socket, &["--reconnect-timeout", "1"]);
            bridge.send(INITIALIZE).await;
            assert_eq!(bridge.json().await["id"], 1);
            bridge.send(INITIALIZED).await;
            // A request that reaches an instance about to close gets the
            // "reconnecting" error and is asked again, as a client would,
            // until the bridge gives up.
            let mut notices = 0;
            let mut asked = 0;
            let failure = loop {
                asked += 1;
                assert!(asked < 20, "never reported");
                bridge.send(&call(asked, "x")).await;
                let answer = loop {
                    let message = bridge.json().await;
                    if message.get("id").is_some() {
                        break message;
                    }
                    notices += 1;
                };
                let text = answer["error"]["message"].as_str().unwrap_or_default();
                if !text.contains("reconnecting") {
                    break text.to_string();
                }
            };
            assert!(
                failure.contains("did not take the session back"),
                "{}",
                failure
            );
            let (code, stderr) = bridge.finish_with_stderr().await;
            assert_eq!(code, Some(1), "{}", stderr);
            let connections = seen.lock().unwrap().connections.len();
            // 1 s of pauses from 100 ms doubling: a handful, not thousands.
            assert!(connections <= 8, "{} connections", connections);
            // tools and prompts, once per resumed instance.
            assert!(
                notices <= 2 * (connections - 1),
                "{} notices, {} connections",
                notices,
                connections
            );
        });
        eprintln!("crash loop: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// Messages held during a restart go to an app that answers one request
/// at a time, the first with 1 MiB: they are written while its replies are
/// read (no deadlock). [`ROUNDS`] times.
#[test]
fn held_messages_reach_an_app_that_answers_one_at_a_time_with_a_large_reply() {
    for round in 0..ROUNDS {
        let (_dir, socket, seen) = setup("heldbig");
        smol::block_on(async {
            let app = App::start(&socket, &seen, Manner::Serve);
            let mut bridge = spawn_bridge(&socket, &[]);
            bridge.send(INITIALIZE).await;
            bridge.json().await;
            bridge.send(INITIALIZED).await;
            bridge
                .send(r#"{"jsonrpc":"2.0","id":"slow","method":"slow/never"}"#)
                .await;
            eventually("the app to get the request", || {
                seen.lock().unwrap().connections[0]
                    .iter()
                    .any(|l| l.contains("\"slow\""))
            })
            .await;
            app.stop().await;
            // The bridge has seen the hang-up: what follows is held.
            assert_eq!(bridge.json().await["id"], "slow");
            let padding = "p".repeat(8 * 1024);
            for id in 10..50u32 {
                let text = if id == 10 {
                    "big".to_string()
                } else {
                    padding.clone()
                };
                bridge.send(&call(id, &text)).await;
            }
            let _app = App::start(&socket, &seen, Manner::Serve);
            for id in 10..50u32 {
                let reply = loop {
                    let message = bridge.json().await;
                    if message.get("id").is_some() {
                        break message;
                    }
                };
                assert_eq!(reply["id"], id);
                let text = reply["result"]["content"][0]["text"].as_str().unwrap();
                assert_eq!(text.len(), if id == 10 { 1024 * 1024 } else { 8 * 1024 });
            }
            let (code, stderr) = bridge.finish_with_stderr().await;
            assert_eq!(code, Some(0), "{}", stderr);
        });
        eprintln!("held: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// `tools/call` of `echo` with `text` as request `id`, sent after the app
/// restarted; returns the reply and the notifications that came before it.
/// A request sent before the bridge has seen the old app go was sent to
/// that app, and gets the "reconnecting" error: then it is asked again, as
/// a client would.
async fn call_after_restart(bridge: &mut Bridge, id: u32, text: &str) -> (Value, Vec<String>) {
    let mut notices = Vec::new();
    for _ in 0..2 {
        bridge.send(&call(id, text)).await;
        let reply = loop {
            let message = bridge.json().await;
            if message.get("id").is_some() {
                break message;
            }
            notices.push(message["method"].as_str().unwrap().to_string());
        };
        let raced = reply["error"]["message"]
            .as_str()
            .map_or(false, |m| m.contains("reconnecting"));
        if !raced {
            return (reply, notices);
        }
    }
    panic!("request {} failed twice after the restart", id)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn call(id: u32, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}).to_string()
}

fn setup(tag: &str) -> (TempDir, PathBuf, Shared) {
    let dir = TempDir::new(tag, 0o700);
    let socket = dir.socket();
    (dir, socket, Shared::default())
}

/// The app restarts between two `tools/call`s of one session: the second
/// still succeeds, the client is told the lists changed, and the new app
/// instance got the resumed handshake and the replayed session under the
/// bridge's own ids, whose replies never reached the client.
#[test]
fn a_restart_does_not_end_the_session() {
    let (_dir, socket, seen) = setup("restart");
    smol::block_on(async {
        let app = App::start(&socket, &seen, Manner::Serve);
        let mut bridge = spawn_bridge(&socket, &[]);
        bridge.send(INITIALIZE).await;
        assert_eq!(bridge.json().await["id"], 1);
        bridge.send(INITIALIZED).await;
        bridge.send(&call(2, "before")).await;
        assert_eq!(
            bridge.json().await["result"]["content"][0]["text"],
            "before"
        );

        app.stop().await;
        let _app = App::start(&socket, &seen, Manner::Serve);
        let (reply, notices) = call_after_restart(&mut bridge, 3, "after").await;
        assert_eq!(reply["id"], 3, "{}", reply);
        assert_eq!(reply["result"]["content"][0]["text"], "after");
        assert_eq!(
            notices,
            [
                "notifications/tools/list_changed",
                "notifications/prompts/list_changed"
            ],
            "the lists the client was told change (with listChanged); resources not"
        );
        let (code, stderr) = bridge.finish_with_stderr().await;
        assert_eq!(code, Some(0), "{}", stderr);
    });
    let seen = seen.lock().unwrap();
    assert_eq!(seen.connections.len(), 2);
    assert_eq!(
        seen.connections[0][0],
        "{\"project\":\"p\",\"requester\":\"r\"}\n"
    );
    let second = &seen.connections[1];
    assert_eq!(
        second[0],
        "{\"project\":\"p\",\"requester\":\"r\",\"resumed\":true}\n"
    );
    let replayed: Value = serde_json::from_str(&second[1]).unwrap();
    assert_eq!(replayed["method"], "initialize");
    assert_eq!(replayed["id"], "mcp-bridge-replay-1");
    assert_eq!(
        replayed["params"]["clientInfo"]["name"], "t",
        "the client's own request"
    );
    assert_eq!(second[2], INITIALIZED);
    assert_eq!(second[3], call(3, "after"));
}

/// A request the app never answered when it closed the connection gets an
/// error response at once: before the app is even back.
#[test]
fn a_request_in_flight_at_the_hang_up_gets_an_error_at_once() {
    let (_dir, socket, seen) = setup("inflight");
    smol::block_on(async {
        let app = App::start(&socket, &seen, Manner::Serve);
        let mut bridge = spawn_bridge(&socket, &[]);
        bridge.send(INITIALIZE).await;
        bridge.json().await;
        bridge
            .send(r#"{"jsonrpc":"2.0","id":"slow-1","method":"slow/never"}"#)
            .await;
        // Wait until the app has the request, then let it die.
        eventually("the app to get the request", || {
            seen.lock().unwrap().connections[0]
                .iter()
                .any(|l| l.contains("slow-1"))
        })
        .await;
        app.stop().await;
        let error = bridge.json().await;
        assert_eq!(error["id"], "slow-1");
        assert_eq!(error["error"]["code"], -32000);
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("closed the connection before answering"),
            "{}",
            message
        );
        let _app = App::start(&socket, &seen, Manner::Serve);
        bridge.send(&call(4, "back")).await;
        loop {
            let message = bridge.json().await;
            if message["id"] == 4 {
                break;
            }
        }
    });
}

/// An app that starts only after the client has spoken: the bridge waits
/// for it, and nothing the client sent meanwhile is lost or reordered.
#[test]
fn an_app_that_starts_late_is_waited_for_and_nothing_is_lost() {
    let (_dir, socket, seen) = setup("late");
    smol::block_on(async {
        let mut bridge = spawn_bridge(&socket, &["--connect-timeout", "30"]);
        bridge.send(INITIALIZE).await;
        bridge.send(INITIALIZED).await;
        bridge.send(&call(2, "early")).await;
        // The bridge has read all of it while no app exists: nothing is
        // left in its stdin pipe.
        let stdin = bridge.stdin.as_ref().unwrap();
        eventually("the bridge to read its stdin", || {
            rustix::io::ioctl_fionread(stdin).unwrap() == 0
        })
        .await;
        assert!(!socket.exists());
        let _app = App::start(&socket, &seen, Manner::Serve);
        assert_eq!(bridge.json().await["id"], 1);
        assert_eq!(bridge.json().await["result"]["content"][0]["text"], "early");
        let (code, stderr) = bridge.finish_with_stderr().await;
        assert_eq!(code, Some(0), "{}", stderr);
    });
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.connections[0][1..],
        [
            INITIALIZE.to_string(),
            INITIALIZED.to_string(),
            call(2, "early")
        ]
    );
}

/// No app at all: every request is answered with an error naming the
/// endpoint, under its id exactly as the client wrote it; notifications
/// get nothing; stdin's end is exit 1.
#[test]
fn an_absent_app_is_reported_to_every_request_under_its_own_id() {
    let (_dir, socket, _seen) = setup("absent");
    smol::block_on(async {
        let mut bridge = spawn_bridge(&socket, &["--connect-timeout", "0.2"]);
        let ids = [
            "1",
            "\"abc\"",
            "9007199254740993",
            r#""a\"b\\c\u00e9""#,
            "-7",
        ];
        for id in ids {
            bridge
                .send(&format!(
                    r#"{{"jsonrpc":"2.0","id":{},"method":"tools/list"}}"#,
                    id
                ))
                .await;
            bridge.send(INITIALIZED).await;
        }
        for id in ids {
            let line = bridge.line().await.expect("a line before stdout ends");
            let expected = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":-32000,\"message\":",
                id
            );
            assert!(
                line.starts_with(&expected),
                "{} does not start with {}",
                line,
                expected
            );
            let error: Value = serde_json::from_str(&line).unwrap();
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(&*socket.to_string_lossy()), "{}", message);
            assert!(message.contains("does not exist"), "{}", message);
        }
        let (code, stderr) = bridge.finish_with_stderr().await;
        assert_eq!(code, Some(1), "{}", stderr);
        assert!(stderr.contains("does not exist"), "{}", stderr);
    });
}

/// `--no-reconnect` is the plain relay of before: the app's hang-up ends
/// the bridge cleanly, and nothing but the app's bytes reach stdout.
#[test]
fn no_reconnect_ends_with_the_app() {
    let (_dir, socket, seen) = setup("plain");
    smol::block_on(async {
        let app = App::start(&socket, &seen, Manner::Serve);
        let mut bridge = spawn_bridge(&socket, &["--no-reconnect"]);
        bridge.send(INITIALIZE).await;
        assert_eq!(bridge.json().await["id"], 1);
        app.stop().await;
        assert!(within("stdout to end", bridge.stdout.next())
            .await
            .is_none());
        let status = within("the bridge to exit", bridge.child.status())
            .await
            .unwrap();
        assert_eq!(status.code(), Some(0));
    });
}

/// The app closes and does not come back within `--reconnect-timeout`:
/// from then on every request gets an error saying so, and stdin's end is
/// exit 1.
#[test]
fn an_app_that_does_not_come_back_in_time_is_reported() {
    let (_dir, socket, seen) = setup("gone");
    smol::block_on(async {
        let app = App::start(&socket, &seen, Manner::Serve);
        let mut bridge = spawn_bridge(&socket, &["--reconnect-timeout", "0.3"]);
        bridge.send(INITIALIZE).await;
        bridge.json().await;
        app.stop().await;
        bridge.send(&call(5, "anyone?")).await;
        let error = bridge.json().await;
        assert_eq!(error["id"], 5);
        assert_eq!(error["error"]["code"], -32000);
        bridge.send(&call(6, "still?")).await;
        assert_eq!(bridge.json().await["id"], 6);
        let (code, _) = bridge.finish_with_stderr().await;
        assert_eq!(code, Some(1));
    });
}

/// A host that refuses (closes at once, or sends a refusal line) is
/// reported in the protocol and on stderr, and not retried in a loop: it
/// sees one connection.
/// A refusal line is final at once. An app that closes the connection
/// without a word is no refusal (its listener may be up before its MCP
/// side): it is tried again until `--connect-timeout`, then said as what
/// it is. Either way the client hears within the bound, and the bridge
/// does not hammer the app.
#[test]
fn a_refusing_app_is_reported_and_a_silent_one_retried_then_said() {
    for (manner, reason, code, most) in [
        (
            Manner::HangUp,
            "closed it without a word",
            "app_closed_silently",
            12,
        ),
        (
            Manner::Refuse,
            "refused this client: no room for you",
            "app_refused",
            1,
        ),
    ] {
        let (_dir, socket, seen) = setup("refuse");
        smol::block_on(async {
            let _app = App::start(&socket, &seen, manner);
            let mut bridge = spawn_bridge(&socket, &["--connect-timeout", "1"]);
            let asked = std::time::Instant::now();
            bridge.send(INITIALIZE).await;
            let error = loop {
                let message = bridge.json().await;
                if message["id"] == 1 {
                    break message;
                }
            };
            let told = asked.elapsed();
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(reason), "{}", message);
            assert_eq!(error["error"]["data"]["reason"], code);
            // The connect timeout is the rule; the slack is for a loaded machine.
            assert!(told < std::time::Duration::from_secs(6), "{:?}", told);
            bridge.send(&call(2, "again")).await;
            assert_eq!(bridge.json().await["id"], 2);
            let (exit, stderr) = bridge.finish_with_stderr().await;
            assert_eq!(exit, Some(1));
            assert!(stderr.contains(reason), "{}", stderr);
        });
        let connections = seen.lock().unwrap().connections.len();
        assert!(connections <= most, "{} connections", connections);
    }
}

/// `--log` records both directions of the bridge's session and what its
/// survival logic did (connects, the resumed handshake, the reconnect, its
/// own lines, the exit), one line per record, and nothing of it reaches
/// stdout.
#[cfg(feature = "log")]
#[test]
fn the_log_records_the_session_and_the_restart() {
    let (dir, socket, seen) = setup("log");
    let log = dir.0.join("traffic.log");
    let log_arg = log.to_string_lossy().into_owned();
    smol::block_on(async {
        let app = App::start(&socket, &seen, Manner::Serve);
        let mut bridge = spawn_bridge(&socket, &["--log", &log_arg]);
        bridge.send(INITIALIZE).await;
        assert_eq!(bridge.json().await["id"], 1);
        app.stop().await;
        let _app = App::start(&socket, &seen, Manner::Serve);
        let (reply, _) = call_after_restart(&mut bridge, 2, "logged").await;
        assert_eq!(reply["result"]["content"][0]["text"], "logged", "{}", reply);
        let (code, _) = bridge.finish_with_stderr().await;
        assert_eq!(code, Some(0));
    });
    let text = std::fs::read_to_string(&log).unwrap();
    for needle in [
        "start mcp-bridge",
        "connect attempt=1",
        "handshake sent",
        "cli->app request id=1 method=initialize",
        "app->cli response id=1",
        "the app hung up",
        "reconnect attempt=2",
        "\"resumed\":true",
        "bridge->cli {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}",
        "cli->app request id=2 method=tools/call",
        "exit code=0",
    ] {
        assert!(
            text.contains(needle),
            "the log lacks {:?}:\n{}",
            needle,
            text
        );
    }
}
