//! Reading a JSON-RPC message's top-level members straight from its text, and weighing what
//! decoding one of its members would cost, without building a tree for either.
//!
//! Parsing a whole line into a `serde_json::Value` to look at its `id` and `method`
//! costs far more than the line: every JSON value becomes a 32-byte `Value`, every
//! non-empty object at least one 632-byte B-tree node, so a 60 MB line of small
//! numbers or objects becomes gigabytes. Routing needs none of that. Here a line is
//! checked once by serde_json without building anything (`RawValue`, which only
//! records where a value starts and ends), then its top-level members are located
//! by a scanner that may trust the text to be valid JSON. Only the member the caller
//! will receive (`params`, `result` or `error`) is ever decoded, and only after
//! [`decoded_size`] has put an upper bound on what the decoded tree will hold, so a
//! limit can refuse it before the memory is spent.

use std::mem::size_of;

use serde_json::value::RawValue;
use serde_json::Value;

use super::RequestId;

/// The members of one message that routing needs, each as the JSON text of its value.
///
/// When a member appears twice, the last one counts, as when serde_json decodes the
/// object.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RawMembers<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) method: Option<&'a str>,
    pub(crate) params: Option<&'a str>,
    pub(crate) result: Option<&'a str>,
    pub(crate) error: Option<&'a str>,
}

impl<'a> RawMembers<'a> {
    /// The top-level members of `line`; `None` unless it is valid JSON (and UTF-8) holding one
    /// object.
    pub(crate) fn read(line: &'a [u8]) -> Option<RawMembers<'a>> {
        // Validates the whole line without allocating anything but a stack of the
        // brackets that are open, one byte per level.
        let text = serde_json::from_slice::<&RawValue>(line).ok()?.get();
        let mut scan = Scan::new(text.as_bytes());
        if scan.next_byte()? != b'{' {
            return None;
        }
        let mut members = RawMembers::default();
        let mut ignored = None;
        loop {
            scan.skip_whitespace();
            if scan.peek()? == b'}' {
                return Some(members);
            }
            let key = scan.value()?;
            scan.skip_whitespace();
            scan.next_byte()?; // the ':'
            scan.skip_whitespace();
            let value = scan.value()?;
            let slot = match member_name(&text[key.0..key.1]).as_deref() {
                Some("id") => &mut members.id,
                Some("method") => &mut members.method,
                Some("params") => &mut members.params,
                Some("result") => &mut members.result,
                Some("error") => &mut members.error,
                _ => &mut ignored,
            };
            *slot = Some(&text[value.0..value.1]);
            scan.skip_whitespace();
            if scan.next_byte()? == b'}' {
                return Some(members);
            }
        }
    }
}

/// The decoded name of a member from its JSON text, `"id"` → `id`. Names with escapes
/// are rare but legal (`"\u0069d"` is `id`), so they are decoded properly.
fn member_name(text: &str) -> Option<std::borrow::Cow<'_, str>> {
    let inner = text.get(1..text.len().checked_sub(1)?)?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Into::into)
    } else {
        Some(inner.into())
    }
}

/// A request id from the JSON text of an `id` member: a string, or an integer that fits
/// in `i64`. Anything else (`null`, `1.5`, `[7]`) is `None`, as in
/// [`RequestId::from_json`].
pub(crate) fn request_id(text: &str) -> Option<RequestId> {
    match text.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(text)
            .ok()
            .map(RequestId::String),
        b'-' | b'0'..=b'9' => serde_json::from_str::<i64>(text)
            .ok()
            .map(RequestId::Integer),
        _ => None,
    }
}

/// The deepest nesting serde_json decodes into a `Value` (its recursion limit of 128
/// fails on the 128th level); [`decoded_size`] gives up beyond it, since decoding
/// would fail anyway.
pub(crate) const MAX_DEPTH: usize = 127;

/// What each heap allocation may cost beyond the bytes asked for: the allocator's
/// header and rounding (16-byte steps and a 32-byte minimum for glibc's malloc).
const ALLOCATION_OVERHEAD: usize = 32;

/// The largest B-tree node of a decoded object: up to 11 keys and values, 12 child
/// pointers in an internal node, and a parent pointer with two counters.
const OBJECT_NODE: usize =
    11 * (size_of::<String>() + size_of::<Value>()) + 12 * size_of::<usize>() + 16;

/// Every node of a B-tree but the root holds at least this many entries, so an
/// object of `n` members has at most `(n - 1) / 5 + 1` nodes (insertions only: a
/// full node of 11 splits into halves of at least 5).
const OBJECT_NODE_MIN_ENTRIES: usize = 5;

