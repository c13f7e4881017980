//! Real dual-era clients against a legacy server that hangs up on their
//! probe, through the built bridge: rmcp 3.x's client in its `Auto`
//! lifecycle mode, then the Python SDK 2.x client in its default mode
//! (py2_probe.py), each spawning `mcp-bridge mcp-server --endpoint <socket>`
//! as its stdio child, against legacy-app (rmcp 2.x, which ends a session
//! on any request but `ping` before `initialize`).
//!
//! Both clients probe with `server/discover` on the bridge they spawned and
//! wait up to 10 s for an answer. The bridge must answer it at once (-32601,
//! reason `legacy_app`, docs/bridge.md) and take the `initialize` that
//! follows to a new connection, so that each client ends up with a working
//! legacy session: tools/list and a tools/call answered, the whole start
//! well inside the probe budget. The verdict is checked in the bridge's
//! `--log` file (stderr only says the app closed the connection).
//!
//! Usage: `probe <mcp-bridge binary> <python> <py2_probe.py>`. Prints what
//! each client saw, then `N passed, M failed`; exits 0 only if both passed.

use std::error::Error;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp3::model::{CallToolRequestParams, ProtocolVersion};
use rmcp3::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp3::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

type Failure = Box<dyn Error + Send + Sync>;

/// What both clients give a `server/discover` probe before they fall back
/// to `initialize` on their own (rmcp's `DEFAULT_AUTO_DISCOVER_TIMEOUT`,
/// the Python SDK's probe timeout).
const PROBE_BUDGET: Duration = Duration::from_secs(10);

/// A start that took longer than this waited for the probe's timeout
/// instead of getting the bridge's answer: less than half the budget.
const START_LIMIT: Duration = Duration::from_secs(4);

/// Every step waits at most this long: a hung step fails instead of
/// hanging the run.
const STEP_LIMIT: Duration = Duration::from_secs(30);

