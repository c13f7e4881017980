//! The checks themselves: a short MCP client session, step by step, each
//! step timed and bounded, stopping at the first failure.
//!
//! Failures are worded by the bridge's own error types ([`ConnectError`],
//! [`BridgeError`]) wherever the bridge would fail the same way, so the
//! report says what the bridge would say to a CLI.
//!
//! [`ConnectError`]: crate::endpoint::ConnectError

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use serde_json::{json, Value};

use super::paste::{self, Snippets};
use super::report::{Budget, Report, ServerInfo, Status, Step};
use super::{platform, Config, CLAUDE_CODE_BUDGET, CODEX_BUDGET};
use crate::bridge::{BridgeError, DRAIN_GRACE};
use crate::endpoint::{self, Reader, Writer};
use crate::relay::{RelayError, Stage};
use crate::wait;

/// The protocol version doctor asks for: the one current CLIs send.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Longest line accepted from the server. A tool list with long schemas
/// is a few hundred KiB; this only stops a broken server from filling
/// our memory.
const LINE_LIMIT: usize = 16 * 1024 * 1024;

/// Most pages of one list followed (`nextCursor`): a server whose cursor
/// never ends would otherwise keep doctor busy forever.
const PAGE_LIMIT: usize = 100;

/// Most names shown on a list's line of the text report (the JSON
/// document has them all).
const SHOWN_NAMES: usize = 20;

/// Most bytes of a bad line quoted in a warning.
const QUOTE_LIMIT: usize = 200;

/// A step failed; the report says which and why.
struct Stop;

pub(super) async fn check(config: &Config) -> Report {
    let mut report = Report {
        endpoint: config.endpoint.clone(),
        steps: Vec::new(),
        server: None,
        tools: None,
        prompts: None,
        resources: None,
        budgets: Vec::new(),
        snippets: snippets(config, None),
    };
    let _ = run(config, &mut report).await;
    let name = report.server.as_ref().map(|s| s.name.clone());
    report.snippets = snippets(config, name.as_deref());
    report
}

fn fail(report: &mut Report, step: Step) -> Stop {
    report.steps.push(step.failed());
    Stop
}

async fn run(config: &Config, report: &mut Report) -> Result<(), Stop> {
    let looked = Instant::now();
    let facts = platform::inspect(&config.endpoint);
    let mut endpoint_step = Step::new("endpoint", Some(looked.elapsed()), facts.detail);
    for warning in facts.warnings {
        endpoint_step = endpoint_step.warn(warning);
    }

    let started = Instant::now();
    let connected = endpoint::connect(&config.endpoint, config.timeout).await;
    let connect_time = started.elapsed();
    let (reader, writer) = match connected {
        Ok(halves) => halves,
        Err(e) => {
            let text = crate::error_chain(&BridgeError::Connect(e));
            if facts.usable {
                report.steps.push(endpoint_step);
                return Err(fail(report, Step::new("connect", Some(connect_time), text)));
            }
            endpoint_step.detail = text;
            return Err(fail(report, endpoint_step));
        }
    };
    report.steps.push(endpoint_step);
    report
        .steps
        .push(Step::new("connect", Some(connect_time), "connected".into()));

    let verifying = Instant::now();
    let verified = endpoint::verify_server(&config.endpoint, &reader, None);
    let step = |detail| Step::new("server user", Some(verifying.elapsed()), detail);
    let who = match endpoint::server_user(&reader) {
        Ok(user) => format!("served by {}", user),
        Err(_) => "served by a user that cannot be told".into(),
    };
    match verified {
        Ok(()) => report.steps.push(step(format!(
            "{}, which is you (or root): the bridge will talk to it",
            who
        ))),
        Err(e) => {
            return Err(fail(
                report,
                step(crate::error_chain(&BridgeError::Connect(e))),
            ))
        }
    }

    let mut session = Session {
        lines: BufReader::new(reader),
        writer,
        endpoint: &config.endpoint,
        timeout: config.timeout,
        next_id: 1,
        heard: false,
        warnings: Vec::new(),
    };
    let line = config.handshake.to_line();
    let sending = Instant::now();
    let sent = session.write(&line).await;
    let step = |detail| Step::new("handshake", Some(sending.elapsed()), detail);
    match sent {
        Ok(()) => report.steps.push(step(format!(
            "sent {}",
            String::from_utf8_lossy(&line).trim_end()
        ))),
        Err(source) => {
            let e = BridgeError::Handshake {
                endpoint: config.endpoint.clone(),
                source,
            };
            return Err(fail(report, step(crate::error_chain(&e))));
        }
    }

    let asking = Instant::now();
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mcp-bridge-doctor", "version": env!("CARGO_PKG_VERSION")},
    });
    let answer = session.request("initialize", params).await;
    let step = |detail| Step::new("initialize", Some(asking.elapsed()), detail);
    let result = match answer {
        Ok(result) => result,
        Err(text) => return Err(fail(report, session.warned(step(text)))),
    };
    let (info, problems) = server_info(&result);
    let mut step = session.warned(step(describe_server(&info)));
    for problem in problems {
        step = step.warn(problem);
    }
    report.steps.push(step);
    let capabilities = info.capabilities.clone();
    report.server = Some(info);

    let notifying = Instant::now();
    let sent = session
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let step = |detail| Step::new("initialized", Some(notifying.elapsed()), detail);
    match sent {
        Ok(()) => report
            .steps
            .push(step("notifications/initialized sent".into())),
        Err(text) => return Err(fail(report, step(text))),
    }

    let declared = |what: &str| capabilities.get(what).map_or(false, |v| !v.is_null());
    report.tools = session
        .list_if(report, declared("tools"), "tools/list", "tools", "tool")
        .await?;
    let startup = started.elapsed();
    report.prompts = session
        .list_if(
            report,
            declared("prompts"),
            "prompts/list",
            "prompts",
            "prompt",
        )
        .await?;
    report.resources = session
        .list_if(
            report,
            declared("resources"),
            "resources/list",
            "resources",
            "resource",
        )
        .await?;

    let closing = Instant::now();
    let closed = session.close().await;
    let step = Step::new("close", Some(closing.elapsed()), closed.detail.into());
    report.steps.push(match closed.warning {
        Some(warning) => step.warn(warning.into()),
        None => step,
    });

    budgets(report, startup)
}

