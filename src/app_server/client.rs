//! Many requests in flight over one child, and nothing the child says is lost.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use serde_json::{json, Value};
use smol::channel::{self, Receiver, Sender};
use smol::Task;

use super::inbox::{inbox, InboxSender};
use super::members::{decoded_size, MAX_DEPTH};
use super::message::{compose, Message};
use super::{
    spawn_app_server, AppServerError, Inbox, Incoming, IoStep, LineReader, RequestId, StderrTail,
    MAX_INCOMING_MEMORY, MAX_LINE_LENGTH, STARTUP_TIMEOUT,
};
use crate::process::{GroupChild, SHUTDOWN_GRACE};
use crate::wait;

/// How long a child that closed stdout gets to finish writing stderr before pending
/// requests are failed with what it said so far. A crashing child closes both at once;
/// the bound only matters when a grandchild inherited stderr and keeps it open.
const STDERR_SETTLE: Duration = Duration::from_millis(200);

/// How long, once the child has exited, its stdout may stay open before the connection
/// ends anyway. Normally stdout closes with the exit; a grandchild that inherited it
/// (`sh -c "helper & exit 3"`) would otherwise keep every pending request waiting for
/// its full timeout. Within this time the reader still takes in what the child wrote
/// just before exiting: at most a pipe's worth, which takes microseconds. The other way
/// round, it is also how long a child whose stdout ended is given to exit, so that the
/// error can say how it exited (an exit code, a signal).
const EXIT_SETTLE: Duration = Duration::from_millis(200);

/// How long a request whose write failed waits to learn that the child exited, so that
/// it can report that (with the child's stderr) instead of the bare write error. A
/// child that closed its stdin is usually on its way out; two seconds let a busy
/// machine finish the exit, and only a child that closes stdin yet lives on costs it.
const EXIT_NOTICE: Duration = Duration::from_secs(2);

/// JSON-RPC's error code for a request that is not a valid request object.
const INVALID_REQUEST: i64 = -32600;

/// Lines from this length up (64 KiB) are checked and decoded on smol's blocking
/// thread pool rather than on the executor. That work runs at hundreds of MB/s
/// optimized (a few times slower in a debug build), so a 64 MiB line would otherwise
/// hold the executor thread, and every task sharing it (other clients' routing
/// included), for a noticeable time; below 64 KiB the hop to another thread would
/// cost more than the work.
const OFFLOAD_LINE: usize = 64 * 1024;

/// How much routing work (line bytes, plus [`LINE_COST`] per line) the reader does
/// before it lets other tasks run: 1 MiB, a fraction of a millisecond optimized.
const YIELD_AFTER: usize = 1024 * 1024;

/// What routing one line costs beyond its bytes, in the same units: classifying it,
/// decoding small members, taking a lock. Counted as 1 KiB, so a flood of tiny lines
/// yields every thousand or so.
const LINE_COST: usize = 1024;

type Reader = Pin<Box<dyn AsyncRead + Send>>;
type Writer = Pin<Box<dyn AsyncWrite + Send>>;
type Outcome = Result<Value, AppServerError>;

