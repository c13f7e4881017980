//! This process's stdin and stdout as async byte streams for the relay.
//!
//! The obvious choice, `smol::Unblock` around `std::io::stdin()`, costs a
//! thread hand-off per read and 8 MiB of buffering per direction. Where the
//! platform allows, the streams here are instead registered with async-io's
//! reactor directly, so a byte read from stdin is written to the socket on
//! the same thread in the same wake-up. The platform files say how that is
//! done without changing the file description our parent may share.

use std::io;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;

/// This process's standard input, for async reading.
#[derive(Debug)]
pub struct Stdin(platform::Input);

/// This process's standard output, for async writing. Writes are not
/// buffered: each one reaches the file descriptor before it completes.
#[derive(Debug)]
pub struct Stdout(platform::Output);

/// Opens standard input for async reading.
pub fn stdin() -> io::Result<Stdin> {
    platform::stdin().map(Stdin)
}

/// Opens standard output for async writing.
pub fn stdout() -> io::Result<Stdout> {
    platform::stdout().map(Stdout)
}

forward_async_read!(Stdin);
forward_async_write!(Stdout);