/// Judges the start-up time (connect to tool list) against each CLI's
/// budget: the last step.
fn budgets(report: &mut Report, startup: Duration) -> Result<(), Stop> {
    let took = format!("{:.1} ms", startup.as_secs_f64() * 1e3);
    let mut step = Step::new(
        "start-up budget",
        None,
        format!(
            "{} from connecting to the tool list; Codex allows {:?}, Claude Code {:?}",
            took, CODEX_BUDGET, CLAUDE_CODE_BUDGET
        ),
    );
    let mut over = None;
    for (cli, limit) in [("Codex", CODEX_BUDGET), ("Claude Code", CLAUDE_CODE_BUDGET)] {
        let status = if startup > limit {
            over = over.or(Some((cli, limit)));
            Status::Failed
        } else if startup > limit / 2 {
            step = step.warn(format!(
                "{} is more than half of {}'s {:?}: a busy machine may not make it",
                took, cli, limit
            ));
            Status::Warning
        } else {
            Status::Passed
        };
        report.budgets.push(Budget {
            cli,
            limit,
            used: startup,
            status,
        });
    }
    match over {
        Some((cli, limit)) => {
            step.detail = format!(
                "{} from connecting to the tool list: more than {}'s {:?}, so it would give up on this server",
                took, cli, limit
            );
            Err(fail(report, step))
        }
        None => {
            report.steps.push(step);
            Ok(())
        }
    }
}

/// The configuration to paste: this executable, run as `mcp-server` with
/// the options the check used.
fn snippets(config: &Config, server_name: Option<&str>) -> Snippets {
    let command = std::env::current_exe()
        .map(|exe| exe.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "mcp-bridge".into());
    let mut args = vec![
        "mcp-server".to_string(),
        "--endpoint".to_string(),
        config.endpoint.to_string_lossy().into_owned(),
    ];
    for (flag, value) in [
        ("--project", &config.handshake.project),
        ("--requester", &config.handshake.requester),
    ] {
        if !value.is_empty() {
            args.push(flag.to_string());
            args.push(value.clone());
        }
    }
    Snippets::new(&paste::server_name(server_name), &command, args)
}

