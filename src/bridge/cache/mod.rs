//! The app's last answers to `server/discover` and `initialize`, kept on
//! disk per user, endpoint and project, so that a client that starts before
//! the app is not lost.
//!
//! Users start their CLI before the app every day. A client's first
//! request is its `server/discover` probe or its `initialize`, and what it
//! gets decides the session: an error makes a dual-era client settle on
//! the legacy era for the life of the bridge (or fail, if it is modern
//! only), and a CLI whose `initialize` failed never asks again. With the
//! app's last answer kept here, the bridge answers for the absent app,
//! and when the app comes, resumes the session as after a restart and
//! tells the client the lists may have changed.
//!
//! The rules:
//! - only answers of a server that passed the trust check are kept (every
//!   connection the bridge makes has), each at most [`VALUE_LIMIT`];
//! - one small file per endpoint and project (a hash names it, and the file
//!   repeats both in full, so a collision is a miss), at most
//!   [`FILE_LIMIT`] files (the oldest go);
//! - owner-only: the directory is created `0700`, must be ours and not
//!   writable by others, and files are opened without following symbolic
//!   links, written whole to a new file and renamed into place (on Windows
//!   the per-user `%LOCALAPPDATA%` gives the same);
//! - a cache that cannot be used is said once on stderr, and the session
//!   goes on without it;
//! - deleting the directory clears it; `--no-cache` turns it off.

use std::io;
use std::path::{Path, PathBuf};

use crate::diag;
use crate::envelope::json::push_json_string;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

/// Largest answer kept. An `initialize` result is a few hundred bytes; one
/// with long `instructions` a few KiB.
pub const VALUE_LIMIT: usize = 64 * 1024;

/// Most files kept in the directory: one per endpoint and project in use.
pub const FILE_LIMIT: usize = 64;

/// The first line of every file: the format, for a later one to tell.
const MAGIC: &str = "mcp-bridge cache 1";

/// Where the cache lives unless told otherwise: the platform's per-user
/// cache directory, `mcp-bridge` in it (`$XDG_CACHE_HOME/mcp-bridge` or
/// `~/.cache/mcp-bridge`; `~/Library/Caches/mcp-bridge` on macOS;
/// `%LOCALAPPDATA%\mcp-bridge` on Windows). `None` without a home.
pub fn default_dir() -> Option<PathBuf> {
    platform::user_cache_dir().map(|dir| dir.join("mcp-bridge"))
}

/// One endpoint and project's kept answers.
#[derive(Debug, Default)]
pub(in crate::bridge) struct Cache {
    /// The file, when the cache is on.
    file: Option<PathBuf>,
    endpoint: String,
    project: String,
    discover: Option<Vec<u8>>,
    initialize: Option<Vec<u8>>,
}

impl Cache {
    /// The cache of `endpoint` and `project` in `dir` (none: off), with
    /// what it holds.
    pub(in crate::bridge) fn open(dir: Option<&Path>, endpoint: &Path, project: &str) -> Cache {
        let mut cache = Cache {
            file: None,
            endpoint: endpoint.to_string_lossy().into_owned(),
            project: project.to_string(),
            discover: None,
            initialize: None,
        };
        let dir = match dir {
            Some(dir) => dir,
            None => return cache,
        };
        let name = format!("{:016x}.answers", key_hash(&cache.endpoint, project));
        cache.file = Some(dir.join(name));
        if let Err(e) = cache.load() {
            if e.kind() != io::ErrorKind::NotFound {
                cache.off(&e);
            }
        }
        cache
    }

    /// The app's last `server/discover` result, raw.
    pub(in crate::bridge) fn discover(&self) -> Option<&[u8]> {
        self.discover.as_deref()
    }

    /// The app's last `initialize` result, raw.
    pub(in crate::bridge) fn initialize(&self) -> Option<&[u8]> {
        self.initialize.as_deref()
    }

    /// Keeps the app's `server/discover` result.
    pub(in crate::bridge) fn save_discover(&mut self, result: &[u8]) {
        if result.len() <= VALUE_LIMIT && self.discover.as_deref() != Some(result) {
            self.discover = Some(result.to_vec());
            self.save();
        }
    }

    /// Keeps the app's `initialize` result.
    pub(in crate::bridge) fn save_initialize(&mut self, result: &[u8]) {
        if result.len() <= VALUE_LIMIT && self.initialize.as_deref() != Some(result) {
            self.initialize = Some(result.to_vec());
            self.save();
        }
    }

