//! What a hang-up means: a restart to carry the session over, a crash
//! loop, or a refusal; and the bounds of waiting for the app.
//!
//! The rules (docs/bridge.md has them for users):
//!
//! - An instance **served** if it answered one of the client's requests, or
//!   kept the connection for [`STAYED_UP`]. A hang-up of one that served
//!   starts an **outage**, whose deadline is `--reconnect-timeout` from
//!   that hang-up. The outage ends when an instance serves again; instances
//!   that take the session back and hang up before serving belong to it.
//! - More than [`CRASH_LOOP_LIMIT`] instances in a row that hang up before
//!   serving are a **crash loop**. An app that restarts often but serves in
//!   between (a hot reload every few seconds) is never one.
//! - A **refusal** is a refusal line: the instance's first line is an error
//!   with a `null` id. Nothing else is: silence is not a refusal.
//! - A **silent close** (an instance that accepts and closes with nothing
//!   said, as an app whose listener is up before its MCP side does) is
//!   tried again within the deadlines (`--connect-timeout` before any
//!   instance served, `--reconnect-timeout` in an outage), counts towards
//!   no crash loop, and, when the deadline passes, is said as what it is
//!   (`app_closed_silently`).
//! - A **probe**: an instance that hangs up on a `server/discover` before
//!   any `initialize` is a legacy app (servers built on rmcp before 3 do
//!   it); the probe is answered, and the hang-up counts towards nothing.
//!   "The same process" is told by the endpoint itself ([`Instance`]): a
//!   dying listener is the process that hung up, a new instance is
//!   another.
//! - Pauses between attempts start at [`FIRST_PAUSE`] (so the bridge does
//!   not land in the dying app's listen backlog) and double up to
//!   [`PAUSE_CAP`]; every one ends by the deadline.

use std::time::{Duration, Instant};

/// How long the same app process (a dying listener, most likely) has to
/// answer the replayed session before the attempt counts as failed. A new
/// instance (another process behind the endpoint) has the rest of
/// `--reconnect-timeout`: an app that starts slowly is waited for.
pub const RESUME_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a resumed instance must keep the connection, when it answers
/// nothing, to count as serving.
pub const STAYED_UP: Duration = Duration::from_secs(2);

/// The pause before the first attempt after a hang-up: long enough for a
/// dying app to close its listening socket, short enough to go unnoticed.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two attempts in an outage.
pub const PAUSE_CAP: Duration = Duration::from_secs(1);

/// More instances in a row than this that hang up before serving are a
/// crash loop.
pub const CRASH_LOOP_LIMIT: usize = 5;

/// How often the bridge looks for an app that is not there (connect fails
/// at once, so each look costs a system call or two).
pub const LOOK_INTERVAL: Duration = Duration::from_secs(1);

/// Who is behind the endpoint: an identity of the serving process (its
/// pid, and on Unix the socket file), `None` when the platform cannot say.
pub(super) type Instance = Option<u64>;

/// The bounds the session works within: the constants above, smaller in
/// the session's tests.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    /// How long the same process (a dying listener, most likely) has to
    /// answer the replayed `initialize`; a new instance has until the
    /// deadline.
    pub(super) reply_timeout: Duration,
    pub(super) stayed_up: Duration,
    pub(super) first_pause: Duration,
    pub(super) pause_cap: Duration,
    pub(super) crash_loop_limit: usize,
    pub(super) look_interval: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            reply_timeout: RESUME_REPLY_TIMEOUT,
            stayed_up: STAYED_UP,
            first_pause: FIRST_PAUSE,
            pause_cap: PAUSE_CAP,
            crash_loop_limit: CRASH_LOOP_LIMIT,
            look_interval: LOOK_INTERVAL,
        }
    }
}

/// An app outage: from a hang-up until an instance serves again.
#[derive(Debug)]
pub(super) struct Outage {
    /// When it fails.
    pub(super) deadline: Instant,
    /// The next pause before an attempt.
    pause: Duration,
    /// Why the last attempt failed.
    pub(super) last_failure: Option<String>,
    /// The last attempt failed because the instance rejected the replay.
    pub(super) rejected: bool,
    /// The last instance closed the connection without a word.
    pub(super) silent: bool,
    /// The instance that hung up.
    pub(super) gone: Instance,
    /// When it started.
    pub(super) since: Instant,
}

impl Outage {
    pub(super) fn new(deadline: Instant, gone: Instance, bounds: &Bounds, now: Instant) -> Outage {
        Outage {
            deadline,
            pause: bounds.first_pause,
            last_failure: None,
            rejected: false,
            silent: false,
            gone,
            since: now,
        }
    }

    /// The pause before the next attempt (never past the deadline); the
    /// one after it is longer.
    pub(super) fn next_pause(&mut self, bounds: &Bounds, now: Instant) -> Duration {
        let pause = self.pause.min(self.deadline.saturating_duration_since(now));
        self.pause = (self.pause * 2).min(bounds.pause_cap);
        pause
    }

    /// An instance did not take the session back: it said no
    /// (`said_no`), or did not answer in time. A rejection stands until the
    /// outage ends: an attempt the deadline cuts short (made in the outage's
    /// last moment, when the app has had no time to say no again) does not
    /// turn an app that kept saying no into one that never answered.
    pub(super) fn not_taken_back(&mut self, why: String, said_no: bool) {
        if said_no || !self.rejected {
            self.last_failure = Some(why);
        }
        self.rejected |= said_no;
    }

