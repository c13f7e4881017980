//! `mcp-bridge doctor` through the built binary, against hosts built on the
//! crate's own `host::Listener` (healthy, silent, refusing), against
//! endpoints that are not there, and against misbehaving apps (a plain
//! Unix socket listener scripted by each test: slow pages, a writer that
//! stops reading, floods, huge pages, wrong versions, escape sequences).
#![cfg(unix)]
#![cfg(all(feature = "doctor", feature = "host"))]

mod support;

use std::fs;
use std::io::{self, BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use futures_lite::{future, StreamExt};
use mcp_bridge::host::Listener;
use serde_json::{json, Value};

use support::{until, wait_output, RecordingListener, TempDir, BIN, HANG_GUARD, NOBODY};

/// How the test host behaves once a client has connected.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Answers like a small MCP server: tools on two pages, one prompt.
    Healthy,
    /// Reads everything, answers nothing.
    Silent,
    /// Turns every client away with the protocol's refusal line.
    Refuse,
}

/// An MCP host on a thread of its own, reporting what it saw on a channel:
/// `handshake <line>`, `<method>` for each message, `eof`.
struct Host {
    seen: mpsc::Receiver<String>,
    _stop: smol::channel::Sender<()>,
}

impl Host {
    fn start(socket: &Path, behaviour: Behaviour) -> Host {
        let listener = Listener::bind(socket).unwrap();
        let (seen_tx, seen) = mpsc::channel();
        let (stop, stopped) = smol::channel::bounded::<()>(1);
        std::thread::spawn(move || {
            smol::block_on(future::or(
                async {
                    loop {
                        let connection = listener.accept().await.unwrap();
                        serve(connection, behaviour, &seen_tx).await;
                    }
                },
                async {
                    let _ = stopped.recv().await;
                },
            ))
        });
        Host { seen, _stop: stop }
    }

    /// Everything seen until the client's EOF.
    fn until_eof(&self) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let event = self
                .seen
                .recv_timeout(HANG_GUARD)
                .unwrap_or_else(|_| panic!("no EOF from doctor; the host saw {:?}", seen));
            if event == "eof" {
                return seen;
            }
            seen.push(event);
        }
    }
}

async fn serve(
    connection: mcp_bridge::host::Connection,
    behaviour: Behaviour,
    seen: &mpsc::Sender<String>,
) {
    let handshake = connection.handshake.to_line();
    let _ = seen.send(format!(
        "handshake {}",
        String::from_utf8_lossy(&handshake).trim_end()
    ));
    if let Behaviour::Refuse = behaviour {
        let _ = connection.refuse("no room for you").await;
        return;
    }
    let mut writer = connection.writer;
    let mut lines = BufReader::new(connection.reader).lines();
    while let Some(Ok(line)) = lines.next().await {
        let message: Value = serde_json::from_str(&line).unwrap();
        let method = message["method"].as_str().unwrap_or("(reply)").to_string();
        let _ = seen.send(method.clone());
        let result = match (behaviour, method.as_str()) {
            (Behaviour::Healthy, "initialize") => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}, "prompts": {}},
                "serverInfo": {"name": "test host", "version": "1.2.3"}
            }),
            (Behaviour::Healthy, "tools/list") if message["params"]["cursor"].is_null() => {
                json!({"tools": [{"name": "echo"}], "nextCursor": "page-2"})
            }
            (Behaviour::Healthy, "tools/list") => json!({"tools": [{"name": "add"}]}),
            (Behaviour::Healthy, "prompts/list") => json!({"prompts": [{"name": "greet"}]}),
            _ => continue,
        };
        let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
        writer
            .write_all(format!("{}\n", reply).as_bytes())
            .await
            .unwrap();
    }
    let _ = seen.send("eof".into());
}

/// Runs doctor with `args`, bounded by the hang guard.
fn doctor(args: &[&str]) -> Output {
    doctor_with(args, None)
}

/// [`doctor`], with `MCP_BRIDGE_LOG` set to `log` (unset otherwise).
fn doctor_with(args: &[&str], log: Option<&Path>) -> Output {
    let mut command = Command::new(BIN);
    command.env_remove("MCP_BRIDGE_LOG");
    if let Some(log) = log {
        command.env("MCP_BRIDGE_LOG", log);
    }
    let child = command
        .arg("doctor")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, &format!("doctor {:?}", args))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The report of a doctor that passed (exit 0); fails the test with the
