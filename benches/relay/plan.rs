//! What one run does (the plan, from the environment), what it measures
//! (the figures), and the units: the data every other file of the
//! benchmark shares, depending on none of them.

use std::time::Duration;

use mcp_bridge::handshake::Handshake;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: f64 = (1024 * MIB) as f64;

/// How much work one run does.
pub struct Plan {
    pub rounds: usize,
    pub round_trips: usize,
    pub spawns: usize,
    pub hangups: usize,
    /// Bytes per throughput session with 64 KiB and 1 MiB lines.
    pub stream_bytes: u64,
    /// Length of the one-line session.
    pub huge_line: u64,
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
    pub fn wants(&self, what: &str, kinds: &[&str]) -> bool {
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

/// The figures of one stdio mode: mcp-bridge's, socat's when it is
/// installed, and the floor's.
pub type ModeFigures = (Mode, Figures, Option<Figures>, Figures);

pub const PROJECT: &str = "bench";
pub const REQUESTER: &str = "bench";

/// The handshake line the bridge (and the floor) sends.
pub fn handshake() -> Vec<u8> {
    Handshake::new(PROJECT, REQUESTER).to_line()
}
