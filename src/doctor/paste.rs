//! Ready-to-paste configuration for each MCP CLI, quoted and escaped for
//! each format: most failed installs are a path mangled on its way into a
//! config file, and Windows paths (`C:\Program Files\…`, `\\.\pipe\…`) are
//! mangled by every format differently.
//!
//! - Shell command lines (`claude mcp add …`): POSIX single quotes on Unix
//!   (`'it'\''s'`); on Windows the quoting `CommandLineToArgvW` undoes
//!   (double quotes, backslashes doubled only before a quote), which cmd.exe
//!   passes through. A word that needs no quotes gets none, so a pipe name
//!   reads as the README writes it.
//! - JSON (`.mcp.json`, VS Code): written by `serde_json`, which doubles
//!   every backslash.
//! - TOML (Codex): literal strings (`'C:\Program Files\…'`), where a
//!   backslash is itself; a value holding a `'` or a control character
//!   cannot be one, and gets a basic string with escapes instead.
//!
//! Given `--app`, the configurations name the app, not its endpoint
//! ([`for_app`](crate::endpoint::for_app)), and the identity only as given
//! (what the bridge learns from the CLI it learns wherever it runs): the
//! same for every user and OS but for this executable's path, which the
//! report says to replace by `mcp-bridge` on `PATH` to check it in.

use std::fmt::Write;

use serde_json::{json, Value};

/// The configuration that runs this bridge against the checked endpoint,
/// in each CLI's format.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snippets {
    /// The server's name in the configurations: from the server's own
    /// `serverInfo.name`, cut to the characters every CLI accepts.
    pub name: String,
    /// This executable's absolute path.
    pub command: String,
    /// The arguments, starting with `mcp-server`.
    pub args: Vec<String>,
    /// The `claude mcp add …` command line for this platform's shell.
    pub claude_code: String,
    /// The `.mcp.json` document (Claude Code's project scope; the same
    /// shape serves Cursor and Gemini CLI).
    pub mcp_json: Value,
    /// The `~/.codex/config.toml` table.
    pub codex_toml: String,
    /// The `.vscode/mcp.json` document.
    pub vscode: Value,
    /// Whether the endpoint is named by the app (`--app`) and no other
    /// option names a path of this machine (`--log`, `--cache-dir`), so
    /// the configurations fit every user and OS once `command` is a name
    /// on `PATH`.
    pub portable: bool,
}

/// Which shell the command line is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shell {
    Posix,
    Windows,
}

impl Shell {
    /// The shell of the platform we run on.
    pub(super) const HERE: Shell = if cfg!(windows) {
        Shell::Windows
    } else {
        Shell::Posix
    };

    fn quote(self, word: &str) -> String {
        match self {
            Shell::Posix => posix_quote(word),
            Shell::Windows => windows_quote(word),
        }
    }
}

/// The name used when the server gives none that can be used.
const FALLBACK_NAME: &str = "app";

/// Longest server name written: CLIs show it in lists and prefix tool
/// names with it.
const NAME_LIMIT: usize = 40;

