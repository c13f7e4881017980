//! Starting child processes in a process group of their own, and stopping
//! them, with everything they started, without leaving a zombie.
//!
//! Both `serve` (one MCP server per connection) and [`app_server`] (one
//! app-server per client) run children that start children of their own:
//! `npx` starts `node`, `sh -c` starts whatever its script runs. Signalling
//! only the child leaves those grandchildren running, re-parented to init, for
//! ever if they ignore SIGTERM or block on a pipe. So on Unix every child
//! spawned here leads a new process group, and stopping it signals the whole
//! group. (Built with Rust 1.64 or later, std's `CommandExt::process_group`
//! does it, and the child is still spawned with `posix_spawn`; for this
//! crate's minimum, 1.63, the FFI boundary module installs the equivalent
//! `setpgid(0, 0)` itself, in `pre_exec`, which makes std `fork` the whole
//! parent instead, a cost per child. A child in its own group no longer
//! receives the terminal's Ctrl+C, which is what we want: its parent decides
//! when it stops. If the parent dies without stopping it, the child still
//! sees end of file on its stdin, which is how stdio servers know to exit.)
//!
//! The stop sequence is the one the MCP specification asks of stdio clients:
//!
//! 1. close the child's stdin and give it [`SHUTDOWN_GRACE`] (or the grace
//!    the caller chose) to exit, which a well-behaved server does at end of
//!    input;
//! 2. send SIGTERM (to the group) and give it the grace again;
//! 3. send SIGKILL (to the group), and reap the child.
//!
//! When the child itself is gone but members of its group are not (a helper
//! that ignores SIGTERM, or one left running when its parent exited), they get
//! SIGTERM, then SIGKILL after the grace, so nothing of the group outlives the
//! shutdown. Signalling the group after the child was reaped is safe: the
//! group's id (the child's pid) stays reserved while any member lives, and a
//! group with no member left is not signalled. (Only a group that empties
//! between that check and the signal, and whose id is recycled in that instant
//! by another new group, could be mistaken for it.)
//!
//! On Windows the group is a job object (see `process/windows.rs`): the
//! child and everything it starts run in a job that ends with its last
//! handle, ours, and there is no polite signal: after the stdin grace the
//! whole job is terminated.
//!
//! ```
//! # #[cfg(unix)] fn main() -> std::io::Result<()> {
//! use mcp_bridge::process::spawn_group;
//! use std::time::Duration;
//!
//! smol::block_on(async {
//!     // A server that starts a helper of its own, which ignores SIGTERM.
//!     let mut command = std::process::Command::new("sh");
//!     command.args(["-c", "trap '' TERM; sleep 100 & wait"]);
//!     let mut child = spawn_group(command)?;
//!     // ... relay over child.stdin / child.stdout, drain child.stderr ...
//!
//!     // stdin closed, SIGTERM, then SIGKILL to the whole group: the helper goes
//!     // too. (A real caller would give each step `SHUTDOWN_GRACE`.)
//!     let status = child.shutdown(Duration::from_millis(100)).await?;
//!     assert!(!status.success());
//!     Ok(())
//! })
//! # }
//! # #[cfg(not(unix))] fn main() {}
//! ```
//!
//! [`app_server`]: crate::app_server

use std::fmt;
use std::future::Future;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use smol::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use smol::{Task, Timer};

use crate::wait::{self, Stopped};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

/// How long a child gets after each polite step of a shutdown (closing its
/// stdin, then SIGTERM) before the next, firmer one: 1 second.
///
/// A stdio server that sees end of file usually exits within milliseconds;
/// one that needs longer than a second to flush is rare, and every shutdown
/// of a stuck child costs twice this.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How often a shutdown checks whether the members of a group that outlived
/// its leader have gone. They are not our children, so no exit event reaches
/// us; 10 ms is short beside any grace and costs one `kill(2)` each time.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// Spawns `command` with its stdin, stdout and stderr piped, leading a new
/// process group of its own on Unix.
///
/// Everything else (arguments, environment, working directory) is taken from
/// `command` as given. The returned [`GroupChild`] holds the three pipes; take
/// them out of its fields. Dropping it kills the child and its group, so an
/// abandoned child does not outlive its owner; [`GroupChild::shutdown`] stops
/// it politely first.
///
/// # Errors
///
/// If the operating system cannot start the command.
pub fn spawn_group(mut command: std::process::Command) -> io::Result<GroupChild> {
    let group = platform::lead_new_group(&mut command);
    let mut command = Command::from(command);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    // Created suspended on Windows: put in its job, then resumed.
    #[cfg(windows)]
    platform::contain(&child)?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (exit, watcher) = ExitWatch::start(&mut child);
    Ok(GroupChild {
        stdin,
        stdout,
        stderr,
        id: child.id(),
        child,
        group,
        exit,
        _watcher: watcher,
        stopped: false,
    })
}

