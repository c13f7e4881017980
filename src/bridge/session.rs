//! One MCP client's session, carried across the app's absences and
//! restarts: an explicit state machine.
//!
//! MCP CLIs never restart a stdio server that exited, and they hide its
//! stderr: a bridge that exits because the app is starting, restarting or
//! refusing takes the agent's tools away for the rest of its life, with no
//! reason given. So the session is one loop over one [`Phase`], and every
//! transition is a method that returns the next phase:
//!
//! ```text
//!  Connecting ──reached──▶ Online ──stdin EOF / stdout gone──▶ Done
//!      │                  ▲  │  ▲
//!      │ connect timeout  │  │  └──────────── took the session back
//!      │ / refused        │  └─hung up──▶ Resuming ──reached──┘
//!      ▼                  │                  │
//!    Absent ──reached─────┘◀── deadline, refused, crash loop
//!      └── answers every request at once with the reason, keeps looking
//!          (about once a second) until the app comes or stdin ends
//! ```
//!
//! - **Online**: [`online::relay`] pumps both ways, the
//!   [ledger](super::ledger) deciding each line. An instance reached after
//!   a hang-up (or after the cache answered for it) is first given the
//!   session ([`Ledger::start_instance`]).
//! - **Connecting, Resuming** (holding): the client's lines are held, up to
//!   [`HOLD_LIMIT`](super::HOLD_LIMIT), for the instance to come.
//! - **Absent**: requests are answered at once with an error that names
//!   the reason (`data.reason`); when the app comes, the session goes on as
//!   after a restart. The bridge never gives up while stdin is open.
//!
//! [`outage`] holds the rules that tell a restart from a crash loop and a
//! refusal, and the bounds of waiting.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite};

use super::answer::{Answer, Reason};
use super::answers::Answers;
use super::app::AppSide;
use super::client::{ClientSide, Refusals};
use super::engine::{Absence, Engine, Failure, HungUp, Origin};
use super::ledger::{Ledger, TakenBack};
use super::online::{self, End, Link};
use super::outage::{Ended, Outage};
use super::{boxed, say, say_args, BridgeError, Config, Connected, Connector};
use crate::relay::{Ending, RelayError, Stage};
use crate::stdio::Hangups;
use crate::traffic_log::{Direction, LineTap, TrafficLog};
use crate::{clock, wait};

/// Where the session is.
enum Phase<AR, AW> {
    /// Reaching the app the first time, within `--connect-timeout`.
    Connecting,
    /// Relaying to an instance, and where the session came from.
    Online(Connected<AR, AW>, Origin),
    /// The app hung up: waiting for an instance to take the session back.
    Resuming(Outage),
    /// No app: answering for it, and looking for it.
    Absent(Absence),
    /// The client ended the session.
    Done(Ending),
}

/// The outcome of running something while holding the client's lines.
enum Held<T> {
    Done(T),
    /// stdin ended, and nothing held is worth waiting for (any longer).
    Eof,
}

/// What the session waits on while it holds the client's lines: an
/// attempt to reach the app, or a pause (`None` at its end). One type for
/// both, so that [`Io::hold`] is compiled once.
type Waited<AR, AW> = Option<Result<Connected<AR, AW>, BridgeError>>;

/// The session's I/O and what it knows, apart from the connector, so that
/// a connection attempt (which borrows the connector) can run while stdin
/// is held.
struct Io<'a, R, W> {
    config: &'a Config,
    stdin: R,
    client: ClientSide,
    stdout: W,
    ledger: RefCell<Ledger>,
    hangups: Option<&'a Hangups>,
    log: Option<&'a TrafficLog>,
    /// A line tap per direction (whole session, so lines cut by a
    /// reconnect stay one record).
    up_tap: Option<LineTap>,
    down_tap: Option<LineTap>,
}

pub(super) struct Session<'a, R, W, C> {
    config: &'a Config,
    connector: C,
    io: Io<'a, R, W>,
    /// Attempts to reach the app so far, for the log.
    attempts: u32,
    /// What the session knows and decides.
    pub(super) engine: Engine,
}

