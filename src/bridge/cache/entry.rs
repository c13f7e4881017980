//! One answer file's text: the bridge's own header, then the app's result.
//!
//! ```text
//! mcp-bridge answers cache, format 3      (MAGIC: the bridge wrote it)
//! key 0000002a /run/a.sock\0p\0...       (the key's length in hex, the key)
//! server 1000                             (who served it: a uid, a SID)
//! trust default                           (the trust rule it was kept under)
//!                                         (an empty line)
//! {"protocolVersion":"2025-06-18",...}    (the result, one JSON object)
//! ```
//!
//! The result is checked to be one complete JSON object, by the grammar,
//! before it is written and after it is read: what a bridge answers in the
//! app's name is exactly what the app said, or nothing. The crate's JSON
//! walkers ([`member`]) walk, they do not validate, and the bridge-only
//! build has no JSON library, so the check is here, a few dozen lines.

use crate::endpoint::ServerUser;
use crate::envelope::json::member;

/// The first line of every answer file: the format, and the proof that the
/// bridge wrote it (the only files it ever removes or replaces start so).
pub(super) const MAGIC: &[u8] = b"mcp-bridge answers cache, format 3\n";

/// Deepest nesting of a result accepted: deeper than any app's answer, and
/// shallow enough for the recursive check to stay well within a stack.
const DEPTH_LIMIT: usize = 128;

/// What an answer file holds.
#[derive(Debug)]
pub(super) enum Read<'a> {
    /// The answer to the key asked, given by `server`.
    Entry {
        server: ServerUser,
        result: &'a [u8],
    },
    /// Another key's answer (a hash collision): not ours to use.
    Other,
    /// Not a whole answer: why.
    Damaged(&'static str),
}

/// Whether the app's `result` may be kept: short enough, one JSON object,
/// and final (an `input_required` result of a multi round-trip request is
/// not an answer to keep).
pub(super) fn keeps(result: &[u8]) -> bool {
    result.len() <= super::VALUE_LIMIT
        && is_one_object(result)
        && member(result, "resultType").map_or(true, |t| t == b"\"complete\"")
}

/// The text of the answer file of `key`: `result`, given by `server` to a
/// bridge that trusts `trusted` besides the defaults.
pub(super) fn write(
    key: &[u8],
    server: &ServerUser,
    trusted: Option<&ServerUser>,
    result: &[u8],
) -> Vec<u8> {
    let mut text = header(key);
    text.extend_from_slice(server.plain().as_bytes());
    text.extend_from_slice(b"\ntrust ");
    match trusted {
        Some(user) => text.extend_from_slice(user.plain().as_bytes()),
        None => text.extend_from_slice(b"default"),
    }
    text.extend_from_slice(b"\n\n");
    text.extend_from_slice(result);
    text
}

/// How the answer file of `key` starts: up to its server.
fn header(key: &[u8]) -> Vec<u8> {
    let mut text = MAGIC.to_vec();
    // The key once, as it is (its length first: it holds NULs and any
    // byte of the endpoint's).
    text.extend_from_slice(b"key ");
    for digit in (0..8).rev() {
        text.push(HEX[(key.len() >> (4 * digit)) & 15]);
    }
    text.push(b' ');
    text.extend_from_slice(key);
    text.extend_from_slice(b"\nserver ");
    text
}

/// Reads an answer file's `text`, for `key`.
pub(super) fn read<'a>(text: &'a [u8], key: &[u8]) -> Read<'a> {
    let damaged = Read::Damaged("it is not a whole answer");
    if !text.starts_with(MAGIC) {
        return damaged;
    }
    let rest = match text.strip_prefix(header(key).as_slice()) {
        Some(rest) => rest,
        None => return Read::Other,
    };
    // "SERVER\ntrust RULE\n\nRESULT"
    let split = |text: &'a [u8]| {
        let at = text.iter().position(|&b| b == b'\n')?;
        Some((text.get(..at)?, text.get(at + 1..)?))
    };
    let (server, rest) = match split(rest) {
        Some(split) => split,
        None => return damaged,
    };
    let result = match split(rest) {
        Some((trust, rest)) if trust.len() > 6 && trust.starts_with(b"trust ") => split(rest),
        _ => None,
    };
    let result = match result {
        Some((b"", result)) => result,
        _ => return damaged,
    };
    let server = match std::str::from_utf8(server).ok().map(str::parse) {
        Some(Ok(server)) => server,
        _ => return damaged,
    };
    if !is_one_object(result) {
        return Read::Damaged("its result is not one complete JSON object");
    }
    Read::Entry { server, result }
}

