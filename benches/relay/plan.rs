//! What one run does (the plan, from the environment), and the rounds that
//! alternate mcp-bridge and socat session by session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::host::Host;
use crate::scenarios::{flow, hang_up, pattern, ping, Stream};

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
const GIB: f64 = (1024 * MIB) as f64;

/// How much work one run does.
pub struct Plan {
    pub rounds: usize,
    round_trips: usize,
    spawns: usize,
    hangups: usize,
    /// Bytes per throughput session with 64 KiB and 1 MiB lines.
    stream_bytes: u64,
    /// Length of the one-line session.
    huge_line: u64,
    /// A session taking longer than this has stalled and is killed.
    pub stall_limit: Duration,
    /// `MCP_BRIDGE_BENCH_ONLY`: scenarios and modes to run (all if none
    /// of either kind is named).
    only: Vec<String>,
}

impl Plan {
    pub fn from_env() -> Plan {
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

    pub fn runs(&self, scenario: &str) -> bool {
        self.wants(scenario, &["latency", "spawn", "hangup", "flow"])
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Bridge,
    Socat,
    /// Two std threads copying with `io::copy` (`crate::floor`): what the
    /// kernel allows, measured for throughput only (see `run_round`).
    Floor,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pipes,
    Socketpairs,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Bridge => "mcp-bridge",
            Tool::Socat => "socat",
            Tool::Floor => "floor",
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pipes => "pipes",
            Mode::Socketpairs => "socketpairs",
        }
    }
}

/// Everything measured for one command in one stdio mode.
#[derive(Default)]
pub struct Figures {
    pub latency: Vec<f64>,
    pub spawn: Vec<f64>,
    pub eof_exit: Vec<f64>,
    pub hangup_exit: Vec<f64>,
    pub rss_idle: Vec<f64>,
    /// Per kind of stream: MiB/s per session, CPU s per GiB per session.
    pub rate: [Vec<f64>; 3],
    pub cpu: [Vec<f64>; 3],
    pub rss_huge: Vec<f64>,
    pub failures: Vec<String>,
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
    // The floor is measured for throughput, CPU and memory only.
    let flows_only = tool == Tool::Floor;
    if plan.runs("latency") && !flows_only {
        let r = ping(tool, mode, host, plan, plan.round_trips, out);
        if let Some(f) = note(r, "round trips") {
            out.failures.push(f);
        }
    }
    for _ in 0..if plan.runs("spawn") && !flows_only {
        plan.spawns
    } else {
        0
    } {
        let r = ping(tool, mode, host, plan, 1, out);
        if let Some(f) = note(r, "spawn") {
            out.failures.push(f);
        }
    }
    for _ in 0..if plan.runs("hangup") && !flows_only {
        plan.hangups
    } else {
        0
    } {
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

/// The figures of one stdio mode: mcp-bridge's, socat's when it is
/// installed, and the floor's.
pub type ModeFigures = (Mode, Figures, Option<Figures>, Figures);

/// Runs every round of `plan` against `host`, and returns each stdio mode's
/// figures and how long the rounds took.
pub fn run(plan: &Plan, host: &Host, have_socat: bool) -> (Vec<ModeFigures>, Duration) {
    let pattern = Arc::new(pattern());
    let modes: Vec<Mode> = [Mode::Pipes, Mode::Socketpairs]
        .iter()
        .copied()
        .filter(|m| plan.wants(m.name(), &["pipes", "socketpairs"]))
        .collect();
    let mut results: Vec<ModeFigures> = modes
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
                Figures::default(),
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
        for (mode, bridge, socat, floor) in results.iter_mut() {
            // Alternate which command goes first.
            let mut order: Vec<(Tool, &mut Figures)> = vec![(Tool::Bridge, bridge)];
            if let Some(socat) = socat.as_mut() {
                order.push((Tool::Socat, socat));
            }
            // With pipes, the floor's `io::copy` is a `splice(2)`, which
            // holds the pipe while it waits for the socket: the deadlock
            // that keeps the bridge from splicing (BENCHMARKS.md).
            if *mode == Mode::Socketpairs {
                order.push((Tool::Floor, floor));
            }
            if round % 2 == 1 {
                order.reverse();
            }
            for (tool, figures) in order {
                run_round(tool, *mode, host, plan, &pattern, figures);
            }
        }
    }
    (results, started.elapsed())
}
