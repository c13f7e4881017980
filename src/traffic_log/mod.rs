//! The traffic log (`--log <FILE>`): one line per JSON-RPC message that
//! passes and per event of the session, for the person debugging an agent
//! whose tools misbehave. The CLI hides a stdio server's stderr, so without
//! it nothing is left to look at.
//!
//! ```text
//! 2026-11-30T15:04:05.123456Z event start mcp-bridge 0.1.0 pid=4242 argv=["mcp-bridge","mcp-server",...]
//! 2026-11-30T15:04:05.124010Z cli->app request id=1 method=initialize len=161 {"jsonrpc":"2.0","id":1,...}
//! 2026-11-30T15:04:05.125002Z app->cli response id=1 len=152 {"jsonrpc":"2.0","id":1,"result":{...}}
//! ```
//!
//! (The layout and the escaping are in `record.rs`: UTC timestamps with
//! microseconds, one line per record whatever the message holds.)
//!
//! Logging must never cost the relay more than a copy (and, for a request
//! from the CLI with a `_meta`, one parse of it, for its caller), whatever
//! the disk does, and must never fill it:
//!
//! - **Never blocks the relay.** Recording a message appends one formatted
//!   line to an in-memory queue under a lock held for that copy. One
//!   writer thread per log takes the whole queue at once and appends it to
//!   the file with ordinary blocking writes; only that thread ever waits
//!   for the disk. It lets records gather for a moment (`LINGER`, or
//!   until `WRITE_EARLY` bytes wait) before writing, so a burst of messages
//!   costs one write, not one per message.
//! - **Bounded in memory.** At most [`LogOptions::queue_limit`] bytes of
//!   records wait or are being written. A record that does not fit is
//!   dropped and counted, and the next one that fits is preceded by
//!   `event dropped N records: ...`. Records lost to a failing disk are
//!   counted the same way, and so is a `dropped` event lost with them:
//!   its N goes into the next count, so the count written is exact. A
//!   count still unwritten when the log closes is written then, as a last
//!   event, if the disk has room for it.
//! - **Bounded on disk.** The file is rotated to `FILE.1` at
//!   [`LogOptions::max_file_bytes`] (one old file is kept, so the log
//!   takes at most twice that); see `file.rs`.
//! - **Bounded per message.** Only the first [`LogOptions::message_cap`]
//!   bytes of a message are kept, then `… (N bytes left out)`.
//! - **Private.** The file is created owner-only (0600) on Unix, where an
//!   existing file of ours with a wider mode is narrowed; on Windows it
//!   inherits its directory's ACL (see `windows.rs`).
//! - **Never turned against its user.** The log holds tool arguments and
//!   results, and may be asked for in a directory others can write, by a
//!   process running as root. So on Unix its directory is found one
//!   component at a time and held open, following only the symbolic links
//!   no other user can re-point (a link another user can re-point refuses
//!   the log); a symbolic link at `FILE` is refused, never followed
//!   (`O_NOFOLLOW`); and the file actually opened
//!   (checked through its descriptor, not its path) must be a regular file
//!   owned by our effective user, with a single link, and not the file our
//!   stdout is (`--log /dev/stdout` would put records into the JSON-RPC
//!   stream). Anything else is refused untouched, with one warning, and the
//!   session goes on without a log. A directory others could replace the
//!   file in (another user's; writable by everyone, or by a group not our
//!   own, without the sticky bit) is one warning, and the log is kept.
//!   `FILE` is opened by name again only to rotate it, in the directory
//!   held and under the same checks, so a link swapped in mid-session, or
//!   a directory re-pointed, redirects nothing (`file.rs`, `unix.rs`).
//! - **Safe between processes.** Bridges sharing one `FILE` rotate it
//!   under an advisory lock, only if the file they hold is still the one at
//!   `FILE`, and never truncate a file (see `file.rs`).
//! - **Never fatal.** A full disk, or the file size limit (`ulimit -f`;
//!   `SIGXFSZ` is caught on Unix, so it does not kill the process), is one
//!   warning, and records are dropped and counted; the relay goes on.
//! - **Optional.** A log that cannot be opened, or is refused, is one
//!   warning on stderr ([`TrafficLog::open_or_warn`]) and the session goes
//!   on without it. With no log, the relay holds `None` where a [`LineTap`]
//!   would be.
//!
//! The relay feeds each chunk it forwards to a [`LineTap`] (one per
//! direction), which assembles lines and writes one record per message;
//! [`TapRead`] and [`TapWrite`] wrap a stream so that happens on its own.
//! Events are free text ([`TrafficLog::event`]), with helpers for the ones
//! every session has, so their wording is the same in every log.

