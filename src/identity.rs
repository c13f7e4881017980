//! Who is calling, learned from the CLI that spawned the bridge when the
//! command line does not say (`--project`, `--requester`).
//!
//! An app that must write a configuration per agent to tell agents apart
//! cannot let a team check one `.mcp.json` into a repository. But each MCP
//! CLI already tells the servers it spawns something about the session, in
//! their environment and working directory; [`handshake`] reads it, so one
//! configuration line gives every session of every teammate a distinct
//! identity, and says where each value came from in the handshake's
//! optional fields ([`Handshake::project_from`],
//! [`Handshake::requester_from`]). What the command line gives always wins.
//! One function for every caller (`mcp-server`, `doctor`, an app embedding
//! the bridge), so all of them send the same identity.
//!
//! # What each CLI passes (the sources, with citations: `docs/handshake.md`)
//!
//! - **Claude Code** passes its whole environment, plus `CLAUDE_PROJECT_DIR`
//!   (the project root) and, since 2.1.154, `CLAUDE_CODE_SESSION_ID` (the
//!   session).
//! - **Codex CLI** clears the environment down to an allow-list (`HOME`,
//!   `LOGNAME`, `PATH`, `SHELL`, `USER`, `__CF_USER_TEXT_ENCODING`, `LANG`,
//!   `LC_ALL`, `TERM`, `TMPDIR`, `TZ` on Unix) plus what its configuration
//!   names, and runs the server in its own working directory, the project,
//!   unless told otherwise. It passes no session id (its `CODEX_THREAD_ID`
//!   is for shell commands only).
//! - **Gemini CLI** passes its environment with secret-looking variables
//!   removed, plus `GEMINI_CLI=1`, in its working directory; no session id.
//! - **VS Code** and **Cursor** pass their environment, and no project or
//!   session; their `mcp.json` expands `${workspaceFolder}`, so
//!   `--project ${workspaceFolder}` in the checked-in line says it.
//!
//! # The rule
//!
//! The project: [`PROJECT_VARIABLES`] in order, then the working directory
//! (`cwd`). The requester: [`REQUESTER_VARIABLES`] in order, then the
//! process id of the bridge's parent, the CLI (`ppid`): distinct for every
//! CLI process running at once, the same across the bridge's reconnects. A
//! variable that is empty or not UTF-8 is skipped (a handshake carries
//! strings). A CLI started from another CLI's shell tool inherits that
//! one's variables, and the bridge cannot tell; give `--requester` there.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::handshake::Handshake;

/// The variables that name the project, in the order they are tried:
/// Claude Code's `CLAUDE_PROJECT_DIR`.
pub const PROJECT_VARIABLES: &[&str] = &["CLAUDE_PROJECT_DIR"];

/// The variables that name the session, in the order they are tried:
/// Claude Code's `CLAUDE_CODE_SESSION_ID`.
pub const REQUESTER_VARIABLES: &[&str] = &["CLAUDE_CODE_SESSION_ID"];

/// [`Handshake::project_from`] when the project is the working directory.
pub const FROM_WORKING_DIRECTORY: &str = "cwd";

/// [`Handshake::requester_from`] when the requester is the parent process's
/// id.
pub const FROM_PARENT_PROCESS: &str = "ppid";

/// The handshake for a bridge this process runs: `project` and `requester`
/// as given (`Some`, even empty, wins), the others learned from this
/// process's environment, working directory and parent (see the [module
/// docs](self)).
///
/// ```
/// use mcp_bridge::identity;
/// let told = identity::handshake(Some("p1".into()), Some("agent-7".into()));
/// assert_eq!(told, mcp_bridge::handshake::Handshake::new("p1", "agent-7"));
/// let learned = identity::handshake(None, None);
/// assert!(learned.project_from.is_some() && learned.requester_from.is_some());
/// ```
pub fn handshake(project: Option<String>, requester: Option<String>) -> Handshake {
    learn(
        project,
        requester,
        &|name| std::env::var_os(name),
        || std::env::current_dir().ok(),
        parent_process,
    )
}

