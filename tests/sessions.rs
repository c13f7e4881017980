//! The session engine's scenarios (issue 28) through the real binary: what
//! real apps do to a session (hot reloads, slow and loading starts, deaths
//! at the worst moment, questions asked during the replay, subscriptions
//! by the thousand, changed apps, stray answers, reused ids), the modern
//! era (`server/discover`, `subscriptions/listen`), and an app that is not
//! there yet. Each test drives the bridge as an MCP CLI spawns it, against
//! the scripted host of `support::scripted` on real Unix sockets: in this
//! process ([`Host::start`]) or, where a process must die, in one of its
//! own ([`Host::spawn`]).
//!
//! `MCP_BRIDGE_TEST_BIN` points the tests at another bridge binary (see
//! `support::bin`): each scenario here fails against the build from before
//! the second session engine (only `scripted_host`, the hosts' process,
//! passes there).
#![cfg(unix)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::io::{AsyncBufReadExt, BufReader};
use futures_lite::StreamExt;
use serde_json::{json, Value};
use smol::channel::Receiver;
use smol::Task;
use support::scripted::{call, Host, Script, INITIALIZE, INITIALIZED, ROUNDS};
use support::{bridge_command, documented_reasons, within_limit, Bridge, TempDir};

/// The modern era's per-request context.
fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

/// A 2026-07-28 request: `params` with `_meta` added.
fn modern(id: Value, method: &str, mut params: Value) -> String {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Not a test of the bridge: the process [`Host::spawn`] starts
/// (`support::scripted`).
#[test]
fn scripted_host() {
    support::scripted::host_process();
}

// ---------------------------------------------------------------------------
// The bridge's side

/// The bridge's stderr, read as it comes.
struct Stderr {
    lines: Receiver<String>,
    seen: Vec<String>,
    cursor: usize,
    _reading: Task<()>,
}

impl Stderr {
    /// The next line after the last one found that contains `needle`,
    /// within `limit`.
    async fn wait_for(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            while let Ok(line) = self.lines.try_recv() {
                self.seen.push(line);
            }
            if let Some(at) = self.seen[self.cursor..]
                .iter()
                .position(|l| l.contains(needle))
            {
                self.cursor += at + 1;
                return self.seen[self.cursor - 1].clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let what = format!(
                "{:?} on the bridge's stderr (so far: {:?})",
                needle, self.seen
            );
            match within_limit(left, &what, self.lines.recv()).await {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("stderr ended before {}", what),
            }
        }
    }

    /// Waits, within `limit`, until any line so far contains `needle`
    /// (wherever the last [`Stderr::wait_for`] left off).
    async fn said(&mut self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.text().contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            let what = format!(
                "{:?} on the bridge's stderr (so far: {:?})",
                needle, self.seen
            );
            match within_limit(left, &what, self.lines.recv()).await {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("stderr ended before {}", what),
            }
        }
    }

    /// All of stderr so far.
    fn text(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

/// The bridge as the client sees it: spawned as an MCP CLI would, its
/// stdout read message by message, its stderr as it comes.
///
/// The hosts here never write an error with code -32000, so every one the
/// client gets is the bridge's, and [`Client::next`] checks each as issue
/// 28 asks ("errors a program can read"): `data.source` is `mcp-bridge`,
/// `data.reason` a documented one, `data.endpoint` the socket.
struct Client {
    bridge: Bridge,
    stderr: Stderr,
    socket: PathBuf,
}

impl Client {
    /// The bridge to `socket`, with `extra` arguments.
    fn spawn(socket: &Path, extra: &[&str]) -> Client {
        let mut bridge = Bridge::spawn(
            bridge_command(socket, "p", "r")
                .args(extra)
                .stderr(Stdio::piped()),
        );
        let stderr = bridge.child.stderr.take().unwrap();
        let (lines, received) = smol::channel::unbounded();
        let reading = smol::spawn(async move {
            let mut stderr = BufReader::new(stderr).lines();
            while let Some(Ok(line)) = stderr.next().await {
                if lines.send(line).await.is_err() {
                    return;
                }
            }
        });
        let stderr = Stderr {
            lines: received,
            seen: Vec::new(),
            cursor: 0,
            _reading: reading,
        };
        Client {
            bridge,
            stderr,
            socket: socket.to_path_buf(),
        }
    }

    async fn send(&mut self, line: &str) {
        self.bridge.send(line).await
    }

    async fn send_bytes(&mut self, bytes: &[u8]) {
        self.bridge.send_bytes(bytes).await
    }

    /// The next message, the bridge's errors in it checked (see
    /// [`Client`]).
    async fn next(&mut self) -> Value {
        let message = self.bridge.json().await;
        let each = match message.as_array() {
            Some(batch) => batch.iter().collect(),
            None => vec![&message],
        };
        for response in each {
            if response["error"]["code"] == -32000 {
                let data = &response["error"]["data"];
                assert_eq!(data["source"], "mcp-bridge", "{}", response);
                let reason = data["reason"].as_str().unwrap_or("(none)");
                assert!(documented_reasons().contains(&reason), "{}", response);
                let endpoint = self.socket.to_string_lossy();
                assert_eq!(data["endpoint"], endpoint.as_ref(), "{}", response);
            }
        }
        message
    }

    /// The next response to `id`, and the other messages that came before
    /// it.
    async fn reply(&mut self, id: &Value) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            if answers(&message, id) {
                return (message, before);
            }
            before.push(message);
        }
    }

    /// The result of the call `id`, answered by the host `by`: fails the
    /// test on an error. Returns what came before it.
    async fn answered(&mut self, id: u32, by: &str) -> Vec<Value> {
        let (reply, before) = self.reply(&json!(id)).await;
        assert_eq!(
            reply["result"]["servedBy"],
            by,
            "{} (after {:?}); stderr: {}",
            reply,
            before,
            self.stderr.text()
        );
        before
    }

    /// Calls `echo` with `text` under `id` and checks that the host `by`
    /// answered it (see [`Client::answered`]).
    async fn call(&mut self, id: u32, text: &str, by: &str) -> Vec<Value> {
        self.send(&call(id, text)).await;
        self.answered(id, by).await
    }

    /// Opens a legacy session: `initialize` (its result returned) and
    /// `notifications/initialized`.
    async fn open(&mut self) -> Value {
        self.send(INITIALIZE).await;
        let (reply, _) = self.reply(&json!(1)).await;
        assert!(reply.get("result").is_some(), "{}", reply);
        self.send(INITIALIZED).await;
        reply["result"].clone()
    }

    /// Checks that `reply` is the bridge's error with `reason` (its `data`
    /// checked by [`Client::next`]); returns its message.
    fn error(&mut self, reply: &Value, reason: &str) -> String {
        let error = &reply["error"];
        assert_eq!(error["code"], -32000, "{}", reply);
        assert_eq!(
            error["data"]["reason"],
            reason,
            "{}; stderr: {}",
            reply,
            self.stderr.text()
        );
        error["message"].as_str().unwrap().to_string()
    }

    /// Closes stdin; the exit code.
    async fn finish(self) -> Option<i32> {
        self.bridge.finish().await
    }

    /// Closes stdin and checks that the bridge exits 0.
    async fn finish_well(mut self) {
        let stderr = self.stderr.text();
        assert_eq!(self.finish().await, Some(0), "{}", stderr);
    }
}

