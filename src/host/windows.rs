//! Windows named pipes (`\\.\pipe\NAME`), served by
//! [`PipeListener`]: the same server code the bridge's own Windows tests
//! use, so there is one implementation to get right.
//!
//! # Who gets in
//!
//! Unix has two gates, the socket file's mode and the peer's uid. A pipe has
//! one, and it is the stronger kind: its DACL grants access to our own user
//! only (see [`PipeListener`]), and the system checks it when the peer opens
//! the pipe, before anything reaches us. So every peer accept sees is ours;
//! `PIPE_REJECT_REMOTE_CLIENTS` keeps other machines out as well.
//!
//! # Nothing to clean up, nothing stale
//!
//! A pipe exists while some handle to it is open, and vanishes with the
//! last one: a crashed app leaves nothing behind, and dropping the listener
//! frees the name for the next bind. Not at the very instant of the drop,
//! though: the waiting instance is closed by the pool thread that waits on
//! it, once the drop has stopped that wait, a moment later; a bind in that
//! moment fails. A live pipe of the same name makes `bind` fail with
//! `AddrInUse`.
//!
//! # Ctrl+C
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

use std::io;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use smol::channel::{self, Receiver, Sender};
use windows_sys::Win32::Foundation::{
    ERROR_COMMITMENT_LIMIT, ERROR_NONPAGED_SYSTEM_RESOURCES, ERROR_NOT_ENOUGH_MEMORY,
    ERROR_NOT_ENOUGH_QUOTA, ERROR_NO_SYSTEM_RESOURCES, ERROR_OUTOFMEMORY,
    ERROR_PAGED_SYSTEM_RESOURCES, ERROR_TOO_MANY_OPEN_FILES,
};
use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, CTRL_C_EVENT};

use super::Incoming;
use crate::endpoint::{self, PipeListener};

pub(super) type Reader = endpoint::Reader;
pub(super) type Writer = endpoint::Writer;

/// The pipe server, owned by the accept loop.
pub(super) struct Acceptor(PipeListener);

/// What must be released when the listener drops: nothing, since a pipe
/// goes away with its last handle.
#[derive(Debug)]
pub(super) struct SocketFile;

pub(super) fn bind(path: &Path) -> io::Result<(Acceptor, SocketFile)> {
    Ok((Acceptor(PipeListener::bind(path)?), SocketFile))
}

impl Acceptor {
    pub(super) async fn accept(&self) -> io::Result<Incoming> {
        match self.0.accept().await {
            Ok((reader, writer)) => Ok(Incoming::Peer(Box::new((reader, writer)))),
            Err(e) if is_transient(&e) => Ok(Incoming::Retry(e)),
            Err(e) => Err(e),
        }
    }
}

/// Accept errors that say nothing about the pipe itself: the system is out
/// of memory, handles or quota for the moment.
fn is_transient(e: &io::Error) -> bool {
    let transient = [
        ERROR_TOO_MANY_OPEN_FILES,
        ERROR_NOT_ENOUGH_MEMORY,
        ERROR_OUTOFMEMORY,
        ERROR_NO_SYSTEM_RESOURCES,
        ERROR_NONPAGED_SYSTEM_RESOURCES,
        ERROR_PAGED_SYSTEM_RESOURCES,
        ERROR_COMMITMENT_LIMIT,
        ERROR_NOT_ENOUGH_QUOTA,
    ];
    match e.raw_os_error() {
        Some(code) => transient.iter().any(|&t| t as i32 == code),
        None => false,
    }
}

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

/// A poisoned lock only means a panic elsewhere; the data is still sound.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn transient_errors() {
        let code = |c: u32| io::Error::from_raw_os_error(c as i32);
        assert!(is_transient(&code(ERROR_NO_SYSTEM_RESOURCES)));
        assert!(is_transient(&code(ERROR_TOO_MANY_OPEN_FILES)));
        assert!(!is_transient(&code(
            windows_sys::Win32::Foundation::ERROR_ACCESS_DENIED
        )));
        assert!(!is_transient(&io::Error::new(io::ErrorKind::Other, "x")));
    }

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
