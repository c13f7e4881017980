//! The app's last answers to `initialize`, `server/discover` and the lists
//! (`tools/list`, `prompts/list`, `resources/list`,
//! `resources/templates/list`, every page), kept on disk per user, endpoint
//! and project, so that a client that starts before the app is not lost.
//!
//! Users start their CLI before the app every day. A client's first
//! request is its `server/discover` probe or its `initialize`, and what it
//! gets decides the session: an error makes a dual-era client settle on
//! the legacy era for the life of the bridge (or fail, if it is modern
//! only), a CLI whose `initialize` failed never asks again, and one that
//! keeps a tool catalog and ignores `list_changed` (Codex, for 30 minutes)
//! has no tools for the whole session if its first `tools/list` failed.
//! With the app's last answers kept here, the bridge answers for the
//! absent app, and when the app comes, resumes the session as after a
//! restart and tells the client the lists may have changed.
//!
//! But an answer from here is the bridge speaking in the app's name, so
//! the rules are strict:
//! - **Whose answer.** An entry records the user who served it (a uid; an
//!   owner SID on Windows), who had passed the trust check, and the trust
//!   rule of the bridge that kept it. It answers only for a bridge that
//!   would trust that user now, and only while the app is not there (the
//!   ledger asks only then: never after a refusal, an untrusted server or
//!   a crash loop).
//! - **Which question.** One entry per request the answer depends on: the
//!   method, `initialize`'s `protocolVersion`, a list's `cursor`, and the
//!   2026-07-28 `_meta` protocol version; the endpoint's exact bytes (made
//!   absolute, its directory resolved: two apps each at `mcp.sock` of their
//!   own directory are two endpoints) and the project; and the requester,
//!   unless the answer's `cacheScope` says `"public"` (the spec's private
//!   answers, and every answer whose scope is not said, are the requester's
//!   own: one agent's `instructions` or tools are never another's). So concurrent bridges of one project keep each era's
//!   answers, each in a file of its own (renamed into place whole), and an
//!   `initialize` is never answered with a version it did not ask for.
//!   Multi round-trip retries (`inputResponses`, `requestState`) and
//!   `input_required` results are never kept (spec:
//!   `server/utilities/caching`).
//! - **What is said.** The result alone is kept, checked to be one
//!   complete JSON object when it is stored and again when it is read (a
//!   damaged entry is discarded and said once on stderr); the envelope and
//!   the id are always the bridge's. A 2026-07-28 result is served with
//!   what is left of its `ttlMs` since it was kept (the file's
//!   modification time; its `cacheScope` kept), and a stale one with
//!   `ttlMs: 0`, said stale on stderr (once a session), so no client keeps
//!   a stale answer as fresh. A newer answer that cannot be kept (an error, too long)
//!   removes the older one. Every answer given from here is said on
//!   stderr (once a session) and in the traffic log.
//! - **What is touched.** The directory is opened once, not through a
//!   link, checked to be ours and not writable by others, and held: files
//!   are read, written (with `fsync` before the rename) and removed through
//!   it, never by path (only the listing of names for the bound goes by
//!   path: see `unix.rs`). A file is removed or replaced only when it is
//!   provably the bridge's: its name is [`PREFIX`]`<16 hex>` and a kind's
//!   suffix (`.answer`, `.page`),
//!   it is a regular file of ours (not followed through a link), and it
//!   starts with the bridge's own header ([`entry::MAGIC`]). A
//!   `--cache-dir` that holds other files loses none of them.
//! - **When.** An answer is written whole and synced, then renamed into
//!   place (so a power cut leaves the old file or the new one, never half
//!   of one), before its reply reaches the client; the directory is synced
//!   and kept within its bounds after. So a client that has the reply and
//!   kills the bridge at once still finds the answer kept (the TypeScript
//!   2.x SDK ends its `server/discover` probe's bridge with SIGTERM the
//!   moment it has the answer): the reply waits for one small file's
//!   `fsync` (0.3 ms on the CI machine's disk), only for the answers kept,
//!   never for a call.
//! - Two kinds of file with budgets of their own ([`KINDS`]): the
//!   `initialize` and `server/discover` answers, never evicted by list
//!   pages, and the pages; [`BYTES_LIMIT`] in all (the oldest of a kind
//!   go), each result at most [`VALUE_LIMIT`], each key at most
//!   [`KEY_LIMIT`]; a cache that cannot be used is said
//!   once on stderr, and the session goes on without it; deleting the
//!   directory clears it; `--no-cache` turns it off.
//!
//! # What each platform provides
//! `unix.rs` and `windows.rs` give the same small interface: the user's
//! cache directory (`user_cache_dir`), the endpoint's exact bytes in its
//! absolute, resolved form (`endpoint_bytes`), and a held directory (`Dir`) with `open(path, create)`,
//! `read_aged(name, limit)` (a regular file of ours, not through a link,
//! and its age),
//! `write(name, text)` (whole, synced, renamed; never over a file that is
//! not ours), `sync()` (the renames made last), `remove(name)` (only a file of ours that starts with
//! [`entry::MAGIC`]) and `files()` (the bridge's answer files, with their
//! modification times).

