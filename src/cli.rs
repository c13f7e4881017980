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

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use mcp_bridge::endpoint::ServerUser;
use mcp_bridge::{bridge, doctor, serve};

/// Largest `--max-connections` accepted: beyond it, the process and file
/// descriptor limits of any ordinary system run out first.
const MAX_MAX_CONNECTIONS: usize = 100_000;

/// Longest duration accepted in seconds (one day). Larger values are surely
/// a typo, and would overflow the timer's `Instant` arithmetic.
const MAX_SECONDS: f64 = 86_400.0;

/// The variable that names the traffic log when `--log` is not given: for
/// CLIs that pass an environment to the servers they spawn (Codex clears
/// it, hence the flag).
const LOG_ENV: &str = "MCP_BRIDGE_LOG";

/// What the user asked for.
#[derive(Debug)]
pub enum Command {
    /// Print the usage text on stdout.
    Help,
    /// Print the version line on stdout.
    Version,
    /// `mcp-server`: run the bridge, the job an MCP CLI spawns us for.
    Bridge(bridge::Config),
    /// `serve`: put a stdio MCP server behind an endpoint.
    Serve(serve::Config),
    /// `demo`: a self-contained demonstration session.
    Demo,
    /// `doctor`: check an endpoint as a CLI would use it.
    Doctor(Doctor),
}

/// What `doctor` checks, and how it reports.
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

fn error(message: impl Into<String>) -> Result<Command, UsageError> {
    Err(UsageError(message.into()))
}

/// The text printed by `--help`, kept in `usage.txt` where it reads as it
/// prints; the defaults are filled in from the library's constants.
pub fn usage() -> String {
    include_str!("usage.txt")
        .replace("{VERSION}", env!("CARGO_PKG_VERSION"))
        .replace(
            "{TIMEOUT}",
            &bridge::DEFAULT_CONNECT_TIMEOUT.as_secs().to_string(),
        )
        .replace("{MAX}", &serve::DEFAULT_MAX_CONNECTIONS.to_string())
        .replace(
            "{RECONNECT}",
            &bridge::DEFAULT_RECONNECT_TIMEOUT.as_secs().to_string(),
        )
        .replace(
            "{DOCTOR_TIMEOUT}",
            &doctor::DEFAULT_TIMEOUT.as_secs().to_string(),
        )
        .replace(
            "{LOG_MAX}",
            &(mcp_bridge::traffic_log::DEFAULT_MAX_FILE_BYTES >> 20).to_string(),
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

/// Parses the arguments after the program name (and `MCP_BRIDGE_LOG`).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    parse_with_env(args, std::env::var_os(LOG_ENV))
}

/// [`parse`], with the value of `MCP_BRIDGE_LOG` given rather than read.
fn parse_with_env(
    args: impl IntoIterator<Item = OsString>,
    env_log: Option<OsString>,
) -> Result<Command, UsageError> {
    // The flag wins; an empty variable means no log.
    let env_log = env_log.filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut args = Parser {
        args: args.into_iter(),
        inline: None,
    };
    match args.next()? {
        None => error("no command given"),
        Some(Arg::Option(name)) => match name.as_str() {
            "-h" | "--help" => args.no_value().map(|()| Command::Help),
            "-V" | "--version" => args.no_value().map(|()| Command::Version),
            _ => error(format!("unknown option '{}'", name)),
        },
        Some(Arg::Word(word)) => match word.to_str() {
            Some("help") => Ok(Command::Help),
            Some("mcp-server") => parse_bridge(args, env_log),
            Some("serve") => parse_serve(args, env_log),
            Some("doctor") => parse_doctor(args),
            Some("demo") => match args.next()? {
                None => Ok(Command::Demo),
                Some(arg) => arg.unexpected("demo"),
            },
            _ => error(format!(
                "unknown command '{}' (expected mcp-server, serve, doctor, demo or help)",
                word.to_string_lossy()
            )),
        },
    }
}

fn parse_bridge(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
) -> Result<Command, UsageError> {
    let mut endpoint = None;
    let mut project = None;
    let mut requester = None;
    let mut connect_timeout = None;
    let mut trusted_server = None;
    let mut reconnect_timeout = None;
    let mut no_reconnect = None;
    let mut log = None;
    while let Some(arg) = args.next()? {
        let name = match arg {
            Arg::Option(name) => name,
            word => return word.unexpected("mcp-server"),
        };
        match name.as_str() {
            "--endpoint" => once(&mut endpoint, &name, args.value(&name)?)?,
            "--project" => once(&mut project, &name, args.utf8(&name)?)?,
            "--requester" => once(&mut requester, &name, args.utf8(&name)?)?,
            "--connect-timeout" => once(&mut connect_timeout, &name, args.seconds(&name)?)?,
            "--trust-server-user" => once(&mut trusted_server, &name, args.server_user(&name)?)?,
            "--reconnect-timeout" => once(&mut reconnect_timeout, &name, args.seconds(&name)?)?,
            "--no-reconnect" => once(&mut no_reconnect, &name, args.no_value()?)?,
            "--log" => once(&mut log, &name, args.path(&name)?)?,
            "-h" | "--help" => return args.no_value().map(|()| Command::Help),
            _ => return error(format!("unknown option '{}'", name)),
        }
    }
    let mut config = bridge::Config::new(required_endpoint(endpoint)?);
    config.handshake.project = project.unwrap_or_default();
    config.handshake.requester = requester.unwrap_or_default();
    if let Some(timeout) = connect_timeout {
        config.connect_timeout = timeout;
    }
    config.trusted_server = trusted_server;
    config.reconnect = no_reconnect.is_none();
    if let Some(timeout) = reconnect_timeout {
        config.reconnect_timeout = timeout;
    }
    config.log = log.or(env_log);
    Ok(Command::Bridge(config))
}

fn parse_serve(
    mut args: Parser<impl Iterator<Item = OsString>>,
    env_log: Option<PathBuf>,
) -> Result<Command, UsageError> {
    let mut endpoint = None;
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
            "--max-connections" => once(&mut max_connections, &name, args.count(&name)?)?,
            "--log" => once(&mut log, &name, args.path(&name)?)?,
            "-h" | "--help" => return args.no_value().map(|()| Command::Help),
            _ => return error(format!("unknown option '{}'", name)),
        }
    }
    let endpoint = required_endpoint(endpoint)?;
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
    if let Some(max) = max_connections {
        config.max_connections = max;
    }
    config.log = log.or(env_log);
    Ok(Command::Serve(config))
}

