//! Connecting to the app's local endpoint: a Unix domain socket path, or a
//! named pipe (`\\.\pipe\NAME`) on Windows.
//!
//! The platform code lives in `unix.rs` and `windows.rs`; this file is the one
//! interface the bridge sees, and the place where every failure becomes a
//! [`ConnectError`] that names the endpoint and says what to check.
//! Connecting is always bounded: errors that cannot heal (no such path,
//! nothing listening, access denied) fail at once, and only "busy, try again"
//! is retried, until the timeout.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_io::Timer;

use crate::wait;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(unix)]
pub(crate) use unix::MAX_PATH_BYTES;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use platform::PipeListener;
#[cfg(windows)]
use windows as platform;

/// How often a busy endpoint (a full listen backlog, every pipe instance in
/// use) is retried while the connect timeout has not run out.
const BUSY_RETRY: Duration = Duration::from_millis(10);

/// Connects to `endpoint`, giving up after `timeout`.
///
/// Returns the two halves of the connection: reading from the app and writing
/// to it. Closing the [`Writer`] tells the app that no more requests will come
/// (a half-close on Unix; see the Windows module for pipes).
pub async fn connect(endpoint: &Path, timeout: Duration) -> Result<(Reader, Writer), ConnectError> {
    let attempt = async {
        loop {
            match platform::connect(endpoint, timeout).await {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Timer::after(BUSY_RETRY).await,
                other => break other,
            };
        }
    };
    let connected = wait::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|| Err(io::ErrorKind::TimedOut.into()));
    match connected {
        Ok((reader, writer)) => Ok((Reader(reader), Writer(writer))),
        Err(source) => Err(ConnectError {
            endpoint: endpoint.to_path_buf(),
            timeout,
            source,
        }),
    }
}

/// Why [`connect`] failed. Its Display text names the endpoint and what
/// that means; `source()` is the OS error behind it.
#[derive(Debug)]
pub struct ConnectError {
    pub(crate) endpoint: PathBuf,
    pub(crate) timeout: Duration,
    pub(crate) source: io::Error,
}

impl ConnectError {
    /// The endpoint that could not be reached.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// The underlying OS error (`TimedOut` when the timeout ran out).
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.source.kind() {
            io::ErrorKind::TimedOut => {
                return write!(
                    f,
                    "cannot connect to '{}': no connection within {:?}; the app is busy or hung",
                    self.endpoint.display(),
                    self.timeout
                )
            }
            io::ErrorKind::NotFound => "it does not exist",
            io::ErrorKind::ConnectionRefused => {
                "nothing is listening there; the app may have exited and left the socket file behind"
            }
            io::ErrorKind::PermissionDenied => {
                "permission denied; the endpoint or a directory above it belongs to another user"
            }
            io::ErrorKind::InvalidInput => "the path is too long or otherwise not a valid endpoint",
            _ => "the endpoint could not be opened",
        };
        write!(
            f,
            "cannot connect to '{}': {}",
            self.endpoint.display(),
            what
        )
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.source.kind() {
            // Made up here, with nothing to add to the text above.
            io::ErrorKind::TimedOut => None,
            _ => Some(&self.source),
        }
    }
}

/// The reading half of a connection to the app.
#[derive(Debug)]
pub struct Reader(platform::Reader);

/// The writing half of a connection to the app.
#[derive(Debug)]
pub struct Writer(platform::Writer);

forward_async_read!(Reader);
forward_async_write!(Writer);
