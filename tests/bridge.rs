//! The `mcp-bridge` binary, spawned as an MCP CLI would spawn it, against a
//! real Unix socket host in a temporary directory.
#![cfg(unix)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::io::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use support::{wait_exit, TempDir, BIN};

/// The bridge under test, set up as `mcp-server` against `endpoint`.
fn bridge(endpoint: &Path, extra: &[&str]) -> Command {
    as_mcp_server(Command::new(BIN), endpoint, extra)
}

/// `command` (a bridge binary, perhaps run as another user) set up as
/// `mcp-server` against `endpoint`, every stdio piped.
fn as_mcp_server(mut command: Command, endpoint: &Path, extra: &[&str]) -> Command {
    command
        .arg("mcp-server")
        .arg("--endpoint")
        .arg(endpoint)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn spawn_bridge(endpoint: &Path) -> Child {
    bridge(endpoint, &["--project", "proj-1", "--requester", "agent-9"])
        .spawn()
        .expect("spawn mcp-bridge")
}

/// Waits for `child` to exit, killing it and failing the test (with its
/// stderr) after [`HANG_GUARD`](support::HANG_GUARD). A test that expects a
/// prompt exit says so with a bound of its own.
fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    wait_exit(child, "mcp-bridge")
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// Accepts one connection, reads the handshake line, and reports it; then
/// runs `then` on the rest of the connection (the buffered reader, so no byte
/// after the handshake is lost, and a writer).
fn host<F>(listener: UnixListener, then: F) -> (mpsc::Receiver<String>, thread::JoinHandle<()>)
where
    F: FnOnce(BufReader<UnixStream>, UnixStream) + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        let mut handshake = String::new();
        reader.read_line(&mut handshake).unwrap();
        tx.send(handshake).unwrap();
        then(reader, writer);
    });
    (rx, handle)
}

/// A host that sends back every byte it receives after the handshake, and
/// closes (EOF) when the bridge half-closes.
fn echo_host(listener: UnixListener) -> (mpsc::Receiver<String>, thread::JoinHandle<()>) {
    host(listener, |mut reader, mut writer| {
        std::io::copy(&mut reader, &mut writer).unwrap();
    })
}

/// Sends `input` through a bridge to an echo host and returns what came back
/// on stdout, plus the bridge's peak resident memory in KiB.
fn echo_through_bridge(input: Vec<u8>) -> (Vec<u8>, Option<u64>) {
    let dir = TempDir::new("echo", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (handshake, host) = echo_host(listener);
    let mut child = spawn_bridge(&dir.socket());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let expected = input.len();
    let reader = thread::spawn(move || {
        let mut out = vec![0u8; expected];
        stdout.read_exact(&mut out).unwrap();
        (out, stdout)
    });
    stdin.write_all(&input).unwrap();
    stdin.flush().unwrap();
    let (out, mut stdout) = reader.join().unwrap();
    let peak_kib = peak_rss_kib(child.id());
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{} unexpected extra bytes", rest.len());
    let status = wait_for_exit(&mut child);
    assert!(status.success(), "{:?}: {}", status, stderr_of(&mut child));
    assert_eq!(
        handshake.recv().unwrap(),
        "{\"project\":\"proj-1\",\"requester\":\"agent-9\"}\n"
    );
    host.join().unwrap();
    (out, peak_kib)
}

/// The process's peak resident set (`VmHWM`), read while it is still alive;
/// `None` where there is no `/proc` to read it from.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    if cfg!(not(target_os = "linux")) {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid)).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc status");
    Some(line.split_whitespace().nth(1).unwrap().parse().unwrap())
}

