//! `mcp-bridge serve` under faults, each reproduced through real processes:
//! a stderr nobody reads or nobody is left to read, commands that hang or
//! cannot start, hostile handshakes, crowds of silent peers, a socket path
//! too long for the bridge, SIGHUP.
#![cfg(unix)]
#![cfg(feature = "serve")]

mod support;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::process::Signal;
use serde_json::Value;

use support::{
    bridge_command, exists, serve_program, wait_output, within, within_limit, Bridge, Serve,
    Stderr, TempDir, BIN, HANG_GUARD,
};

/// The longest socket path the bridge accepts (`sun_path` less its NUL).
#[cfg(any(target_os = "linux", target_os = "android"))]
const MAX_PATH_BYTES: usize = 107;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const MAX_PATH_BYTES: usize = 103;

/// A bridge to `socket` as `requester`, as an MCP CLI would spawn it.
fn spawn_bridge(socket: &Path, requester: &str) -> Bridge {
    Bridge::spawn(
        bridge_command(socket, "p", requester)
            // serve's endings are under test, not the bridge's reconnects.
            .arg("--no-reconnect")
            .args(["--connect-timeout", "60"])
            .stderr(Stdio::null()),
    )
}

/// The refusal line serve must send for `message`, byte for byte.
fn refusal_line(message: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32000,\"message\":{}}}}}\n",
        Value::from(message)
    )
}

/// Connects without a bridge, sends `handshake`, and reads to the end:
/// the connection must carry exactly one refusal line, then close. Returns
/// the refusal's message.
fn refusal_for(socket: &Path, handshake: &[u8]) -> String {
    let mut stream = StdUnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    stream.write_all(handshake).unwrap();
    let mut got = Vec::new();
    stream
        .read_to_end(&mut got)
        .expect("the connection closes after the refusal");
    let text = String::from_utf8(got).unwrap();
    assert_eq!(text.matches('\n').count(), 1, "one line: {:?}", text);
    let value: Value = serde_json::from_str(&text).expect("a JSON line");
    assert_eq!(value["jsonrpc"], "2.0", "{}", text);
    assert!(value["id"].is_null(), "{}", text);
    assert_eq!(value["error"]["code"], -32000, "{}", text);
    let message = value["error"]["message"].as_str().unwrap().to_string();
    assert_eq!(text, refusal_line(&message), "the exact form");
    message
}

/// An app that spawned serve and never reads its stderr must not lose its
/// MCP servers: once the pipe is full, log lines (and a child's 300 KB of
/// stderr) would block the executor thread, stalling every session and
/// SIGTERM with it. Relaying and shutdown go on; lines are dropped.
#[test]
fn an_unread_stderr_stalls_neither_relaying_nor_shutdown() {
    let dir = TempDir::new("unread-stderr", 0o700);
    let script = "head -c 300000 /dev/zero | tr '\\0' x >&2; echo ready; exec cat";
    let mut serve = Serve::launch(
        serve_program(None),
        &dir.socket(),
        &[],
        &["sh", "-c", script],
        Stderr::Unread,
    );
    smol::block_on(async {
        let mut bridges = Vec::new();
        for n in 0..4 {
            let mut bridge = spawn_bridge(&dir.socket(), &format!("agent-{}", n));
            // Its 300 KB of stderr have been written: they went somewhere.
            assert_eq!(bridge.line().await.as_deref(), Some("ready"));
            bridges.push(bridge);
        }
        for (n, bridge) in bridges.iter_mut().enumerate() {
            let line = format!("{{\"id\":{}}}", n);
            assert_eq!(bridge.round_trip(&line).await, line);
        }
    });
    let status = serve.stop(Signal::TERM);
    assert_eq!(status.code(), Some(0), "{}", status);
    assert!(!dir.socket().exists(), "the socket file is removed");
}

/// A log collector that restarts, or `serve ... 2>&1 | head`: the reader of
/// serve's stderr is gone, and a log line must not turn into a panic (with
/// `panic = "abort"`, a SIGABRT that cuts every session and leaves the
/// socket file behind).
#[test]
fn a_closed_stderr_is_ignored_and_serve_still_exits_cleanly() {
    let dir = TempDir::new("closed-stderr", 0o700);
    let script = "echo 'to a closed stderr' >&2; exec cat";
    let mut serve = Serve::launch(
        serve_program(None),
        &dir.socket(),
        &[],
        &["sh", "-c", script],
        Stderr::Closed,
    );
    smol::block_on(async {
        let mut bridge = spawn_bridge(&dir.socket(), "r");
        assert_eq!(bridge.round_trip("ping").await, "ping");
        let mut second = spawn_bridge(&dir.socket(), "s");
        assert_eq!(second.round_trip("pong").await, "pong");
    });
    let status = serve.stop(Signal::TERM);
    assert_eq!(status.code(), Some(0), "not killed by a signal: {}", status);
    assert!(!dir.socket().exists(), "the socket file is removed");
}

