//! The one error type of the app-server module.

use std::error::Error;
use std::fmt;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::Value;

use super::{RequestId, StderrTail};

/// Everything that can go wrong while talking to an app-server child process.
///
/// The variants that mean "the child is gone or silent" ([`ProcessTerminated`] and
/// [`Timeout`]) carry the last bytes the child wrote to its stderr, because that is
/// almost always where a crashing app-server explains itself. Read it with
/// [`stderr_tail`](Self::stderr_tail).
///
/// # Display texts are a compatibility contract
///
/// Four texts are the ones the original app-server helpers printed, which callers
/// may match on, and they stay word for word: `Failed to spawn `{name}`: {error}`,
/// `{step}: {error}` for I/O (see [`IoStep`]), ``Timed out waiting for app-server
/// response `{id}` after {secs} seconds``, and `App-server terminated before sending
/// expected response`, which starts the text of [`ProcessTerminated`] and is followed,
/// when they are known, by the child's exit status and the last line it wrote to
/// stderr (`App-server terminated before sending expected response (exit status: 3);
/// the last line on its stderr: fatal: out of cheese`): match that one with
/// `starts_with`. Two of them print the operating system's error inside the
/// sentence, so [`source`](Error::source) returns `None` for every variant (an error
/// printer walking the chain would otherwise show that error twice); the
/// `io::Error` itself is available from [`io_error`](Self::io_error).
///
/// [`ProcessTerminated`]: AppServerError::ProcessTerminated
/// [`Timeout`]: AppServerError::Timeout
#[derive(Debug)]
#[non_exhaustive]
pub enum AppServerError {
    /// The app-server's executable could not be started.
    Spawn {
        /// The name the caller gave the app server, such as `codex`.
        name: String,
        /// Why the operating system refused.
        error: io::Error,
    },

    /// The child was started but one of its stdio pipes was not handed to us.
    MissingPipe {
        /// The name the caller gave the app server.
        name: String,
        /// `"stdin"`, `"stdout"` or `"stderr"`.
        pipe: &'static str,
    },

    /// Reading from, writing to or stopping the child failed.
    Io {
        /// What was being done.
        step: IoStep,
        /// The operating system's error.
        error: io::Error,
    },

    /// The child exited (or closed its stdout) before the awaited response arrived.
    ProcessTerminated {
        /// The last bytes the child wrote to stderr, lossily decoded; empty if unknown.
        stderr_tail: String,
        /// How the child exited (its exit code, or on Unix the signal that killed
        /// it); `None` if that is not known, as when only its stdout ended.
        exit_status: Option<ExitStatus>,
    },

    /// No response with the awaited id arrived in time.
    Timeout {
        /// The id of the request that went unanswered.
        response_id: RequestId,
        /// How long we waited.
        timeout: Duration,
        /// The last bytes the child wrote to stderr, lossily decoded; empty if unknown.
        stderr_tail: String,
    },

    /// A message could not be written within the time allowed, because the child is
    /// not reading its stdin.
    WriteTimeout {
        /// How long we waited.
        timeout: Duration,
    },

    /// The child answered the request with a JSON-RPC error object.
    ErrorResponse {
        /// The `error.code` member (0 if the child left it out or made it a non-integer).
        code: i64,
        /// The `error.message` member (the whole error object as JSON text if the child
        /// left the message out, so the reason is never lost).
        message: String,
        /// The optional `error.data` member.
        data: Option<Value>,
    },

    /// The child answered the request, but its `result` (or `error`) cannot be decoded
    /// into a `serde_json::Value`: a lone surrogate such as `"\ud83d"` (valid JSON
    /// grammar, which `JSON.stringify` writes for an emoji cut in half), a number out of
    /// `f64`'s range such as `1e400`, nesting deeper than serde_json's 128 levels, or an
    /// `error` of `null` without a `result`. The request fails at once; the connection
    /// goes on.
    UndecodableResponse {
        /// The id of the request the response answered.
        response_id: RequestId,
        /// Why it could not be decoded.
        cause: String,
    },

    /// The child wrote a line longer than the configured limit; the connection ends,
    /// since the message it held (possibly a response) is lost.
    LineTooLong {
        /// The limit in bytes, not counting the line terminator.
        limit: usize,
    },

