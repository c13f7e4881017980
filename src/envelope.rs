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
//!   matter, and [`find_string_stop`] looks for them eight bytes at a time.
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

use std::str;

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

impl Envelope<'_> {
    /// The recorded [`line`](Self::line) with its `id` replaced by
    /// `raw_id` (written as is), for replaying a request under an id the
    /// relay owns. `None` without a recorded line or an `id`.
    pub(crate) fn line_with_id(&self, raw_id: &[u8]) -> Option<Vec<u8>> {
        let (line, id) = (self.line?, self.id?);
        // A recorded line is at most RECORD_CAP long, so its offsets fit.
        let start = self.id_offset as usize;
        let end = start + id.len();
        let mut out = Vec::with_capacity(line.len() - id.len() + raw_id.len());
        out.extend_from_slice(&line[..start]);
        out.extend_from_slice(raw_id);
        out.extend_from_slice(&line[end..]);
        Some(out)
    }
}

/// A JSON-RPC error response line for a request whose id was `raw_id`
/// (written exactly as given, so the client matches it byte for byte):
/// `{"jsonrpc":"2.0","id":<raw_id>,"error":{"code":<code>,"message":"…"}}\n`,
/// the message escaped (see [`push_json_string`]), so it always stays one
/// line. Written by hand: the bridge-only build has no JSON library.
pub(crate) fn error_response_line(raw_id: &[u8], code: i64, message: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(64 + raw_id.len() + message.len());
    push_error_response(&mut line, raw_id, code, message);
    line.push(b'\n');
    line
}