/// A child started by [`spawn_group`]: on Unix it leads its own process group,
/// so stopping it stops everything it started.
///
/// Its exit can be awaited by any number of tasks at once through
/// [`exited`](Self::exited) (one background task waits for it and shares the
/// outcome), so a task that watches for a crash and a later shutdown never
/// compete for the same wake-up.
pub struct GroupChild {
    /// The child's stdin, until taken.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout, until taken.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr, until taken. Drain it: a child whose stderr pipe
    /// fills up stops at its next log line.
    pub stderr: Option<ChildStderr>,
    id: u32,
    child: Child,
    /// Whether the child leads its own group (a job object on Windows).
    group: bool,
    exit: ExitWatch,
    _watcher: Task<()>,
    /// Set once a shutdown completed, so that dropping does not signal again.
    stopped: bool,
}

impl GroupChild {
    /// The child's process id, which on Unix is also its process group's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Completes with the child's exit status once it has exited (and been
    /// reaped). Any number of these may wait at once, before or during a
    /// [`shutdown`](Self::shutdown).
    ///
    /// # Errors
    ///
    /// If the operating system could not report the exit.
    pub fn exited(&self) -> impl Future<Output = io::Result<ExitStatus>> + Send + 'static {
        self.exit.wait()
    }

    /// Stops the child as the module documentation describes (stdin closed,
    /// SIGTERM, SIGKILL, each step after `grace`; then the rest of its group)
    /// and returns its exit status. Returns at once, after stopping what is
    /// left of the group, if the child has already exited.
    ///
    /// # Errors
    ///
    /// If the operating system refuses to signal or wait for the child; it is
    /// then killed when this is dropped.
    pub async fn shutdown(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        self.shutdown_since(Instant::now(), grace).await
    }

    /// [`shutdown`](Self::shutdown) for a caller that took the child's
    /// stdin out and closed it itself, at `closed`: the first grace counts
    /// from then, not from this call, so a child whose stdin was closed a
    /// grace ago gets SIGTERM at once. (`serve` closes a child's stdin when
    /// its bridge disconnects, then relays the child's last replies for the
    /// bridge's drain; that drain is the first grace, not a second before
    /// it.)
    ///
    /// # Errors
    ///
    /// As [`shutdown`](Self::shutdown).
    pub async fn shutdown_since(
        &mut self,
        closed: Instant,
        grace: Duration,
    ) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        let exit = self.exit.clone();
        let first = grace.saturating_sub(closed.elapsed());
        let status = stop(&mut self.child, self.group, first, grace, move |_| {
            exit.wait()
        })
        .await?;
        self.stopped = true;
        Ok(status)
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        // The child itself is also killed by `kill_on_drop`; this reaches the
        // rest of its group.
        if self.group && !self.stopped && platform::group_alive(self.id) {
            platform::kill_group(self.id);
        }
    }
}

impl fmt::Debug for GroupChild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupChild")
            .field("id", &self.id)
            .field("group", &self.group)
            .field("exit", &self.exit.now().map(|status| status.ok()))
            .finish()
    }
}