/// The facts of an `initialize` result, and what is wrong with it.
fn server_info(result: &Value) -> (ServerInfo, Vec<String>) {
    let mut problems = Vec::new();
    let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or("").to_string();
    let info = ServerInfo {
        protocol_version: text(result.get("protocolVersion")),
        name: text(result.pointer("/serverInfo/name")),
        version: text(result.pointer("/serverInfo/version")),
        capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
    };
    if info.protocol_version.is_empty() {
        problems.push("the result has no protocolVersion: CLIs refuse such a server".into());
    }
    if !info.capabilities.is_object() {
        problems.push("the result has no capabilities object".into());
    }
    if info.name.is_empty() {
        problems.push("the result has no serverInfo.name".into());
    }
    (info, problems)
}

fn describe_server(info: &ServerInfo) -> String {
    let capabilities: Vec<&str> = info
        .capabilities
        .as_object()
        .map_or_else(Vec::new, |c| c.keys().map(String::as_str).collect());
    format!(
        "protocol {}, server '{}' {}; capabilities: {}",
        info.protocol_version,
        info.name,
        info.version,
        if capabilities.is_empty() {
            "none".to_string()
        } else {
            capabilities.join(", ")
        }
    )
}

/// How the close went.
struct Closed {
    detail: &'static str,
    warning: Option<&'static str>,
}

/// The MCP client side of the connection.
struct Session<'a> {
    lines: BufReader<Reader>,
    writer: Writer,
    endpoint: &'a Path,
    timeout: Duration,
    next_id: u64,
    /// Any line has come from the app: a close after that is not a
    /// refusal.
    heard: bool,
    /// For the step in progress.
    warnings: Vec<String>,
}

