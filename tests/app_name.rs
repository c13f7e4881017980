//! `--app <NAME>` and the identity learned from the CLI, through the built
//! binary: `serve --app` (and the library's `Listener::bind_app`) and
//! `mcp-server --app` meet on the endpoint the rule names, in the runtime
//! directory and in its fallback; a runtime directory that is not the
//! user's own is passed over, and the host will not bind in an app
//! directory someone else could write; bad names are usage errors; what
//! the CLI passes reaches serve's command, and given options win over it.
//! The Windows rule is tested in `tests/windows.rs`.
#![cfg(unix)]

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::{TempDir, BIN};

/// The variables the endpoint rule and the identity read. Each test sets
/// the ones it means, so the test's own environment (a CI job run from an
/// MCP CLI, say) cannot leak in.
const RULE_AND_IDENTITY: &[&str] = &[
    "XDG_RUNTIME_DIR",
    "TMPDIR",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_CODE_SESSION_ID",
    "MCP_BRIDGE_PROJECT_FROM",
    "MCP_BRIDGE_REQUESTER_FROM",
];

/// An app name no other test, or test run, uses (well within 32 bytes).
fn app_name(tag: &str) -> String {
    format!("t{}-{}", std::process::id(), tag)
}

/// `command` with [`RULE_AND_IDENTITY`] cleared, and `runtime` as the
/// user's runtime directory if given (`XDG_RUNTIME_DIR`, and `TMPDIR`,
/// which is what the rule reads on macOS).
fn clean<'a>(command: &'a mut Command, runtime: Option<&Path>) -> &'a mut Command {
    for var in RULE_AND_IDENTITY {
        command.env_remove(var);
    }
    if let Some(dir) = runtime {
        command.env("XDG_RUNTIME_DIR", dir).env("TMPDIR", dir);
    }
    command
}

/// The rule of docs/handshake.md for a user with neither `XDG_RUNTIME_DIR`
/// nor `TMPDIR`, written again here from the page rather than taken from
/// the library: `/run/user/<uid>` if it is theirs (not on macOS), else
/// `/tmp/mcp-bridge-<uid>`.
fn base_without_variables() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    let run = PathBuf::from(format!("/run/user/{}", uid));
    let theirs = fs::symlink_metadata(&run).map_or(false, |m| {
        m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0
    });
    if theirs && !cfg!(target_os = "macos") {
        run
    } else {
        PathBuf::from(format!("/tmp/mcp-bridge-{}", uid))
    }
}

/// Runs `bridge` (a plain relay, see [`bridge`]) to its end, its stdin
/// piped and held open so that only the app can end it, and checks that it
/// exits 0; returns its first stdout line and its stderr.
#[cfg(any(feature = "serve", feature = "host"))]
fn first_line(mut bridge: Command) -> (String, String) {
    let mut child = bridge
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let out = support::wait_output(child, "the bridge");
    drop(stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout, stderr);
    (stdout.lines().next().unwrap_or("").to_string(), stderr)
}

/// `mcp-bridge mcp-server --app <app> --no-reconnect <extra>`: the plain
/// relay, which ends when the app hangs up.
fn bridge(app: &str, runtime: Option<&Path>, extra: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    clean(&mut command, runtime)
        .args(["mcp-server", "--app", app, "--no-reconnect"])
        .args(extra);
    command
}

#[cfg(feature = "serve")]
mod serve {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::fs::PermissionsExt;
    use support::{serve_program, Serve, Stderr};

    /// A command that says what serve told it (`given` for an origin
    /// left empty), then ends, which ends the connection, and the plain
    /// relay with it.
    const SAY_WHO: &str = "echo \"$MCP_BRIDGE_PROJECT|$MCP_BRIDGE_REQUESTER|\
        ${MCP_BRIDGE_PROJECT_FROM:-given}|${MCP_BRIDGE_REQUESTER_FROM:-given}\"";

