//! Connecting to the app's local endpoint: a Unix domain socket path, or a
//! named pipe (`\\.\pipe\NAME`) on Windows.
//!
//! The platform code lives in `unix.rs` and `windows.rs`; this file is the one
//! interface the bridge sees, and the place where every failure becomes a
//! [`ConnectError`] that names the endpoint and says what to check.
//! Connecting is always bounded: errors that cannot heal (no such path,
//! nothing listening, access denied) fail at once, and only "busy, try again"
//! is retried, until the timeout. An endpoint may also be named by the app
//! instead of a path ([`for_app`], `app.rs`).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_io::Timer;

use crate::wait;

mod app;
pub use app::{for_app, AppNameError, MAX_APP_NAME};
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as platform;
#[cfg(unix)]
// The host's; on Linux it asks SO_PEERCRED itself, for the pid too.
#[cfg_attr(
    any(not(feature = "host"), target_os = "linux", target_os = "android"),
    allow(unused_imports)
)]
pub(crate) use unix::{peer_uid, MAX_PATH_BYTES};
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as platform;
/// The pipe connection, which the host's `PipeListener` hands out too.
#[cfg(windows)]
#[cfg_attr(not(feature = "host"), allow(unused_imports))] // the host's
pub(crate) use windows::{
    pipe_connections_allowed, pipe_halves, pipe_name, pool_threads, serve_connections_allowed,
    PipeReader, PipeWriter,
};

/// The host's half of [`for_app`]: makes the directories an app's
/// endpoint lives in, owner-only, and refuses ones that are not ours.
#[cfg(feature = "host")]
pub(crate) use platform::prepare_app_endpoint;

/// How often a busy endpoint (a full listen backlog, every pipe instance in
/// use) is retried while the connect timeout has not run out.
const BUSY_RETRY: Duration = Duration::from_millis(10);

/// Connects to `endpoint`, giving up after `timeout`.
///
/// Returns the two halves of the connection: reading from the app and writing
/// to it. Closing the [`Writer`] tells the app that no more requests will come
/// (a half-close on Unix; see the Windows module for pipes).
///
/// Only "busy" is retried (a full listen backlog, every pipe instance in
/// use); an endpoint that does not exist or refuses fails at once. To wait
/// for an app that is still starting, use [`connect_when_ready`].
pub async fn connect(endpoint: &Path, timeout: Duration) -> Result<(Reader, Writer), ConnectError> {
    connect_with(endpoint, timeout, false).await
}

/// Like [`connect`], but an endpoint that does not exist yet or refuses
/// connections (an app that is starting, or restarting and has left its
/// stale socket behind) is retried too, with a backoff from
/// [`FIRST_RETRY`] to [`LAST_RETRY`], until `timeout`. Faults that cannot
/// heal by waiting (permission denied, a path too long, a file that is not
/// a socket) still fail at once.
pub async fn connect_when_ready(
    endpoint: &Path,
    timeout: Duration,
) -> Result<(Reader, Writer), ConnectError> {
    connect_with(endpoint, timeout, true).await
}

/// The first pause before trying an absent or refusing endpoint again; it
/// doubles up to [`LAST_RETRY`]. Short, because an app mid-restart is
/// usually back within milliseconds.
pub const FIRST_RETRY: Duration = Duration::from_millis(10);

/// The longest pause between two tries of an absent or refusing endpoint:
/// the most an app that has just come up waits for us.
pub const LAST_RETRY: Duration = Duration::from_millis(250);

