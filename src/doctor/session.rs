//! The checks themselves: a short MCP client session, step by step, each
//! step timed and bounded, stopping at the first failure.
//!
//! One function per step; what they share is here once: a step's clock
//! ([`Clock`]), its time bound (the session's deadline, which every write
//! and every read of the step is held to, so a list's pages share one
//! bound and an app that stops reading cannot hold a write forever), and
//! how a step ends ([`Checker::pass`], [`Checker::fail`]).
//!
//! Failures are worded by the bridge's own error types ([`ConnectError`],
//! [`BridgeError`]) wherever the bridge would fail the same way, so the
//! report says what the bridge would say to a CLI.
//!
//! What the app sends is read without decoding it into a tree: a message's
//! members, a result's list and each item are borrowed slices of the line
//! (`serde_json`'s `RawValue`), so a 15 MiB page costs the line, not a
//! gigabyte of maps, and only bounded pieces of it are kept.
//!
//! [`ConnectError`]: crate::endpoint::ConnectError

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::paste::{self, Snippets};
use super::report::{Budget, Ignored, Listing, Report, ServerInfo, Status, Step};
use super::{platform, Config, CLAUDE_CODE_BUDGET, CODEX_BUDGET};
use crate::bridge::{BridgeError, DRAIN_GRACE};
use crate::endpoint::{self, Reader, Writer};
use crate::relay::{RelayError, Stage};
use crate::traffic_log::{Direction, LineTap, LogOptions, TrafficLog};
use crate::wait;

/// The protocol version doctor asks for: the one current CLIs send.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Longest line accepted from the server. A tool list with long schemas
/// is a few hundred KiB; this only stops a broken server from filling
/// our memory.
const LINE_LIMIT: usize = 16 * 1024 * 1024;

/// Most pages of one list followed (`nextCursor`), within the step's
/// time bound.
const PAGE_LIMIT: usize = 100;

/// Most names shown on a list's line of the text report.
const SHOWN_NAMES: usize = 20;

/// Most names of a list kept (for the JSON document); the rest are
/// counted. Far more tools than any CLI can offer a model.
const KEPT_NAMES: usize = 1000;

/// Most bytes of one name (or server name, version, capability) kept.
const NAME_BYTES: usize = 200;

/// Most bytes of a bad line quoted in a warning.
const QUOTE_LIMIT: usize = 200;

/// Most lines of one kind (not JSON, a reply nobody asked for, a wrong
/// `jsonrpc`) quoted in a step's warnings; the rest are counted.
const QUOTED_LINES: usize = 3;

/// Largest `capabilities` object kept whole.
const CAPABILITIES_LIMIT: usize = 64 * 1024;

/// Bytes per token, roughly, for JSON and English text: how a tool list's
/// size becomes a share of the model's context.
const BYTES_PER_TOKEN: usize = 4;

/// Tool definitions past which Claude Code warns that MCP tools take a
/// large part of the context (25,000 tokens).
const TOOLS_WARN_TOKENS: usize = 25_000;

/// Tool definitions that alone fill a model's whole context (Claude's
/// 200,000 tokens): a CLI cannot use such a server.
const TOOLS_FAIL_TOKENS: usize = 200_000;

/// Size of a prompt or resource list past which it is worth a warning:
/// the CLI fetches all of it at start-up and keeps it.
const LIST_WARN_BYTES: usize = 1024 * 1024;

/// A step failed; the report says which and why.
struct Stop;

pub(super) async fn check(config: &Config) -> Report {
    let mut report = Report {
        endpoint: config.endpoint.clone(),
        steps: Vec::new(),
        server: None,
        ignored: ignored(config),
        tools: None,
        prompts: None,
        resources: None,
        budgets: Vec::new(),
        snippets: snippets(config, None),
    };
    let log = open_log(config, &mut report);
    let mut checker = Checker {
        config,
        report: &mut report,
        log: log.as_ref(),
    };
    let _ = checker.run().await;
    if let Some(log) = &log {
        match report.error() {
            None => log.exit(0, &"doctor: every check passed"),
            Some(e) => log.exit(1, &e),
        }
    }
    let name = report.server.as_ref().map(|s| s.name.clone());
    report.snippets = snippets(config, name.as_deref());
    report
}