/// A JSON-RPC connection to an app-server child, with any number of requests in flight.
///
/// A background task on smol's global executor reads the child's stdout for as long as
/// it is open. Each response is handed to the request with its id, in whatever order
/// the child answers. Everything else the child says, notifications and its own
/// requests, is queued on the [`incoming`](Self::incoming) queue in the order it was
/// written, so by the time a request returns, every message the child wrote before the
/// response is already in that queue.
///
/// Memory is bounded: one line is at most
/// [`max_line_length`](ClientBuilder::max_line_length) bytes; only the member a caller
/// receives (`params`, `result` or `error`) is ever decoded, and only if its decoded
/// form fits in [`max_incoming_memory`](ClientBuilder::max_incoming_memory); the
/// messages waiting in `incoming` hold at most that much together. With the defaults
/// the client holds at most about 320 MiB (64 MiB of line, 128 MiB being decoded,
/// 128 MiB queued), plus the results the caller keeps. A child that exceeds a limit
/// ends the connection with an error naming it ([`AppServerError::LineTooLong`],
/// [`MessageTooLarge`](AppServerError::MessageTooLarge),
/// [`IncomingFull`](AppServerError::IncomingFull)): the reader never waits for the
/// caller, so a caller busy awaiting a response can never stall it.
///
/// When the child exits (or its stdout ends), every pending request fails at once with
/// [`AppServerError::ProcessTerminated`], carrying the child's exit status and the tail
/// of its stderr, and so does every later request. A request from the child whose `id` is not a string or
/// an integer is answered with JSON-RPC's "Invalid Request" error, since it cannot be
/// answered by its id.
///
/// A response whose `result` or `error` cannot be decoded fails its request at once
/// with [`AppServerError::UndecodableResponse`]. If the task that routes lines ever
/// panics, every pending request, and every later one, fails at once.
///
/// Every write the caller makes waits at most the client's request timeout for the
/// child to read it (no limit if it is zero). Dropping the client stops the reader, the
/// stderr drain and the answering of invalid requests, closes the pipes and kills the
/// child and its process group; [`shutdown`](Self::shutdown) first asks it to exit.
pub struct AppServerClient {
    shared: Arc<Shared>,
    incoming: Inbox,
    child: Option<GroupChild>,
    request_timeout: Duration,
    _connection: Task<()>,
    answers: Option<Task<()>>,
}

/// Settings for an [`AppServerClient`]; made by [`AppServerClient::builder`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    request_timeout: Duration,
    max_line_length: usize,
    max_incoming_memory: usize,
    jsonrpc_version: bool,
}

impl ClientBuilder {
    /// How long [`AppServerClient::request`] waits for a response, including the time to
    /// write the request, and how long any other write (a notification, an answer) may
    /// wait for the child to read it. Defaults to [`STARTUP_TIMEOUT`].
    ///
    /// `Duration::ZERO` means no timeout: a request waits for its response, and a write
    /// for the child to read it, for as long as the child lives (its exit still fails
    /// every request at once). `Duration::MAX` (or any timeout too far off to be a
    /// point in time) means the same. The client's own answers to the child's invalid
    /// requests are never bounded by it: they wait for the child to read, without
    /// holding up anything but later writes.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest line accepted from the child, in bytes. Defaults to
    /// [`MAX_LINE_LENGTH`]. A longer line ends the connection with
    /// [`AppServerError::LineTooLong`], as the message it held, possibly a response, is
    /// lost.
    ///
    /// `usize::MAX` accepts lines of any length (the memory limit below still refuses a
    /// message too large to decode, but the line itself is buffered whole); `0` accepts
    /// only empty lines, so the first message ends the connection.
    pub fn max_line_length(mut self, limit: usize) -> Self {
        self.max_line_length = limit;
        self
    }

    /// The most memory, in bytes, that the messages waiting in
    /// [`incoming`](AppServerClient::incoming) may hold together, and that any one
    /// decoded message may hold. Defaults to [`MAX_INCOMING_MEMORY`], which explains how
    /// it is measured. Exceeding it ends the connection with
    /// [`AppServerError::IncomingFull`] or [`AppServerError::MessageTooLarge`].
    ///
    /// `usize::MAX` means no limit; `0` refuses every message, so the first one ends
    /// the connection.
    pub fn max_incoming_memory(mut self, limit: usize) -> Self {
        self.max_incoming_memory = limit;
        self
    }

    /// Leaves `"jsonrpc":"2.0"` out of outgoing messages, as Codex's app-server protocol
    /// does. Incoming messages are accepted with or without it either way.
    pub fn omit_jsonrpc_version(mut self) -> Self {
        self.jsonrpc_version = false;
        self
    }