/// Three CLIs die while their MCP server is hung (it reads nothing), each
/// after sending more than the pipes hold, so serve's relay is stuck
/// writing to the child and never reads the end of the connection. Their
/// slots must come back: with `--max-connections 3`, a fourth bridge is
/// served, and the hung children are gone.
#[test]
fn bridges_that_die_while_their_command_is_hung_free_their_slots() {
    let dir = TempDir::new("hung", 0o700);
    let script = "if [ \"$MCP_BRIDGE_REQUESTER\" = hung ]; then echo $$; exec sleep 1000; \
                  else exec cat; fi";
    let mut serve = Serve::start(
        &dir.socket(),
        &["--max-connections", "3"],
        &["sh", "-c", script],
    );
    // More than the bridge's stdin pipe and buffer hold (128 KiB), so at
    // least 172 KB reach serve, which can only take 128 KiB off the socket
    // (its buffer and the child's stdin pipe): its write to the child is
    // then stuck. Less than all of those together (~450 KB), so the write
    // here completes.
    const SENT: usize = 300 * 1000;
    let pids = smol::block_on(async {
        let mut pids = Vec::new();
        for _ in 0..3 {
            let mut bridge = spawn_bridge(&dir.socket(), "hung");
            let pid: u32 = bridge.line().await.unwrap().parse().unwrap();
            let mut request = vec![b'x'; SENT];
            request.push(b'\n');
            within("the bulk write", bridge.send_bytes(&request)).await;
            bridge.child.kill().unwrap();
            bridge.child.status().await.unwrap();
            pids.push(pid);
        }
        pids
    });
    for pid in pids {
        serve.wait_until(&format!("hung child {} to be stopped", pid), || {
            !exists(pid)
        });
    }
    // Logged once each session is over, just before its slot is given back.
    serve.wait_for_count("ended (", 3);
    smol::block_on(async {
        let mut fresh = spawn_bridge(&dir.socket(), "fresh");
        assert_eq!(fresh.round_trip("served").await, "served");
    });
}

/// A client's requester is copied into the prefix of every line its MCP
/// server writes to stderr: a 60 KiB requester and 2,000 empty lines once
/// made serve write 122 MB. The label is cut, and says so.
#[test]
fn a_huge_requester_is_cut_in_serve_s_log() {
    let dir = TempDir::new("label", 0o700);
    let script = "i=0; while [ $i -lt 2000 ]; do echo >&2; i=$((i+1)); done; echo done; exec cat";
    let mut serve = Serve::start(&dir.socket(), &[], &["sh", "-c", script]);
    let requester = "r".repeat(60 * 1024);
    smol::block_on(async {
        let mut bridge = spawn_bridge(&dir.socket(), &requester);
        assert_eq!(bridge.line().await.as_deref(), Some("done"));
    });
    let cut = format!("[{}… (61440 bytes)] ", "r".repeat(64));
    serve.wait_for_count(&cut, 2000);
    serve.wait_for_log("ended");
    let status = serve.stop(Signal::TERM);
    assert!(status.success(), "{}", status);
    let written = serve.stderr().len();
    assert!(
        written < 1_000_000,
        "serve wrote {} bytes of stderr for 2,000 empty lines",
        written
    );
    eprintln!(
        "2,000 empty stderr lines of a 60 KiB requester: {} bytes",
        written
    );
}