mod file;
mod record;
mod refusal;
mod tap;
// The platform's side of the log file, used by `file.rs` only. Each
// platform provides: `Dir`, the directory the file is in, as held;
// `open_dir(path)`, that directory opened; `open_private(dir,
// name)`, the file opened for appending and checked (a `Refusal` when it
// must not be written); `still_at(file, dir, name)`; `rename(dir, from,
// to)`; `lock(file)` and `unlock(file)` around a batch;
// `is_file_too_large(error)`; `directory_warning(dir, path)`; and
// `survive_file_size_limit()`. They use `refusal.rs` and nothing else of
// the log.
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use record::Direction;
pub use tap::{LineTap, TapRead, TapWrite};

use crate::caller::caller;
use crate::diag;
use crate::envelope::json::push_json_string;
use crate::envelope::{Envelope, Kind};
use file::LogFile;

/// Default size at which the log file is rotated: days of a busy agent's
/// traffic at 4 KiB per message, and a size any disk can spare twice.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Default number of bytes of each message kept: the whole of nearly every
/// request and of most results, and the start (with the method and id) of
/// a 10 MiB file read.
pub const DEFAULT_MESSAGE_CAP: usize = 4 * 1024;

/// Default bound on records waiting for the disk: a thousand records of
/// the longest kind, seconds of a relay at full speed.
pub const DEFAULT_QUEUE_LIMIT: usize = 4 * 1024 * 1024;

/// The variable that sets [`LogOptions::max_file_bytes`] for the binary
/// (see [`LogOptions::from_env`]).
pub const MAX_BYTES_ENV: &str = "MCP_BRIDGE_LOG_MAX_BYTES";

/// How long the writer lets records gather before writing them: a burst of
/// messages becomes one write, and `tail -f` still looks immediate.
const LINGER: Duration = Duration::from_millis(20);

/// Queued bytes at which the writer stops lingering and writes at once.
const WRITE_EARLY: usize = 256 * 1024;

/// How long dropping the last handle of a log waits for its last records
/// to reach the file: all a healthy disk needs, and a bounded delay at the
/// exit when the disk is stuck.
const LAST_RECORDS: Duration = Duration::from_secs(1);

/// How a [`TrafficLog`] bounds itself. New settings are added as fields
/// with a default, so build it from `default()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// Size at which `FILE` is renamed to `FILE.1` and started anew.
    /// Default: [`DEFAULT_MAX_FILE_BYTES`].
    pub max_file_bytes: u64,
    /// Bytes of each message kept in its record. Default:
    /// [`DEFAULT_MESSAGE_CAP`].
    pub message_cap: usize,
    /// Most bytes of records waiting for the disk; beyond it records are
    /// dropped and counted. Default: [`DEFAULT_QUEUE_LIMIT`].
    pub queue_limit: usize,
}

impl Default for LogOptions {
    fn default() -> LogOptions {
        LogOptions {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            message_cap: DEFAULT_MESSAGE_CAP,
            queue_limit: DEFAULT_QUEUE_LIMIT,
        }
    }
}

impl LogOptions {
    /// The defaults, with the rotation size taken from
    /// `MCP_BRIDGE_LOG_MAX_BYTES` when it is set (a whole number of bytes,
    /// at least 1). A value that is not is one warning on stderr, and the
    /// default is used.
    pub fn from_env() -> LogOptions {
        let mut options = LogOptions::default();
        if let Some(value) = std::env::var_os(MAX_BYTES_ENV) {
            match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
                Some(bytes) if bytes > 0 => options.max_file_bytes = bytes,
                _ => diag::log(format_args!(
                    "{} must be a whole number of bytes, got '{}'; using {}",
                    MAX_BYTES_ENV,
                    value.to_string_lossy(),
                    DEFAULT_MAX_FILE_BYTES
                )),
            }
        }
        options
    }
}

/// The log file could not be opened (or its writer thread not started),
/// or what was opened was refused (a symbolic link, another user's file,
/// our stdout...). Display names the file; `source()` is the OS error, or
/// says why the file was refused.
#[derive(Debug)]
pub struct LogError {
    path: PathBuf,
    source: io::Error,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if refusal::Refusal::is(&self.source) {
            "refusing"
        } else {
            "cannot open"
        };
        write!(f, "{} the traffic log '{}'", what, self.path.display())
    }
}

impl Error for LogError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}

