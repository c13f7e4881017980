//! Where a [`Listener`](super::Listener)'s log lines go ([`LogSink`]), and
//! the log about single peers (refused, dropped) and about accepting
//! failing for a while, limited so that a flood of bad peers cannot flood
//! the log: one line per interval, the rest counted into one line at its
//! end.
//!
//! Why a sink at all: a desktop app's stderr often goes nowhere (a GUI
//! launched from a dock or a file manager), so "dropped another user's
//! connection" written there is lost. An app hands the listener a function
//! and the lines join its own log. It is a plain function rather than a
//! logging crate's facade, so this crate depends on none.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_io::Timer;

use super::{lock, log};

/// Where a [`Listener`](super::Listener)'s log lines go: stderr (the
/// default), or a function of the app's, for [`Options::log`].
///
/// The function gets each line as it would appear on stderr, without the
/// `mcp-bridge: ` prefix and the final newline. It is called on whichever
/// thread the listener's work runs on, while that work waits, so it must
/// not block: hand the line to the app's logger (`tracing`, `log`, a
/// channel) and return.
///
/// ```
/// use std::sync::mpsc;
/// use mcp_bridge::host::{LogSink, Options};
///
/// let (lines, received) = mpsc::channel::<String>();
/// let lines = std::sync::Mutex::new(lines);
/// let mut options = Options::default();
/// options.log = LogSink::to(move |line: &str| {
///     let _ = lines.lock().unwrap().send(line.to_string());
/// });
/// # drop(received);
/// ```
///
/// [`Options::log`]: super::Options::log
#[derive(Clone, Default)]
pub struct LogSink(Option<Arc<LogFn>>);

/// The app's function behind [`LogSink::to`].
type LogFn = dyn Fn(&str) + Send + Sync;

impl LogSink {
    /// Lines go to stderr, prefixed `mcp-bridge: `, through
    /// [`diag`](crate::diag), which never blocks: the default.
    pub fn stderr() -> LogSink {
        LogSink(None)
    }

    /// Lines go to `log`, one call per line, instead of to stderr.
    pub fn to(log: impl Fn(&str) + Send + Sync + 'static) -> LogSink {
        LogSink(Some(Arc::new(log)))
    }

    /// Writes one line to the sink.
    pub(super) fn line(&self, message: fmt::Arguments<'_>) {
        match &self.0 {
            None => log(message),
            Some(write) => write(&message.to_string()),
        }
    }
}

impl fmt::Debug for LogSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            None => "LogSink::stderr()",
            Some(_) => "LogSink::to(..)",
        })
    }
}

/// Two sinks are equal when they write to the same place: both stderr, or
/// the same function (the one `to` was given, shared by clones).
impl PartialEq for LogSink {
    fn eq(&self, other: &LogSink) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            // The data pointers only: a trait object's vtable address is
            // not unique, so comparing it could tell one function apart
            // from itself.
            (Some(a), Some(b)) => {
                std::ptr::eq(Arc::as_ptr(a) as *const u8, Arc::as_ptr(b) as *const u8)
            }
            _ => false,
        }
    }
}

impl Eq for LogSink {}

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
    /// Where its lines go.
    sink: LogSink,
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
    pub(super) fn new(held_back: &'static str, sink: LogSink) -> PeerLog {
        PeerLog {
            state: Mutex::default(),
            held_back,
            sink,
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
                    crate::spawn(async move {
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
                self.sink.line(message);
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
            self.sink.line(format_args!(
                "{} {} (such lines are limited to one every {:?})",
                count, self.held_back, PEER_LOG_INTERVAL
            ));
        }
    }
}