fn parse_doctor(mut args: Parser<impl Iterator<Item = OsString>>) -> Result<Command, UsageError> {
    let mut endpoint = None;
    let mut project = None;
    let mut requester = None;
    let mut timeout = None;
    let mut json = false;
    while let Some(arg) = args.next()? {
        let name = match arg {
            Arg::Option(name) => name,
            word => return word.unexpected("doctor"),
        };
        match name.as_str() {
            "--endpoint" => once(&mut endpoint, &name, args.value(&name)?)?,
            "--project" => once(&mut project, &name, args.utf8(&name)?)?,
            "--requester" => once(&mut requester, &name, args.utf8(&name)?)?,
            "--timeout" => once(&mut timeout, &name, args.seconds(&name)?)?,
            "--json" => {
                args.no_value()?;
                if json {
                    return error("option '--json' given more than once");
                }
                json = true;
            }
            "-h" | "--help" => return args.no_value().map(|()| Command::Help),
            _ => return error(format!("unknown option '{}'", name)),
        }
    }
    let mut config = doctor::Config::new(required_endpoint(endpoint)?);
    config.handshake.project = project.unwrap_or_default();
    config.handshake.requester = requester.unwrap_or_default();
    if let Some(timeout) = timeout {
        config.timeout = timeout;
    }
    Ok(Command::Doctor(Doctor { config, json }))
}

/// One step through the arguments.
enum Arg {
    /// `-x`, `--name`, or the name of `--name=value` (whose value is kept
    /// for [`Parser::value`]).
    Option(String),
    /// Anything else: a subcommand, a positional argument, `-` or `--`.
    Word(OsString),
}

