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

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::windows::io::AsHandle;
use std::path::{Path, PathBuf};

use windows_sys::Win32::Security::Authorization::SE_FILE_OBJECT;

use super::refusal::Refusal;
use crate::ffi::windows::{self as win, SecurityDescriptor};

/// The directory the log file is in. Only its path: on Windows the file
/// is opened and renamed by path, and the path is not walked component by
/// component as on Unix, so a junction or link on it is followed (the
/// file's owner check and owner-only descriptor still hold).
#[derive(Debug)]
pub(super) struct Dir(PathBuf);

/// The directory `path`.
pub(super) fn open_dir(path: &Path) -> io::Result<Dir> {
    Ok(Dir(path.to_path_buf()))
}

/// Opens `name` in `dir` for appending, creating it owner-only; a file
/// that exists and is not ours, or is not a regular file (a device such as
/// `NUL`), is refused (see the module docs).
pub(super) fn open_private(dir: &Dir, name: &OsStr) -> io::Result<File> {
    let path = dir.0.join(name);
    let file = win::open_append_creating(&path, &SecurityDescriptor::owner_only()?)?;
    check_owner(&file)?;
    if !file.metadata()?.is_file() {
        return Err(Refusal::NotRegular("not a regular file").into());
    }
    Ok(file)
}

/// Renames `from` to `to`, both in `dir`.
pub(super) fn rename(dir: &Dir, from: &OsStr, to: &OsStr) -> io::Result<()> {
    fs::rename(dir.0.join(from), dir.0.join(to))
}

/// Windows has no `flock`: rotations by two processes may cross there
/// (see [`still_at`]), but a file is still never emptied.
pub(super) fn lock(_file: &File) {}

/// See [`lock`].
pub(super) fn unlock(_file: &File) {}

/// Windows has no file size limit of its own.
pub(super) fn is_file_too_large(_error: &io::Error) -> bool {
    false
}

/// Nothing to catch: Windows has no `SIGXFSZ`.
pub(super) fn survive_file_size_limit() {}

/// A folder's ACL decides who may replace the log; this looks at nothing,
/// and says nothing.
pub(super) fn directory_warning(_dir: &Dir, _shown: &Path) -> Option<String> {
    None
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

/// Whether `name` in `dir` still names `file`. Windows has no stable file
/// identity in std, so a rotation by another process goes unnoticed: this
/// process keeps writing to `FILE.1` until its own next rotation.
pub(super) fn still_at(_file: &File, _dir: &Dir, _name: &OsStr) -> bool {
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
        let dir = open_dir(path.parent().unwrap()).unwrap();
        let name = path.file_name().unwrap();
        let mut file = open_private(&dir, name).unwrap();
        file.write_all(b"one\n").unwrap();
        drop(file);
        let mut file = open_private(&dir, name).unwrap();
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
