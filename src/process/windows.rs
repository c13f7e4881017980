//! Stopping a child on Windows, which has neither process groups of the Unix
//! kind nor a polite signal: only the child itself is terminated.

use std::io;

use smol::process::Child;

/// No process group is created; always `false`.
pub(super) fn lead_new_group(_command: &mut std::process::Command) -> bool {
    false
}

/// Never: there are no process groups of the Unix kind.
pub(super) fn leads_group(_child: &mut Child) -> bool {
    false
}

/// There is no portable polite stop on Windows, so this step is skipped.
pub(super) fn terminate(_child: &mut Child, _group: bool) -> bool {
    false
}

/// Stops the child with `TerminateProcess`.
pub(super) fn kill(child: &mut Child, _group: bool) -> io::Result<()> {
    match child.kill() {
        Ok(()) => Ok(()),
        // It may have exited between our last look and now.
        Err(error) => match child.try_status()? {
            Some(_) => Ok(()),
            None => Err(error),
        },
    }
}

/// Never: no group was created.
pub(super) fn group_alive(_id: u32) -> bool {
    false
}

/// Nothing to do without a group.
pub(super) fn terminate_group(_id: u32) {}

/// Nothing to do without a group.
pub(super) fn kill_group(_id: u32) {}
