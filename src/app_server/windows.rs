//! Stopping a child on Windows, which has no SIGTERM to ask politely with.

use std::io;

use smol::process::Child;

/// There is no portable polite stop on Windows, so this step is skipped.
pub(super) fn terminate(_child: &mut Child) -> bool {
    false
}

/// Stops the child with `TerminateProcess`.
pub(super) fn kill(child: &mut Child) -> io::Result<()> {
    match child.kill() {
        Ok(()) => Ok(()),
        // It may have exited between our last look and now.
        Err(error) => match child.try_status()? {
            Some(_) => Ok(()),
            None => Err(error),
        },
    }
}
