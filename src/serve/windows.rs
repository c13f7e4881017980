//! Windows specifics of `serve`: its stop requests (Ctrl+C and
//! Ctrl+Break), finding its command, and how many connections its threads
//! allow.
//!
//! # Connections and threads
//!
//! On Windows every pipe and every child pipe is driven from `blocking`'s
//! pool (500 threads unless `BLOCKING_MAX_THREADS` says otherwise), and a
//! served connection pins up to five of them: see
//! `endpoint::serve_connections_allowed`, 90 with the default pool. A pool
//! run dry stalls every connection and accepting, so `--max-connections` is
//! held to that ([`fit_thread_pool`]), and serve refuses beyond it with its
//! refusal line, as on Unix.
//!
//! The command is a path if it contains a separator; otherwise it is looked
//! for where std's `Command` looks: beside our own executable, in the
//! system directories, and in each directory of `PATH`, as given and with
//! `.exe` added when it has no extension. The check errs on the side of
//! running: a name found in any of those places passes.
//!
//! Windows has no SIGINT or SIGTERM. Ctrl+C and Ctrl+Break reach a console
//! process through a handler the system calls on a thread of its own;
//! [`StopSignals`] registers one that hands the event to whoever waits in
//! [`StopSignals::next`], and lets the default handler (exit) run when
//! nobody does. Closing the console window, logging off and shutting down
//! are left to the default handler: the system ends the process anyway
//! within seconds, so no clean shutdown could be promised. A process ended
//! that way (or with `TerminateProcess`) runs no destructors, but its
//! children's stdin closes with it, which is their cue to exit.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use smol::channel::{self, Receiver, Sender};
use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, CTRL_C_EVENT};

/// Everyone waiting for Ctrl+C: one sender per live [`StopSignals`].
static STOP_WAITERS: Mutex<Vec<Sender<&'static str>>> = Mutex::new(Vec::new());

/// Whether [`console_ctrl`] is registered: once per process is enough.
static REGISTERED: Mutex<bool> = Mutex::new(false);

/// Ctrl+C and Ctrl+Break as stop requests.
pub(super) struct StopSignals(Receiver<&'static str>);

impl StopSignals {
    pub(super) fn new() -> io::Result<StopSignals> {
        let mut registered = lock(&REGISTERED);
        if !*registered {
            crate::ffi::windows::add_console_ctrl_handler(console_ctrl)?;
            *registered = true;
        }
        // Two presses before anyone looks are one request.
        let (sender, receiver) = channel::bounded(1);
        lock(&STOP_WAITERS).push(sender);
        Ok(StopSignals(receiver))
    }

    pub(super) async fn next(&mut self) -> &'static str {
        match self.0.recv().await {
            Ok(name) => name,
            // Never happens: the sender stays registered while we live.
            Err(_) => futures_lite::future::pending().await,
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // Closed now (not when the field drops, after this), so the retain
        // forgets our sender, along with any other that is gone.
        self.0.close();
        lock(&STOP_WAITERS).retain(|sender| !sender.is_closed());
    }
}

/// Called by the system, on a thread of its own, for each console control
/// event. Returns TRUE (handled) for Ctrl+C and Ctrl+Break while some
/// [`StopSignals`] waits for them; otherwise FALSE, so the default handler
/// ends the process as if we had never registered.
extern "system" fn console_ctrl(event: u32) -> i32 {
    let name = match event {
        CTRL_C_EVENT => "Ctrl+C",
        CTRL_BREAK_EVENT => "Ctrl+Break",
        _ => return 0,
    };
    let mut waiters = lock(&STOP_WAITERS);
    waiters.retain(|sender| !sender.is_closed());
    for sender in waiters.iter() {
        // Full: a request is already waiting to be seen.
        let _ = sender.try_send(name);
    }
    i32::from(!waiters.is_empty())
}

/// `config`, with its connection limit held to what the thread pool allows
/// (see the module docs), saying so on stderr when it lowers it.
pub(super) fn fit_thread_pool(config: &super::Config) -> super::Config {
    let allowed = crate::endpoint::serve_connections_allowed();
    let mut config = config.clone();
    if config.max_connections > allowed {
        super::log(
            None,
            format_args!(
                "at most {} connections on Windows, not {}: each holds up to five threads of a \
                 pool of {} (BLOCKING_MAX_THREADS)",
                allowed,
                config.max_connections,
                crate::endpoint::pool_threads()
            ),
        );
        config.max_connections = allowed;
    }
    config
}

/// Checks that `program` names a file, as a path or where std's `Command`
/// would look for it.
pub(super) fn find_command(program: &OsStr) -> io::Result<()> {
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the command is empty",
        ));
    }
    let as_path = Path::new(program);
    let has_separator = program
        .to_string_lossy()
        .chars()
        .any(|c| c == '/' || c == '\\' || c == ':');
    let mut names = vec![OsString::from(program)];
    if as_path.extension().is_none() {
        let mut exe = OsString::from(program);
        exe.push(".exe");
        names.push(exe);
    }
    let dirs: Vec<PathBuf> = if has_separator {
        vec![PathBuf::new()]
    } else {
        let mut dirs = Vec::new();
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
        {
            dirs.push(dir);
        }
        if let Some(root) = std::env::var_os("SystemRoot") {
            let root = PathBuf::from(root);
            dirs.push(root.join("System32"));
            dirs.push(root);
        }
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        dirs
    };
    let found = dirs
        .iter()
        .any(|dir| names.iter().any(|name| dir.join(name).is_file()));
    if found {
        Ok(())
    } else if has_separator {
        Err(io::Error::new(io::ErrorKind::NotFound, "no such file"))
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no file of that name beside mcp-bridge, in the system directories or on PATH",
        ))
    }
}

/// A poisoned lock only means a panic elsewhere; the data is still sound.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Nothing to raise: Windows has no per-process limit of open handles
/// that serve could reach first.
pub(super) fn raise_descriptor_limit() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The handler, called as the system would call it, wakes the waiter;
    /// without a waiter it declines, so Ctrl+C ends the process as usual.
    /// (Delivering a real Ctrl+C would reach every process on the test's
    /// console, and Wine runs the tests without one.)
    #[test]
    fn ctrl_c_reaches_the_waiter() {
        let mut signals = StopSignals::new().unwrap();
        assert_eq!(console_ctrl(CTRL_C_EVENT), 1);
        assert_eq!(console_ctrl(CTRL_C_EVENT), 1, "a second press is fine");
        let got = smol::block_on(futures_lite::future::or(
            async { Some(signals.next().await) },
            async {
                async_io::Timer::after(Duration::from_secs(5)).await;
                None
            },
        ));
        assert_eq!(got, Some("Ctrl+C"));
        assert_eq!(console_ctrl(2), 0, "closing the console is not handled");
        drop(signals);
        assert!(lock(&STOP_WAITERS).is_empty(), "forgotten on drop");
        assert_eq!(console_ctrl(CTRL_BREAK_EVENT), 0, "nobody waits any more");
    }
}
