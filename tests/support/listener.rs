//! A recording listener: a Unix socket server that accepts, never answers,
//! and records every byte any client sends, run as any user.
//!
//! The listener is the calling test binary itself, re-run as a helper
//! ([`as_helper`]) so that one of its tests plays the listener (see
//! [`listener_role`]), so the suite needs
//! nothing cargo did not build: not socat, nor any other tool a fresh
//! machine lacks. A test binary rather than a helper program, because a
//! `[[bin]]` would ship in every install and an example is not built by
//! `cargo test --test NAME`.
//!
//! A test binary that uses it names one of its tests as the listener's
//! entry, whose first line is `if support::listener_role() { return; }`.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};

use super::{as_helper, foreign_command, wait_output, TempDir, HANG_GUARD, NOBODY};

/// Set (to the socket path) when a test binary runs as the recording
/// listener; see [`listener_role`].
const LISTEN_SOCKET: &str = "MCP_BRIDGE_TEST_LISTEN_SOCKET";
/// Set (to the record's path) when a test binary runs as the recording
/// listener.
const LISTEN_RECORD: &str = "MCP_BRIDGE_TEST_LISTEN_RECORD";

/// The listener's entry: when this process was started by
/// [`RecordingListener::start`], runs the listener (see [`listen`]) until
/// told to stop and returns true, and the calling test must then return at
/// once; otherwise returns false without doing anything.
pub fn listener_role() -> bool {
    let socket = match std::env::var_os(LISTEN_SOCKET) {
        Some(socket) => socket,
        None => return false,
    };
    let record = std::env::var_os(LISTEN_RECORD).expect(LISTEN_RECORD);
    listen(Path::new(&socket), Path::new(&record));
    true
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
pub struct RecordingListener {
    child: std::process::Child,
    record: PathBuf,
}

impl RecordingListener {
    /// Starts the listener at `socket` as `uid`, recording to `record`:
    /// this test binary re-run with only `test`, the test whose first line
    /// is the entry (see [`listener_role`]); from a copy in `dir` when
    /// `uid` is another user (see [`foreign_command`]). Returns once it is
    /// listening.
    pub fn start(
        test: &str,
        dir: &TempDir,
        uid: u32,
        socket: &Path,
        record: &Path,
    ) -> RecordingListener {
        let this = std::env::current_exe().unwrap();
        let mut command = if uid == rustix::process::geteuid().as_raw() {
            Command::new(this)
        } else {
            assert_eq!(uid, NOBODY, "support runs other users' programs as NOBODY");
            foreign_command(dir, &this)
        };
        let mut child = as_helper(&mut command, test)
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
                    "the recording listener ({}) exited before listening ({}): {}{}",
                    test,
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            if started.elapsed() > HANG_GUARD {
                let _ = child.kill();
                panic!(
                    "the recording listener ({}) never listened at {}",
                    test,
                    socket.display()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        RecordingListener {
            child,
            record: record.to_path_buf(),
        }
    }

    /// Tells the listener to stop once it has recorded every connection
    /// made so far.
    pub fn stop(&mut self) {
        drop(self.child.stdin.take());
    }

    /// Stops the listener and returns everything it received.
    pub fn received(mut self) -> String {
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
