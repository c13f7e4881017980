//! The log file on disk: appended to, owner-only, rotated at a size cap,
//! opened only after checking what was opened, and rotated safely when
//! several processes write it.
//!
//! Only the writer thread touches it, with ordinary blocking writes, so a
//! slow disk holds up that thread and nothing else.
//!
//! **Opening.** The log may be asked for in a directory others can write,
//! by a process running as root, so the path is never trusted: on Unix the
//! directory is found once, component by component, following only the
//! symbolic links no other user can re-point, and held open; a symbolic
//! link at `FILE` is refused, not followed, and the file actually opened
//! must be a regular file, not our stdout, ours, with one link (see
//! `unix.rs`). A refused file is left untouched: one warning, no log. The
//! same checks apply to every later open. `FILE` is opened by name only at
//! the start and at a rotation, and always in the directory held: a file
//! renamed, removed or replaced with a link mid-session, or a directory on
//! its path re-pointed, does not redirect the records, which go on into
//! the file held until it is full.
//!
//! **Rotation** keeps one old file: when the next record would take the
//! file past the cap, `FILE` is renamed to `FILE.1` (replacing the one
//! before) and a new `FILE` is started, so the log never takes more than
//! twice the cap on disk. Records are never split across the two files.
//!
//! Several processes may be given the same file (ten bridges of one CLI
//! with `MCP_BRIDGE_LOG` in their environment, say). Each takes an advisory
//! lock (`flock`) on the file it holds around every batch, so measuring the
//! file, writing and rotating are one step to the others. A process rotates
//! only if the file it holds is still the one at `FILE` (same device and
//! inode, checked under that lock). If it is not, another process rotated
//! it first, and this one just opens the new `FILE`. So one full file is
//! rotated once, and a file is never emptied: where the rename fails (on
//! Windows, while another process has `FILE.1` open), the log follows a
//! `FILE` that has room, or else drops its records (counted, one warning)
//! until a later batch can rotate. It never truncates a file instead, as
//! that file may be the `FILE.1` another process just made. The lock is
//! held for one batch's writes; a process stopped while holding it (a
//! suspended CLI's bridge) stalls the others' writer threads, never their
//! relays: their records wait, then are dropped and counted, and at exit
//! the last ones are waited for at most a second, as with a stuck disk.
//!
//! **A full disk, or the file size limit** (`RLIMIT_FSIZE`, `ulimit -f`):
//! a failed write is one warning on stderr, and the records are dropped
//! and counted. After a full disk, later batches try again. At the file
//! size limit the log stops for good (the file cannot grow, and every try
//! would raise `SIGXFSZ` again); `SIGXFSZ` itself is caught on Unix, so it
//! does not kill the process, and the session goes on without a log.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::platform::{self, Dir};
use crate::diag;

/// The open log file and what it needs to rotate.
#[derive(Debug)]
pub(super) struct LogFile {
    /// `FILE` as given, for messages.
    path: PathBuf,
    /// The directory `FILE` is in, held open: every later open and rename
    /// happens in it, whatever its path names by then.
    dir: Dir,
    /// `FILE`'s name in `dir`.
    name: OsString,
    /// `FILE.1`'s name in `dir`.
    old: OsString,
    file: File,
    max_bytes: u64,
    /// A write failed part of the way through a record: the file ends in
    /// part of one, whose line the next write ends.
    broken: bool,
    /// The failure has been reported on stderr (once per log).
    warned: bool,
    /// The file size limit was reached: nothing more is written.
    stopped: bool,
}

