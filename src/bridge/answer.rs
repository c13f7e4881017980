//! Everything the bridge writes in its own name, to the client or to the
//! app: error responses that say why (with `data` a program can read), the
//! answers to a batch, the notifications it sends after a resume, and the
//! cancellation of requests whose asker is gone.
//!
//! A client must be able to tell the bridge's words from the app's (the
//! specification asks that local errors "cannot be mistaken for errors
//! received from the peer"), so every error carries
//! `"data":{"source":"mcp-bridge","reason":…,"endpoint":…}` with one of the
//! documented [`Reason`]s. The code is JSON-RPC's implementation-defined
//! `-32000` ([`ERROR_CODE`]), which MCP CLIs show as `MCP error -32000`
//! and which the 2026-07-28 revision keeps for existing uses.

use std::path::Path;

use crate::envelope::json::push_json_string;
use crate::envelope::{array_of_errors, push_error_response};

/// The JSON-RPC error code of every error response the crate writes itself
/// (the bridge's answers, the host's refusal line): the first of the
/// "server error" range JSON-RPC reserves for the implementation, which
/// MCP CLIs show as `MCP error -32000: <message>`. Defined once, beside the
/// error line's writer; the host re-exports it as `host::REFUSAL_CODE`.
pub const ERROR_CODE: i64 = crate::envelope::ERROR_CODE;

/// Why the bridge answered instead of the app: `data.reason` of its errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Nothing serves the endpoint: the app is not running (yet), or did
    /// not come back within `--reconnect-timeout`.
    AppNotRunning,
    /// The app closed the connection while this request was in flight; it
    /// may or may not have been carried out.
    AppRestarting,
    /// The app turned this client away.
    AppRefused,
    /// The endpoint is served by another user.
    UntrustedServer,
    /// The app's instances keep closing the connection before they serve.
    CrashLoop,
    /// The app keeps rejecting the replayed session.
    ResumeRejected,
    /// The endpoint cannot be used (permission denied, not a socket, a path
    /// too long).
    Unreachable,
    /// More was sent while the app was away than the bridge holds.
    HoldLimit,
    /// stdin closed before the app could be reached.
    StdinClosed,
    /// The session's `initialize` is too long to replay.
    TooLongToReplay,
    /// (To the app.) The request's id is still open with the client for the
    /// app's previous instance.
    IdInUse,
    /// The app accepted connections and closed them without a word until
    /// the deadline passed.
    AppClosedSilently,
    /// (To a `server/discover` probe.) The app closed the connection on
    /// it before any `initialize`: a server of the legacy era.
    LegacyApp,
}

impl Reason {
    /// The name in `data.reason`.
    pub fn name(self) -> &'static str {
        match self {
            Reason::AppNotRunning => "app_not_running",
            Reason::AppRestarting => "app_restarting",
            Reason::AppRefused => "app_refused",
            Reason::UntrustedServer => "untrusted_server",
            Reason::CrashLoop => "crash_loop",
            Reason::ResumeRejected => "resume_rejected",
            Reason::Unreachable => "unreachable",
            Reason::HoldLimit => "hold_limit",
            Reason::StdinClosed => "stdin_closed",
            Reason::TooLongToReplay => "too_long_to_replay",
            Reason::IdInUse => "id_in_use",
            Reason::AppClosedSilently => "app_closed_silently",
            Reason::LegacyApp => "legacy_app",
        }
    }
}

/// One answer the bridge gives to requests: its text and its `data`,
/// written once and used for every id it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) reason: Reason,
    pub(super) message: String,
    data: Vec<u8>,
}

impl Answer {
    pub(super) fn new(reason: Reason, message: impl Into<String>, endpoint: &Path) -> Answer {
        let mut data = Vec::with_capacity(96);
        data.extend_from_slice(b"{\"source\":\"mcp-bridge\",\"reason\":\"");
        data.extend_from_slice(reason.name().as_bytes());
        data.extend_from_slice(b"\",\"endpoint\":");
        push_json_string(&mut data, &endpoint.to_string_lossy());
        data.push(b'}');
        Answer {
            reason,
            message: message.into(),
            data,
        }
    }

    /// The error response line for the request `raw_id` (`null` for one
    /// whose id could not be kept).
    pub(super) fn to(&self, raw_id: &[u8]) -> Vec<u8> {
        self.line(raw_id, ERROR_CODE)
    }

    /// The error response line for `raw_id` with `code`.
    fn line(&self, raw_id: &[u8], code: i64) -> Vec<u8> {
        let mut line = Vec::with_capacity(96 + raw_id.len() + self.message.len() + self.data.len());
        push_error_response(&mut line, raw_id, code, &self.message, Some(&self.data));
        line.push(b'\n');
        line
    }

