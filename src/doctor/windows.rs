//! Windows specifics of doctor: the endpoint is a named pipe, which has no
//! file to look at (opening it to ask would take one of the app's pipe
//! instances), so only its name is checked here; who serves it is checked
//! once connected, as the bridge does.

use std::path::Path;

/// Named pipes have no half-close: closing our end is the whole close.
pub(super) const HALF_CLOSE: bool = false;

/// Where every pipe name starts.
const PIPE_PREFIX: &str = r"\\.\pipe\";

/// What the endpoint's name says before anything connects to it.
#[derive(Debug)]
pub(super) struct Facts {
    /// Worth connecting to: a pipe name.
    pub(super) usable: bool,
    pub(super) detail: String,
    pub(super) warnings: Vec<String>,
}

pub(super) fn inspect(path: &Path) -> Facts {
    let name = path.to_string_lossy();
    let usable = name.len() > PIPE_PREFIX.len()
        && name
            .get(..PIPE_PREFIX.len())
            .map_or(false, |p| p.eq_ignore_ascii_case(PIPE_PREFIX));
    Facts {
        usable,
        detail: if usable {
            "a named pipe name".to_string()
        } else {
            format!("not a named pipe name ({}NAME)", PIPE_PREFIX)
        },
        warnings: Vec::new(),
    }
}
