//! Array lines (JSON-RPC batches): telling one, and reading the ids of the
//! requests and responses in it as the line streams ([`BatchScanner`]), for
//! the bridge that answers a batch it cannot deliver and follows one in
//! flight. The answer itself, an array of error responses, is written by
//! [`super::error_line`].
//!
//! Why streamed: a batch owes every request in it one answer, however long
//! the line, and the bridge keeps no line's bytes beyond its hold limit. So
//! the array is walked as it comes (strings and nesting followed, nothing
//! validated), each element fed to an envelope [`Scanner`] of its own, and
//! only the ids are kept (up to [`IDS_CAP`]), never the bytes: a 100 MiB
//! batch costs its ids.

use super::{Kind, Scanner};

/// Most bytes of ids kept of one batch: the most the bridge remembers of
/// requests in flight (16 MiB, `PENDING_BYTES`), so a batch it follows is
/// never forgotten for its own size. Requests beyond it get no answer of
/// the bridge's.
pub(crate) const IDS_CAP: usize = 16 * 1024 * 1024;

/// The first byte of `bytes` that is not whitespace, after a UTF-8 byte
/// order mark: `[` starts a batch.
pub(crate) fn first_byte_after_space(bytes: &[u8]) -> Option<u8> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r'))
}

/// The raw ids in an array line, in order, each after a `\n` (an id is
/// JSON, so it has none); a request whose id is too long to keep is `null`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchIds {
    /// The requests' ids.
    pub(crate) requests: Vec<u8>,
    /// The responses' ids (a batch of the client's answers).
    pub(crate) responses: Vec<u8>,
}

impl BatchIds {
    /// The ids of `line` (whole, or its start), if it is an array.
    pub(crate) fn of(line: &[u8]) -> Option<BatchIds> {
        if first_byte_after_space(line) != Some(b'[') {
            // Most lines: no scanner made.
            return None;
        }
        let mut scanner = BatchScanner::new();
        scanner.feed(line);
        scanner.finish()
    }

    fn push(ids: &mut Vec<u8>, id: &[u8]) {
        if ids.len() + 1 + id.len() <= IDS_CAP {
            ids.push(b'\n');
            ids.extend_from_slice(id);
        }
    }
}

/// What is called with each element of an array: where it is in what was
/// fed, and its id when it is a response.
type Each<'a> = dyn FnMut(std::ops::Range<usize>, Option<&[u8]>) + 'a;

/// Where the walk of an array line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    /// Before the `[` (blanks, a byte order mark).
    Before,
    /// Inside the array.
    In,
    /// After its `]` or its line's end, or not an array: nothing more.
    Done,
}

/// Reads the ids of an array line fed in chunks of any size (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct BatchScanner {
    walk: Walk,
    /// Its `[` was seen: the line is an array.
    array: bool,
    /// Open brackets inside the element being read.
    depth: u64,
    string: bool,
    escaped: bool,
    /// The element being read, as a line of its own.
    element: Scanner,
    ids: BatchIds,
}

impl Default for BatchScanner {
    fn default() -> Self {
        BatchScanner::new()
    }
}

impl BatchScanner {
    /// A scanner at the start of an array line.
    pub(crate) fn new() -> BatchScanner {
        BatchScanner {
            walk: Walk::Before,
            array: false,
            depth: 0,
            string: false,
            escaped: false,
            element: Scanner::new(),
            ids: BatchIds::default(),
        }
    }

