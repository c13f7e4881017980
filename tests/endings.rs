//! How lines and sessions end, through the binary (issue 41, items 4, 5
//! and 7): large ids a JavaScript app writes back in its own spelling, an
//! app's last message without a final newline, and an app that rejects
//! every replayed `initialize`.
//!
//! The apps here write raw bytes (the spelling of an id, a missing
//! newline), so most of them are written in the test on
//! `support::bridge_host`; the one that only rejects is the scripted host.
#![cfg(unix)]

mod support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt};
use serde_json::{json, Value};
use smol::Task;
use support::bridge_host::{Connection, Listener};
use support::scripted::{call, Host, Script, INITIALIZE, INITIALIZED};
use support::{bridge_command, Bridge, TempDir};

fn setup(tag: &str, mode: u32) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag, mode);
    let socket = dir.socket();
    (dir, socket)
}

/// An app written in the test: accepts every bridge that connects at
/// `socket`, serving each connection (numbered from 0) with `serve`, until
/// the task is dropped (which removes the socket).
fn app<F, Fut>(socket: &Path, serve: F) -> Task<()>
where
    F: Fn(usize, Connection) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = Listener::bind(socket).unwrap();
    smol::spawn(async move {
        let mut served = Vec::new();
        for n in 0.. {
            match listener.accept().await {
                Ok(connection) => served.push(smol::spawn(serve(n, connection))),
                Err(e) => panic!("accept: {}", e),
            }
        }
    })
}

/// The next line the bridge relayed to the app (without its newline),
/// parsed; `None` at the connection's end.
async fn next_message(connection: &mut Connection) -> Option<(String, Value)> {
    let mut line = String::new();
    match connection.reader.read_line(&mut line).await {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            let text = line.trim_end().to_string();
            let value = serde_json::from_str(&text).unwrap();
            Some((text, value))
        }
    }
}

/// An `initialize` result, as an app writes it.
const INIT_RESULT: &str = r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}"#;

/// A number as JavaScript's `JSON.stringify` writes the double it reads it
/// into: the shortest digits that read back as that double, in plain
/// notation below 1e21, as `d.ddde+N` from there on.
fn js_number(id: &Value) -> String {
    if id.is_u64() || id.is_i64() {
        return id.to_string();
    }
    let double = id.as_f64().unwrap();
    if double.abs() < 1e21 {
        return format!("{}", double);
    }
    format!("{:e}", double)
        .replace("e", "e+")
        .replace("e+-", "e-")
}

// ---------------------------------------------------------------------------
// Item 4: large ids

