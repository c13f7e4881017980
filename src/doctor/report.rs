//! What the checks found, as text for a person and as one JSON document
//! for an installer; both carry the same facts.
//!
//! Much of it is the app's own text (its name, its tools' names, its error
//! messages, lines it should not have sent), so the text report escapes
//! every control character in what it prints ([`escape`]): a terminal
//! would otherwise obey an app's `ESC[2J`, or a cursor move that writes
//! `ok` over a `FAIL`. The JSON document ([`Report::to_json_text`]) is
//! written with the same characters as JSON escapes (`\u0085`,
//! `\u2028`), which keep the value and still cannot move a cursor when the
//! document is shown in a terminal (or break a JavaScript string, where
//! U+2028 ends a line).

use std::borrow::Cow;
use std::fmt::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::Snippets;

/// How a step (or a budget) came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done, nothing to say.
    Passed,
    /// Done, but something is fragile or unsafe (see the step's warnings).
    Warning,
    /// Failed: the checks stopped here, as a CLI would.
    Failed,
    /// Not run: the server does not declare it, or an earlier step failed.
    Skipped,
}

impl Status {
    /// The word in the text report's first column.
    fn column(self) -> &'static str {
        match self {
            Status::Passed => "ok",
            Status::Warning => "warn",
            Status::Failed => "FAIL",
            Status::Skipped => "skip",
        }
    }

    /// The value in the JSON document.
    fn json(self) -> &'static str {
        match self {
            Status::Passed => "ok",
            Status::Warning => "warning",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// One step of the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `traffic log` (only with a log), `endpoint`, `connect`, `server
    /// user`, `handshake`, `initialize`, `initialized`, `tools/list`,
    /// `prompts/list`, `resources/list`, `close`, `start-up budget`.
    pub name: &'static str,
    /// How it came out; [`Status::Warning`] when it has warnings.
    pub status: Status,
    /// How long it took, for steps that wait on something.
    pub elapsed: Option<Duration>,
    /// What was found, or (for a failed step) the diagnostic, in the words
    /// the bridge would use.
    pub detail: String,
    /// What works but should be fixed.
    pub warnings: Vec<String>,
}

impl Step {
    pub(super) fn new(name: &'static str, elapsed: Option<Duration>, detail: String) -> Step {
        Step {
            name,
            status: Status::Passed,
            elapsed,
            detail,
            warnings: Vec::new(),
        }
    }

    pub(super) fn failed(mut self) -> Step {
        self.status = Status::Failed;
        self
    }

    pub(super) fn skipped(name: &'static str, why: &str) -> Step {
        let mut step = Step::new(name, None, why.to_string());
        step.status = Status::Skipped;
        step
    }

    pub(super) fn warn(mut self, warning: String) -> Step {
        self.warnings.push(warning);
        if self.status == Status::Passed {
            self.status = Status::Warning;
        }
        self
    }
}

/// What the server said about itself in its `initialize` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `protocolVersion`.
    pub protocol_version: String,
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `capabilities`, as sent.
    pub capabilities: Value,
}

/// The start-up time against one CLI's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The CLI, as its users call it.
    pub cli: &'static str,
    /// How long it waits for a server to start.
    pub limit: Duration,
    /// How long this one took, from connecting to its tool list.
    pub used: Duration,
    /// [`Status::Warning`] past half the limit, [`Status::Failed`] past it.
    pub status: Status,
}

/// What one list (`tools/list`, `prompts/list`, `resources/list`) held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The names (or URIs) of the first items, each cut to a bounded
    /// length: all of them for any list a CLI could use.
    pub names: Vec<String>,
    /// How many items the list had, kept or not.
    pub count: usize,
    /// How many pages it came in.
    pub pages: usize,
    /// The size of its results, in bytes, every page together: what a CLI
    /// would hold (and, for tools, put in the model's context).
    pub bytes: usize,
}

/// An `mcp-server` option doctor was given but does not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// The option, as written on the command line.
    pub option: &'static str,
    /// Why doctor has no use for it.
    pub why: &'static str,
}