/// Whether `message` is a response with `id` (a result or an error).
fn answers(message: &Value, id: &Value) -> bool {
    message.get("method").is_none() && &message["id"] == id
}

fn setup(tag: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag, 0o700);
    let socket = dir.socket();
    (dir, socket)
}

// ---------------------------------------------------------------------------
// Legacy era: what real apps do

/// "Hot reload": an app restarted over and over, each instance answering
/// a call before the next restart, keeps the session through every
/// restart, every call answered with a result by the instance it reached.
/// Instances that die before they serve are a crash loop, declared within
/// seconds (`crash_loop`); and the bridge takes the session back when an
/// instance finally serves.
#[test]
fn a_hot_reload_survives_every_restart_and_a_crash_loop_is_bounded() {
    let (_dir, socket) = setup("reload");
    smol::block_on(async {
        let mut host = Host::spawn(&socket, Script::named("app-0")).await;
        let mut client = Client::spawn(&socket, &[]);
        client.open().await;
        for round in 1..=ROUNDS {
            if round % 2 == 0 {
                host.kill().await;
            } else {
                host.stop().await;
            }
            let name = format!("app-{}", round);
            host = Host::spawn(&socket, Script::named(&name)).await;
            let id = 100 + round as u32;
            client.call(id, "reloaded", &name).await;
            eprintln!("reload: restart {} of {} survived", round, ROUNDS);
        }
        host.kill().await;
        // Every instance dies once it is given the session, before it
        // serves.
        let crashing = Host::start(
            &socket,
            Script {
                die_on: "notifications/initialized".into(),
                ..Script::named("crashing")
            },
        );
        let crashed = Instant::now();
        client
            .stderr
            .wait_for("crash-looping", Duration::from_secs(15))
            .await;
        let declared = crashed.elapsed();
        eprintln!("reload: the crash loop was declared after {:?}", declared);
        assert!(declared < Duration::from_secs(10), "{:?}", declared);
        client.send(&call(200, "crashing?")).await;
        let (error, _) = client.reply(&json!(200)).await;
        client.error(&error, "crash_loop");
        crashing.stop().await;
        let mut healed = Host::start(&socket, Script::named("healed"));
        healed.got_method("initialize").await;
        // Until the instance has taken the session, requests are still
        // answered at once: the bridge says when it has.
        client
            .stderr
            .wait_for("took the session", Duration::from_secs(5))
            .await;
        client.call(201, "healed?", "healed").await;
        client.finish_well().await;
        healed.stop().await;
    });
}

/// The first host of a restart test, called `name`: a session is opened
/// through `client` and a call answered (so it served); then it stops (a
/// process exits; in this process, its tasks end).
async fn served_then_stopped(host: Host, client: &mut Client, name: &str) {
    let mut host = host;
    client.open().await;
    client.call(2, "before", name).await;
    host.got_method("tools/call").await;
    host.stop().await;
}

/// "Slow start": a new instance that needs 6 s to answer the replayed
/// `initialize` is waited for (the rest of the default 30 s reconnect
/// timeout), on one connection, and the session goes on.
#[test]
fn a_new_instance_that_takes_six_seconds_to_answer_the_replay_is_waited_for() {
    let (_dir, socket) = setup("slow");
    smol::block_on(async {
        let first = Host::spawn(&socket, Script::named("first")).await;
        let mut client = Client::spawn(&socket, &[]);
        served_then_stopped(first, &mut client, "first").await;
        let slow = Script {
            init_delay_ms: 6000,
            ..Script::named("slow")
        };
        let mut slow = Host::spawn(&socket, slow).await;
        client.call(3, "after", "slow").await;
        let connections = slow.events_of("connected").len();
        assert_eq!(
            connections,
            1,
            "the replay was cut: {}",
            client.stderr.text()
        );
        client.finish_well().await;
        slow.stop().await;
    });
}