use std::io;
use std::path::{Path, PathBuf};

use super::answers::{Answers, Learnt};
use crate::endpoint::ServerUser;
use crate::envelope::json::member;
use crate::traffic_log::TrafficLog;

mod entry;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

use entry::Read;

/// Largest result kept. An `initialize` result is a few hundred bytes, one
/// with long `instructions` a few KiB; a page of tools some tens of KiB.
pub const VALUE_LIMIT: usize = 64 * 1024;

/// Longest key kept (the endpoint, project, requester and the request's
/// parts): a longer one (a 100 KiB cursor) is not kept.
pub const KEY_LIMIT: usize = 64 * 1024;

/// Two kinds of file, each with a budget of its own, so that no catalog of
/// list pages ever evicts what the cache exists to keep: the answers
/// (`initialize`, `server/discover`: a few per endpoint and project in
/// use) and the list pages. Per kind: its suffix, most files, most bytes;
/// 16 MiB in all, enforced after every write (the oldest go).
const KINDS: [(&str, usize, u64); 2] = [
    (".answer", FILE_LIMIT, BYTES_LIMIT / 4),
    (".page", FILE_LIMIT, BYTES_LIMIT - BYTES_LIMIT / 4),
];

/// Most answer files of one kind kept in the directory.
pub const FILE_LIMIT: usize = 256;

/// Most bytes of answer files kept in the directory, both kinds together:
/// 4 MiB of answers, 12 MiB of pages.
pub const BYTES_LIMIT: u64 = 16 * 1024 * 1024;

/// The lists kept, as their `method` is written (raw JSON).
const LISTS: [&str; 4] = [
    "\"tools/list\"",
    "\"prompts/list\"",
    "\"resources/list\"",
    "\"resources/templates/list\"",
];

/// How every answer file's name starts.
const PREFIX: &str = "mcpb-";

/// Where the cache lives unless told otherwise: the platform's per-user
/// cache directory, `mcp-bridge` in it (`$XDG_CACHE_HOME/mcp-bridge` or
/// `~/.cache/mcp-bridge`; `~/Library/Caches/mcp-bridge` on macOS;
/// `%LOCALAPPDATA%\mcp-bridge` on Windows). `None` without a home.
pub fn default_dir() -> Option<PathBuf> {
    platform::user_cache_dir().map(|dir| dir.join("mcp-bridge"))
}

/// One session's view of the answers of an endpoint and project.
#[derive(Debug, Default)]
pub(in crate::bridge) struct Cache {
    /// The directory, when the cache is on.
    dir: Option<PathBuf>,
    /// The directory, once opened.
    held: Option<platform::Dir>,
    /// Files written since the last [`Cache::settle`]: the directory is to
    /// be synced and kept within its bounds.
    unsettled: bool,
    /// The endpoint's exact bytes and the project, apart: every key starts
    /// with them.
    base: Vec<u8>,
    /// Who this bridge asks for: what ends the key of an answer that is
    /// not said to be public.
    requester: Vec<u8>,
    /// The user this bridge trusts besides the defaults.
    trusted: Option<ServerUser>,
    /// Who serves the instance the bridge is connected to (or was last).
    server: Option<ServerUser>,
    log: Option<TrafficLog>,
    /// Said on stderr already: an answer given, an entry passed over.
    said_answered: bool,
    said_passed_over: bool,
    said_stale: bool,
}