/// A command that cannot be found makes serve refuse to start (exit 1,
/// naming it) instead of accepting bridges it can only hang up on.
#[test]
fn a_command_that_cannot_be_found_stops_serve_at_start() {
    let dir = TempDir::new("nocmd", 0o700);
    let not_executable = dir.0.join("server.txt");
    fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&not_executable, fs::Permissions::from_mode(0o644)).unwrap();
    let not_executable = not_executable.to_str().unwrap().to_string();
    for (program, why) in [
        (
            "mcp-bridge-no-such-server",
            "no executable file of that name in any directory of PATH",
        ),
        ("/nonexistent/mcp-server", "No such file or directory"),
        (not_executable.as_str(), "it is not executable"),
        ("/", "it is not a file"),
    ] {
        let child = std::process::Command::new(BIN)
            .args(["serve", "--endpoint"])
            .arg(dir.socket())
            .args(["--", program])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_output(child, &format!("serve -- {}", program));
        let (status, text) = (out.status, String::from_utf8_lossy(&out.stderr));
        assert_eq!(status.code(), Some(1), "{}: {}", program, text);
        assert!(
            text.starts_with(&format!("mcp-bridge: cannot run '{}': {}", program, why)),
            "{}",
            text
        );
        assert!(!dir.socket().exists(), "nothing bound for {}", program);
    }
}

/// A bridge turned away because serve is full learns why: one JSON-RPC
/// error line with a null id, then the close, which its CLI shows instead
/// of a silent, successful-looking end.
#[test]
fn a_bridge_over_the_limit_gets_a_refusal_line() {
    let dir = TempDir::new("limit", 0o700);
    let mut serve = Serve::start(&dir.socket(), &["--max-connections", "1"], &["cat"]);
    smol::block_on(async {
        let mut first = spawn_bridge(&dir.socket(), "first");
        assert_eq!(first.round_trip("in").await, "in");

        let message = refusal_for(
            &dir.socket(),
            b"{\"project\":\"p\",\"requester\":\"raw\"}\n",
        );
        assert_eq!(
            message,
            "mcp-bridge serve is busy (connection limit: 1); try again later"
        );

        // Through a real bridge, the CLI sees the same line on stdout.
        let mut second = spawn_bridge(&dir.socket(), "second");
        assert_eq!(
            format!("{}\n", second.line().await.unwrap()),
            refusal_line(&message)
        );
        assert_eq!(second.line().await, None, "then the end");
        assert_eq!(first.round_trip("still in").await, "still in");
    });
    serve.wait_for_log("requester \"second\", project \"p\"): refused");
}

/// A command that is there but cannot be started (here: its interpreter is
/// missing) fails each connection; the bridge is told why.
#[test]
fn a_command_that_fails_to_start_sends_a_refusal_line() {
    let dir = TempDir::new("spawnfail", 0o700);
    let script = dir.0.join("server");
    fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap().to_string();
    let mut serve = Serve::start(&dir.socket(), &[], &[&script]);
    let message = refusal_for(&dir.socket(), b"{\"project\":\"p\",\"requester\":\"r\"}\n");
    assert!(
        message.starts_with(&format!(
            "mcp-bridge serve cannot start its MCP server '{}': ",
            script
        )),
        "{}",
        message
    );
    serve.wait_for_log("cannot start");
}

/// A handshake whose ids contain a NUL cannot be passed to the command's
/// environment; the bridge is told so instead of being hung up on.
#[test]
fn a_handshake_with_a_nul_gets_a_refusal_line() {
    let dir = TempDir::new("nul", 0o700);
    let mut serve = Serve::start(&dir.socket(), &[], &["cat"]);
    let message = refusal_for(
        &dir.socket(),
        b"{\"project\":\"p\",\"requester\":\"a\\u0000b\"}\n",
    );
    assert_eq!(
        message,
        "mcp-bridge serve cannot pass this requester to its MCP server: it contains a NUL byte"
    );
    serve.wait_for_log("its requester contains a NUL byte");
    // The server goes on.
    smol::block_on(async {
        let mut bridge = spawn_bridge(&dir.socket(), "r");
        assert_eq!(bridge.round_trip("after").await, "after");
    });
}

/// A crowd of peers that connect and say nothing, kept at its size (if
/// asked to) by a thread that replaces each one serve drops until told to
/// stop.
struct IdleCrowd {
    stop: Arc<AtomicBool>,
    created: Arc<AtomicUsize>,
    thread: JoinHandle<Vec<StdUnixStream>>,
}