async fn connect_with(
    endpoint: &Path,
    timeout: Duration,
    wait_for_app: bool,
) -> Result<(Reader, Writer), ConnectError> {
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    let mut pause = FIRST_RETRY;
    let attempt = async {
        loop {
            let time_left = deadline.saturating_duration_since(Instant::now());
            match platform::connect(endpoint, time_left).await {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Timer::after(BUSY_RETRY).await;
                }
                Err(e) if wait_for_app && may_heal(endpoint, &e) => {
                    // Out of time: report what the endpoint still was (a
                    // pause of zero would be ready at once, and loop on).
                    let pause_now = pause.min(deadline.saturating_duration_since(Instant::now()));
                    if pause_now.is_zero() {
                        break Err(e);
                    }
                    last_error = Some(e);
                    Timer::after(pause_now).await;
                    pause = (pause * 2).min(LAST_RETRY);
                }
                other => break other,
            };
        }
    };
    let connected = wait::timeout(timeout, attempt).await;
    let connected = match connected {
        Some(result) => result,
        // Waited for the app: say what the endpoint still was at the end.
        None => Err(last_error
            .take()
            .unwrap_or_else(|| io::ErrorKind::TimedOut.into())),
    };
    match connected {
        Ok((reader, writer)) => Ok((Reader(reader), Writer(writer))),
        Err(source) => {
            let refused = source.kind() == io::ErrorKind::ConnectionRefused;
            let (fault, source) = match platform::not_a_socket(endpoint) {
                Some(what) if refused => (Fault::NotASocket(what), not_a_socket_error(source)),
                _ if wait_for_app && source.kind() != io::ErrorKind::TimedOut => {
                    (Fault::Waited, source)
                }
                _ => (Fault::Io, source),
            };
            Err(ConnectError {
                endpoint: endpoint.to_path_buf(),
                timeout,
                source,
                fault,
            })
        }
    }
}

/// The OS error for a path that is not a socket. Unix's `connect` says
/// "connection refused" there, as for a stale socket, which read beside "it
/// is a regular file, not a socket" contradicts it; `ENOTSOCK` ("socket
/// operation on non-socket") is the OS's own word for what it is.
fn not_a_socket_error(refused: io::Error) -> io::Error {
    #[cfg(unix)]
    {
        drop(refused);
        io::Error::from_raw_os_error(rustix::io::Errno::NOTSOCK.raw_os_error())
    }
    // (Never reached: only Unix paths are files of another kind.)
    #[cfg(not(unix))]
    refused
}

/// Whether waiting may cure `error`: the endpoint does not exist yet, or
/// nothing listens on it yet, and it is not a file of another kind.
fn may_heal(endpoint: &Path, error: &io::Error) -> bool {
    match error.kind() {
        io::ErrorKind::NotFound => true,
        io::ErrorKind::ConnectionRefused => platform::not_a_socket(endpoint).is_none(),
        _ => false,
    }
}

/// The user an app's endpoint may be served by, besides the defaults: a uid
/// on Unix (`"1000"`), a SID on Windows (`"S-1-5-18"`). Parse it with
/// `str::parse`; see [`verify_server`] for what is trusted without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUser(platform::Principal);

impl std::str::FromStr for ServerUser {
    type Err = String;

    fn from_str(text: &str) -> Result<ServerUser, String> {
        platform::parse_principal(text).map(ServerUser)
    }
}

impl fmt::Display for ServerUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&platform::describe(&self.0))
    }
}

/// An identity of the process serving the connection `reader` belongs to,
/// as the kernel tells it, for telling a new app instance from the one
/// that hung up: its pid, and on Unix the socket file's inode (an app that
/// binds again makes a new one). `None` where the platform cannot say.
pub fn instance(endpoint: &Path, reader: &Reader) -> Option<u64> {
    platform::instance(endpoint, &reader.0)
}

/// Who serves the connection `reader` belongs to, as the kernel tells it
/// (the listening process's uid on Unix, the pipe's owner SID on Windows).
pub fn server_user(reader: &Reader) -> io::Result<ServerUser> {
    platform::server_principal(&reader.0).map(ServerUser)
}

/// Checks who serves a connection before anything is sent on it: the
/// bridge is about to hand over the agent's identity and its whole MCP
/// traffic, and relay whatever comes back as tool results.
///
/// Trusted are: our own user, root on Unix (it can read our traffic
/// anyway), and `also` if given. Anyone else who got to the endpoint first
/// (a socket path in a directory others can write, a squatted Windows pipe
/// name) is refused with a [`ConnectError`] that names both users.
pub fn verify_server(
    endpoint: &Path,
    reader: &Reader,
    also: Option<&ServerUser>,
) -> Result<(), ConnectError> {
    verified_server(endpoint, reader, also).map(drop)
}

