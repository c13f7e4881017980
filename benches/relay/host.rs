//! The echo host the benchmark's sessions connect to (the app's side of a
//! Unix socket), and the watchdog that kills a session that stalls.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::plan::KIB;

/// What the echo host does with one connection.
pub enum Behaviour {
    /// Echo everything; close as soon as the client's EOF arrives.
    Echo,
    /// Echo `n` bytes, then wait for the signal and hang up, sending the
    /// moment it did so back.
    HangUp {
        after: usize,
        go: mpsc::Receiver<()>,
        when: mpsc::Sender<Instant>,
    },
}

/// The app's side: a listening Unix socket in a private directory.
pub struct Host {
    dir: PathBuf,
    pub path: PathBuf,
    listener: UnixListener,
}

impl Host {
    pub fn new() -> io::Result<Host> {
        let dir = std::env::temp_dir().join(format!("mcp-bridge-bench-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let path = dir.join("host.sock");
        let listener = UnixListener::bind(&path)?;
        Ok(Host {
            dir,
            path,
            listener,
        })
    }

    /// Starts a thread that accepts the next connection and serves it.
    /// The bridge's handshake line is checked and consumed; socat sends
    /// none. Returns the bytes echoed.
    pub fn serve_one(
        &self,
        handshake: Option<Vec<u8>>,
        behaviour: Behaviour,
    ) -> io::Result<JoinHandle<io::Result<u64>>> {
        let listener = self.listener.try_clone()?;
        Ok(thread::spawn(move || {
            let (mut conn, _) = listener.accept()?;
            let mut buf = vec![0u8; 256 * KIB as usize];
            let mut have = 0;
            if let Some(expected) = handshake {
                // Read until the newline, keeping whatever follows it.
                let end = loop {
                    if let Some(i) = buf[..have].iter().position(|&b| b == b'\n') {
                        break i + 1;
                    }
                    let n = conn.read(&mut buf[have..])?;
                    if n == 0 {
                        return Err(broken("connection closed before the handshake"));
                    }
                    have += n;
                };
                if buf[..end] != expected[..] {
                    return Err(broken("wrong handshake line"));
                }
                buf.copy_within(end..have, 0);
                have -= end;
            }
            let mut echoed = 0u64;
            let limit = match behaviour {
                Behaviour::Echo => u64::MAX,
                Behaviour::HangUp { after, .. } => after as u64,
            };
            while echoed < limit {
                if have == 0 {
                    have = conn.read(&mut buf)?;
                    if have == 0 {
                        break;
                    }
                }
                conn.write_all(&buf[..have])?;
                echoed += have as u64;
                have = 0;
            }
            if let Behaviour::HangUp { go, when, .. } = behaviour {
                let _ = go.recv();
                let now = Instant::now();
                conn.shutdown(std::net::Shutdown::Both)?;
                drop(conn);
                let _ = when.send(now);
            }
            Ok(echoed)
        }))
    }

    /// Unblocks a `serve_one` thread whose client never connected.
    pub fn release(&self) {
        let _ = UnixStream::connect(&self.path);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

pub fn broken(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Other, what.to_string())
}

/// Kills the child if the session outlives the stall limit.
pub struct Watchdog {
    done: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    fired: Arc<AtomicBool>,
}

impl Watchdog {
    pub fn start(pid: Pid, limit: Duration) -> Watchdog {
        let (done, wait) = mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let thread = thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                flag.store(true, Ordering::SeqCst);
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        });
        Watchdog {
            done: Some(done),
            thread: Some(thread),
            fired,
        }
    }

    /// Disarms the watchdog; after this it can no longer kill (so the
    /// child may be reaped and its pid reused). Tells whether it fired.
    pub fn stop(&mut self) -> bool {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.fired.load(Ordering::SeqCst)
    }
}
