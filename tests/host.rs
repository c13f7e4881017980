//! `mcp_bridge::host::Listener` on real Unix sockets: what gets in, what is
//! kept out, and what happens to the socket file.
#![cfg(unix)]
#![cfg(feature = "host")]

mod support;

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use mcp_bridge::handshake::Handshake;
use mcp_bridge::host::{Connection, Listener, LogSink, Options, HANDSHAKE_LIMIT};
use smol::net::unix::UnixStream;
use support::{assert_hung_up_after_connecting, is_root, spawn_foreign_bridge, within, TempDir};

async fn accept(listener: &Listener) -> Connection {
    within("accept", listener.accept()).await.unwrap()
}

/// Connects and sends a handshake for `requester`.
async fn connect(path: &Path, requester: &str) -> UnixStream {
    let mut stream = UnixStream::connect(path).await.unwrap();
    stream
        .write_all(&Handshake::new("proj", requester).to_line())
        .await
        .unwrap();
    stream
}

/// Reads until the peer closes; a reset (we left bytes unread on its side)
/// counts as closed too.
async fn read_until_closed(stream: &mut UnixStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("read failed: {}", e),
        }
    }
}

#[test]
fn handshake_and_the_bytes_behind_it() {
    let dir = TempDir::new("bytes", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        assert_eq!(listener.endpoint(), dir.socket());
        let mut client = UnixStream::connect(dir.socket()).await.unwrap();
        // The handshake (with CRLF and an extra field) and the first
        // messages in one write, as a fast bridge may deliver them.
        client
            .write_all(
                b"{\"project\":\"p\\\"1\",\"requester\":\"agent-7\",\"v\":2}\r\n\
                  {\"id\":1,\"method\":\"initialize\"}\n{\"id\":2",
            )
            .await
            .unwrap();
        let connection = accept(&listener).await;
        assert_eq!(connection.handshake, Handshake::new("p\"1", "agent-7"));

        let mut writer = connection.writer;
        let mut reader = connection.reader;
        client.write_all(b",\"method\":\"ping\"}\n").await.unwrap();
        client.close().await.unwrap();
        let mut relayed = Vec::new();
        reader.read_to_end(&mut relayed).await.unwrap();
        assert_eq!(
            relayed,
            b"{\"id\":1,\"method\":\"initialize\"}\n{\"id\":2,\"method\":\"ping\"}\n"
        );

        writer
            .write_all(b"{\"id\":1,\"result\":{}}\n")
            .await
            .unwrap();
        writer.close().await.unwrap();
        assert_eq!(
            read_until_closed(&mut client).await,
            b"{\"id\":1,\"result\":{}}\n"
        );
    });
}

