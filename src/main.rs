//! The `mcp-bridge` binary: parse the command line, run one command, map the
//! outcome to an exit code. Everything else lives in the library.

use std::io::{self, Write};
use std::process::ExitCode;

use mcp_bridge::cli::{self, Command};
use mcp_bridge::{bridge, demo, serve};

/// Exit code for a command line that cannot be run.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if args.is_empty() {
        eprint!("{}", cli::usage());
        return ExitCode::from(USAGE);
    }
    let command = match cli::parse(args) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("mcp-bridge: {} (see 'mcp-bridge --help')", e);
            return ExitCode::from(USAGE);
        }
    };
    match command {
        Command::Help => print(&cli::usage()),
        Command::Version => print(&format!("{}\n", cli::version_line())),
        Command::McpServer(args) => match bridge::run(&args) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mcp-bridge: {}", e);
                ExitCode::FAILURE
            }
        },
        Command::Serve(args) => match serve::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mcp-bridge: {}", e);
                ExitCode::FAILURE
            }
        },
        Command::Demo => match demo::run(&mut io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mcp-bridge: demo failed: {}", e);
                ExitCode::FAILURE
            }
        },
    }
}

/// Prints to stdout. A reader that went away (`mcp-bridge --help | head -1`)
/// is a normal way to stop reading, not an error worth a message.
fn print(text: &str) -> ExitCode {
    let mut out = io::stdout();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-bridge: cannot write to stdout: {}", e);
            ExitCode::FAILURE
        }
    }
}