    fn load(&mut self) -> io::Result<()> {
        let file = match &self.file {
            Some(file) => file,
            None => return Ok(()),
        };
        let text = platform::read_private(file, 4 * VALUE_LIMIT)?;
        let mut lines = text.split(|&b| b == b'\n');
        if lines.next() != Some(MAGIC.as_bytes()) {
            return Ok(());
        }
        let (mut endpoint, mut project) = (false, false);
        for line in lines {
            let (name, value) = match line.iter().position(|&b| b == b' ') {
                Some(at) => (&line[..at], &line[at + 1..]),
                None => continue,
            };
            let fits = value.len() <= VALUE_LIMIT && value.first() == Some(&b'{');
            match name {
                b"endpoint" => endpoint = value == json_string(&self.endpoint).as_slice(),
                b"project" => project = value == json_string(&self.project).as_slice(),
                b"discover" if fits => self.discover = Some(value.to_vec()),
                b"initialize" if fits => self.initialize = Some(value.to_vec()),
                _ => {}
            }
        }
        if !(endpoint && project) {
            // Another endpoint's file under the same hash: not ours.
            self.discover = None;
            self.initialize = None;
        }
        Ok(())
    }

    fn save(&mut self) {
        let file = match &self.file {
            Some(file) => file.clone(),
            None => return,
        };
        let mut text = Vec::with_capacity(256);
        text.extend_from_slice(MAGIC.as_bytes());
        text.extend_from_slice(b"\nendpoint ");
        text.extend_from_slice(&json_string(&self.endpoint));
        text.extend_from_slice(b"\nproject ");
        text.extend_from_slice(&json_string(&self.project));
        for (name, value) in [
            ("discover", &self.discover),
            ("initialize", &self.initialize),
        ] {
            if let Some(value) = value {
                text.push(b'\n');
                text.extend_from_slice(name.as_bytes());
                text.push(b' ');
                text.extend_from_slice(value);
            }
        }
        text.push(b'\n');
        let saved = platform::write_private(&file, &text);
        if saved.is_ok() {
            // Best effort: a directory that grew past the bound loses its
            // oldest files.
            if let Some(dir) = file.parent() {
                prune(dir);
            }
        }
        if let Err(e) = saved {
            self.off(&e);
        }
    }

    /// Says once why the cache cannot be used, and stops using it.
    fn off(&mut self, error: &io::Error) {
        if let Some(file) = self.file.take() {
            diag::write_line(
                format!(
                    "mcp-bridge: not using the answers cache '{}': {} (the session goes on \
                     without it; --no-cache turns it off)\n",
                    file.display(),
                    error
                )
                .as_bytes(),
            );
        }
        self.discover = None;
        self.initialize = None;
    }
}

fn json_string(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 2);
    push_json_string(&mut out, text);
    out
}

/// FNV-1a of the endpoint and the project, apart.
fn key_hash(endpoint: &str, project: &str) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in endpoint
        .as_bytes()
        .iter()
        .chain(&[0])
        .chain(project.as_bytes())
    {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Removes the oldest answer files beyond [`FILE_LIMIT`].
fn prune(dir: &Path) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(_) => return,
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".answers"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    // The oldest go one at a time, found by a scan: a save adds one file,
    // so there is one to remove, rarely more, and a sort's code is 4 KB.
    while files.len() > FILE_LIMIT {
        let oldest = (0..files.len())
            .min_by(|&a, &b| files[a].cmp(&files[b]))
            .expect("more files than the limit");
        let (_, path) = files.swap_remove(oldest);
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "mcp-bridge-cache-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn answers_are_kept_per_endpoint_and_project() {
        let dir = dir();
        let mut cache = Cache::open(Some(&dir), Path::new("/run/a.sock"), "p");
        assert_eq!(cache.initialize(), None);
        cache.save_initialize(br#"{"capabilities":{}}"#);
        cache.save_discover(br#"{"supportedVersions":["2026-07-28"]}"#);
        let again = Cache::open(Some(&dir), Path::new("/run/a.sock"), "p");
        assert_eq!(again.initialize(), Some(&br#"{"capabilities":{}}"#[..]));
        assert!(again.discover().is_some());
        assert_eq!(
            Cache::open(Some(&dir), Path::new("/run/a.sock"), "q").initialize(),
            None
        );
        assert_eq!(
            Cache::open(Some(&dir), Path::new("/run/b.sock"), "p").initialize(),
            None
        );
        assert_eq!(
            Cache::open(None, Path::new("/run/a.sock"), "p").initialize(),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_directory_holds_a_bounded_number_of_files() {
        let dir = dir();
        for n in 0..(FILE_LIMIT + 5) {
            let mut cache = Cache::open(Some(&dir), Path::new("/run/a.sock"), &n.to_string());
            cache.save_initialize(b"{}");
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), FILE_LIMIT);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_named_through_a_link_is_not_used() {
        let target = dir();
        std::fs::create_dir_all(&target).unwrap();
        let link = target.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut cache = Cache::open(Some(&link), Path::new("/run/a.sock"), "p");
        cache.save_initialize(b"{}");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        assert!(cache.file.is_none());
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&target);
    }

    #[test]
    fn a_directory_others_can_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut cache = Cache::open(Some(&dir), Path::new("/run/a.sock"), "p");
        cache.save_initialize(b"{}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(cache.file.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
