//! Relaying to one app instance: two pumps, one per direction, raced, each
//! reading into its side's buffer, letting the [ledger](super::ledger)
//! decide, and writing what goes on.
//!
//! - **Up** (stdin to the app): the bridge's own lines first (the replay),
//!   then, once the instance has taken the session back, the client's
//!   lines, as they come; the bridge's lines for the app (an answer to a
//!   request it may not forward) at line boundaries.
//! - **Down** (the app to stdout): the app's lines as they come, less the
//!   ones that are not the client's; the bridge's lines for the client
//!   (errors, notifications) at line boundaries.
//!
//! They share the ledger and wake each other when one leaves work for the
//! other ([`Signal`]). The reads are here, not in the sides: each pump
//! reads into its side's spare room and hands it the count
//! ([`read_client`], [`read_app`]), so the sides decide bytes without
//! awaiting anything, and what only an I/O error tells (a reset: the app
//! went away with some of what it was sent unread) reaches the app's side
//! as an input, not as an error it would have to read the kind of. The endings are those of the plain
//! [relay](crate::relay): at stdin's end the app's side is half-closed and
//! replies are still relayed for the drain grace; at the app's end the
//! relay ends at once (what the client sent meanwhile stays with the client
//! side, for the next instance); a reader of stdout that went away ends it.
//! One more: an instance that does not take the session back (it rejects
//! the replayed `initialize`, or does not answer it in time).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::app::AppSide;
use super::client::ClientSide;
use super::ledger::{Ledger, TakenBack};
use super::BridgeError;
use crate::relay::{is_hangup, Ending, RelayError, Stage};
use crate::stdio::Hangups;
use crate::traffic_log::{LineTap, TrafficLog};

/// Longest the bridge relays what an app that went away had sent, when
/// the client reads it slowly: a client that reads nothing for this long
/// while the app is gone loses the rest of that instance's lines.
const APP_GONE_DRAIN: Duration = Duration::from_secs(30);

/// How relaying to an instance ended.
#[derive(Debug)]
pub(super) enum End {
    /// The app closed the connection (or reset it).
    HungUp,
    /// The client ended the session.
    Done(Ending),
    /// The instance did not take the session back: it said no (`true`), or
    /// did not answer in time.
    NotTakenBack(String, bool),
}

/// What the session hands the pumps besides the two sides.
pub(super) struct Link<'a> {
    pub(super) ledger: &'a RefCell<Ledger>,
    /// The bridge's lines to write before anything of the client's.
    pub(super) preamble: Vec<u8>,
    /// When the instance must have answered the replayed `initialize`, if
    /// it is to take the session back.
    pub(super) taking_back: Option<Instant>,
    /// What to say on stderr once the instance has taken the session back
    /// (the end of an absence).
    pub(super) back: Option<String>,
    pub(super) drain_grace: Duration,
    pub(super) hangups: Option<&'a Hangups>,
    pub(super) log: Option<&'a TrafficLog>,
    pub(super) up_tap: &'a mut Option<LineTap>,
    pub(super) down_tap: &'a mut Option<LineTap>,
}

