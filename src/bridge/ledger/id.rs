//! JSON-RPC ids compared as JSON values, not as the bytes they were
//! written with.
//!
//! The bridge relays every byte as it came, but the two sides may write
//! one id differently: an app that parses ids into numbers and writes them
//! back (the TypeScript SDK, any JavaScript app) turns `1e300` into
//! `1e+300` and `18446744073709551616` into `18446744073709552000`, and
//! `"\u0061"` is the string `"a"`. A reply is matched to its request by
//! [`key`]: numbers by value (as the double a JavaScript peer reads them
//! into, which is what it answers with), strings by content, and never a
//! number equal to a string (`"1"` is not `1`).
//!
//! Most ids are small integers or plain strings, written alike by everyone:
//! those take the fast path, a copy with a tag.

/// The form of an id the ledger's maps are keyed by.
pub(in crate::bridge) fn key(raw: &[u8]) -> Vec<u8> {
    let raw = trim(raw);
    match raw.first() {
        Some(b'"') => string_key(raw).unwrap_or_else(|| tagged(b'r', raw)),
        Some(b'-' | b'0'..=b'9') => number_key(raw).unwrap_or_else(|| tagged(b'r', raw)),
        _ => tagged(b'r', raw),
    }
}

fn tagged(tag: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 1);
    out.push(tag);
    out.extend_from_slice(bytes);
    out
}

fn trim(raw: &[u8]) -> &[u8] {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = raw.iter().position(|b| !is_space(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |e| e + 1);
    &raw[start..end]
}

/// Integers beyond this are not all apart as doubles.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// `i` and the integer's digits, for an integer a double holds exactly;
/// `f` and the double's bits otherwise.
fn number_key(raw: &[u8]) -> Option<Vec<u8>> {
    let digits = raw.strip_prefix(b"-").unwrap_or(raw);
    if !digits.is_empty()
        && digits.len() <= 15
        && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || digits.len() == 1)
    {
        // The fast path: what nearly every client writes.
        if digits == b"0" {
            return Some(b"i0".to_vec());
        }
        return Some(tagged(b'i', raw));
    }
    let value: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    if !value.is_finite() {
        return None;
    }
    if value.fract() == 0.0 && value.abs() < EXACT {
        let mut out = b"i".to_vec();
        out.extend_from_slice((value as i64).to_string().as_bytes());
        return Some(out);
    }
    Some(tagged(b'f', &value.to_bits().to_le_bytes()))
}

/// `s` and the string's content (UTF-8, escapes resolved).
fn string_key(raw: &[u8]) -> Option<Vec<u8>> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if !inner.contains(&b'\\') {
        return Some(tagged(b's', inner));
    }
    let mut out = vec![b's'];
    let mut at = 0;
    while at < inner.len() {
        let b = inner[at];
        at += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let escape = *inner.get(at)?;
        at += 1;
        let plain = match escape {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let mut unit = hex4(inner.get(at..at + 4)?)?;
                at += 4;
                if (0xD800..0xDC00).contains(&unit) && inner.get(at..at + 2) == Some(b"\\u") {
                    let low = hex4(inner.get(at + 2..at + 6)?)?;
                    if (0xDC00..0xE000).contains(&low) {
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        at += 6;
                    }
                }
                let c = char::from_u32(unit).unwrap_or('\u{FFFD}');
                let mut utf8 = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                continue;
            }
            _ => return None,
        };
        out.push(plain);
    }
    Some(out)
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let mut value = 0;
    for &d in digits {
        value = value * 16 + (d as char).to_digit(16)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn ids_are_equal_as_json_values() {
        let same: &[(&[u8], &[u8])] = &[
            (b"1", b"1"),
            (b"1e300", b"1e+300"),
            (b"1e300", b"1E300"),
            (b"100", b"1e2"),
            (b"100", b"100.0"),
            (b"18446744073709551616", b"18446744073709552000"),
            (b"18446744073709551616", b"1.8446744073709552e19"),
            (b"-0", b"0"),
            (b"\"a\"", b"\"\\u0061\""),
            (b"\"\\ud83d\\ude00\"", "\"\u{1F600}\"".as_bytes()),
            (b" 7 ", b"7"),
        ];
        for (a, b) in same {
            assert_eq!(
                key(a),
                key(b),
                "{:?} {:?}",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            );
        }
        let apart: &[(&[u8], &[u8])] = &[
            (b"1", b"\"1\""),
            (b"1", b"2"),
            (b"null", b"\"null\""),
            (b"9007199254740991", b"9007199254740990"),
            (b"\"a\"", b"\"b\""),
            (b"1.5", b"1"),
        ];
        for (a, b) in apart {
            assert_ne!(
                key(a),
                key(b),
                "{:?} {:?}",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            );
        }
    }
}
