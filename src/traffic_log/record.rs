//! One record, one line: the timestamp, the escaping, and the layout.
//!
//! ```text
//! 2026-11-30T15:04:05.123456Z cli->app request id=1 method=tools/call len=61 {"jsonrpc":"2.0",...}
//! 2026-11-30T15:04:05.123789Z app->cli conn=3 response id=1 len=48 {"jsonrpc":"2.0",...}
//! 2026-11-30T15:04:05.124000Z event connected in 0.3 ms
//! ```
//!
//! Fields are separated by one space and never contain one, so `grep`,
//! `cut -d' '` and `awk` work; the message itself is the rest of the line.
//!
//! What is escaped, and why this way: a message is shown exactly as sent
//! when it is valid JSON, so it can be copied out and parsed. JSON never
//! holds a raw C0 control character or invalid UTF-8, so those are the
//! bytes rewritten, each as `\xNN`: a raw `\r` (CRLF framing), NUL,
//! escape sequences, and every byte that is not part of valid UTF-8. JSON's
//! own `\n` escapes are two printable characters and stay as they are. A
//! raw `\n` cannot be inside a message (it ends one) but can be inside an
//! event's text, and is shown as `\x0a` there. In a message, backslashes
//! are not doubled (JSON's own escapes stay readable), so the only
//! ambiguity is a message that is not JSON and contains the text `\x`
//! itself. In a field (`caller=`, `session=`, ...) the backslash is
//! escaped too, as `\x5c`: a caller `lit\x20eral` and a caller `lit eral`
//! are two values, and their records must say so.
//!
//! JSON does allow a few characters raw that a terminal or an editor still
//! takes for control: the C1 controls U+0080-U+009F (U+009B is a CSI, as
//! good as `ESC [` to many terminals; U+0085 is a line break to some
//! editors) and U+2028/U+2029 (line and paragraph separators, line breaks
//! to JavaScript tools and many editors). They are escaped too, byte by
//! byte like the rest (`\xc2\x9b`, `\xe2\x80\xa8`), so a record can
//! neither drive the terminal that shows it (`tail -f`) nor look like two
//! lines. The message is then no longer byte for byte what was sent, but
//! every `\xNN` still stands for exactly one byte of it.

use std::io::Write;
use std::str;

use crate::caller::Caller;
use crate::envelope::{Envelope, Kind};

/// Which way a message went, seen from the bridge: from the MCP CLI to the
/// app, or back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the MCP CLI (the bridge's stdin; for `serve`, the bridge's
    /// connection) to the app (its socket; for `serve`, the command).
    CliToApp,
    /// From the app to the MCP CLI.
    AppToCli,
}

impl Direction {
    /// The record's direction field.
    fn field(self) -> &'static str {
        match self {
            Direction::CliToApp => "cli->app",
            Direction::AppToCli => "app->cli",
        }
    }
}

/// The kind field of a message record.
fn kind_field(kind: Kind) -> &'static str {
    match kind {
        Kind::Request => "request",
        Kind::Notification => "notification",
        Kind::Response => "response",
        Kind::ErrorResponse => "error",
        Kind::Other => "other",
    }
}

/// Microseconds in a day.
const DAY_MICROS: u64 = 86_400 * 1_000_000;

/// Writes `micros` (since 1970-01-01T00:00:00Z) as RFC 3339 in UTC with
/// microseconds: `2026-11-30T15:04:05.123456Z`. Digit by digit rather than
/// through `write!`: this runs for every record, on the relay's thread.
pub(super) fn write_timestamp(out: &mut Vec<u8>, micros: u64) {
    let days = micros / DAY_MICROS;
    let of_day = micros % DAY_MICROS;
    // Days since 1970 from a u64 of microseconds fit an i64 many times over.
    let (year, month, day) = civil_from_days(days as i64);
    let seconds = of_day / 1_000_000;
    // Years before 10000: the clock would have to be 8,000 years fast.
    push_digits(out, year as u64, 4);
    out.push(b'-');
    push_digits(out, u64::from(month), 2);
    out.push(b'-');
    push_digits(out, u64::from(day), 2);
    out.push(b'T');
    push_digits(out, seconds / 3600, 2);
    out.push(b':');
    push_digits(out, seconds / 60 % 60, 2);
    out.push(b':');
    push_digits(out, seconds % 60, 2);
    out.push(b'.');
    push_digits(out, of_day % 1_000_000, 6);
    out.push(b'Z');
}

