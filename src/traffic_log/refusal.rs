//! Why a log file was refused: the checks of the platform files (`unix.rs`,
//! `windows.rs`) say it in these words, and [`LogError`](super::LogError)
//! tells a refusal from a failed system call by them. Portable, so the
//! platform files depend on it and on nothing else of the log.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a log file was refused after, or instead of, opening it: the inner
/// error of the `io::Error` that opening returns.
#[cfg_attr(not(unix), allow(dead_code))]
pub(super) enum Refusal {
    /// `FILE` is a symbolic link.
    Symlink,
    /// A directory on the way to `FILE` is a symbolic link (`link`) that
    /// another user can re-point: its directory `why`.
    RedirectableLink { link: PathBuf, why: String },
    /// `FILE` is not a regular file (what it is).
    NotRegular(&'static str),
    /// `FILE` is the file our stdout is.
    Stdout,
    /// `FILE` belongs to another user.
    Owner { owner: u32, us: u32 },
    /// `FILE` has this many hard links.
    Links(u64),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Symlink => f.write_str(
                "it is a symbolic link, which the log never follows (whoever can write its \
                 directory could point it at any file)",
            ),
            Refusal::RedirectableLink { link, why } => write!(
                f,
                "'{}' on its path is a symbolic link another user can re-point (its directory \
                 {}), which the log never follows: it could send the records into any \
                 directory",
                link.display(),
                why
            ),
            Refusal::NotRegular(what) => write!(f, "it is {}, not a regular file", what),
            Refusal::Stdout => f.write_str(
                "it is this process's stdout, where records would mix with the relayed messages",
            ),
            Refusal::Owner { owner, us } => write!(
                f,
                "it belongs to user {}, not to this process's user {} (its owner could read \
                 the traffic)",
                owner, us
            ),
            Refusal::Links(links) => write!(
                f,
                "it has {} hard links (another name for it could be any file of ours)",
                links
            ),
        }
    }
}

/// As its Display text: a derived Debug would be a second copy of every
/// variant's formatting, for a value only ever shown to a person.
impl fmt::Debug for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error for Refusal {}

impl From<Refusal> for io::Error {
    fn from(refusal: Refusal) -> io::Error {
        io::Error::new(io::ErrorKind::Other, refusal)
    }
}

impl Refusal {
    /// Whether `error` is a refusal rather than a failed system call.
    pub(super) fn is(error: &io::Error) -> bool {
        error.get_ref().map_or(false, |inner| inner.is::<Refusal>())
    }
}
