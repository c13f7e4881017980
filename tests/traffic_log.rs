//! The traffic log (`--log`) end to end, through `mcp-bridge serve`: a
//! real serve process, real connections, a real child, and the log file
//! it leaves.
#![cfg(unix)]
#![cfg(feature = "serve")]

mod support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;

use support::{
    is_root, serve_program, wait_exit_with, Serve, Stderr, TempDir, BIN, HANG_GUARD, NOBODY,
};

/// Serves `cat` (which echoes every line back) on `socket`, logging to
/// `log`, with `env` set.
fn start_serve(socket: &Path, log: &Path, env: &[(&str, &str)]) -> Serve {
    start_serve_with(serve_program(None), socket, log, env)
}

/// [`start_serve`] with `program` as the binary (a shell that sets a
/// limit, then runs the binary with the arguments given).
fn start_serve_with(
    mut program: Command,
    socket: &Path,
    log: &Path,
    env: &[(&str, &str)],
) -> Serve {
    program
        .envs(env.iter().copied())
        .env_remove("MCP_BRIDGE_LOG");
    let log = log.to_str().unwrap();
    Serve::launch(
        program,
        socket,
        &["--log", log],
        &["cat"],
        Stderr::Collected,
    )
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

    /// A hundred requests of about 100 bytes, ids 0 to 99, each echoed:
    /// past an 8,000-byte cap.
    fn past_the_cap(&mut self) {
        for n in 0..100 {
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{}\"}}\n",
                n,
                "m".repeat(60)
            );
            self.echo(line.as_bytes());
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
fn wait_for_record(serve: &mut Serve, log: &Path, needle: &str) {
    serve.wait_until(
        &format!("record with '{}' in {}", needle, log.display()),
        || records(log).iter().any(|r| r.contains(needle)),
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
    let mut serve = start_serve(&dir.socket(), &log, &[]);
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
    let mut client = Client::connect(&dir.socket(), "agent-1");
    client.echo(&[&request[..], b"\n"].concat());
    drop(client);
    wait_for_record(&mut serve, &log, "ended (the bridge disconnected)");
    assert_eq!(serve.stop(Signal::TERM).code(), Some(0));

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
    assert!(serve.stdout().is_empty(), "serve wrote to stdout");
}

/// A request that names its caller in `params._meta` (Codex's thread and
/// turn, VS Code's chat and request, the spec's clientInfo) gets `caller=` and the ids in its
/// record; one that names none (or is an answer going back) gets none.
#[test]
fn a_request_record_names_its_caller() {
    let dir = TempDir::new("log-caller", 0o700);
    let log = log_path(&dir);
    let mut serve = start_serve(&dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    let lines: [&[u8]; 4] = [
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"threadId":"th-2","x-codex-turn-metadata":{"session_id":"se-1","thread_id":"th-2","turn_id":"tu-3"}}}}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"vscode.conversationId":"chat 1","vscode.requestId":"req-9"}}}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":3}}}"#,
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"some client","version":"1.0"}}}}"#,
    ];
    for line in lines {
        client.echo(&[line, b"\n"].concat());
    }
    drop(client);
    wait_for_record(&mut serve, &log, "ended");
    let records = records(&log);
    let heads: Vec<&str> = records
        .iter()
        .filter(|r| !r.starts_with("event "))
        .map(|r| &r[..r.find(" len=").unwrap()])
        .collect();
    #[rustfmt::skip]
    assert_eq!(heads, [
        "cli->app conn=1 request id=1 method=tools/call caller=codex session=se-1 conversation=th-2 call=tu-3",
        "app->cli conn=1 request id=1 method=tools/call",
        "cli->app conn=1 request id=2 method=tools/call caller=vscode conversation=chat\\x201 call=req-9",
        "app->cli conn=1 request id=2 method=tools/call",
        "cli->app conn=1 request id=3 method=tools/call",
        "app->cli conn=1 request id=3 method=tools/call",
        "cli->app conn=1 request id=4 method=tools/call caller=mcp client=some\\x20client version=1.0",
        "app->cli conn=1 request id=4 method=tools/call",
    ], "{}", records.join("\n"));
}