    /// Spawns `command` with [`spawn_app_server`] and connects to it.
    ///
    /// # Errors
    ///
    /// As for [`spawn_app_server`].
    pub fn spawn(
        self,
        command: std::process::Command,
        name: &str,
    ) -> Result<AppServerClient, AppServerError> {
        let process = spawn_app_server(command, name)?;
        Ok(self.start(
            Box::pin(process.stdout),
            Box::pin(process.stdin),
            Some(process.child),
            Some(process.stderr),
        ))
    }

    /// Speaks to a peer that is not a child process: messages are read from `reader` and
    /// written to `writer`.
    pub fn connect<R, W>(self, reader: R, writer: W) -> AppServerClient
    where
        R: AsyncRead + Send + 'static,
        W: AsyncWrite + Send + 'static,
    {
        self.start(Box::pin(reader), Box::pin(writer), None, None)
    }

    fn start(
        self,
        reader: Reader,
        writer: Writer,
        child: Option<GroupChild>,
        stderr: Option<StderrTail>,
    ) -> AppServerClient {
        let (doorbell, rung) = channel::bounded(1);
        let shared = Arc::new(Shared {
            outbox: smol::lock::Mutex::new(Outbox {
                writer: Some(writer),
                line: Vec::new(),
                written: 0,
            }),
            pending: Mutex::new(Pending::default()),
            next_id: AtomicI64::new(1),
            invalid_lines: AtomicU64::new(0),
            jsonrpc_version: self.jsonrpc_version,
            stderr,
            unanswered: AtomicUsize::new(0),
            doorbell,
        });
        let (queue, incoming) = inbox(self.max_incoming_memory);
        let lines = LineReader::with_max_line_length(reader, self.max_line_length);
        let exited = child.as_ref().map(GroupChild::exited);
        let connection = crate::spawn(run_connection(
            EndOnDrop(shared.clone()),
            lines,
            queue,
            exited,
        ));
        let answers = crate::spawn(answer_invalid_requests(shared.clone(), rung));
        AppServerClient {
            shared,
            incoming,
            child,
            request_timeout: self.request_timeout,
            _connection: connection,
            answers: Some(answers),
        }
    }
}

impl AppServerClient {
    /// Spawns `command` as an app server called `name`, with default settings.
    ///
    /// # Errors
    ///
    /// As for [`spawn_app_server`].
    pub fn spawn(
        command: std::process::Command,
        name: &str,
    ) -> Result<AppServerClient, AppServerError> {
        Self::builder().spawn(command, name)
    }

