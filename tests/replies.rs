//! The client's answers to the app's questions, and batches, through the
//! real binary (issue 41, items 1, 2, 3 and 6): a reply or batch the dying
//! instance never read is decided again as what it is; a question the
//! bridge gave an id of its own (`mcp-bridge-question-N`) gets its answer
//! under the app's id however the client writes it, and its cancel under
//! the client's; every request of a batch is answered once, however long
//! the line. Against the scripted hosts of `support::scripted` on real
//! Unix sockets ([`Manual`] where the test must say when the app reads).
//!
//! `MCP_BRIDGE_TEST_BIN` points the tests at another bridge binary (see
//! `support::bin`): each test here fails against 142801c, the build before
//! these fixes.
#![cfg(unix)]

mod support;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::scripted::{call, result, Host, Manual, Script, INITIALIZE, INITIALIZED};
use support::{bridge_command, Bridge, TempDir};

/// The old instance's question and the new one's, both id 0.
fn elicit(message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {"message": message, "requestedSchema": {"type": "object"}}})
}

fn setup(tag: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag, 0o700);
    let socket = dir.socket();
    (dir, socket)
}

fn spawn(socket: &std::path::Path) -> Bridge {
    Bridge::spawn(bridge_command(socket, "p", "r").stderr(std::process::Stdio::null()))
}

/// The next message that `matches`, and the ones before it.
async fn until(bridge: &mut Bridge, matches: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let message = bridge.json().await;
        if matches(&message) {
            return (message, before);
        }
        before.push(message);
    }
}

/// Whether `message` is a response to `id`, or an array holding one.
fn answers(message: &Value, id: &Value) -> bool {
    let one = |m: &Value| m.get("method").is_none() && &m["id"] == id;
    match message.as_array() {
        Some(batch) => batch.iter().any(one),
        None => one(message),
    }
}

/// Every line `host` got so far, arrays opened.
fn lines_of(host: &mut Host) -> Vec<Value> {
    host.lines()
        .into_iter()
        .flat_map(|line| match line.as_array() {
            Some(batch) => batch.clone(),
            None => vec![line],
        })
        .collect()
}

/// The replies to questions `host` got so far (arrays opened).
fn replies_of(host: &mut Host) -> Vec<Value> {
    let lines = lines_of(host);
    lines
        .into_iter()
        .filter(|l| {
            l.get("method").is_none() && (l.get("result").is_some() || l.get("error").is_some())
        })
        .collect()
}

/// A session opened with a [`Manual`] instance `first`, which answered its
/// `initialize` and got `notifications/initialized`.
async fn opened(socket: &std::path::Path) -> (Bridge, Manual) {
    let mut first = Manual::bind(socket);
    let mut bridge = spawn(socket);
    bridge.send(INITIALIZE).await;
    first.open("first").await;
    let (reply, _) = until(&mut bridge, |m| answers(m, &json!(1))).await;
    assert!(reply.get("result").is_some(), "{}", reply);
    bridge.send(INITIALIZED).await;
    let initialized = first.line().await;
    assert_eq!(initialized["method"], "notifications/initialized");
    (bridge, first)
}

/// The one reply in `replies`.
fn the_one(replies: &[Value]) -> &Value {
    assert_eq!(replies.len(), 1, "{:?}", replies);
    &replies[0]
}

/// The session ends well; the host stops.
async fn ended(bridge: Bridge, host: Host) {
    assert_eq!(bridge.finish().await, Some(0));
    host.stop().await;
}

