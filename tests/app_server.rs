//! The app-server module against real child processes: `cat` and small `sh` scripts
//! standing in for an app-server.
#![cfg(unix)]
#![cfg(feature = "app-server")]

#[macro_use]
mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{assert_reaped, eventually, is_running, stops_running, within, HANG_GUARD};

use futures_lite::future;
use futures_lite::io::Cursor;
use mcp_bridge::app_server::{
    shutdown_child, spawn_app_server, wait_for_response_line, write_json_line, AppServerClient,
    AppServerError, Inbox, Incoming, LineReader, RequestId, MAX_INCOMING_MEMORY, STDERR_TAIL_BYTES,
};
use rustix::process::Pid;
use serde_json::{json, Value};

/// A shutdown grace for children that are expected to exit at end of input, so that a
/// test never waits out the default one.
const SHORT_GRACE: Duration = Duration::from_millis(100);

/// An app-server in `sh`: answers every request with its own params as the result.
/// Requests arrive with sorted keys, so `params` is last.
const ECHO_PARAMS: &str = r#"while IFS= read -r line; do
  printf '%s\n' "$line" | sed -n 's/^{"id":\([0-9]*\),.*"params":\(.*\)}$/{"id":\1,"result":\2}/p'
done"#;

fn sh(script: &str) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(script);
    command
}

fn spawn_client(script: &str) -> AppServerClient {
    AppServerClient::builder()
        .request_timeout(HANG_GUARD)
        .spawn(sh(script), "fake-app-server")
        .expect("sh should spawn")
}

/// The next message from the child; fails the test instead of hanging it.
async fn next_incoming(incoming: &Inbox) -> Incoming {
    within("receiving", async {
        incoming.recv().await.expect("incoming closed")
    })
    .await
}

/// Whether the incoming queue closes (after yielding nothing more) in good time.
async fn closes(incoming: &Inbox) -> bool {
    within("closing", async { incoming.recv().await.is_err() }).await
}