    /// The next bytes of the line (a `\n` ends it).
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.walk_elements(bytes, &mut |_, _| {});
    }

    /// Calls `each` with every element of the whole array line `line` (where
    /// it is in `line`, blanks around it included) and its id when it is a
    /// response: for the bridge, which rewrites an array of the client's
    /// answers, without a walker of its own.
    /// Whether `line` is an array.
    pub(crate) fn for_each_element(line: &[u8], each: &mut Each<'_>) -> bool {
        let mut scanner = BatchScanner::new();
        scanner.walk_elements(line, each);
        scanner.array
    }

    fn walk_elements(&mut self, bytes: &[u8], each: &mut Each<'_>) {
        let mut i = 0;
        while self.walk == Walk::Before && i < bytes.len() {
            match bytes[i] {
                b'[' => {
                    self.walk = Walk::In;
                    self.array = true;
                }
                b' ' | b'\t' | b'\r' | 0xEF | 0xBB | 0xBF => {}
                _ => self.walk = Walk::Done,
            }
            i += 1;
        }
        let mut from = i;
        while self.walk == Walk::In && i < bytes.len() {
            let b = bytes[i];
            let outside = !self.string && self.depth == 0;
            if b == b'\n' || (outside && matches!(b, b',' | b']')) {
                self.element
                    .feed(bytes.get(from..i).unwrap_or_default(), |_| {});
                self.end_element(from..i, each);
                from = i + 1;
                if b != b',' {
                    self.walk = Walk::Done;
                }
            } else if self.string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => self.string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
            i += 1;
        }
        if self.walk == Walk::In {
            self.element
                .feed(bytes.get(from..).unwrap_or_default(), |_| {});
        }
    }

    /// The ids read, if the line is an array (an element cut short, the
    /// line ending inside it, names none).
    pub(crate) fn finish(&mut self) -> Option<BatchIds> {
        // The line's end, if it did not come.
        self.feed(b"\n");
        match self.array {
            true => Some(std::mem::take(&mut self.ids)),
            false => None,
        }
    }

    fn end_element(&mut self, at: std::ops::Range<usize>, each: &mut Each<'_>) {
        self.depth = 0;
        self.string = false;
        self.escaped = false;
        let ids = &mut self.ids;
        self.element.feed(b"\n", |envelope| {
            let mut response = None;
            match (envelope.kind, envelope.id) {
                (Kind::Request, id) => BatchIds::push(&mut ids.requests, id.unwrap_or(b"null")),
                (Kind::Response | Kind::ErrorResponse, Some(id)) => {
                    BatchIds::push(&mut ids.responses, id);
                    response = Some(id);
                }
                _ => {}
            }
            each(at.clone(), response);
        });
    }
}

/// The raw ids of the requests (or, with `responses`, of the responses) in
/// an array line, in order, each after a `\n` (see [`BatchIds`]).
#[cfg(test)]
pub(crate) fn batch_ids(line: &[u8], responses: bool) -> Vec<u8> {
    let ids = BatchIds::of(line).unwrap_or_default();
    if responses {
        ids.responses
    } else {
        ids.requests
    }
}

#[cfg(test)]
mod cut_tests {
    use super::{batch_ids, BatchIds, BatchScanner};

    #[test]
    fn the_ids_of_a_batch_cut_short_are_those_of_its_whole_elements() {
        let cut = br#"[{"jsonrpc":"2.0","id":7,"method":"a","params":{"p":"xx"}},{"jsonrpc":"2.0","id":"s-8","method":"b","params":{"p":"xxxx"#;
        assert_eq!(batch_ids(cut, false), b"\n7".to_vec());
    }

    #[test]
    fn the_ids_are_the_same_in_chunks_of_any_size_however_long_the_line() {
        let mut line = b" [".to_vec();
        for n in 0..300 {
            let pad = "x".repeat(8000);
            line.extend_from_slice(
                format!(
                    r#"{{"jsonrpc":"2.0","id":{},"method":"a","params":{{"s":"a,]\"{{[{}"}}}},"#,
                    n, pad
                )
                .as_bytes(),
            );
        }
        line.extend_from_slice(br#"{"jsonrpc":"2.0","method":"n"},{"id":"r","result":{"id":9}}]"#);
        line.push(b'\n');
        assert!(line.len() > 2 * 1024 * 1024);
        let whole = BatchIds::of(&line).unwrap();
        let wanted: Vec<u8> = (0..300)
            .flat_map(|n| format!("\n{}", n).into_bytes())
            .collect();
        assert_eq!(whole.requests, wanted);
        assert_eq!(whole.responses, b"\n\"r\"".to_vec());
        for size in [1, 7, 4096, 65_536] {
            let mut scanner = BatchScanner::new();
            for chunk in line.chunks(size) {
                scanner.feed(chunk);
            }
            assert_eq!(scanner.finish(), Some(whole.clone()), "chunks of {}", size);
        }
    }
}
