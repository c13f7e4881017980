//! Starting an app-server child; stopping a child spawned some other way.

use std::io;
use std::process::ExitStatus;

use smol::process::{Child, ChildStdin, ChildStdout};

use super::{AppServerError, StderrTail};
use crate::process::{self, GroupChild, SHUTDOWN_GRACE};

/// A spawned app server: the child plus its stdio, ready for NDJSON.
#[derive(Debug)]
pub struct AppServerProcess {
    /// The child, leading its own process group; the group is killed if this is
    /// dropped, but prefer [`GroupChild::shutdown`].
    pub child: GroupChild,
    /// Where requests go, one JSON value per line.
    pub stdin: ChildStdin,
    /// Where responses and notifications come from.
    pub stdout: ChildStdout,
    /// The last bytes of the child's stderr, which is drained in the background for
    /// as long as this tail (or a clone of it) is kept: keep it while the child runs.
    /// Dropping every clone stops the draining and closes the pipe, so that nothing
    /// outlives its owner, even while a grandchild holds the pipe open.
    pub stderr: StderrTail,
}

/// Spawns `command` as an app server called `name` (used in errors), with
/// [`process::spawn_group`]: in a process group of its own, so that stopping it stops
/// everything it started.
///
/// stdin and stdout are piped for NDJSON. stderr is piped too and drained at once into
/// a [`StderrTail`]: left undrained it would block a talkative child, and sent to
/// `/dev/null` a crash would say nothing. Everything else (arguments, environment,
/// working directory) is taken from `command` as given.
///
/// # Errors
///
/// [`AppServerError::Spawn`] naming the app server if it cannot be started, and
/// [`AppServerError::MissingPipe`] if a pipe is missing.
pub fn spawn_app_server(
    command: std::process::Command,
    name: &str,
) -> Result<AppServerProcess, AppServerError> {
    let mut child = process::spawn_group(command).map_err(|error| AppServerError::Spawn {
        name: name.to_string(),
        error,
    })?;
    let missing = |pipe| AppServerError::MissingPipe {
        name: name.to_string(),
        pipe,
    };
    let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
    Ok(AppServerProcess {
        child,
        stdin,
        stdout,
        stderr: StderrTail::drain(stderr),
    })
}

/// Stops a child that was spawned some other way (not by [`spawn_app_server`]) with
/// [`process::shutdown`] and [`SHUTDOWN_GRACE`]: stdin closed, SIGTERM, SIGKILL, always
/// reaped. The name and shape of the original helpers, kept for code written against
/// them.
///
/// # Errors
///
/// As for [`process::shutdown`].
pub async fn shutdown_child(child: &mut Child) -> io::Result<ExitStatus> {
    process::shutdown(child, SHUTDOWN_GRACE).await
}