/// This process's resident memory in KiB: `VmRSS` (now) or `VmHWM` (its peak).
fn memory_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let line = status
        .lines()
        .find(|line| line.starts_with(field))
        .expect("the field is there");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Far above what the bounded client needs (at most ~320 MiB in theory, ~150 MiB
/// measured with the tests beside it) and far below what the unbounded one reached
/// (0.8–1 GB for the same children).
const MEMORY_CEILING_KIB: u64 = 600 * 1024;

// ---- Lockstep helpers ----

#[test]
fn write_json_line_writes_one_compact_line() {
    smol::block_on(async {
        let mut process = spawn_app_server(Command::new("cat"), "cat").unwrap();
        let payload = json!({"id": "req-1", "method": "initialize", "params": {"value": 1}});

        write_json_line(&mut process.stdin, &payload).await.unwrap();
        drop(process.stdin);
        let mut lines = LineReader::new(process.stdout);
        let echoed = lines.next_line().await.unwrap().unwrap();

        assert_eq!(echoed, payload.to_string().into_bytes());
        assert_eq!(lines.next_line().await.unwrap(), None);
        let status = process.child.shutdown(SHORT_GRACE).await.unwrap();
        assert!(status.success());
    })
}

#[test]
fn wait_for_response_line_skips_invalid_foreign_and_child_request_lines() {
    smol::block_on(async {
        let stdout = concat!(
            "not-json\n",
            "{\"id\":\"other\",\"result\":{}}\n",
            "{\"id\":\"req-1\",\"method\":\"item/approve\"}\n",
            "{\"id\":\"req-1\",\"result\":{\"ok\":true}}\r\n",
        );
        let mut lines = LineReader::new(Cursor::new(stdout.as_bytes().to_vec()));

        let line = wait_for_response_line(&mut lines, &"req-1".into(), HANG_GUARD)
            .await
            .unwrap();

        assert_eq!(line, "{\"id\":\"req-1\",\"result\":{\"ok\":true}}");
    })
}

#[test]
fn wait_for_response_line_reports_termination_at_end_of_stream() {
    smol::block_on(async {
        let stdout = b"{\"id\":\"other\",\"result\":{}}\n".to_vec();
        let mut lines = LineReader::new(Cursor::new(stdout));

        let result = wait_for_response_line(&mut lines, &"req-1".into(), HANG_GUARD).await;

        assert_matches!(result, Err(AppServerError::ProcessTerminated { .. }));
    })
}

#[test]
fn wait_for_response_line_times_out_on_a_silent_child() {
    smol::block_on(async {
        let mut process = spawn_app_server(Command::new("cat"), "cat").unwrap();
        let mut lines = LineReader::new(process.stdout);

        let error = wait_for_response_line(&mut lines, &7.into(), Duration::from_millis(200))
            .await
            .unwrap_err();

        assert_eq!(
            error.to_string(),
            "Timed out waiting for app-server response `7` after 0.2 seconds"
        );
        drop(process.stdin);
        assert!(process.child.shutdown(SHORT_GRACE).await.unwrap().success());
    })
}

#[test]
fn spawn_failure_names_the_app_server() {
    let error = spawn_app_server(Command::new("/nonexistent/app-server"), "codex")
        .map(|_| ())
        .unwrap_err();

    assert_matches!(error, AppServerError::Spawn { .. });
    assert!(
        error.to_string().starts_with("Failed to spawn `codex`: "),
        "{}",
        error
    );
    assert_eq!(
        error.io_error().map(std::io::Error::kind),
        Some(std::io::ErrorKind::NotFound)
    );
}

/// The original helpers' `shutdown_child` still stops a child spawned some other way.
#[test]
fn shutdown_child_stops_and_reaps_a_child_spawned_elsewhere() {
    smol::block_on(async {
        let mut child = smol::process::Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();

        let status = shutdown_child(&mut child).await.unwrap();

        assert!(status.success(), "{:?}", status);
        assert_reaped(pid);
    })
}

// ---- The multiplexing client ----

#[test]
fn out_of_order_replies_reach_100_concurrent_requests() {
    smol::block_on(async {
        // Collects all 100 requests, then answers them last first (the sed
        // script reverses lines, as GNU tac does; macOS has no tac).
        let script = r#"head -n 100 \
          | sed -n 's/^{"id":\([0-9]*\),.*"params":\(.*\)}$/{"id":\1,"result":\2}/p' \
          | sed -n '1!G;h;$p'
        cat > /dev/null"#;
        let client = Arc::new(spawn_client(script));

        let tasks: Vec<_> = (0..100)
            .map(|n| {
                let client = client.clone();
                smol::spawn(async move { (n, client.request("echo", json!({ "n": n })).await) })
            })
            .collect();
        for task in tasks {
            let (n, result) = task.await;
            assert_eq!(result.unwrap(), json!({ "n": n }));
        }
        assert_eq!(client.invalid_lines(), 0);
    })
}

#[test]
fn notifications_interleaved_with_replies_are_all_delivered_in_order() {
    smol::block_on(async {
        let script = r#"n=0
        while IFS= read -r line; do
          for step in 1 2 3; do
            n=$((n + 1))
            printf '{"method":"progress","params":{"seq":%d}}\n' "$n"
          done
          printf '%s\n' "$line" | sed -n 's/^{"id":\([0-9]*\),.*"params":\(.*\)}$/{"id":\1,"result":\2}/p'
        done"#;
        let client = spawn_client(script);
        let incoming = client.incoming();

        let mut expected_seq = 1;
        for round in 0..10 {
            let result = client.request("turn", json!({ "round": round })).await;
            assert_eq!(result.unwrap(), json!({ "round": round }));
            // Everything written before the reply is already queued when it returns.
            for _ in 0..3 {
                let message = incoming.try_recv().expect("notification should be queued");
                let expected = Incoming::Notification {
                    method: "progress".to_string(),
                    params: json!({ "seq": expected_seq }),
                };
                assert_eq!(message, expected);
                expected_seq += 1;
            }
            assert!(incoming.try_recv().is_err(), "no extra messages");
        }
    })
}

#[test]
fn a_child_request_carrying_our_id_is_not_taken_for_the_reply() {
    smol::block_on(async {
        // Asks us a question with id 1 (also our request's id), then returns our whole
        // answer line as the result of our request.
        let script = r#"IFS= read -r request
        printf '{"id":1,"method":"item/approve","params":{"cmd":"rm -rf build"}}\n'
        IFS= read -r answer
        printf '{"id":1,"result":%s}\n' "$answer"
        cat > /dev/null"#;
        let client = spawn_client(script);
        let incoming = client.incoming();

        let answer_the_child = async {
            let message = next_incoming(&incoming).await;
            assert_eq!(
                message,
                Incoming::Request {
                    id: RequestId::Integer(1),
                    method: "item/approve".to_string(),
                    params: json!({"cmd": "rm -rf build"}),
                }
            );
            if let Incoming::Request { id, .. } = message {
                client
                    .respond(&id, json!({"decision": "accept"}))
                    .await
                    .unwrap();
            }
        };
        let (result, ()) =
            future::zip(client.request("turn/start", Value::Null), answer_the_child).await;

        assert_eq!(
            result.unwrap(),
            json!({"id": 1, "jsonrpc": "2.0", "result": {"decision": "accept"}})
        );
    })
}

#[test]
fn error_answers_and_the_codex_wire_format_omit_the_version() {
    smol::block_on(async {
        // Returns our request line and our answer line as the result.
        let script = r#"IFS= read -r request
        printf '{"id":"ask-1","method":"exec/approve"}\n'
        IFS= read -r answer
        printf '{"id":1,"result":{"request":%s,"answer":%s}}\n' "$request" "$answer"
        cat > /dev/null"#;
        let client = AppServerClient::builder()
            .omit_jsonrpc_version()
            .request_timeout(HANG_GUARD)
            .spawn(sh(script), "codex-like")
            .unwrap();
        let incoming = client.incoming();

        let refuse = async {
            let message = next_incoming(&incoming).await;
            if let Incoming::Request { id, method, params } = message {
                assert_eq!(
                    (id.clone(), method.as_str(), params),
                    ("ask-1".into(), "exec/approve", Value::Null)
                );
                client
                    .respond_error(&id, -32000, "denied", Some(json!({"why": "policy"})))
                    .await
                    .unwrap();
            } else {
                panic!("expected a request, got {:?}", message);
            }
        };
        let (result, ()) = future::zip(client.request("turn/start", json!({})), refuse).await;

        let expected = json!({
            "request": {"id": 1, "method": "turn/start", "params": {}},
            "answer": {"id": "ask-1", "error": {"code": -32000, "message": "denied", "data": {"why": "policy"}}},
        });
        assert_eq!(result.unwrap(), expected);
    })
}

#[test]
fn a_request_to_a_child_that_closed_its_stdin_reports_its_exit_and_last_words() {
    smol::block_on(async {
        // Closes stdin, says so, and exits a little later: our write fails with a
        // broken pipe, and the request reports the exit instead.
        let client = spawn_client(
            r#"exec 0<&-; echo 'config error: no API key' >&2
            echo '{"method":"stdin-closed"}'; sleep 0.3; exit 2"#,
        );
        assert_eq!(
            next_incoming(&client.incoming()).await.method(),
            "stdin-closed"
        );

        let error = client.request("initialize", json!({})).await.unwrap_err();

        assert_matches!(error, AppServerError::ProcessTerminated { .. });
        assert_eq!(error.stderr_tail(), Some("config error: no API key\n"));
    })
}

#[test]
fn an_error_response_carries_code_message_and_data() {
    smol::block_on(async {
        let script = r#"while IFS= read -r line; do
          printf '%s\n' "$line" | sed -n 's/^{"id":\([0-9]*\),.*/{"id":\1,"error":{"code":-32601,"message":"Method not found","data":{"method":"nope"}}}/p'
        done"#;
        let client = spawn_client(script);

        let error = client.request("nope", Value::Null).await.unwrap_err();

        match error {
            AppServerError::ErrorResponse {
                code,
                message,
                data,
            } => {
                assert_eq!(code, -32601);
                assert_eq!(message, "Method not found");
                assert_eq!(data, Some(json!({"method": "nope"})));
            }
            other => panic!("expected ErrorResponse, got {:?}", other),
        }
    })
}

#[test]
fn invalid_lines_are_skipped_and_counted_and_crlf_is_accepted() {
    smol::block_on(async {
        let script = r#"IFS= read -r request
        printf 'not json\n[1,2]\n{"id":1}\n{"id":null,"result":1}\n'
        printf '{"id":1,"result":"ok"}\r\n'
        cat > /dev/null"#;
        let client = spawn_client(script);

        let result = client.request("ping", Value::Null).await;

        assert_eq!(result.unwrap(), json!("ok"));
        assert_eq!(client.invalid_lines(), 4);
    })
}

#[test]
fn notifications_sent_by_us_reach_the_child() {
    smol::block_on(async {
        // `cat` returns everything we send, so our notification comes back as the
        // child's.
        let client = AppServerClient::spawn(Command::new("cat"), "cat").unwrap();
        let incoming = client.incoming();

        client.notify("initialized", json!({"a": 1})).await.unwrap();

        let message = next_incoming(&incoming).await;
        assert_eq!(
            message,
            Incoming::Notification {
                method: "initialized".to_string(),
                params: json!({"a": 1}),
            }
        );
        assert_eq!(message.method(), "initialized");
    })
}

#[test]
fn a_child_that_dies_fails_every_pending_request_at_once() {
    smol::block_on(async {
        let script = r#"read -r a; read -r b; read -r c
        echo 'fatal: out of cheese' >&2
        exit 3"#;
        let client = spawn_client(script);
        let incoming = client.incoming();
        let start = Instant::now();

        let (first, (second, third)) = future::zip(
            client.request("a", Value::Null),
            future::zip(
                client.request("b", Value::Null),
                client.request("c", Value::Null),
            ),
        )
        .await;

        // Far below the requests' own timeout (HANG_GUARD, 30 s).
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "took {:?}",
            start.elapsed()
        );
        for result in [first, second, third] {
            let error = result.unwrap_err();
            assert_matches!(error, AppServerError::ProcessTerminated { .. });
            assert_eq!(error.stderr_tail(), Some("fatal: out of cheese\n"));
            // The message alone says how it died and what it said last.
            assert_eq!(error.exit_status().and_then(|s| s.code()), Some(3));
            assert_eq!(
                error.to_string(),
                "App-server terminated before sending expected response (exit status: 3); \
                 the last line on its stderr: fatal: out of cheese"
            );
        }
        let later = client.request("d", Value::Null).await.unwrap_err();
        assert_matches!(later, AppServerError::ProcessTerminated { .. });
        assert!(closes(&incoming).await, "incoming closes with stdout");
        let status = client.shutdown().await.unwrap().unwrap();
        assert_eq!(status.code(), Some(3));
    })
}

