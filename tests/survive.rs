//! The bridge survives the app: it waits for an app that is starting,
//! tells the client why in the protocol when the app cannot be reached or
//! refuses, and carries the session across a restart. Real bridge process,
//! real socket, the scripted MCP host of `support::scripted` (in this
//! process, or in one of its own where it must die or exit as an app does).
#![cfg(unix)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use futures_lite::StreamExt;
use serde_json::{json, Value};
use support::scripted::{call, Host, Script, INITIALIZE, INITIALIZED, ROUNDS};
use support::{bridge_command, eventually, within, Bridge, TempDir};

/// The app of these tests: an MCP server with one `echo` tool, whose tools
/// and prompts (not resources) may change, that never answers `slow/never`;
/// a host process of it closes its connections before its listener when it
/// stops, and keeps the listener for 400 ms (a bridge reconnecting at once
/// lands in a backlog never served).
fn app() -> Script {
    Script {
        capabilities: json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true}, "resources": {}}),
        ignore: vec!["slow/never".into()],
        linger_ms: 400,
        ..Script::named("test-app")
    }
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

/// A bridge to `socket` (see [`spawn_bridge`]) with its session open:
/// `initialize` answered, `notifications/initialized` sent.
async fn open_session(socket: &Path, extra: &[&str]) -> Bridge {
    let mut bridge = spawn_bridge(socket, extra);
    bridge.send(INITIALIZE).await;
    assert_eq!(bridge.json().await["id"], 1);
    bridge.send(INITIALIZED).await;
    bridge
}

/// Calls `echo` with `text` as request `id` and checks the app's answer.
async fn echoed(bridge: &mut Bridge, id: u32, text: &str) {
    bridge.send(&call(id, text)).await;
    let reply = bridge.json().await;
    assert_eq!(reply["result"]["content"][0]["text"], text, "{}", reply);
}

/// Not a test of the bridge: the process [`Host::spawn`] starts
/// (`support::scripted`).
#[test]
fn scripted_host() {
    support::scripted::host_process();
}

/// How the restart tests stop the first host.
#[derive(Clone, Copy)]
enum Stop {
    Kill,
    Exit,
}

/// Waits until `host` has the request whose id is `"slow"` (or a batch
/// holding it).
async fn got_slow(host: &mut Host) {
    host.got("the slow request", |line| {
        line.to_string().contains("\"slow\"")
    })
    .await;
}

/// A request the app never answers.
const SLOW: &str = r#"{"jsonrpc":"2.0","id":"slow","method":"slow/never"}"#;

/// One session through a host process that dies (as `stop` says) with
/// `in_flight` unanswered, and is started again on the same path: what was
/// in flight gets its error at once (`errors` checks it), the next call is
/// answered by the new host, and the bridge exits 0 when stdin closes.
async fn restart_round(socket: &Path, stop: Stop, in_flight: &str, errors: impl Fn(&Value)) {
    let mut host = Host::spawn(socket, app()).await;
    let mut bridge = open_session(socket, &[]).await;
    echoed(&mut bridge, 2, "before").await;
    bridge.send(in_flight).await;
    got_slow(&mut host).await;
    match stop {
        Stop::Kill => host.kill().await,
        Stop::Exit => host.stop().await,
    }
    errors(&bridge.json().await);
    let new_host = Host::spawn(socket, app()).await;
    let (reply, _) = call_after_restart(&mut bridge, 3, "after").await;
    assert_eq!(reply["result"]["content"][0]["text"], "after", "{}", reply);
    let (code, stderr) = bridge.finish_with_stderr().await;
    assert_eq!(code, Some(0), "{}", stderr);
    new_host.kill().await;
}

/// The error of the one request in flight, [`SLOW`].
fn slow_failed(error: &Value) {
    assert_eq!(error["id"], "slow", "{}", error);
}

/// [`restart_round`] [`ROUNDS`] times in a row on one path (`tag` names
/// the rounds on stderr).
fn restart_rounds(tag: &str, stop: Stop, in_flight: &str, errors: impl Fn(&Value)) {
    let (_dir, socket) = setup(tag);
    for round in 0..ROUNDS {
        smol::block_on(restart_round(&socket, stop, in_flight, &errors));
        eprintln!("{}: round {} of {} passed", tag, round + 1, ROUNDS);
    }
}