/// [`verify_server`], saying who serves when it is trusted (the bridge's
/// answers cache records whose answers it keeps).
pub(crate) fn verified_server(
    endpoint: &Path,
    reader: &Reader,
    also: Option<&ServerUser>,
) -> Result<ServerUser, ConnectError> {
    let refuse = |fault: Fault, source: io::Error| ConnectError {
        endpoint: endpoint.to_path_buf(),
        timeout: Duration::ZERO,
        source,
        fault,
    };
    let server =
        platform::server_principal(&reader.0).map_err(|e| refuse(Fault::Unidentified, e))?;
    let me = platform::own_principal().map_err(|e| refuse(Fault::Unidentified, e))?;
    if trusts(&server, &me, also) {
        // The name's owner is trusted; on Windows, the process serving our
        // instance must be too (see `windows.rs`, "Who serves the pipe").
        #[cfg(windows)]
        {
            let users: Vec<&platform::Principal> =
                std::iter::once(&me).chain(also.map(|u| &u.0)).collect();
            platform::check_instance(&reader.0, &users).map_err(|refusal| match refusal {
                platform::InstanceRefusal::Unknown(e) => refuse(Fault::Unidentified, e),
                platform::InstanceRefusal::Foreign { server, me } => refuse(
                    Fault::Untrusted { server, me },
                    io::ErrorKind::PermissionDenied.into(),
                ),
            })?;
        }
        return Ok(ServerUser(server));
    }
    Err(refuse(
        Fault::Untrusted {
            server: platform::describe(&server),
            me: platform::describe(&me),
        },
        io::ErrorKind::PermissionDenied.into(),
    ))
}

/// The trust rule of [`verify_server`]: `server` is trusted by `me` (by
/// default) or is `also`.
fn trusts(
    server: &platform::Principal,
    me: &platform::Principal,
    also: Option<&ServerUser>,
) -> bool {
    platform::trusted_by_default(server, me) || also.map_or(false, |u| u.0 == *server)
}

impl ServerUser {
    /// Whether a bridge trusting `also` besides the defaults would talk to
    /// a server run by this user now (the rule of [`verify_server`], less
    /// the per-connection checks). False when our own user cannot be told.
    pub(crate) fn trusted(&self, also: Option<&ServerUser>) -> bool {
        platform::own_principal().map_or(false, |me| trusts(&self.0, &me, also))
    }

    /// Its plain form, which `str::parse` reads back: the uid, the SID.
    pub(crate) fn plain(&self) -> String {
        self.0.to_string()
    }

    /// The user this process runs as (the session's tests serve as it).
    #[cfg(test)]
    pub(crate) fn own() -> io::Result<ServerUser> {
        platform::own_principal().map(ServerUser)
    }
}

/// Why [`connect`] or [`verify_server`] failed. Its Display text names the
/// endpoint and what that means; `source()` is the OS error behind it,
/// where there is one.
#[derive(Debug)]
pub struct ConnectError {
    pub(crate) endpoint: PathBuf,
    pub(crate) timeout: Duration,
    pub(crate) source: io::Error,
    pub(crate) fault: Fault,
}

/// What [`ConnectError`] says beyond its OS error.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The OS error says it all.
    Io,
    /// The OS error says it all, after waiting the whole timeout for the
    /// app to come up.
    Waited,
    /// The path refused the connection because it is this, not a socket.
    NotASocket(&'static str),
    /// Who serves the endpoint could not be told (the OS error says why).
    Unidentified,
    /// Served by another user.
    Untrusted { server: String, me: String },
}