/// An upper bound of the heap memory that decoding `text` (one valid JSON value) into a
/// `serde_json::Value` holds once built, counting the root `Value` itself; `None` if it
/// nests deeper than serde_json decodes. Counting stops as soon as the bound passes
/// `limit` (the result is then some number above `limit`), so refusing a huge line
/// costs no more than reading its first few megabytes.
///
/// Per kind of value: a non-empty string, its bytes plus an allocation (its JSON text
/// is never shorter than the decoded string); an array of `n` elements, a vector grown
/// by doubling, so at most `max(4, 2n)` slots of 32 bytes; an object of `n` members,
/// its B-tree nodes; numbers, booleans and `null` live inside their slot. The bound is
/// within about 2x of the real size for realistic messages and 1–2x for the shapes
/// that blow up (many small values); a unit test holds it against a counting
/// allocator.
pub(crate) fn decoded_size(text: &str, limit: usize) -> Option<usize> {
    // For each open container: whether it is an object, and how many elements or
    // members it has so far.
    let mut open: Vec<(bool, usize)> = Vec::new();
    let mut total = size_of::<Value>();
    let mut scan = Scan::new(text.as_bytes());
    while let Some(byte) = scan.next_byte() {
        let grown = match byte {
            b'"' => {
                let start = scan.at - 1;
                scan.finish_string()?;
                match scan.at - start - 2 {
                    0 => 0,
                    length => length + ALLOCATION_OVERHEAD,
                }
            }
            b'[' | b'{' => {
                if open.len() == MAX_DEPTH {
                    return None;
                }
                let object = byte == b'{';
                scan.skip_whitespace();
                let empty = matches!(scan.peek(), Some(b']') | Some(b'}'));
                open.push((object, 0));
                if object || empty {
                    0
                } else {
                    // The vector, its first four slots, and the first element's two.
                    open.last_mut()?.1 = 1;
                    ARRAY_BASE + ARRAY_ELEMENT
                }
            }
            b',' => match open.last_mut() {
                Some((false, elements)) => {
                    *elements += 1;
                    ARRAY_ELEMENT
                }
                _ => 0,
            },
            b':' => match open.last_mut() {
                Some((true, members)) => {
                    *members += 1;
                    // A new node for the first member and for every fifth after it.
                    if *members % OBJECT_NODE_MIN_ENTRIES == 1 {
                        OBJECT_NODE + ALLOCATION_OVERHEAD
                    } else {
                        0
                    }
                }
                _ => 0,
            },
            b']' | b'}' => {
                open.pop()?;
                0
            }
            _ => 0,
        };
        total = total.saturating_add(grown);
        if total > limit {
            return Some(total);
        }
    }
    Some(total)
}

/// A non-empty array's vector before its elements: four slots (the first capacity a
/// vector of 32-byte values gets) and an allocation.
const ARRAY_BASE: usize = 4 * size_of::<Value>() + ALLOCATION_OVERHEAD;

/// What each element adds to its array at most: two slots, since doubling leaves up
/// to half the capacity unused.
const ARRAY_ELEMENT: usize = 2 * size_of::<Value>();