/// A caller whose id holds the text of an escape (`lit\x20eral`) and a
/// caller whose id holds what it stands for (`lit eral`) are two callers:
/// the field escapes the backslash too, so their records differ.
#[test]
fn two_callers_an_escape_apart_are_logged_apart() {
    let dir = TempDir::new("log-backslash", 0o700);
    let log = log_path(&dir);
    let mut serve = start_serve(&dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    let lines: [&[u8]; 2] = [
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"ai.opencode/sessionID":"lit\\x20eral"}}}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"ai.opencode/sessionID":"lit eral"}}}"#,
    ];
    for line in lines {
        client.echo(&[line, b"\n"].concat());
    }
    drop(client);
    wait_for_record(&mut serve, &log, "ended");
    let records = records(&log);
    let conversations: Vec<&str> = records
        .iter()
        .filter(|r| r.starts_with("cli->app "))
        .filter_map(|r| r.split(' ').find(|f| f.starts_with("conversation=")))
        .collect();
    assert_eq!(
        conversations,
        [r"conversation=lit\x5cx20eral", r"conversation=lit\x20eral"],
        "{}",
        records.join("\n")
    );
}

/// Whatever a message holds (JSON's `\n` escapes, a CRLF, invalid UTF-8,
/// control bytes, C1 controls and U+2028 raw in valid JSON), its record is
/// one line, and the bytes that are not printable UTF-8 are written as
/// `\xNN`.
#[test]
fn records_are_one_line_whatever_the_message_holds() {
    let dir = TempDir::new("log-lines", 0o700);
    let log = log_path(&dir);
    let mut serve = start_serve(&dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    let lines: [&[u8]; 5] = [
        b"{\"jsonrpc\":\"2.0\",\"method\":\"log\",\"params\":{\"text\":\"a\\nb\\r\\n\"}}\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"crlf\"}\r\n",
        b"bad \xff\xfe utf-8 \xe2\x82\n",
        b"nul \x00 and escape \x1b[31m\n",
        // Valid JSON with a raw CSI (U+009B), NEL (U+0085) and U+2028.
        "{\"t\":\"\u{9b}2J\u{85}\u{2028}\u{e9}\"}\n".as_bytes(),
    ];
    for line in lines {
        client.echo(line);
    }
    drop(client);
    wait_for_record(&mut serve, &log, "ended");
    let expected = [
        r#"notification method=log len=61 {"jsonrpc":"2.0","method":"log","params":{"text":"a\nb\r\n"}}"#,
        r#"request id=2 method=crlf len=41 {"jsonrpc":"2.0","id":2,"method":"crlf"}\x0d"#,
        r"other len=15 bad \xff\xfe utf-8 \xe2\x82",
        r"other len=22 nul \x00 and escape \x1b[31m",
        "other len=19 {\"t\":\"\\xc2\\x9b2J\\xc2\\x85\\xe2\\x80\\xa8\u{e9}\"}",
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
    let mut serve = start_serve(&dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    client.echo(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
    drop(client);
    serve.wait_for_log("ended");
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

// ---------------------------------------------------------------------------
// A log that cannot be turned against its user, through the bridge itself.

/// An app that accepts any number of bridges and echoes each one's bytes
/// after its handshake, closing when the bridge half-closes. Its thread
/// outlives the test, blocked in `accept`, which is harmless.
fn echo_app(socket: &Path) {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                Err(_) => return,
            };
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut handshake = String::new();
                if reader.read_line(&mut handshake).is_ok() {
                    let _ = std::io::copy(&mut reader, &mut writer);
                }
            });
        }
    });
}

