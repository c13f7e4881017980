//! Lockstep helpers: write one message, then read lines until its answer. They are for
//! callers that drive the child's stdio by hand, one exchange at a time, and skip
//! everything else the child says; [`AppServerClient`](super::AppServerClient) does not
//! use them, since it reads continuously and loses nothing.

use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use serde_json::Value;

use super::members::{request_id, RawMembers};
use super::{AppServerError, IoStep, LineReader, RequestId};
use crate::wait;

/// How much skipping (line bytes, plus [`LINE_COST`] per line) is done before other
/// tasks get a turn: 1 MiB, as in the client's reader.
const YIELD_AFTER: usize = 1024 * 1024;

/// What skipping one line costs beyond its bytes, in the same units.
const LINE_COST: usize = 1024;

/// Writes `payload` to `stdin` as one compact JSON line ending in `\n`, and flushes.
///
/// The line is written with a single `write_all`, but if this future is dropped midway,
/// part of a line may have been written; [`AppServerClient`](super::AppServerClient)
/// guards against that, this helper does not.
///
/// # Errors
///
/// [`AppServerError::Io`] if the write or the flush fails (typically a broken pipe:
/// the child exited).
pub async fn write_json_line<W>(stdin: &mut W, payload: &Value) -> Result<(), AppServerError>
where
    W: AsyncWrite + Unpin,
{
    let mut line = payload.to_string().into_bytes();
    line.push(b'\n');
    stdin
        .write_all(&line)
        .await
        .map_err(|error| AppServerError::io(IoStep::WriteStdin, error))?;
    stdin
        .flush()
        .await
        .map_err(|error| AppServerError::io(IoStep::FlushStdin, error))
}

/// Reads lines until the response to request `response_id` arrives, and returns that
/// line.
///
/// Everything else is skipped: lines that are not JSON, other responses, and
/// notifications and requests from the child, even one whose id equals `response_id`.
/// Use [`AppServerClient`](super::AppServerClient) instead when those must not be lost.
///
/// # Errors
///
/// [`AppServerError::ProcessTerminated`] at end of stream, [`AppServerError::Timeout`]
/// after `timeout` (never if it is `Duration::ZERO` or `Duration::MAX`: zero means no
/// timeout), and the errors of [`LineReader::next_line`]. The termination and
/// timeout errors have an empty stderr tail; add it with
/// [`AppServerError::with_stderr_tail`].
pub async fn wait_for_response_line<R>(
    lines: &mut LineReader<R>,
    response_id: &RequestId,
    timeout: Duration,
) -> Result<String, AppServerError>
where
    R: AsyncRead + Unpin,
{
    let wait = async {
        let mut since_yield = 0usize;
        loop {
            let line = match lines.next_line().await? {
                Some(line) => line,
                None => return Err(AppServerError::terminated()),
            };
            // A child that floods lines we skip would otherwise keep this loop from
            // ever returning to the executor: every read finds data waiting.
            since_yield += line.len() + LINE_COST;
            if since_yield >= YIELD_AFTER {
                since_yield = 0;
                future::yield_now().await;
            }
            if answers(&line, response_id) {
                // The members were read, so the line is valid UTF-8.
                if let Ok(line) = String::from_utf8(line) {
                    return Ok(line);
                }
            }
        }
    };
    match wait::timeout_unless_zero(timeout, wait).await {
        Some(outcome) => outcome,
        None => Err(AppServerError::Timeout {
            response_id: response_id.clone(),
            timeout,
            stderr_tail: String::new(),
        }),
    }
}

/// Whether `line` is a response (a `result` or an `error`, no `method`) to
/// `response_id`, read from its top-level members without decoding the rest.
fn answers(line: &[u8], response_id: &RequestId) -> bool {
    match RawMembers::read(line) {
        Some(members) => {
            members.method.is_none()
                && (members.result.is_some() || members.error.is_some())
                && members.id.and_then(request_id).as_ref() == Some(response_id)
        }
        None => false,
    }
}