/// "Still loading": a new instance that answers the replayed `initialize`
/// with an error for its first 1.5 s is tried again until it accepts, and
/// the session goes on.
#[test]
fn a_new_instance_still_loading_is_tried_again_until_it_takes_the_session() {
    let (_dir, socket) = setup("loading");
    smol::block_on(async {
        let first = Host::start(&socket, Script::named("first"));
        let mut client = Client::spawn(&socket, &[]);
        served_then_stopped(first, &mut client, "first").await;
        let loading = Script {
            reject_init_ms: 1500,
            ..Script::named("loaded")
        };
        let mut loading = Host::start(&socket, loading);
        client.call(3, "after", "loaded").await;
        let connections = loading.events_of("connected").len();
        assert!(connections >= 2, "{} connection(s)", connections);
        client.finish_well().await;
        loading.stop().await;
    });
}

/// "Dies before the first reply": an app that dies right after reading the
/// session's first request (`initialize`) and is back 0.3 s later is a
/// restart, not a refusal: the new instance gets the client's `initialize`
/// and answers it, and the client gets that answer. [`ROUNDS`] times.
#[test]
fn an_app_that_dies_on_the_first_request_and_comes_back_answers_it() {
    let (_dir, socket) = setup("firstdeath");
    for round in 0..ROUNDS {
        smol::block_on(async {
            let dying = Script {
                die_on: "initialize".into(),
                ..Script::named("dying")
            };
            let mut dying = Host::spawn(&socket, dying).await;
            let mut client = Client::spawn(&socket, &[]);
            client.send(INITIALIZE).await;
            dying
                .until("the host to die", |e| e["event"] == "dying")
                .await;
            dying.reaped().await;
            // The app's own pause before it is back: part of the scenario,
            // not a wait for anything.
            Timer::after(Duration::from_millis(300)).await;
            let mut back = Host::spawn(&socket, Script::named("back")).await;
            let (reply, _) = client.reply(&json!(1)).await;
            assert_eq!(
                reply["result"]["serverInfo"]["name"],
                "back",
                "{} {}",
                reply,
                client.stderr.text()
            );
            let initialize = back.got_method("initialize").await;
            assert_eq!(initialize["id"], 1, "the client's own request");
            client.finish_well().await;
            back.stop().await;
        });
        eprintln!("first death: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// "Asks the client during the replay": a new app that sends `roots/list`
/// on `initialized` and answers nothing else until the client replies
/// (not even the replayed log level, which comes after `initialized`)
/// does not deadlock with the bridge: the question reaches the client, its
/// answer the app, and the session goes on.
#[test]
fn a_new_instance_asking_the_client_during_the_replay_is_answered() {
    let (_dir, socket) = setup("roots");
    let asking = |name: &str| Script {
        capabilities: json!({"tools": {"listChanged": true}, "logging": {}}),
        roots_on_initialized: true,
        ..Script::named(name)
    };
    smol::block_on(async {
        let mut first = Host::start(&socket, asking("first"));
        let mut client = Client::spawn(&socket, &[]);
        client.open().await;
        let roots = client.next().await;
        assert_eq!(roots["method"], "roots/list", "{}", roots);
        client
            .send(r#"{"jsonrpc":"2.0","id":0,"result":{"roots":[]}}"#)
            .await;
        client
            .send(
                r#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}"#,
            )
            .await;
        client.reply(&json!(2)).await;
        client.call(3, "before", "first").await;
        first.got_method("tools/call").await;
        first.stop().await;
        let mut second = Host::start(&socket, asking("second"));
        client.send(&call(4, "after")).await;
        let limit = Duration::from_secs(10);
        let roots = within_limit(limit, "roots/list from the new instance", async {
            loop {
                let message = client.next().await;
                if message["method"] == "roots/list" {
                    return message;
                }
                assert!(message.get("id").is_none(), "{}", message);
            }
        })
        .await;
        client
            .send(
                &json!({"jsonrpc": "2.0", "id": roots["id"], "result": {"roots": []}}).to_string(),
            )
            .await;
        within_limit(limit, "the call's answer", client.answered(4, "second")).await;
        let reply = second
            .got("the client's answer", |l| l.get("method").is_none())
            .await;
        assert_eq!(reply["result"]["roots"], json!([]));
        client.finish_well().await;
        second.stop().await;
    });
}

/// How many subscriptions [`a_thousand_subscriptions_are_replayed_at_once`]
/// replays.
const SUBSCRIPTIONS: u32 = 1000;

/// "Many subscriptions": 1,000 `resources/subscribe` replayed to an app
/// that answers each in 6 ms: the new instance gets all of them before it
/// has answered the first few (they are pipelined, not one at a time), the
/// session goes on meanwhile, and none of their answers reaches the
/// client.
#[test]
fn a_thousand_subscriptions_are_replayed_at_once() {
    let (_dir, socket) = setup("subs");
    let subscribing = |name: &str, delay: u64| Script {
        capabilities: json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}}),
        subscribe_delay_ms: delay,
        ..Script::named(name)
    };
    smol::block_on(async {
        let first = Host::start(&socket, subscribing("first", 0));
        let mut client = Client::spawn(&socket, &[]);
        client.open().await;
        let mut subscribes = String::new();
        for n in 0..SUBSCRIPTIONS {
            let line = json!({"jsonrpc": "2.0", "id": 1000 + n, "method": "resources/subscribe", "params": {"uri": format!("file:///r/{}", n)}});
            subscribes.push_str(&format!("{}\n", line));
        }
        client.send_bytes(subscribes.as_bytes()).await;
        for n in 0..SUBSCRIPTIONS {
            client.reply(&json!(1000 + n)).await;
        }
        first.stop().await;
        let mut second = Host::start(&socket, subscribing("second", 6));
        client.send(&call(5, "after")).await;
        let last = second
            .until("the last subscription", |e| {
                e["line"]["params"]["uri"] == format!("file:///r/{}", SUBSCRIPTIONS - 1)
            })
            .await;
        let early = last["answered"].as_u64().unwrap();
        eprintln!("subscriptions: {} answered when the last came", early);
        assert!(early < 20, "{} answered before the last came", early);
        let mut seen = client.answered(5, "second").await;
        let all = SUBSCRIPTIONS as u64;
        second
            .until("every subscription answered", |e| {
                e["event"] == "answered" && e["count"] == all
            })
            .await;
        seen.extend(client.call(6, "fence", "second").await);
        let stray: Vec<&Value> = seen.iter().filter(|m| m.get("method").is_none()).collect();
        assert!(stray.is_empty(), "answers for nobody: {:?}", stray);
        let replayed = second
            .lines()
            .iter()
            .filter(|l| l["method"] == "resources/subscribe")
            .count();
        assert_eq!(replayed, SUBSCRIPTIONS as usize);
        client.finish_well().await;
        second.stop().await;
    });
}

/// "A subscribe the new instance ignores": a new instance that never
/// answers the replayed `resources/subscribe` still takes the session,
/// which goes on.
#[test]
fn a_replayed_subscribe_the_new_instance_ignores_does_not_cost_the_session() {
    let (_dir, socket) = setup("ignored");
    let capabilities = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
    smol::block_on(async {
        let first = Script {
            capabilities: capabilities.clone(),
            ..Script::named("first")
        };
        let first = Host::start(&socket, first);
        let mut client = Client::spawn(&socket, &[]);
        client.open().await;
        client
            .send(r#"{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#)
            .await;
        client.reply(&json!(2)).await;
        first.stop().await;
        let ignoring = Script {
            capabilities,
            ignore: vec!["resources/subscribe".into()],
            ..Script::named("ignoring")
        };
        let mut second = Host::start(&socket, ignoring);
        client.call(3, "after", "ignoring").await;
        second.got_method("resources/subscribe").await;
        client.call(4, "still", "ignoring").await;
        client.finish_well().await;
        second.stop().await;
    });
}

/// "A request sent just after the app died", that no app received: it
/// reaches the new instance and gets its answer, not an error. The host is
/// SIGKILLed and the request written right after the kill. [`ROUNDS`]
/// times in each era: a legacy session (`initialize`, replayed to the new
/// instance) and a 2026-07-28 one (`_meta` on every request, nothing
/// replayed).
#[test]
fn a_request_sent_just_after_the_app_died_reaches_the_new_instance() {
    let (_dir, socket) = setup("afterkill");
    for legacy in [true, false] {
        let era = if legacy { "legacy" } else { "2026-07-28" };
        let script = |name: &str| match legacy {
            true => Script::named(name),
            false => modern_app(name),
        };
        let request = |id: u32, text: &str| match legacy {
            true => call(id, text),
            false => {
                let params = json!({"name": "echo", "arguments": {"text": text}});
                modern(json!(id), "tools/call", params)
            }
        };
        for round in 0..ROUNDS {
            smol::block_on(async {
                let mut first = Host::spawn(&socket, script("first")).await;
                let mut client = Client::spawn(&socket, &[]);
                if legacy {
                    client.open().await;
                }
                client.send(&request(2, "before")).await;
                client.answered(2, "first").await;
                first.sigkill();
                client.send(&request(3, "just after")).await;
                first.reaped().await;
                let got: Vec<Value> = first.lines().into_iter().filter(|l| l["id"] == 3).collect();
                assert!(got.is_empty(), "the killed host read it: {:?}", got);
                let mut second = Host::spawn(&socket, script("second")).await;
                client.answered(3, "second").await;
                client.finish_well().await;
                let received = second.got_method("tools/call").await;
                assert_eq!(received["id"], 3, "{}: the client's own id", era);
                second.stop().await;
            });
            eprintln!(
                "just after ({}): round {} of {} passed",
                era,
                round + 1,
                ROUNDS
            );
        }
    }
}

/// `--reconnect-timeout 6`: the bridge gives up 6 s after the hang-up
/// (within half a second; [5.5, 7] s on a loaded machine), though what
/// listens meanwhile never answers, and says 6 s; then it is absent:
/// requests are answered at once with `app_not_running`; and it goes
/// online again when an app comes.
#[test]
fn the_reconnect_timeout_is_held_and_the_bridge_goes_on_looking() {
    let (_dir, socket) = setup("timeout");
    smol::block_on(async {
        let first = Host::start(&socket, Script::named("first"));
        let mut client = Client::spawn(&socket, &["--reconnect-timeout", "6"]);
        served_then_stopped(first, &mut client, "first").await;
        let hung_up = Instant::now();
        // What comes back is frozen: it listens, and never accepts. An
        // attempt that reaches it must not carry the bridge past the
        // deadline.
        let frozen = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        client.send(&call(3, "held")).await;
        let (error, _) = client.reply(&json!(3)).await;
        let gave_up = hung_up.elapsed();
        drop(frozen);
        std::fs::remove_file(&socket).unwrap();
        eprintln!("reconnect timeout: gave up {:?} after the hang-up", gave_up);
        assert!(
            gave_up >= Duration::from_millis(5500) && gave_up <= Duration::from_secs(7),
            "gave up after {:?}",
            gave_up
        );
        let message = client.error(&error, "app_not_running");
        assert!(
            message.contains("6s") || message.contains("6 s"),
            "{}",
            message
        );
        client.send(&call(4, "absent")).await;
        let (error, _) = within_limit(Duration::from_secs(2), "an answer at once", async {
            client.reply(&json!(4)).await
        })
        .await;
        client.error(&error, "app_not_running");
        let mut back = Host::start(&socket, Script::named("back"));
        client
            .stderr
            .wait_for("took the session", Duration::from_secs(5))
            .await;
        client.call(5, "back", "back").await;
        back.got_method("tools/call").await;
        client.finish_well().await;
        back.stop().await;
    });
}

/// Absent means answered at once, though something listens at the
/// endpoint: after the deadline, an app that accepts connections and
/// never answers (frozen) does not make the bridge hold requests again
/// while it looks.
#[test]
fn a_frozen_app_does_not_hold_requests_once_the_bridge_is_absent() {
    let (_dir, socket) = setup("frozen");
    smol::block_on(async {
        let first = Host::start(&socket, Script::named("first"));
        let mut client = Client::spawn(&socket, &["--reconnect-timeout", "2"]);
        served_then_stopped(first, &mut client, "first").await;
        let _frozen = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        client.send(&call(3, "held")).await;
        let (error, _) = client.reply(&json!(3)).await;
        client.error(&error, "app_not_running");
        // The bridge looks again, and reaches the frozen app.
        client
            .stderr
            .wait_for("reached the app", Duration::from_secs(5))
            .await;
        client.send(&call(4, "absent")).await;
        let (error, _) = within_limit(Duration::from_secs(1), "an answer at once", async {
            client.reply(&json!(4)).await
        })
        .await;
        client.error(&error, "app_not_running");
        assert_eq!(client.finish().await, Some(1));
    });
}

/// "A changed app": the resumed instance speaks protocol 2024-11-05 (the
/// client negotiated 2025-06-18) and has dropped resources, prompts and
/// logging. The client is warned (`notifications/message`, the session had
/// logging) of each loss, stderr says it, the replayed subscribe and log
/// level are not sent, and `tools/list_changed` comes only when the client
/// was told tools had `listChanged: true` (both ways).
#[test]
fn what_a_changed_app_lost_is_said_and_not_replayed() {
    for list_changed in [true, false] {
        let (_dir, socket) = setup("changed");
        smol::block_on(async {
            let tools = json!({"listChanged": list_changed});
            let first = Script {
                capabilities: json!({"tools": tools, "prompts": {}, "resources": {"subscribe": true}, "logging": {}}),
                ..Script::named("first")
            };
            let first = Host::start(&socket, first);
            let mut client = Client::spawn(&socket, &[]);
            client.open().await;
            client
                .send(r#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}"#)
                .await;
            client.reply(&json!(2)).await;
            client
                .send(r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#)
                .await;
            client.reply(&json!(3)).await;
            first.stop().await;
            let changed = Script {
                protocol: "2024-11-05".into(),
                capabilities: json!({"tools": tools}),
                ..Script::named("changed")
            };
            let mut second = Host::start(&socket, changed);
            let mut seen = client.call(4, "after", "changed").await;
            seen.extend(client.call(5, "fence", "changed").await);
            let warnings: Vec<String> = seen
                .iter()
                .filter(|m| m["method"] == "notifications/message")
                .map(|m| {
                    assert_eq!(m["params"]["level"], "warning", "{}", m);
                    assert_eq!(m["params"]["logger"], "mcp-bridge", "{}", m);
                    m["params"]["data"].to_string()
                })
                .collect();
            for lost in ["2024-11-05", "resources", "prompts", "log"] {
                assert!(
                    warnings.iter().any(|w| w.contains(lost)),
                    "no warning names {:?}: {:?}",
                    lost,
                    warnings
                );
                // stderr is written by its own thread: it may come a little
                // after the warning on stdout.
                client.stderr.said(lost, Duration::from_secs(5)).await;
            }
            for line in second.lines() {
                let method = &line["method"];
                assert!(
                    method != "logging/setLevel" && method != "resources/subscribe",
                    "replayed to an instance without it: {}",
                    line
                );
            }
            let told: Vec<&Value> = seen
                .iter()
                .filter(|m| m["method"] == "notifications/tools/list_changed")
                .collect();
            assert_eq!(told.len(), usize::from(list_changed), "{:?}", seen);
            client.finish_well().await;
            second.stop().await;
        });
    }
}

/// "Answers nobody asked for": the new instance's replies to an id it
/// never received (99) and to one the bridge already answered with its
/// error (5) do not reach the client. And a request the client cancelled
/// while it was held gets no answer at all, neither when the app comes
/// back nor at the next restart.
#[test]
fn answers_nobody_asked_for_and_cancelled_requests_reach_nobody() {
    let (_dir, socket) = setup("stray");
    smol::block_on(async {
        let mut first = Host::start(&socket, Script::named("first"));
        let mut client = Client::spawn(&socket, &[]);
        client.open().await;
        client.send(&call(5, "never")).await;
        first.got_method("tools/call").await;
        first.stop().await;
        let (error, _) = client.reply(&json!(5)).await;
        client.error(&error, "app_restarting");
        let strays = Script {
            on_initialized: vec![
                json!({"jsonrpc": "2.0", "id": 99, "result": {"stray": true}}),
                json!({"jsonrpc": "2.0", "id": 5, "result": {"stray": true}}),
            ],
            ..Script::named("strays")
        };
        let second = Host::start(&socket, strays);
        let mut seen = client.call(6, "after", "strays").await;
        second.stop().await;
        // Held while no app is there, then cancelled.
        client.send(&call(7, "never")).await;
        client
            .send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}"#)
            .await;
        let mut third = Host::start(&socket, Script::named("third"));
        seen.extend(client.call(8, "third", "third").await);
        third.got_method("tools/call").await;
        third.stop().await;
        let fourth = Host::start(&socket, Script::named("fourth"));
        seen.extend(client.call(9, "fourth", "fourth").await);
        for id in [json!(99), json!(5), json!(7)] {
            let wrong: Vec<&Value> = seen.iter().filter(|m| answers(m, &id)).collect();
            assert!(wrong.is_empty(), "answers to {}: {:?}", id, wrong);
        }
        client.finish_well().await;
        fourth.stop().await;
    });
}

/// The question the old instance asks (`elicitation/create` id 0), and the
/// one the new one asks under the same id.
fn elicit(message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {"message": message, "requestedSchema": {"type": "object"}}})
}

/// A session whose app asked the client "Create file?" (id 0) and then
/// restarted with the question open: the client was told it is cancelled.
/// Returns the client; the host that asked is stopped.
async fn asked_then_restarted(socket: &Path) -> Client {
    let mut first = Host::start(socket, Script::named("first"));
    let mut client = Client::spawn(socket, &[]);
    client.open().await;
    first.got_method("notifications/initialized").await;
    first.send(elicit("Create file?")).await;
    let question = client.next().await;
    assert_eq!(
        question["params"]["message"], "Create file?",
        "{}",
        question
    );
    first.stop().await;
    let cancelled = client.next().await;
    assert_eq!(
        cancelled["method"], "notifications/cancelled",
        "{}",
        cancelled
    );
    assert_eq!(cancelled["params"]["requestId"], 0, "{}", cancelled);
    client
}

/// One round of "a reply delivered to the wrong question": the new app
/// asks id 0 "Delete repository?" and gets `id_in_use` from the bridge; the
/// user's late accept to "Create file?" (as `late` writes it) reaches
/// nobody, and the client never sees the new question under the stale id.
async fn a_late_accept_answers_nothing(late: &str) {
    let (_dir, socket) = setup("wrongq");
    let mut client = asked_then_restarted(&socket).await;
    let asking = Script {
        on_initialized: vec![elicit("Delete repository?")],
        ..Script::named("second")
    };
    let mut second = Host::start(&socket, asking);
    // The new instance's question reaches the user, under an id of the
    // bridge's: the client may still answer 0 for the old one.
    let question = loop {
        let message = client.next().await;
        if message["method"] == "elicitation/create" {
            break message;
        }
    };
    assert_eq!(question["params"]["message"], "Delete repository?");
    assert!(
        question["id"]
            .as_str()
            .map_or(false, |id| id.starts_with("mcp-bridge-question-")),
        "{}",
        question
    );
    client.send(late).await;
    let decline = json!({"jsonrpc":"2.0","id":question["id"],"result":{"action":"decline"}});
    client.send(&decline.to_string()).await;
    client.send(&call(3, "fence")).await;
    client.answered(3, "second").await;
    second.got_method("tools/call").await;
    let replies: Vec<Value> = second
        .lines()
        .into_iter()
        .flat_map(|line| match line.as_array() {
            Some(batch) => batch.clone(),
            None => vec![line],
        })
        .filter(|r| r.get("result").is_some())
        .collect();
    // Only the user's answer to the new question, under the app's own id.
    assert_eq!(replies.len(), 1, "{:?}", replies);
    assert_eq!(replies[0]["id"], 0, "{:?}", replies);
    assert_eq!(
        replies[0]["result"]["action"], "decline",
        "the late accept reached the new app: {:?}",
        replies
    );
    client.finish_well().await;
    second.stop().await;
}

/// "A reply delivered to the wrong question (security)": the user's late
/// accept to the old instance's "Create file?" (id 0) never reaches the new
/// instance as the answer to its "Delete repository?" (id 0), which the
/// user sees under an id of the bridge's and answers for itself.
#[test]
fn a_late_reply_never_answers_the_new_instances_question() {
    smol::block_on(a_late_accept_answers_nothing(
        r#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept","content":{}}}"#,
    ));
}

/// The same through a batch: the late accept inside a JSON-RPC array of
/// replies reaches nobody either.
#[test]
fn a_late_batch_of_replies_never_answers_the_new_instances_question() {
    smol::block_on(a_late_accept_answers_nothing(
        r#"[{"jsonrpc":"2.0","id":0,"result":{"action":"accept","content":{}}}]"#,
    ));
}

/// With a stale id open (the old instance's question unanswered), a
/// client line cut by the restart goes whole to the new instance and is
/// answered (id 20); no fragment of it reaches anyone.
#[test]
fn a_line_cut_by_the_restart_goes_whole_to_the_new_instance_with_an_id_stale() {
    let (_dir, socket) = setup("cutline");
    smol::block_on(async {
        let mut first = Host::start(&socket, Script::named("first"));
        let mut client = Client::spawn(&socket, &[]);
        client.open().await;
        first.got_method("notifications/initialized").await;
        first.send(elicit("Create file?")).await;
        let question = client.next().await;
        assert_eq!(question["method"], "elicitation/create", "{}", question);
        let line = call(20, "cut");
        let (head, tail) = line.split_at(line.len() / 2);
        client.send_bytes(head.as_bytes()).await;
        first
            .until("the head of the line", |e| e["event"] == "partial")
            .await;
        first.stop().await;
        let cancelled = client.next().await;
        assert_eq!(
            cancelled["method"], "notifications/cancelled",
            "{}",
            cancelled
        );
        client.send(tail).await;
        let mut second = Host::start(&socket, Script::named("second"));
        let (reply, _) = within_limit(Duration::from_secs(10), "an answer to 20", async {
            client.reply(&json!(20)).await
        })
        .await;
        assert_eq!(reply["result"]["content"][0]["text"], "cut", "{}", reply);
        assert_eq!(reply["result"]["servedBy"], "second", "{}", reply);
        let whole = second.got_method("tools/call").await;
        assert_eq!(whole, serde_json::from_str::<Value>(&line).unwrap());
        assert!(second.events_of("junk").is_empty(), "{:?}", second.seen);
        client.finish_well().await;
        second.stop().await;
    });
}

// ---------------------------------------------------------------------------
// The modern era, and the app that is not there yet

/// A 2026-07-28 app.
fn modern_app(name: &str) -> Script {
    Script {
        protocol: "2026-07-28".into(),
        capabilities: json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true}}),
        ..Script::named(name)
    }
}

