//! The command line, parsed into the library's own configuration types
//! before anything runs. Hand-written in lexopt's shape (a parser crate
//! would be paid for by each app that bundles us): one explicit arm per
//! option, so an option is never parsed by another's code, and one parser
//! for `mcp-server`'s options ([`read_bridge_line`]), which `doctor` takes
//! too. It handles `--name value` and `--name=value`, values that start
//! with a dash, non-UTF-8 paths, and one clear line per mistake (the binary
//! adds a pointer to `--help` and exits with code 2). `--app` becomes the
//! endpoint its rule names, and what `--project` and `--requester` leave
//! out is learned here ([`mcp_bridge::identity`]).

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

mod args;
pub mod hint;
mod usage;

use args::{endpoint_or_app, once, Arg, Parser};
use mcp_bridge::bridge;
#[cfg(feature = "doctor")]
use mcp_bridge::doctor;
// `endpoint` for hint.rs too.
use mcp_bridge::endpoint::{self, ServerUser};
use mcp_bridge::handshake::Handshake;
#[cfg(feature = "serve")]
use mcp_bridge::serve;
use usage::left_out_of_this_build;
pub use usage::{usage, version_line};

/// Largest `--max-connections` accepted: beyond it, the process and file
/// descriptor limits of any ordinary system run out first.
#[cfg(feature = "serve")]
const MAX_MAX_CONNECTIONS: usize = 100_000;

/// Longest duration accepted in seconds (one day). Larger values are surely
/// a typo, and would overflow the timer's `Instant` arithmetic.
const MAX_SECONDS: u64 = 86_400;

/// The variable that names the traffic log when `--log` is not given (Codex
/// clears the environment of the servers it spawns, hence the flag).
const LOG_ENV: &str = "MCP_BRIDGE_LOG";

/// The variable that names the answers cache's directory when `--cache-dir`
/// is not given (empty: no cache).
const CACHE_ENV: &str = "MCP_BRIDGE_CACHE_DIR";

/// How the handshake is made from `--project` and `--requester`, either may
/// be absent: [`mcp_bridge::identity::handshake`], or one that learns nothing.
type Identify = fn(Option<String>, Option<String>) -> Handshake;

/// What the user asked for.
// One per run, moved once: a box for the bridge's would only allocate.
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
    /// `doctor`: check an endpoint as a CLI would use it; with `json`, one
    /// JSON document on stdout instead of the text report.
    #[cfg(feature = "doctor")]
    Doctor { config: doctor::Config, json: bool },
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

/// Parses the arguments after the program name (and `MCP_BRIDGE_LOG`, and
/// for an identity not given, what the CLI passed).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    parse_with_env(args, env::var_os(LOG_ENV), mcp_bridge::identity::handshake)
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

/// Reads `command`'s options to the end: `mcp-server`'s into a
/// [`BridgeLine`], the command's own through `own` (which says whether it
/// knew the option). `None` for `--help`. Not inlined, and `own` is called
/// through `dyn`: one copy of the option arms in the binary, not one in
/// `main` per command (-528 bytes bridge-only, -1,440 full).
#[inline(never)]
fn read_bridge_line<I: Iterator<Item = OsString>>(
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
            "--trust-server-user" => once(&mut line.trusted_server, name, args.server_user(name)?)?,
            "--reconnect-timeout" => once(&mut line.reconnect_timeout, name, args.seconds(name)?)?,
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

fn parse_bridge(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
    identify: Identify,
) -> Result<Command, UsageError> {
    let line = match read_bridge_line(&mut args, "mcp-server", &mut |_, _| Ok(false))? {
        Some(line) => line,
        None => return Ok(Command::Help),
    };
    let mut config = bridge::Config::new(endpoint_or_app(line.endpoint, line.app.as_deref())?);
    config.handshake = identify(line.project, line.requester);
    // The flag, else the variable (empty: no cache), else the default.
    let from_env = || env::var_os(CACHE_ENV).map(PathBuf::from);
    if let Some(dir) = line.cache_dir.or_else(from_env) {
        config.cache = Some(dir).filter(|dir| !dir.as_os_str().is_empty());
    }
    if line.no_cache.is_some() {
        config.cache = None;
    }
    config.connect_timeout = line.connect_timeout.unwrap_or(config.connect_timeout);
    config.trusted_server = line.trusted_server;
    config.reconnect = line.no_reconnect.is_none();
    config.reconnect_timeout = line.reconnect_timeout.unwrap_or(config.reconnect_timeout);
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
    config.max_connections = max_connections.unwrap_or(config.max_connections);
    config.log = log.or(env_log);
    Ok(Command::Serve(config))
}

/// `doctor` takes `mcp-server`'s whole line and its own `--json` and
/// `--timeout`. The cache options change nothing in the check (doctor asks
/// the app), but the report names them and the pasted line keeps them.
#[cfg(feature = "doctor")]
fn parse_doctor(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
    identify: Identify,
) -> Result<Command, UsageError> {
    let mut timeout = None;
    let mut json = None;
    let line = read_bridge_line(&mut args, "doctor", &mut |name, args| {
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
    config.timeout = timeout.unwrap_or(config.timeout);
    config.connect_timeout = line.connect_timeout;
    config.trusted_server = line.trusted_server;
    config.reconnect = line.no_reconnect.is_none();
    config.reconnect_timeout = line.reconnect_timeout;
    config.log = line.log.or(env_log);
    config.cache_dir = line.cache_dir;
    config.no_cache = line.no_cache.is_some();
    Ok(Command::Doctor {
        config,
        json: json.is_some(),
    })
}

#[cfg(test)]
mod tests;
