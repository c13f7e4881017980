//! One MCP client's session, carried across the app's restarts: an
//! explicit state machine.
//!
//! MCP CLIs never restart a stdio server that exited, and they hide its
//! stderr: a bridge that exits because the app is starting, restarting or
//! refusing takes the agent's tools away for the rest of its life, with no
//! reason given. So the session is one loop over one [`Phase`], and every
//! transition is made in [`Session::run`]'s callees, each returning the next
//! phase:
//!
//! ```text
//!  Connecting ──connected──▶ Online ──stdin EOF / stdout gone──▶ Done (exit 0)
//!      │                     ▲   │
//!      │ cannot connect      │   └─app hung up──▶ Resuming ──▶ Online (replayed)
//!      │ / refused           │                       │
//!      ▼                     └───────────────────────┘
//!    Failed ◀── deadline passed, replay rejected, crash loop ──┘
//!      └── answers every request with the reason until stdin EOF (exit 1)
//! ```
//!
//! - **Online**: the [relay](crate::relay) forwards bytes both ways,
//!   unchanged and at once, while each direction's chunks are shown to a
//!   streaming [envelope scanner](crate::envelope): the bridge learns which
//!   requests are pending and records the session for replay, in the
//!   [ledger](super::ledger). What was held offline is relayed first, by
//!   the relay itself, so the app's replies are read while it is written.
//! - **Offline** (connecting, resuming, failed): the bridge owns both ends
//!   of stdio and works [line by line](super::offline): lines are held (up
//!   to [`HOLD_LIMIT`]) or answered with an error at once.
//!
//! The bounds of surviving a restart (the README's "When the app is not
//! there" has the same table for users):
//!
//! - An **outage** starts when the app hangs up and lasts until a new
//!   instance has answered the replayed `initialize` and *stayed up*: kept
//!   the connection for [`STAYED_UP`]. It fails when it lasts longer than
//!   `--reconnect-timeout`, counted from the hang-up that started it.
//! - Within an outage every **attempt** (connect, handshake, replay) that
//!   fails is one failed attempt: a reset, an EOF, or no reply to the
//!   replayed `initialize` within [`RESUME_REPLY_TIMEOUT`] closes the
//!   connection and tries again after a pause. Pauses start at
//!   [`FIRST_PAUSE`] (so the bridge does not land in the dying app's listen
//!   backlog) and double up to [`PAUSE_CAP`]; an outage starting soon after
//!   others starts with a longer one (doubled per hang-up in the last
//!   [`CRASH_LOOP_WINDOW`]).
//! - More than [`CRASH_LOOP_LIMIT`] hang-ups within [`CRASH_LOOP_WINDOW`] is
//!   a **crash loop**: the bridge stops reconnecting and answers every
//!   request with an error naming it.
//! - The app rejecting the replayed `initialize`, a connect fault waiting
//!   cannot cure, or a server of another user end the outage at once.
//!
//! The bridge never invents a message in the app's name, except these:
//! error responses (code [`ERROR_CODE`]) to requests the app cannot answer,
//! and `notifications/*/list_changed` once per resumed instance, for the
//! lists it declares, so the client asks it what it offers. Replies to the
//! requests it replays are the bridge's and are not forwarded.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, Cursor};

use super::hold::{Client, LineFate};
use super::ledger::{Dest, Ledger};
use super::resume;
use super::stale::Filtered;
use super::{
    send, BridgeError, Config, Connector, DynRead, DynWatch, DynWrite, ERROR_CODE, HOLD_LIMIT,
};
use crate::envelope::{self, array_of_errors, Kind, Scanner};
use crate::relay::{self, Ending, Stage};
use crate::stdio::Hangups;
use crate::traffic_log::{Direction, LineTap, TrafficLog};
use crate::wait;

/// How long a new app instance has to answer the replayed session (all of
/// it: `initialize`, the log level, the subscriptions) before the attempt
/// counts as failed. A local app answers in milliseconds; one that does not
/// answer in 5 s is most likely a dying instance whose listen backlog took
/// the connection.
pub const RESUME_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a resumed instance must keep the connection for the outage to
/// be over. One that hangs up sooner is part of the same outage: same
/// deadline, growing pauses.
pub const STAYED_UP: Duration = Duration::from_secs(2);

/// The pause before the first attempt after a hang-up: long enough for a
/// dying app to close its listening socket, short enough to go unnoticed.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two attempts.
pub const PAUSE_CAP: Duration = Duration::from_secs(2);