    /// Default settings, to adjust before spawning or connecting.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            request_timeout: STARTUP_TIMEOUT,
            max_line_length: MAX_LINE_LENGTH,
            max_incoming_memory: MAX_INCOMING_MEMORY,
            jsonrpc_version: true,
        }
    }

    /// Sends a request and returns its `result`, waiting at most the client's request
    /// timeout.
    ///
    /// `params` is left out of the message when it is `Value::Null`. Ids are integers
    /// counting up from 1.
    ///
    /// # Errors
    ///
    /// [`AppServerError::ErrorResponse`] if the child answered with an error,
    /// [`AppServerError::UndecodableResponse`] if its answer cannot be decoded,
    /// [`AppServerError::ProcessTerminated`] if it exited first,
    /// [`AppServerError::Timeout`] if it took too long, [`AppServerError::Io`] if the
    /// request could not be written, and the error that ended the connection if one
    /// did.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, AppServerError> {
        self.request_with_timeout(method, params, self.request_timeout)
            .await
    }

    /// Like [`request`](Self::request), with its own timeout: [`TURN_TIMEOUT`] for a
    /// whole agent turn, say. `Duration::ZERO` and `Duration::MAX` mean no timeout, as
    /// for [`ClientBuilder::request_timeout`].
    ///
    /// [`TURN_TIMEOUT`]: super::TURN_TIMEOUT
    ///
    /// # Errors
    ///
    /// As for [`request`](Self::request).
    pub async fn request_with_timeout(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, AppServerError> {
        let id = RequestId::Integer(self.shared.next_id.fetch_add(1, Ordering::Relaxed));
        let (sender, receiver) = channel::bounded(1);
        self.shared.register(id.clone(), sender)?;
        // Whether answered, failed, timed out or dropped, the request is forgotten.
        let _forget = Forget {
            shared: &self.shared,
            id: &id,
        };
        let message = self.compose(vec![
            ("id", Value::from(id.clone())),
            ("method", Value::from(method)),
            ("params", params),
        ]);
        let answer = async {
            match receiver.recv().await {
                Ok(outcome) => outcome,
                Err(_) => Err(self.shared.ended()),
            }
        };
        let exchange = async {
            if let Err(write_error) = self.shared.send(&message).await {
                // Usually a broken pipe: the child died, and its reader is about to say
                // so with the child's stderr, which explains more than "Broken pipe".
                return wait::timeout(EXIT_NOTICE, answer)
                    .await
                    .unwrap_or(Err(write_error));
            }
            answer.await
        };
        match wait::timeout_unless_zero(timeout, exchange).await {
            Some(outcome) => outcome,
            None => Err(AppServerError::Timeout {
                response_id: id.clone(),
                timeout,
                stderr_tail: self.stderr_tail().unwrap_or_default(),
            }),
        }
    }

    /// Sends a notification: a message with no id, which the child does not answer.
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if it could not be written,
    /// [`AppServerError::WriteTimeout`] if the child did not read it within the
    /// client's request timeout.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), AppServerError> {
        let message = self.compose(vec![("method", Value::from(method)), ("params", params)]);
        self.shared
            .send_within(&message, self.request_timeout)
            .await
    }

    /// Answers the child's request `id` (see [`Incoming::Request`]) with `result`.
    ///
    /// # Errors
    ///
    /// As for [`notify`](Self::notify).
    pub async fn respond(&self, id: &RequestId, result: Value) -> Result<(), AppServerError> {
        let message = self.compose(vec![("id", Value::from(id.clone())), ("result", result)]);
        self.shared
            .send_within(&message, self.request_timeout)
            .await
    }

    /// Answers the child's request `id` with a JSON-RPC error object.
    ///
    /// # Errors
    ///
    /// As for [`notify`](Self::notify).
    pub async fn respond_error(
        &self,
        id: &RequestId,
        code: i64,
        message: &str,
        data: Option<Value>,
    ) -> Result<(), AppServerError> {
        let mut error = json!({ "code": code, "message": message });
        if let Some(data) = data {
            error["data"] = data;
        }
        let message = self.compose(vec![("id", Value::from(id.clone())), ("error", error)]);
        self.shared
            .send_within(&message, self.request_timeout)
            .await
    }

    /// The notifications and requests the child sends, in the order it sent them.
    ///
    /// Every clone receives from the same queue, so each message goes to exactly one
    /// receiver. It closes once the connection has ended and the queue is empty. Keep
    /// receiving from it while requests are in flight: a queue that reaches
    /// [`max_incoming_memory`](ClientBuilder::max_incoming_memory) ends the connection.
    pub fn incoming(&self) -> Inbox {
        self.incoming.clone()
    }

    /// How many lines from the child were skipped because they were not JSON-RPC
    /// messages (not JSON, not an object, a response without `result` or `error`, ...).
    pub fn invalid_lines(&self) -> u64 {
        self.shared.invalid_lines.load(Ordering::Relaxed)
    }

    /// The last bytes the child wrote to stderr so far; `None` without a child.
    pub fn stderr_tail(&self) -> Option<String> {
        self.shared.stderr.as_ref().map(StderrTail::snapshot)
    }

    /// The child's process id (on Unix also its process group's id); `None` without a
    /// child.
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().map(GroupChild::id)
    }

    /// Closes the child's stdin and stops it and its process group with
    /// [`GroupChild::shutdown`] and [`SHUTDOWN_GRACE`], returning its exit status
    /// (`None` without a child).
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if the child could not be signalled or waited for.
    pub async fn shutdown(mut self) -> Result<Option<ExitStatus>, AppServerError> {
        // Nothing else can hold the writer then: requests borrow `self`, and a dropped
        // request releases it.
        if let Some(answers) = self.answers.take() {
            answers.cancel().await;
        }
        if let Some(mut outbox) = self.shared.outbox.try_lock() {
            outbox.writer = None;
        }
        let mut child = match self.child.take() {
            Some(child) => child,
            None => return Ok(None),
        };
        child
            .shutdown(SHUTDOWN_GRACE)
            .await
            .map(Some)
            .map_err(|error| AppServerError::io(IoStep::Stop, error))
    }

    fn compose(&self, members: Vec<(&str, Value)>) -> Value {
        compose(self.shared.jsonrpc_version, members)
    }
}