impl<'a, R, W, C> Session<'a, R, W, C>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    C: Connector,
{
    pub(super) fn new(
        config: &'a Config,
        connector: C,
        answers: Box<dyn Answers>,
        stdin: R,
        stdout: W,
        hangups: Option<&'a Hangups>,
        log: Option<&'a TrafficLog>,
    ) -> Self {
        let answer = |reason, message: String| Answer::new(reason, message, &config.endpoint);
        let refusals = Refusals {
            overflow: answer(
                Reason::HoldLimit,
                format!(
                    "mcp-bridge is waiting for the app and cannot hold more than {} KiB of requests",
                    super::HOLD_LIMIT / 1024
                ),
            ),
            interrupted: answer(
                Reason::AppRestarting,
                "the app closed the connection while this request was being sent".into(),
            ),
        };
        let ledger = Ledger::new(answers, config.endpoint.clone());
        Session {
            config,
            connector,
            io: Io {
                config,
                stdin,
                client: ClientSide::new(refusals),
                stdout,
                ledger: RefCell::new(ledger),
                hangups,
                log,
                up_tap: log.map(|log| log.tap(Direction::CliToApp)),
                down_tap: log.map(|log| log.tap(Direction::AppToCli)),
            },
            attempts: 0,
            engine: Engine::new(config, clock::now()),
        }
    }

    /// Runs the whole session; see the [module docs](self). Ends with an
    /// error when stdin closes while the app is away.
    pub(super) async fn run(mut self) -> Result<Ending, BridgeError> {
        let mut phase = Phase::Connecting;
        loop {
            phase = match phase {
                Phase::Connecting => boxed(self.connecting()).await?,
                Phase::Online(connected, origin) => boxed(self.online(connected, origin)).await?,
                Phase::Resuming(outage) => boxed(self.resuming(outage)).await?,
                Phase::Absent(absence) => boxed(self.absent(absence)).await?,
                Phase::Done(ending) => return Ok(ending),
            };
        }
    }

