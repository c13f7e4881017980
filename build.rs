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

    no_unwind_tables();
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

/// Links a release binary without unwind tables on Linux: 55 KB of the
/// bridge-only build's 495 KB were `.eh_frame` (the tables a panic unwinds
/// by), its index `.eh_frame_hdr` and the landing pads' `.gcc_except_table`,
/// nearly all of them std's, which comes compiled with them. A binary built
/// with `panic = "abort"` never unwinds: a panic prints its message and
/// aborts as before, only a `RUST_BACKTRACE` trace comes out empty. The
/// linker script is an addition to the linker's own (`INSERT`), which GNU ld
/// and lld both read; the executable stays position-independent.
///
/// Only for the `release` profile (and `bench`, which inherits it), whose
/// `panic = "abort"` Cargo.toml sets, unless the environment overrides it
/// (`CARGO_PROFILE_RELEASE_PANIC=unwind`); debug and test builds unwind.
/// `MCP_BRIDGE_KEEP_UNWIND_TABLES=1` keeps them (to measure, or to get a
/// backtrace out of a release build).
fn no_unwind_tables() {
    println!("cargo:rerun-if-env-changed=MCP_BRIDGE_KEEP_UNWIND_TABLES");
    println!("cargo:rerun-if-env-changed=CARGO_PROFILE_RELEASE_PANIC");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // (`CARGO_CFG_PANIC` is the target's default, not the profile's.)
    if var("PROFILE") != "release"
        || var("CARGO_PROFILE_RELEASE_PANIC") == "unwind"
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || std::env::var_os("MCP_BRIDGE_KEEP_UNWIND_TABLES").is_some()
    {
        return;
    }
    let script = Path::new(&var("OUT_DIR")).join("no-unwind-tables.ld");
    std::fs::write(
        &script,
        "SECTIONS\n{\n  /DISCARD/ : { *(.eh_frame) *(.eh_frame_hdr) \
         *(.gcc_except_table .gcc_except_table.*) }\n}\nINSERT AFTER .text;\n",
    )
    .expect("cannot write the linker script into OUT_DIR");
    // `-T<script>`, one argument that cc and a bare ld (musl builds link
    // with rust-lld directly) both read.
    println!("cargo:rustc-link-arg-bins=-T{}", script.display());
}