/// Issue 43: each connection carries what the kernel knows of the process
/// that connected, not what it wrote: a real bridge's pid (Linux) and our
/// uid, whatever its identity line claims.
#[test]
fn the_connection_names_the_peer_process_the_kernel_saw() {
    let dir = TempDir::new("peer", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mut bridge = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-bridge"))
            .args(["mcp-server", "--endpoint"])
            .arg(dir.socket())
            .args(["--requester", "someone-else", "--no-reconnect"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let connection = accept(&listener).await;
        assert_eq!(connection.handshake.requester, "someone-else");
        let peer = connection.peer;
        assert_eq!(peer.uid, Some(rustix::process::geteuid().as_raw()));
        if cfg!(any(target_os = "linux", target_os = "android")) {
            assert_eq!(peer.pid, Some(bridge.id()));
        }
        drop(bridge.stdin.take());
        drop(connection);
        bridge.wait().unwrap();
    });
}

#[test]
fn socket_is_0600_ours_and_nothing_else_is_left() {
    let dir = TempDir::new("mode", 0o755);
    let listener = Listener::bind(dir.socket()).unwrap();
    let metadata = fs::symlink_metadata(dir.socket()).unwrap();
    assert!(metadata.file_type().is_socket());
    assert_eq!(metadata.mode() & 0o777, 0o600, "mode {:o}", metadata.mode());
    assert_eq!(metadata.uid(), rustix::process::getuid().as_raw());
    assert_eq!(
        dir.entries(),
        ["app.sock"],
        "the private bind directory is gone"
    );
    drop(listener);
    assert!(
        dir.entries().is_empty(),
        "the socket file is removed on drop"
    );
}

#[test]
fn mode_is_0600_whatever_the_umask() {
    // A permissive umask must not widen the socket, even for a moment we
    // could observe: the file appears at its public path already 0600.
    let dir = TempDir::new("umask", 0o755);
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let listener = Listener::bind(dir.socket());
    rustix::process::umask(old);
    let _listener = listener.unwrap();
    let mode = fs::metadata(dir.socket()).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {:o}", mode);
}

#[test]
fn live_socket_is_not_replaced() {
    let dir = TempDir::new("live", 0o700);
    smol::block_on(async {
        let first = Listener::bind(dir.socket()).unwrap();
        let inode = fs::metadata(dir.socket()).unwrap().ino();

        let e = Listener::bind(dir.socket()).unwrap_err();
        assert_eq!(e.io_error().kind(), io::ErrorKind::AddrInUse, "{}", e);
        assert!(
            e.to_string().contains("another process is listening"),
            "{}",
            e
        );
        assert_eq!(fs::metadata(dir.socket()).unwrap().ino(), inode);

        // The first listener still works, and its file was not touched by
        // the failed bind (nor removed by its drop).
        let _client = connect(&dir.socket(), "still-here").await;
        assert_eq!(accept(&first).await.handshake.requester, "still-here");
        assert_eq!(dir.entries(), ["app.sock"]);
    });
}

#[test]
fn live_socket_of_another_program_is_not_replaced() {
    let dir = TempDir::new("foreign-live", 0o700);
    let other = std::os::unix::net::UnixListener::bind(dir.socket()).unwrap();
    let e = Listener::bind(dir.socket()).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::AddrInUse, "{}", e);
    // Its listener is still reachable at the path.
    std::os::unix::net::UnixStream::connect(dir.socket()).unwrap();
    other.accept().unwrap();
}

#[test]
fn stale_socket_is_replaced() {
    let dir = TempDir::new("stale", 0o700);
    // A listener that died without cleaning up: the file stays behind.
    drop(std::os::unix::net::UnixListener::bind(dir.socket()).unwrap());
    assert!(fs::symlink_metadata(dir.socket()).is_ok());
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let mode = fs::metadata(dir.socket()).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {:o}", mode);
        let _client = connect(&dir.socket(), "after-restart").await;
        assert_eq!(accept(&listener).await.handshake.requester, "after-restart");
    });
}

/// Issue 29, seen beside it: root's `serve` (or any app) removed another
/// user's stale socket in a sticky directory such as /tmp, where the
/// kernel would not let that user remove ours. A stale socket is removed
/// only if it is ours; another user's is left where it is, and the bind
/// says whose it is.
#[test]
fn another_users_stale_socket_is_left_alone() {
    if !is_root() {
        eprintln!("skipped: needs root to make a socket of another user");
        return;
    }
    let dir = TempDir::new("stale-theirs", 0o1777);
    drop(std::os::unix::net::UnixListener::bind(dir.socket()).unwrap());
    let nobody = Some(rustix::process::Uid::from_raw(support::NOBODY));
    rustix::fs::chown(dir.socket(), nobody, None).unwrap();
    let e = Listener::bind(dir.socket()).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::AlreadyExists, "{}", e);
    assert_eq!(
        mcp_bridge::error_chain(&e),
        format!(
            "cannot listen on '{}': something that is not ours to replace is in the way; \
             it was left untouched: a stale socket of user {} is at this path (nothing \
             listens); it is not ours to remove",
            dir.socket().display(),
            support::NOBODY
        )
    );
    let left = fs::symlink_metadata(dir.socket()).unwrap();
    assert!(left.file_type().is_socket());
    assert_eq!(left.uid(), support::NOBODY);
    assert_eq!(dir.entries(), ["app.sock"], "and nothing else of ours");
}