/// A server name every CLI accepts (letters, digits, `-` and `_`; Codex
/// needs no quotes around such a TOML key), made from `wanted`.
pub(super) fn server_name(wanted: Option<&str>) -> String {
    let mut name = String::new();
    for c in wanted.unwrap_or("").chars() {
        if name.len() >= NAME_LIMIT {
            break;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_end_matches('-');
    if name.is_empty() {
        FALLBACK_NAME.to_string()
    } else {
        name.to_string()
    }
}

impl Snippets {
    /// Every format, for this platform's shell.
    pub(super) fn new(name: &str, command: &str, args: Vec<String>) -> Snippets {
        Snippets::for_shell(name, command, args, Shell::HERE)
    }

    pub(super) fn for_shell(
        name: &str,
        command: &str,
        args: Vec<String>,
        shell: Shell,
    ) -> Snippets {
        let mut claude_code = format!(
            "claude mcp add {} -- {}",
            shell.quote(name),
            shell.quote(command)
        );
        for arg in &args {
            claude_code.push(' ');
            claude_code.push_str(&shell.quote(arg));
        }
        let mcp_json = json!({"mcpServers": {name: {"command": command, "args": args}}});
        let vscode =
            json!({"servers": {name: {"type": "stdio", "command": command, "args": args}}});
        let quoted: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
        let codex_toml = format!(
            "[mcp_servers.{}]\ncommand = {}\nargs = [{}]\n",
            toml_key(name),
            toml_string(command),
            quoted.join(", ")
        );
        let portable = args.get(1).map_or(false, |flag| flag == "--app");
        Snippets {
            name: name.to_string(),
            command: command.to_string(),
            portable,
            args,
            claude_code,
            mcp_json,
            codex_toml,
            vscode,
        }
    }

    /// `.mcp.json` as text, laid out the way people write it (`command`
    /// before `args`, the arguments on one line); the same document as
    /// [`mcp_json`](Self::mcp_json).
    pub fn mcp_json_text(&self) -> String {
        self.json_text("mcpServers", None)
    }

    /// `.vscode/mcp.json` as text; the same document as
    /// [`vscode`](Self::vscode).
    pub fn vscode_text(&self) -> String {
        self.json_text("servers", Some("stdio"))
    }

    fn json_text(&self, top: &str, kind: Option<&str>) -> String {
        let string = |text: &str| Value::from(text).to_string();
        let args: Vec<String> = self.args.iter().map(|a| string(a)).collect();
        let mut out = format!(
            "{{\n  {}: {{\n    {}: {{\n",
            string(top),
            string(&self.name)
        );
        if let Some(kind) = kind {
            let _ = writeln!(out, "      \"type\": {},", string(kind));
        }
        let _ = write!(
            out,
            "      \"command\": {},\n      \"args\": [{}]\n    }}\n  }}\n}}\n",
            string(&self.command),
            args.join(", ")
        );
        out
    }

    /// The text report's configuration section.
    pub(super) fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Configuration (the command is this executable, '{}'):\n",
            self.command
        );
        if !self.portable && self.args.get(1).map_or(false, |flag| flag == "--app") {
            let _ = writeln!(
                out,
                "With --app the endpoint is the same for every user and OS, but --log or \
                 --cache-dir\nnames a path on this machine: the lines below fit this machine \
                 only.\n"
            );
        }
        if self.portable {
            let _ = writeln!(
                out,
                "With --app this is the same for every user and OS: to check it into a \
                 repository\n(.mcp.json, .vscode/mcp.json), put \"mcp-bridge\" on PATH and \
                 as the command.\n"
            );
        }
        let _ = writeln!(out, "Claude Code:\n  {}\n", self.claude_code);
        let _ = writeln!(
            out,
            ".mcp.json (also .cursor/mcp.json, Gemini CLI's ~/.gemini/settings.json):\n{}",
            self.mcp_json_text()
        );
        let _ = writeln!(
            out,
            "Codex CLI (~/.codex/config.toml):\n{}",
            self.codex_toml
        );
        let _ = write!(out, "VS Code (.vscode/mcp.json):\n{}", self.vscode_text());
        out
    }

    /// The JSON document's `config` member.
    pub(super) fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "command": self.command,
            "args": self.args,
            "claude_code": self.claude_code,
            "mcp_json": self.mcp_json,
            "codex_toml": self.codex_toml,
            "vscode": self.vscode,
            "portable": self.portable,
        })
    }
}