#[test]
fn end_to_end_with_handshake() {
    let dir = TempDir::new("e2e", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (handshake, host) = host(listener, |mut reader, mut writer| {
        let mut request = String::new();
        reader.read_line(&mut request).unwrap();
        assert_eq!(
            request,
            "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"ping\"}\n"
        );
        writer
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}\n")
            .unwrap();
        // Stay until the bridge half-closes.
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    });
    let mut child = spawn_bridge(&dir.socket());
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"ping\"}\n")
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut reply = String::new();
    stdout.read_line(&mut reply).unwrap();
    assert_eq!(reply, "{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}\n");
    drop(stdin);
    let status = wait_for_exit(&mut child);
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        handshake.recv().unwrap(),
        "{\"project\":\"proj-1\",\"requester\":\"agent-9\"}\n"
    );
    host.join().unwrap();
    assert_eq!(stderr_of(&mut child), "", "a clean session prints nothing");
}

#[test]
fn handshake_escapes_identity() {
    let dir = TempDir::new("escape", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    // The host reads to the bridge's EOF: closing before that, with
    // nothing said, would be a refusal.
    let (handshake, host) = host(listener, |mut reader, _| {
        std::io::copy(&mut reader, &mut std::io::sink()).unwrap();
    });
    let mut child = bridge(
        &dir.socket(),
        &["--project=a\"b\\c", "--requester", "agent\nété"],
    )
    .spawn()
    .unwrap();
    drop(child.stdin.take());
    let line = handshake.recv().unwrap();
    assert_eq!(
        line,
        "{\"project\":\"a\\\"b\\\\c\",\"requester\":\"agent\\nété\"}\n"
    );
    host.join().unwrap();
    assert!(wait_for_exit(&mut child).success());
}

#[test]
fn absent_endpoint_fails_fast_and_names_the_path() {
    let dir = TempDir::new("absent", 0o700);
    let start = Instant::now();
    // The plain relay's fail-fast; waiting for a starting app is in
    // tests/survive.rs.
    let mut child = bridge(
        &dir.socket(),
        &["--connect-timeout", "60", "--no-reconnect"],
    )
    .spawn()
    .unwrap();
    let status = wait_for_exit(&mut child);
    let took = start.elapsed();
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1));
    // Far below the connect timeout, with room for a loaded CI machine.
    assert!(took < Duration::from_secs(10), "took {:?}", took);
    assert!(stderr.starts_with("mcp-bridge: "), "{}", stderr);
    assert!(
        stderr.contains(&*dir.socket().to_string_lossy()),
        "{}",
        stderr
    );
    assert!(stderr.contains("does not exist"), "{}", stderr);
    // The flag to check is the binary's word, after the library's message.
    assert!(
        stderr
            .trim_end()
            .ends_with(") (is the app running, and is --endpoint right?)"),
        "{}",
        stderr
    );
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(out.is_empty(), "stdout is the protocol: nothing on it");
}

/// Runs `program` (a bridge binary) against an endpoint that cannot be
/// connected to and returns its stderr, checking the exit code and that it
/// did not wait for the (long) connect timeout.
fn connect_failure(program: Command, endpoint: &Path) -> String {
    // The plain relay, which exits with the diagnostic; with survival on,
    // the same text answers requests instead (tests/survive.rs).
    let mut command = as_mcp_server(
        program,
        endpoint,
        &["--connect-timeout", "60", "--no-reconnect"],
    );
    let start = Instant::now();
    let mut child = command.spawn().unwrap();
    let status = wait_for_exit(&mut child);
    let took = start.elapsed();
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{}", stderr);
    assert!(
        took < Duration::from_secs(10),
        "waited {:?}: {}",
        took,
        stderr
    );
    assert!(
        stderr.contains(&*endpoint.to_string_lossy()),
        "names the endpoint: {}",
        stderr
    );
    stderr
}

#[test]
fn stale_socket_is_refused_at_once() {
    let dir = TempDir::new("stale", 0o700);
    drop(UnixListener::bind(dir.socket()).unwrap());
    let stderr = connect_failure(Command::new(BIN), &dir.socket());
    assert!(stderr.contains("nothing is listening"), "{}", stderr);
}

