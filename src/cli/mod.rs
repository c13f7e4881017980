//! The command line, parsed into the library's own configuration types
//! before anything runs.
//!
//! Hand-written instead of a parser crate: the grammar is a few options per
//! subcommand, and every dependency is paid for by each app that bundles us.
//! It is shaped like lexopt: one loop per subcommand with one explicit arm
//! per option, and anything unknown falls into the last arm, so an option
//! can never be parsed by another option's code. It handles what users
//! expect of a real CLI: `--name value` and `--name=value`, values that
//! start with a dash, non-UTF-8 endpoint paths, and one clear error line per
//! mistake (the binary adds a pointer to `--help` and exits with code 2).
//!
//! `--app` is resolved here, into the endpoint the library's rule gives
//! ([`mcp_bridge::endpoint::for_app`]), and what `--project` and
//! `--requester` leave out is learned here ([`mcp_bridge::identity`]), so
//! the commands get a plain endpoint and handshake.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

mod args;
#[cfg(not(all(feature = "serve", feature = "doctor", feature = "demo")))]
mod usage_bridge;

use args::{endpoint_or_app, once, Arg, Parser};
use mcp_bridge::bridge;
#[cfg(feature = "doctor")]
use mcp_bridge::doctor;
use mcp_bridge::endpoint::ServerUser;
use mcp_bridge::handshake::Handshake;
#[cfg(feature = "serve")]
use mcp_bridge::serve;
#[cfg(not(all(feature = "serve", feature = "doctor", feature = "demo")))]
pub use usage_bridge::usage;

/// Largest `--max-connections` accepted: beyond it, the process and file
/// descriptor limits of any ordinary system run out first.
#[cfg(feature = "serve")]
const MAX_MAX_CONNECTIONS: usize = 100_000;

/// Longest duration accepted in seconds (one day). Larger values are surely
/// a typo, and would overflow the timer's `Instant` arithmetic.
const MAX_SECONDS: u64 = 86_400;

/// The variable that names the traffic log when `--log` is not given: for
/// CLIs that pass an environment to the servers they spawn (Codex clears
/// it, hence the flag).
const LOG_ENV: &str = "MCP_BRIDGE_LOG";

/// The variable that names the answers cache's directory when `--cache-dir`
/// is not given (empty: no cache).
const CACHE_ENV: &str = "MCP_BRIDGE_CACHE_DIR";

/// How the handshake is made from `--project` and `--requester`, either
/// of which may be absent: [`mcp_bridge::identity::handshake`], or in
/// tests one that learns nothing.
type Identify = fn(Option<String>, Option<String>) -> Handshake;

/// What the user asked for.
// One per run, moved once: a box for the bridge's larger configuration
// would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Command {
    /// Print the usage text on stdout.
    Help,
    /// Print the version line on stdout.
    Version,
    /// `mcp-server`: run the bridge, the job an MCP CLI spawns us for.
    Bridge(bridge::Config),
    /// `serve`: put a stdio MCP server behind an endpoint.
    #[cfg(feature = "serve")]
    Serve(serve::Config),
    /// `demo`: a self-contained demonstration session.
    #[cfg(feature = "demo")]
    Demo,
    /// `doctor`: check an endpoint as a CLI would use it.
    #[cfg(feature = "doctor")]
    Doctor(Doctor),
}

/// What `doctor` checks, and how it reports.
#[cfg(feature = "doctor")]
#[derive(Debug)]
pub struct Doctor {
    /// The checks.
    pub config: doctor::Config,
    /// One JSON document on stdout instead of the text report.
    pub json: bool,
}

/// A command line that cannot be run: one line naming the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn error<T>(message: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(message.into()))
}

/// The text printed by `--help`, kept in `usage.txt` where it reads as it
/// prints; the defaults are filled in from the library's constants. (A
/// build without every command has its own text: `usage_bridge.rs`.)
#[cfg(all(feature = "serve", feature = "doctor", feature = "demo"))]
pub fn usage() -> String {
    let mut text = include_str!("usage.txt").replace("{VERSION}", env!("CARGO_PKG_VERSION"));
    for (name, value) in [
        ("{TIMEOUT}", bridge::DEFAULT_CONNECT_TIMEOUT.as_secs()),
        ("{MAX}", serve::DEFAULT_MAX_CONNECTIONS as u64),
        ("{RECONNECT}", bridge::DEFAULT_RECONNECT_TIMEOUT.as_secs()),
        ("{DOCTOR_TIMEOUT}", doctor::DEFAULT_TIMEOUT.as_secs()),
        (
            "{LOG_MAX}",
            mcp_bridge::traffic_log::DEFAULT_MAX_FILE_BYTES >> 20,
        ),
    ] {
        text = text.replace(name, &value.to_string());
    }
    text
}