/// report and stderr otherwise.
fn passed(output: &Output) -> String {
    let report = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        report,
        text(&output.stderr)
    );
    report
}

/// Fails the test, with the whole report, unless the line of the step
/// `name` says `text`.
fn assert_step_says(report: &str, name: &str, text: &str) {
    assert!(
        step_line(report, name).contains(text),
        "the '{}' step does not say {:?}:\n{}",
        name,
        text,
        report
    );
}

/// The report's line for a step.
fn step_line<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| {
            l.get(8..8 + name.len()) == Some(name)
                && l.as_bytes().get(8 + name.len()) == Some(&b' ')
        })
        .unwrap_or_else(|| panic!("no '{}' step in:\n{}", name, report))
}

/// Every step of a CLI's start-up against a healthy host passes, lists
/// follow their pages, the session ends with the bridge's half-close, and
/// the configuration names this executable.
#[test]
fn doctor_passes_against_a_healthy_host() {
    let dir = TempDir::new("doctor-ok", 0o700);
    let socket = dir.socket();
    let host = Host::start(&socket, Behaviour::Healthy);
    let endpoint = socket.to_str().unwrap();
    let output = doctor(&[
        "--endpoint",
        endpoint,
        "--project",
        "p1",
        "--requester",
        "agent 1",
    ]);
    let report = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        report,
        text(&output.stderr)
    );
    assert_eq!(text(&output.stderr), "");

    assert_step_says(&report, "endpoint", "a socket, owner uid");
    assert_step_says(&report, "endpoint", "mode 0600");
    for step in [
        "connect",
        "server user",
        "handshake",
        "initialized",
        "close",
        "start-up budget",
    ] {
        assert!(step_line(&report, step).starts_with("  ok "), "{}", report);
    }
    let me = format!(
        "served by uid {}, which is you",
        rustix::process::geteuid().as_raw()
    );
    assert_step_says(&report, "server user", &me);
    assert_step_says(
        &report,
        "initialize",
        "protocol 2025-06-18, server 'test host' 1.2.3; capabilities: prompts, tools",
    );
    assert_step_says(&report, "tools/list", "2 tools: echo, add");
    assert_step_says(&report, "prompts/list", "1 prompt: greet");
    assert!(step_line(&report, "resources/list").starts_with("  skip"));
    assert!(report.contains("All checks passed."), "{}", report);
    let exe = fs::canonicalize(BIN).unwrap();
    assert!(
        report.contains(&format!(
            "claude mcp add test-host -- {} mcp-server --endpoint {} --project p1 --requester 'agent 1'",
            exe.display(),
            endpoint
        )),
        "{}",
        report
    );

    assert_eq!(
        host.until_eof(),
        [
            "handshake {\"project\":\"p1\",\"requester\":\"agent 1\"}",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list",
            "prompts/list",
        ]
    );
}