/// Everything the checks found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The endpoint checked.
    pub endpoint: PathBuf,
    /// The steps run, in order; the check stops at the first failure.
    pub steps: Vec<Step>,
    /// From `initialize`, once it answered.
    pub server: Option<ServerInfo>,
    /// `mcp-server` options given that doctor has no use for, and why.
    pub ignored: Vec<Ignored>,
    /// The tools, when listed.
    pub tools: Option<Listing>,
    /// The prompts, when the server declares prompts.
    pub prompts: Option<Listing>,
    /// The resources (names, or URIs), when the server declares resources.
    pub resources: Option<Listing>,
    /// The start-up time against each CLI's budget, once known.
    pub budgets: Vec<Budget>,
    /// What to paste into each CLI's configuration.
    pub snippets: Snippets,
}

/// A check that failed: which step, and the bridge's words for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorError {
    step: &'static str,
    detail: String,
}

impl fmt::Display for DoctorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the '{}' check failed: {}",
            self.step,
            escape(&self.detail)
        )
    }
}

impl std::error::Error for DoctorError {}

impl Report {
    /// Whether every step passed (warnings allowed).
    pub fn passed(&self) -> bool {
        self.failure().is_none()
    }

    /// The step that failed, if one did.
    pub fn failure(&self) -> Option<&Step> {
        self.steps.iter().find(|s| s.status == Status::Failed)
    }

    /// The failure as an error, for a caller that reports errors (the
    /// binary's exit 1 and its stderr line).
    pub fn error(&self) -> Option<DoctorError> {
        self.failure().map(|step| DoctorError {
            step: step.name,
            detail: step.detail.clone(),
        })
    }

    fn warning_count(&self) -> usize {
        self.steps.iter().map(|s| s.warnings.len()).sum()
    }

    /// The report for a person: one line per step, its warnings below it,
    /// the verdict, then the configuration to paste.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "mcp-bridge doctor {}: checking '{}'\n",
            env!("CARGO_PKG_VERSION"),
            escape(&self.endpoint.to_string_lossy())
        );
        for ignored in &self.ignored {
            let _ = writeln!(
                out,
                "  note  {} is ignored: {}",
                ignored.option, ignored.why
            );
        }
        if !self.ignored.is_empty() {
            out.push('\n');
        }
        for step in &self.steps {
            let took = step.elapsed.map_or(String::new(), millis);
            let _ = writeln!(
                out,
                "  {:<4}  {:<15} {:>9}  {}",
                step.status.column(),
                step.name,
                took,
                escape(&step.detail)
            );
            for warning in &step.warnings {
                let _ = writeln!(out, "{:35}warning: {}", "", escape(warning));
            }
        }
        out.push('\n');
        let warnings = match self.warning_count() {
            0 => String::new(),
            1 => ", with 1 warning".to_string(),
            n => format!(", with {} warnings", n),
        };
        match self.error() {
            Some(e) => {
                let _ = writeln!(out, "FAILED: {}", e);
            }
            None => {
                let _ = writeln!(out, "All checks passed{}.", warnings);
            }
        }
        out.push('\n');
        out.push_str(&self.snippets.to_text());
        out
    }

    /// The report for a program: one JSON document with the same facts.
    ///
    /// The strings in it are the app's own, as sent; serializing the value
    /// with serde_json leaves C1 controls, DEL, the line and paragraph
    /// separators and the bidirectional overrides in them as they are.
    /// [`to_json_text`](Self::to_json_text) writes them as escapes.
    pub fn to_json(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "status": s.status.json(),
                    "ms": s.elapsed.map(ms),
                    "detail": s.detail,
                    "warnings": s.warnings,
                })
            })
            .collect();
        let budgets: Vec<Value> = self
            .budgets
            .iter()
            .map(|b| {
                json!({
                    "cli": b.cli,
                    "limit_ms": ms(b.limit),
                    "used_ms": ms(b.used),
                    "status": b.status.json(),
                })
            })
            .collect();
        let server = self.server.as_ref().map(|s| {
            json!({
                "protocolVersion": s.protocol_version,
                "name": s.name,
                "version": s.version,
                "capabilities": s.capabilities,
            })
        });
        let ignored: Vec<Value> = self
            .ignored
            .iter()
            .map(|i| json!({"option": i.option, "why": i.why}))
            .collect();
        let names = |list: &Option<Listing>| list.as_ref().map(|l| l.names.clone());
        let size = |list: &Option<Listing>| {
            list.as_ref().map(|l| {
                json!({
                    "count": l.count,
                    "pages": l.pages,
                    "bytes": l.bytes,
                    "names_kept": l.names.len(),
                })
            })
        };
        let failure = self.failure();
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "endpoint": self.endpoint.to_string_lossy(),
            "passed": failure.is_none(),
            "failed_step": failure.map(|s| s.name),
            "error": failure.map(|s| s.detail.as_str()),
            "warnings": self.warning_count(),
            "ignored_options": ignored,
            "steps": steps,
            "server": server,
            "tools": names(&self.tools),
            "prompts": names(&self.prompts),
            "resources": names(&self.resources),
            "lists": {
                "tools": size(&self.tools),
                "prompts": size(&self.prompts),
                "resources": size(&self.resources),
            },
            "budgets": budgets,
            "config": self.snippets.to_json(),
        })
    }

    /// [`to_json`](Self::to_json) as `doctor --json` prints it: indented,
    /// with C1 controls, DEL, U+2028, U+2029 and the bidirectional
    /// overrides in the app's strings written as JSON escapes, so the
    /// document is the same to a parser and safe to show in a terminal.
    pub fn to_json_text(&self) -> String {
        escape_json(format!("{:#}", self.to_json()))
    }
}

