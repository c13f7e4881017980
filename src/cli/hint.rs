//! What to do about a failure, in the words of `mcp-server`'s options: the
//! hint the binary prints after an error message, in parentheses. The
//! library's messages name the fault and never a flag: they also reach apps
//! that call the library with no such options, and MCP clients in the
//! bridge's JSON-RPC errors.
//!
//! The binary's, and compiled through `#[path]` into the library's doctor
//! too, whose report speaks in `mcp-server`'s options throughout and prints
//! the same hint after the same message.

use super::endpoint::Absence;

/// The hint for a failed connect, from what its error says was absent
/// (`ConnectError::absence`), where the message alone leaves the user
/// guessing.
pub(crate) fn connect(absence: Option<Absence>) -> Option<&'static str> {
    match absence? {
        Absence::NoEndpoint => Some("is the app running, and is --endpoint right?"),
        Absence::TimedOut => Some("raise --connect-timeout if it is just slow to start"),
        // Absence is non-exhaustive, to the binary as to any other crate.
        #[allow(unreachable_patterns)]
        _ => None,
    }
}
