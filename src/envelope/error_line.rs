//! Writing a JSON-RPC error line: the one writer of every error response
//! the crate makes itself, the bridge's answers to requests the app cannot
//! take and the host's refusal line (an error with a `null` id) alike.
//!
//! A batch the bridge cannot deliver is answered as JSON-RPC 2.0 says:
//! one array with an error response per request in it
//! ([`array_of_errors`]).
//!
//! Here, beside the scanner that reads the ids it echoes, because the
//! bridge-only build has no JSON library: so it is written by hand, and
//! the host, which has one, uses it too, for one byte layout everywhere.

/// The JSON-RPC error code of every error response the crate writes
/// itself: `-32000`, the first of JSON-RPC's "server error" codes, which
/// MCP CLIs show as `MCP error -32000`. Written here once; the bridge's
/// answers (`bridge::ERROR_CODE`) and the host's refusal line both use it.
pub const ERROR_CODE: i64 = -32000;

/// A JSON-RPC error response line for a request whose id was `raw_id`
/// (written exactly as given, so the client matches it byte for byte):
/// `{"jsonrpc":"2.0","id":<raw_id>,"error":{"code":<code>,"message":"…"}}\n`,
/// the message escaped (see [`push_json_string`]), so it always stays one
/// line. Written by hand: the bridge-only build has no JSON library.
#[cfg(any(feature = "host", test))]
pub(crate) fn error_response_line(raw_id: &[u8], code: i64, message: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(64 + raw_id.len() + message.len());
    push_error_response(&mut line, raw_id, code, message, None);
    line.push(b'\n');
    line
}

/// Appends the error response object of [`error_response_line`], without
/// the `\n` (a batch's answer puts several in one array), with `data` (raw
/// JSON, written as given) when there is some.
pub(crate) fn push_error_response(
    out: &mut Vec<u8>,
    raw_id: &[u8],
    code: i64,
    message: &str,
    data: Option<&[u8]>,
) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(raw_id);
    out.extend_from_slice(b",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    super::json::push_json_string(out, message);
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data);
    }
    out.extend_from_slice(b"}}");
}

/// One array with an error response per id in `ids` (as
/// [`BatchIds`](super::BatchIds) gives them), on one line, or
/// nothing when there is none.
pub(crate) fn array_of_errors(
    ids: &[u8],
    code: i64,
    message: &str,
    data: Option<&[u8]>,
) -> Vec<u8> {
    if ids.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for id in ids.get(1..).unwrap_or_default().split(|&b| b == b'\n') {
        out.push(if out.is_empty() { b'[' } else { b',' });
        push_error_response(&mut out, id, code, message, data);
    }
    out.extend_from_slice(b"]\n");
    out
}