    /// `serve --app <app> -- sh -c SAY_WHO`, once the socket is there.
    fn serve_app(app: &str, runtime: Option<&Path>, socket: &Path) -> Serve {
        let mut program = serve_program(None);
        clean(&mut program, runtime);
        let named = [OsStr::new("--app"), OsStr::new(app)];
        let command = ["sh", "-c", SAY_WHO];
        Serve::launch_named(program, &named, socket, &[], &command, Stderr::Collected)
    }

    /// The case: the same line for serve and the bridge, under a
    /// runtime directory of the user's own; the app's directory is made
    /// owner-only, and what the CLI passed (Claude Code's variables) is
    /// the identity serve's command sees, with where it came from.
    #[test]
    fn serve_and_the_bridge_meet_in_the_runtime_directory() {
        let runtime = TempDir::new("app-run", 0o700);
        let app = app_name("run");
        let socket = runtime.0.join(&app).join("mcp.sock");
        let serve = serve_app(&app, Some(&runtime.0), &socket);
        let dir = fs::metadata(socket.parent().unwrap()).unwrap();
        assert_eq!(dir.mode() & 0o777, 0o700);
        assert!(serve.stderr().contains(&socket.display().to_string()));

        let mut cli = bridge(&app, Some(&runtime.0), &[]);
        cli.env("CLAUDE_PROJECT_DIR", "/home/ana/shop")
            .env("CLAUDE_CODE_SESSION_ID", "5f1c-session");
        let (line, _) = first_line(cli);
        assert_eq!(
            line,
            "/home/ana/shop|5f1c-session|CLAUDE_PROJECT_DIR|CLAUDE_CODE_SESSION_ID"
        );
    }

    /// Without `XDG_RUNTIME_DIR` (Codex clears it) they meet all the same:
    /// in `/run/user/<uid>` where that is the user's, else in the `/tmp`
    /// fallback, which serve makes owner-only. Given options win over the
    /// CLI's variables, and then nothing says where they came from.
    #[test]
    fn without_a_runtime_directory_they_meet_where_the_rule_says() {
        let app = app_name("fallback");
        let base = base_without_variables();
        let socket = base.join(&app).join("mcp.sock");
        let serve = serve_app(&app, None, &socket);
        assert_eq!(
            fs::metadata(&base).unwrap().mode() & 0o022,
            0,
            "{}",
            base.display()
        );

        let mut cli = bridge(&app, None, &["--project", "p1", "--requester", "agent-7"]);
        cli.env("CLAUDE_PROJECT_DIR", "/home/ana/shop")
            .env("CLAUDE_CODE_SESSION_ID", "5f1c-session");
        let (line, _) = first_line(cli);
        assert_eq!(line, "p1|agent-7|given|given");
        drop(serve);
        let _ = fs::remove_dir(base.join(&app));
    }

    /// With nothing from the CLI (Codex, Gemini CLI), the working directory
    /// stands in for the project and the bridge's parent (here this test)
    /// for the requester; a given `--project` still wins on its own.
    #[test]
    fn without_variables_the_directory_and_the_parent_stand_in() {
        let runtime = TempDir::new("app-cwd", 0o700);
        let work = TempDir::new("app-work", 0o700);
        let app = app_name("cwd");
        let socket = runtime.0.join(&app).join("mcp.sock");
        let _serve = serve_app(&app, Some(&runtime.0), &socket);

        let mut cli = bridge(&app, Some(&runtime.0), &[]);
        cli.current_dir(&work.0);
        let (line, _) = first_line(cli);
        let project = fs::canonicalize(&work.0).unwrap();
        let me = std::process::id();
        assert_eq!(line, format!("{}|{}|cwd|ppid", project.display(), me));

        let mut half = bridge(&app, Some(&runtime.0), &["--project", "p2"]);
        half.env("CLAUDE_CODE_SESSION_ID", "s-2");
        let (line, _) = first_line(half);
        assert_eq!(line, "p2|s-2|given|CLAUDE_CODE_SESSION_ID");
    }

