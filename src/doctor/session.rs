//! The checks themselves: a short MCP client session, step by step, each
//! step timed and bounded, stopping at the first failure.
//!
//! One function per step; what they share is written once: a step's
//! clock (`Clock`), its time bound (`begin`, which sets the deadline the
//! client holds every write and read of the step to), and how a step ends
//! (`Checker::pass`, `Checker::fail`). The talking is the client's
//! (`client.rs`); judging what it heard is here.
//!
//! Failures are worded by the bridge's own error types ([`ConnectError`],
//! [`BridgeError`]) wherever the bridge would fail the same way, so the
//! report says what the bridge would say to a CLI.
//!
//! [`ConnectError`]: crate::endpoint::ConnectError

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::client::{Failure, List, Session};
use super::paste::{self, Snippets};
use super::raw::{cut, members, text_member, NAME_BYTES};
use super::report::{Budget, Ignored, Listing, Report, ServerInfo, Status, Step};
use super::{platform, Config, CLAUDE_CODE_BUDGET, CODEX_BUDGET};
use crate::bridge::BridgeError;
use crate::decimal::Fixed;
use crate::endpoint::{self, Reader, Writer};
use crate::traffic_log::{LogOptions, TrafficLog};

/// The protocol version doctor asks for: the one current CLIs send.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Most names shown on a list's line of the text report.
const SHOWN_NAMES: usize = 20;

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
    if config.cache_dir.is_some() {
        ignored.push(Ignored {
            option: "--cache-dir",
            why: "doctor asks the app itself and reads no answers cache; the configuration \
                  below keeps it for the bridge",
        });
    }
    if config.no_cache {
        ignored.push(Ignored {
            option: "--no-cache",
            why: "doctor asks the app itself and reads no answers cache; the configuration \
                  below keeps it for the bridge",
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

/// Starts a step that talks to the app: its clock, and its time bound.
fn begin(session: &mut Session<'_>, name: &'static str) -> Clock {
    let clock = Clock::start(name);
    session.bound_from(clock.started);
    clock
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
        let config = self.config;
        let mut session = Session::new(reader, writer, &config.endpoint, config.timeout, self.log);
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
                // What `mcp-server` prints after the same message.
                let hint = crate::hint::connect(e.absence())
                    .map_or(String::new(), |h| format!(" ({})", h));
                step.detail = crate::error_chain(&BridgeError::Connect(e)) + &hint;
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
        let clock = begin(session, "handshake");
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
        let clock = begin(session, "initialize");
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
        let clock = begin(session, "initialized");
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
        let clock = begin(session, list.method);
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
        let took = format!("{} ms", Fixed::millis(startup, 1));
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
    let (flag, endpoint) = match &config.app {
        Some(app) => ("--app", app.clone()),
        None => ("--endpoint", config.endpoint.to_string_lossy().into_owned()),
    };
    let mut args = vec!["mcp-server".to_string(), flag.to_string(), endpoint];
    let mut option = |flag: &str, value: String| {
        args.push(flag.to_string());
        args.push(value);
    };
    // Only what was given: what the bridge learns from the CLI it learns
    // again wherever the line runs.
    let handshake = &config.handshake;
    for (flag, value, learned) in [
        ("--project", &handshake.project, &handshake.project_from),
        (
            "--requester",
            &handshake.requester,
            &handshake.requester_from,
        ),
    ] {
        if !value.is_empty() && learned.is_none() {
            option(flag, value.clone());
        }
    }
    let seconds = crate::decimal::seconds;
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
    if let Some(dir) = &config.cache_dir {
        option("--cache-dir", dir.to_string_lossy().into_owned());
    }
    if !config.reconnect {
        args.push("--no-reconnect".to_string());
    }
    if config.no_cache {
        args.push("--no-cache".to_string());
    }
    let mut snippets = Snippets::new(&paste::server_name(server_name), &command, args);
    // A path of this machine's in the line makes it this machine's.
    snippets.portable &= config.log.is_none() && config.cache_dir.is_none();
    snippets
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
        b if b < 1024 * 1024 => format!("{} KiB", Fixed::ratio(b as u64, 1024, 1)),
        b => format!("{} MiB", Fixed::ratio(b as u64, 1024 * 1024, 1)),
    }
}
