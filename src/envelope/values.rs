//! Checking and decoding the values the scanner captures (`id`, keys,
//! `method`, `message`), once each one is whole.
//!
//! Apart from the state machine in [`super`] because they run on a
//! captured value, never on the stream: JSON's string escapes and number
//! grammar, written out without a JSON library (the bridge-only build has
//! none).

use std::str;

use super::has_backslash;

/// Decodes a JSON string body's escapes in place (every escape is at least
/// as long as what it stands for). On an invalid or cut-off escape, or a
/// `\u` that is half a surrogate pair, keeps what was decoded before it and
/// returns `false`.
pub(super) fn unescape(buf: &mut Vec<u8>) -> bool {
    if !has_backslash(buf) {
        return true;
    }
    let (mut read, mut write) = (0, 0);
    // (`get`, not indexing, here and below: no panic sites for positions
    // that stay in range, `write` never past `read`.)
    while let Some(&b) = buf.get(read) {
        if b != b'\\' {
            if let Some(to) = buf.get_mut(write) {
                *to = b;
            }
            read += 1;
            write += 1;
            continue;
        }
        let simple = match buf.get(read + 1) {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                let c = match unicode_escape(buf.get(read..).unwrap_or_default()) {
                    Some((c, used)) => {
                        read += used;
                        c
                    }
                    None => break,
                };
                let mut utf8 = [0; 4];
                let encoded = c.encode_utf8(&mut utf8).as_bytes();
                for (to, from) in buf.iter_mut().skip(write).zip(encoded) {
                    *to = *from;
                }
                write += encoded.len();
                continue;
            }
            _ => break,
        };
        if let Some(to) = buf.get_mut(write) {
            *to = simple;
        }
        read += 2;
        write += 1;
    }
    let complete = read == buf.len();
    buf.truncate(write);
    complete
}

/// The character a `\uXXXX` escape (or a surrogate pair of two) at the
/// start of `s` stands for, and how many bytes it took.
fn unicode_escape(s: &[u8]) -> Option<(char, usize)> {
    let first = hex4(s.get(2..6)?)?;
    if !(0xD800..0xE000).contains(&first) {
        return Some((char::from_u32(first)?, 6));
    }
    if first >= 0xDC00 || s.get(6..8)? != b"\\u" {
        return None;
    }
    let second = hex4(s.get(8..12)?)?;
    if !(0xDC00..0xE000).contains(&second) {
        return None;
    }
    let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
    Some((char::from_u32(c)?, 12))
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0, |n, &d| {
        let v = (d as char).to_digit(16)?;
        Some(n * 16 + v)
    })
}

/// Whether a raw `id` is a JSON string, number or null: the kinds
/// JSON-RPC allows, and valid JSON to echo back.
pub(super) fn is_valid_id(raw: &[u8]) -> bool {
    match raw.first() {
        Some(b'"') => is_string(raw),
        Some(b'n') => raw == b"null",
        Some(_) => is_number(raw),
        None => false,
    }
}

/// A complete JSON string, quotes included: UTF-8, no control characters,
/// only JSON's escapes.
fn is_string(raw: &[u8]) -> bool {
    if raw.len() < 2 || raw[raw.len() - 1] != b'"' {
        return false;
    }
    let body = &raw[1..raw.len() - 1];
    if str::from_utf8(body).is_err() {
        return false;
    }
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            0..=0x1f | b'"' => return false,
            b'\\' => match body.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') => {
                    if body.get(i + 2..i + 6).and_then(hex4).is_none() {
                        return false;
                    }
                    i += 6;
                }
                _ => return false,
            },
            _ => i += 1,
        }
    }
    true
}

/// A JSON number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_number(raw: &[u8]) -> bool {
    let digits = |from: usize| {
        from + raw
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(raw.first() == Some(&b'-'));
    match raw.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(i),
        _ => return false,
    }
    if raw.get(i) == Some(&b'.') {
        let end = digits(i + 1);
        if end == i + 1 {
            return false;
        }
        i = end;
    }
    if matches!(raw.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(raw.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits(i);
        if end == i {
            return false;
        }
        i = end;
    }
    i == raw.len()
}
