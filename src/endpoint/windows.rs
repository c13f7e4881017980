//! Windows named pipes: not written yet (see the Windows issue).

use std::io;
use std::path::Path;
use std::time::Duration;

use smol::Unblock;

pub(super) type Reader = Unblock<std::fs::File>;
pub(super) type Writer = Unblock<std::fs::File>;

pub(super) async fn connect(_path: &Path, _timeout: Duration) -> io::Result<(Reader, Writer)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "named pipes are not supported yet",
    ))
}