/// The `mcp-server` options given that doctor has no use for.
fn ignored(config: &Config) -> Vec<Ignored> {
    let mut ignored = Vec::new();
    if config.reconnect_timeout.is_some() {
        ignored.push(Ignored {
            option: "--reconnect-timeout",
            why: "doctor runs one session and never waits for an app to come back after \
                  it hangs up",
        });
    }
    if !config.reconnect {
        ignored.push(Ignored {
            option: "--no-reconnect",
            why: "doctor runs one session, with nothing to reconnect and no error responses \
                  of its own to turn off; the connect step tries once, as this option asks",
        });
    }
    ignored
}

/// Opens the traffic log, as the bridge would, for the session to be
/// appended to: its own step, first. A log that cannot be opened is a
/// warning, as the bridge goes on without one.
fn open_log(config: &Config, report: &mut Report) -> Option<TrafficLog> {
    let path = config.log.as_ref()?;
    let clock = Clock::start("traffic log");
    match TrafficLog::open(path, LogOptions::from_env()) {
        Ok(log) => {
            log.start();
            report.steps.push(clock.step(format!(
                "appending this session to '{}', as the bridge would its own",
                path.display()
            )));
            Some(log)
        }
        Err(e) => {
            let step = clock.step("none: the bridge would go on without one".into());
            report.steps.push(step.warn(crate::error_chain(&e)));
            None
        }
    }
}

/// A step under way: its name, and when it started.
struct Clock {
    name: &'static str,
    started: Instant,
}

impl Clock {
    fn start(name: &'static str) -> Clock {
        Clock {
            name,
            started: Instant::now(),
        }
    }

    /// The step as it stands now, with its time so far.
    fn step(&self, detail: String) -> Step {
        Step::new(self.name, Some(self.started.elapsed()), detail)
    }
}

/// The checks in order, writing the report as they go.
struct Checker<'a> {
    config: &'a Config,
    report: &'a mut Report,
    log: Option<&'a TrafficLog>,
}

