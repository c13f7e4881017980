//! One MCP client's session, carried across the app's restarts.
//!
//! MCP CLIs never restart a stdio server that exited, and they hide its
//! stderr: a bridge that exits because the app is starting, restarting or
//! refusing takes the agent's tools away for the rest of its life, with no
//! reason given. So the session has two phases, and moves between them for
//! as long as the client keeps stdin open:
//!
//! - **Online**: the [relay](crate::relay) forwards bytes both ways,
//!   unchanged and at once, while each direction's chunks are shown to a
//!   streaming JSON-RPC [envelope scanner](crate::envelope). That is all
//!   the bridge learns: which client requests the app has not answered yet,
//!   and the few client messages the session's state depends on
//!   (`initialize`, `notifications/initialized`, `logging/setLevel`,
//!   `resources/subscribe`), recorded for replay.
//! - **Offline**: no app to talk to. The bridge owns both ends of stdio
//!   and works line by line. While it waits for the app (starting, or
//!   restarting), the client's messages are held, in order, up to
//!   [`HOLD_LIMIT`]; once the app is back, the session is replayed and the
//!   held messages follow. When the app cannot be reached or refuses, every
//!   request gets a JSON-RPC error response carrying the reason, the one
//!   channel every MCP CLI shows its user.
//!
//! The bridge never invents a message in the app's name, except these:
//! error responses (code [`ERROR_CODE`]) to requests the app cannot answer,
//! and `notifications/*/list_changed` after a restart, so the client asks
//! the new app instance what it offers. Replies to the requests it replays
//! are the bridge's own and are not forwarded.

use std::time::{Duration, Instant};

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{BridgeError, Config};
use crate::endpoint::{self, Reader, Writer};
use crate::envelope::{self, Envelope, Kind, Scanner};
use crate::relay::{self, Ending, BUFFER_SIZE};
use crate::stdio::Hangups;
use crate::traffic_log::{Direction, LineTap, TrafficLog};
use crate::wait;

/// The JSON-RPC error code of every response the bridge writes itself:
/// the first of the "server error" range JSON-RPC reserves for the
/// implementation, which MCP CLIs show as `MCP error -32000: <message>`.
pub const ERROR_CODE: i64 = -32000;

/// Most bytes of client messages held while the app is away. A client
/// sends a handful of small requests while it waits for a reply; more than
/// this is answered with an error instead of held.
pub const HOLD_LIMIT: usize = 1024 * 1024;

/// Longest line read from the app while the session is being replayed
/// (the replies to the replayed requests, and whatever the app says
/// meanwhile); an app that sends more on one line is treated as broken.
const REPLAY_LINE_LIMIT: usize = 4 * 1024 * 1024;

/// Most bytes of recorded `resources/subscribe` requests replayed after a
/// restart; subscriptions beyond it are not renewed.
const SUBSCRIBE_LIMIT: usize = 256 * 1024;

/// How long the bridge keeps answering requests with errors when the app
/// cannot be reached, before it exits on its own: a client that never
/// closes stdin still gets a bounded process, and one that is used within
/// the hour still gets its answers.
pub const FAILED_LIMIT: Duration = Duration::from_secs(60 * 60);

/// The client messages the session's state depends on, recorded whole as
/// they pass so they can be replayed to a new app instance.
const RECORDED: &[&str] = &[
    "initialize",
    "notifications/initialized",
    "logging/setLevel",
    "resources/subscribe",
];

/// Runs a whole session; see the [module docs](self).
pub(super) async fn run<R, W>(
    config: &Config,
    stdin: R,
    stdout: W,
    hangups: Option<&Hangups>,
    log: Option<&TrafficLog>,
) -> Result<Ending, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = Session {
        config,
        client: Client {
            stdin,
            up: Scanner::recording(RECORDED),
            held: Vec::new(),
            held_ids: Vec::new(),
            line_start: 0,
            line: LineFate::Hold,
            owed: Vec::new(),
            replay: Replay::default(),
            eof: false,
        },
        stdout,
        pending: Vec::new(),
        restarts: 0,
        log,
        up_tap: log.map(|log| log.tap(Direction::CliToApp)),
        down_tap: log.map(|log| log.tap(Direction::AppToCli)),
        attempts: 0,
    };
    session.run(hangups).await
}

