//! Process groups and signals on Unix.

use std::io;

use rustix::io::Errno;
use rustix::process::{
    getpgid, kill_process, kill_process_group, test_kill_process_group, Pid, Signal,
};
use smol::process::Child;

#[cfg(not(mcp_bridge_process_group))]
use crate::ffi;

/// Makes the child `command` spawns lead a new process group; always `true`.
///
/// With std's `process_group` (Rust 1.64 on, told by the build script), std
/// still spawns with `posix_spawn`, whose child shares our memory until it
/// execs (`vfork`), and sets the group with the spawn's own attribute. The
/// fallback for Rust 1.63, a `pre_exec` hook, makes std `fork` instead:
/// copying the page tables of the whole parent for every child, then
/// tearing the copy down at its exec, which cost `serve` 0.4 ms of CPU per
/// session, a third of the total.
pub(super) fn lead_new_group(command: &mut std::process::Command) -> bool {
    #[cfg(mcp_bridge_process_group)]
    {
        use std::os::unix::process::CommandExt;
        // Stable since 1.64: only compiled when the build script saw a
        // compiler that has it.
        #[allow(clippy::incompatible_msrv)]
        command.process_group(0);
    }
    #[cfg(not(mcp_bridge_process_group))]
    ffi::unix::lead_new_process_group(command);
    true
}

/// Whether `child` leads its own process group. Only asked before it is
/// reaped: afterwards its pid may already be someone else's.
pub(super) fn leads_group(child: &mut Child) -> bool {
    if !matches!(child.try_status(), Ok(None)) {
        return false;
    }
    match pid(child.id()) {
        Some(pid) => getpgid(Some(pid)) == Ok(pid),
        None => false,
    }
}

/// Sends SIGTERM to the child (its group if `group`); `false` if it could not.
pub(super) fn terminate(child: &mut Child, group: bool) -> bool {
    signal(child, group, Signal::TERM).is_ok()
}

/// Sends SIGKILL to the child (its group if `group`).
pub(super) fn kill(child: &mut Child, group: bool) -> io::Result<()> {
    signal(child, group, Signal::KILL)
}

/// Whether the process group `id` still has a member (a zombie counts).
pub(super) fn group_alive(id: u32) -> bool {
    match pid(id) {
        Some(pid) => test_kill_process_group(pid).is_ok(),
        None => false,
    }
}

/// Sends SIGTERM to the process group `id`, if it still exists.
pub(super) fn terminate_group(id: u32) {
    if let Some(pid) = pid(id) {
        let _ = kill_process_group(pid, Signal::TERM);
    }
}

/// Sends SIGKILL to the process group `id`, if it still exists.
pub(super) fn kill_group(id: u32) {
    if let Some(pid) = pid(id) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}

fn signal(child: &mut Child, group: bool, signal: Signal) -> io::Result<()> {
    let pid = pid(child.id())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid child pid"))?;
    if group {
        // The group's id stays reserved while any member lives, even after
        // the leader was reaped; no such group means there is nothing left.
        return match kill_process_group(pid, signal) {
            Err(Errno::SRCH) => Ok(()),
            result => result.map_err(io::Error::from),
        };
    }
    // Until it is reaped, an exited child stays a zombie that keeps its pid.
    // After reaping, the number may already belong to a stranger, so never
    // signal then.
    if child.try_status()?.is_some() {
        return Ok(());
    }
    kill_process(pid, signal).map_err(io::Error::from)
}

fn pid(id: u32) -> Option<Pid> {
    i32::try_from(id).ok().and_then(Pid::from_raw)
}