/// What the bridge's log must show: the probe answered with the verdict.
const VERDICT: &str = "legacy_app";

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.len() != 3 {
        eprintln!("usage: probe <mcp-bridge binary> <python> <py2_probe.py>");
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let dir = std::env::temp_dir().join(format!("legacy-rmcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("a scratch directory");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("an owner-only scratch directory");
    let (mut passed, mut failed) = (0, 0);
    let clients: [(&str, Client); 2] = [
        ("rmcp 3.x, ClientLifecycleMode::Auto", Client::RmcpAuto),
        (
            "Python SDK 2.x, Client(mode='auto')",
            Client::Python(&args[1], &args[2]),
        ),
    ];
    for (index, (name, client)) in clients.iter().enumerate() {
        println!("== {name}");
        let log = dir.join(format!("bridge-{index}.log"));
        match runtime.block_on(run(&args[0], &dir, &log, client)) {
            Ok(()) => {
                println!("{name}: passed");
                passed += 1;
            }
            Err(e) => {
                println!("{name}: FAILED: {e}");
                failed += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("{passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

/// The client under test.
enum Client<'a> {
    RmcpAuto,
    /// The interpreter and the script.
    Python(&'a Path, &'a Path),
}

/// One client session against a fresh legacy-app, then the bridge's log read.
async fn run(bridge: &Path, dir: &Path, log: &Path, client: &Client<'_>) -> Result<(), Failure> {
    let socket = dir.join("app.sock");
    let mut app = App::start(&socket).await?;
    let mut command = Command::new(bridge);
    command.arg("mcp-server").arg("--endpoint").arg(&socket);
    command.args(["--project", "demo", "--requester", "probe"]);
    command.arg("--log").arg(log);
    let outcome = match client {
        Client::RmcpAuto => rmcp_auto(command).await,
        Client::Python(python, script) => python_sdk(python, script, &command).await,
    };
    let _ = app.child.kill().await;
    outcome?;
    let logged = std::fs::read_to_string(log)?;
    if !logged.contains(VERDICT) {
        return Err(format!("the bridge's log does not say {VERDICT}:\n{logged}").into());
    }
    println!("bridge log: the probe was answered {VERDICT}");
    Ok(())
}

/// rmcp's `Auto` client: start (probe, fall back), tools/list, tools/call.
async fn rmcp_auto(command: Command) -> Result<(), Failure> {
    let mode = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    let started = Instant::now();
    let transport = TokioChildProcess::new(command)?;
    let client = step(
        "start (probe, then initialize)",
        ().serve_with_lifecycle(transport, mode),
    )
    .await?;
    let took = started.elapsed();
    println!("rmcp: session started in {} ms", took.as_millis());
    let outcome = async {
        within_budget(took)?;
        let tools = step("tools/list", client.list_all_tools()).await?;
        let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
        println!("rmcp: tools/list -> {names:?}");
        if names != ["echo"] {
            return Err(format!("tools/list gave {names:?}").into());
        }
        let mut arguments = rmcp3::serde_json::Map::new();
        arguments.insert("text".into(), "past the probe".into());
        let call = CallToolRequestParams::new("echo").with_arguments(arguments);
        let result = step("tools/call", client.call_tool(call)).await?;
        let text = result
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone());
        println!("rmcp: tools/call echo -> {text:?}");
        if result.is_error == Some(true) || text.as_deref() != Some("past the probe") {
            return Err(format!("tools/call gave {result:?}").into());
        }
        Ok::<(), Failure>(())
    }
    .await;
    let _ = step("closing the client", client.cancel()).await;
    outcome
}

/// The Python SDK 2.x client (py2_probe.py does the session and says
/// `ok <milliseconds>` when tools/list and tools/call were answered).
async fn python_sdk(python: &Path, script: &Path, bridge: &Command) -> Result<(), Failure> {
    let bridge = bridge.as_std();
    let mut command = Command::new(python);
    command.arg(script).arg(bridge.get_program());
    command.args(bridge.get_args());
    let output = step("the Python client", command.output()).await?;
    let said = String::from_utf8_lossy(&output.stdout);
    print!("{said}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        return Err(format!("the Python client exited with {}", output.status).into());
    }
    let millis: u64 = said
        .lines()
        .find_map(|line| line.strip_prefix("ok "))
        .ok_or("the Python client did not say ok")?
        .trim()
        .parse()?;
    within_budget(Duration::from_millis(millis))
}

/// A start that waited out the probe instead of getting an answer fails.
fn within_budget(took: Duration) -> Result<(), Failure> {
    if took > START_LIMIT {
        return Err(format!(
            "the start took {} ms: the probe was not answered (the client's budget is {} s, \
             this check allows {} s)",
            took.as_millis(),
            PROBE_BUDGET.as_secs(),
            START_LIMIT.as_secs()
        )
        .into());
    }
    Ok(())
}

/// Waits for `future` at most [`STEP_LIMIT`].
async fn step<T, E: Into<Failure>>(
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(STEP_LIMIT, future).await {
        Ok(result) => result.map_err(|e| format!("{what}: {}", e.into()).into()),
        Err(_) => Err(format!("{what}: no answer in {} s", STEP_LIMIT.as_secs()).into()),
    }
}

/// One running legacy-app process.
struct App {
    child: Child,
}

impl App {
    /// Starts legacy-app (the binary beside this one) and waits until it
    /// says it is listening.
    async fn start(socket: &Path) -> Result<App, Failure> {
        let binary = std::env::current_exe()?.with_file_name("legacy-app");
        let mut child = Command::new(binary)
            .arg(socket)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("the app's stdout")?;
        let first = step("the app to listen", async {
            BufReader::new(stdout).lines().next_line().await
        })
        .await?;
        match first {
            Some(line) if line.starts_with("listening on ") => Ok(App { child }),
            other => Err(format!("the app said {other:?} instead of listening").into()),
        }
    }
}
