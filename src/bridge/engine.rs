//! The session's decisions, without I/O: what a hang-up, a failed
//! attempt, a reached instance and a passed deadline mean for the session,
//! each a named handler that takes `now` and returns what becomes of it.
//!
//! [`session`](super::session) is the shell around it: it awaits the
//! connector, the pauses and the relay, reads the clock, writes stderr and
//! the log, and hands this module what happened. Nothing here awaits,
//! reads a clock or touches a descriptor or a file (`.ci/core-check.sh`
//! holds it to that), so each decision is tested as a table of events
//! with explicit times (below).
//!
//! ```text
//!  connecting ──on_connected──▶ online ──on_app_closed──▶ Restart/Silent (an outage)
//!      │ on_connect_failed        ▲                       │ or Absent (refused,
//!      ▼ (the deadline passed)    │ on_connected          │ crash loop, too long)
//!    Absent ◀──on_outage_timeout──┴── resuming ◀──────────┘
//!      └── on_look_failed: the reason, and how often to look again
//! ```
//!
//! What is not here yet (issue 41, step 5): the relay's own decisions
//! (taking the session back, the drain, the app's end while stdout lags)
//! still live in [`online`](super::online), in the order of its races.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::answer::{Answer, Reason};
use super::outage::{Bounds, Ended, History, Instance, Meaning, Outage};
use super::{BridgeError, Config};
use crate::endpoint::{FIRST_RETRY, LAST_RETRY};

/// The longest pause between two looks for an app that refuses the client
/// or is served by another user: each look is a connection it sees.
const REFUSED_LOOK_CAP: Duration = Duration::from_secs(30);

/// What a failed attempt to reach the app tells the session: the
/// connector's facts, read off its error by the shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    /// Waiting may cure it: nothing serves the endpoint yet, or the
    /// connection broke before the handshake (a dying instance).
    pub(super) heals: bool,
    /// What the client is told if the session is absent because of it.
    pub(super) reason: Reason,
}

/// Where the session was when it reached an instance: what becomes of it
/// if the instance does not take the session back.
pub(super) enum Origin {
    /// The first contact.
    Connecting,
    /// An outage, which the instance is to end.
    Outage(Outage),
    /// No app: it has a few seconds to take the session, and the session is
    /// absent again if it does not.
    Absent(Absence),
}

/// Why there is no app, and what requests are answered with meanwhile.
pub(super) struct Absence {
    pub(super) answer: Rc<Answer>,
    /// What the session ends with if stdin closes first.
    pub(super) error: BridgeError,
    /// The app turned the client away: looked for again less often.
    pub(super) refused: bool,
    /// Said on stderr already.
    pub(super) said: bool,
    /// An instance was reached since (said once too).
    pub(super) reached: bool,
    /// The pause before the next look.
    pub(super) pause: Duration,
}

impl Absence {
    /// Whether the cache may answer for the app: only when it is not there
    /// (not running, restarting); a refusal, an untrusted server or a crash
    /// loop gets its error.
    pub(super) fn answered_for(&self) -> bool {
        matches!(
            self.answer.reason,
            Reason::AppNotRunning | Reason::AppRestarting
        )
    }
}

/// What a hang-up makes of the session.
pub(super) enum HungUp {
    /// An app restarting: an outage, to be ended by an instance that takes
    /// the session back.
    Restart(Outage),
    /// The instance closed the connection without a word: tried again
    /// within the same deadlines.
    Silent(Outage),
    /// No app that will serve (a refusal, a crash loop, an `initialize`
    /// too long to replay).
    Absent(Absence),
}

/// The first contact's schedule: attempts until `--connect-timeout`,
/// pauses doubling from [`FIRST_RETRY`] to [`LAST_RETRY`].
#[derive(Debug)]
pub(super) struct Connecting {
    pub(super) deadline: Instant,
    pause: Duration,
}

