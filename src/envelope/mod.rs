//! Each line's JSON-RPC envelope (request, notification, response or error;
//! its `id`; its `method`), read from the bytes as they pass through the
//! relay, in chunks of any size.
//!
//! Why a streaming scanner rather than parsing lines:
//!
//! - **Forwarding never waits for a line.** The relay writes every chunk on
//!   as soon as it is read, so the scanner sees a line in pieces cut
//!   anywhere (inside a key, an escape, a `\r\n`) and keeps just enough
//!   state between chunks to go on. Parsing whole lines would mean holding
//!   each one until its `\n`: a 256 MiB line would cost 256 MiB.
//! - **Constant memory.** Per direction the scanner holds a few integers and
//!   the small values it captures, each with a cap: the `id` ([`ID_CAP`]),
//!   the `method` ([`METHOD_CAP`]), an error's `message`
//!   ([`MESSAGE_CAP`]), and, when asked to, one whole line to replay
//!   ([`RECORD_CAP`]). Nesting is a counter, never recursion, so a line of
//!   100,000 `[` costs nothing but a number.
//! - **Fast where the bytes are.** MCP traffic is mostly long string
//!   contents (file text, base64); inside a string only `"`, `\` and `\n`
//!   matter, and [`fast::find_string_stop`] looks for them eight bytes at a time.
//!
//! Only the top-level object is read member by member (and the `error`
//! object, for its `message`). Deliberately *not* validated, because the
//! app and the client validate what they receive and the relay forwards it
//! unchanged either way:
//!
//! - nested values (`params`, `result`, `error.data`): only strings and
//!   brackets are followed, so commas, colons, literals, numbers and the
//!   kind of bracket (`[}` balances) go unchecked;
//! - top-level scalars other than `id`, escapes and UTF-8 in strings other
//!   than keys, `id`, `method` and `message`, and the `jsonrpc` member;
//! - duplicate keys: the last one wins, as in `JSON.parse`.
//!
//! What *is* checked is what the relay acts on: the line is one JSON object
//! followed only by whitespace, the `id` is a valid JSON string, number or
//! null (it is echoed back byte for byte in error responses, which must be
//! valid JSON), and the `method` is a string. A UTF-8 byte order mark at the
//! very start of a line is skipped (some Windows tools write one). Anything
//! else (a batch array,
//! an empty line, text, a second object) is [`Kind::Other`]: passed on,
//! not tracked.
//!
//! The folder: this file is the state machine; `fast.rs` its byte tables
//! and word-at-a-time searches (where the time goes); `values.rs` the
//! checks and decoding of captured values; `json.rs` the one small walker
//! and string writer for whole, bounded lines; `error_line.rs` the one
//! writer of the error responses the crate makes itself; `tests.rs` the
//! tests.

use std::str;

mod batch;
mod error_line;
mod fast;
pub(crate) mod json;
#[cfg(test)]
mod tests;
mod values;

#[cfg(test)]
pub(crate) use batch::batch_ids;
pub(crate) use batch::{first_byte_after_space, BatchIds, BatchScanner};
#[cfg(any(feature = "host", test))]
pub(crate) use error_line::error_response_line;
#[cfg_attr(not(feature = "host"), allow(unused_imports))] // until bridge/answer.rs uses it
pub use error_line::ERROR_CODE;
pub(crate) use error_line::{array_of_errors, push_error_response};
use fast::{find_newline, skip_string, StringEnd, CLOSE, NESTED, OPEN, PLAIN, QUOTE, SCALAR_END};
#[cfg(feature = "doctor")]
pub(crate) use json::{for_each_array_element, for_each_outside_strings};
use values::{is_valid_id, unescape};

/// Longest `id` captured, in raw bytes as written (quotes and escapes
/// included). Clients use small integers or UUID-like strings, but the
/// bridge owes every request an answer under its own id, whatever its
/// length, so the cap is the most the bridge ever holds of a client's
/// messages (1 MiB, the bridge's hold limit): the buffer grows only as far
/// as an id actually goes. A longer id leaves the line's kind intact but
/// [`Envelope::id`] `None`.
pub(crate) const ID_CAP: usize = 1024 * 1024;

