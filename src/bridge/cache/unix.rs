//! The cache's files on Unix: an owner-only directory of ours, held open
//! while its files are read or written in it (`openat`, `renameat`), files
//! opened without following symbolic links, written whole and renamed.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::io::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

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

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Opens the directory (created `0700` if `create` and missing), not
/// through a link at its own name, and checks what was opened, not the
/// path: a directory of ours that no one else can write. Its files are then
/// opened in the directory held, so a parent another user can write cannot
/// swap it between the look and the use.
fn private_dir(dir: &Path, create: bool) -> io::Result<OwnedFd> {
    if create {
        match fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let held = match rustix::fs::openat(CWD, dir, flags, Mode::empty()) {
        Ok(held) => held,
        Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
            return Err(io::Error::new(
                io::ErrorKind::Other,
                "it is not a directory (or it is a symbolic link to one)",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&held)?;
    if stat.st_uid != me() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("it belongs to uid {}, not to you", stat.st_uid),
        ));
    }
    if Mode::from_raw_mode(stat.st_mode).intersects(Mode::WGRP | Mode::WOTH) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "others can write it",
        ));
    }
    Ok(held)
}

fn parts(file: &Path) -> (&Path, &OsStr) {
    let dir = file.parent().unwrap_or_else(|| Path::new("."));
    (dir, file.file_name().unwrap_or_default())
}

/// Reads a file of ours, at most `limit` bytes.
pub(super) fn read_private(file: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let (dir, name) = parts(file);
    if fs::symlink_metadata(dir).is_err() {
        return Err(io::ErrorKind::NotFound.into());
    }
    let dir = private_dir(dir, false)?;
    // Non-blocking: a FIFO put there fails at once instead of hanging us.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let opened = File::from(rustix::fs::openat(&dir, name, flags, Mode::empty())?);
    let meta = opened.metadata()?;
    if !meta.is_file() || meta.uid() != me() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the file is not a regular file of yours",
        ));
    }
    let mut text = Vec::new();
    opened.take(limit as u64).read_to_end(&mut text)?;
    Ok(text)
}

/// Writes a file of ours whole: a new `0600` file beside it, renamed over
/// it, both in the directory held.
pub(super) fn write_private(file: &Path, text: &[u8]) -> io::Result<()> {
    let (dir, name) = parts(file);
    let dir = private_dir(dir, true)?;
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}.tmp", std::process::id()));
    let _ = rustix::fs::unlinkat(&dir, temporary.as_os_str(), AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let written = rustix::fs::openat(&dir, temporary.as_os_str(), flags, Mode::RUSR | Mode::WUSR)
        .map_err(io::Error::from)
        .and_then(|out| File::from(out).write_all(text));
    let renamed = written.and_then(|()| {
        rustix::fs::renameat(&dir, temporary.as_os_str(), &dir, name).map_err(io::Error::from)
    });
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(&dir, temporary.as_os_str(), AtFlags::empty());
    }
    renamed
}