impl IdleCrowd {
    fn gather(socket: &Path, size: usize, replace: bool) -> IdleCrowd {
        let stop = Arc::new(AtomicBool::new(false));
        let created = Arc::new(AtomicUsize::new(0));
        let (ready_sender, ready) = std::sync::mpsc::channel();
        let socket = socket.to_path_buf();
        let (stopping, counting) = (stop.clone(), created.clone());
        let thread = std::thread::spawn(move || {
            let connect = || {
                let stream = StdUnixStream::connect(&socket).unwrap();
                stream.set_nonblocking(true).unwrap();
                counting.fetch_add(1, Ordering::SeqCst);
                stream
            };
            let mut crowd: Vec<StdUnixStream> = (0..size).map(|_| connect()).collect();
            ready_sender.send(()).unwrap();
            while replace && !stopping.load(Ordering::SeqCst) {
                for peer in crowd.iter_mut() {
                    match peer.read(&mut [0u8; 1]) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        // Dropped by serve: another one takes its place.
                        _ => *peer = connect(),
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            crowd
        });
        ready.recv_timeout(HANG_GUARD).expect("the crowd connected");
        IdleCrowd {
            stop,
            created,
            thread,
        }
    }

    /// Stops replacing peers, and waits until serve has dropped every one
    /// still connected; returns how many peers there were in all.
    fn disperse(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let crowd = self.thread.join().unwrap();
        for mut peer in crowd {
            peer.set_nonblocking(false).unwrap();
            peer.set_read_timeout(Some(HANG_GUARD)).unwrap();
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest).expect("dropped by serve");
            assert!(rest.is_empty());
        }
        self.created.load(Ordering::SeqCst)
    }
}

/// Lets this process (and the serve it spawns) hold the crowd and more.
fn raise_fd_limit(wanted: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    let target = limit.maximum.map_or(wanted, |max| max.min(wanted));
    if current < target {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: limit.maximum,
            },
        )
        .unwrap();
    }
}

/// A one-shot request through a bridge (stdin closed at once, so the
/// bridge gives the reply only its 1 s drain) is answered, and a
/// long-lived bridge gets its round trips.
fn a_bridge_is_served_at_once(socket: &Path) {
    smol::block_on(async {
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let mut one_shot =
            Bridge::spawn(bridge_command(socket, "p", "one-shot").stderr(Stdio::null()));
        one_shot.send(request).await;
        drop(one_shot.stdin.take());
        let mut answer = Vec::new();
        while let Some(line) = one_shot.line().await {
            answer.push(line);
        }
        assert_eq!(answer, [request], "the one-shot was answered");

        let mut bridge = spawn_bridge(socket, "real");
        for n in 0..10 {
            let line = format!("{{\"id\":{}}}", n);
            let reply = within_limit(
                Duration::from_secs(10),
                "a round trip",
                bridge.round_trip(&line),
            );
            assert_eq!(reply.await, line);
        }
    });
}

/// Waits until serve's log accounts for `peers` dropped connections, as
/// single lines or in counts, and checks that it took few lines.
fn assert_dropped_peers_logged_in_few_lines(serve: &mut Serve, peers: usize) {
    let log = serve.stderr_buffer();
    let accounted = move || {
        let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        let single = text.matches("dropped a connection: ").count();
        let counted: usize = text
            .lines()
            .filter_map(|line| line.strip_prefix("mcp-bridge: "))
            .filter_map(|line| line.split_once(" more connection(s) dropped or refused"))
            .map(|(n, _)| n.parse::<usize>().unwrap())
            .sum();
        (single, counted)
    };
    serve.wait_until("every dropped peer in the log", || {
        let (single, counted) = accounted();
        single + counted >= peers
    });
    let (single, counted) = accounted();
    assert_eq!(single + counted, peers, "{}", serve.stderr());
    assert!(
        single < 100,
        "{} lines for {} dropped peers: not limited",
        single,
        peers
    );
    eprintln!(
        "{} silent peers: {} single lines, {} counted",
        peers, single, counted
    );
}

/// Hundreds of peers that connect and say nothing (same user) must not
/// keep a real bridge waiting behind them: a one-shot request is answered
/// and round trips work while 600 are held, which failed when serve
/// stopped accepting while silent peers held every handshake slot for
/// 5 s. Lines about the dropped peers are limited to one per second, with
/// counts.
#[test]
fn hundreds_of_silent_peers_do_not_starve_a_bridge() {
    raise_fd_limit(4096);
    let dir = TempDir::new("crowd", 0o700);
    let mut serve = Serve::start(&dir.socket(), &[], &["cat"]);
    let crowd = IdleCrowd::gather(&dir.socket(), 600, true);
    a_bridge_is_served_at_once(&dir.socket());
    let peers = crowd.disperse();
    assert!(peers >= 600);
    assert_dropped_peers_logged_in_few_lines(&mut serve, peers);
}