/// A child killed by a signal (the OOM killer, a crash): the error names the
/// signal, so the app's log says more than "terminated". Twenty times, since
/// stdout's end and the exit race each other.
#[test]
fn a_child_killed_by_a_signal_says_which() {
    use std::os::unix::process::ExitStatusExt;
    for _ in 0..20 {
        smol::block_on(async {
            let client = spawn_client("read -r a; echo 'about to crash' >&2; kill -KILL $$");

            let error = client.request("a", Value::Null).await.unwrap_err();

            assert_eq!(error.exit_status().and_then(|s| s.signal()), Some(9));
            let text = error.to_string();
            assert!(
                text.starts_with(
                    "App-server terminated before sending expected response (signal: 9"
                ),
                "{}",
                text
            );
            assert!(
                text.ends_with("; the last line on its stderr: about to crash"),
                "{}",
                text
            );
        })
    }
}

#[test]
fn a_line_over_the_limit_is_an_error_not_an_allocation() {
    smol::block_on(async {
        let script = r#"IFS= read -r request
        head -c 5000 /dev/zero | tr '\0' x
        printf '\n{"id":1,"result":"too late"}\n'
        cat > /dev/null"#;
        let client = AppServerClient::builder()
            .max_line_length(1000)
            .request_timeout(HANG_GUARD)
            .spawn(sh(script), "verbose")
            .unwrap();

        let error = client.request("ping", Value::Null).await.unwrap_err();

        assert_matches!(error, AppServerError::LineTooLong { limit: 1000 });
    })
}