/// Stops any child the same way as [`GroupChild::shutdown`], and reaps it.
///
/// For a child that was not spawned by [`spawn_group`]: if it leads its own
/// process group (spawned through `setsid`, say) and has not been reaped yet,
/// its group is stopped with it; otherwise only the child is signalled, and
/// never after it was reaped, since its pid may then belong to a stranger.
/// stdin is closed if `child.stdin` still holds it; a stdin taken out earlier
/// must already be dropped by the caller.
///
/// # Errors
///
/// If the operating system refuses to signal or wait for the child. It is then
/// left to the child's kill-on-drop, if it was spawned with one.
pub async fn shutdown(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    let group = platform::leads_group(child);
    stop(child, group, grace, grace, Child::status).await
}

/// The stop sequence, for a child whose exit `exited` waits for: `first`
/// after its stdin is closed (what is left of the first grace), then
/// `grace` after SIGTERM.
async fn stop<W, F>(
    child: &mut Child,
    group: bool,
    first: Duration,
    grace: Duration,
    mut exited: W,
) -> io::Result<ExitStatus>
where
    W: FnMut(&mut Child) -> F,
    F: Future<Output = io::Result<ExitStatus>>,
{
    drop(child.stdin.take());
    let id = child.id();
    let mut status = wait::timeout(first, exited(child)).await.transpose()?;
    let mut terminated = false;
    if status.is_none() && platform::terminate(child, group) {
        terminated = true;
        status = wait::timeout(grace, exited(child)).await.transpose()?;
    }
    let status = match status {
        Some(status) => status,
        None => {
            platform::kill(child, group)?;
            exited(child).await?
        }
    };
    if group {
        stop_leftovers(id, terminated, grace).await;
    }
    Ok(status)
}

/// Stops whatever is left of the group `id` once its leader has exited:
/// SIGTERM (unless the group already had it), then SIGKILL after `grace`, and
/// waits (up to `grace` again) for the group to empty.
async fn stop_leftovers(id: u32, terminated: bool, grace: Duration) {
    if !platform::group_alive(id) {
        return;
    }
    if !terminated {
        platform::terminate_group(id);
    }
    if group_gone_within(id, grace).await {
        return;
    }
    platform::kill_group(id);
    group_gone_within(id, grace).await;
}

/// Whether the group `id` has no member left (a member that is a zombie not
/// yet reaped by its new parent still counts) within `limit`.
async fn group_gone_within(id: u32, limit: Duration) -> bool {
    let gone = async {
        while platform::group_alive(id) {
            Timer::after(GROUP_POLL).await;
        }
    };
    wait::timeout(limit, gone).await.is_some()
}

/// The one wait for a child's exit, shared by everyone who asks.
///
/// Two tasks polling the same child's exit compete for one wake-up slot in
/// the reactor and wake each other in turn, so exactly one task waits and the
/// others wait for it to say so.
#[derive(Clone, Debug)]
struct ExitWatch {
    status: Arc<Mutex<Option<Outcome>>>,
    known: Stopped,
}

/// How waiting for the exit ended; an `io::Error` is kept as its kind and text, since
/// it cannot be cloned for each waiter.
type Outcome = Result<ExitStatus, (io::ErrorKind, String)>;

impl ExitWatch {
    fn start(child: &mut Child) -> (ExitWatch, Task<()>) {
        let exit = child.status();
        let (fire, known) = wait::stop_signal();
        let watch = ExitWatch {
            status: Arc::new(Mutex::new(None)),
            known,
        };
        let slot = watch.status.clone();
        let watcher = crate::spawn(async move {
            let outcome = exit
                .await
                .map_err(|error| (error.kind(), error.to_string()));
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
            drop(fire);
        });
        (watch, watcher)
    }

    fn now(&self) -> Option<io::Result<ExitStatus>> {
        let status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        status.as_ref().map(|outcome| match outcome {
            Ok(status) => Ok(*status),
            Err((kind, text)) => Err(io::Error::new(*kind, text.clone())),
        })
    }

    fn wait(&self) -> impl Future<Output = io::Result<ExitStatus>> + Send + 'static {
        let watch = self.clone();
        async move {
            watch.known.wait().await;
            watch.now().unwrap_or_else(|| {
                // Only when the watcher was cancelled, which dropping the child does.
                Err(io::Error::new(
                    io::ErrorKind::Other,
                    "the child's exit was no longer watched",
                ))
            })
        }
    }
}