    /// serve refuses to bind in an app directory that others may write (or,
    /// as root, one another user made first), saying whose or why, and
    /// leaves it as it was.
    #[test]
    fn serve_will_not_bind_in_a_directory_someone_else_could_write() {
        let runtime = TempDir::new("app-squat", 0o700);
        let app = app_name("squat");
        let dir = runtime.0.join(&app);
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let refused = |needle: &str| {
            let mut program = serve_program(None);
            clean(&mut program, Some(&runtime.0))
                .args(["serve", "--app", &app, "--", "cat"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let out = support::wait_output(program.spawn().unwrap(), "serve");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{}", stderr);
            assert!(stderr.contains(needle), "{}", stderr);
            assert!(stderr.contains(&dir.display().to_string()), "{}", stderr);
            assert!(!dir.join("mcp.sock").exists());
        };
        refused("may be written by group or others (mode 777)");
        if support::is_root() {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
            let nobody = rustix::process::Uid::from_raw(support::NOBODY);
            rustix::fs::chown(&dir, Some(nobody), None).unwrap();
            refused("belongs to uid 65534, not to you");
        }
    }
}

/// A runtime directory that is not the user's own (writable by others, or
/// relative) is passed over for the next in the rule: the bridge, finding
/// no app, names the endpoint it looked for.
#[test]
fn a_runtime_directory_not_your_own_is_passed_over() {
    let open = TempDir::new("app-open", 0o777);
    let app = app_name("open");
    let expected = base_without_variables().join(&app).join("mcp.sock");
    for runtime in [open.0.as_path(), Path::new("relative/run")] {
        let mut cli = bridge(&app, Some(runtime), &[]);
        let out = cli
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}", stderr);
        assert!(
            stderr.contains(&format!("cannot connect to '{}'", expected.display())),
            "{}: {}",
            runtime.display(),
            stderr
        );
    }
}

/// Each command turns a name outside the rule into one usage line (exit
/// 2) that says what is wrong with it, before touching anything.
#[test]
fn bad_app_names_are_usage_errors() {
    let mut commands = vec![vec!["mcp-server"]];
    if cfg!(feature = "serve") {
        commands.push(vec!["serve"]);
    }
    if cfg!(feature = "doctor") {
        commands.push(vec!["doctor"]);
    }
    let long = "x".repeat(33);
    for (name, needle) in [
        ("", "the app name is empty"),
        ("../etc", "contains '/'"),
        ("a\\b", "contains '\\\\'"),
        ("..", "must start with a letter or digit"),
        ("a\u{1b}b", "(a control character)"),
        (long.as_str(), "is longer than 32 bytes"),
    ] {
        for command in &commands {
            let mut line: Vec<&str> = command.clone();
            line.extend(["--app", name]);
            if command[0] == "serve" {
                line.extend(["--", "cat"]);
            }
            let out = Command::new(BIN)
                .args(&line)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{:?}: {}", line, stderr);
            assert!(
                stderr.starts_with("mcp-bridge: '--app': the app name"),
                "{:?}: {}",
                line,
                stderr
            );
            assert!(stderr.contains(needle), "{:?}: {}", line, stderr);
        }
    }
}

/// doctor given `--app` checks the endpoint it resolved, and prints the
/// configuration with `--app`, and the identity only as given: the line to
/// check in.
#[cfg(feature = "doctor")]
#[test]
fn doctor_prints_the_configuration_with_the_app_name() {
    let runtime = TempDir::new("app-doctor", 0o700);
    let app = app_name("doctor");
    let mut doctor = Command::new(BIN);
    clean(&mut doctor, Some(&runtime.0))
        .args(["doctor", "--app", &app, "--requester", "agent-7", "--json"])
        .env("CLAUDE_PROJECT_DIR", "/home/ana/shop");
    let out = doctor.stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "nothing listens there");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let endpoint = runtime.0.join(&app).join("mcp.sock");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains(&endpoint.display().to_string()), "{}", error);
    let config = &report["config"];
    assert_eq!(
        config["args"],
        serde_json::json!(["mcp-server", "--app", app, "--requester", "agent-7"])
    );
    assert_eq!(config["portable"], true);
}

