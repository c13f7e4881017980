//! Unix specifics of the log file: how it is opened and checked, the lock
//! that makes rotation safe between processes, the directory warning, and
//! `SIGXFSZ`.
//!
//! The log may be asked for in a directory others can write (`/tmp`, a
//! shared project directory), by a process running as root. So the path is
//! never trusted, only the file actually opened: the last component is
//! opened with `O_NOFOLLOW` (a symbolic link there is refused, not
//! followed), and the open descriptor is then checked with `fstat`, which
//! no rename or link swapped in after the open can change: a regular file,
//! not our stdout, owned by our effective user, with no second link (a
//! hard link could be an unrelated file of ours, made by someone who can
//! write the log's directory but not the file's). Before opening, `lstat`
//! already refuses what is visibly not a regular file, so a device or a
//! FIFO is not even opened (opening some devices has effects of its own).

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsFd;
use std::path::Path;
use std::sync::Once;

use rustix::fs::{FlockOperation, OFlags};
use rustix::io::Errno;

use super::file::Refusal;
use crate::diag;

/// Owner read and write, nobody else: the log holds the user's traffic.
const PRIVATE: u32 = 0o600;

/// Opens `path` for appending, creating it with mode 0600, and checks what
/// was opened (see the module docs); a file that is refused is closed
/// untouched, and the error's inner error is a [`Refusal`].
///
/// A file of ours that already exists with a wider mode is narrowed to
/// 0600 (through the descriptor, so no link is followed). The open is
/// non-blocking, so a FIFO created between the `lstat` and the open fails
/// at once instead of hanging the caller.
pub(super) fn open_private(path: &Path) -> io::Result<File> {
    if let Ok(metadata) = fs::symlink_metadata(path) {
        refuse_type(&metadata)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)
        .map_err(|e| {
            // ELOOP on Linux and macOS, EMLINK on FreeBSD, EFTYPE on
            // NetBSD: whichever it is, a link planted after the lstat.
            match fs::symlink_metadata(path) {
                Ok(metadata) if metadata.file_type().is_symlink() => Refusal::Symlink.into(),
                _ => e,
            }
        })?;
    let metadata = file.metadata()?;
    refuse_type(&metadata)?;
    if is_stdout(&metadata) {
        return Err(Refusal::Stdout.into());
    }
    let us = rustix::process::geteuid().as_raw();
    if metadata.uid() != us {
        return Err(Refusal::Owner {
            owner: metadata.uid(),
            us,
        }
        .into());
    }
    // No link at all is no danger: another process rotated the file away
    // twice since we opened it (its records then go where the design lets
    // old files go).
    if metadata.nlink() > 1 {
        return Err(Refusal::Links(metadata.nlink()).into());
    }
    if metadata.mode() & 0o077 != 0 {
        file.set_permissions(Permissions::from_mode(PRIVATE))?;
    }
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
    Ok(file)
}

/// Refuses anything but a regular file, naming what it is.
fn refuse_type(metadata: &fs::Metadata) -> Result<(), Refusal> {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_symlink() {
        return Err(Refusal::Symlink);
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(Refusal::NotRegular(what))
}

/// Whether `metadata` is of the file our stdout (descriptor 1) is: records
/// written there would land in the relayed JSON-RPC stream.
fn is_stdout(metadata: &fs::Metadata) -> bool {
    let stdout = io::stdout();
    match stdout.as_fd().try_clone_to_owned().map(File::from) {
        Ok(out) => out.metadata().map_or(false, |out| {
            out.dev() == metadata.dev() && out.ino() == metadata.ino()
        }),
        // A closed stdout is no file of ours.
        Err(_) => false,
    }
}

/// Whether `path` still names `file` itself (not a link to it): another
/// process may have rotated it away, or someone replaced it.
pub(super) fn still_at(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

/// Takes the advisory lock (`flock`) on `file`, waiting for it: every
/// process writing the same log takes it around each batch, so checking
/// that `FILE` is still the file held, renaming it and writing are one step
/// to the others. On a file system without `flock` (some network ones) the
/// log goes on unlocked.
pub(super) fn lock(file: &File) {
    while let Err(Errno::INTR) = rustix::fs::flock(file, FlockOperation::LockExclusive) {}
}

/// Releases [`lock`]. (Closing the file releases it too.)
pub(super) fn unlock(file: &File) {
    let _ = rustix::fs::flock(file, FlockOperation::Unlock);
}

/// Whether `error` is `EFBIG`: the file size limit (`ulimit -f`) reached.
pub(super) fn is_file_too_large(error: &io::Error) -> bool {
    error.raw_os_error() == Some(Errno::FBIG.raw_os_error())
}

/// Why the directory `path` is in lets someone else replace the log
/// between our rotations (or plant `FILE.1`), if it does:
///
/// - it belongs to another user (other than root), who may do anything in
///   it;
/// - it is writable by every user, without the sticky bit;
/// - it is writable by its group, without the sticky bit, and that group
///   is not our own effective group. A group-writable directory of our own
///   group is what `umask 002` gives with one private group per user
///   (Debian's and Ubuntu's default): warning there would be noise.
///
/// With the sticky bit (`/tmp`), others cannot rename or remove our files;
/// the most they can do is create a name first, which the checks on open
/// refuse. Only the log's own directory is looked at, not those above it.
pub(super) fn directory_warning(path: &Path) -> Option<String> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let metadata = fs::metadata(dir).ok()?;
    let mode = metadata.mode();
    let sticky = mode & 0o1000 != 0;
    let us = rustix::process::geteuid().as_raw();
    let why = if metadata.uid() != us && metadata.uid() != 0 {
        format!("belongs to user {}", metadata.uid())
    } else if mode & 0o002 != 0 && !sticky {
        format!("is writable by every user (mode {:o})", mode & 0o7777)
    } else if mode & 0o020 != 0 && !sticky && metadata.gid() != rustix::process::getegid().as_raw()
    {
        format!(
            "is writable by group {} (mode {:o})",
            metadata.gid(),
            mode & 0o7777
        )
    } else {
        return None;
    };
    Some(format!(
        "the traffic log's directory '{}' {}: others could replace the log between \
         rotations, and read what is written after; keep logs in a directory of your own",
        dir.display(),
        why
    ))
}

/// Makes `SIGXFSZ` harmless, once per process: at `RLIMIT_FSIZE`
/// (`ulimit -f`) a write would otherwise kill the process (the bridge
/// mid-session, `serve` with its socket file left behind). With it caught,
/// the write fails with `EFBIG` instead, which the log takes as a full
/// disk. A handler that does nothing rather than `SIG_IGN`, so the
/// commands `serve` starts get the default back at `exec`; a disposition
/// the embedding program set itself is left alone.
pub(super) fn survive_file_size_limit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Err(e) = crate::ffi::unix::catch_file_size_signal() {
            diag::log(format_args!(
                "cannot catch SIGXFSZ: {}; a file size limit (ulimit -f) reached by the \
                 traffic log would end this process",
                e
            ));
        }
    });
}
