//! Stopping a child on Unix: signals, to its process group when it leads one.

use std::io;

use rustix::process::{getpgid, kill_process, kill_process_group, Pid, Signal};
use smol::process::Child;

/// Asks the child to stop with SIGTERM; `false` if the signal could not be sent.
pub(super) fn terminate(child: &mut Child) -> bool {
    signal(child, Signal::TERM).is_ok()
}

/// Stops the child with SIGKILL.
pub(super) fn kill(child: &mut Child) -> io::Result<()> {
    signal(child, Signal::KILL)
}

fn signal(child: &mut Child, signal: Signal) -> io::Result<()> {
    // Until it is reaped, an exited child stays a zombie that keeps its pid. After
    // reaping, the number may already belong to a stranger, so never signal then.
    if child.try_status()?.is_some() {
        return Ok(());
    }
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid child pid"))?;
    // A child that leads its own group (spawned with `process_group(0)` or `setsid`)
    // takes its helpers with it; a child in our group is signalled alone, since the
    // group is ours.
    let result = match getpgid(Some(pid)) {
        Ok(group) if group == pid => kill_process_group(pid, signal),
        _ => kill_process(pid, signal),
    };
    result.map_err(io::Error::from)
}