impl Connecting {
    /// How long the next attempt may take.
    pub(super) fn budget(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// An attempt failed with a fault that may heal: the pause before the
    /// next one (never past the deadline), or `None` once the deadline
    /// has passed.
    pub(super) fn on_connect_failed(&mut self, now: Instant) -> Option<Duration> {
        let left = self.deadline.saturating_duration_since(now);
        if left.is_zero() {
            return None;
        }
        let pause = self.pause.min(left);
        self.pause = (self.pause * 2).min(LAST_RETRY);
        Some(pause)
    }
}

/// The session-level state and its decisions (see the [module docs](self)).
#[derive(Debug)]
pub(super) struct Engine {
    endpoint: PathBuf,
    connect_timeout: Duration,
    reconnect_timeout: Duration,
    pub(super) bounds: Bounds,
    history: History,
    /// The app was reached at least once.
    reached: bool,
    /// An instance served (answered the client, or stayed up).
    served_once: bool,
    /// When the session started.
    started: Instant,
}

impl Engine {
    pub(super) fn new(config: &Config, now: Instant) -> Engine {
        Engine {
            endpoint: config.endpoint.clone(),
            connect_timeout: config.connect_timeout,
            reconnect_timeout: config.reconnect_timeout,
            bounds: Bounds::default(),
            history: History::default(),
            reached: false,
            served_once: false,
            started: now,
        }
    }

    /// The first contact begins: its schedule.
    pub(super) fn connecting(&self, now: Instant) -> Connecting {
        Connecting {
            deadline: now + self.connect_timeout,
            pause: FIRST_RETRY,
        }
    }

    /// An instance was reached from `origin`: whether it is given the
    /// session as resumed (`has_session`: the client has sent
    /// `initialize`, which the instance is to be given), and when it must
    /// have taken the session back if it is to.
    #[inline(never)]
    pub(super) fn on_connected(
        &mut self,
        origin: &Origin,
        instance: Instance,
        has_session: bool,
        now: Instant,
    ) -> (bool, Instant) {
        let resumed = !matches!(origin, Origin::Connecting) || self.reached || has_session;
        self.reached = true;
        let patience = match origin {
            Origin::Outage(outage) => outage.patience(instance, &self.bounds, now),
            Origin::Connecting => now + self.reconnect_timeout,
            Origin::Absent(_) => now + self.bounds.reply_timeout,
        };
        (resumed, patience)
    }

    /// The instance hung up, having shown `ended`: a restart, a silent
    /// close, or an absence (see [`outage`](super::outage)'s rules).
    /// `outage`: the one the instance was to end; `too_long_to_replay`:
    /// the client's `initialize` cannot be given to another instance.
    #[inline(never)]
    pub(super) fn on_app_closed(
        &mut self,
        ended: &Ended,
        outage: Option<Outage>,
        instance: Instance,
        too_long_to_replay: bool,
        now: Instant,
    ) -> HungUp {
        let endpoint = self.endpoint.clone();
        match self.history.hung_up(ended, &self.bounds) {
            Meaning::Refused(reason) => {
                let error = BridgeError::Refused { endpoint, reason };
                HungUp::Absent(self.absence(error, Reason::AppRefused))
            }
            Meaning::CrashLoop(instances) => {
                let error = BridgeError::CrashLoop {
                    endpoint,
                    instances,
                };
                HungUp::Absent(self.absence(error, Reason::CrashLoop))
            }
            Meaning::Restart { .. } if too_long_to_replay => {
                let error = BridgeError::Resume {
                    endpoint,
                    reason: format!(
                        "the client's initialize is longer than {} KiB, too long to replay",
                        super::HOLD_LIMIT / 1024
                    ),
                };
                HungUp::Absent(self.absence(error, Reason::TooLongToReplay))
            }
            Meaning::Silent { new } => {
                let mut outage = match outage {
                    Some(outage) if !new => outage,
                    _ => self.new_outage(instance, now),
                };
                outage.silent = true;
                outage.last_failure =
                    Some("the app accepted the connection and closed it without a word".into());
                HungUp::Silent(outage)
            }
            Meaning::Restart { new } => {
                let served = ended.answered || ended.lasted >= self.bounds.stayed_up;
                self.served_once |= served;
                let outage = match outage {
                    Some(outage) if !new && !served => outage,
                    _ => self.new_outage(instance, now),
                };
                HungUp::Restart(outage)
            }
        }
    }

    /// The first instance did not take the session back: an outage from
    /// now.
    pub(super) fn on_first_not_taken_back(&self, instance: Instance, now: Instant) -> Outage {
        self.new_outage(instance, now)
    }

    /// An outage from `now`: `--reconnect-timeout` long once an instance
    /// has served, the rest of `--connect-timeout` before (and never less
    /// than a look interval, for one more look).
    fn new_outage(&self, gone: Instance, now: Instant) -> Outage {
        let deadline = match self.served_once {
            true => now + self.reconnect_timeout,
            false => (self.started + self.connect_timeout)
                .max(now + self.bounds.look_interval)
                .min(now + self.reconnect_timeout),
        };
        Outage::new(deadline, gone, &self.bounds, now)
    }

