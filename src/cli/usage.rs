//! What `--help` and `--version` print. The text is kept where it reads as
//! it prints: `usage_full.txt` for a build with every command, and
//! `usage_bridge.txt`, its bridge part, for the bridge-only build an app
//! bundles or one with a few features; filled in with the library's
//! defaults, this build's `--log` (`usage_log.txt`, `usage_no_log.txt`) and
//! its other commands. `build.rs` fills them in, so that the text is one
//! constant in the binary.

#[cfg(test)]
use mcp_bridge::bridge;
#[cfg(all(test, feature = "doctor"))]
use mcp_bridge::doctor;
#[cfg(all(test, feature = "serve"))]
use mcp_bridge::serve;
#[cfg(test)]
use mcp_bridge::traffic_log::DEFAULT_MAX_FILE_BYTES;

/// Our commands besides `mcp-server`, and whether this build has each.
const COMMANDS: [(&str, bool); 3] = [
    ("serve", cfg!(feature = "serve")),
    ("doctor", cfg!(feature = "doctor")),
    ("demo", cfg!(feature = "demo")),
];

/// Whether `command` is one of ours that this build was made without.
pub(super) fn left_out_of_this_build(command: &str) -> bool {
    COMMANDS.contains(&(command, false))
}

/// The text printed by `--help`, put together by `build.rs` from the
/// templates beside this file.
pub fn usage() -> &'static str {
    include_str!(concat!(env!("OUT_DIR"), "/usage.txt"))
}

/// The templates filled in at run time from the library's own constants,
/// as `build.rs` fills them in with its copies of their values: the test
/// that the two agree.
#[cfg(test)]
pub(super) fn usage_from_the_constants() -> String {
    #[cfg(all(feature = "serve", feature = "doctor", feature = "demo"))]
    let text = include_str!("usage_full.txt");
    #[cfg(not(all(feature = "serve", feature = "doctor", feature = "demo")))]
    let text = &include_str!("usage_bridge.txt").replace("{OTHERS}", &others());
    // The `--log` option: what it does, or that this build has no log.
    let log = match cfg!(feature = "log") {
        true => include_str!("usage_log.txt"),
        false => include_str!("usage_no_log.txt"),
    };
    let mut text = text
        .replace("{VERSION}", env!("CARGO_PKG_VERSION"))
        .replace("{LOG}", log);
    for (name, value) in [
        ("{TIMEOUT}", bridge::DEFAULT_CONNECT_TIMEOUT.as_secs()),
        ("{RECONNECT}", bridge::DEFAULT_RECONNECT_TIMEOUT.as_secs()),
        ("{LOG_MAX}", DEFAULT_MAX_FILE_BYTES >> 20),
        #[cfg(feature = "serve")]
        ("{MAX}", serve::DEFAULT_MAX_CONNECTIONS as u64),
        #[cfg(feature = "doctor")]
        ("{DOCTOR_TIMEOUT}", doctor::DEFAULT_TIMEOUT.as_secs()),
    ] {
        text = text.replace(name, &value.to_string());
    }
    text
}

/// The line of a build without every command that names the ones it has.
#[cfg(all(
    test,
    not(all(feature = "serve", feature = "doctor", feature = "demo"))
))]
fn others() -> String {
    let built: Vec<&str> = COMMANDS.iter().filter(|c| c.1).map(|c| c.0).collect();
    match built.join(", ") {
        none if none.is_empty() => none,
        some => format!(
            "    {:<12} Also in this build; the README describes them.\n",
            some
        ),
    }
}

/// The line printed by `--version`: version, git commit, target triple and
/// which build this is (`full`, `bridge-only`, or `features: ` and the ones
/// it has), all recorded by `build.rs`; the commit is `unknown` rather than
/// a wrong one. For example
/// `mcp-bridge 0.2.0 (1a2b3c4d5e6f, x86_64-unknown-linux-gnu, bridge-only)`,
/// with its newline: one constant, printed as it is.
pub fn version_line() -> &'static str {
    concat!(
        "mcp-bridge ",
        env!("CARGO_PKG_VERSION"),
        " (",
        env!("MCP_BRIDGE_GIT_COMMIT"),
        ", ",
        env!("MCP_BRIDGE_TARGET"),
        ", ",
        env!("MCP_BRIDGE_BUILD"),
        ")\n"
    )
}