/// Relays between the client side and one instance until one of them
/// ends (see the [module docs](self)).
pub(super) async fn relay<R, AR, AW, W>(
    client: &mut ClientSide,
    stdin: &mut R,
    app: &mut AppSide,
    reader: AR,
    writer: AW,
    stdout: &mut W,
    link: Link<'_>,
) -> Result<End, BridgeError>
where
    R: AsyncRead + Unpin,
    AR: AsyncRead + Unpin,
    AW: AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    let Link {
        ledger,
        preamble,
        taking_back,
        back,
        drain_grace,
        hangups,
        log,
        up_tap,
        down_tap,
    } = link;
    let signals = Signals::default();
    let mut reader = reader;
    let up = up(
        client,
        stdin,
        writer,
        ledger,
        preamble,
        taking_back,
        back,
        drain_grace,
        &signals,
        log,
        up_tap,
    );
    let down = down(app, &mut reader, stdout, ledger, &signals, log, down_tap);
    futures_lite::pin!(up);
    futures_lite::pin!(down);
    let input_closed = super::input_closed_then_grace::<BridgeError>(hangups, drain_grace);
    futures_lite::pin!(input_closed);
    // Biased towards `down`: when both are ready, replies go out first.
    let first = future::or(
        async { Err((&mut down).await) },
        future::or(async { Ok((&mut up).await) }, async {
            Err((&mut input_closed).await.map(Down::Done))
        }),
    )
    .await;
    let up_end = match first {
        Err(Ok(Down::HungUp)) => return Ok(End::HungUp),
        Err(Ok(Down::Done(ending))) => return Ok(End::Done(ending)),
        Err(Err(e)) => return Err(e),
        Ok(up_end) => up_end?,
    };
    match up_end {
        Up::NotTakenBack(why, said_no) => Ok(End::NotTakenBack(why, said_no)),
        // The app stopped taking what we send: what it sent before going
        // is still to be read and relayed, whole, however slowly the
        // client reads it (the app's end comes at once after it). Bounded
        // by stdin's end and its grace, and by APP_GONE_DRAIN.
        Up::AppGone => {
            let drained = future::or(async { Some((&mut down).await) }, async {
                Some((&mut input_closed).await.map(Down::Done))
            });
            match super::boxed(crate::wait::timeout(APP_GONE_DRAIN, drained)).await {
                Some(Some(Ok(Down::Done(ending)))) => Ok(End::Done(ending)),
                Some(Some(Err(e))) => Err(e),
                _ => Ok(End::HungUp),
            }
        }
        // Client EOF: tell the app (half-close) and drain in-flight
        // replies, both within one deadline.
        Up::Eof(writer) => {
            let drained = super::boxed(crate::relay::close_and_drain(
                writer,
                &mut down,
                drain_grace,
            ))
            .await;
            Ok(End::Done(match drained {
                None => Ending::ClientClosed { drained: false },
                Some(Ok(Down::HungUp)) => Ending::ClientClosed { drained: true },
                Some(Ok(Down::Done(ending))) => ending,
                Some(Err(e)) => return Err(e),
            }))
        }
    }
}

/// How the up pump ended.
enum Up<AW> {
    /// stdin ended; everything read was written: the writer, to close.
    Eof(AW),
    /// A write found the app gone.
    AppGone,
    NotTakenBack(String, bool),
}

/// How the down pump ended.
enum Down {
    HungUp,
    Done(Ending),
}

