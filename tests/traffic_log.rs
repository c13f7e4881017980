//! The traffic log (`--log`) end to end, through `mcp-bridge serve`: a
//! real serve process, real connections, a real child, and the log file
//! it leaves.
#![cfg(unix)]
#![cfg(feature = "serve")]

mod support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use support::{is_root, TempDir, BIN, HANG_GUARD};

/// A running `mcp-bridge serve`, its stdout and stderr collected.
struct Serve {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let sink = bytes.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    bytes
}

impl Serve {
    /// Serves `cat` (which echoes every line back) on `socket`, logging to
    /// `log`, with `env` set.
    fn start(socket: &Path, log: &Path, env: &[(&str, &str)]) -> Serve {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--endpoint")
            .arg(socket)
            .arg("--log")
            .arg(log)
            .args(["--", "cat"])
            .envs(env.iter().copied())
            .env_remove("MCP_BRIDGE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let serve = Serve {
            stdout: collect(child.stdout.take().unwrap()),
            stderr: collect(child.stderr.take().unwrap()),
            child,
        };
        serve.wait_for(|| serve.stderr().contains("serving"), "serve to start");
        serve
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, done: impl Fn() -> bool, what: &str) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < HANG_GUARD,
                "no {} within {:?}; serve's stderr:\n{}",
                what,
                HANG_GUARD,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then waits for the exit; returns the exit code.
    fn stop(&mut self) -> Option<i32> {
        let pid = Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, Signal::TERM).unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(start.elapsed() < HANG_GUARD, "serve did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client connection, as a bridge makes it: the handshake line, then
/// bytes both ways.
struct Client {
    stream: UnixStream,
    replies: BufReader<UnixStream>,
}

impl Client {
    fn connect(socket: &Path, requester: &str) -> Client {
        let mut stream = UnixStream::connect(socket).unwrap();
        // A hang guard: a reply that never comes fails the test.
        stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let handshake = format!("{{\"project\":\"p\",\"requester\":\"{}\"}}\n", requester);
        stream.write_all(handshake.as_bytes()).unwrap();
        Client {
            replies: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }

    /// Sends `line` (which ends in `\n`) and reads its echo.
    fn echo(&mut self, line: &[u8]) {
        self.stream.write_all(line).unwrap();
        let mut echo = Vec::new();
        self.replies.read_until(b'\n', &mut echo).unwrap();
        assert_eq!(echo, line);
    }
}

/// The log's lines, each checked to start with an RFC 3339 UTC timestamp
/// with microseconds.
fn records(path: &Path) -> Vec<String> {
    let bytes = fs::read(path).unwrap_or_default();
    let text = String::from_utf8(bytes).expect("the log is valid UTF-8");
    text.lines()
        .map(|line| {
            let stamp = line.split(' ').next().unwrap();
            let digits: String = stamp.chars().filter(char::is_ascii_digit).collect();
            assert!(
                stamp.len() == 27
                    && digits.len() == 20
                    && stamp.as_bytes()[10] == b'T'
                    && stamp.ends_with('Z')
                    && stamp.as_bytes()[19] == b'.',
                "not a timestamp: {}",
                line
            );
            line[28..].to_string()
        })
        .collect()
}

/// Waits until the log has a record containing `needle`.
fn wait_for_record(serve: &Serve, log: &Path, needle: &str) {
    serve.wait_for(
        || records(log).iter().any(|r| r.contains(needle)),
        &format!("record with '{}' in {}", needle, log.display()),
    );
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.0.join("traffic.log")
}

/// Both directions of each connection are recorded with its number, and
/// serve's events (start, accepted, started, ended, exit) around them;
/// nothing reaches serve's stdout.
#[test]
fn serve_logs_both_directions_and_its_events() {
    let dir = TempDir::new("log-e2e", 0o700);
    let log = log_path(&dir);
    let mut serve = Serve::start(&dir.socket(), &log, &[]);
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
    let mut client = Client::connect(&dir.socket(), "agent-1");
    client.echo(&[&request[..], b"\n"].concat());
    drop(client);
    wait_for_record(&serve, &log, "ended (the bridge disconnected)");
    assert_eq!(serve.stop(), Some(0));

    let records = records(&log);
    let position = |needle: &str| {
        records
            .iter()
            .position(|r| r.contains(needle))
            .unwrap_or_else(|| panic!("no record with '{}' in:\n{}", needle, records.join("\n")))
    };
    let message = format!(
        "request id=1 method=tools/call len={} {}",
        request.len(),
        String::from_utf8_lossy(request)
    );
    let order = [
        position("event start mcp-bridge"),
        position("event serving 'cat'"),
        position("event conn=1 connection 1 (requester \"agent-1\", project \"p\"): accepted"),
        position("event conn=1 connection 1 (requester \"agent-1\", project \"p\"): started pid"),
        position(&format!("cli->app conn=1 {}", message)),
        position(&format!("app->cli conn=1 {}", message)),
        position("event conn=1 connection 1 (requester \"agent-1\", project \"p\"): ended"),
        position("event exit code=0: stopped"),
    ];
    let mut sorted = order;
    sorted.sort_unstable();
    assert_eq!(order, sorted, "{}", records.join("\n"));
    assert!(
        serve.stdout.lock().unwrap().is_empty(),
        "serve wrote to stdout"
    );
}

/// Whatever a message holds (JSON's `\n` escapes, a CRLF, invalid UTF-8,
/// control bytes), its record is one line, and the bytes that are not
/// printable UTF-8 are written as `\xNN`.
#[test]
fn records_are_one_line_whatever_the_message_holds() {
    let dir = TempDir::new("log-lines", 0o700);
    let log = log_path(&dir);
    let serve = Serve::start(&dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    let lines: [&[u8]; 4] = [
        b"{\"jsonrpc\":\"2.0\",\"method\":\"log\",\"params\":{\"text\":\"a\\nb\\r\\n\"}}\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"crlf\"}\r\n",
        b"bad \xff\xfe utf-8 \xe2\x82\n",
        b"nul \x00 and escape \x1b[31m\n",
    ];
    for line in lines {
        client.echo(line);
    }
    drop(client);
    wait_for_record(&serve, &log, "ended");
    let expected = [
        r#"notification method=log len=61 {"jsonrpc":"2.0","method":"log","params":{"text":"a\nb\r\n"}}"#,
        r#"request id=2 method=crlf len=41 {"jsonrpc":"2.0","id":2,"method":"crlf"}\x0d"#,
        r"other len=15 bad \xff\xfe utf-8 \xe2\x82",
        r"other len=22 nul \x00 and escape \x1b[31m",
    ];
    let records = records(&log);
    for direction in ["cli->app conn=1", "app->cli conn=1"] {
        let messages: Vec<&str> = records
            .iter()
            .filter_map(|r| r.strip_prefix(direction))
            .map(str::trim_start)
            .collect();
        assert_eq!(messages, expected, "{}", records.join("\n"));
    }
}

/// The log never grows past its cap: at the cap it moves to `FILE.1`
/// (replacing the one before), so exactly one old file is kept, and both
/// hold whole records.
#[test]
fn rotation_at_the_cap_keeps_one_old_file() {
    const CAP: u64 = 4000;
    let dir = TempDir::new("log-rotate", 0o700);
    let log = log_path(&dir);
    let cap = CAP.to_string();
    let mut serve = Serve::start(
        &dir.socket(),
        &log,
        &[("MCP_BRIDGE_LOG_MAX_BYTES", cap.as_str())],
    );
    let mut client = Client::connect(&dir.socket(), "r");
    for n in 0..200 {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"m\"}}\n", n);
        client.echo(line.as_bytes());
    }
    drop(client);
    wait_for_record(&serve, &log, "ended");
    assert_eq!(serve.stop(), Some(0));
    assert_eq!(dir.entries(), ["traffic.log", "traffic.log.1"]);
    let old = dir.0.join("traffic.log.1");
    for path in [&log, &old] {
        let size = fs::metadata(path).unwrap().len();
        assert!(size <= CAP, "{} has {} bytes", path.display(), size);
        // Every line is a whole record.
        records(path);
    }
    assert!(records(&log)
        .last()
        .unwrap()
        .starts_with("event exit code=0"));
}

/// A log that cannot be created (a read-only directory; for root, whom
/// modes do not stop, a path through a regular file) is one warning on
/// stderr, and serve relays all the same.
#[test]
fn a_log_that_cannot_be_opened_does_not_stop_serve() {
    let dir = TempDir::new("log-ro", 0o700);
    let log = if is_root() {
        let file = dir.0.join("a-file");
        fs::write(&file, b"").unwrap();
        file.join("traffic.log")
    } else {
        let read_only = dir.0.join("read-only");
        fs::create_dir(&read_only).unwrap();
        fs::set_permissions(&read_only, fs::Permissions::from_mode(0o500)).unwrap();
        read_only.join("traffic.log")
    };
    let serve = Serve::start(&dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    client.echo(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
    drop(client);
    serve.wait_for(|| serve.stderr().contains("ended"), "the connection to end");
    let stderr = serve.stderr();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("traffic log"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", stderr);
    assert!(
        warnings[0].starts_with(&format!(
            "mcp-bridge: cannot open the traffic log '{}': ",
            log.display()
        )) && warnings[0].ends_with("; going on without a traffic log"),
        "{}",
        warnings[0]
    );
    assert!(!log.exists());
}

/// The log holds the user's traffic: it is created owner-only whatever
/// the umask.
#[test]
fn the_log_file_is_created_owner_only() {
    let dir = TempDir::new("log-mode", 0o755);
    let log = log_path(&dir);
    let serve = Serve::start(&dir.socket(), &log, &[]);
    wait_for_record(&serve, &log, "event start");
    let mode = fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode {:o}", mode);
}