/// A handle on one traffic log; clones share the file and its writer
/// thread. Dropping the last handle (taps included) writes what is queued,
/// waiting for it at most a second, and ends the writer thread.
#[derive(Clone)]
pub struct TrafficLog {
    handle: Arc<Handle>,
    /// The connection of `serve` the records are about, if any.
    conn: Option<u64>,
}

impl fmt::Debug for TrafficLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrafficLog")
            .field("options", &self.handle.shared.options)
            .field("conn", &self.conn)
            .finish()
    }
}

impl TrafficLog {
    /// Opens `path` for appending (creating it owner-only), refusing what
    /// must not be written (see the [module docs](self)), and starts its
    /// writer thread. A directory others can write is one warning on
    /// stderr. On Unix, from the first call on, `SIGXFSZ` is caught for the
    /// whole process (unless it already had a disposition of its own), so
    /// a file size limit fails a write instead of killing the process.
    pub fn open(path: &Path, options: LogOptions) -> Result<TrafficLog, LogError> {
        let error = |source| LogError {
            path: path.to_path_buf(),
            source,
        };
        platform::survive_file_size_limit();
        let file = LogFile::open(path, options.max_file_bytes).map_err(error)?;
        if let Some(warning) = file.directory_warning() {
            diag::log(format_args!("{}", warning));
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            written: Condvar::new(),
            options,
        });
        let writer = shared.clone();
        std::thread::Builder::new()
            .name("mcp-bridge-log".into())
            .spawn(move || write_forever(&writer, file))
            .map_err(error)?;
        Ok(TrafficLog {
            handle: Arc::new(Handle { shared }),
            conn: None,
        })
    }

    /// [`open`](Self::open), or, when that fails, one warning on stderr
    /// and `None`: a log is never a reason not to relay.
    pub fn open_or_warn(path: &Path, options: LogOptions) -> Option<TrafficLog> {
        match TrafficLog::open(path, options) {
            Ok(log) => Some(log),
            Err(e) => {
                diag::log(format_args!(
                    "{}; going on without a traffic log",
                    crate::error_chain(&e)
                ));
                None
            }
        }
    }

    /// A handle whose records all say `conn=<conn>`: for the connections
    /// of `serve`, which share one log.
    pub fn for_connection(&self, conn: u64) -> TrafficLog {
        TrafficLog {
            handle: self.handle.clone(),
            conn: Some(conn),
        }
    }

    /// A tap for one direction of a stream; see [`LineTap`].
    pub fn tap(&self, direction: Direction) -> LineTap {
        LineTap::new(self.clone(), direction)
    }

    /// Records one event, its text escaped onto one line. Never blocks.
    pub fn event(&self, text: fmt::Arguments<'_>) {
        let text = text.to_string();
        let conn = self.conn;
        self.push(|out, micros| record::write_event(out, micros, conn, text.as_bytes()));
    }

    /// Waits until every record queued so far is in the file (or lost to
    /// a write error), or `limit` has passed; `true` if it got there.
    pub fn flush(&self, limit: Duration) -> bool {
        let shared = &self.handle.shared;
        let deadline = Instant::now() + limit;
        let mut queue = shared.lock();
        queue.flush = true;
        shared.work.notify_all();
        let written = |q: &Queue| q.done || (q.pending.is_empty() && q.in_flight == 0);
        while !written(&queue) {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            queue = shared
                .written
                .wait_timeout(queue, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// `start mcp-bridge <version> pid=<pid> argv=[...]`, the argument
    /// list as a JSON array.
    pub fn start(&self) {
        let mut argv = vec![b'['];
        for (i, arg) in std::env::args_os().enumerate() {
            if i > 0 {
                argv.push(b',');
            }
            push_json_string(&mut argv, &arg.to_string_lossy());
        }
        argv.push(b']');
        self.event(format_args!(
            "start mcp-bridge {} pid={} argv={}",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            String::from_utf8_lossy(&argv)
        ));
    }

    /// `connect attempt=<n> endpoint='<path>'`.
    pub fn connect_attempt(&self, attempt: u32, endpoint: &Path) {
        self.event(format_args!(
            "connect attempt={} endpoint='{}'",
            attempt,
            endpoint.display()
        ));
    }

    /// `connected attempt=<n> in <ms> ms`, or `connect failed attempt=<n>
    /// after <ms> ms: <error chain>`.
    pub fn connect_outcome(
        &self,
        attempt: u32,
        elapsed: Duration,
        outcome: Result<(), &(dyn Error + 'static)>,
    ) {
        match outcome {
            Ok(()) => self.event(format_args!(
                "connected attempt={} in {}",
                attempt,
                Millis(elapsed)
            )),
            Err(e) => self.event(format_args!(
                "connect failed attempt={} after {}: {}",
                attempt,
                Millis(elapsed),
                crate::error_chain(e)
            )),
        }
    }

    /// `handshake sent <line>`.
    pub fn handshake_sent(&self, line: &[u8]) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        self.event(format_args!(
            "handshake sent {}",
            String::from_utf8_lossy(line)
        ));
    }

    /// `stdin closed`: the CLI is done sending.
    pub fn stdin_eof(&self) {
        self.event(format_args!("stdin closed"));
    }

    /// `the app hung up`.
    pub fn app_hung_up(&self) {
        self.event(format_args!("the app hung up"));
    }

    /// `reconnect attempt=<n> after <ms> ms: <why>`.
    pub fn reconnect(&self, attempt: u32, delay: Duration, why: &dyn fmt::Display) {
        self.event(format_args!(
            "reconnect attempt={} after {}: {}",
            attempt,
            Millis(delay),
            why
        ));
    }

    /// `replayed method=<method> len=<n>`: a line the bridge sent again
    /// after reconnecting.
    pub fn replayed(&self, method: &str, len: usize) {
        self.event(format_args!("replayed method={} len={}", method, len));
    }

    /// `sent error response id=<id> code=<code>: <message>`: an error the
    /// bridge answered the CLI with itself.
    pub fn error_response_sent(&self, raw_id: &[u8], code: i64, message: &str) {
        self.event(format_args!(
            "sent error response id={} code={}: {}",
            String::from_utf8_lossy(raw_id),
            code,
            message
        ));
    }

    /// `exit code=<code>: <reason>`.
    pub fn exit(&self, code: i32, reason: &dyn fmt::Display) {
        self.event(format_args!("exit code={}: {}", code, reason));
    }

    /// Records one message whose envelope the caller already has (a relay
    /// running its own [`Scanner`](crate::envelope::Scanner) need not run a
    /// second one in a [`LineTap`]). `shown` is the message's start (at
    /// most the message cap), `len` its whole length, neither counting the
    /// final `\n`. Never blocks.
    pub(crate) fn message(
        &self,
        direction: Direction,
        envelope: &Envelope<'_>,
        shown: &[u8],
        len: u64,
    ) {
        let conn = self.conn;
        // Read before the queue's lock is taken: the parse is the cost.
        let request = match (direction, envelope.kind) {
            (Direction::CliToApp, Kind::Request) => request_of(shown, len),
            _ => None,
        };
        let caller = request.as_ref().and_then(|r| caller(&r["params"]["_meta"]));
        self.push(|out, micros| {
            let message = record::Message {
                envelope,
                caller: caller.as_ref(),
                shown,
                len,
            };
            record::write_message(out, micros, direction, conn, &message)
        });
    }

    /// How much of each message a record keeps.
    pub(crate) fn message_cap(&self) -> usize {
        self.handle.shared.options.message_cap
    }

    /// Appends one record (built by `write` at the current time) to the
    /// queue, or drops and counts it if the queue is full. Wakes the writer
    /// only when it is idle, or lingering with plenty to write.
    fn push(&self, write: impl FnOnce(&mut Vec<u8>, u64)) {
        let micros = now_micros();
        let shared = &self.handle.shared;
        let mut queue = shared.lock();
        let queue = &mut *queue;
        let before = queue.pending.len();
        let dropped = queue.dropped;
        if dropped > 0 {
            record::write_dropped(&mut queue.pending, micros, dropped);
        }
        write(&mut queue.pending, micros);
        if queue.pending.len() + queue.in_flight > shared.options.queue_limit {
            queue.pending.truncate(before);
            queue.dropped += 1;
            return;
        }
        if dropped > 0 {
            queue.markers.push(Marker {
                at: before,
                dropped,
            });
            queue.dropped = 0;
        }
        let wake = match queue.writer {
            WriterState::Idle => true,
            WriterState::Lingering => queue.pending.len() >= WRITE_EARLY,
            WriterState::Writing => false,
        };
        if wake {
            shared.work.notify_one();
        }
    }
}

/// A request whose `params._meta` may name its caller (see `caller.rs`),
/// parsed: only if the record keeps the whole request and it has a `_meta`
/// at all, once, on the relay's thread. Requests are small (a tool's
/// arguments); the results that can be large go the other way.
fn request_of(shown: &[u8], len: u64) -> Option<serde_json::Value> {
    if shown.len() as u64 != len || !shown.windows(7).any(|w| w == b"\"_meta\"") {
        return None;
    }
    serde_json::from_str(std::str::from_utf8(shown).ok()?).ok()
}

/// The time now, as records carry it: microseconds since the Unix epoch.
fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Milliseconds, as events show them.
struct Millis(Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", crate::decimal::Fixed::millis(self.0, 1))
    }
}

/// Owned by every [`TrafficLog`] of one log; its drop (with the last
/// handle) closes the log.
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let shared = &self.shared;
        let deadline = Instant::now() + LAST_RECORDS;
        let mut queue = shared.lock();
        queue.closed = true;
        shared.work.notify_all();
        while !queue.done {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            queue = shared
                .written
                .wait_timeout(queue, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// What the handles and the writer thread share.
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer: records queued, a flush asked for, or closed.
    work: Condvar,
    /// Wakes [`TrafficLog::flush`] and the last handle's drop: a batch
    /// written, or the writer done.
    written: Condvar,
    options: LogOptions,
}

impl Shared {
    /// A poisoned lock only means a panic elsewhere; the queue is still
    /// sound (every change to it is an append, a truncate or a swap).
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the writer thread is doing, so records wake it only when needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum WriterState {
    /// Waiting for records.
    #[default]
    Idle,
    /// Letting records gather before a write.
    Lingering,
    /// Writing a batch; it looks at the queue again when done.
    Writing,
}

#[derive(Debug, Default)]
struct Queue {
    /// Whole records, each ending in `\n`, waiting for the writer.
    pending: Vec<u8>,
    /// The `dropped N records` events in `pending`, in order: a write that
    /// fails to put one in the file loses its N, not one record.
    markers: Vec<Marker>,
    /// Bytes the writer has taken and is writing.
    in_flight: usize,
    /// Records dropped (or lost to write errors) and not yet counted in a
    /// queued `dropped N records` event.
    dropped: u64,
    writer: WriterState,
    /// Someone waits for the queue to be written: no lingering.
    flush: bool,
    /// The last handle is gone: write what is left, then stop.
    closed: bool,
    /// The writer thread has stopped.
    done: bool,
}

/// A `dropped N records` event in a batch: where it starts, and the N it
/// stands for.
#[derive(Debug, Clone, Copy)]
struct Marker {
    at: usize,
    dropped: u64,
}

/// How many records of `batch` (whose `dropped N records` events are
/// `markers`) are lost when only its first `written` bytes reached the
/// file: each record after that, each of those events counting for its N.
fn records_lost(batch: &[u8], markers: &[Marker], written: usize) -> u64 {
    let rest = batch.get(written..).unwrap_or_default();
    let records = rest.iter().filter(|&&b| b == b'\n').count() as u64;
    let (events, dropped) = markers
        .iter()
        .filter(|marker| marker.at >= written)
        .fold((0, 0), |(events, dropped), marker| {
            (events + 1, dropped + marker.dropped)
        });
    records - events + dropped
}

/// The writer thread: takes everything queued, appends it to the file, and
/// repeats until the log is closed and its queue written. A count of lost
/// records still unwritten then is queued as a last `dropped N records`
/// event and tried once more, so the count reaches the file as soon as
/// there is room for it, even when no record follows.
fn write_forever(shared: &Shared, mut file: LogFile) {
    let mut batch = Vec::new();
    let mut markers = Vec::new();
    let mut last_count_tried = false;
    let mut queue = shared.lock();
    loop {
        while queue.pending.is_empty() && !queue.closed {
            queue.writer = WriterState::Idle;
            queue.flush = false;
            queue = shared
                .work
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if queue.pending.is_empty() && queue.dropped > 0 && !last_count_tried {
            last_count_tried = true;
            let micros = now_micros();
            let dropped = std::mem::take(&mut queue.dropped);
            record::write_dropped(&mut queue.pending, micros, dropped);
            queue.markers.push(Marker { at: 0, dropped });
        }
        if queue.pending.is_empty() {
            break;
        }
        if !queue.closed && !queue.flush && queue.pending.len() < WRITE_EARLY {
            queue.writer = WriterState::Lingering;
            queue = shared
                .work
                .wait_timeout(queue, LINGER)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        queue.writer = WriterState::Writing;
        batch.clear();
        markers.clear();
        std::mem::swap(&mut queue.pending, &mut batch);
        std::mem::swap(&mut queue.markers, &mut markers);
        queue.in_flight = batch.len();
        drop(queue);
        let written = file.write(&batch);
        queue = shared.lock();
        queue.in_flight = 0;
        queue.dropped += records_lost(&batch, &markers, written);
        shared.written.notify_all();
    }
    queue.done = true;
    shared.written.notify_all();
}

#[cfg(test)]
mod tests;
