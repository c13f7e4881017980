//! The log about single peers (refused, dropped) and about accepting
//! failing for a while, limited so that a flood of bad peers cannot flood
//! stderr: one line per interval, the rest counted into one line at its end.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_io::Timer;

use super::{lock, log};

/// Lines about single peers (refused, dropped) are written at most once
/// per this interval; the rest are counted into one line at its end.
const PEER_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Log lines about single peers, at most one per [`PEER_LOG_INTERVAL`]:
/// one bad peer is worth a line, a thousand are worth one line and a
/// count. The lines held back are counted and logged in one line at the
/// end of the interval (which starts a new one), which says what they were
/// about.
#[derive(Debug)]
pub(super) struct PeerLog {
    state: Mutex<PeerLogState>,
    /// What the held-back lines were about, after their count.
    held_back: &'static str,
}

/// The count line of the log about single peers.
pub(super) const PEERS_HELD_BACK: &str = "more connection(s) dropped or refused";

/// The count line of the log about accepting failing for a while.
pub(super) const ACCEPTING_HELD_BACK: &str =
    "more time(s) accepting connections failed for a while \
     (the connections waited in the kernel's queue meanwhile, and were not dropped)";

#[derive(Debug, Default)]
struct PeerLogState {
    /// Until when lines are counted instead of written.
    quiet_until: Option<Instant>,
    /// Lines held back since the last line written.
    held_back: u64,
}

impl PeerLog {
    pub(super) fn new(held_back: &'static str) -> PeerLog {
        PeerLog {
            state: Mutex::default(),
            held_back,
        }
    }

    /// Writes the line, or counts it if one was written less than
    /// [`PEER_LOG_INTERVAL`] ago; `true` if it was written.
    pub(super) fn line(self: &Arc<Self>, message: fmt::Arguments<'_>) -> bool {
        let now = Instant::now();
        let mut state = lock(&self.state);
        match state.quiet_until {
            Some(until) if now < until => {
                state.held_back += 1;
                if state.held_back == 1 {
                    let log = self.clone();
                    smol::spawn(async move {
                        Timer::at(until).await;
                        log.count_held_back();
                    })
                    .detach();
                }
                false
            }
            _ => {
                state.quiet_until = Some(now + PEER_LOG_INTERVAL);
                drop(state);
                log(message);
                true
            }
        }
    }

    /// Logs how many lines were held back, if any; that line starts a new
    /// quiet interval of its own.
    fn count_held_back(&self) {
        let mut state = lock(&self.state);
        let count = std::mem::take(&mut state.held_back);
        if count > 0 {
            state.quiet_until = Some(Instant::now() + PEER_LOG_INTERVAL);
            drop(state);
            log(format_args!(
                "{} {} (such lines are limited to one every {:?})",
                count, self.held_back, PEER_LOG_INTERVAL
            ));
        }
    }
}
