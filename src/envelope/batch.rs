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
        let mut push = |id: &[u8]| {
            ids.push(b'\n');
            ids.extend_from_slice(id);
        };
        scanner.feed(element, |_| {});
        // What the element showed before its end: for one cut short (the
        // last of a batch kept in part), all there is to go by.
        let partial = scanner.partial();
        let seen = match (partial.method && !partial.answer, partial.id) {
            (true, Some(id)) if !responses => Some(id.to_vec()),
            _ => None,
        };
        let mut ended = false;
        scanner.feed(b"\n", |envelope| {
            ended = envelope.kind != Kind::Other;
            match (envelope.kind, envelope.id) {
                (Kind::Request, id) if !responses => push(id.unwrap_or(b"null")),
                (Kind::Response | Kind::ErrorResponse, Some(id)) if responses => push(id),
                _ => {}
            }
        });
        if let (false, Some(id)) = (ended, seen) {
            push(&id);
        }
    });
    ids
}

#[cfg(test)]
mod cut_tests {
    use super::batch_ids;

    #[test]
    fn the_ids_of_a_batch_cut_short_are_read_as_far_as_it_goes() {
        let cut = br#"[{"jsonrpc":"2.0","id":7,"method":"a","params":{"p":"xx"}},{"jsonrpc":"2.0","id":"s-8","method":"b","params":{"p":"xxxx"#;
        assert_eq!(batch_ids(cut, false), b"\n7\n\"s-8\"".to_vec());
    }
}
