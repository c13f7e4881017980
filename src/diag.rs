//! Diagnostics on stderr that never block, and never kill, the caller.
//!
//! A host's stderr is whatever its parent made of it: a terminal, a log
//! file, a pipe to a log collector that restarts now and then, or a pipe
//! nobody reads at all (an app that spawned `mcp-bridge serve` and forgot
//! it). Writing a log line straight to it from an async task can therefore
//! block the executor thread for good once the pipe is full (every session
//! on that thread stops, shutdown included), and `eprintln!` panics when the
//! reader has gone away (`EPIPE`), which `panic = "abort"` turns into a
//! crash that cuts every session and leaves the socket file behind.
//!
//! So every diagnostic of the library goes through one process-wide queue
//! instead:
//!
//! - [`log`] and [`write_line`] only append to the queue, under a lock
//!   held for a copy; they never wait for stderr.
//! - One dedicated thread (started with the first line) takes what is
//!   queued and writes it to stderr with ordinary blocking writes. Only
//!   that thread ever waits for a slow stderr.
//! - The queue holds at most [`QUEUE_LIMIT`] bytes, the batch being written
//!   included. A line that does not fit is dropped and counted, and the
//!   next line that fits is preceded by
//!   `mcp-bridge: (N diagnostic lines dropped: stderr is not being read)`.
//! - Write errors (a reader that went away, a closed descriptor) are
//!   ignored: there is nobody left to tell. The writer keeps taking lines,
//!   so the queue never fills because of them. (Rust programs ignore
//!   `SIGPIPE`, so such a write fails with `EPIPE` instead of killing the
//!   process; a non-Rust host embedding this crate should do the same.)
//! - [`flush`] waits, at most as long as it is told, for the queue to be
//!   written: for exit paths, so the last lines are not lost when stderr is
//!   healthy, and the exit is not held up when it is not.
//!
//! ```
//! mcp_bridge::diag::log(format_args!("listening on '{}'", "/tmp/app.sock"));
//! // Before exiting: give the lines a moment to reach stderr.
//! mcp_bridge::diag::flush(std::time::Duration::from_secs(1));
//! ```

use std::fmt;
#[cfg(not(unix))]
use std::io;
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most bytes of diagnostics held at once, the batch being written
/// included: a few thousand log lines, or four of the longest lines `serve`
/// copies from a child's stderr. Beyond it, lines are dropped and counted.
pub const QUEUE_LIMIT: usize = 256 * 1024;

/// What every line of [`log`] starts with.
const PREFIX: &[u8] = b"mcp-bridge: ";

/// The queue, shared by every thread of the process.
static QUEUE: Mutex<Queue> = Mutex::new(Queue::new());

/// Wakes the writer thread when lines are queued.
static QUEUED: Condvar = Condvar::new();

/// Wakes [`flush`] when everything queued has been written.
static WRITTEN: Condvar = Condvar::new();

/// Writes `mcp-bridge: <message>\n` to stderr without waiting for it.
///
/// The line is queued for the writer thread, or dropped (and counted) when
/// the queue is full because stderr is not being read.
pub fn log(message: fmt::Arguments<'_>) {
    let mut line = PREFIX.to_vec();
    // Writing into a Vec fails only if a Display impl fails; then the line
    // says as much as it got.
    let _ = line.write_fmt(message);
    line.push(b'\n');
    queue(line);
}

/// Writes `line` to stderr as it is (a final `\n` is added where missing)
/// without waiting for it: for text that carries its own prefix, such as a
/// child's stderr line behind its requester.
///
/// Dropped (and counted) like any line when the queue is full.
pub fn write_line(line: &[u8]) {
    let mut owned = Vec::with_capacity(line.len() + 1);
    owned.extend_from_slice(line);
    if owned.last() != Some(&b'\n') {
        owned.push(b'\n');
    }
    queue(owned);
}

