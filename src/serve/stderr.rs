//! The children's stderr, copied to ours one whole line at a time behind
//! a `[<requester>]` prefix, so lines of concurrent children never
//! interleave mid-line. It must be drained anyway (a full pipe would stall
//! the child), and an operator watching several agents needs to know whose
//! server said what.
//!
//! What one child's stderr may cost the others is bounded, since every
//! session runs on one executor thread: a child that floods its stderr
//! (a debug log left on, `yes >&2`) made every other session wait for the
//! copy, 50 times slower, and kept serve's CPU busy.
//!
//! - Of each child's stderr, [`COPY_PER_SECOND`] bytes a second are
//!   copied; the lines beyond, that second, are dropped, and one line says
//!   how many. A burst at start-up (a stack trace, a screen of warnings)
//!   is cut short, and the child is not held up by it.
//! - [`READ_PER_SECOND`] bytes a second are read; beyond that, reading
//!   waits for the next second and the child waits on its own stderr.
//!   Only a flood gets there, and it then costs serve a few reads a
//!   second, not a core.
//! - The other sessions get a turn every [`READ_BETWEEN_TURNS`] bytes.
//!
//! The lines go through [`diag`]'s queue: the child is drained at its own
//! pace whatever our stderr does, and lines our stderr cannot take are
//! dropped (and counted) rather than stalling anyone.

use std::io;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use smol::process::ChildStderr;

use crate::diag;
use crate::wait::Stopped;

/// Longest stderr line copied in one piece; a longer one is split. Keeps a
/// child that never writes a newline from growing our memory.
const LINE_LIMIT: usize = 64 * 1024;

/// Bytes of one child's stderr copied to ours in a second: a busy log of
/// a thousand lines a second, or two of the longest lines, passes whole;
/// beyond it, lines are dropped and counted. (Half of what [`diag`] holds,
/// so one child cannot fill it alone.)
pub(super) const COPY_PER_SECOND: usize = 128 * 1024;

/// Bytes of one child's stderr read in a second: eight times what is
/// copied, so a burst is drained (and counted) without holding the child
/// up, while a flood is held to this.
pub(super) const READ_PER_SECOND: usize = 1024 * 1024;

/// Bytes read between two turns left to the other tasks on the executor
/// thread: a line already in the buffer is read without waiting, so a
/// child whose stderr always has more would otherwise never let go.
pub(super) const READ_BETWEEN_TURNS: usize = 64 * 1024;

/// The budgets' period.
const SECOND: Duration = Duration::from_secs(1);

/// Copies the child's stderr to ours behind `prefix` (see the module
/// docs). Once `ended` fires (the command has been stopped, and what is
/// left in the pipe is its last words), reading no longer waits for the
/// next second: the session's end then waits for the copy only as long as
/// the pipe takes to drain.
pub(super) async fn copy_stderr(stderr: ChildStderr, prefix: String, ended: Stopped) {
    copy_lines(stderr, &prefix, diag::write_line, &ended).await;
}