#[test]
fn regular_file_is_not_an_endpoint() {
    let dir = TempDir::new("file", 0o700);
    std::fs::write(dir.socket(), b"not a socket").unwrap();
    let stderr = connect_failure(Command::new(BIN), &dir.socket());
    assert!(stderr.contains("os error"), "{}", stderr);
}

#[test]
fn path_too_long_for_sun_path() {
    let dir = TempDir::new("long", 0o700);
    let long = dir.0.join("x".repeat(200));
    let stderr = connect_failure(Command::new(BIN), &long);
    assert!(stderr.contains("too long"), "{}", stderr);
}

/// A socket in a directory the bridge's user cannot enter: the error says
/// "permission denied" (the Troubleshooting table's row), not something
/// vaguer.
#[test]
fn permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("perm", 0o755);
    let private = dir.0.join("private");
    std::fs::create_dir(&private).unwrap();
    let socket = private.join("app.sock");
    let _listener = UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root ignores permissions: it runs the bridge as nobody instead.
    let program = if support::is_root() {
        support::foreign_bridge(&dir)
    } else {
        Command::new(BIN)
    };
    let stderr = connect_failure(program, &socket);
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(stderr.contains("permission denied"), "{}", stderr);
}

/// A host whose listen backlog is full and who never accepts: the bridge
/// retries until its connect timeout, then fails with exit 1.
#[cfg(target_os = "linux")]
#[test]
fn connect_is_bounded_by_the_timeout() {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let dir = TempDir::new("backlog", 0o700);
    let listener = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    rustix::net::bind(&listener, &SocketAddrUnix::new(dir.socket()).unwrap()).unwrap();
    rustix::net::listen(&listener, 0).unwrap();
    // Fill the backlog with connections nobody accepts.
    let mut fillers = Vec::new();
    loop {
        let s = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        match rustix::net::connect(&s, &SocketAddrUnix::new(dir.socket()).unwrap()) {
            Ok(()) => fillers.push(s),
            Err(e) if e == rustix::io::Errno::AGAIN => break,
            Err(e) => panic!("filling the backlog: {}", e),
        }
        assert!(fillers.len() < 1000, "backlog never filled");
    }
    let start = Instant::now();
    let mut child = bridge(
        &dir.socket(),
        &["--connect-timeout", "0.4", "--no-reconnect"],
    )
    .spawn()
    .unwrap();
    let status = wait_for_exit(&mut child);
    let took = start.elapsed();
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{}", stderr);
    assert!(
        took >= Duration::from_millis(400),
        "gave up early: {:?}: {}",
        took,
        stderr
    );
    assert!(
        stderr.contains("no connection within"),
        "names the timeout: {}",
        stderr
    );
    assert!(
        stderr
            .trim_end()
            .ends_with(" (raise --connect-timeout if it is just slow to start)"),
        "the binary names the flag: {}",
        stderr
    );
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["mcp-server"], "missing required option '--endpoint"),
        (&["mcp-server", "--endpoint"], "'--endpoint' needs a value"),
        (
            &["mcp-server", "--endpoint", "/x", "--project"],
            "'--project' needs a value",
        ),
        (
            &["mcp-server", "--endpoint", "/x", "--bogus"],
            "unknown option '--bogus'",
        ),
        (
            &["mcp-server", "--endpoint", "/x", "--endpoint", "/y"],
            "'--endpoint' given more than once",
        ),
        (
            &["mcp-server", "--endpoint", "/x", "stray"],
            "unexpected argument 'stray'",
        ),
        (
            &[
                "mcp-server",
                "--endpoint",
                "/x",
                "--connect-timeout",
                "soon",
            ],
            "expects a number of seconds",
        ),
        (&["frobnicate"], "unknown command 'frobnicate'"),
    ];
    for (args, needle) in cases {
        let out = run(args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{:?}: {}", args, stderr);
        assert_eq!(
            stderr.lines().count(),
            1,
            "{:?}: one line: {}",
            args,
            stderr
        );
        assert!(stderr.starts_with("mcp-bridge: "), "{}", stderr);
        assert!(stderr.contains(needle), "{:?}: {}", args, stderr);
        assert!(stderr.contains("--help"), "hint to --help: {}", stderr);
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn no_arguments_prints_usage_on_stderr() {
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8(out.stderr).unwrap().contains("USAGE"));
}

#[test]
fn help_goes_to_stdout() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["mcp-server", "--help"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{:?}", args);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("mcp-server --endpoint <PATH>"), "{}", text);
        assert!(text.contains("EXIT STATUS"), "{}", text);
        assert!(out.stderr.is_empty());
    }
}

