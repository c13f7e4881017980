//! Unix specifics of `serve`: its stop requests, finding its command, and
//! its limit of open files.
//!
//! Each session takes four descriptors (the connection and the command's
//! three pipes), and up to [`MAX_PENDING`](crate::host::MAX_PENDING)
//! peers may wait for their handshake, so the usual soft limit of 1,024
//! would refuse bridges long before `--max-connections` does. serve raises
//! its soft limit to the hard one at start ([`raise_descriptor_limit`]),
//! but at most to [`DESCRIPTOR_CEILING`]: the commands it runs inherit it,
//! and some programs close every descriptor up to the limit when they
//! start, which at the billion some systems allow takes minutes. At the
//! limit all the same, the listener drops the oldest silent peer (or lets
//! a spare descriptor go) to take the next connection, so a bridge is
//! served or refused at once (`host/accept.rs`).
//!
//! Stop requests are SIGINT, SIGTERM and SIGHUP, caught with async-signal
//! (smol's own crate), which turns them into a stream on the reactor.
//! SIGHUP is a stop request too: a terminal closing or a supervisor's "hang
//! up" must end in the same clean shutdown as SIGTERM, not leave the socket
//! file behind.
//!
//! The command is found the way `execvp` finds it (std's `Command` runs it
//! that way): a name with a `/` is a path; any other name is looked for in
//! each directory of `PATH`, an empty entry meaning the current directory.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use futures_lite::StreamExt;

/// Where the command is looked for when `PATH` is not set: glibc's default
/// and musl's together, so a command either would find is not refused.
const DEFAULT_PATH: &str = "/usr/local/bin:/bin:/usr/bin";

/// The most serve raises its soft limit of open files to: 64 Ki, room
/// for a thousand sessions and every pending peer, and a limit the commands
/// it runs (which inherit it) are used to.
pub(super) const DESCRIPTOR_CEILING: u64 = 64 * 1024;

/// Raises the soft limit of open files to the hard one, at most to
/// [`DESCRIPTOR_CEILING`], never lowering it. Best effort: where it cannot
/// be raised, serve goes on with what it has.
pub(super) fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let ceiling = limit
        .maximum
        .map_or(DESCRIPTOR_CEILING, |hard| hard.min(DESCRIPTOR_CEILING));
    if limit.current.map_or(false, |soft| soft < ceiling) {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(ceiling),
                maximum: limit.maximum,
            },
        );
    }
}

/// SIGINT, SIGTERM and SIGHUP as stop requests.
pub(super) struct StopSignals(async_signal::Signals);

impl StopSignals {
    pub(super) fn new() -> io::Result<StopSignals> {
        use async_signal::Signal;
        async_signal::Signals::new([Signal::Int, Signal::Term, Signal::Hup]).map(StopSignals)
    }

    pub(super) async fn next(&mut self) -> &'static str {
        loop {
            match self.0.next().await {
                Some(Ok(async_signal::Signal::Int)) => return "SIGINT",
                Some(Ok(async_signal::Signal::Hup)) => return "SIGHUP",
                Some(Ok(_)) => return "SIGTERM",
                // Interrupted reads of the self-pipe: wait on.
                Some(Err(_)) => continue,
                // Never ends; treat an end like a request to stop.
                None => return "the end of the signal stream",
            }
        }
    }
}

/// Checks that `program` names an executable file, as a path or on `PATH`.
pub(super) fn find_command(program: &OsStr) -> io::Result<()> {
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the command is empty",
        ));
    }
    if program.as_bytes().contains(&b'/') {
        return executable(Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    if std::env::split_paths(&path).any(|dir| executable(&dir.join(program)).is_ok()) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no executable file of that name in any directory of PATH",
    ))
}

/// `Ok` if `path` is a file this process may execute.
fn executable(path: &Path) -> io::Result<()> {
    if !fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a file",
        ));
    }
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK)
        .map_err(|_| io::Error::new(io::ErrorKind::PermissionDenied, "it is not executable"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_like_execvp_finds_them() {
        assert!(find_command(OsStr::new("sh")).is_ok());
        assert!(find_command(OsStr::new("/bin/sh")).is_ok());
        let missing = find_command(OsStr::new("mcp-bridge-no-such-command")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let path = find_command(OsStr::new("/nonexistent/server")).unwrap_err();
        assert_eq!(path.kind(), io::ErrorKind::NotFound);
        let dir = find_command(OsStr::new("/")).unwrap_err();
        assert_eq!(dir.to_string(), "it is not a file");
        assert!(find_command(OsStr::new("")).is_err());
    }
}
