//! `mcp-bridge demo` as a user runs it, right after installing: it must end
//! by saying what to do next, with this very executable's path.
#![cfg(feature = "demo")]

mod support;

use std::process::{Command, Stdio};

use support::{wait_output, BIN};

/// The transcript ends with the next steps (configure a CLI, then check
/// the line with `doctor`), naming the executable that ran, and then the
/// verdict.
#[test]
fn demo_ends_by_saying_what_to_do_next() {
    let child = Command::new(BIN)
        .arg("demo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, "the demo");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{}", stdout);
    let tail: Vec<&str> = stdout.trim_end().lines().rev().take(6).collect();
    assert_eq!(tail[0], "demo OK", "{}", stdout);
    let doctor = tail[1].trim();
    assert_eq!(
        executable(doctor),
        std::fs::canonicalize(BIN).unwrap(),
        "{}",
        stdout
    );
    assert!(
        doctor.ends_with(
            " doctor --endpoint <your app's endpoint> --project <id> --requester <agent>"
        ),
        "{}",
        stdout
    );
    assert!(
        tail[2].contains("`doctor` in place of `mcp-server`"),
        "{}",
        stdout
    );
    let configure = tail[3].trim();
    let rest = configure
        .strip_prefix("claude mcp add myapp -- ")
        .unwrap_or_else(|| panic!("{}", stdout));
    assert_eq!(
        executable(rest),
        std::fs::canonicalize(BIN).unwrap(),
        "{}",
        stdout
    );
    assert!(configure.contains(" mcp-server --endpoint "), "{}", stdout);
    assert!(tail[4].contains("configure your MCP CLI"), "{}", stdout);
    assert_eq!(tail[5], "Next, with your app:", "{}", stdout);
}

/// The executable a command line starts with, as a shell reads its first
/// word (the demo quotes a path that needs it: one with a space, a Windows
/// path), resolved to the file it names.
fn executable(line: &str) -> std::path::PathBuf {
    let word = match line.strip_prefix('\'') {
        Some(quoted) => &quoted[..quoted.find('\'').expect("the closing quote")],
        None => line.split(' ').next().unwrap(),
    };
    std::fs::canonicalize(word).unwrap()
}