/// `--json` prints one JSON document with the same facts, for installers.
#[test]
fn doctor_json_is_one_document_with_the_same_facts() {
    let dir = TempDir::new("doctor-json", 0o700);
    let socket = dir.socket();
    let _host = Host::start(&socket, Behaviour::Healthy);
    let endpoint = socket.to_str().unwrap();
    let output = doctor(&["--endpoint", endpoint, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(report["passed"], true);
    assert_eq!(report["failed_step"], Value::Null);
    assert_eq!(report["endpoint"], endpoint);
    let steps: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    #[rustfmt::skip]
    assert_eq!(steps, ["endpoint", "connect", "server user", "handshake", "initialize", "initialized",
        "tools/list", "prompts/list", "resources/list", "close", "start-up budget"]);
    assert!(report["steps"][4]["ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(report["steps"][8]["status"], "skipped");
    assert_eq!(report["server"]["name"], "test host");
    assert_eq!(
        report["server"]["capabilities"],
        json!({"tools": {}, "prompts": {}})
    );
    assert_eq!(report["tools"], json!(["echo", "add"]));
    assert_eq!(report["lists"]["tools"]["count"], 2);
    assert_eq!(report["lists"]["tools"]["pages"], 2);
    assert_eq!(report["lists"]["tools"]["names_kept"], 2);
    assert!(report["lists"]["tools"]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(report["lists"]["resources"], Value::Null);
    assert_eq!(report["ignored_options"], json!([]));
    assert_eq!(report["prompts"], json!(["greet"]));
    assert_eq!(report["resources"], Value::Null);
    assert_eq!(report["budgets"][0]["cli"], "Codex");
    assert_eq!(report["budgets"][0]["limit_ms"], 10_000.0);
    assert_eq!(report["budgets"][1]["cli"], "Claude Code");
    let exe = fs::canonicalize(BIN).unwrap();
    let config = &report["config"];
    assert_eq!(config["command"], exe.to_str().unwrap());
    assert_eq!(
        config["mcp_json"]["mcpServers"]["test-host"]["args"],
        json!(["mcp-server", "--endpoint", endpoint])
    );
    assert_eq!(config["vscode"]["servers"]["test-host"]["type"], "stdio");
    assert!(config["codex_toml"]
        .as_str()
        .unwrap()
        .starts_with("[mcp_servers.test-host]\ncommand = '"));
}

/// No endpoint: exit 1, and the failed step says what the bridge would.
#[test]
fn doctor_names_an_absent_endpoint() {
    let dir = TempDir::new("doctor-absent", 0o700);
    let socket = dir.socket();
    let output = doctor(&["--endpoint", socket.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let report = text(&output.stdout);
    let expected = format!(
        "cannot connect to '{}': it does not exist",
        socket.display()
    );
    assert!(
        step_line(&report, "endpoint").starts_with("  FAIL"),
        "{}",
        report
    );
    assert_step_says(&report, "endpoint", &expected);
    assert!(
        !report.contains("  connect "),
        "the check stops at the first failure"
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "mcp-bridge: the 'endpoint' check failed: {}",
            expected
        )),
        "{}",
        stderr
    );
    // What to do about it, as `mcp-server` says it.
    let hint = "(is the app running, and is --endpoint right?)";
    assert!(step_line(&report, "endpoint").ends_with(hint), "{}", report);
    assert!(stderr.trim_end().ends_with(hint), "{}", stderr);
    // Still the configuration to paste, for the installer to write.
    assert!(report.contains("claude mcp add app -- "), "{}", report);
}

/// A regular file where the socket should be: the step says so, with the
/// OS's word for it, not the "connection refused" `connect` said, which
/// would read as "nothing listens" and contradict it.
#[test]
fn doctor_names_a_file_that_is_not_a_socket_without_contradicting_itself() {
    let dir = TempDir::new("doctor-file", 0o700);
    let file = dir.socket();
    std::fs::write(&file, b"").unwrap();
    let output = doctor(&["--endpoint", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let report = text(&output.stdout);
    let line = step_line(&report, "endpoint");
    let expected = format!(
        "cannot connect to '{}': it is a regular file, not a socket",
        file.display()
    );
    assert!(line.contains(&expected), "{}", report);
    assert!(
        line.contains("Socket operation on non-socket"),
        "{}",
        report
    );
    assert!(!report.to_lowercase().contains("refused"), "{}", report);
}

/// A host that accepts but never answers `initialize` costs `--timeout`,
/// not forever, and is left with a closed connection, not a half-open one.
#[test]
fn doctor_gives_up_on_a_host_that_never_answers_initialize() {
    let dir = TempDir::new("doctor-silent", 0o700);
    let socket = dir.socket();
    let host = Host::start(&socket, Behaviour::Silent);
    // The identity given empty, so nothing is learned from this process.
    let output = doctor(&[
        "--endpoint",
        socket.to_str().unwrap(),
        "--project=",
        "--requester=",
        "--timeout",
        "0.5",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(report["failed_step"], "initialize");
    assert_eq!(
        report["error"],
        "no answer to initialize within 500ms; the app is busy or hung"
    );
    assert_eq!(report["server"], Value::Null);
    assert_eq!(
        host.until_eof(),
        [
            "handshake {\"project\":\"\",\"requester\":\"\"}",
            "initialize"
        ]
    );
}

/// A host that says no is reported in the bridge's own words.
#[test]
fn doctor_reports_a_refusal_as_the_bridge_would() {
    let dir = TempDir::new("doctor-refuse", 0o700);
    let socket = dir.socket();
    let _host = Host::start(&socket, Behaviour::Refuse);
    let output = doctor(&["--endpoint", socket.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let report = text(&output.stdout);
    assert_step_says(
        &report,
        "initialize",
        &format!(
            "the app at '{}' refused this client: no room for you",
            socket.display()
        ),
    );
}

/// A socket anyone may write to lets anyone talk to the app as this user:
/// the check passes, with a warning that says so.
#[test]
fn doctor_warns_about_a_world_writable_socket() {
    let dir = TempDir::new("doctor-mode", 0o700);
    let socket = dir.socket();
    let _host = Host::start(&socket, Behaviour::Healthy);
    fs::set_permissions(&socket, fs::Permissions::from_mode(0o666)).unwrap();
    let output = doctor(&["--endpoint", socket.to_str().unwrap()]);
    let report = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", report);
    assert!(
        step_line(&report, "endpoint").starts_with("  warn"),
        "{}",
        report
    );
    assert!(
        report.contains(
            "warning: its mode 0666 lets its group and all other users connect as if they were you"
        ),
        "{}",
        report
    );
    assert!(
        report.contains("All checks passed, with 1 warning."),
        "{}",
        report
    );
}

/// One connection to a scripted app, as the app sees it (the handshake
/// line already read).
struct Conn {
    lines: io::BufReader<UnixStream>,
    out: UnixStream,
}

impl Conn {
    /// The next request from doctor, notifications skipped; `None` at EOF.
    fn request(&mut self) -> Option<Value> {
        loop {
            let mut line = String::new();
            match self.lines.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let message: Value = serde_json::from_str(&line).unwrap();
            if !message["id"].is_null() {
                return Some(message);
            }
        }
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        self.out.write_all(line.as_bytes())?;
        self.out.write_all(b"\n")
    }

    /// Answers `request` with `result`, as JSON-RPC 2.0.
    fn answer(&mut self, request: &Value, result: Value) -> io::Result<()> {
        let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
        self.send(&reply.to_string())
    }

    /// Reads `initialize` and answers it for a server with tools.
    fn initialize(&mut self) -> io::Result<()> {
        let request = self.request().expect("initialize");
        assert_eq!(request["method"], "initialize");
        self.answer(
            &request,
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "1"}
            }),
        )
    }
}

/// A scripted app at `socket`: every connection is handed to `app` on a
/// thread of its own once its handshake line is read. The threads live
/// as long as the test process, as an app that never lets go would.
/// A [`fake_app`] on a socket in a new private directory named after
/// `name`: the directory (kept alive by the caller) and the socket.
fn fake_app_in(name: &str, app: fn(Conn) -> io::Result<()>) -> (TempDir, PathBuf) {
    let dir = TempDir::new(name, 0o700);
    let socket = dir.socket();
    fake_app(&socket, app);
    (dir, socket)
}

fn fake_app(socket: &Path, app: fn(Conn) -> io::Result<()>) {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            std::thread::spawn(move || {
                let mut lines = io::BufReader::new(stream.try_clone().unwrap());
                let mut handshake = String::new();
                lines.read_line(&mut handshake).unwrap();
                let _ = app(Conn { lines, out: stream });
            });
        }
    });
}

/// Issue 20, doctor 1: `mcp-server`'s whole command line works with
/// `doctor` in its place; the options that apply are used (the log gets
/// the session, the pasted configuration keeps them) and the report says
/// which are ignored and why. Issue 37: the cache options too (doctor
/// refused them as unknown).
#[test]
fn doctor_takes_mcp_servers_command_line() {
    let dir = TempDir::new("doctor-line", 0o700);
    let socket = dir.socket();
    let _host = Host::start(&socket, Behaviour::Healthy);
    let log = dir.0.join("bridge.log");
    let cache = dir.0.join("cache");
    let endpoint = socket.to_str().unwrap();
    #[rustfmt::skip]
    let line = ["--endpoint", endpoint, "--project", "p1", "--requester", "agent", "--connect-timeout", "5",
        "--reconnect-timeout", "7", "--no-reconnect", "--log", log.to_str().unwrap(),
        "--cache-dir", cache.to_str().unwrap()];
    let output = doctor(&line);
    let report = passed(&output);
    assert!(
        report.contains("  note  --reconnect-timeout is ignored: doctor runs one session"),
        "{}",
        report
    );
    assert!(
        report.contains("  note  --no-reconnect is ignored: "),
        "{}",
        report
    );
    assert_step_says(
        &report,
        "traffic log",
        &format!("appending this session to '{}'", log.display()),
    );
    assert!(
        report.contains("--connect-timeout 5 --reconnect-timeout 7 --log "),
        "the configuration to paste keeps the options: {}",
        report
    );
    let logged = fs::read_to_string(&log).unwrap();
    for record in [
        "event start mcp-bridge",
        "\"doctor\"",
        "cli->app request id=1 method=initialize",
        "app->cli response id=1",
        "cli->app request id=2 method=tools/list",
        "event exit code=0",
    ] {
        assert!(
            logged.contains(record),
            "no {:?} in the log:\n{}",
            record,
            logged
        );
    }
    // The handshake is an event, as in the bridge's log, not a message.
    let handshake = r#"{"project":"p1","requester":"agent"}"#;
    assert_eq!(logged.matches(handshake).count(), 1, "{}", logged);
    assert!(
        logged.contains(&format!("event handshake sent {}", handshake)),
        "{}",
        logged
    );

    // MCP_BRIDGE_LOG, as for mcp-server, and --json says what it ignores.
    let env_log = dir.0.join("env.log");
    let output = doctor_with(
        &[
            "--endpoint",
            endpoint,
            "--reconnect-timeout=7",
            "--no-cache",
            "--json",
        ],
        Some(&env_log),
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["ignored_options"][0]["option"],
        "--reconnect-timeout"
    );
    assert_eq!(report["steps"][0]["name"], "traffic log");
    let logged = fs::read_to_string(&env_log).unwrap();
    assert!(logged.contains("method=initialize"), "{}", logged);
}

/// `--connect-timeout` means what it means to the bridge: the connect
/// step waits for an app that is not there yet.
#[test]
fn doctor_waits_for_the_app_with_connect_timeout() {
    let dir = TempDir::new("doctor-wait", 0o700);
    let socket = dir.socket();
    let log = dir.0.join("doctor.log");
    let args = [
        "doctor".to_string(),
        "--endpoint".into(),
        socket.to_str().unwrap().into(),
        "--connect-timeout".into(),
        "25".into(),
        "--log".into(),
        log.to_str().unwrap().into(),
    ];
    let child = Command::new(BIN)
        .args(&args)
        .env_remove("MCP_BRIDGE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The log is opened before the connect step starts: the app comes up
    // after doctor began looking for it.
    until("doctor to open its log", || log.exists());
    let _host = Host::start(&socket, Behaviour::Healthy);
    let output = child.wait_with_output().unwrap();
    let report = passed(&output);
    assert_step_says(&report, "connect", "waiting up to 25s for the app");
}

/// The test that is also the recording listener's entry (see
/// [`support::listener_role`]).
const LISTENER_TEST: &str = "doctor_trusts_the_server_user_it_is_told_to";

/// `--trust-server-user` is read: an app served by that user passes the
/// server user check (and fails it without the option, before a byte is
/// sent). The app is the suite's recording listener run as another user
/// (this test, re-run in that role): it accepts and never answers.
#[test]
fn doctor_trusts_the_server_user_it_is_told_to() {
    if support::listener_role() {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run a listener as another user");
        return;
    }
    let dir = TempDir::new("doctor-trust", 0o777);
    let socket = dir.socket();
    let listener = RecordingListener::start(
        LISTENER_TEST,
        &dir,
        NOBODY,
        &socket,
        &dir.0.join("received"),
    );
    let endpoint = socket.to_str().unwrap();
    let refused = doctor(&["--endpoint", endpoint, "--json"]);
    let trusted = doctor(&[
        "--endpoint",
        endpoint,
        "--project=",
        "--requester=",
        "--trust-server-user",
        &NOBODY.to_string(),
        "--timeout",
        "0.5",
        "--json",
    ]);
    let received = listener.received();
    let refused: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(refused["failed_step"], "server user", "{:#}", refused);
    let trusted: Value = serde_json::from_slice(&trusted.stdout).unwrap();
    let server_user = &trusted["steps"][2];
    assert_eq!(server_user["name"], "server user", "{:#}", trusted);
    assert_eq!(server_user["status"], "ok", "{:#}", trusted);
    assert_eq!(
        server_user["detail"],
        format!(
            "served by uid {}, whom --trust-server-user trusts: the bridge will talk to it",
            NOBODY
        )
    );
    // The listener never answers: the check goes on past the server user.
    assert_eq!(trusted["failed_step"], "initialize", "{:#}", trusted);
    assert!(trusted["config"]["args"]
        .as_array()
        .unwrap()
        .contains(&json!(NOBODY.to_string())));
    // All it received is the trusted run's: the refused one sent nothing.
    assert!(
        received.starts_with("{\"project\":\"\",\"requester\":\"\"}\n{\"jsonrpc\""),
        "{:?}",
        received
    );
    assert_eq!(
        received.matches("\"initialize\"").count(),
        1,
        "{:?}",
        received
    );
}

/// Runs doctor on `socket` with `options` and `--json`, which must fail
/// at the tools/list step, and returns the report's error.
fn list_step_failure(socket: &Path, options: &[&str]) -> String {
    let mut args = vec!["--endpoint", socket.to_str().unwrap(), "--json"];
    args.extend_from_slice(options);
    let output = doctor(&args);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["failed_step"], "tools/list", "{:#}", report);
    report["error"].as_str().unwrap().to_owned()
}

/// Issue 20, doctor 2: `--timeout` bounds the whole list step, every
/// page of it, not each page (an app whose pages each take 0.2 s and never
/// end cost 100 pages of them before).
#[test]
fn doctor_bounds_a_whole_list_not_each_page() {
    let (_dir, socket) = fake_app_in("doctor-pages", |mut app| {
        app.initialize()?;
        let mut page = 0;
        while let Some(request) = app.request() {
            page += 1;
            std::thread::sleep(Duration::from_millis(200));
            app.answer(
                &request,
                json!({"tools": [{"name": format!("t{}", page)}], "nextCursor": page.to_string()}),
            )?;
        }
        Ok(())
    });
    let error = list_step_failure(&socket, &["--timeout", "1"]);
    assert!(
        error.starts_with("no answer to tools/list page "),
        "{}",
        error
    );
    assert!(
        error.contains("within 1s, the bound for the whole list"),
        "{}",
        error
    );
}

/// Issue 20, doctor 2: an app that sends an 8 MiB cursor and then stops
/// reading cannot hold doctor's write of the next request forever.
#[test]
fn doctor_bounds_a_write_the_app_does_not_read() {
    let (_dir, socket) = fake_app_in("doctor-stuck", |mut app| {
        app.initialize()?;
        let request = app.request().expect("tools/list");
        // Far more than a socket's buffers hold (a few hundred KiB), so the
        // write of page 2's request blocks; small enough that reading page 1
        // fits the step's bound on a loaded machine (8 MiB did not, beside
        // two CPU hogs).
        let cursor = "c".repeat(2 << 20);
        app.answer(
            &request,
            json!({"tools": [{"name": "a"}], "nextCursor": cursor}),
        )?;
        // Never reads again, never closes.
        loop {
            std::thread::park();
        }
    });
    assert_eq!(
        list_step_failure(&socket, &["--timeout", "3"]),
        "sending tools/list (page 2) did not finish within 3s: the app is not reading what it is sent"
    );
}

/// Issue 20, doctor 3: an app that floods lines that are not JSON costs
/// doctor a few quoted lines and a count, not a warning per line.
#[test]
fn doctor_counts_a_flood_of_lines_that_are_not_json() {
    let (_dir, socket) = fake_app_in("doctor-flood", |mut app| {
        let _ = app.request();
        let mut chunk = Vec::new();
        for i in 0..1000 {
            chunk.extend_from_slice(format!("not json, line {} of a flood\n", i).as_bytes());
        }
        // Until doctor hangs up.
        loop {
            app.out.write_all(&chunk)?;
        }
    });
    let output = doctor(&["--endpoint", socket.to_str().unwrap(), "--timeout", "1"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report = text(&output.stdout);
    assert!(report.len() < 16 * 1024, "{} bytes of report", report.len());
    assert!(
        step_line(&report, "initialize").starts_with("  FAIL"),
        "{}",
        report
    );
    assert_eq!(
        report
            .matches("warning: the app sent a line that is not a JSON-RPC message")
            .count(),
        3,
        "{}",
        report
    );
    let counted = report
        .lines()
        .find(|l| l.contains("more lines that are not JSON-RPC messages"))
        .unwrap_or_else(|| panic!("no count of the rest: {}", report));
    let more: u64 = counted
        .trim_start()
        .trim_start_matches("warning: and ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(more > 0, "{}", counted);
}

/// Issue 20, doctor 3: a 15 MiB page of tools is a problem for every CLI
/// (it would fill the model's whole context), reported as one, and the
/// report stays small.
#[test]
fn doctor_fails_a_tool_list_too_large_for_any_cli() {
    let (_dir, socket) = fake_app_in("doctor-huge", |mut app| {
        app.initialize()?;
        let request = app.request().expect("tools/list");
        let mut page = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"tools":["#,
            request["id"]
        );
        let mut n = 0;
        while page.len() < 15 << 20 {
            if n > 0 {
                page.push(',');
            }
            n += 1;
            page.push_str(&format!(
                r#"{{"name":"tool_{}","inputSchema":{{"type":"object"}}}}"#,
                n
            ));
        }
        page.push_str("]}}");
        app.send(&page)?;
        while app.request().is_some() {}
        Ok(())
    });
    let endpoint = socket.to_str().unwrap();
    let output = doctor(&["--endpoint", endpoint]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report = text(&output.stdout);
    assert!(report.len() < 16 * 1024, "{} bytes of report", report.len());
    let line = step_line(&report, "tools/list");
    assert!(line.starts_with("  FAIL"), "{}", report);
    assert!(line.contains(" tools: tool_1, tool_2, "), "{}", line);
    assert!(line.contains("no CLI can use this server"), "{}", line);

    let output = doctor(&["--endpoint", endpoint, "--json"]);
    assert!(
        output.stdout.len() < 256 * 1024,
        "{} bytes of JSON",
        output.stdout.len()
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["failed_step"], "tools/list");
    let count = report["lists"]["tools"]["count"].as_u64().unwrap();
    assert!(count > 100_000, "{}", count);
    assert!(report["lists"]["tools"]["bytes"].as_u64().unwrap() > 14 << 20);
    assert_eq!(report["tools"].as_array().unwrap().len(), 1000);
}

/// Issue 20, doctor 4: replies with `"jsonrpc":"1.0"`, or none, are
/// flagged.
#[test]
fn doctor_flags_replies_that_are_not_jsonrpc_2_0() {
    let (_dir, socket) = fake_app_in("doctor-version", |mut app| {
        let request = app.request().expect("initialize");
        app.send(
            &json!({"jsonrpc": "1.0", "id": request["id"], "result": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "old", "version": "1"}
            }})
            .to_string(),
        )?;
        let request = app.request().expect("tools/list");
        app.send(&json!({"id": request["id"], "result": {"tools": [{"name": "a"}]}}).to_string())?;
        while app.request().is_some() {}
        Ok(())
    });
    let output = doctor(&["--endpoint", socket.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let step = |name: &str| {
        report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    let initialize = step("initialize");
    assert_eq!(initialize["status"], "warning", "{:#}", report);
    assert!(
        initialize["warnings"][0].as_str().unwrap().starts_with(
            r#"the app sent a message with "jsonrpc":"1.0" where MCP requires "jsonrpc":"2.0""#
        ),
        "{:#}",
        initialize
    );
    let tools = step("tools/list");
    assert_eq!(tools["status"], "warning", "{:#}", report);
    assert!(
        tools["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with(r#"the app sent a message with no "jsonrpc" member"#),
        "{:#}",
        tools
    );
}

/// Issue 20, doctor 5: nothing the app sends reaches the terminal as a
/// control character: its name, its tools' names, its stray lines and its
/// error text are escaped in the text report and on stderr.
#[test]
fn doctor_escapes_the_apps_control_characters() {
    let (_dir, socket) = fake_app_in("doctor-escape", |mut app| {
        let request = app.request().expect("initialize");
        app.send("\u{1b}[2J\u{1b}[1;1H  ok    all good\u{7}\r")?;
        app.answer(
            &request,
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}, "prompts": {}},
                "serverInfo": {"name": "evil\u{1b}[2J\u{1b}[H", "version": "\u{9b}31m1\u{202e}"}
            }),
        )?;
        let request = app.request().expect("tools/list");
        app.answer(
            &request,
            json!({"tools": [{"name": "a\u{1b}]0;title\u{7}b"}, {"name": "c\nd"}]}),
        )?;
        let request = app.request().expect("prompts/list");
        let error = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": 1, "message": "no\u{9b}2J\u{85}"}});
        app.send(&error.to_string())?;
        while app.request().is_some() {}
        Ok(())
    });
    let output = doctor(&["--endpoint", socket.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    for (what, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        let printed = text(bytes);
        let raw: Vec<char> = printed
            .chars()
            .filter(|&c| {
                c != '\n'
                    && (c.is_control() || ('\u{2028}'..='\u{206f}').contains(&c) && c != '\u{2026}')
            })
            .collect();
        assert!(raw.is_empty(), "{} has {:?}:\n{}", what, raw, printed);
    }
    let report = text(&output.stdout);
    assert!(report.contains(r"warning: the app sent a line that is not a JSON-RPC message, which a CLI may take as a broken server: \x1b[2J\x1b[1;1H  ok    all good\x07"), "{}", report);
    assert_step_says(
        &report,
        "initialize",
        r"server 'evil\x1b[2J\x1b[H' \u{9b}31m1\u{202e}",
    );
    assert_step_says(&report, "tools/list", r"2 tools: a\x1b]0;title\x07b, c\nd");
    assert_step_says(&report, "prompts/list", r"no\u{9b}2J\u{85}");
}

/// Issue 29, item 7: `doctor --json` carries the app's strings with their
/// C1 controls, DEL, line separators and bidirectional overrides written
/// as JSON escapes, as the text report escapes them: a document an
/// installer prints (or a terminal shows) cannot be steered by the app,
/// and it parses to the very strings the app sent.
#[test]
fn doctor_json_escapes_what_a_terminal_would_obey() {
    let dir = TempDir::new("doctor-json-escape", 0o700);
    let socket = dir.socket();
    const NAME: &str = "evil\u{9b}2J\u{85}\u{2028}\u{2029}\u{7f}\u{202e}\u{2066}";
    fake_app(&socket, |mut app| {
        let request = app.request().expect("initialize");
        app.answer(
            &request,
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": NAME, "version": "\u{1b}[31m1"}
            }),
        )?;
        let request = app.request().expect("tools/list");
        app.answer(&request, json!({"tools": [{"name": NAME}]}))?;
        while app.request().is_some() {}
        Ok(())
    });
    let output = doctor(&["--endpoint", socket.to_str().unwrap(), "--json"]);
    let printed = text(&output.stdout);
    let raw: Vec<char> = printed
        .chars()
        .filter(|&c| {
            c != '\n'
                && (c.is_control()
                    || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
        })
        .collect();
    assert!(raw.is_empty(), "--json printed {:?}:\n{}", raw, printed);
    assert!(
        printed.contains(r"evil\u009b2J\u0085\u2028\u2029\u007f\u202e\u2066"),
        "{}",
        printed
    );
    let report: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(report["server"]["name"], NAME, "{:#}", report);
    assert_eq!(report["server"]["version"], "\u{1b}[31m1");
    assert_eq!(report["tools"][0], NAME);
}

/// Issue 29, seen beside it: a `nextCursor` that comes round again would
/// keep a CLI asking for the same pages for ever; doctor fails the step
/// at the first repeat, naming the cursor, where it used to follow 100
/// pages and pass with one warning.
#[test]
fn doctor_fails_a_list_whose_cursor_comes_round_again() {
    let (_dir, socket) = fake_app_in("doctor-cycle", |mut app| {
        app.initialize()?;
        while let Some(request) = app.request() {
            let next = if request["params"]["cursor"] == "a" {
                "b"
            } else {
                "a"
            };
            app.answer(
                &request,
                json!({"tools": [{"name": "t"}], "nextCursor": next}),
            )?;
        }
        Ok(())
    });
    assert_eq!(
        list_step_failure(&socket, &[]),
        "page 3 of tools/list gives a nextCursor an earlier page gave (\"a\"): \
         a CLI following it would ask for the same pages for ever"
    );
}

/// Issue 29, seen beside it: a tool whose `inputSchema` nests 100,000
/// levels deep passed as ok, but serde_json, which Rust clients such as
/// Codex read every message with, refuses the 128th level: such a CLI
/// gets no tool list at all. Doctor fails the step and says why.
#[test]
fn doctor_fails_a_list_nested_deeper_than_a_cli_reads() {
    let (_dir, socket) = fake_app_in("doctor-deep", |mut app| {
        app.initialize()?;
        let request = app.request().expect("tools/list");
        let depth = 100_000;
        let schema = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        app.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"tools":[{{"name":"deep","inputSchema":{}}}]}}}}"#,
            request["id"], schema
        ))?;
        while app.request().is_some() {}
        Ok(())
    });
    let error = list_step_failure(&socket, &[]);
    assert!(
        error.starts_with("page 1 of tools/list nests arrays and objects 100004 levels deep"),
        "{}",
        error
    );
    assert!(error.contains("refuses more than 127"), "{}", error);
}
