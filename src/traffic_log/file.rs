//! The log file on disk: appended to, owner-only, rotated at a size cap.
//!
//! Only the writer thread touches it, with ordinary blocking writes, so a
//! slow disk holds up that thread and nothing else.
//!
//! Rotation keeps one old file: when the next record would take the file
//! past the cap, `FILE` is renamed to `FILE.1` (replacing the one before)
//! and a new `FILE` is started, so the log never takes more than twice the
//! cap on disk. Records are never split across the two files. Where the
//! rename fails (on Windows, while another process has `FILE.1` open), the
//! file is emptied instead: history is lost, the bound is kept.
//!
//! Several bridges may be given the same file (a CLI that starts a few
//! sessions with one configuration). Appends from each land whole (each
//! process writes whole lines to a file opened for appending). Before each
//! batch the writer checks that `FILE` is still the file it has open
//! (Unix), so after another process rotated it, it follows to the new
//! `FILE` instead of writing on into `FILE.1`.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::platform;
use crate::diag;

/// The open log file and what it needs to rotate.
#[derive(Debug)]
pub(super) struct LogFile {
    path: PathBuf,
    /// `FILE.1`.
    old: PathBuf,
    file: File,
    /// A regular file (not a pipe or a device such as `/dev/stderr`):
    /// only those are measured and rotated.
    regular: bool,
    max_bytes: u64,
    /// A write failed since the last one that worked: the file may end in
    /// part of a record.
    broken: bool,
    /// The failure has been reported on stderr (once per file).
    warned: bool,
}

impl LogFile {
    /// Opens (creating, owner-only) `path` for appending.
    pub(super) fn open(path: &Path, max_bytes: u64) -> io::Result<LogFile> {
        let file = platform::open_private(path)?;
        let regular = file.metadata()?.is_file();
        let mut old = OsString::from(path.as_os_str());
        old.push(".1");
        Ok(LogFile {
            path: path.to_path_buf(),
            old: PathBuf::from(old),
            file,
            regular,
            max_bytes,
            broken: false,
            warned: false,
        })
    }

    /// Appends `batch` (whole records, each ending in `\n`), rotating at
    /// the cap. Returns how many records were lost to a write error; the
    /// first error is reported on stderr.
    pub(super) fn write(&mut self, batch: &[u8]) -> u64 {
        let mut rest = batch;
        match self.write_records(&mut rest) {
            Ok(()) => {
                self.broken = false;
                0
            }
            Err(e) => {
                if !self.warned {
                    self.warned = true;
                    diag::log(format_args!(
                        "cannot write the traffic log '{}': {}; its records are dropped \
                         (and counted) until it can be written again",
                        self.path.display(),
                        e
                    ));
                }
                self.broken = true;
                rest.iter().filter(|&&b| b == b'\n').count() as u64
            }
        }
    }

    /// Writes the records in `rest`, advancing it past each one written.
    fn write_records(&mut self, rest: &mut &[u8]) -> io::Result<()> {
        if self.broken {
            // End the part of a record a failed write may have left, so
            // the next record starts its own line.
            self.file.write_all(b"\n")?;
            self.broken = false;
        }
        if !self.regular {
            self.file.write_all(rest)?;
            *rest = &[];
            return Ok(());
        }
        if !platform::still_at(&self.file, &self.path) {
            self.file = platform::open_private(&self.path)?;
        }
        let mut size = self.file.metadata()?.len();
        while !rest.is_empty() {
            let room = self.max_bytes.saturating_sub(size).min(rest.len() as u64) as usize;
            let fits = rest[..room]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |at| at + 1);
            let take = if fits > 0 {
                fits
            } else if size > 0 {
                self.rotate()?;
                size = 0;
                continue;
            } else {
                // One record longer than the cap, in an empty file: it goes
                // in whole rather than not at all.
                rest.iter()
                    .position(|&b| b == b'\n')
                    .map_or(rest.len(), |at| at + 1)
            };
            self.file.write_all(&rest[..take])?;
            size += take as u64;
            *rest = &rest[take..];
        }
        Ok(())
    }

    /// `FILE` becomes `FILE.1`, and a new `FILE` is started.
    fn rotate(&mut self) -> io::Result<()> {
        match fs::rename(&self.path, &self.old) {
            Ok(()) => self.file = platform::open_private(&self.path)?,
            Err(_) => self.file.set_len(0)?,
        }
        Ok(())
    }
}