/// `word` for a POSIX shell: as is when it holds nothing a shell would
/// read, otherwise in single quotes (a `'` inside becomes `'\''`).
pub(super) fn posix_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-+=:,./@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `word` for a Windows command line: as is when it holds no space, quote
/// or cmd.exe operator, otherwise in double quotes as `CommandLineToArgvW`
/// reads them: a `"` inside becomes `\"`, and backslashes are doubled only
/// where they come before a `"` (the closing one included), so
/// `C:\Program Files\x` and `\\.\pipe\x` keep theirs as they are.
pub(super) fn windows_quote(word: &str) -> String {
    let special = |c: char| c.is_whitespace() || "\"&|<>^()%!".contains(c);
    if !word.is_empty() && !word.chars().any(special) {
        return word.to_string();
    }
    let mut out = String::from("\"");
    let mut backslashes = 0;
    for c in word.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.push_str(&"\\".repeat(backslashes * 2 + 1));
                out.push('"');
                backslashes = 0;
            }
            _ => {
                out.push_str(&"\\".repeat(backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.push_str(&"\\".repeat(backslashes * 2));
    out.push('"');
    out
}

/// `value` as a TOML string: a literal string (`'…'`, backslashes as they
/// are) when it can be one, otherwise a basic string with escapes.
pub(super) fn toml_string(value: &str) -> String {
    if !value.contains('\'') && !value.chars().any(|c| c.is_control() && c != '\t') {
        return format!("'{}'", value);
    }
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `key` as a TOML key: bare when it can be, quoted otherwise.
fn toml_key(key: &str) -> String {
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !key.is_empty() && key.chars().all(bare) {
        key.to_string()
    } else {
        toml_string(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = r"C:\Program Files\My App\mcp-bridge.exe";
    const PIPE: &str = r"\\.\pipe\myapp-mcp";

    fn windows() -> Snippets {
        let args = [
            "mcp-server",
            "--endpoint",
            PIPE,
            "--requester",
            "agent \"7\"",
        ];
        Snippets::for_shell(
            "myapp",
            EXE,
            args.iter().map(|a| a.to_string()).collect(),
            Shell::Windows,
        )
    }

    /// The values come back out of each format exactly as they went in:
    /// JSON parsed back, TOML read the way its specification says.
    #[test]
    fn windows_paths_survive_every_format() {
        let snippets = windows();
        assert_eq!(
            snippets.claude_code,
            r#"claude mcp add myapp -- "C:\Program Files\My App\mcp-bridge.exe" mcp-server --endpoint \\.\pipe\myapp-mcp --requester "agent \"7\"""#
        );
        let text = serde_json::to_string(&snippets.mcp_json).unwrap();
        assert!(
            text.contains(r#""command":"C:\\Program Files\\My App\\mcp-bridge.exe""#),
            "{}",
            text
        );
        assert!(text.contains(r#""\\\\.\\pipe\\myapp-mcp""#), "{}", text);
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["mcpServers"]["myapp"]["command"], EXE);
        assert_eq!(parsed["mcpServers"]["myapp"]["args"][2], PIPE);
        assert_eq!(snippets.vscode["servers"]["myapp"]["type"], "stdio");
        let text: Value = serde_json::from_str(&snippets.mcp_json_text()).unwrap();
        assert_eq!(text, snippets.mcp_json, "{}", snippets.mcp_json_text());
        let text: Value = serde_json::from_str(&snippets.vscode_text()).unwrap();
        assert_eq!(text, snippets.vscode, "{}", snippets.vscode_text());
        assert!(snippets
            .mcp_json_text()
            .contains(r#""command": "C:\\Program Files\\My App\\mcp-bridge.exe""#));
        assert_eq!(
            snippets.codex_toml,
            "[mcp_servers.myapp]\n\
             command = 'C:\\Program Files\\My App\\mcp-bridge.exe'\n\
             args = ['mcp-server', '--endpoint', '\\\\.\\pipe\\myapp-mcp', '--requester', 'agent \"7\"']\n"
        );
    }

    /// What `CommandLineToArgvW` does with a quoted word: the inverse of
    /// [`windows_quote`], written from Microsoft's documented rules.
    fn command_line_to_argv(word: &str) -> String {
        let mut out = String::new();
        let mut chars = word.chars().peekable();
        let mut quoted = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    let mut n = 1;
                    while chars.peek() == Some(&'\\') {
                        chars.next();
                        n += 1;
                    }
                    if chars.peek() == Some(&'"') {
                        out.push_str(&"\\".repeat(n / 2));
                        if n % 2 == 1 {
                            chars.next();
                            out.push('"');
                        }
                    } else {
                        out.push_str(&"\\".repeat(n));
                    }
                }
                '"' => quoted = !quoted,
                c => out.push(c),
            }
        }
        assert!(!quoted, "unbalanced quotes in {}", word);
        out
    }

    #[test]
    fn windows_quoting_round_trips() {
        for word in [
            EXE,
            PIPE,
            "",
            "plain",
            "two words",
            "trailing\\",
            "trailing space\\",
            "quote\"inside",
            "backslash\\\"quote",
            "C:\\dir with space\\",
            "a&b|c",
        ] {
            let quoted = windows_quote(word);
            assert_eq!(command_line_to_argv(&quoted), word, "{}", quoted);
        }
        assert_eq!(windows_quote(PIPE), PIPE, "pipe names need no quotes");
    }

    #[test]
    fn posix_quoting_keeps_words_whole() {
        assert_eq!(
            posix_quote("/usr/local/bin/mcp-bridge"),
            "/usr/local/bin/mcp-bridge"
        );
        assert_eq!(
            posix_quote("/Applications/My App/mcp-bridge"),
            "'/Applications/My App/mcp-bridge'"
        );
        assert_eq!(posix_quote("it's"), r"'it'\''s'");
        assert_eq!(posix_quote(""), "''");
        assert_eq!(posix_quote("$HOME"), "'$HOME'");
        let snippets = Snippets::for_shell(
            "my-app",
            "/opt/My App/mcp-bridge",
            vec![
                "mcp-server".into(),
                "--endpoint".into(),
                "/run/user/1000/app.sock".into(),
            ],
            Shell::Posix,
        );
        assert_eq!(
            snippets.claude_code,
            "claude mcp add my-app -- '/opt/My App/mcp-bridge' mcp-server --endpoint /run/user/1000/app.sock"
        );
    }

    /// With `--app` the line holds no path or user, and the report says how
    /// to check it in; with `--endpoint` it does not.
    #[test]
    fn an_app_name_makes_a_configuration_to_check_in() {
        let args = |flag: &str, value: &str| vec!["mcp-server".into(), flag.into(), value.into()];
        let portable = Snippets::for_shell("myapp", EXE, args("--app", "myapp"), Shell::Windows);
        assert!(portable.portable);
        assert_eq!(
            portable.mcp_json["mcpServers"]["myapp"]["args"],
            serde_json::json!(["mcp-server", "--app", "myapp"])
        );
        assert!(portable
            .codex_toml
            .contains("args = ['mcp-server', '--app', 'myapp']"));
        assert!(portable
            .to_text()
            .contains("the same for every user and OS"));
        assert_eq!(portable.to_json()["portable"], true);
        let pinned = Snippets::for_shell("myapp", EXE, args("--endpoint", PIPE), Shell::Windows);
        assert!(!pinned.portable);
        assert!(!pinned.to_text().contains("every user and OS"));
    }

    #[test]
    fn toml_falls_back_to_escapes_where_a_literal_string_cannot_go() {
        assert_eq!(toml_string(r"C:\x"), r"'C:\x'");
        assert_eq!(toml_string("it's"), r#""it's""#);
        assert_eq!(toml_string("a\\'b\"c\nd\u{1}"), r#""a\\'b\"c\nd\u0001""#);
        assert_eq!(toml_key("my-app_2"), "my-app_2");
        assert_eq!(toml_key("my app"), "'my app'");
    }

    #[test]
    fn server_names_are_ones_every_cli_accepts() {
        assert_eq!(
            server_name(Some("mcp-bridge-demo-host")),
            "mcp-bridge-demo-host"
        );
        assert_eq!(server_name(Some("My App: Tools!")), "My-App-Tools");
        assert_eq!(server_name(Some("été")), "t");
        assert_eq!(server_name(Some("!!!")), "app");
        assert_eq!(server_name(None), "app");
        assert_eq!(server_name(Some(&"x".repeat(100))).len(), NAME_LIMIT);
    }
}
