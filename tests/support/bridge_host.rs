//! An app's side of the endpoint, written in the test: a Unix socket that
//! reads each bridge's handshake line and hands over the rest of the
//! connection. The bridge's tests use it rather than the library's `host`
//! module so they run against the bridge-only build too
//! (`cargo test --no-default-features`), which has no `host`.

#![allow(dead_code)] // each test file uses its own part

use std::io;
use std::path::{Path, PathBuf};

use futures_lite::io::{AsyncBufReadExt, BufReader};
use mcp_bridge::handshake::Handshake;
use serde_json::Value;
use smol::net::unix::{UnixListener, UnixStream};

/// A socket listening at a path, removed again when dropped.
pub struct Listener {
    socket: UnixListener,
    path: PathBuf,
}

/// One bridge's connection, its handshake line already read.
pub struct Connection {
    /// Who the bridge said it is.
    pub handshake: Handshake,
    /// What the bridge relays after the handshake (bytes read along with
    /// the handshake line included).
    pub reader: BufReader<UnixStream>,
    /// Where the app's messages go.
    pub writer: UnixStream,
}

/// Whether the socket file at `path` has no listener behind it.
fn is_stale(path: &Path) -> bool {
    match std::os::unix::net::UnixStream::connect(path) {
        Err(e) => e.kind() == io::ErrorKind::ConnectionRefused,
        Ok(_) => false,
    }
}

impl Listener {
    /// Listens at `path`, replacing a stale socket file there (one whose
    /// listener is gone, as a SIGKILLed app leaves it), as the library's
    /// host does when an app restarts.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Listener> {
        let path = path.as_ref().to_path_buf();
        let socket = match UnixListener::bind(&path) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && is_stale(&path) => {
                std::fs::remove_file(&path)?;
                UnixListener::bind(&path)?
            }
            result => result?,
        };
        Ok(Listener { socket, path })
    }

    /// The next bridge that connects and sends a valid handshake line; a
    /// connection that does not is closed and skipped, as the library's
    /// host does.
    pub async fn accept(&self) -> io::Result<Connection> {
        loop {
            let (stream, _) = self.socket.accept().await?;
            let mut reader = BufReader::new(stream.clone());
            let mut line = String::new();
            if reader.read_line(&mut line).await.is_err() {
                continue;
            }
            if let Some(handshake) = parse(&line) {
                return Ok(Connection {
                    handshake,
                    reader,
                    writer: stream,
                });
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The handshake line as the library's host reads it: a JSON object with
/// string `project` and `requester`, and `resumed` only when `true`.
fn parse(line: &str) -> Option<Handshake> {
    let value: Value = serde_json::from_str(line.strip_suffix('\n')?).ok()?;
    let mut handshake = Handshake::new(value["project"].as_str()?, value["requester"].as_str()?);
    handshake.resumed = match value.get("resumed") {
        None => false,
        Some(resumed) => resumed.as_bool()?,
    };
    Some(handshake)
}
