//! Stdio the reactor cannot watch: regular files and terminals. The bridge
//! drives them from a thread of their own (src/io/thread.rs); these
//! tests relay through them both ways, with a real bridge process, a real
//! file, a real pseudo-terminal and an echoing app.
#![cfg(unix)]

mod support;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::process::{Child, Command, Stdio};
use std::thread;

use support::{within, TempDir, BIN, HANG_GUARD};

/// Accepts one bridge, checks its handshake line, and echoes everything
/// after it until the bridge half-closes.
fn echo_app(listener: UnixListener) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        let mut handshake = String::new();
        reader.read_line(&mut handshake).unwrap();
        assert!(handshake.starts_with("{\"project\":"), "{}", handshake);
        // A bridge killed mid-echo makes this fail: what came back is checked.
        let _ = std::io::copy(&mut reader, &mut writer);
    })
}

fn bridge(socket: &std::path::Path, stdin: Stdio, stdout: Stdio) -> Child {
    Command::new(BIN)
        .args(["mcp-server", "--no-reconnect", "--endpoint"])
        .arg(socket)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn exit_of(child: Child) -> std::process::Output {
    smol::block_on(within("the bridge to exit", async move {
        smol::unblock(move || child.wait_with_output().unwrap()).await
    }))
}

/// Lines of every length up to well past the relay's buffer, so reads and
/// writes split them.
fn messages() -> Vec<u8> {
    let mut bytes = Vec::new();
    for (i, len) in [0usize, 1, 100, 4095, 4096, 65_537, 300_000]
        .iter()
        .enumerate()
    {
        bytes.extend_from_slice(format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"p\":\"", i).as_bytes());
        bytes.extend(std::iter::repeat(b'x').take(*len));
        bytes.extend_from_slice(b"\"}\n");
    }
    bytes
}

#[test]
fn regular_files_as_stdin_and_stdout() {
    let dir = TempDir::new("stdio-files", 0o700);
    let input = messages();
    let (in_path, out_path) = (dir.0.join("in.jsonl"), dir.0.join("out.jsonl"));
    std::fs::write(&in_path, &input).unwrap();
    let app = echo_app(UnixListener::bind(dir.socket()).unwrap());
    let child = bridge(
        &dir.socket(),
        Stdio::from(File::open(&in_path).unwrap()),
        Stdio::from(File::create(&out_path).unwrap()),
    );
    let out = exit_of(child);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}", stderr);
    app.join().unwrap();
    let output = std::fs::read(&out_path).unwrap();
    assert_eq!(output.len(), input.len(), "{}", stderr);
    assert!(output == input, "the file's bytes came back changed");
}

/// An empty file is an immediate end of input: the bridge connects, sends
/// its handshake, half-closes and exits cleanly.
#[test]
fn an_empty_file_as_stdin() {
    let dir = TempDir::new("stdio-empty", 0o700);
    let app = echo_app(UnixListener::bind(dir.socket()).unwrap());
    let out_path = dir.0.join("out");
    let child = bridge(
        &dir.socket(),
        Stdio::from(File::open("/dev/null").unwrap()),
        Stdio::from(File::create(&out_path).unwrap()),
    );
    let out = exit_of(child);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    app.join().unwrap();
    assert_eq!(std::fs::read(&out_path).unwrap(), b"");
}

/// A terminal (a pseudo-terminal in raw mode, so bytes pass unchanged) as
/// both stdin and stdout, as when a person runs the bridge by hand.
#[test]
fn a_terminal_as_stdin_and_stdout() {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};

    let dir = TempDir::new("stdio-tty", 0o700);
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

    let app = echo_app(UnixListener::bind(dir.socket()).unwrap());
    let child = bridge(
        &dir.socket(),
        Stdio::from(terminal.try_clone().unwrap()),
        Stdio::from(terminal),
    );
    let mut master = File::from(master);
    let mut reading = master.try_clone().unwrap();
    // A terminal's input queue is small (4 KiB on Linux): short lines, each
    // read back before the next is typed.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = reading.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if tx.send(got.clone()).is_err() {
                break;
            }
        }
    });
    let mut sent = Vec::new();
    for i in 0..20 {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}}\n", i);
        master.write_all(line.as_bytes()).unwrap();
        sent.extend_from_slice(line.as_bytes());
        loop {
            let got = rx
                .recv_timeout(HANG_GUARD)
                .expect("the echo through the terminal");
            assert!(
                sent.starts_with(&got),
                "{:?}",
                String::from_utf8_lossy(&got)
            );
            if got.len() == sent.len() {
                break;
            }
        }
    }
    // A terminal has no end of input the bridge could see in raw mode: the
    // person would press Ctrl+C.
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
    drop(master);
    drop(rx);
    reader.join().unwrap();
    app.join().unwrap();
}