#[test]
fn a_silent_child_times_out_with_its_stderr_attached() {
    smol::block_on(async {
        let script = r#"echo 'warming up the model' >&2
        echo '{"method":"ready"}'
        cat > /dev/null"#;
        let client = spawn_client(script);
        let ready = next_incoming(&client.incoming()).await;
        assert_eq!(ready.method(), "ready");

        let error = client
            .request_with_timeout("initialize", json!({}), Duration::from_millis(300))
            .await
            .unwrap_err();

        assert_eq!(
            error.to_string(),
            "Timed out waiting for app-server response `1` after 0.3 seconds"
        );
        assert_eq!(error.stderr_tail(), Some("warming up the model\n"));
        assert!(
            format!("{:?}", client).contains("pending: 0"),
            "{:?}",
            client
        );
    })
}

#[test]
fn a_10_mb_stderr_flood_neither_blocks_the_child_nor_outgrows_the_tail() {
    smol::block_on(async {
        let script = r#"head -c 10000000 /dev/zero | tr '\0' x >&2
        echo ' end of flood' >&2
        IFS= read -r request
        printf '%s\n' "$request" | sed -n 's/^{"id":\([0-9]*\),.*/{"id":\1,"result":"survived"}/p'
        IFS= read -r request
        echo 'last words' >&2
        exit 1"#;
        let client = spawn_client(script);

        // Undrained, the child would block on stderr and this would time out.
        let survived = client.request("first", Value::Null).await;
        assert_eq!(survived.unwrap(), json!("survived"));
        let error = client.request("second", Value::Null).await.unwrap_err();

        let tail = error.stderr_tail().expect("the tail comes with the error");
        assert_eq!(tail.len(), STDERR_TAIL_BYTES);
        assert!(
            tail.ends_with("xxx end of flood\nlast words\n"),
            "{:?}",
            &tail[tail.len() - 40..]
        );
        assert!(tail.bytes().take(tail.len() - 25).all(|byte| byte == b'x'));
    })
}

#[test]
fn client_shutdown_stops_the_child_and_leaves_no_zombie() {
    smol::block_on(async {
        let client = spawn_client(ECHO_PARAMS);
        assert_eq!(
            client.request("ping", json!([1])).await.unwrap(),
            json!([1])
        );
        let pid = client.process_id().unwrap();

        let status = client
            .shutdown()
            .await
            .unwrap()
            .expect("a child was spawned");

        assert!(status.success(), "{:?}", status);
        assert_reaped(pid);
    })
}

