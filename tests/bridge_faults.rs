//! Endings the bridge must reach whatever its peers do (issue: never hang,
//! never crash): a CLI that died while the app stopped reading, an app that
//! refuses us, an endpoint that is not a socket.
#![cfg(unix)]

mod support;

use std::process::Stdio;

use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use smol::process::{Child, Command};
use support::bridge_host::{Connection, Listener};
use support::{eventually, within, TempDir, BIN};

fn bridge(socket: &std::path::Path, stdin: Stdio) -> Command {
    let mut command = Command::new(BIN);
    command
        // The plain relay: its endings are under test here (the surviving
        // bridge's are in tests/survive.rs).
        .args(["mcp-server", "--no-reconnect", "--requester", "faults"])
        .arg("--endpoint")
        .arg(socket)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Waits until process `pid` sleeps in a pipe write: everything downstream
/// of it is full.
async fn blocked_in_pipe_write(pid: u32) {
    let wchan = format!("/proc/{}/wchan", pid);
    eventually(&format!("process {} to block in a pipe write", pid), || {
        std::fs::read_to_string(&wchan)
            .unwrap_or_default()
            .contains("pipe_write")
    })
    .await
}

/// The bridge's exit status and stderr, once it exits within the guard.
async fn exit_of(child: Child) -> (std::process::ExitStatus, String) {
    let out = within("exit of the bridge", child.output()).await.unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An app that accepted us and then stopped reading, and a CLI whose
/// writer died with 10 MB still to send: the relay is stuck writing to the
/// app and never reads stdin's end, yet the bridge must not live on. When
/// stdin's writers are gone, the drain grace starts anyway.
#[test]
fn a_dead_writer_ends_the_bridge_while_the_app_is_not_reading() {
    let dir = TempDir::new("faults-writer", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mut writer = std::process::Command::new("head")
            .args(["-c", "10485760", "/dev/zero"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = Stdio::from(writer.stdout.take().unwrap());
        let child = bridge(&dir.socket(), stdin).spawn().unwrap();
        let mut connection: Connection = within("connection", listener.accept()).await.unwrap();
        // The app reads 2 MiB, then stops reading. With 8 MiB still to come
        // and far less room in the pipe and the socket, the bridge is now
        // stuck writing to the app, and only then does the writer die.
        let mut taken = vec![0u8; 2 << 20];
        within(
            "2 MiB through the bridge",
            connection.reader.read_exact(&mut taken),
        )
        .await
        .unwrap();
        blocked_in_pipe_write(writer.id()).await;
        writer.kill().unwrap();
        writer.wait().unwrap();
        let (status, stderr) = exit_of(child).await;
        assert!(status.success(), "{}: {}", status, stderr);
    });
}

/// Nobody reads stdout any more (the CLI died) while stdin stays open and
/// the app sends nothing: nothing would ever be written to notice it by,
/// so the bridge must watch for it and end at once.
#[test]
fn a_gone_reader_of_stdout_ends_the_bridge_at_once() {
    let dir = TempDir::new("faults-reader", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mut child = bridge(&dir.socket(), Stdio::piped()).spawn().unwrap();
        let _connection = within("connection", listener.accept()).await.unwrap();
        drop(child.stdout.take());
        // stdin stays open: only the gone reader can end the bridge.
        let stdin = child.stdin.take();
        let status = within("exit of the bridge", child.status()).await.unwrap();
        drop(stdin);
        assert!(status.success(), "{}", status);
    });
}

/// An app that hangs up without a word refused us: that is a failure the
/// CLI must be able to see (exit 1, a line saying so), not a clean end.
#[test]
fn an_app_that_closes_before_answering_is_a_refusal() {
    let dir = TempDir::new("faults-silent", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mut child = bridge(&dir.socket(), Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take();
        drop(within("connection", listener.accept()).await.unwrap());
        let (status, stderr) = exit_of(child).await;
        drop(stdin);
        assert_eq!(status.code(), Some(1), "{}", stderr);
        assert!(
            stderr.contains("closed the connection before answering anything"),
            "{}",
            stderr
        );
    });
}

/// A refusal line (a JSON-RPC error with `"id":null`, as `serve` sends one)
/// is relayed untouched, and its message becomes the bridge's exit reason.
#[test]
fn a_refusal_line_is_relayed_and_reported() {
    let dir = TempDir::new("faults-refusal", 0o700);
    let refusal = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"too many connections\"}}\n";
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mut child = bridge(&dir.socket(), Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take();
        let mut connection = within("connection", listener.accept()).await.unwrap();
        connection
            .writer
            .write_all(refusal.as_bytes())
            .await
            .unwrap();
        drop(connection);
        let out = within("exit of the bridge", child.output()).await.unwrap();
        drop(stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}", stderr);
        assert!(
            stderr.contains("refused this client: too many connections"),
            "{}",
            stderr
        );
        assert_eq!(out.stdout, refusal.as_bytes(), "relayed byte for byte");
    });
}

/// An endpoint path that is something other than a socket is named for
/// what it is, not blamed on an app that "may have exited".
#[test]
fn an_endpoint_that_is_not_a_socket_says_what_it_is() {
    let dir = TempDir::new("faults-kind", 0o700);
    let file = dir.0.join("file");
    std::fs::write(&file, b"").unwrap();
    let fifo = dir.0.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for (path, what) in [
        (file, "it is a regular file, not a socket"),
        (dir.0.clone(), "it is a directory, not a socket"),
        (fifo, "it is a FIFO (named pipe), not a socket"),
    ] {
        smol::block_on(async {
            let child = bridge(&path, Stdio::null()).spawn().unwrap();
            let (status, stderr) = exit_of(child).await;
            assert_eq!(status.code(), Some(1), "{}", stderr);
            assert!(stderr.contains(what), "{}: {}", path.display(), stderr);
        });
    }
}

/// A CLI that closed the bridge's stderr (or a log collector that went
/// away): the failure line cannot be written, and that must not turn exit
/// code 1 into a crash (SIGABRT from a panic on `EPIPE`).
#[test]
fn a_closed_stderr_does_not_turn_a_failure_into_a_crash() {
    let dir = TempDir::new("faults-stderr", 0o700);
    smol::block_on(async {
        // A pipe whose only reader is gone before the bridge even starts.
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        drop(reader);
        let mut command = bridge(&dir.socket(), Stdio::null());
        let mut child = command.stderr(Stdio::from(writer)).spawn().unwrap();
        let status = within("exit of the bridge", child.status()).await.unwrap();
        assert_eq!(status.code(), Some(1), "{}", status);
    });
}