/// More silent peers than serve has file descriptors for (64 here): the
/// oldest are dropped to make room, so a bridge that just connected is
/// still served at once, instead of waiting in the kernel's backlog until
/// the silent ones time out.
#[test]
fn a_crowd_beyond_the_descriptor_limit_does_not_starve_a_bridge() {
    let dir = TempDir::new("fdcrowd", 0o700);
    let mut serve = Serve::launch(
        serve_program(Some(64)),
        &dir.socket(),
        &[],
        &["cat"],
        Stderr::Collected,
    );
    let crowd = IdleCrowd::gather(&dir.socket(), 100, false);
    a_bridge_is_served_at_once(&dir.socket());
    assert_eq!(crowd.disperse(), 100);
    assert_dropped_peers_logged_in_few_lines(&mut serve, 100);
}

/// serve must not bind a socket path the bridge then refuses: both sides
/// use one limit (107 bytes on Linux), and the longest path it allows works
/// end to end.
#[test]
fn serve_binds_no_path_the_bridge_would_refuse() {
    let dir = TempDir::new("pathlen", 0o700);
    let base = dir.0.as_os_str().len() + 1;
    assert!(
        base + 20 < MAX_PATH_BYTES,
        "TMPDIR is too long for this test"
    );
    let too_long = dir.0.join("s".repeat(MAX_PATH_BYTES + 1 - base));
    assert_eq!(too_long.as_os_str().len(), MAX_PATH_BYTES + 1);
    let out = std::process::Command::new(BIN)
        .args(["serve", "--endpoint"])
        .arg(&too_long)
        .args(["--", "cat"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = WaitedOutput::of(out);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "a Unix socket path can have at most {} bytes, this one has {}",
            MAX_PATH_BYTES,
            MAX_PATH_BYTES + 1
        )),
        "{}",
        out.stderr
    );
    assert!(!too_long.exists());

    let longest = dir.0.join("s".repeat(MAX_PATH_BYTES - base));
    let _serve = Serve::start(&longest, &[], &["cat"]);
    smol::block_on(async {
        let mut bridge = spawn_bridge(&longest, "r");
        assert_eq!(bridge.round_trip("fits").await, "fits");
    });
}

/// A finished process's status and stderr, waited for with the hang guard.
struct WaitedOutput {
    status: ExitStatus,
    stderr: String,
}