    /// The child wrote a message whose decoded form alone would take more memory than
    /// the configured limit (see [`ClientBuilder::max_incoming_memory`]); the
    /// connection ends, since the message (possibly a response) is lost.
    ///
    /// [`ClientBuilder::max_incoming_memory`]: super::ClientBuilder::max_incoming_memory
    MessageTooLarge {
        /// The limit in bytes.
        limit: usize,
    },

    /// The messages waiting in [`incoming`](super::AppServerClient::incoming) reached
    /// the configured memory limit: the child sent notifications or requests faster
    /// than they were received. The connection ends rather than stall the routing of
    /// responses or grow without bound.
    IncomingFull {
        /// The limit in bytes.
        limit: usize,
    },
}

/// The step of talking to a child that an [`AppServerError::Io`] failed in; its
/// `Display` is the start of that error's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoStep {
    /// Writing a message to the child's stdin.
    WriteStdin,
    /// Flushing the child's stdin.
    FlushStdin,
    /// Reading the child's stdout.
    ReadStdout,
    /// Stopping the child.
    Stop,
}

impl fmt::Display for IoStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoStep::WriteStdin => "Failed writing to app-server stdin",
            IoStep::FlushStdin => "Failed flushing app-server stdin",
            IoStep::ReadStdout => "Failed reading app-server stdout",
            IoStep::Stop => "Failed stopping app-server",
        })
    }
}

impl AppServerError {
    /// The last bytes the child wrote to stderr, if this error is about a child that
    /// died or went silent and it said anything.
    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            AppServerError::ProcessTerminated { stderr_tail, .. }
            | AppServerError::Timeout { stderr_tail, .. }
                if !stderr_tail.is_empty() =>
            {
                Some(stderr_tail)
            }
            _ => None,
        }
    }

    /// The operating system's error behind a [`Spawn`](Self::Spawn) or
    /// [`Io`](Self::Io) error. (It is not returned by `source()`, because the
    /// Display text already includes it.)
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            AppServerError::Spawn { error, .. } | AppServerError::Io { error, .. } => Some(error),
            _ => None,
        }
    }

    /// How the child exited, if this error is about a child that exited and its
    /// status is known.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        match self {
            AppServerError::ProcessTerminated { exit_status, .. } => *exit_status,
            _ => None,
        }
    }

    /// Fills in the exit status of a termination error; other errors are returned
    /// unchanged. For the lockstep helpers, which only see stdout: call it with what
    /// waiting for the child returned.
    pub fn with_exit_status(mut self, status: ExitStatus) -> Self {
        if let AppServerError::ProcessTerminated { exit_status, .. } = &mut self {
            *exit_status = Some(status);
        }
        self
    }

    /// Fills in the stderr tail of a termination or timeout error from `tail`.
    ///
    /// The lockstep helpers such as
    /// [`wait_for_response_line`](super::wait_for_response_line) only see stdout, so they
    /// cannot know what the child said on stderr; call this on their errors to add it.
    /// Other errors are returned unchanged.
    pub fn with_stderr_tail(mut self, tail: &StderrTail) -> Self {
        if let AppServerError::ProcessTerminated { stderr_tail, .. }
        | AppServerError::Timeout { stderr_tail, .. } = &mut self
        {
            *stderr_tail = tail.snapshot();
        }
        self
    }

    pub(crate) fn io(step: IoStep, error: io::Error) -> Self {
        AppServerError::Io { step, error }
    }

    pub(crate) fn terminated() -> Self {
        AppServerError::ProcessTerminated {
            stderr_tail: String::new(),
            exit_status: None,
        }
    }

    /// Builds the error for a JSON-RPC `error` member.
    pub(crate) fn from_error_object(error: &Value) -> Self {
        AppServerError::ErrorResponse {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: match error.get("message").and_then(Value::as_str) {
                Some(message) => message.to_string(),
                None => error.to_string(),
            },
            data: error.get("data").cloned(),
        }
    }

    /// A copy of an error that ended a connection, for each request it ends.
    ///
    /// `io::Error` is not `Clone`, so its copy keeps the kind and the text only.
    pub(crate) fn replicate(&self) -> Self {
        let copy = |error: &io::Error| io::Error::new(error.kind(), error.to_string());
        match self {
            AppServerError::Spawn { name, error } => AppServerError::Spawn {
                name: name.clone(),
                error: copy(error),
            },
            AppServerError::MissingPipe { name, pipe } => AppServerError::MissingPipe {
                name: name.clone(),
                pipe,
            },
            AppServerError::Io { step, error } => AppServerError::Io {
                step: *step,
                error: copy(error),
            },
            AppServerError::ProcessTerminated {
                stderr_tail,
                exit_status,
            } => AppServerError::ProcessTerminated {
                stderr_tail: stderr_tail.clone(),
                exit_status: *exit_status,
            },
            AppServerError::Timeout {
                response_id,
                timeout,
                stderr_tail,
            } => AppServerError::Timeout {
                response_id: response_id.clone(),
                timeout: *timeout,
                stderr_tail: stderr_tail.clone(),
            },
            AppServerError::WriteTimeout { timeout } => {
                AppServerError::WriteTimeout { timeout: *timeout }
            }
            AppServerError::ErrorResponse {
                code,
                message,
                data,
            } => AppServerError::ErrorResponse {
                code: *code,
                message: message.clone(),
                data: data.clone(),
            },
            AppServerError::UndecodableResponse { response_id, cause } => {
                AppServerError::UndecodableResponse {
                    response_id: response_id.clone(),
                    cause: cause.clone(),
                }
            }
            AppServerError::LineTooLong { limit } => AppServerError::LineTooLong { limit: *limit },
            AppServerError::MessageTooLarge { limit } => {
                AppServerError::MessageTooLarge { limit: *limit }
            }
            AppServerError::IncomingFull { limit } => {
                AppServerError::IncomingFull { limit: *limit }
            }
        }
    }
}