    /// The first connection, within `--connect-timeout`. The first attempt
    /// is made before stdin is read, so that a client's first request finds
    /// the app known to be there or not (and the cache may answer for it).
    async fn connecting(&mut self) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        let mut connecting = self.engine.connecting(clock::now());
        loop {
            let budget = connecting.budget(clock::now());
            let error = match self.reach(false, budget).await? {
                Held::Eof => return self.io.end_on_eof().await,
                Held::Done(Ok(connected)) => {
                    return Ok(Phase::Online(connected, Origin::Connecting))
                }
                Held::Done(Err(e)) => e,
            };
            let failure = failure(&error);
            if !failure.heals {
                return Ok(self.absent_because(error, failure.reason));
            }
            self.io.ledger.borrow_mut().set_app_absent(true);
            let pause = match connecting.on_connect_failed(clock::now()) {
                Some(pause) => pause,
                None => return Ok(self.absent_because(error, failure.reason)),
            };
            if let Held::Eof = self.pause(pause).await? {
                return self.io.end_on_eof().await;
            }
        }
    }

    /// Relays to an instance until it hangs up, does not take the session
    /// back, or the client ends the session.
    async fn online(
        &mut self,
        connected: Connected<C::Reader, C::Writer>,
        origin: Origin,
    ) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        let Connected {
            reader,
            writer,
            instance,
            server,
        } = connected;
        if let Some(server) = server {
            self.io.ledger.borrow_mut().answers().served_by(server);
        }
        let has_session = self.io.ledger.borrow().has_session();
        let (resumed, patience) =
            self.engine
                .on_connected(&origin, instance, has_session, clock::now());
        // There is an app: the cache answers for it no longer.
        self.io.ledger.borrow_mut().set_app_absent(false);
        let (preamble, taking_back) = self.io.ledger.borrow_mut().start_instance(resumed);
        // An instance reached while the app was absent has yet to take the
        // session: until it does, requests are still answered at once, and
        // the end of the absence is said when it has.
        let mut back = match &origin {
            Origin::Absent(_) => Some(format!(
                "the app at '{}' took the session: the session goes on",
                self.config.endpoint.display()
            )),
            _ => None,
        };
        if !(taking_back && matches!(origin, Origin::Absent(_))) {
            self.io.client.go_online(&mut self.io.ledger.borrow_mut());
            if let Some(back) = back.take() {
                say(self.io.log, &back);
            }
        }
        let mut app = AppSide::default();
        let started = clock::now();
        let link = Link {
            ledger: &self.io.ledger,
            preamble,
            taking_back: if taking_back { Some(patience) } else { None },
            back,
            drain_grace: self.config.drain_grace,
            hangups: self.io.hangups,
            log: self.io.log,
            up_tap: &mut self.io.up_tap,
            down_tap: &mut self.io.down_tap,
        };
        let end = boxed(online::relay(
            &mut self.io.client,
            &mut self.io.stdin,
            &mut app,
            reader,
            writer,
            &mut self.io.stdout,
            link,
        ))
        .await;
        // Whatever ended the relay, what the app answered is the cache's.
        online::learn(&self.io.ledger);
        online::settle(&self.io.ledger);
        // An instance that said no to the replay and hung up at once did
        // not take the session back, whichever of the two was seen first.
        let end = match (end?, self.io.ledger.borrow_mut().take_taken_back()) {
            (End::HungUp, Some(TakenBack::Rejected(why))) => {
                End::NotTakenBack(online::rejected(&why), true)
            }
            (end, _) => end,
        };
        match end {
            End::Done(ending) => {
                if let Some(log) = self.io.log {
                    match ending {
                        Ending::ClientClosed { .. } => log.stdin_eof(),
                        _ => log.event(format_args!("stdout's reader went away")),
                    }
                }
                Ok(Phase::Done(ending))
            }
            End::NotTakenBack(why, said_no) => {
                // Nothing of the client's was sent: all of it waits for the
                // next attempt. A rejection while the app is starting is
                // tried again, until the deadline.
                let mut ledger = self.io.ledger.borrow_mut();
                let again = ledger.hung_up(&self.io.restarting());
                self.io.client.hung_up(again, &mut ledger);
                drop(ledger);
                if let Some(log) = self.io.log {
                    log.event(format_args!("resume attempt failed: {}", why));
                }
                match origin {
                    Origin::Absent(absence) => Ok(Phase::Absent(absence)),
                    Origin::Outage(mut outage) => {
                        outage.not_taken_back(why, said_no);
                        Ok(Phase::Resuming(outage))
                    }
                    Origin::Connecting => {
                        let now = clock::now();
                        let mut outage = self.engine.on_first_not_taken_back(instance, now);
                        outage.not_taken_back(why, said_no);
                        Ok(Phase::Resuming(outage))
                    }
                }
            }
            End::HungUp => {
                let outage = match origin {
                    Origin::Outage(outage) => Some(outage),
                    _ => None,
                };
                boxed(self.hung_up(instance, &app, started, outage)).await
            }
        }
    }

    /// The instance hung up: what was in flight is answered or held again,
    /// and the hang-up judged (a restart, a crash loop, a refusal).
    async fn hung_up(
        &mut self,
        instance: super::outage::Instance,
        app: &AppSide,
        started: Instant,
        outage: Option<Outage>,
    ) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        if let Some(log) = self.io.log {
            log.app_hung_up();
        }
        let ended = {
            let mut ledger = self.io.ledger.borrow_mut();
            if !app.at_boundary() {
                ledger.owe_client_line_end();
            }
            if app.reset {
                self.io.client.unread_last(&mut ledger);
            }
            let ended = Ended {
                answered: ledger.served(),
                lasted: clock::now().saturating_duration_since(started),
                heard: app.heard,
                refusal: app.refusal.clone(),
                probed: false,
            };
            let again = ledger.hung_up(&self.io.restarting());
            self.io.client.hung_up(again, &mut ledger);
            Ended {
                probed: ledger.probe_refused(),
                ..ended
            }
        };
        self.io.write_owed().await?;
        let too_long = self.io.ledger.borrow().too_long_to_replay();
        let hung_up = self
            .engine
            .on_app_closed(&ended, outage, instance, too_long, clock::now());
        match hung_up {
            HungUp::Absent(absence) => Ok(self.absent_with(absence)),
            HungUp::Silent(outage) => {
                if let Some(log) = self.io.log {
                    log.event(format_args!("the app closed the connection without a word"));
                }
                Ok(Phase::Resuming(outage))
            }
            HungUp::Restart(outage) => {
                say_args(
                    self.io.log,
                    format_args!(
                        "the app at '{}' closed the connection; waiting up to {}s for it to come \
                         back and take the session over",
                        self.config.endpoint.display(),
                        self.config.reconnect_timeout.as_secs()
                    ),
                );
                Ok(Phase::Resuming(outage))
            }
        }
    }

    /// Looks for an instance to take the session back, holding the
    /// client's lines, until the outage's deadline.
    async fn resuming(
        &mut self,
        mut outage: Outage,
    ) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        loop {
            if let Some(absence) = self.engine.on_outage_timeout(&mut outage, clock::now()) {
                return Ok(self.absent_with(absence));
            }
            let pause = outage.next_pause(&self.engine.bounds, clock::now());
            if let Some(log) = self.io.log {
                let why = outage.last_failure.as_deref();
                let why = why.unwrap_or("the app closed the connection");
                log.reconnect(self.attempts + 1, pause, &why);
            }
            if let Held::Eof = self.pause(pause).await? {
                return self.io.end_on_eof().await;
            }
            let budget = self.engine.resume_budget(&outage, clock::now());
            let error = match self.reach(true, budget).await? {
                Held::Eof => return self.io.end_on_eof().await,
                Held::Done(Ok(connected)) => {
                    return Ok(Phase::Online(connected, Origin::Outage(outage)))
                }
                Held::Done(Err(e)) => e,
            };
            let failure = failure(&error);
            if !failure.heals {
                return Ok(self.absent_because(error, failure.reason));
            }
            outage.last_failure = Some(crate::error_chain(&error));
        }
    }

    /// No app: answers every request at once, and looks for the app about
    /// once a second (less often when it refused), until it comes or stdin
    /// ends.
    async fn absent(
        &mut self,
        mut absence: Absence,
    ) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        {
            let mut ledger = self.io.ledger.borrow_mut();
            ledger.set_app_absent(absence.answered_for());
            self.io
                .client
                .go_absent(Rc::clone(&absence.answer), &mut ledger);
        }
        self.io.write_owed().await?;
        if !absence.said {
            absence.said = true;
            say_args(
                self.io.log,
                format_args!(
                    "{}; answering requests with that until the app is back (mcp-bridge keeps \
                     looking for it)",
                    crate::error_chain(&absence.error)
                ),
            );
        }
        self.engine.on_absent(&mut absence);
        loop {
            if let Held::Eof = self.pause(absence.pause).await? {
                if let Some(log) = self.io.log {
                    log.stdin_eof();
                }
                return Err(absence.error);
            }
            let budget = self.engine.bounds.look_interval;
            match self.reach(true, budget).await? {
                Held::Eof => return Err(absence.error),
                Held::Done(Ok(connected)) => {
                    if !absence.reached {
                        absence.reached = true;
                        say_args(
                            self.io.log,
                            format_args!(
                                "reached the app at '{}': handing it the session",
                                self.config.endpoint.display()
                            ),
                        );
                    }
                    return Ok(Phase::Online(connected, Origin::Absent(absence)));
                }
                Held::Done(Err(e)) => {
                    let failure = failure(&e);
                    if let Some(now) = self.engine.on_look_failed(&mut absence, failure, e) {
                        absence = now;
                        self.log_absence(&absence);
                        let mut ledger = self.io.ledger.borrow_mut();
                        ledger.set_app_absent(absence.answered_for());
                        self.io
                            .client
                            .go_absent(Rc::clone(&absence.answer), &mut ledger);
                    }
                }
            }
        }
    }

    /// One attempt to reach the app (`resumed`: after a hang-up), within
    /// `budget`, while the client's lines are held or answered.
    async fn reach(
        &mut self,
        resumed: bool,
        budget: Duration,
    ) -> Result<Held<Result<Connected<C::Reader, C::Writer>, BridgeError>>, BridgeError> {
        let attempt = attempt(
            &mut self.connector,
            &mut self.attempts,
            &self.io,
            resumed,
            budget,
        );
        let attempt = async { Some(attempt.await) };
        futures_lite::pin!(attempt);
        Ok(match self.io.hold(attempt).await? {
            Held::Done(Some(reached)) => Held::Done(reached),
            // (A pause's end: not this work's.)
            _ => Held::Eof,
        })
    }

    /// Waits `pause` while the client's lines are held or answered.
    async fn pause(&mut self, pause: Duration) -> Result<Held<()>, BridgeError> {
        let paused = async {
            clock::after(pause).await;
            None
        };
        futures_lite::pin!(paused);
        Ok(match self.io.hold::<C::Reader, C::Writer>(paused).await? {
            Held::Done(_) => Held::Done(()),
            Held::Eof => Held::Eof,
        })
    }

    /// The session is absent with `error`, said as `reason`.
    fn absent_because(&self, error: BridgeError, reason: Reason) -> Phase<C::Reader, C::Writer> {
        self.absent_with(self.engine.absence(error, reason))
    }

    /// The session is absent with `absence` (logged).
    fn absent_with(&self, absence: Absence) -> Phase<C::Reader, C::Writer> {
        self.log_absence(&absence);
        Phase::Absent(absence)
    }

    fn log_absence(&self, absence: &Absence) {
        if let Some(log) = self.io.log {
            log.event(format_args!(
                "no app: {} (reason {})",
                crate::error_chain(&absence.error),
                absence.answer.reason.name()
            ));
        }
    }
}