#[test]
fn files_that_are_not_sockets_are_left_alone() {
    let dir = TempDir::new("not-socket", 0o700);
    fs::write(dir.socket(), b"precious").unwrap();
    let e = Listener::bind(dir.socket()).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::AlreadyExists, "{}", e);
    assert_eq!(fs::read(dir.socket()).unwrap(), b"precious");

    let target = dir.0.join("target");
    fs::write(&target, b"also precious").unwrap();
    let link = dir.0.join("link.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = Listener::bind(&link).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::AlreadyExists, "{}", e);
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(dir.entries(), ["app.sock", "link.sock", "target"]);
}

#[test]
fn missing_directory_is_a_clear_error() {
    let dir = TempDir::new("missing", 0o700);
    let path = dir.0.join("no/such/dir/app.sock");
    let e = Listener::bind(&path).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::NotFound, "{}", e);
    assert!(e.to_string().contains(&*path.to_string_lossy()), "{}", e);
}

#[test]
fn too_long_a_path_is_a_clear_error() {
    let dir = TempDir::new("long", 0o700);
    let path = dir.0.join("x".repeat(120));
    let e = Listener::bind(&path).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::InvalidInput, "{}", e);
    assert!(e.to_string().contains("too long"), "{}", e);
    assert!(
        dir.entries().is_empty(),
        "nothing left behind: {:?}",
        dir.entries()
    );

    // A path that fits, in a directory so deep that the private bind path
    // beside it does not.
    let base = dir.0.as_os_str().len();
    let deep = dir.0.join("d".repeat(100 - base));
    fs::create_dir(&deep).unwrap();
    let e = Listener::bind(deep.join("a")).unwrap_err();
    assert_eq!(e.io_error().kind(), io::ErrorKind::InvalidInput, "{}", e);
    assert!(e.to_string().contains("too long"), "{}", e);
    assert_eq!(
        fs::read_dir(&deep).unwrap().count(),
        0,
        "nothing left behind"
    );
}

/// Oversized, invalid, unfinished and absent handshakes each cost only
/// their own connection: good peers arriving meanwhile are accepted at once.
#[test]
fn bad_handshakes_are_dropped_without_affecting_others() {
    let dir = TempDir::new("bad", 0o700);
    // A short handshake timeout, so the slow peers' end comes soon.
    let mut options = Options::default();
    options.handshake_timeout = Duration::from_secs(1);
    let timeout = options.handshake_timeout;
    smol::block_on(async {
        let listener = Listener::bind_with(dir.socket(), options).unwrap();
        let path = dir.socket();
        let start = Instant::now();

        // Never finished, and never started: these only time out.
        let mut unfinished = UnixStream::connect(&path).await.unwrap();
        unfinished.write_all(b"{\"project\":\"p\",").await.unwrap();
        let mut silent = UnixStream::connect(&path).await.unwrap();

        // Oversized: a line with no end, longer than the cap.
        let mut oversized = UnixStream::connect(&path).await.unwrap();
        let junk = vec![b'x'; HANDSHAKE_LIMIT + 1];
        let mut junk_writer = oversized.clone();
        let junk_sent = smol::spawn(async move {
            let _ = junk_writer.write_all(&junk).await;
        });
        // Invalid: JSON, but not a handshake; and not JSON at all.
        let mut missing_field = connect_raw(&path, b"{\"project\":\"p\"}\n").await;
        let mut not_json = connect_raw(&path, b"hello\n").await;

        // A good peer is accepted while the slow ones are still pending:
        // "at once" is "before the slow ones are closed", seen on their
        // sockets, not on a clock.
        let _good = connect(&path, "good-1").await;
        let connection = within("a good peer", listener.accept()).await.unwrap();
        assert_eq!(connection.handshake.requester, "good-1");
        let mut byte = [0u8; 1];
        let still_open = futures_lite::future::poll_once(unfinished.read(&mut byte))
            .await
            .is_none();
        assert!(
            still_open,
            "the unfinished peer was closed before a good one got in"
        );

        for (name, stream) in [
            ("oversized", &mut oversized),
            ("missing field", &mut missing_field),
            ("not JSON", &mut not_json),
        ] {
            within(name, read_until_closed(stream)).await;
        }
        junk_sent.await;

        // The slow ones are closed at the timeout, not before.
        within(
            "the unfinished handshake to time out",
            read_until_closed(&mut unfinished),
        )
        .await;
        within(
            "the silent peer to time out",
            read_until_closed(&mut silent),
        )
        .await;
        let waited = start.elapsed();
        assert!(
            waited >= timeout - Duration::from_millis(100),
            "closed after {:?}",
            waited
        );

        // None of them ever came out of accept(), and the listener goes on.
        let _good = connect(&path, "good-2").await;
        assert_eq!(accept(&listener).await.handshake.requester, "good-2");
    });
}

