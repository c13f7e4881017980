//! Unix specifics of the log file: how its directory is found and held,
//! how the file is opened and checked, the lock that makes rotation safe
//! between processes, the directory warning, and `SIGXFSZ`.
//!
//! The log may be asked for in a directory others can write (`/tmp`, a
//! shared project directory), by a process running as root. So the path is
//! never trusted, only what was actually opened:
//!
//! - **The directory** is opened component by component from `/` (or the
//!   working directory, for a relative path), each with `O_NOFOLLOW`, and
//!   held open for the log's life. A component that is a symbolic link is
//!   followed only if no other user can re-point it: its directory is ours
//!   or root's and not writable by others, or it is sticky and the link
//!   is ours or root's (`crate::dir_trust` has the rule). So
//!   `/var/run -> /run`, or a link of our own in our home, is followed; a
//!   `logs -> /root/somewhere` planted in a directory others can write
//!   refuses the log, naming the link, instead of appending the user's
//!   traffic to a file of the same name elsewhere. The link's target is
//!   walked the same way (at most [`MAX_LINKS`] links in all, as the
//!   kernel's own limit). Every later open, rename and look at `FILE`
//!   happens in the directory held (`openat`, `renameat`, `fstatat`), so a
//!   directory re-pointed or renamed after the start redirects nothing.
//! - **The file** is opened in it with `O_NOFOLLOW` (a symbolic link at
//!   `FILE` is refused, not followed), and the open descriptor is then
//!   checked with `fstat`, which no rename or link swapped in after the
//!   open can change: a regular file, not our stdout, owned by our
//!   effective user, with no second link (a hard link could be an
//!   unrelated file of ours, made by someone who can write the log's
//!   directory but not the file's). Before opening, `fstatat` already
//!   refuses what is visibly not a regular file, so a device or a FIFO is
//!   not even opened (opening some devices has effects of its own).

use std::ffi::OsStr;
use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Once;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::refusal::Refusal;
use crate::diag;
use crate::dir_trust::{self, open_directory};

/// Owner read and write, nobody else: the log holds the user's traffic.
/// (`Mode::RUSR | Mode::WUSR` where a file is created.)
const PRIVATE: u32 = 0o600;

/// Most symbolic links followed on the way to the log's directory: Linux's
/// own limit for one path (`ELOOP` beyond it), so a loop of links ends.
const MAX_LINKS: usize = 40;

/// The directory the log file is in, held open (see the module docs).
#[derive(Debug)]
pub(super) struct Dir(File);

/// Opens the directory `path`, following only the links no other user can
/// re-point (see the module docs).
pub(super) fn open_dir(path: &Path) -> io::Result<Dir> {
    let mut links = 0;
    Ok(Dir(walk(
        None,
        path.as_os_str().as_bytes(),
        b"",
        &mut links,
    )?))
}

/// Opens the directory `path` leads to, one name at a time from `/` or,
/// for a relative path, from the directory `from` holds (the working
/// directory when `None`), which is at `base` (for messages). `..` is a
/// name like any other, and never a link.
fn walk(from: Option<File>, path: &[u8], base: &[u8], links: &mut usize) -> io::Result<File> {
    let absolute = path.starts_with(b"/");
    let (mut dir, mut shown) = match from {
        Some(dir) if !absolute => (dir, base.to_vec()),
        _ if absolute => (open_directory(CWD, OsStr::new("/"), false)?, b"/".to_vec()),
        _ => (open_directory(CWD, OsStr::new("."), false)?, base.to_vec()),
    };
    for name in path.split(|&b| b == b'/') {
        if name.is_empty() || name == b"." {
            continue;
        }
        if !shown.is_empty() && !shown.ends_with(b"/") {
            shown.push(b'/');
        }
        let base = shown.len();
        shown.extend_from_slice(name);
        dir = step(dir, OsStr::from_bytes(name), &shown, base, links)?;
    }
    Ok(dir)
}