impl fmt::Debug for AppServerClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppServerClient")
            .field("process_id", &self.process_id())
            .field("pending", &self.shared.lock_pending().waiting.len())
            .field("incoming", &self.incoming.len())
            .field("invalid_lines", &self.invalid_lines())
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// What the client and its background tasks share.
struct Shared {
    outbox: smol::lock::Mutex<Outbox>,
    pending: Mutex<Pending>,
    next_id: AtomicI64,
    invalid_lines: AtomicU64,
    jsonrpc_version: bool,
    stderr: Option<StderrTail>,
    /// How many invalid requests from the child still await their "Invalid Request"
    /// answer. A count suffices, since all those answers are the same line.
    unanswered: AtomicUsize,
    /// Tells the answering task there is work; holds at most one ring.
    doorbell: Sender<()>,
}

#[derive(Default)]
struct Pending {
    waiting: HashMap<RequestId, Sender<Outcome>>,
    /// Why the connection ended, once it has.
    ended: Option<AppServerError>,
}

impl Shared {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, id: RequestId, sender: Sender<Outcome>) -> Result<(), AppServerError> {
        let mut pending = self.lock_pending();
        if let Some(ended) = &pending.ended {
            return Err(ended.replicate());
        }
        pending.waiting.insert(id, sender);
        Ok(())
    }

    fn is_waiting(&self, id: &RequestId) -> bool {
        self.lock_pending().waiting.contains_key(id)
    }

    fn complete(&self, id: &RequestId, outcome: Outcome) {
        // No entry: a response to a request that timed out or was dropped meanwhile.
        if let Some(sender) = self.lock_pending().waiting.remove(id) {
            let _ = sender.try_send(outcome);
        }
    }

    /// Fails every pending request, and every later one, with `error`, unless the
    /// connection has already ended (the first reason stays).
    fn end(&self, error: AppServerError) {
        let mut pending = self.lock_pending();
        if pending.ended.is_some() {
            return;
        }
        for (_, sender) in pending.waiting.drain() {
            let _ = sender.try_send(Err(error.replicate()));
        }
        pending.ended = Some(error);
    }

    fn ended(&self) -> AppServerError {
        match &self.lock_pending().ended {
            Some(error) => error.replicate(),
            None => AppServerError::terminated(),
        }
    }

    fn count_invalid(&self) {
        self.invalid_lines.fetch_add(1, Ordering::Relaxed);
    }

    fn owe_invalid_request_answer(&self) {
        self.unanswered.fetch_add(1, Ordering::Relaxed);
        // Full means a ring is already waiting to be heard.
        let _ = self.doorbell.try_send(());
    }

    async fn send(&self, message: &Value) -> Result<(), AppServerError> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.outbox.lock().await.send(line).await
    }

    /// Sends `message`, waiting at most `limit` (no limit if zero) for the writer and
    /// for the child to read it. A line left half written stays in the outbox and is finished by the
    /// next write, so the stream never carries a broken message.
    async fn send_within(&self, message: &Value, limit: Duration) -> Result<(), AppServerError> {
        match wait::timeout_unless_zero(limit, self.send(message)).await {
            Some(sent) => sent,
            None => Err(AppServerError::WriteTimeout { timeout: limit }),
        }
    }
}

