//! Who made a request: the caller an MCP client names in each request's
//! `params._meta`. The identity line names one CLI session per bridge (for
//! Codex, whose servers get a wiped environment, only the CLI's process
//! id), while one bridge may carry the calls of several agents: Codex runs
//! its sub-agents as threads of the session that spawned the bridge, and
//! names the thread in each call. The app reads the caller per request,
//! with [`caller`] (public as `mcp_bridge::host::caller`); the traffic log
//! records it.
//!
//! The spec's key comes first: since the 2026-07-28 revision a client
//! names itself in every request's `_meta` as
//! `io.modelcontextprotocol/clientInfo` (`{name, version}`), the same for
//! every client, so an app can tell its callers apart without knowing
//! which CLI it serves. The CLI-specific keys stay as the finer grain:
//! the session, thread and tool use no spec key names.
//!
//! Nothing here is authenticated: any process that can reach the endpoint
//! can write any `_meta`. It says which agent the CLI meant, not who is at
//! the keyboard.

use serde_json::Value;

/// Who made one request, as its MCP client names the caller in the
/// request's `params._meta`: see [`caller`]. The ids are borrowed from
/// the `_meta` they were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Caller<'a> {
    /// The client whose key named the caller: `"codex"`, `"claude-code"`,
    /// `"vscode"`, `"antigravity"` or `"opencode"`; `"mcp"` when only the
    /// spec's `io.modelcontextprotocol/clientInfo` names it.
    pub client: &'static str,
    /// The client's own name, from the spec's
    /// `io.modelcontextprotocol/clientInfo` `name` (what it also sends in
    /// `initialize`'s `clientInfo`).
    pub name: Option<&'a str>,
    /// The client's version, from the same key's `version`.
    pub version: Option<&'a str>,
    /// The CLI session the conversation belongs to, where the client names
    /// one apart from it: Codex's `session_id`, the same for a session's
    /// main thread and every sub-agent thread it spawned.
    pub session: Option<&'a str>,
    /// The agent's conversation the request belongs to: Codex's thread (one
    /// per sub-agent), VS Code's chat session, Antigravity's conversation,
    /// OpenCode's session (one per sub-agent). `None` for Claude Code,
    /// which names only the call (its session is in the identity line).
    pub conversation: Option<&'a str>,
    /// This one call: Codex's turn, Claude Code's tool use (the model's
    /// `toolu_…` id), VS Code's chat request.
    pub call: Option<&'a str>,
}

/// The caller a request's `params._meta` names, or `None` when it names
/// none (no key below, a request sent without `_meta`, a `_meta` that is
/// not an object). The spec's key is read first, then the CLI-specific
/// keys in the order below (the first client whose key holds a non-empty
/// string wins; docs/handshake.md says where each was checked):
///
/// | client | `_meta` key | [`Caller`] field |
/// |---|---|---|
/// | any (the spec, 2026-07-28) | `io.modelcontextprotocol/clientInfo`'s `name`, `version` | `name`, `version` |
/// | Codex | `threadId` (else `x-codex-turn-metadata`'s `thread_id`) | `conversation` |
/// | | `x-codex-turn-metadata`'s `session_id`, `turn_id` | `session`, `call` |
/// | Claude Code | `claudecode/toolUseId` | `call` |
/// | VS Code | `vscode.conversationId`, `vscode.requestId` | `conversation`, `call` |
/// | Antigravity | `antigravity.google/conversation_id` | `conversation` |
/// | OpenCode | `ai.opencode/sessionID` | `conversation` |
///
/// A `_meta` is whatever the peer wrote: this names the agent the CLI
/// meant, and proves nothing.
///
/// ```
/// use mcp_bridge::host::caller;
///
/// let request: serde_json::Value = serde_json::from_str(
///     r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search",
///         "_meta":{"vscode.conversationId":"chat-1","vscode.requestId":"req-9"}}}"#,
/// )
/// .unwrap();
/// // A missing `params` or `_meta` indexes as `null`: no caller.
/// let who = caller(&request["params"]["_meta"]).unwrap();
/// assert_eq!(who.client, "vscode");
/// assert_eq!(who.conversation, Some("chat-1"));
/// assert_eq!(who.call, Some("req-9"));
/// assert_eq!(who.name, None);
/// ```
pub fn caller(meta: &Value) -> Option<Caller<'_>> {
    let info = meta.get(CLIENT_INFO_KEY);
    let (name, version) = (text(info, "name"), text(info, "version"));
    let finer = finer_grain(meta);
    let (client, session, conversation, call) = match finer {
        Some(found) => found,
        None if name.is_some() || version.is_some() => ("mcp", None, None, None),
        None => return None,
    };
    Some(Caller {
        client,
        name,
        version,
        session,
        conversation,
        call,
    })
}

/// The `_meta` key the spec (2026-07-28) gives every request's caller.
const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";

/// The CLI whose own key names the caller, and the session, conversation
/// and call it names.
type Finer<'a> = (
    &'static str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

/// What the CLI-specific keys name, if any holds a non-empty string.
fn finer_grain(meta: &Value) -> Option<Finer<'_>> {
    let key = |name: &str| text(Some(meta), name);
    let turn = meta.get("x-codex-turn-metadata");
    let thread = key("threadId").or_else(|| text(turn, "thread_id"));
    let tool_use = key("claudecode/toolUseId");
    let (chat, request) = (key("vscode.conversationId"), key("vscode.requestId"));
    let (client, session, conversation, call) = if thread.is_some() {
        (
            "codex",
            text(turn, "session_id"),
            thread,
            text(turn, "turn_id"),
        )
    } else if tool_use.is_some() {
        ("claude-code", None, None, tool_use)
    } else if chat.is_some() || request.is_some() {
        ("vscode", None, chat, request)
    } else if let Some(id) = key("antigravity.google/conversation_id") {
        ("antigravity", None, Some(id), None)
    } else {
        ("opencode", None, Some(key("ai.opencode/sessionID")?), None)
    };
    Some((client, session, conversation, call))
}

/// `object[key]`, if it is a non-empty string.
fn text<'a>(object: Option<&'a Value>, key: &str) -> Option<&'a str> {
    object?.get(key)?.as_str().filter(|text| !text.is_empty())
}
