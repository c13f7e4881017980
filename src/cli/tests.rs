//! The command line's tests: every mistake in one table, and each
//! option's parsing.

use std::time::Duration;

use super::*;

/// Parses as if `MCP_BRIDGE_LOG` were not set, whatever the test's
/// own environment holds.
fn parse_strs(args: &[&str]) -> Result<Command, UsageError> {
    parse_with_env(args.iter().map(OsString::from), None, told)
}

/// The handshake of what the command line says and nothing learned (the
/// identity module's own tests cover the learning).
fn told(project: Option<String>, requester: Option<String>) -> Handshake {
    Handshake::new(project.unwrap_or_default(), requester.unwrap_or_default())
}

fn bridge(args: &[&str]) -> bridge::Config {
    match parse_strs(&[&["mcp-server"], args].concat()) {
        Ok(Command::Bridge(config)) => config,
        other => panic!("expected mcp-server, got {:?}", other),
    }
}

#[cfg(feature = "serve")]
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
    (&["mcp-server", "--project", "p"], "missing required option '--endpoint <PATH>' (or '--app <NAME>')"),
    (&["mcp-server", "--app"], "option '--app' needs a value"),
    (&["mcp-server", "--app="], "'--app': the app name is empty"),
    (&["mcp-server", "--app", "my/app"], "'--app': the app name \"my/app\" contains '/'"),
    (&["mcp-server", "--app", "..", "--project=p"], "'--app': the app name \"..\" must start with a letter or digit"),
    (&["mcp-server", "--app=a", "--app=b"], "option '--app' given more than once"),
    (&["mcp-server", "--app=a", "--endpoint=/x"], "options '--endpoint' and '--app' cannot be used together"),
    (&["mcp-server", "--endpoint=/x", "--app=a"], "options '--endpoint' and '--app' cannot be used together"),
    (&["serve", "--app=a", "--endpoint=/x", "--", "cat"], "options '--endpoint' and '--app' cannot be used together"),
    (&["serve", "--app=my app", "--", "cat"], "'--app': the app name \"my app\" contains ' '"),
    (&["doctor", "--app=a", "--endpoint=/x"], "options '--endpoint' and '--app' cannot be used together"),
    (&["doctor", "--app", "a\tb"], "'--app': the app name \"a\\tb\" contains '\\t' (a control character)"),
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
    (&["doctor", "--endpoint=/x", "--max-connections=1"], "unknown option '--max-connections'"),
    (&["doctor", "--endpoint=/x", "--no-reconnect", "--no-reconnect"], "option '--no-reconnect' given more than once"),
    (&["doctor", "--endpoint=/x", "--connect-timeout=0"], "'--connect-timeout' must be more than 0"),
    (&["doctor", "--endpoint=/x", "--trust-server-user=me"], "'--trust-server-user': "),
    (&["doctor", "--endpoint=/x", "--log="], "option '--log' must not be empty"),
    (&["doctor", "--endpoint=/x", "now"], "unexpected argument 'now' for 'doctor'"),
    (&["doctor", "--endpoint=/x", "--cache-dir="], "option '--cache-dir' must not be empty"),
    (&["doctor", "--endpoint=/x", "--no-cache", "--cache-dir=/c"], "--cache-dir and --no-cache cannot be used together"),
    (&["mcp-server", "--endpoint=/x", "--cache-dir=/c", "--no-cache"], "--cache-dir and --no-cache cannot be used together"),
    (&["mcp-server", "--endpoint=/x", "--json"], "unknown option '--json'"),
    (&["mcp-server", "--endpoint=/x", "--timeout=1"], "unknown option '--timeout'"),
];