impl Checker<'_> {
    async fn run(&mut self) -> Result<(), Stop> {
        let (reader, writer, connected) = self.connect().await?;
        self.server_user(&reader)?;
        let mut session = Session {
            lines: BufReader::new(reader),
            writer,
            endpoint: &self.config.endpoint,
            limit: self.config.timeout,
            deadline: Instant::now(),
            next_id: 1,
            heard: false,
            noted: Noted::default(),
            up: self.log.map(|log| log.tap(Direction::CliToApp)),
            down: self.log.map(|log| log.tap(Direction::AppToCli)),
        };
        self.handshake(&mut session).await?;
        let capabilities = self.initialize(&mut session).await?;
        self.initialized(&mut session).await?;
        let declared = |what: &str| capabilities.get(what).map_or(false, |v| !v.is_null());
        self.report.tools = self.list(&mut session, declared("tools"), TOOLS).await?;
        let startup = connected.elapsed();
        self.report.prompts = self
            .list(&mut session, declared("prompts"), PROMPTS)
            .await?;
        self.report.resources = self
            .list(&mut session, declared("resources"), RESOURCES)
            .await?;
        self.close(session).await;
        self.budgets(startup)
    }

    /// Records a step that passed, with `warnings`.
    fn pass(&mut self, mut step: Step, warnings: Vec<String>) {
        for warning in warnings {
            step = step.warn(warning);
        }
        self.report.steps.push(step);
    }

    /// Records a step that failed, with the warnings gathered before it
    /// did; the check ends here.
    fn fail(&mut self, step: Step, warnings: Vec<String>) -> Stop {
        self.pass(step.failed(), warnings);
        Stop
    }

    /// The endpoint and connect steps: connect as the bridge would, then
    /// say what the endpoint is (after connecting, so an app that was
    /// waited for is the one looked at). Returns when it connected.
    async fn connect(&mut self) -> Result<(Reader, Writer, Instant), Stop> {
        let config = self.config;
        let clock = Clock::start("connect");
        if let Some(log) = self.log {
            log.connect_attempt(1, &config.endpoint);
        }
        let connected = match config.connect_timeout {
            Some(limit) if config.reconnect => {
                endpoint::connect_when_ready(&config.endpoint, limit).await
            }
            Some(limit) => endpoint::connect(&config.endpoint, limit).await,
            None => endpoint::connect(&config.endpoint, config.timeout).await,
        };
        let connect_step = clock.step(match config.connect_timeout {
            Some(limit) if config.reconnect => format!(
                "connected (waiting up to {:?} for the app, as --connect-timeout asks)",
                limit
            ),
            _ => "connected".into(),
        });
        if let Some(log) = self.log {
            let error = connected.as_ref().err();
            let outcome = error.map_or(Ok(()), |e| Err(e as &(dyn std::error::Error + 'static)));
            log.connect_outcome(1, clock.started.elapsed(), outcome);
        }

        let looking = Clock::start("endpoint");
        let facts = platform::inspect(&config.endpoint);
        let endpoint_step = looking.step(facts.detail);
        let (reader, writer) = match connected {
            Ok(halves) => halves,
            Err(e) => {
                let mut step = connect_step;
                step.detail = crate::error_chain(&BridgeError::Connect(e));
                if facts.usable {
                    self.pass(endpoint_step, facts.warnings);
                    return Err(self.fail(step, Vec::new()));
                }
                let mut failed = endpoint_step;
                failed.detail = step.detail;
                return Err(self.fail(failed, facts.warnings));
            }
        };
        self.pass(endpoint_step, facts.warnings);
        self.pass(connect_step, Vec::new());
        Ok((reader, writer, clock.started))
    }

    /// Who serves the endpoint, and whether the bridge would talk to it.
    fn server_user(&mut self, reader: &Reader) -> Result<(), Stop> {
        let clock = Clock::start("server user");
        let endpoint = &self.config.endpoint;
        let trusted = self.config.trusted_server.as_ref();
        let verified = endpoint::verify_server(endpoint, reader, trusted);
        let who = match endpoint::server_user(reader) {
            Ok(user) => format!("served by {}", user),
            Err(_) => "served by a user that cannot be told".into(),
        };
        match verified {
            Ok(()) => {
                let by_default =
                    trusted.is_none() || endpoint::verify_server(endpoint, reader, None).is_ok();
                let step = clock.step(format!(
                    "{}, {}: the bridge will talk to it",
                    who,
                    if by_default {
                        "which is you (or root)"
                    } else {
                        "whom --trust-server-user trusts"
                    }
                ));
                self.pass(step, Vec::new());
                Ok(())
            }
            Err(e) => {
                let text = crate::error_chain(&BridgeError::Connect(e));
                Err(self.fail(clock.step(text), Vec::new()))
            }
        }
    }

    async fn handshake(&mut self, session: &mut Session<'_>) -> Result<(), Stop> {
        let clock = session.begin("handshake");
        let line = self.config.handshake.to_line();
        match session.send_bytes(&line).await {
            Ok(()) => {
                if let Some(log) = self.log {
                    log.handshake_sent(&line);
                }
                let sent = String::from_utf8_lossy(&line);
                let step = clock.step(format!("sent {}", sent.trim_end()));
                self.pass(step, session.noted.drain());
                Ok(())
            }
            Err(failure) => {
                let text = match failure {
                    Failure::Io(source) => crate::error_chain(&BridgeError::Handshake {
                        endpoint: self.config.endpoint.clone(),
                        source,
                    }),
                    Failure::TimedOut => session.stuck("the handshake"),
                };
                Err(self.fail(clock.step(text), session.noted.drain()))
            }
        }
    }

    /// Returns the server's capabilities.
    async fn initialize(&mut self, session: &mut Session<'_>) -> Result<Value, Stop> {
        let clock = session.begin("initialize");
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mcp-bridge-doctor", "version": env!("CARGO_PKG_VERSION")},
        });
        let answer = session.request("initialize", &params.to_string(), 1).await;
        let result = match answer {
            Ok(result) => result,
            Err(text) => return Err(self.fail(clock.step(text), session.noted.drain())),
        };
        let (info, problems) = server_info(&result);
        let step = clock.step(describe_server(&info));
        let mut warnings = session.noted.drain();
        warnings.extend(problems);
        self.pass(step, warnings);
        let capabilities = info.capabilities.clone();
        self.report.server = Some(info);
        Ok(capabilities)
    }

    async fn initialized(&mut self, session: &mut Session<'_>) -> Result<(), Stop> {
        let clock = session.begin("initialized");
        let line = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        match session.send_line(line, "notifications/initialized").await {
            Ok(()) => {
                let step = clock.step("notifications/initialized sent".into());
                self.pass(step, session.noted.drain());
                Ok(())
            }
            Err(text) => Err(self.fail(clock.step(text), session.noted.drain())),
        }
    }

    /// Lists every page of a list when `declared`, as a step of its own
    /// named after the method; a skipped step and `None` otherwise.
    async fn list(
        &mut self,
        session: &mut Session<'_>,
        declared: bool,
        list: &List,
    ) -> Result<Option<Listing>, Stop> {
        if !declared {
            self.report.steps.push(Step::skipped(
                list.method,
                &format!("the server declares no {} capability", list.member),
            ));
            return Ok(None);
        }
        let clock = session.begin(list.method);
        let listed = session.list(list).await;
        let listing = match listed {
            Ok(listing) => listing,
            Err(text) => return Err(self.fail(clock.step(text), session.noted.drain())),
        };
        let mut step = clock.step(describe_names(&listing, list.noun));
        let mut warnings = session.noted.drain();
        if listing.count == 0 && list.member == "tools" {
            warnings.push("the server declares tools but lists none".into());
        }
        match size_problem(&listing, list) {
            Some(Problem::Warning(text)) => warnings.push(text),
            Some(Problem::Failure(text)) => {
                // Writing to a String cannot fail.
                let _ = write!(step.detail, ": {}", text);
                // Only the tool list's size fails its step.
                self.report.tools = Some(listing);
                return Err(self.fail(step, warnings));
            }
            None => {}
        }
        self.pass(step, warnings);
        Ok(Some(listing))
    }

    async fn close(&mut self, session: Session<'_>) {
        let clock = Clock::start("close");
        let closed = session.close().await;
        let step = clock.step(closed.detail.into());
        let warnings = closed.warning.map(String::from).into_iter().collect();
        self.pass(step, warnings);
    }

    /// Judges the start-up time (connect to tool list) against each CLI's
    /// budget: the last step.
    fn budgets(&mut self, startup: Duration) -> Result<(), Stop> {
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
            self.report.budgets.push(Budget {
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
                Err(self.fail(step, Vec::new()))
            }
            None => {
                self.pass(step, Vec::new());
                Ok(())
            }
        }
    }
}

