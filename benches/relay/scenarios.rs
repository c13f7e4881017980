//! The scenarios each round runs: strict round trips (latency and spawn to
//! first reply), a host hang-up, and throughput with every byte of the echo
//! checked against what was sent.

use std::io::{self, Read, Write};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::host::{Behaviour, Host};
use crate::plan::{Figures, Mode, Plan, Tool, KIB, MIB};
use crate::session::{Exit, Session};

/// The round-trip line: a typical small JSON-RPC message.
const SMALL_LINE: usize = 200;

/// Length of the pseudo-random pattern lines are cut from (a prime, so
/// lines starting at different offsets differ).
const PATTERN_LEN: usize = 1_048_573;
/// Largest single write the client makes (longer lines go in pieces).
const WRITE_CHUNK: usize = MIB as usize;

/// Pseudo-random bytes without `\n`, stored twice so that any window of
/// up to `PATTERN_LEN` bytes is one contiguous slice.
pub fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut p: Vec<u8> = (0..PATTERN_LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b' ' + (x % 94) as u8
        })
        .collect();
    p.extend_from_within(..);
    p
}

/// A stream of `lines` lines of `line_len` bytes each (the last one is
/// `\n`); line `i` starts at its own offset in the pattern.
#[derive(Clone, Copy)]
pub struct Stream {
    pub line_len: u64,
    pub lines: u64,
}

impl Stream {
    pub fn total(self) -> u64 {
        self.line_len * self.lines
    }

    /// Calls `f` with consecutive slices of the stream starting at
    /// `offset`, `len` bytes in all, until `f` returns false.
    pub fn each(self, pattern: &[u8], offset: u64, len: usize, mut f: impl FnMut(&[u8]) -> bool) {
        let mut at = offset;
        let end = offset + len as u64;
        while at < end {
            let line = at / self.line_len;
            let col = at % self.line_len;
            let slice: &[u8] = if col == self.line_len - 1 {
                b"\n"
            } else {
                let start = ((line * 7919 + col) % PATTERN_LEN as u64) as usize;
                let n = (self.line_len - 1 - col).min(end - at) as usize;
                &pattern[start..start + n.min(PATTERN_LEN)]
            };
            if !f(slice) {
                return;
            }
            at += slice.len() as u64;
        }
    }
}

/// Results of one throughput session.
pub struct Flow {
    pub elapsed: Duration,
    pub cpu_ns: Option<u64>,
    pub peak_rss: Option<u64>,
    pub exit: Exit,
}

/// Sends `stream` from one thread while this one reads and verifies the
/// echo byte for byte.
pub fn flow(
    tool: Tool,
    mode: Mode,
    host: &Host,
    plan: &Plan,
    pattern: &Arc<Vec<u8>>,
    stream: Stream,
) -> Result<Flow, String> {
    let mut s = Session::start(tool, mode, host, Behaviour::Echo, plan.stall_limit)
        .map_err(|e| format!("spawn: {}", e))?;
    let mut input = s.input.take().expect("stdin");
    let writer_pattern = pattern.clone();
    let start = Instant::now();
    let writer = thread::spawn(move || -> io::Result<Box<dyn Write + Send>> {
        let mut buf = Vec::with_capacity(WRITE_CHUNK);
        let mut at = 0;
        while at < stream.total() {
            // One write per line, or per MiB of a longer line.
            let line_left = stream.line_len - at % stream.line_len;
            let n = line_left.min(WRITE_CHUNK as u64) as usize;
            buf.clear();
            stream.each(&writer_pattern, at, n, |piece| {
                buf.extend_from_slice(piece);
                true
            });
            input.write_all(&buf)?;
            at += n as u64;
        }
        Ok(input)
    });
    let verified = read_verified(&mut s.output, pattern, stream);
    let elapsed = start.elapsed();
    let cpu_ns = s.cpu_ns();
    let peak_rss = s.peak_rss();
    let input = writer.join().map_err(|_| "writer panicked".to_string())?;
    match (verified, input) {
        (Ok(()), Ok(input)) => {
            s.input = Some(input);
            let exit = s.close_and_wait()?;
            Ok(Flow {
                elapsed,
                cpu_ns,
                peak_rss,
                exit,
            })
        }
        (Err(e), _) => Err(s.abandon(host, e)),
        (_, Err(e)) => Err(s.abandon(host, format!("writing stdin: {}", e))),
    }
}