/// A JavaScript app (the TypeScript SDK's member order: `result`, then
/// `jsonrpc`, then `id`) reads ids into doubles and writes them back in
/// their shortest form: `18446744073709551616` (2^64) comes back as
/// `18446744073709552000`, `223456789012345678901234567890` as
/// `2.234567890123457e+29`. Each reply is the answer to its request: it
/// reaches the client, before the answer to the small id asked after it.
#[test]
fn a_javascript_apps_large_ids_answer_their_requests() {
    let (_dir, socket) = setup("jsids", 0o700);
    smol::block_on(async {
        let _app = app(&socket, |_, mut connection| async move {
            while let Some((_, message)) = next_message(&mut connection).await {
                let id = match message.get("id") {
                    Some(id) if message.get("method").is_some() => js_number(id),
                    _ => continue,
                };
                let result = match message["method"].as_str() {
                    Some("initialize") => INIT_RESULT.to_string(),
                    _ => r#"{"content":[]}"#.to_string(),
                };
                let reply = format!(r#"{{"result":{},"jsonrpc":"2.0","id":{}}}"#, result, id);
                let line = format!("{}\n", reply);
                connection.writer.write_all(line.as_bytes()).await.unwrap();
            }
        });
        let mut bridge = Bridge::spawn(bridge_command(&socket, "p", "r").stderr(Stdio::inherit()));
        let opened = bridge.round_trip(INITIALIZE).await;
        assert!(opened.contains(r#""id":1"#), "{}", opened);
        bridge.send(INITIALIZED).await;
        let large = [
            ("18446744073709551616", "18446744073709552000"),
            ("223456789012345678901234567890", "2.234567890123457e+29"),
        ];
        for (asked, written) in large {
            let request = call(0, "large").replace(r#""id":0"#, &format!(r#""id":{}"#, asked));
            bridge.send(&request).await;
            bridge.send(&call(7, "small")).await;
            let first = bridge.line().await.expect("a reply");
            assert!(
                first.ends_with(&format!(r#""id":{}}}"#, written)),
                "the reply to id {} (written back as {}) is lost: {}",
                asked,
                written,
                first
            );
            let second = bridge.line().await.expect("a reply");
            assert!(second.ends_with(r#""id":7}"#), "{}", second);
        }
        assert_eq!(bridge.finish().await, Some(0));
    });
}

// ---------------------------------------------------------------------------
// Item 5: a last message without a newline

/// An app that answers the call with a whole message and no final newline,
/// then hangs up, in each member order: the answer reaches the client, as
/// a line (the bridge adds the newline), once: not followed by the
/// `app_restarting` error a request the app left unanswered gets. The
/// bridge reconnects (the mode `--no-reconnect` turns off), which is what
/// lost the line.
#[test]
fn an_apps_last_message_without_a_newline_reaches_the_client_once() {
    let forms = [
        r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
        r#"{"result":{"content":[]},"jsonrpc":"2.0","id":2}"#,
    ];
    for last in forms {
        let (_dir, socket) = setup("lastline", 0o700);
        smol::block_on(async {
            let _app = app(&socket, move |n, mut connection| async move {
                while let Some((_, message)) = next_message(&mut connection).await {
                    let reply = match message["method"].as_str() {
                        Some("initialize") => {
                            let id = &message["id"];
                            format!(
                                r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#,
                                id, INIT_RESULT
                            ) + "\n"
                        }
                        Some("tools/call") if n == 0 => last.to_string(),
                        _ => continue,
                    };
                    connection.writer.write_all(reply.as_bytes()).await.unwrap();
                    if message["method"] == "tools/call" {
                        // Hangs up with the message written: a close, not a
                        // reset (nothing unread).
                        return;
                    }
                }
            });
            let mut bridge =
                Bridge::spawn(bridge_command(&socket, "p", "r").stderr(Stdio::inherit()));
            let opened = bridge.round_trip(INITIALIZE).await;
            assert!(opened.contains(r#""result""#), "{}", opened);
            bridge.send(INITIALIZED).await;
            let answer = bridge.round_trip(&call(2, "last")).await;
            assert_eq!(answer, last, "the app's last message");
            // Whatever follows (the bridge reconnects to the app, which
            // takes the session back), id 2 is not answered again.
            drop(bridge.stdin.take());
            let mut rest = Vec::new();
            while let Some(line) = bridge.line().await {
                rest.push(line);
            }
            assert!(
                !rest.iter().any(|line| line.contains(r#""id":2"#)),
                "answered twice: {:?}",
                rest
            );
            assert_eq!(bridge.exit_code().await, Some(0));
        });
    }
}

// ---------------------------------------------------------------------------
// Item 7: resume_rejected

/// An app that serves, then comes back as an instance that rejects every
/// `initialize` (the replayed one, on every attempt): when
/// `--reconnect-timeout` runs out, the held request is answered
/// `resume_rejected` (not `app_not_running`, "did not answer in time"),
/// and so is the next one. Twice: the instance that rejects keeps the
/// connection, and one that hangs up after saying no.
#[test]
fn an_app_that_rejects_every_replay_is_reported_resume_rejected() {
    for hangs_up in [false, true] {
        let (_dir, socket) = setup("rejects", 0o700);
        smol::block_on(async {
            let first = Host::start(&socket, Script::named("first"));
            let mut bridge = Bridge::spawn(
                bridge_command(&socket, "p", "r")
                    .args(["--reconnect-timeout", "2"])
                    .stderr(Stdio::inherit()),
            );
            let opened = bridge.round_trip(INITIALIZE).await;
            assert!(opened.contains(r#""result""#), "{}", opened);
            bridge.send(INITIALIZED).await;
            let answered = bridge.round_trip(&call(2, "first")).await;
            assert!(answered.contains(r#""servedBy":"first""#), "{}", answered);
            first.stop().await;
            let _rejecting = app(&socket, move |_, mut connection| async move {
                while let Some((_, message)) = next_message(&mut connection).await {
                    if message["method"] != "initialize" {
                        continue;
                    }
                    let no = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": "still loading"}});
                    let line = format!("{}\n", no);
                    connection.writer.write_all(line.as_bytes()).await.unwrap();
                    if hangs_up {
                        return;
                    }
                }
            });
            for id in [3, 4] {
                bridge.send(&call(id, "held")).await;
                let reply: Value = serde_json::from_str(&bridge.line().await.unwrap()).unwrap();
                assert_eq!(reply["id"], id, "{}", reply);
                assert_eq!(
                    reply["error"]["data"]["reason"], "resume_rejected",
                    "hangs up: {}; {}",
                    hangs_up, reply
                );
            }
            assert_eq!(bridge.finish().await, Some(1));
        });
    }
}