    /// How long an instance reached in this outage has to answer the
    /// replayed `initialize`: the rest of the outage when it is a new
    /// instance, a few seconds when it is the one that hung up.
    pub(super) fn patience(&self, reached: Instance, bounds: &Bounds, now: Instant) -> Instant {
        let until_deadline = self.deadline;
        if reached.is_some() && reached != self.gone {
            until_deadline
        } else {
            until_deadline.min(now + bounds.reply_timeout)
        }
    }
}

/// What one connection to an instance showed, once it hung up.
#[derive(Debug)]
pub(super) struct Ended {
    /// It answered a client request.
    pub(super) answered: bool,
    /// How long it kept the connection.
    pub(super) lasted: Duration,
    /// Bytes it sent.
    pub(super) heard: u64,
    /// Its refusal line's message, if its first line was one.
    pub(super) refusal: Option<String>,
    /// It hung up on a `server/discover` probe before any `initialize`.
    pub(super) probed: bool,
}

/// What a hang-up is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Meaning {
    /// An app restarting: carry the session over. `new`: an outage starts
    /// now (the instance had served, or it is the first).
    Restart { new: bool },
    /// Instances keep dying before they serve.
    CrashLoop(usize),
    /// The instance closed the connection without a word (`new`: as for a
    /// restart).
    Silent { new: bool },
    /// The app turns this client away (its reason, if it gave one).
    Refused(Option<String>),
}

/// The instances the session went through, for telling restarts from
/// crash loops.
#[derive(Debug, Default)]
pub(super) struct History {
    /// Instances in a row that hung up before serving.
    failed: usize,
    /// Connections so far.
    connections: usize,
}

impl History {
    /// Judges a hang-up (see the [module docs](self)).
    pub(super) fn hung_up(&mut self, ended: &Ended, bounds: &Bounds) -> Meaning {
        self.connections += 1;
        let new = self.connections == 1;
        if let Some(reason) = &ended.refusal {
            return Meaning::Refused(Some(reason.clone()));
        }
        let served = ended.answered || ended.lasted >= bounds.stayed_up;
        if served {
            self.failed = 0;
            return Meaning::Restart { new: true };
        }
        if ended.probed {
            return Meaning::Restart { new };
        }
        if ended.heard == 0 {
            return Meaning::Silent { new };
        }
        self.failed += 1;
        if self.failed > bounds.crash_loop_limit {
            return Meaning::CrashLoop(self.failed);
        }
        Meaning::Restart { new }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(answered: bool, lasted_ms: u64, heard: u64) -> Ended {
        Ended {
            answered,
            lasted: Duration::from_millis(lasted_ms),
            heard,
            refusal: None,
            probed: false,
        }
    }

    #[test]
    fn a_hot_reload_is_never_a_crash_loop() {
        let (mut history, bounds) = (History::default(), Bounds::default());
        for _ in 0..1000 {
            let meaning = history.hung_up(&ended(true, 3000, 100), &bounds);
            assert_eq!(meaning, Meaning::Restart { new: true });
        }
    }

    #[test]
    fn instances_that_die_before_they_serve_are_a_crash_loop() {
        let (mut history, bounds) = (History::default(), Bounds::default());
        history.hung_up(&ended(true, 10, 100), &bounds);
        for n in 1..=CRASH_LOOP_LIMIT {
            let meaning = history.hung_up(&ended(false, 10, 50), &bounds);
            assert_eq!(meaning, Meaning::Restart { new: false }, "{}", n);
        }
        let meaning = history.hung_up(&ended(false, 10, 50), &bounds);
        assert_eq!(meaning, Meaning::CrashLoop(CRASH_LOOP_LIMIT + 1));
    }

    #[test]
    fn silence_is_not_a_refusal_nor_a_crash_loop() {
        let (mut history, bounds) = (History::default(), Bounds::default());
        assert_eq!(
            history.hung_up(&ended(false, 5, 0), &bounds),
            Meaning::Silent { new: true }
        );
        for _ in 0..(3 * CRASH_LOOP_LIMIT) {
            assert_eq!(
                history.hung_up(&ended(false, 5, 0), &bounds),
                Meaning::Silent { new: false }
            );
        }
        // A refusal line is a refusal.
        let mut refusal = ended(false, 5, 40);
        refusal.refusal = Some("no".into());
        assert_eq!(
            history.hung_up(&refusal, &bounds),
            Meaning::Refused(Some("no".into()))
        );
        // A probe hung up on counts towards nothing.
        let mut history = History::default();
        for _ in 0..(3 * CRASH_LOOP_LIMIT) {
            let mut probed = ended(false, 5, 0);
            probed.probed = true;
            assert!(matches!(
                history.hung_up(&probed, &bounds),
                Meaning::Restart { .. }
            ));
        }
    }

    #[test]
    fn a_rejection_stands_until_the_outage_ends() {
        let bounds = Bounds::default();
        let now = crate::clock::now();
        let mut outage = Outage::new(now, Some(1), &bounds, now);
        outage.not_taken_back("late".into(), false);
        assert!(!outage.rejected);
        outage.not_taken_back("no".into(), true);
        outage.not_taken_back("late".into(), false);
        assert!(outage.rejected);
        assert_eq!(outage.last_failure.as_deref(), Some("no"));
    }

    #[test]
    fn a_new_instance_has_until_the_deadline_the_dying_one_a_few_seconds() {
        let bounds = Bounds::default();
        let now = crate::clock::now();
        let deadline = now + Duration::from_secs(30);
        let outage = Outage::new(deadline, Some(1), &bounds, now);
        assert_eq!(outage.patience(Some(2), &bounds, now), deadline);
        assert_eq!(
            outage.patience(Some(1), &bounds, now),
            now + bounds.reply_timeout
        );
        assert_eq!(
            outage.patience(None, &bounds, now),
            now + bounds.reply_timeout
        );
    }
}