/// A bridge (`mcp-server`) against `socket`, as `command` runs it (the
/// binary, or a shell that runs it), with `log_args` added; stdin and
/// stderr piped, stdout piped unless the caller sets it.
fn bridge_command(mut command: Command, socket: &Path, log_args: &[&str]) -> Command {
    support::plain_relay(&mut command, socket, "r")
        .args(log_args)
        .env_remove("MCP_BRIDGE_LOG")
        .env_remove("MCP_BRIDGE_LOG_MAX_BYTES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// What a bridge left: its exit status, stdout (if piped) and stderr.
struct Ran {
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

/// A process being fed its input, its output being gathered.
struct Running {
    child: Child,
    feeder: std::thread::JoinHandle<()>,
    stdout: Option<std::thread::JoinHandle<Vec<u8>>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

impl Running {
    /// Spawns `command` and writes `input` to its stdin, then closes it.
    fn start(command: &mut Command, input: Vec<u8>) -> Running {
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        Running {
            stdout: child.stdout.take().map(read_all),
            stderr: read_all(child.stderr.take().unwrap()),
            feeder,
            child,
        }
    }

    /// Waits for the exit (failing the test after [`HANG_GUARD`]) and for
    /// the last of its output.
    fn finish(mut self) -> Ran {
        let mut stderr = Some(self.stderr);
        let mut stderr_text = || {
            let bytes = stderr.take().unwrap().join().unwrap();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let status = wait_exit_with(&mut self.child, "the bridge", |_| stderr_text());
        self.feeder.join().unwrap();
        Ran {
            status,
            stdout: self.stdout.map_or_else(Vec::new, |h| h.join().unwrap()),
            stderr: stderr_text(),
        }
    }
}

fn run(command: &mut Command, input: Vec<u8>) -> Ran {
    Running::start(command, input).finish()
}

/// `count` requests of about 100 bytes, ids `"<tag>-<n>"`.
fn requests(tag: &str, count: usize) -> Vec<u8> {
    padded_requests(tag, count, 40)
}

/// `count` requests with `pad` bytes of padding each (about 60 bytes
/// more), ids `"<tag>-<n>"`.
fn padded_requests(tag: &str, count: usize, pad: usize) -> Vec<u8> {
    let mut input = Vec::new();
    for n in 0..count {
        input.extend_from_slice(
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":\"{}-{}\",\"method\":\"m\",\"params\":{{\"pad\":\"{}\"}}}}\n",
                tag,
                n,
                "x".repeat(pad)
            )
            .as_bytes(),
        );
    }
    input
}

/// The lines of `stderr` about the traffic log.
fn log_warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("traffic log"))
        .collect()
}

/// Five requests through a bridge to `socket` with `--log <log>`: what it
/// did, and what it was sent.
fn run_logged(socket: &Path, log: &Path) -> (Ran, Vec<u8>) {
    let input = requests("a", 5);
    let mut command = bridge_command(Command::new(BIN), socket, &["--log", arg(log)]);
    (run(&mut command, input.clone()), input)
}

/// [`run_logged`]: the bridge relays all the same, and says once that it
/// refuses the log, and `why`.
fn relays_refusing(socket: &Path, log: &Path, why: &str) {
    let (ran, input) = run_logged(socket, log);
    let warning = format!(
        "mcp-bridge: refusing the traffic log '{}': {}",
        log.display(),
        why
    );
    assert_relayed_with_one_warning(&ran, &input, &warning);
}

/// The bridge relayed every byte and nothing else, ended well, and said
/// exactly one thing about the log: a line starting with `warning`.
fn assert_relayed_with_one_warning(ran: &Ran, input: &[u8], warning: &str) {
    assert!(ran.status.success(), "{}: {}", ran.status, ran.stderr);
    assert!(
        ran.stdout == input,
        "stdout is not the relayed bytes: {}",
        String::from_utf8_lossy(&ran.stdout)
    );
    let warnings = log_warnings(&ran.stderr);
    assert_eq!(warnings.len(), 1, "{}", ran.stderr);
    assert!(
        warnings[0].starts_with(warning),
        "expected '{}...', got: {}",
        warning,
        ran.stderr
    );
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A link planted at the log's path (in a directory others can write) is
/// refused, not followed: the file it points to is neither written nor
/// narrowed to 0600, and the bridge relays all the same.
#[test]
fn a_symbolic_link_at_the_log_path_is_refused() {
    let dir = TempDir::new("log-link", 0o700);
    echo_app(&dir.socket());
    let victim = dir.0.join("victim");
    fs::write(&victim, b"victim\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    let log = log_path(&dir);
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    relays_refusing(&dir.socket(), &log, "it is a symbolic link");
    assert_eq!(fs::read(&victim).unwrap(), b"victim\n");
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o644);
    assert!(fs::symlink_metadata(&log).unwrap().file_type().is_symlink());
}

/// A file another user created at the log's path would hand them the
/// traffic: it is refused, left as it was (content, owner, mode).
#[test]
fn another_users_file_at_the_log_path_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to make a file of another user");
        return;
    }
    let dir = TempDir::new("log-theirs", 0o755);
    echo_app(&dir.socket());
    let log = log_path(&dir);
    fs::write(&log, b"theirs\n").unwrap();
    fs::set_permissions(&log, fs::Permissions::from_mode(0o666)).unwrap();
    let status = Command::new("chown")
        .arg(format!("{}:{}", NOBODY, NOBODY))
        .arg(&log)
        .status()
        .unwrap();
    assert!(status.success());
    let why = format!("it belongs to user {}", NOBODY);
    relays_refusing(&dir.socket(), &log, &why);
    let metadata = fs::metadata(&log).unwrap();
    assert_eq!(fs::read(&log).unwrap(), b"theirs\n");
    assert_eq!((metadata.uid(), metadata.mode() & 0o777), (NOBODY, 0o666));
}

/// A hard link at the log's path could name any file of ours (where the
/// system lets anyone link to files they do not own): refused, untouched.
#[test]
fn a_hard_link_at_the_log_path_is_refused() {
    let dir = TempDir::new("log-hardlink", 0o700);
    echo_app(&dir.socket());
    let victim = dir.0.join("victim");
    fs::write(&victim, b"victim\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    let log = log_path(&dir);
    fs::hard_link(&victim, &log).unwrap();
    relays_refusing(&dir.socket(), &log, "it has 2 hard links");
    assert_eq!(fs::read(&victim).unwrap(), b"victim\n");
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o644);
}

/// A directory every user can write (without the sticky bit) lets them
/// replace the log between rotations: one warning, and the log is kept.
/// With the sticky bit (`/tmp`), others cannot touch our files: no warning.
#[test]
fn a_directory_others_can_write_is_one_warning() {
    for (mode, warned) in [(0o777, true), (0o1777, false)] {
        let dir = TempDir::new("log-dir", mode);
        echo_app(&dir.socket());
        let log = log_path(&dir);
        let (ran, input) = run_logged(&dir.socket(), &log);
        assert!(ran.status.success(), "{}: {}", ran.status, ran.stderr);
        assert_eq!(ran.stdout, input);
        let warnings = log_warnings(&ran.stderr);
        if warned {
            assert_eq!(
                warnings,
                [format!(
                    "mcp-bridge: the traffic log's directory '{}' is writable by every user \
                     (mode 777): others could replace the log between rotations, and read what \
                     is written after; keep logs in a directory of your own",
                    dir.0.display()
                )],
                "{}",
                ran.stderr
            );
        } else {
            assert!(warnings.is_empty(), "mode {:o}: {}", mode, ran.stderr);
        }
        let records = records(&log);
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("cli->app request id=\"a-4\"")),
            "{}",
            records.join("\n")
        );
    }
}

