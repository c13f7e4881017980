//! The MCP client side of doctor's connection: requests and their
//! replies, within the time bound of the step in progress (every write and
//! every read of a step is held to its deadline, so a list's pages share
//! one bound and an app that stops reading cannot hold a write forever),
//! answering the app's own requests as a client must, and noting what the
//! app sends that a CLI would not like, a bounded number of times.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use serde_json::value::RawValue;
use serde_json::Value;

use super::platform;
use super::raw::{
    cut, for_each_element, item_name, members, nesting_depth, quote, text_member, NAME_BYTES,
};
use super::report::Listing;
use crate::bridge::{BridgeError, DRAIN_GRACE};
use crate::endpoint::{Reader, Writer};
use crate::relay::{RelayError, Stage};
use crate::traffic_log::{Direction, LineTap, TrafficLog};
use crate::wait;

/// Longest line accepted from the server. A tool list with long schemas
/// is a few hundred KiB; this only stops a broken server from filling
/// our memory.
const LINE_LIMIT: usize = 16 * 1024 * 1024;

/// Most pages of one list followed (`nextCursor`), within the step's
/// time bound.
const PAGE_LIMIT: usize = 100;

/// The deepest nesting of arrays and objects in a message that serde_json
/// reads with its default settings, which is how Rust clients (Codex CLI
/// among them) read every message: it refuses the 128th level. A deeper
/// list page fails to parse there, and such a CLI gets no list at all.
const DEEPEST_NESTING: usize = 127;

/// Most names of a list kept (for the JSON document); the rest are
/// counted. Far more tools than any CLI can offer a model.
const KEPT_NAMES: usize = 1000;

/// Most lines of one kind (not JSON, a reply nobody asked for, a wrong
/// `jsonrpc`) quoted in a step's warnings; the rest are counted.
const QUOTED_LINES: usize = 3;

/// One of the lists a CLI fetches at start-up.
pub(super) struct List {
    /// The request.
    pub(super) method: &'static str,
    /// The result's array.
    pub(super) member: &'static str,
    /// One item, for the report.
    pub(super) noun: &'static str,
}

/// `text`'s 64-bit FNV-1a hash: a few instructions, no table; at most
/// [`PAGE_LIMIT`] of them are compared, and a collision would only cost a
/// list a false "comes round again".
fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How the close went.
pub(super) struct Closed {
    pub(super) detail: &'static str,
    pub(super) warning: Option<&'static str>,
}

/// Why a write did not go out.
pub(super) enum Failure {
    Io(io::Error),
    TimedOut,
}

/// Lines of a kind worth a warning, which an app may send by the
/// million: each kind is quoted [`QUOTED_LINES`] times, then counted.
#[derive(Clone, Copy)]
enum Kind {
    NotJson,
    Unasked,
    Version,
}

impl Kind {
    /// The rest of "... and N more ...".
    fn plural(self) -> &'static str {
        match self {
            Kind::NotJson => "lines that are not JSON-RPC messages",
            Kind::Unasked => "replies to requests nobody made",
            Kind::Version => "messages without \"jsonrpc\":\"2.0\"",
        }
    }
}

/// The warnings of the step in progress.
#[derive(Default)]
pub(super) struct Noted {
    warnings: Vec<String>,
    /// Lines seen of each [`Kind`].
    counts: [usize; 3],
}

impl Noted {
    /// Notes a line of `kind`, quoting it (with `text`) only while few of
    /// its kind have been seen.
    fn line(&mut self, kind: Kind, text: impl FnOnce() -> String) {
        let count = &mut self.counts[kind as usize];
        *count += 1;
        if *count <= QUOTED_LINES {
            self.warnings.push(text());
        }
    }

    /// The step's warnings, counts of the lines not quoted included; the
    /// next step starts afresh.
    pub(super) fn drain(&mut self) -> Vec<String> {
        let mut warnings = std::mem::take(&mut self.warnings);
        for kind in [Kind::NotJson, Kind::Unasked, Kind::Version] {
            let count = std::mem::take(&mut self.counts[kind as usize]);
            if count > QUOTED_LINES {
                warnings.push(format!(
                    "and {} more {} (the first {} are quoted above)",
                    count - QUOTED_LINES,
                    kind.plural(),
                    QUOTED_LINES
                ));
            }
        }
        warnings
    }
}

