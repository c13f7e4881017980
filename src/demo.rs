//! `mcp-bridge demo`: the whole round trip on one machine, with nothing to
//! install or configure.
//!
//! It plays both outer roles so a user (or a packager checking an installed
//! binary) can watch the bridge work: a throw-away app host on a private
//! socket, built on the same `host::Listener` an app
//! would use, answering like a tiny MCP server with one `echo` tool; and an
//! MCP CLI, spawning this same executable as `mcp-server` exactly as a CLI's
//! `{command, args}` declaration would, then driving a short session through
//! it. Every step is checked, so a broken install fails loudly instead of
//! printing a plausible transcript.
//!
//! Halfway through, the host restarts as an app does for an update: it
//! takes a request and, without answering it, drops its listener (the
//! endpoint goes away) and the connection, then binds the endpoint again.
//! The transcript shows what the bridge does about it: the error response
//! for the request caught in flight, the resumed handshake, the client's
//! `initialize` replayed to the new host, the `list_changed` notice to the
//! CLI, and the CLI's next calls being answered by the new host.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use futures_lite::StreamExt;
use serde_json::Value;
use smol::channel::{Receiver, Sender};
use smol::process::{ChildStdin, Command};

use mcp_bridge::bridge::ERROR_CODE;
use mcp_bridge::handshake::Handshake;
use mcp_bridge::host::{Connection, Listener};

/// Upper bound on each step of the demo (one reply, the bridge's exit, the
/// host binding its endpoint again). A local round trip takes well under a
/// millisecond; this only turns a broken bridge into a clear error instead
/// of a hang.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the restarting host waits between attempts to bind its
/// endpoint again while the old one is still in use: a Windows pipe lives
/// until the bridge has closed its end of the old connection.
const REBIND_PAUSE: Duration = Duration::from_millis(10);

const PROJECT: &str = "demo-project";
const REQUESTER: &str = "demo-agent";

/// The id the bridge gives the `initialize` it replays to a restarted app
/// (see `bridge::session`); the demo checks that the host received it.
const REPLAYED_INITIALIZE_ID: &str = "mcp-bridge-replay-1";

/// Why the demo failed. The message says which step and what was seen.
#[derive(Debug)]
pub struct DemoError(String);

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DemoError {}

fn fail(message: impl Into<String>) -> DemoError {
    DemoError(message.into())
}

fn io_fail(what: &str) -> impl Fn(io::Error) -> DemoError + '_ {
    move |e| fail(format!("{}: {}", what, e))
}

/// Runs the demo, writing the transcript to `out`.
pub fn run(out: &mut dyn Write) -> Result<(), DemoError> {
    let endpoint =
        PrivateEndpoint::new().map_err(io_fail("cannot create a temporary directory"))?;
    smol::block_on(session(out, endpoint.path()))
}