/// The line printed by `--version`: version, git commit, target triple and
/// which build this is (`full`, `bridge-only`, or `features: ` and the ones
/// it has), all recorded by `build.rs`; the commit is `unknown` rather than
/// a wrong one. For example
/// `mcp-bridge 0.2.0 (1a2b3c4d5e6f, x86_64-unknown-linux-gnu, bridge-only)`.
pub fn version_line() -> &'static str {
    concat!(
        "mcp-bridge ",
        env!("CARGO_PKG_VERSION"),
        " (",
        env!("MCP_BRIDGE_GIT_COMMIT"),
        ", ",
        env!("MCP_BRIDGE_TARGET"),
        ", ",
        env!("MCP_BRIDGE_BUILD"),
        ")"
    )
}

/// Parses the arguments after the program name (and `MCP_BRIDGE_LOG`, and
/// for an identity not given, what the CLI passed).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    parse_with_env(
        args,
        std::env::var_os(LOG_ENV),
        mcp_bridge::identity::handshake,
    )
}

/// [`parse`], with the value of `MCP_BRIDGE_LOG` and the way to make the
/// handshake given rather than read.
fn parse_with_env(
    args: impl IntoIterator<Item = OsString>,
    env_log: Option<OsString>,
    identify: Identify,
) -> Result<Command, UsageError> {
    // The flag wins; an empty variable means no log.
    let env_log = env_log.filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut args = Parser::new(args.into_iter());
    match args.next()? {
        None => error("no command given"),
        Some(Arg::Option(name)) => match name.as_str() {
            "-h" | "--help" => args.no_value().map(|()| Command::Help),
            "-V" | "--version" => args.no_value().map(|()| Command::Version),
            _ => error(format!("unknown option '{}'", name)),
        },
        Some(Arg::Word(word)) => match word.to_str() {
            Some("help") => Ok(Command::Help),
            Some("mcp-server") => parse_bridge(args, env_log, identify),
            #[cfg(feature = "serve")]
            Some("serve") => parse_serve(args, env_log),
            #[cfg(feature = "doctor")]
            Some("doctor") => parse_doctor(args, env_log, identify),
            #[cfg(feature = "demo")]
            Some("demo") => match args.next()? {
                None => Ok(Command::Demo),
                Some(arg) => Err(arg.unexpected("demo")),
            },
            Some(command) if left_out_of_this_build(command) => error(format!(
                "'{}' is not in this build of mcp-bridge (built without the '{}' feature)",
                command, command
            )),
            _ => error(format!(
                "unknown command '{}' (expected mcp-server, serve, doctor, demo or help)",
                word.to_string_lossy()
            )),
        },
    }
}

/// The options `mcp-server` takes. `doctor` takes them all too, so that a
/// user may put `doctor` in place of `mcp-server` in the line they
/// configured: one parser for both, which cannot drift apart.
#[derive(Default)]
struct BridgeLine {
    endpoint: Option<OsString>,
    app: Option<String>,
    project: Option<String>,
    requester: Option<String>,
    connect_timeout: Option<Duration>,
    trusted_server: Option<ServerUser>,
    reconnect_timeout: Option<Duration>,
    no_reconnect: Option<()>,
    log: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    no_cache: Option<()>,
}

/// A command's own options beside `mcp-server`'s: takes option `name` (and
/// its value) and says whether it was one of them.
type OwnOption<'a, I> = dyn FnMut(&str, &mut Parser<I>) -> Result<bool, UsageError> + 'a;

impl BridgeLine {
    /// Reads `command`'s options to the end: `mcp-server`'s into the line,
    /// the command's own through `own` (which says whether it knew the
    /// option). `None` for `--help`. Not inlined, and `own` is called
    /// through `dyn`: one copy of the option arms in the binary, not one in
    /// `main` per command (-528 bytes bridge-only, -1,440 full).
    #[inline(never)]
    fn parse<I: Iterator<Item = OsString>>(
        args: &mut Parser<I>,
        command: &str,
        own: &mut OwnOption<'_, I>,
    ) -> Result<Option<BridgeLine>, UsageError> {
        let mut line = BridgeLine::default();
        while let Some(arg) = args.next()? {
            let name = match arg {
                Arg::Option(name) => name,
                word => return Err(word.unexpected(command)),
            };
            let name = name.as_str();
            match name {
                "--endpoint" => once(&mut line.endpoint, name, args.value(name)?)?,
                "--app" => once(&mut line.app, name, args.utf8(name)?)?,
                "--project" => once(&mut line.project, name, args.utf8(name)?)?,
                "--requester" => once(&mut line.requester, name, args.utf8(name)?)?,
                "--connect-timeout" => once(&mut line.connect_timeout, name, args.seconds(name)?)?,
                "--trust-server-user" => {
                    once(&mut line.trusted_server, name, args.server_user(name)?)?
                }
                "--reconnect-timeout" => {
                    once(&mut line.reconnect_timeout, name, args.seconds(name)?)?
                }
                "--no-reconnect" => once(&mut line.no_reconnect, name, args.no_value()?)?,
                "--log" => once(&mut line.log, name, args.path(name)?)?,
                "--cache-dir" => once(&mut line.cache_dir, name, args.path(name)?)?,
                "--no-cache" => once(&mut line.no_cache, name, args.no_value()?)?,
                "-h" | "--help" => return args.no_value().map(|()| None),
                _ => {
                    if !own(name, args)? {
                        return error(format!("unknown option '{}'", name));
                    }
                }
            }
        }
        if line.cache_dir.is_some() && line.no_cache.is_some() {
            return error("--cache-dir and --no-cache cannot be used together");
        }
        Ok(Some(line))
    }
}

