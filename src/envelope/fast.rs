//! The scanner's fast paths: byte-class tables and word-at-a-time searches.
//!
//! Apart from the state machine in [`super`] because they are where the
//! time goes on long lines (string contents, nested values) and are tuned
//! on their own: each one is measured by the benchmarks, not read for the
//! protocol. The release profile builds one codegen unit with LTO, so being
//! in a module of their own changes nothing in what is inlined.

/// Byte classes inside a nested value.
pub(super) const PLAIN: u8 = 0;
pub(super) const OPEN: u8 = 1;
pub(super) const CLOSE: u8 = 2;
pub(super) const QUOTE: u8 = 3;
const NEWLINE: u8 = 4;

pub(super) static NESTED: [u8; 256] = {
    let mut table = [PLAIN; 256];
    table[b'{' as usize] = OPEN;
    table[b'[' as usize] = OPEN;
    table[b'}' as usize] = CLOSE;
    table[b']' as usize] = CLOSE;
    table[b'"' as usize] = QUOTE;
    table[b'\n' as usize] = NEWLINE;
    table
};

/// Where a string that goes on at `chunk[i]` stops, as far as this chunk
/// shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StringEnd {
    /// Its closing quote.
    Quote(usize),
    /// A `\n`: JSON strings cannot hold one, so the line ends unfinished.
    Newline(usize),
    /// The chunk ends right after a `\`.
    Escape,
    /// The chunk ends inside the string.
    Open,
}

/// Skips a string's body from `chunk[i]` on. Which escape follows a `\`
/// does not matter to the structure (`\u1234`'s digits are plain bytes;
/// captured values are checked when they close), so an escape just skips
/// one byte and the search goes on from there.
///
/// Always inlined: the release profile optimises for size and would
/// otherwise make a call of every short string in a nested value.
#[inline(always)]
pub(super) fn skip_string(chunk: &[u8], mut i: usize) -> StringEnd {
    loop {
        let at = match find_string_stop(chunk.get(i..).unwrap_or_default()) {
            Some(n) => i + n,
            None => return StringEnd::Open,
        };
        match chunk.get(at).copied().unwrap_or_default() {
            b'"' => return StringEnd::Quote(at),
            b'\n' => return StringEnd::Newline(at),
            _ => match chunk.get(at + 1) {
                Some(b'\n') => return StringEnd::Newline(at + 1),
                Some(_) => i = at + 2,
                None => return StringEnd::Escape,
            },
        }
    }
}

/// Bytes that end a number or literal: a delimiter (`,`, `}`,
/// whitespace), or a byte that cannot be in one (which makes the line
/// Other).
pub(super) static SCALAR_END: [bool; 256] = {
    let mut table = [false; 256];
    let ends = b",} \t\r\n\"{[]:";
    let mut n = 0;
    while n < ends.len() {
        table[ends[n] as usize] = true;
        n += 1;
    }
    table
};

/// `0x01` in every byte of a word.
const ONES: u64 = u64::from_le_bytes([0x01; 8]);
/// `0x80` in every byte of a word.
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// Every byte of a word set to `b`.
const fn splat(b: u8) -> u64 {
    ONES * b as u64
}

/// The high bit of each zero byte of `v`, without the final mask: the
/// lowest set bit (after masking with [`HIGHS`]) is exactly the first zero
/// byte; bits above it may be spurious, which finding the first never
/// looks at.
#[inline(always)]
fn zero_bytes(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v
}

/// Where the first `"`, `\` or `\n` in `hay` is: the only bytes that
/// matter inside a string. Eight bytes at a time with word arithmetic
/// (std only, no `unsafe`), which is what keeps long string contents cheap.
#[inline(always)]
pub(super) fn find_string_stop(hay: &[u8]) -> Option<usize> {
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let v = u64::from_le_bytes([
            word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
        ]);
        let hits = (zero_bytes(v ^ splat(b'"'))
            | zero_bytes(v ^ splat(b'\\'))
            | zero_bytes(v ^ splat(b'\n')))
            & HIGHS;
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = words.remainder();
    rest.iter()
        .position(|&b| b == b'"' || b == b'\\' || b == b'\n')
        .map(|n| at + n)
}

/// Where the first `\n` in `hay` is.
pub(super) fn find_newline(hay: &[u8]) -> Option<usize> {
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let v = u64::from_le_bytes([
            word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
        ]);
        let hits = zero_bytes(v ^ splat(b'\n')) & HIGHS;
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = words.remainder();
    rest.iter().position(|&b| b == b'\n').map(|n| at + n)
}
