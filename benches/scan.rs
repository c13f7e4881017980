//! `cargo bench --bench scan`: how fast the envelope scanner reads typical
//! MCP traffic, in MiB/s of stream, with no I/O around it (see
//! BENCHMARKS.md).
//!
//! The scanner is crate-private, so this target compiles its source folder as
//! a module of its own: the very code the relay runs, built with the same
//! (release) profile. Each workload is a few MiB of lines fed in the relay's
//! read size, over and over; every pass checks the envelopes it got, so the
//! work cannot be optimised away and a wrong scanner cannot look fast.

// Only the scanner is used here, not the error-line writer beside it.
#[allow(dead_code, unused_imports)]
#[path = "../src/envelope/mod.rs"]
mod envelope;

use std::time::{Duration, Instant};

use envelope::{Kind, Scanner};
use mcp_bridge::relay::BUFFER_SIZE;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Size of each workload's buffer: larger than the caches, as a stream is.
const WORKLOAD: usize = 8 * MIB;
/// Stream scanned per measurement.
const VOLUME: usize = 256 * MIB;
/// Measurements per workload; the median is reported.
const ROUNDS: usize = 5;

/// A small xorshift generator, so every run scans the same bytes.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// JSON string contents (escaped) that look like source text: words,
/// an escaped newline every few dozen bytes, now and then `\"` and `\t`.
fn text(rng: &mut Rng, len: usize) -> String {
    let mut out = String::with_capacity(len + 16);
    let mut line = 0;
    while out.len() < len {
        match rng.below(20) {
            0 => out.push_str("\\\""),
            1 => out.push_str("\\t"),
            _ => {}
        }
        for _ in 0..2 + rng.below(8) {
            out.push((b'a' + rng.below(26) as u8) as char);
        }
        out.push(' ');
        line += 1;
        if line == 6 {
            out.push_str("\\n");
            line = 0;
        }
    }
    out.truncate(len);
    // Never end on half an escape.
    while out.ends_with('\\') {
        out.pop();
    }
    out
}

/// Base64-like contents: no escapes at all.
fn base64(rng: &mut Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len)
        .map(|_| ALPHABET[rng.below(ALPHABET.len())] as char)
        .collect()
}

/// One workload: lines appended until [`WORKLOAD`] bytes.
struct Workload {
    name: &'static str,
    line_size: String,
    bytes: Vec<u8>,
    lines: usize,
    kind: Kind,
}

fn workload(name: &'static str, kind: Kind, mut line: impl FnMut(usize) -> String) -> Workload {
    let mut bytes = Vec::with_capacity(WORKLOAD + MIB);
    let mut lines = 0;
    let mut longest = 0;
    while bytes.len() < WORKLOAD {
        let l = line(lines);
        longest = longest.max(l.len() + 1);
        bytes.extend_from_slice(l.as_bytes());
        bytes.push(b'\n');
        lines += 1;
    }
    let line_size = if longest >= KIB {
        format!("{} KiB", (longest + KIB / 2) / KIB)
    } else {
        format!("{} B", longest)
    };
    Workload {
        name,
        line_size,
        bytes,
        lines,
        kind,
    }
}

fn tools_call(id: usize, argument: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"/home/user/project/src/main.rs","content":"{}"}}}}}}"#,
        id, argument
    )
}