struct Session<'a, R, W> {
    config: &'a Config,
    client: Client<R>,
    stdout: W,
    /// Raw ids of client requests sent to the app and not answered yet.
    pending: Vec<Vec<u8>>,
    /// How many times the app closed the connection and was reconnected to.
    restarts: u32,
    /// The traffic log, if one was asked for, and a line tap per direction
    /// (whole session, so lines cut by a reconnect stay one record).
    log: Option<&'a TrafficLog>,
    up_tap: Option<LineTap>,
    down_tap: Option<LineTap>,
    /// Connection attempts so far (each connect that waits counts once).
    attempts: u32,
}

/// The client's side of the session while offline: stdin, read line by
/// line, and what is done with each line.
struct Client<R> {
    stdin: R,
    /// The client-to-app scanner, for the whole session: online it sees the
    /// relayed chunks, offline the lines read here.
    up: Scanner,
    /// Client bytes held for the app, whole lines and the start of the
    /// current one.
    held: Vec<u8>,
    /// Raw ids of the requests in `held`.
    held_ids: Vec<Vec<u8>>,
    /// Where the current line starts in `held`.
    line_start: usize,
    /// What happens to the current line.
    line: LineFate,
    /// Error responses to write to stdout at the next chance (lines).
    owed: Vec<u8>,
    replay: Replay,
    /// stdin has ended.
    eof: bool,
}

/// What becomes of the client line being read offline.
#[derive(Clone, Debug, PartialEq)]
enum LineFate {
    /// Held for the app.
    Hold,
    /// Dropped: it did not fit in [`HOLD_LIMIT`].
    Overflow,
    /// Dropped: its start went to an app that closed the connection.
    Interrupted,
    /// Answered with an error: the app cannot be reached.
    Fail(String),
}

/// One recorded client message, and where its `id` sits in it.
#[derive(Clone)]
struct Recorded {
    line: Vec<u8>,
    id: Option<(usize, usize)>,
}

impl Recorded {
    /// The line with its id replaced by `raw_id` (a request), or as it is
    /// (a notification).
    fn with_id(&self, raw_id: &[u8]) -> Vec<u8> {
        match self.id {
            Some((start, end)) => [&self.line[..start], raw_id, &self.line[end..]].concat(),
            None => self.line.clone(),
        }
    }
}

/// What is replayed to a new app instance.
#[derive(Default)]
struct Replay {
    /// The client's first `initialize` request.
    initialize: Option<Recorded>,
    /// Its `notifications/initialized`.
    initialized: Option<Recorded>,
    /// Its latest `logging/setLevel`.
    set_level: Option<Recorded>,
    /// Its `resources/subscribe` requests, up to [`SUBSCRIBE_LIMIT`] bytes.
    subscribe: Vec<Recorded>,
}

impl Replay {
    fn record(&mut self, envelope: &Envelope<'_>) {
        let line = match envelope.line {
            Some(line) => line.to_vec(),
            None => return,
        };
        let id = envelope.id.map(|id| {
            let start = envelope.id_offset as usize;
            (start, start + id.len())
        });
        let recorded = Recorded { line, id };
        match envelope.method {
            Some("initialize") if self.initialize.is_none() => self.initialize = Some(recorded),
            Some("notifications/initialized") => self.initialized = Some(recorded),
            Some("logging/setLevel") => self.set_level = Some(recorded),
            Some("resources/subscribe") => {
                let used: usize = self.subscribe.iter().map(|r| r.line.len()).sum();
                if used + recorded.line.len() <= SUBSCRIBE_LIMIT {
                    self.subscribe.push(recorded);
                }
            }
            _ => {}
        }
    }

    /// Takes in what was recorded while `self` was out being replayed.
    fn absorb(&mut self, meanwhile: Replay) {
        if self.initialize.is_none() {
            self.initialize = meanwhile.initialize;
        }
        if meanwhile.initialized.is_some() {
            self.initialized = meanwhile.initialized;
        }
        if meanwhile.set_level.is_some() {
            self.set_level = meanwhile.set_level;
        }
        self.subscribe.extend(meanwhile.subscribe);
    }
}

/// Why the session is offline.
enum Offline {
    /// The app has not been reached yet.
    Starting,
    /// The app closed the connection; the session is to be resumed.
    Restarting,
}

