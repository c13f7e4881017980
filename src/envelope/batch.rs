//! Array lines (JSON-RPC batches): telling one, and reading the ids of the
//! requests or responses in it, for the bridge that answers a batch it
//! cannot deliver and follows one in flight. The answer itself, an array of
//! error responses, is written by [`super::error_line`].

use super::json::for_each_array_element;
use super::{Kind, Scanner};

/// The first byte of `bytes` that is not whitespace, after a UTF-8 byte
/// order mark: `[` starts a batch.
pub(crate) fn first_byte_after_space(bytes: &[u8]) -> Option<u8> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r'))
}

/// The raw ids of the requests (or, with `responses`, of the responses) in
/// an array line, in order, each after a `\n` (an id is JSON, so it has
/// none); a request whose id is too long to keep is `null`.
pub(crate) fn batch_ids(line: &[u8], responses: bool) -> Vec<u8> {
    let mut ids = Vec::new();
    let mut scanner = Scanner::new();
    for_each_array_element(line, &mut |element| {
        let mut element = element.to_vec();
        element.push(b'\n');
        let mut push = |id: &[u8]| {
            ids.push(b'\n');
            ids.extend_from_slice(id);
        };
        scanner.feed(&element, |envelope| match (envelope.kind, envelope.id) {
            (Kind::Request, id) if !responses => push(id.unwrap_or(b"null")),
            (Kind::Response | Kind::ErrorResponse, Some(id)) if responses => push(id),
            _ => {}
        });
    });
    ids
}
