//! Windows: console handles and anonymous pipes cannot be registered with a
//! reactor, so stdin and stdout are driven from `blocking`'s thread pool, one
//! relay buffer of capacity each (not `Unblock`'s 8 MiB default).
//!
//! These handles are synchronous, and Windows serializes all I/O on one
//! synchronous file object (see `endpoint/windows.rs`). That is harmless
//! here because stdin and stdout are different file objects: the usual
//! spawners (libuv in Node.js, Python's and Rust's `subprocess`/`Command`,
//! .NET's `Process`) create one pipe per stream, and a console has separate
//! input and output handles, so the read pending on stdin never holds up a
//! write to stdout. A parent that passed one duplex handle as both stdin and
//! stdout would see the relay stall on Windows; we know of none.
//!
//! Endings: a closed stdin pipe fails reads with `ERROR_BROKEN_PIPE`, which
//! std reports as end of file; a client that closed our stdout fails writes
//! with `ERROR_NO_DATA`, which std reports as `BrokenPipe`, the relay's
//! "client gone" (tested in `tests/windows.rs`). Both are also watched
//! without reading or writing ([`watch_hangups`]), for a relay stuck
//! writing to an app that stopped reading.

use std::fs::File;
use std::io;
use std::os::windows::io::{AsHandle, BorrowedHandle};
use std::time::Duration;

use windows_sys::Win32::Foundation::ERROR_BROKEN_PIPE;

use super::oneshot::Sender;
use smol::Unblock;

use crate::ffi::windows::{self as win, has_code, Event};
use crate::io::BUFFER_SIZE;

pub(super) type Input = Unblock<File>;
pub(super) type Output = Unblock<File>;

pub(super) fn stdin() -> io::Result<Input> {
    let handle = io::stdin().as_handle().try_clone_to_owned()?;
    Ok(Unblock::with_capacity(BUFFER_SIZE, File::from(handle)))
}

pub(super) fn stdout() -> io::Result<Output> {
    let handle = io::stdout().as_handle().try_clone_to_owned()?;
    Ok(Unblock::with_capacity(BUFFER_SIZE, File::from(handle)))
}

/// How often stdin's pipe is asked whether its writers have gone. There is
/// no event to wait for; the question costs one system call.
const INPUT_POLL: Duration = Duration::from_millis(100);

/// Watches, each on a thread of its own (not the pool's: they live as long
/// as the process):
///
/// - stdin, when it is a pipe: its writers are gone once the pipe reports
///   `FILE_PIPE_CLOSING_STATE` (Windows says so even with bytes still
///   unread), or, where the state is not told, `PeekNamedPipe` fails with
///   `ERROR_BROKEN_PIPE` (all read, and no writer left). Then
///   `input_closed` fires. A console or a file as stdin is not watched.
/// - our parent, the CLI that spawned us: once it has exited, nobody is left
///   to read our replies, and `output_gone` fires. It is found by id in the
///   system's process snapshot, and accepted only if it was created before
///   us: an id reused by a later process is not our parent. (Windows keeps
///   no handle from child to parent, so a parent that exited before we
///   looked is not found, and not watched.)
///
/// A question that fails drops its sender, so its event never fires.
///
/// stdin is a synchronous handle, and Windows serializes I/O on it: the
/// questions wait while the relay's read is pending. That is harmless: the
/// read completes when data comes or when the writers go (with
/// `ERROR_BROKEN_PIPE`), and the question is then answered; a relay stuck
/// writing to the app has no read pending, and that is when the answer
/// matters.
pub(super) fn watch_hangups(input_closed: Sender<()>, output_gone: Sender<()>) {
    if win::is_pipe(io::stdin().as_handle()) {
        let _ = std::thread::Builder::new()
            .name("stdin-hangup".into())
            .spawn(move || {
                let stdin = io::stdin();
                if writers_gone(stdin.as_handle(), INPUT_POLL) {
                    let _ = input_closed.try_send(());
                }
            });
    }
    if let Some(parent) = parent() {
        let _ = std::thread::Builder::new()
            .name("parent-exit".into())
            .spawn(move || {
                let never = match Event::new() {
                    Ok(event) => event,
                    Err(_) => return,
                };
                if let Ok(true) = parent.wait_exit(&never) {
                    let _ = output_gone.try_send(());
                }
            });
    }
}

/// Blocks until the pipe `handle` (a read end) has no writer left, asking
/// every `poll`; `false` if it cannot tell.
fn writers_gone(handle: BorrowedHandle<'_>, poll: Duration) -> bool {
    loop {
        match win::other_end_closed(handle) {
            Ok(Some(true)) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
        match win::bytes_waiting(handle) {
            Ok(_) => {}
            Err(e) if has_code(&e, ERROR_BROKEN_PIPE) => return true,
            Err(_) => return false,
        }
        std::thread::sleep(poll);
    }
}

/// Our parent process, opened, if it is still there (see [`watch_hangups`]).
fn parent() -> Option<win::Process> {
    let id = win::parent_process_id().ok()??;
    let parent = win::Process::open(id).ok()?;
    let born_before_us = parent.created().ok()? <= win::own_creation_time().ok()?;
    if born_before_us {
        Some(parent)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::{Command, Stdio};

    /// A real anonymous pipe whose writer, a child process, exits: the
    /// watch sees the writer gone though what it wrote is still unread.
    #[test]
    fn a_pipe_whose_writer_exited_is_seen_closed() {
        let mut child = Command::new("cmd")
            .args(["/c", "echo", "bye"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        assert!(win::is_pipe(stdout.as_handle()));
        child.wait().unwrap();
        assert!(win::bytes_waiting(stdout.as_handle()).unwrap() > 0);
        assert!(writers_gone(stdout.as_handle(), Duration::from_millis(1)));
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        assert!(text.contains("bye"), "{:?}", text);
    }

    /// While a writer lives the pipe is open, and our own process is not
    /// a pipe's writer that went away: the state question answers "open"
    /// or nothing, and the peek succeeds.
    #[test]
    fn a_pipe_with_a_live_writer_is_open() {
        let mut child = Command::new("cmd")
            .args(["/c", "more"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        assert_ne!(
            win::other_end_closed(stdout.as_handle()).unwrap(),
            Some(true)
        );
        assert_eq!(win::bytes_waiting(stdout.as_handle()).unwrap(), 0);
        drop(child.stdin.take());
        child.wait().unwrap();
    }
}
