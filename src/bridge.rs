//! `mcp-bridge mcp-server`: connect, identify, relay.
//!
//! This is the whole job an MCP CLI spawns us for, with no business logic:
//! the bridge never parses the JSON-RPC it carries. It connects to the app's
//! endpoint within a bounded time, writes the [`handshake`](crate::handshake)
//! line, and hands both byte streams to the [`relay`]. stdout
//! carries relayed bytes only, so every diagnostic is returned as a
//! [`BridgeError`] for the caller to print on stderr.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::endpoint::{self, ConnectError};
use crate::handshake::Handshake;
use crate::relay::{self, Ending, RelayError, Stage};
use crate::stdio;

/// How long the bridge waits for the app's endpoint unless told otherwise.
/// Long enough for an app that is still starting its listener, short enough
/// that a CLI showing "starting MCP server..." never hangs.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// After the CLI closes stdin, how long replies already on their way are
/// still relayed. The CLI has closed its side, so this only exists to deliver
/// a last in-flight reply; a second is ample for a local server and short
/// enough that a CLI waiting for us to exit never notices.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// What the bridge connects to, and how. Built by the binary from
/// `mcp-server`'s options, or by an embedder directly:
///
/// ```
/// use std::time::Duration;
/// let mut config = mcp_bridge::bridge::Config::new("/run/user/1000/app/mcp.sock");
/// config.handshake.project = "my-project".into();
/// config.handshake.requester = "agent-1".into();
/// config.connect_timeout = Duration::from_secs(2);
/// assert_eq!(config.drain_grace, mcp_bridge::bridge::DRAIN_GRACE);
/// ```
///
/// New options are added as fields with a default in [`Config::new`], so
/// the struct cannot be built literally outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Socket path (Unix) or pipe name (`\\.\pipe\NAME`, Windows) of the
    /// app's MCP server.
    pub endpoint: PathBuf,
    /// Who is calling, sent as the first line of the connection. Empty
    /// fields by default.
    pub handshake: Handshake,
    /// Upper bound on reaching the endpoint. Default:
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// How long replies are still relayed after stdin closes. Default:
    /// [`DRAIN_GRACE`].
    pub drain_grace: Duration,
}

impl Config {
    /// A configuration for `endpoint` with every other setting at its
    /// documented default.
    pub fn new(endpoint: impl Into<PathBuf>) -> Config {
        Config {
            endpoint: endpoint.into(),
            handshake: Handshake::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            drain_grace: DRAIN_GRACE,
        }
    }
}

/// Why the bridge stopped with a failure (exit code 1).
///
/// Like every error in this crate, its Display text describes this layer
/// and `source()` returns the cause, so print the whole chain (the binary
/// joins it with `": "`, see [`crate::error_chain`]).
#[derive(Debug)]
pub enum BridgeError {
    /// Opening this process's stdin or stdout failed.
    Stdio(io::Error),
    /// The endpoint could not be reached.
    Connect(ConnectError),
    /// The connection was made but the handshake line could not be sent.
    Handshake {
        /// The endpoint that was connected to.
        endpoint: PathBuf,
        /// The write error.
        source: io::Error,
    },
    /// Relaying failed with an I/O error that is not a normal hang-up.
    Relay(RelayError),
}

impl fmt::Display for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BridgeError::Stdio(_) => f.write_str("cannot use this process's stdio"),
            // Transparent: the connect error says it all.
            BridgeError::Connect(e) => e.fmt(f),
            BridgeError::Handshake { endpoint, .. } => write!(
                f,
                "connected to '{}' but could not send the handshake",
                endpoint.display(),
            ),
            BridgeError::Relay(e) => f.write_str(match e.stage() {
                Stage::ReadClient => "reading stdin failed",
                Stage::WriteServer => "sending to the app failed",
                Stage::ReadServer => "receiving from the app failed",
                Stage::WriteClient => "writing stdout failed",
            }),
        }
    }
}

impl std::error::Error for BridgeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BridgeError::Stdio(e) => Some(e),
            // Transparent: skip the layer whose text was already printed.
            BridgeError::Connect(e) => e.source(),
            BridgeError::Handshake { source, .. } => Some(source),
            BridgeError::Relay(e) => Some(e.io_error()),
        }
    }
}

/// Runs the bridge on this process's stdin and stdout until the relay ends.
/// Blocks the calling thread; this is what the binary's `mcp-server` calls.
pub fn run(config: &Config) -> Result<Ending, BridgeError> {
    let stdin = stdio::stdin().map_err(BridgeError::Stdio)?;
    let stdout = stdio::stdout().map_err(BridgeError::Stdio)?;
    smol::block_on(bridge(config, stdin, stdout))
}

/// Connects to `config.endpoint`, sends the handshake, and relays between
/// the given client streams and the connection. [`run`] calls it with the
/// real stdio; tests and embedders can pass anything else.
pub async fn bridge<R, W>(
    config: &Config,
    client_in: R,
    client_out: W,
) -> Result<Ending, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (reader, mut writer) = endpoint::connect(&config.endpoint, config.connect_timeout)
        .await
        .map_err(BridgeError::Connect)?;
    let line = config.handshake.to_line();
    let sent = async {
        writer.write_all(&line).await?;
        writer.flush().await
    };
    sent.await.map_err(|source| BridgeError::Handshake {
        endpoint: config.endpoint.clone(),
        source,
    })?;
    relay::relay(client_in, client_out, reader, writer, config.drain_grace)
        .await
        .map_err(BridgeError::Relay)
}
