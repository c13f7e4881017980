//! The cache's files on Windows: under the per-user `%LOCALAPPDATA%`,
//! whose inherited ACL already keeps other users out.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// `%LOCALAPPDATA%`.
pub(super) fn user_cache_dir() -> Option<PathBuf> {
    std::env::var_os("LOCALAPPDATA")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// Reads a file, at most `limit` bytes.
pub(super) fn read_private(file: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let mut text = Vec::new();
    fs::File::open(file)?
        .take(limit as u64)
        .read_to_end(&mut text)?;
    Ok(text)
}

/// Writes a file whole: a new file beside it, renamed over it.
pub(super) fn write_private(file: &Path, text: &[u8]) -> io::Result<()> {
    let dir = file.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir)?;
    let temporary = file.with_extension(format!("{}.tmp", std::process::id()));
    let written = fs::File::create(&temporary).and_then(|mut out| out.write_all(text));
    match written.and_then(|()| fs::rename(&temporary, file)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&temporary);
            Err(e)
        }
    }
}