/// The digits of the hex this file and the answer files' names are
/// written in.
pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// `result` as the bridge serves it for the absent app, kept `age`
/// milliseconds ago: a 2026-07-28 result's `ttlMs` is what is left of it
/// (0 once it is stale: then `true`), so that no client keeps it as fresh
/// longer than the app said (an absent `ttlMs` already means 0);
/// everything else, `cacheScope` included, as the app said it.
pub(super) fn served(result: &[u8], age: u64) -> (Vec<u8>, bool) {
    match member(result, "ttlMs") {
        Some(ttl) => {
            let kept = std::str::from_utf8(ttl).ok().and_then(|t| t.parse().ok());
            let left = kept.unwrap_or(0u64).saturating_sub(age);
            let at = ttl.as_ptr() as usize - result.as_ptr() as usize;
            let (head, rest) = (result.get(..at), result.get(at + ttl.len()..));
            let mut served = head.unwrap_or_default().to_vec();
            served.extend_from_slice(left.to_string().as_bytes());
            served.extend_from_slice(rest.unwrap_or_default());
            (served, left == 0)
        }
        None => (result.to_vec(), false),
    }
}

/// Whether `text` is exactly one JSON object (blanks around it allowed),
/// by RFC 8259's grammar, in UTF-8.
pub(super) fn is_one_object(text: &[u8]) -> bool {
    let mut json = Json { text, at: 0 };
    json.blank();
    text.get(json.at) == Some(&b'{')
        && std::str::from_utf8(text).is_ok()
        && json.value(0).is_some()
        && {
            json.blank();
            json.at == text.len()
        }
}

/// `Some` when `holds`: a step of [`Json`] that failed ends it with `?`.
fn ok(holds: bool) -> Option<()> {
    if holds {
        Some(())
    } else {
        None
    }
}

/// A strict reader of JSON, for [`is_one_object`]: each method reads one
/// part of the grammar at `at`, or fails with `None`.
struct Json<'a> {
    text: &'a [u8],
    at: usize,
}

impl Json<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let there = self.peek() == Some(byte);
        self.at += usize::from(there);
        there
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > DEPTH_LIMIT {
            return None;
        }
        self.blank();
        match self.peek()? {
            b'{' => self.items(b'}', depth, true),
            b'[' => self.items(b']', depth, false),
            b'"' => self.string(),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            _ => self.number(),
        }
    }

    /// An object's members (`keyed`) or an array's elements, up to `close`.
    fn items(&mut self, close: u8, depth: usize, keyed: bool) -> Option<()> {
        self.at += 1;
        self.blank();
        if self.eat(close) {
            return Some(());
        }
        loop {
            if keyed {
                self.blank();
                self.string()?;
                self.blank();
                ok(self.eat(b':'))?;
            }
            self.value(depth + 1)?;
            self.blank();
            if self.eat(close) {
                return Some(());
            }
            ok(self.eat(b','))?;
        }
    }

    fn string(&mut self) -> Option<()> {
        ok(self.eat(b'"'))?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => {
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.text.get(self.at + 1..self.at + 5)?;
                            ok(hex.iter().all(u8::is_ascii_hexdigit))?;
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        ok(self.text.get(self.at..self.at + word.len()) == Some(word))?;
        self.at += word.len();
        Some(())
    }

    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        if !self.eat(b'0') {
            self.digits()?;
        }
        if self.eat(b'.') {
            self.digits()?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _ = self.eat(b'+') || self.eat(b'-');
            self.digits()?;
        }
        Some(())
    }

    /// One digit or more.
    fn digits(&mut self) -> Option<()> {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        ok(self.at > start)
    }
}
