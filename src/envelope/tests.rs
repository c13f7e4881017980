use super::fast::find_string_stop;
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
    let chunk = b"{\"id\":1,\"method\":\"a\"}\n{\"method\":\"b\"}\r\n\n{\"id\":1,\"result\":{}}\n";
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

    // The id's offset points into the recorded line, which is what the
    // bridge's replay relies on to put its own id in the client's place.
    let (line, id) = (
        lines[0].line.as_deref().unwrap(),
        lines[0].id.as_deref().unwrap(),
    );
    let start = lines[0].id_offset as usize;
    assert_eq!(&line[start..start + id.len()], id);
    assert_eq!(
        [&line[..start], b"\"bridge-1\"", &line[start + id.len()..]].concat(),
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

/// The array walker the bridge (batch lines) and doctor (pages) share:
/// strings and nesting hide their commas and brackets, blanks around an
/// element and a byte order mark are not part of it, and only an array is
/// walked.
#[test]
fn array_elements_are_cut_at_top_level_commas_only() {
    let elements = |json: &[u8]| {
        let mut found = Vec::new();
        let is_array = super::json::for_each_array_element(json, &mut |e| {
            found.push(String::from_utf8(e.to_vec()).unwrap())
        });
        (is_array, found)
    };
    let line = b"\xEF\xBB\xBF [ {\"a\":\"x],\\\"{\"} , [1,[2]],\"s,]\" ,3 ]\n";
    assert_eq!(
        elements(line),
        (
            true,
            vec![
                "{\"a\":\"x],\\\"{\"}".to_string(),
                "[1,[2]]".to_string(),
                "\"s,]\"".to_string(),
                "3".to_string(),
            ]
        )
    );
    assert_eq!(elements(b"[]"), (true, vec![]));
    assert_eq!(elements(b"[ ]\n"), (true, vec![]));
    assert_eq!(elements(b"{\"id\":1}"), (false, vec![]));
    assert_eq!(elements(b""), (false, vec![]));
}