/// Issue 43: doctor keeps every option it is given. The cache options are
/// named in the report (doctor reads no cache) and kept in the line to
/// paste, so pasting it does not turn the cache back on; a line that holds
/// a path of this machine (`--log`, `--cache-dir`) is not called portable,
/// even with `--app`.
#[cfg(feature = "doctor")]
#[test]
fn doctor_keeps_every_option_and_calls_only_a_pathless_line_portable() {
    let runtime = TempDir::new("app-doctor-keeps", 0o700);
    let app = app_name("keeps");
    let log = runtime.0.join("bridge.log");
    let cache = runtime.0.join("cache");
    let (log, cache) = (log.to_str().unwrap(), cache.to_str().unwrap());
    let run = |options: &[&str]| {
        let mut doctor = Command::new(BIN);
        clean(&mut doctor, Some(&runtime.0))
            .args(["doctor", "--app", &app])
            .args(options);
        let out = doctor.stdin(Stdio::null()).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "nothing listens there");
        out.stdout
    };
    let json = |options: &[&str]| -> serde_json::Value {
        let mut with_json = options.to_vec();
        with_json.push("--json");
        serde_json::from_slice(&run(&with_json)).unwrap()
    };
    let ignored = |report: &serde_json::Value| -> Vec<String> {
        let options = report["ignored_options"].as_array().unwrap();
        options
            .iter()
            .map(|o| o["option"].as_str().unwrap().to_owned())
            .collect()
    };

    let report = json(&["--no-cache"]);
    assert_eq!(
        report["config"]["args"],
        serde_json::json!(["mcp-server", "--app", app, "--no-cache"])
    );
    assert_eq!(report["config"]["portable"], true);
    assert_eq!(ignored(&report), ["--no-cache"]);

    let report = json(&["--log", log, "--cache-dir", cache]);
    assert_eq!(
        report["config"]["args"],
        serde_json::json!([
            "mcp-server",
            "--app",
            app,
            "--log",
            log,
            "--cache-dir",
            cache
        ])
    );
    assert_eq!(
        report["config"]["portable"], false,
        "a path of this machine"
    );
    assert_eq!(ignored(&report), ["--cache-dir"]);

    let text = String::from_utf8(run(&["--cache-dir", cache])).unwrap();
    assert!(
        text.contains("note  --cache-dir is ignored: doctor asks the app itself"),
        "{}",
        text
    );
    assert!(text.contains(&format!("--cache-dir {}", cache)), "{}", text);
    assert!(text.contains("fit this machine only"), "{}", text);
    assert!(
        !text.contains("the same for every user and OS: to check"),
        "{}",
        text
    );
}

/// The library's host binds what the bridge looks for, in this process's
/// own environment, wherever the rule puts it, and reads the handshake's
/// optional fields.
#[cfg(feature = "host")]
#[test]
fn the_library_host_binds_what_the_bridge_looks_for() {
    use futures_lite::io::AsyncWriteExt;
    use mcp_bridge::host::Listener;

    let app = app_name("host");
    let listener = Listener::bind_app(&app).unwrap();
    let endpoint = listener.endpoint().to_path_buf();
    assert_eq!(mcp_bridge::endpoint::for_app(&app).unwrap(), endpoint);
    assert!(endpoint.ends_with(format!("{}/mcp.sock", app)));

    // The bridge sees what this process sees, but for the identity.
    let mut cli = Command::new(BIN);
    cli.args(["mcp-server", "--app", &app, "--no-reconnect"])
        .env_remove("CLAUDE_PROJECT_DIR")
        .env("CLAUDE_CODE_SESSION_ID", "s-host");
    let bridge = std::thread::spawn(move || first_line(cli));
    let handshake = smol::block_on(support::within("the bridge", async {
        let mut connection = listener.accept().await.unwrap();
        connection
            .writer
            .write_all(b"{\"hello\":1}\n")
            .await
            .unwrap();
        connection.handshake
    }));
    assert_eq!(handshake.requester, "s-host");
    assert_eq!(
        handshake.requester_from.as_deref(),
        Some("CLAUDE_CODE_SESSION_ID")
    );
    assert_eq!(handshake.project_from.as_deref(), Some("cwd"));
    let (line, _) = bridge.join().unwrap();
    assert_eq!(line, "{\"hello\":1}");
    drop(listener);
    let _ = fs::remove_dir(endpoint.parent().unwrap());
}