/// How a connection ended while online.
enum Online {
    /// The session is over: stdin ended (and the drain is done), or
    /// stdout's reader went away.
    Ended(Ending),
    /// The app closed the connection while the client went on.
    AppClosed,
    /// The app closed the connection before saying anything, or after a
    /// refusal line only: it refused this client.
    Refused(Option<String>),
}

impl<'a, R, W> Session<'a, R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    async fn run(&mut self, hangups: Option<&Hangups>) -> Result<Ending, BridgeError> {
        let mut why = Offline::Starting;
        loop {
            let (reader, writer, leftover) = match self.come_online(&why).await {
                Ok(Some(connection)) => connection,
                // stdin ended, nothing held, while waiting for the app:
                // nobody is left to wait for it.
                Ok(None) => return Ok(Ending::ClientClosed { drained: true }),
                Err(failure) if !self.config.reconnect => return Err(failure),
                Err(failure) => return self.fail(failure).await,
            };
            match self.online(reader, writer, &leftover, hangups).await? {
                Online::Ended(ending) => return Ok(ending),
                Online::Refused(reason) => {
                    let refused = BridgeError::Refused {
                        endpoint: self.config.endpoint.clone(),
                        reason,
                    };
                    if !self.config.reconnect {
                        return Err(refused);
                    }
                    return self.fail(refused).await;
                }
                Online::AppClosed if !self.config.reconnect => return Ok(Ending::ServerClosed),
                Online::AppClosed => {
                    self.restarts += 1;
                    self.answer_pending("the app closed the connection before answering this request (the bridge is reconnecting)")
                        .await?;
                    why = Offline::Restarting;
                }
            }
        }
    }

    /// Connects (waiting for the app, and resuming the session after a
    /// restart), holding what the client sends meanwhile, and delivers what
    /// was held. `Ok(None)`: stdin ended while waiting for a first
    /// connection.
    async fn come_online(
        &mut self,
        why: &Offline,
    ) -> Result<Option<(Reader, Writer, Vec<u8>)>, BridgeError> {
        let config = self.config;
        let (budget, resumed) = match why {
            Offline::Starting => (config.connect_timeout, false),
            Offline::Restarting => (config.reconnect_timeout, true),
        };
        if resumed && self.client.up.mid_line() {
            // The start of this line went to the app that closed.
            self.client.line = LineFate::Interrupted;
        }
        let deadline = Instant::now() + budget;
        self.attempts += 1;
        let (attempt, log) = (self.attempts, self.log);
        if let Some(log) = log {
            if resumed {
                log.reconnect(attempt, Duration::ZERO, &"the app closed the connection");
            }
            log.connect_attempt(attempt, &config.endpoint);
        }
        let started = Instant::now();
        let connecting = async {
            let (reader, mut writer) = if config.reconnect {
                endpoint::connect_when_ready(&config.endpoint, budget).await
            } else {
                endpoint::connect(&config.endpoint, budget).await
            }
            .map_err(BridgeError::Connect)?;
            endpoint::verify_server(&config.endpoint, &reader, config.trusted_server.as_ref())
                .map_err(BridgeError::Connect)?;
            let mut handshake = config.handshake.clone();
            handshake.resumed = resumed;
            if let Some(log) = log {
                log.handshake_sent(&handshake.to_line());
            }
            send(&mut writer, &handshake.to_line())
                .await
                .map_err(|source| BridgeError::Handshake {
                    endpoint: config.endpoint.clone(),
                    source,
                })?;
            Ok((reader, writer))
        };
        let connected = if config.reconnect {
            match self.client.hold_while(connecting).await? {
                Some(result) => result,
                None => return Ok(None),
            }
        } else {
            // The plain relay reads stdin only once connected, as it always
            // did: its connect fails or succeeds whatever stdin does.
            connecting.await
        };
        if let Some(log) = log {
            let outcome = connected.as_ref().map(drop);
            let outcome = outcome.map_err(|e| e as &(dyn std::error::Error + 'static));
            log.connect_outcome(attempt, started.elapsed(), outcome);
        }
        let connected = connected?;
        let (mut reader, mut writer) = connected;
        let mut notices = Vec::new();
        let mut leftover = Vec::new();
        if resumed {
            let time_left = deadline.saturating_duration_since(Instant::now());
            let recorded = std::mem::take(&mut self.client.replay);
            let replaying = replay(&recorded, &mut reader, &mut writer, &mut self.stdout);
            let replayed = self
                .client
                .hold_while(wait::timeout(time_left, replaying))
                .await;
            let meanwhile = std::mem::replace(&mut self.client.replay, recorded);
            self.client.replay.absorb(meanwhile);
            let resumed = match replayed? {
                Some(Some(Ok(resumed))) => resumed,
                Some(Some(Err(why))) => return Err(self.resume_failed(why)),
                Some(None) => {
                    let why = format!("the replayed session got no answer within {:?}", budget);
                    return Err(self.resume_failed(why));
                }
                None => {
                    return Err(self
                        .resume_failed("stdin closed while the session was being resumed".into()))
                }
            };
            if let Some(log) = log {
                log.event(format_args!(
                    "replayed the session (initialize and what followed it)"
                ));
            }
            notices = list_changed_notifications(&resumed);
            leftover = resumed.leftover;
        }
        // What the client sent meanwhile, in order.
        let held = std::mem::take(&mut self.client.held);
        self.client.line_start = 0;
        if let Some(tap) = self.up_tap.as_mut() {
            tap.feed(&held);
        }
        send(&mut writer, &held)
            .await
            .map_err(|source| BridgeError::Handshake {
                endpoint: config.endpoint.clone(),
                source,
            })?;
        self.pending.append(&mut self.client.held_ids);
        // Then what the client is owed, and the start of the app's traffic.
        let mut out = std::mem::take(&mut self.client.owed);
        out.append(&mut notices);
        out.extend_from_slice(&leftover);
        self.write_out(&out).await?;
        Ok(Some((reader, writer, leftover)))
    }

    fn resume_failed(&self, reason: String) -> BridgeError {
        BridgeError::Resume {
            endpoint: self.config.endpoint.clone(),
            reason,
        }
    }

    /// Relays until the session or the connection ends.
    async fn online(
        &mut self,
        reader: Reader,
        writer: Writer,
        leftover: &[u8],
        hangups: Option<&Hangups>,
    ) -> Result<Online, BridgeError> {
        let client = &mut self.client;
        let (up_tap, down_tap) = (&mut self.up_tap, &mut self.down_tap);
        let pending = std::cell::RefCell::new(std::mem::take(&mut self.pending));
        let mut down = Scanner::new();
        // Already forwarded, and part of the stream the scanner follows.
        down.feed(leftover, |_| {});
        let mut heard = leftover.len() as u64;
        let mut refusal: Option<String> = None;
        let up = |chunk: &[u8]| {
            if let Some(tap) = up_tap.as_mut() {
                tap.feed(chunk);
            }
            let replay = &mut client.replay;
            client.up.feed(chunk, |envelope| {
                if envelope.kind == Kind::Request {
                    if let Some(id) = envelope.id {
                        pending.borrow_mut().push(id.to_vec());
                    }
                }
                replay.record(&envelope);
            });
        };
        let mut lines = 0u64;
        let down_watch = |chunk: &[u8]| {
            if let Some(tap) = down_tap.as_mut() {
                tap.feed(chunk);
            }
            heard += chunk.len() as u64;
            down.feed(chunk, |envelope| {
                lines += 1;
                let refuses = envelope.kind == Kind::ErrorResponse && envelope.id == Some(b"null");
                if lines == 1 && refuses {
                    refusal = Some(
                        envelope
                            .error_message
                            .unwrap_or("(no reason given)")
                            .to_string(),
                    );
                }
                if let (Kind::Response | Kind::ErrorResponse, Some(id)) =
                    (envelope.kind, envelope.id)
                {
                    let mut pending = pending.borrow_mut();
                    if let Some(i) = pending.iter().position(|p| p.as_slice() == id) {
                        pending.swap_remove(i);
                    }
                }
            });
        };
        let relayed = relay::relay_watched(
            &mut client.stdin,
            &mut self.stdout,
            reader,
            writer,
            self.config.drain_grace,
            up,
            down_watch,
        );
        // stdin's writers gone while the relay cannot read it (blocked
        // sending to an app that stopped reading): the drain grace starts
        // all the same.
        let grace = self.config.drain_grace;
        let input_closed = async {
            match hangups {
                Some(hangups) => hangups.input_closed().await,
                None => future::pending().await,
            }
            async_io::Timer::after(grace).await;
            Ok(Ending::ClientClosed { drained: false })
        };
        let ending = future::or(relayed, input_closed)
            .await
            .map_err(BridgeError::Relay)?;
        self.pending = pending.into_inner();
        let interrupted = down.mid_line();
        if let Some(log) = self.log {
            match ending {
                Ending::ServerClosed => log.app_hung_up(),
                Ending::ClientClosed { .. } => log.stdin_eof(),
                Ending::ClientGone => log.event(format_args!("stdout's reader went away")),
            }
        }
        match ending {
            Ending::ServerClosed if heard == 0 && self.restarts == 0 => Ok(Online::Refused(None)),
            Ending::ServerClosed if refusal.is_some() && self.restarts == 0 => {
                Ok(Online::Refused(refusal))
            }
            Ending::ServerClosed => {
                if interrupted && self.config.reconnect {
                    // The app died mid-line: end that line, so what the
                    // bridge writes next is a line of its own.
                    self.write_out(b"\n").await?;
                }
                Ok(Online::AppClosed)
            }
            other => Ok(Online::Ended(other)),
        }
    }

    /// Answers every request the app will not answer now.
    async fn answer_pending(&mut self, message: &str) -> Result<(), BridgeError> {
        let mut out = Vec::new();
        for id in self.pending.drain(..) {
            out.extend_from_slice(&envelope::error_response_line(&id, ERROR_CODE, message));
        }
        self.write_out(&out).await
    }

    /// The app cannot be reached, or refused: say so on stderr, then answer
    /// every request (held, pending and to come) with `failure` until stdin
    /// ends or [`FAILED_LIMIT`] passes, and end with it.
    async fn fail(&mut self, failure: BridgeError) -> Result<Ending, BridgeError> {
        if let BridgeError::Stdio(_) | BridgeError::Relay(_) = failure {
            return Err(failure);
        }
        let message = crate::error_chain(&failure);
        let mut out = std::mem::take(&mut self.client.owed);
        let held_ids = std::mem::take(&mut self.client.held_ids);
        for id in self.pending.drain(..).chain(held_ids) {
            out.extend_from_slice(&envelope::error_response_line(&id, ERROR_CODE, &message));
        }
        self.client.held.clear();
        self.client.line_start = 0;
        if self.client.line == LineFate::Hold {
            self.client.line = LineFate::Fail(message.clone());
        }
        self.write_out(&out).await?;
        let answering = async {
            loop {
                if !self
                    .client
                    .read_offline(LineFate::Fail(message.clone()))
                    .await?
                {
                    return Ok(());
                }
                let owed = std::mem::take(&mut self.client.owed);
                self.write_out(&owed).await?;
            }
        };
        match wait::timeout(FAILED_LIMIT, answering).await {
            Some(Err(e)) => Err(e),
            // stdin ended, or nobody asked for an hour.
            _ => Err(failure),
        }
    }

    /// Writes the bridge's own lines to stdout. A reader that went away
    /// ends the session like any other broken stdout.
    async fn write_out(&mut self, bytes: &[u8]) -> Result<(), BridgeError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(log) = self.log {
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                log.event(format_args!(
                    "bridge->cli {}",
                    String::from_utf8_lossy(line).trim_end()
                ));
            }
        }
        send(&mut self.stdout, bytes).await.map_err(|source| {
            BridgeError::Relay(relay::RelayError {
                stage: relay::Stage::WriteClient,
                source,
            })
        })
    }
}