/// More hang-ups than this within [`CRASH_LOOP_WINDOW`] is a crash loop.
pub const CRASH_LOOP_LIMIT: usize = 10;

/// See [`CRASH_LOOP_LIMIT`].
pub const CRASH_LOOP_WINDOW: Duration = Duration::from_secs(60);

/// How long the bridge keeps answering requests with errors when the app
/// cannot be reached, before it exits on its own: a client that never
/// closes stdin still gets a bounded process, and one that is used within
/// the hour still gets its answers.
pub const FAILED_LIMIT: Duration = Duration::from_secs(60 * 60);

/// The bounds the session works within: the constants above, smaller in
/// the session's tests.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    pub(super) reply_timeout: Duration,
    pub(super) stayed_up: Duration,
    pub(super) first_pause: Duration,
    pub(super) pause_cap: Duration,
    pub(super) crash_loop_limit: usize,
    pub(super) crash_loop_window: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            reply_timeout: RESUME_REPLY_TIMEOUT,
            stayed_up: STAYED_UP,
            first_pause: FIRST_PAUSE,
            pause_cap: PAUSE_CAP,
            crash_loop_limit: CRASH_LOOP_LIMIT,
            crash_loop_window: CRASH_LOOP_WINDOW,
        }
    }
}

/// Where the session is.
enum Phase<AR, AW> {
    /// Waiting for the app the first time, within `--connect-timeout`.
    Connecting,
    /// The app hung up; reconnecting and replaying the session.
    Resuming(Outage),
    /// Relaying to an app instance.
    Online(Connection<AR, AW>),
    /// The session failed: every request is answered with the reason.
    Failed(BridgeError),
    /// The client ended the session.
    Done(Ending),
}

/// An app outage: from a hang-up until a resumed instance stayed up.
#[derive(Debug)]
struct Outage {
    /// When it fails.
    deadline: Instant,
    /// The next pause before an attempt.
    pause: Duration,
    /// Why the last attempt failed.
    last_failure: Option<String>,
}

/// A connection to an app instance, ready to relay.
struct Connection<AR, AW> {
    reader: AR,
    writer: AW,
    /// What the app sent while the session was replayed, for the client.
    forward: Vec<u8>,
    /// The outage this instance is ending, until it stays up.
    outage: Option<(Outage, Instant)>,
}

/// Why one resume attempt failed.
enum Failure {
    /// Worth another attempt (after a pause, within the deadline).
    Retry(String),
    /// No attempt can cure it.
    Final(BridgeError),
}

/// The outcome of running something while holding the client's lines.
enum Held<T> {
    Done(T),
    /// stdin ended, and nothing held is worth waiting for (any longer).
    Eof,
}

