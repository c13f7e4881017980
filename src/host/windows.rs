//! Windows named pipes (`\\.\pipe\NAME`), served by
//! [`PipeListener`]: the same server code the bridge's own Windows tests
//! use, so there is one implementation to get right.
//!
//! # Who gets in
//!
//! Unix has two gates, the socket file's mode and the peer's uid. A pipe has
//! one, and it is the stronger kind: its DACL grants access to our own user
//! only (see [`PipeListener`]), and the system checks it when the peer opens
//! the pipe, before anything reaches us. So every peer accept sees is ours;
//! `PIPE_REJECT_REMOTE_CLIENTS` keeps other machines out as well.
//!
//! # Nothing to clean up, nothing stale
//!
//! A pipe exists while some handle to it is open, and vanishes with the
//! last one: a crashed app leaves nothing behind, and dropping the listener
//! frees the name for the next bind. Not at the very instant of the drop,
//! though: the waiting instance is closed by the pool thread that waits on
//! it, once the drop has stopped that wait, a moment later; a bind in that
//! moment fails. A live pipe of the same name makes `bind` fail with
//! `AddrInUse`.

use std::io;
use std::path::Path;

use windows_sys::Win32::Foundation::{
    ERROR_COMMITMENT_LIMIT, ERROR_NONPAGED_SYSTEM_RESOURCES, ERROR_NOT_ENOUGH_MEMORY,
    ERROR_NOT_ENOUGH_QUOTA, ERROR_NO_SYSTEM_RESOURCES, ERROR_OUTOFMEMORY,
    ERROR_PAGED_SYSTEM_RESOURCES, ERROR_TOO_MANY_OPEN_FILES,
};

use super::Accepted;
use crate::endpoint::{self, PipeListener};

pub(super) type Reader = endpoint::Reader;
pub(super) type Writer = endpoint::Writer;

/// The pipe server, owned by the accept loop.
pub(super) struct Acceptor(PipeListener);

/// What must be released when the listener drops: nothing, since a pipe
/// goes away with its last handle.
#[derive(Debug)]
pub(super) struct SocketFile;

pub(super) fn bind(path: &Path) -> io::Result<(Acceptor, SocketFile)> {
    Ok((Acceptor(PipeListener::bind(path)?), SocketFile))
}

/// The most peers that may wait for their handshake at once: `most`
/// (handles are not counted against a small per-process limit here).
pub(super) fn pending_limit(most: usize) -> usize {
    most
}

/// Ready at once: a pipe's overlapped read needs its buffer up front.
pub(super) fn readable(
    _reader: &Reader,
) -> impl std::future::Future<Output = io::Result<()>> + Send + 'static {
    futures_lite::future::ready(Ok(()))
}

/// Never completes: there is no hang-up watcher on Windows yet, so a
/// session ends when its relay sees the pipe close, which it does not
/// while it is stuck writing to a command that stopped reading.
pub(super) fn hangup(_reader: &Reader) -> impl std::future::Future<Output = ()> + Send + 'static {
    futures_lite::future::pending()
}

impl Acceptor {
    pub(super) async fn accept(&self) -> io::Result<Accepted> {
        match self.0.accept().await {
            Ok((reader, writer)) => Ok(Accepted::Peer(Box::new((reader, writer)))),
            Err(e) if is_transient(&e) => Ok(Accepted::Retry(e)),
            Err(e) => Err(e),
        }
    }
}

/// Accept errors that say nothing about the pipe itself: the system is out
/// of memory, handles or quota for the moment.
fn is_transient(e: &io::Error) -> bool {
    let transient = [
        ERROR_TOO_MANY_OPEN_FILES,
        ERROR_NOT_ENOUGH_MEMORY,
        ERROR_OUTOFMEMORY,
        ERROR_NO_SYSTEM_RESOURCES,
        ERROR_NONPAGED_SYSTEM_RESOURCES,
        ERROR_PAGED_SYSTEM_RESOURCES,
        ERROR_COMMITMENT_LIMIT,
        ERROR_NOT_ENOUGH_QUOTA,
    ];
    match e.raw_os_error() {
        Some(code) => transient.iter().any(|&t| t as i32 == code),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors() {
        let code = |c: u32| io::Error::from_raw_os_error(c as i32);
        assert!(is_transient(&code(ERROR_NO_SYSTEM_RESOURCES)));
        assert!(is_transient(&code(ERROR_TOO_MANY_OPEN_FILES)));
        assert!(!is_transient(&code(
            windows_sys::Win32::Foundation::ERROR_ACCESS_DENIED
        )));
        assert!(!is_transient(&io::Error::new(io::ErrorKind::Other, "x")));
    }
}