/// Appends the last `width` decimal digits of `value`, zero-padded.
fn push_digits(out: &mut Vec<u8>, mut value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    for slot in digits[..width].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
    out.extend_from_slice(&digits[..width]);
}

/// Appends `value` in decimal.
fn push_number(out: &mut Vec<u8>, value: u64) {
    let mut width = 1;
    let mut rest = value / 10;
    while rest > 0 {
        width += 1;
        rest /= 10;
    }
    push_digits(out, value, width);
}

/// The proleptic Gregorian date `days` after 1970-01-01, as (year, month,
/// day): Howard Hinnant's `civil_from_days`, which counts in 400-year eras
/// (146,097 days each) so leap years need no table and no loop.
pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01, so that a leap day is the last day of
    // its (March-based) year.
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let day_of_era = z - era * 146_097; // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Appends `bytes` with every control character and every byte that is not
/// part of valid UTF-8 written as `\xNN` (and, for a field, spaces too, so
/// fields never run together, and backslashes, so no value reads as
/// another's escape). With `cut`, `bytes` is the start of
/// something longer, and an incomplete UTF-8 sequence at its very end is
/// the cut, not an error: it is left out, and its length returned.
pub(super) fn escape_into(out: &mut Vec<u8>, bytes: &[u8], field: bool, cut: bool) -> usize {
    let mut rest = bytes;
    loop {
        match str::from_utf8(rest) {
            Ok(text) => {
                escape_text(out, text.as_bytes(), field);
                return 0;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                escape_text(out, valid, field);
                let bad = match e.error_len() {
                    Some(n) => n,
                    // Incomplete at the end: the cut, or a stream's last
                    // bytes that are simply invalid.
                    None if cut => return after.len(),
                    None => after.len(),
                };
                for &b in &after[..bad] {
                    hex(out, b);
                }
                rest = &after[bad..];
            }
        }
    }
}

/// Appends valid UTF-8 `text`, escaping control characters (C0, DEL, C1,
/// U+2028 and U+2029; and spaces and backslashes in a field).
fn escape_text(out: &mut Vec<u8>, text: &[u8], field: bool) {
    // Nearly every message has nothing to escape: check it eight bytes at
    // a time first (the size-optimised build does not vectorise loops).
    if !field && !may_need_escape(text) {
        out.extend_from_slice(text);
        return;
    }
    let mut at = 0;
    let mut copied = 0;
    while at < text.len() {
        let len = escaped_len(text, at, field);
        if len == 0 {
            at += 1;
            continue;
        }
        out.extend_from_slice(&text[copied..at]);
        for &b in &text[at..at + len] {
            hex(out, b);
        }
        at += len;
        copied = at;
    }
    out.extend_from_slice(&text[copied..]);
}

/// How many bytes of the character starting at `at` in valid UTF-8 `text`
/// are escaped: 1 for a C0 control, DEL (and a space or a backslash in a
/// field), 2 for a C1 control (`c2 80` to `c2 9f`), 3 for U+2028 and
/// U+2029 (`e2 80 a8`, `e2 80 a9`), 0 for anything else. In valid UTF-8, 0xc2 and 0xe2 only
/// ever start a character, so looking at bytes is enough.
fn escaped_len(text: &[u8], at: usize, field: bool) -> usize {
    match text[at] {
        b if b < 0x20 || b == 0x7f => 1,
        b' ' | b'\\' if field => 1,
        0xc2 if matches!(text.get(at + 1), Some(&(0x80..=0x9f))) => 2,
        0xe2 if text.get(at + 1) == Some(&0x80)
            && matches!(text.get(at + 2), Some(&(0xa8 | 0xa9))) =>
        {
            3
        }
        _ => 0,
    }
}

/// Whether `text` may hold something to escape: a C0 control (below 0x20),
/// DEL, or 0xc2 or 0xe2 (the first byte of every C1 control and of U+2028
/// and U+2029, and of many harmless characters, which the exact scan then
/// passes over). Looked for a word at a time: a byte below `n` (at most
/// 0x80) borrows in `word - n` per byte, setting a high bit that was clear
/// in `word`; a byte equal to `v` is a zero byte of `word ^ v`, the only
/// byte below 1.
fn may_need_escape(text: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let mut words = text.chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let word = u64::from_le_bytes(bytes);
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        let found = below_space
            | has_zero(word ^ (ONES * 0x7f))
            | has_zero(word ^ (ONES * 0xc2))
            | has_zero(word ^ (ONES * 0xe2));
        if found & HIGHS != 0 {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == 0x7f || b == 0xc2 || b == 0xe2)
}

