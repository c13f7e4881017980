//! `cargo bench`: the built `mcp-bridge` side by side with
//! `socat STDIO UNIX-CONNECT:<path>` (what users would otherwise put in the
//! same `{command, args}` slot), against an echo host of our own on a Unix
//! socket, with the child's stdio as pipes and as socketpairs.
//!
//! Every session spawns a fresh child, and the two commands alternate
//! session by session over several rounds, so drift on the machine hits both
//! alike. Every byte that comes back is compared with what was sent, and a
//! watchdog kills (and reports) any session that stalls. The output is one
//! plain table with each figure's ratio to socat. See BENCHMARKS.md.
//!
//! `MCP_BRIDGE_BENCH_QUICK=1` runs one short round (a smoke test, not
//! figures to quote); `MCP_BRIDGE_BENCH_ROUNDS=N` sets the number of rounds;
//! `MCP_BRIDGE_BENCH_ONLY=latency,pipes` (any of latency, spawn, hangup, flow,
//! pipes, socketpairs) runs only the named scenarios and stdio modes;
//! `MCP_BRIDGE_BENCH_BRIDGE=<path>` measures another build of the bridge.

#[cfg(unix)]
fn main() {
    bench::main()
}

#[cfg(not(unix))]
fn main() {
    println!("the relay benchmark runs on Unix only");
}

#[cfg(unix)]
mod bench {
    use std::fmt::Write as _;
    use std::fs;
    use std::io::{self, Read, Write};
    use std::os::unix::io::OwnedFd;
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::thread::{self, JoinHandle};
    use std::time::{Duration, Instant};

    use mcp_bridge::handshake::Handshake;
    use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