impl Cache {
    /// The cache of `endpoint` and `project` in `dir` (none: off), for a
    /// bridge that trusts `trusted` besides the defaults.
    pub(in crate::bridge) fn open(
        dir: Option<&Path>,
        endpoint: &Path,
        project: &str,
        trusted: Option<&ServerUser>,
    ) -> Cache {
        let mut base = platform::endpoint_bytes(endpoint);
        base.push(0);
        base.extend_from_slice(project.as_bytes());
        Cache {
            dir: dir.map(Path::to_path_buf),
            base,
            trusted: trusted.cloned(),
            ..Cache::default()
        }
    }

    /// The cache a session of `config` answers from (and logs to `log`).
    pub(in crate::bridge) fn of(config: &super::Config, log: Option<&TrafficLog>) -> Cache {
        let mut cache = Cache::open(
            config.cache.as_deref(),
            &config.endpoint,
            &config.handshake.project,
            config.trusted_server.as_ref(),
        );
        cache.requester = config.handshake.requester.clone().into_bytes();
        cache.log_to(log);
        cache
    }

    /// Where answers given from the cache are written down, besides stderr.
    pub(in crate::bridge) fn log_to(&mut self, log: Option<&TrafficLog>) {
        self.log = log.cloned();
    }

    /// The bridge is connected to an instance served by `server`, who
    /// passed the trust check: answers learnt from now on are its.
    pub(in crate::bridge) fn served_by(&mut self, server: ServerUser) {
        self.server = Some(server);
    }

    /// The result to answer `request` with while the app is away (its
    /// `ttlMs` made 0), if an entry matches it and its server would be
    /// trusted by this bridge now.
    pub(in crate::bridge) fn answer(&mut self, request: &[u8]) -> Option<Vec<u8>> {
        let shared = key(&self.base, request)?;
        let private = self.private(&shared);
        self.lookup(request, &private)
            .or_else(|| self.lookup(request, &shared))
    }

    /// The key of the requester's own answer to the request of `shared`.
    fn private(&self, shared: &[u8]) -> Vec<u8> {
        let mut key = shared.to_vec();
        key.push(0);
        key.extend_from_slice(&self.requester);
        key
    }