fn hex(out: &mut Vec<u8>, b: u8) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(&[
        b'\\',
        b'x',
        DIGITS[usize::from(b >> 4)],
        DIGITS[usize::from(b & 15)],
    ]);
}

/// Appends the prefix every record starts with: the timestamp, then the
/// direction (or `event`), then `conn=N` for a connection of `serve`.
fn write_head(out: &mut Vec<u8>, micros: u64, what: &str, conn: Option<u64>) {
    write_timestamp(out, micros);
    out.push(b' ');
    out.extend_from_slice(what.as_bytes());
    if let Some(conn) = conn {
        out.extend_from_slice(b" conn=");
        push_number(out, conn);
    }
}

/// What one message's record says.
pub(super) struct Message<'a> {
    /// Its kind, `id` and `method`.
    pub(super) envelope: &'a Envelope<'a>,
    /// Who made it, for a request that names its caller.
    pub(super) caller: Option<&'a Caller<'a>>,
    /// The start of the message (at most the cap; a final `\n` is not
    /// part of it).
    pub(super) shown: &'a [u8],
    /// The message's whole length, its `\n` not included.
    pub(super) len: u64,
}

/// One message's record: `kind id= method=`, then for a request that
/// names its caller `caller=<client>`, the spec's `client=<name>` and
/// `version=`, and those of `session=`, `conversation=` and `call=` it
/// names, then `len=` and the message.
pub(super) fn write_message(
    out: &mut Vec<u8>,
    micros: u64,
    direction: Direction,
    conn: Option<u64>,
    message: &Message<'_>,
) {
    let Message {
        envelope,
        caller,
        shown,
        len,
    } = *message;
    write_head(out, micros, direction.field(), conn);
    out.push(b' ');
    out.extend_from_slice(kind_field(envelope.kind).as_bytes());
    let fields = [
        (&b" id="[..], envelope.id),
        (b" method=", envelope.method.map(str::as_bytes)),
        (b" caller=", caller.map(|c| c.client.as_bytes())),
        (b" client=", caller.and_then(|c| c.name).map(str::as_bytes)),
        (
            b" version=",
            caller.and_then(|c| c.version).map(str::as_bytes),
        ),
        (
            b" session=",
            caller.and_then(|c| c.session).map(str::as_bytes),
        ),
        (
            b" conversation=",
            caller.and_then(|c| c.conversation).map(str::as_bytes),
        ),
        (b" call=", caller.and_then(|c| c.call).map(str::as_bytes)),
    ];
    for (name, value) in fields.iter() {
        if let Some(value) = value {
            out.extend_from_slice(name);
            escape_into(out, value, true, false);
        }
    }
    out.extend_from_slice(b" len=");
    push_number(out, len);
    if !shown.is_empty() {
        out.push(b' ');
        let cut = (shown.len() as u64) < len;
        let incomplete = escape_into(out, shown, false, cut);
        if cut {
            let left_out = len - shown.len() as u64 + incomplete as u64;
            let _ = write!(out, " \u{2026} ({} bytes left out)", left_out);
        }
    }
    out.push(b'\n');
}

/// One event's record: its text, escaped onto one line.
pub(super) fn write_event(out: &mut Vec<u8>, micros: u64, conn: Option<u64>, text: &[u8]) {
    write_head(out, micros, "event", conn);
    out.push(b' ');
    escape_into(out, text, false, false);
    out.push(b'\n');
}

