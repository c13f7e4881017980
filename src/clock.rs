//! The session engine's one clock: every deadline the bridge keeps is read
//! and waited for here, never through `Instant::now()` or `async_io::Timer`
//! directly.
//!
//! The promises in docs/bridge.md are about orderings against deadlines (a
//! reply that comes just before the patience runs out, stdin's end during
//! a pause between two looks). A test that waits in real time samples
//! those orderings; a test whose time is virtual can replay one exactly.
//! So in test builds a thread may install a [virtual clock](Virtual): from
//! then on, on that thread, [`now`] is the virtual time and a [`Sleep`]
//! ends when the test advances past its deadline (tokio's paused clock is
//! the same idea). Production builds have the real clock alone, at no
//! cost: [`Sleep`] is an `async_io::Timer`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The time now: the virtual time where a test installed a virtual clock.
pub(crate) fn now() -> Instant {
    #[cfg(test)]
    if let Some(clock) = Virtual::current() {
        return clock.now();
    }
    Instant::now()
}

/// A future that ends at `deadline`.
pub(crate) fn at(deadline: Instant) -> Sleep {
    #[cfg(test)]
    if Virtual::current().is_some() {
        return Sleep::Virtual(deadline);
    }
    Sleep::Real(async_io::Timer::at(deadline))
}

/// A future that ends after `duration`.
pub(crate) fn after(duration: Duration) -> Sleep {
    match now().checked_add(duration) {
        Some(deadline) => at(deadline),
        // Too far off for an `Instant`: never.
        None => Sleep::Real(async_io::Timer::never()),
    }
}

/// See [`at`] and [`after`].
pub(crate) enum Sleep {
    Real(async_io::Timer),
    /// The clock is looked up when polled, so that the future stays
    /// `Send` like a timer (a sleep polled off the clock's thread ends).
    #[cfg(test)]
    Virtual(Instant),
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Sleep::Real(timer) => Pin::new(timer).poll(cx).map(drop),
            #[cfg(test)]
            Sleep::Virtual(deadline) => match Virtual::current() {
                Some(clock) => clock.poll_at(*deadline, cx),
                None => Poll::Ready(()),
            },
        }
    }
}

#[cfg(test)]
pub(crate) use virtual_clock::Virtual;

#[cfg(test)]
// Clippy 1.63 (CI's Windows step) takes the `const` initializer inside
// `thread_local!` for an interior-mutable `const` item; later ones do not.
#[allow(clippy::declare_interior_mutable_const)]
mod virtual_clock {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    thread_local! {
        static CURRENT: RefCell<Option<Rc<Virtual>>> = const { RefCell::new(None) };
    }

    /// A clock that moves only when told: the waiting futures are kept
    /// with their deadlines, and [`Virtual::advance`] wakes those whose
    /// deadline it reaches.
    #[derive(Debug)]
    pub(crate) struct Virtual {
        now: Cell<Instant>,
        waiting: RefCell<Vec<(Instant, Waker)>>,
    }

    /// Takes the virtual clock off its thread when dropped.
    #[derive(Debug)]
    pub(crate) struct Installed(pub(crate) Rc<Virtual>);

    impl Drop for Installed {
        fn drop(&mut self) {
            CURRENT.with(|c| c.borrow_mut().take());
        }
    }

    impl Virtual {
        /// Installs a virtual clock on this thread, starting now.
        pub(crate) fn install() -> Installed {
            let clock = Rc::new(Virtual {
                now: Cell::new(Instant::now()),
                waiting: RefCell::new(Vec::new()),
            });
            CURRENT.with(|c| *c.borrow_mut() = Some(clock.clone()));
            Installed(clock)
        }

        pub(crate) fn current() -> Option<Rc<Virtual>> {
            CURRENT.with(|c| c.borrow().clone())
        }

        pub(crate) fn now(&self) -> Instant {
            self.now.get()
        }

        pub(super) fn poll_at(&self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
            if self.now.get() >= deadline {
                return Poll::Ready(());
            }
            self.waiting
                .borrow_mut()
                .push((deadline, cx.waker().clone()));
            Poll::Pending
        }

        /// The earliest deadline anything waits for.
        pub(crate) fn next(&self) -> Option<Instant> {
            self.waiting.borrow().iter().map(|(at, _)| *at).min()
        }

        /// Moves the clock to `to` (never back) and wakes everything whose
        /// deadline has come.
        pub(crate) fn advance(&self, to: Instant) {
            if to > self.now.get() {
                self.now.set(to);
            }
            let now = self.now.get();
            let due: Vec<Waker> = {
                let mut waiting = self.waiting.borrow_mut();
                let mut due = Vec::new();
                waiting.retain(|(at, waker)| {
                    if *at <= now {
                        due.push(waker.clone());
                        false
                    } else {
                        true
                    }
                });
                due
            };
            for waker in due {
                waker.wake();
            }
        }

        /// How long since `since`, in virtual time.
        pub(crate) fn since(&self, since: Instant) -> Duration {
            self.now.get().saturating_duration_since(since)
        }
    }
}