/// What the demo "CLI" sends first: the start of a session and one call.
fn opening() -> Vec<Value> {
    vec![
        value(concat!(
            r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"#,
            r#""protocolVersion": "2025-06-18", "capabilities": {}, "#,
            r#""clientInfo": {"name": "mcp-bridge-demo-cli", "version": ""#,
            env!("CARGO_PKG_VERSION"),
            r#""}}}"#
        )),
        value(r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#),
        value(r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}"#),
        echo_call(3, "hello through the bridge"),
    ]
}

/// A JSON value from the demo's own text: a constant, or one put together
/// from values already written as JSON. Parsed rather than built with
/// `json!`, whose expansion is more code than the parser, which the build
/// has anyway. (A mistake in the text shows as `null`, which the demo's
/// checks and tests catch.)
fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The request the host takes and restarts without answering.
fn caught_by_restart() -> Value {
    echo_call(4, "sent as the host restarts")
}

/// What the CLI sends once told the tool list changed: it asks for the
/// list again, then calls the tool on the new host.
fn after_restart() -> Vec<Value> {
    vec![
        value(r#"{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}"#),
        echo_call(6, "hello again, after the restart"),
    ]
}

fn echo_call(id: u64, text: &str) -> Value {
    value(&format!(
        r#"{{"jsonrpc": "2.0", "id": {}, "method": "tools/call", "params": {{"name": "echo", "arguments": {{"text": {}}}}}}}"#,
        id,
        Value::from(text)
    ))
}

async fn session(out: &mut dyn Write, socket: &Path) -> Result<(), DemoError> {
    let listener = Listener::bind(socket).map_err(|e| {
        fail(format!(
            "cannot start the demo host: {} ({})",
            e,
            e.io_error()
        ))
    })?;
    let (events_tx, events) = smol::channel::unbounded();
    let host = smol::spawn(host(listener, caught_by_restart()["id"].clone(), events_tx));
    let mut host_events = HostEvents(events);

    let spawned = Instant::now();
    let mut bridge = Bridge::spawn(out, socket)?;
    host_events.expect_handshake(out, false).await?;
    let first_reply = run_script(out, &mut bridge, &mut host_events, opening()).await?;
    let first_reply = first_reply.map_or(Duration::ZERO, |at| at - spawned);

    restart(out, &mut bridge, &mut host_events).await?;
    run_script(out, &mut bridge, &mut host_events, after_restart()).await?;

    say(out, "\ncli closes the bridge's stdin");
    let closed = Instant::now();
    let status = bridge.close().await?;
    let exit_took = closed.elapsed();
    let served = within("the host to finish", host).await??;

    let code = status.code().map_or_else(
        || "none (killed by a signal)".to_string(),
        |c| c.to_string(),
    );
    say(
        out,
        format!(
            "bridge exited with code {}, {} after stdin closed",
            code,
            millis(exit_took)
        ),
    );
    say(
        out,
        format!(
            "host answered {} requests over 2 connections (1 replayed by the bridge, 1 cut off by the restart); spawn to first reply {}; whole session {}",
            served,
            millis(first_reply),
            millis(spawned.elapsed())
        ),
    );
    if !status.success() {
        return Err(fail(format!("the bridge exited with {}", status)));
    }
    next_steps(out);
    say(out, "demo OK");
    Ok(())
}

/// What to do once the demo has shown the bridge works: configure a CLI to
/// spawn this executable, then check that line against the running app.
/// (One write, out of line: it is the whole cost of the advice.)
#[inline(never)]
fn next_steps(out: &mut dyn Write) {
    let me = std::env::current_exe().map_or_else(
        |_| "mcp-bridge".to_string(),
        |path| shell_word(&path.to_string_lossy()),
    );
    let _ = writeln!(
        out,
        "\nNext, with your app:\n\
         \x20 1. configure your MCP CLI to spawn this executable (README.md, \"Configure your MCP CLI\"), e.g.\n\
         \x20      claude mcp add myapp -- {me} mcp-server {args}\n\
         \x20 2. with the app running, check that line with `doctor` in place of `mcp-server`:\n\
         \x20      {me} doctor {args}",
        me = me,
        args = NEXT_STEPS_ARGS,
    );
}

/// What the next steps put after `mcp-server` and `doctor`.
const NEXT_STEPS_ARGS: &str = "--endpoint <your app's endpoint> --project <id> --requester <agent>";

/// `word` as one word for a POSIX shell: as it is when it is plain, in
/// single quotes otherwise (a quote in it written as `'\''`).
fn shell_word(word: &str) -> String {
    let plain = word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@".contains(&b));
    if plain && !word.is_empty() {
        return word.to_string();
    }
    let mut quoted = String::from("'");
    for c in word.chars() {
        match c {
            '\'' => quoted.push_str("'\\''"),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// The host restarts with a request in flight; the bridge answers it with
/// an error, reconnects, resumes the session and tells the CLI.
async fn restart(
    out: &mut dyn Write,
    bridge: &mut Bridge,
    host_events: &mut HostEvents,
) -> Result<(), DemoError> {
    say(
        out,
        "\nthe host restarts (as for an update) while the cli's next request is in flight",
    );
    let request = caught_by_restart();
    let line = request.to_string();
    say(out, format!("cli -> {}", line));
    let sent = Instant::now();
    send(&mut bridge.stdin, &line).await?;
    host_events.expect_relayed(&line).await?;
    say(
        out,
        "host   took it and restarts without answering: listener dropped (the endpoint goes away), connection closed",
    );
    let reply = bridge.reply().await?;
    say(
        out,
        format!("cli <- {}   ({})", reply, millis(sent.elapsed())),
    );
    check_bridge_error(&request["id"], &reply)?;
    let restarted = match host_events.next("the host to bind again").await? {
        HostEvent::Restarted(at) => at,
        other => {
            return Err(fail(format!(
                "expected the host to restart, got {:?}",
                other
            )))
        }
    };
    say(out, "host   listens again on the same endpoint");
    host_events.expect_handshake(out, true).await?;
    say(
        out,
        format!(
            "       (the bridge reconnected {} after the host was back)",
            millis(restarted.elapsed())
        ),
    );
    expect_replay(out, host_events).await?;
    let notice = bridge.reply().await?;
    say(out, format!("cli <- {}", notice));
    check_list_changed(&notice)?;
    say(
        out,
        "       (the bridge's own notice: the cli asks the new host what it offers)",
    );
    Ok(())
}

/// The host must receive the CLI's `initialize`, replayed under the
/// bridge's own id, then its `notifications/initialized`.
async fn expect_replay(out: &mut dyn Write, host_events: &mut HostEvents) -> Result<(), DemoError> {
    let initialize = host_events.expect_line("the replayed initialize").await?;
    say(out, format!("host   received replayed   {}", initialize));
    let mut expected = opening()[0].clone();
    expected["id"] = Value::from(REPLAYED_INITIALIZE_ID);
    if initialize != expected {
        return Err(fail(format!(
            "expected the replayed initialize {}, the host received {}",
            expected, initialize
        )));
    }
    let initialized = host_events.expect_line("the replayed initialized").await?;
    say(out, format!("host   received replayed   {}", initialized));
    if initialized != opening()[1] {
        return Err(fail(format!(
            "expected the replayed {}, the host received {}",
            opening()[1],
            initialized
        )));
    }
    say(
        out,
        "       (replayed by the bridge: the host's reply to that initialize goes to the bridge, not to the cli)",
    );
    Ok(())
}

/// This executable, spawned as `mcp-server` the way an MCP CLI would, with
/// its stdin and stdout in our hands.
struct Bridge {
    child: smol::process::Child,
    stdin: ChildStdin,
    stdout: futures_lite::io::Lines<BufReader<smol::process::ChildStdout>>,
}

impl Bridge {
    fn spawn(out: &mut dyn Write, socket: &Path) -> Result<Bridge, DemoError> {
        let exe = std::env::current_exe().map_err(io_fail("cannot find this executable"))?;
        say(
            out,
            format!(
                "mcp-bridge demo: a throw-away MCP host listens on {} (owner-only; other users are kept out)",
                socket.display()
            ),
        );
        say(
            out,
            format!(
                "spawning, as an MCP CLI would: {} mcp-server --endpoint {} --project {} --requester {}\n",
                exe.display(),
                socket.display(),
                PROJECT,
                REQUESTER
            ),
        );
        let mut child = Command::new(&exe)
            .arg("mcp-server")
            .arg("--endpoint")
            .arg(socket)
            .args(["--project", PROJECT, "--requester", REQUESTER])
            // A throw-away host's answers are not worth keeping.
            .env("MCP_BRIDGE_CACHE_DIR", "")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(io_fail("cannot spawn the bridge"))?;
        let stdin = take(child.stdin.take(), "stdin")?;
        let stdout = BufReader::new(take(child.stdout.take(), "stdout")?).lines();
        Ok(Bridge {
            child,
            stdin,
            stdout,
        })
    }

    /// The next line the bridge writes on its stdout.
    async fn reply(&mut self) -> Result<String, DemoError> {
        match within("a reply", self.stdout.next()).await? {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(e)) => Err(fail(format!("reading the bridge's stdout: {}", e))),
            None => Err(fail("the bridge closed stdout before replying")),
        }
    }

    /// Closes the bridge's stdin, as a CLI does when it is done, and waits
    /// for it to exit.
    async fn close(self) -> Result<std::process::ExitStatus, DemoError> {
        let Bridge {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        within("the bridge to exit", child.status())
            .await?
            .map_err(io_fail("waiting for the bridge"))
    }
}

/// What the demo host reports, in the order it happens.
#[derive(Debug)]
enum HostEvent {
    /// A bridge connected and sent this handshake.
    Handshake(Handshake),
    /// A line the host received (each one, whether it answers it or not).
    Line(String),
    /// The host dropped its listener and the connection, and bound the
    /// endpoint again at this moment.
    Restarted(Instant),
    /// The host failed, for this reason, and stopped.
    Failed(String),
}

/// The demo's view of its host: the events it reports, awaited in order.
struct HostEvents(Receiver<HostEvent>);

impl HostEvents {
    /// The next event; a failed host is the demo's failure.
    async fn next(&mut self, what: &str) -> Result<HostEvent, DemoError> {
        let event = within(what, self.0.recv())
            .await?
            .map_err(|_| fail(format!("the host stopped before {}", what)))?;
        match event {
            HostEvent::Failed(why) => Err(fail(format!("the demo host failed: {}", why))),
            event => Ok(event),
        }
    }

    /// The next event must be `line`, received by the host byte for byte
    /// as the CLI wrote it.
    async fn expect_relayed(&mut self, line: &str) -> Result<(), DemoError> {
        match self.next("the host receiving the request").await? {
            HostEvent::Line(received) if received == line => Ok(()),
            other => Err(fail(format!(
                "expected the host to receive {}, it reported {:?}",
                line, other
            ))),
        }
    }

    /// The next event must be a line the host received, a JSON value.
    async fn expect_line(&mut self, what: &str) -> Result<Value, DemoError> {
        match self.next(what).await? {
            HostEvent::Line(line) => serde_json::from_str(&line).map_err(|e| {
                fail(format!(
                    "the host received a line that is not JSON ({}): {}",
                    e, line
                ))
            }),
            other => Err(fail(format!(
                "expected {}, the host reported {:?}",
                what, other
            ))),
        }
    }

    /// The next event must be our handshake: a fresh one, or, after the
    /// restart, one that says the session is resumed.
    async fn expect_handshake(
        &mut self,
        out: &mut dyn Write,
        resumed: bool,
    ) -> Result<(), DemoError> {
        let handshake = match self.next("the host receiving the handshake").await? {
            HostEvent::Handshake(handshake) => handshake,
            other => {
                return Err(fail(format!(
                    "expected a handshake, the host reported {:?}",
                    other
                )))
            }
        };
        say(
            out,
            format!(
                "host   received handshake  {}",
                String::from_utf8_lossy(&handshake.to_line()).trim_end()
            ),
        );
        let mut expected = Handshake::new(PROJECT, REQUESTER);
        expected.resumed = resumed;
        if handshake != expected {
            return Err(fail(format!("unexpected handshake {:?}", handshake)));
        }
        Ok(())
    }
}

/// Sends `script`, checking each reply, and returns when the first reply
/// arrived.
async fn run_script(
    out: &mut dyn Write,
    bridge: &mut Bridge,
    host_events: &mut HostEvents,
    script: Vec<Value>,
) -> Result<Option<Instant>, DemoError> {
    let mut first_reply = None;
    for message in script {
        let line = message.to_string();
        say(out, format!("cli -> {}", line));
        let sent = Instant::now();
        send(&mut bridge.stdin, &line).await?;
        host_events.expect_relayed(&line).await?;
        let id = match message.get("id") {
            Some(id) => id.clone(),
            None => {
                say(
                    out,
                    "       (a notification: no reply expected, and none waited for)",
                );
                continue;
            }
        };
        let reply = bridge.reply().await?;
        first_reply.get_or_insert_with(Instant::now);
        say(
            out,
            format!("cli <- {}   ({})", reply, millis(sent.elapsed())),
        );
        check_reply(&id, &reply)?;
    }
    Ok(first_reply)
}

fn parse(reply: &str) -> Result<Value, DemoError> {
    serde_json::from_str(reply).map_err(|e| fail(format!("reply is not JSON ({}): {}", e, reply)))
}

fn check_reply(id: &Value, reply: &str) -> Result<(), DemoError> {
    let value = parse(reply)?;
    if value.get("id") != Some(id) {
        return Err(fail(format!(
            "expected a reply to id {}, got {}",
            id, reply
        )));
    }
    if value.get("result").is_none() {
        return Err(fail(format!("expected a result, got {}", reply)));
    }
    Ok(())
}

/// `reply` must be the bridge's own error response to request `id`.
fn check_bridge_error(id: &Value, reply: &str) -> Result<(), DemoError> {
    let value = parse(reply)?;
    if value.get("id") != Some(id) || value["error"]["code"] != ERROR_CODE {
        return Err(fail(format!(
            "expected the bridge's error response ({}) to id {}, got {}",
            ERROR_CODE, id, reply
        )));
    }
    Ok(())
}

/// `line` must be the notice that the tool list changed (and nothing else:
/// the demo host declares no prompts or resources).
fn check_list_changed(line: &str) -> Result<(), DemoError> {
    let got = parse(line)?;
    let expected = value(r#"{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}"#);
    if got != expected {
        return Err(fail(format!("expected {}, got {}", expected, line)));
    }
    Ok(())
}

fn take<T>(pipe: Option<T>, name: &str) -> Result<T, DemoError> {
    pipe.ok_or_else(|| fail(format!("the bridge's {} is not piped", name)))
}

async fn send(stdin: &mut ChildStdin, line: &str) -> Result<(), DemoError> {
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    let written = async {
        stdin.write_all(&bytes).await?;
        stdin.flush().await
    };
    written
        .await
        .map_err(io_fail("writing to the bridge's stdin"))
}

async fn within<T>(what: &str, step: impl std::future::Future<Output = T>) -> Result<T, DemoError> {
    future::or(async { Ok(step.await) }, async {
        Timer::after(STEP_TIMEOUT).await;
        Err(fail(format!(
            "timed out after {:?} waiting for {}",
            STEP_TIMEOUT, what
        )))
    })
    .await
}

fn say(out: &mut dyn Write, line: impl AsRef<str>) {
    // The transcript is best effort: a closed stdout must not fail the demo.
    let _ = writeln!(out, "{}", line.as_ref());
}

fn millis(d: Duration) -> String {
    let places = if d < Duration::from_millis(10) { 2 } else { 1 };
    format!("{} ms", crate::decimal::Fixed::millis(d, places))
}

/// The demo's stand-in for the app: a tiny MCP server behind the real
/// `host::Listener`, reporting what happens on `events`. It serves one
/// bridge until the request with id `restart_during` arrives, then
/// restarts without answering it: drops its listener (the endpoint goes
/// away) and the connection, binds the endpoint again and serves the next
/// bridge until it hangs up. Returns how many requests it answered.
async fn host(
    listener: Listener,
    restart_during: Value,
    events: Sender<HostEvent>,
) -> Result<usize, DemoError> {
    let served = serve_across_restart(listener, &restart_during, &events).await;
    if let Err(e) = &served {
        let _ = events.send(HostEvent::Failed(e.to_string())).await;
    }
    served
}

async fn serve_across_restart(
    listener: Listener,
    restart_during: &Value,
    events: &Sender<HostEvent>,
) -> Result<usize, DemoError> {
    let endpoint = listener.endpoint().to_path_buf();
    let connection = listener.accept().await.map_err(io_fail("accepting"))?;
    let before = serve_one(connection, Some((restart_during, listener)), events).await?;
    let listener = bind_again(&endpoint).await?;
    let _ = events.send(HostEvent::Restarted(Instant::now())).await;
    let connection = listener
        .accept()
        .await
        .map_err(io_fail("accepting after the restart"))?;
    let after = serve_one(connection, None, events).await?;
    Ok(before + after)
}

/// Serves one connection until the bridge hangs up, or, given `restart`,
/// until the request with its id arrives: that one is left unanswered, and
/// its listener dropped before the connection. Returns how many requests
/// it answered.
async fn serve_one(
    connection: Connection,
    restart: Option<(&Value, Listener)>,
    events: &Sender<HostEvent>,
) -> Result<usize, DemoError> {
    let (restart_during, listener) = match restart {
        Some((id, listener)) => (Some(id), Some(listener)),
        None => (None, None),
    };
    let _ = events
        .send(HostEvent::Handshake(connection.handshake))
        .await;
    let mut writer = connection.writer;
    let mut lines = BufReader::new(connection.reader).lines();
    let mut answered = 0;
    while let Some(line) = lines.next().await {
        let line = line.map_err(io_fail("reading from the bridge"))?;
        let _ = events.send(HostEvent::Line(line.clone())).await;
        let id = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|request| request.get("id").cloned());
        if restart_during.is_some() && id.as_ref() == restart_during {
            // The listener goes first, so the bridge finds no endpoint to
            // reconnect to (rather than one about to close) until the new
            // one is up; the connection closes as this returns.
            drop(listener);
            return Ok(answered);
        }
        if let Some(reply) = answer(&line) {
            let mut bytes = reply.to_string().into_bytes();
            bytes.push(b'\n');
            writer
                .write_all(&bytes)
                .await
                .map_err(io_fail("writing to the bridge"))?;
            answered += 1;
        }
    }
    Ok(answered)
}

/// Binds `endpoint` again after the restart. On Windows the old pipe lives
/// until the bridge has closed its end (it does so once it sees the
/// connection close), so "in use" is retried for a bounded time.
async fn bind_again(endpoint: &Path) -> Result<Listener, DemoError> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match Listener::bind(endpoint) {
            Ok(listener) => return Ok(listener),
            Err(e)
                if e.io_error().kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline =>
            {
                Timer::after(REBIND_PAUSE).await;
            }
            Err(e) => {
                return Err(fail(format!(
                    "the demo host cannot bind its endpoint again: {} ({})",
                    e,
                    e.io_error()
                )))
            }
        }
    }
}

/// The reply of the demo host's MCP server to one line, or `None` for a
/// notification (or a line it cannot read: a real server would log it).
fn answer(line: &str) -> Option<Value> {
    let request: Value = serde_json::from_str(line).ok()?;
    let id = request.get("id")?.clone();
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    let result = match method {
        "initialize" => concat!(
            r#"{"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}}, "#,
            r#""serverInfo": {"name": "mcp-bridge-demo-host", "version": ""#,
            env!("CARGO_PKG_VERSION"),
            r#""}}"#
        )
        .to_string(),
        "tools/list" => concat!(
            r#"{"tools": [{"name": "echo", "description": "Returns the text it is given.", "#,
            r#""inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "#,
            r#""required": ["text"]}}]}"#
        )
        .to_string(),
        "tools/call" if request["params"]["name"] == "echo" => {
            let text = request["params"]["arguments"]["text"]
                .as_str()
                .unwrap_or("");
            format!(
                r#"{{"content": [{{"type": "text", "text": {}}}], "isError": false}}"#,
                Value::from(text)
            )
        }
        _ => {
            return Some(value(&format!(
                r#"{{"jsonrpc": "2.0", "id": {}, "error": {{"code": -32601, "message": {}}}}}"#,
                id,
                Value::from(format!("method not found: {}", method))
            )))
        }
    };
    Some(value(&format!(
        r#"{{"jsonrpc": "2.0", "id": {}, "result": {}}}"#,
        id, result
    )))
}

/// Where the demo host listens, used by this run alone: a socket in a
/// fresh private directory (removed on drop), or on Windows a pipe name
/// nobody else uses (a pipe vanishes with its last handle, so nothing is
/// left to remove).
struct PrivateEndpoint {
    path: PathBuf,
    #[cfg(unix)]
    _dir: TempDir,
}

impl PrivateEndpoint {
    #[cfg(unix)]
    fn new() -> io::Result<PrivateEndpoint> {
        let dir = TempDir::new()?;
        Ok(PrivateEndpoint {
            path: dir.path().join("app.sock"),
            _dir: dir,
        })
    }

    #[cfg(windows)]
    fn new() -> io::Result<PrivateEndpoint> {
        Ok(PrivateEndpoint {
            path: PathBuf::from(format!(r"\\.\pipe\{}", unique_name())),
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// `mcp-bridge-demo-<pid>-<nanoseconds>`: distinct for concurrent runs.
fn unique_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("mcp-bridge-demo-{}-{}", std::process::id(), nanos)
}

/// A private (0700) directory for the demo's socket, removed on drop.
#[cfg(unix)]
struct TempDir(PathBuf);

#[cfg(unix)]
impl TempDir {
    fn new() -> io::Result<TempDir> {
        let path = std::env::temp_dir().join(unique_name());
        let mut builder = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&path)?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(unix)]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn host_answers_the_script() {
        let mut script = opening();
        script.push(caught_by_restart());
        script.extend(after_restart());
        let replies: Vec<Option<Value>> = script.iter().map(|m| answer(&m.to_string())).collect();
        assert_eq!(
            replies[0].as_ref().unwrap()["result"]["serverInfo"]["name"],
            "mcp-bridge-demo-host"
        );
        assert!(replies[1].is_none(), "a notification gets no reply");
        assert_eq!(
            replies[2].as_ref().unwrap()["result"]["tools"][0]["name"],
            "echo"
        );
        assert_eq!(
            replies[3].as_ref().unwrap()["result"]["content"][0]["text"],
            "hello through the bridge"
        );
        assert_eq!(
            replies[6].as_ref().unwrap()["result"]["content"][0]["text"],
            "hello again, after the restart"
        );
        let unknown = answer("{\"id\":9,\"method\":\"nope\"}").unwrap();
        assert_eq!(unknown["error"]["code"], -32601);
    }

    /// The restart steps are only worth showing if a bridge that gets them
    /// wrong fails the demo: a reply instead of the error, an error that is
    /// not the bridge's, another id, or a notice other than the tools one.
    #[test]
    fn restart_checks_refuse_what_the_bridge_must_not_write() {
        let id = json!(4);
        let error = r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"m"}}"#;
        assert!(check_bridge_error(&id, error).is_ok());
        for wrong in [
            r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":"4","error":{"code":-32000,"message":"m"}}"#,
            "not json",
        ] {
            assert!(check_bridge_error(&id, wrong).is_err(), "{}", wrong);
        }
        let notice = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        assert!(check_list_changed(notice).is_ok());
        for wrong in [
            r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#,
            r#"{"jsonrpc":"2.0","id":"mcp-bridge-replay-1","result":{}}"#,
        ] {
            assert!(check_list_changed(wrong).is_err(), "{}", wrong);
        }
    }
}
