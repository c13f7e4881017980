//! The cache's files on Unix: an owner-only directory of ours, opened once
//! (not through a link) and held, every file read, created, renamed and
//! removed through it (`openat`, `renameat`, `unlinkat`, `statat` without
//! following links), never by path: a parent another user can write cannot
//! swap the directory between the check and the use.
//!
//! The way to it is walked the same way, one name at a time from `/` (or
//! the working directory), each opened (or created `0700`) in the
//! directory held before it, without following a link: a name is used
//! only where no other user can change it ([`dir_trust`]'s rule, the
//! traffic log's), and a symbolic link is followed only then (its target
//! walked the same way). So a link another user planted above
//! `$XDG_CACHE_HOME`, or a directory of theirs on the way, stops the cache
//! (said once, naming the component) instead of having it create and fill
//! `cache/mcp-bridge/` wherever the link points.
//!
//! Only the listing of the directory's names (for the bound on its files)
//! goes by its path, as std reads directories: a directory swapped in there
//! only shows names, each then looked up, checked and removed in the
//! directory held (so the worst a swap can do is keep a file or two past
//! the bound). std's reader is in the full build anyway, and costs the
//! bridge-only build 568 bytes less than rustix's.
//!
//! A file is replaced or removed only when it is provably the bridge's: a
//! regular file of ours, opened without following a link, that starts with
//! [`MAGIC`], and still the same file (device and inode) when it is
//! unlinked. The directory is ours and no one else can write it, so only
//! our own user could swap a file in that last moment.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

use super::entry::MAGIC;
use crate::dir_trust;

/// Most symbolic links followed on the way to the directory: Linux's own
/// limit for one path (`ELOOP` beyond it), so a loop of links ends.
const MAX_LINKS: usize = 40;

/// `$XDG_CACHE_HOME` (when absolute) or `~/.cache`; `~/Library/Caches` on
/// macOS.
pub(super) fn user_cache_dir() -> Option<PathBuf> {
    let home = || {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    };
    if cfg!(target_os = "macos") {
        return home().map(|h| h.join("Library").join("Caches"));
    }
    match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => Some(dir),
        _ => home().map(|h| h.join(".cache")),
    }
}