#[test]
fn version_names_commit_and_target() {
    for flag in ["--version", "-V"] {
        let out = run(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8(out.stdout).unwrap();
        let expected_start = format!("mcp-bridge {} (", env!("CARGO_PKG_VERSION"));
        assert!(text.starts_with(&expected_start), "{}", text);
        assert!(text.trim_end().ends_with(')'), "{}", text);
        // "(<commit or unknown>, <target triple>)"
        let inner = &text[expected_start.len()..text.trim_end().len() - 1];
        let mut parts = inner.split(", ");
        let commit = parts.next().unwrap();
        let target = parts.next().unwrap();
        assert!(
            commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{}",
            text
        );
        assert!(target.contains(std::env::consts::ARCH), "{}", text);
    }
}

#[test]
fn stdin_eof_right_after_connect_exits_0() {
    let dir = TempDir::new("eof", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (saw_eof_tx, saw_eof) = mpsc::channel();
    let (handshake, host) = host(listener, move |mut reader, _writer| {
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        saw_eof_tx.send(rest).unwrap();
    });
    let mut child = spawn_bridge(&dir.socket());
    drop(child.stdin.take());
    let status = wait_for_exit(&mut child);
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut child));
    assert_eq!(
        handshake.recv().unwrap(),
        "{\"project\":\"proj-1\",\"requester\":\"agent-9\"}\n"
    );
    assert!(
        saw_eof.recv().unwrap().is_empty(),
        "host saw EOF, nothing else"
    );
    host.join().unwrap();
}

/// stdin closes while a reply is still being computed: the reply reaches
/// stdout anyway (the drain), then the bridge exits 0.
#[test]
fn in_flight_reply_is_drained_after_stdin_eof() {
    let dir = TempDir::new("drain", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (got_request_tx, got_request) = mpsc::channel();
    let (_handshake, host) = host(listener, move |mut reader, mut writer| {
        let mut request = String::new();
        reader.read_line(&mut request).unwrap();
        got_request_tx.send(request).unwrap();
        // Answer only once the bridge has passed stdin's EOF on (as a
        // half-close): the reply is computed after stdin closed.
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "nothing after the request");
        writer
            .write_all(b"{\"id\":1,\"result\":\"late\"}\n")
            .unwrap();
    });
    let mut child = spawn_bridge(&dir.socket());
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"id\":1,\"method\":\"slow\"}\n")
        .unwrap();
    // The request has reached the host, and is waiting for its answer there,
    // when stdin closes.
    assert_eq!(
        got_request.recv().unwrap(),
        "{\"id\":1,\"method\":\"slow\"}\n"
    );
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "{\"id\":1,\"result\":\"late\"}\n");
    assert!(wait_for_exit(&mut child).success());
    host.join().unwrap();
}

/// A host that never answers and never closes cannot keep the bridge alive
/// after stdin closes: the drain grace (1 s) bounds it.
#[test]
fn drain_is_bounded_when_the_host_never_answers() {
    let dir = TempDir::new("silent", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (release_tx, release) = mpsc::channel::<()>();
    let (_handshake, host) = host(listener, move |_reader, _writer| {
        // Hold the connection open, reading nothing, until the test ends.
        let _ = release.recv();
    });
    let mut child = spawn_bridge(&dir.socket());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"id\":1,\"method\":\"never\"}\n")
        .unwrap();
    let start = Instant::now();
    let status = wait_for_exit(&mut child);
    assert_eq!(status.code(), Some(0));
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    release_tx.send(()).unwrap();
    host.join().unwrap();
}