impl Arg {
    fn unexpected(self, command: &str) -> Result<Command, UsageError> {
        match self {
            Arg::Option(name) => error(format!("unknown option '{}'", name)),
            Arg::Word(word) => error(format!(
                "unexpected argument '{}' for '{}'",
                word.to_string_lossy(),
                command
            )),
        }
    }
}

struct Parser<I> {
    args: I,
    /// The value of a `--name=value` just returned, until taken.
    inline: Option<OsString>,
}

impl<I: Iterator<Item = OsString>> Parser<I> {
    fn next(&mut self) -> Result<Option<Arg>, UsageError> {
        // A `--name=value` whose option took no value.
        self.no_value()?;
        let arg = match self.args.next() {
            Some(arg) => arg,
            None => return Ok(None),
        };
        let (name, inline) = split_at_equals(&arg);
        let name = match name.to_str() {
            Some(name) if name.starts_with('-') && name != "-" && name != "--" => name.to_owned(),
            _ => return Ok(Some(Arg::Word(arg))),
        };
        self.inline = inline;
        Ok(Some(Arg::Option(name)))
    }

    /// Refuses a value given inline to an option that takes none
    /// (`--help=yes`), which would otherwise be silently ignored.
    fn no_value(&mut self) -> Result<(), UsageError> {
        match self.inline.take() {
            None => Ok(()),
            Some(value) => Err(UsageError(format!(
                "unexpected value '{}'",
                value.to_string_lossy()
            ))),
        }
    }

    /// The value of option `name`: inline after `=`, or the next argument
    /// (which may start with a dash).
    fn value(&mut self, name: &str) -> Result<OsString, UsageError> {
        match self.inline.take().or_else(|| self.args.next()) {
            Some(value) => Ok(value),
            None => Err(UsageError(format!("option '{}' needs a value", name))),
        }
    }

    /// A file path, which must not be empty (any OS path otherwise).
    fn path(&mut self, name: &str) -> Result<PathBuf, UsageError> {
        let value = self.value(name)?;
        if value.is_empty() {
            return Err(UsageError(format!("option '{}' must not be empty", name)));
        }
        Ok(PathBuf::from(value))
    }

    fn utf8(&mut self, name: &str) -> Result<String, UsageError> {
        self.value(name)?
            .into_string()
            .map_err(|_| UsageError(format!("the value of '{}' must be valid UTF-8", name)))
    }

    /// A number of seconds, more than 0 and at most [`MAX_SECONDS`].
    fn seconds(&mut self, name: &str) -> Result<Duration, UsageError> {
        let value = self.value(name)?;
        let text = value.to_string_lossy();
        let seconds: f64 = match text.trim().parse() {
            Ok(seconds) => seconds,
            Err(_) => {
                return Err(UsageError(format!(
                    "'{}' expects a number of seconds, got '{}'",
                    name, text
                )))
            }
        };
        // `!(x > 0)` also rejects NaN.
        if !(seconds > 0.0 && seconds <= MAX_SECONDS) {
            return Err(UsageError(format!(
                "'{}' must be more than 0 and at most {} seconds, got '{}'",
                name, MAX_SECONDS, text
            )));
        }
        Ok(Duration::from_secs_f64(seconds))
    }

    /// A uid (Unix) or SID (Windows).
    fn server_user(&mut self, name: &str) -> Result<ServerUser, UsageError> {
        let value = self.utf8(name)?;
        value
            .parse()
            .map_err(|e| UsageError(format!("'{}': {}", name, e)))
    }

    /// A whole number from 1 to [`MAX_MAX_CONNECTIONS`].
    fn count(&mut self, name: &str) -> Result<usize, UsageError> {
        let value = self.value(name)?;
        let text = value.to_string_lossy();
        match text.parse::<usize>() {
            Ok(n) if (1..=MAX_MAX_CONNECTIONS).contains(&n) => Ok(n),
            _ => Err(UsageError(format!(
                "'{}' expects a whole number from 1 to {}, got '{}'",
                name, MAX_MAX_CONNECTIONS, text
            ))),
        }
    }