/// Item 1 (security): instance A asks id 0 "Create file?", the user's
/// `accept` comes as a batch of one reply, and A dies before reading it.
/// Instance B then asks id 0 "Delete the whole repository?": the `accept`
/// never reaches it; B's question gets only the user's own answer.
#[test]
fn an_unread_reply_in_an_array_never_answers_the_next_instances_question() {
    let (_dir, socket) = setup("unreadarr");
    smol::block_on(async {
        let (mut bridge, mut first) = opened(&socket).await;
        first.send(&elicit("Create file?")).await;
        let (question, _) = until(&mut bridge, |m| m["method"] == "elicitation/create").await;
        assert_eq!(question["id"], 0, "{}", question);
        let accept = r#"[{"jsonrpc":"2.0","id":0,"result":{"action":"accept","content":{}}}]"#;
        bridge.send(accept).await;
        first.close_unread(format!("{}\n", accept).as_bytes()).await;
        let asking = Script {
            on_initialized: vec![elicit("Delete the whole repository?")],
            ..Script::named("second")
        };
        let mut second = Host::start(&socket, asking);
        let (question, _) = until(&mut bridge, |m| m["method"] == "elicitation/create").await;
        assert_eq!(
            question["params"]["message"],
            "Delete the whole repository?"
        );
        let decline =
            json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}});
        bridge.send(&decline.to_string()).await;
        bridge.send(&call(3, "fence")).await;
        let (fence, _) = until(&mut bridge, |m| answers(m, &json!(3))).await;
        assert_eq!(fence["result"]["servedBy"], "second", "{}", fence);
        second.got_method("tools/call").await;
        let replies = replies_of(&mut second);
        let reply = the_one(&replies);
        assert_eq!(
            reply["result"]["action"], "decline",
            "the accept reached B: {:?}",
            replies
        );
        ended(bridge, second).await;
    });
}

/// Item 2: a batch of two calls that the dying instance never read goes to
/// the next instance, whose array answers it: the client gets that one
/// answer, never an `app_restarting` before it.
#[test]
fn an_unread_batch_of_requests_is_answered_once_by_the_next_instance() {
    let (_dir, socket) = setup("unreadbatch");
    smol::block_on(async {
        let (mut bridge, first) = opened(&socket).await;
        let batch = format!("[{},{}]", call(5, "five"), call(6, "six"));
        bridge.send(&batch).await;
        first.close_unread(format!("{}\n", batch).as_bytes()).await;
        let mut second = Manual::bind(&socket);
        let replay = second.open("second").await;
        assert!(
            replay["id"]
                .as_str()
                .map_or(false, |id| id.starts_with("mcp-bridge-replay-")),
            "{}",
            replay
        );
        let initialized = second.line().await;
        assert_eq!(initialized["method"], "notifications/initialized");
        let got = second.line().await;
        let calls = got
            .as_array()
            .unwrap_or_else(|| panic!("the batch, whole: {}", got));
        assert_eq!(calls.len(), 2, "{}", got);
        let answer: Vec<Value> = calls
            .iter()
            .map(|c| result(&c["id"], json!({"content": [{"type": "text", "text": c["params"]["arguments"]["text"]}], "servedBy": "second"})))
            .collect();
        second.send(&Value::Array(answer)).await;
        let (answered, before) = until(&mut bridge, |m| answers(m, &json!(5))).await;
        assert_eq!(answered[0]["result"]["servedBy"], "second", "{}", answered);
        assert_eq!(answered[1]["id"], 6, "{}", answered);
        assert!(
            before.iter().all(|m| !answers(m, &json!(6))),
            "answered twice: {:?}",
            before
        );
        // Nothing more for 5 or 6 comes before the next answer.
        bridge.send(&call(7, "fence")).await;
        let fence = second.line().await;
        assert_eq!(fence["id"], 7, "{}", fence);
        second
            .send(&result(&json!(7), json!({"servedBy": "second"})))
            .await;
        let (_, between) = until(&mut bridge, |m| answers(m, &json!(7))).await;
        let again: Vec<&Value> = between
            .iter()
            .filter(|m| answers(m, &json!(5)) || answers(m, &json!(6)))
            .collect();
        assert!(again.is_empty(), "answered twice: {:?}", again);
        assert_eq!(bridge.finish().await, Some(0));
    });
}

