//! The `mcp-bridge` binary: parse the command line into the library's
//! configuration types, run one command, and turn its outcome into an exit
//! code and at most one line on stderr. The command line ([`cli`]) and the
//! demonstration ([`demo`]) belong to the binary; everything else is the
//! library's.

mod cli;
// The library's (src/decimal.rs says why it is in both).
#[cfg(feature = "demo")]
#[path = "decimal.rs"]
mod decimal;
#[cfg(feature = "demo")]
mod demo;

use std::error::Error;
use std::io::{self, Write};
use std::process::ExitCode;

use cli::Command;
use mcp_bridge::bridge::{self, BridgeError};
#[cfg(feature = "doctor")]
use mcp_bridge::doctor;
#[cfg(feature = "serve")]
use mcp_bridge::serve;

/// Exit code for a command line that cannot be run.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if args.is_empty() {
        // Not an error line: someone ran us by hand to see what we are.
        report(&cli::usage());
        return ExitCode::from(USAGE);
    }
    let command = match cli::parse(args) {
        Ok(command) => command,
        Err(e) => {
            report(&format!("mcp-bridge: {} (see 'mcp-bridge --help')\n", e));
            return ExitCode::from(USAGE);
        }
    };
    match run(command) {
        Ok(()) => {
            // A success may have warned on the way (a traffic log refused,
            // say): those lines are still queued for stderr, and an exit
            // now would lose the ones the writer thread has not reached.
            mcp_bridge::diag::flush(LAST_WORDS);
            ExitCode::SUCCESS
        }
        Err(e) => {
            let hint = hint(&*e).map_or(String::new(), |h| format!(" ({})", h));
            report(&format!(
                "mcp-bridge: {}{}\n",
                mcp_bridge::error_chain(&*e),
                hint
            ));
            ExitCode::FAILURE
        }
    }
}

/// Runs one parsed command. Every failure comes back here as an error; the
/// only output on stdout is the command's own (for `mcp-server`, relayed
/// bytes and nothing else).
fn run(command: Command) -> Result<(), Box<dyn Error>> {
    match command {
        Command::Help => print(&cli::usage()),
        Command::Version => print(&format!("{}\n", cli::version_line())),
        Command::Bridge(config) => bridge::run(&config).map(drop).map_err(Into::into),
        #[cfg(feature = "serve")]
        Command::Serve(config) => serve::run(&config).map_err(Into::into),
        #[cfg(feature = "demo")]
        Command::Demo => demo::run(&mut io::stdout()).map_err(Into::into),
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
/// library's messages describe the fault, and the flags are named apart from
/// them, by `ConnectError::hint` (one copy, which `doctor` prints too).
fn hint(error: &(dyn Error + 'static)) -> Option<&'static str> {
    match error.downcast_ref::<BridgeError>() {
        Some(BridgeError::Connect(e)) => e.hint(),
        _ => None,
    }
}

/// Prints to stdout. A reader that went away (`mcp-bridge --help | head -1`)
/// is a normal way to stop reading, not an error worth a message.
fn print(text: &str) -> Result<(), Box<dyn Error>> {
    let mut out = io::stdout();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to stdout: {}", e).into())
        }
        _ => Ok(()),
    }
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