/// Removes a request from the pending table when it finishes in any way.
struct Forget<'a> {
    shared: &'a Shared,
    id: &'a RequestId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.shared.lock_pending().waiting.remove(self.id);
    }
}

/// The child's stdin, and the line being written to it.
///
/// The line lives here rather than in the writing future so that a writer dropped
/// mid-line (its request timed out while the pipe was full, say) does not leave half a
/// message for the next one to be spliced onto: the next writer finishes it first.
struct Outbox {
    writer: Option<Writer>,
    line: Vec<u8>,
    written: usize,
}

impl Outbox {
    async fn send(&mut self, line: Vec<u8>) -> Result<(), AppServerError> {
        self.finish_line().await?;
        self.line = line;
        self.written = 0;
        self.finish_line().await
    }

    async fn finish_line(&mut self) -> Result<(), AppServerError> {
        if self.written == self.line.len() {
            return Ok(());
        }
        let writer = match self.writer.as_mut() {
            Some(writer) => writer,
            None => {
                let closed = io::Error::new(io::ErrorKind::BrokenPipe, "stdin was closed");
                return Err(AppServerError::io(IoStep::WriteStdin, closed));
            }
        };
        while self.written < self.line.len() {
            match writer.write(&self.line[self.written..]).await {
                Ok(0) => {
                    let zero = io::Error::from(io::ErrorKind::WriteZero);
                    return Err(AppServerError::io(IoStep::WriteStdin, zero));
                }
                Ok(n) => self.written += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(AppServerError::io(IoStep::WriteStdin, error)),
            }
        }
        writer
            .flush()
            .await
            .map_err(|error| AppServerError::io(IoStep::FlushStdin, error))
    }
}

/// Ends the connection when the connection task ends, however it ends.
///
/// The task ends it itself with the reason once the child's stdout ends; this covers the
/// other ways out. A panic while routing (a reader given to
/// [`ClientBuilder::connect`] that panics, say) unwinds into the executor, which drops
/// the task's future, and with it this guard: every pending request then fails at once
/// instead of waiting out its timeout, and later ones fail at once too. (Cancellation,
/// when the client is dropped, ends it as well, with nobody left waiting.)
struct EndOnDrop(Arc<Shared>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let stopped = io::Error::new(
            io::ErrorKind::Other,
            "the task routing the child's messages stopped unexpectedly (it panicked)",
        );
        self.0.end(AppServerError::io(IoStep::ReadStdout, stopped));
    }
}

/// The connection task: routes every line from the child until its stdout ends or the
/// child exits, then fails whatever is still pending with the reason.
async fn run_connection<E>(
    guard: EndOnDrop,
    mut lines: LineReader<Reader>,
    queue: InboxSender,
    exited: Option<E>,
) where
    E: Future<Output = io::Result<ExitStatus>>,
{
    let shared = &guard.0;
    let read = read_until_closed(shared, &mut lines, &queue);
    futures_lite::pin!(read);
    let mut ended = match exited {
        None => read.await,
        Some(exited) => {
            futures_lite::pin!(exited);
            let exit = async {
                match exited.as_mut().await {
                    Ok(status) => status,
                    // Without a reliable exit, stdout's end is the only signal left.
                    Err(_) => future::pending().await,
                }
            };
            let first =
                future::or(async { Err(read.as_mut().await) }, async { Ok(exit.await) }).await;
            match first {
                Ok(status) => wait::timeout(EXIT_SETTLE, read)
                    .await
                    .unwrap_or_else(AppServerError::terminated)
                    .with_exit_status(status),
                // Stdout ended first: the child is normally exiting with it, and
                // how it exited is worth the wait (a crash, a signal).
                Err(ended) => match wait::timeout(EXIT_SETTLE, exited).await {
                    Some(Ok(status)) => ended.with_exit_status(status),
                    _ => ended,
                },
            }
        }
    };
    if let Some(stderr) = &shared.stderr {
        stderr.settle(STDERR_SETTLE).await;
        ended = ended.with_stderr_tail(stderr);
    }
    shared.end(ended);
    // Dropping `queue` now closes `incoming` once it is drained; `guard` finds the
    // connection ended.
}