/// "An app absent for more than 5 s", modern era, with a cache an earlier
/// session filled: `server/discover` is answered from the cache (a result,
/// never an error) while the app is away; a request at 9 s, with the app up
/// since 8 s, is answered by the app (the bridge having found it within
/// about a second).
#[test]
fn server_discover_is_answered_from_the_cache_while_the_app_is_away() {
    let (dir, socket) = setup("discover");
    let cache = dir.0.join("cache");
    let cache_arg = cache.to_string_lossy().into_owned();
    smol::block_on(async {
        let app = modern_app("earlier");
        let discovered = app.discovered();
        let earlier = Host::start(&socket, app);
        let mut client = Client::spawn(&socket, &["--cache-dir", &cache_arg]);
        client
            .send(&modern(json!(1), "server/discover", json!({})))
            .await;
        let (reply, _) = client.reply(&json!(1)).await;
        assert_eq!(reply["result"], discovered, "{}", reply);
        client.finish_well().await;
        earlier.stop().await;

        let mut client = Client::spawn(&socket, &["--cache-dir", &cache_arg]);
        let started = Instant::now();
        client
            .send(&modern(json!(1), "server/discover", json!({})))
            .await;
        let (reply, _) = client.reply(&json!(1)).await;
        assert_eq!(
            reply["result"],
            discovered,
            "{} {}",
            reply,
            client.stderr.text()
        );
        Timer::at(started + Duration::from_secs(8)).await;
        let mut app = Host::start(&socket, modern_app("later"));
        // The bridge looks about once a second: it has found the app by 9 s
        // or soon after. Waiting for it to say so keeps the request from
        // racing its look.
        client
            .stderr
            .wait_for("took the session", Duration::from_millis(2500))
            .await;
        Timer::at(started + Duration::from_secs(9)).await;
        client
            .send(&modern(json!(2), "tools/list", json!({})))
            .await;
        client.answered(2, "later").await;
        app.got_method("tools/list").await;
        client.finish_well().await;
        app.stop().await;
    });
}

