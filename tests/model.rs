//! The bridge's promises (docs/bridge.md, "What the bridge promises"),
//! checked by a model in every session a seeded fuzzer plays through the
//! real binary on a real Unix socket: a scripted app that restarts, dies
//! mid-line, accepts and closes, answers late and out of order,
//! re-serialises ids and asks the client under reused ids
//! ([`model::app`]); a client that sends requests, batches of several MiB,
//! cancellations and late answers, and stops reading stdout
//! ([`model::client`]); in both protocol eras. [`model::judge`] says what
//! breaks a promise: a request answered twice or never, a reply that
//! reaches an instance that did not ask, a torn or foreign line on either
//! side, a result the app gave replaced by an error, silence called a
//! refusal; and the session must end, with bounded memory.
//!
//! `MCP_BRIDGE_FUZZ_SEED=N` plays from seed N (a failure prints its seed),
//! `MCP_BRIDGE_FUZZ_SESSIONS=N` plays N sessions per era (default 24, so
//! that `cargo test` stays quick; `.ci/run` plays hundreds, from a fixed
//! seed and from one that changes every run). `MCP_BRIDGE_TEST_BIN`
//! points it at another bridge binary.
#![cfg(unix)]

mod model {
    pub mod app;
    pub mod client;
    pub mod judge;
    pub mod rng;
}

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use model::app::{self, Instance, Shared};
use model::client::{self, Client, Era, Inbox};
use model::judge::Judge;
use model::rng::Rng;

/// Sessions per era when not told otherwise.
const SESSIONS: u64 = 24;

/// The seed `cargo test` plays from when not told otherwise.
const SEED: u64 = 0x6d63_702d_6272_6964;

/// Most a session may take before it counts as hung.
const SESSION_BOUND: Duration = Duration::from_secs(60);

/// Most the bridge may keep resident at its peak (it holds at most 1 MiB
/// of the client's lines while the app is away, and a few buffers).
const MEMORY_BOUND_KIB: u64 = 64 * 1024;

/// Sessions played side by side.
const LANES: u64 = 3;

fn bin() -> PathBuf {
    std::env::var_os("MCP_BRIDGE_TEST_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_mcp-bridge").into(), Into::into)
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    match text.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{}={:?} is not a number", name, text),
    }
}

