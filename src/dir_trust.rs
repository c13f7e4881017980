//! Whether another user can change what a directory's names point to: the
//! one rule the traffic log, the host's socket and the answers cache's way
//! to its directory use, on Unix, and the one way the log and the host
//! open the directories they hold.
//!
//! A name in a directory can be renamed, removed or replaced by whoever
//! can write the directory, unless it has the sticky bit, which limits
//! that to the name's owner, the directory's owner and root. So a path
//! another user can redirect runs through a directory that:
//!
//! - belongs to another user (other than root), who may do anything in it;
//! - every user can write, without the sticky bit;
//! - its group can write, without the sticky bit, and that group is not
//!   our own effective group. A group-writable directory of our own group
//!   is what `umask 002` gives with one private group per user (Debian's
//!   and Ubuntu's default): counting it would be noise;
//! - or that is sticky and writable by others, for a name another user
//!   (other than root) owns: that user may replace it.
//!
//! Root may do anything anywhere, and is trusted throughout, as is our own
//! user. The traffic log refuses to follow a symbolic link another user
//! can redirect and warns about such a directory; the host warns about an
//! endpoint's directory. Both look at the directory they hold open, not at
//! a path that could be re-pointed between the look and the use.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::BorrowedFd;

use rustix::fs::{Mode, OFlags};

/// What decides who may change a directory's names: its owner, group and
/// mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dir {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) mode: u32,
}

impl Dir {
    /// A directory's facts from its metadata.
    #[cfg_attr(not(any(feature = "host", feature = "log")), allow(dead_code))]
    pub(crate) fn of(metadata: &Metadata) -> Dir {
        Dir {
            uid: metadata.uid(),
            gid: metadata.gid(),
            mode: metadata.mode(),
        }
    }

    /// Why another user can change this directory's names, if anyone can:
    /// "belongs to user 1000", "is writable by every user (mode 777)". A
    /// sticky directory others can write is no reason by itself (see
    /// [`Dir::name_risk`]).
    #[cfg_attr(not(any(feature = "host", feature = "log")), allow(dead_code))]
    pub(crate) fn risk(&self) -> Option<String> {
        let us = rustix::process::geteuid().as_raw();
        let mode = self.mode & 0o7777;
        if !trusted(self.uid, us) {
            Some(format!("belongs to user {}", self.uid))
        } else if self.sticky() {
            None
        } else if mode & 0o002 != 0 {
            Some(format!("is writable by every user (mode {:o})", mode))
        } else if self.foreign_group_writes() {
            Some(format!(
                "is writable by group {} (mode {:o})",
                self.gid, mode
            ))
        } else {
            None
        }
    }

    /// Why another user can replace the name in this directory that user
    /// `owner` owns, if anyone can: [`Dir::risk`], or, in a sticky
    /// directory others can write, a name that another user owns.
    #[cfg_attr(not(feature = "log"), allow(dead_code))]
    pub(crate) fn name_risk(&self, owner: u32) -> Option<String> {
        if let Some(risk) = self.risk() {
            return Some(risk);
        }
        let us = rustix::process::geteuid().as_raw();
        let shared = self.mode & 0o002 != 0 || self.foreign_group_writes();
        if self.sticky() && shared && !trusted(owner, us) {
            return Some(format!(
                "is shared with other users (mode {:o}) and the name belongs to user {}",
                self.mode & 0o7777,
                owner
            ));
        }
        None
    }

    /// Whether another user can replace the name in this directory that
    /// user `owner` owns: [`Dir::name_risk`] without its words (the answers
    /// cache names the name, and the bridge-only build carries no more).
    pub(crate) fn others_can_change(&self, owner: u32) -> bool {
        let us = rustix::process::geteuid().as_raw();
        let shared = self.mode & 0o002 != 0 || self.foreign_group_writes();
        !trusted(self.uid, us) || shared && (!self.sticky() || !trusted(owner, us))
    }

    fn sticky(&self) -> bool {
        self.mode & 0o1000 != 0
    }

    fn foreign_group_writes(&self) -> bool {
        self.mode & 0o020 != 0 && self.gid != rustix::process::getegid().as_raw()
    }
}

/// Opens the directory `name` in `dir` (`rustix::fs::CWD` for the working
/// directory), to be held: the one way the log and the host open the
/// directories they then work in. With `follow` false, a symbolic link at
/// `name` is not followed (`ELOOP`, or `ENOTDIR` on some systems).
#[cfg_attr(not(any(feature = "host", feature = "log")), allow(dead_code))]
pub(crate) fn open_directory(dir: BorrowedFd<'_>, name: &OsStr, follow: bool) -> io::Result<File> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    Ok(File::from(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::empty(),
    )?))
}

/// Our own user, and root, who may do anything anyway.
fn trusted(uid: u32, us: u32) -> bool {
    uid == us || uid == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(uid: u32, gid: u32, mode: u32) -> Dir {
        Dir { uid, gid, mode }
    }

    #[test]
    fn who_else_can_change_a_directory() {
        let us = rustix::process::geteuid().as_raw();
        let group = rustix::process::getegid().as_raw();
        let other = if us == 4242 { 4343 } else { 4242 };
        assert_eq!(dir(us, group, 0o700).risk(), None);
        assert_eq!(dir(0, 0, 0o755).risk(), None);
        assert_eq!(dir(us, group, 0o775).risk(), None, "our own group");
        assert_eq!(dir(0, 0, 0o1777).risk(), None, "sticky, like /tmp");
        assert_eq!(
            dir(other, other, 0o700).risk().as_deref(),
            Some(&*format!("belongs to user {}", other))
        );
        assert_eq!(
            dir(us, group, 0o777).risk().as_deref(),
            Some("is writable by every user (mode 777)")
        );
        assert_eq!(
            dir(us, other, 0o770).risk().as_deref(),
            Some(&*format!("is writable by group {} (mode 770)", other))
        );
        // In a sticky directory, a name is as safe as its owner.
        assert_eq!(dir(0, 0, 0o1777).name_risk(us), None);
        assert_eq!(dir(0, 0, 0o1777).name_risk(0), None);
        assert_eq!(
            dir(0, 0, 0o1777).name_risk(other).as_deref(),
            Some(&*format!(
                "is shared with other users (mode 1777) and the name belongs to user {}",
                other
            ))
        );
        assert_eq!(
            dir(us, group, 0o1700).name_risk(other),
            None,
            "only we write"
        );
        // The rule without its words is the same rule.
        for uid in [us, 0, other] {
            for gid in [group, other] {
                for mode in [0o700, 0o755, 0o775, 0o777, 0o1777, 0o1770, 0o1700] {
                    for owner in [us, 0, other] {
                        let d = dir(uid, gid, mode);
                        let said = d.name_risk(owner).is_some();
                        assert_eq!(d.others_can_change(owner), said, "{:?} {}", d, owner);
                    }
                }
            }
        }
    }
}
