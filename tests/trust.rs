//! The bridge checks who serves the endpoint before it sends a byte
//! (issue: trust the app, not the path). The listener here is socat, run as
//! another user, recording everything it receives to a file: a refused
//! bridge must leave that file empty, not even a handshake in it.
#![cfg(unix)]

mod support;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{TempDir, BIN, HANG_GUARD, NOBODY};

/// The child's output once it exits; killed (and the test failed) if it
/// has not exited within [`HANG_GUARD`].
fn wait_output(mut child: Child) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("the bridge did not exit within {:?}", HANG_GUARD);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A recording listener at `socket`, run as `uid`: every byte a client
/// sends ends up in `record`. Returns once the socket exists.
fn recording_listener(uid: u32, socket: &Path, record: &Path) -> Child {
    let mut command = Command::new("socat");
    command
        .arg("-u")
        .arg(format!("UNIX-LISTEN:{},mode=666", socket.display()))
        .arg(format!("CREATE:{}", record.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if uid != rustix::process::geteuid().as_raw() {
        command.uid(uid).gid(uid);
    }
    let child = command
        .spawn()
        .expect("socat is needed for this test (.ci/run installs it: apt-get install socat)");
    let started = Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < HANG_GUARD,
            "socat never created {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

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
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    // Refused bridges may be gone before this write: that is fine.
    let _ = stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
    drop(stdin);
    wait_output(child)
}

struct Setup {
    _dir: TempDir,
    socket: PathBuf,
    record: PathBuf,
    listener: Child,
}

impl Setup {
    fn new(tag: &str, uid: u32) -> Setup {
        // World-writable, like /tmp: anyone could have created the socket.
        let dir = TempDir::new(tag, 0o777);
        let socket = dir.0.join("app.sock");
        let record = dir.0.join("received");
        let listener = recording_listener(uid, &socket, &record);
        Setup {
            _dir: dir,
            socket,
            record,
            listener,
        }
    }

    /// What the listener received, once it has finished.
    fn received(mut self) -> String {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        fs::read_to_string(&self.record).unwrap_or_default()
    }
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
    assert!(expected.ends_with(told), "{}", told);
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
