//! Records the facts `mcp-bridge --version` prints beside the version: the git
//! commit the binary was built from, the target triple, and which build it is
//! (`full`, `bridge-only`, or the features of one in between). They help a
//! user's bug report name exactly which build misbehaved. They are known
//! here, so the line is one constant in the binary, with no code to make it.
//!
//! The commit is this crate's own or none ("unknown"), never a wrong one: a
//! packaged crate (crates.io, `cargo package`, `cargo vendor`) names the commit
//! it was packaged from in `.cargo_vcs_info.json`; a git checkout counts only
//! if this crate's directory is the top of the repository, because a copy
//! vendored into an app's own repository would otherwise print the app's
//! commit.
//!
//! It also tells the crate whether the compiler's std has
//! `CommandExt::process_group` (Rust 1.64, one release after this crate's
//! minimum), as the cfg `mcp_bridge_process_group`: with it, a child leads a
//! new process group through `posix_spawn`'s own attribute, without the
//! `pre_exec` hook that forces std to `fork` the whole parent instead. For
//! `serve`, spawning a child per connection, that is a third of its CPU.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How many hex digits of the commit `--version` prints.
const COMMIT_DIGITS: usize = 12;

fn main() {
    let commit = own_commit().unwrap_or_else(|| "unknown".to_string());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=MCP_BRIDGE_GIT_COMMIT={}", commit);
    println!("cargo:rustc-env=MCP_BRIDGE_TARGET={}", target);
    println!("cargo:rustc-env=MCP_BRIDGE_BUILD={}", build_name());
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
    usage_text();
}

/// `--help`'s text for this build, filled in here so that the binary holds
/// it as one constant (`src/cli/usage.rs` includes it), with no code to put
/// it together: `usage_full.txt` for a build with every command, otherwise
/// `usage_bridge.txt` with the commands this build has; this build's `--log`
/// lines; the version and the library's defaults. The defaults are written
/// here as the library's constants say (`bridge::DEFAULT_CONNECT_TIMEOUT`,
/// `DEFAULT_RECONNECT_TIMEOUT`, `traffic_log::DEFAULT_MAX_FILE_BYTES`,
/// `serve::DEFAULT_MAX_CONNECTIONS`, `doctor::DEFAULT_TIMEOUT`); the cli's
/// unit test `usage_is_the_template_filled_in` fills the templates in from
/// the constants themselves and fails if they part.
fn usage_text() {
    let feature = |name: &str| std::env::var_os(format!("CARGO_FEATURE_{}", name)).is_some();
    let read = |name: &str| {
        let path = format!("src/cli/{}", name);
        println!("cargo:rerun-if-changed={}", path);
        std::fs::read_to_string(&path).expect("cannot read a usage text of src/cli")
    };
    let commands = [
        ("serve", feature("SERVE")),
        ("doctor", feature("DOCTOR")),
        ("demo", feature("DEMO")),
    ];
    let mut text = if commands.iter().all(|c| c.1) {
        read("usage_full.txt")
    } else {
        let built: Vec<&str> = commands.iter().filter(|c| c.1).map(|c| c.0).collect();
        let others = match built.join(", ") {
            none if none.is_empty() => none,
            some => format!(
                "    {:<12} Also in this build; the README describes them.\n",
                some
            ),
        };
        read("usage_bridge.txt").replace("{OTHERS}", &others)
    };
    let log = read(match feature("LOG") {
        true => "usage_log.txt",
        false => "usage_no_log.txt",
    });
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    text = text.replace("{VERSION}", &version).replace("{LOG}", &log);
    for (name, value) in [
        ("{TIMEOUT}", 5),
        ("{RECONNECT}", 30),
        ("{LOG_MAX}", 10),
        ("{MAX}", 64),
        ("{DOCTOR_TIMEOUT}", 10),
    ] {
        text = text.replace(name, &value.to_string());
    }
    let out =
        Path::new(&std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("usage.txt");
    std::fs::write(out, text).expect("cannot write the usage text into OUT_DIR");
}

/// This crate's own commit, shortened, if it can be told (see the module
/// doc); names the files whose change means another commit, so cargo runs
/// this again when HEAD moves.
fn own_commit() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let vcs_info = dir.join(".cargo_vcs_info.json");
    if vcs_info.exists() {
        println!("cargo:rerun-if-changed=.cargo_vcs_info.json");
        // `{"git": {"sha1": "<40 hex digits>"}, ...}`, written by cargo.
        let text = std::fs::read_to_string(&vcs_info).ok()?;
        let after = &text[text.find("\"sha1\"")? + 6..];
        let start = after.find('"')? + 1;
        let sha1 = &after[start..];
        let len = sha1.find('"')?;
        return short(&sha1[..len]);
    }
    let toplevel = git(&dir, &["rev-parse", "--show-toplevel"])?;
    if !same_dir(Path::new(&toplevel), &dir) {
        return None;
    }
    // Rebuild when HEAD moves (`--git-path`: a worktree's HEAD is not under
    // `.git/`). Only name files that exist: cargo reruns a build script on
    // every build when a named file is missing.
    for file in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(path) = git(&dir, &["rev-parse", "--git-path", file]) {
            if dir.join(&path).exists() {
                println!("cargo:rerun-if-changed={}", path);
            }
        }
    }
    short(&git(&dir, &["rev-parse", "HEAD"])?)
}

/// Which build this is: `full` (every feature of Cargo.toml's `default`,
/// which lists them all), `bridge-only` (none), or `features: ` and the
/// ones it has, as Cargo.toml names them (`features: host,log`).
fn build_name() -> String {
    let manifest = std::fs::read_to_string("Cargo.toml").unwrap_or_default();
    let all: Vec<&str> = manifest
        .lines()
        .find_map(|line| line.strip_prefix("default = ["))
        .map(|list| list.trim_end_matches(']').split(','))
        .into_iter()
        .flatten()
        .map(|name| name.trim().trim_matches('"'))
        .filter(|name| !name.is_empty())
        .collect();
    // Cargo says which are on: `CARGO_FEATURE_<NAME>`, upper case, `_` for `-`.
    let on: Vec<&str> = all
        .iter()
        .copied()
        .filter(|name| {
            let var = format!("CARGO_FEATURE_{}", name.to_uppercase().replace('-', "_"));
            std::env::var_os(var).is_some()
        })
        .collect();
    if on.is_empty() {
        "bridge-only".to_string()
    } else if on.len() == all.len() {
        "full".to_string()
    } else {
        format!("features: {}", on.join(","))
    }
}

/// The first [`COMMIT_DIGITS`] of a commit id, if it is one.
fn short(commit: &str) -> Option<String> {
    let hex = commit.len() >= COMMIT_DIGITS && commit.bytes().all(|b| b.is_ascii_hexdigit());
    if hex {
        Some(commit[..COMMIT_DIGITS].to_string())
    } else {
        None
    }
}

/// What `git <args>` prints in `dir`, trimmed; `None` if git is missing,
/// fails, or prints nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

/// Whether two paths name the same directory, links resolved.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
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