    /// One array of error responses for `ids` (newline-separated, each
    /// after a `\n`, as [`BatchIds`](crate::envelope::BatchIds) gives).
    pub(super) fn to_ids(&self, ids: &[u8]) -> Vec<u8> {
        array_of_errors(ids, ERROR_CODE, &self.message, Some(&self.data))
    }
}

/// JSON-RPC's "method not found": what a legacy server that does not hang
/// up answers a `server/discover` probe with, and what every dual-era
/// client reads as "speak the legacy era".
const METHOD_NOT_FOUND: i64 = -32601;

/// The answer to a `server/discover` probe the app hung up on before any
/// `initialize` (servers built on rmcp before 3 do): the app is of the
/// legacy era, and the client's `initialize` goes to it next.
pub(super) fn not_modern(raw_id: &[u8], endpoint: &Path) -> Vec<u8> {
    Answer::new(
        Reason::LegacyApp,
        "server/discover is not supported: the app closed the connection on it (a server of the \
         legacy era; mcp-bridge answers for it, and initialize goes to a new connection)",
        endpoint,
    )
    .line(raw_id, METHOD_NOT_FOUND)
}

/// A successful response with `raw_result` (JSON, as the app once wrote
/// it) for the request `raw_id`: an answer from the cache.
pub(super) fn result_line(raw_id: &[u8], raw_result: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(32 + raw_id.len() + raw_result.len());
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    line.extend_from_slice(raw_id);
    line.extend_from_slice(b",\"result\":");
    line.extend_from_slice(raw_result);
    line.extend_from_slice(b"}\n");
    line
}

/// `notifications/<list>/list_changed`, untagged (legacy era) or tagged
/// with the `subscriptions/listen` request it belongs to (2026-07-28).
pub(super) fn list_changed(list: &str, subscription: Option<&[u8]>) -> Vec<u8> {
    let mut line = Vec::with_capacity(128);
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/");
    line.extend_from_slice(list.as_bytes());
    line.extend_from_slice(b"/list_changed\"");
    if let Some(id) = subscription {
        line.extend_from_slice(
            b",\"params\":{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":",
        );
        line.extend_from_slice(id);
        line.extend_from_slice(b"}}");
    }
    line.extend_from_slice(b"}\n");
    line
}

/// `notifications/cancelled` for a request the app's gone instance had
/// open with the client: whoever asked is no longer there to hear.
pub(super) fn cancelled(raw_id: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(160 + raw_id.len());
    line.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":",
    );
    line.extend_from_slice(raw_id);
    line.extend_from_slice(
        b",\"reason\":\"the app instance that asked has closed its connection (mcp-bridge)\"}}\n",
    );
    line
}

/// `notifications/message` at level `warning` from the logger
/// `mcp-bridge`: what could not be restored after a resume, for a client
/// whose session has logging.
pub(super) fn warning(text: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(96 + text.len());
    line.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"warning\",\"logger\":\"mcp-bridge\",\"data\":",
    );
    push_json_string(&mut line, text);
    line.extend_from_slice(b"}}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn errors_say_they_are_the_bridges_and_why() {
        let answer = Answer::new(
            Reason::AppNotRunning,
            "no \"app\"",
            Path::new("/run/a.sock"),
        );
        let line: Value = serde_json::from_slice(&answer.to(b"\"x\"")).unwrap();
        assert_eq!(line["id"], "x");
        assert_eq!(line["error"]["code"], -32000);
        assert_eq!(line["error"]["message"], "no \"app\"");
        assert_eq!(line["error"]["data"]["source"], "mcp-bridge");
        assert_eq!(line["error"]["data"]["reason"], "app_not_running");
        assert_eq!(line["error"]["data"]["endpoint"], "/run/a.sock");
        let ids = crate::envelope::batch_ids(br#"[{"id":1,"method":"a"}]"#, false);
        let batch: Value = serde_json::from_slice(&answer.to_ids(&ids)).unwrap();
        assert_eq!(batch[0]["error"]["data"]["reason"], "app_not_running");
    }

    #[test]
    fn notifications_are_one_json_line_each() {
        for line in [
            list_changed("tools", None),
            list_changed("prompts", Some(b"\"listen:0\"")),
            cancelled(b"7"),
            warning("lost \"x\"\n"),
            result_line(b"1", br#"{"a":1}"#),
        ] {
            assert!(line.ends_with(b"\n"));
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
            let _: Value = serde_json::from_slice(&line).unwrap();
        }
        let tagged: Value = serde_json::from_slice(&list_changed("tools", Some(b"3"))).unwrap();
        assert_eq!(
            tagged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            3
        );
    }
}