/// The issue's first report: a host SIGKILLed with a call in flight and
/// restarted on the same path. [`ROUNDS`] times in a row.
#[test]
fn a_sigkilled_host_restarted_on_the_same_path_is_resumed_every_time() {
    restart_rounds("sigkill", Stop::Kill, SLOW, slow_failed);
}

/// A JSON-RPC batch in flight when the host is SIGKILLed gets one array of
/// errors at once, one per request in it (none for its notification); the
/// next call reaches the host started again on the same path. [`ROUNDS`]
/// times in a row.
#[test]
fn a_batch_in_flight_when_the_host_is_sigkilled_gets_one_array_of_errors_every_time() {
    // The host answers no batch: this one stays in flight.
    let batch = r#" [{"jsonrpc":"2.0","id":"slow","method":"slow/never"},{"jsonrpc":"2.0","method":"notifications/progress"},{"jsonrpc":"2.0","id":7,"method":"slow/never"}]"#;
    let one_array = |errors: &Value| {
        assert_eq!(errors.as_array().map(Vec::len), Some(2), "{}", errors);
        assert_eq!(errors[0]["id"], "slow", "{}", errors);
        assert_eq!(errors[1]["id"], 7, "{}", errors);
        let message = errors[1]["error"]["message"].as_str().unwrap();
        assert!(message.contains("before answering"), "{}", message);
    };
    restart_rounds("batchkill", Stop::Kill, batch, one_array);
}

/// The issue's second report: a host that closes its connections before its
/// listening socket, so the bridge's first reconnect lands in a backlog
/// that is never served and is reset at the exit. [`ROUNDS`] times.
#[test]
fn a_host_that_closes_its_connections_before_its_listener_is_resumed_every_time() {
    restart_rounds("linger", Stop::Exit, SLOW, slow_failed);
}

