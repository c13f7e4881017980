//! Process groups and signals on Unix.

use std::io;

use rustix::io::Errno;
use rustix::process::{
    getpgid, kill_process, kill_process_group, test_kill_process_group, Pid, Signal,
};
use smol::process::Child;

use crate::ffi;

/// Makes the child `command` spawns lead a new process group; always `true`.
pub(super) fn lead_new_group(command: &mut std::process::Command) -> bool {
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
