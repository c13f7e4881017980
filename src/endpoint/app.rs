//! Endpoints named by the app (`--app <NAME>`) instead of by a path, so that
//! one configuration line serves every user on every OS.
//!
//! A socket path names its user (`/run/user/1000/...`) and a pipe name must
//! too (pipe names are one namespace for the whole machine), so an MCP
//! configuration holding either is good for one user on one OS, and a team
//! cannot check it into a repository. With `--app`, the bridge and the app
//! each compute the endpoint from the app's name and the user they run as,
//! by one rule ([`for_app`]), written down in `docs/handshake.md` so that an
//! app in any language computes the same path. Nothing else changes: the
//! resolved endpoint is connected to, waited for and trust-checked like one
//! given with `--endpoint`.
//!
//! # Why the rule is what it is
//!
//! - **The name** is ASCII letters, digits, `.`, `_` and `-`, starting with
//!   a letter or digit, at most [`MAX_APP_NAME`] bytes. It must mean the
//!   same path on every OS and to every language: no Unicode (macOS file
//!   systems normalize it, Windows pipe names fold its case by their own
//!   tables), no separator or dot component (Windows resolves `..` inside
//!   `\\.\pipe\` to reach files and other machines), no space or option-like
//!   start that a shell line would trip on. The length keeps the socket path
//!   within 103 bytes on macOS, whose `$TMPDIR` alone is about 49, with room
//!   for the host's private bind directory beside it (`host/unix.rs`).
//! - **Linux and other Unix**: `$XDG_RUNTIME_DIR`, the per-user runtime
//!   directory, when it is ours. Then `/run/user/<uid>`, what it always is
//!   under systemd: Codex CLI clears the environment of the servers it
//!   spawns down to a few variables, `XDG_RUNTIME_DIR` not among them, so a
//!   bridge under Codex and an app on the desktop meet only if the bridge
//!   finds the same directory without the variable. Last, a fallback in
//!   `/tmp` named by uid, the same for every process of the user (`$TMPDIR`
//!   is not: a desktop app and a terminal may have different ones).
//! - **macOS**: `$TMPDIR`, which launchd sets per user (`/var/folders/...`)
//!   for every process, and Codex passes on; the `/tmp` fallback without it.
//! - **Windows**: the pipe `\\.\pipe\<NAME>-<SID>`, the user's SID as the
//!   system spells it (`S-1-5-21-...`): unique per user on the machine (a
//!   user name is not: a local and a domain account may share one), needs no
//!   environment variable (Codex keeps `USERNAME`, but a SID cannot be
//!   spoofed by one), and every language can ask for it (.NET's
//!   `WindowsIdentity.GetCurrent().User.Value`, `whoami /user`).
//!
//! # Who can get there first
//!
//! A directory in `/tmp`, and any pipe name, can be created first by
//! another user. That buys them nothing but a refusal: the bridge creates
//! nothing and checks who serves the endpoint before it sends a byte
//! ([`verify_server`](super::verify_server)), and the host
//! ([`Listener::bind_app`](crate::host::Listener::bind_app)) creates the
//! directories owner-only and refuses to bind in one that is not its own,
//! or that others may write (someone who can rename the socket away could
//! put their own in its place). Denial of service, not a takeover; the
//! error says whose directory it is.

use std::fmt;
#[cfg(windows)]
use std::io;
use std::path::PathBuf;

use super::platform;

/// Longest app name accepted, in bytes: enough for a reverse-DNS name
/// (`com.example.myapp`), and short enough that the endpoint fits the
/// socket path limit on every OS (see the module docs).
pub const MAX_APP_NAME: usize = 32;