/// An app that answers the replayed `initialize` and closes again, over and
/// over: the bridge backs off, gives up at `--reconnect-timeout`, answers
/// the request held meanwhile with the reason, and exits 1. Connections and
/// `list_changed` notices stay few. [`ROUNDS`] times.
#[test]
fn a_crash_looping_app_is_retried_boundedly_then_reported() {
    for round in 0..ROUNDS {
        let (_dir, socket) = setup("crashloop");
        smol::block_on(async {
            let crash_loop = Script {
                die_on: "notifications/initialized".into(),
                ..app()
            };
            let mut host = Host::start(&socket, crash_loop);
            let mut bridge = open_session(&socket, &["--reconnect-timeout", "1"]).await;
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
            let connections = host.events_of("connected").len();
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
        let (_dir, socket) = setup("heldbig");
        smol::block_on(async {
            let mut host = Host::start(&socket, app());
            let mut bridge = open_session(&socket, &[]).await;
            bridge.send(SLOW).await;
            got_slow(&mut host).await;
            host.stop().await;
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
            let _host = Host::start(&socket, app());
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

fn setup(tag: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag, 0o700);
    let socket = dir.socket();
    (dir, socket)
}

/// The app restarts between two `tools/call`s of one session: the second
/// still succeeds, the client is told the lists changed, and the new app
/// instance got the resumed handshake and the replayed session under the
/// bridge's own ids, whose replies never reached the client.
#[test]
fn a_restart_does_not_end_the_session() {
    let (_dir, socket) = setup("restart");
    smol::block_on(async {
        let mut first = Host::start(&socket, app());
        let mut bridge = open_session(&socket, &[]).await;
        echoed(&mut bridge, 2, "before").await;
        let handshakes = first.events_of("connected");
        assert_eq!(handshakes.len(), 1);
        assert_eq!(
            handshakes[0]["handshake"],
            "{\"project\":\"p\",\"requester\":\"r\"}\n"
        );

        first.stop().await;
        let mut second = Host::start(&socket, app());
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

        let handshakes = second.events_of("connected");
        assert_eq!(handshakes.len(), 1);
        assert_eq!(
            handshakes[0]["handshake"],
            "{\"project\":\"p\",\"requester\":\"r\",\"resumed\":true}\n"
        );
        let lines = second.lines();
        let replayed = &lines[0];
        assert_eq!(replayed["method"], "initialize");
        assert_eq!(replayed["id"], "mcp-bridge-replay-1");
        assert_eq!(
            replayed["params"]["clientInfo"]["name"], "test-client",
            "the client's own request"
        );
        let json = |line: &str| serde_json::from_str::<Value>(line).unwrap();
        assert_eq!(lines[1], json(INITIALIZED));
        assert_eq!(lines[2], json(&call(3, "after")));
    });
}

/// A request the app never answered when it closed the connection gets an
/// error response at once: before the app is even back.
#[test]
fn a_request_in_flight_at_the_hang_up_gets_an_error_at_once() {
    let (_dir, socket) = setup("inflight");
    smol::block_on(async {
        let mut host = Host::start(&socket, app());
        let mut bridge = spawn_bridge(&socket, &[]);
        bridge.send(INITIALIZE).await;
        bridge.json().await;
        bridge
            .send(r#"{"jsonrpc":"2.0","id":"slow-1","method":"slow/never"}"#)
            .await;
        // Wait until the app has the request, then let it die.
        host.got("the slow request", |line| line["id"] == "slow-1")
            .await;
        host.stop().await;
        let error = bridge.json().await;
        assert_eq!(error["id"], "slow-1");
        assert_eq!(error["error"]["code"], -32000);
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("closed the connection before answering"),
            "{}",
            message
        );
        let _host = Host::start(&socket, app());
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
    let (_dir, socket) = setup("late");
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
        let mut host = Host::start(&socket, app());
        assert_eq!(bridge.json().await["id"], 1);
        assert_eq!(bridge.json().await["result"]["content"][0]["text"], "early");
        let (code, stderr) = bridge.finish_with_stderr().await;
        assert_eq!(code, Some(0), "{}", stderr);
        let json = |line: &str| serde_json::from_str::<Value>(line).unwrap();
        assert_eq!(
            host.lines(),
            [json(INITIALIZE), json(INITIALIZED), json(&call(2, "early"))]
        );
    });
}

/// No app at all: every request is answered with an error naming the
/// endpoint, under its id exactly as the client wrote it; notifications
/// get nothing; stdin's end is exit 1.
#[test]
fn an_absent_app_is_reported_to_every_request_under_its_own_id() {
    let (_dir, socket) = setup("absent");
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
    let (_dir, socket) = setup("plain");
    smol::block_on(async {
        let host = Host::start(&socket, app());
        let mut bridge = spawn_bridge(&socket, &["--no-reconnect"]);
        bridge.send(INITIALIZE).await;
        assert_eq!(bridge.json().await["id"], 1);
        host.stop().await;
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
    let (_dir, socket) = setup("gone");
    smol::block_on(async {
        let host = Host::start(&socket, app());
        let mut bridge = spawn_bridge(&socket, &["--reconnect-timeout", "0.3"]);
        bridge.send(INITIALIZE).await;
        bridge.json().await;
        host.stop().await;
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

/// A refusal line is final at once. An app that closes the connection
/// without a word is no refusal (its listener may be up before its MCP
/// side): it is tried again until `--connect-timeout`, then said as what
/// it is. Either way the client hears within the bound, and the bridge
/// does not hammer the app.
#[test]
fn a_refusing_app_is_reported_and_a_silent_one_retried_then_said() {
    for (refusal, reason, code, most) in [
        ("", "closed it without a word", "app_closed_silently", 12),
        (
            "no room for you",
            "refused this client: no room for you",
            "app_refused",
            1,
        ),
    ] {
        let (_dir, socket) = setup("refuse");
        smol::block_on(async {
            let refusing = Script {
                refuse: Some(refusal.into()),
                ..app()
            };
            let mut host = Host::start(&socket, refusing);
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
            let connections = host.events_of("connected").len();
            assert!(connections <= most, "{} connections", connections);
        });
    }
}

/// `--log` records both directions of the bridge's session and what its
/// survival logic did (connects, the resumed handshake, the reconnect, its
/// own lines, the exit), one line per record, and nothing of it reaches
/// stdout.
#[cfg(feature = "log")]
#[test]
fn the_log_records_the_session_and_the_restart() {
    let (dir, socket) = setup("log");
    let log = dir.0.join("traffic.log");
    let log_arg = log.to_string_lossy().into_owned();
    smol::block_on(async {
        let host = Host::start(&socket, app());
        let mut bridge = spawn_bridge(&socket, &["--log", &log_arg]);
        bridge.send(INITIALIZE).await;
        assert_eq!(bridge.json().await["id"], 1);
        host.stop().await;
        let _host = Host::start(&socket, app());
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