/// [`handshake`], with where it looks given: `var` reads a variable,
/// `cwd` the working directory, `parent` the parent's process id (each
/// only asked when needed: on Windows the parent is looked up in a
/// snapshot of every process).
fn learn(
    project: Option<String>,
    requester: Option<String>,
    var: &dyn Fn(&str) -> Option<OsString>,
    cwd: fn() -> Option<PathBuf>,
    parent: fn() -> Option<u32>,
) -> Handshake {
    let mut handshake = Handshake::default();
    (handshake.project, handshake.project_from) = pick(project, &|| {
        first(var, PROJECT_VARIABLES)
            .or_else(|| Some((text(cwd()?.into_os_string())?, FROM_WORKING_DIRECTORY)))
    });
    (handshake.requester, handshake.requester_from) = pick(requester, &|| {
        first(var, REQUESTER_VARIABLES)
            .or_else(|| Some((parent()?.to_string(), FROM_PARENT_PROCESS)))
    });
    handshake
}

/// A handshake field and where it came from: `told` if given, else what
/// `learn` finds, else nothing.
fn pick(
    told: Option<String>,
    learn: &dyn Fn() -> Option<(String, &'static str)>,
) -> (String, Option<String>) {
    told.map(|value| (value, None))
        .or_else(|| {
            let (value, from) = learn()?;
            Some((value, Some(from.to_string())))
        })
        .unwrap_or_default()
}

/// The first of the variables `names` that has a value, and its name.
fn first(
    var: &dyn Fn(&str) -> Option<OsString>,
    names: &[&'static str],
) -> Option<(String, &'static str)> {
    names
        .iter()
        .find_map(|&name| Some((text(var(name)?)?, name)))
}

/// A variable's value as a handshake carries it: UTF-8 and not empty.
fn text(value: OsString) -> Option<String> {
    value.into_string().ok().filter(|v| !v.is_empty())
}

/// The process id of whoever started this one: on Unix `getppid`; on
/// Windows the creator's id, as the process snapshot records it.
#[cfg(unix)]
fn parent_process() -> Option<u32> {
    rustix::process::getppid().map(|pid| pid.as_raw_nonzero().get() as u32)
}

#[cfg(windows)]
fn parent_process() -> Option<u32> {
    crate::ffi::windows::parent_process_id().ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(project: Option<&str>, requester: Option<&str>, vars: &[(&str, &str)]) -> Handshake {
        learn(
            project.map(String::from),
            requester.map(String::from),
            &|name| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            },
            || Some(PathBuf::from("/work/proj")),
            || Some(4242),
        )
    }

    #[test]
    fn claude_code_names_the_project_and_the_session() {
        let h = with(
            None,
            None,
            &[
                ("CLAUDE_PROJECT_DIR", "/home/me/proj"),
                ("CLAUDE_CODE_SESSION_ID", "5f1c"),
            ],
        );
        assert_eq!(
            (h.project.as_str(), h.requester.as_str()),
            ("/home/me/proj", "5f1c")
        );
        assert_eq!(h.project_from.as_deref(), Some("CLAUDE_PROJECT_DIR"));
        assert_eq!(h.requester_from.as_deref(), Some("CLAUDE_CODE_SESSION_ID"));
    }

    /// Codex's wiped environment: the working directory and the parent.
    #[test]
    fn without_variables_the_directory_and_the_parent_stand_in() {
        let h = with(None, None, &[("CLAUDE_PROJECT_DIR", "")]);
        assert_eq!(
            (h.project.as_str(), h.requester.as_str()),
            ("/work/proj", "4242")
        );
        assert_eq!(h.project_from.as_deref(), Some("cwd"));
        assert_eq!(h.requester_from.as_deref(), Some("ppid"));
    }

    #[test]
    fn options_always_win_even_empty() {
        let vars = [
            ("CLAUDE_PROJECT_DIR", "/home/me/proj"),
            ("CLAUDE_CODE_SESSION_ID", "5f1c"),
        ];
        assert_eq!(with(Some("p"), Some(""), &vars), Handshake::new("p", ""));
        let half = with(None, Some("agent-7"), &vars);
        assert_eq!(half.requester, "agent-7");
        assert_eq!(half.requester_from, None);
        assert_eq!(half.project_from.as_deref(), Some("CLAUDE_PROJECT_DIR"));
    }

    #[test]
    fn nothing_to_learn_leaves_the_fields_empty() {
        let h = learn(None, None, &|_| None, || None, || None);
        assert_eq!(h, Handshake::default());
    }
}
