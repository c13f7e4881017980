//! The settings of a [`Listener`](super::Listener), and their defaults:
//! what a peer is allowed while its handshake is read, and where the
//! listener's log lines go.

use std::time::Duration;

use super::LogSink;

/// Longest handshake line accepted, final `\n` included. A real one is well
/// under 1 KiB; the cap only stops a peer from filling our memory.
pub const HANDSHAKE_LIMIT: usize = 64 * 1024;

/// How long a peer has, from being accepted, to send its whole handshake
/// line. A bridge sends it at once after connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of a [`Listener`], for [`Listener::bind_with`]. New settings
/// are added as fields with a default, so build it from `default()`.
///
/// [`Listener`]: super::Listener
/// [`Listener::bind_with`]: super::Listener::bind_with
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long a peer has, from being accepted, to send its whole
    /// handshake line. Default: [`HANDSHAKE_TIMEOUT`].
    ///
    /// `Duration::ZERO` means no time limit, as does `Duration::MAX`: a
    /// silent peer is then only dropped when [`MAX_PENDING`] others are
    /// waiting behind it (it is the oldest) or when the listener is dropped.
    ///
    /// [`MAX_PENDING`]: super::MAX_PENDING
    pub handshake_timeout: Duration,
    /// Longest handshake line accepted, final `\n` included. Default:
    /// [`HANDSHAKE_LIMIT`].
    ///
    /// `usize::MAX` means no limit (a peer that never ends its line can
    /// then fill memory until the timeout); `0` refuses every handshake.
    pub handshake_limit: usize,
    /// Where the listener's log lines go (a peer refused or dropped, a
    /// stale socket replaced, accepting failing for a while). Default:
    /// stderr, [`LogSink::stderr`]; [`LogSink::to`] hands them to the app's
    /// own log instead.
    pub log: LogSink,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            handshake_limit: HANDSHAKE_LIMIT,
            log: LogSink::stderr(),
        }
    }
}
