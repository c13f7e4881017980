//! The command line, parsed into a typed [`Command`] before anything runs.
//!
//! Hand-written instead of a parser crate: the grammar is four flags and a
//! handful of subcommands, and every dependency is paid for by each app that
//! bundles us. The parser still does what users expect from a real CLI:
//! `--flag value` and `--flag=value`, non-UTF-8 endpoint paths, and one clear
//! error line for each mistake (exit code 2, see [`UsageError`]).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How long `mcp-server` waits for the app's endpoint when `--connect-timeout`
/// is not given. Long enough for an app that is still starting its listener,
/// short enough that a CLI showing "starting MCP server..." never hangs.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many connections `serve` runs at once when `--max-connections` is
/// not given. Each one is a child process; this is plenty for the agents of
/// one user, and stops a runaway client from forking without bound.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// Largest `--max-connections` accepted: beyond it, the process and file
/// descriptor limits of any ordinary system run out first.
const MAX_MAX_CONNECTIONS: usize = 100_000;

/// Longest `--connect-timeout` accepted, in seconds (one day). Larger values
/// are certainly a typo, and would overflow the timer's `Instant` arithmetic.
const MAX_CONNECT_TIMEOUT_SECS: f64 = 86_400.0;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Print the usage text on stdout and exit 0.
    Help,
    /// Print the version line on stdout and exit 0.
    Version,
    /// Relay stdio to an endpoint: the job an MCP CLI spawns us for.
    McpServer(BridgeArgs),
    /// Put a stdio MCP server behind an endpoint, one child per connection.
    Serve(ServeArgs),
    /// Run a self-contained demonstration session.
    Demo,
}

/// The arguments of `mcp-bridge mcp-server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeArgs {
    /// Socket path (Unix) or pipe name (Windows) of the app's MCP server.
    pub endpoint: PathBuf,
    /// Project id sent in the handshake; empty when not given.
    pub project: String,
    /// Requester (agent) id sent in the handshake; empty when not given.
    pub requester: String,
    /// Upper bound on connecting to the endpoint.
    pub connect_timeout: Duration,
}

/// The arguments of `mcp-bridge serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    /// Socket path (Unix) or pipe name (Windows) to listen on.
    pub endpoint: PathBuf,
    /// Connections served at once; more are refused.
    pub max_connections: usize,
    /// The program to run for each connection (the first word after `--`).
    pub program: OsString,
    /// Its arguments (the rest after `--`).
    pub args: Vec<OsString>,
}

/// A command line that cannot be run. Its Display text is one line naming the
/// problem; the binary adds the hint to `--help` and exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn usage_error(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}

