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
//! `MCP_BRIDGE_BENCH_ARGS="--log /tmp/bench.log"` passes more options to the
//! bridge (here: the traffic log on).
//! `MCP_BRIDGE_BENCH_ONLY=latency,pipes` (any of latency, spawn, hangup, flow,
//! pipes, socketpairs) runs only the named scenarios and stdio modes;
//! `MCP_BRIDGE_BENCH_BRIDGE=<path>` measures another build of the bridge.
//! `MCP_BRIDGE_BENCH_RECONNECT=1` measures the bridge as CLIs run it (the
//! session engine) instead of its plain relay (`--no-reconnect`), except for
//! the hang-up scenario, which times the exit a surviving bridge never makes.
//!
//! One concern per file: `plan` (what to run, what is measured, the
//! units: shared by all, importing none), `rounds` (the rounds that
//! alternate the commands), `host` (the echo host and the watchdog), `session` (spawning a child, `/proc` metrics),
//! `scenarios` (round trips, hang-up, throughput), `report` (the table),
//! `floor` (the throughput floor: two threads with `io::copy`).

#[cfg(unix)]
mod floor;
#[cfg(unix)]
mod host;
#[cfg(unix)]
mod plan;
#[cfg(unix)]
mod report;
#[cfg(unix)]
mod rounds;
#[cfg(unix)]
mod scenarios;
#[cfg(unix)]
mod session;

#[cfg(unix)]
fn main() {
    floor::run_if_asked();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
    // target without it, with a debug build of the bridge: not a
    // benchmark, and a minute and more of a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("relay benchmark: skipped (run it with `cargo bench --bench relay`)");
        return;
    }
    let plan = plan::Plan::from_env();
    let have_socat = session::have_socat();
    if !have_socat {
        eprintln!("socat not found: measuring mcp-bridge alone (apt-get install socat)");
    }
    let host = host::Host::new().expect("cannot create the echo host's socket");
    let (results, took) = rounds::run(&plan, &host, have_socat);
    println!();
    println!(
        "mcp-bridge vs socat STDIO UNIX-CONNECT, {} round(s), {:.0?}",
        plan.rounds, took
    );
    print!("{}", report::table(&results));
    println!("{}", report::binary_size());
    let failures: usize = results
        .iter()
        .map(|(_, b, s, f)| {
            b.failures.len() + s.as_ref().map_or(0, |s| s.failures.len()) + f.failures.len()
        })
        .sum();
    if failures > 0 {
        println!("{} session(s) FAILED (see above)", failures);
        std::process::exit(1);
    }
}

#[cfg(not(unix))]
fn main() {
    println!("the relay benchmark runs on Unix only");
}