/// Longest `method` captured, in raw bytes between its quotes. MCP methods
/// are plain ASCII names under 40 bytes
/// (`notifications/resources/list_changed` is 36). A longer one leaves the
/// kind intact but [`Envelope::method`] `None`.
pub(crate) const METHOD_CAP: usize = 256;

/// Most raw bytes of an error's `message` kept; a longer message is cut
/// (at a character boundary) rather than dropped, as it is only shown to a
/// person.
pub(crate) const MESSAGE_CAP: usize = 1024;

/// Longest line recorded for replay by [`Scanner::recording`], final `\n`
/// included: the bridge's hold limit (1 MiB), so an `initialize` the
/// bridge could hold is one it can replay. An `initialize` request with
/// every client capability is a few KiB; the buffer grows only as far as a
/// recorded line goes.
pub(crate) const RECORD_CAP: usize = 1024 * 1024;

/// Longest key compared with the members the scanner looks for, in raw
/// bytes: `"message"` with every letter `\u`-escaped is 42.
const KEY_CAP: usize = 48;

/// What a line is, by the members of its top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `method` (a string) and `id`, no `result` or `error`.
    Request,
    /// `method` (a string), no `id`, `result` or `error`.
    Notification,
    /// `id` and `result`, no `method` or `error`.
    Response,
    /// `id` (possibly `null`) and `error`, no `method` or `result`.
    ErrorResponse,
    /// Anything else: not one JSON object (a batch, an empty line, invalid
    /// JSON, bytes after the object), or an object that is none of the above
    /// (an `id` that is not a string, number or null, for one).
    Other,
}

/// One line's envelope, handed out by [`Scanner::feed`] at the line's `\n`.
/// The captured values borrow the scanner's buffers, so they live until the
/// next call; copy what must outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    /// Which kind of message the line is.
    pub(crate) kind: Kind,
    /// The `id` exactly as written (`7`, `"a\"b"`, `null`,
    /// `9007199254740993`), for any kind with an `id`; `None` without one or
    /// when it is longer than [`ID_CAP`].
    pub(crate) id: Option<&'a [u8]>,
    /// Where [`id`](Self::id) starts in the line, in bytes from its start
    /// (0 when `id` is `None`).
    pub(crate) id_offset: u64,
    /// The `method`, unescaped, of a request or notification; `None` when it
    /// is longer than [`METHOD_CAP`] raw, or not valid UTF-8 once unescaped.
    pub(crate) method: Option<&'a str>,
    /// An error response's `error.message`, unescaped and cut to at most
    /// [`MESSAGE_CAP`] raw bytes; `None` when there is no string there.
    pub(crate) error_message: Option<&'a str>,
    /// The line's length in bytes, its `\n` included.
    pub(crate) len: u64,
    /// The whole line, `\n` included, when the scanner is
    /// [recording](Scanner::recording) and this is a request or notification
    /// with one of the recorded methods, at most [`RECORD_CAP`] long.
    pub(crate) line: Option<&'a [u8]>,
}

/// What the scanner knows of the line it is in the middle of, before its
/// `\n`: enough, most of the time, to decide what becomes of the line while
/// it is still arriving (SDKs write `id` and `result` or `method` near the
/// start; some write `id` last, and such a line is only known at its end).
/// See [`Scanner::partial`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Partial<'a> {
    /// A top-level `method` member has been seen (a request or a
    /// notification, unless the line turns out to be something else).
    pub(crate) method: bool,
    /// The `method`, once its string has ended, when it fit.
    pub(crate) method_name: Option<&'a str>,
    /// A top-level `result` or `error` member has been seen (a response).
    pub(crate) answer: bool,
    /// The `id`, once its value has ended, valid and short enough to keep.
    pub(crate) id: Option<&'a [u8]>,
    /// The line is no JSON-RPC object the scanner follows: nothing more
    /// will be learned of it.
    pub(crate) other: bool,
}

