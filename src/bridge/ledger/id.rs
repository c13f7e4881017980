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

/// `n`, the sign and the double a number denotes (the one a JavaScript
/// peer reads it into, and writes back in its shortest form), as its odd
/// significand and binary exponent: one form for every way of writing that
/// double (`100`, `1e2`, `100.0`, `18446744073709551616` and
/// `18446744073709552000`). Integers below 2^53, which a double holds
/// exactly, are never equal to another. A number no double holds apart
/// from zero (past 1.8e308, or below 5e-324; JavaScript writes it back as
/// `null` or `0`) is keyed by its first [`NO_DOUBLE_DIGITS`] digits and
/// its magnitude (`d`): short, however long the id. No float parsing: its code is 18 KB of the bridge-only
/// build, and the exact conversion here a tenth of that.
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
            sign * e.iter().fold(0, |v, d| v * 10 + i64::from(d - b'0'))
        }
    };
    // The digits from the first that is not 0.
    let mut digits = Vec::with_capacity(mantissa.len());
    let mut seen_point = false;
    for &b in mantissa {
        match b {
            b'0'..=b'9' => {
                if b != b'0' || !digits.is_empty() {
                    digits.push(b - b'0');
                }
                if seen_point {
                    exponent -= 1;
                }
            }
            b'.' if !seen_point => seen_point = true,
            _ => return None,
        }
    }
    if digits.is_empty() {
        return Some(b"n0".to_vec());
    }
    while digits.last() == Some(&0) {
        digits.pop();
        exponent += 1;
    }
    let mut out = vec![b'n', if negative { b'-' } else { b'+' }];
    match nearest_double(&digits, exponent) {
        Some((significand, power)) => {
            out.extend_from_slice(&significand.to_le_bytes());
            out.extend_from_slice(&power.to_le_bytes());
        }
        None => {
            out[0] = b'd';
            out.extend_from_slice(&digits[..digits.len().min(NO_DOUBLE_DIGITS)]);
            out.extend_from_slice(&(exponent + digits.len() as i64).to_le_bytes());
        }
    }
    Some(out)
}

/// Digits of a number no double holds that its key keeps.
const NO_DOUBLE_DIGITS: usize = 40;

/// Decimal digits that decide how any decimal rounds to a double (the
/// longest exact halfway case has 767 significant digits): the rest only
/// tell whether anything follows.
const DECIDING_DIGITS: usize = 800;

/// Bits of the double's significand.
const SIGNIFICAND_BITS: u32 = 53;

/// The binary exponent of a double's least significant bit, at the least
/// (subnormals) and at the most (`f64::MAX`).
const MIN_POWER: i64 = -1074;
const MAX_POWER: i64 = 971;

/// Bits of the quotient found: enough for 56 and the place below.
const QUOTIENT_BITS: i64 = 57;

/// The double nearest `digits × 10^exponent` (`digits` with no leading or
/// trailing zero; ties to even), as an odd significand and a power of two;
/// `None` when it is infinite or zero.
fn nearest_double(digits: &[u8], mut exponent: i64) -> Option<(u64, i64)> {
    let len = digits.len() as i64;
    if len + exponent > 310 || len + exponent < -330 {
        return None;
    }
    let mut num = vec![0u32];
    let kept = &digits[..digits.len().min(DECIDING_DIGITS)];
    for &d in kept {
        mul_add(&mut num, 10, u32::from(d));
    }
    exponent += (digits.len() - kept.len()) as i64;
    if digits[kept.len()..].iter().any(|&d| d != 0) {
        mul_add(&mut num, 10, 1);
        exponent -= 1;
    }
    let mut den = vec![1u32];
    for _ in 0..exponent.unsigned_abs() {
        mul_add(if exponent > 0 { &mut num } else { &mut den }, 10, 0);
    }
    // num / den, scaled by 2^shift into [2^54, 2^56) (55 bits or more),
    // found a bit at a time as a fraction of den × 2^QUOTIENT_BITS.
    let shift = 55 - (bit_len(&num) as i64 - bit_len(&den) as i64);
    for _ in 0..shift.max(0) {
        mul_add(&mut num, 2, 0);
    }
    for _ in 0..(-shift).max(0) + QUOTIENT_BITS {
        mul_add(&mut den, 2, 0);
    }
    let mut q = 0u64;
    for _ in 0..QUOTIENT_BITS {
        mul_add(&mut num, 2, 0);
        q <<= 1;
        if sub_if_not_less(&mut num, &den) {
            q |= 1;
        }
    }
    let sticky = num.iter().any(|&l| l != 0);
    let bits = 64 - q.leading_zeros();
    let mut drop = i64::from(bits - SIGNIFICAND_BITS);
    if drop - shift < MIN_POWER {
        drop = MIN_POWER + shift;
    }
    if drop > 60 {
        return None;
    }
    let mut m = q >> drop;
    let rest = q & ((1u64 << drop) - 1);
    let half = 1u64 << (drop - 1);
    if rest > half || (rest == half && (sticky || m & 1 == 1)) {
        m += 1;
    }
    let mut power = drop - shift;
    if m == 1 << SIGNIFICAND_BITS {
        m >>= 1;
        power += 1;
    }
    if m == 0 || power > MAX_POWER {
        return None;
    }
    Some(odd(m, power))
}

