//! The one error type of the app-server module.

use std::error::Error;
use std::fmt;
use std::io;
use std::time::Duration;

use serde_json::Value;

use super::{RequestId, StderrTail};

/// Everything that can go wrong while talking to an app-server child process.
///
/// The variants that mean "the child is gone or silent" ([`ProcessTerminated`] and
/// [`Timeout`]) carry the last bytes the child wrote to its stderr, because that is
/// almost always where a crashing runtime explains itself. Read it with
/// [`stderr_tail`](Self::stderr_tail).
///
/// [`ProcessTerminated`]: AppServerError::ProcessTerminated
/// [`Timeout`]: AppServerError::Timeout
#[derive(Debug)]
#[non_exhaustive]
pub enum AppServerError {
    /// The runtime's executable could not be started.
    Spawn {
        /// The name the caller gave the runtime, such as `codex`.
        runtime: String,
        /// Why the operating system refused.
        source: io::Error,
    },

    /// The child was started but one of its stdio pipes was not handed to us.
    MissingPipe {
        /// The name the caller gave the runtime.
        runtime: String,
        /// `"stdin"`, `"stdout"` or `"stderr"`.
        pipe: &'static str,
    },

    /// Reading from or writing to the child's stdio failed.
    Io {
        /// What was being done, for example "Failed writing to app-server stdin".
        context: String,
        /// The underlying error.
        source: io::Error,
    },

    /// The child closed its stdout (normally: it exited) before the awaited response
    /// arrived.
    ProcessTerminated {
        /// The last bytes the child wrote to stderr, lossily decoded; empty if unknown.
        stderr_tail: String,
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

    /// The child wrote a line longer than the configured limit.
    LineTooLong {
        /// The limit in bytes, not counting the line terminator.
        limit: usize,
    },
}

impl AppServerError {
    /// The last bytes the child wrote to stderr, if this error is about a child that
    /// died or went silent and it said anything.
    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            AppServerError::ProcessTerminated { stderr_tail }
            | AppServerError::Timeout { stderr_tail, .. }
                if !stderr_tail.is_empty() =>
            {
                Some(stderr_tail)
            }
            _ => None,
        }
    }

    /// Fills in the stderr tail of a termination or timeout error from `tail`.
    ///
    /// The low-level helpers such as
    /// [`wait_for_response_line`](super::wait_for_response_line) only see stdout, so they
    /// cannot know what the child said on stderr; call this on their errors to add it.
    /// Other errors are returned unchanged.
    pub fn with_stderr_tail(mut self, tail: &StderrTail) -> Self {
        if let AppServerError::ProcessTerminated { stderr_tail }
        | AppServerError::Timeout { stderr_tail, .. } = &mut self
        {
            *stderr_tail = tail.snapshot();
        }
        self
    }

    pub(crate) fn io(context: &str, source: io::Error) -> Self {
        AppServerError::Io {
            context: context.to_string(),
            source,
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
        match self {
            AppServerError::Spawn { runtime, source } => AppServerError::Spawn {
                runtime: runtime.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            AppServerError::MissingPipe { runtime, pipe } => AppServerError::MissingPipe {
                runtime: runtime.clone(),
                pipe,
            },
            AppServerError::Io { context, source } => AppServerError::Io {
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            AppServerError::ProcessTerminated { stderr_tail } => {
                AppServerError::ProcessTerminated {
                    stderr_tail: stderr_tail.clone(),
                }
            }
            AppServerError::Timeout {
                response_id,
                timeout,
                stderr_tail,
            } => AppServerError::Timeout {
                response_id: response_id.clone(),
                timeout: *timeout,
                stderr_tail: stderr_tail.clone(),
            },
            AppServerError::ErrorResponse {
                code,
                message,
                data,
            } => AppServerError::ErrorResponse {
                code: *code,
                message: message.clone(),
                data: data.clone(),
            },
            AppServerError::LineTooLong { limit } => AppServerError::LineTooLong { limit: *limit },
        }
    }
}

impl fmt::Display for AppServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppServerError::Spawn { runtime, source } => {
                write!(f, "Failed to spawn `{}`: {}", runtime, source)
            }
            AppServerError::MissingPipe { runtime, pipe } => {
                write!(f, "{} {} is unavailable", runtime, pipe)
            }
            AppServerError::Io { context, source } => write!(f, "{}: {}", context, source),
            AppServerError::ProcessTerminated { .. } => {
                f.write_str("App-server terminated before sending expected response")
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
            AppServerError::ErrorResponse { code, message, .. } => {
                write!(f, "App-server returned error {}: {}", code, message)
            }
            AppServerError::LineTooLong { limit } => write!(
                f,
                "App-server wrote a line longer than the {} byte limit",
                limit
            ),
        }
    }
}

impl Error for AppServerError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            AppServerError::Spawn { source, .. } | AppServerError::Io { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
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

    #[test]
    fn io_display_is_context_then_source() {
        let error = AppServerError::io(
            "Failed writing to app-server stdin",
            io::Error::new(io::ErrorKind::BrokenPipe, "pipe closed"),
        );
        assert_eq!(
            error.to_string(),
            "Failed writing to app-server stdin: pipe closed"
        );
        assert_eq!(error.source().unwrap().to_string(), "pipe closed");
    }

    #[test]
    fn process_terminated_display() {
        let error = AppServerError::ProcessTerminated {
            stderr_tail: "panic: boom\n".to_string(),
        };
        assert_eq!(
            error.to_string(),
            "App-server terminated before sending expected response"
        );
        assert_eq!(error.stderr_tail(), Some("panic: boom\n"));
        assert!(error.source().is_none());
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
    fn spawn_display_names_runtime_and_keeps_source() {
        let error = AppServerError::Spawn {
            runtime: "codex".to_string(),
            source: io::Error::new(io::ErrorKind::NotFound, "No such file or directory"),
        };
        assert_eq!(
            error.to_string(),
            "Failed to spawn `codex`: No such file or directory"
        );
        assert!(error.source().is_some());
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
    fn replicate_keeps_kind_and_text() {
        let error = AppServerError::io(
            "Failed reading app-server stdout",
            io::Error::new(io::ErrorKind::ConnectionReset, "reset"),
        );
        let copy = error.replicate();
        assert_eq!(copy.to_string(), error.to_string());
        match copy {
            AppServerError::Io { source, .. } => {
                assert_eq!(source.kind(), io::ErrorKind::ConnectionReset)
            }
            other => panic!("expected Io, got {:?}", other),
        }
    }
}
