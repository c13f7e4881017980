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

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use futures_lite::StreamExt;
use serde_json::{json, Value};
use smol::channel::Sender;
use smol::process::{ChildStdin, Command};

use mcp_bridge::handshake::Handshake;
use mcp_bridge::host::Listener;

/// Upper bound on each step of the demo (one reply, the bridge's exit). A
/// local round trip takes well under a millisecond; this only turns a broken
/// bridge into a clear error instead of a hang.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

const PROJECT: &str = "demo-project";
const REQUESTER: &str = "demo-agent";

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

/// The MCP messages the demo "CLI" sends, in order.
fn script() -> Vec<Value> {
    vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "mcp-bridge-demo-cli", "version": env!("CARGO_PKG_VERSION")}
        }}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hello through the bridge"}
        }}),
    ]
}

async fn session(out: &mut dyn Write, socket: &Path) -> Result<(), DemoError> {
    let listener =
        Listener::bind(socket).map_err(|e| fail(format!("cannot start the demo host: {}", e)))?;
    let (handshake_tx, handshake_rx) = smol::channel::bounded(1);
    let host = smol::spawn(serve_one(listener, handshake_tx));

    let spawned = Instant::now();
    let mut bridge = Bridge::spawn(out, socket)?;
    expect_handshake(out, handshake_rx).await?;
    let first_reply = run_script(out, &mut bridge).await?;
    let first_reply = first_reply.map_or(Duration::ZERO, |at| at - spawned);

    say(out, "\ncli closes the bridge's stdin");
    let closed = Instant::now();
    let status = bridge.close().await?;
    let exit_took = closed.elapsed();
    let served = within("the host to finish", host)
        .await?
        .map_err(io_fail("the demo host"))?;

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
            "host answered {} requests; spawn to first reply {}; whole session {}",
            served,
            millis(first_reply),
            millis(spawned.elapsed())
        ),
    );
    if !status.success() {
        return Err(fail(format!("the bridge exited with {}", status)));
    }
    say(out, "demo OK");
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

    /// The next line the bridge relays from the host.
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

/// The host reports the handshake it received, which must be ours.
async fn expect_handshake(
    out: &mut dyn Write,
    received: smol::channel::Receiver<Handshake>,
) -> Result<(), DemoError> {
    let handshake = within("the host receiving the handshake", async {
        received
            .recv()
            .await
            .map_err(|_| fail("the host stopped before the handshake"))
    })
    .await??;
    say(
        out,
        format!(
            "host   received handshake  {}",
            String::from_utf8_lossy(&handshake.to_line()).trim_end()
        ),
    );
    if handshake != Handshake::new(PROJECT, REQUESTER) {
        return Err(fail(format!("unexpected handshake {:?}", handshake)));
    }
    Ok(())
}

/// Sends the script, checking each reply, and returns when the first reply
/// arrived.
async fn run_script(
    out: &mut dyn Write,
    bridge: &mut Bridge,
) -> Result<Option<Instant>, DemoError> {
    let mut first_reply = None;
    for message in script() {
        let line = message.to_string();
        say(out, format!("cli -> {}", line));
        let sent = Instant::now();
        send(&mut bridge.stdin, &line).await?;
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

fn check_reply(id: &Value, reply: &str) -> Result<(), DemoError> {
    let value: Value = serde_json::from_str(reply)
        .map_err(|e| fail(format!("reply is not JSON ({}): {}", e, reply)))?;
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
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

/// The demo's stand-in for the app: a tiny MCP server behind the real
/// `host::Listener`. Accepts one bridge, reports its
/// handshake, and answers until it hangs up. Returns how many requests it
/// answered.
async fn serve_one(listener: Listener, handshake_tx: Sender<Handshake>) -> io::Result<usize> {
    let connection = listener.accept().await?;
    let _ = handshake_tx.send(connection.handshake).await;
    let mut writer = connection.writer;
    let mut lines = BufReader::new(connection.reader).lines();
    let mut answered = 0;
    while let Some(line) = lines.next().await {
        if let Some(reply) = answer(&line?) {
            let mut bytes = reply.to_string().into_bytes();
            bytes.push(b'\n');
            writer.write_all(&bytes).await?;
            answered += 1;
        }
    }
    Ok(answered)
}

/// The reply of the demo host's MCP server to one line, or `None` for a
/// notification (or a line it cannot read: a real server would log it).
fn answer(line: &str) -> Option<Value> {
    let request: Value = serde_json::from_str(line).ok()?;
    let id = request.get("id")?.clone();
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    let result = match method {
        "initialize" => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mcp-bridge-demo-host", "version": env!("CARGO_PKG_VERSION")}
        }),
        "tools/list" => json!({"tools": [{
            "name": "echo",
            "description": "Returns the text it is given.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            }
        }]}),
        "tools/call" if request["params"]["name"] == "echo" => {
            let text = request["params"]["arguments"]["text"]
                .as_str()
                .unwrap_or("");
            json!({"content": [{"type": "text", "text": text}], "isError": false})
        }
        _ => {
            return Some(json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32601, "message": format!("method not found: {}", method)
            }}))
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
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

    #[test]
    fn host_answers_the_script() {
        let replies: Vec<Option<Value>> = script().iter().map(|m| answer(&m.to_string())).collect();
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
        let unknown = answer("{\"id\":9,\"method\":\"nope\"}").unwrap();
        assert_eq!(unknown["error"]["code"], -32601);
    }
}