/// The same without a cache: `server/discover` gets `app_not_running`
/// within `--connect-timeout` (+1 s), and the bridge keeps looking: a
/// request made once the app is up is answered by it.
#[test]
fn without_a_cache_discover_gets_the_reason_in_time_and_the_bridge_keeps_looking() {
    let (_dir, socket) = setup("nocache");
    smol::block_on(async {
        let mut client = Client::spawn(&socket, &["--connect-timeout", "2"]);
        let asked = Instant::now();
        client
            .send(&modern(json!(1), "server/discover", json!({})))
            .await;
        let (error, _) = client.reply(&json!(1)).await;
        let told = asked.elapsed();
        assert!(told <= Duration::from_secs(3), "{:?}", told);
        client.error(&error, "app_not_running");
        let mut app = Host::start(&socket, modern_app("later"));
        client
            .stderr
            .wait_for("took the session", Duration::from_secs(5))
            .await;
        client
            .send(&modern(json!(2), "tools/list", json!({})))
            .await;
        client.answered(2, "later").await;
        app.got_method("tools/list").await;
        client.finish_well().await;
        app.stop().await;
    });
}

/// Modern era: a `subscriptions/listen` open across a restart is sent
/// again to the new instance under the client's id (and no `initialize`),
/// its new acknowledgement does not reach the client, and the client gets
/// one tagged `list_changed` per list type it subscribed to; nothing
/// untagged.
#[test]
fn an_open_listen_is_sent_again_and_each_subscribed_list_is_told_changed() {
    let (_dir, socket) = setup("listen");
    let listen_id = json!("listen-1");
    smol::block_on(async {
        let mut first = Host::start(&socket, modern_app("first"));
        let mut client = Client::spawn(&socket, &[]);
        client
            .send(&modern(json!(0), "server/discover", json!({})))
            .await;
        client.reply(&json!(0)).await;
        let filter = json!({"toolsListChanged": true, "promptsListChanged": true});
        let listen = modern(
            listen_id.clone(),
            "subscriptions/listen",
            json!({"notifications": filter}),
        );
        client.send(&listen).await;
        let ack = client.next().await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{}",
            ack
        );
        client
            .send(&modern(
                json!(2),
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "before"}}),
            ))
            .await;
        client.answered(2, "first").await;
        first.got_method("tools/call").await;
        first.stop().await;
        let mut second = Host::start(&socket, modern_app("second"));
        let again = second.got_method("subscriptions/listen").await;
        assert_eq!(again["id"], listen_id);
        client
            .send(&modern(
                json!(3),
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "after"}}),
            ))
            .await;
        let mut seen = client.answered(3, "second").await;
        client
            .send(&modern(
                json!(4),
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "fence"}}),
            ))
            .await;
        seen.extend(client.answered(4, "second").await);
        let mut changed = Vec::new();
        for message in &seen {
            let method = message["method"].as_str().unwrap_or("(a response)");
            assert!(method.ends_with("/list_changed"), "{}", message);
            let tag = &message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"];
            assert_eq!(tag, &listen_id, "untagged: {}", message);
            changed.push(method.to_string());
        }
        changed.sort();
        assert_eq!(
            changed,
            [
                "notifications/prompts/list_changed",
                "notifications/tools/list_changed"
            ]
        );
        let initialize = second
            .lines()
            .into_iter()
            .filter(|l| l["method"] == "initialize")
            .count();
        assert_eq!(initialize, 0, "an initialize replayed in a modern session");
        client.finish_well().await;
        second.stop().await;
    });
}

