//! What to do about a failure, in the words of `mcp-server`'s options: the
//! hint the binary prints after an error message, in parentheses. The
//! library's messages name the fault and never a flag: they also reach apps
//! that call the library with no such options, and MCP clients in the
//! bridge's JSON-RPC errors.
//!
//! The binary's, and compiled through `#[path]` into the library's doctor
//! too, whose report speaks in `mcp-server`'s options throughout and prints
//! the same hint after the same message.

use std::io;

/// The hint for a failed connect, from its facts: whether waiting may cure
/// it (`ConnectError::may_heal`) and its OS error's kind
/// (`ConnectError::io_error`). Only where the message alone leaves the user
/// guessing.
pub(crate) fn connect(may_heal: bool, kind: io::ErrorKind) -> Option<&'static str> {
    match kind {
        _ if !may_heal => None,
        io::ErrorKind::NotFound => Some("is the app running, and is --endpoint right?"),
        io::ErrorKind::TimedOut => Some("raise --connect-timeout if it is just slow to start"),
        _ => None,
    }
}