/// The file is opened by name only at the start and to rotate: a link
/// swapped in mid-session (the file renamed away, a link to another file
/// put in its place) redirects nothing. Records go on into the file held;
/// at the rotation, the link is refused like at the start, with one
/// warning, and the file it points to is never touched.
#[test]
fn a_link_swapped_in_mid_session_redirects_nothing() {
    const CAP: u64 = 8000;
    let dir = TempDir::new("log-swap", 0o700);
    let log = log_path(&dir);
    let victim = dir.0.join("victim");
    fs::write(&victim, b"victim\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    let cap = CAP.to_string();
    let mut serve = start_serve(
        &dir.socket(),
        &log,
        &[("MCP_BRIDGE_LOG_MAX_BYTES", cap.as_str())],
    );
    wait_for_record(&mut serve, &log, "event start");
    let moved = dir.0.join("moved.log");
    fs::rename(&log, &moved).unwrap();
    std::os::unix::fs::symlink(&victim, &log).unwrap();

    let mut client = Client::connect(&dir.socket(), "r");
    client.echo(b"{\"jsonrpc\":\"2.0\",\"id\":\"after-swap\",\"method\":\"m\"}\n");
    wait_for_record(&mut serve, &moved, "id=\"after-swap\"");
    // Past the cap: the rotation opens FILE by name, and finds the link.
    client.past_the_cap();
    drop(client);
    serve.wait_for_log("ended");
    assert_eq!(serve.stop(Signal::TERM).code(), Some(0));

    assert_eq!(fs::read(&victim).unwrap(), b"victim\n");
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o644);
    assert!(fs::symlink_metadata(&log).unwrap().file_type().is_symlink());
    let size = fs::metadata(&moved).unwrap().len();
    assert!(size <= CAP, "{} bytes", size);
    let stderr = serve.stderr();
    let warnings = log_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{}", stderr);
    assert!(
        warnings[0].starts_with(&format!(
            "mcp-bridge: cannot write the traffic log '{}': it is a symbolic link",
            log.display()
        )),
        "{}",
        stderr
    );
    assert!(!dir.entries().contains(&"traffic.log.1".to_string()));
}

