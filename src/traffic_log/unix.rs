//! Unix specifics of the log file: created with mode 0600, never wider.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rustix::fs::OFlags;

/// Owner read and write, nobody else: the log holds the user's traffic.
const PRIVATE: u32 = 0o600;

/// Opens `path` for appending, creating it with mode 0600.
///
/// A file that already exists with a wider mode is narrowed to 0600 (or
/// refused, if that fails: it is not ours). The open is non-blocking, so a
/// FIFO nobody reads fails at once instead of hanging the caller; the
/// writer thread then writes to it blocking.
pub(super) fn open_private(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE)
        .custom_flags(OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_file() && metadata.mode() & 0o077 != 0 {
        file.set_permissions(Permissions::from_mode(PRIVATE))?;
    }
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
    Ok(file)
}

/// Whether `path` still names `file` (another process may have rotated
/// it away).
pub(super) fn still_at(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}
