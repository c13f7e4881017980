//! The `mcp-bridge` binary on Windows, spawned as an MCP CLI would spawn it,
//! against a named-pipe host in this process (the library's
//! `host::PipeListener`, and `host::Listener` built on it), plus `demo` and
//! `serve`. CI runs these under Wine, which matches Windows on pipe errors
//! and end-of-stream but does not serialize I/O on synchronous handles the
//! way Windows does; see `src/endpoint/windows.rs` for why the duplex design
//! is right on Windows regardless. Wine has one user, so that other users
//! are refused by the pipe's DACL cannot be shown here (the unit tests read
//! the DACL back instead).
#![cfg(windows)]
#![cfg(feature = "host")]

mod support;

use std::future::Future;
use std::io;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use futures_lite::StreamExt;
use mcp_bridge::endpoint;
use mcp_bridge::handshake::Handshake;
use mcp_bridge::host::{self, Listener, PipeListener, HANDSHAKE_LIMIT, HANDSHAKE_TIMEOUT};
use smol::Unblock;
use support::{within, BIN, HANG_GUARD, POLL};

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

/// Runs `test` to completion, failing if it takes longer than
/// [`HANG_GUARD`].
fn run<T>(test: impl Future<Output = T>) -> T {
    smol::block_on(within("the test", test))
}

/// Binds `pipe` again once the name is free: a moment after the drop of
/// its last listener (see `host_listener_does_not_join_a_live_pipe`).
async fn bind_again(pipe: &str) -> Listener {
    within("the pipe name to be free", async {
        loop {
            match Listener::bind(pipe) {
                Ok(listener) => return listener,
                Err(_) => {
                    Timer::after(POLL).await;
                }
            }
        }
    })
    .await
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
    /// The plain relay (`--no-reconnect`), whose endings most tests here
    /// check; [`Bridge::surviving`] is the default bridge.
    fn spawn(pipe: &str, extra: &[&str]) -> Bridge {
        let mut args = vec!["--no-reconnect"];
        args.extend_from_slice(extra);
        Bridge::surviving(pipe, &args)
    }

    fn surviving(pipe: &str, extra: &[&str]) -> Bridge {
        Bridge::start(
            Command::new(BIN)
                .args(["mcp-server", "--endpoint", pipe])
                .args(extra),
        )
    }

    /// Starts `command` (the bridge, with its arguments) with every stdio
    /// piped.
    fn start(command: &mut Command) -> Bridge {
        let mut child = command
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
    futures_lite::io::Lines<BufReader<host::Reader>>,
    host::Writer,
) {
    let (reader, writer) = listener.accept().await.expect("accept");
    let mut lines = BufReader::new(reader).lines();
    let first = lines.next().await.expect("a handshake line").unwrap();
    let handshake = Handshake::parse(first.as_bytes()).expect("a valid handshake");
    (handshake, lines, writer)
}

/// One request from the client through the bridge to the app, and the app's
/// reply back to the client, each checked on arrival.
async fn round_trip<R, W>(
    bridge: &mut Bridge,
    out: &mut futures_lite::io::Lines<BufReader<Unblock<ChildStdout>>>,
    requests: &mut futures_lite::io::Lines<R>,
    replies: &mut W,
    request: &str,
    reply: &str,
) where
    R: futures_lite::io::AsyncBufRead + Unpin,
    W: futures_lite::io::AsyncWrite + Unpin,
{
    bridge.send(request).await;
    assert_eq!(requests.next().await.unwrap().unwrap(), request);
    replies.write_all(reply.as_bytes()).await.unwrap();
    replies.write_all(b"\n").await.unwrap();
    replies.flush().await.unwrap();
    assert_eq!(out.next().await.unwrap().unwrap(), reply);
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
        let reply = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
        round_trip(
            &mut bridge,
            &mut out,
            &mut requests,
            &mut replies,
            request,
            reply,
        )
        .await;

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
        .args([
            "mcp-server",
            "--endpoint",
            &pipe,
            "--connect-timeout",
            "20",
            "--no-reconnect",
        ])
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
        .args([
            "mcp-server",
            "--endpoint",
            r"C:\not-a-pipe",
            "--no-reconnect",
        ])
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
        let first = endpoint::connect(Path::new(&pipe), HANG_GUARD)
            .await
            .unwrap();
        // The requester given empty: not learned (explicit options win).
        let mut bridge = Bridge::spawn(
            &pipe,
            &[
                "--connect-timeout",
                "20",
                "--project",
                "p",
                "--requester",
                "",
            ],
        );
        // Accepting the first client readies the next instance; the bridge
        // connecting to it, and exiting cleanly, shows it waited rather
        // than giving up on the busy pipe.
        let taken = listener.accept().await.unwrap();
        let (handshake, requests, mut replies) = accept_bridge(&listener).await;
        assert_eq!(handshake, Handshake::new("p", ""));
        // One line, so the close is an end and not a refusal.
        replies
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"bye\"}\n")
            .await
            .unwrap();
        let bye = bridge.stdout_lines().next().await.unwrap().unwrap();
        assert!(bye.contains("bye"), "{}", bye);
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
        let _first = endpoint::connect(Path::new(&pipe), HANG_GUARD)
            .await
            .unwrap();
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
            let client = endpoint::connect(Path::new(&pipe), HANG_GUARD)
                .await
                .unwrap();
            let server = listener.accept().await.unwrap();
            if server_drops {
                drop_while_reading(server, client).await;
            } else {
                drop_while_reading(client, server).await;
            }
        }
    });
}