    /// How long the next attempt in `outage` may take.
    pub(super) fn resume_budget(&self, outage: &Outage, now: Instant) -> Duration {
        let left = outage.deadline.saturating_duration_since(now);
        left.min(self.bounds.reply_timeout)
    }

    /// The outage's deadline, checked at `now`: the absence the session
    /// falls into once it has passed (`None` while there is time).
    #[inline(never)]
    pub(super) fn on_outage_timeout(&self, outage: &mut Outage, now: Instant) -> Option<Absence> {
        if !outage.deadline.saturating_duration_since(now).is_zero() {
            return None;
        }
        let reason = match outage.last_failure.take() {
            Some(reason) => reason,
            None => "it did not come back".into(),
        };
        let error = BridgeError::Resume {
            endpoint: self.endpoint.clone(),
            reason: format!(
                "{} (gave up {}s after the hang-up)",
                reason,
                // Rounded: the deadline was set a moment after the hang-up.
                (outage
                    .deadline
                    .saturating_duration_since(outage.since)
                    .as_millis()
                    + 500)
                    / 1000
            ),
        };
        let why = if outage.rejected {
            Reason::ResumeRejected
        } else if outage.silent {
            Reason::AppClosedSilently
        } else {
            Reason::AppNotRunning
        };
        Some(self.absence(error, why))
    }

    /// The session falls into `absence` (again): the first look after a
    /// look interval.
    pub(super) fn on_absent(&self, absence: &mut Absence) {
        absence.pause = self.bounds.look_interval;
    }

    /// A look for the app failed while it is absent: the new absence, if
    /// the failure changes what the client is told. A fault that may heal
    /// keeps the pause (about once a second); anything else, or an app
    /// that refused, doubles it up to [`REFUSED_LOOK_CAP`].
    #[inline(never)]
    pub(super) fn on_look_failed(
        &self,
        absence: &mut Absence,
        failure: Failure,
        error: BridgeError,
    ) -> Option<Absence> {
        if failure.heals && !absence.refused {
            return None;
        }
        let pause = (absence.pause * 2).min(REFUSED_LOOK_CAP);
        absence.pause = pause;
        if failure.heals {
            return None;
        }
        let mut absence = self.absence(error, failure.reason);
        absence.pause = pause;
        Some(absence)
    }