pub(super) struct Session<'a, R, W, C> {
    config: &'a Config,
    connector: C,
    client: Client<R>,
    stdout: W,
    ledger: Ledger,
    hangups: Option<&'a Hangups>,
    /// The traffic log, if one was asked for, and a line tap per direction
    /// (whole session, so lines cut by a reconnect stay one record).
    log: Option<&'a TrafficLog>,
    up_tap: Option<LineTap>,
    down_tap: Option<LineTap>,
    /// When the app hung up, within the last [`CRASH_LOOP_WINDOW`].
    hang_ups: VecDeque<Instant>,
    /// Attempts to reach the app so far, for the log.
    attempts: u32,
    pub(super) bounds: Bounds,
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
        stdin: R,
        stdout: W,
        hangups: Option<&'a Hangups>,
        log: Option<&'a TrafficLog>,
    ) -> Self {
        Session {
            config,
            connector,
            client: Client::new(stdin),
            stdout,
            ledger: Ledger::default(),
            hangups,
            log,
            up_tap: log.map(|log| log.tap(Direction::CliToApp)),
            down_tap: log.map(|log| log.tap(Direction::AppToCli)),
            hang_ups: VecDeque::new(),
            attempts: 0,
            bounds: Bounds::default(),
        }
    }

    /// Runs the whole session; see the [module docs](self).
    pub(super) async fn run(mut self) -> Result<Ending, BridgeError> {
        let mut phase = Phase::Connecting;
        loop {
            phase = match phase {
                Phase::Connecting => self.connecting().await?,
                Phase::Resuming(outage) => self.resuming(outage).await?,
                Phase::Online(connection) => self.online(connection).await?,
                Phase::Failed(failure) => return self.failed(failure).await,
                Phase::Done(ending) => return Ok(ending),
            };
        }
    }

    /// The first connection, within `--connect-timeout`. After stdin ends
    /// with requests held, the connect goes on (a one-shot client's request
    /// is still delivered), within the same bound.
    async fn connecting(&mut self) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        let budget = self.config.connect_timeout;
        self.attempts += 1;
        let attempt = attempt(
            &mut self.connector,
            self.attempts,
            self.config,
            self.log,
            false,
            budget,
        );
        let held = hold_while(
            &mut self.client,
            &mut self.ledger,
            &mut self.stdout,
            self.log,
            budget,
            attempt,
        );
        Ok(match held.await? {
            Held::Eof => self.end_on_eof().await?,
            Held::Done(Ok((reader, writer))) => Phase::Online(Connection {
                reader,
                writer,
                forward: Vec::new(),
                outage: None,
            }),
            Held::Done(Err(failure)) => Phase::Failed(failure),
        })
    }

    /// Reconnects and replays until an instance takes the session back, the
    /// outage's deadline passes, or a failure no retry can cure.
    async fn resuming(
        &mut self,
        mut outage: Outage,
    ) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        let grace = self.config.drain_grace;
        loop {
            let now = Instant::now();
            if now >= outage.deadline {
                return Ok(Phase::Failed(self.resume_failed(&outage)));
            }
            let pause = outage.pause.min(outage.deadline - now);
            let paused = async_io::Timer::after(pause);
            let held = hold_while(
                &mut self.client,
                &mut self.ledger,
                &mut self.stdout,
                self.log,
                grace,
                paused,
            );
            if let Held::Eof = held.await? {
                return self.end_on_eof().await;
            }
            outage.pause = (outage.pause * 2).min(self.bounds.pause_cap);
            if let Some(log) = self.log {
                let why = outage.last_failure.as_deref();
                let why = why.unwrap_or("the app closed the connection");
                log.reconnect(self.attempts + 1, pause, &why);
            }
            let left = outage.deadline.saturating_duration_since(Instant::now());
            let snapshot = self.ledger.record.clone();
            let (log, endpoint) = (self.log, self.config.endpoint.clone());
            self.attempts += 1;
            let connecting = attempt(
                &mut self.connector,
                self.attempts,
                self.config,
                log,
                true,
                left,
            );
            let reply_timeout = self.bounds.reply_timeout.min(left);
            let attempt = async move {
                let (mut reader, mut writer) = match connecting.await {
                    Ok(connection) => connection,
                    // The connection broke before the handshake was sent:
                    // a dying instance's backlog, most likely.
                    Err(e @ BridgeError::Handshake { .. }) => {
                        return Err(Failure::Retry(crate::error_chain(&e)))
                    }
                    // Waited until the deadline, or a fault waiting cannot
                    // cure.
                    Err(e) => return Err(Failure::Final(e)),
                };
                let replaying = resume::resume(&snapshot, &mut reader, &mut writer);
                match wait::timeout(reply_timeout, replaying).await {
                    Some(Ok(resumed)) => Ok((reader, writer, resumed)),
                    Some(Err(failure)) if failure.rejected => {
                        Err(Failure::Final(BridgeError::Resume {
                            endpoint,
                            reason: failure.reason,
                        }))
                    }
                    Some(Err(failure)) => Err(Failure::Retry(failure.reason)),
                    None => Err(Failure::Retry(format!(
                        "the replayed session got no answer within {:?}",
                        reply_timeout
                    ))),
                }
            };
            let held = hold_while(
                &mut self.client,
                &mut self.ledger,
                &mut self.stdout,
                log,
                grace,
                attempt,
            );
            match held.await? {
                Held::Eof => return self.end_on_eof().await,
                Held::Done(Ok((reader, writer, resumed))) => {
                    if let Some(log) = log {
                        log.event(format_args!(
                            "replayed the session (initialize and what followed it)"
                        ));
                    }
                    let notices = resume::list_changed_notifications(&resumed);
                    self.write_out(&notices).await?;
                    return Ok(Phase::Online(Connection {
                        reader,
                        writer,
                        forward: resumed.forward,
                        outage: Some((outage, Instant::now())),
                    }));
                }
                Held::Done(Err(Failure::Final(failure))) => return Ok(Phase::Failed(failure)),
                Held::Done(Err(Failure::Retry(reason))) => {
                    if let Some(log) = log {
                        log.event(format_args!("resume attempt failed: {}", reason));
                    }
                    outage.last_failure = Some(reason);
                }
            }
        }
    }

    fn resume_failed(&self, outage: &Outage) -> BridgeError {
        let reason = match &outage.last_failure {
            Some(reason) => reason.clone(),
            None => "it did not come back".into(),
        };
        BridgeError::Resume {
            endpoint: self.config.endpoint.clone(),
            reason: format!(
                "{} (gave up {:?} after the hang-up)",
                reason, self.config.reconnect_timeout
            ),
        }
    }

    /// stdin ended while no app was relayed to: what is held gets its error,
    /// and the session is over.
    async fn end_on_eof(&mut self) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        let drained = !self.client.holds_requests();
        self.client.refuse_held(
            "stdin closed before the app could be reached; the bridge has ended the session",
        );
        self.write_owed().await?;
        if let Some(log) = self.log {
            log.stdin_eof();
        }
        Ok(Phase::Done(Ending::ClientClosed { drained }))
    }

    /// Relays until the session or the connection ends.
    async fn online(
        &mut self,
        connection: Connection<C::Reader, C::Writer>,
    ) -> Result<Phase<C::Reader, C::Writer>, BridgeError> {
        // The rest of a dropped line is read and discarded here: no fragment
        // of it may reach the app.
        while self.client.line != LineFate::Hold
            && self.client.up.mid_line()
            && self.client.eof.is_none()
        {
            self.client
                .read_offline(&LineFate::Hold, &mut self.ledger)
                .await?;
            self.write_owed().await?;
        }
        self.write_owed().await?;
        let Connection {
            reader,
            writer,
            forward,
            outage,
        } = connection;
        let first = outage.is_none() && self.hang_ups.is_empty();
        let held = self.client.take_held(&mut self.ledger);
        let mut unseen_held = held.len();
        let mut in_held = false;
        let client = &mut self.client;
        let (up_tap, down_tap) = (&mut self.up_tap, &mut self.down_tap);
        let ledger = RefCell::new(std::mem::take(&mut self.ledger));
        let mut down = Scanner::new();
        let mut heard = 0u64;
        let mut lines = 0u64;
        let mut refusal: Option<String> = None;
        let up_scanner = &mut client.up;
        let up = |chunk: &[u8]| {
            if let Some(tap) = up_tap.as_mut() {
                tap.feed(chunk);
            }
            // Held bytes were scanned as they were read.
            let skip = unseen_held.min(chunk.len());
            unseen_held -= skip;
            in_held = skip > 0;
            let part = &chunk[skip..];
            ledger
                .borrow_mut()
                .pending
                .batches
                .up
                .chunk(part, up_scanner.mid_line());
            up_scanner.feed(part, |envelope| {
                let mut ledger = ledger.borrow_mut();
                ledger.pending.batches.up_line(part, envelope.len);
                // Stale replies were taken out before the relay saw them.
                let _ = ledger.client_line(&envelope, Dest::App);
            });
            ledger.borrow_mut().pending.batches.up.chunk_end(part);
        };
        let down_watch = |chunk: &[u8]| {
            if let Some(tap) = down_tap.as_mut() {
                tap.feed(chunk);
            }
            heard += chunk.len() as u64;
            ledger
                .borrow_mut()
                .pending
                .batches
                .down
                .chunk(chunk, down.mid_line());
            down.feed(chunk, |envelope| {
                let mut ledger = ledger.borrow_mut();
                ledger.pending.batches.down_line(chunk, envelope.len);
                lines += 1;
                let refuses = envelope.kind == Kind::ErrorResponse && envelope.id == Some(b"null");
                if lines == 1 && refuses {
                    let reason = envelope.error_message.unwrap_or("(no reason given)");
                    refusal = Some(reason.to_string());
                }
                ledger.app_line(&envelope);
            });
            ledger.borrow_mut().pending.batches.down.chunk_end(chunk);
        };
        let filtered = Filtered::new(&mut client.stdin, &ledger);
        let mut client_in = Cursor::new(held).chain(filtered);
        let mut app_in = Cursor::new(forward).chain(reader);
        let (mut up, mut down_watch) = (up, down_watch);
        let relayed = relay::relay_watched(
            &mut client_in as &mut DynRead<'_>,
            &mut self.stdout as &mut DynWrite<'_>,
            &mut app_in as &mut DynRead<'_>,
            Box::new(writer) as Box<DynWrite<'_>>,
            self.config.drain_grace,
            &mut up as &mut DynWatch<'_>,
            &mut down_watch as &mut DynWatch<'_>,
        );
        let input_closed = super::input_closed_then_grace(self.hangups, self.config.drain_grace);
        let ended = future::or(relayed, input_closed).await;
        self.ledger = ledger.into_inner();
        let ending = match ended {
            Ok(ending) => ending,
            Err(e) if e.stage == Stage::WriteServer && in_held => {
                return Err(BridgeError::DeliverHeld {
                    endpoint: self.config.endpoint.clone(),
                    source: e.source,
                })
            }
            Err(e) => return Err(BridgeError::Relay(e)),
        };
        if let Some(log) = self.log {
            match ending {
                Ending::ServerClosed => log.app_hung_up(),
                Ending::ClientClosed { .. } => log.stdin_eof(),
                Ending::ClientGone => log.event(format_args!("stdout's reader went away")),
            }
        }
        if ending != Ending::ServerClosed {
            return Ok(Phase::Done(ending));
        }
        let endpoint = self.config.endpoint.clone();
        if first && (heard == 0 || refusal.is_some()) {
            let reason = if heard == 0 { None } else { refusal };
            return Ok(Phase::Failed(BridgeError::Refused { endpoint, reason }));
        }
        if down.mid_line() {
            // The app died mid-line: end that line, so what the bridge
            // writes next is a line of its own.
            self.write_out(b"\n").await?;
        }
        self.answer_pending(
            "the app closed the connection before answering this request (the bridge is \
             reconnecting)",
        )
        .await?;
        self.ledger.app_requests.hung_up();
        if self.client.up.mid_line() {
            // The start of this line went to the app that closed.
            self.client.line = LineFate::Interrupted;
            self.client.batch = self.ledger.pending.batches.up.take_current();
        }
        let now = Instant::now();
        self.hang_ups.push_back(now);
        while self.hang_ups.front().map_or(false, |t| {
            now.duration_since(*t) > self.bounds.crash_loop_window
        }) {
            self.hang_ups.pop_front();
        }
        if self.hang_ups.len() > self.bounds.crash_loop_limit {
            return Ok(Phase::Failed(BridgeError::CrashLoop {
                endpoint,
                hang_ups: self.hang_ups.len(),
                window: self.bounds.crash_loop_window,
            }));
        }
        if self.ledger.record.too_long {
            return Ok(Phase::Failed(BridgeError::Resume {
                endpoint,
                reason: format!(
                    "the client's initialize is longer than {} KiB, too long to replay",
                    HOLD_LIMIT / 1024
                ),
            }));
        }
        let outage = match outage {
            // Back too briefly: the same outage goes on.
            Some((outage, resumed)) if resumed.elapsed() < self.bounds.stayed_up => outage,
            _ => {
                let recent = self.hang_ups.len().min(16) as u32;
                Outage {
                    deadline: now + self.config.reconnect_timeout,
                    pause: (self.bounds.first_pause * (1 << (recent - 1)))
                        .min(self.bounds.pause_cap),
                    last_failure: None,
                }
            }
        };
        Ok(Phase::Resuming(outage))
    }

    /// Answers every request the app will not answer now.
    async fn answer_pending(&mut self, message: &str) -> Result<(), BridgeError> {
        let mut out = Vec::new();
        for id in self.ledger.pending.drain() {
            out.extend_from_slice(&envelope::error_response_line(&id, ERROR_CODE, message));
        }
        for ids in self.ledger.pending.batches.drain() {
            out.extend(array_of_errors(&ids, ERROR_CODE, message));
        }
        self.write_out(&out).await
    }

    /// The app cannot be reached, refused, or did not take the session
    /// back: answers every request (held, pending and to come) with
    /// `failure` until stdin ends or [`FAILED_LIMIT`] passes, and ends with
    /// it.
    async fn failed(&mut self, failure: BridgeError) -> Result<Ending, BridgeError> {
        if let Some(log) = self.log {
            log.event(format_args!(
                "the session failed: {}",
                crate::error_chain(&failure)
            ));
        }
        let message = crate::error_chain(&failure);
        self.answer_pending(&message).await?;
        self.client.refuse_held(&message);
        let fate = LineFate::Fail(message);
        if self.client.line == LineFate::Hold {
            self.client.line = fate.clone();
        }
        let answering = async {
            loop {
                self.write_owed().await?;
                if self.client.eof.is_some()
                    || !self.client.read_offline(&fate, &mut self.ledger).await?
                {
                    return self.write_owed().await;
                }
            }
        };
        match wait::timeout(FAILED_LIMIT, answering).await {
            Some(Err(e)) => Err(e),
            // stdin ended, or nobody asked for an hour.
            _ => Err(failure),
        }
    }

    async fn write_owed(&mut self) -> Result<(), BridgeError> {
        let owed = std::mem::take(&mut self.client.owed);
        self.write_out(&owed).await
    }

    /// Writes the bridge's own lines to stdout.
    async fn write_out(&mut self, bytes: &[u8]) -> Result<(), BridgeError> {
        write_out(&mut self.stdout, self.log, bytes).await
    }
}

