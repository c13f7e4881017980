//! Stopping children and everything they started: `process::spawn_group` and the
//! shutdown sequence, against real processes (`cat`, `sleep`, `sh` scripts).
#![cfg(unix)]
#![cfg(any(feature = "serve", feature = "app-server"))]

mod support;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{assert_reaped, is_running, stops_running, within, HANG_GUARD};

use futures_lite::io::{AsyncBufReadExt, BufReader};
use futures_lite::StreamExt;
use mcp_bridge::process::{self, spawn_group, GroupChild};
use rustix::process::Signal;

/// The grace when a step is expected to be ignored, so the test does not wait long.
const SHORT_GRACE: Duration = Duration::from_millis(100);

fn sh(script: &str) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(script);
    command
}

/// The first line the child writes to stdout (a pid, or "ready").
async fn first_line(child: &mut GroupChild) -> String {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    within("the first line", lines.next())
        .await
        .expect("a line")
        .expect("readable")
}

/// A child that exits at end of input is reaped after the first step, never signalled.
#[test]
fn a_child_that_exits_at_end_of_input_is_stopped_by_closing_stdin() {
    smol::block_on(async {
        let mut child = spawn_group(Command::new("cat")).unwrap();
        let pid = child.id();

        let status = within("shutdown", child.shutdown(HANG_GUARD))
            .await
            .unwrap();

        assert!(status.success(), "{:?}", status);
        assert_reaped(pid);
    })
}

/// A child that ignores end of input is asked to stop with SIGTERM.
#[test]
fn a_child_that_ignores_end_of_input_gets_sigterm() {
    smol::block_on(async {
        let mut command = Command::new("sleep");
        command.arg("60");
        let mut child = spawn_group(command).unwrap();
        let pid = child.id();

        let status = within("shutdown", child.shutdown(SHORT_GRACE))
            .await
            .unwrap();

        assert_eq!(status.signal(), Some(Signal::TERM.as_raw()), "{:?}", status);
        assert_reaped(pid);
    })
}

/// A child that ignores SIGTERM as well is killed.
#[test]
fn a_child_that_ignores_sigterm_is_killed() {
    smol::block_on(async {
        let mut child =
            spawn_group(sh("trap '' TERM; echo ready; while :; do sleep 0.05; done")).unwrap();
        let pid = child.id();
        // The trap is in place once the child says so.
        assert_eq!(first_line(&mut child).await, "ready");

        let status = within("shutdown", child.shutdown(SHORT_GRACE))
            .await
            .unwrap();

        assert_eq!(status.signal(), Some(Signal::KILL.as_raw()), "{:?}", status);
        assert_reaped(pid);
    })
}

/// The child leads its own process group, so a helper it started that ignores SIGTERM
/// is killed with it; signalled alone, the child would leave the helper running,
/// re-parented to init.
#[test]
fn a_helper_that_ignores_sigterm_is_killed_with_the_group() {
    smol::block_on(async {
        let mut child = spawn_group(sh("trap '' TERM; sleep 100 & echo $!; wait")).unwrap();
        let pid = child.id();
        let helper: u32 = first_line(&mut child).await.parse().unwrap();

        let status = within("shutdown", child.shutdown(SHORT_GRACE))
            .await
            .unwrap();

        assert_eq!(status.signal(), Some(Signal::KILL.as_raw()), "{:?}", status);
        assert_reaped(pid);
        stops_running(helper).await;
    })
}

/// A child that exits at once, leaving a helper behind: the shutdown finds the child
/// gone and stops what is left of its group.
#[test]
fn a_helper_left_running_by_an_exited_child_is_stopped() {
    smol::block_on(async {
        let mut child = spawn_group(sh("sleep 100 & echo $!")).unwrap();
        let helper: u32 = first_line(&mut child).await.parse().unwrap();
        within("the exit", child.exited()).await.unwrap();
        assert!(is_running(helper), "the helper outlives the child");

        let status = within("shutdown", child.shutdown(HANG_GUARD))
            .await
            .unwrap();

        assert!(status.success(), "{:?}", status);
        stops_running(helper).await;
    })
}

/// An abandoned child takes its group with it.
#[test]
fn dropping_a_group_child_kills_its_group() {
    smol::block_on(async {
        let mut child = spawn_group(sh("sleep 100 & echo $!; wait")).unwrap();
        let helper: u32 = first_line(&mut child).await.parse().unwrap();

        drop(child);

        stops_running(helper).await;
    })
}

/// Watching for the exit and shutting down at the same time must not compete for the
/// one exit notification: every waiter learns the same status.
#[test]
fn many_waiters_and_a_shutdown_all_see_the_exit() {
    smol::block_on(async {
        let mut child = spawn_group(sh("read -r line; exit 4")).unwrap();
        let waiters: Vec<_> = (0..3).map(|_| smol::spawn(child.exited())).collect();

        let status = within("shutdown", child.shutdown(HANG_GUARD))
            .await
            .unwrap();

        assert_eq!(status.code(), Some(4));
        for waiter in waiters {
            assert_eq!(within("a waiter", waiter).await.unwrap().code(), Some(4));
        }
    })
}

/// `process::shutdown` for a child spawned elsewhere: one that leads its own group
/// (through `setsid`) has its group signalled too.
#[cfg(target_os = "linux")]
#[test]
fn shutdown_signals_the_group_of_a_child_spawned_elsewhere_that_leads_one() {
    smol::block_on(async {
        let mut child = smol::process::Command::new("setsid")
            .args(["sh", "-c", "sleep 60 & echo $!; wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let helper: u32 = within("the pid", lines.next())
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();

        let status = within("shutdown", process::shutdown(&mut child, SHORT_GRACE))
            .await
            .unwrap();

        assert_eq!(status.signal(), Some(Signal::TERM.as_raw()), "{:?}", status);
        stops_running(helper).await;
    })
}
