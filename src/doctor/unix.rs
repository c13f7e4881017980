//! Unix specifics of doctor: what the socket file and its directory say
//! about who may connect.
//!
//! Connecting to a Unix socket needs write permission on the file, so a
//! mode with group or other write bits lets those users talk to the app as
//! if they were us. A directory others can write lets them put their own
//! socket at the path before the app binds it (the bridge refuses a server
//! run by another user, so this costs the session, not the traffic).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::endpoint::MAX_PATH_BYTES;

/// Unix sockets have a real half-close: the app reads EOF and may answer.
pub(super) const HALF_CLOSE: bool = true;

/// What the endpoint's path says before anything connects to it.
#[derive(Debug)]
pub(super) struct Facts {
    /// Worth connecting to: it exists and is a socket, and its path fits.
    pub(super) usable: bool,
    pub(super) detail: String,
    pub(super) warnings: Vec<String>,
}

pub(super) fn inspect(path: &Path) -> Facts {
    let len = path.as_os_str().as_bytes().len();
    let length = format!("path {} of at most {} bytes", len, MAX_PATH_BYTES);
    let mut facts = Facts {
        usable: len <= MAX_PATH_BYTES,
        detail: String::new(),
        warnings: Vec::new(),
    };
    let me = rustix::process::geteuid().as_raw();
    let who = |uid: u32| match uid {
        uid if uid == me => format!("uid {} (you)", uid),
        0 => "uid 0 (root)".to_string(),
        uid => format!("uid {}", uid),
    };
    facts.detail = match fs::metadata(path) {
        Err(e) => {
            facts.usable = false;
            format!("cannot be looked at ({}); {}", e, length)
        }
        Ok(metadata) => {
            let kind = metadata.file_type();
            if !kind.is_socket() {
                facts.usable = false;
            }
            let mode = metadata.mode() & 0o7777;
            if kind.is_socket() && mode & 0o022 != 0 {
                facts.warnings.push(format!(
                    "its mode {:04o} lets {} connect as if they were you; the app should create it 0600",
                    mode,
                    writers(mode)
                ));
            }
            let owner = metadata.uid();
            if owner != me && owner != 0 {
                facts
                    .warnings
                    .push(format!("it belongs to {}, not to you", who(owner)));
            }
            format!(
                "{}, owner {}, mode {:04o}; {}",
                if kind.is_socket() {
                    "a socket"
                } else {
                    "not a socket"
                },
                who(owner),
                mode,
                length
            )
        }
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if let Ok(metadata) = fs::metadata(dir) {
        let mode = metadata.mode() & 0o7777;
        if mode & 0o022 != 0 {
            facts.warnings.push(format!(
                "its directory '{}' (mode {:04o}) is writable by {}: they could put a socket \
                 of their own at this path before the app does; prefer a directory only you \
                 can write, such as $XDG_RUNTIME_DIR",
                dir.display(),
                mode,
                writers(mode)
            ));
        }
    }
    facts
}

/// Who, besides the owner, has write permission in `mode`.
fn writers(mode: u32) -> &'static str {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "its group and all other users",
        (true, false) => "its group",
        _ => "all other users",
    }
}
