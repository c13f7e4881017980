//! The usage text of a build without every command: the bridge-only build
//! an app bundles (`--no-default-features`), or one a bundler made with a
//! few of the features. It is `usage_bridge.txt`, the bridge's part of the
//! full text, with what this build has filled in: the `--log` option says
//! whether there is a log to write, and the other commands built in are
//! named.

use mcp_bridge::bridge;

/// The text printed by `--help`.
pub fn usage() -> String {
    let log = if cfg!(feature = "log") {
        format!(
            "    --log <FILE>                 Append one line per message and per event to FILE\n\
             \x20                                (owner-only; rotated to FILE.1 at {} MiB, or\n\
             \x20                                MCP_BRIDGE_LOG_MAX_BYTES). Default: MCP_BRIDGE_LOG\n",
            mcp_bridge::traffic_log::DEFAULT_MAX_FILE_BYTES >> 20
        )
    } else {
        "    --log <FILE>                 Accepted (as is MCP_BRIDGE_LOG), but this build keeps\n\
         \x20                                no traffic log: it says so on stderr and relays\n"
            .to_string()
    };
    let others: Vec<&str> = [
        ("serve", cfg!(feature = "serve")),
        ("doctor", cfg!(feature = "doctor")),
        ("demo", cfg!(feature = "demo")),
    ]
    .iter()
    .filter(|&&(_, built)| built)
    .map(|&(name, _)| name)
    .collect();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!(
            "    {:<12} Also in this build; the README describes them.\n",
            others.join(", ")
        )
    };
    include_str!("usage_bridge.txt")
        .replace("{VERSION}", env!("CARGO_PKG_VERSION"))
        .replace(
            "{TIMEOUT}",
            &bridge::DEFAULT_CONNECT_TIMEOUT.as_secs().to_string(),
        )
        .replace(
            "{RECONNECT}",
            &bridge::DEFAULT_RECONNECT_TIMEOUT.as_secs().to_string(),
        )
        .replace("{LOG}", &log)
        .replace("{OTHERS}", &others)
}