#[test]
fn host_hang_up_ends_the_bridge_promptly() {
    let dir = TempDir::new("hangup", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (hang_up_tx, hang_up) = mpsc::channel::<()>();
    let (_handshake, host) = host(listener, move |_reader, mut writer| {
        writer.write_all(b"{\"method\":\"bye\"}").unwrap();
        hang_up.recv().unwrap();
        // Dropping both halves closes the connection.
    });
    // The plain relay ends with the app; the surviving bridge reconnects
    // instead (tests/survive.rs).
    let mut child = bridge(&dir.socket(), &["--no-reconnect"]).spawn().unwrap();
    let _stdin = child.stdin.take().unwrap(); // held open: only the host ends it
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    let start = Instant::now();
    hang_up_tx.send(()).unwrap();
    host.join().unwrap();
    let status = wait_for_exit(&mut child);
    let took = start.elapsed();
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut child));
    // Prompt: the hang-up itself ends it, not a timeout.
    assert!(took < Duration::from_secs(4), "took {:?}", took);
    assert_eq!(
        &first, b"{\"method\":\"bye\"}",
        "the last partial line arrived"
    );
}

#[test]
fn odd_bytes_are_relayed_exactly_both_ways() {
    let input =
        b"\xff\xfe invalid utf-8\n{\"crlf\":true}\r\nnul\x00byte\n\x00\x00\nno final newline"
            .to_vec();
    let (out, _) = echo_through_bridge(input.clone());
    assert_eq!(out, input);
}

#[test]
fn a_64_mib_line_each_way_with_bounded_memory() {
    let mut line: Vec<u8> = (0..64 * 1024 * 1024)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    line.push(b'\n');
    let (out, peak_kib) = echo_through_bridge(line.clone());
    assert_eq!(out.len(), line.len());
    assert!(out == line, "64 MiB line corrupted");
    // A line-buffering relay would hold the whole line: 64 MiB or more.
    if let Some(peak_kib) = peak_kib {
        assert!(peak_kib < 16 * 1024, "peak RSS {} KiB", peak_kib);
    }
}

