//! A session of a real MCP client (rmcp's) with tokio-app through the built
//! bridge, exactly as an MCP CLI runs it: the client spawns `mcp-bridge
//! mcp-server --endpoint <socket> --project demo --requester rmcp-client`
//! and talks to it over its stdio. Mid-session the app is stopped three ways
//! (SIGKILL, SIGTERM, Ctrl-C's SIGINT) and started again on the same socket,
//! and after each restart the same client session must go on: tools listed
//! and called, answered by the new app process, which got the same identity
//! with `resumed` set.
//!
//! Usage: `session <mcp-bridge binary> [rounds]` (default 1). Prints what each
//! side saw, then `N passed, M failed`; exits 0 only if every round passed.

#[cfg(unix)]
fn main() {
    unix::main()
}

#[cfg(not(unix))]
fn main() {
    eprintln!("session: this harness stops the app with Unix signals; run it on Unix");
    std::process::exit(2);
}

#[cfg(unix)]
mod unix {
    use std::error::Error;
    use std::future::Future;
    use std::path::{Path, PathBuf};
    use std::process::Stdio;
    use std::time::Duration;

    use rmcp::model::CallToolRequestParams;
    use rmcp::service::RunningService;
    use rmcp::transport::TokioChildProcess;
    use rmcp::{serde_json, RoleClient, ServiceExt};
    use rustix::process::{kill_process, Pid, Signal};
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::{Child, Command};

    type Failure = Box<dyn Error + Send + Sync>;

    /// Every step waits at most this long: a hung step fails the round
    /// instead of hanging the run.
    const STEP_LIMIT: Duration = Duration::from_secs(30);

    const PROJECT: &str = "demo";
    const REQUESTER: &str = "rmcp-client";

    pub(super) fn main() {
        let mut args = std::env::args_os().skip(1);
        let bridge = match args.next() {
            Some(bridge) => PathBuf::from(bridge),
            None => {
                eprintln!("usage: session <mcp-bridge binary> [rounds]");
                std::process::exit(2);
            }
        };
        let rounds: u32 = args
            .next()
            .map(|n| n.to_string_lossy().parse().expect("rounds: a number"))
            .unwrap_or(1);
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        let (mut passed, mut failed) = (0, 0);
        for round in 1..=rounds {
            println!("== round {round} of {rounds}");
            match runtime.block_on(session(&bridge, round)) {
                Ok(()) => passed += 1,
                Err(e) => {
                    println!("round {round} failed: {e}");
                    failed += 1;
                }
            }
        }
        println!("{passed} passed, {failed} failed");
        std::process::exit(if failed == 0 { 0 } else { 1 });
    }

    /// One client session across three restarts of the app.
    async fn session(bridge: &Path, round: u32) -> Result<(), Failure> {
        let dir = std::env::temp_dir().join(format!("tokio-app-{}-{round}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let socket = dir.join("app.sock");
        let outcome = restarts(bridge, &socket).await;
        let _ = std::fs::remove_dir_all(&dir);
        outcome
    }

    async fn restarts(bridge: &Path, socket: &Path) -> Result<(), Failure> {
        let mut app = App::start(socket).await?;
        let mut command = Command::new(bridge);
        command.arg("mcp-server").arg("--endpoint").arg(socket);
        command.args(["--project", PROJECT, "--requester", REQUESTER]);
        let client = step("initialize", ().serve(TokioChildProcess::new(command)?)).await?;
        let outcome = async {
            check(&client, app.pid, false, "first").await?;
            for (signal, name) in [
                (Signal::KILL, "SIGKILL"),
                (Signal::TERM, "SIGTERM"),
                (Signal::INT, "Ctrl-C (SIGINT)"),
            ] {
                app.stop(signal, name).await?;
                app = App::start(socket).await?;
                check(&client, app.pid, true, name).await?;
            }
            Ok::<(), Failure>(())
        }
        .await;
        let _ = step("closing the client", client.cancel()).await;
        app.stop(Signal::TERM, "SIGTERM (the end)").await?;
        outcome
    }

    /// Lists the tools, asks `whoami` and calls `echo`: all must come from the
    /// app process `pid`, which must have seen this client's identity.
    async fn check(
        client: &RunningService<RoleClient, ()>,
        pid: u32,
        resumed: bool,
        when: &str,
    ) -> Result<(), Failure> {
        let tools = step("tools/list", client.list_all_tools()).await?;
        let mut names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
        names.sort_unstable();
        println!("client: tools/list -> {names:?}");
        if names != ["echo", "whoami"] {
            return Err(format!("tools/list gave {names:?}").into());
        }

        let whoami = client.call_tool(CallToolRequestParams::new("whoami"));
        let said = text(step("whoami", whoami).await?)?;
        println!("client: whoami -> {said}");
        let who: serde_json::Value = serde_json::from_str(&said)?;
        let expected = serde_json::json!({
            "project": PROJECT, "requester": REQUESTER, "resumed": resumed, "app_pid": pid,
        });
        if who != expected {
            return Err(format!("whoami said {who}, not {expected}").into());
        }

        let mut arguments = serde_json::Map::new();
        arguments.insert("text".into(), format!("after {when}").into());
        let call = CallToolRequestParams::new("echo").with_arguments(arguments);
        let echoed = text(step("echo", client.call_tool(call)).await?)?;
        println!("client: echo -> {echoed:?}");
        if echoed != format!("after {when}") {
            return Err(format!("echo said {echoed:?}").into());
        }
        Ok(())
    }

    /// The one text a successful tool call answered with.
    fn text(result: rmcp::model::CallToolResult) -> Result<String, Failure> {
        if result.is_error == Some(true) {
            return Err(format!("the tool failed: {result:?}").into());
        }
        match result.content.first().and_then(|c| c.as_text()) {
            Some(text) => Ok(text.text.clone()),
            None => Err(format!("no text in {result:?}").into()),
        }
    }

    /// One running `tokio-app` process.
    struct App {
        child: Child,
        pid: u32,
    }

    impl App {
        /// Starts the app (the `tokio-app` binary beside this one) and waits
        /// until it says it is listening.
        async fn start(socket: &Path) -> Result<App, Failure> {
            let binary = std::env::current_exe()?.with_file_name("tokio-app");
            let mut child = Command::new(binary)
                .arg(socket)
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let pid = child.id().ok_or("the app has no pid")?;
            let stdout = child.stdout.take().ok_or("the app's stdout")?;
            let first = step("the app to listen", async {
                BufReader::new(stdout).lines().next_line().await
            })
            .await?;
            match first {
                Some(line) if line.starts_with("listening on ") => {
                    println!("app {pid}: {line}");
                    Ok(App { child, pid })
                }
                other => Err(format!("the app said {other:?} instead of listening").into()),
            }
        }

        /// Sends `signal` and waits for the exit.
        async fn stop(&mut self, signal: Signal, name: &str) -> Result<(), Failure> {
            let pid = Pid::from_raw(self.pid as i32).ok_or("pid 0")?;
            kill_process(pid, signal)?;
            let status = step("the app to exit", self.child.wait()).await?;
            println!("app {}: stopped with {name}: {status}", self.pid);
            Ok(())
        }
    }

    /// Runs one step, for at most [`STEP_LIMIT`], naming it if it fails.
    async fn step<T, E: Into<Failure>>(
        what: &str,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(STEP_LIMIT, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(format!("{what}: {}", e.into()).into()),
            Err(_) => Err(format!("{what}: no answer within {STEP_LIMIT:?}").into()),
        }
    }
}