/// One of the lists a CLI fetches at start-up.
struct List {
    method: &'static str,
    /// The result's array.
    member: &'static str,
    /// One item, for the report.
    noun: &'static str,
}

const TOOLS: &List = &List {
    method: "tools/list",
    member: "tools",
    noun: "tool",
};

const PROMPTS: &List = &List {
    method: "prompts/list",
    member: "prompts",
    noun: "prompt",
};

const RESOURCES: &List = &List {
    method: "resources/list",
    member: "resources",
    noun: "resource",
};

/// What is wrong with a list's size, for the CLIs that would fetch it.
enum Problem {
    Warning(String),
    Failure(String),
}

fn size_problem(listing: &Listing, list: &List) -> Option<Problem> {
    let size = describe_bytes(listing.bytes);
    if list.member != "tools" {
        return (listing.bytes > LIST_WARN_BYTES).then(|| {
            Problem::Warning(format!(
                "the {} list is {}: a CLI fetches and keeps all of it at start-up",
                list.member, size
            ))
        });
    }
    // Every tool's name, description and schema go into the model's
    // context with every request.
    let tokens = listing.bytes / BYTES_PER_TOKEN;
    if tokens > TOOLS_FAIL_TOKENS {
        Some(Problem::Failure(format!(
            "the tool list is {}, about {} tokens of tool definitions, which a CLI puts in \
             the model's context with every request: more than a whole context window \
             (Claude's is 200,000 tokens); no CLI can use this server as it is",
            size, tokens
        )))
    } else if tokens > TOOLS_WARN_TOKENS {
        Some(Problem::Warning(format!(
            "the tool list is {}, about {} tokens of tool definitions in the model's context \
             with every request; Claude Code warns past {} tokens",
            size, tokens, TOOLS_WARN_TOKENS
        )))
    } else {
        None
    }
}

/// The configuration to paste: this executable, run as `mcp-server` with
/// the options the check was given.
fn snippets(config: &Config, server_name: Option<&str>) -> Snippets {
    let command = std::env::current_exe()
        .map(|exe| exe.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "mcp-bridge".into());
    let mut args = vec![
        "mcp-server".to_string(),
        "--endpoint".to_string(),
        config.endpoint.to_string_lossy().into_owned(),
    ];
    let mut option = |flag: &str, value: String| {
        args.push(flag.to_string());
        args.push(value);
    };
    for (flag, value) in [
        ("--project", &config.handshake.project),
        ("--requester", &config.handshake.requester),
    ] {
        if !value.is_empty() {
            option(flag, value.clone());
        }
    }
    let seconds = |d: Duration| d.as_secs_f64().to_string();
    if let Some(limit) = config.connect_timeout {
        option("--connect-timeout", seconds(limit));
    }
    if let Some(limit) = config.reconnect_timeout {
        option("--reconnect-timeout", seconds(limit));
    }
    if let Some(user) = &config.trusted_server {
        // Shown as "uid 1000" on Unix; the option takes the number.
        let user = user.to_string();
        option(
            "--trust-server-user",
            user.trim_start_matches("uid ").to_string(),
        );
    }
    if let Some(log) = &config.log {
        option("--log", log.to_string_lossy().into_owned());
    }
    if !config.reconnect {
        args.push("--no-reconnect".to_string());
    }
    Snippets::new(&paste::server_name(server_name), &command, args)
}