/// Which object's members are being read: the line's own, or its `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Error,
}

/// Which string is being read: a key, a member's value, or one anywhere in
/// a nested value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    Key,
    Value,
    Nested,
}

/// Where in a line the scanner is. `Level` says which object's member
/// syntax applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Whitespace before the top-level `{`.
    LineStart,
    /// Inside a UTF-8 byte order mark at the very start of a line, this
    /// many of its three bytes seen (some Windows tools write one).
    Bom(u8),
    /// After `{`: a key or `}`.
    FirstKey(Level),
    /// After `,`: a key.
    NextKey(Level),
    /// Inside a string.
    Str(Level, Text),
    /// Right after a `\` inside a string.
    Escape(Level, Text),
    /// After a key: `:`.
    Colon(Level),
    /// After `:`: a value.
    Value(Level),
    /// Inside a number or literal.
    Scalar(Level),
    /// Inside an array or object below the member level; `depth` counts.
    Nested(Level),
    /// After a value: `,` or `}`.
    AfterValue(Level),
    /// After the top-level `}`: whitespace only.
    AfterObject,
    /// Not an object the scanner tracks: skip to the `\n`.
    Bad,
}

/// The members whose keys the scanner looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Id,
    Method,
    Result,
    Error,
    Message,
    Other,
}

/// The buffer a capture goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Key,
    Id,
    Method,
    Message,
}

/// A captured value: the first `cap` bytes, and whether there were more.
#[derive(Debug)]
struct Capture {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl Capture {
    fn new(cap: usize) -> Capture {
        Capture {
            // Grown on demand: most values are a few bytes.
            bytes: Vec::with_capacity(cap.min(64)),
            cap,
            over: false,
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.over = false;
    }

    fn push(&mut self, part: &[u8]) {
        let room = self.cap - self.bytes.len();
        if part.len() <= room {
            self.bytes.extend_from_slice(part);
        } else {
            self.bytes.extend_from_slice(&part[..room]);
            self.over = true;
        }
    }

    /// The value, if it fit.
    fn whole(&self) -> Option<&[u8]> {
        if self.over {
            None
        } else {
            Some(&self.bytes)
        }
    }
}

/// The line being recorded for replay.
#[derive(Debug)]
struct Record {
    methods: &'static [&'static str],
    line: Vec<u8>,
    /// Still a candidate: nothing so far rules the line out.
    active: bool,
}

impl Record {
    fn push(&mut self, part: &[u8]) {
        if !self.active {
            return;
        }
        if self.line.len() + part.len() <= RECORD_CAP {
            self.line.extend_from_slice(part);
        } else {
            self.stop();
        }
    }

    fn stop(&mut self) {
        self.active = false;
        self.line.clear();
        // A long candidate that did not make it leaves no big buffer behind.
        if self.line.capacity() > 64 * 1024 {
            self.line = Vec::new();
        }
    }
}

/// What the current line's top-level object has shown so far.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    id: bool,
    method: bool,
    result: bool,
    error: bool,
    /// The (last) `id` is a valid string, number or null (or too long to
    /// check, but starts like a string or number).
    id_valid: bool,
    /// The (last) `method` is a string.
    method_string: bool,
    /// The (last) `error.message` is a string.
    message: bool,
    /// Where the (last) `id` starts in the line.
    id_offset: u64,
}

/// A streaming envelope scanner for one direction of a newline-delimited
/// JSON-RPC stream; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Scanner {
    state: State,
    /// Open brackets of the nested value being skipped.
    depth: u64,
    /// The member whose key or value is being read.
    member: Member,
    seen: Seen,
    /// Bytes of the current line in earlier chunks.
    len: u64,
    /// Where the current line starts in the chunk being fed.
    line_from: usize,
    /// The capture in progress, and where it starts in the chunk being fed.
    target: Option<Target>,
    from: usize,
    key: Capture,
    id: Capture,
    method: Capture,
    message: Capture,
    record: Option<Record>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new()
    }
}

