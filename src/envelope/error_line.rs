//! Writing a JSON-RPC error line: the one writer of every error response
//! the crate makes itself, the bridge's answers to requests the app cannot
//! take and the host's refusal line (an error with a `null` id) alike.
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
    push_json_string(out, message);
    out.extend_from_slice(b"}}");
}

/// Appends `text` as a JSON string: `"` and `\\` escaped, control
/// characters as `\n`, `\r`, `\t` or `\u00XX`, everything else (UTF-8
/// included) as it is, which is what JSON allows.
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in text.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}
