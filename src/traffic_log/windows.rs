//! Windows specifics of the log file.
//!
//! The file gets the default ACL inherited from its directory: under the
//! user's profile (where `%LOCALAPPDATA%` and `%TEMP%` are), that already
//! means the user, administrators and SYSTEM only. std opens files sharing
//! read, write and delete, so another process may rename the file away
//! while we hold it (rotation by another bridge writing the same log).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// Opens `path` for appending, creating it if need be.
pub(super) fn open_private(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Whether `path` still names `file`. Windows has no stable file identity
/// in std, so a rotation by another process goes unnoticed: this process
/// keeps writing to `FILE.1` until its own next rotation.
pub(super) fn still_at(_file: &File, _path: &Path) -> bool {
    true
}
