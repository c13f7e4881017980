//! Many requests in flight over one child, and nothing the child says is lost.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use serde_json::Value;
use smol::channel::{self, Receiver, Sender};
use smol::process::Child;
use smol::{Task, Timer};

use super::message::{envelope, Message};
use super::{
    shutdown_child, spawn_runtime_command, AppServerError, Incoming, LineReader, RequestId,
    StderrTail, MAX_LINE_LENGTH, STARTUP_TIMEOUT,
};

/// How long a child that closed stdout gets to finish writing stderr before pending
/// requests are failed with what it said so far. A crashing child closes both at once;
/// the bound only matters when a grandchild inherited stderr and keeps it open.
const STDERR_SETTLE: Duration = Duration::from_millis(200);

/// How long a request whose write failed waits to learn that the child exited, so that
/// it can report that (with the child's stderr) instead of the bare write error. A
/// child that closed its stdin is usually on its way out; two seconds let a busy
/// machine finish the exit, and only a child that closes stdin yet lives on costs it.
const EXIT_NOTICE: Duration = Duration::from_secs(2);

type Reader = Pin<Box<dyn AsyncRead + Send>>;
type Writer = Pin<Box<dyn AsyncWrite + Send>>;
type Outcome = Result<Value, AppServerError>;

/// A JSON-RPC connection to an app-server child, with any number of requests in flight.
///
/// A background task on smol's global executor reads the child's stdout for as long as
/// it is open. Each response is handed to the request with its id, in whatever order
/// the child answers. Everything else the child says, notifications and its own
/// requests, is queued on the [`incoming`](Self::incoming) channel in the order it was
/// written, so by the time a request returns, every message the child wrote before the
/// response is already in that queue. The queue is unbounded, so that a caller busy
/// awaiting a response can never stall the reader and with it that very response;
/// keep receiving from it.
///
/// When stdout ends (normally: the child exited), every pending request fails at once
/// with [`AppServerError::ProcessTerminated`], carrying the tail of the child's stderr,
/// and so does every later request.
///
/// Dropping the client stops the reader and kills the child; [`shutdown`](Self::shutdown)
/// first asks it to exit.
pub struct AppServerClient {
    shared: Arc<Shared>,
    incoming: Receiver<Incoming>,
    child: Option<Child>,
    request_timeout: Duration,
    _reader: Task<()>,
}

/// Settings for an [`AppServerClient`]; made by [`AppServerClient::builder`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    request_timeout: Duration,
    max_line_length: usize,
    jsonrpc_version: bool,
}

impl ClientBuilder {
    /// How long [`AppServerClient::request`] waits for a response, including the time to
    /// write the request. Defaults to [`STARTUP_TIMEOUT`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest line accepted from the child, in bytes. Defaults to
    /// [`MAX_LINE_LENGTH`]. A longer line ends the connection with
    /// [`AppServerError::LineTooLong`], as the message it held, possibly a response, is
    /// lost.
    pub fn max_line_length(mut self, limit: usize) -> Self {
        self.max_line_length = limit;
        self
    }

    /// Leaves `"jsonrpc":"2.0"` out of outgoing messages, as Codex's app-server protocol
    /// does. Incoming messages are accepted with or without it either way.
    pub fn omit_jsonrpc_version(mut self) -> Self {
        self.jsonrpc_version = false;
        self
    }

    /// Spawns `command` with [`spawn_runtime_command`] and connects to it.
    ///
    /// # Errors
    ///
    /// As for [`spawn_runtime_command`].
    pub fn spawn(
        self,
        command: std::process::Command,
        runtime_name: &str,
    ) -> Result<AppServerClient, AppServerError> {
        let process = spawn_runtime_command(command, runtime_name)?;
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
        child: Option<Child>,
        stderr: Option<StderrTail>,
    ) -> AppServerClient {
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
        });
        let (incoming_sender, incoming) = channel::unbounded();
        let lines = LineReader::with_max_line_length(reader, self.max_line_length);
        let reader = smol::spawn(read_until_closed(shared.clone(), lines, incoming_sender));
        AppServerClient {
            shared,
            incoming,
            child,
            request_timeout: self.request_timeout,
            _reader: reader,
        }
    }
}

impl AppServerClient {
    /// Spawns `command` as an app-server called `runtime_name`, with default settings.
    ///
    /// # Errors
    ///
    /// As for [`spawn_runtime_command`].
    pub fn spawn(
        command: std::process::Command,
        runtime_name: &str,
    ) -> Result<AppServerClient, AppServerError> {
        Self::builder().spawn(command, runtime_name)
    }

