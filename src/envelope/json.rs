//! The one small JSON toolkit of the crate, for code that has no JSON
//! library (the bridge-only build has none) and reads or writes a few
//! values of whole, bounded lines: a member of an object ([`member`]), the
//! elements of an array ([`for_each_array_element`]), and a string
//! written as JSON
//! ([`push_json_string`]).
//!
//! They walk, they do not validate: what they read was relayed unchanged
//! and is checked by whoever receives it. The streaming scanner in
//! [`super`] is for the relay's hot path; this is for the few lines the
//! bridge keeps whole (a recorded request, a reply to its replay).

/// The raw value of member `key` of the JSON object in `object` (leading
/// and trailing whitespace allowed), the last one if it repeats, as
/// `JSON.parse` does; `None` if `object` is not an object or has no such
/// member. Keys are compared as written (an escaped key does not match).
/// Only for whole, bounded values: it walks, it does not validate.
pub(crate) fn member<'a>(object: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let mut i = skip_space(object, 0);
    if object.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut found = None;
    loop {
        i = skip_space(object, i);
        match object.get(i)? {
            b'}' => return found,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = value_end(object, i)?;
        let name = object.get(i + 1..key_end - 1).unwrap_or_default();
        i = skip_space(object, key_end);
        if object.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(object, i + 1);
        let end = value_end(object, i)?;
        if name == key.as_bytes() {
            found = object.get(i..end);
        }
        i = end;
    }
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// Where the JSON value starting at `bytes[i]` ends (one past it).
fn value_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    loop {
        match *bytes.get(j)? {
            b'"' => {
                j += 1;
                loop {
                    match *bytes.get(j)? {
                        b'\\' => j += 2,
                        b'"' => break,
                        _ => j += 1,
                    }
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return Some(j),
            b'}' | b']' => depth -= 1,
            b',' | b' ' | b'\t' | b'\r' | b'\n' if depth == 0 => return Some(j),
            _ => {}
        }
        j += 1;
        if depth == 0 && matches!(bytes.get(i), Some(b'"' | b'{' | b'[')) {
            return Some(j);
        }
    }
}

/// Calls `each` with every element of the JSON array that starts `json`
/// (after blanks and a byte order mark), as a slice of it without the blanks
/// around it, empty ones skipped: strings and nesting are followed, nothing
/// is validated or decoded. `false` if `json` is not an array. For doctor
/// (the items of a page, one line of the app's), which builds no tree:
/// the walk is the bridge's own for its batches
/// ([`BatchScanner`](super::BatchScanner)), so there is one.
#[cfg(any(feature = "doctor", test))]
pub(crate) fn for_each_array_element(json: &[u8], each: &mut dyn FnMut(&[u8])) -> bool {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    super::BatchScanner::for_each_element(json, &mut |at, _| {
        let element = json.get(at).unwrap_or_default();
        let start = element.iter().position(|b| !blank(b));
        let end = element.iter().rposition(|b| !blank(b));
        if let (Some(start), Some(end)) = (start, end) {
            each(element.get(start..=end).unwrap_or_default());
        }
    })
}

/// Calls `each` with the index and value of every byte of `json` from
/// `from` on that is outside a string (its quotes included in the
/// string), until `each` returns `false`: the structure of a JSON text,
/// for doctor's nesting depth.
#[cfg(feature = "doctor")]
pub(crate) fn for_each_outside_strings(
    json: &[u8],
    from: usize,
    mut each: impl FnMut(usize, u8) -> bool,
) {
    let (mut in_string, mut escaped) = (false, false);
    for (i, &b) in json.iter().enumerate().skip(from) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if !each(i, b) {
            return;
        }
    }
}

/// Appends `text` as a JSON string, escaped exactly as `serde_json`
/// escapes it: `"` and `\\`, the control characters with a short escape
/// (`\n`, `\r`, `\t`, `\b`, `\f`) by it and the others as `\u00XX`,
/// everything else (UTF-8 included) as it is. So a line written here stays
/// one line, and round-trips exactly. The one string writer of the crate's
/// hand-written lines (the handshake, the error responses).
pub(crate) fn push_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(text.len() + 2);
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut clean = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => b'u',
            _ => continue,
        };
        out.extend_from_slice(bytes.get(clean..i).unwrap_or_default());
        clean = i + 1;
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            out.extend_from_slice(b"00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        }
    }
    out.extend_from_slice(bytes.get(clean..).unwrap_or_default());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_finds_top_level_values_only() {
        let line = br#"{"jsonrpc":"2.0","id":"x","result":{"capabilities":{"tools":{"listChanged":true},"prompts":{}},"s":"}\"{"},"n":12}
"#;
        let result = member(line, "result").unwrap();
        let caps = member(result, "capabilities").unwrap();
        assert_eq!(member(caps, "tools"), Some(&br#"{"listChanged":true}"#[..]));
        assert_eq!(member(caps, "prompts"), Some(&b"{}"[..]));
        assert_eq!(member(caps, "resources"), None);
        assert_eq!(member(line, "n"), Some(&b"12"[..]));
        assert_eq!(member(line, "id"), Some(&br#""x""#[..]));
        assert_eq!(member(result, "listChanged"), None);
        assert_eq!(member(b"[1,2]", "a"), None);
        assert_eq!(member(b"{\"a\":", "a"), None);
        assert_eq!(
            member(b" { \"a\" : [1, {\"b\":2}] , \"a\":3 } ", "a"),
            Some(&b"3"[..])
        );
    }
}
