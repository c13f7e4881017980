//! `cargo bench --bench serve`: how many sessions per second `mcp-bridge
//! serve` sustains, one client at a time and with 8 clients at once.
//!
//! One session is what a short-lived MCP CLI costs serve: connect to the
//! socket, send the handshake line and one request, read its echo back from
//! the `cat` child serve runs for the connection, close. A session counts
//! only once the echo came back exactly. A client that is refused (serve's
//! connection limit: sessions that ended still hold their slots) waits a
//! millisecond and tries again, as a user would, so the rate is the one
//! serve sustains; refusals are counted and shown. Anything else (a wrong
//! reply, a stall) fails the run.
//!
//! Sessions per second are counted over a fixed number of sessions per
//! client; the figure printed is the best of [`RUNS`] runs (the machine may
//! be busy with other work; the best run is the one least disturbed), with
//! every run shown. `MCP_BRIDGE_BENCH_QUICK=1` runs a short smoke test;
//! `MCP_BRIDGE_BENCH_BRIDGE=<path>` measures another build. See
//! BENCHMARKS.md.

#[cfg(unix)]
fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("serve benchmark: skipped (run it with `cargo bench --bench serve`)");
        return;
    }
    unix::main();
}

#[cfg(not(unix))]
fn main() {
    println!("the serve benchmark runs on Unix only");
}

#[cfg(unix)]
mod unix {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// Runs per figure; the best is kept.
    const RUNS: usize = 3;

    /// How long one probe may take before it counts as stalled.
    const STALL_LIMIT: Duration = Duration::from_secs(10);

    const REQUEST: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";

    fn bridge() -> PathBuf {
        std::env::var_os("MCP_BRIDGE_BENCH_BRIDGE").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_mcp-bridge")),
            PathBuf::from,
        )
    }

    /// A running `mcp-bridge serve -- cat`, stopped (SIGTERM, then reaped)
    /// on drop.
    struct Serve {
        child: Child,
        dir: PathBuf,
    }

    impl Serve {
        fn start() -> Serve {
            let dir =
                std::env::temp_dir().join(format!("mcp-bridge-serve-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("cannot create the bench directory");
            let socket = dir.join("s.sock");
            let child = Command::new(bridge())
                .arg("serve")
                .arg("--endpoint")
                .arg(&socket)
                .args(["--", "cat"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                // Two log lines per session: to /dev/null, as a service
                // manager that discards them would.
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start mcp-bridge serve");
            let started = Instant::now();
            while UnixStream::connect(&socket).is_err() {
                assert!(
                    started.elapsed() < STALL_LIMIT,
                    "serve did not start listening"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Serve { child, dir }
        }

        fn socket(&self) -> PathBuf {
            self.dir.join("s.sock")
        }
    }

    impl Drop for Serve {
        fn drop(&mut self) {
            let pid = rustix::process::Pid::from_raw(self.child.id() as i32);
            if let Some(pid) = pid {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// How one session went.
    enum Session {
        Echoed,
        Refused,
    }

    /// One session: whether the echo came back exactly, or serve refused.
    fn session(socket: &Path, handshake: &[u8]) -> Result<Session, String> {
        let stream = UnixStream::connect(socket).map_err(|e| format!("connect: {}", e))?;
        stream.set_read_timeout(Some(STALL_LIMIT)).ok();
        let mut message = handshake.to_vec();
        message.extend_from_slice(REQUEST);
        (&stream)
            .write_all(&message)
            .map_err(|e| format!("write: {}", e))?;
        let mut reader = BufReader::new(&stream);
        let mut line = Vec::new();
        reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("read: {}", e))?;
        if line.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\"") {
            return Ok(Session::Refused);
        }
        if line != REQUEST {
            return Err(format!("got {:?}", String::from_utf8_lossy(&line)));
        }
        // Close: the session's end (the child stopping, the slot freed)
        // is serve's to do; a server that does it too slowly runs out of
        // slots and refuses the sessions after.
        Ok(Session::Echoed)
    }

    /// `clients` clients each run `sessions` sessions back to back; returns
    /// sessions per second, the refusals, and the failures.
    fn measure(socket: &Path, clients: usize, sessions: usize) -> (f64, usize, Vec<String>) {
        let start = Instant::now();
        let workers: Vec<_> = (0..clients)
            .map(|i| {
                let socket = socket.to_path_buf();
                std::thread::spawn(move || {
                    let handshake =
                        format!("{{\"project\":\"bench\",\"requester\":\"client-{}\"}}\n", i);
                    let mut failures = Vec::new();
                    let mut refused = 0;
                    let mut echoed = 0;
                    while echoed < sessions && failures.len() < sessions {
                        match session(&socket, handshake.as_bytes()) {
                            Ok(Session::Echoed) => echoed += 1,
                            Ok(Session::Refused) => {
                                refused += 1;
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            Err(e) => failures.push(e),
                        }
                    }
                    (refused, failures)
                })
            })
            .collect();
        let mut refused = 0;
        let mut failures = Vec::new();
        for worker in workers {
            let (r, f) = worker.join().expect("a client thread panicked");
            refused += r;
            failures.extend(f);
        }
        let took = start.elapsed().as_secs_f64();
        ((clients * sessions) as f64 / took, refused, failures)
    }

    pub fn main() {
        let quick = std::env::var_os("MCP_BRIDGE_BENCH_QUICK").map_or(false, |v| v != "0");
        let per_client_sequential = if quick { 100 } else { 2000 };
        let per_client_concurrent = if quick { 25 } else { 500 };
        let serve = Serve::start();
        let socket = serve.socket();
        // Warm up: the first sessions fault in the binary and the caches.
        let _ = measure(&socket, 1, 20);
        let mut failed = 0;
        println!(
            "mcp-bridge serve -- cat: sessions per second (connect, handshake, one echo, close)"
        );
        for &(clients, sessions) in &[(1, per_client_sequential), (8, per_client_concurrent)] {
            let mut rates = Vec::new();
            let mut refusals = Vec::new();
            for _ in 0..RUNS {
                // The last run's sessions end first, however slowly.
                std::thread::sleep(Duration::from_secs(2));
                let (rate, refused, failures) = measure(&socket, clients, sessions);
                refusals.push(refused);
                if let Some(first) = failures.first() {
                    println!(
                        "  {} client(s): {} of {} sessions FAILED, first: {}",
                        clients,
                        failures.len(),
                        clients * sessions,
                        first
                    );
                }
                failed += failures.len();
                rates.push(rate);
            }
            let best = rates.iter().cloned().fold(0.0, f64::max);
            let all: Vec<String> = rates
                .iter()
                .zip(&refusals)
                .map(|(rate, refused)| format!("{:.0}/s, {} refused", rate, refused))
                .collect();
            println!(
                "  {} client(s) x {} sessions: best {:.0}/s (runs: {})",
                clients,
                sessions,
                best,
                all.join("; ")
            );
        }
        drop(serve);
        if failed > 0 {
            println!("{} session(s) FAILED", failed);
            std::process::exit(1);
        }
    }
}
