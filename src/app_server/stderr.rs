//! Draining a child's stderr so it can neither block the child nor be lost.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_lite::io::{AsyncRead, AsyncReadExt};

use crate::wait::{self, StopOnDrop, Stopped};

/// How much of a child's stderr is kept: the last 64 KiB.
///
/// Enough for a panic message with its backtrace, or the last few hundred log lines,
/// while a child that logs gigabytes still costs us a fixed amount of memory.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// How many bytes are drained before other tasks get a turn: 1 MiB.
const YIELD_AFTER: usize = 1024 * 1024;

/// The most recent bytes a child wrote to its stderr, kept up to date by a background
/// task.
///
/// A pipe holds only a few kilobytes, so a child whose stderr nobody reads stops dead
/// on its next log line. [`spawn_app_server`](super::spawn_app_server)
/// therefore reads stderr continuously from the moment of spawning, discarding all but
/// the last [`STDERR_TAIL_BYTES`]. Clones share the same buffer.
///
/// The draining stops when the pipe ends, or when the last clone is dropped, whichever
/// comes first: a grandchild that escaped its group and inherited the pipe may keep it
/// open for as long as it lives, and nobody could read what a drain kept after that.
#[derive(Clone)]
pub struct StderrTail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
    /// Fires when the drain task reaches end of file.
    finished: Stopped,
    /// Held by every clone; when the last one goes, the drain task stops and closes
    /// the pipe.
    _draining: StopOnDrop,
}

impl StderrTail {
    /// Starts draining `stderr` on smol's global executor.
    ///
    /// The task ends when every writer of the pipe has closed it, which is normally
    /// when the child exits, or when every clone of the returned tail has been
    /// dropped; it then drops `stderr`. Keep a clone for as long as the child runs:
    /// once the pipe is closed, the child's next write to its stderr fails (or, if it
    /// does not ignore `SIGPIPE`, ends it).
    pub fn drain<R>(mut stderr: R) -> StderrTail
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        let (finishing, finished) = wait::stop_signal();
        let (draining, abandoned) = wait::stop_signal();
        let tail = StderrTail {
            bytes: Arc::new(Mutex::new(VecDeque::new())),
            finished,
            _draining: draining,
        };
        // Only the buffer: a whole tail here would keep the drain alive for ever.
        let bytes = tail.bytes.clone();
        crate::spawn(async move {
            let _finishing = finishing;
            let read = async {
                let mut buffer = vec![0; 16 * 1024];
                let mut since_yield = 0;
                loop {
                    match stderr.read(&mut buffer).await {
                        Ok(0) => break,
                        Ok(n) => {
                            push(&bytes, &buffer[..n]);
                            since_yield += n;
                        }
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                    // A child that logs without pause always has bytes waiting, so the
                    // read never waits: let the tasks sharing this thread run.
                    if since_yield >= YIELD_AFTER {
                        since_yield = 0;
                        futures_lite::future::yield_now().await;
                    }
                }
            };
            futures_lite::future::or(read, abandoned.wait()).await;
        })
        .detach();
        tail
    }

    /// The kept bytes, decoded lossily.
    ///
    /// The cut at the start may fall inside a UTF-8 character; its remains are
    /// dropped rather than shown as replacement characters.
    pub fn snapshot(&self) -> String {
        let mut bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = bytes.make_contiguous();
        let full = bytes.len() == STDERR_TAIL_BYTES;
        let skip = if full {
            bytes
                .iter()
                .take(3)
                .take_while(|&&byte| byte & 0xC0 == 0x80)
                .count()
        } else {
            0
        };
        String::from_utf8_lossy(&bytes[skip..]).into_owned()
    }

    /// Waits until the child closed its stderr, or `limit` elapsed.
    ///
    /// A child that crashes writes its last words to stderr and closes stdout at the
    /// same moment; waiting here lets the error report those words instead of racing
    /// the drain task. The limit covers a grandchild that keeps the pipe open.
    pub(crate) async fn settle(&self, limit: Duration) {
        wait::timeout(limit, self.finished.wait()).await;
    }
}

/// Appends `chunk` to the kept bytes, dropping the oldest beyond the cap.
fn push(bytes: &Mutex<VecDeque<u8>>, chunk: &[u8]) {
    let mut bytes = bytes.lock().unwrap_or_else(PoisonError::into_inner);
    let chunk = &chunk[chunk.len().saturating_sub(STDERR_TAIL_BYTES)..];
    let excess = (bytes.len() + chunk.len()).saturating_sub(STDERR_TAIL_BYTES);
    bytes.drain(..excess);
    bytes.extend(chunk);
}

impl fmt::Debug for StderrTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("StderrTail")
            .field("bytes", &bytes.len())
            .field("finished", &self.finished.fired())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::io::Cursor;

    use super::*;

    fn drained(input: Vec<u8>) -> String {
        smol::block_on(async {
            let tail = StderrTail::drain(Cursor::new(input));
            tail.settle(Duration::from_secs(30)).await;
            tail.snapshot()
        })
    }

    #[test]
    fn keeps_everything_below_the_cap() {
        assert_eq!(
            drained(b"warning: low disk\n".to_vec()),
            "warning: low disk\n"
        );
    }

    #[test]
    fn keeps_only_the_last_bytes_of_a_flood() {
        let mut input = vec![b'x'; 1_000_000];
        input.extend_from_slice(b"the end\n");
        let tail = drained(input);
        assert_eq!(tail.len(), STDERR_TAIL_BYTES);
        assert!(tail.ends_with("xthe end\n"));
    }

    #[test]
    fn a_cut_inside_a_character_drops_its_remains() {
        // Two-byte characters, then one odd byte, so the cut falls mid-character.
        let mut input = "é".repeat(STDERR_TAIL_BYTES).into_bytes();
        input.push(b'\n');
        let tail = drained(input);
        assert_eq!(tail, "é".repeat(STDERR_TAIL_BYTES / 2 - 1) + "\n");
    }
}