/// Reads `input` to its end and hands each line to `emit` behind `prefix`,
/// with a final `\n` added where missing and a line longer than
/// [`LINE_LIMIT`] split, within the budgets of the module docs.
async fn copy_lines<R: AsyncRead + Unpin>(
    input: R,
    prefix: &str,
    mut emit: impl FnMut(&[u8]),
    ended: &Stopped,
) {
    let mut input = BufReader::with_capacity(READ_BETWEEN_TURNS, input);
    let mut line = Vec::new();
    let mut budget = Budget::new();
    loop {
        if budget.started.elapsed() >= SECOND {
            budget.renew(prefix, &mut emit);
        }
        let n = if budget.dropping {
            // The second's copy is used up: only count the lines, a buffer
            // at a time, which costs next to nothing per line.
            let chunk = match input.fill_buf().await {
                Ok([]) => break,
                Ok(chunk) => chunk,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let n = chunk.len();
            budget.dropped_lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
            budget.dropped_bytes += n;
            input.consume(n);
            n
        } else {
            line.clear();
            line.extend_from_slice(prefix.as_bytes());
            let n = match (&mut input)
                .take(LINE_LIMIT as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            if budget.copied + n <= COPY_PER_SECOND {
                budget.copied += n;
                emit(&line);
            } else {
                budget.dropping = true;
                budget.dropped_lines += 1;
                budget.dropped_bytes += n;
            }
            n
        };
        budget.read += n;
        if budget.read >= READ_PER_SECOND {
            if !ended.fired() {
                let next = async {
                    Timer::at(budget.started + SECOND).await;
                };
                future::or(next, ended.wait()).await;
            }
            budget.renew(prefix, &mut emit);
        } else if budget.read - budget.turn >= READ_BETWEEN_TURNS {
            budget.turn = budget.read;
            future::yield_now().await;
        }
    }
    budget.renew(prefix, &mut emit);
}

/// What one second of a child's stderr has used of its budgets.
struct Budget {
    started: Instant,
    read: usize,
    copied: usize,
    /// A line did not fit in what is left of `COPY_PER_SECOND`: the rest
    /// of the second is counted, not copied.
    dropping: bool,
    /// `read` at the last turn left to the others.
    turn: usize,
    dropped_lines: u64,
    dropped_bytes: usize,
}

impl Budget {
    fn new() -> Budget {
        Budget {
            started: Instant::now(),
            read: 0,
            copied: 0,
            dropping: false,
            turn: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// Starts a new second, first saying (behind `prefix`) how many lines
    /// the one before dropped, if any.
    fn renew(&mut self, prefix: &str, emit: &mut impl FnMut(&[u8])) {
        if self.dropped_lines > 0 {
            emit(
                format!(
                    "{}({} lines, {} bytes, of this command's stderr dropped: more than {} KiB \
                     in a second)\n",
                    prefix,
                    self.dropped_lines,
                    self.dropped_bytes,
                    COPY_PER_SECOND / 1024
                )
                .as_bytes(),
            );
        }
        *self = Budget::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait;

    #[test]
    fn stderr_lines_are_prefixed_and_split() {
        smol::block_on(async {
            let mut input = b"first\r\n\nsecond\n".to_vec();
            input.extend(vec![b'x'; LINE_LIMIT + 10]);
            let mut lines = Vec::new();
            let (_running, ended) = wait::stop_signal();
            copy_lines(
                futures_lite::io::Cursor::new(input),
                "[a] ",
                |line| lines.push(String::from_utf8_lossy(line).into_owned()),
                &ended,
            )
            .await;
            assert_eq!(lines.len(), 5, "{:?}", &lines[..3]);
            assert_eq!(lines[0], "[a] first\r\n");
            assert_eq!(lines[1], "[a] \n");
            assert_eq!(lines[2], "[a] second\n");
            assert_eq!(lines[3].len(), 4 + LINE_LIMIT + 1, "split at the limit");
            assert_eq!(lines[4], format!("[a] {}\n", "x".repeat(10)));
        });
    }

    /// A burst larger than a second's copy is cut at the budget, and the
    /// rest counted in one line, without waiting: it is all read within the
    /// second's reading budget.
    #[test]
    fn a_burst_is_copied_up_to_the_budget_and_the_rest_counted() {
        smol::block_on(async {
            let line = format!("{}\n", "y".repeat(99));
            let input = line.repeat(COPY_PER_SECOND / 100 * 4);
            let mut lines = Vec::new();
            let started = Instant::now();
            let (_running, ended) = wait::stop_signal();
            copy_lines(
                futures_lite::io::Cursor::new(input),
                "[b] ",
                |line| lines.push(String::from_utf8_lossy(line).into_owned()),
                &ended,
            )
            .await;
            let copied = COPY_PER_SECOND / 100;
            assert_eq!(lines.len(), copied + 1);
            assert_eq!(
                lines[copied],
                format!(
                    "[b] ({} lines, {} bytes, of this command's stderr dropped: more than 128 KiB \
                     in a second)\n",
                    copied * 3,
                    copied * 3 * 100
                )
            );
            assert!(started.elapsed() < SECOND, "not held up");
        });
    }
}