impl<R: AsyncRead + Unpin> Client<R> {
    /// Runs `work` while holding what the client sends. `None`: stdin ended
    /// first, with nothing held (and `work` was dropped). When stdin ends
    /// with messages held, `work` (bounded by its own deadline) is awaited
    /// alone, so a one-shot client's request is still delivered.
    async fn hold_while<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<Option<T>, BridgeError> {
        enum Step<T> {
            Done(T),
            Read(Result<bool, BridgeError>),
        }
        futures_lite::pin!(work);
        loop {
            if self.eof {
                if self.held.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(work.await));
            }
            let step = future::or(async { Step::Done((&mut work).await) }, async {
                Step::Read(self.read_offline(LineFate::Hold).await)
            })
            .await;
            match step {
                Step::Done(done) => return Ok(Some(done)),
                Step::Read(Ok(_)) => {}
                Step::Read(Err(e)) => return Err(e),
            }
        }
    }

    /// Reads one chunk of stdin and deals with each line in it as its fate
    /// says; lines that start later get `next`. `Ok(false)`: stdin ended.
    async fn read_offline(&mut self, next: LineFate) -> Result<bool, BridgeError> {
        let mut chunk = vec![0u8; BUFFER_SIZE];
        let n = loop {
            match self.stdin.read(&mut chunk).await {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(BridgeError::Relay(relay::RelayError {
                        stage: relay::Stage::ReadClient,
                        source,
                    }))
                }
            }
        };
        if n == 0 {
            self.eof = true;
            // A last line without its `\n` is still a line.
            let mut last = None;
            self.up.finish(|envelope| last = Some(owned(&envelope)));
            if let Some(envelope) = last {
                self.line_done(envelope, next);
            }
            return Ok(false);
        }
        for segment in lines_of(&chunk[..n]) {
            if self.line == LineFate::Hold {
                if self.held.len() + segment.len() > HOLD_LIMIT {
                    self.held.truncate(self.line_start);
                    self.line = LineFate::Overflow;
                } else {
                    self.held.extend_from_slice(segment);
                }
            }
            let mut done = None;
            let replay = &mut self.replay;
            let hold = self.line == LineFate::Hold;
            self.up.feed(segment, |envelope| {
                if hold {
                    replay.record(&envelope);
                }
                done = Some(owned(&envelope));
            });
            if let Some(envelope) = done {
                self.line_done(envelope, next.clone());
            }
        }
        Ok(true)
    }

    /// The current line has ended: hold its id, or answer it.
    fn line_done(&mut self, envelope: OwnedEnvelope, next: LineFate) {
        let fate = std::mem::replace(&mut self.line, next);
        self.line_start = self.held.len();
        let id = match (envelope.kind, envelope.id) {
            (Kind::Request, Some(id)) => id,
            _ => return,
        };
        let message = match fate {
            LineFate::Hold => return self.held_ids.push(id),
            LineFate::Overflow => format!(
                "the bridge is waiting for the app and cannot hold more than {} KiB of requests",
                HOLD_LIMIT / 1024
            ),
            LineFate::Interrupted => {
                "the app closed the connection while this request was being sent".to_string()
            }
            LineFate::Fail(message) => message,
        };
        self.owed
            .extend_from_slice(&envelope::error_response_line(&id, ERROR_CODE, &message));
    }
}

