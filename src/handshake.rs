//! The identity line a bridge sends before any relayed byte.
//!
//! One app serves many agents in many projects through one endpoint, and the
//! JSON-RPC stream carries no identity of its own. So the first line on every
//! connection says who is calling:
//!
//! ```text
//! {"project":"<project id>","requester":"<agent id>"}\n
//! ```
//!
//! It is a separate line, so a host reads exactly one line, parses it with
//! [`Handshake::parse`], and hands the rest of the stream, untouched, to its
//! MCP server. A value the bridge learned from the CLI rather than from
//! `--project` or `--requester` ([`identity`](crate::identity)) says where
//! it came from in an optional field (`"project_from":"CLAUDE_PROJECT_DIR"`),
//! present only then, so a host that reads only `project` and `requester`
//! sees what it always saw. Both values are JSON strings escaped the way `serde_json`
//! escapes them, so any id (quotes, newlines, non-ASCII) stays on one line
//! and round-trips exactly.
//!
//! The line is written by a small hand-written writer, not `serde_json`:
//! the bridge-only build (no `host` feature) carries no JSON library, and a
//! string escaper is all the bridge needs. Reading the line
//! ([`Handshake::parse`], a host's job) uses `serde_json`, so it comes with
//! the `host` feature.

use std::fmt;

use crate::envelope::json::push_json_string as write_json_string;

#[cfg(feature = "host")]
use serde_json::Value;

/// The caller's identity, as sent on the first line of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handshake {
    /// The project the agent works in (empty when the CLI did not say).
    pub project: String,
    /// The agent making the requests (empty when the CLI did not say).
    pub requester: String,
    /// `true` when this connection carries on a session whose earlier
    /// connection the app closed (it restarted): the bridge has replayed
    /// nothing yet, and is about to replay the client's `initialize` and
    /// the few requests the session's state depends on. Sent as
    /// `"resumed":true`, and only then, so hosts that ignore unknown fields
    /// see the same line as before.
    pub resumed: bool,
    /// Where [`project`](Self::project) came from when the bridge learned
    /// it rather than being told: the environment variable's name
    /// (`CLAUDE_PROJECT_DIR`), or `cwd` for the working directory (see
    /// [`identity`](crate::identity)). `None` when it was given
    /// (`--project`), or is empty. Sent as `"project_from"`, only when set.
    pub project_from: Option<String>,
    /// Where [`requester`](Self::requester) came from when the bridge
    /// learned it: the variable's name (`CLAUDE_CODE_SESSION_ID`), or
    /// `ppid` for the process that started the bridge. `None` when it was
    /// given (`--requester`), or is empty. Sent as `"requester_from"`, only
    /// when set.
    pub requester_from: Option<String>,
}

/// Why a handshake line was rejected by [`Handshake::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeError(String);

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid handshake: {}", self.0)
    }
}

impl std::error::Error for HandshakeError {}

impl Handshake {
    /// Creates a handshake for the given identity.
    pub fn new(project: impl Into<String>, requester: impl Into<String>) -> Self {
        Handshake {
            project: project.into(),
            requester: requester.into(),
            resumed: false,
            project_from: None,
            requester_from: None,
        }
    }

    /// The exact bytes sent on the wire, final `\n` included.
    ///
    /// ```
    /// let line = mcp_bridge::handshake::Handshake::new("p\"1", "agent").to_line();
    /// assert_eq!(line, b"{\"project\":\"p\\\"1\",\"requester\":\"agent\"}\n");
    /// ```
    pub fn to_line(&self) -> Vec<u8> {
        // Written by hand rather than through a `Value` map so the key order
        // is fixed by this code, not by serde_json's map implementation.
        let mut line = Vec::with_capacity(32 + self.project.len() + self.requester.len());
        line.extend_from_slice(b"{\"project\":");
        write_json_string(&mut line, &self.project);
        line.extend_from_slice(b",\"requester\":");
        write_json_string(&mut line, &self.requester);
        for (name, from) in [
            (&b",\"project_from\":"[..], &self.project_from),
            (b",\"requester_from\":", &self.requester_from),
        ] {
            if let Some(from) = from {
                line.extend_from_slice(name);
                write_json_string(&mut line, from);
            }
        }
        if self.resumed {
            line.extend_from_slice(b",\"resumed\":true");
        }
        line.extend_from_slice(b"}\n");
        line
    }

