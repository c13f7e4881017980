//! The `mcp-bridge` binary on Windows, spawned as an MCP CLI would spawn it,
//! against a named-pipe host in this process (the library's
//! [`PipeListener`]). CI runs these under Wine, which matches Windows on
//! pipe errors and end-of-stream but does not serialize I/O on synchronous
//! handles the way Windows does; see `src/endpoint/windows.rs` for why the
//! duplex design is right on Windows regardless.
#![cfg(windows)]

use std::future::Future;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use futures_lite::StreamExt;
use mcp_bridge::endpoint::{self, PipeListener, Reader};
use mcp_bridge::handshake::Handshake;
use smol::Unblock;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-bridge");

/// A budget no healthy run comes near; only a hang exceeds it.
const GENEROUS: Duration = Duration::from_secs(30);

/// A pipe name no other test (or test run) uses.
fn unique_pipe(tag: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        r"\\.\pipe\mcp-bridge-test-{}-{}-{}",
        std::process::id(),
        tag,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `test` to completion, failing if it takes longer than [`GENEROUS`].
fn run<T>(test: impl Future<Output = T>) -> T {
    smol::block_on(future::or(test, async {
        Timer::after(GENEROUS).await;
        panic!("the test hung for {:?}", GENEROUS)
    }))
}

/// The bridge as a child process with piped stdio, killed if a test fails
/// before it exits.
struct Bridge {
    /// `None` once [`Bridge::wait`] took it.
    child: Option<Child>,
    stdin: Option<Unblock<ChildStdin>>,
    stdout: Option<Unblock<ChildStdout>>,
}

impl Bridge {
    fn spawn(pipe: &str, extra: &[&str]) -> Bridge {
        let mut child = Command::new(BIN)
            .args(["mcp-server", "--endpoint", pipe])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the bridge");
        let stdin = child.stdin.take().map(Unblock::new);
        let stdout = child.stdout.take().map(Unblock::new);
        Bridge {
            child: Some(child),
            stdin,
            stdout,
        }
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn close_stdin(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            stdin.close().await.unwrap();
        }
    }

    fn stdout_lines(&mut self) -> futures_lite::io::Lines<BufReader<Unblock<ChildStdout>>> {
        BufReader::new(self.stdout.take().expect("stdout not taken yet")).lines()
    }

    fn has_exited(&mut self) -> bool {
        let child = self.child.as_mut().expect("not waited for yet");
        child.try_wait().unwrap().is_some()
    }

    /// Waits for the exit on a pool thread, so the host can keep running,
    /// and returns the exit status and everything written to stderr.
    async fn wait(mut self) -> (ExitStatus, String) {
        self.stdin.take();
        let mut child = self.child.take().expect("not waited for yet");
        let stderr = child.stderr.take();
        smol::unblock(move || {
            let mut text = String::new();
            if let Some(mut stderr) = stderr {
                std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
            }
            (child.wait().unwrap(), text)
        })
        .await
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Accepts one bridge and reads its handshake line.
async fn accept_bridge(
    listener: &PipeListener,
) -> (
    Handshake,
    futures_lite::io::Lines<BufReader<Reader>>,
    endpoint::Writer,
) {
    let (reader, writer) = listener.accept().await.expect("accept");
    let mut lines = BufReader::new(reader).lines();
    let first = lines.next().await.expect("a handshake line").unwrap();
    let handshake = Handshake::parse(first.as_bytes()).expect("a valid handshake");
    (handshake, lines, writer)
}

#[test]
fn relays_both_ways_after_the_handshake() {
    let pipe = unique_pipe("relay");
    let listener = PipeListener::bind(&pipe).unwrap();
    let mut bridge = Bridge::spawn(&pipe, &["--project", "proj-1", "--requester", "agent-7"]);
    run(async {
        let (handshake, mut requests, mut replies) = accept_bridge(&listener).await;
        assert_eq!(handshake, Handshake::new("proj-1", "agent-7"));

        let mut out = bridge.stdout_lines();
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        bridge.send(request).await;
        assert_eq!(requests.next().await.unwrap().unwrap(), request);
        let reply = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
        replies.write_all(reply.as_bytes()).await.unwrap();
        replies.write_all(b"\n").await.unwrap();
        replies.flush().await.unwrap();
        assert_eq!(out.next().await.unwrap().unwrap(), reply);

        bridge.close_stdin().await;
        // The app hangs up after the client is done: the bridge exits 0.
        drop((requests, replies));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// Both directions busy at once, each well past a pipe buffer: the app
/// pushes notifications without waiting while the client streams requests,
/// and every request is answered as it arrives.
#[test]
fn many_interleaved_messages_both_ways_at_once() {
    const COUNT: usize = 1000;
    let padding = "x".repeat(300);
    let pipe = unique_pipe("duplex");
    let listener = PipeListener::bind(&pipe).unwrap();
    let mut bridge = Bridge::spawn(&pipe, &[]);
    run(async {
        let (_, mut requests, mut writer) = accept_bridge(&listener).await;
        let (ids_tx, ids_rx) = smol::channel::unbounded::<u64>();
        let reading = smol::spawn(async move {
            let mut seen = 0;
            while let Some(line) = requests.next().await {
                let request: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
                ids_tx.send(request["id"].as_u64().unwrap()).await.unwrap();
                seen += 1;
                if seen == COUNT {
                    break;
                }
            }
            seen
        });
        let pad = padding.clone();
        let writing = smol::spawn(async move {
            let mut replied = 0;
            for n in 0..COUNT {
                let note = format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"n":{},"pad":"{}"}}}}"#,
                    n, pad
                );
                writer.write_all(note.as_bytes()).await.unwrap();
                writer.write_all(b"\n").await.unwrap();
                while let Ok(id) = ids_rx.try_recv() {
                    let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id);
                    writer.write_all(reply.as_bytes()).await.unwrap();
                    writer.write_all(b"\n").await.unwrap();
                    replied += 1;
                }
                writer.flush().await.unwrap();
            }
            while replied < COUNT {
                let id = ids_rx.recv().await.unwrap();
                let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id);
                writer.write_all(reply.as_bytes()).await.unwrap();
                writer.write_all(b"\n").await.unwrap();
                writer.flush().await.unwrap();
                replied += 1;
            }
            writer
        });

        let mut out = bridge.stdout_lines();
        let mut stdin = bridge.stdin.take().unwrap();
        let sending = smol::spawn(async move {
            for id in 0..COUNT {
                let request = format!(
                    r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"pad":"{}"}}}}"#,
                    id, padding
                );
                stdin.write_all(request.as_bytes()).await.unwrap();
                stdin.write_all(b"\n").await.unwrap();
            }
            stdin.flush().await.unwrap();
            stdin
        });

        let mut notes = Vec::new();
        let mut reply_ids = Vec::new();
        while notes.len() < COUNT || reply_ids.len() < COUNT {
            let line = out.next().await.expect("more output").unwrap();
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            match message.get("id") {
                Some(id) => reply_ids.push(id.as_u64().unwrap()),
                None => notes.push(message["params"]["n"].as_u64().unwrap()),
            }
        }
        assert_eq!(notes, (0..COUNT as u64).collect::<Vec<_>>(), "in order");
        reply_ids.sort_unstable();
        assert_eq!(reply_ids, (0..COUNT as u64).collect::<Vec<_>>());
        assert_eq!(reading.await, COUNT);

        let writer = writing.await;
        drop(sending.await);
        drop(writer);
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

