//! The rounds of a run: mcp-bridge, socat and the floor alternate session
//! by session, and their order flips every round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::host::Host;
use crate::plan::{Figures, Mode, ModeFigures, Plan, Tool, GIB, KIB, MIB};
use crate::scenarios::{flow, hang_up, pattern, ping, Stream};

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