/// The text printed by `--help`.
pub fn usage() -> String {
    format!(
        "\
mcp-bridge {version}: relay an MCP CLI's stdio to an MCP server inside a desktop app

USAGE:
    mcp-bridge mcp-server --endpoint <PATH> [--project <ID>] [--requester <ID>]
                          [--connect-timeout <SECONDS>]
    mcp-bridge serve --endpoint <PATH> [--max-connections <N>] -- <COMMAND> [ARGS...]
    mcp-bridge demo
    mcp-bridge --help | --version

COMMANDS:
    mcp-server   Connect to the app's endpoint, send one handshake line
                 {{\"project\":\"<ID>\",\"requester\":\"<ID>\"}}, then relay stdin to the
                 endpoint and the endpoint to stdout, byte for byte. This is the
                 command to put in an MCP CLI's server configuration.
    serve        Listen on <PATH> and put a stdio MCP server behind it: for each
                 bridge that connects, run <COMMAND> with MCP_BRIDGE_PROJECT and
                 MCP_BRIDGE_REQUESTER set from its handshake, and relay the
                 connection to the command's stdin and from its stdout.
    demo         Start a throw-away MCP host, run a short session through this
                 bridge exactly as an MCP CLI would, and print the transcript.
    help         Print this text.

OPTIONS (mcp-server):
    --endpoint <PATH>            Unix socket path, or \\\\.\\pipe\\<NAME> on Windows (required)
    --project <ID>               Project id for the handshake (default: empty)
    --requester <ID>             Requesting agent id for the handshake (default: empty)
    --connect-timeout <SECONDS>  Give up connecting after this long (default: {timeout})
    -h, --help                   Print this text
    -V, --version                Print the version, git commit and target

OPTIONS (serve):
    --endpoint <PATH>            Socket path to create (required); only this user
                                 may connect, and a live one is never replaced
    --max-connections <N>        Refuse connections beyond N at once (default: {max})
    -- <COMMAND> [ARGS...]       The stdio MCP server to run per connection (required)

Every flag also accepts --flag=value.

BEHAVIOUR:
    stdout carries only bytes relayed from the endpoint; diagnostics go to stderr,
    prefixed 'mcp-bridge:'. When stdin closes, the bridge half-closes the
    connection and still relays replies for up to 1 second. When the app hangs
    up, the bridge exits.
    serve: the command's stderr lines appear on serve's stderr, prefixed with
    '[<requester>]'. When a bridge disconnects, its command's stdin is closed;
    if it has not exited 1 second later it gets SIGTERM, then SIGKILL. When the
    command exits, the connection is closed. On SIGINT or SIGTERM, serve stops
    accepting, removes the socket, stops every command the same way, and
    exits 0.

EXIT STATUS:
    0  clean end: stdin closed, the app hung up, or stdout's reader went away;
       for serve, stopped by SIGINT or SIGTERM
    1  runtime failure: endpoint unreachable, connection or I/O error; for
       serve, the endpoint could not be created
    2  usage error: bad command line
",
        version = env!("CARGO_PKG_VERSION"),
        timeout = DEFAULT_CONNECT_TIMEOUT.as_secs(),
        max = DEFAULT_MAX_CONNECTIONS,
    )
}

/// The line printed by `--version`: version, git commit and target triple,
/// the last two recorded by `build.rs`.
pub fn version_line() -> String {
    format!(
        "mcp-bridge {} ({}, {})",
        env!("CARGO_PKG_VERSION"),
        env!("MCP_BRIDGE_GIT_COMMIT"),
        env!("MCP_BRIDGE_TARGET"),
    )
}

/// Parses the arguments after the program name.
///
/// ```
/// use mcp_bridge::cli::{parse, Command};
///
/// let command = parse(["mcp-server", "--endpoint=/tmp/app.sock", "--project", "p1"]).unwrap();
/// match command {
///     Command::McpServer(args) => {
///         assert_eq!(args.endpoint, std::path::Path::new("/tmp/app.sock"));
///         assert_eq!(args.project, "p1");
///         assert_eq!(args.requester, "");
///     }
///     other => panic!("unexpected {:?}", other),
/// }
/// assert!(parse(["mcp-server"]).is_err());
/// ```
pub fn parse<I, S>(args: I) -> Result<Command, UsageError>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let mut args = args.into_iter().map(Into::into);
    let first = match args.next() {
        Some(first) => first,
        None => return Err(usage_error("no command given")),
    };
    match first.to_str() {
        Some("-h") | Some("--help") | Some("help") => Ok(Command::Help),
        Some("-V") | Some("--version") => Ok(Command::Version),
        Some("mcp-server") => parse_mcp_server(args),
        Some("serve") => parse_serve(args),
        Some("demo") => match args.next() {
            None => Ok(Command::Demo),
            Some(extra) => Err(unexpected(&extra, "demo")),
        },
        _ => Err(usage_error(format!(
            "unknown command '{}' (expected mcp-server, serve, demo or help)",
            first.to_string_lossy()
        ))),
    }
}

/// One step through a subcommand's arguments.
enum Arg {
    /// `-h` or `--help`.
    Help,
    /// A known option and its value (inline after `=`, or the next argument).
    Option(&'static str, OsString),
    /// Anything that is not an option: a positional argument, `-`, or `--`.
    Other(OsString),
}

/// Walks a subcommand's arguments, accepting `--name value` and
/// `--name=value` for the names in `known`, and turning the usual mistakes
/// (an unknown option, a missing value) into usage errors.
struct Options<I> {
    args: I,
    known: &'static [&'static str],
}

impl<I: Iterator<Item = OsString>> Options<I> {
    fn next(&mut self) -> Result<Option<Arg>, UsageError> {
        let arg = match self.args.next() {
            Some(arg) => arg,
            None => return Ok(None),
        };
        let (name, inline) = match split_flag(&arg) {
            Some(parts) => parts,
            None => return Ok(Some(Arg::Other(arg))),
        };
        if name == "-h" || name == "--help" {
            return Ok(Some(Arg::Help));
        }
        let known = match self.known.iter().find(|&&known| known == name) {
            Some(known) => *known,
            None => return Err(usage_error(format!("unknown option '{}'", name))),
        };
        match inline.or_else(|| self.args.next()) {
            Some(value) => Ok(Some(Arg::Option(known, value))),
            None => Err(usage_error(format!("option '{}' needs a value", known))),
        }
    }
}

/// Stores an option's value, refusing a second one.
fn set_once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), UsageError> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(usage_error(format!(
            "option '{}' given more than once",
            name
        ))),
    }
}

