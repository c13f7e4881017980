//! Drives a fake app-server, written in `sh`, the way an app drives `codex app-server`:
//! concurrent requests, progress notifications, a question from the child, shutdown.
//!
//! Run with `cargo run --example app_server` (needs `sh` and `sed`, so Unix).

use std::process::Command;

use futures_lite::future;
use mcp_bridge::app_server::{AppServerClient, AppServerError, Incoming};
use serde_json::json;

/// The fake app-server. For each request it reports progress, and for `turn/start` it
/// also asks for approval and waits for the answer before it replies. Requests arrive
/// with sorted keys (`id` first, `params` last), which keeps the `sed` simple.
const FAKE_APP_SERVER: &str = r#"
while IFS= read -r line; do
  id=$(printf '%s\n' "$line" | sed -n 's/^{"id":\([0-9]*\),.*/\1/p')
  [ -n "$id" ] || continue  # a notification, or an answer: nothing to reply
  printf '{"method":"progress","params":{"request":%s}}\n' "$id"
  case "$line" in
    *'"method":"turn/start"'*)
      echo "turn $id: asking for approval" >&2
      printf '{"id":"approve-%s","method":"exec/approve","params":{"command":"make test"}}\n' "$id"
      IFS= read -r answer
      printf '{"id":%s,"result":{"answer":%s}}\n' "$id" "$answer" ;;
    *)
      printf '{"id":%s,"result":{"echo":%s}}\n' "$id" "$line" ;;
  esac
done
"#;

fn main() -> Result<(), AppServerError> {
    smol::block_on(async {
        let mut command = Command::new("sh");
        command.arg("-c").arg(FAKE_APP_SERVER);
        let client = AppServerClient::builder()
            .omit_jsonrpc_version()
            .spawn(command, "fake-app-server")?;

        // Answer the child's questions while our requests are in flight.
        let incoming = client.incoming();
        let handle_incoming = async {
            while let Ok(message) = incoming.recv().await {
                match message {
                    Incoming::Notification { method, params } => {
                        println!("notification {}: {}", method, params)
                    }
                    Incoming::Request { id, method, params } => {
                        println!("the child asks {} {}: approving", method, params);
                        client.respond(&id, json!({"decision": "approved"})).await?;
                    }
                }
            }
            // The child is gone, and with it any request still waiting: that ends `or`.
            future::pending::<Result<(), AppServerError>>().await
        };

        let requests = async {
            let (info, turn) = future::zip(
                client.request("initialize", json!({"clientInfo": {"name": "example"}})),
                client.request("turn/start", json!({"input": "run the tests"})),
            )
            .await;
            println!("initialize -> {}", info?);
            println!("turn/start -> {}", turn?);
            client.notify("initialized", json!({})).await?;
            println!(
                "the child's stderr said: {:?}",
                client.stderr_tail().unwrap_or_default()
            );
            Ok::<(), AppServerError>(())
        };

        // Done when the requests are, or when answering the child fails.
        future::or(requests, handle_incoming).await?;

        let status = client.shutdown().await?;
        println!("app-server exited: {:?}", status);
        Ok(())
    })
}