    /// The answer kept under `key` for `request`, said as given.
    fn lookup(&mut self, request: &[u8], key: &[u8]) -> Option<Vec<u8>> {
        let name = file_name(&self.base, key);
        let (text, age) = match self.dir(false)?.read_aged(&name, file_limit(key)) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.pass_over(&name, &e, "");
                return None;
            }
        };
        let (server, result) = match entry::read(&text, key) {
            Read::Entry { server, result } => (server, result),
            Read::Other => return None,
            Read::Damaged(why) => {
                if let Some(dir) = &self.held {
                    let _ = dir.remove(&name);
                }
                self.pass_over(&name, &why, " (discarded)");
                return None;
            }
        };
        if !server.trusted(self.trusted.as_ref()) {
            let untrusted = " served it, whom this bridge does not trust";
            self.pass_over(&name, &server, untrusted);
            return None;
        }
        let method = member(request, "method").unwrap_or(b"");
        let said = format!(
            "answered {} from the answers cache (the app's last answer, served by {}) while the \
             app is away",
            std::str::from_utf8(method).unwrap_or_default(),
            server
        );
        // On stderr once a session (a CLI shows it in its MCP log), in the
        // traffic log each time.
        match (&self.log, std::mem::replace(&mut self.said_answered, true)) {
            (log, false) => super::say(log.as_ref(), &said),
            (Some(log), true) => log.event(format_args!("{}", said)),
            (None, true) => {}
        }
        // Fresh for what is left of the app's `ttlMs` since it was kept
        // (the file's modification time); a stale one is still given while
        // the app is away (the spec lets a client do so while re-fetching
        // fails), with `ttlMs` 0, and said stale, once a session.
        let (served, stale) = entry::served(result, age);
        if stale && !std::mem::replace(&mut self.said_stale, true) {
            let said = "an answer from the answers cache is stale (kept longer ago than the \
                        app's ttlMs): given as the app's last answer while it is away, with \
                        ttlMs 0";
            super::say(self.log.as_ref(), said);
        }
        Some(served)
    }

    /// The app answered `request` with `result` (none: an error, or a
    /// result too long to read whole): keeps it, or removes the older
    /// answer it replaces.
    pub(in crate::bridge) fn learn(&mut self, request: &[u8], result: Option<&[u8]>) {
        let shared = match key(&self.base, request) {
            Some(key) => key,
            None => return,
        };
        let private = self.private(&shared);
        let public = result.and_then(|result| member(result, "cacheScope")) == Some(b"\"public\"");
        // Kept under one key, and the other's older answer taken out (the
        // app may have changed the answer's scope).
        let (kept, other) = match public {
            true => (shared, private),
            false => (private, shared),
        };
        self.store(&kept, result);
        self.store(&other, None);
    }

    /// Keeps `result` under `key`, or removes the older answer (`None`).
    fn store(&mut self, key: &[u8], result: Option<&[u8]>) {
        let name = file_name(&self.base, key);
        let kept = match (result, &self.server) {
            (Some(result), Some(server)) if entry::keeps(result) => {
                Some(entry::write(key, server, self.trusted.as_ref(), result))
            }
            _ => None,
        };
        let dir = match self.dir(kept.is_some()) {
            Some(dir) => dir,
            None => return,
        };
        let done = match &kept {
            Some(text) => dir.write(&name, text),
            None => dir.remove(&name).map(drop),
        };
        match done {
            Ok(()) => self.unsettled |= kept.is_some(),
            Err(e) => self.off(&e),
        }
    }

    /// Makes the renames since the last call last (the directory synced)
    /// and keeps the directory within its bounds: what a write can leave
    /// until the client has the reply.
    pub(in crate::bridge) fn settle(&mut self) {
        if !std::mem::replace(&mut self.unsettled, false) {
            return;
        }
        let dir = match &self.held {
            Some(dir) => dir,
            None => return,
        };
        let synced = dir.sync();
        prune(dir);
        if let Err(e) = synced {
            self.off(&e);
        }
    }

    /// The directory, opened (created if `create`) on first use; `None`
    /// when the cache is off or has nothing yet.
    fn dir(&mut self, create: bool) -> Option<&platform::Dir> {
        if self.held.is_none() {
            let opened = platform::Dir::open(self.dir.as_deref()?, create);
            match opened {
                Ok(dir) => self.held = Some(dir),
                Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return None,
                Err(e) => {
                    self.off(&e);
                    return None;
                }
            }
        }
        self.held.as_ref()
    }

    /// Says (once a session) why an entry was not used: `why`, then
    /// `more`.
    fn pass_over(&mut self, name: &str, why: &dyn std::fmt::Display, more: &str) {
        if !std::mem::replace(&mut self.said_passed_over, true) {
            super::say(
                self.log.as_ref(),
                &format!(
                    "not answering from the answers cache's {}: {}{}",
                    name, why, more
                ),
            );
        }
    }

    /// Says once why the cache cannot be used, and stops using it.
    fn off(&mut self, error: &io::Error) {
        self.held = None;
        if let Some(dir) = self.dir.take() {
            super::say(
                self.log.as_ref(),
                &format!(
                    "not using the answers cache '{}': {} (the session goes on without it)",
                    dir.display(),
                    error
                ),
            );
        }
    }
}

/// The session asks the cache through the seam's trait; the I/O side
/// hands it what was learnt before the replies are written, and settles it
/// after.
impl Answers for Cache {
    fn answer(&mut self, request: &[u8]) -> Option<Vec<u8>> {
        Cache::answer(self, request)
    }

    fn learn(&mut self, learnt: Learnt) {
        Cache::learn(self, &learnt.request, learnt.result.as_deref());
    }