#[test]
fn a_client_over_plain_streams_reads_until_they_end() {
    smol::block_on(async {
        let stdout = Cursor::new(b"{\"method\":\"hello\"}\n".to_vec());
        let client = AppServerClient::builder().connect(stdout, Vec::new());

        let hello = next_incoming(&client.incoming()).await;
        assert_eq!(hello.method(), "hello");
        assert!(closes(&client.incoming()).await);
        let error = client.request("ping", Value::Null).await.unwrap_err();
        assert_matches!(error, AppServerError::ProcessTerminated { .. });
        assert_eq!(client.process_id(), None);
        assert!(client.shutdown().await.unwrap().is_none());
    })
}

// ---- Faults the client bounds ----

/// A child that floods notifications while the caller awaits a response (the README's
/// order: request first, receive after) once drove the process to gigabytes. The
/// queue is bounded by memory, and filling it ends the connection with an error naming
/// the bound, instead of growing or stalling the response.
#[test]
fn a_flood_of_notifications_while_a_request_waits_ends_at_the_memory_limit() {
    smol::block_on(async {
        // A million small notifications: ~36 MB of text, ~800 MB once decoded.
        let script = r#"IFS= read -r request
        yes '{"method":"flood","params":{"n":1}}' | head -n 1000000
        printf '{"id":1,"result":"done"}\n'
        cat > /dev/null"#;
        let client = spawn_client(script);
        let incoming = client.incoming();

        let error = client.request("ping", Value::Null).await.unwrap_err();

        assert_matches!(error, AppServerError::IncomingFull { limit } if limit == MAX_INCOMING_MEMORY);
        assert!(incoming.memory() <= MAX_INCOMING_MEMORY);
        let rss = memory_kib("VmRSS:");
        assert!(rss < MEMORY_CEILING_KIB, "resident {} KiB", rss);
        // What was queued before the limit is still there to receive, in order.
        assert_eq!(next_incoming(&incoming).await.method(), "flood");
    })
}

/// A single valid 60 MB line of small values decodes to about 1 GB; the 64 MiB line
/// limit did not bound that. Its decoded size is weighed from its text and the line
/// is refused before anything is decoded.
#[test]
fn a_60_mb_line_of_small_values_is_refused_before_it_is_decoded() {
    smol::block_on(async {
        let script = r#"IFS= read -r request
        printf '{"method":"big","params":['
        yes '0,' | head -n 30000000 | tr -d '\n'
        printf '0]}\n{"id":1,"result":"done"}\n'
        cat > /dev/null"#;
        // Checking 60 MB of JSON takes ~15 s in an unoptimized test build, so this
        // request's hang guard is longer than the others'.
        let client = AppServerClient::builder()
            .request_timeout(4 * HANG_GUARD)
            .spawn(sh(script), "big-line")
            .unwrap();

        let error = client.request("ping", Value::Null).await.unwrap_err();

        assert_matches!(error, AppServerError::MessageTooLarge { limit } if limit == MAX_INCOMING_MEMORY);
        let peak = memory_kib("VmHWM:");
        assert!(peak < MEMORY_CEILING_KIB, "peak resident {} KiB", peak);
    })
}

/// The memory limit is on decoded size, not on text: a large string, as a whole
/// file's diff would be, decodes to little more than its text and gets through.
#[test]
fn a_20_mb_string_parameter_is_delivered_whole() {
    smol::block_on(async {
        let script = r#"IFS= read -r request
        printf '{"method":"diff","params":{"text":"'
        head -c 20000000 /dev/zero | tr '\0' x
        printf '"}}\n{"id":1,"result":"done"}\n'
        cat > /dev/null"#;
        let client = spawn_client(script);

        let result = client.request("ping", Value::Null).await;

        assert_eq!(result.unwrap(), json!("done"));
        match client
            .incoming()
            .try_recv()
            .expect("queued before the response")
        {
            Incoming::Notification { method, params } => {
                assert_eq!(method, "diff");
                let text = params["text"].as_str().unwrap();
                assert_eq!(text.len(), 20_000_000);
                assert!(text.bytes().all(|byte| byte == b'x'));
            }
            other => panic!("expected a notification, got {:?}", other),
        }
    })
}