impl fmt::Display for AppServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppServerError::Spawn { name, error } => {
                write!(f, "Failed to spawn `{}`: {}", name, error)
            }
            AppServerError::MissingPipe { name, pipe } => {
                write!(f, "{} {} is unavailable", name, pipe)
            }
            AppServerError::Io { step, error } => write!(f, "{}: {}", step, error),
            AppServerError::ProcessTerminated {
                stderr_tail,
                exit_status,
            } => {
                f.write_str("App-server terminated before sending expected response")?;
                if let Some(status) = exit_status {
                    write!(f, " ({})", status)?;
                }
                if let Some(line) = last_line(stderr_tail) {
                    write!(f, "; the last line on its stderr: {}", line)?;
                }
                Ok(())
            }
            AppServerError::Timeout {
                response_id,
                timeout,
                ..
            } => write!(
                f,
                "Timed out waiting for app-server response `{}` after {} seconds",
                response_id,
                Seconds(*timeout)
            ),
            AppServerError::WriteTimeout { timeout } => write!(
                f,
                "Timed out writing to app-server stdin after {} seconds: it is not reading",
                Seconds(*timeout)
            ),
            AppServerError::ErrorResponse { code, message, .. } => {
                write!(f, "App-server returned error {}: {}", code, message)
            }
            AppServerError::UndecodableResponse { response_id, cause } => write!(
                f,
                "App-server response `{}` could not be decoded: {}",
                response_id, cause
            ),
            AppServerError::LineTooLong { limit } => write!(
                f,
                "App-server wrote a line longer than the {} byte limit",
                limit
            ),
            AppServerError::MessageTooLarge { limit } => write!(
                f,
                "App-server wrote a message that would take more than the {} byte memory limit to decode",
                limit
            ),
            AppServerError::IncomingFull { limit } => write!(
                f,
                "App-server messages waiting to be received reached the {} byte memory limit: \
                 receive from incoming() while requests are in flight",
                limit
            ),
        }
    }
}

/// `source()` is always `None`: see "Display texts are a compatibility contract"
/// on [`AppServerError`].
impl Error for AppServerError {}

/// Longest part of the child's last stderr line that goes into an error's text; the
/// whole tail is in [`AppServerError::stderr_tail`].
const LAST_LINE_LIMIT: usize = 300;

