//! Helpers shared by the integration tests (each test file includes this
//! module and uses only part of it).
//!
//! This file is platform-neutral, so any test file can include it; what
//! only Unix has (temporary directories with modes, foreign users) is in
//! `unix.rs`, re-exported here on Unix.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use async_io::Timer;
use futures_lite::future;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

/// The bridge binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-bridge");

/// How long a test waits for something that should happen before calling it
/// hung. Only a guard against hanging the suite, never a measure of speed:
/// generous, because a loaded 2-core CI machine can starve a freshly
/// spawned process for seconds.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

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