#[allow(clippy::too_many_arguments)]
async fn up<R, AW>(
    client: &mut ClientSide,
    stdin: &mut R,
    mut writer: AW,
    ledger: &RefCell<Ledger>,
    preamble: Vec<u8>,
    mut taking_back: Option<Instant>,
    mut back: Option<String>,
    eof_grace: Duration,
    signals: &Signals,
    log: Option<&TrafficLog>,
    tap: &mut Option<LineTap>,
) -> Result<Up<AW>, BridgeError>
where
    R: AsyncRead + Unpin,
    AW: AsyncWrite + Unpin,
{
    let mut ours = preamble;
    loop {
        if let (Some(deadline), Some(eof)) = (taking_back, client.eof) {
            // stdin ended: what is held waits the drain grace at most.
            taking_back = Some(deadline.min(eof + eof_grace));
        }
        if let Some(deadline) = taking_back {
            let answer = ledger.borrow_mut().take_taken_back();
            match answer {
                Some(TakenBack::Accepted(result)) => {
                    let mut ledger = ledger.borrow_mut();
                    let rest = ledger.taken_back(&result);
                    if let Some(log) = log {
                        log.event(format_args!(
                            "the app's new instance took the session back (the replayed \
                             initialize was answered)"
                        ));
                    }
                    ours.extend_from_slice(&rest);
                    taking_back = None;
                    // What the client sends is for this instance from now
                    // on (it was answered at once, if the app was absent).
                    client.go_online(&mut ledger);
                    signals.down.wake();
                    if let Some(back) = back.take() {
                        super::say(log, &back);
                    }
                }
                Some(TakenBack::Rejected(why)) => {
                    return Ok(Up::NotTakenBack(rejected(&why), true))
                }
                None if crate::clock::now() >= deadline => {
                    return Ok(Up::NotTakenBack(
                        "the new instance did not answer the replayed initialize in time".into(),
                        false,
                    ))
                }
                None => {}
            }
        }
        // The bridge's own lines, between the client's.
        if client.at_boundary() {
            ours.append(&mut ledger.borrow_mut().take_owed_app());
            if !ours.is_empty() {
                if let Some(log) = log {
                    log_lines(log, "bridge->app", &ours);
                }
                client.bridge_wrote();
                match super::send(&mut writer, &ours).await {
                    Ok(()) => ours.clear(),
                    Err(e) if is_hangup(&e) => return Ok(Up::AppGone),
                    Err(e) => return Err(write_error(Stage::WriteServer, e)),
                }
            }
        }
        if taking_back.is_none() {
            let sendable = client.sendable();
            if !sendable.is_empty() {
                match writer.write(sendable).await {
                    Ok(0) => return Ok(Up::AppGone),
                    Ok(n) => {
                        if let Some(tap) = tap.as_mut() {
                            tap.feed(&client.sendable()[..n]);
                        }
                        client.accepted(n, &mut ledger.borrow_mut());
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if is_hangup(&e) => return Ok(Up::AppGone),
                    Err(e) => return Err(write_error(Stage::WriteServer, e)),
                }
            }
            if let Err(e) = writer.flush().await {
                if is_hangup(&e) {
                    return Ok(Up::AppGone);
                }
                return Err(write_error(Stage::WriteServer, e));
            }
            if client.eof.is_some() {
                return Ok(Up::Eof(writer));
            }
        }
        // Nothing to write: more from stdin, or work from the other pump,
        // or the deadline of the replay.
        let deadline = async {
            match taking_back {
                Some(at) => {
                    crate::clock::at(at).await;
                }
                None => future::pending::<()>().await,
            }
        };
        let more = client.eof.is_none();
        let read = async {
            match more {
                true => Some(read_client(stdin, client, ledger).await),
                false => future::pending().await,
            }
        };
        let woken = async {
            future::or(signals.up.wait(), deadline).await;
            None
        };
        match future::or(woken, read).await {
            // Lines answered by the bridge (while the app is absent and the
            // instance not yet taking the session) are the other pump's to
            // write.
            Some(Ok(())) if ledger.borrow().owes_client() => {
                signals.down.wake();
            }
            Some(Ok(())) | None => {}
            Some(Err(e)) => {
                return Err(BridgeError::Relay(RelayError {
                    stage: Stage::ReadClient,
                    source: e,
                }))
            }
        }
    }
}

async fn down<AR, W>(
    app: &mut AppSide,
    reader: &mut AR,
    stdout: &mut W,
    ledger: &RefCell<Ledger>,
    signals: &Signals,
    log: Option<&TrafficLog>,
    tap: &mut Option<LineTap>,
) -> Result<Down, BridgeError>
where
    AR: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        // Kept before the client has the replies they came with.
        let learnt = learn(ledger);
        // The bridge's lines first: they arose before what was just read.
        write_owed(app, stdout, ledger, log).await?;
        loop {
            if let Some(lines) = app.due() {
                write_lines(stdout, &lines, log).await?;
                continue;
            }
            let sendable = app.sendable();
            if sendable.is_empty() {
                break;
            }
            match stdout.write(sendable).await {
                Ok(0) => return Ok(Down::Done(Ending::ClientGone)),
                Ok(n) => {
                    if let Some(tap) = tap.as_mut() {
                        tap.feed(&app.sendable()[..n]);
                    }
                    app.written(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_hangup(&e) => return Ok(Down::Done(Ending::ClientGone)),
                Err(e) => return Err(write_error(Stage::WriteClient, e)),
            }
        }
        write_owed(app, stdout, ledger, log).await?;
        if let Err(e) = stdout.flush().await {
            if is_hangup(&e) {
                return Ok(Down::Done(Ending::ClientGone));
            }
            return Err(write_error(Stage::WriteClient, e));
        }
        if learnt {
            settle(ledger);
        }
        let read = async { Some(read_app(reader, app, ledger).await) };
        let woken = async {
            signals.down.wait().await;
            None
        };
        // Woken first: what the other pump left is older than what comes.
        match future::or(woken, read).await {
            Some(Ok(true)) if ledger.borrow().has_work_for_app() => signals.up.wake(),
            Some(Ok(false)) => return Ok(Down::HungUp),
            Some(Err(e)) => {
                return Err(BridgeError::Relay(RelayError {
                    stage: Stage::ReadServer,
                    source: e,
                }))
            }
            Some(Ok(true)) | None => {}
        }
        super::report_lost(&mut ledger.borrow_mut(), log);
    }
}

/// Reads one chunk of stdin into the client side, which decides it.
pub(super) async fn read_client<R: AsyncRead + Unpin>(
    stdin: &mut R,
    client: &mut ClientSide,
    ledger: &RefCell<Ledger>,
) -> std::io::Result<()> {
    let n = read_some(stdin, client.spare()).await?;
    let mut ledger = ledger.borrow_mut();
    match n {
        0 => client.closed(crate::clock::now(), &mut ledger),
        n => client.filled(n, &mut ledger),
    }
    Ok(())
}

/// Reads one chunk from the app into its side, which decides what of it
/// goes on: `false` at the app's end (EOF, or a hang-up error, which says
/// no more). A reset is the one fact the error alone tells: the app went
/// away with some of what it was sent unread.
async fn read_app<AR: AsyncRead + Unpin>(
    reader: &mut AR,
    app: &mut AppSide,
    ledger: &RefCell<Ledger>,
) -> std::io::Result<bool> {
    let read = read_some(reader, app.spare()).await;
    let mut ledger = ledger.borrow_mut();
    match read {
        Ok(0) => Ok(app.closed(false, &mut ledger)),
        Ok(n) => {
            app.filled(n, &mut ledger);
            Ok(true)
        }
        Err(e) if is_hangup(&e) => {
            let reset = e.kind() == std::io::ErrorKind::ConnectionReset;
            Ok(app.closed(reset, &mut ledger))
        }
        Err(e) => Err(e),
    }
}

/// One read into `buf`, again when interrupted.
async fn read_some(
    reader: &mut (impl AsyncRead + Unpin),
    buf: &mut [u8],
) -> std::io::Result<usize> {
    loop {
        match reader.read(buf).await {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            read => return read,
        }
    }
}

/// Hands the answers cache what the app answered, before the replies it
/// came with are written (see [`super::answers`]): whether there was any
/// (then [`settle`] it once they are written).
pub(super) fn learn(ledger: &RefCell<Ledger>) -> bool {
    let mut ledger = ledger.borrow_mut();
    let learnt = ledger.take_learnt();
    let any = !learnt.is_empty();
    for learnt in learnt {
        ledger.answers().learn(learnt);
    }
    any
}

/// Lets the answers cache make what it learnt last durable, now that the
/// replies are written.
pub(super) fn settle(ledger: &RefCell<Ledger>) {
    ledger.borrow_mut().answers().settle();
}

/// Why an instance that said no to the replayed `initialize` (`why`) did
/// not take the session back.
pub(super) fn rejected(why: &str) -> String {
    format!("the app rejected the replayed initialize: {}", why)
}

/// Writes the bridge's lines owed to the client, when the client's stream
/// is between lines.
async fn write_owed<W: AsyncWrite + Unpin>(
    app: &AppSide,
    stdout: &mut W,
    ledger: &RefCell<Ledger>,
    log: Option<&TrafficLog>,
) -> Result<(), BridgeError> {
    if !app.at_boundary() {
        return Ok(());
    }
    let owed = ledger.borrow_mut().take_owed_client();
    write_lines(stdout, &owed, log).await
}

/// Writes lines of the bridge's own to the client.
async fn write_lines<W: AsyncWrite + Unpin>(
    stdout: &mut W,
    lines: &[u8],
    log: Option<&TrafficLog>,
) -> Result<(), BridgeError> {
    if lines.is_empty() {
        return Ok(());
    }
    if let Some(log) = log {
        log_lines(log, "bridge->cli", lines);
    }
    match stdout.write_all(lines).await {
        Ok(()) => Ok(()),
        // The session sees stdout gone at its next write, or its watcher.
        Err(e) if is_hangup(&e) => Ok(()),
        Err(e) => Err(write_error(Stage::WriteClient, e)),
    }
}

fn write_error(stage: Stage, source: std::io::Error) -> BridgeError {
    BridgeError::Relay(RelayError { stage, source })
}

/// Logs the bridge's own lines, one event each.
pub(super) fn log_lines(log: &TrafficLog, direction: &str, bytes: &[u8]) {
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        log.event(format_args!(
            "{} {}",
            direction,
            String::from_utf8_lossy(line).trim_end()
        ));
    }
}

/// One pump's wake-up call from the other: [`Signal::wait`] is ready once
/// after each [`Signal::wake`].
#[derive(Default)]
struct Signal {
    woken: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Signal {
    fn wake(&self) {
        self.woken.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = ()> + '_ {
        Wait(self)
    }
}

struct Wait<'a>(&'a Signal);

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.woken.replace(false) {
            return Poll::Ready(());
        }
        self.0.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

#[derive(Default)]
struct Signals {
    up: Signal,
    down: Signal,
}