/// Routes lines until stdout ends or a line ends the connection; returns why it ended.
async fn read_until_closed(
    shared: &Arc<Shared>,
    lines: &mut LineReader<Reader>,
    queue: &InboxSender,
) -> AppServerError {
    let mut since_yield = 0usize;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return AppServerError::terminated(),
            Err(error) => return error,
        };
        since_yield += line.len() + LINE_COST;
        let limit = queue.limit();
        let routed = if line.len() < OFFLOAD_LINE {
            Routed::from_line(shared, &line, limit)
        } else {
            let shared = shared.clone();
            smol::unblock(move || Routed::from_line(&shared, &line, limit)).await
        };
        if let Err(error) = routed.and_then(|routed| routed.deliver(shared, queue)) {
            return error;
        }
        // A child that writes faster than we route would otherwise keep this task
        // from ever returning to the executor, starving every task that shares it.
        if since_yield >= YIELD_AFTER {
            since_yield = 0;
            future::yield_now().await;
        }
    }
}

/// One line from the child, decoded as far as the caller will need and ready to hand
/// over.
enum Routed {
    /// Not a JSON-RPC message, or a member that cannot be decoded: counted, skipped.
    Invalid,
    /// A request whose id cannot be answered by: it gets "Invalid Request".
    InvalidRequest,
    /// A response that nobody waits for any more (its request timed out): dropped
    /// without decoding.
    Late,
    Response(RequestId, Outcome),
    /// A notification or request for the queue, and the decoded size of its params.
    Incoming(Incoming, usize),
}

impl Routed {
    /// Classifies `line` and decodes the member it delivers, refusing (before decoding)
    /// one that would hold more than `limit` bytes.
    fn from_line(shared: &Shared, line: &[u8], limit: usize) -> Result<Routed, AppServerError> {
        let routed = match Message::classify(line) {
            None => Routed::Invalid,
            Some(Message::InvalidRequest) => Routed::InvalidRequest,
            Some(Message::Response { id, outcome }) => {
                if !shared.is_waiting(&id) {
                    return Ok(Routed::Late);
                }
                let outcome = response_outcome(&id, outcome, limit)?;
                Routed::Response(id, outcome)
            }
            Some(Message::Notification { method, params }) => match decode_params(params, limit)? {
                Ok((params, size)) => {
                    Routed::Incoming(Incoming::Notification { method, params }, size)
                }
                Err(_) => Routed::Invalid,
            },
            Some(Message::Request { id, method, params }) => match decode_params(params, limit)? {
                Ok((params, size)) => {
                    Routed::Incoming(Incoming::Request { id, method, params }, size)
                }
                Err(_) => Routed::Invalid,
            },
        };
        Ok(routed)
    }

    /// Hands the message over without waiting.
    ///
    /// # Errors
    ///
    /// [`AppServerError::IncomingFull`] if the queue has no room, which ends the
    /// connection.
    fn deliver(self, shared: &Shared, queue: &InboxSender) -> Result<(), AppServerError> {
        match self {
            Routed::Invalid => shared.count_invalid(),
            Routed::InvalidRequest => shared.owe_invalid_request_answer(),
            Routed::Late => {}
            Routed::Response(id, outcome) => shared.complete(&id, outcome),
            Routed::Incoming(message, size) => queue.push(message, size)?,
        }
        Ok(())
    }
}