#[test]
fn each_mistake_gets_its_own_message() {
    for (args, expected) in MISTAKES {
        if args.first().map_or(false, |c| left_out_of_this_build(c)) {
            continue; // tested by commands_left_out_of_the_build_say_so
        }
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
    #[cfg(feature = "serve")]
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

    #[cfg(unix)]
    let user = "--trust-server-user=1";
    #[cfg(windows)]
    let user = "--trust-server-user=S-1-5-18";
    let twice = parse_strs(&["mcp-server", "--endpoint=/x", user, user]).unwrap_err();
    assert_eq!(
        twice.to_string(),
        "option '--trust-server-user' given more than once"
    );

    let dashed = bridge(&["--endpoint", "/x", "--project", "-p"]);
    assert_eq!(
        dashed.handshake.project, "-p",
        "a value may start with a dash"
    );
}

/// `--app` stands for the endpoint its rule names, for each command, and
/// the commands that send a handshake make it through the identity
/// function (here one that learns nothing).
#[test]
fn app_names_the_endpoint_for_every_command() {
    let endpoint = mcp_bridge::endpoint::for_app("myapp").unwrap();
    let config = bridge(&["--app", "myapp"]);
    assert_eq!(config, bridge::Config::new(&endpoint));
    #[cfg(unix)]
    assert!(
        endpoint.ends_with("myapp/mcp.sock"),
        "{}",
        endpoint.display()
    );
    #[cfg(windows)]
    assert!(endpoint
        .to_string_lossy()
        .starts_with(r"\\.\pipe\myapp-S-1-"));
    #[cfg(feature = "serve")]
    {
        let config = serve(&["--app=myapp", "--", "cat"]);
        assert_eq!(config.endpoint, endpoint);
        assert_eq!(config.app.as_deref(), Some("myapp"));
    }
    #[cfg(feature = "doctor")]
    match parse_strs(&["doctor", "--app", "myapp", "--requester=r"]) {
        Ok(Command::Doctor { config, .. }) => {
            assert_eq!(config.endpoint, endpoint);
            assert_eq!(config.app.as_deref(), Some("myapp"));
            assert_eq!(config.handshake, Handshake::new("", "r"));
        }
        other => panic!("{:?}", other),
    }
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
        match parse_with_env(
            [vec![OsString::from("mcp-server")], args].concat(),
            None,
            told,
        ) {
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
    let e = parse_with_env(args, None, told).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the value of '--project' must be valid UTF-8"
    );
}

#[test]
#[rustfmt::skip]
fn help_version_and_demo() {
    for args in [&["-h"][..], &["--help"], &["help"], &["mcp-server", "--help"]] {
        assert!(matches!(parse_strs(args), Ok(Command::Help)), "{:?}", args);
    }
    #[cfg(feature = "serve")]
    assert!(matches!(parse_strs(&["serve", "-h"]), Ok(Command::Help)));
    #[cfg(feature = "doctor")]
    assert!(matches!(parse_strs(&["doctor", "--endpoint=/x", "-h"]), Ok(Command::Help)));
    for args in [&["-V"][..], &["--version"]] {
        assert!(matches!(parse_strs(args), Ok(Command::Version)), "{:?}", args);
    }
    #[cfg(feature = "demo")]
    assert!(matches!(parse_strs(&["demo"]), Ok(Command::Demo)));
}

#[test]
#[cfg(feature = "serve")]
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
        parse_with_env(
            args.iter().map(OsString::from),
            env.map(OsString::from),
            told,
        )
        .unwrap()
    };
    let bridge_log = |command| match command {
        Command::Bridge(config) => config.log,
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
    #[cfg(feature = "serve")]
    the_serve_log_flag_wins_over_the_variable(with_env);
}

