//! `--no-reconnect`: the plain relay. Connect once (failing at once if
//! nothing listens), relay, end when either side does. Nothing is held,
//! recorded or answered by the bridge; the only thing learned from the
//! traffic is whether the app refused the client (closed before saying
//! anything, or after a refusal line only), so the exit says why.

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite};

use super::{BridgeError, Config, Connector, DynRead, DynWatch, DynWrite};
use crate::envelope::{Kind, Scanner};
use crate::relay::{self, Ending};
use crate::stdio::Hangups;
use crate::traffic_log::{Direction, TrafficLog};

pub(super) async fn run<R, W, C>(
    config: &Config,
    mut connector: C,
    stdin: R,
    stdout: W,
    hangups: Option<&Hangups>,
    log: Option<&TrafficLog>,
) -> Result<Ending, BridgeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    C: Connector,
{
    if let Some(log) = log {
        log.connect_attempt(1, &config.endpoint);
    }
    let started = crate::clock::now();
    let connected = connector.connect(false, config.connect_timeout).await;
    if let Some(log) = log {
        let outcome = connected.as_ref().map(drop);
        let outcome = outcome.map_err(|e| e as &(dyn std::error::Error + 'static));
        log.connect_outcome(
            1,
            crate::clock::now().saturating_duration_since(started),
            outcome,
        );
    }
    let super::Connected { reader, writer, .. } = connected?;
    let mut up_tap = log.map(|log| log.tap(Direction::CliToApp));
    let mut down_tap = log.map(|log| log.tap(Direction::AppToCli));
    let mut down = Scanner::new();
    let (mut heard, mut lines) = (0u64, 0u64);
    let mut refusal: Option<String> = None;
    let up = |chunk: &[u8]| {
        if let Some(tap) = up_tap.as_mut() {
            tap.feed(chunk);
        }
    };
    let down_watch = |chunk: &[u8]| {
        if let Some(tap) = down_tap.as_mut() {
            tap.feed(chunk);
        }
        heard += chunk.len() as u64;
        if lines > 0 {
            return;
        }
        down.feed(chunk, |envelope| {
            lines += 1;
            if lines == 1 && envelope.kind == Kind::ErrorResponse && envelope.id == Some(b"null") {
                let reason = envelope.error_message.unwrap_or("(no reason given)");
                refusal = Some(reason.to_string());
            }
        });
    };
    let (mut stdin, mut stdout, mut reader) = (stdin, stdout, reader);
    let (mut up, mut down_watch) = (up, down_watch);
    let relayed = super::boxed(relay::relay_watched(
        &mut stdin as &mut DynRead<'_>,
        &mut stdout as &mut DynWrite<'_>,
        &mut reader as &mut DynRead<'_>,
        Box::new(writer) as Box<DynWrite<'_>>,
        config.drain_grace,
        &mut up as &mut DynWatch<'_>,
        &mut down_watch as &mut DynWatch<'_>,
    ));
    let input_closed = super::input_closed_then_grace(hangups, config.drain_grace);
    let ending = future::or(relayed, input_closed)
        .await
        .map_err(BridgeError::Relay)?;
    if let Some(log) = log {
        match ending {
            Ending::ServerClosed => log.app_hung_up(),
            Ending::ClientClosed { .. } => log.stdin_eof(),
            Ending::ClientGone => log.event(format_args!("stdout's reader went away")),
        }
    }
    let endpoint = config.endpoint.clone();
    match ending {
        Ending::ServerClosed if heard == 0 => Err(BridgeError::Refused {
            endpoint,
            reason: None,
        }),
        Ending::ServerClosed if refusal.is_some() => Err(BridgeError::Refused {
            endpoint,
            reason: refusal,
        }),
        other => Ok(other),
    }
}