impl Scanner {
    /// A scanner at the start of a stream.
    pub(crate) fn new() -> Scanner {
        Scanner {
            state: State::LineStart,
            depth: 0,
            member: Member::Other,
            seen: Seen::default(),
            len: 0,
            line_from: 0,
            target: None,
            from: 0,
            key: Capture::new(KEY_CAP),
            id: Capture::new(ID_CAP),
            method: Capture::new(METHOD_CAP),
            message: Capture::new(MESSAGE_CAP),
            record: None,
        }
    }

    /// A scanner that also records whole requests and notifications whose
    /// method is one of `methods`, up to [`RECORD_CAP`] bytes, and hands them
    /// out as [`Envelope::line`].
    ///
    /// Which lines to keep is only known once the method is, so every line
    /// is copied until something rules it out: its method is another one, a
    /// `result` or `error` member appears, it stops being an object, or it
    /// outgrows the cap. Bytes are copied only at a chunk's end or the
    /// line's, and clients write `method` near the start, so a long
    /// `tools/call` is usually ruled out before a byte is copied; no line
    /// ever costs more than [`RECORD_CAP`].
    pub(crate) fn recording(methods: &'static [&'static str]) -> Scanner {
        let mut scanner = Scanner::new();
        scanner.record = Some(Record {
            methods,
            line: Vec::new(),
            active: true,
        });
        scanner
    }

    /// Whether part of a line has been fed and its `\n` not yet: the
    /// stream is between lines only when this is `false`, so that is the
    /// only moment a line of one's own may be put into it.
    pub(crate) fn mid_line(&self) -> bool {
        self.len > 0
    }

    /// Whether the line in progress is a whole object already (only
    /// whitespace may follow): a stream that ends here ended a message.
    pub(crate) fn object_ended(&self) -> bool {
        self.state == State::AfterObject
    }

    /// What is known so far of the line in progress (see [`Partial`]);
    /// meaningful while [`mid_line`](Self::mid_line).
    pub(crate) fn partial(&self) -> Partial<'_> {
        let seen = &self.seen;
        let id_done = seen.id && seen.id_valid && self.target != Some(Target::Id);
        let method_done = seen.method && seen.method_string && self.target != Some(Target::Method);
        Partial {
            method: seen.method,
            method_name: if method_done {
                self.method.whole().and_then(|m| str::from_utf8(m).ok())
            } else {
                None
            },
            answer: seen.result || seen.error,
            id: if id_done { self.id.whole() } else { None },
            other: self.state == State::Bad,
        }
    }

    /// Scans the next `chunk` of the stream, calling `on_line` with the
    /// envelope of every line whose `\n` is in it, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8], mut on_line: impl FnMut(Envelope<'_>)) {
        self.scan(chunk, &mut on_line);
    }

    /// [`Scanner::feed`]'s body, compiled once for all its callers (an
    /// indirect call per line is nothing beside scanning it).
    fn scan(&mut self, chunk: &[u8], on_line: &mut dyn FnMut(Envelope<'_>)) {
        self.line_from = 0;
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            match self.state {
                State::Str(level, text) => match skip_string(chunk, i) {
                    StringEnd::Quote(at) => {
                        self.close_string(level, text, chunk, at);
                        i = match text {
                            Text::Key => self.after_key(level, chunk, at + 1),
                            Text::Value => self.after_value(level, chunk, at + 1),
                            Text::Nested => at + 1,
                        };
                    }
                    StringEnd::Newline(at) => {
                        self.end_line(chunk, at, on_line);
                        i = at + 1;
                    }
                    StringEnd::Escape => {
                        self.state = State::Escape(level, text);
                        i = chunk.len();
                    }
                    StringEnd::Open => i = chunk.len(),
                },
                State::Escape(level, text) => {
                    // A chunk ended right after a `\`; see `skip_string`.
                    if b == b'\n' {
                        self.end_line(chunk, i, on_line);
                    } else {
                        self.state = State::Str(level, text);
                    }
                    i += 1;
                }
                State::Nested(level) => i = self.skip_nested(level, chunk, i, on_line),
                State::Bad => match find_newline(chunk.get(i..).unwrap_or_default()) {
                    None => i = chunk.len(),
                    Some(n) => {
                        self.end_line(chunk, i + n, on_line);
                        i += n + 1;
                    }
                },
                State::Scalar(level) => {
                    let end = chunk
                        .get(i..)
                        .unwrap_or_default()
                        .iter()
                        .position(|&b| SCALAR_END[b as usize])
                        .map_or(chunk.len(), |n| i + n);
                    match chunk.get(end) {
                        None => i = end,
                        Some(b'"' | b'{' | b'[' | b']' | b':') => self.bad(),
                        Some(_) => {
                            self.end_capture(chunk, end);
                            self.close_value();
                            self.state = State::AfterValue(level);
                            i = self.after_value(level, chunk, end);
                        }
                    }
                }
                // Between tokens: one byte at a time, each state matching
                // its own byte once.
                State::LineStart => {
                    match b {
                        b'{' => self.state = State::FirstKey(Level::Top),
                        0xEF if self.len == 0 && i == self.line_from => self.state = State::Bom(1),
                        b' ' | b'\t' | b'\r' => {}
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.bad(),
                    }
                    i += 1;
                }
                State::Bom(seen) => {
                    const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];
                    match b {
                        _ if BOM.get(seen as usize) == Some(&b) && seen == 2 => {
                            self.state = State::LineStart
                        }
                        _ if BOM.get(seen as usize) == Some(&b) => {
                            self.state = State::Bom(seen + 1)
                        }
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.bad(),
                    }
                    i += 1;
                }
                State::FirstKey(level) | State::NextKey(level) => {
                    match b {
                        b'"' => self.open_key(level, i),
                        b'}' if self.state == State::FirstKey(level) => self.close_object(level),
                        b' ' | b'\t' | b'\r' => {}
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.bad(),
                    }
                    i += 1;
                }
                State::Colon(level) => {
                    match b {
                        b':' => self.state = State::Value(level),
                        b' ' | b'\t' | b'\r' => {}
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.bad(),
                    }
                    i += 1;
                }
                State::Value(level) => {
                    match b {
                        b' ' | b'\t' | b'\r' => {}
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.open_value(level, chunk, i),
                    }
                    i += 1;
                }
                State::AfterValue(level) => {
                    match b {
                        b',' => self.state = State::NextKey(level),
                        b'}' => self.close_object(level),
                        b' ' | b'\t' | b'\r' => {}
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.bad(),
                    }
                    i += 1;
                }
                State::AfterObject => {
                    match b {
                        b' ' | b'\t' | b'\r' => {}
                        b'\n' => self.end_line(chunk, i, on_line),
                        _ => self.bad(),
                    }
                    i += 1;
                }
            }
        }
        // Carry what this chunk holds of the unfinished line.
        if let Some(target) = self.target {
            let part = chunk.get(self.from..).unwrap_or_default();
            self.capture(target).push(part);
            self.from = 0;
        }
        if let Some(record) = &mut self.record {
            record.push(chunk.get(self.line_from..).unwrap_or_default());
        }
        self.len += (chunk.len() - self.line_from) as u64;
    }

    /// Ends the stream: a last line without `\n` gets its envelope (its
    /// `len` then has no `\n` to count), as the relay forwards it all the
    /// same. Nothing happens between lines.
    pub(crate) fn finish(&mut self, mut on_line: impl FnMut(Envelope<'_>)) {
        if self.mid_line() {
            on_line(self.envelope(self.len));
            self.reset_line();
        }
    }

    /// Skips a nested value from `chunk[i]` on: brackets move `depth`,
    /// strings are skipped by [`skip_string`] without leaving the loop (a
    /// `tools/list` result is thousands of short strings). Returns where to
    /// go on.
    fn skip_nested(
        &mut self,
        level: Level,
        chunk: &[u8],
        mut i: usize,
        on_line: &mut dyn FnMut(Envelope<'_>),
    ) -> usize {
        // In a local while the loop runs: one bracket per few bytes here.
        let mut depth = self.depth;
        while i < chunk.len() {
            let class = NESTED[chunk[i] as usize];
            i += 1;
            // Plain bytes, most of them, are let through before the
            // `match`, which the size-optimised build makes a jump table.
            if class == PLAIN {
                continue;
            }
            match class {
                OPEN => depth += 1,
                CLOSE => {
                    depth -= 1;
                    if depth == 0 {
                        // Arrays and objects are never captured: an `id` or
                        // `method` that is one makes the line Other.
                        self.depth = 0;
                        self.state = State::AfterValue(level);
                        return self.after_value(level, chunk, i);
                    }
                }
                QUOTE => match skip_string(chunk, i) {
                    StringEnd::Quote(at) => i = at + 1,
                    StringEnd::Newline(at) => {
                        self.end_line(chunk, at, on_line);
                        return at + 1;
                    }
                    StringEnd::Escape => {
                        self.depth = depth;
                        self.state = State::Escape(level, Text::Nested);
                        return chunk.len();
                    }
                    StringEnd::Open => {
                        self.depth = depth;
                        self.state = State::Str(level, Text::Nested);
                        return chunk.len();
                    }
                },
                _ => {
                    self.end_line(chunk, i - 1, on_line);
                    return i;
                }
            }
        }
        self.depth = depth;
        i
    }

    /// A key's opening quote is `chunk[at]`.
    fn open_key(&mut self, level: Level, at: usize) {
        self.key.clear();
        self.start_capture(Target::Key, at + 1);
        self.state = State::Str(level, Text::Key);
    }

    /// Just after a key, at `chunk[i]`: takes compact JSON's `:` and the
    /// value's first byte here, saving two rounds of the dispatch in
    /// `feed` per member. Anything else is left to that dispatch.
    fn after_key(&mut self, level: Level, chunk: &[u8], mut i: usize) -> usize {
        if chunk.get(i) == Some(&b':') {
            self.state = State::Value(level);
            i += 1;
            if let Some(&b) = chunk.get(i) {
                if !matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
                    self.open_value(level, chunk, i);
                    i += 1;
                }
            }
        }
        i
    }

    /// Just after a value, at `chunk[i]`: takes compact JSON's `,` and the
    /// next key's quote here, as [`after_key`](Self::after_key) does.
    fn after_value(&mut self, level: Level, chunk: &[u8], mut i: usize) -> usize {
        if chunk.get(i) == Some(&b',') {
            self.state = State::NextKey(level);
            i += 1;
            if chunk.get(i) == Some(&b'"') {
                self.open_key(level, i);
                i += 1;
            }
        }
        i
    }

    /// A member's value starts with `chunk[at]` (not whitespace).
    fn open_value(&mut self, level: Level, chunk: &[u8], at: usize) {
        let member = self.member;
        if member == Member::Id {
            self.seen.id_offset = self.len + (at - self.line_from) as u64;
        }
        match chunk.get(at).copied().unwrap_or_default() {
            b'"' => {
                match member {
                    // The id is echoed with its quotes; method and message
                    // are wanted as text.
                    Member::Id => self.start_capture(Target::Id, at),
                    Member::Method => {
                        self.seen.method_string = true;
                        self.start_capture(Target::Method, at + 1);
                    }
                    Member::Message => {
                        self.seen.message = true;
                        self.start_capture(Target::Message, at + 1);
                    }
                    _ => {}
                }
                self.state = State::Str(level, Text::Value);
            }
            b'{' if level == Level::Top && member == Member::Error => {
                self.state = State::FirstKey(Level::Error);
            }
            b'{' | b'[' => {
                self.depth = 1;
                self.state = State::Nested(level);
            }
            b'}' | b']' | b',' | b':' => self.bad(),
            _ => {
                if member == Member::Id {
                    self.start_capture(Target::Id, at);
                }
                self.state = State::Scalar(level);
            }
        }
    }

    /// The closing quote of a string is at `chunk[at]`.
    fn close_string(&mut self, level: Level, text: Text, chunk: &[u8], at: usize) {
        match text {
            Text::Key => {
                self.member = if self.key.bytes.is_empty() {
                    // The whole key is in this chunk.
                    self.target = None;
                    identify(
                        level,
                        chunk.get(self.from..at).unwrap_or_default(),
                        &mut self.key,
                    )
                } else {
                    // Cut by a chunk boundary: pieced together in `key`.
                    self.end_capture(chunk, at);
                    if self.key.over || !unescape(&mut self.key.bytes) {
                        Member::Other
                    } else {
                        name(level, &self.key.bytes)
                    }
                };
                self.open_member();
                self.state = State::Colon(level);
            }
            Text::Value => {
                // The id keeps its closing quote.
                let end = if self.member == Member::Id {
                    at + 1
                } else {
                    at
                };
                self.end_capture(chunk, end);
                self.close_value();
                self.state = State::AfterValue(level);
            }
            Text::Nested => self.state = State::Nested(level),
        }
    }

    /// A member's key has been read: forget what an earlier one with the
    /// same name left (the last one wins).
    fn open_member(&mut self) {
        match self.member {
            Member::Id => {
                self.seen.id = true;
                self.seen.id_valid = false;
                self.id.clear();
            }
            Member::Method => {
                self.seen.method = true;
                self.seen.method_string = false;
                self.method.clear();
            }
            Member::Result => {
                self.seen.result = true;
                self.stop_recording();
            }
            Member::Error => {
                self.seen.error = true;
                self.seen.message = false;
                self.message.clear();
                self.stop_recording();
            }
            Member::Message => {
                self.seen.message = false;
                self.message.clear();
            }
            Member::Other => {}
        }
    }

    /// A captured string or scalar value is complete: check or decode it.
    fn close_value(&mut self) {
        match self.member {
            Member::Id => {
                self.seen.id_valid = match self.id.whole() {
                    Some(raw) => is_valid_id(raw),
                    // Too long to check; a string or number as far as seen.
                    None => matches!(self.id.bytes.first(), Some(b'"' | b'-' | b'0'..=b'9')),
                };
            }
            Member::Method => {
                // UTF-8 is checked once, when the envelope is made.
                if self.method.over || !unescape(&mut self.method.bytes) {
                    self.method.over = true;
                }
                if let Some(record) = &mut self.record {
                    let wanted = match self.method.whole() {
                        Some(name) => record.methods.iter().any(|m| m.as_bytes() == name),
                        None => false,
                    };
                    if !wanted {
                        record.stop();
                    }
                }
            }
            Member::Message => {
                // A cut message may end inside an escape or a character:
                // keep what decodes.
                let _ = unescape(&mut self.message.bytes);
                if let Err(e) = str::from_utf8(&self.message.bytes) {
                    self.message.bytes.truncate(e.valid_up_to());
                }
            }
            _ => {}
        }
    }

    fn close_object(&mut self, level: Level) {
        self.state = match level {
            Level::Top => State::AfterObject,
            Level::Error => State::AfterValue(Level::Top),
        };
    }

    /// The line is not one the scanner tracks.
    fn bad(&mut self) {
        self.state = State::Bad;
        self.target = None;
        self.stop_recording();
    }

    fn stop_recording(&mut self) {
        if let Some(record) = &mut self.record {
            record.stop();
        }
    }

    fn capture(&mut self, target: Target) -> &mut Capture {
        match target {
            Target::Key => &mut self.key,
            Target::Id => &mut self.id,
            Target::Method => &mut self.method,
            Target::Message => &mut self.message,
        }
    }

    /// Captures from `chunk[at]` on into `target`.
    fn start_capture(&mut self, target: Target, at: usize) {
        self.target = Some(target);
        self.from = at;
    }

    /// Ends the capture in progress (if any) before `chunk[end]`.
    fn end_capture(&mut self, chunk: &[u8], end: usize) {
        if let Some(target) = self.target.take() {
            let part = chunk.get(self.from..end).unwrap_or_default();
            self.capture(target).push(part);
        }
    }

    /// The line's `\n` is `chunk[at]`.
    fn end_line(&mut self, chunk: &[u8], at: usize, on_line: &mut dyn FnMut(Envelope<'_>)) {
        if let Some(record) = &mut self.record {
            record.push(chunk.get(self.line_from..=at).unwrap_or_default());
        }
        let len = self.len + (at + 1 - self.line_from) as u64;
        on_line(self.envelope(len));
        self.reset_line();
        self.line_from = at + 1;
    }

    fn kind(&self) -> Kind {
        let seen = &self.seen;
        if self.state != State::AfterObject {
            Kind::Other
        } else if seen.method {
            if !seen.method_string || seen.result || seen.error {
                Kind::Other
            } else if !seen.id {
                Kind::Notification
            } else if seen.id_valid {
                Kind::Request
            } else {
                Kind::Other
            }
        } else if seen.id && seen.id_valid && seen.result != seen.error {
            if seen.result {
                Kind::Response
            } else {
                Kind::ErrorResponse
            }
        } else {
            Kind::Other
        }
    }

    fn envelope(&self, len: u64) -> Envelope<'_> {
        let kind = self.kind();
        let mut envelope = Envelope {
            kind,
            id: None,
            id_offset: 0,
            method: None,
            error_message: None,
            len,
            line: None,
        };
        if kind == Kind::Other {
            return envelope;
        }
        if self.seen.id {
            envelope.id = self.id.whole();
            if envelope.id.is_some() {
                envelope.id_offset = self.seen.id_offset;
            }
        }
        if self.seen.method {
            envelope.method = self.method.whole().and_then(|m| str::from_utf8(m).ok());
        }
        if kind == Kind::ErrorResponse && self.seen.message {
            envelope.error_message = str::from_utf8(&self.message.bytes).ok();
        }
        if let Some(record) = &self.record {
            // Still active here means the method was one of the wanted.
            if record.active && self.seen.method {
                envelope.line = Some(&record.line);
            }
        }
        envelope
    }

    fn reset_line(&mut self) {
        self.state = State::LineStart;
        self.depth = 0;
        self.member = Member::Other;
        self.seen = Seen::default();
        self.len = 0;
        self.target = None;
        self.id.clear();
        self.method.clear();
        self.message.clear();
        if let Some(record) = &mut self.record {
            record.line.clear();
            record.active = true;
        }
    }
}