#[cfg(feature = "serve")]
fn the_serve_log_flag_wins_over_the_variable(with_env: impl Fn(&[&str], Option<&str>) -> Command) {
    let serve_log = |command| match command {
        Command::Serve(config) => config.log,
        other => panic!("{:?}", other),
    };
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
#[cfg(feature = "doctor")]
fn doctor_options() {
    #[rustfmt::skip]
    let parsed = parse_strs(&["doctor", "--endpoint", "/s.sock", "--project=p", "--requester", "r", "--json", "--timeout", "2.5"]);
    match parsed {
        Ok(Command::Doctor { config, json }) => {
            assert_eq!(config.endpoint, PathBuf::from("/s.sock"));
            assert_eq!(config.handshake.project, "p");
            assert_eq!(config.handshake.requester, "r");
            assert_eq!(config.timeout, Duration::from_millis(2500));
            assert!(json);
        }
        other => panic!("{:?}", other),
    }
    match parse_strs(&["doctor", "--endpoint=/x"]) {
        Ok(Command::Doctor { config, json }) => {
            assert_eq!(config, doctor::Config::new("/x"));
            assert!(!json);
        }
        other => panic!("{:?}", other),
    }
}

/// `mcp-server`'s whole command line, with `doctor` in its place, parses
/// into the same settings (issue 20: a user swaps the word in the line
/// they configured).
#[test]
#[cfg(feature = "doctor")]
fn doctor_takes_every_mcp_server_option() {
    // A user each platform parses: a uid, or a SID on Windows.
    #[cfg(unix)]
    const TRUSTED: &str = "1234";
    #[cfg(windows)]
    const TRUSTED: &str = "S-1-5-18";
    #[rustfmt::skip]
    let line = ["--endpoint", "/s.sock", "--project", "p", "--requester", "r", "--connect-timeout", "3",
        "--reconnect-timeout=7.5", "--no-reconnect", "--trust-server-user", TRUSTED, "--log", "/tmp/b.log",
        "--cache-dir", "/tmp/cache"];
    let bridge = bridge(&line);
    let doctor = |line: &[&str]| match parse_strs(&[&["doctor"], line].concat()) {
        Ok(Command::Doctor { config, .. }) => config,
        other => panic!("expected doctor, got {:?}", other),
    };
    let config = doctor(&line);
    // The cache is the bridge's alone (doctor asks the app itself), but
    // doctor keeps the options, to name them and to paste them.
    assert_eq!(bridge.cache, Some(PathBuf::from("/tmp/cache")));
    assert_eq!(config.cache_dir, Some(PathBuf::from("/tmp/cache")));
    let mut no_cache = doctor::Config::new("/x");
    no_cache.no_cache = true;
    assert_eq!(doctor(&["--endpoint=/x", "--no-cache"]), no_cache);
    assert_eq!(config.endpoint, bridge.endpoint);
    assert_eq!(config.handshake, bridge.handshake);
    assert_eq!(config.connect_timeout, Some(bridge.connect_timeout));
    assert_eq!(config.reconnect_timeout, Some(bridge.reconnect_timeout));
    assert_eq!(config.reconnect, bridge.reconnect);
    assert!(!config.reconnect);
    assert_eq!(config.trusted_server, bridge.trusted_server);
    assert!(config.trusted_server.is_some());
    assert_eq!(config.log, bridge.log);

    let with_env = |args: &[&str]| match parse_with_env(
        args.iter().map(OsString::from),
        Some(OsString::from("/tmp/env.log")),
        told,
    ) {
        Ok(Command::Doctor { config, .. }) => config.log,
        other => panic!("expected doctor, got {:?}", other),
    };
    assert_eq!(
        with_env(&["doctor", "--endpoint=/x"]),
        Some(PathBuf::from("/tmp/env.log"))
    );
    assert_eq!(
        with_env(&["doctor", "--endpoint=/x", "--log=/tmp/flag.log"]),
        Some(PathBuf::from("/tmp/flag.log")),
        "the flag wins"
    );
}

/// `build.rs`'s text is the templates filled in from the library's own
/// defaults (it writes their values down; this is where they must agree).
#[test]
fn usage_is_the_template_filled_in() {
    assert_eq!(usage(), usage::usage_from_the_constants());
}

#[test]
#[cfg(all(feature = "serve", feature = "doctor", feature = "demo"))]
fn usage_mentions_every_option_and_exit_code() {
    let text = usage();
    #[rustfmt::skip]
    let needles = ["--endpoint", "--project", "--requester", "--connect-timeout", "--max-connections", "--trust-server-user", "--no-reconnect", "--reconnect-timeout",
        "EXIT STATUS", "demo", "serve", "MCP_BRIDGE_PROJECT", "MCP_BRIDGE_REQUESTER", "--app", "CLAUDE_PROJECT_DIR", "CLAUDE_CODE_SESSION_ID",
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

/// A command this build was made without is named as such, not as a typo.
#[test]
fn commands_left_out_of_the_build_say_so() {
    for (command, built) in [
        ("serve", cfg!(feature = "serve")),
        ("doctor", cfg!(feature = "doctor")),
        ("demo", cfg!(feature = "demo")),
    ] {
        assert_eq!(left_out_of_this_build(command), !built, "{}", command);
        if !built {
            let e = parse_strs(&[command, "--endpoint=/x"])
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!(
                    "'{}' is not in this build of mcp-bridge (built without the '{}' feature)",
                    command, command
                )
            );
        }
    }
    assert!(!left_out_of_this_build("mcp-server"));
}

/// Timeouts are read as decimals in whole numbers, to the nanosecond.
#[test]
#[rustfmt::skip]
fn seconds_are_decimals() {
    for (text, expected) in [
        ("30", Duration::from_secs(30)), ("2.5", Duration::from_millis(2500)),
        (".25", Duration::from_millis(250)), ("7.", Duration::from_secs(7)),
        ("0.000000001", Duration::from_nanos(1)), ("0.0000000019", Duration::from_nanos(1)),
        ("1.123456789", Duration::new(1, 123_456_789)), ("86400", Duration::from_secs(86_400)),
        ("007", Duration::from_secs(7)), ("+3", Duration::from_secs(3)),
    ] {
        let config = bridge(&["--endpoint=/x", "--connect-timeout", text]);
        assert_eq!(config.connect_timeout, expected, "{}", text);
    }
    for bad in [".", "1.2.3", "1,5", "0x10", "1e3", " ", "-", "1 2", "18446744073709551616"] {
        assert_eq!(args::decimal_seconds(bad), None, "{:?}", bad);
    }
    for out_of_range in ["86400.000000001", "0.0000000001", "-0.5", "-0", "18446744073709551615"] {
        let e = parse_strs(&["mcp-server", "--endpoint=/x", "--connect-timeout", out_of_range]).unwrap_err();
        assert!(e.to_string().contains("must be more than 0 and at most 86400 seconds"), "{}: {}", out_of_range, e);
    }
}

/// `--version` names the build by the features it was built with, as
/// Cargo.toml names them.
#[test]
fn version_names_the_build() {
    let features = [
        ("serve", cfg!(feature = "serve")),
        ("host", cfg!(feature = "host")),
        ("doctor", cfg!(feature = "doctor")),
        ("demo", cfg!(feature = "demo")),
        ("app-server", cfg!(feature = "app-server")),
        ("log", cfg!(feature = "log")),
    ];
    // Every feature of Cargo.toml is in that list (`default` has them all).
    let manifest = include_str!("../../Cargo.toml");
    let default = manifest
        .lines()
        .find_map(|line| line.strip_prefix("default = ["))
        .expect("Cargo.toml's default features");
    let mut in_cargo_toml: Vec<&str> = default
        .trim_end_matches(']')
        .split(',')
        .map(|name| name.trim().trim_matches('"'))
        .collect();
    let mut known: Vec<&str> = features.iter().map(|f| f.0).collect();
    in_cargo_toml.sort_unstable();
    known.sort_unstable();
    assert_eq!(known, in_cargo_toml);

    let on: Vec<&str> = features.iter().filter(|f| f.1).map(|f| f.0).collect();
    let build = match on.len() {
        0 => "bridge-only".to_string(),
        6 => "full".to_string(),
        _ => format!("features: {}", on.join(",")),
    };
    let line = version_line()
        .strip_suffix('\n')
        .expect("the line ends with its newline");
    assert!(
        line.ends_with(&format!(", {})", build)),
        "{} should name the build {}",
        line,
        build
    );
    assert!(line.contains(env!("MCP_BRIDGE_TARGET")), "{}", line);
}

/// The library's words name the fault, never one of `mcp-server`'s flags
/// (see `hint.rs`): its messages also reach apps that call it with no such
/// options, and MCP clients in the bridge's errors. Every line of code
/// outside the binary's own files (the command line, `main.rs`, and the
/// doctor and the demo, which speak in the options) is checked for a flag
/// of the usage text; comments may name them. (The sources are the same on
/// every platform: read once, where the tree's paths are the build's.)
#[cfg(unix)]
#[test]
fn the_library_names_no_flag_of_the_binary() {
    let usage = include_str!("usage_full.txt");
    let mut flags: Vec<&str> = usage
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| word.len() > 2 && word.starts_with("--"))
        .collect();
    flags.sort_unstable();
    flags.dedup();
    assert!(flags.contains(&"--no-cache"), "{:?}", flags);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let binarys = ["cli", "main.rs", "doctor", "demo.rs"];
    let mut found = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if dir == src && binarys.contains(&name.as_str()) {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            // Tests speak to the binary too.
            if !name.ends_with(".rs") || name == "tests.rs" || name == "sim.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let named = flags.iter().find(|flag| {
                    code.match_indices(**flag).any(|(at, _)| {
                        let next = code[at + flag.len()..].chars().next();
                        !next.map_or(false, |c| c.is_ascii_alphanumeric() || c == '-')
                    })
                });
                if let Some(flag) = named {
                    found.push(format!(
                        "{}:{}: {} in {}",
                        path.display(),
                        n + 1,
                        flag,
                        code
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "library code naming a flag:\n{}",
        found.join("\n")
    );
}