impl Session<'_> {
    /// `step` with the warnings gathered while it ran.
    fn warned(&mut self, mut step: Step) -> Step {
        for warning in self.warnings.drain(..) {
            step = step.warn(warning);
        }
        step
    }

    async fn write(&mut self, line: &[u8]) -> io::Result<()> {
        self.writer.write_all(line).await?;
        self.writer.flush().await
    }

    /// Sends one message; an error is worded as the bridge would.
    async fn send(&mut self, message: &Value) -> Result<(), String> {
        self.write_line(message.to_string()).await
    }

    async fn write_line(&mut self, line: String) -> Result<(), String> {
        let mut line = line.into_bytes();
        line.push(b'\n');
        let written = self.write(&line).await;
        written.map_err(|source| relay_failure(Stage::WriteServer, source))
    }

    /// Sends a request and waits (at most the timeout) for its result.
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        // Laid out as CLIs write it, `jsonrpc` first (a `json!` map would
        // sort the keys), for whoever reads the app's log.
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":{},"params":{}}}"#,
            id,
            Value::from(method),
            params
        );
        if let Err(failed) = self.write_line(request).await {
            // An app that refused us may have said so, and closed, before
            // our request went out: what it said is the better diagnosis.
            return match wait::timeout(self.timeout, self.reply(id, method)).await {
                Some(Err(said)) if said.contains("refused this client") => Err(said),
                _ => Err(failed),
            };
        }
        let limit = self.timeout;
        match wait::timeout(limit, self.reply(id, method)).await {
            Some(reply) => reply,
            None => Err(format!(
                "no answer to {} within {:?}; the app is busy or hung",
                method, limit
            )),
        }
    }

    /// Reads until the reply to `id`, answering the server's own requests
    /// on the way as a client must.
    async fn reply(&mut self, id: u64, method: &str) -> Result<Value, String> {
        let id = Value::from(id);
        loop {
            let line = self.read_line().await?;
            let first = !self.heard;
            self.heard = true;
            let message: Value = match serde_json::from_slice(&line) {
                Ok(message) => message,
                Err(_) => {
                    self.warnings.push(format!(
                        "the app sent a line that is not JSON, which a CLI may take as a broken server: {}",
                        quote(&line)
                    ));
                    continue;
                }
            };
            if message.get("method").is_some() {
                self.answer(&message).await?;
                continue;
            }
            let their_id = message.get("id");
            if let Some(error) = message.get("error") {
                if first && their_id == Some(&Value::Null) {
                    let reason = error.get("message").and_then(Value::as_str);
                    return Err(self.refusal(Some(reason.unwrap_or("(no reason given)").into())));
                }
                if their_id == Some(&id) {
                    return Err(format!(
                        "the app answered {} with an error: {}",
                        method,
                        quote(error.to_string().as_bytes())
                    ));
                }
            }
            if their_id == Some(&id) {
                return match message.get("result") {
                    Some(result) => Ok(result.clone()),
                    None => Err(format!(
                        "the app's reply to {} has neither a result nor an error",
                        method
                    )),
                };
            }
            self.warnings.push(format!(
                "the app sent a reply to a request nobody made: {}",
                quote(&line)
            ));
        }
    }

    /// Answers a request from the server: `ping` as the protocol asks, the
    /// rest with "method not found" (doctor offers no client features).
    async fn answer(&mut self, message: &Value) -> Result<(), String> {
        let id = match message.get("id") {
            Some(id) => id.clone(),
            None => return Ok(()), // a notification
        };
        let reply = if message.get("method") == Some(&Value::from("ping")) {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}})
        };
        self.send(&reply).await
    }

    /// The next line from the app, `\n` included.
    async fn read_line(&mut self) -> Result<Vec<u8>, String> {
        let mut line = Vec::new();
        let read = (&mut self.lines)
            .take(LINE_LIMIT as u64)
            .read_until(b'\n', &mut line)
            .await;
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

    /// Lists every page of `method` when `declared`, as a step of its own
    /// named after the method; a skipped step and `None` otherwise.
    async fn list_if(
        &mut self,
        report: &mut Report,
        declared: bool,
        method: &'static str,
        member: &str,
        noun: &str,
    ) -> Result<Option<Vec<String>>, Stop> {
        if !declared {
            report.steps.push(Step::skipped(
                method,
                &format!("the server declares no {} capability", member),
            ));
            return Ok(None);
        }
        let listing = Instant::now();
        let listed = self.list(method, member).await;
        let step = Step::new(method, Some(listing.elapsed()), String::new());
        match listed {
            Ok(names) => {
                let mut step = step;
                step.detail = describe_names(&names, noun);
                let mut step = self.warned(step);
                if names.is_empty() && member == "tools" {
                    step = step.warn("the server declares tools but lists none".into());
                }
                report.steps.push(step);
                Ok(Some(names))
            }
            Err(text) => {
                let mut step = step;
                step.detail = text;
                let step = self.warned(step);
                Err(fail(report, step))
            }
        }
    }

    /// The names of every item of `method`'s list, page after page.
    async fn list(&mut self, method: &str, member: &str) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        let mut cursor = None;
        for _ in 0..PAGE_LIMIT {
            let params = match cursor.take() {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let result = self.request(method, params).await?;
            let items = match result.get(member).and_then(Value::as_array) {
                Some(items) => items,
                None => return Err(format!("the {} result has no '{}' array", method, member)),
            };
            for item in items {
                let name = item
                    .get("name")
                    .or_else(|| item.get("uri"))
                    .and_then(Value::as_str)
                    .unwrap_or("(unnamed)");
                names.push(name.to_string());
            }
            match result.get("nextCursor") {
                Some(next) if !next.is_null() => cursor = Some(next.clone()),
                _ => return Ok(names),
            }
        }
        self.warnings
            .push(format!("stopped after {} pages of {}", PAGE_LIMIT, method));
        Ok(names)
    }

    /// Half-closes the connection and waits (at most the bridge's drain
    /// grace) for the app to close its side, as the bridge does when its
    /// CLI closes stdin.
    async fn close(self) -> Closed {
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
        let _ = writer.close().await;
        let mut sink = futures_lite::io::sink();
        let drain = futures_lite::io::copy(&mut lines, &mut sink);
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
fn relay_failure(stage: Stage, source: io::Error) -> String {
    crate::error_chain(&BridgeError::Relay(RelayError { stage, source }))
}

/// `3 tools: a, b, c`, the names cut at [`SHOWN_NAMES`].
fn describe_names(names: &[String], noun: &str) -> String {
    let plural = if names.len() == 1 { "" } else { "s" };
    let mut text = format!("{} {}{}", names.len(), noun, plural);
    if !names.is_empty() {
        let shown: Vec<&str> = names.iter().take(SHOWN_NAMES).map(String::as_str).collect();
        text.push_str(": ");
        text.push_str(&shown.join(", "));
        if names.len() > SHOWN_NAMES {
            // Writing to a String cannot fail.
            let _ = write!(text, " and {} more", names.len() - SHOWN_NAMES);
        }
    }
    text
}

/// A line quoted in a message: lossy UTF-8, trimmed, cut at
/// [`QUOTE_LIMIT`] bytes.
fn quote(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(QUOTE_LIMIT)]);
    let mut text = text.trim_end().to_string();
    if line.len() > QUOTE_LIMIT {
        text.push('…');
    }
    text
}
