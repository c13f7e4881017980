//! This process's stdin and stdout as async byte streams for the relay.
//!
//! The obvious choice, `smol::Unblock` around `std::io::stdin()`, costs a
//! thread hand-off per read and 8 MiB of buffering per direction. Where the
//! platform allows, the streams here are instead registered with async-io's
//! reactor directly, so a byte read from stdin is written to the socket on
//! the same thread in the same wake-up. The platform files say how that is
//! done without changing the file description our parent may share.

use std::io;

mod oneshot;
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

/// How the far ends of this process's stdio go away, noticed without
/// reading or writing them: see [`watch_hangups`].
#[derive(Debug)]
pub struct Hangups {
    input: oneshot::Receiver<()>,
    output: oneshot::Receiver<()>,
}

impl Hangups {
    /// Completes when every writer of stdin has gone, even if bytes they
    /// wrote are still waiting to be read. Never completes where this
    /// cannot be told (Windows, a terminal that stays open).
    pub async fn input_closed(&self) {
        fired(&self.input).await
    }

    /// Completes when stdout's reader has gone: nothing written from now
    /// on can be received. Never completes where this cannot be told.
    pub async fn output_gone(&self) {
        fired(&self.output).await
    }
}

async fn fired(event: &oneshot::Receiver<()>) {
    if event.recv().await.is_err() {
        // The watcher could not run: the event will never be seen.
        futures_lite::future::pending::<()>().await
    }
}

/// Starts watching the far ends of stdin and stdout.
///
/// Why watch at all: the relay notices a closed stdin only by reading it to
/// the end, and a gone stdout reader only by writing to it. While a write
/// to the app is blocked (an app that stopped reading) neither happens, and
/// a bridge whose CLI has died would live for ever. Watching costs one
/// thread blocked in `poll(2)` with no wake-ups until an end goes away.
pub fn watch_hangups() -> Hangups {
    let (input_closed, input) = oneshot::bounded(1);
    let (output_gone, output) = oneshot::bounded(1);
    platform::watch_hangups(input_closed, output_gone);
    Hangups { input, output }
}
