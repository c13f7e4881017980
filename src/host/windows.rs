//! Windows named pipes: not written yet. The named-pipe server side
//! (`PIPE_REJECT_REMOTE_CLIENTS`, overlapped I/O) comes with the Windows
//! work; until then [`bind`] says so instead of pretending.

use std::io;
use std::path::Path;

use smol::Unblock;

use super::Incoming;

pub(super) type Reader = Unblock<std::fs::File>;
pub(super) type Writer = Unblock<std::fs::File>;

/// The pipe server, owned by the accept loop.
pub(super) struct Acceptor;

/// What must be released when the listener drops (nothing, for pipes).
#[derive(Debug)]
pub(super) struct SocketFile;

pub(super) fn bind(_path: &Path) -> io::Result<(Acceptor, SocketFile)> {
    Err(unsupported())
}

impl Acceptor {
    pub(super) async fn accept(&self) -> io::Result<Incoming> {
        Err(unsupported())
    }
}

/// Ctrl+C; not written yet either.
pub(super) struct StopSignals;

impl StopSignals {
    pub(super) fn new() -> io::Result<StopSignals> {
        Err(unsupported())
    }

    pub(super) async fn next(&mut self) -> &'static str {
        futures_lite::future::pending().await
    }
}

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "hosting on a named pipe is not supported yet",
    )
}
