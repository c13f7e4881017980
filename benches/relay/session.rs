//! One measured session: the bridge or socat spawned with pipes or
//! socketpairs as its stdio, its exit waited for, and its peak memory and
//! CPU time read from `/proc` while it still runs.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::io::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, WaitId, WaitIdOptions};

use crate::host::{broken, Behaviour, Host, Watchdog};
use crate::plan::{handshake, Mode, Tool, KIB, PROJECT, REQUESTER};

/// The binary `cargo bench` built with the bench (release) profile,
/// unless `MCP_BRIDGE_BENCH_BRIDGE` names another build to measure.
pub fn bridge() -> PathBuf {
    std::env::var_os("MCP_BRIDGE_BENCH_BRIDGE").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_mcp-bridge")),
        PathBuf::from,
    )
}

/// `MCP_BRIDGE_BENCH_RECONNECT=1`: the bridge as CLIs run it, not its
/// plain relay.
fn reconnecting() -> bool {
    std::env::var_os("MCP_BRIDGE_BENCH_RECONNECT").map_or(false, |v| v != "0")
}

/// One spawned child with its stdio, its host thread and its watchdog.
pub struct Session {
    child: Child,
    pid: Pid,
    pub input: Option<Box<dyn Write + Send>>,
    pub output: Box<dyn Read + Send>,
    host: Option<JoinHandle<io::Result<u64>>>,
    watchdog: Watchdog,
    pub spawned: Instant,
}

/// What a finished session measured besides its traffic.
pub struct Exit {
    pub eof_to_exit: Duration,
}

/// The command of `tool`; `hangs_up`: for the scenario where the host
/// hangs up.
pub fn command(tool: Tool, endpoint: &Path, hangs_up: bool) -> Command {
    match tool {
        Tool::Bridge => {
            let mut c = Command::new(bridge());
            c.arg("mcp-server").arg("--endpoint").arg(endpoint).args([
                "--project",
                PROJECT,
                "--requester",
                REQUESTER,
            ]);
            // The plain relay, unless the session engine is asked for. The
            // hang-up scenario times the exit when the host hangs up; a
            // surviving bridge reconnects instead, by design.
            if hangs_up || !reconnecting() {
                c.arg("--no-reconnect");
            }
            // More options for one run, e.g. `--log /tmp/bench.log`.
            if let Ok(extra) = std::env::var("MCP_BRIDGE_BENCH_ARGS") {
                c.args(extra.split_whitespace());
            }
            c
        }
        Tool::Socat => {
            let mut c = Command::new("socat");
            let mut target = std::ffi::OsString::from("UNIX-CONNECT:");
            target.push(endpoint);
            c.arg("STDIO").arg(target);
            c
        }
        Tool::Floor => {
            let mut c = Command::new(std::env::current_exe().expect("the benchmark's executable"));
            c.env(crate::floor::VAR, endpoint);
            c
        }
    }
}

impl Session {
    pub fn start(
        tool: Tool,
        mode: Mode,
        host: &Host,
        behaviour: Behaviour,
        limit: Duration,
    ) -> io::Result<Session> {
        let handshake = match tool {
            Tool::Bridge | Tool::Floor => Some(handshake()),
            Tool::Socat => None,
        };
        let hangs_up = matches!(behaviour, Behaviour::HangUp { .. });
        let host_thread = host.serve_one(handshake, behaviour)?;
        let mut cmd = command(tool, &host.path, hangs_up);
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

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.input.as_mut() {
            Some(input) => input.write_all(bytes),
            None => Err(broken("stdin already closed")),
        }
    }

    /// Peak resident set (`VmHWM`) of the child, in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let status =
            fs::read_to_string(format!("/proc/{}/status", self.pid.as_raw_nonzero())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * KIB)
    }

    /// CPU time used so far by all the child's threads, in nanoseconds
    /// (`/proc/<pid>/task/*/schedstat`, nanosecond resolution).
    pub fn cpu_ns(&self) -> Option<u64> {
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
    pub fn close_and_wait(mut self) -> Result<Exit, String> {
        let closed = Instant::now();
        drop(self.input.take());
        let exited = self.wait_exit()?;
        self.finish(exited - closed)
    }

    /// Blocks until the child has exited without reaping it (the
    /// watchdog may still need its pid), and says when.
    pub fn wait_exit(&mut self) -> Result<Instant, String> {
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
    pub fn finish(mut self, eof_to_exit: Duration) -> Result<Exit, String> {
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
    pub fn abandon(mut self, host: &Host, why: String) -> String {
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

/// Whether socat is installed (without it, mcp-bridge is measured alone).
pub fn have_socat() -> bool {
    Command::new("socat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(false, |s| s.success())
}
