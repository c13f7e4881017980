//! The bridge checks who serves the endpoint before it sends a byte
//! (issue: trust the app, not the path). The listener here runs as another
//! user and records everything it receives to a file: a refused bridge must
//! leave that file empty, not even a handshake in it.
//!
//! The listener is this very test binary, re-run in a listener role (see
//! [`the_recording_listener_records_every_byte_it_is_sent`]), so the suite
//! needs nothing cargo did not build: not socat, nor any other tool a fresh
//! machine lacks. A test binary rather than a helper program, because a
//! `[[bin]]` would ship in every install and an example is not built by
//! `cargo test --test trust`.
#![cfg(unix)]

mod support;

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};

use support::{foreign_command, is_root, TempDir, BIN, HANG_GUARD, NOBODY};

/// Set (to the socket path) when this binary runs as the recording
/// listener; see [`listen`].
const LISTEN_SOCKET: &str = "MCP_BRIDGE_TEST_LISTEN_SOCKET";
/// Set (to the record's path) when this binary runs as the recording
/// listener.
const LISTEN_RECORD: &str = "MCP_BRIDGE_TEST_LISTEN_RECORD";
/// The test that turns into the listener when [`LISTEN_SOCKET`] is set.
const LISTENER_TEST: &str = "the_recording_listener_records_every_byte_it_is_sent";

/// The child's output once it exits; killed (and the test failed) if it
/// has not exited within [`HANG_GUARD`]. `what` names it in the failure.
fn wait_output(mut child: Child, what: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("{} did not exit within {:?}", what, HANG_GUARD);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

/// The listener role: listens at `socket` (mode 0666, so anyone may
/// connect), creates `record` once it is listening (the sign that it is
/// ready), and appends to it every byte any client sends, one connection
/// after the other, each read to its end. Anything on stdin, or its end,
/// tells it to stop: it then also records the connections still queued
/// (a client that connected, wrote and left just before), so a record read
/// after the listener exits holds everything that was sent.
fn listen(socket: &Path, record: &Path) {
    let listener = UnixListener::bind(socket).unwrap();
    fs::set_permissions(socket, fs::Permissions::from_mode(0o666)).unwrap();
    let mut record = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(record)
        .unwrap();
    let stdin = io::stdin();
    loop {
        let mut ready = [
            PollFd::new(&listener, PollFlags::IN),
            PollFd::new(&stdin, PollFlags::IN),
        ];
        match poll(&mut ready, None) {
            Err(rustix::io::Errno::INTR) => continue,
            result => result.unwrap(),
        };
        let connecting = !ready[0].revents().is_empty();
        let stopping = !ready[1].revents().is_empty();
        if connecting {
            record_all(listener.accept().unwrap().0, &mut record);
        }
        if stopping {
            break;
        }
    }
    listener.set_nonblocking(true).unwrap();
    loop {
        match listener.accept() {
            Ok((connection, _)) => record_all(connection, &mut record),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => panic!("accept: {}", e),
        }
    }
}

/// Appends everything `connection` sends, up to its end, to `record`;
/// fails the listener if the client stays silent but connected for
/// [`HANG_GUARD`].
fn record_all(mut connection: UnixStream, record: &mut fs::File) {
    connection.set_nonblocking(false).unwrap();
    connection.set_read_timeout(Some(HANG_GUARD)).unwrap();
    io::copy(&mut connection, record).unwrap();
}

/// A running recording listener (see [`listen`]).
struct Listener {
    child: Child,
    record: PathBuf,
}

impl Listener {
    /// Starts the listener at `socket` as `uid` (from a copy of this binary
    /// in `dir` when that is another user, see [`foreign_command`]),
    /// recording to `record`. Returns once it is listening.
    fn start(dir: &TempDir, uid: u32, socket: &Path, record: &Path) -> Listener {
        let this = std::env::current_exe().unwrap();
        let mut command = if uid == rustix::process::geteuid().as_raw() {
            Command::new(this)
        } else {
            assert_eq!(uid, NOBODY, "support runs other users' programs as NOBODY");
            foreign_command(dir, &this)
        };
        let mut child = command
            .args(["--exact", LISTENER_TEST, "--nocapture", "--test-threads=1"])
            .env(LISTEN_SOCKET, socket)
            .env(LISTEN_RECORD, record)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !record.exists() {
            if child.try_wait().unwrap().is_some() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "the recording listener exited before listening ({}): {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            if started.elapsed() > HANG_GUARD {
                let _ = child.kill();
                panic!(
                    "the recording listener never listened at {}",
                    socket.display()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Listener {
            child,
            record: record.to_path_buf(),
        }
    }

    /// Tells the listener to stop once it has recorded every connection
    /// made so far.
    fn stop(&mut self) {
        drop(self.child.stdin.take());
    }

    /// Stops the listener and returns everything it received.
    fn received(mut self) -> String {
        self.stop();
        let out = wait_output(self.child, "the recording listener");
        assert!(
            out.status.success(),
            "the recording listener failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        fs::read_to_string(&self.record).unwrap()
    }
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
    let mut stdin = child.stdin.take().unwrap();
    // Refused bridges may be gone before this write: that is fine.
    let _ = stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
    drop(stdin);
    wait_output(child, "the bridge")
}

struct Setup {
    socket: PathBuf,
    listener: Listener,
    // Last: removed after the listener has stopped.
    _dir: TempDir,
}

impl Setup {
    fn new(tag: &str, uid: u32) -> Setup {
        // World-writable, like /tmp: anyone could have created the socket.
        let dir = TempDir::new(tag, 0o777);
        let socket = dir.socket();
        let listener = Listener::start(&dir, uid, &socket, &dir.0.join("received"));
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
/// by [`Listener::start`] with [`LISTEN_SOCKET`] set, it is that listener.
#[test]
fn the_recording_listener_records_every_byte_it_is_sent() {
    if let Some(socket) = std::env::var_os(LISTEN_SOCKET) {
        let record = std::env::var_os(LISTEN_RECORD).expect(LISTEN_RECORD);
        listen(Path::new(&socket), Path::new(&record));
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
