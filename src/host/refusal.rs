//! Turning a bridge away with a reason its MCP CLI can show: the protocol's
//! refusal line (see [the module docs](crate::host#refusing-a-bridge)).

use std::io;
use std::time::Duration;

use futures_lite::io::AsyncWriteExt;

use super::Connection;
use crate::envelope::{self, ERROR_CODE};
use crate::wait;

/// How long [`Connection::refuse`] may take to write its line. It fits in
/// any socket buffer, so only a peer that filled ours without reading
/// could hold it up.
const REFUSAL_WRITE_LIMIT: Duration = Duration::from_secs(1);

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
/// response with a `null` id and [`ERROR_CODE`], written by the same
/// writer as the bridge's own error responses.
pub(super) fn refusal_line(reason: &str) -> Vec<u8> {
    envelope::error_response_line(b"null", ERROR_CODE, reason)
}

#[cfg(all(test, unix))]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_refusal_line_is_one_json_rpc_error_with_a_null_id() {
        let line = refusal_line("busy \"now\"\n");
        assert_eq!(
            String::from_utf8(line.clone()).unwrap(),
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":{},\
                 \"message\":\"busy \\\"now\\\"\\n\"}}}}\n",
                ERROR_CODE
            )
        );
        let value: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["error"]["message"], "busy \"now\"\n");
    }

    /// The crate's one JSON string writer, which the refusal line shares
    /// with the handshake and the bridge's errors, escapes exactly as
    /// `serde_json` does: every reason reads back the same, byte for byte.
    #[test]
    fn the_refusal_line_escapes_like_serde_json() {
        let mut reasons: Vec<String> = (0..0x80u8).map(|b| format!("a{}z", b as char)).collect();
        reasons.extend(["é \u{2028} 😀 \u{7f}".to_owned(), String::new()]);
        for reason in reasons {
            let line = refusal_line(&reason);
            let value: Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(value["error"]["message"], reason.as_str());
            let by_serde = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":{},\"message\":{}}}}}\n",
                ERROR_CODE,
                Value::from(reason.as_str())
            );
            assert_eq!(String::from_utf8(line).unwrap(), by_serde, "{:?}", reason);
        }
    }
}