/// Waits until every queued line has been written to stderr, or `limit`
/// has passed, whichever comes first; `true` if everything was written.
///
/// For exit paths: a process that exits right after logging would
/// otherwise lose the lines the writer thread had not reached yet. If
/// lines were dropped since the last one written, the count is queued
/// first, so it is not lost with the exit.
pub fn flush(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut queue = lock();
    queue.push_dropped_notice(QUEUE_LIMIT);
    while !queue.is_empty() {
        if !queue.writer_started && !start_writer(&mut queue) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        queue = WRITTEN
            .wait_timeout(queue, deadline - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}

/// Queues one whole line, starting the writer thread if need be.
fn queue(line: Vec<u8>) {
    let mut queue = lock();
    if queue.push(&line, QUEUE_LIMIT) {
        if !queue.writer_started {
            // If the thread cannot be started now, the lines wait (up to the
            // limit) for a later attempt, made with the next line.
            start_writer(&mut queue);
        }
        QUEUED.notify_one();
    }
}

/// Starts the writer thread; `false` if the OS refused.
fn start_writer(queue: &mut Queue) -> bool {
    let started = std::thread::Builder::new()
        .name("mcp-bridge-stderr".into())
        .stack_size(crate::io::SMALL_STACK)
        .spawn(write_forever)
        .is_ok();
    queue.writer_started = started;
    started
}

/// The writer thread: takes everything queued, writes it, and repeats.
fn write_forever() {
    let mut queue = lock();
    loop {
        while queue.pending.is_empty() {
            queue = QUEUED.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        let batch = std::mem::take(&mut queue.pending);
        queue.in_flight = batch.len();
        drop(queue);
        // Nobody is left to tell about a stderr that fails: ignore it, and
        // keep taking lines so the queue does not fill because of it.
        write_stderr(&batch);
        drop(batch);
        queue = lock();
        queue.in_flight = 0;
        if queue.pending.is_empty() {
            WRITTEN.notify_all();
        }
    }
}

/// Writes `bytes` to stderr, all of them unless it fails. On Unix straight
/// to fd 2, without std's `Stderr` handle (its lock is of no use to the one
/// thread that writes there).
#[cfg(unix)]
fn write_stderr(mut bytes: &[u8]) {
    let stderr = crate::ffi::unix::standard_stream(2);
    while !bytes.is_empty() {
        match rustix::io::write(stderr, bytes) {
            Ok(0) => return,
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

#[cfg(not(unix))]
fn write_stderr(bytes: &[u8]) {
    let _ = io::stderr().write_all(bytes);
}

/// A poisoned lock only means a panic elsewhere; the queue is still sound
/// (every change to it is a single push or take).
fn lock() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The bookkeeping behind the queue, apart from the statics so it can be
/// tested on its own.
#[derive(Debug)]
struct Queue {
    /// Whole lines waiting for the writer thread.
    pending: Vec<u8>,
    /// Bytes the writer thread has taken and is still writing.
    in_flight: usize,
    /// Lines dropped since the last one queued.
    dropped: u64,
    writer_started: bool,
}

impl Queue {
    const fn new() -> Queue {
        Queue {
            pending: Vec::new(),
            in_flight: 0,
            dropped: 0,
            writer_started: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.in_flight == 0
    }

    /// Appends `line` (preceded by the count of lines dropped before it, if
    /// any) when both fit in `limit`; otherwise drops it and counts it.
    fn push(&mut self, line: &[u8], limit: usize) -> bool {
        let notice = self.dropped_notice();
        let needed = line.len() + notice.as_ref().map_or(0, Vec::len);
        if self.pending.len() + self.in_flight + needed > limit {
            self.dropped += 1;
            return false;
        }
        if let Some(notice) = notice {
            self.pending.extend_from_slice(&notice);
            self.dropped = 0;
        }
        self.pending.extend_from_slice(line);
        true
    }

    /// Queues the count of dropped lines on its own, if there is one and it
    /// fits.
    fn push_dropped_notice(&mut self, limit: usize) {
        if let Some(notice) = self.dropped_notice() {
            if self.pending.len() + self.in_flight + notice.len() <= limit {
                self.pending.extend_from_slice(&notice);
                self.dropped = 0;
                QUEUED.notify_one();
            }
        }
    }

    fn dropped_notice(&self) -> Option<Vec<u8>> {
        if self.dropped == 0 {
            return None;
        }
        Some(
            format!(
                "mcp-bridge: ({} diagnostic lines dropped: stderr is not being read)\n",
                self.dropped
            )
            .into_bytes(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_beyond_the_limit_are_dropped_and_counted() {
        let mut queue = Queue::new();
        assert!(queue.push(b"one\n", 10));
        assert!(queue.push(b"two\n", 10));
        assert!(!queue.push(b"three\n", 10), "4 + 4 + 6 > 10");
        assert!(!queue.push(b"four\n", 10));
        assert_eq!(queue.dropped, 2);
        assert_eq!(queue.pending, b"one\ntwo\n");
    }

    #[test]
    fn the_next_line_that_fits_says_how_many_were_dropped() {
        let mut queue = Queue::new();
        queue.in_flight = 1000;
        assert!(!queue.push(b"lost\n", 1000));
        assert!(!queue.push(b"lost\n", 1000));
        queue.in_flight = 0; // the writer got through
        assert!(queue.push(b"back\n", 1000));
        assert_eq!(
            String::from_utf8_lossy(&queue.pending),
            "mcp-bridge: (2 diagnostic lines dropped: stderr is not being read)\nback\n"
        );
        assert_eq!(queue.dropped, 0);
    }

    #[test]
    fn the_count_is_not_written_when_it_does_not_fit_either() {
        let mut queue = Queue::new();
        queue.dropped = 3;
        assert!(!queue.push(b"x\n", 20), "the notice alone is longer");
        assert_eq!(queue.dropped, 4);
        assert!(queue.pending.is_empty());
    }

    #[test]
    fn flush_queues_a_last_count() {
        let mut queue = Queue::new();
        queue.dropped = 5;
        queue.push_dropped_notice(1000);
        assert!(String::from_utf8_lossy(&queue.pending).contains("(5 diagnostic lines dropped"));
        assert_eq!(queue.dropped, 0);
    }
}