    /// Parses one handshake line, as a host receives it.
    ///
    /// The trailing `\n` (and a `\r` before it) is optional. The line must be a
    /// JSON object with string fields `project` and `requester`, and
    /// optionally `project_from` and `requester_from` (strings) and
    /// `resumed` (a boolean); other fields are ignored, so bridges may add
    /// some later.
    ///
    /// ```
    /// use mcp_bridge::handshake::Handshake;
    /// let h = Handshake::parse(b"{\"project\":\"p\",\"requester\":\"r\",\"v\":2}\r\n").unwrap();
    /// assert_eq!(h, Handshake::new("p", "r"));
    /// assert!(Handshake::parse(b"{\"project\":1}").is_err());
    /// ```
    #[cfg(feature = "host")]
    pub fn parse(line: &[u8]) -> Result<Self, HandshakeError> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let value: Value = serde_json::from_slice(line)
            .map_err(|e| HandshakeError(format!("not JSON ({})", e)))?;
        let object = match value.as_object() {
            Some(object) => object,
            None => return Err(HandshakeError("not a JSON object".into())),
        };
        let field = |name: &str| match object.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(HandshakeError(format!("'{}' is not a string", name))),
            None => Err(HandshakeError(format!("'{}' is missing", name))),
        };
        let from = |name: &str| match object.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(HandshakeError(format!("'{}' is not a string", name))),
        };
        let resumed = match object.get("resumed") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(_) => return Err(HandshakeError("'resumed' is not a boolean".into())),
        };
        Ok(Handshake {
            project: field("project")?,
            requester: field("requester")?,
            resumed,
            project_from: from("project_from")?,
            requester_from: from("requester_from")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn round_trip(project: &str, requester: &str) {
        let h = Handshake::new(project, requester);
        let line = h.to_line();
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(
            line.iter().filter(|&&b| b == b'\n').count(),
            1,
            "exactly one newline, at the end: {:?}",
            String::from_utf8_lossy(&line)
        );
        #[cfg(feature = "host")]
        assert_eq!(Handshake::parse(&line).unwrap(), h);
        // And any JSON parser reads the same values.
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["project"], project);
        assert_eq!(v["requester"], requester);
    }

    #[test]
    fn a_resumed_session_says_so_and_only_then() {
        let mut h = Handshake::new("p", "r");
        assert!(!String::from_utf8(h.to_line()).unwrap().contains("resumed"));
        h.resumed = true;
        assert_eq!(
            h.to_line(),
            b"{\"project\":\"p\",\"requester\":\"r\",\"resumed\":true}\n"
        );
        #[cfg(feature = "host")]
        {
            assert_eq!(Handshake::parse(&h.to_line()).unwrap(), h);
            assert!(
                Handshake::parse(b"{\"project\":\"p\",\"requester\":\"r\",\"resumed\":1}").is_err()
            );
        }
    }

    /// What the bridge learned rather than was told is said in optional
    /// fields, only when there is something to say, and read back.
    #[test]
    fn learned_values_say_where_they_came_from() {
        let mut h = Handshake::new("/home/me/p", "s-1");
        h.project_from = Some("CLAUDE_PROJECT_DIR".into());
        h.requester_from = Some("CLAUDE_CODE_SESSION_ID".into());
        assert_eq!(
            h.to_line(),
            b"{\"project\":\"/home/me/p\",\"requester\":\"s-1\",\
              \"project_from\":\"CLAUDE_PROJECT_DIR\",\
              \"requester_from\":\"CLAUDE_CODE_SESSION_ID\"}\n"
        );
        h.requester_from = None;
        h.resumed = true;
        let line = String::from_utf8(h.to_line()).unwrap();
        assert!(!line.contains("requester_from"), "{}", line);
        #[cfg(feature = "host")]
        {
            assert_eq!(Handshake::parse(line.as_bytes()).unwrap(), h);
            let e = Handshake::parse(b"{\"project\":\"p\",\"requester\":\"r\",\"project_from\":1}");
            assert!(e
                .unwrap_err()
                .to_string()
                .contains("'project_from' is not a string"));
        }
    }

    /// The hand-written escaper writes what `serde_json` writes, for every
    /// ASCII character and a few beyond.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut texts: Vec<String> = (0u8..=0x7f).map(|b| char::from(b).to_string()).collect();
        texts.extend(
            [
                "",
                "plain",
                "a\"b\\c",
                "é\u{7f}\u{80}\u{2028}🤖\u{0}x",
                "\r\n\t\u{8}\u{c}",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        for text in texts {
            let mut ours = Vec::new();
            write_json_string(&mut ours, &text);
            let theirs = serde_json::to_string(&text).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), theirs, "{:?}", text);
        }
    }

    #[test]
    fn plain_ids() {
        assert_eq!(
            Handshake::new("p1", "agent-7").to_line(),
            b"{\"project\":\"p1\",\"requester\":\"agent-7\"}\n"
        );
    }

    #[test]
    fn empty_ids() {
        assert_eq!(
            Handshake::default().to_line(),
            b"{\"project\":\"\",\"requester\":\"\"}\n"
        );
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        let line = Handshake::new("a\"b", "c\\d").to_line();
        assert_eq!(
            line,
            b"{\"project\":\"a\\\"b\",\"requester\":\"c\\\\d\"}\n".to_vec()
        );
        round_trip("a\"b", "c\\d");
    }

    #[test]
    fn control_characters_stay_on_one_line() {
        let line = Handshake::new("line\nbreak\r", "tab\t\u{1}\u{1f}").to_line();
        let text = String::from_utf8(line).unwrap();
        assert!(text.contains("line\\nbreak\\r"), "{}", text);
        assert!(text.contains("tab\\t\\u0001\\u001f"), "{}", text);
        round_trip("line\nbreak\r", "tab\t\u{1}\u{1f}\u{7f}");
    }

    #[test]
    fn non_ascii_round_trips() {
        round_trip("projet-été", "エージェント🤖");
    }

    #[test]
    #[cfg(feature = "host")]
    fn parse_rejects_bad_lines() {
        for (line, needle) in [
            (&b"not json"[..], "not JSON"),
            (b"[1,2]", "not a JSON object"),
            (b"{\"requester\":\"r\"}", "'project' is missing"),
            (b"{\"project\":\"p\"}", "'requester' is missing"),
            (
                b"{\"project\":1,\"requester\":\"r\"}",
                "'project' is not a string",
            ),
        ] {
            let e = Handshake::parse(line).unwrap_err().to_string();
            assert!(e.contains(needle), "{} lacks {}", e, needle);
        }
    }
}