#[test]
fn a_thousand_round_trips_in_order() {
    let dir = TempDir::new("rtt", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (_handshake, host) = host(listener, |reader, mut writer| {
        for line in reader.lines() {
            let line = line.unwrap();
            let id: u64 = line
                .trim_start_matches("{\"id\":")
                .trim_end_matches(",\"method\":\"ping\"}")
                .parse()
                .unwrap();
            writeln!(writer, "{{\"id\":{},\"result\":{}}}", id, id * 2).unwrap();
        }
    });
    let mut child = spawn_bridge(&dir.socket());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut reply = String::new();
    for id in 0..1000u64 {
        // Requests: a reply reaches the client only if it answers one.
        writeln!(stdin, "{{\"id\":{},\"method\":\"ping\"}}", id).unwrap();
        reply.clear();
        stdout.read_line(&mut reply).unwrap();
        assert_eq!(reply, format!("{{\"id\":{},\"result\":{}}}\n", id, id * 2));
    }
    drop(stdin);
    assert!(wait_for_exit(&mut child).success());
    host.join().unwrap();
}

/// The CLI stopped reading (closed our stdout): the next reply cannot be
/// delivered, and the bridge leaves quietly instead of spinning.
#[test]
fn closed_stdout_ends_the_bridge_quietly() {
    let dir = TempDir::new("stdout", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (go_tx, go) = mpsc::channel::<()>();
    let (handshake, host) = host(listener, move |_reader, mut writer| {
        go.recv().unwrap();
        // Keep writing until the bridge goes away.
        let chunk = [b'x'; 4096];
        while writer.write_all(&chunk).is_ok() {}
    });
    let mut child = spawn_bridge(&dir.socket());
    let _stdin = child.stdin.take().unwrap(); // still open
                                              // Connected first: a bridge whose stdout reader is gone before that
                                              // leaves at once, without ever connecting, and the host would wait
                                              // for it for ever.
    handshake.recv().unwrap();
    drop(child.stdout.take()); // the reader goes away
    go_tx.send(()).unwrap();
    let status = wait_for_exit(&mut child);
    assert_eq!(status.code(), Some(0));
    assert_eq!(stderr_of(&mut child), "", "quietly");
    host.join().unwrap();
}

#[cfg(feature = "demo")]
#[test]
fn demo_runs_a_session() {
    let out = Command::new(BIN).arg("demo").output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("{\"project\":\"demo-project\",\"requester\":\"demo-agent\"}"),
        "{}",
        stdout
    );
    assert!(stdout.contains("\"name\":\"echo\""), "{}", stdout);
    assert!(stdout.contains("hello through the bridge"), "{}", stdout);
    assert!(stdout.contains("bridge exited with code 0"), "{}", stdout);
    assert!(stdout.trim_end().ends_with("demo OK"), "{}", stdout);
}

/// Node.js spawns children with socketpairs as stdio: the bridge relays over
/// them too, and leaves the shared file description blocking, as it found
/// it (our own copy of the child's end shares that description).
#[test]
fn socketpair_stdio_works_and_keeps_descriptions_blocking() {
    let (ours_in, theirs_in) = UnixStream::pair().unwrap();
    let (ours_out, theirs_out) = UnixStream::pair().unwrap();
    let shared = vec![
        OwnedFd::from(theirs_in.try_clone().unwrap()),
        OwnedFd::from(theirs_out.try_clone().unwrap()),
    ];
    round_trip_with_stdio(
        Stdio::from(OwnedFd::from(theirs_in)),
        Stdio::from(OwnedFd::from(theirs_out)),
        Box::new(ours_in),
        Box::new(ours_out),
        shared,
    );
}

/// Rust, Python and Go spawners use pipes: same checks.
#[cfg(target_os = "linux")]
#[test]
fn pipe_stdio_works_and_keeps_descriptions_blocking() {
    // CLOEXEC, or the bridge inherits our ends and never sees EOF.
    let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
    let (in_read, in_write) = rustix::pipe::pipe_with(cloexec).unwrap();
    let (out_read, out_write) = rustix::pipe::pipe_with(cloexec).unwrap();
    let shared = vec![in_read.try_clone().unwrap(), out_write.try_clone().unwrap()];
    round_trip_with_stdio(
        Stdio::from(in_read),
        Stdio::from(out_write),
        Box::new(std::fs::File::from(in_write)),
        Box::new(std::fs::File::from(out_read)),
        shared,
    );
}

fn round_trip_with_stdio(
    child_stdin: Stdio,
    child_stdout: Stdio,
    mut to_bridge: Box<dyn Write>,
    from_bridge: Box<dyn Read>,
    shared: Vec<OwnedFd>,
) {
    let dir = TempDir::new("stdio-kind", 0o700);
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let (_handshake, host) = echo_host(listener);
    let mut child = bridge(&dir.socket(), &[])
        .stdin(child_stdin)
        .stdout(child_stdout)
        .spawn()
        .unwrap();
    let mut from_bridge = BufReader::new(from_bridge);
    for i in 0..50 {
        writeln!(to_bridge, "{{\"id\":{}}}", i).unwrap();
        let mut line = String::new();
        from_bridge.read_line(&mut line).unwrap();
        assert_eq!(line, format!("{{\"id\":{}}}\n", i));
    }
    for fd in &shared {
        let flags = rustix::fs::fcntl_getfl(fd).unwrap();
        assert!(
            !flags.contains(rustix::fs::OFlags::NONBLOCK),
            "the bridge made an inherited description non-blocking"
        );
    }
    // Our copies of the child's ends would keep its stdout open forever.
    drop(shared);
    drop(to_bridge);
    let mut rest = Vec::new();
    from_bridge.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert!(wait_for_exit(&mut child).success());
    host.join().unwrap();
}