    /// The binary `cargo bench` built with the bench (release) profile,
    /// unless `MCP_BRIDGE_BENCH_BRIDGE` names another build to measure.
    fn bridge() -> PathBuf {
        std::env::var_os("MCP_BRIDGE_BENCH_BRIDGE").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_mcp-bridge")),
            PathBuf::from,
        )
    }

    const PROJECT: &str = "bench";
    const REQUESTER: &str = "bench";

    /// The round-trip line: a typical small JSON-RPC message.
    const SMALL_LINE: usize = 200;
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: f64 = (1024 * MIB) as f64;

    /// Length of the pseudo-random pattern lines are cut from (a prime, so
    /// lines starting at different offsets differ).
    const PATTERN_LEN: usize = 1_048_573;
    /// Largest single write the client makes (longer lines go in pieces).
    const WRITE_CHUNK: usize = MIB as usize;

    /// How much work one run does.
    struct Plan {
        rounds: usize,
        round_trips: usize,
        spawns: usize,
        hangups: usize,
        /// Bytes per throughput session with 64 KiB and 1 MiB lines.
        stream_bytes: u64,
        /// Length of the one-line session.
        huge_line: u64,
        /// A session taking longer than this has stalled and is killed.
        stall_limit: Duration,
        /// `MCP_BRIDGE_BENCH_ONLY`: scenarios and modes to run (all if none
        /// of either kind is named).
        only: Vec<String>,
    }

    impl Plan {
        fn from_env() -> Plan {
            let quick = std::env::var_os("MCP_BRIDGE_BENCH_QUICK").map_or(false, |v| v != "0");
            let mut plan = if quick {
                Plan {
                    rounds: 1,
                    round_trips: 300,
                    spawns: 3,
                    hangups: 2,
                    stream_bytes: 32 * MIB,
                    huge_line: 64 * MIB,
                    stall_limit: Duration::from_secs(20),
                    only: Vec::new(),
                }
            } else {
                Plan {
                    rounds: 5,
                    round_trips: 2000,
                    spawns: 10,
                    hangups: 5,
                    stream_bytes: 256 * MIB,
                    huge_line: 256 * MIB,
                    stall_limit: Duration::from_secs(30),
                    only: Vec::new(),
                }
            };
            if let Some(n) = std::env::var("MCP_BRIDGE_BENCH_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                plan.rounds = n;
            }
            if let Ok(only) = std::env::var("MCP_BRIDGE_BENCH_ONLY") {
                plan.only = only.split(',').map(|w| w.trim().to_string()).collect();
            }
            plan
        }

        /// Whether `what` (a scenario or a mode, one of `kinds`) is to run.
        fn wants(&self, what: &str, kinds: &[&str]) -> bool {
            let named = |w: &str| self.only.iter().any(|o| o == w);
            !kinds.iter().any(|k| named(k)) || named(what)
        }

        fn runs(&self, scenario: &str) -> bool {
            self.wants(scenario, &["latency", "spawn", "hangup", "flow"])
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Tool {
        Bridge,
        Socat,
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Pipes,
        Socketpairs,
    }

    impl Tool {
        fn name(self) -> &'static str {
            match self {
                Tool::Bridge => "mcp-bridge",
                Tool::Socat => "socat",
            }
        }
    }

    impl Mode {
        fn name(self) -> &'static str {
            match self {
                Mode::Pipes => "pipes",
                Mode::Socketpairs => "socketpairs",
            }
        }
    }

    /// What the echo host does with one connection.
    enum Behaviour {
        /// Echo everything; close as soon as the client's EOF arrives.
        Echo,
        /// Echo `n` bytes, then wait for the signal and hang up, sending the
        /// moment it did so back.
        HangUp {
            after: usize,
            go: mpsc::Receiver<()>,
            when: mpsc::Sender<Instant>,
        },
    }

    /// The app's side: a listening Unix socket in a private directory.
    struct Host {
        dir: PathBuf,
        path: PathBuf,
        listener: UnixListener,
    }

    impl Host {
        fn new() -> io::Result<Host> {
            let dir = std::env::temp_dir().join(format!("mcp-bridge-bench-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir)?;
            let path = dir.join("host.sock");
            let listener = UnixListener::bind(&path)?;
            Ok(Host {
                dir,
                path,
                listener,
            })
        }

        /// Starts a thread that accepts the next connection and serves it.
        /// The bridge's handshake line is checked and consumed; socat sends
        /// none. Returns the bytes echoed.
        fn serve_one(
            &self,
            handshake: Option<Vec<u8>>,
            behaviour: Behaviour,
        ) -> io::Result<JoinHandle<io::Result<u64>>> {
            let listener = self.listener.try_clone()?;
            Ok(thread::spawn(move || {
                let (mut conn, _) = listener.accept()?;
                let mut buf = vec![0u8; 256 * KIB as usize];
                let mut have = 0;
                if let Some(expected) = handshake {
                    // Read until the newline, keeping whatever follows it.
                    let end = loop {
                        if let Some(i) = buf[..have].iter().position(|&b| b == b'\n') {
                            break i + 1;
                        }
                        let n = conn.read(&mut buf[have..])?;
                        if n == 0 {
                            return Err(broken("connection closed before the handshake"));
                        }
                        have += n;
                    };
                    if buf[..end] != expected[..] {
                        return Err(broken("wrong handshake line"));
                    }
                    buf.copy_within(end..have, 0);
                    have -= end;
                }
                let mut echoed = 0u64;
                let limit = match behaviour {
                    Behaviour::Echo => u64::MAX,
                    Behaviour::HangUp { after, .. } => after as u64,
                };
                while echoed < limit {
                    if have == 0 {
                        have = conn.read(&mut buf)?;
                        if have == 0 {
                            break;
                        }
                    }
                    conn.write_all(&buf[..have])?;
                    echoed += have as u64;
                    have = 0;
                }
                if let Behaviour::HangUp { go, when, .. } = behaviour {
                    let _ = go.recv();
                    let now = Instant::now();
                    conn.shutdown(std::net::Shutdown::Both)?;
                    drop(conn);
                    let _ = when.send(now);
                }
                Ok(echoed)
            }))
        }

        /// Unblocks a `serve_one` thread whose client never connected.
        fn release(&self) {
            let _ = UnixStream::connect(&self.path);
        }
    }

    impl Drop for Host {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn broken(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::Other, what.to_string())
    }

    /// Kills the child if the session outlives the stall limit.
    struct Watchdog {
        done: Option<mpsc::Sender<()>>,
        thread: Option<JoinHandle<()>>,
        fired: Arc<AtomicBool>,
    }

    impl Watchdog {
        fn start(pid: Pid, limit: Duration) -> Watchdog {
            let (done, wait) = mpsc::channel::<()>();
            let fired = Arc::new(AtomicBool::new(false));
            let flag = fired.clone();
            let thread = thread::spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                    flag.store(true, Ordering::SeqCst);
                    let _ = rustix::process::kill_process(pid, Signal::KILL);
                }
            });
            Watchdog {
                done: Some(done),
                thread: Some(thread),
                fired,
            }
        }

        /// Disarms the watchdog; after this it can no longer kill (so the
        /// child may be reaped and its pid reused). Tells whether it fired.
        fn stop(&mut self) -> bool {
            drop(self.done.take());
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            self.fired.load(Ordering::SeqCst)
        }
    }

    /// One spawned child with its stdio, its host thread and its watchdog.
    struct Session {
        child: Child,
        pid: Pid,
        input: Option<Box<dyn Write + Send>>,
        output: Box<dyn Read + Send>,
        host: Option<JoinHandle<io::Result<u64>>>,
        watchdog: Watchdog,
        spawned: Instant,
    }

    /// What a finished session measured besides its traffic.
    struct Exit {
        eof_to_exit: Duration,
    }

    fn command(tool: Tool, endpoint: &Path) -> Command {
        match tool {
            Tool::Bridge => {
                let mut c = Command::new(bridge());
                c.arg("mcp-server").arg("--endpoint").arg(endpoint).args([
                    "--project",
                    PROJECT,
                    "--requester",
                    REQUESTER,
                ]);
                c
            }
            Tool::Socat => {
                let mut c = Command::new("socat");
                let mut target = std::ffi::OsString::from("UNIX-CONNECT:");
                target.push(endpoint);
                c.arg("STDIO").arg(target);
                c
            }
        }
    }

    impl Session {
        fn start(
            tool: Tool,
            mode: Mode,
            host: &Host,
            behaviour: Behaviour,
            limit: Duration,
        ) -> io::Result<Session> {
            let handshake = match tool {
                Tool::Bridge => Some(Handshake::new(PROJECT, REQUESTER).to_line()),
                Tool::Socat => None,
            };
            let host_thread = host.serve_one(handshake, behaviour)?;
            let mut cmd = command(tool, &host.path);
            cmd.stderr(Stdio::inherit());
            let (input, output): (Option<Box<dyn Write + Send>>, Box<dyn Read + Send>);
            let spawned;
            let mut child;
            match mode {
                Mode::Pipes => {
                    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
                    spawned = Instant::now();
                    child = cmd.spawn()?;
                    input = Some(Box::new(child.stdin.take().expect("piped stdin")));
                    output = Box::new(child.stdout.take().expect("piped stdout"));
                }
                Mode::Socketpairs => {
                    let (stdin_ours, stdin_theirs) = UnixStream::pair()?;
                    let (stdout_ours, stdout_theirs) = UnixStream::pair()?;
                    cmd.stdin(Stdio::from(OwnedFd::from(stdin_theirs)))
                        .stdout(Stdio::from(OwnedFd::from(stdout_theirs)));
                    spawned = Instant::now();
                    child = cmd.spawn()?;
                    input = Some(Box::new(stdin_ours));
                    output = Box::new(stdout_ours);
                }
            }
            // The command holds the child's ends of the socketpairs: drop
            // them, or the child would never see EOF on its stdin.
            drop(cmd);
            let pid = Pid::from_raw(child.id() as i32).expect("child pid");
            Ok(Session {
                child,
                pid,
                input,
                output,
                host: Some(host_thread),
                watchdog: Watchdog::start(pid, limit),
                spawned,
            })
        }

        fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
            match self.input.as_mut() {
                Some(input) => input.write_all(bytes),
                None => Err(broken("stdin already closed")),
            }
        }

        /// Peak resident set (`VmHWM`) of the child, in bytes.
        fn peak_rss(&self) -> Option<u64> {
            let status =
                fs::read_to_string(format!("/proc/{}/status", self.pid.as_raw_nonzero())).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * KIB)
        }

        /// CPU time used so far by all the child's threads, in nanoseconds
        /// (`/proc/<pid>/task/*/schedstat`, nanosecond resolution).
        fn cpu_ns(&self) -> Option<u64> {
            let dir = format!("/proc/{}/task", self.pid.as_raw_nonzero());
            let mut total = 0;
            for task in fs::read_dir(dir).ok()? {
                let stat = fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
                total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
            }
            Some(total)
        }

        /// Closes the child's stdin and waits for it to exit, timing that.
        /// The output must then hold no byte more.
        fn close_and_wait(mut self) -> Result<Exit, String> {
            let closed = Instant::now();
            drop(self.input.take());
            let exited = self.wait_exit()?;
            self.finish(exited - closed)
        }

        /// Blocks until the child has exited without reaping it (the
        /// watchdog may still need its pid), and says when.
        fn wait_exit(&mut self) -> Result<Instant, String> {
            loop {
                match rustix::process::waitid(
                    WaitId::Pid(self.pid),
                    WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
                ) {
                    Ok(_) => return Ok(Instant::now()),
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(format!("waitid: {}", e)),
                }
            }
        }

        /// Checks the end of the session: no extra output, a clean exit, a
        /// host that saw no error, no stall.
        fn finish(mut self, eof_to_exit: Duration) -> Result<Exit, String> {
            let mut extra = Vec::new();
            let _ = self.output.read_to_end(&mut extra);
            let stalled = self.watchdog.stop();
            let status = self.child.wait().map_err(|e| e.to_string())?;
            let host = self.host.take().expect("host thread").join();
            if stalled {
                return Err("STALLED: killed by the watchdog".into());
            }
            if !extra.is_empty() {
                return Err(format!("{} unexpected bytes after the data", extra.len()));
            }
            if !status.success() {
                return Err(format!("child exited with {}", status));
            }
            match host {
                Ok(Ok(_)) => Ok(Exit { eof_to_exit }),
                Ok(Err(e)) => Err(format!("host: {}", e)),
                Err(_) => Err("host thread panicked".into()),
            }
        }

        /// Ends a failed session: kill, reap, release the host thread.
        fn abandon(mut self, host: &Host, why: String) -> String {
            let stalled = self.watchdog.stop();
            let _ = self.child.kill();
            let _ = self.child.wait();
            drop(self.input.take());
            if let Some(h) = self.host.take() {
                if !h.is_finished() {
                    host.release();
                }
                let _ = h.join();
            }
            if stalled {
                format!("STALLED (killed by the watchdog): {}", why)
            } else {
                why
            }
        }
    }

    /// Pseudo-random bytes without `\n`, stored twice so that any window of
    /// up to `PATTERN_LEN` bytes is one contiguous slice.
    fn pattern() -> Vec<u8> {
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
    struct Stream {
        line_len: u64,
        lines: u64,
    }

    impl Stream {
        fn total(self) -> u64 {
            self.line_len * self.lines
        }

        /// Calls `f` with consecutive slices of the stream starting at
        /// `offset`, `len` bytes in all, until `f` returns false.
        fn each(self, pattern: &[u8], offset: u64, len: usize, mut f: impl FnMut(&[u8]) -> bool) {
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
    struct Flow {
        elapsed: Duration,
        cpu_ns: Option<u64>,
        peak_rss: Option<u64>,
        exit: Exit,
    }

    /// Sends `stream` from one thread while this one reads and verifies the
    /// echo byte for byte.
    fn flow(
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
    fn ping(
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
    fn hang_up(tool: Tool, mode: Mode, host: &Host, plan: &Plan) -> Result<f64, String> {
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

    /// Everything measured for one command in one stdio mode.
    #[derive(Default)]
    struct Figures {
        latency: Vec<f64>,
        spawn: Vec<f64>,
        eof_exit: Vec<f64>,
        hangup_exit: Vec<f64>,
        rss_idle: Vec<f64>,
        /// Per kind of stream: MiB/s per session, CPU s per GiB per session.
        rate: [Vec<f64>; 3],
        cpu: [Vec<f64>; 3],
        rss_huge: Vec<f64>,
        failures: Vec<String>,
    }

    fn run_round(
        tool: Tool,
        mode: Mode,
        host: &Host,
        plan: &Plan,
        pattern: &Arc<Vec<u8>>,
        out: &mut Figures,
    ) {
        let note = |r: Result<(), String>, what: &str| {
            if let Err(e) = r {
                eprintln!("  {} {} {}: {}", tool.name(), mode.name(), what, e);
                Some(format!("{}: {}", what, e))
            } else {
                None
            }
        };
        if plan.runs("latency") {
            let r = ping(tool, mode, host, plan, plan.round_trips, out);
            if let Some(f) = note(r, "round trips") {
                out.failures.push(f);
            }
        }
        for _ in 0..if plan.runs("spawn") { plan.spawns } else { 0 } {
            let r = ping(tool, mode, host, plan, 1, out);
            if let Some(f) = note(r, "spawn") {
                out.failures.push(f);
            }
        }
        for _ in 0..if plan.runs("hangup") { plan.hangups } else { 0 } {
            let r = hang_up(tool, mode, host, plan).map(|t| out.hangup_exit.push(t));
            if let Some(f) = note(r, "hang-up") {
                out.failures.push(f);
            }
        }
        let streams = [
            Stream {
                line_len: 64 * KIB,
                lines: plan.stream_bytes / (64 * KIB),
            },
            Stream {
                line_len: MIB,
                lines: plan.stream_bytes / MIB,
            },
            Stream {
                line_len: plan.huge_line,
                lines: 1,
            },
        ];
        for (k, stream) in streams.iter().enumerate().filter(|_| plan.runs("flow")) {
            match flow(tool, mode, host, plan, pattern, *stream) {
                Ok(f) => {
                    let secs = f.elapsed.as_secs_f64();
                    out.rate[k].push(stream.total() as f64 / MIB as f64 / secs);
                    if let Some(ns) = f.cpu_ns {
                        out.cpu[k].push(ns as f64 / 1e9 / (stream.total() as f64 / GIB));
                    }
                    if let (2, Some(rss)) = (k, f.peak_rss) {
                        out.rss_huge.push(rss as f64);
                    }
                    out.eof_exit.push(f.exit.eof_to_exit.as_secs_f64());
                }
                Err(e) => {
                    let what = ["64 KiB lines", "1 MiB lines", "one huge line"][k];
                    eprintln!("  {} {} {}: {}", tool.name(), mode.name(), what, e);
                    out.failures.push(format!("{}: {}", what, e));
                }
            }
        }
    }

    fn percentile(values: &[f64], p: f64) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let i = ((v.len() - 1) as f64 * p).round() as usize;
        Some(v[i])
    }

    fn max(values: &[f64]) -> Option<f64> {
        values
            .iter()
            .copied()
            .fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
    }

    /// How a target is expressed.
    enum Target {
        None,
        /// Ratio to socat at most this.
        RatioAtMost(f64),
        /// Ratio to socat at least this.
        RatioAtLeast(f64),
        /// Absolute value at most this (in the row's unit).
        AtMost(f64),
    }

    struct Row {
        name: &'static str,
        unit: &'static str,
        scale: f64,
        target: Target,
        get: fn(&Figures) -> Option<f64>,
    }

    fn rows() -> Vec<Row> {
        vec![
            Row {
                name: "round trip p50, 200 B line",
                unit: "us",
                scale: 1e6,
                target: Target::RatioAtMost(1.0),
                get: |f| percentile(&f.latency, 0.5),
            },
            Row {
                name: "round trip p99, 200 B line",
                unit: "us",
                scale: 1e6,
                target: Target::None,
                get: |f| percentile(&f.latency, 0.99),
            },
            Row {
                name: "throughput, 64 KiB lines",
                unit: "MiB/s",
                scale: 1.0,
                target: Target::RatioAtLeast(2.0),
                get: |f| percentile(&f.rate[0], 0.5),
            },
            Row {
                name: "throughput, 1 MiB lines",
                unit: "MiB/s",
                scale: 1.0,
                target: Target::None,
                get: |f| percentile(&f.rate[1], 0.5),
            },
            Row {
                name: "throughput, one huge line",
                unit: "MiB/s",
                scale: 1.0,
                target: Target::None,
                get: |f| percentile(&f.rate[2], 0.5),
            },
            Row {
                name: "CPU per GiB, 64 KiB lines",
                unit: "s",
                scale: 1.0,
                target: Target::RatioAtMost(0.6),
                get: |f| percentile(&f.cpu[0], 0.5),
            },
            Row {
                name: "CPU per GiB, 1 MiB lines",
                unit: "s",
                scale: 1.0,
                target: Target::RatioAtMost(0.6),
                get: |f| percentile(&f.cpu[1], 0.5),
            },
            Row {
                name: "CPU per GiB, one huge line",
                unit: "s",
                scale: 1.0,
                target: Target::RatioAtMost(0.6),
                get: |f| percentile(&f.cpu[2], 0.5),
            },
            Row {
                name: "spawn to first reply p50",
                unit: "ms",
                scale: 1e3,
                target: Target::RatioAtMost(0.6),
                get: |f| percentile(&f.spawn, 0.5),
            },
            Row {
                name: "stdin EOF to exit p50",
                unit: "ms",
                scale: 1e3,
                target: Target::AtMost(5.0),
                get: |f| percentile(&f.eof_exit, 0.5),
            },
            Row {
                name: "stdin EOF to exit max",
                unit: "ms",
                scale: 1e3,
                target: Target::None,
                get: |f| max(&f.eof_exit),
            },
            Row {
                name: "host hang-up to exit p50",
                unit: "ms",
                scale: 1e3,
                target: Target::AtMost(50.0),
                get: |f| percentile(&f.hangup_exit, 0.5),
            },
            Row {
                name: "peak RSS, one huge line",
                unit: "MiB",
                scale: 1.0 / MIB as f64,
                target: Target::AtMost(3.0),
                get: |f| max(&f.rss_huge),
            },
            Row {
                name: "peak RSS, idle session",
                unit: "MiB",
                scale: 1.0 / MIB as f64,
                target: Target::None,
                get: |f| max(&f.rss_idle),
            },
        ]
    }

    fn verdict(target: &Target, value: f64, ratio: Option<f64>) -> &'static str {
        let ok = match *target {
            Target::None => return "",
            Target::RatioAtMost(r) => ratio.map(|x| x <= r),
            Target::RatioAtLeast(r) => ratio.map(|x| x >= r),
            Target::AtMost(v) => Some(value <= v),
        };
        match ok {
            Some(true) => "ok",
            Some(false) => "MISSED",
            None => "?",
        }
    }

    fn target_text(target: &Target, unit: &str) -> String {
        match *target {
            Target::None => String::new(),
            Target::RatioAtMost(r) => format!("<= {:.1}x", r),
            Target::RatioAtLeast(r) => format!(">= {:.1}x", r),
            Target::AtMost(v) => format!("<= {} {}", v, unit),
        }
    }

    fn table(results: &[(Mode, Figures, Option<Figures>)]) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<28} {:<6} {:>11} {:>11} {:>7}  target",
            "", "unit", "mcp-bridge", "socat", "ratio"
        );
        for (mode, bridge, socat) in results {
            let _ = writeln!(t, "-- stdio as {}", mode.name());
            for row in rows() {
                let b = (row.get)(bridge).map(|v| v * row.scale);
                let s = socat
                    .as_ref()
                    .and_then(|f| (row.get)(f))
                    .map(|v| v * row.scale);
                let ratio = match (b, s) {
                    (Some(b), Some(s)) if s > 0.0 => Some(b / s),
                    _ => None,
                };
                let fmt = |v: Option<f64>| match v {
                    Some(v) if v >= 100.0 => format!("{:.0}", v),
                    Some(v) if v >= 10.0 => format!("{:.1}", v),
                    Some(v) => format!("{:.3}", v),
                    None => "-".into(),
                };
                let _ = writeln!(
                    t,
                    "{:<28} {:<6} {:>11} {:>11} {:>7}  {:<10} {}",
                    row.name,
                    row.unit,
                    fmt(b),
                    fmt(s),
                    ratio.map_or("-".into(), |r| format!("{:.2}x", r)),
                    target_text(&row.target, row.unit),
                    b.map_or("?", |b| verdict(&row.target, b, ratio)),
                );
            }
        }
        t
    }

    /// The release binary's size, stripped (a copy is stripped if `strip` is
    /// installed; the profile already strips).
    fn binary_size() -> String {
        let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let copy =
            std::env::temp_dir().join(format!("mcp-bridge-bench-bin-{}", std::process::id()));
        let stripped = fs::copy(bridge(), &copy).is_ok()
            && Command::new("strip")
                .arg(&copy)
                .stderr(Stdio::null())
                .status()
                .map_or(false, |s| s.success());
        let bytes = if stripped {
            size(&copy)
        } else {
            size(&bridge())
        };
        let _ = fs::remove_file(&copy);
        let socat = Command::new("sh")
            .args([
                "-c",
                "p=$(command -v socat) && stat -L -c %s \"$p\" && ldd \"$p\" | grep -c '=>'",
            ])
            .output()
            .ok()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let socat = match socat.as_slice() {
            [bytes, libs] => format!(
                "; socat: {} KiB + {} shared libraries",
                bytes.parse::<u64>().unwrap_or(0) / KIB,
                libs
            ),
            _ => String::new(),
        };
        format!(
            "stripped release binary: {} bytes ({} KiB), target <= 409600 bytes: {}{}",
            bytes,
            bytes / KIB,
            if bytes <= 409_600 { "ok" } else { "MISSED" },
            socat
        )
    }

    pub(crate) fn main() {
        // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
        // target without it, with a debug build of the bridge: not a
        // benchmark, and a minute and more of a test run.
        if !std::env::args().any(|a| a == "--bench") {
            println!("relay benchmark: skipped (run it with `cargo bench --bench relay`)");
            return;
        }
        let plan = Plan::from_env();
        let have_socat = Command::new("socat")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_or(false, |s| s.success());
        if !have_socat {
            eprintln!("socat not found: measuring mcp-bridge alone (apt-get install socat)");
        }
        let host = Host::new().expect("cannot create the echo host's socket");
        let pattern = Arc::new(pattern());
        let modes: Vec<Mode> = [Mode::Pipes, Mode::Socketpairs]
            .iter()
            .copied()
            .filter(|m| plan.wants(m.name(), &["pipes", "socketpairs"]))
            .collect();
        let mut results: Vec<(Mode, Figures, Option<Figures>)> = modes
            .iter()
            .map(|&m| {
                (
                    m,
                    Figures::default(),
                    if have_socat {
                        Some(Figures::default())
                    } else {
                        None
                    },
                )
            })
            .collect();
        let started = Instant::now();
        for round in 0..plan.rounds {
            eprintln!(
                "round {}/{} ({:.0?} so far)",
                round + 1,
                plan.rounds,
                started.elapsed()
            );
            for (mode, bridge, socat) in results.iter_mut() {
                // Alternate which command goes first.
                let mut order: Vec<(Tool, &mut Figures)> = vec![(Tool::Bridge, bridge)];
                if let Some(socat) = socat.as_mut() {
                    order.push((Tool::Socat, socat));
                }
                if round % 2 == 1 {
                    order.reverse();
                }
                for (tool, figures) in order {
                    run_round(tool, *mode, &host, &plan, &pattern, figures);
                }
            }
        }
        println!();
        println!(
            "mcp-bridge vs socat STDIO UNIX-CONNECT, {} round(s), {:.0?}",
            plan.rounds,
            started.elapsed()
        );
        print!("{}", table(&results));
        println!("{}", binary_size());
        let failures: usize = results
            .iter()
            .map(|(_, b, s)| b.failures.len() + s.as_ref().map_or(0, |s| s.failures.len()))
            .sum();
        if failures > 0 {
            println!("{} session(s) FAILED (see above)", failures);
            std::process::exit(1);
        }
    }
}