fn workloads() -> Vec<Workload> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let big = 64 * KIB - 140;
    let mut out = vec![
        workload("tools/call, source-text argument", Kind::Request, |id| {
            tools_call(id, &text(&mut rng, big))
        }),
        workload("tools/call, base64 argument", Kind::Request, |id| {
            tools_call(id, &base64(&mut rng, big))
        }),
    ];
    out.push(workload("small requests", Kind::Request, |id| {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"/home/user/project/src/"#,
            id
        );
        let pad = 200 - 1 - line.len() - r#".rs"}}}"#.len();
        format!("{}{}.rs\"}}}}}}", line, "m".repeat(pad))
    }));
    out.push(workload("small responses", Kind::Response, |id| {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":""#,
            id
        );
        let pad = 200 - 1 - line.len() - r#""}],"isError":false}}"#.len();
        format!(
            "{}{}\"}}],\"isError\":false}}}}",
            line,
            text(&mut Rng(id as u64 + 1), pad)
        )
    }));
    out.push(workload("tools/list result, many small objects", Kind::Response, |id| {
        let mut tools = Vec::new();
        let mut len = 0;
        let mut n = 0;
        while len < 64 * KIB - 200 {
            let tool = format!(
                r#"{{"name":"tool_{}","description":"Does thing {} to the project","inputSchema":{{"type":"object","properties":{{"path":{{"type":"string"}},"depth":{{"type":"integer","minimum":0}}}},"required":["path"]}}}}"#,
                n, n
            );
            len += tool.len() + 1;
            tools.push(tool);
            n += 1;
        }
        format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"tools":[{}]}}}}"#,
            id,
            tools.join(",")
        )
    }));
    out.push(workload("deeply nested document", Kind::Response, |id| {
        // 8 bytes per level: `{"a":[` down, `]}` up.
        let depth = 8 * KIB;
        format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{}1{}}}"#,
            id,
            "{\"a\":[".repeat(depth),
            "]}".repeat(depth)
        )
    }));
    out
}

/// Time this thread has spent on a CPU (Linux's schedstat), so that other
/// work on a shared machine does not count against the scanner.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// One measurement: wall time, and time on a CPU where known.
struct Took {
    wall: Duration,
    cpu: Option<Duration>,
}

/// Scans `passes` passes over `w`, checking each pass.
fn measure(w: &Workload, passes: usize) -> Took {
    let cpu_started = cpu_time();
    let started = Instant::now();
    for _ in 0..passes {
        let mut scanner = Scanner::new();
        let mut seen = 0;
        let mut right = 0;
        for chunk in w.bytes.chunks(BUFFER_SIZE) {
            scanner.feed(chunk, |e| {
                seen += 1;
                if e.kind == w.kind && e.id.is_some() {
                    right += 1;
                }
            });
        }
        assert!(!scanner.mid_line());
        assert_eq!((seen, right), (w.lines, w.lines), "{}", w.name);
    }
    let wall = started.elapsed();
    let cpu = match (cpu_started, cpu_time()) {
        (Some(start), Some(end)) => Some(end - start),
        _ => None,
    };
    Took { wall, cpu }
}

/// Median, lowest and highest.
fn spread(mut rates: Vec<f64>) -> (f64, f64, f64) {
    rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (rates[rates.len() / 2], rates[0], rates[rates.len() - 1])
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
    // target without it, with a debug build: not a benchmark.
    if !std::env::args().any(|a| a == "--bench") {
        println!("scan benchmark: skipped (run it with `cargo bench --bench scan`)");
        return;
    }
    println!(
        "envelope scanner, {} MiB per measurement in {} KiB chunks, median of {}",
        VOLUME / MIB,
        BUFFER_SIZE / KIB,
        ROUNDS
    );
    println!(
        "{:<38} {:>6} {:>18} {:>18}",
        "workload", "line", "MiB/s on CPU", "MiB/s wall"
    );
    for w in workloads() {
        let passes = (VOLUME / w.bytes.len()).max(1);
        let scanned = (passes * w.bytes.len()) as f64 / MIB as f64;
        measure(&w, 1); // warm up
        let took: Vec<Took> = (0..ROUNDS).map(|_| measure(&w, passes)).collect();
        let show = |(median, low, high): (f64, f64, f64)| {
            format!("{:.0} ({:.0}-{:.0})", median, low, high)
        };
        let wall = spread(
            took.iter()
                .map(|t| scanned / t.wall.as_secs_f64())
                .collect(),
        );
        let cpu = took
            .iter()
            .map(|t| t.cpu.map(|c| scanned / c.as_secs_f64()))
            .collect::<Option<Vec<f64>>>()
            .map_or_else(|| "-".to_string(), |rates| show(spread(rates)));
        println!(
            "{:<38} {:>6} {:>18} {:>18}",
            w.name,
            w.line_size,
            cpu,
            show(wall)
        );
    }
}
