//! Windows specifics of doctor: the endpoint is a named pipe, which has no
//! file to look at (opening it to ask would take one of the app's pipe
//! instances), so only its name is checked here; who serves it is checked
//! once connected, as the bridge does.

use std::path::Path;

/// Named pipes have no half-close: closing our end is the whole close.
pub(super) const HALF_CLOSE: bool = false;

/// What the endpoint's name says before anything connects to it: checked
/// as the bridge checks it (`\\.\pipe\NAME`, with no `.` or `..`
/// components and no `/`, which could lead to a file or another machine).
#[derive(Debug)]
pub(super) struct Facts {
    /// Worth connecting to: a pipe name.
    pub(super) usable: bool,
    pub(super) detail: String,
    pub(super) warnings: Vec<String>,
}

pub(super) fn inspect(path: &Path) -> Facts {
    let checked = crate::endpoint::pipe_name(path);
    Facts {
        usable: checked.is_ok(),
        detail: match checked {
            Ok(_) => "a named pipe name".to_string(),
            Err(e) => format!("not a usable pipe name: {}", e),
        },
        warnings: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_names_are_checked_as_the_bridge_does() {
        assert!(inspect(Path::new(r"\\.\pipe\app")).usable);
        for bad in [
            r"\\.\pipe\..\C:\windows\win.ini",
            r"\\.\pipe\a/b",
            r"C:\app.sock",
        ] {
            let facts = inspect(Path::new(bad));
            assert!(!facts.usable, "{}", bad);
            assert!(
                facts.detail.starts_with("not a usable pipe name"),
                "{}",
                facts.detail
            );
        }
    }
}