    /// What the client is told while `error` keeps the app away, for
    /// `reason`.
    pub(super) fn absence(&self, error: BridgeError, reason: Reason) -> Absence {
        let refused = matches!(reason, Reason::AppRefused | Reason::UntrustedServer);
        let message = format!(
            "{} (mcp-bridge keeps looking for the app; ask again once it is up)",
            crate::error_chain(&error)
        );
        Absence {
            answer: Rc::new(Answer::new(reason, message, &self.endpoint)),
            error,
            refused,
            said: false,
            reached: false,
            pause: self.bounds.look_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Event tables: each row a hang-up (or a deadline) in one phase of the
    //! session, at an explicit time, and what the session becomes.

    use super::*;
    use crate::clock;

    const S: Duration = Duration::from_secs(1);

    fn engine(t0: Instant) -> Engine {
        let mut config = Config::new("/run/app.sock");
        config.connect_timeout = 5 * S;
        config.reconnect_timeout = 30 * S;
        Engine::new(&config, t0)
    }

    fn ended(answered: bool, lasted: Duration, heard: u64) -> Ended {
        Ended {
            answered,
            lasted,
            heard,
            refusal: None,
            probed: false,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The outage of a restart, or a panic naming what came instead.
    fn restart(hung_up: HungUp) -> Outage {
        match hung_up {
            HungUp::Restart(outage) => outage,
            HungUp::Silent(_) => panic!("silent, not a restart"),
            HungUp::Absent(absence) => panic!("absent: {}", absence.error),
        }
    }

    fn absent(hung_up: HungUp) -> Absence {
        match hung_up {
            HungUp::Absent(absence) => absence,
            HungUp::Restart(_) => panic!("a restart, not absent"),
            HungUp::Silent(_) => panic!("silent, not absent"),
        }
    }

    #[test]
    fn the_first_contact_tries_until_the_connect_timeout_with_pauses_that_double() {
        let t0 = clock::now();
        let engine = engine(t0);
        let mut connecting = engine.connecting(t0);
        assert_eq!(connecting.deadline, t0 + 5 * S);
        assert_eq!(connecting.budget(t0 + ms(1200)), ms(3800));
        assert_eq!(connecting.on_connect_failed(t0), Some(FIRST_RETRY));
        assert_eq!(connecting.on_connect_failed(t0), Some(FIRST_RETRY * 2));
        // Never past the deadline; none once it has passed.
        assert_eq!(connecting.on_connect_failed(t0 + ms(4990)), Some(ms(10)));
        assert_eq!(connecting.on_connect_failed(t0 + 5 * S), None);
        assert_eq!(connecting.on_connect_failed(t0 + 6 * S), None);
    }

    #[test]
    fn a_hang_up_while_online_from_the_first_contact() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        let origin = Origin::Connecting;
        let (resumed, patience) = engine.on_connected(&origin, Some(1), false, t0 + S);
        assert!(!resumed);
        assert_eq!(patience, t0 + 31 * S);
        // It served (answered): an outage of --reconnect-timeout from the
        // hang-up.
        let at = t0 + 10 * S;
        let outage =
            restart(engine.on_app_closed(&ended(true, 9 * S, 100), None, Some(1), false, at));
        assert_eq!((outage.deadline, outage.since), (at + 30 * S, at));
        assert_eq!(outage.gone, Some(1));
        // The next instance is reached as resumed.
        let origin = Origin::Outage(outage);
        let (resumed, patience) = engine.on_connected(&origin, Some(2), true, at + S);
        assert!(resumed);
        assert_eq!(patience, at + 30 * S, "a new instance has the whole outage");
        let (_, patience) = engine.on_connected(&origin, Some(1), true, at + S);
        assert_eq!(
            patience,
            at + S + RESUME_REPLY,
            "the dying one a few seconds"
        );
    }

    const RESUME_REPLY: Duration = super::super::RESUME_REPLY_TIMEOUT;

    #[test]
    fn a_hang_up_before_any_instance_served_keeps_the_connect_timeout() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        // At 1 s, an instance that said something and served nothing: the
        // rest of --connect-timeout (5 s from the start).
        let outage =
            restart(engine.on_app_closed(&ended(false, ms(10), 40), None, None, false, t0 + S));
        assert_eq!(outage.deadline, t0 + 5 * S);
        // Late in it, never less than one more look.
        let late = t0 + ms(4900);
        let outage =
            restart(engine.on_app_closed(&ended(false, ms(10), 40), None, None, false, late));
        assert_eq!(outage.deadline, late + engine.bounds.look_interval);
    }

    #[test]
    fn a_hang_up_while_resuming_belongs_to_the_outage_until_an_instance_serves() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        let first = restart(engine.on_app_closed(
            &ended(true, 3 * S, 10),
            None,
            Some(1),
            false,
            t0 + 3 * S,
        ));
        let deadline = first.deadline;
        assert_eq!(deadline, t0 + 33 * S);
        // An instance that took the session back and died at once: the
        // same outage, the same deadline.
        let again = restart(engine.on_app_closed(
            &ended(false, ms(50), 10),
            Some(first),
            Some(2),
            false,
            t0 + 4 * S,
        ));
        assert_eq!(again.deadline, deadline);
        // One that served ends it: a new outage from its hang-up.
        let at = t0 + 20 * S;
        let renewed = restart(engine.on_app_closed(
            &ended(false, engine.bounds.stayed_up, 10),
            Some(again),
            Some(3),
            false,
            at,
        ));
        assert_eq!((renewed.deadline, renewed.since), (at + 30 * S, at));
        assert_eq!(renewed.gone, Some(3));
    }

    #[test]
    fn a_silent_close_is_an_outage_said_as_what_it_is() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        let hung_up = engine.on_app_closed(&ended(false, ms(5), 0), None, None, false, t0);
        let mut outage = match hung_up {
            HungUp::Silent(outage) => outage,
            _ => panic!("not silent"),
        };
        assert!(outage.silent);
        assert_eq!(outage.deadline, t0 + 5 * S);
        // A moment before the deadline there is time; at it, the absence.
        assert!(engine
            .on_outage_timeout(&mut outage, t0 + 5 * S - ms(1))
            .is_none());
        let absence = engine.on_outage_timeout(&mut outage, t0 + 5 * S).unwrap();
        assert_eq!(absence.answer.reason, Reason::AppClosedSilently);
        assert!(!absence.answered_for());
        assert!(absence.error.to_string().contains("(gave up 5s after"));
    }