impl ConnectError {
    /// The endpoint that could not be reached.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// The underlying OS error (`TimedOut` when the timeout ran out,
    /// `PermissionDenied` when the server's user is not trusted).
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }

    /// Whether the endpoint is served by a user the bridge does not trust.
    pub fn is_untrusted_server(&self) -> bool {
        matches!(self.fault, Fault::Untrusted { .. })
    }

    /// Whether waiting may cure it: nothing serves the endpoint yet (it
    /// does not exist, nothing listens, every instance is busy, or the
    /// connect timed out), as opposed to a fault that waiting cannot cure
    /// (permission denied, not a socket, a server of another user).
    pub fn may_heal(&self) -> bool {
        matches!(self.fault, Fault::Io | Fault::Waited)
            && matches!(
                self.source.kind(),
                io::ErrorKind::NotFound
                    | io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::WouldBlock
            )
    }
}

/// Why nothing answered at the endpoint, where the user can do something
/// about it ([`ConnectError::absence`]): the facts the binary turns into
/// its flag hints, which the message itself does not give (it also
/// reaches apps that call [`connect`], and MCP clients in the bridge's
/// JSON-RPC errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Absence {
    /// Nothing exists at the endpoint: the app is not running, or the
    /// endpoint is not the one the app serves.
    NoEndpoint,
    /// No connection within the timeout: the app is busy, hung, or slow
    /// to start.
    TimedOut,
}