async fn connect_raw(path: &Path, bytes: &[u8]) -> UnixStream {
    let mut stream = UnixStream::connect(path).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

#[test]
fn many_concurrent_peers_each_get_their_own_stream() {
    let dir = TempDir::new("many", 0o700);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        let clients: Vec<_> = (0..100)
            .map(|i| {
                let path = dir.socket();
                smol::spawn(async move {
                    let mut stream = connect(&path, &format!("peer-{}", i)).await;
                    stream
                        .write_all(format!("payload-{}\n", i).as_bytes())
                        .await
                        .unwrap();
                    stream.close().await.unwrap();
                    read_until_closed(&mut stream).await
                })
            })
            .collect();
        for _ in 0..100 {
            let connection = accept(&listener).await;
            let mut reader = connection.reader;
            let mut writer = connection.writer;
            let mut got = Vec::new();
            reader.read_to_end(&mut got).await.unwrap();
            let i = connection.handshake.requester.trim_start_matches("peer-");
            assert_eq!(got, format!("payload-{}\n", i).as_bytes());
            writer
                .write_all(format!("reply-{}", i).as_bytes())
                .await
                .unwrap();
        }
        for (i, client) in clients.into_iter().enumerate() {
            assert_eq!(client.await, format!("reply-{}", i).as_bytes());
        }
    });
}

/// The peer-credential check itself, with file permissions out of the way:
/// the socket is opened to everyone (here only), the foreign bridge does
/// connect, and the listener still refuses it.
#[test]
fn another_user_is_refused_by_the_uid_check() {
    if !is_root() {
        eprintln!("skipped: needs root to run a bridge as another user");
        return;
    }
    let dir = TempDir::new("uid", 0o755);
    smol::block_on(async {
        let listener = Listener::bind(dir.socket()).unwrap();
        fs::set_permissions(dir.socket(), fs::Permissions::from_mode(0o666)).unwrap();
        let first = smol::spawn(async move {
            let connection = listener.accept().await.unwrap();
            (connection.handshake.requester, listener)
        });

        let mut intruder = spawn_foreign_bridge(&dir, &dir.socket());
        let stdin = intruder.stdin.take();
        let mut stderr = intruder.stderr.take().unwrap();
        let status = within("the refused bridge", intruder.status())
            .await
            .unwrap();
        let mut text = String::new();
        stderr.read_to_string(&mut text).await.unwrap();
        drop(stdin);
        assert_hung_up_after_connecting(status, &text);

        let _owner = connect(&dir.socket(), "owner").await;
        let (requester, _listener) = within("accept", first).await;
        assert_eq!(requester, "owner", "the intruder must never be accepted");
    });
}

