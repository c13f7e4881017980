//! Bounded waiting, written once: a deadline around any future, and a
//! signal that fires when its owner is dropped.
//!
//! Every ending in this crate is bounded, so "wait for X, but at most T" and
//! "stop when the thing that owns me goes away" appear all over it. Written
//! by hand at each site, `future::or(x, async { Timer::after(t).await; .. })`
//! and "a channel nobody sends on, closed on drop" each read differently
//! every time and hide the one number that matters. These two helpers keep
//! that number in view at the call site.

use std::future::Future;
use std::time::Duration;

use futures_lite::future;
#[cfg(any(feature = "serve", feature = "app-server"))]
use smol::channel::{self, Receiver, Sender};

/// Runs `work` for at most `limit`: `Some(output)` if it finished in time,
/// `None` if the time ran out first (and `work` was dropped, cancelling it).
///
/// When both are ready at once, the finished work wins.
pub(crate) async fn timeout<T>(limit: Duration, work: impl Future<Output = T>) -> Option<T> {
    future::or(async { Some(work.await) }, async {
        crate::clock::after(limit).await;
        None
    })
    .await
}

/// [`timeout`] for a limit the caller configured, where `Duration::ZERO` means
/// no limit at all (`work` runs to completion). `Duration::MAX`, and any limit
/// too far off for an `Instant`, never runs out either: the timer is then
/// never armed.
#[cfg(any(feature = "host", feature = "app-server"))]
pub(crate) async fn timeout_unless_zero<T>(
    limit: Duration,
    work: impl Future<Output = T>,
) -> Option<T> {
    if limit == Duration::ZERO {
        Some(work.await)
    } else {
        timeout(limit, work).await
    }
}

/// The sending side of a stop signal: dropping it (and every clone) fires
/// the signal. Nothing is ever sent; the drop is the message, so it cannot
/// be forgotten on any path out of the owner, a panic or an early return
/// included.
#[cfg(any(feature = "serve", feature = "app-server"))]
#[derive(Debug, Clone)]
pub(crate) struct StopOnDrop(#[allow(dead_code)] Sender<()>);

/// The waiting side of a stop signal; clones all fire together.
#[cfg(any(feature = "serve", feature = "app-server"))]
#[derive(Debug, Clone)]
pub(crate) struct Stopped(Receiver<()>);

/// A new stop signal: wait on the [`Stopped`] half, drop the [`StopOnDrop`]
/// half (all its clones) to fire it.
#[cfg(any(feature = "serve", feature = "app-server"))]
pub(crate) fn stop_signal() -> (StopOnDrop, Stopped) {
    let (sender, receiver) = channel::bounded(1);
    (StopOnDrop(sender), Stopped(receiver))
}

#[cfg(any(feature = "serve", feature = "app-server"))]
impl Stopped {
    /// Completes once every [`StopOnDrop`] of this signal has been dropped.
    pub(crate) async fn wait(&self) {
        // Nothing is ever sent, so this only returns once the channel closes.
        let _ = self.0.recv().await;
    }

    /// Whether the signal has already fired.
    #[cfg_attr(not(feature = "app-server"), allow(dead_code))]
    pub(crate) fn fired(&self) -> bool {
        self.0.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_returns_the_work_when_it_finishes_first() {
        smol::block_on(async {
            assert_eq!(timeout(Duration::from_secs(30), async { 7 }).await, Some(7));
        });
    }

    #[test]
    fn timeout_gives_up_when_the_work_never_finishes() {
        smol::block_on(async {
            let never = future::pending::<()>();
            assert_eq!(timeout(Duration::from_millis(10), never).await, None);
        });
    }

    #[test]
    #[cfg(any(feature = "host", feature = "app-server"))]
    fn a_zero_or_maximal_limit_never_runs_out() {
        smol::block_on(async {
            for limit in [Duration::ZERO, Duration::MAX] {
                let later = async {
                    async_io::Timer::after(Duration::from_millis(20)).await;
                    7
                };
                assert_eq!(timeout_unless_zero(limit, later).await, Some(7));
            }
            let never = future::pending::<()>();
            let short = timeout_unless_zero(Duration::from_millis(10), never).await;
            assert_eq!(short, None);
        });
    }

    #[test]
    #[cfg(any(feature = "serve", feature = "app-server"))]
    fn stop_fires_when_the_last_sender_is_dropped() {
        smol::block_on(async {
            let (stop, stopped) = stop_signal();
            let second = stop.clone();
            drop(stop);
            let early = timeout(Duration::from_millis(20), stopped.wait()).await;
            assert_eq!(early, None, "a clone still holds it");
            let waiter = stopped.clone();
            let task = smol::spawn(async move { waiter.wait().await });
            drop(second);
            task.await;
        });
    }
}