/// Modern era, "a hang-up during the session's first request" (a long
/// `tools/call`, no `initialize`): a restart, not a refusal. The call gets
/// `app_restarting`, and the next request is answered by the new instance.
/// [`ROUNDS`] times.
#[test]
fn a_hang_up_during_the_first_request_is_a_restart_not_a_refusal() {
    let (_dir, socket) = setup("firstcall");
    for round in 0..ROUNDS {
        smol::block_on(async {
            let mut first = Host::spawn(&socket, modern_app("first")).await;
            let mut client = Client::spawn(&socket, &[]);
            let long = json!({"name": "echo", "arguments": {"text": "never"}});
            client.send(&modern(json!(1), "tools/call", long)).await;
            first.got_method("tools/call").await;
            first.kill().await;
            let (error, _) = client.reply(&json!(1)).await;
            client.error(&error, "app_restarting");
            let mut second = Host::spawn(&socket, modern_app("second")).await;
            let quick = json!({"name": "echo", "arguments": {"text": "next"}});
            client.send(&modern(json!(2), "tools/call", quick)).await;
            client.answered(2, "second").await;
            client.finish_well().await;
            second.got_method("tools/call").await;
            second.stop().await;
        });
        eprintln!("first call: round {} of {} passed", round + 1, ROUNDS);
    }
}