/// The facts of an `initialize` result, and what is wrong with it.
fn server_info(result: &RawValue) -> (ServerInfo, Vec<String>) {
    let mut problems = Vec::new();
    let result = members(result.get()).unwrap_or_default();
    let server = result.get("serverInfo").and_then(|raw| members(raw.get()));
    let server = server.unwrap_or_default();
    let capabilities = match result.get("capabilities") {
        Some(raw) if raw.get().len() > CAPABILITIES_LIMIT => {
            problems.push(format!(
                "the capabilities object is {}; doctor keeps none of it",
                describe_bytes(raw.get().len())
            ));
            Value::Null
        }
        Some(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
        None => Value::Null,
    };
    let info = ServerInfo {
        protocol_version: text_member(&result, "protocolVersion"),
        name: text_member(&server, "name"),
        version: text_member(&server, "version"),
        capabilities,
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
    let capabilities: Vec<String> = info.capabilities.as_object().map_or_else(Vec::new, |c| {
        c.keys()
            .take(SHOWN_NAMES)
            .map(|key| cut(key, NAME_BYTES))
            .collect()
    });
    let more = info
        .capabilities
        .as_object()
        .map_or(0, |c| c.len().saturating_sub(SHOWN_NAMES));
    format!(
        "protocol {}, server '{}' {}; capabilities: {}{}",
        info.protocol_version,
        info.name,
        info.version,
        if capabilities.is_empty() {
            "none".to_string()
        } else {
            capabilities.join(", ")
        },
        if more > 0 {
            format!(" and {} more", more)
        } else {
            String::new()
        }
    )
}

/// The members of a JSON object, each a slice of `json`; `None` if it is
/// not one.
fn members(json: &str) -> Option<BTreeMap<String, &RawValue>> {
    serde_json::from_str(json).ok()
}

/// A string member, cut to [`NAME_BYTES`]; empty if absent or not a
/// string.
fn text_member(members: &BTreeMap<String, &RawValue>, key: &str) -> String {
    members
        .get(key)
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .map_or_else(String::new, |text| cut(&text, NAME_BYTES))
}

/// Calls `each` with every element of the JSON array `array` (already
/// checked to be valid JSON), as a slice of it, without collecting them:
/// a page of a million items costs no more than its text. Returns `false`
/// if `array` is not an array.
fn for_each_element(array: &str, mut each: impl FnMut(&str)) -> bool {
    let bytes = array.as_bytes();
    if bytes.first() != Some(&b'[') {
        return false;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 1;
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' if depth > 0 => depth -= 1,
            b',' | b']' if depth == 0 => {
                let element = array[start..i].trim();
                if !element.is_empty() {
                    each(element);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    true
}

/// The name (or URI) of a list item, cut to [`NAME_BYTES`].
fn item_name(item: &str) -> String {
    let item = members(item).unwrap_or_default();
    let name = text_member(&item, "name");
    if !name.is_empty() {
        return name;
    }
    let uri = text_member(&item, "uri");
    if !uri.is_empty() {
        return uri;
    }
    "(unnamed)".into()
}

/// How the close went.
struct Closed {
    detail: &'static str,
    warning: Option<&'static str>,
}

/// Why a write did not go out.
enum Failure {
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
struct Noted {
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
    fn drain(&mut self) -> Vec<String> {
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
struct Session<'a> {
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
    noted: Noted,
    /// The traffic log's taps, when there is a log.
    up: Option<LineTap>,
    down: Option<LineTap>,
}

impl Session<'_> {
    /// Starts a step: its clock, and its time bound for everything it
    /// sends and reads.
    fn begin(&mut self, name: &'static str) -> Clock {
        let clock = Clock::start(name);
        self.deadline = clock.started + self.limit;
        clock
    }

    /// What is left of the step's time.
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The failure of a write the app did not take in time.
    fn stuck(&self, what: &str) -> String {
        format!(
            "sending {} did not finish within {:?}: the app is not reading what it is sent",
            what, self.limit
        )
    }

    /// Writes `bytes`, within what is left of the step's time.
    async fn send_bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        let left = self.left();
        let writer = &mut self.writer;
        let written = wait::timeout(left, async {
            writer.write_all(bytes).await?;
            writer.flush().await
        })
        .await;
        match written {
            Some(Ok(())) => {
                if let Some(tap) = &mut self.up {
                    tap.feed(bytes);
                }
                Ok(())
            }
            Some(Err(source)) => Err(Failure::Io(source)),
            None => Err(Failure::TimedOut),
        }
    }

    /// Sends one line (`what` names it in a failure, which is worded as
    /// the bridge would).
    async fn send_line(&mut self, line: &str, what: &str) -> Result<(), String> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        match self.send_bytes(&bytes).await {
            Ok(()) => Ok(()),
            Err(Failure::Io(source)) => Err(relay_failure(Stage::WriteServer, source)),
            Err(Failure::TimedOut) => Err(self.stuck(what)),
        }
    }

    /// Sends a request (`params` is JSON) and waits, within the step's
    /// time, for its result; `page` counts the requests of a list.
    async fn request(
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
    async fn reply(&mut self, id: u64, method: &str) -> Result<Box<RawValue>, String> {
        let id = Value::from(id);
        loop {
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
    async fn list(&mut self, list: &List) -> Result<Listing, String> {
        let mut listing = Listing {
            names: Vec::new(),
            count: 0,
            pages: 0,
            bytes: 0,
        };
        let mut cursor: Option<Box<RawValue>> = None;
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
                Some(next) if next.get() != "null" => cursor = Some((*next).to_owned()),
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
fn relay_failure(stage: Stage, source: io::Error) -> String {
    crate::error_chain(&BridgeError::Relay(RelayError { stage, source }))
}

/// `3 tools: a, b, c`, the names cut at [`SHOWN_NAMES`].
fn describe_names(listing: &Listing, noun: &str) -> String {
    let plural = if listing.count == 1 { "" } else { "s" };
    let mut text = format!("{} {}{}", listing.count, noun, plural);
    if listing.count > 0 {
        let shown: Vec<&str> = listing
            .names
            .iter()
            .take(SHOWN_NAMES)
            .map(String::as_str)
            .collect();
        text.push_str(": ");
        text.push_str(&shown.join(", "));
        if listing.count > shown.len() {
            // Writing to a String cannot fail.
            let _ = write!(text, " and {} more", listing.count - shown.len());
        }
    }
    text
}

/// `512 bytes`, `3.2 KiB`, `15.0 MiB`.
fn describe_bytes(bytes: usize) -> String {
    match bytes {
        b if b < 1024 => format!("{} bytes", b),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

/// `text` cut to at most `limit` bytes (at a character boundary), with
/// `…` when cut.
fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn elements(array: &str) -> Option<Vec<String>> {
        let mut found = Vec::new();
        let is_array = for_each_element(array, |e| found.push(e.to_string()));
        is_array.then(|| found)
    }

    #[test]
    fn elements_are_split_at_top_level_commas_only() {
        assert_eq!(elements("[]"), Some(vec![]));
        assert_eq!(elements("[ ]"), Some(vec![]));
        assert_eq!(
            elements(r#"[{"name":"a,]"}, [1,2] ,"x\"]",3]"#),
            Some(vec![
                r#"{"name":"a,]"}"#.to_string(),
                "[1,2]".into(),
                r#""x\"]""#.into(),
                "3".into()
            ])
        );
        assert_eq!(elements(r#"{"a":1}"#), None);
        assert_eq!(elements(""), None);
    }

    #[test]
    fn items_are_named_by_name_or_uri_and_cut() {
        assert_eq!(item_name(r#"{"name":"echo"}"#), "echo");
        assert_eq!(item_name(r#"{"uri":"file:///a"}"#), "file:///a");
        assert_eq!(item_name(r#"{"name":3}"#), "(unnamed)");
        let long = format!(r#"{{"name":"{}"}}"#, "é".repeat(300));
        let name = item_name(&long);
        assert!(name.len() <= NAME_BYTES + "…".len(), "{}", name.len());
        assert!(name.ends_with('…'));
    }

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
}