/// The MCP client side of the connection.
pub(super) struct Session<'a> {
    lines: BufReader<Reader>,
    writer: Writer,
    endpoint: &'a Path,
    /// Each step's time bound, and when the one in progress runs out.
    limit: Duration,
    deadline: Instant,
    next_id: u64,
    /// Any line has come from the app: a close after that is not a
    /// refusal.
    heard: bool,
    pub(super) noted: Noted,
    /// The traffic log's taps, when there is a log.
    up: Option<LineTap>,
    down: Option<LineTap>,
}

impl<'a> Session<'a> {
    /// The client on a connection to `endpoint`, each step bounded by
    /// `limit`, its traffic appended to `log` if there is one.
    pub(super) fn new(
        reader: Reader,
        writer: Writer,
        endpoint: &'a Path,
        limit: Duration,
        log: Option<&TrafficLog>,
    ) -> Session<'a> {
        Session {
            lines: BufReader::new(reader),
            writer,
            endpoint,
            limit,
            deadline: Instant::now() + limit,
            next_id: 1,
            heard: false,
            noted: Noted::default(),
            up: log.map(|log| log.tap(Direction::CliToApp)),
            down: log.map(|log| log.tap(Direction::AppToCli)),
        }
    }

    /// Starts a step's time bound, for everything it sends and reads,
    /// from when the step `started`.
    pub(super) fn bound_from(&mut self, started: Instant) {
        self.deadline = started + self.limit;
    }

    /// What is left of the step's time.
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The failure of a write the app did not take in time.
    pub(super) fn stuck(&self, what: &str) -> String {
        format!(
            "sending {} did not finish within {:?}: the app is not reading what it is sent",
            what, self.limit
        )
    }

    /// Writes `bytes`, within what is left of the step's time. Not
    /// recorded in the traffic log's taps: the handshake, which is an
    /// event of its own there, goes out this way.
    pub(super) async fn send_bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        let left = self.left();
        let writer = &mut self.writer;
        let written = wait::timeout(left, async {
            writer.write_all(bytes).await?;
            writer.flush().await
        })
        .await;
        match written {
            Some(Ok(())) => Ok(()),
            Some(Err(source)) => Err(Failure::Io(source)),
            None => Err(Failure::TimedOut),
        }
    }

    /// Sends one line (`what` names it in a failure, which is worded as
    /// the bridge would).
    pub(super) async fn send_line(&mut self, line: &str, what: &str) -> Result<(), String> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        match self.send_bytes(&bytes).await {
            Ok(()) => {
                if let Some(tap) = &mut self.up {
                    tap.feed(&bytes);
                }
                Ok(())
            }
            Err(Failure::Io(source)) => Err(relay_failure(Stage::WriteServer, source)),
            Err(Failure::TimedOut) => Err(self.stuck(what)),
        }
    }

    /// Sends a request (`params` is JSON) and waits, within the step's
    /// time, for its result; `page` counts the requests of a list.
    pub(super) async fn request(
        &mut self,
        method: &str,
        params: &str,
        page: usize,
    ) -> Result<Box<RawValue>, String> {
        let id = self.next_id;
        self.next_id += 1;
        // Laid out as CLIs write it, `jsonrpc` first, for whoever reads the
        // app's log.
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":{},"params":{}}}"#,
            id,
            Value::from(method),
            params
        );
        let what = if page > 1 {
            format!("{} (page {})", method, page)
        } else {
            method.to_string()
        };
        if let Err(failed) = self.send_line(&request, &what).await {
            // An app that refused us may have said so, and closed, before
            // our request went out: what it said is the better diagnosis.
            let left = self.left();
            return match wait::timeout(left, self.reply(id, method)).await {
                Some(Err(said)) if said.contains("refused this client") => Err(said),
                _ => Err(failed),
            };
        }
        let left = self.left();
        match wait::timeout(left, self.reply(id, method)).await {
            Some(reply) => reply,
            None if page > 1 => Err(format!(
                "no answer to {} page {} within {:?}, the bound for the whole list; the app \
                 is busy or hung, or its list is too long",
                method, page, self.limit
            )),
            None => Err(format!(
                "no answer to {} within {:?}; the app is busy or hung",
                method, self.limit
            )),
        }
    }

    /// Reads until the reply to `id`, answering the server's own requests
    /// on the way as a client must.
    ///
    /// It yields to the executor after each line: an app that floods
    /// lines keeps every read ready, and a loop that never waits would
    /// never let the step's deadline fire.
    async fn reply(&mut self, id: u64, method: &str) -> Result<Box<RawValue>, String> {
        let id = Value::from(id);
        loop {
            futures_lite::future::yield_now().await;
            let line = self.read_line().await?;
            let first = !self.heard;
            self.heard = true;
            let text = std::str::from_utf8(&line).ok();
            let message = match text.and_then(members) {
                Some(message) => message,
                None => {
                    self.noted.line(Kind::NotJson, || {
                        format!(
                            "the app sent a line that is not a JSON-RPC message, which a CLI \
                             may take as a broken server: {}",
                            quote(&line)
                        )
                    });
                    continue;
                }
            };
            self.check_version(&message, &line);
            if message.contains_key("method") {
                self.answer(&message).await?;
                continue;
            }
            let ours = message.get("id").map_or(false, |raw| {
                raw.get().len() <= 32
                    && serde_json::from_str::<Value>(raw.get()).ok() == Some(id.clone())
            });
            if let Some(error) = message.get("error") {
                let null_id = message.get("id").map(|raw| raw.get()) == Some("null");
                if first && null_id {
                    let reason = members(error.get())
                        .map(|error| text_member(&error, "message"))
                        .filter(|reason| !reason.is_empty());
                    return Err(
                        self.refusal(Some(reason.unwrap_or_else(|| "(no reason given)".into())))
                    );
                }
                if ours {
                    return Err(format!(
                        "the app answered {} with an error: {}",
                        method,
                        quote(error.get().as_bytes())
                    ));
                }
            }
            if ours {
                return match message.get("result") {
                    Some(result) => Ok((*result).to_owned()),
                    None => Err(format!(
                        "the app's reply to {} has neither a result nor an error",
                        method
                    )),
                };
            }
            self.noted.line(Kind::Unasked, || {
                format!(
                    "the app sent a reply to a request nobody made: {}",
                    quote(&line)
                )
            });
        }
    }

    /// Flags a message whose `jsonrpc` is not `"2.0"`.
    fn check_version(&mut self, message: &BTreeMap<String, &RawValue>, line: &[u8]) {
        let found = match message.get("jsonrpc") {
            Some(raw) if raw.get() == r#""2.0""# => return,
            Some(raw) => format!("\"jsonrpc\":{}", cut(raw.get(), 40)),
            None => "no \"jsonrpc\" member".to_string(),
        };
        self.noted.line(Kind::Version, || {
            format!(
                "the app sent a message with {} where MCP requires \"jsonrpc\":\"2.0\"; \
                 clients that check it (the official MCP SDKs do) drop the message: {}",
                found,
                quote(line)
            )
        });
    }

    /// Answers a request from the server: `ping` as the protocol asks, the
    /// rest with "method not found" (doctor offers no client features).
    async fn answer(&mut self, message: &BTreeMap<String, &RawValue>) -> Result<(), String> {
        let id = match message.get("id") {
            Some(id) => id.get(),
            None => return Ok(()), // a notification
        };
        let reply = if message.get("method").map(|raw| raw.get()) == Some(r#""ping""#) {
            format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id)
        } else {
            format!(
                r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"method not found"}}}}"#,
                id
            )
        };
        self.send_line(&reply, "a reply to the app's request").await
    }

    /// The next line from the app, `\n` included.
    async fn read_line(&mut self) -> Result<Vec<u8>, String> {
        let mut line = Vec::new();
        let read = (&mut self.lines)
            .take(LINE_LIMIT as u64)
            .read_until(b'\n', &mut line)
            .await;
        if let Some(tap) = &mut self.down {
            tap.feed(&line);
        }
        match read {
            Err(source) => Err(relay_failure(Stage::ReadServer, source)),
            Ok(0) if !self.heard => Err(self.refusal(None)),
            Ok(0) => Err("the app closed the connection before answering".into()),
            Ok(n) if n == LINE_LIMIT && line.last() != Some(&b'\n') => Err(format!(
                "the app sent a line longer than {} MiB",
                LINE_LIMIT >> 20
            )),
            Ok(_) => Ok(line),
        }
    }

    /// The bridge's words for an app that turned the client away.
    fn refusal(&self, reason: Option<String>) -> String {
        crate::error_chain(&BridgeError::Refused {
            endpoint: self.endpoint.to_path_buf(),
            reason,
        })
    }

    /// Every page of a list, within the step's time.
    pub(super) async fn list(&mut self, list: &List) -> Result<Listing, String> {
        let mut listing = Listing {
            names: Vec::new(),
            count: 0,
            pages: 0,
            bytes: 0,
        };
        let mut cursor: Option<Box<RawValue>> = None;
        // Hashes of the cursors followed: a cursor given twice means a
        // list a CLI would page through for ever. Hashes, not the cursors,
        // which the app may make megabytes long.
        let mut followed: Vec<u64> = Vec::new();
        while listing.pages < PAGE_LIMIT {
            let params = match cursor.take() {
                Some(cursor) => format!(r#"{{"cursor":{}}}"#, cursor.get()),
                None => "{}".to_string(),
            };
            let result = self
                .request(list.method, &params, listing.pages + 1)
                .await?;
            listing.pages += 1;
            listing.bytes += result.get().len();
            // The result sits in the message object: one level more.
            let depth = nesting_depth(result.get()) + 1;
            if depth > DEEPEST_NESTING {
                return Err(format!(
                    "page {} of {} nests arrays and objects {} levels deep; serde_json, \
                     which Rust clients such as Codex CLI read messages with, refuses more \
                     than {}, so such a CLI cannot read this list",
                    listing.pages, list.method, depth, DEEPEST_NESTING
                ));
            }
            let page = members(result.get())
                .ok_or_else(|| format!("the {} result is not an object", list.method))?;
            let names = &mut listing.names;
            let count = &mut listing.count;
            let array = page.get(list.member).map_or("", |raw| raw.get());
            let is_array = for_each_element(array, |item| {
                *count += 1;
                if names.len() < KEPT_NAMES {
                    names.push(item_name(item));
                }
            });
            if !is_array {
                return Err(format!(
                    "the {} result has no '{}' array",
                    list.method, list.member
                ));
            }
            match page.get("nextCursor") {
                Some(next) if next.get() != "null" => {
                    let next_hash = hash(next.get());
                    if followed.contains(&next_hash) {
                        return Err(format!(
                            "page {} of {} gives a nextCursor an earlier page gave ({}): \
                             a CLI following it would ask for the same pages for ever",
                            listing.pages,
                            list.method,
                            cut(next.get(), NAME_BYTES)
                        ));
                    }
                    followed.push(next_hash);
                    cursor = Some((*next).to_owned());
                }
                _ => return Ok(listing),
            }
        }
        self.noted.warnings.push(format!(
            "stopped after {} pages of {}",
            PAGE_LIMIT, list.method
        ));
        Ok(listing)
    }

    /// Half-closes the connection and waits (at most the bridge's drain
    /// grace) for the app to close its side, as the bridge does when its
    /// CLI closes stdin.
    pub(super) async fn close(self) -> Closed {
        let Session {
            mut lines,
            mut writer,
            ..
        } = self;
        if !platform::HALF_CLOSE {
            return Closed {
                detail: "closed (a named pipe has no half-close)",
                warning: None,
            };
        }
        let drain = async {
            let _ = writer.close().await;
            let mut sink = futures_lite::io::sink();
            futures_lite::io::copy(&mut lines, &mut sink).await
        };
        match wait::timeout(DRAIN_GRACE, drain).await {
            Some(_) => Closed {
                detail: "half-closed; the app closed its side",
                warning: None,
            },
            None => Closed {
                detail: "half-closed; the app kept its side open",
                warning: Some(
                    "the app did not close the connection within 1 s of reading EOF; \
                     the bridge waits that long at every exit (an app should close \
                     when it reads EOF)",
                ),
            },
        }
    }
}