impl WaitedOutput {
    fn of(child: std::process::Child) -> WaitedOutput {
        let out = wait_output(child, "the process");
        WaitedOutput {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A terminal closing, or a supervisor's "hang up", is a stop request like
/// SIGTERM: serve exits 0, its children stopped and its socket removed.
#[test]
fn sighup_stops_serve_cleanly() {
    let dir = TempDir::new("hup", 0o700);
    let mut serve = Serve::start(&dir.socket(), &[], &["sh", "-c", "echo $$; exec cat"]);
    smol::block_on(async {
        let mut bridge = spawn_bridge(&dir.socket(), "r");
        let pid: u32 = bridge.line().await.unwrap().parse().unwrap();
        assert_eq!(bridge.round_trip("ping").await, "ping");
        let status = serve.stop(Signal::HUP);
        assert_eq!(status.code(), Some(0), "{}", status);
        assert!(!dir.socket().exists(), "the socket file is removed");
        assert!(!exists(pid), "child {} survived serve", pid);
        assert_eq!(bridge.line().await, None, "the bridge saw the end");
    });
    assert!(serve.stderr().contains("SIGHUP received: shutting down"));
}

/// A command that starts helpers and ignores SIGTERM (the README's `npx`
/// example leaves node processes behind this way): when its bridge goes,
/// the whole process group is stopped, the helper that outlived its shell's
/// SIGTERM included, not left behind with parent 1.
#[test]
fn a_command_s_helpers_are_stopped_with_it() {
    let dir = TempDir::new("group", 0o700);
    let script = "trap '' TERM; sleep 1000 & echo $!; exec cat";
    let mut serve = Serve::start(&dir.socket(), &[], &["sh", "-c", script]);
    let helper = smol::block_on(async {
        let mut bridge = spawn_bridge(&dir.socket(), "group");
        let helper: u32 = bridge.line().await.unwrap().parse().unwrap();
        assert!(exists(helper));
        drop(bridge.stdin.take());
        within("the bridge to exit", bridge.child.status())
            .await
            .unwrap();
        helper
    });
    // Its parent gone, the helper is reaped by whoever adopted it (or left
    // a zombie where nothing reaps): either way it has stopped running.
    let stopped = || !support::is_running(helper as u32);
    serve.wait_until(&format!("helper {} to be stopped", helper), stopped);
}

/// `--endpoint /dir/x.sock/` names a directory, not a socket: serve says
/// that, not that some directory does not exist.
#[test]
fn an_endpoint_with_a_trailing_slash_is_named_for_what_it_is() {
    let dir = TempDir::new("slash", 0o700);
    let endpoint = format!("{}/", dir.socket().display());
    let output = std::process::Command::new(BIN)
        .args(["serve", "--endpoint", &endpoint, "--", "cat"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", stderr);
    assert!(stderr.contains("ends with '/'"), "{}", stderr);
    assert!(!stderr.contains("does not exist"), "{}", stderr);
}

/// A client on a raw socket, as a bridge is to serve: it sends its
/// handshake and one request at once, then waits for the first line back.
struct RawBridge {
    stream: StdUnixStream,
    connected: std::time::Instant,
}

impl RawBridge {
    fn connect(socket: &Path, requester: &str, request: &str) -> RawBridge {
        let mut stream = StdUnixStream::connect(socket).unwrap();
        let connected = std::time::Instant::now();
        stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let handshake = format!("{{\"project\":\"p\",\"requester\":\"{}\"}}\n", requester);
        stream
            .write_all(format!("{}{}\n", handshake, request).as_bytes())
            .unwrap();
        RawBridge { stream, connected }
    }

    /// The first line serve sent (empty if it closed without one), and how
    /// long after connecting it came.
    fn answer(&mut self) -> (String, Duration) {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\n") {
            match self.stream.read(&mut byte) {
                Ok(1) => line.push(byte[0]),
                _ => break,
            }
        }
        (
            String::from_utf8_lossy(&line).into_owned(),
            self.connected.elapsed(),
        )
    }
}

/// Issue 29, item 4: at the descriptor limit (64 here, soft and hard, so
/// serve cannot raise it), with live sessions and 40 silent peers held,
/// bridges arriving waited 10-28 s in the kernel's queue behind the silent
/// ones and were then refused with "Too many open files". (The issue had
/// 10 live sessions; 8 here, since serve itself holds about 16
/// descriptors, and a session takes four.) Now the oldest
/// silent peer gives its descriptor up for the next connection (and a
/// spare descriptor is let go when no silent peer is left), so each of 60
/// bridges arriving at once is served, or refused with a refusal line,
/// well within a second or two; none is dropped without an answer.
#[test]
fn at_the_descriptor_limit_each_bridge_is_served_or_refused_at_once() {
    let dir = TempDir::new("fd-limit", 0o700);
    let socket = dir.socket();
    let mut serve = Serve::launch(
        serve_program(Some(64)),
        &socket,
        &[],
        &["cat"],
        Stderr::Collected,
    );
    let mut live = Vec::new();
    for n in 0..8 {
        let request = format!("{{\"live\":{}}}", n);
        let mut session = RawBridge::connect(&socket, &format!("live-{}", n), &request);
        assert_eq!(session.answer().0, format!("{}\n", request), "live {}", n);
        live.push(session);
    }
    let crowd = IdleCrowd::gather(&socket, 40, false);
    let bridges: Vec<JoinHandle<(String, Duration)>> = (0..60)
        .map(|n| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let request = format!("{{\"arriving\":{}}}", n);
                RawBridge::connect(&socket, &format!("bridge-{}", n), &request).answer()
            })
        })
        .collect();
    let (mut served, mut refused, mut slowest) = (0, 0, Duration::ZERO);
    for (n, bridge) in bridges.into_iter().enumerate() {
        let (line, took) = bridge.join().unwrap();
        slowest = slowest.max(took);
        if line == format!("{{\"arriving\":{}}}\n", n) {
            served += 1;
        } else {
            let refusal: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
                panic!(
                    "bridge {}: neither served nor refused, {:?}\n{}",
                    n,
                    line,
                    serve.stderr()
                )
            });
            assert_eq!(refusal["error"]["code"], -32000, "{}", line);
            refused += 1;
        }
        assert!(
            took < Duration::from_secs(3),
            "bridge {} answered after {:?}: {}",
            n,
            took,
            line
        );
    }
    eprintln!(
        "60 bridges at the limit: {} served, {} refused, the slowest answered after {:?}",
        served, refused, slowest
    );
    drop(live);
    crowd.disperse();
    let _ = serve.stop(Signal::TERM);
}