/// A log that is the file our stdout is would put records into the
/// JSON-RPC stream. `/dev/stdout` and its aliases are links (refused as
/// such); a regular file given both as stdout and as the log is refused as
/// stdout. Either way, one warning, and stdout carries only relayed bytes.
#[test]
fn a_log_that_is_our_stdout_is_refused() {
    let dir = TempDir::new("log-stdout", 0o700);
    echo_app(&dir.socket());
    let input = requests("a", 5);
    let link = "mcp-bridge: refusing the traffic log '{}': it is a symbolic link";
    for path in ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"] {
        for env in [false, true] {
            let mut command = bridge_command(Command::new(BIN), &dir.socket(), &[]);
            if env {
                command.env("MCP_BRIDGE_LOG", path);
            } else {
                command.args(["--log", path]);
            }
            let ran = run(&mut command, input.clone());
            assert_relayed_with_one_warning(&ran, &input, &link.replace("{}", path));
        }
    }
    // Stdout is a file of ours: given as the log by its name, and through
    // /dev/stdout.
    let out = dir.0.join("stdout");
    for (log, warning) in [
        (arg(&out), "it is this process's stdout"),
        ("/dev/stdout", "it is a symbolic link"),
    ] {
        let file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&out)
            .unwrap();
        let mut command = bridge_command(Command::new(BIN), &dir.socket(), &["--log", log]);
        command.stdout(file);
        let ran = run(&mut command, input.clone());
        assert!(ran.status.success(), "{}: {}", ran.status, ran.stderr);
        assert!(
            fs::read(&out).unwrap() == input,
            "{}",
            String::from_utf8_lossy(&fs::read(&out).unwrap())
        );
        let warnings = log_warnings(&ran.stderr);
        assert_eq!(warnings.len(), 1, "{}", ran.stderr);
        assert!(
            warnings[0].starts_with(&format!(
                "mcp-bridge: refusing the traffic log '{}': {}",
                log, warning
            )),
            "{}",
            ran.stderr
        );
    }
}

/// Runs `sh -c 'ulimit -f 8; exec BIN ...'`: the binary under a file size
/// limit of 4 or 8 KiB (the shell's unit is 512 or 1024 bytes).
fn under_file_size_limit() -> Command {
    let mut shell = Command::new("sh");
    shell.args(["-c", "ulimit -f 8 && exec \"$0\" \"$@\"", BIN]);
    shell
}

const FILE_SIZE_LIMIT: u64 = 8 * 1024;

/// At the file size limit a write would raise SIGXFSZ and kill the bridge
/// mid-session: it is caught, the write fails with EFBIG, and the log
/// stops there with one warning while the bridge relays on.
#[test]
fn a_file_size_limit_stops_the_log_not_the_bridge() {
    let dir = TempDir::new("log-fsize", 0o700);
    echo_app(&dir.socket());
    let log = log_path(&dir);
    let input = requests("a", 300);
    let ran = run(
        &mut bridge_command(
            under_file_size_limit(),
            &dir.socket(),
            &["--log", arg(&log)],
        ),
        input.clone(),
    );
    assert_relayed_with_one_warning(
        &ran,
        &input,
        &format!(
            "mcp-bridge: cannot write the traffic log '{}': ",
            log.display()
        ),
    );
    assert!(
        ran.stderr
            .contains("the file size limit (ulimit -f) is reached"),
        "{}",
        ran.stderr
    );
    let size = fs::metadata(&log).unwrap().len();
    assert!(size > 0 && size <= FILE_SIZE_LIMIT, "{} bytes", size);
}

/// The same for `serve`, which died of SIGXFSZ leaving its socket file
/// behind: it serves on, and stops cleanly.
#[test]
fn a_file_size_limit_stops_the_log_not_serve() {
    let dir = TempDir::new("log-fsize-serve", 0o700);
    let log = log_path(&dir);
    let mut serve = start_serve_with(under_file_size_limit(), &dir.socket(), &log, &[]);
    let mut client = Client::connect(&dir.socket(), "r");
    for n in 0..300 {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{}\"}}\n",
            n,
            "m".repeat(60)
        );
        client.echo(line.as_bytes());
    }
    drop(client);
    serve.wait_for_log("ended");
    assert_eq!(
        serve.stop(Signal::TERM).code(),
        Some(0),
        "{}",
        serve.stderr()
    );
    assert!(!dir.socket().exists(), "the socket file was left behind");
    let stderr = serve.stderr();
    let warnings = log_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{}", stderr);
    assert!(
        warnings[0].contains("the file size limit (ulimit -f) is reached"),
        "{}",
        stderr
    );
    let size = fs::metadata(&log).unwrap().len();
    assert!(size > 0 && size <= FILE_SIZE_LIMIT, "{} bytes", size);
}