impl LogFile {
    /// Opens (creating, owner-only) `path` for appending, refusing what
    /// must not be written (see the module docs).
    pub(super) fn open(path: &Path, max_bytes: u64) -> io::Result<LogFile> {
        let name = match path.file_name() {
            Some(name) => name.to_os_string(),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the log path names no file",
                ))
            }
        };
        let dir = platform::open_dir(parent(path))?;
        let file = platform::open_private(&dir, &name)?;
        let mut old = name.clone();
        old.push(".1");
        Ok(LogFile {
            path: path.to_path_buf(),
            dir,
            name,
            old,
            file,
            max_bytes,
            broken: false,
            warned: false,
            stopped: false,
        })
    }

    /// Why others could replace the log between rotations, if they can:
    /// its directory's owner and mode (see `platform::directory_warning`).
    pub(super) fn directory_warning(&self) -> Option<String> {
        platform::directory_warning(&self.dir, parent(&self.path))
    }

    /// Appends `batch` (whole records, each ending in `\n`), rotating at
    /// the cap. Returns how many bytes of it are in the file: whole
    /// records, so the rest was lost to a write error (a record cut by the
    /// error counts as lost, and the next write ends its line). The first
    /// error is reported on stderr.
    pub(super) fn write(&mut self, batch: &[u8]) -> usize {
        if self.stopped {
            return 0;
        }
        let mut rest = batch;
        platform::lock(&self.file);
        let written = self.write_records(&mut rest);
        // The file held now: a rotation locked the new one.
        platform::unlock(&self.file);
        match written {
            Ok(()) => batch.len(),
            Err(e) => {
                self.stopped = platform::is_file_too_large(&e);
                if !self.warned {
                    self.warned = true;
                    let then = if self.stopped {
                        "the file size limit (ulimit -f) is reached: the log stops here, \
                         and the session goes on without it"
                    } else {
                        "its records are dropped (and counted) until it can be written again"
                    };
                    diag::log(format_args!(
                        "cannot write the traffic log '{}': {}; {}",
                        self.path.display(),
                        e,
                        then
                    ));
                }
                batch.len() - rest.len()
            }
        }
    }

    /// Writes the records in `rest`, advancing it past each one written.
    /// Called with the file locked.
    fn write_records(&mut self, rest: &mut &[u8]) -> io::Result<()> {
        if self.broken {
            // End the part of a record a failed write may have left, so
            // the next record starts its own line.
            self.file.write_all(b"\n")?;
            self.broken = false;
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
                let next = rest
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(rest.len(), |at| at + 1);
                self.rotate(next as u64)?;
                size = self.file.metadata()?.len();
                continue;
            } else {
                // One record longer than the cap, in an empty file: it goes
                // in whole rather than not at all.
                rest.iter()
                    .position(|&b| b == b'\n')
                    .map_or(rest.len(), |at| at + 1)
            };
            self.write_whole(rest, take)?;
            size += take as u64;
        }
        Ok(())
    }

    /// Writes the first `take` bytes of `rest` (whole records) and moves
    /// `rest` past them. On an error, `rest` is moved past the whole
    /// records that did go in, so that the caller counts exactly the ones
    /// lost, and a record cut short marks the file broken.
    fn write_whole(&mut self, rest: &mut &[u8], take: usize) -> io::Result<()> {
        // (`get`: no panic sites for counts kept in range.)
        let chunk = rest.get(..take).unwrap_or_default();
        let mut done = 0;
        let failed = loop {
            if done == chunk.len() {
                break None;
            }
            match self.file.write(chunk.get(done..).unwrap_or_default()) {
                Ok(0) => break Some(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        let whole = match failed {
            None => done,
            Some(_) => chunk
                .get(..done)
                .unwrap_or_default()
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |at| at + 1),
        };
        self.broken = whole < done;
        *rest = rest.get(whole..).unwrap_or_default();
        failed.map_or(Ok(()), Err)
    }

    /// Moves on from the full file held (locked) to a `FILE` with room for
    /// a record of `needed` bytes, and locks it: renames `FILE` to `FILE.1`
    /// and starts a new one if the file held is still `FILE`, or else opens
    /// the `FILE` another process started after rotating it.
    fn rotate(&mut self, needed: u64) -> io::Result<()> {
        let next = if platform::still_at(&self.file, &self.dir, &self.name) {
            match platform::rename(&self.dir, &self.name, &self.old) {
                Ok(()) => platform::open_private(&self.dir, &self.name)?,
                Err(e) => {
                    // Not rotated. Another process may have rotated it
                    // all the same (Windows cannot tell): use a `FILE`
                    // with room, and never empty one.
                    let mut old = self.path.clone().into_os_string();
                    old.push(".1");
                    let not_rotated = io::Error::new(
                        e.kind(),
                        format!("cannot rotate it to '{}': {}", Path::new(&old).display(), e),
                    );
                    let next = match platform::open_private(&self.dir, &self.name) {
                        Ok(next) => next,
                        Err(_) => return Err(not_rotated),
                    };
                    let size = next.metadata()?.len();
                    if size > 0 && size + needed > self.max_bytes {
                        return Err(not_rotated);
                    }
                    next
                }
            }
        } else {
            platform::open_private(&self.dir, &self.name)?
        };
        // Another process waiting for the old file's lock finds the new
        // `FILE` in place when it gets it.
        platform::unlock(&self.file);
        platform::lock(&next);
        self.file = next;
        Ok(())
    }
}

/// The directory `path` names its file in: `.` for a bare file name.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}
