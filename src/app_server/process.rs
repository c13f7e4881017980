//! Starting an app-server child and stopping it without leaving a zombie.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures_lite::future;
use smol::process::{Child, ChildStdin, ChildStdout, Command};
use smol::Timer;

use super::{platform, AppServerError, StderrTail};

/// How long [`shutdown_child`] gives the child after each polite step (closing stdin,
/// then SIGTERM) before it escalates.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// A spawned app-server: the child plus its stdio, ready for NDJSON.
#[derive(Debug)]
pub struct RuntimeProcess {
    /// The child; it is killed if dropped, but prefer [`shutdown_child`].
    pub child: Child,
    /// Where requests go, one JSON value per line.
    pub stdin: ChildStdin,
    /// Where responses and notifications come from.
    pub stdout: ChildStdout,
    /// The last bytes of the child's stderr, which is drained in the background.
    pub stderr: StderrTail,
}

/// Spawns `command` as an app-server runtime called `runtime_name` (used in errors).
///
/// stdin and stdout are piped for NDJSON. stderr is piped too and drained at once into
/// a [`StderrTail`]: left undrained it would block a talkative child, and sent to
/// `/dev/null` a crash would say nothing. The child is killed if the returned
/// [`Child`] is dropped, so an abandoned runtime does not outlive us.
///
/// Everything else (arguments, environment, working directory, a new process group
/// through `CommandExt::process_group(0)` on Rust 1.64+) is taken from `command` as
/// given.
///
/// # Errors
///
/// [`AppServerError::Spawn`] naming the runtime if it cannot be started, and
/// [`AppServerError::MissingPipe`] if a pipe is missing.
pub fn spawn_runtime_command(
    command: std::process::Command,
    runtime_name: &str,
) -> Result<RuntimeProcess, AppServerError> {
    let mut command = Command::from(command);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| AppServerError::Spawn {
        runtime: runtime_name.to_string(),
        source,
    })?;
    let missing = |pipe| AppServerError::MissingPipe {
        runtime: runtime_name.to_string(),
        pipe,
    };
    let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
    Ok(RuntimeProcess {
        child,
        stdin,
        stdout,
        stderr: StderrTail::drain(stderr),
    })
}

/// Stops `child` politely if it can and forcibly if it must, then reaps it;
/// [`SHUTDOWN_GRACE`] is allowed for each polite step.
///
/// See [`shutdown_child_with_grace`].
///
/// # Errors
///
/// As for [`shutdown_child_with_grace`].
pub async fn shutdown_child(child: &mut Child) -> io::Result<ExitStatus> {
    shutdown_child_with_grace(child, SHUTDOWN_GRACE).await
}

/// Stops `child` the way the MCP specification asks of stdio clients, and reaps it.
///
/// 1. Close its stdin (if `child.stdin` still holds it; a stdin that was taken out,
///    as [`spawn_runtime_command`] does, must already be dropped by the caller) and
///    wait up to `grace` for it to exit, which a well-behaved app-server does at EOF.
/// 2. On Unix, send SIGTERM and wait up to `grace` again. If the child leads its own
///    process group, the signal goes to the whole group, so helpers it started stop
///    too.
/// 3. Kill it (SIGKILL, again to the group if it leads one; `TerminateProcess` on
///    Windows) and wait for it.
///
/// The child is reaped in every case, so no zombie remains.
///
/// # Errors
///
/// If the operating system refuses to kill or wait for the child. The child is then
/// left to the kill-on-drop of [`spawn_runtime_command`].
pub async fn shutdown_child_with_grace(
    child: &mut Child,
    grace: Duration,
) -> io::Result<ExitStatus> {
    drop(child.stdin.take());
    if let Some(status) = wait_within(child, grace).await? {
        return Ok(status);
    }
    if platform::terminate(child) {
        if let Some(status) = wait_within(child, grace).await? {
            return Ok(status);
        }
    }
    platform::kill(child)?;
    child.status().await
}

async fn wait_within(child: &mut Child, limit: Duration) -> io::Result<Option<ExitStatus>> {
    let status = child.status();
    future::or(async { status.await.map(Some) }, async {
        Timer::after(limit).await;
        Ok(None)
    })
    .await
}