/// One connection attempt through the connector, logged.
fn attempt<'c, C: Connector, R, W>(
    connector: &'c mut C,
    attempts: &mut u32,
    io: &Io<'c, R, W>,
    resumed: bool,
    budget: Duration,
) -> impl Future<Output = Result<Connected<C::Reader, C::Writer>, BridgeError>> + 'c {
    *attempts += 1;
    let (attempt, log, endpoint) = (*attempts, io.log, &io.config.endpoint);
    if let Some(log) = log {
        log.connect_attempt(attempt, endpoint);
    }
    let started = clock::now();
    let connecting = connector.connect(resumed, budget);
    async move {
        let connected = connecting.await;
        if let Some(log) = log {
            let outcome = connected.as_ref().map(drop);
            let outcome = outcome.map_err(|e| e as &(dyn std::error::Error + 'static));
            log.connect_outcome(
                attempt,
                clock::now().saturating_duration_since(started),
                outcome,
            );
        }
        connected
    }
}

/// What a failed attempt tells the [engine](Engine), read off the
/// connector's error: whether waiting may cure it (nothing serves the
/// endpoint yet, or the connection broke before the handshake: a dying
/// instance), and what the client is told while it keeps the app away.
fn failure(error: &BridgeError) -> Failure {
    let (heals, reason) = match error {
        BridgeError::Connect(e) if e.is_untrusted_server() => (false, Reason::UntrustedServer),
        BridgeError::Connect(e) if e.may_heal() => (true, Reason::AppNotRunning),
        BridgeError::Handshake { .. } => (true, Reason::AppNotRunning),
        BridgeError::Refused { .. } => (false, Reason::AppRefused),
        BridgeError::CrashLoop { .. } => (false, Reason::CrashLoop),
        BridgeError::Resume { .. } => (false, Reason::AppNotRunning),
        _ => (false, Reason::Unreachable),
    };
    Failure { heals, reason }
}

impl<R, W> Io<'_, R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    /// The answer to requests in flight when the app hangs up.
    fn restarting(&self) -> Answer {
        Answer::new(
            Reason::AppRestarting,
            "the app closed the connection before answering this request (mcp-bridge is \
             reconnecting; it may or may not have been carried out)",
            &self.config.endpoint,
        )
    }

    /// Runs `work` while holding (or answering) what the client sends,
    /// writing what the client is owed as it arises. [`Held::Eof`]: stdin
    /// ended with no request held, or the drain grace after it ended with
    /// some (and `work` was dropped).
    async fn hold<AR, AW>(
        &mut self,
        mut work: Pin<&mut (dyn Future<Output = Waited<AR, AW>> + '_)>,
    ) -> Result<Held<Waited<AR, AW>>, BridgeError> {
        loop {
            self.write_owed().await?;
            if let Some(eof) = self.client.eof {
                if !self.client.holds_requests() {
                    return Ok(Held::Eof);
                }
                let left = (eof + self.config.drain_grace).saturating_duration_since(clock::now());
                return Ok(match wait::timeout(left, &mut work).await {
                    Some(done) => Held::Done(done),
                    None => Held::Eof,
                });
            }
            let (client, stdin, ledger) = (&mut self.client, &mut self.stdin, &self.ledger);
            let step = future::or(async { Ok(Some((&mut work).await)) }, async {
                online::read_client(stdin, client, ledger)
                    .await
                    .map(|()| None)
            })
            .await;
            match step {
                Ok(Some(done)) => return Ok(Held::Done(done)),
                Ok(None) => {}
                Err(source) => {
                    return Err(BridgeError::Relay(RelayError {
                        stage: Stage::ReadClient,
                        source,
                    }))
                }
            }
        }
    }

    /// stdin ended while no app was relayed to: what is held gets its
    /// error, and the session is over.
    async fn end_on_eof<AR, AW>(&mut self) -> Result<Phase<AR, AW>, BridgeError> {
        let drained = !self.client.holds_requests();
        let answer = Rc::new(Answer::new(
            Reason::StdinClosed,
            "stdin closed before the app could be reached; mcp-bridge has ended the session",
            &self.config.endpoint,
        ));
        self.client.go_absent(answer, &mut self.ledger.borrow_mut());
        self.write_owed().await?;
        if let Some(log) = self.log {
            log.stdin_eof();
        }
        Ok(Phase::Done(Ending::ClientClosed { drained }))
    }

    async fn write_owed(&mut self) -> Result<(), BridgeError> {
        let owed = self.ledger.borrow_mut().take_owed_client();
        self.write_out(&owed).await
    }

    /// Writes the bridge's own lines to stdout. A reader that went away
    /// ends the session like any other broken stdout.
    async fn write_out(&mut self, bytes: &[u8]) -> Result<(), BridgeError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(log) = self.log {
            online::log_lines(log, "bridge->cli", bytes);
        }
        super::send(&mut self.stdout, bytes)
            .await
            .map_err(|source| {
                BridgeError::Relay(RelayError {
                    stage: Stage::WriteClient,
                    source,
                })
            })
    }
}