    /// Default settings, to adjust before spawning or connecting.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            request_timeout: STARTUP_TIMEOUT,
            max_line_length: MAX_LINE_LENGTH,
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
    /// [`AppServerError::ProcessTerminated`] if it exited first,
    /// [`AppServerError::Timeout`] if it took too long, [`AppServerError::Io`] if the
    /// request could not be written.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, AppServerError> {
        self.request_with_timeout(method, params, self.request_timeout)
            .await
    }

    /// Like [`request`](Self::request), with its own timeout: [`TURN_TIMEOUT`] for a
    /// whole agent turn, say.
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
        let message = self.envelope(vec![
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
                let give_up = async {
                    Timer::after(EXIT_NOTICE).await;
                    Err(write_error)
                };
                return future::or(answer, give_up).await;
            }
            answer.await
        };
        let expire = async {
            Timer::after(timeout).await;
            Err(AppServerError::Timeout {
                response_id: id.clone(),
                timeout,
                stderr_tail: self.stderr_tail().unwrap_or_default(),
            })
        };
        future::or(exchange, expire).await
    }

    /// Sends a notification: a message with no id, which the child does not answer.
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if it could not be written.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), AppServerError> {
        let message = self.envelope(vec![("method", Value::from(method)), ("params", params)]);
        self.shared.send(&message).await
    }

    /// Answers the child's request `id` (see [`Incoming::Request`]) with `result`.
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if the answer could not be written.
    pub async fn respond(&self, id: &RequestId, result: Value) -> Result<(), AppServerError> {
        let message = self.envelope(vec![("id", Value::from(id.clone())), ("result", result)]);
        self.shared.send(&message).await
    }

    /// Answers the child's request `id` with a JSON-RPC error object.
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if the answer could not be written.
    pub async fn respond_error(
        &self,
        id: &RequestId,
        code: i64,
        message: &str,
        data: Option<Value>,
    ) -> Result<(), AppServerError> {
        let mut error = serde_json::json!({ "code": code, "message": message });
        if let Some(data) = data {
            error["data"] = data;
        }
        let message = self.envelope(vec![("id", Value::from(id.clone())), ("error", error)]);
        self.shared.send(&message).await
    }

    /// The notifications and requests the child sends, in the order it sent them.
    ///
    /// Every clone receives from the same queue, so each message goes to exactly one
    /// receiver. The channel closes once the child's stdout has ended and the queue is
    /// empty.
    pub fn incoming(&self) -> Receiver<Incoming> {
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

    /// The child's process id; `None` without a child.
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Closes the child's stdin and stops it with [`shutdown_child`], returning its exit
    /// status (`None` without a child).
    ///
    /// # Errors
    ///
    /// [`AppServerError::Io`] if the child could not be killed or waited for.
    pub async fn shutdown(mut self) -> Result<Option<ExitStatus>, AppServerError> {
        // Requests borrow `self` and a dropped request releases the lock, so it is free.
        if let Some(mut outbox) = self.shared.outbox.try_lock() {
            outbox.writer = None;
        }
        let mut child = match self.child.take() {
            Some(child) => child,
            None => return Ok(None),
        };
        shutdown_child(&mut child)
            .await
            .map(Some)
            .map_err(|error| AppServerError::io("Failed stopping app-server", error))
    }

    fn envelope(&self, members: Vec<(&str, Value)>) -> Value {
        envelope(self.shared.jsonrpc_version, members)
    }
}

impl fmt::Debug for AppServerClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppServerClient")
            .field("process_id", &self.process_id())
            .field("pending", &self.shared.lock_pending().waiting.len())
            .field("invalid_lines", &self.invalid_lines())
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// What the client and its reader task share.
struct Shared {
    outbox: smol::lock::Mutex<Outbox>,
    pending: Mutex<Pending>,
    next_id: AtomicI64,
    invalid_lines: AtomicU64,
    jsonrpc_version: bool,
    stderr: Option<StderrTail>,
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

    fn complete(&self, id: &RequestId, outcome: Outcome) {
        // No entry: a response to a request that timed out or was dropped.
        if let Some(sender) = self.lock_pending().waiting.remove(id) {
            let _ = sender.try_send(outcome);
        }
    }

    /// Fails every pending request, and every later one, with `error`.
    fn end(&self, error: AppServerError) {
        let mut pending = self.lock_pending();
        for (_, sender) in pending.waiting.drain() {
            let _ = sender.try_send(Err(error.replicate()));
        }
        pending.ended = Some(error);
    }

    fn ended(&self) -> AppServerError {
        match &self.lock_pending().ended {
            Some(error) => error.replicate(),
            None => AppServerError::ProcessTerminated {
                stderr_tail: String::new(),
            },
        }
    }

    async fn send(&self, message: &Value) -> Result<(), AppServerError> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.outbox.lock().await.send(line).await
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
                return Err(AppServerError::io(
                    "Failed writing to app-server stdin",
                    closed,
                ));
            }
        };
        while self.written < self.line.len() {
            match writer.write(&self.line[self.written..]).await {
                Ok(0) => {
                    let zero = io::Error::from(io::ErrorKind::WriteZero);
                    return Err(AppServerError::io(
                        "Failed writing to app-server stdin",
                        zero,
                    ));
                }
                Ok(n) => self.written += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(AppServerError::io(
                        "Failed writing to app-server stdin",
                        error,
                    ))
                }
            }
        }
        writer
            .flush()
            .await
            .map_err(|error| AppServerError::io("Failed flushing app-server stdin", error))
    }
}

/// The reader task: routes every line from the child until its stdout ends.
async fn read_until_closed(
    shared: Arc<Shared>,
    mut lines: LineReader<Reader>,
    incoming: Sender<Incoming>,
) {
    let mut ended = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => {
                break AppServerError::ProcessTerminated {
                    stderr_tail: String::new(),
                }
            }
            Err(error) => break error,
        };
        match Message::parse(&line) {
            Some(Message::Response { id, outcome }) => shared.complete(&id, outcome),
            // Unbounded, so this never waits; it fails only once the client is gone.
            Some(Message::Incoming(message)) => {
                let _ = incoming.try_send(message);
            }
            None => {
                shared.invalid_lines.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    if let Some(stderr) = &shared.stderr {
        stderr.settle(STDERR_SETTLE).await;
        ended = ended.with_stderr_tail(stderr);
    }
    shared.end(ended);
}