/// The first gate: with the socket at its own 0600, another user cannot
/// even connect.
#[test]
fn another_user_cannot_open_the_socket() {
    if !is_root() {
        eprintln!("skipped: needs root to run a bridge as another user");
        return;
    }
    let dir = TempDir::new("perm", 0o755);
    smol::block_on(async {
        let _listener = Listener::bind(dir.socket()).unwrap();
        let mut intruder = spawn_foreign_bridge(&dir, &dir.socket());
        let stdin = intruder.stdin.take();
        let mut stderr = intruder.stderr.take().unwrap();
        let status = within("the bridge", intruder.status()).await.unwrap();
        drop(stdin);
        let mut text = String::new();
        stderr.read_to_string(&mut text).await.unwrap();
        assert_eq!(status.code(), Some(1), "{}", text);
        assert!(text.contains("permission denied"), "{}", text);
    });
}

// ---- Issue 21: binding at the descriptor limit, relative paths, symlinks ----

/// This test binary again, running only the test `name` as a helper
/// ([`support::helper`]): for tests that change what the whole process
/// shares, its descriptor limit or working directory, which would disturb
/// every other test running beside them. Stdin and stderr piped, stdout
/// collected by the caller.
fn alone(name: &str) -> std::process::Child {
    support::helper(name)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the copy to finish, and checks that it ran its test and passed;
/// returns its stderr (where the listener logs).
fn passed_alone(mut child: std::process::Child, stderr: std::thread::JoinHandle<String>) -> String {
    let deadline = Instant::now() + 2 * support::HANG_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the test running alone hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let stderr = stderr.join().unwrap();
    assert!(
        status.success() && stdout.contains("1 passed"),
        "{}\nstdout:\n{}\nstderr:\n{}",
        status,
        stdout,
        stderr
    );
    stderr
}

/// Collects `child`'s stderr on a thread, sending each line to the returned channel
/// as it comes.
fn watch_stderr(
    child: &mut std::process::Child,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
) {
    let stderr = child.stderr.take().unwrap();
    let (lines, receiver) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut all = String::new();
        for line in io::BufRead::lines(io::BufReader::new(stderr)) {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = lines.send(line);
        }
        all
    });
    (receiver, thread)
}

/// Descriptors opened until the process has none left, so that the next
/// `open`/`socket` fails with EMFILE; dropping one frees exactly one.
struct Exhaustion(Vec<fs::File>);

impl Exhaustion {
    /// Lowers the soft descriptor limit to a little above what is open, then opens
    /// `/dev/null` until no descriptor is left.
    fn now() -> Exhaustion {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let highest = fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap();
        let limit = getrlimit(Resource::Nofile);
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(highest + 1 + 32),
                maximum: limit.maximum,
            },
        )
        .unwrap();
        let mut exhaustion = Exhaustion(Vec::new());
        exhaustion.fill();
        exhaustion
    }

    fn fill(&mut self) {
        loop {
            match fs::File::open("/dev/null") {
                Ok(file) => self.0.push(file),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(emfile()), "{}", e);
                    return;
                }
            }
        }
    }

    fn free_one(&mut self) {
        self.0.pop().expect("a descriptor to free");
    }
}

fn emfile() -> i32 {
    rustix::io::Errno::MFILE.raw_os_error()
}

/// At the descriptor limit: a failed bind leaves no private directory behind; with
/// exactly the three descriptors a bind needs free, it succeeds and leaves only the
/// socket (no second link to it in a private directory); a bridge that connects
/// with no descriptor free is accepted at once in place of the listener's spare;
/// once that is gone too, while accepting fails for want of descriptors, a
/// connection waits in the kernel's queue and is accepted once they are free, and
/// the log says that, not that connections were dropped; and dropping the listener
/// removes its file without needing a descriptor.
#[test]
fn the_descriptor_limit_leaves_no_litter_and_delays_without_dropping() {
    const NAME: &str = "the_descriptor_limit_leaves_no_litter_and_delays_without_dropping";
    if support::is_helper(NAME) {
        return descriptor_limit_alone();
    }
    let mut child = alone(NAME);
    let (lines, stderr) = watch_stderr(&mut child);
    // The copy tells us when accepting fails; then it waits for a word to free
    // descriptors again.
    let deadline = Instant::now() + support::HANG_GUARD;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("cannot accept connections for now") => break,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                // Shows why, if the copy failed before.
                passed_alone(child, stderr);
                panic!("the listener never logged that it cannot accept");
            }
        }
    }
    io::Write::write_all(child.stdin.as_mut().unwrap(), b"free\n").unwrap();
    let log = passed_alone(child, stderr);
    assert!(
        log.contains("cannot accept connections for now: Too many open files")
            && log.contains("connections wait in the kernel's queue meanwhile"),
        "{}",
        log
    );
    assert!(
        log.contains("accepting connections again after")
            && log.contains("were delayed, not dropped"),
        "{}",
        log
    );
    assert!(!log.contains("dropped or refused"), "{}", log);
    assert!(!log.contains("dropped a connection"), "{}", log);
}