/// `m × 2^power` with an odd `m` (or zero).
fn odd(mut m: u64, mut power: i64) -> (u64, i64) {
    if m == 0 {
        return (0, 0);
    }
    let zeros = m.trailing_zeros();
    m >>= zeros;
    power += i64::from(zeros);
    (m, power)
}

// Unsigned integers of any size, 32-bit limbs, least significant first:
// just what `nearest_double` does with them (no shifts: a doubling is a
// multiplication).

fn mul_add(n: &mut Vec<u32>, by: u32, add: u32) {
    let mut carry = u64::from(add);
    for limb in n.iter_mut() {
        let v = u64::from(*limb) * u64::from(by) + carry;
        *limb = v as u32;
        carry = v >> 32;
    }
    if carry > 0 {
        n.push(carry as u32);
    }
}

fn bit_len(n: &[u32]) -> usize {
    match n.iter().rposition(|&l| l != 0) {
        Some(top) => top * 32 + 32 - n[top].leading_zeros() as usize,
        None => 0,
    }
}

/// `a -= b` if `a >= b`: whether it was.
fn sub_if_not_less(a: &mut [u32], b: &[u32]) -> bool {
    let at = |n: &[u32], i: usize| u64::from(n.get(i).copied().unwrap_or(0));
    let len = a.len().max(b.len());
    let first_apart = (0..len)
        .rev()
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| o.is_ne());
    if first_apart == Some(std::cmp::Ordering::Less) {
        return false;
    }
    let mut borrow = 0;
    for i in 0..a.len() {
        let v = at(a, i).wrapping_sub(at(b, i)).wrapping_sub(borrow);
        a[i] = v as u32;
        borrow = v >> 63;
    }
    true
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
    use super::{key, nearest_double, number_key, odd};

    /// What std's parsing makes of `text`, in `nearest_double`'s form.
    fn std_double(text: &str) -> Option<(u64, i64)> {
        let double: f64 = text.parse().unwrap();
        if double == 0.0 || double.is_infinite() {
            return None;
        }
        let bits = double.abs().to_bits();
        let (biased, fraction) = ((bits >> 52) as i64, bits & ((1 << 52) - 1));
        Some(match biased {
            0 => odd(fraction, -1074),
            _ => odd(fraction | 1 << 52, biased - 1075),
        })
    }

    /// `text` (a plain decimal) as `nearest_double`'s arguments.
    fn ours(text: &str) -> Option<(u64, i64)> {
        let key = number_key(text.as_bytes()).unwrap();
        if key[0] == b'd' {
            return None;
        }
        let m = u64::from_le_bytes(key[2..10].try_into().unwrap());
        let p = i64::from_le_bytes(key[10..18].try_into().unwrap());
        Some((m, p))
    }

    #[test]
    fn a_number_is_the_double_std_reads_it_into() {
        let cases = [
            "1",
            "0.1",
            "9007199254740991",
            "9007199254740993",
            "9007199254740995",
            "18446744073709551616",
            "18446744073709552000",
            "223456789012345678901234567890",
            "2.234567890123457e+29",
            "2.2250738585072011e-308",
            "2.2250738585072014e-308",
            "4.9406564584124654e-324",
            "2.4703282292062328e-324",
            "7.4109846876186982e-324",
            "1.7976931348623157e308",
            "1.7976931348623158e308",
            "123456789012345678901234567890123456789e-50",
            "0.30000000000000004",
        ];
        for text in cases {
            assert_eq!(ours(text), std_double(text), "{}", text);
        }
        // A halfway case decided by a digit far past the 17th.
        let mut long = String::from("9007199254740993");
        long.push('.');
        long.push_str(&"0".repeat(900));
        long.push('1');
        assert_eq!(ours(&long), std_double(&long));
        // Pseudo-random digits and exponents across the whole range.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let len = (next() % 40 + 1) as usize;
            let digits: String = (0..len)
                .map(|i| {
                    let d = (next() % 10) as u8;
                    (b'0' + if i == 0 { d.max(1) } else { d }) as char
                })
                .collect();
            let exponent = (next() % 660) as i64 - 340;
            let text = format!("{}e{}", digits, exponent);
            assert_eq!(ours(&text), std_double(&text), "{}", text);
            // Its shortest spelling (what JavaScript writes) meets it.
            let double: f64 = text.parse().unwrap();
            if double != 0.0 && double.is_finite() {
                assert_eq!(
                    key(text.as_bytes()),
                    key(format!("{:e}", double).as_bytes()),
                    "{}",
                    text
                );
            }
        }
        assert_eq!(nearest_double(&[1], 400), None);
        assert_eq!(nearest_double(&[1], -400), None);
    }

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
            (b"223456789012345678901234567890", b"2.234567890123457e+29"),
            (b"9007199254740993", b"9007199254740992"),
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
            (b"1e400", b"1e401"),
            (b"1e-400", b"0"),
            (b"-1", b"1"),
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