fn parse_bridge(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
    identify: Identify,
) -> Result<Command, UsageError> {
    let line = match BridgeLine::parse(&mut args, "mcp-server", &mut |_, _| Ok(false))? {
        Some(line) => line,
        None => return Ok(Command::Help),
    };
    let mut config = bridge::Config::new(endpoint_or_app(line.endpoint, line.app.as_deref())?);
    config.handshake = identify(line.project, line.requester);
    config.cache = match (line.no_cache, line.cache_dir) {
        (Some(()), _) => None,
        (None, Some(dir)) => Some(dir),
        // An empty variable turns the cache off; unset, the default.
        (None, None) => match std::env::var_os(CACHE_ENV) {
            Some(dir) if dir.is_empty() => None,
            Some(dir) => Some(PathBuf::from(dir)),
            None => config.cache.take(),
        },
    };
    if let Some(timeout) = line.connect_timeout {
        config.connect_timeout = timeout;
    }
    config.trusted_server = line.trusted_server;
    config.reconnect = line.no_reconnect.is_none();
    if let Some(timeout) = line.reconnect_timeout {
        config.reconnect_timeout = timeout;
    }
    config.log = line.log.or(env_log);
    Ok(Command::Bridge(config))
}

#[cfg(feature = "serve")]
fn parse_serve(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
) -> Result<Command, UsageError> {
    let mut endpoint = None;
    let mut app = None;
    let mut max_connections = None;
    let mut log = None;
    let mut command = Vec::new();
    while let Some(arg) = args.next()? {
        let name = match arg {
            Arg::Option(name) => name,
            Arg::Word(word) if word == "--" => {
                command.extend(args.rest());
                break;
            }
            Arg::Word(word) => {
                return error(format!(
                    "unexpected argument '{}' for 'serve' (the command goes after '--')",
                    word.to_string_lossy()
                ))
            }
        };
        match name.as_str() {
            "--endpoint" => once(&mut endpoint, &name, args.value(&name)?)?,
            "--app" => once(&mut app, &name, args.utf8(&name)?)?,
            "--max-connections" => once(&mut max_connections, &name, args.count(&name)?)?,
            "--log" => once(&mut log, &name, args.path(&name)?)?,
            "-h" | "--help" => return args.no_value().map(|()| Command::Help),
            _ => return error(format!("unknown option '{}'", name)),
        }
    }
    let endpoint = endpoint_or_app(endpoint, app.as_deref())?;
    let mut command = command.into_iter();
    let program = match command.next() {
        Some(program) if !program.is_empty() => program,
        Some(_) => return error("the command after '--' must not be empty"),
        None => {
            return error(
                "missing the command to serve: put it after '--', \
                 e.g. 'serve --endpoint <PATH> -- my-mcp-server'",
            )
        }
    };
    let mut config = serve::Config::new(endpoint, program, command);
    config.app = app;
    if let Some(max) = max_connections {
        config.max_connections = max;
    }
    config.log = log.or(env_log);
    Ok(Command::Serve(config))
}

/// `doctor` takes `mcp-server`'s whole line, and its own `--json` and
/// `--timeout`. The cache options change nothing: doctor asks the app
/// itself, never the cache.
#[cfg(feature = "doctor")]
fn parse_doctor(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
    identify: Identify,
) -> Result<Command, UsageError> {
    let mut timeout = None;
    let mut json = None;
    let line = BridgeLine::parse(&mut args, "doctor", &mut |name, args| {
        match name {
            "--timeout" => once(&mut timeout, name, args.seconds(name)?)?,
            "--json" => once(&mut json, name, args.no_value()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let line = match line {
        Some(line) => line,
        None => return Ok(Command::Help),
    };
    let mut config = doctor::Config::new(endpoint_or_app(line.endpoint, line.app.as_deref())?);
    config.app = line.app;
    config.handshake = identify(line.project, line.requester);
    if let Some(timeout) = timeout {
        config.timeout = timeout;
    }
    config.connect_timeout = line.connect_timeout;
    config.trusted_server = line.trusted_server;
    config.reconnect = line.no_reconnect.is_none();
    config.reconnect_timeout = line.reconnect_timeout;
    config.log = line.log.or(env_log);
    Ok(Command::Doctor(Doctor {
        config,
        json: json.is_some(),
    }))
}

/// Whether `command` is one of ours that this build was made without.
fn left_out_of_this_build(command: &str) -> bool {
    [
        ("serve", cfg!(feature = "serve")),
        ("doctor", cfg!(feature = "doctor")),
        ("demo", cfg!(feature = "demo")),
    ]
    .iter()
    .any(|&(name, built)| name == command && !built)
}

#[cfg(test)]
mod tests;
