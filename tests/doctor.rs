//! `mcp-bridge doctor` through the built binary, against hosts built on the
//! crate's own `host::Listener` (healthy, silent, refusing) and against
//! endpoints that are not there.
#![cfg(unix)]
#![cfg(all(feature = "doctor", feature = "host"))]

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use futures_lite::{future, StreamExt};
use mcp_bridge::host::Listener;
use serde_json::{json, Value};

use support::{TempDir, BIN, HANG_GUARD};

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
    let mut child = Command::new(BIN)
        .arg("doctor")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("doctor {:?} still running after {:?}", args, HANG_GUARD);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
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

    assert!(step_line(&report, "endpoint").contains("a socket, owner uid"));
    assert!(step_line(&report, "endpoint").contains("mode 0600"));
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
    assert!(
        step_line(&report, "server user").contains(&me),
        "{}",
        report
    );
    assert!(step_line(&report, "initialize")
        .contains("protocol 2025-06-18, server 'test host' 1.2.3; capabilities: prompts, tools"));
    assert!(step_line(&report, "tools/list").contains("2 tools: echo, add"));
    assert!(step_line(&report, "prompts/list").contains("1 prompt: greet"));
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
    assert!(
        step_line(&report, "endpoint").contains(&expected),
        "{}",
        report
    );
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
    // Still the configuration to paste, for the installer to write.
    assert!(report.contains("claude mcp add app -- "), "{}", report);
}

/// A host that accepts but never answers `initialize` costs `--timeout`,
/// not forever, and is left with a closed connection, not a half-open one.
#[test]
fn doctor_gives_up_on_a_host_that_never_answers_initialize() {
    let dir = TempDir::new("doctor-silent", 0o700);
    let socket = dir.socket();
    let host = Host::start(&socket, Behaviour::Silent);
    let output = doctor(&[
        "--endpoint",
        socket.to_str().unwrap(),
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
    assert!(
        step_line(&report, "initialize").contains(&format!(
            "the app at '{}' refused this client: no room for you",
            socket.display()
        )),
        "{}",
        report
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
