//! Stop requests on Unix: SIGINT, SIGTERM and SIGHUP, caught with
//! async-signal (smol's own crate), which turns them into a stream on the
//! reactor. SIGHUP is a stop request too: a terminal closing or a
//! supervisor's "hang up" must end in the same clean shutdown as SIGTERM,
//! not leave the socket file behind.

use std::io;

use futures_lite::StreamExt;

/// SIGINT, SIGTERM and SIGHUP as stop requests.
pub(super) struct StopSignals(async_signal::Signals);

impl StopSignals {
    pub(super) fn new() -> io::Result<StopSignals> {
        use async_signal::Signal;
        async_signal::Signals::new([Signal::Int, Signal::Term, Signal::Hup]).map(StopSignals)
    }

    pub(super) async fn next(&mut self) -> &'static str {
        loop {
            match self.0.next().await {
                Some(Ok(async_signal::Signal::Int)) => return "SIGINT",
                Some(Ok(async_signal::Signal::Hup)) => return "SIGHUP",
                Some(Ok(_)) => return "SIGTERM",
                // Interrupted reads of the self-pipe: wait on.
                Some(Err(_)) => continue,
                // Never ends; treat an end like a request to stop.
                None => return "the end of the signal stream",
            }
        }
    }
}