/// Plays `sessions` sessions from `seed` on, `LANES` at a time; panics
/// with every failure's report (and seed).
fn play_many(era: Era) {
    let first = env_u64("MCP_BRIDGE_FUZZ_SEED").unwrap_or(SEED);
    let sessions = env_u64("MCP_BRIDGE_FUZZ_SESSIONS").unwrap_or(SESSIONS);
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let lanes: Vec<_> = (0..LANES.min(sessions))
        .map(|_| {
            let (next, failures) = (Arc::clone(&next), Arc::clone(&failures));
            std::thread::spawn(move || loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= sessions {
                    return;
                }
                let seed = first.wrapping_add(n);
                if let Err(report) = play(seed, era) {
                    eprintln!("{}", report);
                    failures.lock().unwrap().push(seed);
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.join().expect("a lane panicked");
    }
    let failed = failures.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} of {} {:?} sessions broke a promise; replay one with MCP_BRIDGE_FUZZ_SEED=<seed> \
         MCP_BRIDGE_FUZZ_SESSIONS=1: seeds {:?}",
        failed.len(),
        sessions,
        era,
        failed
    );
    println!(
        "{} {:?} sessions from seed {}: 0 failed",
        sessions, era, first
    );
}

#[test]
fn every_legacy_session_keeps_the_promises() {
    play_many(Era::Legacy);
}

#[test]
fn every_modern_session_keeps_the_promises() {
    play_many(Era::Modern);
}

/// A directory of its own for one session's socket.
struct Dir(PathBuf);

impl Dir {
    fn new(seed: u64, era: Era) -> Dir {
        let path = std::env::temp_dir().join(format!(
            "mcp-model-{}-{:?}-{}",
            std::process::id(),
            era,
            seed
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a directory for the socket");
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Peak resident memory of a live process, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid)).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn spawn_bridge(socket: &Path) -> Child {
    Command::new(bin())
        .args(["mcp-server", "--endpoint"])
        .arg(socket)
        .args([
            "--project",
            "model",
            "--requester",
            "fuzzer",
            "--connect-timeout",
            "5",
            "--reconnect-timeout",
            "5",
            "--no-cache",
        ])
        .env_remove("MCP_BRIDGE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the bridge")
}

/// Plays one session; its report when a promise broke.
fn play(seed: u64, era: Era) -> Result<(), String> {
    let mut rng = Rng::new(seed ^ if era == Era::Modern { 0xa5a5 } else { 0 });
    let dir = Dir::new(seed, era);
    let socket = dir.0.join("app.sock");
    let judge = Arc::new(Judge::default());
    let shared = Arc::new(Shared::default());
    // One modern session in four meets an app of the legacy era, which the
    // client probes and falls back from.
    let legacy_app = era == Era::Modern && rng.chance(25);
    shared.legacy.store(legacy_app, Ordering::SeqCst);
    let deaths = rng.below(4) as usize;
    let script: Vec<Instance> = (0..=deaths)
        .map(|n| Instance::draw(&mut rng, n == deaths, era == Era::Legacy))
        .collect();
    judge.event(format!(
        "seed {} {:?}: {} instances",
        seed,
        era,
        script.len()
    ));

    let app = {
        let (socket, judge, shared, app_seed) = (
            socket.clone(),
            Arc::clone(&judge),
            Arc::clone(&shared),
            rng.next(),
        );
        std::thread::spawn(move || app::run(socket, script, app_seed, judge, shared))
    };
    let mut bridge = spawn_bridge(&socket);
    let pid = bridge.id();
    let epoch = Instant::now();
    let inbox = Arc::new(Inbox::default());
    let (to_stdin, lines) = mpsc::channel();
    let writer = {
        let (stdin, judge) = (bridge.stdin.take().expect("stdin"), Arc::clone(&judge));
        std::thread::spawn(move || client::writer(stdin, lines, judge))
    };
    let reader = {
        let (stdout, inbox, judge) = (
            bridge.stdout.take().expect("stdout"),
            Arc::clone(&inbox),
            Arc::clone(&judge),
        );
        std::thread::spawn(move || client::reader(stdout, inbox, judge, epoch))
    };
    let stderr = {
        let mut stderr = bridge.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        })
    };

    let mut client = Client::new(
        era,
        rng.fork(),
        to_stdin,
        Arc::clone(&judge),
        Arc::clone(&inbox),
        epoch,
    );
    client.open();
    if legacy_app {
        judge.event("app: of the legacy era");
        client.fall_back_unless_modern();
    }
    for _ in 0..rng.between(6, 24) {
        client.step();
    }
    // Every request answered, and the last instance's questions replied to.
    let deadline = epoch + SESSION_BOUND / 2;
    loop {
        client.reply_to_questions();
        let open = judge.unanswered();
        if open.is_empty() && shared.last_settled.load(Ordering::SeqCst) {
            break;
        }
        if Instant::now() > deadline {
            judge.fail(format!(
                "no answer within {:?} to {:?} (last instance settled: {})",
                SESSION_BOUND / 2,
                open,
                shared.last_settled.load(Ordering::SeqCst)
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let peak = peak_kib(pid);
    // stdin closes: the bridge must end within its drain second.
    shared.ending.store(true, Ordering::SeqCst);
    drop(client);
    let closed = Instant::now();
    let status = loop {
        if let Some(status) = bridge.try_wait().expect("wait") {
            break Some(status);
        }
        if closed.elapsed() > Duration::from_secs(10) {
            let _ = bridge.kill();
            let _ = bridge.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    match status {
        None => judge.fail("the bridge did not exit within 10 s of stdin's end"),
        Some(_) if closed.elapsed() > Duration::from_millis(2500) => judge.fail(format!(
            "the bridge took {:?} to exit after stdin's end",
            closed.elapsed()
        )),
        // README, "Exit codes": 0 or 1 after stdin's end, never a signal.
        Some(status) if !matches!(status.code(), Some(0) | Some(1)) => judge.fail(format!(
            "the bridge ended with {} after stdin's end",
            status
        )),
        Some(_) => {}
    }
    if let Some(peak) = peak {
        if peak > MEMORY_BOUND_KIB {
            judge.fail(format!("the bridge's peak memory was {} KiB", peak));
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
    let _ = writer.join();
    let _ = reader.join();
    let _ = app.join();
    let stderr = stderr.join().unwrap_or_default();
    let failures = judge.failures();
    if failures.is_empty() {
        return Ok(());
    }
    let mut report = format!("== seed {} ({:?}) broke a promise:\n", seed, era);
    for f in &failures {
        report.push_str(&format!("  - {}\n", f));
    }
    report.push_str("  what happened:\n");
    for e in judge.events() {
        report.push_str(&format!("    {}\n", &e[..e.len().min(400)]));
    }
    report.push_str("  the bridge's stderr:\n");
    for line in stderr.lines() {
        report.push_str(&format!("    {}\n", line));
    }
    Err(report)
}