fn descriptor_limit_alone() {
    // What a process opens once, on first use: the reactor, the executor's threads
    // and the log's writer thread. An app using smol has them already.
    smol::block_on(smol::spawn(async_io::Timer::after(Duration::from_millis(
        1,
    ))));
    mcp_bridge::diag::log(format_args!("test: starting at the descriptor limit"));
    let dir = TempDir::new("emfile", 0o700);
    // A bridge, started while descriptors are free, that connects when told.
    let mut bridge = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"read go && exec "$0" mcp-server --no-reconnect --endpoint "$1" --project p --requester at-the-limit"#)
        .arg(support::BIN)
        .arg(dir.socket())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut go = bridge.stdin.take().unwrap();

    // A bind needs three descriptors at once: the endpoint's directory (held
    // for the listener's life), the private directory it binds in, and the
    // socket. With fewer, it fails and leaves nothing behind. (The spare it
    // keeps once bound is taken only if one is free.)
    let mut exhaustion = Exhaustion::now();
    for free in 0..3 {
        let e = Listener::bind(dir.socket()).unwrap_err();
        assert_eq!(
            e.io_error().raw_os_error(),
            Some(emfile()),
            "{} free: {}",
            free,
            e
        );
        // One more free, which looking at the directory takes for a moment.
        exhaustion.free_one();
        assert!(dir.entries().is_empty(), "left behind: {:?}", dir.entries());
    }

    // Exactly three free: bound, it holds all three (the endpoint's
    // directory, the socket, and a spare for accepting at the limit).
    let listener = Listener::bind(dir.socket()).unwrap();
    exhaustion.free_one();
    assert_eq!(dir.entries(), ["app.sock"]);
    assert_eq!(fs::symlink_metadata(dir.socket()).unwrap().nlink(), 1);
    exhaustion.fill();

    // None free but the spare: the bridge that connects now is accepted at
    // once, in the spare's place.
    io::Write::write_all(&mut go, b"go\n").unwrap();
    let connection = smol::block_on(accept(&listener));
    assert_eq!(connection.handshake.requester, "at-the-limit");

    // None free, and no spare: a connection (its socket on our side made
    // with one descriptor freed for it) waits in the kernel's queue, and is
    // accepted once descriptors are free.
    exhaustion.free_one();
    let mut queued = std::os::unix::net::UnixStream::connect(dir.socket()).unwrap();
    io::Write::write_all(&mut queued, &Handshake::new("p", "queued").to_line()).unwrap();
    let mut word = String::new();
    io::stdin().read_line(&mut word).unwrap();
    assert_eq!(word, "free\n");
    drop(exhaustion);
    let waited = smol::block_on(accept(&listener));
    assert_eq!(waited.handshake.requester, "queued");

    // Removing the file needs no descriptor.
    let mut exhaustion = Exhaustion::now();
    drop(listener);
    exhaustion.free_one();
    assert!(dir.entries().is_empty(), "left behind: {:?}", dir.entries());
    drop(exhaustion);
    drop((connection, waited, queued));
    drop(go);
    let _ = bridge.kill();
    bridge.wait().unwrap();
    mcp_bridge::diag::flush(support::HANG_GUARD);
}

