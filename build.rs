//! Records the facts `mcp-bridge --version` prints beside the version: the git
//! commit the binary was built from and the target triple. Both help a user's
//! bug report name exactly which build misbehaved.
//!
//! It also tells the crate whether the compiler's std has
//! `CommandExt::process_group` (Rust 1.64, one release after this crate's
//! minimum), as the cfg `mcp_bridge_process_group`: with it, a child leads a
//! new process group through `posix_spawn`'s own attribute, without the
//! `pre_exec` hook that forces std to `fork` the whole parent instead. For
//! `serve`, spawning a child per connection, that is a third of its CPU.

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

    let minor = rustc_minor().unwrap_or(0);
    // Declared for the `unexpected_cfgs` lint (cargo 1.80 on); older cargos
    // would warn that they do not know the instruction.
    if minor >= 80 {
        println!("cargo:rustc-check-cfg=cfg(mcp_bridge_process_group)");
    }
    if minor >= 64 {
        println!("cargo:rustc-cfg=mcp_bridge_process_group");
    }
}

/// The minor version of the compiler cargo builds with (`rustc 1.NN.x ...`),
/// if it can be told.
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    if parts.next()? != "1" {
        return None;
    }
    parts.next()?.parse().ok()
}
