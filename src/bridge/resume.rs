//! Taking the session back on a new app instance: the recorded session
//! ([`Record`]) replayed under ids of the bridge's own, the new instance's
//! replies to it read (and not forwarded), and what it declares noted so
//! the client can be told its lists may have changed.
//!
//! Whatever else the app sends meanwhile is kept, line by line, for the
//! client.

use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::ledger::Record;
use super::send;
use crate::envelope::json::{json_text, member};
use crate::envelope::{Kind, Scanner};
use crate::io::BUFFER_SIZE;

/// Most bytes the app may send while the session is replayed, other than
/// the replies the bridge waits for (they are passed on once the session is
/// resumed); an app that sends more is treated as broken.
const REPLAY_LINE_LIMIT: usize = 4 * 1024 * 1024;

/// What resuming the session on a new connection gave.
#[derive(Debug, Default)]
pub(super) struct Resumed {
    /// The lists the app's answer to the replayed `initialize` declares
    /// (in `result.capabilities`): tools, prompts, resources.
    pub(super) lists: [bool; 3],
    /// Bytes the app sent meanwhile, whole lines for the client, then the
    /// bytes after the last reply the bridge waited for.
    pub(super) forward: Vec<u8>,
    /// Whether there was a session to replay.
    pub(super) replayed: bool,
}

/// Why resuming on one connection failed, and whether another try can help.
#[derive(Debug)]
pub(super) struct ResumeFailure {
    pub(super) reason: String,
    /// The app answered, and said no: trying again will not change that.
    pub(super) rejected: bool,
}

impl ResumeFailure {
    fn io(reason: String) -> ResumeFailure {
        ResumeFailure {
            reason,
            rejected: false,
        }
    }
}

/// Replays the session on a new connection: the accepted `initialize` under
/// an id of the bridge's own, then `notifications/initialized`, the log
/// level and the subscriptions. The replies to the replayed requests are
/// the bridge's and are not forwarded; whatever else the app sends
/// meanwhile is kept, line by line, for the client.
pub(super) async fn resume(
    replay: &Record,
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
) -> Result<Resumed, ResumeFailure> {
    let mut resumed = Resumed::default();
    let initialize = match &replay.initialize {
        Some(initialize) => initialize,
        // Nothing to resume: the app never accepted a session.
        None => return Ok(resumed),
    };
    resumed.replayed = true;
    let mut lines = AppLines::default();
    let mut requests = vec![initialize];
    requests.extend(replay.set_level.iter());
    requests.extend(replay.subscribe.iter());
    let sending = |e: std::io::Error| {
        ResumeFailure::io(format!("sending the replayed session failed: {}", e))
    };
    for (n, request) in requests.into_iter().enumerate() {
        let id = format!("\"mcp-bridge-replay-{}\"", n + 1);
        send(writer, &request.with_id(id.as_bytes()))
            .await
            .map_err(sending)?;
        let reply = lines.reply_to(id.as_bytes(), reader).await?;
        if n > 0 {
            continue;
        }
        if reply.kind == Kind::ErrorResponse {
            let message = member(&reply.line, "error")
                .and_then(|error| member(error, "message"))
                .map_or_else(|| "(no message)".into(), json_text);
            return Err(ResumeFailure {
                reason: format!("the app rejected the replayed initialize: {}", message),
                rejected: true,
            });
        }
        let capabilities =
            member(&reply.line, "result").and_then(|result| member(result, "capabilities"));
        for (declared, list) in resumed
            .lists
            .iter_mut()
            .zip(["tools", "prompts", "resources"])
        {
            *declared = capabilities.and_then(|c| member(c, list)).is_some();
        }
        if let Some(initialized) = &replay.initialized {
            send(writer, &initialized.line).await.map_err(sending)?;
        }
    }
    resumed.forward = lines.forward;
    resumed.forward.extend_from_slice(&lines.unread);
    Ok(resumed)
}

/// Lines read from the app while the session is replayed.
#[derive(Default)]
struct AppLines {
    scanner: Scanner,
    /// The line being read.
    line: Vec<u8>,
    /// Whole lines for the client.
    forward: Vec<u8>,
    /// Bytes read but not looked at yet (after a reply the bridge waited for).
    unread: Vec<u8>,
}

/// The app's reply to a replayed request.
struct Reply {
    kind: Kind,
    line: Vec<u8>,
}

impl AppLines {
    /// Reads lines until the response with `id`, keeping every other line
    /// for the client.
    async fn reply_to(
        &mut self,
        id: &[u8],
        reader: &mut (impl AsyncRead + Unpin),
    ) -> Result<Reply, ResumeFailure> {
        let mut chunk = vec![0u8; BUFFER_SIZE];
        loop {
            if self.unread.is_empty() {
                let n = reader.read(&mut chunk).await.map_err(|e| {
                    ResumeFailure::io(format!(
                        "reading the app's reply to the replayed session failed: {}",
                        e
                    ))
                })?;
                if n == 0 {
                    return Err(ResumeFailure::io(
                        "the app closed the connection while the session was replayed".into(),
                    ));
                }
                self.unread.extend_from_slice(&chunk[..n]);
            }
            let unread = std::mem::take(&mut self.unread);
            let mut looked_at = 0;
            for segment in unread.split_inclusive(|&b| b == b'\n') {
                looked_at += segment.len();
                self.line.extend_from_slice(segment);
                if self.line.len() + self.forward.len() > REPLAY_LINE_LIMIT {
                    return Err(ResumeFailure::io(format!(
                        "the app sent more than {} MiB while the session was replayed",
                        REPLAY_LINE_LIMIT >> 20
                    )));
                }
                let mut verdict = None;
                self.scanner.feed(segment, |envelope| {
                    let ours = matches!(envelope.kind, Kind::Response | Kind::ErrorResponse)
                        && envelope.id == Some(id);
                    verdict = Some((ours, envelope.kind));
                });
                let (ours, kind) = match verdict {
                    None => continue,
                    Some(verdict) => verdict,
                };
                let line = std::mem::take(&mut self.line);
                if ours {
                    self.unread = unread[looked_at..].to_vec();
                    return Ok(Reply { kind, line });
                }
                self.forward.extend_from_slice(&line);
            }
        }
    }
}

/// `notifications/<list>/list_changed` for each list the new app instance
/// declares, so the client asks it what it offers.
pub(super) fn list_changed_notifications(resumed: &Resumed) -> Vec<u8> {
    let mut out = Vec::new();
    for (list, declared) in ["tools", "prompts", "resources"].iter().zip(resumed.lists) {
        if declared {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/");
            out.extend_from_slice(list.as_bytes());
            out.extend_from_slice(b"/list_changed\"}\n");
        }
    }
    out
}