/// The endpoint of the app named `name`, for the user this process runs as
/// and the OS it runs on: a Unix socket path such as
/// `/run/user/1000/myapp/mcp.sock`, or a pipe name such as
/// `\\.\pipe\myapp-S-1-5-21-1-2-3-1001`. The rule is in `docs/handshake.md`.
///
/// Nothing is created or connected to: an app that is not running yet has
/// an endpoint all the same. The host binds it with
/// [`Listener::bind_app`](crate::host::Listener::bind_app).
///
/// ```
/// # #[cfg(unix)] {
/// let endpoint = mcp_bridge::endpoint::for_app("myapp").unwrap();
/// assert!(endpoint.ends_with("myapp/mcp.sock"));
/// assert!(mcp_bridge::endpoint::for_app("../etc").is_err());
/// # }
/// ```
///
/// # Errors
///
/// An [`AppNameError`] for a name outside the rule, or (rare) an endpoint
/// that would not fit the OS's limit, or a user that cannot be told.
pub fn for_app(name: &str) -> Result<PathBuf, AppNameError> {
    let fault = |fault| AppNameError {
        name: name.to_string(),
        fault,
    };
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || b"._-".contains(b);
    if let Some(at) = name.bytes().position(|b| !allowed(&b)) {
        let c = name[at..].chars().next().unwrap_or_default();
        return Err(fault(Fault::Char(c)));
    }
    match name.as_bytes().first() {
        None => return Err(fault(Fault::Empty)),
        Some(b'.') | Some(b'-') | Some(b'_') => return Err(fault(Fault::Start)),
        _ if name.len() > MAX_APP_NAME => return Err(fault(Fault::TooLong)),
        _ => {}
    }
    // Only a pipe name needs to ask the system who we are.
    #[cfg(unix)]
    let endpoint = platform::app_endpoint(name);
    #[cfg(windows)]
    let endpoint = platform::app_endpoint(name).map_err(|e| fault(Fault::Unidentified(e)))?;
    if endpoint.as_os_str().len() > platform::MAX_APP_ENDPOINT {
        return Err(fault(Fault::TooLongPath(endpoint)));
    }
    Ok(endpoint)
}

/// Why [`for_app`] has no endpoint for a name.
#[derive(Debug)]
pub struct AppNameError {
    name: String,
    fault: Fault,
}

#[derive(Debug)]
enum Fault {
    Empty,
    /// A character outside the rule.
    Char(char),
    /// A first character that may not start a name.
    Start,
    TooLong,
    TooLongPath(PathBuf),
    #[cfg(windows)]
    Unidentified(io::Error),
}

impl fmt::Display for AppNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match &self.fault {
            Fault::Empty => f.write_str("the app name is empty"),
            Fault::Char(c) => write!(
                f,
                "the app name {:?} contains {:?}{}: only ASCII letters, digits, '.', '_' and \
                 '-' may be in it",
                name,
                c,
                if c.is_control() {
                    " (a control character)"
                } else {
                    ""
                }
            ),
            Fault::Start => write!(
                f,
                "the app name {:?} must start with a letter or digit (no '.', '..' or hidden name)",
                name
            ),
            Fault::TooLong => write!(
                f,
                "the app name {:?} is longer than {} bytes",
                name, MAX_APP_NAME
            ),
            Fault::TooLongPath(path) => write!(
                f,
                "the endpoint of app {:?} would be '{}', {} bytes, more than the {} this OS \
                 allows; choose a shorter name",
                name,
                path.display(),
                path.as_os_str().len(),
                platform::MAX_APP_ENDPOINT
            ),
            // Its OS error is said here, as there is no chain to follow.
            #[cfg(windows)]
            Fault::Unidentified(e) => write!(
                f,
                "cannot name the endpoint of app {:?}: the user this process runs as \
                 cannot be told ({})",
                name, e
            ),
        }
    }
}

impl std::error::Error for AppNameError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a name can break the rule, and the words that say so.
    #[test]
    fn bad_names_say_what_is_wrong() {
        let long = "a".repeat(MAX_APP_NAME + 1);
        for (name, needle) in [
            ("", "the app name is empty"),
            ("my/app", "contains '/'"),
            ("/abs", "contains '/'"),
            ("my\\app", "contains '\\\\'"),
            ("..", "must start with a letter or digit (no '.', '..'"),
            (".", "must start with a letter or digit"),
            (".hidden", "must start with a letter or digit"),
            ("a\nb", "contains '\\n'"),
            ("a\u{7f}", "contains '\\u{7f}'"),
            ("a\u{1b}[2J", "contains '\\u{1b}'"),
            ("my app", "contains ' '"),
            ("été", "contains 'é'"),
            ("-app", "must start with a letter or digit"),
            ("_app", "must start with a letter or digit"),
            (long.as_str(), "is longer than 32 bytes"),
        ] {
            let e = for_app(name).expect_err(name).to_string();
            assert!(e.contains(needle), "{:?}: {}", name, e);
        }
    }

    #[test]
    fn good_names_are_taken() {
        for name in [
            "myapp",
            "com.example.my-app_2",
            "A",
            &"x".repeat(MAX_APP_NAME),
        ] {
            let endpoint = for_app(name).unwrap();
            assert!(
                endpoint.to_string_lossy().contains(name),
                "{}: {}",
                name,
                endpoint.display()
            );
        }
    }
}