// ---------------------------------------------------------------------------
// Rotation by several processes.

const BRIDGES: usize = 10;

/// Runs ten bridges at once, all logging to `log` through `MCP_BRIDGE_LOG`
/// (as a CLI with the variable in its environment would), rotated at
/// `cap`, each sending `count` requests (ids `"b<bridge>-<n>"`) to an echo
/// app (`pad` bytes of padding in each); each must relay everything, with
/// nothing said about the log.
fn ten_bridges_sharing(dir: &TempDir, log: &Path, cap: u64, count: usize, pad: usize) {
    let running: Vec<(Vec<u8>, Running)> = (0..BRIDGES)
        .map(|b| {
            let input = padded_requests(&format!("b{}", b), count, pad);
            let mut command = bridge_command(Command::new(BIN), &dir.socket(), &[]);
            command
                .env("MCP_BRIDGE_LOG", log)
                .env("MCP_BRIDGE_LOG_MAX_BYTES", cap.to_string());
            let running = Running::start(&mut command, input.clone());
            (input, running)
        })
        .collect();
    for (input, running) in running {
        let ran = running.finish();
        assert!(ran.status.success(), "{}: {}", ran.status, ran.stderr);
        assert!(ran.stdout == input, "a bridge did not relay everything");
        assert!(log_warnings(&ran.stderr).is_empty(), "{}", ran.stderr);
    }
}

/// The message records of a log file, in order, as (direction, bridge,
/// n); every line is checked to be a whole record.
fn messages(path: &Path) -> Vec<(String, usize, usize)> {
    records(path)
        .iter()
        .filter(|r| !r.starts_with("event "))
        .map(|r| {
            let fields: Vec<&str> = r.split(' ').collect();
            let id = fields[2]
                .strip_prefix("id=\"b")
                .and_then(|id| id.strip_suffix('"'))
                .unwrap_or_else(|| panic!("not a record of ours: {}", r));
            let (bridge, n) = id.split_once('-').unwrap();
            (
                fields[0].to_string(),
                bridge.parse().unwrap(),
                n.parse().unwrap(),
            )
        })
        .collect()
}

/// Ten bridges cross the cap together, once: every record of every one of
/// them is in `FILE` or `FILE.1`, exactly once (the design keeps one old
/// file, and here there is only one). Before, two bridges rotating the
/// same file each renamed `FILE` (the second one the other's brand-new
/// file, over the full one) or truncated `FILE.1`. Records of 4 KB, so
/// each bridge writes batches of many at the moment the cap is crossed.
/// Five times in a row.
#[test]
fn bridges_sharing_a_log_lose_no_record_across_a_rotation() {
    // About 400 KB of records per bridge, 4 MB in all: one rotation,
    // past halfway.
    const CAP: u64 = 2_500_000;
    const COUNT: usize = 50;
    const PAD: usize = 3900;
    for round in 0..5 {
        let dir = TempDir::new("log-shared", 0o700);
        echo_app(&dir.socket());
        let log = log_path(&dir);
        ten_bridges_sharing(&dir, &log, CAP, COUNT, PAD);
        assert_eq!(
            dir.entries(),
            ["app.sock", "traffic.log", "traffic.log.1"],
            "round {}",
            round
        );
        let old = dir.0.join("traffic.log.1");
        let mut seen = std::collections::HashMap::new();
        for path in [&old, &log] {
            let size = fs::metadata(path).unwrap().len();
            assert!(
                size <= CAP,
                "round {}: {} has {} bytes",
                round,
                path.display(),
                size
            );
            for message in messages(path) {
                *seen.entry(message).or_insert(0) += 1;
            }
        }
        for direction in ["cli->app", "app->cli"] {
            for bridge in 0..BRIDGES {
                for n in 0..COUNT {
                    let key = (direction.to_string(), bridge, n);
                    assert_eq!(
                        seen.get(&key),
                        Some(&1),
                        "round {}: {} request b{}-{} is not in the log exactly once",
                        round,
                        direction,
                        bridge,
                        n
                    );
                }
            }
        }
    }
}