fn required_endpoint(endpoint: Option<OsString>) -> Result<PathBuf, UsageError> {
    match endpoint {
        Some(endpoint) if !endpoint.is_empty() => Ok(PathBuf::from(endpoint)),
        Some(_) => Err(usage_error("option '--endpoint' must not be empty")),
        None => Err(usage_error("missing required option '--endpoint <PATH>'")),
    }
}

fn parse_mcp_server(args: impl Iterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut endpoint = None;
    let mut project = None;
    let mut requester = None;
    let mut timeout = None;
    let mut options = Options {
        args,
        known: &[
            "--endpoint",
            "--project",
            "--requester",
            "--connect-timeout",
        ],
    };
    while let Some(arg) = options.next()? {
        match arg {
            Arg::Help => return Ok(Command::Help),
            Arg::Other(arg) => return Err(unexpected(&arg, "mcp-server")),
            Arg::Option(name @ "--endpoint", value) => set_once(&mut endpoint, name, value)?,
            Arg::Option(name @ "--project", value) => {
                set_once(&mut project, name, utf8(name, value)?)?
            }
            Arg::Option(name @ "--requester", value) => {
                set_once(&mut requester, name, utf8(name, value)?)?
            }
            Arg::Option(name, value) => set_once(&mut timeout, name, parse_timeout(&value)?)?,
        }
    }
    Ok(Command::McpServer(BridgeArgs {
        endpoint: required_endpoint(endpoint)?,
        project: project.unwrap_or_default(),
        requester: requester.unwrap_or_default(),
        connect_timeout: timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
    }))
}

fn parse_serve(args: impl Iterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut endpoint = None;
    let mut max_connections = None;
    let mut command = Vec::new();
    let mut options = Options {
        args,
        known: &["--endpoint", "--max-connections"],
    };
    while let Some(arg) = options.next()? {
        match arg {
            Arg::Help => return Ok(Command::Help),
            Arg::Other(arg) if arg == "--" => {
                command = options.args.by_ref().collect();
                break;
            }
            Arg::Other(arg) => {
                return Err(usage_error(format!(
                    "unexpected argument '{}' for 'serve' (the command goes after '--')",
                    arg.to_string_lossy()
                )))
            }
            Arg::Option(name @ "--endpoint", value) => set_once(&mut endpoint, name, value)?,
            Arg::Option(name, value) => {
                set_once(&mut max_connections, name, parse_max_connections(&value)?)?
            }
        }
    }
    let endpoint = required_endpoint(endpoint)?;
    let mut command = command.into_iter();
    let program = match command.next() {
        Some(program) if !program.is_empty() => program,
        Some(_) => return Err(usage_error("the command after '--' must not be empty")),
        None => {
            return Err(usage_error(
                "missing the command to serve: put it after '--', e.g. 'serve --endpoint <PATH> -- my-mcp-server'",
            ))
        }
    };
    Ok(Command::Serve(ServeArgs {
        endpoint,
        max_connections: max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
        program,
        args: command.collect(),
    }))
}

fn parse_max_connections(value: &OsStr) -> Result<usize, UsageError> {
    let text = value.to_string_lossy();
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_MAX_CONNECTIONS).contains(&n) => Ok(n),
        _ => Err(usage_error(format!(
            "'--max-connections' expects a whole number from 1 to {}, got '{}'",
            MAX_MAX_CONNECTIONS, text
        ))),
    }
}

