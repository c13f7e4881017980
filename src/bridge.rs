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

use crate::cli::BridgeArgs;
use crate::endpoint::{self, ConnectError};
use crate::handshake::Handshake;
use crate::relay::{self, Ending, RelayError, Stage};
use crate::stdio;

/// After the CLI closes stdin, how long replies already on their way are
/// still relayed. The CLI has closed its side, so this only exists to deliver
/// a last in-flight reply; a second is ample for a local server and short
/// enough that a CLI waiting for us to exit never notices.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Why the bridge stopped with a failure (exit code 1).
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
            BridgeError::Stdio(e) => write!(f, "cannot use this process's stdio: {}", e),
            BridgeError::Connect(e) => e.fmt(f),
            BridgeError::Handshake { endpoint, source } => write!(
                f,
                "connected to '{}' but could not send the handshake: {}",
                endpoint.display(),
                source
            ),
            BridgeError::Relay(e) => {
                let what = match e.stage() {
                    Stage::ReadClient => "reading stdin",
                    Stage::WriteServer => "sending to the app",
                    Stage::ReadServer => "receiving from the app",
                    Stage::WriteClient => "writing stdout",
                };
                write!(f, "{} failed: {}", what, e.io_error())
            }
        }
    }
}

impl std::error::Error for BridgeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BridgeError::Stdio(e) => Some(e),
            BridgeError::Connect(e) => Some(e),
            BridgeError::Handshake { source, .. } => Some(source),
            BridgeError::Relay(e) => Some(e),
        }
    }
}

/// Runs the bridge on this process's stdin and stdout until the relay ends.
/// Blocks the calling thread; this is what `main` calls.
pub fn run(args: &BridgeArgs) -> Result<Ending, BridgeError> {
    let stdin = stdio::stdin().map_err(BridgeError::Stdio)?;
    let stdout = stdio::stdout().map_err(BridgeError::Stdio)?;
    smol::block_on(bridge(args, stdin, stdout))
}

/// Connects to `args.endpoint`, sends the handshake, and relays between the
/// given client streams and the connection. [`run`] calls it with the real
/// stdio; tests and embedders can pass anything else.
pub async fn bridge<R, W>(
    args: &BridgeArgs,
    client_in: R,
    client_out: W,
) -> Result<Ending, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (reader, mut writer) = endpoint::connect(&args.endpoint, args.connect_timeout)
        .await
        .map_err(BridgeError::Connect)?;
    let line = Handshake::new(args.project.as_str(), args.requester.as_str()).to_line();
    let sent = async {
        writer.write_all(&line).await?;
        writer.flush().await
    };
    sent.await.map_err(|source| BridgeError::Handshake {
        endpoint: args.endpoint.clone(),
        source,
    })?;
    relay::relay(client_in, client_out, reader, writer, DRAIN_GRACE)
        .await
        .map_err(BridgeError::Relay)
}