/// The parts of an [`Envelope`] kept past the scanner's next call.
struct OwnedEnvelope {
    kind: Kind,
    id: Option<Vec<u8>>,
}

fn owned(envelope: &Envelope<'_>) -> OwnedEnvelope {
    OwnedEnvelope {
        kind: envelope.kind,
        id: envelope.id.map(<[u8]>::to_vec),
    }
}

/// What resuming the session on a new connection gave.
struct Resumed {
    /// The app's answer to the replayed `initialize` declares these lists.
    prompts: bool,
    resources: bool,
    /// Bytes the app sent after the last reply the bridge waited for: the
    /// start of its ordinary traffic, for the client.
    leftover: Vec<u8>,
}

/// Resumes the session on a new connection: replays the client's
/// `initialize` under an id of the bridge's own, then its
/// `notifications/initialized`, `logging/setLevel` and
/// `resources/subscribe`. The replies to the replayed requests are the
/// bridge's and are not forwarded; whatever else the app sends meanwhile
/// (a notification, a request of its own) is, line by line. `Err`: why the
/// app did not take the session back.
async fn replay(
    replay: &Replay,
    reader: &mut Reader,
    writer: &mut Writer,
    stdout: &mut (impl AsyncWrite + Unpin),
) -> Result<Resumed, String> {
    let mut resumed = Resumed {
        prompts: false,
        resources: false,
        leftover: Vec::new(),
    };
    let initialize = match &replay.initialize {
        Some(initialize) => initialize,
        // Nothing to resume: the client had not started the session.
        None => return Ok(resumed),
    };
    let mut lines = AppLines::default();
    let mut requests = vec![initialize];
    requests.extend(replay.set_level.iter());
    requests.extend(replay.subscribe.iter());
    for (n, request) in requests.into_iter().enumerate() {
        let id = format!("\"mcp-bridge-replay-{}\"", n + 1);
        send(writer, &request.with_id(id.as_bytes()))
            .await
            .map_err(|e| format!("sending the replayed session failed: {}", e))?;
        let reply = lines.reply_to(id.as_bytes(), reader, stdout).await?;
        if n > 0 {
            continue;
        }
        if let Some(error) = reply.error {
            return Err(format!(
                "the app rejected the replayed initialize: {}",
                error
            ));
        }
        let declared = serde_json::from_slice::<serde_json::Value>(&reply.line)
            .ok()
            .and_then(|v| v.get("result")?.get("capabilities").cloned())
            .unwrap_or_default();
        resumed.prompts = declared.get("prompts").is_some();
        resumed.resources = declared.get("resources").is_some();
        if let Some(initialized) = &replay.initialized {
            send(writer, &initialized.line)
                .await
                .map_err(|e| format!("sending the replayed session failed: {}", e))?;
        }
    }
    resumed.leftover = lines.unread;
    Ok(resumed)
}