/// Ten bridges rotate a small log dozens of times. Whatever the design
/// lets go (every file older than `FILE.1`), it never loses a record in
/// between or empties a file: `FILE.1`, each time it is looked at, is a
/// full file (within one record of the cap); and each bridge's records in
/// `FILE.1` then `FILE` are the last ones it sent, in order, with no gap
/// and no repeat. Three times in a row.
#[test]
fn bridges_sharing_a_log_rotate_it_many_times_safely() {
    const CAP: u64 = 8000;
    const COUNT: usize = 100;
    // Far more than any record here is long.
    const LONGEST_RECORD: u64 = 1000;
    for round in 0..3 {
        let dir = TempDir::new("log-shared-many", 0o700);
        echo_app(&dir.socket());
        let log = log_path(&dir);
        let old = dir.0.join("traffic.log.1");
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (old, done) = (old.clone(), done.clone());
            std::thread::spawn(move || {
                let mut smallest = u64::MAX;
                let mut looks = 0u64;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(metadata) = fs::metadata(&old) {
                        smallest = smallest.min(metadata.len());
                        looks += 1;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                (smallest, looks)
            })
        };
        ten_bridges_sharing(&dir, &log, CAP, COUNT, 40);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let (smallest, looks) = watcher.join().unwrap();
        assert!(looks > 0, "round {}: FILE.1 never seen", round);
        assert!(
            smallest > CAP - LONGEST_RECORD,
            "round {}: FILE.1 had only {} bytes at some point",
            round,
            smallest
        );
        assert_eq!(
            dir.entries(),
            ["app.sock", "traffic.log", "traffic.log.1"],
            "round {}",
            round
        );
        let mut kept: Vec<(String, usize, usize)> = Vec::new();
        for path in [&old, &log] {
            let size = fs::metadata(path).unwrap().len();
            assert!(
                size <= CAP,
                "round {}: {} has {} bytes",
                round,
                path.display(),
                size
            );
            kept.extend(messages(path));
        }
        for direction in ["cli->app", "app->cli"] {
            for bridge in 0..BRIDGES {
                let ns: Vec<usize> = kept
                    .iter()
                    .filter(|(d, b, _)| d == direction && *b == bridge)
                    .map(|(_, _, n)| *n)
                    .collect();
                if let Some(&first) = ns.first() {
                    let expected: Vec<usize> = (first..COUNT).collect();
                    assert_eq!(
                        ns, expected,
                        "round {}: {} records of bridge {}",
                        round, direction, bridge
                    );
                }
            }
        }
    }
}

/// Issue 29, item 3: on a full disk, the `dropped N records` event was
/// itself lost when the next write failed too, counted as one record
/// where it stood for N: the log said 128-406 records were lost while
/// 1,904-1,964 were. Here every write fails for a while (a tmpfs with no
/// free block, and a log file that has none yet), one batch at a time;
/// once a file is removed, the next record comes with the exact count.
/// A count still unwritten when the log closes is written then, with no
/// record after it.
#[test]
fn records_lost_to_a_full_disk_are_counted_exactly() {
    use mcp_bridge::traffic_log::{LogOptions, TrafficLog};
    let disk = match support::SmallDisk::mount("full-disk", 64 * 1024) {
        Some(disk) => disk,
        None => return,
    };
    const LOST: usize = 50;
    let path = disk.path().join("traffic.log");
    let log = TrafficLog::open(&path, LogOptions::default()).unwrap();
    let filler = disk.fill();
    for n in 0..LOST {
        log.event(format_args!("while full {}", n));
        assert!(log.flush(HANG_GUARD), "written or lost");
    }
    fs::remove_file(&filler).unwrap();
    log.event(format_args!("room again"));
    assert!(log.flush(HANG_GUARD));
    drop(log);
    let dropped = |n| {
        format!(
            "event dropped {} records: the log could not keep up, or could not be written",
            n
        )
    };
    assert_eq!(
        records(&path),
        [dropped(LOST), "event room again".to_string()]
    );

    // The count of records lost just before the log closes.
    let path = disk.path().join("closing.log");
    let log = TrafficLog::open(&path, LogOptions::default()).unwrap();
    let filler = disk.fill();
    for n in 0..7 {
        log.event(format_args!("while full {}", n));
        assert!(log.flush(HANG_GUARD));
    }
    fs::remove_file(&filler).unwrap();
    drop(log);
    assert_eq!(records(&path), [dropped(7)]);
}