/// Whether `c` could move the cursor, clear the screen or reorder what a
/// terminal shows: a control character (C0, DEL, C1), the line or
/// paragraph separator, or a bidirectional override.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` fit for a terminal: every [`unsafe_char`] is written as an
/// escape (`\x1b`, `\n`, `\u{9b}`); the rest is unchanged.
pub(super) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_char(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `json`, a serialized JSON document, with every [`unsafe_char`] that
/// serde_json leaves as it is (all but C0, which it escapes) written as a
/// `\uXXXX` escape instead: the same document to a parser, and one a
/// terminal can show. Outside its strings a JSON document is ASCII, so
/// every such character is inside a string, where the escape means the
/// same character; all of them are in the Basic Multilingual Plane, so
/// one escape each.
fn escape_json(json: String) -> String {
    let left_raw = |c: char| c >= '\u{7f}' && unsafe_char(c);
    if !json.chars().any(left_raw) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if left_raw(c) {
            out.push_str("\\u");
            for shift in [12, 8, 4, 0] {
                out.push(char::from(b"0123456789abcdef"[(c as usize >> shift) & 0xf]));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Milliseconds with three decimals (microseconds), for the JSON document.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Milliseconds as the text report shows them.
fn millis(d: Duration) -> String {
    format!("{} ms", crate::decimal::Fixed::millis(d, 1))
}

#[cfg(test)]
mod tests {
    use super::{escape, escape_json};

    #[test]
    fn escape_leaves_text_and_escapes_controls() {
        assert_eq!(escape("tool été ✓"), "tool été ✓");
        assert_eq!(escape("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape("x\ny\r\t\x7f"), "x\\ny\\r\\t\\x7f");
        assert_eq!(escape("\u{9b}2J \u{85}"), "\\u{9b}2J \\u{85}");
        assert_eq!(escape("\u{202e}abc\u{2028}"), "\\u{202e}abc\\u{2028}");
    }

    /// The escapes are JSON's own: the document parses to the same value.
    #[test]
    fn escape_json_keeps_the_value() {
        let value = serde_json::json!({"name": "a\u{85}b\u{2028}\u{7f}\u{202e} é\u{1b}"});
        let text = escape_json(format!("{:#}", value));
        assert_eq!(
            text,
            "{\n  \"name\": \"a\\u0085b\\u2028\\u007f\\u202e é\\u001b\"\n}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            value
        );
    }
}
