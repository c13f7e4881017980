//! The floor: the least a relay can do in this slot, for the throughput
//! rows' third column. The benchmark runs itself as the child (its own
//! executable, with `MCP_BRIDGE_BENCH_FLOOR` naming the endpoint): connect,
//! write the bridge's handshake line, then two std threads copying with
//! `io::copy`, one per direction, blocking, with no scanning, no readiness
//! and no buffer of its own (std's `io::copy` moves 8 KiB per call between
//! sockets). Measured with socketpairs only: with pipes `io::copy` splices,
//! which deadlocks request/response traffic (BENCHMARKS.md, "No
//! `splice(2)`"). Not a bridge: it would not survive, answer or bound
//! anything.

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;

/// The variable that makes the benchmark's executable the floor.
pub const VAR: &str = "MCP_BRIDGE_BENCH_FLOOR";

/// Runs the floor if this process was spawned as one (never returns then).
pub fn run_if_asked() {
    let endpoint = match std::env::var_os(VAR) {
        Some(endpoint) => endpoint,
        None => return,
    };
    let mut app = UnixStream::connect(endpoint).expect("floor: cannot connect");
    app.write_all(&crate::plan::handshake())
        .expect("floor: cannot send the handshake");
    let mut up = app.try_clone().expect("floor: cannot clone the socket");
    let stdin = std::thread::spawn(move || {
        let _ = io::copy(&mut io::stdin().lock(), &mut up);
        let _ = up.shutdown(Shutdown::Write);
    });
    let _ = io::copy(&mut app, &mut io::stdout().lock());
    drop(stdin);
    std::process::exit(0);
}