/// The CPU time `pid` has used so far (user and system), from
/// `/proc/<pid>/stat`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{}/stat", pid)).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Issue 29, item 5: a child's stderr is copied within a budget of its
/// own. A burst of 20,000 lines (220 KB, more than a second's copy) is cut
/// at the budget and the rest counted, exactly: the lines copied and the
/// lines the notice counts add up to what the child wrote. (Everything was
/// copied before, at the cost of every other session.)
#[test]
fn a_stderr_burst_is_copied_up_to_its_budget_and_the_rest_counted() {
    let dir = TempDir::new("stderr-burst", 0o700);
    let script = "yes burst-line | head -n 20000 >&2; echo ready; exec cat";
    let mut serve = Serve::start(&dir.socket(), &[], &["sh", "-c", script]);
    let mut bridge = RawBridge::connect(&dir.socket(), "burst", "{\"id\":1}");
    assert_eq!(bridge.answer().0, "ready\n");
    bridge.stream.shutdown(std::net::Shutdown::Write).unwrap();
    serve.wait_for_log(": ended (");
    let stderr = serve.stderr();
    let copied = stderr
        .lines()
        .filter(|l| *l == "[burst] burst-line")
        .count();
    let counted: usize = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("[burst] ("))
        .map(|l| l.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert!(
        counted > 0,
        "nothing dropped:\n{}",
        &stderr[..2000.min(stderr.len())]
    );
    assert_eq!(
        copied + counted,
        20000,
        "{} copied, {} counted",
        copied,
        counted
    );
    assert!(
        copied * "burst-line\n".len() <= 128 * 1024,
        "{} lines copied, more than the budget",
        copied
    );
    assert!(
        stderr.contains(&format!(
            "[burst] ({} lines, {} bytes, of this command's stderr dropped: more than 128 KiB \
             in a second)\n",
            counted,
            counted * "burst-line\n".len()
        )),
        "{}",
        stderr
            .lines()
            .filter(|l| l.contains("dropped"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Issue 29, item 5: one child flooding its stderr (`yes >&2`) made every
/// other session about 50 times slower and kept serve at 94-180% CPU,
/// copying (a hundred round trips took 30 s here, at 97% CPU). Its reading
/// is now held to a budget a second (the child waits on its own stderr
/// beyond it), and what is not copied is counted, one line a second: over
/// three of those seconds, while another session makes its hundred round
/// trips, serve uses well under half a core.
#[test]
fn a_stderr_flood_costs_serve_little() {
    let dir = TempDir::new("stderr-flood", 0o700);
    let script = "if [ \"$MCP_BRIDGE_REQUESTER\" = flood ]; then yes flood >&2 & fi; exec cat";
    let mut serve = Serve::start(&dir.socket(), &[], &["sh", "-c", script]);
    let mut flood = RawBridge::connect(&dir.socket(), "flood", "{\"id\":0}");
    assert_eq!(flood.answer().0, "{\"id\":0}\n");
    // The first second of the flood is over when its count comes.
    serve.wait_for_count("[flood] (", 1);
    let pid = serve.child.id();
    let (ticks, started) = (cpu_ticks(pid), std::time::Instant::now());
    let mut session = RawBridge::connect(&dir.socket(), "other", "{\"id\":\"first\"}");
    assert_eq!(session.answer().0, "{\"id\":\"first\"}\n");
    for n in 0..100 {
        let line = format!("{{\"id\":{}}}\n", n);
        session.stream.write_all(line.as_bytes()).unwrap();
        assert_eq!(session.answer().0, line);
    }
    serve.wait_for_count("[flood] (", 4);
    // USER_HZ, which Linux reports CPU times in: 100 on every architecture.
    let used = (cpu_ticks(pid) - ticks) as f64 / 100.0;
    let took = started.elapsed().as_secs_f64();
    eprintln!("serve used {:.2} s of CPU in {:.2} s of flood", used, took);
    assert!(
        used < took / 2.0,
        "serve used {:.2} s of CPU in {:.2} s",
        used,
        took
    );
    drop((flood, session));
}