fn unexpected(arg: &OsStr, command: &str) -> UsageError {
    usage_error(format!(
        "unexpected argument '{}' for '{}'",
        arg.to_string_lossy(),
        command
    ))
}

fn utf8(name: &str, value: OsString) -> Result<String, UsageError> {
    value
        .into_string()
        .map_err(|_| usage_error(format!("the value of '{}' must be valid UTF-8", name)))
}

fn parse_timeout(value: &OsStr) -> Result<Duration, UsageError> {
    let text = value.to_string_lossy();
    let seconds: f64 = match text.trim().parse() {
        Ok(seconds) => seconds,
        Err(_) => {
            return Err(usage_error(format!(
                "'--connect-timeout' expects a number of seconds, got '{}'",
                text
            )))
        }
    };
    // `!(x > 0)` also rejects NaN.
    if !(seconds > 0.0 && seconds <= MAX_CONNECT_TIMEOUT_SECS) {
        return Err(usage_error(format!(
            "'--connect-timeout' must be more than 0 and at most {} seconds, got '{}'",
            MAX_CONNECT_TIMEOUT_SECS, text
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Splits `--name=value` into its name and inline value; `--name` alone has no
/// inline value. Returns `None` for anything that is not an option (a
/// positional argument, `-`, or `--`), which `mcp-server` never accepts.
fn split_flag(arg: &OsStr) -> Option<(String, Option<OsString>)> {
    let (name, value) = split_once_eq(arg);
    let name = name.into_string().ok()?;
    let is_option = name.starts_with('-') && name != "-" && name != "--";
    if is_option {
        Some((name, value))
    } else {
        None
    }
}

/// `OsStr::split_once` does not exist; the flag name is ASCII, so splitting
/// at the first `=` is done on the platform's raw representation to keep a
/// non-UTF-8 value (an endpoint path) intact.
#[cfg(unix)]
fn split_once_eq(arg: &OsStr) -> (OsString, Option<OsString>) {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = arg.as_bytes();
    match bytes.iter().position(|&b| b == b'=') {
        Some(i) => (
            OsString::from_vec(bytes[..i].to_vec()),
            Some(OsString::from_vec(bytes[i + 1..].to_vec())),
        ),
        None => (arg.to_os_string(), None),
    }
}

#[cfg(windows)]
fn split_once_eq(arg: &OsStr) -> (OsString, Option<OsString>) {
    use std::os::windows::ffi::{OsStrExt, OsStringExt};
    let wide: Vec<u16> = arg.encode_wide().collect();
    match wide.iter().position(|&c| c == u16::from(b'=')) {
        Some(i) => (
            OsString::from_wide(&wide[..i]),
            Some(OsString::from_wide(&wide[i + 1..])),
        ),
        None => (arg.to_os_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bridge(args: &[&str]) -> BridgeArgs {
        let mut full = vec!["mcp-server"];
        full.extend_from_slice(args);
        match parse(full) {
            Ok(Command::McpServer(args)) => args,
            other => panic!("expected mcp-server args, got {:?}", other),
        }
    }

    fn error(args: &[&str]) -> String {
        match parse(args.iter().copied()) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("expected a usage error for {:?}, got {:?}", args, c),
        }
    }

    #[test]
    fn all_flags_space_separated() {
        let a = bridge(&[
            "--endpoint",
            "/tmp/x.sock",
            "--project",
            "p1",
            "--requester",
            "agent-7",
            "--connect-timeout",
            "2.5",
        ]);
        assert_eq!(a.endpoint, PathBuf::from("/tmp/x.sock"));
        assert_eq!(a.project, "p1");
        assert_eq!(a.requester, "agent-7");
        assert_eq!(a.connect_timeout, Duration::from_millis(2500));
    }

    #[test]
    fn all_flags_with_equals() {
        let a = bridge(&[
            "--endpoint=/tmp/x.sock",
            "--project=p=1",
            "--requester=",
            "--connect-timeout=3",
        ]);
        assert_eq!(a.endpoint, PathBuf::from("/tmp/x.sock"));
        assert_eq!(a.project, "p=1", "only the first '=' splits");
        assert_eq!(a.requester, "");
        assert_eq!(a.connect_timeout, Duration::from_secs(3));
    }

    #[test]
    fn identity_defaults_to_empty_and_timeout_to_default() {
        let a = bridge(&["--endpoint", "/x"]);
        assert_eq!(a.project, "");
        assert_eq!(a.requester, "");
        assert_eq!(a.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    }

    #[test]
    fn value_may_start_with_a_dash() {
        let a = bridge(&["--endpoint", "/x", "--project", "-p"]);
        assert_eq!(a.project, "-p");
    }

    #[cfg(unix)]
    #[test]
    fn endpoint_may_be_non_utf8() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let path = OsString::from_vec(b"/tmp/\xff\xfe.sock".to_vec());
        let mut inline = OsString::from("--endpoint=");
        inline.push(&path);
        for args in [
            vec![
                OsString::from("mcp-server"),
                "--endpoint".into(),
                path.clone(),
            ],
            vec![OsString::from("mcp-server"), inline],
        ] {
            match parse(args).unwrap() {
                Command::McpServer(a) => {
                    assert_eq!(a.endpoint.as_os_str().as_bytes(), path.as_bytes())
                }
                other => panic!("{:?}", other),
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn project_must_be_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(b"\xff".to_vec());
        let err = parse(vec![
            OsString::from("mcp-server"),
            "--endpoint".into(),
            "/x".into(),
            "--project".into(),
            bad,
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--project"), "{}", err);
        assert!(err.to_string().contains("UTF-8"), "{}", err);
    }

    #[test]
    fn help_and_version() {
        for h in ["-h", "--help", "help"] {
            assert_eq!(parse([h]).unwrap(), Command::Help);
        }
        assert_eq!(
            parse(["mcp-server", "--help"]).unwrap(),
            Command::Help,
            "help wins even without --endpoint"
        );
        for v in ["-V", "--version"] {
            assert_eq!(parse([v]).unwrap(), Command::Version);
        }
        assert_eq!(parse(["demo"]).unwrap(), Command::Demo);
    }

    #[test]
    fn no_arguments() {
        assert!(error(&[]).contains("no command"));
    }

    #[test]
    fn missing_endpoint() {
        let e = error(&["mcp-server", "--project", "p"]);
        assert!(e.contains("missing") && e.contains("--endpoint"), "{}", e);
        let e = error(&["mcp-server", "--endpoint="]);
        assert!(e.contains("--endpoint") && e.contains("empty"), "{}", e);
    }

    #[test]
    fn flag_without_value() {
        for flag in [
            "--endpoint",
            "--project",
            "--requester",
            "--connect-timeout",
        ] {
            let e = error(&["mcp-server", flag]);
            assert!(e.contains(flag) && e.contains("needs a value"), "{}", e);
        }
    }

    #[test]
    fn unknown_flag() {
        let e = error(&["mcp-server", "--endpoint", "/x", "--bogus"]);
        assert!(e.contains("unknown option '--bogus'"), "{}", e);
        let e = error(&["mcp-server", "-x"]);
        assert!(e.contains("unknown option '-x'"), "{}", e);
    }

    #[test]
    fn repeated_flag() {
        let e = error(&["mcp-server", "--endpoint", "/x", "--endpoint=/y"]);
        assert!(e.contains("'--endpoint' given more than once"), "{}", e);
        let e = error(&[
            "mcp-server",
            "--endpoint",
            "/x",
            "--project=a",
            "--project",
            "a",
        ]);
        assert!(e.contains("'--project' given more than once"), "{}", e);
    }

    #[test]
    fn stray_positional() {
        let e = error(&["mcp-server", "--endpoint", "/x", "extra"]);
        assert!(e.contains("unexpected argument 'extra'"), "{}", e);
        let e = error(&["mcp-server", "--", "--endpoint", "/x"]);
        assert!(e.contains("unexpected argument '--'"), "{}", e);
        let e = error(&["demo", "now"]);
        assert!(e.contains("unexpected argument 'now'"), "{}", e);
    }

    #[test]
    fn unknown_command() {
        let e = error(&["serve-me"]);
        assert!(e.contains("unknown command 'serve-me'"), "{}", e);
    }

    #[test]
    fn bad_timeouts() {
        for bad in ["soon", "", "1s", "-1", "0", "NaN", "inf", "1e12"] {
            let e = error(&["mcp-server", "--endpoint", "/x", "--connect-timeout", bad]);
            assert!(e.contains("--connect-timeout"), "{}: {}", bad, e);
        }
    }

    fn serve(args: &[&str]) -> ServeArgs {
        let mut full = vec!["serve"];
        full.extend_from_slice(args);
        match parse(full) {
            Ok(Command::Serve(args)) => args,
            other => panic!("expected serve args, got {:?}", other),
        }
    }

    #[test]
    fn serve_with_all_flags() {
        let a = serve(&[
            "--endpoint",
            "/tmp/s.sock",
            "--max-connections=3",
            "--",
            "my-server",
            "--endpoint",
            "--",
            "-x",
        ]);
        assert_eq!(a.endpoint, PathBuf::from("/tmp/s.sock"));
        assert_eq!(a.max_connections, 3);
        assert_eq!(a.program, OsString::from("my-server"));
        assert_eq!(
            a.args,
            ["--endpoint", "--", "-x"],
            "everything after '--' is the command's"
        );
    }

    #[test]
    fn serve_defaults() {
        let a = serve(&["--endpoint=/x", "--", "cat"]);
        assert_eq!(a.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(a.program, OsString::from("cat"));
        assert!(a.args.is_empty());
        assert_eq!(parse(["serve", "--help"]).unwrap(), Command::Help);
    }

    #[test]
    fn serve_needs_an_endpoint_and_a_command() {
        let e = error(&["serve", "--", "cat"]);
        assert!(e.contains("missing") && e.contains("--endpoint"), "{}", e);
        let e = error(&["serve", "--endpoint=", "--", "cat"]);
        assert!(e.contains("--endpoint") && e.contains("empty"), "{}", e);
        for args in [
            &["serve", "--endpoint", "/x"][..],
            &["serve", "--endpoint", "/x", "--"],
        ] {
            let e = error(args);
            assert!(e.contains("missing the command"), "{}", e);
        }
        let e = error(&["serve", "--endpoint", "/x", "--", ""]);
        assert!(e.contains("must not be empty"), "{}", e);
    }

    #[test]
    fn serve_command_must_follow_the_separator() {
        let e = error(&["serve", "--endpoint", "/x", "cat"]);
        assert!(
            e.contains("unexpected argument 'cat'") && e.contains("after '--'"),
            "{}",
            e
        );
    }

    #[test]
    fn serve_flag_errors() {
        for flag in ["--endpoint", "--max-connections"] {
            let e = error(&["serve", flag]);
            assert!(e.contains(flag) && e.contains("needs a value"), "{}", e);
        }
        let e = error(&["serve", "--endpoint", "/x", "--project", "p", "--", "cat"]);
        assert!(e.contains("unknown option '--project'"), "{}", e);
        let e = error(&["serve", "--endpoint", "/x", "--endpoint", "/y", "--", "cat"]);
        assert!(e.contains("'--endpoint' given more than once"), "{}", e);
        let e = error(&[
            "serve",
            "--endpoint=/x",
            "--max-connections=2",
            "--max-connections=2",
            "--",
            "cat",
        ]);
        assert!(
            e.contains("'--max-connections' given more than once"),
            "{}",
            e
        );
    }

    #[test]
    fn bad_max_connections() {
        for bad in [
            "0",
            "-1",
            "",
            "many",
            "1.5",
            "100001",
            "99999999999999999999999",
        ] {
            let e = error(&[
                "serve",
                "--endpoint",
                "/x",
                "--max-connections",
                bad,
                "--",
                "cat",
            ]);
            assert!(e.contains("'--max-connections' expects"), "{}: {}", bad, e);
        }
    }

    #[test]
    fn usage_mentions_every_flag_and_exit_code() {
        let text = usage();
        for needle in [
            "--endpoint",
            "--project",
            "--requester",
            "--connect-timeout",
            "EXIT STATUS",
            "demo",
            "serve",
            "--max-connections",
            "MCP_BRIDGE_PROJECT",
            "MCP_BRIDGE_REQUESTER",
        ] {
            assert!(text.contains(needle), "usage lacks {}", needle);
        }
    }
}
