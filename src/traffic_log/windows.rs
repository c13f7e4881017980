//! Windows specifics of the log file: created owner-only, and refused when
//! someone else owns it.
//!
//! A file created with no descriptor of its own takes the inheritable
//! entries of its folder's ACL, which outside the user's profile (say
//! `C:\ProgramData`) lets every user read it; the log holds the user's whole
//! MCP traffic. So a new log file is created with the descriptor our pipes
//! get: owner our user, and a protected DACL granting our user alone
//! (`SecurityDescriptor::owner_only`; protected, so nothing is inherited).
//! An existing file keeps its descriptor, and is used only if we own it: a
//! file another user created for us to write into, and read, is refused, as
//! on Unix. (Its owner decides its DACL, so only our own file's DACL is ours
//! to trust; one we own but made readable is left as it is.)
//!
//! The file is shared for reading, writing and deletion, as std's are, so
//! another process may rename it away while we hold it (rotation by another
//! bridge writing the same log).

use std::fs::File;
use std::io;
use std::os::windows::io::AsHandle;
use std::path::Path;

use windows_sys::Win32::Security::Authorization::SE_FILE_OBJECT;

use crate::ffi::windows::{self as win, SecurityDescriptor};

/// Opens `path` for appending, creating it owner-only; a file that exists
/// and is not ours is refused (see the module docs).
pub(super) fn open_private(path: &Path) -> io::Result<File> {
    let file = win::open_append_creating(path, &SecurityDescriptor::owner_only()?)?;
    check_owner(&file)?;
    Ok(file)
}

/// Refuses `file` unless our own user owns it.
pub(super) fn check_owner(file: &File) -> io::Result<()> {
    let owner = win::owner_sid_of(file.as_handle(), SE_FILE_OBJECT)?;
    owned_by(owner.as_deref(), &win::current_user_sid()?)
}

/// The verdict of [`check_owner`]: `owner` must be `me`.
fn owned_by(owner: Option<&str>, me: &str) -> io::Result<()> {
    if owner == Some(me) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "the file belongs to {}, not to you ({}): someone else may read it",
            owner.unwrap_or("nobody"),
            me
        ),
    ))
}

/// Whether `path` still names `file`. Windows has no stable file identity
/// in std, so a rotation by another process goes unnoticed: this process
/// keeps writing to `FILE.1` until its own next rotation.
pub(super) fn still_at(_file: &File, _path: &Path) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn temp_path(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("mcp-bridge-log-{}-{}.log", std::process::id(), tag))
    }

    /// A new log file names our user as its owner and grants our user
    /// alone, nothing inherited; it appends, and opens again.
    #[test]
    fn a_new_log_is_ours_alone() {
        let path = temp_path("new");
        let _ = std::fs::remove_file(&path);
        let mut file = open_private(&path).unwrap();
        file.write_all(b"one\n").unwrap();
        drop(file);
        let mut file = open_private(&path).unwrap();
        file.write_all(b"two\n").unwrap();
        let me = win::current_user_sid().unwrap();
        assert_eq!(
            win::owner_sid_of(file.as_handle(), SE_FILE_OBJECT).unwrap(),
            Some(me)
        );
        drop(file);
        let mut text = String::new();
        File::open(&path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "one\ntwo\n");
        std::fs::remove_file(&path).unwrap();
    }

    /// A file someone else owns, or nobody, is refused, naming the owner.
    /// The verdict alone: Wine records every file as its one user's, so a
    /// foreign file cannot be staged.
    #[test]
    fn a_file_we_do_not_own_is_refused() {
        let me = win::current_user_sid().unwrap();
        owned_by(Some(&me), &me).unwrap();
        for (owner, named) in [(Some("S-1-5-18"), "S-1-5-18"), (None, "nobody")] {
            let e = owned_by(owner, &me).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{}", e);
            let text = e.to_string();
            assert!(text.contains(&format!("belongs to {}", named)), "{}", text);
        }
    }
}
