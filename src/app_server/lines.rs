//! Reading newline-delimited messages without trusting the writer to end its lines.

use std::io;

use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::{AppServerError, IoStep};

/// The default limit on one line from an app-server: 64 MiB.
///
/// Real messages (a whole file's diff inside one JSON string, say) can reach megabytes,
/// so the limit is generous; it exists so that a child that never writes a newline costs
/// us 64 MiB at worst instead of all memory.
pub const MAX_LINE_LENGTH: usize = 64 * 1024 * 1024;

/// How many bytes of one line are read before other tasks get a turn: 1 MiB. A pipe
/// that always has more data never makes a read wait, so a long line would otherwise
/// hold the executor thread until its end.
const YIELD_AFTER: usize = 1024 * 1024;

/// Splits a byte stream into lines of at most a fixed length.
///
/// Accepts `\n` and `\r\n` endings and a final line without one. Unlike
/// `read_line`, it never buffers more than the limit: an over-long line is reported
/// as [`AppServerError::LineTooLong`] as soon as the limit is crossed, and the rest of
/// it is skipped, so the reader can be used again for the lines after it.
///
/// Cancel-safe: a partly read line is kept inside the reader, so dropping a
/// [`next_line`](Self::next_line) future (on a timeout, say) loses nothing.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    limit: usize,
    /// Set after an over-long line was reported, until its newline is seen.
    skipping: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads lines from `reader` with the default limit of [`MAX_LINE_LENGTH`] bytes.
    pub fn new(reader: R) -> Self {
        Self::with_max_line_length(reader, MAX_LINE_LENGTH)
    }

    /// Reads lines from `reader`, refusing any longer than `limit` bytes (not counting
    /// the line ending).
    ///
    /// `usize::MAX` accepts lines of any length (memory is then the only bound); `0`
    /// accepts only empty lines.
    pub fn with_max_line_length(reader: R, limit: usize) -> Self {
        LineReader {
            reader: BufReader::new(reader),
            line: Vec::new(),
            limit,
            skipping: false,
        }
    }

    /// The next line without its ending, or `None` at the end of the stream.
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if reading fails, [`AppServerError::LineTooLong`] if the
    /// line exceeds the limit.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, AppServerError> {
        let mut since_yield = 0;
        loop {
            let available = match self.reader.fill_buf().await {
                Ok(available) => available,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(AppServerError::io(IoStep::ReadStdout, error)),
            };
            if available.is_empty() {
                self.skipping = false;
                if self.line.is_empty() {
                    return Ok(None);
                }
                if content_len(&self.line) > self.limit {
                    self.line = Vec::new();
                    return Err(AppServerError::LineTooLong { limit: self.limit });
                }
                return Ok(Some(self.take_line()));
            }

            let newline = available.iter().position(|&byte| byte == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            let consumed = chunk.len() + usize::from(newline.is_some());
            let mut too_long = false;
            if !self.skipping {
                // One byte over the limit is tolerated until the line ends, in case it is
                // the `\r` of a `\r\n`, which does not count.
                // Saturating: a limit of `usize::MAX` means no limit, not an overflow.
                if self.line.len() + chunk.len() > self.limit.saturating_add(1) {
                    too_long = true;
                } else {
                    self.line.extend_from_slice(chunk);
                    too_long = newline.is_some() && content_len(&self.line) > self.limit;
                }
            }
            self.reader.consume(consumed);
            since_yield += consumed;

            if too_long {
                self.line = Vec::new();
                self.skipping = newline.is_none();
                return Err(AppServerError::LineTooLong { limit: self.limit });
            }
            if newline.is_some() {
                if self.skipping {
                    self.skipping = false;
                    continue;
                }
                return Ok(Some(self.take_line()));
            }
            // Everything read so far is kept in `self`, so this is no less cancel-safe.
            if since_yield >= YIELD_AFTER {
                since_yield = 0;
                future::yield_now().await;
            }
        }
    }

    fn take_line(&mut self) -> Vec<u8> {
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        line
    }
}

/// The length of a line without a trailing `\r`.
fn content_len(line: &[u8]) -> usize {
    line.len() - usize::from(line.last() == Some(&b'\r'))
}

#[cfg(test)]
mod tests {
    use futures_lite::io::Cursor;

    use super::*;

    fn read_all(input: &[u8], limit: usize) -> Vec<Result<Vec<u8>, String>> {
        smol::block_on(async {
            let mut lines = LineReader::with_max_line_length(Cursor::new(input.to_vec()), limit);
            let mut out = Vec::new();
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => out.push(Ok(line)),
                    Ok(None) => return out,
                    Err(error) => out.push(Err(error.to_string())),
                }
            }
        })
    }

    #[test]
    fn splits_on_lf_and_crlf_and_keeps_an_unterminated_last_line() {
        let lines = read_all(b"one\ntwo\r\n\nthree", 100);
        let expected: Vec<Result<Vec<u8>, String>> = vec![
            Ok(b"one".to_vec()),
            Ok(b"two".to_vec()),
            Ok(Vec::new()),
            Ok(b"three".to_vec()),
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_over_it_fails_then_reading_resumes() {
        let mut input = Vec::new();
        input.extend_from_slice(&[b'a'; 8]);
        input.extend_from_slice(b"\r\n");
        input.extend_from_slice(&[b'b'; 9]);
        input.extend_from_slice(b"\nafter\n");
        let lines = read_all(&input, 8);
        assert_eq!(lines.len(), 3, "{:?}", lines);
        assert_eq!(lines[0], Ok(vec![b'a'; 8]));
        assert_eq!(
            lines[1],
            Err("App-server wrote a line longer than the 8 byte limit".to_string())
        );
        assert_eq!(lines[2], Ok(b"after".to_vec()));
    }

    #[test]
    fn the_largest_limit_accepts_every_line() {
        let lines = read_all(b"one\r\ntwo\nthree", usize::MAX);
        let expected: Vec<Result<Vec<u8>, String>> = vec![
            Ok(b"one".to_vec()),
            Ok(b"two".to_vec()),
            Ok(b"three".to_vec()),
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn an_endless_line_is_refused_without_buffering_it() {
        // Far more than BufReader's 8 KiB buffer, so the limit is crossed mid-stream.
        let mut input = vec![b'x'; 100_000];
        input.extend_from_slice(b"\nok\n");
        let lines = read_all(&input, 1000);
        assert_eq!(lines.len(), 2, "{:?}", lines.len());
        assert!(lines[0].is_err());
        assert_eq!(lines[1], Ok(b"ok".to_vec()));
    }
}