    fn settle(&mut self) {
        Cache::settle(self);
    }

    fn served_by(&mut self, server: ServerUser) {
        Cache::served_by(self, server);
    }
}

/// What the answer to `request` depends on, after `base` (the endpoint and
/// project): its method, the parameter that picks the answer
/// (`initialize`'s `protocolVersion`, a list's `cursor`), and its
/// 2026-07-28 protocol version; `None` for a request the cache does not
/// keep. The parts are raw JSON, apart by a NUL, which neither a path, an
/// argument nor a JSON text holds.
fn key(base: &[u8], request: &[u8]) -> Option<Vec<u8>> {
    let params = member(request, "params").unwrap_or(b"{}");
    let param = |name| member(params, name);
    if param("inputResponses").is_some() || param("requestState").is_some() {
        return None;
    }
    let method = member(request, "method")?;
    let picks: &[u8] = if method == b"\"initialize\"" {
        param("protocolVersion")?
    } else if method == b"\"server/discover\"" {
        b""
    } else if LISTS.iter().any(|list| list.as_bytes() == method) {
        param("cursor").unwrap_or(b"")
    } else {
        return None;
    };
    let era = param("_meta")
        .and_then(|meta| member(meta, "io.modelcontextprotocol/protocolVersion"))
        .unwrap_or(b"");
    let mut key = base.to_vec();
    for part in [method, picks, era] {
        key.push(0);
        key.extend_from_slice(part);
    }
    // (With the requester's bytes, for a private answer: counted here too.)
    if key.len() > KEY_LIMIT - 1024 {
        return None;
    }
    Some(key)
}

/// The answer file of `key`: [`PREFIX`], its FNV-1a hash, its kind's
/// suffix (the file repeats the key in full, so a collision is a miss).
fn file_name(base: &[u8], key: &[u8]) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in key {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut name = String::from(PREFIX);
    for digit in (0..16).rev() {
        name.push(char::from(entry::HEX[(hash >> (4 * digit)) as usize & 15]));
    }
    // The method follows the base (whose bytes may hold NULs: a pipe's
    // UTF-16 name on Windows).
    let method = key.get(base.len() + 1..).unwrap_or_default();
    let page = LISTS
        .iter()
        .any(|list| method.starts_with(list.as_bytes()) && method.get(list.len()) == Some(&0));
    name + KINDS[usize::from(page)].0
}

/// The kind (an index in [`KINDS`]) of the answer file `name`, if it is
/// one (see [`file_name`]).
fn kind_of(name: &str) -> Option<usize> {
    let hex = name.strip_prefix(PREFIX)?;
    let ok = hex.len() > 16 && hex.bytes().take(16).all(|b| b.is_ascii_hexdigit());
    KINDS.iter().position(|kind| ok && &hex[16..] == kind.0)
}

/// Whether `name` is an answer file's (see [`file_name`]).
fn is_answer_file(name: &str) -> bool {
    kind_of(name).is_some()
}

/// The most bytes an answer file of `key` holds: its header (the key
/// once, the server) and a result.
fn file_limit(key: &[u8]) -> usize {
    entry::MAGIC.len() + key.len() + 512 + VALUE_LIMIT
}

/// Removes the oldest answer files of each kind beyond its count or its
/// bytes (see [`KINDS`]; best effort: another bridge may be at it too).
fn prune(dir: &platform::Dir) {
    let all = dir.files();
    for (kind, &(_, count, bytes)) in KINDS.iter().enumerate() {
        let mut files: Vec<_> = all
            .iter()
            .filter(|file| kind_of(&file.2) == Some(kind))
            .collect();
        let mut total: u64 = files.iter().map(|file| file.1).sum();
        // The oldest go one at a time, found by a scan: a save adds one
        // file, so there is one to remove, rarely more, and a sort's code
        // is 4 KB.
        while files.len() > count || total > bytes {
            let oldest = files.iter().enumerate().min_by(|a, b| a.1 .0.cmp(&b.1 .0));
            if let Some((oldest, _)) = oldest {
                let file = files.swap_remove(oldest);
                total -= file.1;
                let _ = dir.remove(&file.2);
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests;