/// One connection attempt through the connector, logged.
fn attempt<'c, C: Connector>(
    connector: &'c mut C,
    attempt: u32,
    config: &Config,
    log: Option<&'c TrafficLog>,
    resumed: bool,
    budget: Duration,
) -> impl Future<Output = Result<(C::Reader, C::Writer), BridgeError>> + 'c {
    if let Some(log) = log {
        log.connect_attempt(attempt, &config.endpoint);
    }
    let started = Instant::now();
    let connecting = connector.connect(resumed, budget);
    async move {
        let connected = connecting.await;
        if let Some(log) = log {
            let outcome = connected.as_ref().map(drop);
            let outcome = outcome.map_err(|e| e as &(dyn std::error::Error + 'static));
            log.connect_outcome(attempt, started.elapsed(), outcome);
        }
        connected
    }
}

/// Runs `work` while holding what the client sends, writing what the
/// client is owed as it arises. [`Held::Eof`]: stdin ended with no request
/// held, or `eof_grace` after it ended with some (and `work` was dropped).
async fn hold_while<R, W, T>(
    client: &mut Client<R>,
    ledger: &mut Ledger,
    stdout: &mut W,
    log: Option<&TrafficLog>,
    eof_grace: Duration,
    work: impl Future<Output = T>,
) -> Result<Held<T>, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // The loop is compiled once for every kind of work (a connect, a
    // pause, a resume attempt): it sees the work as a future of no output,
    // which leaves the output here.
    let mut output = None;
    {
        let work = async {
            output = Some(work.await);
        };
        futures_lite::pin!(work);
        hold(client, ledger, stdout, log, eof_grace, work).await?;
    }
    Ok(output.map_or(Held::Eof, Held::Done))
}

