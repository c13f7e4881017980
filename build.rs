//! Records the facts `mcp-bridge --version` prints beside the version: the git
//! commit the binary was built from and the target triple. Both help a user's
//! bug report name exactly which build misbehaved.

use std::path::Path;
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=MCP_BRIDGE_GIT_COMMIT={}", commit);
    println!("cargo:rustc-env=MCP_BRIDGE_TARGET={}", target);

    // Rebuild when HEAD moves. Only name files that exist: cargo reruns a
    // build script on every build when a named file is missing.
    for file in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if Path::new(file).exists() {
            println!("cargo:rerun-if-changed={}", file);
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