/// Lines read from the app while the session is replayed.
#[derive(Default)]
struct AppLines {
    scanner: Scanner,
    /// The line being read.
    line: Vec<u8>,
    /// Bytes read but not looked at yet (after a reply the bridge waited for).
    unread: Vec<u8>,
}

/// The app's reply to a replayed request.
struct Reply {
    /// The whole line.
    line: Vec<u8>,
    /// Its `error.message`, for an error response.
    error: Option<String>,
}

impl AppLines {
    /// Reads lines until the response with `id`, forwarding every other line
    /// to the client whole (the client must never see a line cut by the
    /// bridge's own).
    async fn reply_to(
        &mut self,
        id: &[u8],
        reader: &mut Reader,
        stdout: &mut (impl AsyncWrite + Unpin),
    ) -> Result<Reply, String> {
        let mut chunk = vec![0u8; BUFFER_SIZE];
        loop {
            if self.unread.is_empty() {
                let n = reader.read(&mut chunk).await.map_err(|e| {
                    format!(
                        "reading the app's reply to the replayed session failed: {}",
                        e
                    )
                })?;
                if n == 0 {
                    return Err(
                        "the app closed the connection while the session was replayed".into(),
                    );
                }
                self.unread.extend_from_slice(&chunk[..n]);
            }
            let unread = std::mem::take(&mut self.unread);
            let mut looked_at = 0;
            for segment in lines_of(&unread) {
                looked_at += segment.len();
                self.line.extend_from_slice(segment);
                if self.line.len() > REPLAY_LINE_LIMIT {
                    return Err(format!(
                        "the app sent a line longer than {} MiB while the session was replayed",
                        REPLAY_LINE_LIMIT >> 20
                    ));
                }
                let mut verdict = None;
                self.scanner.feed(segment, |envelope| {
                    let ours = matches!(envelope.kind, Kind::Response | Kind::ErrorResponse)
                        && envelope.id == Some(id);
                    let error = match envelope.kind {
                        Kind::ErrorResponse => {
                            Some(envelope.error_message.unwrap_or("(no message)").to_string())
                        }
                        _ => None,
                    };
                    verdict = Some((ours, error));
                });
                let (ours, error) = match verdict {
                    None => continue,
                    Some(verdict) => verdict,
                };
                let line = std::mem::take(&mut self.line);
                if ours {
                    self.unread = unread[looked_at..].to_vec();
                    return Ok(Reply { line, error });
                }
                send(stdout, &line)
                    .await
                    .map_err(|e| format!("writing stdout failed: {}", e))?;
            }
        }
    }
}

/// `notifications/*/list_changed` for the client after a restart, so it
/// asks the new app instance what it offers: tools always, prompts and
/// resources where the app declares them.
fn list_changed_notifications(resumed: &Resumed) -> Vec<u8> {
    let mut out = Vec::new();
    let lists = [
        ("tools", true),
        ("prompts", resumed.prompts),
        ("resources", resumed.resources),
    ];
    for (list, declared) in lists {
        if declared {
            out.extend_from_slice(
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/{}/list_changed\"}}\n",
                    list
                )
                .as_bytes(),
            );
        }
    }
    out
}

/// `bytes` cut after each `\n`: whole lines, and the start of one more.
fn lines_of(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split_inclusive(|&b| b == b'\n')
}

/// Writes all of `bytes` and flushes.
async fn send(out: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes).await?;
    out.flush().await
}