/// [`hold_while`]'s loop: returns when `work` is done, or at the end of
/// stdin as [`hold_while`] says (with `work` unfinished).
async fn hold<R, W>(
    client: &mut Client<R>,
    ledger: &mut Ledger,
    stdout: &mut W,
    log: Option<&TrafficLog>,
    eof_grace: Duration,
    mut work: std::pin::Pin<&mut dyn Future<Output = ()>>,
) -> Result<(), BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let owed = std::mem::take(&mut client.owed);
        write_out(stdout, log, &owed).await?;
        if let Some(eof) = client.eof {
            if client.holds_requests() {
                let left = (eof + eof_grace).saturating_duration_since(Instant::now());
                wait::timeout(left, work).await;
            }
            return Ok(());
        }
        let done = future::or(
            async {
                (&mut work).await;
                None
            },
            async { Some(client.read_offline(&LineFate::Hold, ledger).await) },
        )
        .await;
        match done {
            None => return Ok(()),
            Some(read) => {
                read?;
            }
        }
    }
}

/// Writes the bridge's own lines to stdout. A reader that went away ends
/// the session like any other broken stdout.
async fn write_out(
    stdout: &mut (impl AsyncWrite + Unpin),
    log: Option<&TrafficLog>,
    bytes: &[u8],
) -> Result<(), BridgeError> {
    if bytes.is_empty() {
        return Ok(());
    }
    if let Some(log) = log {
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            log.event(format_args!(
                "bridge->cli {}",
                String::from_utf8_lossy(line).trim_end()
            ));
        }
    }
    send(stdout, bytes).await.map_err(|source| {
        BridgeError::Relay(relay::RelayError {
            stage: Stage::WriteClient,
            source,
        })
    })
}