/// A relative endpoint is removed at drop even after the working directory changed.
#[test]
fn a_relative_endpoint_is_removed_after_a_change_of_directory() {
    const NAME: &str = "a_relative_endpoint_is_removed_after_a_change_of_directory";
    if !support::is_helper(NAME) {
        let mut child = alone(NAME);
        let (_lines, stderr) = watch_stderr(&mut child);
        passed_alone(child, stderr);
        return;
    }
    let dir = TempDir::new("relative", 0o700);
    std::env::set_current_dir(&dir.0).unwrap();
    let listener = Listener::bind("app.sock").unwrap();
    assert_eq!(dir.entries(), ["app.sock"]);
    std::env::set_current_dir("/").unwrap();
    drop(listener);
    assert!(dir.entries().is_empty(), "left behind: {:?}", dir.entries());
}

/// An endpoint reached through a symbolic link is removed at drop even after the
/// link was pointed elsewhere, and the file now at the path is left alone.
#[test]
fn an_endpoint_behind_a_retargeted_link_is_removed() {
    let dir = TempDir::new("retarget", 0o700);
    let (first, second, link) = (dir.0.join("a"), dir.0.join("b"), dir.0.join("link"));
    fs::create_dir(&first).unwrap();
    fs::create_dir(&second).unwrap();
    std::os::unix::fs::symlink(&first, &link).unwrap();
    let listener = Listener::bind(link.join("app.sock")).unwrap();
    assert!(first.join("app.sock").exists());

    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&second, &link).unwrap();
    fs::write(second.join("app.sock"), b"someone else's").unwrap();
    drop(listener);
    assert_eq!(fs::read_dir(&first).unwrap().count(), 0, "left behind");
    assert_eq!(
        fs::read(second.join("app.sock")).unwrap(),
        b"someone else's"
    );
}

/// An app whose stderr goes nowhere (a GUI launched from a dock) hands the
/// listener a function of its own: the lines about a stale socket replaced
/// and a peer dropped reach it, and nothing reaches stderr. Run alone, so
/// that its stderr is only this listener's.
#[test]
fn log_lines_go_to_the_apps_function_instead_of_stderr() {
    const NAME: &str = "log_lines_go_to_the_apps_function_instead_of_stderr";
    if !support::is_helper(NAME) {
        let mut child = alone(NAME);
        let (_lines, stderr) = watch_stderr(&mut child);
        let stderr = passed_alone(child, stderr);
        assert!(!stderr.contains("mcp-bridge:"), "{}", stderr);
        return;
    }
    let dir = TempDir::new("log-sink", 0o700);
    drop(std::os::unix::net::UnixListener::bind(dir.socket()).unwrap());
    let (lines, received) = smol::channel::unbounded::<String>();
    let mut options = Options::default();
    options.log = LogSink::to(move |line: &str| {
        let _ = lines.try_send(line.to_string());
    });
    smol::block_on(async {
        let listener = Listener::bind_with(dir.socket(), options).unwrap();
        let stale = within("the stale-socket line", received.recv()).await;
        assert_eq!(
            stale.unwrap(),
            format!(
                "removed a stale socket at '{}' (nothing was listening)",
                dir.socket().display()
            )
        );
        let mut not_json = connect_raw(&dir.socket(), b"hello\n").await;
        within("the bad peer's end", read_until_closed(&mut not_json)).await;
        let dropped = within("the dropped-peer line", received.recv()).await;
        let dropped = dropped.unwrap();
        assert!(dropped.starts_with("dropped a connection: "), "{}", dropped);
        drop(listener);
    });
}

