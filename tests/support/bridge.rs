//! The bridge as an MCP CLI spawns it, with line-wise stdio: the one
//! `Bridge` the test files drive (each adds its own arguments).

use std::path::Path;
use std::process::Stdio;

use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use futures_lite::StreamExt;
use smol::process::{Child, ChildStdin, ChildStdout, Command};

use super::{bin, within};

/// The command for a bridge to `socket` as `project` and `requester`
/// (`mcp-server --endpoint ... --project ... --requester ...`); the caller
/// adds its own arguments and says where stderr goes. The binary is
/// [`bin`]'s: the one cargo built, unless `MCP_BRIDGE_TEST_BIN` names another.
pub fn bridge_command(socket: &Path, project: &str, requester: &str) -> Command {
    let mut command = Command::new(bin());
    command
        .arg("mcp-server")
        .arg("--endpoint")
        .arg(socket)
        .args(["--project", project, "--requester", requester])
        // The user's own answers cache stays out of the tests (a test that
        // wants one passes --cache-dir).
        .env("MCP_BRIDGE_CACHE_DIR", "");
    command
}

/// Adds to `command` (the bridge, or a program that runs it) the line of a
/// plain relay to `socket` as project `p` and `requester`: `mcp-server
/// --no-reconnect`, which exits when hung up on instead of answering
/// requests with the reason until stdin closes.
pub fn plain_relay<'a>(
    command: &'a mut std::process::Command,
    socket: &Path,
    requester: &str,
) -> &'a mut std::process::Command {
    command
        .args(["mcp-server", "--no-reconnect", "--endpoint"])
        .arg(socket)
        .args(["--project", "p", "--requester", requester])
}

/// A running bridge, its stdin and stdout piped, killed if the test ends
/// before it exits.
pub struct Bridge {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: Lines<BufReader<ChildStdout>>,
}

impl Bridge {
    /// Spawns `command` (see [`bridge_command`]) with stdin and stdout
    /// piped; stderr is as the command says.
    pub fn spawn(command: &mut Command) -> Bridge {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Bridge {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
        }
    }

    /// Writes `bytes` to the bridge's stdin, as they are.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Writes `line` and its newline to the bridge's stdin.
    pub async fn send(&mut self, line: &str) {
        self.send_bytes(format!("{}\n", line).as_bytes()).await
    }

    /// The next line, or `None` at the end of stdout.
    pub async fn line(&mut self) -> Option<String> {
        within("a line from the bridge", self.stdout.next())
            .await
            .map(|line| line.unwrap())
    }

    /// The next line, parsed as JSON; fails the test at the end of stdout.
    pub async fn json(&mut self) -> serde_json::Value {
        let line = self.line().await.expect("a line before stdout ends");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {:?}", e, line))
    }

    /// Sends `line` and returns the next line.
    pub async fn round_trip(&mut self, line: &str) -> String {
        self.send(line).await;
        self.line().await.expect("a reply before EOF")
    }

    /// Closes stdin and waits for the bridge to exit; returns its exit code.
    pub async fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        self.exit_code().await
    }

    /// Waits for the bridge to exit; returns its exit code.
    pub async fn exit_code(&mut self) -> Option<i32> {
        within("the bridge to exit", self.child.status())
            .await
            .unwrap()
            .code()
    }

    /// Closes stdin, checks that nothing more comes on stdout, and returns
    /// the exit code and stderr (which the command must have piped).
    pub async fn finish_with_stderr(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let mut rest = Vec::new();
        while let Some(line) = within("stdout to end", self.stdout.next()).await {
            rest.push(line.unwrap());
        }
        assert!(
            rest.is_empty(),
            "nothing more expected on stdout: {:?}",
            rest
        );
        let out = within("the bridge to exit", self.child.output())
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
