//! The `mcp-bridge` binary: parse the command line into the library's
//! configuration types, run one command, and turn its outcome into an exit
//! code and at most one line on stderr. The command line ([`cli`]) and the
//! demonstration ([`demo`]) belong to the binary; everything else is the
//! library's.
//!
//! On Unix the binary starts from a C `main` of its own (`src/ffi/entry.rs`,
//! the only `unsafe` of the binary) instead of std's start-up, which is 15.9
//! KB it does not need; its unit tests keep std's.
#![cfg_attr(all(unix, not(test)), no_main)]
#![deny(unsafe_code)]

mod cli;
// The library's (src/decimal.rs says why it is in both).
#[cfg(feature = "demo")]
#[path = "decimal.rs"]
mod decimal;
#[cfg(feature = "demo")]
mod demo;
#[cfg(all(unix, not(test)))]
#[allow(unsafe_code)]
#[path = "ffi/entry.rs"]
mod entry;

use std::error::Error;
use std::ffi::OsString;
use std::io;

use cli::Command;
use mcp_bridge::bridge::{self, BridgeError};
#[cfg(feature = "doctor")]
use mcp_bridge::doctor;
#[cfg(feature = "serve")]
use mcp_bridge::serve;

/// Exit code for a command line that cannot be run.
const USAGE: u8 = 2;

/// Exit code for a command that failed.
const FAILURE: u8 = 1;

/// std's start-up, where the binary has no entry of its own (Windows, and
/// the binary's unit tests).
#[cfg(not(all(unix, not(test))))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(run_main(std::env::args_os().skip(1).collect()))
}

/// The whole program, from the arguments after the program's name to the
/// exit code.
fn run_main(args: Vec<OsString>) -> u8 {
    if args.is_empty() {
        // Not an error line: someone ran us by hand to see what we are.
        report(cli::usage());
        return USAGE;
    }
    let command = match cli::parse(args) {
        Ok(command) => command,
        Err(e) => {
            report(&format!("mcp-bridge: {} (see 'mcp-bridge --help')\n", e));
            return USAGE;
        }
    };
    match run(command) {
        Ok(()) => {
            // A success may have warned on the way (a traffic log refused,
            // say): those lines are still queued for stderr, and an exit
            // now would lose the ones the writer thread has not reached.
            mcp_bridge::diag::flush(LAST_WORDS);
            0
        }
        Err(e) => {
            let hint = hint(&*e).map_or(String::new(), |h| format!(" ({})", h));
            report(&format!(
                "mcp-bridge: {}{}\n",
                mcp_bridge::error_chain(&*e),
                hint
            ));
            FAILURE
        }
    }
}

/// Runs one parsed command. Every failure comes back here as an error; the
/// only output on stdout is the command's own (for `mcp-server`, relayed
/// bytes and nothing else).
fn run(command: Command) -> Result<(), Box<dyn Error>> {
    match command {
        Command::Help => print(cli::usage()),
        Command::Version => print(cli::version_line()),
        Command::Bridge(config) => bridge::run(&config).map(drop).map_err(Into::into),
        #[cfg(feature = "serve")]
        Command::Serve(config) => serve::run(&config).map_err(Into::into),
        #[cfg(feature = "demo")]
        Command::Demo => {
            // Flushed here: with the binary's own entry (Unix), nothing
            // flushes std's stdout at exit.
            let mut out = io::stdout();
            let ran = demo::run(&mut out);
            let _ = io::Write::flush(&mut out);
            ran.map_err(Into::into)
        }
        #[cfg(feature = "doctor")]
        Command::Doctor { config, json } => {
            let report = doctor::run(&config);
            if json {
                print(&format!("{}\n", report.to_json_text()))?;
            } else {
                print(&report.to_text())?;
            }
            report.error().map_or(Ok(()), |e| Err(e.into()))
        }
    }
}

/// What to do about an error, in terms of this binary's options: the
/// library's messages name the fault, and the binary names the flag
/// ([`cli::hint`], which `doctor` prints after its step too).
fn hint(error: &(dyn Error + 'static)) -> Option<&'static str> {
    match error.downcast_ref::<BridgeError>() {
        Some(BridgeError::Connect(e)) => cli::hint::connect(e.absence()),
        _ => None,
    }
}

/// Prints to stdout. A reader that went away (`mcp-bridge --help | head -1`)
/// is a normal way to stop reading, not an error worth a message.
fn print(text: &str) -> Result<(), Box<dyn Error>> {
    match write_stdout(text.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to stdout: {}", e).into())
        }
        _ => Ok(()),
    }
}

/// All of `bytes` to fd 1, without std's `Stdout` handle (its lock and line
/// buffer: code the binary needs for nothing else on Unix).
#[cfg(all(unix, not(test)))]
fn write_stdout(mut bytes: &[u8]) -> io::Result<()> {
    let stdout = entry::stdout();
    while !bytes.is_empty() {
        match rustix::io::write(stdout, bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            // (`get`: no panic site for a count the kernel keeps in range.)
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(not(all(unix, not(test))))]
fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut out = io::stdout();
    out.write_all(bytes).and_then(|()| out.flush())
}

/// Writes a diagnostic on stderr through the library's queue, which never
/// blocks and never panics, then gives it at most [`LAST_WORDS`] to get
/// there: a stderr that is closed or full of unread lines must not turn the
/// exit into a crash or a hang, and the exit code still tells the story.
fn report(text: &str) {
    mcp_bridge::diag::write_line(text.as_bytes());
    mcp_bridge::diag::flush(LAST_WORDS);
}

/// How long the last diagnostic may take to reach stderr before we exit
/// anyway.
const LAST_WORDS: std::time::Duration = std::time::Duration::from_secs(1);