/// "The app that is not there yet" (legacy): a client that starts before
/// the app, with a cache an earlier session filled, has its `initialize`
/// answered at once from the cache; a `tools/list` before the app comes
/// gets `app_not_running`; when the app comes, the client is told the tools
/// changed and `tools/list` works.
#[test]
fn a_client_before_the_app_is_answered_from_the_cache_and_told_when_it_comes() {
    let (dir, socket) = setup("before");
    let cache = dir.0.join("cache");
    let cache_arg = cache.to_string_lossy().into_owned();
    smol::block_on(async {
        let earlier = Host::start(&socket, Script::named("earlier"));
        let mut client = Client::spawn(&socket, &["--cache-dir", &cache_arg]);
        let told = client.open().await;
        client.finish_well().await;
        earlier.stop().await;

        let args = ["--cache-dir", &cache_arg, "--connect-timeout", "1"];
        let mut client = Client::spawn(&socket, &args);
        let asked = Instant::now();
        client.send(INITIALIZE).await;
        let (reply, _) = client.reply(&json!(1)).await;
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{:?}",
            asked.elapsed()
        );
        assert_eq!(reply["result"], told, "{} {}", reply, client.stderr.text());
        client.send(INITIALIZED).await;
        client
            .send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
            .await;
        let (error, _) = client.reply(&json!(2)).await;
        client.error(&error, "app_not_running");
        let mut app = Host::start(&socket, Script::named("later"));
        let changed = within_limit(Duration::from_secs(10), "tools/list_changed", async {
            loop {
                let message = client.next().await;
                if message["method"] == "notifications/tools/list_changed" {
                    return message;
                }
            }
        })
        .await;
        assert!(changed.get("params").is_none(), "{}", changed);
        client
            .send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#)
            .await;
        let (reply, _) = client.reply(&json!(3)).await;
        assert_eq!(reply["result"]["servedBy"], "later", "{}", reply);
        let replayed = app.got_method("initialize").await;
        assert_eq!(replayed["params"]["clientInfo"]["name"], "test-client");
        app.got_method("notifications/initialized").await;
        client.finish_well().await;
        app.stop().await;
    });
}

/// "stderr lines are written when they happen": when the bridge answers a
/// request because no app is there, its stderr says so at that time, long
/// before stdin closes.
#[test]
fn stderr_says_the_app_is_not_there_when_the_error_is_written() {
    let (_dir, socket) = setup("stderr");
    smol::block_on(async {
        let mut client = Client::spawn(&socket, &["--connect-timeout", "0.5"]);
        client
            .send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .await;
        let (error, _) = client.reply(&json!(1)).await;
        let endpoint = socket.to_string_lossy().into_owned();
        let line = client
            .stderr
            .wait_for(&endpoint, Duration::from_secs(5))
            .await;
        assert!(line.starts_with("mcp-bridge: "), "{}", line);
        assert!(line.contains("does not exist"), "{}", line);
        client.error(&error, "app_not_running");
        // stdin is still open: the line came while the session went on.
        assert!(client.bridge.stdin.is_some());
        assert_eq!(client.finish().await, Some(1));
    });
}
