//! The cache's files on Unix: an owner-only directory of ours, files
//! opened without following symbolic links, written whole and renamed.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

/// The directory exists (created `0700` if not), is a directory (not a
/// link to one), is ours and not writable by anyone else.
fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::Other,
            "it is not a directory",
        ));
    }
    if meta.uid() != me() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("it belongs to uid {}, not to you", meta.uid()),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "others can write it",
        ));
    }
    Ok(())
}

fn no_follow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Reads a file of ours, at most `limit` bytes.
pub(super) fn read_private(file: &Path, limit: usize) -> io::Result<Vec<u8>> {
    if let Some(dir) = file.parent() {
        if fs::symlink_metadata(dir).is_err() {
            return Err(io::ErrorKind::NotFound.into());
        }
        private_dir(dir)?;
    }
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(file)?;
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
/// it.
pub(super) fn write_private(file: &Path, text: &[u8]) -> io::Result<()> {
    let dir = file.parent().unwrap_or_else(|| Path::new("."));
    private_dir(dir)?;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let temporary = dir.join(format!(
        ".{}.{}.tmp",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let _ = fs::remove_file(&temporary);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(no_follow())
        .open(&temporary)
        .and_then(|mut out| out.write_all(text));
    match written.and_then(|()| fs::rename(&temporary, file)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&temporary);
            Err(e)
        }
    }
}