/// The endpoint's bytes as the system finds it from anywhere, exactly:
/// its directory made absolute and its links resolved (`realpath`; the
/// socket itself may be gone while the app is away), so two apps each
/// typed `mcp.sock` from their own directory share nothing, and one
/// reached through a link shares with itself. As typed when its directory
/// cannot be resolved (it is gone: no app serves there now).
pub(super) fn endpoint_bytes(endpoint: &Path) -> Vec<u8> {
    let dir = match endpoint.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let resolved = match (dir.canonicalize(), endpoint.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => endpoint.to_path_buf(),
    };
    resolved.as_os_str().as_bytes().to_vec()
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn refused(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// The cache's directory, held open, and its path (for the listing only).
#[derive(Debug)]
pub(super) struct Dir(OwnedFd, PathBuf);

impl Dir {
    /// Opens the directory (created `0700` if `create` and missing), not
    /// through a link at its own name, and checks what was opened, not the
    /// path: a directory of ours that no one else can write.
    pub(super) fn open(dir: &Path, create: bool) -> io::Result<Dir> {
        let held = walk(None, dir.as_os_str().as_bytes(), create, true, &mut 0)?;
        let stat = rustix::fs::fstat(&held)?;
        if stat.st_uid != me() {
            return Err(refused("it belongs to another user"));
        }
        if Mode::from_raw_mode(stat.st_mode).intersects(Mode::WGRP | Mode::WOTH) {
            return Err(refused("others can write it"));
        }
        Ok(Dir(held, dir.to_path_buf()))
    }

    /// Opens `name` for reading: a regular file of ours, not through a
    /// link, without blocking (a FIFO put there fails at once instead of
    /// hanging us). Its status with it.
    fn open_file(&self, name: &CStr) -> io::Result<(OwnedFd, Stat)> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let file = rustix::fs::openat(&self.0, name, flags, Mode::empty())?;
        let stat = rustix::fs::fstat(&file)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_uid != me() {
            return Err(refused("it is not a regular file of yours"));
        }
        Ok((file, stat))
    }

    /// Reads the file `name`, at most `limit` bytes, and how long ago it
    /// was written (milliseconds; 0 if in the future).
    pub(super) fn read_aged(&self, name: &str, limit: usize) -> io::Result<(Vec<u8>, u64)> {
        let (file, stat) = self.open_file(&c(name.as_bytes())?)?;
        // (The fields' types differ between systems.)
        #[allow(clippy::unnecessary_cast)]
        let written = Duration::new(stat.st_mtime as u64, stat.st_mtime_nsec as u32);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let age = now.saturating_sub(written).as_millis() as u64;
        Ok((read_to_limit(file, limit)?, age))
    }

    /// Whether `name` is a file the bridge wrote: its device and inode
    /// then. `NotFound` when there is none.
    fn ours(&self, name: &CStr) -> io::Result<Option<(u64, u64)>> {
        let (file, stat) = match self.open_file(name) {
            Ok(opened) => opened,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
            Err(e) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => return Ok(None),
            Err(e) => return Err(e),
        };
        if read_to_limit(file, MAGIC.len())? != MAGIC {
            return Ok(None);
        }
        Ok(Some(identity(&stat)))
    }

    /// Removes `name` if it is a file the bridge wrote (see the module
    /// docs): whether it did.
    pub(super) fn remove(&self, name: &str) -> io::Result<bool> {
        self.remove_c(&c(name.as_bytes())?)
    }

    /// [`Dir::remove`], of a name made a C string once (rustix would make
    /// one at every call, in code of its own at each).
    fn remove_c(&self, name: &CStr) -> io::Result<bool> {
        let id = match self.ours(name) {
            Ok(Some(id)) => id,
            Ok(None) => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let now = rustix::fs::statat(&self.0, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if identity(&now) != id {
            return Ok(false);
        }
        rustix::fs::unlinkat(&self.0, name, AtFlags::empty())?;
        Ok(true)
    }

    /// Writes the file `name` whole: a new `0600` file beside it, synced,
    /// renamed over it, all in the directory held. A file there that the
    /// bridge did not write is left as it is, and the write fails. Any
    /// process that opens the file from now on reads it whole; the rename
    /// lasts through a power cut once [`Dir::sync`] is done.
    pub(super) fn write(&self, name: &str, text: &[u8]) -> io::Result<()> {
        let temporary = {
            let mut temporary = String::from(".");
            temporary.push_str(name);
            temporary.push('.');
            temporary.push_str(&std::process::id().to_string());
            temporary.push_str(".tmp");
            c(temporary.as_bytes())?
        };
        let name = &c(name.as_bytes())?;
        match self.ours(name) {
            Ok(Some(_)) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(None) => {
                return Err(refused(
                    "a file mcp-bridge did not write has its name (left as it is)",
                ))
            }
            Err(e) => return Err(e),
        }
        // One a bridge with our pid left behind, if any.
        self.remove_c(&temporary)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let written = rustix::fs::openat(&self.0, &temporary, flags, Mode::RUSR | Mode::WUSR)
            .map_err(io::Error::from)
            .and_then(|out| {
                let mut out = File::from(out);
                out.write_all(text)?;
                out.sync_all()
            });
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&self.0, &temporary, &self.0, name).map_err(io::Error::from)
        });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&self.0, &temporary, AtFlags::empty());
        }
        renamed
    }

    /// Makes the renames done so far last: the directory synced.
    pub(super) fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.0).map_err(io::Error::from)
    }

    /// The bridge's answer files (by name, see `super::is_answer_file`)
    /// that are regular files of ours: their modification times, sizes
    /// and names.
    pub(super) fn files(&self) -> Vec<((i64, i64), u64, String)> {
        let mut files = Vec::new();
        let entries = match std::fs::read_dir(&self.1) {
            Ok(entries) => entries,
            Err(_) => return files,
        };
        for entry in entries.flatten() {
            let name = match entry.file_name().into_string() {
                Ok(name) if super::is_answer_file(&name) => name,
                _ => continue,
            };
            if let Ok((_, stat)) = c(name.as_bytes()).and_then(|c| self.open_file(&c)) {
                // (The fields' types differ between systems.)
                #[allow(clippy::unnecessary_cast)]
                let modified = (stat.st_mtime as i64, stat.st_mtime_nsec as i64);
                files.push((modified, stat.st_size as u64, name));
            }
        }
        files
    }
}