/// `sh -c "helper & exit 3"`: the child is gone but the helper holds its stdout, so
/// stdout never ends. Its exit alone must fail pending requests (they used to wait out
/// their timeout), and shutting down stops the helper it left behind.
#[test]
fn a_child_that_exits_while_a_helper_holds_its_stdout_fails_requests_at_once() {
    smol::block_on(async {
        let client = spawn_client("IFS= read -r request; sleep 120 & echo $! >&2; exit 3");

        let error = client.request("ping", Value::Null).await.unwrap_err();

        assert_matches!(error, AppServerError::ProcessTerminated { .. });
        let helper: u32 = error
            .stderr_tail()
            .expect("the helper's pid was written to stderr")
            .trim()
            .parse()
            .unwrap();
        assert!(is_running(helper), "the helper runs until shutdown");
        let status = client
            .shutdown()
            .await
            .unwrap()
            .expect("a child was spawned");
        assert_eq!(status.code(), Some(3));
        stops_running(helper).await;
    })
}

/// A child that stops reading its stdin: the request times out, and the writes after
/// it (which wait behind its unfinished line) must time out too instead of blocking
/// for ever.
#[test]
fn writes_to_a_child_that_never_reads_give_up_after_the_timeout() {
    smol::block_on(async {
        let timeout = Duration::from_millis(300);
        let client = AppServerClient::builder()
            .request_timeout(timeout)
            .spawn(sh("exec sleep 1000"), "deaf")
            .unwrap();
        // Far more than a pipe holds, so the line cannot be written whole.
        let big = "x".repeat(1 << 20);

        let theirs = RequestId::from(7);

        let request = within("the request", client.request("big", json!([big]))).await;
        let notify = within("notify", client.notify("initialized", Value::Null)).await;
        let respond = within("respond", client.respond(&theirs, Value::Null)).await;
        let refuse = within(
            "respond_error",
            client.respond_error(&theirs, 1, "no", None),
        )
        .await;

        assert_matches!(request, Err(AppServerError::Timeout { .. }));
        for written in [notify, respond, refuse] {
            assert_matches!(written, Err(AppServerError::WriteTimeout { timeout: t }) if t == timeout);
        }
    })
}

/// JSON-RPC requests whose id is `null` or not a string or number cannot be answered
/// by id; the child waits for an answer all the same. They get the specification's
/// "Invalid Request" error with a `null` id instead of silence.
#[test]
fn a_child_request_with_an_invalid_id_gets_an_invalid_request_error() {
    smol::block_on(async {
        // Returns the two answers it gets as the result of our request.
        let script = r#"IFS= read -r request
        printf '{"id":null,"method":"bad/null"}\n{"id":[7],"method":"bad/array"}\n'
        IFS= read -r first; IFS= read -r second
        printf '{"id":1,"result":[%s,%s]}\n' "$first" "$second"
        cat > /dev/null"#;
        let client = spawn_client(script);

        let result = client.request("ping", Value::Null).await.unwrap();

        let invalid = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32600, "message": "Invalid Request"},
        });
        assert_eq!(result, json!([invalid, invalid]));
        assert!(client.incoming().is_empty(), "not delivered as requests");
    })
}

// ---- Issue 21: the library never stalls the app that embeds it ----

/// Longer than [`within`]'s guard: a request that is not failed at once by the behaviour
/// under test waits this long, so the guard catches it.
const HOURS: Duration = Duration::from_secs(3600);

/// A child that sends 3000 requests with a `null` id (their "Invalid Request" answers
/// fill its stdin pipe many times over), says `flooded`, and then never reads again.
const DEAF_FLOODER: &str = r#"i=0
while [ $i -lt 3000 ]; do echo '{"id":null,"method":"x"}'; i=$((i+1)); done
echo '{"method":"flooded"}'
exec sleep 60"#;

/// A zero (or tiny) timeout once made the task answering invalid requests retry its
/// write without ever yielding, taking the only thread of smol's global executor from
/// every client. Now zero means "no timeout", and that task's writes simply wait: an
/// unrelated client on the same executor is served, and shutdown returns.
#[test]
fn a_zero_or_tiny_timeout_never_spins_the_executor() {
    for timeout in [Duration::ZERO, Duration::from_nanos(1)] {
        smol::block_on(async {
            let deaf = AppServerClient::builder()
                .request_timeout(timeout)
                .spawn(sh(DEAF_FLOODER), "deaf")
                .unwrap();
            let healthy = spawn_client(ECHO_PARAMS);
            let flooded = next_incoming(&deaf.incoming()).await;
            assert_eq!(flooded.method(), "flooded", "{:?}", timeout);

            let reply = within("the healthy client's reply", async {
                healthy.request("echo", json!({"n": 1})).await
            })
            .await;
            assert_eq!(reply.unwrap(), json!({"n": 1}), "{:?}", timeout);

            within("the deaf client's shutdown", deaf.shutdown())
                .await
                .unwrap();
            within("the healthy client's shutdown", healthy.shutdown())
                .await
                .unwrap();
        })
    }
}