/// The bridge's words for an I/O error on the connection.
pub(super) fn relay_failure(stage: Stage, source: io::Error) -> String {
    crate::error_chain(&BridgeError::Relay(RelayError { stage, source }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_lines_are_quoted_a_few_times_then_counted() {
        let mut noted = Noted::default();
        for i in 0..1000 {
            noted.line(Kind::NotJson, || format!("line {}", i));
        }
        noted.line(Kind::Version, || "version".into());
        let warnings = noted.drain();
        assert_eq!(
            warnings,
            [
                "line 0",
                "line 1",
                "line 2",
                "version",
                "and 997 more lines that are not JSON-RPC messages (the first 3 are quoted above)"
            ]
        );
        assert!(noted.drain().is_empty());
    }

    /// The limit is serde_json's own: it reads a message nested
    /// [`DEEPEST_NESTING`] levels deep, and refuses one level more.
    #[test]
    fn the_deepest_nesting_is_serde_json_s() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let parse = |text: &str| serde_json::from_str::<Value>(text).is_ok();
        assert!(parse(&nested(DEEPEST_NESTING)));
        assert!(!parse(&nested(DEEPEST_NESTING + 1)));
        assert_eq!(nesting_depth(&nested(DEEPEST_NESTING)), DEEPEST_NESTING);
    }
}