/// Which member a raw key names, at `level`. Escaped keys (`"\u0069d"` is
/// `id`) are unescaped into `buffer` first; the others, nearly all, are
/// compared where they are.
fn identify(level: Level, raw: &[u8], buffer: &mut Capture) -> Member {
    if !has_backslash(raw) {
        return name(level, raw);
    }
    if raw.len() > KEY_CAP {
        return Member::Other;
    }
    buffer.bytes.clear();
    buffer.bytes.extend_from_slice(raw);
    if !unescape(&mut buffer.bytes) {
        return Member::Other;
    }
    name(level, &buffer.bytes)
}

/// Whether a key or method (a few bytes) has a `\`. A loop rather than
/// `contains`, which calls memchr: that call, made for every key, was 5% of
/// the time spent scanning small messages.
#[allow(unknown_lints, clippy::manual_contains)]
fn has_backslash(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b == b'\\')
}

/// Which member an unescaped key names, at `level`.
fn name(level: Level, key: &[u8]) -> Member {
    match (level, key) {
        (Level::Top, b"id") => Member::Id,
        (Level::Top, b"method") => Member::Method,
        (Level::Top, b"result") => Member::Result,
        (Level::Top, b"error") => Member::Error,
        (Level::Error, b"message") => Member::Message,
        _ => Member::Other,
    }
}