/// Sends "last words" from `dropping`, leaves a read pending on it, drops
/// it, and checks that `surviving` reads exactly those words and the end.
async fn drop_while_reading<R1, W1, R2, W2>(mut dropping: (R1, W1), mut surviving: (R2, W2))
where
    R1: futures_lite::io::AsyncRead + Unpin,
    W1: futures_lite::io::AsyncWrite + Unpin,
    R2: futures_lite::io::AsyncRead + Unpin,
{
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

/// An accept given up on (an app's own timeout around it, here three in a
/// row) leaves the pipe listening: a client connects at once, where a pipe
/// without an instance would answer "does not exist", and the next accept
/// returns it; a bridge connects after it as usual.
#[test]
fn a_cancelled_accept_leaves_the_pipe_listening() {
    let pipe = unique_pipe("cancelled");
    let listener = PipeListener::bind(&pipe).unwrap();
    run(async {
        for _ in 0..3 {
            let gave_up = future::or(async { Some(listener.accept().await) }, async {
                Timer::after(Duration::from_millis(50)).await;
                None
            })
            .await;
            assert!(gave_up.is_none(), "nobody was connecting");
        }
        let client = endpoint::connect(Path::new(&pipe), HANG_GUARD)
            .await
            .expect("the pipe still has its instance");
        let taken = listener.accept().await.unwrap();

        let mut bridge = Bridge::spawn(&pipe, &["--project", "after-cancel", "--requester", ""]);
        let (handshake, requests, mut replies) = accept_bridge(&listener).await;
        assert_eq!(handshake, Handshake::new("after-cancel", ""));
        // One line, so the close is an end and not a refusal.
        replies
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"bye\"}\n")
            .await
            .unwrap();
        let bye = bridge.stdout_lines().next().await.unwrap().unwrap();
        assert!(bye.contains("bye"), "{}", bye);
        drop((client, taken, requests, replies));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// `host::Listener` on a pipe, with the real bridge: the parsed handshake
/// comes out of accept, with the bridge's pid as the system recorded it
/// (`Connection::peer`, issue 43; no uid on Windows), and the stream
/// relays both ways.
#[test]
fn host_listener_accepts_the_bridge() {
    let pipe = unique_pipe("host");
    let listener = Listener::bind(&pipe).unwrap();
    assert_eq!(listener.endpoint(), Path::new(&pipe));
    let mut bridge = Bridge::spawn(&pipe, &["--project", "proj-h", "--requester", "agent-h"]);
    let pid = bridge.child.as_ref().map(Child::id);
    run(async {
        let connection = listener.accept().await.unwrap();
        assert_eq!(connection.handshake, Handshake::new("proj-h", "agent-h"));
        assert_eq!(connection.peer.pid, pid, "{:?}", connection.peer);
        assert_eq!(connection.peer.uid, None);
        let mut requests = BufReader::new(connection.reader).lines();
        let mut replies = connection.writer;

        let mut out = bridge.stdout_lines();
        for id in 1..=3 {
            let request = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, id);
            let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id);
            round_trip(
                &mut bridge,
                &mut out,
                &mut requests,
                &mut replies,
                &request,
                &reply,
            )
            .await;
        }
        bridge.close_stdin().await;
        drop((requests, replies));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// A live pipe is never joined; once its listener is gone, the name is
/// free again (a pipe leaves nothing stale behind). The waiting instance
/// closes on a pool thread a moment after the drop, hence the retries.
#[test]
fn host_listener_does_not_join_a_live_pipe() {
    let pipe = unique_pipe("host-live");
    let first = Listener::bind(&pipe).unwrap();
    let e = Listener::bind(&pipe).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::AddrInUse, "{}", e);
    assert!(e.to_string().contains(&pipe), "{}", e);
    assert!(
        e.to_string().contains("another process is listening"),
        "{}",
        e
    );
    drop(first);
    let dropped = Instant::now();
    let again = loop {
        match Listener::bind(&pipe) {
            Ok(listener) => break listener,
            Err(e) if dropped.elapsed() < Duration::from_secs(5) => {
                assert_eq!(e.io_error().kind(), io::ErrorKind::AddrInUse, "{}", e);
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("the name is still taken after the drop: {}", e),
        }
    };
    drop(again);
}

/// A raw client that sends `bytes` (errors ignored: the host may hang up
/// mid-way) and then waits, returning when it reads the end of the stream.
async fn bad_client(pipe: &str, bytes: Vec<u8>) -> smol::Task<()> {
    let (mut reader, mut writer) = endpoint::connect(Path::new(pipe), HANG_GUARD)
        .await
        .expect("connect");
    smol::spawn(async move {
        let sending = smol::spawn(async move {
            let _ = writer.write_all(&bytes).await;
            let _ = writer.flush().await;
            // Keep the writing half open until the host gives up on us.
            future::pending::<()>().await;
        });
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest).await;
        assert!(rest.is_empty(), "the host said something to a bad peer");
        drop(sending);
    })
}

/// Invalid, oversized and unfinished handshakes are each dropped (the peer
/// reads the end of the stream), and none of them holds up a good bridge.
#[test]
fn host_listener_drops_bad_handshakes_only() {
    let pipe = unique_pipe("host-bad");
    let listener = Listener::bind(&pipe).unwrap();
    run(async {
        let started = Instant::now();
        let silent = bad_client(&pipe, b"{\"project\":\"p\",".to_vec()).await;
        let invalid = bad_client(&pipe, b"not json\n".to_vec()).await;
        let oversized = bad_client(&pipe, vec![b'x'; HANDSHAKE_LIMIT + 1]).await;
        invalid.await;
        oversized.await;

        let mut bridge = Bridge::spawn(&pipe, &["--project", "good", "--requester", "r"]);
        let connection = listener.accept().await.unwrap();
        assert_eq!(connection.handshake, Handshake::new("good", "r"));
        assert!(
            started.elapsed() < HANDSHAKE_TIMEOUT,
            "the good bridge waited behind the silent one: {:?}",
            started.elapsed()
        );
        // The silent peer is dropped once its time is up.
        silent.await;
        assert!(started.elapsed() >= HANDSHAKE_TIMEOUT);
        // One line, so the close is an end and not a refusal.
        let mut writer = connection.writer;
        writer
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"bye\"}\n")
            .await
            .unwrap();
        let bye = bridge.stdout_lines().next().await.unwrap().unwrap();
        assert!(bye.contains("bye"), "{}", bye);
        drop((connection.reader, writer));
        bridge.close_stdin().await;
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

#[test]
fn demo_succeeds() {
    let out = Command::new(BIN)
        .arg("demo")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{}", stdout, stderr);
    assert!(stdout.contains(r"\\.\pipe\mcp-bridge-demo-"), "{}", stdout);
    assert!(stdout.contains("demo OK"), "{}", stdout);
}

/// `mcp-bridge serve` as a child process, its stderr collected line by
/// line; killed if a test fails before it is done.
struct Serve {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Serve {
    /// Starts `serve` on `pipe` with `command`, and returns once it listens.
    fn start(pipe: &str, command: &[&str]) -> Serve {
        Serve::start_with(pipe, &[], &[], command).0
    }

    /// [`Serve::start`] with more options and environment variables; also
    /// returns the line that says it listens.
    fn start_with(
        pipe: &str,
        options: &[&str],
        env: &[(&str, &str)],
        command: &[&str],
    ) -> (Serve, String) {
        Serve::start_named(&["--endpoint", pipe], options, env, command)
    }

    /// [`Serve::start_with`] with the endpoint as `endpoint` names it
    /// (`--endpoint <PIPE>`, or `--app <NAME>`).
    fn start_named(
        endpoint: &[&str],
        options: &[&str],
        env: &[(&str, &str)],
        command: &[&str],
    ) -> (Serve, String) {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(endpoint)
            .args(options)
            .arg("--")
            .args(command)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn serve");
        let stderr = child.stderr.take().unwrap();
        let (lines, stderr_lines) = mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let sent = line.map(|line| lines.send(line));
                if !matches!(sent, Ok(Ok(()))) {
                    return;
                }
            }
        });
        let mut serve = Serve {
            child,
            stderr: stderr_lines,
        };
        let serving = serve.wait_for_line("serving");
        (serve, serving)
    }

    /// Waits for a stderr line containing `needle`, and returns it.
    fn wait_for_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + HANG_GUARD;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("serve never said {:?}; it said {:#?}", needle, seen)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// serve's child gets the handshake in its environment, and its stdout
/// reaches the bridge; when the child exits, the connection closes and the
/// bridge exits 0. The child is Windows' own `cmd`.
#[test]
fn serve_passes_the_handshake_to_the_child() {
    let pipe = unique_pipe("serve-env");
    let mut serve = Serve::start(
        &pipe,
        &[
            "cmd",
            "/c",
            "echo",
            "project=%MCP_BRIDGE_PROJECT%;requester=%MCP_BRIDGE_REQUESTER%",
        ],
    );
    let mut bridge = Bridge::spawn(&pipe, &["--project", "proj-s", "--requester", "agent-s"]);
    run(async {
        let mut out = bridge.stdout_lines();
        let line = out.next().await.expect("a line").unwrap();
        assert_eq!(line.trim_end(), "project=proj-s;requester=agent-s");
        assert!(out.next().await.is_none(), "the connection closes");
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
    serve.wait_for_line("ended");
}

/// Bridge -> serve -> a child -> an app, both ways: the child is a second
/// bridge (the one program sure to be there), connected to a host in this
/// test. Then the app hangs up: the child exits, serve closes the
/// connection, and the first bridge exits 0.
#[test]
fn serve_relays_through_a_child_both_ways() {
    let outer = unique_pipe("serve-outer");
    let inner = unique_pipe("serve-inner");
    let app = PipeListener::bind(&inner).unwrap();
    let mut serve = Serve::start(
        &outer,
        &[
            BIN,
            "mcp-server",
            "--endpoint",
            &inner,
            "--project",
            "inner-proj",
            "--requester",
            "inner-agent",
            // Exits when the app hangs up, ending serve's child.
            "--no-reconnect",
        ],
    );
    let mut bridge = Bridge::spawn(&outer, &["--project", "outer", "--requester", "agent-o"]);
    run(async {
        let (handshake, mut requests, mut replies) = accept_bridge(&app).await;
        assert_eq!(handshake, Handshake::new("inner-proj", "inner-agent"));
        let mut out = bridge.stdout_lines();
        for id in 1..=20 {
            let request = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"m"}}"#, id);
            let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#, id, id);
            round_trip(
                &mut bridge,
                &mut out,
                &mut requests,
                &mut replies,
                &request,
                &reply,
            )
            .await;
        }
        drop((requests, replies));
        assert!(out.next().await.is_none(), "the connection closes");
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
    let started = serve.wait_for_line("started pid");
    assert!(started.contains("agent-o"), "{}", started);
    serve.wait_for_line("ended");
}

/// The surviving bridge on named pipes: a pipe that does not exist yet is
/// waited for, with the client's request held and delivered; when the app
/// restarts (its listener dropped, the name bound again), the bridge
/// reconnects with a resumed handshake, replays `initialize` under its own
/// id, tells the client the tools changed, and relays again.
#[test]
fn a_late_pipe_and_a_restart_are_survived() {
    let pipe = unique_pipe("survive");
    let mut bridge = Bridge::surviving(&pipe, &["--connect-timeout", "20", "--project", "p"]);
    run(async {
        let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        bridge.send(initialize).await;
        let mut out = bridge.stdout_lines();

        let listener = Listener::bind(&pipe).unwrap();
        let connection = listener.accept().await.unwrap();
        assert!(!connection.handshake.resumed);
        let mut requests = BufReader::new(connection.reader).lines();
        let mut replies = connection.writer;
        assert_eq!(
            requests.next().await.unwrap().unwrap(),
            initialize,
            "held, then delivered"
        );
        let result =
            r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{"listChanged":true}}}}"#;
        replies
            .write_all(format!("{}\n", result).as_bytes())
            .await
            .unwrap();
        replies.flush().await.unwrap();
        assert_eq!(out.next().await.unwrap().unwrap(), result);

        // The app restarts.
        drop((requests, replies, listener));
        let listener = bind_again(&pipe).await;
        let connection = listener.accept().await.unwrap();
        assert!(connection.handshake.resumed);
        let mut requests = BufReader::new(connection.reader).lines();
        let mut replies = connection.writer;
        let replayed = requests.next().await.unwrap().unwrap();
        assert!(
            replayed.contains(r#""id":"mcp-bridge-replay-1""#),
            "{}",
            replayed
        );
        let result = r#"{"jsonrpc":"2.0","id":"mcp-bridge-replay-1","result":{"capabilities":{"tools":{}}}}"#;
        replies
            .write_all(format!("{}\n", result).as_bytes())
            .await
            .unwrap();
        replies.flush().await.unwrap();
        assert_eq!(
            out.next().await.unwrap().unwrap(),
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
            "the replayed reply stays with the bridge"
        );
        let request = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        let reply = r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#;
        round_trip(
            &mut bridge,
            &mut out,
            &mut requests,
            &mut replies,
            request,
            reply,
        )
        .await;
        bridge.close_stdin().await;
        drop((requests, replies));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// Whether a pipe called `pipe` exists: connecting to it (and leaving at
/// once) tells, as nothing else from outside does.
async fn pipe_exists(pipe: &str) -> bool {
    match endpoint::connect(Path::new(pipe), Duration::from_secs(5)).await {
        Ok(_) => true,
        Err(e) => e.io_error().kind() != io::ErrorKind::NotFound,
    }
}

/// Waits until the pipe `pipe` no longer exists: its last server is gone.
async fn until_gone(pipe: &str) {
    while pipe_exists(pipe).await {
        Timer::after(POLL).await;
    }
}

/// serve's command is `cmd`, which starts a grandchild that never exits
/// by itself: a second serve, which reads no stdin and listens on a pipe of
/// its own until stopped. Returns the outer serve, once the grandchild
/// listens.
fn serve_with_a_grandchild(outer: &str, inner: &str) -> (Serve, Bridge) {
    let mut serve = Serve::start(
        outer,
        &[
            "cmd",
            "/c",
            BIN,
            "serve",
            "--endpoint",
            inner,
            "--",
            "cmd",
            "/c",
            "rem",
        ],
    );
    let bridge = Bridge::spawn(outer, &[]);
    // The grandchild's own "serving ... on '<inner>'", through serve's
    // copy of its command's stderr.
    serve.wait_for_line(&format!("on '{}'", inner));
    (serve, bridge)
}

/// The helpers of a command die with its session: when the bridge goes,
/// serve stops `cmd`, and the serve that `cmd` started goes with it (the
/// job object), instead of listening on for ever. Several rounds, since
/// stopping races the grandchild's start.
#[test]
fn a_grandchild_dies_with_its_session() {
    for round in 0..3 {
        let outer = unique_pipe(&format!("job-outer-{}", round));
        let inner = unique_pipe(&format!("job-inner-{}", round));
        let (mut serve, bridge) = serve_with_a_grandchild(&outer, &inner);
        run(async {
            assert!(pipe_exists(&inner).await, "the grandchild listens");
            drop(bridge);
            until_gone(&inner).await;
        });
        serve.wait_for_line("ended");
    }
}

/// A serve that is killed (no clean-up code runs) takes its commands and
/// their helpers along: the system closes its handle to each job, and
/// each job kills what is in it.
#[test]
fn a_killed_serve_takes_the_helpers_along() {
    let outer = unique_pipe("job-killed-outer");
    let inner = unique_pipe("job-killed-inner");
    let (mut serve, _bridge) = serve_with_a_grandchild(&outer, &inner);
    run(async {
        assert!(pipe_exists(&inner).await, "the grandchild listens");
        serve.child.kill().unwrap();
        until_gone(&inner).await;
    });
}

/// A bridge whose parent (the CLI) exits leaves at once, though its stdin
/// stays open and the app is connected and silent: its parent here is a
/// `cmd` that starts it in the background and exits. The bridge's stdout
/// reaches its end once the bridge has exited.
#[test]
fn a_bridge_whose_parent_exits_leaves() {
    let pipe = unique_pipe("orphan");
    let listener = PipeListener::bind(&pipe).unwrap();
    // `start` takes a program name starting with '/' (Wine gives BIN as a
    // Unix path) for an option: the name alone, in its folder.
    let bin = Path::new(BIN);
    let mut parent = Command::new("cmd")
        .current_dir(bin.parent().unwrap())
        .args(["/c", "start", "/b"])
        .arg(bin.file_name().unwrap())
        .args(["mcp-server", "--endpoint", &pipe])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Held open until the end: the bridge's stdin never ends.
    let _stdin = parent.stdin.take();
    let stdout = parent.stdout.take().map(Unblock::new).unwrap();
    run(async {
        // The app accepts the bridge and keeps the connection, silent.
        let _app = smol::spawn(async move {
            let mut connections = Vec::new();
            loop {
                connections.push(listener.accept().await);
            }
        });
        let mut rest = Vec::new();
        let mut stdout = stdout;
        stdout.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    });
    parent.wait().unwrap();
}

/// Connects to `pipe` and sends a handshake.
async fn connect_with_handshake(pipe: &str) -> (endpoint::Reader, endpoint::Writer) {
    let (reader, mut writer) = endpoint::connect(Path::new(pipe), HANG_GUARD)
        .await
        .unwrap();
    writer
        .write_all(&Handshake::new("p", "limits").to_line())
        .await
        .unwrap();
    writer.flush().await.unwrap();
    (reader, writer)
}

/// serve holds its connection limit to what its threads allow (here a pool
/// of 60 threads: 12 pipe connections, 10 served), says so, and refuses
/// beyond it with the refusal line; so does the pipe itself beyond its own
/// limit, where a peer has not even sent its handshake.
#[test]
fn serve_refuses_beyond_what_its_threads_allow() {
    let pipe = unique_pipe("threads");
    let absent = unique_pipe("threads-absent");
    // A command that stays until its stdin ends: a bridge waiting for an
    // app that never comes.
    let command = [
        BIN,
        "mcp-server",
        "--endpoint",
        &absent,
        "--connect-timeout",
        "3600",
    ];
    let (mut serve, serving) = Serve::start_with(
        &pipe,
        &["--max-connections", "64"],
        &[("BLOCKING_MAX_THREADS", "60")],
        &command,
    );
    assert!(serving.contains("at most 10 connections"), "{}", serving);
    let mut served = Vec::new();
    for _ in 0..10 {
        served.push(run(connect_with_handshake(&pipe)));
        serve.wait_for_line("started pid");
    }
    run(async {
        let (reader, _writer) = connect_with_handshake(&pipe).await;
        let mut lines = BufReader::new(reader).lines();
        let line = lines.next().await.unwrap().unwrap();
        assert!(line.contains(r#""code":-32000"#), "{}", line);
        assert!(line.contains("connection limit: 10"), "{}", line);
        // The end: serve has let go of it, and of its place on the pipe.
        assert!(lines.next().await.is_none(), "then the end");
    });
    serve.wait_for_line("refused");
    run(async {
        // Two peers that send nothing fill the pipe's 12 places.
        let _silent = [
            endpoint::connect(Path::new(&pipe), HANG_GUARD)
                .await
                .unwrap(),
            endpoint::connect(Path::new(&pipe), HANG_GUARD)
                .await
                .unwrap(),
        ];
        let (reader, _writer) = endpoint::connect(Path::new(&pipe), HANG_GUARD)
            .await
            .unwrap();
        let mut lines = BufReader::new(reader).lines();
        let line = lines.next().await.unwrap().unwrap();
        assert!(line.contains(r#""code":-32000"#), "{}", line);
        assert!(line.contains("12 connections are open"), "{}", line);
        assert!(lines.next().await.is_none(), "then the end");
    });
    drop(served);
}

/// A client that writes more than the app takes and then closes the
/// bridge's stdin, while the app never reads: the bridge is stuck writing
/// to the app and never reads stdin's end, yet notices the writer gone
/// (the pipe's state) and leaves after the drain grace. 160 KiB: more than
/// the app's pipe (64 KiB) and the bridge's buffer towards it (64 KiB)
/// take, less than the bridge also takes from stdin, so the client's
/// writes complete.
#[test]
fn a_closed_stdin_is_noticed_while_the_app_does_not_read() {
    for _ in 0..2 {
        let pipe = unique_pipe("stuck");
        let listener = PipeListener::bind(&pipe).unwrap();
        let mut bridge = Bridge::spawn(&pipe, &[]);
        run(async {
            let (reader, _writer) = listener.accept().await.unwrap();
            let mut handshake = Vec::new();
            let mut byte = [0u8; 1];
            let mut reader = reader;
            while byte != *b"\n" {
                reader.read_exact(&mut byte).await.unwrap();
                handshake.push(byte[0]);
            }
            // The app reads no more.
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}",
                "x".repeat(1024)
            );
            for _ in 0..160 {
                bridge.send(&line).await;
            }
            bridge.close_stdin().await;
            let (status, stderr) = bridge.wait().await;
            assert!(status.success(), "{:?}: {}", status, stderr);
            drop(reader);
        });
    }
}

/// serve's session with a command that stopped reading (a second serve,
/// which reads no stdin) ends when the bridge goes, though serve is stuck
/// writing to the command and never reads the connection's end: it
/// watches the pipe. 160 KiB: more than the command's stdin takes (serve
/// flushes each write to it, so its pipe and one buffer, about 68 KiB),
/// less than serve also takes from the connection (its pipe, reader and
/// relay buffers, 64 KiB each), so the client's writes complete.
#[test]
fn serve_notices_a_bridge_gone_while_the_command_does_not_read() {
    let outer = unique_pipe("deaf-outer");
    let inner = unique_pipe("deaf-inner");
    let mut serve = Serve::start(
        &outer,
        &[
            "cmd",
            "/c",
            BIN,
            "serve",
            "--endpoint",
            &inner,
            "--",
            "cmd",
            "/c",
            "rem",
        ],
    );
    run(async {
        let (reader, mut writer) = connect_with_handshake(&outer).await;
        let chunk = vec![b'x'; 1024];
        for _ in 0..160 {
            writer.write_all(&chunk).await.unwrap();
        }
        writer.flush().await.unwrap();
        drop((reader, writer));
    });
    serve.wait_for_line("ended");
}

/// An app that re-binds its pipe within its process while its bridge's
/// connection still lives (a restart of its server part): the bind works,
/// and when the app then drops the old connection, the surviving bridge
/// reconnects to the new listener with a resumed handshake and relays
/// again. Several rounds, as the reconnection races the drop.
#[test]
fn a_rebind_while_the_old_connection_lives_is_survived() {
    let pipe = unique_pipe("rebind");
    let mut bridge = Bridge::surviving(&pipe, &["--project", "p"]);
    run(async {
        let mut out = bridge.stdout_lines();
        let mut listener = Listener::bind(&pipe).unwrap();
        let mut connection = listener.accept().await.unwrap();
        assert!(!connection.handshake.resumed);
        // The session the bridge replays to each new instance.
        let initialize = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{}}"#;
        let initialized = r#"{"jsonrpc":"2.0","id":"init","result":{"capabilities":{"tools":{"listChanged":true}}}}"#;
        let mut requests = BufReader::new(connection.reader).lines();
        let mut replies = connection.writer;
        round_trip(
            &mut bridge,
            &mut out,
            &mut requests,
            &mut replies,
            initialize,
            initialized,
        )
        .await;
        for round in 0..3 {
            let request = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, round);
            let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, round);
            round_trip(
                &mut bridge,
                &mut out,
                &mut requests,
                &mut replies,
                &request,
                &reply,
            )
            .await;
            // The listener goes and comes back while the connection lives.
            drop(listener);
            listener = bind_again(&pipe).await;
            drop((requests, replies));
            connection = listener.accept().await.unwrap();
            assert!(connection.handshake.resumed);
            requests = BufReader::new(connection.reader).lines();
            replies = connection.writer;
            let replayed = requests.next().await.unwrap().unwrap();
            // The bridge's own ids, one per replay.
            let id = format!(r#""mcp-bridge-replay-{}""#, round + 1);
            assert!(
                replayed.contains(&format!(r#""id":{}"#, id)),
                "{}",
                replayed
            );
            let result = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"capabilities":{{"tools":{{}}}}}}}}"#,
                id
            );
            replies
                .write_all(format!("{}\n", result).as_bytes())
                .await
                .unwrap();
            replies.flush().await.unwrap();
            assert_eq!(
                out.next().await.unwrap().unwrap(),
                r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
                "the bridge tells the client the app came back"
            );
        }
        bridge.close_stdin().await;
        drop((requests, replies, listener));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// An app name no other test, or test run, uses (within 32 bytes).
fn unique_app(tag: &str) -> String {
    format!("t{}-{}", std::process::id(), tag)
}

/// `mcp-server --app <app> --no-reconnect`, the identity left to what the
/// "CLI" passes: Claude Code's session variable, and the working directory.
fn app_bridge(app: &str) -> Bridge {
    Bridge::start(
        Command::new(BIN)
            .args(["mcp-server", "--app", app, "--no-reconnect"])
            .env_remove("CLAUDE_PROJECT_DIR")
            .env("CLAUDE_CODE_SESSION_ID", "win-session"),
    )
}

/// The Windows rule: `--app` is the pipe `\\.\pipe\<NAME>-<SID>` of this
/// user, the same for the library's host (`Listener::bind_app`) and the
/// bridge, which sends what it learned with where it came from.
#[test]
fn an_app_name_is_one_pipe_for_the_host_and_the_bridge() {
    let app = unique_app("host");
    let listener = Listener::bind_app(&app).unwrap();
    let pipe = listener.endpoint().to_string_lossy().into_owned();
    let prefix = format!(r"\\.\pipe\{}-S-1-", app);
    assert!(pipe.starts_with(&prefix), "{}", pipe);
    assert_eq!(endpoint::for_app(&app).unwrap(), listener.endpoint());
    let mut bridge = app_bridge(&app);
    run(async {
        let connection = listener.accept().await.unwrap();
        let handshake = &connection.handshake;
        assert_eq!(handshake.requester, "win-session");
        assert_eq!(
            handshake.requester_from.as_deref(),
            Some("CLAUDE_CODE_SESSION_ID")
        );
        assert_eq!(handshake.project_from.as_deref(), Some("cwd"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(handshake.project, cwd.to_string_lossy());
        // A line, so that the hang-up after it is an end, not a refusal.
        let mut writer = connection.writer;
        writer.write_all(b"{\"hello\":1}\n").await.unwrap();
        writer.flush().await.unwrap();
        let mut out = bridge.stdout_lines();
        let line = out.next().await.expect("a line").unwrap();
        assert_eq!(line, "{\"hello\":1}");
        drop((writer, connection.reader));
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
}

/// `serve --app` and `mcp-server --app` meet on the app's pipe, and serve's
/// command sees the identity and where it came from.
#[test]
fn serve_and_the_bridge_meet_on_the_app_pipe() {
    let app = unique_app("serve");
    let echo = "requester=%MCP_BRIDGE_REQUESTER%;from=%MCP_BRIDGE_REQUESTER_FROM%;\
                project_from=%MCP_BRIDGE_PROJECT_FROM%";
    let (mut serve, serving) =
        Serve::start_named(&["--app", &app], &[], &[], &["cmd", "/c", "echo", echo]);
    assert!(
        serving.contains(&format!(r"\\.\pipe\{}-S-1-", app)),
        "{}",
        serving
    );
    let mut bridge = app_bridge(&app);
    run(async {
        let mut out = bridge.stdout_lines();
        let line = out.next().await.expect("a line").unwrap();
        assert_eq!(
            line.trim_end(),
            "requester=win-session;from=CLAUDE_CODE_SESSION_ID;project_from=cwd"
        );
        assert!(out.next().await.is_none(), "the connection closes");
        let (status, stderr) = bridge.wait().await;
        assert!(status.success(), "{:?}: {}", status, stderr);
    });
    serve.wait_for_line("ended");
}

/// A name outside the rule is a usage error on Windows too: no pipe name
/// is ever made of a path.
#[test]
fn bad_app_names_are_usage_errors() {
    for (name, needle) in [
        (r"..\UNC\host", "contains '\\\\'"),
        ("..", "must start with a letter or digit"),
        (r"a\b", "contains '\\\\'"),
        ("a/b", "contains '/'"),
        ("", "the app name is empty"),
    ] {
        let out = Command::new(BIN)
            .args(["mcp-server", "--app", name])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{:?}: {}", name, stderr);
        assert!(stderr.contains(needle), "{:?}: {}", name, stderr);
    }
}