/// Issue 29, item 2: `O_NOFOLLOW` covered the file only. A directory on
/// the log's path that is a symbolic link another user can re-point (one
/// in a directory every user can write, or theirs in a sticky one) made a
/// root bridge append the user's traffic to a root file of the same name
/// elsewhere, narrowing its mode, without a warning. Such a link is
/// refused, named, and the file it leads to is left as it was; a link
/// nobody else can re-point (in a directory of ours, or ours in a sticky
/// one) is followed as before.
#[test]
fn a_directory_link_another_user_can_re_point_is_refused() {
    let elsewhere = TempDir::new("log-elsewhere", 0o700);
    let victim = elsewhere.0.join("traffic.log");
    fs::write(&victim, b"victim\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    // (directory mode, the link's owner, refused)
    let mut cases = vec![
        (0o777, None, true),
        (0o700, None, false),
        (0o1777, None, false),
    ];
    if is_root() {
        cases.push((0o1777, Some(NOBODY), true));
    } else {
        eprintln!("not run: a link of another user in a sticky directory (needs root)");
    }
    for (mode, owner, refused) in cases {
        let shared = TempDir::new("log-shared", mode);
        echo_app(&shared.socket());
        let link = shared.0.join("logs");
        std::os::unix::fs::symlink(&elsewhere.0, &link).unwrap();
        if let Some(owner) = owner {
            rustix::fs::chownat(
                rustix::fs::CWD,
                &link,
                Some(rustix::process::Uid::from_raw(owner)),
                None,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .unwrap();
        }
        let log = link.join("traffic.log");
        let (ran, input) = run_logged(&shared.socket(), &log);
        let case = format!("mode {:o}, link owner {:?}", mode, owner);
        if refused {
            let why = format!(
                "'{}' on its path is a symbolic link another user can re-point",
                link.display()
            );
            let warning = format!(
                "mcp-bridge: refusing the traffic log '{}': {}",
                log.display(),
                why
            );
            assert_relayed_with_one_warning(&ran, &input, &warning);
            assert_eq!(fs::read(&victim).unwrap(), b"victim\n", "{}", case);
            assert_eq!(
                fs::metadata(&victim).unwrap().mode() & 0o777,
                0o644,
                "{}",
                case
            );
        } else {
            assert!(ran.status.success(), "{}: {}", case, ran.stderr);
            assert!(
                log_warnings(&ran.stderr).is_empty(),
                "{}: {}",
                case,
                ran.stderr
            );
            let text = fs::read_to_string(&victim).unwrap();
            assert!(text.contains("id=\"a-4\""), "{}: {}", case, text);
            fs::write(&victim, b"victim\n").unwrap();
            fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
}

/// Issue 29, item 2, with the window made wide: the log's directory is
/// found once and held. Renamed mid-session, with a link to another
/// directory put in its place, it redirects nothing: the rotation renames
/// and creates files in the directory held, and the other directory gets
/// no file. (Rotating by path followed the link, and the records went on
/// into a new file there.)
#[test]
fn the_log_s_directory_re_pointed_mid_session_redirects_nothing() {
    const CAP: u64 = 8000;
    let shared = TempDir::new("log-repoint", 0o777);
    let elsewhere = TempDir::new("log-elsewhere", 0o700);
    let logs = shared.0.join("logs");
    fs::create_dir(&logs).unwrap();
    let log = logs.join("traffic.log");
    let cap = CAP.to_string();
    let mut serve = start_serve(
        &shared.socket(),
        &log,
        &[("MCP_BRIDGE_LOG_MAX_BYTES", cap.as_str())],
    );
    wait_for_record(&mut serve, &log, "event start");
    let moved = shared.0.join("moved");
    fs::rename(&logs, &moved).unwrap();
    std::os::unix::fs::symlink(&elsewhere.0, &logs).unwrap();

    let mut client = Client::connect(&shared.socket(), "r");
    // Past the cap: the rotation renames FILE and opens a new one.
    client.past_the_cap();
    drop(client);
    serve.wait_for_log("ended");
    assert_eq!(serve.stop(Signal::TERM).code(), Some(0));

    assert_eq!(elsewhere.entries(), Vec::<String>::new());
    let rotated = records(&moved.join("traffic.log.1"));
    let current = records(&moved.join("traffic.log"));
    assert!(
        rotated.iter().chain(&current).any(|r| r.contains("id=99")),
        "the last record is in the directory held"
    );
    let stderr = serve.stderr();
    assert!(log_warnings(&stderr).is_empty(), "{}", stderr);
}