/// Item 3's setup: A asked "Create file?" (id 0) and restarted with it
/// open; B asks "Delete the whole repository?" under the same id, which the
/// client sees under the bridge's id. Returns the client, B, and that id.
async fn mapped_question(socket: &std::path::Path) -> (Bridge, Host, Value) {
    let mut first = Host::start(socket, Script::named("first"));
    let mut bridge = spawn(socket);
    bridge.send(INITIALIZE).await;
    until(&mut bridge, |m| answers(m, &json!(1))).await;
    bridge.send(INITIALIZED).await;
    first.got_method("notifications/initialized").await;
    first.send(elicit("Create file?")).await;
    until(&mut bridge, |m| m["method"] == "elicitation/create").await;
    first.stop().await;
    let (cancelled, _) = until(&mut bridge, |m| m["method"] == "notifications/cancelled").await;
    assert_eq!(cancelled["params"]["requestId"], 0, "{}", cancelled);
    let asking = Script {
        on_initialized: vec![elicit("Delete the whole repository?")],
        ..Script::named("second")
    };
    let second = Host::start(socket, asking);
    let (question, _) = until(&mut bridge, |m| m["method"] == "elicitation/create").await;
    assert_eq!(
        question["params"]["message"],
        "Delete the whole repository?"
    );
    let shown = question["id"].clone();
    assert!(
        shown
            .as_str()
            .map_or(false, |id| id.starts_with("mcp-bridge-question-")),
        "{}",
        question
    );
    (bridge, second, shown)
}

/// The client's lines `replies`, then a fence call: B's replies once the
/// fence reached it.
async fn replied(bridge: &mut Bridge, second: &mut Host, lines: &str) -> Vec<Value> {
    bridge.send_bytes(lines.as_bytes()).await;
    bridge.send(&call(3, "fence")).await;
    let (fence, _) = until(bridge, |m| answers(m, &json!(3))).await;
    assert_eq!(fence["result"]["servedBy"], "second", "{}", fence);
    second.got_method("tools/call").await;
    replies_of(second)
}

/// Item 3: the client's answer to a mapped question inside an array
/// reaches the app under the app's own id.
#[test]
fn a_reply_in_an_array_to_a_mapped_question_reaches_the_app_under_its_own_id() {
    let (_dir, socket) = setup("maparray");
    smol::block_on(async {
        let (mut bridge, mut second, shown) = mapped_question(&socket).await;
        let reply = json!([{"jsonrpc": "2.0", "id": shown, "result": {"action": "decline"}}]);
        let replies = replied(&mut bridge, &mut second, &format!("{}\n", reply)).await;
        let reply = the_one(&replies);
        assert_eq!(reply["id"], 0, "{:?}", replies);
        assert_eq!(reply["result"]["action"], "decline", "{:?}", replies);
        ended(bridge, second).await;
    });
}

/// Item 3: a reply written result first (the TypeScript SDK's order) whose
/// result holds the same id as a value: the envelope's id is rewritten,
/// the value inside never.
#[test]
fn a_result_first_reply_to_a_mapped_question_has_its_envelope_id_rewritten_only() {
    let (_dir, socket) = setup("mapfirst");
    smol::block_on(async {
        let (mut bridge, mut second, shown) = mapped_question(&socket).await;
        let id = shown.to_string();
        let reply = format!(
            r#"{{"jsonrpc":"2.0","result":{{"action":"accept","content":{{"id":{}}}}},"id":{}}}"#,
            id, id
        );
        let replies = replied(&mut bridge, &mut second, &format!("{}\n", reply)).await;
        let reply = the_one(&replies);
        assert_eq!(reply["id"], 0, "{:?}", replies);
        assert_eq!(reply["result"]["content"]["id"], shown, "{:?}", replies);
        ended(bridge, second).await;
    });
}