/// What zero means for a request: no timeout. It waits for the answer, which the child
/// gives only once told to by a later message, where it once failed at once; a
/// timeout of `Duration::MAX` waits the same way (no overflowing deadline).
#[test]
fn zero_and_maximal_request_timeouts_wait_for_the_answer() {
    smol::block_on(async {
        let script = r#"for n in 1 2; do
          IFS= read -r request; IFS= read -r go
          printf '{"id":%s,"result":"late"}\n' "$n"
        done
        cat > /dev/null"#;
        let client = AppServerClient::builder()
            .request_timeout(Duration::ZERO)
            .spawn(sh(script), "slow")
            .unwrap();
        for timeout in [Duration::ZERO, Duration::MAX] {
            let answer = within("the answer", async {
                // The request is written first (zip polls it first), then "go".
                let request = client.request_with_timeout("slow", Value::Null, timeout);
                let (answer, go) = future::zip(request, client.notify("go", Value::Null)).await;
                go.unwrap();
                answer
            })
            .await;
            assert_eq!(answer.unwrap(), json!("late"), "{:?}", timeout);
        }
    })
}

/// Replies that are valid JSON grammar but that serde_json cannot decode fail their
/// request at once (the envelope's id says which), naming the cause; the connection
/// goes on.
#[test]
fn undecodable_replies_fail_their_request_at_once_naming_the_cause() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let replies = [
        r#"{"id":1,"result":"\ud83d"}"#.to_string(),
        r#"{"id":2,"result":1e400}"#.to_string(),
        format!(r#"{{"id":3,"result":{}}}"#, deep),
        r#"{"id":4,"error":{"code":-1,"message":"cut \ud83d"}}"#.to_string(),
        r#"{"id":5,"result":"fine"}"#.to_string(),
    ];
    let mut script = String::new();
    for reply in &replies {
        script.push_str(&format!(
            "IFS= read -r request; printf '%s\\n' '{}'\n",
            reply
        ));
    }
    script.push_str("cat > /dev/null");
    smol::block_on(async {
        let client = AppServerClient::builder()
            .request_timeout(HOURS)
            .spawn(sh(&script), "garbled")
            .unwrap();
        let causes = [
            ("its `result`: ", "hex escape"),
            ("its `result`: ", "number out of range"),
            ("its `result`: ", "it nests more than 127 levels deep"),
            ("its `error`: ", "hex escape"),
        ];
        for (n, cause) in causes.iter().enumerate() {
            let outcome = within("the undecodable reply", client.request("x", Value::Null)).await;
            match outcome {
                Err(AppServerError::UndecodableResponse {
                    response_id,
                    cause: got,
                }) => {
                    assert_eq!(response_id, RequestId::from(n as i64 + 1));
                    assert!(
                        got.starts_with(cause.0) && got.contains(cause.1),
                        "{:?} for {:?}",
                        got,
                        cause
                    );
                }
                other => panic!("reply {} gave {:?}", n + 1, other),
            }
        }
        let fine = within("the last reply", client.request("x", Value::Null)).await;
        assert_eq!(fine.unwrap(), json!("fine"));
        assert_eq!(client.invalid_lines(), 0);
    })
}

/// `"error":null` beside a `result` is a result; a `null` error alone fails the request
/// at once.
#[test]
fn a_null_error_beside_a_result_is_a_result() {
    let script = r#"IFS= read -r request
    printf '%s\n' '{"id":1,"result":{"ok":true},"error":null}'
    IFS= read -r request
    printf '%s\n' '{"id":2,"error":null}'
    cat > /dev/null"#;
    smol::block_on(async {
        let client = AppServerClient::builder()
            .request_timeout(HOURS)
            .spawn(sh(script), "nullish")
            .unwrap();
        let result = within("the result", client.request("x", Value::Null)).await;
        assert_eq!(result.unwrap(), json!({"ok": true}));
        let alone = within("the null error", client.request("x", Value::Null)).await;
        assert_matches!(alone, Err(AppServerError::UndecodableResponse { .. }));
    })
}

/// `usize::MAX` as the line limit (and as the memory limit) means "no limit": it once
/// overflowed and made the reader refuse every line, or panic.
#[test]
fn maximal_limits_accept_every_line() {
    smol::block_on(async {
        let mut lines = LineReader::with_max_line_length(
            Cursor::new(b"one\r\ntwo\nthree".to_vec()),
            usize::MAX,
        );
        for expected in [&b"one"[..], b"two", b"three"] {
            assert_eq!(lines.next_line().await.unwrap().unwrap(), expected);
        }
        assert_eq!(lines.next_line().await.unwrap(), None);

        let client = AppServerClient::builder()
            .request_timeout(HOURS)
            .max_line_length(usize::MAX)
            .max_incoming_memory(usize::MAX)
            .spawn(sh(ECHO_PARAMS), "unlimited")
            .unwrap();
        let reply = within("the reply", client.request("echo", json!([1, 2]))).await;
        assert_eq!(reply.unwrap(), json!([1, 2]));
        within("shutdown", client.shutdown()).await.unwrap();
    })
}