/// Appends the error response object of [`error_response_line`], without
/// the `\n` (a batch's answer puts several in one array).
pub(crate) fn push_error_response(out: &mut Vec<u8>, raw_id: &[u8], code: i64, message: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(raw_id);
    out.extend_from_slice(b",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    push_json_string(out, message);
    out.extend_from_slice(b"}}");
}

/// Appends `text` as a JSON string: `"` and `\\` escaped, control
/// characters as `\n`, `\r`, `\t` or `\u00XX`, everything else (UTF-8
/// included) as it is, which is what JSON allows.
pub(crate) fn push_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in text.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
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
                State::Bad => match find_newline(&chunk[i..]) {
                    None => i = chunk.len(),
                    Some(n) => {
                        self.end_line(chunk, i + n, on_line);
                        i += n + 1;
                    }
                },
                State::Scalar(level) => {
                    let end = chunk[i..]
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
                        _ if b == BOM[seen as usize] && seen == 2 => self.state = State::LineStart,
                        _ if b == BOM[seen as usize] => self.state = State::Bom(seen + 1),
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
            let part = &chunk[self.from..];
            self.capture(target).push(part);
            self.from = 0;
        }
        if let Some(record) = &mut self.record {
            record.push(&chunk[self.line_from..]);
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
        match chunk[at] {
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
                    identify(level, &chunk[self.from..at], &mut self.key)
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
                    None => matches!(self.id.bytes[0], b'"' | b'-' | b'0'..=b'9'),
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
            let part = &chunk[self.from..end];
            self.capture(target).push(part);
        }
    }

    /// The line's `\n` is `chunk[at]`.
    fn end_line(&mut self, chunk: &[u8], at: usize, on_line: &mut dyn FnMut(Envelope<'_>)) {
        if let Some(record) = &mut self.record {
            record.push(&chunk[self.line_from..=at]);
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

/// Byte classes inside a nested value.
const PLAIN: u8 = 0;
const OPEN: u8 = 1;
const CLOSE: u8 = 2;
const QUOTE: u8 = 3;
const NEWLINE: u8 = 4;

static NESTED: [u8; 256] = {
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
enum StringEnd {
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
fn skip_string(chunk: &[u8], mut i: usize) -> StringEnd {
    loop {
        let at = match find_string_stop(&chunk[i..]) {
            Some(n) => i + n,
            None => return StringEnd::Open,
        };
        match chunk[at] {
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
static SCALAR_END: [bool; 256] = {
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
fn find_string_stop(hay: &[u8]) -> Option<usize> {
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
fn find_newline(hay: &[u8]) -> Option<usize> {
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

/// Decodes a JSON string body's escapes in place (every escape is at least
/// as long as what it stands for). On an invalid or cut-off escape, or a
/// `\u` that is half a surrogate pair, keeps what was decoded before it and
/// returns `false`.
fn unescape(buf: &mut Vec<u8>) -> bool {
    if !has_backslash(buf) {
        return true;
    }
    let (mut read, mut write) = (0, 0);
    while read < buf.len() {
        let b = buf[read];
        if b != b'\\' {
            buf[write] = b;
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
                let c = match unicode_escape(&buf[read..]) {
                    Some((c, used)) => {
                        read += used;
                        c
                    }
                    None => break,
                };
                let mut utf8 = [0; 4];
                let encoded = c.encode_utf8(&mut utf8).as_bytes();
                buf[write..write + encoded.len()].copy_from_slice(encoded);
                write += encoded.len();
                continue;
            }
            _ => break,
        };
        buf[write] = simple;
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
fn is_valid_id(raw: &[u8]) -> bool {
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
        from + raw[from..]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An envelope copied out of the scanner's buffers, to compare runs.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Line {
        kind: Kind,
        id: Option<Vec<u8>>,
        id_offset: u64,
        method: Option<String>,
        message: Option<String>,
        len: u64,
        line: Option<Vec<u8>>,
    }

    impl From<Envelope<'_>> for Line {
        fn from(e: Envelope<'_>) -> Line {
            Line {
                kind: e.kind,
                id: e.id.map(<[u8]>::to_vec),
                id_offset: e.id_offset,
                method: e.method.map(str::to_owned),
                message: e.error_message.map(str::to_owned),
                len: e.len,
                line: e.line.map(<[u8]>::to_vec),
            }
        }
    }

    /// The methods the relay records for replay.
    const REPLAYED: &[&str] = &[
        "initialize",
        "notifications/initialized",
        "logging/setLevel",
        "resources/subscribe",
    ];

    /// Feeds `chunks` in order, then finishes the stream.
    fn scan<'c>(scanner: &mut Scanner, chunks: impl IntoIterator<Item = &'c [u8]>) -> Vec<Line> {
        let mut lines = Vec::new();
        for chunk in chunks {
            scanner.feed(chunk, |e| lines.push(Line::from(e)));
        }
        scanner.finish(|e| lines.push(Line::from(e)));
        lines
    }

    /// The one envelope of `line` with a `\n` added.
    fn one(line: &[u8]) -> Line {
        let mut bytes = line.to_vec();
        bytes.push(b'\n');
        let mut scanner = Scanner::recording(REPLAYED);
        let mut lines = Vec::new();
        scanner.feed(&bytes, |e| lines.push(Line::from(e)));
        // At the `\n` itself, not at `finish`.
        assert_eq!(lines.len(), 1, "{}", String::from_utf8_lossy(line));
        assert!(!scanner.mid_line());
        let got = lines.into_iter().next().unwrap();
        assert_eq!(got.len, bytes.len() as u64);
        if let Some(id) = &got.id {
            let at = got.id_offset as usize;
            assert_eq!(&bytes[at..at + id.len()], &id[..], "id_offset");
        }
        got
    }

    /// `(line, kind, raw id, method, error message)`.
    type Case = (
        &'static [u8],
        Kind,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );

    const CASES: &[Case] = &[
        // The four kinds, as MCP clients and servers write them.
        (br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
            Kind::Request, Some("1"), Some("initialize"), None),
        (br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            Kind::Notification, None, Some("notifications/initialized"), None),
        (br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, Kind::Response, Some("1"), None, None),
        (br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"Method not found"}}"#,
            Kind::ErrorResponse, Some(r#""x""#), None, Some("Method not found")),
        // A host's refusal.
        (br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"project \"p\" is not open"}}"#,
            Kind::ErrorResponse, Some("null"), None, Some("project \"p\" is not open")),
        // Keys in any order.
        (br#"{"method":"tools/call","params":{"name":"x"},"id":7,"jsonrpc":"2.0"}"#,
            Kind::Request, Some("7"), Some("tools/call"), None),
        (br#"{"result":{"content":[]},"jsonrpc":"2.0","id":"r-1"}"#, Kind::Response, Some(r#""r-1""#), None, None),
        (br#"{"error":{"message":"m","code":1},"id":3}"#, Kind::ErrorResponse, Some("3"), None, Some("m")),
        // Whitespace wherever JSON allows it, and CRLF.
        (b" \t{ \"jsonrpc\" : \"2.0\" ,\t\"id\" :  42 , \"method\"\r: \"ping\" } \r",
            Kind::Request, Some("42"), Some("ping"), None),
        (br#"{"id":1 ,"method":"x"}"#, Kind::Request, Some("1"), Some("x"), None),
        // Members of nested values are not the line's.
        (br#"{"params":{"id":99,"method":"fake","arguments":{"error":{"message":"no"}}},"method":"tools/call"}"#,
            Kind::Notification, None, Some("tools/call"), None),
        (br#"{"id":2,"result":{"id":3,"method":"m","error":{}}}"#, Kind::Response, Some("2"), None, None),
        (br#"{"id":2,"error":{"data":{"message":"inner"},"code":1,"message":"outer \u00e9"}}"#,
            Kind::ErrorResponse, Some("2"), None, Some("outer \u{e9}")),
        (br#"{"id":2,"message":"top","error":{"code":1}}"#, Kind::ErrorResponse, Some("2"), None, None),
        // Braces, brackets, quotes and escapes inside strings.
        (br#"{"id":3,"method":"tools/call","params":{"text":"}{][\"id\":1,\"method\":\"x\"}\\\\","more":"\u0022{\\"}}"#,
            Kind::Request, Some("3"), Some("tools/call"), None),
        (br#"{"id":4,"method":"x","params":["\\",{"a":"\\\""},"]"]}"#, Kind::Request, Some("4"), Some("x"), None),
        // Ids exactly as written.
        (br#"{"id":9007199254740993,"method":"x"}"#, Kind::Request, Some("9007199254740993"), Some("x"), None),
        (br#"{"id":-5,"method":"x"}"#, Kind::Request, Some("-5"), Some("x"), None),
        (br#"{"id":0,"method":"x"}"#, Kind::Request, Some("0"), Some("x"), None),
        (br#"{"id":1.5e+10,"method":"x"}"#, Kind::Request, Some("1.5e+10"), Some("x"), None),
        (br#"{"id":-0.25E-3,"result":null}"#, Kind::Response, Some("-0.25E-3"), None, None),
        (br#"{"id":"a\"b\\c\u00e9","method":"x"}"#, Kind::Request, Some(r#""a\"b\\c\u00e9""#), Some("x"), None),
        (br#"{"id":"","method":"x"}"#, Kind::Request, Some(r#""""#), Some("x"), None),
        (br#"{"id":null,"result":{}}"#, Kind::Response, Some("null"), None, None),
        // Escaped methods and keys mean what they decode to.
        (br#"{"id":1,"method":"tools\/call"}"#, Kind::Request, Some("1"), Some("tools/call"), None),
        (br#"{"method":"\u006eotifications/initialized"}"#,
            Kind::Notification, None, Some("notifications/initialized"), None),
        (br#"{"\u0069d":5,"method":"ping"}"#, Kind::Request, Some("5"), Some("ping"), None),
        (br#"{"id":6,"error":{"\u006d\u0065\u0073\u0073\u0061\u0067\u0065":"\ud83d\ude00"}}"#,
            Kind::ErrorResponse, Some("6"), None, Some("\u{1f600}")),
        // A method that is not text: the kind stands, the name does not.
        (b"{\"id\":1,\"method\":\"\xff\"}", Kind::Request, Some("1"), None, None),
        (br#"{"id":1,"method":"\ud800"}"#, Kind::Request, Some("1"), None, None),
        // Invalid UTF-8 in params passes: the scanner is byte-based.
        (b"{\"id\":1,\"method\":\"x\",\"params\":{\"t\":\"\xff\xfe\"}}", Kind::Request, Some("1"), Some("x"), None),
        (br#"{"id":1,"method":"x","params":123,"flag":true}"#, Kind::Request, Some("1"), Some("x"), None),
        // Duplicate keys: the last one wins.
        (br#"{"id":1,"method":"x","id":"two"}"#, Kind::Request, Some(r#""two""#), Some("x"), None),
        // An error that is not an object has no message.
        (br#"{"id":1,"error":"boom"}"#, Kind::ErrorResponse, Some("1"), None, None),
        (br#"{"id":1,"error":{"message":5}}"#, Kind::ErrorResponse, Some("1"), None, None),
        // Ids JSON-RPC does not allow, or that are not JSON.
        (br#"{"id":true,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":{"a":1},"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":[1],"result":1}"#, Kind::Other, None, None, None),
        (br#"{"id":01,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":1.,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":-,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":nul,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":1 2,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":"\x","method":"x"}"#, Kind::Other, None, None, None),
        (b"{\"id\":\"a\tb\",\"method\":\"x\"}", Kind::Other, None, None, None),
        (b"{\"id\":\"\xff\",\"method\":\"x\"}", Kind::Other, None, None, None),
        // Objects that are none of the four.
        (br#"{"id":1,"method":5}"#, Kind::Other, None, None, None),
        (br#"{"method":null}"#, Kind::Other, None, None, None),
        (br#"{"id":1,"method":"x","result":{}}"#, Kind::Other, None, None, None),
        (br#"{"id":1,"result":{},"error":{}}"#, Kind::Other, None, None, None),
        (br#"{"id":1}"#, Kind::Other, None, None, None),
        (br#"{"result":{}}"#, Kind::Other, None, None, None),
        (br#"{"error":{"code":1,"message":"no id"}}"#, Kind::Other, None, None, None),
        (b"{}", Kind::Other, None, None, None),
        // Not one JSON object.
        (br#"[{"id":1,"method":"x"}]"#, Kind::Other, None, None, None),
        (b"", Kind::Other, None, None, None),
        (b"  \t\r", Kind::Other, None, None, None),
        (b"not json", Kind::Other, None, None, None),
        (br#""string""#, Kind::Other, None, None, None),
        (br#"{"id":1,"method":"x"} x"#, Kind::Other, None, None, None),
        (br#"{"id":1,"method":"x"}{"id":2}"#, Kind::Other, None, None, None),
        (br#"{"id":1,"method":"x",}"#, Kind::Other, None, None, None),
        (br#"{"id":1,"method":"x""#, Kind::Other, None, None, None),
        // A `\` right before the `\n` escapes nothing: the line ends there.
        (br#"{"id":1,"method":"x\"#, Kind::Other, None, None, None),
        (br#"{"id" 1,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{"id":,"method":"x"}"#, Kind::Other, None, None, None),
        (br#"{,}"#, Kind::Other, None, None, None),
        (br#"{"id":1,"method":"x","params":{"a":1}"#, Kind::Other, None, None, None),
    ];

    /// The table of lines the relay meets, and what each one is.
    #[test]
    fn classifies_lines() {
        for &(line, kind, id, method, message) in CASES {
            let got = one(line);
            let text = String::from_utf8_lossy(line);
            assert_eq!(got.kind, kind, "{}", text);
            assert_eq!(got.id.as_deref(), id.map(str::as_bytes), "{}", text);
            assert_eq!(got.method.as_deref(), method, "{}", text);
            assert_eq!(got.message.as_deref(), message, "{}", text);
        }
    }

    /// Every case of the table, then lines that exercise the caps and the
    /// recorder, as one stream.
    fn stream() -> Vec<u8> {
        let mut stream = Vec::new();
        for (n, case) in CASES.iter().enumerate() {
            stream.extend_from_slice(case.0);
            stream.extend_from_slice(if n % 3 == 0 { b"\r\n" } else { b"\n" });
        }
        let long_id = format!(r#"{{"id":"{}","method":"initialize"}}"#, "i".repeat(300));
        let long_text = "\\\"t{}".repeat(300);
        for line in [
            long_id,
            format!(
                r#"{{"id":9,"method":"initialize","params":{{"t":"{}"}}}}"#,
                long_text
            ),
            format!(
                r#"{{"params":{{"t":"{}"}},"method":"tools/call","id":10}}"#,
                long_text
            ),
            r#"{"id":11,"method":"logging/setLevel","params":{"level":"info"}}"#.to_string(),
            r#"{"jsonrpc":"2.0","method":"resources/subscribe","id":"s"}"#.to_string(),
        ] {
            stream.extend_from_slice(line.as_bytes());
            stream.push(b'\n');
        }
        stream.extend_from_slice(br#"{"id":12,"method":"initialize"}"#);
        stream
    }

    /// The relay reads whatever the pipe gives it: a line cut anywhere (in
    /// a key, an escape, a `\r\n`, an id) must give what the whole line
    /// gives.
    #[test]
    fn every_split_point_gives_the_same_envelopes() {
        let stream = stream();
        let whole = scan(&mut Scanner::recording(REPLAYED), [&stream[..]]);
        assert_eq!(whole.len(), CASES.len() + 6);
        for cut in 0..=stream.len() {
            let (a, b) = stream.split_at(cut);
            let split = scan(&mut Scanner::recording(REPLAYED), [a, b]);
            assert_eq!(split, whole, "cut at {}", cut);
        }
        let bytes = scan(&mut Scanner::recording(REPLAYED), stream.chunks(1));
        assert_eq!(bytes, whole, "one byte at a time");
    }

    /// A small xorshift generator: deterministic, so a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Random chunk sizes, small and large, over many seeds: the same
    /// envelopes as feeding the stream whole.
    #[test]
    fn random_chunks_give_the_same_envelopes() {
        let stream = stream();
        let whole = scan(&mut Scanner::recording(REPLAYED), [&stream[..]]);
        for seed in 1..=200 {
            let mut rng = Rng(seed);
            let mut chunks = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let most = if rng.below(4) == 0 { 4096 } else { 24 };
                let (chunk, tail) = rest.split_at((1 + rng.below(most)).min(rest.len()));
                chunks.push(chunk);
                rest = tail;
            }
            let got = scan(&mut Scanner::recording(REPLAYED), chunks);
            assert_eq!(got, whole, "seed {}", seed);
        }
    }

    /// A pipe read often holds several lines: each gets its envelope, in
    /// order, with its own length.
    #[test]
    fn several_lines_in_one_chunk() {
        let chunk =
            b"{\"id\":1,\"method\":\"a\"}\n{\"method\":\"b\"}\r\n\n{\"id\":1,\"result\":{}}\n";
        let lines = scan(&mut Scanner::new(), [&chunk[..]]);
        let kinds: Vec<_> = lines.iter().map(|l| (l.kind, l.len)).collect();
        assert_eq!(
            kinds,
            [
                (Kind::Request, 22),
                (Kind::Notification, 16),
                (Kind::Other, 1),
                (Kind::Response, 21)
            ]
        );
    }

    /// A line is only known at its `\n`, and the relay may only put a line
    /// of its own into the stream between lines; at EOF, `finish` reports
    /// a last line without `\n`.
    #[test]
    fn line_without_newline_waits_for_it_or_finish() {
        let mut scanner = Scanner::new();
        let mut lines = Vec::new();
        assert!(!scanner.mid_line());
        scanner.feed(b"{\"id\":1,\"method\":\"a\"}", |e| {
            lines.push(Line::from(e))
        });
        assert!(lines.is_empty());
        assert!(scanner.mid_line());
        scanner.feed(b"\n", |e| lines.push(Line::from(e)));
        assert_eq!(lines.len(), 1);
        assert!(!scanner.mid_line());

        scanner.feed(b"{\"id\":2,\"method\":\"b\"}", |e| {
            lines.push(Line::from(e))
        });
        assert_eq!(lines.len(), 1);
        scanner.finish(|e| lines.push(Line::from(e)));
        assert_eq!(lines[1].kind, Kind::Request);
        assert_eq!(lines[1].id.as_deref(), Some(&b"2"[..]));
        assert_eq!(lines[1].len, 21, "no `\\n` to count");
        assert!(!scanner.mid_line());
        scanner.finish(|e| lines.push(Line::from(e)));
        assert_eq!(lines.len(), 2, "finish between lines reports nothing");
    }

    /// The buffers' capacities, which must never grow.
    fn footprint(scanner: &Scanner) -> [usize; 5] {
        [
            scanner.key.bytes.capacity(),
            scanner.id.bytes.capacity(),
            scanner.method.bytes.capacity(),
            scanner.message.bytes.capacity(),
            scanner.record.as_ref().map_or(0, |r| r.line.capacity()),
        ]
    }

    /// A 1 MiB string argument (a file's contents) passes in relay-sized
    /// chunks without the scanner holding more than its fixed buffers, and
    /// a recorded method's line over the cap is dropped, not kept (nor the
    /// buffer it grew while it was a candidate).
    #[test]
    fn huge_lines_keep_memory_constant() {
        let content = "line \\\"quoted\\\" {not: [json]}\\n".repeat(34 * 1024);
        assert!(content.len() >= 1024 * 1024);
        let mut stream = Vec::new();
        for method in ["tools/call", "initialize"] {
            stream.extend_from_slice(
                format!(
                    r#"{{"jsonrpc":"2.0","id":12,"method":"{}","params":{{"arguments":{{"content":"{}"}}}}}}"#,
                    method, content
                )
                .as_bytes(),
            );
            stream.push(b'\n');
        }
        let mut scanner = Scanner::recording(REPLAYED);
        let before = footprint(&scanner);
        let lines = scan(&mut scanner, stream.chunks(64 * 1024));
        assert_eq!(footprint(&scanner), before);
        assert_eq!(lines.len(), 2);
        for (line, method) in lines.iter().zip(["tools/call", "initialize"]) {
            assert_eq!(line.kind, Kind::Request);
            assert_eq!(line.method.as_deref(), Some(method));
            assert_eq!(line.id.as_deref(), Some(&b"12"[..]));
            assert_eq!(line.line, None);
            assert!(line.len > 1024 * 1024);
        }
    }

    /// Values longer than their caps are not captured: the kind stands
    /// (the relay still knows a request went by), the value is `None`; an
    /// error message is cut instead, as it is only shown to a person.
    #[test]
    fn values_beyond_their_caps_are_not_captured() {
        let long_id = format!(r#"{{"id":"{}","method":"x"}}"#, "i".repeat(ID_CAP - 1));
        let got = one(long_id.as_bytes());
        assert_eq!((got.kind, got.id), (Kind::Request, None));
        let fits = format!(r#"{{"id":"{}","method":"x"}}"#, "i".repeat(ID_CAP - 2));
        assert_eq!(one(fits.as_bytes()).id.map(|id| id.len()), Some(ID_CAP));

        let long_number = format!(r#"{{"id":{},"result":1}}"#, "9".repeat(ID_CAP + 1));
        let got = one(long_number.as_bytes());
        assert_eq!((got.kind, got.id), (Kind::Response, None));

        let long_method = format!(r#"{{"id":1,"method":"{}"}}"#, "m".repeat(METHOD_CAP + 1));
        let got = one(long_method.as_bytes());
        assert_eq!((got.kind, got.method), (Kind::Request, None));

        let long_key = format!(r#"{{"{}":1,"id":1,"method":"x"}}"#, "k".repeat(KEY_CAP + 1));
        assert_eq!(one(long_key.as_bytes()).kind, Kind::Request);

        let long_message = format!(
            r#"{{"id":1,"error":{{"code":1,"message":"{}"}}}}"#,
            "\u{e9}".repeat(MESSAGE_CAP)
        );
        let message = one(long_message.as_bytes()).message.unwrap();
        assert!(message.chars().all(|c| c == '\u{e9}'));
        assert_eq!(message.len(), MESSAGE_CAP);
        let cut_escape = format!(
            r#"{{"id":1,"error":{{"code":1,"message":"{}\u00e9"}}}}"#,
            "m".repeat(MESSAGE_CAP - 3)
        );
        let message = one(cut_escape.as_bytes()).message.unwrap();
        assert_eq!(message, "m".repeat(MESSAGE_CAP - 3));
    }

    /// Nesting is a counter: 100,000 levels neither overflow the stack nor
    /// confuse the line's own members, balanced or not.
    #[test]
    fn hostile_nesting_is_counted_not_recursed() {
        const DEEP: usize = 100_000;
        let balanced = format!(
            r#"{{"id":1,"method":"x","params":{}{}}}"#,
            "[{\"a\":".repeat(DEEP) + "1",
            "}]".repeat(DEEP)
        );
        let got = one(balanced.as_bytes());
        assert_eq!(
            (got.kind, got.method.as_deref()),
            (Kind::Request, Some("x"))
        );

        let in_error = format!(
            r#"{{"id":1,"error":{{"data":{}{},"message":"deep"}}}}"#,
            "[".repeat(DEEP),
            "]".repeat(DEEP)
        );
        assert_eq!(one(in_error.as_bytes()).message.as_deref(), Some("deep"));

        let unclosed = format!(r#"{{"id":1,"method":"x","params":{}}}"#, "[".repeat(DEEP));
        assert_eq!(one(unclosed.as_bytes()).kind, Kind::Other);
        assert_eq!(one("[".repeat(DEEP).as_bytes()).kind, Kind::Other);
        assert_eq!(one("]".repeat(DEEP).as_bytes()).kind, Kind::Other);

        let after = scan(
            &mut Scanner::new(),
            [unclosed.as_bytes(), b"\n{\"method\":\"y\"}\n"],
        );
        assert_eq!(
            after[1].kind,
            Kind::Notification,
            "the next line starts afresh"
        );
    }

    /// The relay replays the client's session setup after a reconnect: the
    /// recorder keeps exactly those lines, whole, and no others.
    #[test]
    fn recording_keeps_only_the_wanted_methods() {
        let stream = b"{\"jsonrpc\":\"2.0\",\"id\":\"c-1\",\"method\":\"initialize\",\"params\":{\"id\":\"c-1\"}}\r\n\
            {\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n\
            {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{}}\n\
            {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"method\":\"initialize\"}}\n\
            {\"params\":{\"level\":\"debug\"},\"method\":\"logging/setLevel\",\"id\":4}\n\
            {\"id\":5,\"method\":\"initialize\",\"result\":1}\n\
            [{\"id\":6,\"method\":\"initialize\"}]\n";
        let lines = scan(&mut Scanner::recording(REPLAYED), stream.chunks(7));
        let recorded: Vec<_> = lines.iter().filter_map(|l| l.line.clone()).collect();
        let expected: Vec<&[u8]> = stream
            .split_inclusive(|&b| b == b'\n')
            .enumerate()
            .filter(|(n, _)| [0, 1, 4].contains(n))
            .map(|(_, l)| l)
            .collect();
        assert_eq!(recorded, expected);

        let initialize = Envelope {
            kind: lines[0].kind,
            id: lines[0].id.as_deref(),
            id_offset: lines[0].id_offset,
            method: lines[0].method.as_deref(),
            error_message: None,
            len: lines[0].len,
            line: lines[0].line.as_deref(),
        };
        assert_eq!(
            initialize.line_with_id(b"\"bridge-1\"").unwrap(),
            &b"{\"jsonrpc\":\"2.0\",\"id\":\"bridge-1\",\"method\":\"initialize\",\"params\":{\"id\":\"c-1\"}}\r\n"[..]
        );
        let plain = scan(&mut Scanner::new(), [&stream[..]]);
        assert!(
            plain.iter().all(|l| l.line.is_none()),
            "only a recording scanner records"
        );
    }

    /// The client matches a response to its request by the id, byte for
    /// byte, so the error line echoes it exactly, and the message is
    /// escaped so the line is valid JSON on one line whatever it says.
    #[test]
    fn error_response_line_echoes_the_id_exactly() {
        for id in [
            "1",
            "9007199254740993",
            "-1.5e3",
            "null",
            r#""a\"b\\c\u00e9""#,
        ] {
            let message = "app \"x\" closed\nbefore answering \u{e9}";
            let line = error_response_line(id.as_bytes(), -32000, message);
            let expected = format!(
                r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32000,"message":"app \"x\" closed\nbefore answering {}"}}}}"#,
                id, "\u{e9}"
            ) + "\n";
            assert_eq!(String::from_utf8(line.clone()).unwrap(), expected);
            let scanned = one(&line[..line.len() - 1]);
            assert_eq!(scanned.kind, Kind::ErrorResponse);
            assert_eq!(scanned.id.as_deref(), Some(id.as_bytes()));
            assert_eq!(scanned.message.as_deref(), Some(message));
            let parsed: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(parsed["error"]["message"], message);
        }
    }

    /// The word-at-a-time search finds the first stop byte wherever it is,
    /// including just after bytes with the high bit set, and in the tail.
    #[test]
    fn string_stop_search_finds_the_first_stop_byte() {
        for len in 0..40 {
            for at in 0..len {
                for stop in [b'"', b'\\', b'\n'] {
                    let mut hay = vec![0xffu8; len];
                    for (n, b) in hay.iter_mut().enumerate() {
                        *b = [0xff, 0x80, b'a', 0x00, b'#', b'[', b'\r', 0x5b][n % 8];
                    }
                    hay[at] = stop;
                    if at + 1 < len {
                        hay[at + 1] = b'"';
                    }
                    assert_eq!(find_string_stop(&hay), Some(at), "{:?}", hay);
                    if stop == b'\n' {
                        assert_eq!(find_newline(&hay), Some(at));
                    }
                }
            }
            let plain = vec![b'x'; len];
            assert_eq!(find_string_stop(&plain), None);
            assert_eq!(find_newline(&plain), None);
        }
    }
}