/// Item 3: the app's `notifications/cancelled` for its mapped question
/// reaches the client under the id the client knows it by.
#[test]
fn the_apps_cancel_of_a_mapped_question_reaches_the_client_under_the_clients_id() {
    let (_dir, socket) = setup("mapcancel");
    smol::block_on(async {
        let (mut bridge, mut second, shown) = mapped_question(&socket).await;
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0, "reason": "timed out"}});
        second.send(cancel).await;
        let (cancelled, _) = until(&mut bridge, |m| m["method"] == "notifications/cancelled").await;
        assert_eq!(cancelled["params"]["requestId"], shown, "{}", cancelled);
        assert_eq!(cancelled["params"]["reason"], "timed out", "{}", cancelled);
        ended(bridge, second).await;
    });
}

/// Item 3: the rewritten reply keeps its place: the progress notifications
/// the client sent before it reach the app before it.
#[test]
fn a_rewritten_reply_overtakes_no_line_the_client_sent_before_it() {
    let (_dir, socket) = setup("maporder");
    smol::block_on(async {
        let (mut bridge, mut second, shown) = mapped_question(&socket).await;
        let progress = |n: u32| json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": n}});
        let reply = json!({"jsonrpc": "2.0", "id": shown, "result": {"action": "decline"}});
        // One write: the bridge reads the three lines at once.
        let lines = format!("{}\n{}\n{}\n", progress(1), progress(2), reply);
        let replies = replied(&mut bridge, &mut second, &lines).await;
        assert_eq!(the_one(&replies)["id"], 0, "{:?}", replies);
        let order: Vec<Value> = lines_of(&mut second)
            .into_iter()
            .filter(|l| l["method"] == "notifications/progress" || l.get("result").is_some())
            .map(|l| {
                if l.get("result").is_some() {
                    json!("reply")
                } else {
                    l["params"]["progress"].clone()
                }
            })
            .collect();
        assert_eq!(
            order,
            vec![json!(1), json!(2), json!("reply")],
            "{:?}",
            lines_of(&mut second)
        );
        ended(bridge, second).await;
    });
}

/// Item 3: a second reply to one mapped question does not reach the app.
#[test]
fn a_second_reply_to_a_mapped_question_does_not_reach_the_app() {
    let (_dir, socket) = setup("maptwice");
    smol::block_on(async {
        let (mut bridge, mut second, shown) = mapped_question(&socket).await;
        let reply =
            |action: &str| json!({"jsonrpc": "2.0", "id": shown, "result": {"action": action}});
        let lines = format!("{}\n{}\n", reply("decline"), reply("accept"));
        let replies = replied(&mut bridge, &mut second, &lines).await;
        let reply = the_one(&replies);
        assert_eq!(reply["id"], 0, "{:?}", replies);
        assert_eq!(reply["result"]["action"], "decline", "{:?}", replies);
        ended(bridge, second).await;
    });
}

/// Item 6: with the app away, a 2.4 MiB batch of 300 calls gets one array
/// with an error for every one of them, each once.
#[test]
fn every_request_of_a_batch_longer_than_the_hold_limit_is_answered_once() {
    let (_dir, socket) = setup("longbatch");
    smol::block_on(async {
        let mut bridge = spawn(&socket);
        let pad = "x".repeat(8 * 1024);
        let calls: Vec<String> = (0..300).map(|n| call(n, &pad)).collect();
        let batch = format!("[{}]", calls.join(","));
        assert!(
            batch.len() > 2 * 1024 * 1024 + 300 * 1024,
            "{}",
            batch.len()
        );
        bridge.send(&batch).await;
        let errors = bridge.json().await;
        let ids: Vec<Value> = errors
            .as_array()
            .unwrap_or_else(|| panic!("one array: {}", errors))
            .iter()
            .map(|e| {
                assert_eq!(e["error"]["code"], -32000, "{}", e);
                e["id"].clone()
            })
            .collect();
        let wanted: Vec<Value> = (0..300).map(|n| json!(n)).collect();
        assert_eq!(ids, wanted);
        assert_eq!(bridge.finish().await, Some(0));
    });
}