/// What a response to request `id` means for it: its decoded `result`, the error its
/// `error` member describes, or [`AppServerError::UndecodableResponse`] saying why it
/// cannot be decoded. Its id says which request it answers, so that request fails at
/// once rather than wait out its timeout for an answer that already came.
///
/// # Errors
///
/// [`AppServerError::MessageTooLarge`] if the member does not fit in `limit`, which
/// ends the connection.
fn response_outcome(
    id: &RequestId,
    outcome: Result<&str, &str>,
    limit: usize,
) -> Result<Outcome, AppServerError> {
    let undecodable = |cause: String| {
        Err(AppServerError::UndecodableResponse {
            response_id: id.clone(),
            cause,
        })
    };
    Ok(match outcome {
        Ok(result) => match decode(result, limit)? {
            Ok((result, _)) => Ok(result),
            Err(cause) => undecodable(format!("its `result`: {}", cause)),
        },
        Err("null") => undecodable("its `error` is null and it has no `result`".to_string()),
        Err(error) => match decode(error, limit)? {
            Ok((error, _)) => Err(AppServerError::from_error_object(&error)),
            Err(cause) => undecodable(format!("its `error`: {}", cause)),
        },
    })
}

/// Decodes the JSON text of a member if its decoded form fits in `limit`, with its
/// decoded size; `Err` with the reason if it cannot be decoded (nested too deep, a
/// number out of range, a lone surrogate).
///
/// # Errors
///
/// [`AppServerError::MessageTooLarge`] if it does not fit.
fn decode(text: &str, limit: usize) -> Result<Result<(Value, usize), String>, AppServerError> {
    let size = match decoded_size(text, limit) {
        Some(size) => size,
        None => {
            let cause = format!("it nests more than {} levels deep", MAX_DEPTH);
            return Ok(Err(cause));
        }
    };
    if size > limit {
        return Err(AppServerError::MessageTooLarge { limit });
    }
    Ok(serde_json::from_str(text)
        .map(|value| (value, size))
        .map_err(|error| error.to_string()))
}

/// [`decode`] for a `params` member, which may be absent.
fn decode_params(
    text: Option<&str>,
    limit: usize,
) -> Result<Result<(Value, usize), String>, AppServerError> {
    match text {
        Some(text) => decode(text, limit),
        None => Ok(Ok((Value::Null, 0))),
    }
}

/// The answering task: writes one "Invalid Request" error (with a `null` id) for each
/// request from the child that had an invalid id. It writes apart from the reader, so
/// that a child that does not read its stdin can never stall the routing of responses.
///
/// Its writes have no time limit: a write that timed out could only be tried again,
/// and a loop of attempts whose deadline had already passed (a zero or tiny timeout)
/// would never yield, taking the executor thread from every task that shares it. A
/// write waiting for the child to read costs nothing while it waits; the client's
/// shutdown or drop cancels it.
async fn answer_invalid_requests(shared: Arc<Shared>, rung: Receiver<()>) {
    let answer = compose(
        shared.jsonrpc_version,
        vec![
            ("id", Value::Null),
            (
                "error",
                json!({"code": INVALID_REQUEST, "message": "Invalid Request"}),
            ),
        ],
    );
    while rung.recv().await.is_ok() {
        while shared.unanswered.load(Ordering::Relaxed) > 0 {
            // An error means its stdin is gone, and with it anyone to answer.
            if shared.send(&answer).await.is_err() {
                return;
            }
            shared.unanswered.fetch_sub(1, Ordering::Relaxed);
            // A child that reads as fast as it asks never makes the write wait.
            future::yield_now().await;
        }
    }
}
