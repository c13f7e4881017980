//! The cache's files on Windows: the same rules as on Unix, in Windows'
//! terms.
//!
//! - **The directory is held.** It is opened once, not through a reparse
//!   point (a junction or a symbolic link at its own name is refused), and
//!   the handle is kept for the session without `FILE_SHARE_DELETE`: while
//!   it is held, the directory cannot be renamed, deleted or swapped, so
//!   the paths of its files, under it, name files in it. (Windows has no
//!   `openat`: this is how its files are reached "through the directory
//!   held".) It must be owned by our user (its owner SID); per-user
//!   `%LOCALAPPDATA%` gives it an ACL that keeps other users out.
//! - **A file is ours** when it is opened without following a reparse
//!   point, is a regular file owned by our user, and starts with
//!   [`MAGIC`]; only such a file is replaced or removed. A file of
//!   another kind, another owner, or without the header is left as it is.
//! - Files are written whole to a new file beside them, synced
//!   (`FlushFileBuffers`), and renamed over (`MoveFileExW` with
//!   `MOVEFILE_REPLACE_EXISTING`).
//!
//! What Unix does and this cannot: the file removed is the one checked only
//! as long as no process of our own user swaps it in between (there is no
//! `unlinkat` on a handle without more FFI); the directory being held and
//! ours, no other user can.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::{MetadataExt, OpenOptionsExt};
use std::os::windows::io::AsHandle;
use std::path::{Path, PathBuf};

use windows_sys::Win32::Security::Authorization::SE_FILE_OBJECT;
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
};

use super::entry::MAGIC;
use crate::ffi::windows as win;

/// `%LOCALAPPDATA%`.
pub(super) fn user_cache_dir() -> Option<PathBuf> {
    std::env::var_os("LOCALAPPDATA")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// The endpoint's exact UTF-16 units, as bytes (no lossy conversion:
/// unpaired surrogates stay what they are): a pipe name is absolute
/// (`\\.\pipe\...`) and names no file to resolve.
pub(super) fn endpoint_bytes(path: &Path) -> Vec<u8> {
    path.as_os_str()
        .encode_wide()
        .flat_map(u16::to_le_bytes)
        .collect()
}

fn refused(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// Whether our own user owns what `file` is open on.
fn owned(file: &File) -> io::Result<bool> {
    let owner = win::owner_sid_of(file.as_handle(), SE_FILE_OBJECT)?;
    Ok(owner == Some(win::current_user_sid()?))
}

/// The cache's directory, held open (see the module docs).
#[derive(Debug)]
pub(super) struct Dir {
    path: PathBuf,
    _held: File,
}

impl Dir {
    /// Opens the directory (created if `create` and missing), not through
    /// a reparse point, checks that it is ours, and holds it.
    pub(super) fn open(dir: &Path, create: bool) -> io::Result<Dir> {
        if create {
            fs::create_dir_all(dir)?;
        }
        let held = OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
            .open(dir)?;
        let meta = held.metadata()?;
        if !meta.is_dir() || meta.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(io::Error::new(
                io::ErrorKind::Other,
                "it is not a directory (or it is a link to one)",
            ));
        }
        if !owned(&held)? {
            return Err(refused("it belongs to another user"));
        }
        Ok(Dir {
            path: dir.to_path_buf(),
            _held: held,
        })
    }

    /// Opens `name` for reading: a regular file of ours, not through a
    /// reparse point.
    fn open_file(&self, name: &str) -> io::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(self.path.join(name))?;
        let meta = file.metadata()?;
        let regular = meta.is_file() && meta.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT == 0;
        if !regular || !owned(&file)? {
            return Err(refused("it is not a regular file of yours"));
        }
        Ok(file)
    }

    /// Reads the file `name`, at most `limit` bytes.
    pub(super) fn read(&self, name: &str, limit: usize) -> io::Result<Vec<u8>> {
        let mut text = Vec::new();
        self.open_file(name)?
            .take(limit as u64)
            .read_to_end(&mut text)?;
        Ok(text)
    }

    /// Reads the file `name`, at most `limit` bytes, and how long ago it
    /// was written (milliseconds; 0 if in the future).
    pub(super) fn read_aged(&self, name: &str, limit: usize) -> io::Result<(Vec<u8>, u64)> {
        let file = self.open_file(name)?;
        let written = file.metadata()?.modified()?;
        let age = written.elapsed().unwrap_or_default().as_millis() as u64;
        let mut text = Vec::new();
        file.take(limit as u64).read_to_end(&mut text)?;
        Ok((text, age))
    }

    /// Whether `name` is a file the bridge wrote. `NotFound` when there is
    /// none.
    fn ours(&self, name: &str) -> io::Result<bool> {
        match self.read(name, MAGIC.len()) {
            Ok(head) => Ok(head == MAGIC),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes `name` if it is a file the bridge wrote: whether it did.
    pub(super) fn remove(&self, name: &str) -> io::Result<bool> {
        match self.ours(name) {
            Ok(true) => fs::remove_file(self.path.join(name)).map(|()| true),
            Ok(false) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes the file `name` whole: a new file beside it, synced, renamed
    /// over it. A file there that the bridge did not write is left as it
    /// is, and the write fails. Any process that opens the file from now on
    /// reads it whole.
    pub(super) fn write(&self, name: &str, text: &[u8]) -> io::Result<()> {
        match self.ours(name) {
            Ok(true) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(false) => {
                return Err(refused(
                    "a file mcp-bridge did not write has its name (left as it is)",
                ))
            }
            Err(e) => return Err(e),
        }
        let temporary = format!(".{}.{}.tmp", name, std::process::id());
        // One a bridge with our pid left behind, if any.
        self.remove(&temporary)?;
        let temporary = self.path.join(temporary);
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(&temporary)
            .and_then(|mut out| {
                out.write_all(text)?;
                out.sync_all()
            });
        match written.and_then(|()| fs::rename(&temporary, self.path.join(name))) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = fs::remove_file(&temporary);
                Err(e)
            }
        }
    }

    /// Makes the renames done so far last: nothing to do (NTFS journals a
    /// rename with its metadata; a directory cannot be flushed).
    pub(super) fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    /// The bridge's answer files (by name, see `super::is_answer_file`)
    /// that are regular files of ours: their modification times, sizes
    /// and names.
    pub(super) fn files(&self) -> Vec<((i64, i64), u64, String)> {
        let mut files = Vec::new();
        let entries = match fs::read_dir(&self.path) {
            Ok(entries) => entries,
            Err(_) => return files,
        };
        for entry in entries.flatten() {
            let name = match entry.file_name().into_string() {
                Ok(name) if super::is_answer_file(&name) => name,
                _ => continue,
            };
            if let Ok(meta) = self.open_file(&name).and_then(|f| f.metadata()) {
                // 100 ns intervals since 1601: only their order matters.
                files.push(((meta.last_write_time() as i64, 0), meta.len(), name));
            }
        }
        files
    }
}