    #[test]
    fn a_hang_up_that_refuses_or_loops_or_cannot_be_replayed_is_an_absence() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        let mut refusal = ended(false, ms(5), 40);
        refusal.refusal = Some("not you".into());
        let absence = absent(engine.on_app_closed(&refusal, None, None, false, t0));
        assert_eq!(absence.answer.reason, Reason::AppRefused);
        assert!(absence.refused);
        assert_eq!(absence.pause, engine.bounds.look_interval);

        let mut engine = self::engine(t0);
        for n in 0..engine.bounds.crash_loop_limit {
            let at = t0 + ms(n as u64);
            restart(engine.on_app_closed(&ended(false, ms(1), 9), None, None, false, at));
        }
        let absence = absent(engine.on_app_closed(&ended(false, ms(1), 9), None, None, false, t0));
        assert_eq!(absence.answer.reason, Reason::CrashLoop);
        assert!(!absence.refused);

        let mut engine = self::engine(t0);
        let absence = absent(engine.on_app_closed(&ended(true, S, 9), None, None, true, t0));
        assert_eq!(absence.answer.reason, Reason::TooLongToReplay);
    }

    #[test]
    fn a_hang_up_while_absent_gives_the_instance_a_few_seconds() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        let error = BridgeError::Refused {
            endpoint: "/run/app.sock".into(),
            reason: None,
        };
        let origin = Origin::Absent(engine.absence(error, Reason::AppRefused));
        let at = t0 + 40 * S;
        let (resumed, patience) = engine.on_connected(&origin, Some(4), false, at);
        assert!(resumed);
        assert_eq!(patience, at + RESUME_REPLY);
        // It hung up having served nothing, the first hang-up: an outage
        // of one more look (the connect timeout is long past).
        let outage =
            restart(engine.on_app_closed(&ended(false, ms(20), 30), None, Some(4), false, at + S));
        assert_eq!(outage.deadline, at + S + engine.bounds.look_interval);
    }

    #[test]
    fn an_outage_gives_up_with_what_its_last_attempt_said() {
        let t0 = clock::now();
        let mut engine = engine(t0);
        let mut outage =
            restart(engine.on_app_closed(&ended(true, 3 * S, 1), None, None, false, t0));
        assert_eq!(engine.resume_budget(&outage, t0), RESUME_REPLY);
        assert_eq!(engine.resume_budget(&outage, t0 + 28 * S), 2 * S);
        outage.not_taken_back("no".into(), true);
        assert!(engine.on_outage_timeout(&mut outage, t0 + 29 * S).is_none());
        let absence = engine.on_outage_timeout(&mut outage, t0 + 31 * S).unwrap();
        assert_eq!(absence.answer.reason, Reason::ResumeRejected);
        assert_eq!(
            absence.error.to_string(),
            "the app at '/run/app.sock' closed the connection and did not take the session \
             back: no (gave up 30s after the hang-up)"
        );
    }

    #[test]
    fn looks_at_a_refusing_app_slow_down_and_a_missing_one_keeps_its_pace() {
        let t0 = clock::now();
        let engine = engine(t0);
        let gone = || BridgeError::Refused {
            endpoint: "/run/app.sock".into(),
            reason: None,
        };
        let heals = Failure {
            heals: true,
            reason: Reason::AppNotRunning,
        };
        let mut missing = engine.absence(gone(), Reason::AppNotRunning);
        assert!(engine.on_look_failed(&mut missing, heals, gone()).is_none());
        assert_eq!(missing.pause, engine.bounds.look_interval);

        let mut refused = engine.absence(gone(), Reason::AppRefused);
        for want in [2, 4, 8, 16, 30, 30] {
            assert!(engine.on_look_failed(&mut refused, heals, gone()).is_none());
            assert_eq!(refused.pause, want * S);
        }
        // A fault that does not heal changes what the client is told.
        let untrusted = Failure {
            heals: false,
            reason: Reason::UntrustedServer,
        };
        let now = engine
            .on_look_failed(&mut missing, untrusted, gone())
            .unwrap();
        assert_eq!(now.answer.reason, Reason::UntrustedServer);
        assert_eq!(now.pause, 2 * S);
    }
}