/// Opens the directory `path` leads to, one name at a time from `/` or,
/// for a relative path, from `from` (the working directory when `None`);
/// missing directories created `0700` when `create` (the user's `~/.cache`
/// may not be there yet); the `last` name, the directory itself, never
/// through a link. See the module docs.
fn walk(
    from: Option<OwnedFd>,
    path: &[u8],
    create: bool,
    last: bool,
    links: &mut usize,
) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = match from {
        Some(dir) if !path.starts_with(b"/") => dir,
        _ if path.starts_with(b"/") => {
            rustix::fs::openat(CWD, rustix::cstr!("/"), flags, Mode::empty())?
        }
        _ => rustix::fs::openat(CWD, rustix::cstr!("."), flags, Mode::empty())?,
    };
    let mut names = path
        .split(|&b| b == b'/')
        .filter(|name| !name.is_empty() && *name != b".")
        .peekable();
    while let Some(name) = names.next() {
        let last = last && names.peek().is_none();
        dir = step(dir, &c(name)?, create, last, links)?;
    }
    Ok(dir)
}

/// Opens the directory `name` in `dir`, where no other user may change
/// that name; a link there followed (walked) only then, and never at the
/// `last` name.
fn step(
    dir: OwnedFd,
    name: &CStr,
    create: bool,
    last: bool,
    links: &mut usize,
) -> io::Result<OwnedFd> {
    let look = || rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW);
    let entry = match look() {
        Err(Errno::NOENT) if create => match rustix::fs::mkdirat(&dir, name, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => look()?,
            Err(e) => return Err(e.into()),
        },
        looked => looked?,
    };
    let held = rustix::fs::fstat(&dir)?;
    let facts = dir_trust::Dir {
        uid: held.st_uid,
        gid: held.st_gid,
        mode: held.st_mode as u32,
    };
    if facts.others_can_change(entry.st_uid) {
        // (Put together without `format!`: the bridge-only build is sized.)
        let mut why = String::from("another user can change '");
        why.push_str(&OsStr::from_bytes(name.to_bytes()).to_string_lossy());
        why.push_str("' on the way to it (a link or a directory of theirs, or in a directory others can write)");
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
    }
    match FileType::from_raw_mode(entry.st_mode) {
        FileType::Directory => {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            Ok(rustix::fs::openat(&dir, name, flags, Mode::empty())?)
        }
        FileType::Symlink if !last && *links < MAX_LINKS => {
            *links += 1;
            // No one else can re-point it between the look and this read.
            let target = rustix::fs::readlinkat(&dir, name, Vec::new())?;
            walk(Some(dir), target.as_bytes(), create, false, links)
        }
        FileType::Symlink if !last => Err(Errno::LOOP.into()),
        _ => Err(io::Error::new(
            io::ErrorKind::Other,
            "it is not a directory (or it is a symbolic link to one)",
        )),
    }
}

/// `name` as a C string (an error if it holds a NUL).
fn c(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// A file's device and inode: which file it is.
fn identity(stat: &Stat) -> (u64, u64) {
    // (The fields' types differ between systems.)
    #[allow(clippy::unnecessary_cast)]
    (stat.st_dev as u64, stat.st_ino as u64)
}

/// Reads `file` to its end, at most `limit` bytes.
fn read_to_limit(file: OwnedFd, limit: usize) -> io::Result<Vec<u8>> {
    let mut text = vec![0; limit];
    let mut len = 0;
    while let Some(rest) = text.get_mut(len..).filter(|rest| !rest.is_empty()) {
        match rustix::io::read(&file, rest) {
            Ok(0) => break,
            Ok(read) => len += read,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    text.truncate(len);
    Ok(text)
}