/// A cursor over JSON text already known to be valid.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Scan { bytes, at: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Moves past the closing quote of a string whose opening quote was just read.
    fn finish_string(&mut self) -> Option<()> {
        loop {
            match self.next_byte()? {
                b'"' => return Some(()),
                b'\\' => {
                    self.next_byte()?;
                }
                _ => {}
            }
        }
    }

    /// The span of the value starting here, leaving the cursor just after it.
    fn value(&mut self) -> Option<(usize, usize)> {
        let start = self.at;
        match self.next_byte()? {
            b'"' => self.finish_string()?,
            b'[' | b'{' => {
                let mut depth = 1usize;
                while depth > 0 {
                    match self.next_byte()? {
                        b'"' => self.finish_string()?,
                        b'[' | b'{' => depth += 1,
                        b']' | b'}' => depth -= 1,
                        _ => {}
                    }
                }
            }
            _ => {
                // A number or a literal: it ends where the next delimiter starts.
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.at += 1;
                }
            }
        }
        Some((start, self.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use crate::ffi::unix::counting_allocator::live_bytes;

    #[test]
    fn finds_the_members_routing_needs_and_skips_the_rest() {
        let line = br#" { "jsonrpc" : "2.0", "extra": {"id": 9, "s": "}\"{"}, "id":7,
            "method":"turn/started", "params": [1, {"a": "]"}] , "result":null } "#;
        let members = RawMembers::read(line).unwrap();
        assert_eq!(
            members,
            RawMembers {
                id: Some("7"),
                method: Some(r#""turn/started""#),
                params: Some(r#"[1, {"a": "]"}]"#),
                result: Some("null"),
                error: None,
            }
        );
    }

    #[test]
    fn the_last_of_repeated_members_counts_and_escaped_names_are_decoded() {
        let members = RawMembers::read(br#"{"id":1,"id":"two","\u0069d":3,"error":{}}"#).unwrap();
        assert_eq!(members.id, Some("3"));
        assert_eq!(members.error, Some("{}"));
    }

    #[test]
    fn anything_but_one_valid_object_reads_as_none() {
        for line in [
            &b"not json"[..],
            b"[1,2]",
            b"\"text\"",
            b"{\"id\":1",
            b"{\"id\":1} {}",
            b"{\"id\":1,}",
            b"{\"id\":\"\xff\"}",
            b"",
        ] {
            assert_eq!(RawMembers::read(line), None, "{:?}", line);
        }
        assert_eq!(RawMembers::read(b"{}"), Some(RawMembers::default()));
    }

    #[test]
    fn request_ids_are_strings_or_integers() {
        assert_eq!(request_id(r#""a\"b""#), Some(RequestId::from("a\"b")));
        assert_eq!(request_id("-7"), Some(RequestId::Integer(-7)));
        for text in [
            "null",
            "1.5",
            "1e2",
            "[7]",
            "{}",
            "true",
            "18446744073709551616",
        ] {
            assert_eq!(request_id(text), None, "{}", text);
        }
    }

    /// The heap a decoded `text` holds, measured, plus its root `Value`.
    #[cfg(unix)]
    fn measured(text: &str) -> usize {
        let before = live_bytes();
        let value: Value = serde_json::from_str(text).unwrap();
        let after = live_bytes();
        drop(value);
        (after - before) as usize + size_of::<Value>()
    }

    /// The estimate must never be below what decoding really holds (else a limit
    /// would let more through than it says), and not so far above it that a limit
    /// refuses realistic messages.
    #[cfg(unix)]
    #[test]
    fn decoded_size_bounds_what_decoding_really_holds() {
        let many = |item: &str, n: usize| format!("[{}]", vec![item; n].join(","));
        let objects: Vec<String> = (0..20_000)
            .map(|n| format!(r#""key{}":{}"#, n, n))
            .collect();
        let shapes = [
            "0".to_string(),
            "\"\"".to_string(),
            "[]".to_string(),
            "{}".to_string(),
            r#"{"n":1}"#.to_string(),
            many("0", 1),
            many("0", 5),
            many("0", 100_000),
            many(r#"{"a":0}"#, 10_000),
            many("[]", 10_000),
            many(r#""x""#, 10_000),
            format!("{{{}}}", objects.join(",")),
            format!("\"{}\"", "x".repeat(1_000_000)),
            format!("\"{}\"", "\\n".repeat(1_000)),
            r#"{"cmd":"make test","cwd":"/tmp","env":{"A":"1","B":"2"},"args":["-j","2"]}"#
                .to_string(),
        ];
        for text in &shapes {
            let estimate = decoded_size(text, usize::MAX).unwrap();
            let real = measured(text);
            assert!(
                real <= estimate && estimate <= 4 * real + 256,
                "{}...: real {} estimate {}",
                &text[..text.len().min(40)],
                real,
                estimate
            );
        }
    }

    #[test]
    fn counting_stops_once_past_the_limit() {
        let text = format!("[{}]", vec!["0"; 1000].join(","));
        let full = decoded_size(&text, usize::MAX).unwrap();
        let cut = decoded_size(&text, 1000).unwrap();
        assert!(cut > 1000 && cut < full, "{} {}", cut, full);
        assert_eq!(decoded_size(&text, full), Some(full));
    }

    #[test]
    fn decoded_size_gives_up_where_decoding_would() {
        let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(decoded_size(&deep(MAX_DEPTH), usize::MAX).is_some());
        assert!(serde_json::from_str::<Value>(&deep(MAX_DEPTH)).is_ok());
        assert_eq!(decoded_size(&deep(MAX_DEPTH + 1), usize::MAX), None);
        assert!(serde_json::from_str::<Value>(&deep(MAX_DEPTH + 1)).is_err());
    }
}