/// `host::caller` reads the spec's `io.modelcontextprotocol/clientInfo`
/// first (a client no CLI key names is still a caller, `"mcp"`), and the
/// CLI-specific keys beside it as the finer grain.
#[test]
fn caller_reads_the_spec_s_client_info_first() {
    use mcp_bridge::host::caller;
    let s = Some;
    #[rustfmt::skip]
    let cases = [
        (r#"{"io.modelcontextprotocol/clientInfo":{"name":"some-client","version":"1.2.0"}}"#,
            Some(("mcp", s("some-client"), s("1.2.0"), None, None))),
        (r#"{"io.modelcontextprotocol/clientInfo":{"name":"codex-mcp-client","version":"0.9"},"threadId":"t"}"#,
            Some(("codex", s("codex-mcp-client"), s("0.9"), s("t"), None))),
        (r#"{"io.modelcontextprotocol/clientInfo":{"name":"claude-code"},"claudecode/toolUseId":"toolu_1"}"#,
            Some(("claude-code", s("claude-code"), None, None, s("toolu_1")))),
        // Empty or mistyped fields name no one.
        (r#"{"io.modelcontextprotocol/clientInfo":{"name":"","version":2}}"#, None),
        (r#"{"io.modelcontextprotocol/clientInfo":"x"}"#, None),
    ];
    for (meta, expected) in cases {
        let meta: serde_json::Value = serde_json::from_str(meta).unwrap();
        let who = caller(&meta).map(|c| (c.client, c.name, c.version, c.conversation, c.call));
        assert_eq!(who, expected, "{}", meta);
    }
}

/// `host::caller` reads each CLI's keys (Codex's thread, turn and session,
/// Claude Code's tool use, VS Code's chat and request, Antigravity's
/// conversation, OpenCode's session), in the documented order, and only
/// non-empty strings.
#[test]
fn caller_reads_each_clis_keys_in_order() {
    use mcp_bridge::host::caller;
    let s = Some;
    #[rustfmt::skip]
    let cases = [
        (r#"{"threadId":"t","x-codex-turn-metadata":{"session_id":"s","thread_id":"t","turn_id":"u"}}"#,
            Some(("codex", s("s"), s("t"), s("u")))),
        // A sub-agent's thread: the turn metadata's thread is not needed.
        (r#"{"threadId":"sub","x-codex-turn-metadata":{"session_id":"s"}}"#, Some(("codex", s("s"), s("sub"), None))),
        (r#"{"x-codex-turn-metadata":{"thread_id":"t","turn_id":"u"}}"#, Some(("codex", None, s("t"), s("u")))),
        (r#"{"claudecode/toolUseId":"toolu_1","progressToken":2}"#, Some(("claude-code", None, None, s("toolu_1")))),
        (r#"{"vscode.conversationId":"c","vscode.requestId":"r","progressToken":"p"}"#, Some(("vscode", None, s("c"), s("r")))),
        (r#"{"vscode.requestId":"r"}"#, Some(("vscode", None, None, s("r")))),
        (r#"{"antigravity.google/conversation_id":"a"}"#, Some(("antigravity", None, s("a"), None))),
        (r#"{"ai.opencode/sessionID":"ses_1"}"#, Some(("opencode", None, s("ses_1"), None))),
        // The order: Codex before Claude Code before VS Code before the rest.
        (r#"{"ai.opencode/sessionID":"o","claudecode/toolUseId":"c","threadId":"t"}"#, Some(("codex", None, s("t"), None))),
        (r#"{"ai.opencode/sessionID":"o","vscode.conversationId":"v"}"#, Some(("vscode", None, s("v"), None))),
        // Empty strings and other types name no one; neither does a bare token.
        (r#"{"threadId":"","claudecode/toolUseId":7,"ai.opencode/sessionID":"o"}"#, Some(("opencode", None, s("o"), None))),
        (r#"{"progressToken":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#, None),
        (r#"{}"#, None),
        (r#"null"#, None),
        (r#""threadId""#, None),
    ];
    for (meta, expected) in cases {
        let meta: serde_json::Value = serde_json::from_str(meta).unwrap();
        let who = caller(&meta).map(|c| (c.client, c.session, c.conversation, c.call));
        assert_eq!(who, expected, "{}", meta);
    }
}
