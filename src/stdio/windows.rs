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
//! "client gone" (tested in `tests/windows.rs`).

use std::fs::File;
use std::io;
use std::os::windows::io::AsHandle;

use super::oneshot::Sender;
use smol::Unblock;

use crate::relay::BUFFER_SIZE;

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

/// Not watched on Windows: anonymous pipes have no readiness to wait on
/// without reading or writing, so the senders are dropped and the events
/// never fire; the relay still sees both ends go when it next uses them.
pub(super) fn watch_hangups(_input_closed: Sender<()>, _output_gone: Sender<()>) {}
