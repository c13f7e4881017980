//! Turning a bridge away with a reason its MCP CLI can show: the protocol's
//! refusal line (see [the module docs](crate::host#refusing-a-bridge)).

use std::io;
use std::time::Duration;

use futures_lite::io::AsyncWriteExt;
use serde_json::Value;

use super::Connection;
use crate::wait;

/// How long [`Connection::refuse`] may take to write its line. It fits in
/// any socket buffer, so only a peer that filled ours without reading
/// could hold it up.
const REFUSAL_WRITE_LIMIT: Duration = Duration::from_secs(1);

/// The JSON-RPC error code of the refusal line: the first of the range the
/// specification leaves to servers ("server error").
pub const REFUSAL_CODE: i64 = -32000;

impl Connection {
    /// Turns this bridge away with a reason its MCP CLI can show: writes the
    /// protocol's refusal line (see [the module docs](crate::host#refusing-a-bridge))
    /// and closes the connection. Takes at most a second, however the peer
    /// behaves.
    ///
    /// ```no_run
    /// # async fn f(listener: mcp_bridge::host::Listener) -> std::io::Result<()> {
    /// let connection = listener.accept().await?;
    /// connection.refuse("this app serves one agent at a time").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// If the line could not be written (the peer is gone, or did not take
    /// it in time); the connection is closed all the same.
    pub async fn refuse(self, reason: &str) -> io::Result<()> {
        let mut writer = self.writer;
        let line = refusal_line(reason);
        let sent = wait::timeout(REFUSAL_WRITE_LIMIT, async {
            writer.write_all(&line).await?;
            writer.close().await
        })
        .await;
        sent.unwrap_or_else(|| Err(io::ErrorKind::TimedOut.into()))
    }
}

/// The refusal line for `reason`, final `\n` included: a JSON-RPC error
/// response with a `null` id and [`REFUSAL_CODE`].
///
/// Written by hand, like the handshake, so the key order is fixed here.
pub(super) fn refusal_line(reason: &str) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":{},\"message\":{}}}}}\n",
        REFUSAL_CODE,
        Value::from(reason)
    )
    .into_bytes()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_line_is_one_json_rpc_error_with_a_null_id() {
        let line = refusal_line("busy \"now\"\n");
        assert_eq!(
            String::from_utf8(line.clone()).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\
             \"message\":\"busy \\\"now\\\"\\n\"}}\n"
        );
        let value: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["error"]["message"], "busy \"now\"\n");
    }
}
