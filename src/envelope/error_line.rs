//! Writing a JSON-RPC error line: the one writer of every error response
//! the crate makes itself, the bridge's answers to requests the app cannot
//! take and the host's refusal line (an error with a `null` id) alike.
//!
//! A batch the bridge cannot deliver is answered as JSON-RPC 2.0 says:
//! one array with an error response per request in it
//! ([`batch_errors`], [`array_of_errors`]).
//!
//! Here, beside the scanner that reads the ids it echoes, because the
//! bridge-only build has no JSON library: so it is written by hand, and
//! the host, which has one, uses it too, for one byte layout everywhere.

/// A JSON-RPC error response line for a request whose id was `raw_id`
/// (written exactly as given, so the client matches it byte for byte):
/// `{"jsonrpc":"2.0","id":<raw_id>,"error":{"code":<code>,"message":"…"}}\n`,
/// the message escaped (see [`push_json_string`]), so it always stays one
/// line. Written by hand: the bridge-only build has no JSON library.
pub(crate) fn error_response_line(raw_id: &[u8], code: i64, message: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(64 + raw_id.len() + message.len());
    push_error_response(&mut line, raw_id, code, message);
    line.push(b'\n');
    line
}

/// Appends the error response object of [`error_response_line`], without
/// the `\n` (a batch's answer puts several in one array).
pub(crate) fn push_error_response(out: &mut Vec<u8>, raw_id: &[u8], code: i64, message: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(raw_id);
    out.extend_from_slice(b",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    super::json::push_json_string(out, message);
    out.extend_from_slice(b"}}");
}

/// The answer to a batch that cannot be passed on, as JSON-RPC 2.0 says:
/// one array with an error response per request in it, on one line, or
/// nothing when it holds no request.
pub(crate) fn batch_errors(line: &[u8], code: i64, message: &str) -> Vec<u8> {
    array_of_errors(&super::batch::batch_ids(line, false), code, message)
}

/// One array with an error response per id in `ids` (as
/// [`batch_ids`](super::batch::batch_ids) gives them), on one line, or
/// nothing when there is none.
pub(crate) fn array_of_errors(ids: &[u8], code: i64, message: &str) -> Vec<u8> {
    if ids.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for id in ids[1..].split(|&b| b == b'\n') {
        out.push(if out.is_empty() { b'[' } else { b',' });
        push_error_response(&mut out, id, code, message);
    }
    out.extend_from_slice(b"]\n");
    out
}