/// The record that says how many records were dropped before it.
pub(super) fn write_dropped(out: &mut Vec<u8>, micros: u64, dropped: u64) {
    write_head(out, micros, "event", None);
    let _ = writeln!(
        out,
        " dropped {} records: the log could not keep up, or could not be written",
        dropped
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timestamp(micros: u64) -> String {
        let mut out = Vec::new();
        write_timestamp(&mut out, micros);
        String::from_utf8(out).unwrap()
    }

    const DAY: u64 = 86_400;

    /// Dates checked against `date -u -d @SECONDS`, including the leap
    /// days of a year divisible by 400 (2000) and by 4 (2024), a century
    /// that is not a leap year (2100), and dates past 2038's 32-bit limit.
    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        #[rustfmt::skip]
        let known: &[(u64, &str)] = &[
            (0, "1970-01-01T00:00:00.000000Z"),
            (1, "1970-01-01T00:00:00.000001Z"),
            (59 * DAY * 1_000_000, "1970-03-01T00:00:00.000000Z"),
            (951_782_400_000_000, "2000-02-29T00:00:00.000000Z"),
            (951_868_799_999_999, "2000-02-29T23:59:59.999999Z"),
            (951_868_800_000_000, "2000-03-01T00:00:00.000000Z"),
            (978_307_199_000_000, "2000-12-31T23:59:59.000000Z"),
            (1_709_164_800_000_000, "2024-02-29T00:00:00.000000Z"),
            (1_735_689_599_123_456, "2024-12-31T23:59:59.123456Z"),
            (2_147_483_647_000_000, "2038-01-19T03:14:07.000000Z"),
            (2_147_483_648_000_000, "2038-01-19T03:14:08.000000Z"),
            (4_107_456_000_000_000, "2100-02-28T00:00:00.000000Z"),
            (4_107_542_400_000_000, "2100-03-01T00:00:00.000000Z"),
            (253_402_300_799_999_999, "9999-12-31T23:59:59.999999Z"),
        ];
        for &(micros, text) in known {
            assert_eq!(timestamp(micros), text, "{} µs", micros);
        }
    }

    /// Every day of 400 years (a whole cycle of the calendar) follows the
    /// one before it: the day number advances by one, or the month (or
    /// year) turns over on the right day, leap years included.
    #[test]
    fn days_follow_each_other_for_a_whole_cycle() {
        let mut previous = civil_from_days(-1);
        assert_eq!(previous, (1969, 12, 31));
        for days in 0..146_097 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = previous;
            let leap = (py % 4 == 0 && py % 100 != 0) || py % 400 == 0;
            let month_len = match pm {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let expected = if pd < month_len {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), expected, "day {}", days);
            previous = (y, m, d);
        }
    }

    fn escaped(bytes: &[u8], field: bool, cut: bool) -> (String, usize) {
        let mut out = Vec::new();
        let incomplete = escape_into(&mut out, bytes, field, cut);
        (String::from_utf8(out).unwrap(), incomplete)
    }

    #[test]
    fn json_is_shown_as_sent_and_everything_else_is_escaped() {
        let json = br#"{"text":"a\nb \"c\" \\ \u0000 \u00e9 caf\xc3\xa9"}"#;
        assert_eq!(
            escaped(json, false, false).0,
            String::from_utf8(json.to_vec()).unwrap()
        );
        assert_eq!(
            escaped(b"a\r\n\tb\x00\x1b\x7f", false, false).0,
            r"a\x0d\x0a\x09b\x00\x1b\x7f"
        );
        assert_eq!(
            escaped(b"ok \xff\xfe caf\xc3\xa9 \xc3", false, false).0,
            r"ok \xff\xfe café \xc3"
        );
        assert_eq!(escaped(b"a b", true, false).0, r"a\x20b");
        assert_eq!(escaped(br"a\x20b", true, false).0, r"a\x5cx20b");
        assert_eq!(escaped(br"a\x20b", false, false).0, r"a\x20b");
    }

    /// The word-at-a-time check finds a byte that may need escaping at
    /// any position and of any value, and never one that is not there
    /// (other high bytes of UTF-8 included).
    #[test]
    fn bytes_to_escape_are_found_anywhere() {
        let flagged = |b: u8| b < 0x20 || b == 0x7f || b == 0xc2 || b == 0xe2;
        for len in 0..24 {
            for at in 0..len {
                for b in (0..=0xff).filter(|&b| flagged(b)) {
                    let mut text = vec![b'a'; len];
                    text[at] = b;
                    assert!(may_need_escape(&text), "{:#x} at {} of {}", b, at, len);
                }
            }
            for b in (0..=0xff).filter(|&b| !flagged(b)) {
                assert!(!may_need_escape(&vec![b; len]), "{:#x} x {}", b, len);
            }
        }
    }

    /// JSON may hold C1 controls and U+2028/U+2029 raw, and a terminal or
    /// an editor still obeys them: they are escaped like C0, byte by byte,
    /// in messages and fields alike; the characters around them (other
    /// two- and three-byte characters starting with 0xc2 and 0xe2) are not.
    #[test]
    fn c1_controls_and_unicode_line_breaks_are_escaped() {
        let mut text = Vec::new();
        for c in 0x80..=0x9f_u32 {
            text.extend_from_slice(char::from_u32(c).unwrap().to_string().as_bytes());
        }
        let expected: String = (0x80..=0x9f_u32)
            .map(|c| format!("\\xc2\\x{:02x}", c))
            .collect();
        assert_eq!(escaped(&text, false, false).0, expected);
        assert_eq!(escaped(&text, true, false).0, expected);
        let json = "{\"t\":\"a\u{2028}b\u{2029}c \u{9b}31m \u{a0}\u{e9}\u{2026}\u{2027}\u{202a}\"}";
        assert_eq!(
            escaped(json.as_bytes(), false, false).0,
            "{\"t\":\"a\\xe2\\x80\\xa8b\\xe2\\x80\\xa9c \\xc2\\x9b31m \u{a0}\u{e9}\u{2026}\u{2027}\u{202a}\"}"
        );
        // Long enough for the word-at-a-time check, the control last.
        let long = format!("{}\u{85}", "x".repeat(40));
        assert_eq!(
            escaped(long.as_bytes(), false, false).0,
            format!("{}\\xc2\\x85", "x".repeat(40))
        );
        // And in a record, on one line.
        let mut out = Vec::new();
        write_event(&mut out, 0, None, "a\u{2028}b\u{85}c".as_bytes());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1970-01-01T00:00:00.000000Z event a\\xe2\\x80\\xa8b\\xc2\\x85c\n"
        );
    }

    #[test]
    fn a_character_cut_in_half_is_left_out_not_escaped() {
        // "é" is c3 a9; a cut after c3 leaves one byte of it.
        assert_eq!(escaped(b"caf\xc3", false, true), ("caf".to_string(), 1));
        // Invalid bytes before the end are still escaped.
        assert_eq!(
            escaped(b"\xff caf\xe2\x82", false, true),
            (r"\xff caf".to_string(), 2)
        );
    }

    fn envelope(
        kind: Kind,
        id: Option<&'static [u8]>,
        method: Option<&'static str>,
    ) -> Envelope<'static> {
        Envelope {
            kind,
            id,
            id_offset: 0,
            method,
            error_message: None,
            len: 0,
            line: None,
        }
    }

    /// A record of a message that names no caller.
    fn write(
        out: &mut Vec<u8>,
        micros: u64,
        direction: Direction,
        conn: Option<u64>,
        envelope: &Envelope<'_>,
        shown: &[u8],
        len: u64,
    ) {
        let message = Message {
            envelope,
            caller: None,
            shown,
            len,
        };
        write_message(out, micros, direction, conn, &message);
    }

    #[test]
    fn message_records_name_their_fields() {
        let mut out = Vec::new();
        let request = br#"{"jsonrpc":"2.0","id":"a b","method":"tools/call"}"#;
        write(
            &mut out,
            1_000_000,
            Direction::CliToApp,
            None,
            &envelope(Kind::Request, Some(b"\"a b\""), Some("tools/call")),
            request,
            request.len() as u64,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "1970-01-01T00:00:01.000000Z cli->app request id=\"a\\x20b\" method=tools/call len={} {}\n",
                request.len(),
                String::from_utf8_lossy(request)
            )
        );

        let mut out = Vec::new();
        write(
            &mut out,
            0,
            Direction::AppToCli,
            Some(3),
            &envelope(Kind::Other, None, None),
            b"",
            0,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1970-01-01T00:00:00.000000Z app->cli conn=3 other len=0\n"
        );
    }

    #[test]
    fn a_long_message_says_how_much_was_left_out() {
        let mut out = Vec::new();
        write(
            &mut out,
            0,
            Direction::AppToCli,
            None,
            &envelope(Kind::Response, Some(b"7"), None),
            b"{\"caf\xc3",
            10_000,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1970-01-01T00:00:00.000000Z app->cli response id=7 len=10000 {\"caf \u{2026} (9995 bytes left out)\n"
        );
    }

    #[test]
    fn events_stay_on_one_line() {
        let mut out = Vec::new();
        write_event(&mut out, 0, Some(2), b"two\nlines\r\n");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1970-01-01T00:00:00.000000Z event conn=2 two\\x0alines\\x0d\\x0a\n"
        );
    }
}