/// Opens the directory `name` in `dir`; a symbolic link there is followed
/// only if no other user can re-point it. `shown[..base]` is where `dir`
/// is, `shown` the name's own path, for messages.
fn step(dir: File, name: &OsStr, shown: &[u8], base: usize, links: &mut usize) -> io::Result<File> {
    match open_directory(dir.as_fd(), name, false) {
        Ok(next) => return Ok(next),
        // `O_NOFOLLOW` on a link: ELOOP (Linux, macOS), or ENOTDIR with
        // `O_DIRECTORY` on some systems; either way, look at what it is.
        Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::LOOP | Errno::NOTDIR)) => {}
        Err(e) => return Err(e),
    }
    let entry = rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(entry.st_mode) != FileType::Symlink {
        return Err(Errno::NOTDIR.into());
    }
    if let Some(why) = dir_trust::Dir::of(&dir.metadata()?).name_risk(entry.st_uid) {
        return Err(Refusal::RedirectableLink {
            link: PathBuf::from(OsStr::from_bytes(shown)),
            why,
        }
        .into());
    }
    *links += 1;
    if *links > MAX_LINKS {
        return Err(Errno::LOOP.into());
    }
    // Nobody else can re-point it between the look and this read.
    let target = rustix::fs::readlinkat(dir.as_fd(), name, Vec::new())?;
    walk(Some(dir), target.as_bytes(), &shown[..base], links)
}

/// Opens `name` in `dir` for appending, creating it with mode 0600, and
/// checks what was opened (see the module docs); a file that is refused is
/// closed untouched, and the error's inner error is a [`Refusal`].
///
/// A file of ours that already exists with a wider mode is narrowed to
/// 0600 (through the descriptor, so no link is followed). The open is
/// non-blocking, so a FIFO created between the look and the open fails at
/// once instead of hanging the caller.
pub(super) fn open_private(dir: &Dir, name: &OsStr) -> io::Result<File> {
    if let Ok(entry) = rustix::fs::statat(dir.0.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
        refuse_type(FileType::from_raw_mode(entry.st_mode))?;
    }
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::APPEND
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let file = rustix::fs::openat(dir.0.as_fd(), name, flags, Mode::RUSR | Mode::WUSR)
        .map(File::from)
        .map_err(|e| {
            // ELOOP on Linux and macOS, EMLINK on FreeBSD, EFTYPE on
            // NetBSD: whichever it is, a link planted after the look.
            match rustix::fs::statat(dir.0.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(entry) if FileType::from_raw_mode(entry.st_mode) == FileType::Symlink => {
                    Refusal::Symlink.into()
                }
                _ => io::Error::from(e),
            }
        })?;
    refuse_type(FileType::from_raw_mode(rustix::fs::fstat(&file)?.st_mode))?;
    let metadata = file.metadata()?;
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
fn refuse_type(kind: FileType) -> Result<(), Refusal> {
    let what = match kind {
        FileType::RegularFile => return Ok(()),
        FileType::Symlink => return Err(Refusal::Symlink),
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "not a regular file",
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

/// Whether `name` in `dir` still names `file` itself (not a link to it):
/// another process may have rotated it away, or someone replaced it.
pub(super) fn still_at(file: &File, dir: &Dir, name: &OsStr) -> bool {
    let named = rustix::fs::statat(dir.0.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW);
    match (rustix::fs::fstat(file), named) {
        (Ok(open), Ok(named)) => open.st_dev == named.st_dev && open.st_ino == named.st_ino,
        _ => false,
    }
}

/// Renames `from` to `to`, both in `dir`.
pub(super) fn rename(dir: &Dir, from: &OsStr, to: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::renameat(
        dir.0.as_fd(),
        from,
        dir.0.as_fd(),
        to,
    )?)
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

/// Why the log's directory (held in `dir`; `shown` is its path, for the
/// message) lets someone else replace the log between our rotations
/// (or plant `FILE.1`), if it does: another user's, or writable by others
/// without the sticky bit (see `crate::dir_trust`). With the sticky bit
/// (`/tmp`), others cannot rename or remove our files; the most they can
/// do is create a name first, which the checks on open refuse.
pub(super) fn directory_warning(dir: &Dir, shown: &Path) -> Option<String> {
    let why = dir_trust::Dir::of(&dir.0.metadata().ok()?).risk()?;
    Some(format!(
        "the traffic log's directory '{}' {}: others could replace the log between \
         rotations, and read what is written after; keep logs in a directory of your own",
        shown.display(),
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
