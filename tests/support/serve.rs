//! `mcp-bridge serve` run by a test: the one `Serve` harness, its stdout
//! and stderr collected (or stderr left unread, or closed, for the tests of
//! serve's own stderr failing).

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rustix::process::{Pid, Signal};

use super::{until_with, BIN};

/// What becomes of serve's stderr.
#[derive(Clone, Copy, PartialEq)]
pub enum Stderr {
    /// Read continuously by the test, every byte kept.
    Collected,
    /// A pipe whose read end stays open and is never read.
    Unread,
    /// A pipe whose read end is closed at once: every write fails (EPIPE).
    Closed,
}

/// A running `mcp-bridge serve`; stopped (and its socket file removed)
/// on drop.
pub struct Serve {
    pub child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    /// The read end of an unread stderr, held open.
    _unread: Option<ChildStderr>,
    socket: PathBuf,
}

/// The program that runs serve: the binary, or with `fds` a shell that
/// sets the soft limit of open files (`ulimit -n`), then becomes it.
pub fn serve_program(fds: Option<u32>) -> Command {
    match fds {
        None => Command::new(BIN),
        Some(fds) => {
            let mut shell = Command::new("sh");
            shell
                .arg("-c")
                .arg(format!("ulimit -n {} && exec \"$0\" \"$@\"", fds))
                .arg(BIN);
            shell
        }
    }
}

/// Reads `pipe` to its end on a thread, into the returned buffer.
fn collect(mut pipe: impl Read + Send + 'static) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let sink = bytes.clone();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 64 * 1024];
        while let Ok(n @ 1..) = pipe.read(&mut chunk) {
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (bytes, reader)
}

impl Serve {
    /// `serve --endpoint socket <extra> -- <command>`, stderr collected;
    /// returns once serve says it is serving.
    pub fn start(socket: &Path, extra: &[&str], command: &[&str]) -> Serve {
        Serve::launch(
            serve_program(None),
            socket,
            extra,
            command,
            Stderr::Collected,
        )
    }

    /// [`Serve::start`] run by `program` (see [`serve_program`], with any
    /// environment the test sets on it) and its stderr as `stderr`
    /// says; returns once the socket file exists (and, stderr collected,
    /// serve said it is serving).
    pub fn launch(
        program: Command,
        socket: &Path,
        extra: &[&str],
        command: &[&str],
        stderr: Stderr,
    ) -> Serve {
        let endpoint = [OsStr::new("--endpoint"), socket.as_os_str()];
        Serve::launch_named(program, &endpoint, socket, extra, command, stderr)
    }

    /// [`Serve::launch`] with the endpoint as `endpoint` names it
    /// (`--endpoint <PATH>`, or `--app <NAME>`), `socket` the file that
    /// makes.
    pub fn launch_named(
        mut program: Command,
        endpoint: &[&OsStr],
        socket: &Path,
        extra: &[&str],
        command: &[&str],
        stderr: Stderr,
    ) -> Serve {
        let mut child = program
            .arg("serve")
            .args(endpoint)
            .args(extra)
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdout, stdout_reader) = collect(child.stdout.take().unwrap());
        let pipe = child.stderr.take().unwrap();
        let mut serve = Serve {
            child,
            stdout,
            stderr: Arc::new(Mutex::new(Vec::new())),
            readers: vec![stdout_reader],
            _unread: None,
            socket: socket.to_path_buf(),
        };
        match stderr {
            Stderr::Collected => {
                let (bytes, reader) = collect(pipe);
                serve.stderr = bytes;
                serve.readers.push(reader);
                serve.wait_for_log("serving");
            }
            Stderr::Unread => serve._unread = Some(pipe),
            Stderr::Closed => drop(pipe),
        }
        serve.wait_until("the socket file", || socket.exists());
        serve
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32).unwrap()
    }

    /// Everything serve wrote on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// The buffer serve's stderr is collected in, for a condition to
    /// look at while [`Serve::wait_until`] holds the `Serve`.
    pub fn stderr_buffer(&self) -> Arc<Mutex<Vec<u8>>> {
        self.stderr.clone()
    }

    /// Everything serve wrote on stdout so far.
    pub fn stdout(&self) -> Vec<u8> {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until `done` holds, failing if serve exits first (once all it
    /// wrote has been read) or after the hang guard.
    pub fn wait_until(&mut self, what: &str, mut done: impl FnMut() -> bool) {
        let stderr = self.stderr.clone();
        let log = move || String::from_utf8_lossy(&stderr.lock().unwrap()).into_owned();
        let child = &mut self.child;
        let readers = &mut self.readers;
        until_with(
            what,
            || {
                if done() {
                    return true;
                }
                if let Some(status) = child.try_wait().unwrap() {
                    for reader in readers.drain(..) {
                        reader.join().unwrap();
                    }
                    if done() {
                        return true;
                    }
                    panic!("serve exited ({}) waiting for {}:\n{}", status, what, log());
                }
                false
            },
            || format!("serve's stderr:\n{}", log()),
        );
    }

    /// Waits until serve's stderr contains `needle`.
    pub fn wait_for_log(&mut self, needle: &str) {
        self.wait_for_count(needle, 1)
    }

    /// Waits until serve's stderr contains `needle` at least `count` times.
    pub fn wait_for_count(&mut self, needle: &str, count: usize) {
        let stderr = self.stderr.clone();
        self.wait_until(
            &format!("{} x '{}' on serve's stderr", count, needle),
            || {
                String::from_utf8_lossy(&stderr.lock().unwrap())
                    .matches(needle)
                    .count()
                    >= count
            },
        );
    }

    /// Waits for serve to exit on its own, and for the last of its output.
    pub fn exit_status(&mut self) -> ExitStatus {
        let stderr = self.stderr.clone();
        let child = &mut self.child;
        let mut status = None;
        until_with(
            "serve to exit",
            || {
                status = child.try_wait().unwrap();
                status.is_some()
            },
            || {
                format!(
                    "serve's stderr:\n{}",
                    String::from_utf8_lossy(&stderr.lock().unwrap())
                )
            },
        );
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        status.unwrap()
    }

    /// Sends `signal` and waits for serve to exit.
    pub fn stop(&mut self, signal: Signal) -> ExitStatus {
        rustix::process::kill_process(self.pid(), signal).unwrap();
        self.exit_status()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SIGKILL, not a stop request: serve's graceful stop would wait
            // out the grace of any child that ignores it (a test that
            // checks the stop sends its own signal); serve's children end
            // at the end of their stdin.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = fs::remove_file(&self.socket);
    }
}