/// A reader that waits until told, then panics, as a broken stream type of an
/// embedding app might.
struct PanickingReader {
    armed: Arc<std::sync::atomic::AtomicBool>,
    waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
}

impl futures_lite::io::AsyncRead for PanickingReader {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        _buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("the test's reader panics on purpose");
        }
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        std::task::Poll::Pending
    }
}

/// A panic in the connection task (here from the reader it was given) fails every
/// pending request at once, and every later one, instead of leaving them to their
/// timeout.
#[test]
fn a_panic_in_the_connection_task_fails_every_pending_request_at_once() {
    smol::block_on(async {
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waker = Arc::new(std::sync::Mutex::new(None::<std::task::Waker>));
        let reader = PanickingReader {
            armed: armed.clone(),
            waker: waker.clone(),
        };
        let client = AppServerClient::builder()
            .request_timeout(HOURS)
            .connect(reader, futures_lite::io::sink());
        let requests = future::zip(
            client.request("a", Value::Null),
            client.request("b", Value::Null),
        );
        let trigger = async {
            // Both requests are registered by their first poll, which came first.
            future::yield_now().await;
            armed.store(true, std::sync::atomic::Ordering::SeqCst);
            // The reader polls at least once before (the task starts at once), so the
            // waker is there; if not yet, the first poll will see `armed` anyway.
            if let Some(waker) = waker.lock().unwrap().take() {
                waker.wake();
            }
        };
        let ((a, b), ()) = within("the pending requests", future::zip(requests, trigger)).await;
        let later = within("a later request", client.request("c", Value::Null)).await;
        for outcome in [a, b, later] {
            match outcome {
                Err(error @ AppServerError::Io { .. }) => {
                    assert!(error.to_string().contains("panicked"), "{}", error)
                }
                other => panic!("expected the panic's error, got {:?}", other),
            }
        }
    })
}

/// The pipes (as `pipe:[inode]`) that process `pid` has as stdin, stdout and stderr.
fn stdio_pipes(pid: u32) -> Vec<String> {
    (0..3)
        .map(|fd| {
            let link = std::fs::read_link(format!("/proc/{}/fd/{}", pid, fd)).unwrap();
            let link = link.to_string_lossy().into_owned();
            assert!(link.starts_with("pipe:"), "fd {} is {}", fd, link);
            link
        })
        .collect()
}

/// Which of `pipes` this process still holds a descriptor of.
fn held_by_us(pipes: &[String]) -> Vec<String> {
    let mut held = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        // A descriptor closed meanwhile (another test's) has no link any more.
        if let Ok(link) = std::fs::read_link(entry.unwrap().path()) {
            let link = link.to_string_lossy().into_owned();
            if pipes.contains(&link) {
                held.push(link);
            }
        }
    }
    held
}

/// Kills a process at the end of a test, however it ends.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = Pid::from_raw(self.0 as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Dropping a client closes every pipe it had to its child, its stderr drain's
/// included, even while a grandchild that escaped the child's process group holds the
/// other ends open.
#[test]
fn dropping_a_client_closes_its_pipes_while_an_escaped_grandchild_holds_them() {
    // A background job's stdin is /dev/null unless redirected, hence the copy in 3.
    let script = r#"exec 3<&0
    setsid sleep 60 <&3 3<&- &
    printf '{"method":"started","params":{"pid":%s}}\n' "$!"
    exec cat > /dev/null"#;
    smol::block_on(async {
        let client = spawn_client(script);
        let started = next_incoming(&client.incoming()).await;
        let pid = match started {
            Incoming::Notification { params, .. } => params["pid"].as_u64().unwrap() as u32,
            other => panic!("{:?}", other),
        };
        let _grandchild = KillOnDrop(pid);
        // `$!` is known from the fork on; `setsid` takes it out of the group a little
        // later, and the drop would still stop it before then.
        let group = Pid::from_raw(client.process_id().unwrap() as i32);
        eventually("the grandchild to leave the group", || {
            rustix::process::getpgid(Pid::from_raw(pid as i32)).ok() != group
        })
        .await;
        let pipes = stdio_pipes(pid);
        assert_eq!(held_by_us(&pipes).len(), 3, "the client holds all three");

        drop(client);

        eventually("the client's pipes to close", || {
            held_by_us(&pipes).is_empty()
        })
        .await;
        assert!(
            is_running(pid),
            "the grandchild escaped and still holds them"
        );
    })
}
