//! The bridge checks who serves the endpoint before it sends a byte
//! (issue: trust the app, not the path). The listener here runs as another
//! user and records everything it receives to a file: a refused bridge must
//! leave that file empty, not even a handshake in it.
//!
//! The listener is this very test binary, re-run in a listener role (see
//! `support::RecordingListener` and
//! [`the_recording_listener_records_every_byte_it_is_sent`]), so the suite
//! needs nothing cargo did not build: not socat, nor any other tool a fresh
//! machine lacks.
#![cfg(unix)]

mod support;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::{is_root, wait_output, RecordingListener, TempDir, BIN, NOBODY};

/// The test that is also the recording listener's entry (see
/// [`support::listener_role`]).
const LISTENER_TEST: &str = "the_recording_listener_records_every_byte_it_is_sent";

/// Runs the bridge against `socket` with one request on stdin, then EOF.
fn bridge(socket: &Path, extra: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(["mcp-server", "--project", "p", "--requester", "r"])
        .arg("--endpoint")
        .arg(socket)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Refused bridges may be gone before this write: that is fine.
    let _ = stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
    drop(stdin);
    wait_output(child, "the bridge")
}

struct Setup {
    socket: PathBuf,
    listener: RecordingListener,
    // Last: removed after the listener has stopped.
    _dir: TempDir,
}

impl Setup {
    fn new(tag: &str, uid: u32) -> Setup {
        // World-writable, like /tmp: anyone could have created the socket.
        let dir = TempDir::new(tag, 0o777);
        let socket = dir.socket();
        let listener =
            RecordingListener::start(LISTENER_TEST, &dir, uid, &socket, &dir.0.join("received"));
        Setup {
            socket,
            listener,
            _dir: dir,
        }
    }

    /// What the listener received, once it has finished.
    fn received(self) -> String {
        self.listener.received()
    }
}

/// Two roles. Run by the suite, it checks the recording listener the other
/// tests rely on, so that an empty record means nothing was sent, not a
/// listener that missed it: every byte of every connection is recorded, in
/// order, including connections still queued when it is told to stop. Run
/// by [`RecordingListener::start`], it is that listener.
#[test]
fn the_recording_listener_records_every_byte_it_is_sent() {
    if support::listener_role() {
        return;
    }
    let mut setup = Setup::new("trust-listener", rustix::process::geteuid().as_raw());
    let send = |line: &str| {
        let mut client = UnixStream::connect(&setup.socket).unwrap();
        client.write_all(line.as_bytes()).unwrap();
        client
    };
    // The first client stays connected until the listener is told to stop,
    // so the listener, busy with it, meets the stop with the next two still
    // queued: it takes the second in its loop, the third while stopping.
    let first = send("one\n");
    drop(send("two\n"));
    drop(send("three\n"));
    setup.listener.stop();
    drop(first);
    assert_eq!(setup.received(), "one\ntwo\nthree\n");
}

/// An endpoint another user got to first is refused before the handshake
/// or any of the agent's traffic leaves the bridge, with a message naming
/// both users.
#[test]
fn a_server_run_by_another_user_gets_nothing() {
    if !is_root() {
        eprintln!("skipped: needs root to run a listener as another user");
        return;
    }
    let setup = Setup::new("trust-foreign", NOBODY);
    let out = bridge(&setup.socket, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", stderr);
    let expected = format!(
        "mcp-bridge: the endpoint '{}' is served by uid {}, not by you (uid 0): refusing to connect",
        setup.socket.display(),
        NOBODY
    );
    assert!(stderr.contains(&expected), "{}", stderr);
    // The client is told too, in the protocol, under its request's id.
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["error"]["code"], -32000);
    let told = reply["error"]["message"].as_str().unwrap();
    let said = expected.trim_start_matches("mcp-bridge: ");
    assert!(told.starts_with(said), "{}", told);
    assert_eq!(reply["error"]["data"]["reason"], "untrusted_server");
    assert_eq!(
        setup.received(),
        "",
        "not a byte may reach a foreign server"
    );
}

/// The way out names exactly one user: that one is accepted, and gets the
/// handshake and the traffic; any other is still refused.
#[test]
fn trust_server_user_accepts_exactly_the_named_uid() {
    if !is_root() {
        eprintln!("skipped: needs root to run a listener as another user");
        return;
    }
    let named = NOBODY.to_string();
    let setup = Setup::new("trust-named", NOBODY);
    let out = bridge(&setup.socket, &["--trust-server-user", &named]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let received = setup.received();
    assert!(
        received.starts_with("{\"project\":\"p\",\"requester\":\"r\"}\n{\"jsonrpc\""),
        "{:?}",
        received
    );

    let other = (NOBODY - 1).to_string();
    let setup = Setup::new("trust-other", NOBODY);
    let out = bridge(&setup.socket, &["--trust-server-user", &other]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to connect"));
    assert_eq!(setup.received(), "");
}

/// A server run by our own user is accepted without any option.
#[test]
fn a_server_run_by_our_own_user_is_accepted() {
    let setup = Setup::new("trust-own", rustix::process::geteuid().as_raw());
    let out = bridge(&setup.socket, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(setup
        .received()
        .starts_with("{\"project\":\"p\",\"requester\":\"r\"}\n"));
}
