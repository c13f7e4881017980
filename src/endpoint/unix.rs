//! Unix domain sockets, through smol's `UnixStream` (a non-blocking socket
//! registered with async-io's reactor). Both halves are clones of one stream;
//! closing the writer is `shutdown(SHUT_WR)`, a real half-close.

use std::io;
use std::path::Path;
use std::time::Duration;

use smol::net::unix::UnixStream;

pub(super) type Reader = UnixStream;
pub(super) type Writer = UnixStream;

/// One connection attempt. A full listen backlog comes back as
/// `WouldBlock` (EAGAIN) from a non-blocking connect, which the caller
/// retries; everything else is final.
pub(super) async fn connect(path: &Path, _timeout: Duration) -> io::Result<(Reader, Writer)> {
    let stream = UnixStream::connect(path).await?;
    Ok((stream.clone(), stream))
}
