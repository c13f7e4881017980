//! `cargo bench --bench stdio`: the bridge with stdio the reactor cannot
//! watch, which it drives from a thread per stream (src/io/thread.rs):
//! a regular file in and a regular file out (throughput), and a terminal
//! (a pseudo-terminal in raw mode) both ways (round trip of a small line).
//! The relay benchmark (`--bench relay`) covers pipes and socketpairs.
//!
//! It measures the bridge `cargo bench` built (or `MCP_BRIDGE_BENCH_BRIDGE`)
//! and, when `MCP_BRIDGE_BENCH_BASELINE` names another build, that one too,
//! interleaved round by round, so both see the same machine. Against the
//! benchmark's own echo app on a Unix socket, with `--no-reconnect` (a plain
//! relay). `MCP_BRIDGE_BENCH_ROUNDS=N` sets the rounds (default 5).
#![cfg_attr(not(unix), allow(dead_code))]

#[cfg(unix)]
fn main() {
    // `cargo test --all-targets` builds benches and runs them without
    // `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    unix::run();
}

#[cfg(not(unix))]
fn main() {}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixListener;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::thread;
    use std::time::Instant;

    /// Bytes through the file relay per round: 64 MiB of 64 KiB lines.
    const FILE_BYTES: usize = 64 << 20;
    const LINE: usize = 64 << 10;
    /// Round trips through the terminal per round.
    const TTY_TRIPS: usize = 500;

    pub fn run() {
        let rounds: usize = std::env::var("MCP_BRIDGE_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5);
        let mut bridges = vec![std::env::var_os("MCP_BRIDGE_BENCH_BRIDGE").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_mcp-bridge")),
            PathBuf::from,
        )];
        if let Some(baseline) = std::env::var_os("MCP_BRIDGE_BENCH_BASELINE") {
            bridges.push(PathBuf::from(baseline));
        }
        let dir =
            std::env::temp_dir().join(format!("mcp-bridge-stdio-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in.jsonl");
        let mut text = Vec::with_capacity(FILE_BYTES);
        while text.len() < FILE_BYTES {
            text.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"");
            text.resize(text.len() + LINE - 45, b'a');
            text.extend_from_slice(b"\"}\n");
        }
        std::fs::write(&input, &text).unwrap();

        let mut files: Vec<Vec<f64>> = vec![Vec::new(); bridges.len()];
        let mut ttys: Vec<Vec<f64>> = vec![Vec::new(); bridges.len()];
        for _ in 0..rounds {
            for (i, bridge) in bridges.iter().enumerate() {
                files[i].push(file_round(bridge, &dir, &input, text.len()));
                ttys[i].extend(tty_round(bridge, &dir));
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();

        println!("{:<44} {:>12} {:>12}", "", "MiB/s p50", "tty RTT p50");
        for (i, bridge) in bridges.iter().enumerate() {
            println!(
                "{:<44} {:>12.0} {:>9.1} us",
                bridge.display().to_string(),
                median(&mut files[i]),
                median(&mut ttys[i]) * 1e6
            );
        }
    }

    fn median(values: &mut [f64]) -> f64 {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap());
        values[values.len() / 2]
    }

    /// An app that echoes everything after the handshake line.
    fn echo_app(socket: &Path) -> thread::JoinHandle<()> {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).unwrap();
        thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::with_capacity(LINE, stream);
            let mut handshake = String::new();
            reader.read_line(&mut handshake).unwrap();
            let _ = std::io::copy(&mut reader, &mut writer);
        })
    }

    fn bridge(path: &Path, socket: &Path, stdin: Stdio, stdout: Stdio) -> Child {
        Command::new(path)
            .args(["mcp-server", "--no-reconnect", "--endpoint"])
            .arg(socket)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// One file through the bridge and back into a file: MiB/s.
    fn file_round(path: &Path, dir: &Path, input: &Path, len: usize) -> f64 {
        let socket = dir.join("s.sock");
        let output = dir.join("out.jsonl");
        let app = echo_app(&socket);
        let started = Instant::now();
        let mut child = bridge(
            path,
            &socket,
            Stdio::from(File::open(input).unwrap()),
            Stdio::from(File::create(&output).unwrap()),
        );
        assert!(child.wait().unwrap().success());
        let elapsed = started.elapsed();
        app.join().unwrap();
        assert_eq!(std::fs::metadata(&output).unwrap().len(), len as u64);
        len as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
    }

    /// Small lines typed into a raw terminal and read back: seconds each.
    fn tty_round(path: &Path, dir: &Path) -> Vec<f64> {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};

        let socket = dir.join("t.sock");
        let app = echo_app(&socket);
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let terminal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        let mut mode = tcgetattr(&terminal).unwrap();
        mode.make_raw();
        tcsetattr(&terminal, OptionalActions::Now, &mode).unwrap();
        let mut child = bridge(
            path,
            &socket,
            Stdio::from(terminal.try_clone().unwrap()),
            Stdio::from(terminal),
        );
        let mut master = File::from(master);
        let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"pad\":\"0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234\"}}\n";
        let mut back = vec![0u8; line.len()];
        let mut times = Vec::with_capacity(TTY_TRIPS);
        for _ in 0..TTY_TRIPS {
            let started = Instant::now();
            master.write_all(line).unwrap();
            master.read_exact(&mut back).unwrap();
            times.push(started.elapsed().as_secs_f64());
            assert_eq!(&back[..], &line[..]);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        drop(master);
        app.join().unwrap();
        times
    }
}