fn read_verified(output: &mut dyn Read, pattern: &[u8], stream: Stream) -> Result<(), String> {
    let mut buf = vec![0u8; 256 * KIB as usize];
    let mut at = 0u64;
    while at < stream.total() {
        let want = (stream.total() - at).min(buf.len() as u64) as usize;
        let n = match output.read(&mut buf[..want]) {
            Ok(0) => {
                return Err(format!(
                    "output ended after {} of {} bytes",
                    at,
                    stream.total()
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading stdout: {}", e)),
        };
        let mut got = &buf[..n];
        let mut same = true;
        stream.each(pattern, at, n, |expected| {
            same = got[..expected.len()] == *expected;
            got = &got[expected.len()..];
            same
        });
        if !same {
            return Err(format!("wrong bytes in the block at offset {}", at));
        }
        at += n as u64;
    }
    Ok(())
}

/// Writes one small line and reads its echo, checking it.
fn round_trip(s: &mut Session, line: &mut [u8], i: usize) -> Result<Duration, String> {
    let tag = format!("{:08}", i);
    line[1..9].copy_from_slice(tag.as_bytes());
    let start = Instant::now();
    s.send(line).map_err(|e| format!("writing stdin: {}", e))?;
    let mut back = [0u8; SMALL_LINE];
    s.output
        .read_exact(&mut back)
        .map_err(|e| format!("reading stdout: {}", e))?;
    let took = start.elapsed();
    if back[..] != line[..] {
        return Err("wrong reply bytes".into());
    }
    Ok(took)
}

fn small_line() -> Vec<u8> {
    let mut line = vec![b'x'; SMALL_LINE];
    let body = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{}}";
    line[10..10 + body.len()].copy_from_slice(body);
    line[0] = b'#';
    line[SMALL_LINE - 1] = b'\n';
    line
}

/// A session of `n` round trips; the first one's time from spawn is the
/// spawn-to-first-reply figure.
pub fn ping(
    tool: Tool,
    mode: Mode,
    host: &Host,
    plan: &Plan,
    n: usize,
    out: &mut Figures,
) -> Result<(), String> {
    let mut s = Session::start(tool, mode, host, Behaviour::Echo, plan.stall_limit)
        .map_err(|e| format!("spawn: {}", e))?;
    let mut line = small_line();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        match round_trip(&mut s, &mut line, i) {
            Ok(t) => {
                if i == 0 {
                    out.spawn.push(s.spawned.elapsed().as_secs_f64());
                } else {
                    times.push(t.as_secs_f64());
                }
            }
            Err(e) => return Err(s.abandon(host, e)),
        }
    }
    if let Some(rss) = s.peak_rss() {
        out.rss_idle.push(rss as f64);
    }
    let exit = s.close_and_wait()?;
    out.latency.extend(times);
    out.eof_exit.push(exit.eof_to_exit.as_secs_f64());
    Ok(())
}

/// One round trip, then the host hangs up; times the child's exit.
pub fn hang_up(tool: Tool, mode: Mode, host: &Host, plan: &Plan) -> Result<f64, String> {
    let (go_tx, go) = mpsc::channel();
    let (when, when_rx) = mpsc::channel();
    let behaviour = Behaviour::HangUp {
        after: SMALL_LINE,
        go,
        when,
    };
    let mut s = Session::start(tool, mode, host, behaviour, plan.stall_limit)
        .map_err(|e| format!("spawn: {}", e))?;
    let mut line = small_line();
    if let Err(e) = round_trip(&mut s, &mut line, 0) {
        return Err(s.abandon(host, e));
    }
    let _ = go_tx.send(());
    let hung_up = match when_rx.recv() {
        Ok(t) => t,
        Err(_) => return Err(s.abandon(host, "host did not hang up".into())),
    };
    let exited = s.wait_exit()?;
    s.finish(Duration::ZERO)?;
    Ok((exited - hung_up).as_secs_f64())
}