#[test]
fn absent_pipe_fails_fast_naming_the_pipe() {
    let pipe = unique_pipe("absent");
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["mcp-server", "--endpoint", &pipe, "--connect-timeout", "20"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", stderr);
    assert!(stderr.contains(&pipe), "names the pipe: {}", stderr);
    assert!(stderr.contains("does not exist"), "{}", stderr);
    assert!(out.stdout.is_empty(), "stdout carries relayed bytes only");
    assert!(took < Duration::from_secs(10), "not fast: {:?}", took);
}

#[test]
fn endpoint_that_is_not_a_pipe_is_refused() {
    let out = Command::new(BIN)
        .args(["mcp-server", "--endpoint", r"C:\not-a-pipe"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", stderr);
    assert!(stderr.contains(r"\\.\pipe\NAME"), "{}", stderr);
}

/// While the only instance of the pipe is taken, the bridge waits (it does
/// not fail), and connects as soon as the app makes a new one.
#[test]
fn busy_pipe_waits_then_connects() {
    let pipe = unique_pipe("busy");
    let listener = PipeListener::bind(&pipe).unwrap();
    run(async {
        // Someone else takes the one waiting instance.
        let first = endpoint::connect(Path::new(&pipe), GENEROUS).await.unwrap();
        let mut bridge = Bridge::spawn(&pipe, &["--connect-timeout", "20", "--project", "p"]);
        Timer::after(Duration::from_millis(500)).await;
        assert!(!bridge.has_exited(), "the bridge gave up on a busy pipe");
        // Accepting the first client readies the next instance.
        let taken = listener.accept().await.unwrap();
        let (handshake, requests, replies) = accept_bridge(&listener).await;
        assert_eq!(handshake, Handshake::new("p", ""));
        drop((first, taken, requests, replies));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

#[test]
fn busy_pipe_that_stays_busy_times_out() {
    let pipe = unique_pipe("busy-timeout");
    let _listener = PipeListener::bind(&pipe).unwrap();
    run(async {
        let _first = endpoint::connect(Path::new(&pipe), GENEROUS).await.unwrap();
        let started = Instant::now();
        let bridge = Bridge::spawn(&pipe, &["--connect-timeout", "0.5"]);
        let (status, stderr) = bridge.wait().await;
        let took = started.elapsed();
        assert_eq!(status.code(), Some(1), "{}", stderr);
        assert!(stderr.contains("no connection within"), "{}", stderr);
        assert!(took < Duration::from_secs(10), "not bounded: {:?}", took);
    });
}

/// The app closing the connection ends the bridge (exit 0) even though the
/// client keeps its stdin open, and what the app sent last still arrives.
#[test]
fn host_hang_up_ends_the_bridge() {
    let pipe = unique_pipe("hangup");
    let listener = PipeListener::bind(&pipe).unwrap();
    let mut bridge = Bridge::spawn(&pipe, &[]);
    run(async {
        let (_, requests, mut writer) = accept_bridge(&listener).await;
        let last = r#"{"jsonrpc":"2.0","method":"notifications/goodbye"}"#;
        writer.write_all(last.as_bytes()).await.unwrap();
        writer.write_all(b"\n").await.unwrap();
        writer.flush().await.unwrap();
        drop((requests, writer));

        let mut out = bridge.stdout_lines();
        assert_eq!(out.next().await.unwrap().unwrap(), last);
        assert!(out.next().await.is_none(), "stdout ends");
        assert!(bridge.stdin.is_some(), "stdin is still open");
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// Pipes have no half-close: after stdin ends, the bridge keeps relaying
/// for the drain grace, so a reply still on its way reaches the client even
/// though the app never hears of the EOF; then the bridge exits 0.
#[test]
fn stdin_eof_drains_the_reply_in_flight() {
    let pipe = unique_pipe("drain");
    let listener = PipeListener::bind(&pipe).unwrap();
    let mut bridge = Bridge::spawn(&pipe, &[]);
    run(async {
        let (_, mut requests, mut writer) = accept_bridge(&listener).await;
        let request = r#"{"jsonrpc":"2.0","id":7,"method":"slow"}"#;
        bridge.send(request).await;
        bridge.close_stdin().await;
        let closed = Instant::now();
        assert_eq!(requests.next().await.unwrap().unwrap(), request);

        Timer::after(Duration::from_millis(300)).await;
        let reply = r#"{"jsonrpc":"2.0","id":7,"result":"late but here"}"#;
        writer.write_all(reply.as_bytes()).await.unwrap();
        writer.write_all(b"\n").await.unwrap();
        writer.flush().await.unwrap();

        let mut out = bridge.stdout_lines();
        assert_eq!(out.next().await.unwrap().unwrap(), reply);
        // The app keeps the connection open; the grace bounds the exit.
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
        let took = closed.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "drain not bounded: {:?}",
            took
        );
        // The app sees the end of the stream once the bridge is gone.
        assert!(requests.next().await.is_none());
        drop(writer);
    });
}

/// A client that stops reading (closes the bridge's stdout) ends the bridge
/// quietly once there is something to write: Windows reports the closed
/// pipe as ERROR_NO_DATA, which must read as "the client is gone", exit 0.
#[test]
fn closed_stdout_ends_the_bridge() {
    let pipe = unique_pipe("stdout-gone");
    let listener = PipeListener::bind(&pipe).unwrap();
    let mut bridge = Bridge::spawn(&pipe, &[]);
    run(async {
        let (_, _requests, mut writer) = accept_bridge(&listener).await;
        drop(bridge.stdout.take());
        let note = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/ping\"}\n";
        // Ignore write errors: the bridge may already be gone.
        while !bridge.has_exited() {
            if writer.write_all(note).await.is_err() || writer.flush().await.is_err() {
                break;
            }
            Timer::after(Duration::from_millis(20)).await;
        }
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
        assert!(stderr.is_empty(), "quietly: {}", stderr);
    });
}

/// Dropping one side's halves, even with a read pending on them, closes the
/// connection: the other side reads the end of the stream.
#[test]
fn dropping_a_connection_ends_the_peers_stream() {
    let pipe = unique_pipe("drop");
    let listener = PipeListener::bind(&pipe).unwrap();
    run(async {
        for server_drops in [true, false] {
            let (client_reader, client_writer) =
                endpoint::connect(Path::new(&pipe), GENEROUS).await.unwrap();
            let (server_reader, server_writer) = listener.accept().await.unwrap();
            let (mut dropping, mut surviving) = if server_drops {
                (
                    (server_reader, server_writer),
                    (client_reader, client_writer),
                )
            } else {
                (
                    (client_reader, client_writer),
                    (server_reader, server_writer),
                )
            };
            dropping.1.write_all(b"last words").await.unwrap();
            dropping.1.flush().await.unwrap();
            // Leave a read pending on the dropping side, then drop it all.
            let mut byte = [0u8; 1];
            let pending = future::or(async { Some(dropping.0.read(&mut byte).await) }, async {
                Timer::after(Duration::from_millis(100)).await;
                None
            })
            .await;
            assert!(pending.is_none(), "nothing was sent to the dropping side");
            drop(dropping);

            let mut rest = Vec::new();
            surviving.0.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"last words");
        }
    });
}