/// The last line of `tail` with text in it, trimmed, cut to [`LAST_LINE_LIMIT`] bytes
/// (at a character boundary, marked with `...`), and with control characters (a
/// terminal's escape sequences) shown as `\u{fffd}`, so that the error stays one
/// readable line.
fn last_line(tail: &str) -> Option<String> {
    let text = tail.trim_end();
    let start = text.bytes().rposition(|b| b == b'\n').map_or(0, |i| i + 1);
    let line = text[start..].trim();
    if line.is_empty() {
        return None;
    }
    let mut end = line.len().min(LAST_LINE_LIMIT);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let mut shown: String = line[..end]
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if end < line.len() {
        shown.push_str("...");
    }
    Some(shown)
}

/// Whole seconds print as `300`, shorter waits (tests, tight budgets) as `0.25`
/// rather than a misleading `0`.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.subsec_nanos() == 0 {
            write!(f, "{}", self.0.as_secs())
        } else {
            write!(f, "{}", self.0.as_secs_f64())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each variant, so that the chain test cannot miss one.
    fn every_variant() -> Vec<AppServerError> {
        let os = io::Error::new::<&str>;
        let mut all = vec![
            AppServerError::Spawn {
                name: "codex".to_string(),
                error: os(io::ErrorKind::NotFound, "No such file or directory"),
            },
            AppServerError::MissingPipe {
                name: "codex".to_string(),
                pipe: "stdout",
            },
            AppServerError::ProcessTerminated {
                stderr_tail: "panic: boom\n".to_string(),
                exit_status: None,
            },
            AppServerError::Timeout {
                response_id: RequestId::from(7),
                timeout: Duration::from_secs(300),
                stderr_tail: String::new(),
            },
            AppServerError::WriteTimeout {
                timeout: Duration::from_secs(300),
            },
            AppServerError::from_error_object(&serde_json::json!({"code": -1, "message": "no"})),
            AppServerError::UndecodableResponse {
                response_id: RequestId::from(3),
                cause: "number out of range at line 1 column 5".to_string(),
            },
            AppServerError::LineTooLong { limit: 10 },
            AppServerError::MessageTooLarge { limit: 10 },
            AppServerError::IncomingFull { limit: 10 },
        ];
        for step in [
            IoStep::WriteStdin,
            IoStep::FlushStdin,
            IoStep::ReadStdout,
            IoStep::Stop,
        ] {
            all.push(AppServerError::io(
                step,
                os(io::ErrorKind::BrokenPipe, "Broken pipe"),
            ));
        }
        all
    }

    /// What an embedding app's error printer does: every error of the chain, in order.
    fn chain(error: &(dyn Error + 'static)) -> Vec<String> {
        let mut texts = Vec::new();
        let mut next = Some(error);
        while let Some(error) = next {
            texts.push(error.to_string());
            next = error.source();
        }
        texts
    }

    /// An error printer walking `source()` must never show the same sentence twice,
    /// which happens when a wrapper both prints its inner error and returns it.
    #[test]
    fn a_chain_printer_shows_no_sentence_twice() {
        for error in every_variant() {
            let texts = chain(&error);
            for (i, outer) in texts.iter().enumerate() {
                for inner in &texts[i + 1..] {
                    assert!(
                        !outer.contains(inner.as_str()),
                        "{:?} repeats {:?}",
                        texts,
                        inner
                    );
                }
            }
            // The inner error is still reachable where there is one.
            if let Some(inner) = error.io_error() {
                assert!(texts[0].ends_with(&inner.to_string()), "{:?}", texts);
            }
        }
    }

    #[test]
    fn io_display_is_step_then_error() {
        let error = AppServerError::io(
            IoStep::WriteStdin,
            io::Error::new(io::ErrorKind::BrokenPipe, "pipe closed"),
        );
        assert_eq!(
            error.to_string(),
            "Failed writing to app-server stdin: pipe closed"
        );
        assert_eq!(
            error.io_error().map(io::Error::kind),
            Some(io::ErrorKind::BrokenPipe)
        );
    }

    #[test]
    fn process_terminated_display() {
        let error = AppServerError::terminated();
        assert_eq!(
            error.to_string(),
            "App-server terminated before sending expected response"
        );
        let error = AppServerError::ProcessTerminated {
            stderr_tail: "starting\npanic: boom\n\n".to_string(),
            exit_status: None,
        };
        assert_eq!(
            error.to_string(),
            "App-server terminated before sending expected response; \
             the last line on its stderr: panic: boom"
        );
        assert_eq!(error.stderr_tail(), Some("starting\npanic: boom\n\n"));
    }

    /// A dead child's exit status, then the last line it wrote to stderr, cut to
    /// a readable length and with its escape sequences defused.
    #[cfg(unix)]
    #[test]
    fn process_terminated_names_the_exit_status_and_the_last_stderr_line() {
        use std::os::unix::process::ExitStatusExt;
        let error = AppServerError::ProcessTerminated {
            stderr_tail: "fatal: out of cheese\n".to_string(),
            exit_status: None,
        }
        .with_exit_status(ExitStatus::from_raw(3 << 8));
        assert_eq!(
            error.to_string(),
            "App-server terminated before sending expected response (exit status: 3); \
             the last line on its stderr: fatal: out of cheese"
        );
        assert_eq!(error.exit_status().and_then(|s| s.code()), Some(3));
        assert_eq!(error.replicate().exit_status(), error.exit_status());

        let long = format!("\u{1b}[31m{}\n", "é".repeat(400));
        let error = AppServerError::ProcessTerminated {
            stderr_tail: long,
            exit_status: Some(ExitStatus::from_raw(9)),
        };
        let text = error.to_string();
        assert!(text.contains(" (signal: 9"), "{}", text);
        assert!(!text.contains('\u{1b}'), "{}", text);
        assert!(text.ends_with("éé..."), "{}", text);
        let shown = &text[text.find("stderr: ").unwrap() + 8..];
        // The cut, "...", and the escape shown as U+FFFD (3 bytes, not 1).
        assert!(shown.len() <= LAST_LINE_LIMIT + 3 + 2, "{}", shown.len());
    }

    #[test]
    fn timeout_display_names_id_and_seconds() {
        let error = AppServerError::Timeout {
            response_id: RequestId::from("init-123"),
            timeout: Duration::from_secs(300),
            stderr_tail: String::new(),
        };
        assert_eq!(
            error.to_string(),
            "Timed out waiting for app-server response `init-123` after 300 seconds"
        );
        assert_eq!(error.stderr_tail(), None);

        let error = AppServerError::Timeout {
            response_id: RequestId::from(7),
            timeout: Duration::from_millis(250),
            stderr_tail: String::new(),
        };
        assert_eq!(
            error.to_string(),
            "Timed out waiting for app-server response `7` after 0.25 seconds"
        );
    }

    #[test]
    fn spawn_display_names_the_app_server_and_the_reason() {
        let error = AppServerError::Spawn {
            name: "codex".to_string(),
            error: io::Error::new(io::ErrorKind::NotFound, "No such file or directory"),
        };
        assert_eq!(
            error.to_string(),
            "Failed to spawn `codex`: No such file or directory"
        );
        assert!(error.io_error().is_some());
    }

    #[test]
    fn error_object_keeps_code_message_and_data() {
        let error = AppServerError::from_error_object(&serde_json::json!({
            "code": -32601, "message": "Method not found", "data": {"method": "x"}
        }));
        match error {
            AppServerError::ErrorResponse {
                code,
                message,
                data,
            } => {
                assert_eq!(code, -32601);
                assert_eq!(message, "Method not found");
                assert_eq!(data, Some(serde_json::json!({"method": "x"})));
            }
            other => panic!("expected ErrorResponse, got {:?}", other),
        }
    }

    #[test]
    fn error_object_without_message_keeps_the_object_text() {
        let error = AppServerError::from_error_object(&serde_json::json!({"code": 5}));
        assert_eq!(
            error.to_string(),
            "App-server returned error 5: {\"code\":5}"
        );
    }

    #[test]
    fn replicate_keeps_every_variant_and_its_text() {
        for error in every_variant() {
            let copy = error.replicate();
            assert_eq!(copy.to_string(), error.to_string());
            assert_eq!(
                copy.io_error().map(io::Error::kind),
                error.io_error().map(io::Error::kind)
            );
        }
    }
}
