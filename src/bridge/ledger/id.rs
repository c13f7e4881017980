//! JSON-RPC ids compared as JSON values, not as the bytes they were
//! written with.
//!
//! The bridge relays every byte as it came, but the two sides may write
//! one id differently: an app that parses ids into numbers and writes them
//! back (the TypeScript SDK, any JavaScript app) turns `1e300` into
//! `1e+300` and `18446744073709551616` into `18446744073709552000`, and
//! `"\u0061"` is the string `"a"`. A reply is matched to its request by
//! [`key`]: numbers by value (as the double a JavaScript peer reads them
//! into, which is what it answers with: equal to 17 significant digits),
//! strings by content, and never a number equal to a string (`"1"` is not
//! `1`).

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

/// Significant digits a double holds: two numbers that agree in their
/// first 17 significant digits are the same double, and JavaScript writes
/// a double back with at most 17.
const DIGITS: usize = 17;

/// `n`, the sign, the significant digits (rounded to [`DIGITS`], no
/// trailing zeros) and the exponent: one form for every way of writing a
/// number's value (`100`, `1e2`, `100.0`, `1E+2`). No float parsing (its
/// code is 18 KB of the bridge-only build).
fn number_key(raw: &[u8]) -> Option<Vec<u8>> {
    let (negative, rest) = match raw.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let split = rest
        .iter()
        .position(|&b| b == b'e' || b == b'E')
        .unwrap_or(rest.len());
    let (mantissa, exponent) = rest.split_at(split);
    let mut exponent: i64 = match exponent.get(1..) {
        None => 0,
        Some(e) => {
            let (sign, e) = match e.first() {
                Some(b'-') => (-1, &e[1..]),
                Some(b'+') => (1, &e[1..]),
                _ => (1, e),
            };
            if e.is_empty() || e.len() > 9 || !e.iter().all(u8::is_ascii_digit) {
                return None;
            }
            sign * std::str::from_utf8(e).ok()?.parse::<i64>().ok()?
        }
    };
    let mut digits = Vec::with_capacity(mantissa.len());
    let mut seen_point = false;
    for &b in mantissa {
        match b {
            b'0'..=b'9' => {
                digits.push(b);
                if seen_point {
                    exponent -= 1;
                }
            }
            b'.' if !seen_point => seen_point = true,
            _ => return None,
        }
    }
    let first = digits.iter().position(|&d| d != b'0');
    let mut digits = match first {
        Some(first) => digits.split_off(first),
        None => return Some(b"n0".to_vec()),
    };
    if digits.len() > DIGITS {
        exponent += (digits.len() - DIGITS) as i64;
        let up = digits[DIGITS] >= b'5';
        digits.truncate(DIGITS);
        if up {
            let mut at = DIGITS;
            loop {
                if at == 0 {
                    digits.insert(0, b'1');
                    digits.pop();
                    exponent += 1;
                    break;
                }
                at -= 1;
                if digits[at] == b'9' {
                    digits[at] = b'0';
                } else {
                    digits[at] += 1;
                    break;
                }
            }
        }
    }
    while digits.last() == Some(&b'0') {
        digits.pop();
        exponent += 1;
    }
    let mut out = Vec::with_capacity(digits.len() + 8);
    out.push(b'n');
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(&digits);
    out.push(b'e');
    out.extend_from_slice(exponent.to_string().as_bytes());
    Some(out)
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
            (b"99999999999999999999", b"1e20"),
            (b"0.5", b"5e-1"),
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