impl ConnectError {
    /// Why nothing answered, where that is one of the [`Absence`]s (not
    /// for a refusal, a server of another user, or a path that is no
    /// socket).
    pub fn absence(&self) -> Option<Absence> {
        match (&self.fault, self.source.kind()) {
            (Fault::Io | Fault::Waited, io::ErrorKind::NotFound) => Some(Absence::NoEndpoint),
            (Fault::Io | Fault::Waited, io::ErrorKind::TimedOut) => Some(Absence::TimedOut),
            _ => None,
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoint = self.endpoint.display();
        let what = match &self.fault {
            Fault::Untrusted { server, me } => {
                return write!(
                    f,
                    "the endpoint '{}' is served by {}, not by you ({}): refusing to connect",
                    endpoint, server, me
                )
            }
            Fault::Unidentified => {
                return write!(
                    f,
                    "cannot tell who serves the endpoint '{}': refusing to connect",
                    endpoint
                )
            }
            Fault::NotASocket(what) => {
                return write!(f, "cannot connect to '{}': it is {}, not a socket", endpoint, what)
            }
            Fault::Io | Fault::Waited => match self.source.kind() {
                io::ErrorKind::TimedOut => {
                    return write!(
                        f,
                        "cannot connect to '{}': no connection within {}; the app is busy or hung",
                        endpoint,
                        Rounded(self.timeout)
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
            },
        };
        write!(f, "cannot connect to '{}': {}", endpoint, what)?;
        if let Fault::Waited = self.fault {
            write!(f, " (waited {} for the app)", Rounded(self.timeout))?;
        }
        Ok(())
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match (&self.fault, self.source.kind()) {
            // Made up here, with nothing to add to the text above.
            (Fault::Untrusted { .. }, _) | (_, io::ErrorKind::TimedOut) => None,
            _ => Some(&self.source),
        }
    }
}

/// A wait as a person reads it: `5s`, `2.9s`, `250ms` rather than the
/// `2.899912682s` of `Debug` (a reconnect waits what is left of a budget).
struct Rounded(Duration);

impl fmt::Display for Rounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whole numbers only (u64, no float): the bridge-only build has no
        // other use for float or u128 formatting, which costs kilobytes.
        let ms = (self.0.as_secs().saturating_mul(1000))
            .saturating_add(u64::from(self.0.subsec_millis()));
        if ms < 1000 {
            return write!(f, "{}ms", ms);
        }
        let tenths = ms.saturating_add(50) / 100;
        match tenths % 10 {
            0 => write!(f, "{}s", tenths / 10),
            tenth => write!(f, "{}.{}s", tenths / 10, tenth),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn error(fault: Fault, kind: io::ErrorKind, timeout: Duration) -> ConnectError {
        ConnectError {
            endpoint: PathBuf::from("/run/app.sock"),
            timeout,
            source: io::Error::new(kind, "the OS's words"),
            fault,
        }
    }

    /// A reconnect waits what is left of its budget; the message rounds it.
    #[test]
    fn waits_are_rounded_for_people() {
        let waited = |timeout| error(Fault::Waited, io::ErrorKind::NotFound, timeout).to_string();
        assert_eq!(
            waited(Duration::from_nanos(2_899_912_682)),
            "cannot connect to '/run/app.sock': it does not exist (waited 2.9s for the app)"
        );
        assert!(waited(Duration::from_secs(5)).ends_with("(waited 5s for the app)"));
        assert!(waited(Duration::from_millis(250)).ends_with("(waited 250ms for the app)"));
        assert!(waited(Duration::from_millis(9_960)).ends_with("(waited 10s for the app)"));
        let timed_out = error(
            Fault::Io,
            io::ErrorKind::TimedOut,
            Duration::from_nanos(1_500_000_001),
        );
        assert!(
            timed_out.to_string().contains("no connection within 1.5s;"),
            "{}",
            timed_out
        );
    }

    /// "It is a regular file, not a socket" comes with the OS's word for
    /// that, not with the "connection refused" `connect` said, which would
    /// read as "nothing listens there" and contradict it.
    #[cfg(unix)]
    #[test]
    fn not_a_socket_is_not_paired_with_connection_refused() {
        let dir = std::env::temp_dir().join(format!("mcpb-not-a-socket-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, b"").unwrap();
        for wait in [false, true] {
            let e = smol::block_on(connect_with(&file, Duration::from_secs(5), wait))
                .map(drop)
                .unwrap_err();
            let notsock = io::Error::from_raw_os_error(rustix::io::Errno::NOTSOCK.raw_os_error());
            assert_eq!(
                crate::error_chain(&e),
                format!(
                    "cannot connect to '{}': it is a regular file, not a socket: {}",
                    file.display(),
                    notsock
                )
            );
            assert!(!crate::error_chain(&e).contains("refused"), "{}", e);
            assert_eq!(e.absence(), None);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What was absent, only where the user can act on it (the binary's
    /// hints follow it).
    #[test]
    fn absences_are_told_only_where_they_help() {
        let absence = |fault, kind| error(fault, kind, Duration::from_secs(5)).absence();
        let none = Some(Absence::NoEndpoint);
        assert_eq!(absence(Fault::Io, io::ErrorKind::NotFound), none);
        assert_eq!(absence(Fault::Waited, io::ErrorKind::NotFound), none);
        assert_eq!(
            absence(Fault::Io, io::ErrorKind::TimedOut),
            Some(Absence::TimedOut)
        );
        assert_eq!(absence(Fault::Io, io::ErrorKind::PermissionDenied), None);
        assert_eq!(absence(Fault::Unidentified, io::ErrorKind::NotFound), None);
    }

    /// The message names the fault, never one of the binary's flags (the
    /// binary adds its hints, src/cli/hint.rs): it also reaches apps that
    /// call [`connect`] with no such options, and MCP clients in the
    /// bridge's JSON-RPC errors. Every fault, with every kind of OS error.
    #[test]
    fn messages_name_no_flag() {
        use io::ErrorKind::*;
        let faults = || {
            [
                Fault::Io,
                Fault::Waited,
                Fault::NotASocket("a regular file"),
                Fault::Unidentified,
                Fault::Untrusted {
                    server: "uid 1001".into(),
                    me: "uid 1000".into(),
                },
            ]
        };
        let kinds = [
            NotFound,
            TimedOut,
            ConnectionRefused,
            PermissionDenied,
            InvalidInput,
            WouldBlock,
            Other,
        ];
        for kind in kinds {
            for fault in faults() {
                let e = error(fault, kind, Duration::from_secs(5));
                let text = crate::error_chain(&e);
                assert!(!text.contains("--"), "{:?}: {}", e, text);
            }
        }
    }
}
