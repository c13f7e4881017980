//! What the app writes reaches the client in whole lines, whatever the app
//! does mid-line: found by the session simulation (src/bridge/sim.rs),
//! checked here through the binary on a real socket.
#![cfg(unix)]

mod support;

use std::process::Stdio;

use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt};
use serde_json::Value;
use support::bridge_host::Listener;
use support::{bridge_command, within, Bridge, TempDir};

/// The app dies in the middle of a batch of answers (a line starting with
/// `[`): the client must never see that half array, which is no JSON at
/// all and would make it drop the whole connection. Each request of the
/// batch gets one answer (the bridge's, since the app went away before it
/// finished writing).
#[test]
fn a_batch_of_answers_cut_by_the_app_never_reaches_the_client_in_part() {
    let dir = TempDir::new("whole-batch", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mut bridge =
            Bridge::spawn(bridge_command(&dir.socket(), "p", "whole").stderr(Stdio::null()));
        let mut app = within("connection", listener.accept()).await.unwrap();
        bridge
            .send_bytes(
                concat!(
                    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                    "\n",
                    r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}]"#,
                    "\n"
                )
                .as_bytes(),
            )
            .await;
        let mut line = String::new();
        within("initialize", app.reader.read_line(&mut line))
            .await
            .unwrap();
        app.writer
            .write_all(concat!(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}"#, "\n").as_bytes())
            .await
            .unwrap();
        line.clear();
        within("the batch", app.reader.read_line(&mut line))
            .await
            .unwrap();
        assert!(line.starts_with('['), "{}", line);
        // Past both ids, short of the end: then the app is gone.
        app.writer
            .write_all(br#"[{"jsonrpc":"2.0","id":1,"result":{"content":[]}},{"jsonrpc":"2.0","id":2,"result":{"con"#)
            .await
            .unwrap();
        app.writer.flush().await.unwrap();
        drop(app);
        let mut answered = Vec::new();
        while answered.len() < 3 {
            // A line on stdout that is not JSON fails here.
            let items = match bridge.json().await {
                Value::Array(items) => items,
                one => vec![one],
            };
            for item in items {
                answered.push(item["id"].as_u64().expect("an answer"));
            }
        }
        answered.sort_unstable();
        assert_eq!(answered, [0, 1, 2], "one answer per request");
        bridge.finish().await;
    });
}
