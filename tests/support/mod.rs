//! Helpers shared by the integration tests (each test file includes this
//! module and uses only part of it): one hang guard ([`HANG_GUARD`], with
//! [`within`]), one way to wait for something ([`until`], [`eventually`],
//! [`wait_exit`]), one way to run the test binary again as a helper
//! process ([`helper`]), the bridge as a CLI spawns it (`bridge.rs`), an
//! app's side and the scripted MCP host on it (`bridge_host.rs`,
//! `scripted.rs`), and `mcp-bridge serve` (`serve.rs`, with the `serve`
//! feature).
//!
//! This file and `bridge.rs` are platform-neutral, so any test file can
//! include them; what only Unix has (temporary directories with modes,
//! foreign users, processes by pid, the recording listener, serve's
//! signals) is in `unix.rs`, `listener.rs` and `serve.rs`, re-exported here
//! on Unix.
#![allow(dead_code)]

use std::future::Future;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;

mod bridge;
// An app's side written in the tests, and the scripted MCP host on it.
#[cfg(unix)]
pub mod bridge_host;
#[cfg(unix)]
mod listener;
#[cfg(unix)]
pub mod scripted;
#[cfg(all(unix, feature = "serve"))]
mod serve;
#[cfg(unix)]
mod unix;
// Only the test binaries that run a recording listener use it.
#[cfg(unix)]
#[allow(unused_imports)]
pub use listener::*;
#[cfg(unix)]
pub use unix::*;
// Only the test binaries that spawn bridges or serve use these.
#[allow(unused_imports)]
pub use bridge::*;
#[cfg(all(unix, feature = "serve"))]
#[allow(unused_imports)]
pub use serve::*;

/// `assert!(matches!(value, pattern))` that prints the value when it does
/// not match (a file that uses it says `#[macro_use] mod support;`).
#[allow(unused_macros)]
macro_rules! assert_matches {
    ($value:expr, $($pattern:tt)+) => {
        assert!(matches!($value, $($pattern)+), "{:?}", $value)
    };
}

/// The `data.reason`s docs/bridge.md documents for the errors the bridge
/// writes to the client (code -32000): the rows of its table of reasons,
/// but those marked otherwise in parentheses (sent to the app, another
/// code). One list, which tests/sdk/driver.mjs reads the same way.
pub fn documented_reasons() -> Vec<&'static str> {
    let docs = include_str!("../../docs/bridge.md");
    let table = docs
        .split("| `data.reason` | meaning |\n|---|---|\n")
        .nth(1)
        .expect("docs/bridge.md has the table of reasons");
    table
        .lines()
        .take_while(|line| line.starts_with("| `"))
        .filter(|line| !line.contains("` | ("))
        .filter_map(|line| line.split('`').nth(1))
        .collect()
}

/// The bridge binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-bridge");

/// Names another bridge binary for [`bridge_command`] to run instead of
/// [`BIN`] (an older build, to see which tests fail against it).
pub const BIN_ENV: &str = "MCP_BRIDGE_TEST_BIN";

/// The bridge binary [`bridge_command`] runs: [`BIN`], or the one
/// [`BIN_ENV`] names.
pub fn bin() -> std::path::PathBuf {
    std::env::var_os(BIN_ENV).map_or_else(|| BIN.into(), Into::into)
}

/// Set (to the test's name) in a helper process: this test binary run
/// again with only that test ([`helper`]).
const HELPER_ENV: &str = "MCP_BRIDGE_TEST_HELPER";

/// The one way a test runs this test binary again as a helper process: with
/// only the test `test`, alone, output not captured, and [`is_helper`]
/// true in it. The caller adds the helper's parameters and its pipes.
pub fn helper(test: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    as_helper(&mut command, test);
    command
}

/// Makes `command`, which runs this test binary (or a copy of it), run
/// only the test `test` as a helper (see [`helper`]).
pub fn as_helper<'a>(
    command: &'a mut std::process::Command,
    test: &str,
) -> &'a mut std::process::Command {
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(HELPER_ENV, test)
}

/// Whether this process is the helper that runs the test `test`, rather
/// than the test itself.
pub fn is_helper(test: &str) -> bool {
    std::env::var_os(HELPER_ENV).map_or(false, |value| value == test)
}

/// How long a test waits for something that should happen before calling it
/// hung. Only a guard against hanging the suite, never a measure of speed:
/// generous, because a loaded 2-core CI machine can starve a freshly
/// spawned process for seconds.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// How often a test that waits for something looks again.
pub const POLL: Duration = Duration::from_millis(10);

/// Waits until `done` holds, looking every [`POLL`]; fails the test after
/// [`HANG_GUARD`], naming `what` it waited for.
pub fn until(what: &str, done: impl FnMut() -> bool) {
    until_with(what, done, String::new)
}

/// [`until`], adding `context()` (what the test has seen so far, such as
/// a process's stderr) to the failure message.
pub fn until_with(what: &str, mut done: impl FnMut() -> bool, context: impl FnOnce() -> String) {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > HANG_GUARD {
            panic!("no {} within {:?}\n{}", what, HANG_GUARD, context());
        }
        std::thread::sleep(POLL);
    }
}

/// [`until`] for async tests: waits without blocking the executor.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    within(what, async {
        while !done() {
            Timer::after(POLL).await;
        }
    })
    .await
}

/// Runs `work` to completion, failing the test if it takes longer than
/// [`HANG_GUARD`]; `what` names what was awaited in the failure message.
pub async fn within<T>(what: &str, work: impl Future<Output = T>) -> T {
    within_limit(HANG_GUARD, what, work).await
}

/// [`within`] for a bound of the behaviour under test (one the issue
/// names), not a guard against hangs.
pub async fn within_limit<T>(limit: Duration, what: &str, work: impl Future<Output = T>) -> T {
    future::or(work, async {
        Timer::after(limit).await;
        panic!("timed out after {:?} waiting for {}", limit, what)
    })
    .await
}

/// The child's output once it exits; killed (and the test failed) if it
/// has not exited within [`HANG_GUARD`]. `what` names it in the failure.
pub fn wait_output(mut child: Child, what: &str) -> Output {
    wait_exit(&mut child, what);
    child.wait_with_output().unwrap()
}

/// Waits for the child to exit; kills it and fails the test, with its
/// stderr if that is still piped here, if it has not exited within
/// [`HANG_GUARD`]. `what` names it in the failure.
pub fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    wait_exit_with(child, what, |child| {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        stderr
    })
}

/// [`wait_exit`], the failure message adding `context(child)` (called once
/// the child is killed and reaped, so its pipes are at their end).
pub fn wait_exit_with(
    child: &mut Child,
    what: &str,
    context: impl FnOnce(&mut Child) -> String,
) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not exit within {:?}; stderr: {}",
                what,
                HANG_GUARD,
                context(child)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
