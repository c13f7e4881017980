//! One-request-at-a-time helpers, for callers that drive the child's stdio themselves.

use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use serde_json::Value;
use smol::Timer;

use super::{response_id_matches, AppServerError, LineReader, RequestId};

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
        .map_err(|source| AppServerError::io("Failed writing to app-server stdin", source))?;
    stdin
        .flush()
        .await
        .map_err(|source| AppServerError::io("Failed flushing app-server stdin", source))
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
/// after `timeout`, and the errors of [`LineReader::next_line`]. The termination and
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
        loop {
            let line = match lines.next_line().await? {
                Some(line) => line,
                None => {
                    return Err(AppServerError::ProcessTerminated {
                        stderr_tail: String::new(),
                    })
                }
            };
            let matches = serde_json::from_slice::<Value>(&line)
                .map_or(false, |value| response_id_matches(&value, response_id));
            if matches {
                // Parsed JSON is valid UTF-8.
                if let Ok(line) = String::from_utf8(line) {
                    return Ok(line);
                }
            }
        }
    };
    future::or(wait, async {
        Timer::after(timeout).await;
        Err(AppServerError::Timeout {
            response_id: response_id.clone(),
            timeout,
            stderr_tail: String::new(),
        })
    })
    .await
}