    /// Everything not parsed yet, verbatim.
    fn rest(&mut self) -> impl Iterator<Item = OsString> + '_ {
        &mut self.args
    }
}

/// Stores an option's value, refusing a second one.
fn once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), UsageError> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(UsageError(format!(
            "option '{}' given more than once",
            name
        ))),
    }
}

fn required_endpoint(endpoint: Option<OsString>) -> Result<PathBuf, UsageError> {
    match endpoint {
        Some(endpoint) if !endpoint.is_empty() => Ok(PathBuf::from(endpoint)),
        Some(_) => Err(UsageError("option '--endpoint' must not be empty".into())),
        None => Err(UsageError(
            "missing required option '--endpoint <PATH>'".into(),
        )),
    }
}

/// Splits `--name=value` at the first `=`. Done on the platform's raw
/// representation (`OsStr` has no `split_once`), so a non-UTF-8 value such
/// as an endpoint path stays intact; the name before it is ASCII.
#[cfg(unix)]
fn split_at_equals(arg: &OsStr) -> (OsString, Option<OsString>) {
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
fn split_at_equals(arg: &OsStr) -> (OsString, Option<OsString>) {
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

    /// Parses as if `MCP_BRIDGE_LOG` were not set, whatever the test's
    /// own environment holds.
    fn parse_strs(args: &[&str]) -> Result<Command, UsageError> {
        parse_with_env(args.iter().map(OsString::from), None)
    }

    fn bridge(args: &[&str]) -> bridge::Config {
        match parse_strs(&[&["mcp-server"], args].concat()) {
            Ok(Command::Bridge(config)) => config,
            other => panic!("expected mcp-server, got {:?}", other),
        }
    }

    fn serve(args: &[&str]) -> serve::Config {
        match parse_strs(&[&["serve"], args].concat()) {
            Ok(Command::Serve(config)) => config,
            other => panic!("expected serve, got {:?}", other),
        }
    }

    /// Every mistake, and the start of the one line that names it.
    #[rustfmt::skip]
    const MISTAKES: &[(&[&str], &str)] = &[
        (&[], "no command given"),
        (&["serve-me"], "unknown command 'serve-me'"),
        (&["--bogus"], "unknown option '--bogus'"),
        (&["--help=yes"], "unexpected value 'yes'"),
        (&["demo", "now"], "unexpected argument 'now' for 'demo'"),
        (&["demo", "-x"], "unknown option '-x'"),
        (&["mcp-server", "--project", "p"], "missing required option '--endpoint <PATH>'"),
        (&["mcp-server", "--endpoint="], "option '--endpoint' must not be empty"),
        (&["mcp-server", "--endpoint"], "option '--endpoint' needs a value"),
        (&["mcp-server", "--endpoint=/x", "--project"], "option '--project' needs a value"),
        (&["mcp-server", "--endpoint=/x", "--requester"], "option '--requester' needs a value"),
        (&["mcp-server", "--endpoint=/x", "--connect-timeout"], "option '--connect-timeout' needs a value"),
        (&["mcp-server", "--endpoint", "/x", "--bogus"], "unknown option '--bogus'"),
        (&["mcp-server", "-x"], "unknown option '-x'"),
        (&["mcp-server", "--endpoint", "/x", "--endpoint=/y"], "option '--endpoint' given more than once"),
        (&["mcp-server", "--endpoint=/x", "--project=a", "--project", "a"], "option '--project' given more than once"),
        (&["mcp-server", "--endpoint", "/x", "extra"], "unexpected argument 'extra' for 'mcp-server'"),
        (&["mcp-server", "--", "--endpoint", "/x"], "unexpected argument '--' for 'mcp-server'"),
        (&["mcp-server", "--help=yes"], "unexpected value 'yes'"),
        (&["mcp-server", "--endpoint=/x", "--connect-timeout", "soon"], "'--connect-timeout' expects a number of seconds, got 'soon'"),
        (&["mcp-server", "--endpoint=/x", "--connect-timeout=0"], "'--connect-timeout' must be more than 0 and at most 86400 seconds, got '0'"),
        (&["mcp-server", "--endpoint=/x", "--trust-server-user"], "option '--trust-server-user' needs a value"),
        (&["mcp-server", "--endpoint=/x", "--no-reconnect=yes"], "unexpected value 'yes'"),
        (&["mcp-server", "--endpoint=/x", "--no-reconnect", "--no-reconnect"], "option '--no-reconnect' given more than once"),
        (&["mcp-server", "--endpoint=/x", "--reconnect-timeout=-1"], "'--reconnect-timeout' must be more than 0"),
        (&["mcp-server", "--endpoint=/x", "--trust-server-user=1", "--trust-server-user=2"], "option '--trust-server-user' given more than once"),
        (&["serve", "--", "cat"], "missing required option '--endpoint <PATH>'"),
        (&["serve", "--endpoint=", "--", "cat"], "option '--endpoint' must not be empty"),
        (&["serve", "--endpoint", "/x"], "missing the command to serve"),
        (&["serve", "--endpoint", "/x", "--"], "missing the command to serve"),
        (&["serve", "--endpoint", "/x", "--", ""], "the command after '--' must not be empty"),
        (&["serve", "--endpoint", "/x", "cat"], "unexpected argument 'cat' for 'serve' (the command goes after '--')"),
        (&["serve", "--endpoint"], "option '--endpoint' needs a value"),
        (&["serve", "--max-connections"], "option '--max-connections' needs a value"),
        (&["serve", "--endpoint", "/x", "--project", "p", "--", "cat"], "unknown option '--project'"),
        (&["serve", "--endpoint", "/x", "--endpoint", "/y", "--", "cat"], "option '--endpoint' given more than once"),
        (&["serve", "--endpoint=/x", "--max-connections=2", "--max-connections=2", "--", "cat"], "option '--max-connections' given more than once"),
        (&["mcp-server", "--endpoint=/x", "--log"], "option '--log' needs a value"),
        (&["mcp-server", "--endpoint=/x", "--log="], "option '--log' must not be empty"),
        (&["mcp-server", "--endpoint=/x", "--log=a", "--log=b"], "option '--log' given more than once"),
        (&["serve", "--endpoint=/x", "--log", "", "--", "cat"], "option '--log' must not be empty"),
        (&["doctor"], "missing required option '--endpoint <PATH>'"),
        (&["doctor", "--endpoint=/x", "--json=yes"], "unexpected value 'yes'"),
        (&["doctor", "--endpoint=/x", "--json", "--json"], "option '--json' given more than once"),
        (&["doctor", "--endpoint=/x", "--timeout=0"], "'--timeout' must be more than 0"),
        (&["doctor", "--endpoint=/x", "--connect-timeout=1"], "unknown option '--connect-timeout'"),
        (&["doctor", "--endpoint=/x", "now"], "unexpected argument 'now' for 'doctor'"),
    ];

    #[test]
    fn each_mistake_gets_its_own_message() {
        for (args, expected) in MISTAKES {
            match parse_strs(args) {
                Err(e) => assert!(
                    e.to_string().starts_with(expected),
                    "{:?}: got '{}'",
                    args,
                    e
                ),
                Ok(command) => panic!("{:?}: expected an error, got {:?}", args, command),
            }
        }
    }

    #[test]
    #[rustfmt::skip]
    fn bad_numbers_name_their_option() {
        for bad in ["soon", "", "1s", "-1", "0", "NaN", "inf", "1e12"] {
            let e = parse_strs(&["mcp-server", "--endpoint=/x", "--connect-timeout", bad]).unwrap_err();
            assert!(e.to_string().contains("'--connect-timeout'"), "{}: {}", bad, e);
        }
        for bad in ["0", "-1", "", "many", "1.5", "100001", "99999999999999999999999"] {
            let e = parse_strs(&["serve", "--endpoint=/x", "--max-connections", bad, "--", "cat"]).unwrap_err();
            assert!(e.to_string().contains("'--max-connections' expects"), "{}: {}", bad, e);
        }
    }

    #[test]
    fn bridge_options_space_separated_or_inline() {
        #[rustfmt::skip]
        let spaced = bridge(&["--endpoint", "/tmp/x.sock", "--project", "p1", "--requester", "agent-7", "--connect-timeout", "2.5"]);
        assert_eq!(spaced.endpoint, PathBuf::from("/tmp/x.sock"));
        assert_eq!(spaced.handshake.project, "p1");
        assert_eq!(spaced.handshake.requester, "agent-7");
        assert_eq!(spaced.connect_timeout, Duration::from_millis(2500));

        #[rustfmt::skip]
        let inline = bridge(&["--endpoint=/tmp/x.sock", "--project=p=1", "--requester=", "--connect-timeout=3"]);
        assert_eq!(inline.handshake.project, "p=1", "only the first '=' splits");
        assert_eq!(inline.handshake.requester, "");
        assert_eq!(inline.connect_timeout, Duration::from_secs(3));

        #[cfg(unix)]
        assert_eq!(
            bridge(&["--endpoint=/x", "--trust-server-user", "1000"]).trusted_server,
            Some("1000".parse().unwrap())
        );
        #[cfg(unix)]
        assert!(
            parse_strs(&["mcp-server", "--endpoint=/x", "--trust-server-user=bob"])
                .unwrap_err()
                .to_string()
                .contains("not a uid")
        );

        let plain = bridge(&[
            "--endpoint=/x",
            "--no-reconnect",
            "--reconnect-timeout",
            "2",
        ]);
        assert!(!plain.reconnect);
        assert_eq!(plain.reconnect_timeout, Duration::from_secs(2));
        assert!(
            bridge(&["--endpoint=/x"]).reconnect,
            "survives the app by default"
        );

        let dashed = bridge(&["--endpoint", "/x", "--project", "-p"]);
        assert_eq!(
            dashed.handshake.project, "-p",
            "a value may start with a dash"
        );
    }

    #[test]
    fn bridge_defaults_come_from_the_library() {
        let config = bridge(&["--endpoint", "/x"]);
        assert_eq!(config, bridge::Config::new("/x"));
    }

    #[cfg(unix)]
    #[test]
    fn endpoint_may_be_non_utf8_but_ids_may_not() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let path = OsString::from_vec(b"/tmp/\xff\xfe.sock".to_vec());
        let mut inline = OsString::from("--endpoint=");
        inline.push(&path);
        for args in [vec!["--endpoint".into(), path.clone()], vec![inline]] {
            match parse_with_env([vec![OsString::from("mcp-server")], args].concat(), None) {
                Ok(Command::Bridge(c)) => {
                    assert_eq!(c.endpoint.as_os_str().as_bytes(), path.as_bytes())
                }
                other => panic!("{:?}", other),
            }
        }
        let bad = OsString::from_vec(b"\xff".to_vec());
        let args = vec![
            "mcp-server".into(),
            "--endpoint=/x".into(),
            "--project".into(),
            bad,
        ];
        let e = parse_with_env(args, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the value of '--project' must be valid UTF-8"
        );
    }

    #[test]
    #[rustfmt::skip]
    fn help_version_and_demo() {
        for args in [&["-h"][..], &["--help"], &["help"], &["mcp-server", "--help"], &["serve", "-h"]] {
            assert!(matches!(parse_strs(args), Ok(Command::Help)), "{:?}", args);
        }
        for args in [&["-V"][..], &["--version"]] {
            assert!(matches!(parse_strs(args), Ok(Command::Version)), "{:?}", args);
        }
        assert!(matches!(parse_strs(&["demo"]), Ok(Command::Demo)));
    }

    #[test]
    fn serve_takes_everything_after_the_separator() {
        #[rustfmt::skip]
        let config = serve(&["--endpoint", "/s.sock", "--max-connections=3", "--", "srv", "--endpoint", "--", "-x"]);
        assert_eq!(config.endpoint, PathBuf::from("/s.sock"));
        assert_eq!(config.max_connections, 3);
        assert_eq!(config.program, OsString::from("srv"));
        assert_eq!(config.args, ["--endpoint", "--", "-x"]);
        assert_eq!(
            serve(&["--endpoint=/x", "--", "cat"]),
            serve::Config::new("/x", "cat", [""; 0])
        );
    }

    /// The flag first, because Codex clears the environment of the servers
    /// it spawns; the variable for CLIs that pass one.
    #[test]
    fn the_log_flag_wins_over_the_variable() {
        let with_env = |args: &[&str], env: Option<&str>| {
            parse_with_env(args.iter().map(OsString::from), env.map(OsString::from)).unwrap()
        };
        let bridge_log = |command| match command {
            Command::Bridge(config) => config.log,
            other => panic!("{:?}", other),
        };
        let serve_log = |command| match command {
            Command::Serve(config) => config.log,
            other => panic!("{:?}", other),
        };
        let flagged = ["mcp-server", "--endpoint=/x", "--log", "/tmp/flag.log"];
        assert_eq!(
            bridge_log(with_env(&flagged, Some("/tmp/env.log"))),
            Some(PathBuf::from("/tmp/flag.log"))
        );
        let bare = ["mcp-server", "--endpoint=/x"];
        assert_eq!(
            bridge_log(with_env(&bare, Some("/tmp/env.log"))),
            Some(PathBuf::from("/tmp/env.log"))
        );
        assert_eq!(bridge_log(with_env(&bare, Some(""))), None);
        assert_eq!(bridge_log(with_env(&bare, None)), None);
        let serve_args = ["serve", "--endpoint=/x", "--log=/tmp/s.log", "--", "cat"];
        assert_eq!(
            serve_log(with_env(&serve_args, Some("/tmp/env.log"))),
            Some(PathBuf::from("/tmp/s.log"))
        );
        let serve_bare = ["serve", "--endpoint=/x", "--", "cat", "--log", "/y"];
        assert_eq!(
            serve_log(with_env(&serve_bare, Some("/tmp/env.log"))),
            Some(PathBuf::from("/tmp/env.log")),
            "a --log after '--' is the command's"
        );
    }

    #[test]
    fn doctor_options() {
        #[rustfmt::skip]
        let parsed = parse_strs(&["doctor", "--endpoint", "/s.sock", "--project=p", "--requester", "r", "--json", "--timeout", "2.5"]);
        match parsed {
            Ok(Command::Doctor(Doctor { config, json })) => {
                assert_eq!(config.endpoint, PathBuf::from("/s.sock"));
                assert_eq!(config.handshake.project, "p");
                assert_eq!(config.handshake.requester, "r");
                assert_eq!(config.timeout, Duration::from_millis(2500));
                assert!(json);
            }
            other => panic!("{:?}", other),
        }
        match parse_strs(&["doctor", "--endpoint=/x"]) {
            Ok(Command::Doctor(Doctor { config, json })) => {
                assert_eq!(config, doctor::Config::new("/x"));
                assert!(!json);
            }
            other => panic!("{:?}", other),
        }
    }

    #[test]
    fn usage_mentions_every_option_and_exit_code() {
        let text = usage();
        #[rustfmt::skip]
        let needles = ["--endpoint", "--project", "--requester", "--connect-timeout", "--max-connections", "--trust-server-user", "--no-reconnect", "--reconnect-timeout",
            "EXIT STATUS", "demo", "serve", "MCP_BRIDGE_PROJECT", "MCP_BRIDGE_REQUESTER",
            "--log", "MCP_BRIDGE_LOG", "MCP_BRIDGE_LOG_MAX_BYTES", "doctor", "--json", "--timeout"];
        for needle in needles {
            assert!(text.contains(needle), "usage lacks {}", needle);
        }
        for placeholder in [
            "{VERSION}",
            "{TIMEOUT}",
            "{MAX}",
            "{RECONNECT}",
            "{DOCTOR_TIMEOUT}",
            "{LOG_MAX}",
        ] {
            assert!(!text.contains(placeholder), "{} left unfilled", placeholder);
        }
    }
}
