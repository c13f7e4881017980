//! The answers cache through the binary (issue 36): a client that starts
//! before the app is answered with the app's last answers, and only with
//! what the trusted app itself said to the same question; the cache touches
//! no file it did not write.
//!
//! The app is this very test binary, re-run in an app role (see
//! [`the_scripted_app`]), so that it can run as another user (uid 65534)
//! and die like a real app: its socket file stays behind, and the bridge
//! sees "not running". `MCP_BRIDGE_TEST_BIN` points the bridges at another
//! build: each test here but the app's own fails against the build from
//! before issue 36.
#![cfg(unix)]

mod support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use futures_lite::AsyncBufReadExt;
use serde_json::{json, Value};
use support::{bin, bridge_command, foreign_command, is_root, within, Bridge, TempDir, NOBODY};

/// The test that is also the app's entry.
const APP_TEST: &str = "the_scripted_app";
/// Set (to the socket path) when this binary runs as the app.
const APP_SOCKET: &str = "MCP_BRIDGE_TEST_APP_SOCKET";
/// The app's name: in its answers, and what it does (see [`answer`]).
const APP_NAME: &str = "MCP_BRIDGE_TEST_APP_NAME";

/// A 2025-11-25 `initialize` asking for `version`.
fn initialize(id: u32, version: &str) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{"protocolVersion":version,"capabilities":{},"clientInfo":{"name":"cache-test","version":"1"}}}).to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A request of `method` with `params`.
fn request(id: u32, method: &str, params: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string()
}

/// A 2026-07-28 request: `params` with the `_meta` the era asks for.
fn modern(id: u32, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
    request(id, method, params)
}

// ---------------------------------------------------------------------------
// The app

/// The app's answer to a request (`count`: how many this connection got).
/// Names: `big…` answers `initialize` and `tools/list` with more than the
/// cache keeps; `counting…` answers each `server/discover` with another
/// version. A requester called `blocked` is refused with a refusal line.
fn answer(name: &str, message: &Value, count: usize) -> Value {
    let info = json!({"name": name, "version": "1"});
    let big = || "x".repeat(70 * 1024);
    match message["method"].as_str().unwrap_or("") {
        "initialize" => {
            let mut result = json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": true}, "prompts": {}, "resources": {}},
                "serverInfo": info,
                "instructions": format!("instructions of {}", name),
            });
            if name.starts_with("big") {
                result["instructions"] = big().into();
            }
            if name.starts_with("static") {
                // Declares no listChanged: says nothing when its tools change.
                result["capabilities"]["tools"] = json!({});
            }
            result
        }
        "server/discover" => {
            let version = match name.starts_with("counting") {
                true => count.to_string(),
                false => "1".into(),
            };
            json!({
                "resultType": "complete",
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": name, "version": version},
                "ttlMs": 60000,
                "cacheScope": "public",
            })
        }
        "tools/list" => {
            let page = message["params"]["cursor"]
                .as_str()
                .unwrap_or("1")
                .to_string();
            let mut result = json!({
                "tools": [{"name": format!("{}-tool-{}", name, page), "inputSchema": {"type": "object"}}],
                "ttlMs": 30000,
                "cacheScope": "private",
            });
            if page == "1" {
                result["nextCursor"] = "2".into();
            }
            if name.starts_with("big") {
                result["tools"][0]["description"] = big().into();
            }
            if name.starts_with("wide") {
                result["tools"][0]["description"] = "w".repeat(20 * 1024).into();
            }
            result
        }
        "prompts/list" => json!({"prompts": [{"name": format!("{}-prompt", name)}]}),
        "resources/list" => json!({"resources": [{"uri": format!("app://{}", name), "name": "r"}]}),
        "resources/templates/list" => {
            json!({"resourceTemplates": [{"uriTemplate": "app://{x}", "name": name}]})
        }
        "tools/call" => json!({"content": [{"type": "text", "text": format!("called {}", name)}]}),
        _ => json!({"servedBy": name}),
    }
}

/// One bridge's connection: its handshake, then a request per line.
fn serve(connection: UnixStream, name: &str) {
    let mut writer = connection.try_clone().unwrap();
    let mut lines = BufReader::new(connection).lines();
    let handshake: Value = match lines.next() {
        Some(Ok(line)) => serde_json::from_str(&line).unwrap_or(Value::Null),
        _ => return,
    };
    if handshake["requester"] == "blocked" {
        let refusal = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"requester blocked is not allowed"}}"#;
        let _ = writeln!(writer, "{}", refusal);
        return;
    }
    let mut count = 0;
    for line in lines {
        let message: Value = match line.map(|line| serde_json::from_str(&line)) {
            Ok(Ok(message)) => message,
            _ => return,
        };
        if message.get("id").is_none() || message.get("method").is_none() {
            continue;
        }
        count += 1;
        let result = answer(name, &message, count);
        let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
        if writeln!(writer, "{}", reply).is_err() {
            return;
        }
    }
}

/// Two roles. Run by the suite, it checks the app the other tests rely on.
/// Run by [`App::start`], it is that app: it listens (mode 0666, so any
/// user's bridge may connect), says `ready` on stdout, serves every
/// connection, and exits when its stdin ends, leaving its socket file
/// behind as a killed app does.
#[test]
fn the_scripted_app() {
    if let Some(socket) = std::env::var_os(APP_SOCKET) {
        let name = std::env::var(APP_NAME).unwrap();
        let listener = UnixListener::bind(&socket).unwrap();
        fs::set_permissions(&socket, fs::Permissions::from_mode(0o666)).unwrap();
        std::thread::spawn(|| {
            let _ = std::io::stdin().read(&mut [0]);
            std::process::exit(0);
        });
        println!("ready");
        for connection in listener.incoming() {
            let name = name.clone();
            std::thread::spawn(move || serve(connection.unwrap(), &name));
        }
        return;
    }
    let dir = TempDir::new("cache-app", 0o755);
    let app = App::start(&dir, &dir.socket(), None, "checked");
    let mut connection = UnixStream::connect(dir.socket()).unwrap();
    writeln!(connection, r#"{{"project":"p","requester":"r"}}"#).unwrap();
    writeln!(connection, "{}", initialize(1, "2025-06-18")).unwrap();
    let mut line = String::new();
    BufReader::new(&connection).read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        reply["result"]["serverInfo"]["name"], "checked",
        "{}",
        reply
    );
    assert_eq!(
        reply["result"]["protocolVersion"], "2025-06-18",
        "{}",
        reply
    );
    app.stop();
    assert!(UnixStream::connect(dir.socket()).is_err());
}

/// A running app (see [`the_scripted_app`]).
struct App {
    child: Child,
}

impl App {
    /// Starts the app `name` at `socket`, as user `as_user` (in a copy of
    /// this binary in `dir`) or as us; returns once it listens. A socket
    /// file left by an app before is removed first.
    fn start(dir: &TempDir, socket: &Path, as_user: Option<u32>, name: &str) -> App {
        let _ = fs::remove_file(socket);
        let this = std::env::current_exe().unwrap();
        let mut command = match as_user {
            Some(uid) => {
                assert_eq!(uid, NOBODY);
                foreign_command(dir, &this)
            }
            None => Command::new(this),
        };
        let mut child = command
            .args(["--exact", APP_TEST, "--nocapture", "--test-threads=1"])
            .env(APP_SOCKET, socket)
            .env(APP_NAME, name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        for line in stdout.lines() {
            if line.unwrap().ends_with("ready") {
                return App { child };
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the app {} ended before it was ready", name);
    }

    /// Stops the app (its socket file stays, with no one behind it).
    fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// The client

/// A bridge to `socket` as `requester`, with the cache in `cache` and
/// `extra` arguments, stderr piped.
fn bridge(socket: &Path, cache: &Path, requester: &str, extra: &[&str]) -> Bridge {
    let mut command = bridge_command(socket, "p", requester);
    command
        .arg("--cache-dir")
        .arg(cache)
        .args(["--connect-timeout", "1"])
        .args(extra)
        .stderr(Stdio::piped());
    Bridge::spawn(&mut command)
}

/// Sends `line` and returns the reply to `id` (see [`reply`]).
async fn ask(bridge: &mut Bridge, line: &str, id: u32) -> Value {
    bridge.send(line).await;
    reply(bridge, id).await
}

/// The reply to `id`, notifications and the app's refusal line (`"id":
/// null`, relayed as the app wrote it) skipped.
async fn reply(bridge: &mut Bridge, id: u32) -> Value {
    loop {
        let message = bridge.json().await;
        if message.get("method").is_none() && !message["id"].is_null() {
            assert_eq!(message["id"], id, "{}", message);
            return message;
        }
    }
}

/// The reason of the bridge's error `reply`, failing the test on a result.
fn reason(reply: &Value) -> String {
    let reason = reply["error"]["data"]["reason"].as_str();
    reason
        .unwrap_or_else(|| panic!("an error of the bridge's expected: {}", reply))
        .into()
}

/// Runs one session with the app there: `lines` asked one at a time
/// (requests under ids 1, 2, ...); returns the replies.
async fn session(socket: &Path, cache: &Path, extra: &[&str], lines: &[String]) -> Vec<Value> {
    let mut client = bridge(socket, cache, "allowed", extra);
    let mut replies = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let reply = ask(&mut client, line, n as u32 + 1).await;
        assert!(reply.get("result").is_some(), "{}", reply);
        replies.push(reply);
    }
    let (code, stderr) = client.finish_with_stderr().await;
    assert_eq!(code, Some(0), "{}", stderr);
    replies
}

/// The directory of an app's socket and of its cache (apart: the socket's
/// may be open to others).
struct Setup {
    dir: TempDir,
    cache: TempDir,
}

impl Setup {
    fn new(tag: &str, mode: u32) -> Setup {
        Setup {
            dir: TempDir::new(tag, mode),
            cache: TempDir::new(&format!("{}-cache", tag), 0o700),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.socket()
    }

    fn cache(&self) -> PathBuf {
        self.cache.0.join("answers")
    }
}

// ---------------------------------------------------------------------------
// The rules

/// Item 1: a bridge that trusts uid 65534 keeps that user's answers; a
/// bridge with the default trust never gives them, while 65534 serves
/// (it is refused: "untrusted_server") nor after it is gone
/// ("app_not_running").
#[test]
fn an_untrusted_servers_answers_are_never_given() {
    if !is_root() {
        eprintln!("skipped: running a server as another user needs root");
        return;
    }
    let setup = Setup::new("untrusted", 0o777);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, Some(NOBODY), "foreign");
    smol::block_on(async {
        let trusting = ["--trust-server-user", "65534"];
        let replies = session(&socket, &cache, &trusting, &[initialize(1, "2025-06-18")]).await;
        assert_eq!(replies[0]["result"]["serverInfo"]["name"], "foreign");

        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reason(&reply), "untrusted_server", "{}", reply);
        app.stop();
        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
        let (_, stderr) = client.finish_with_stderr().await;
        assert!(stderr.contains("does not trust"), "{}", stderr);

        // The bridge that trusts it still does.
        let mut client = bridge(&socket, &cache, "allowed", &trusting);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(
            reply["result"]["serverInfo"]["name"], "foreign",
            "{}",
            reply
        );
    });
}

/// How many sessions race the swap: enough for the build before issue 36
/// to delete through the swapped directory in most runs (2 of 3 with 30).
const SWAP_SESSIONS: usize = 60;

/// Item 2: with the cache directory under a parent anyone can write, a
/// directory swapped for a link (to a directory full of the bridge's own
/// answer files) while the bridge saves and prunes loses those files
/// nothing: every file is reached through the directory the bridge holds.
#[test]
fn the_cache_never_touches_a_directory_swapped_in_under_it() {
    let setup = Setup::new("swap", 0o755);
    let parent = TempDir::new("swap-parent", 0o1777);
    let cache = parent.0.join("answers");
    let victims = TempDir::new("swap-victims", 0o700);
    let socket = setup.socket();
    let app = App::start(&setup.dir, &socket, None, "counting");
    smol::block_on(async {
        // Genuine answer files of the bridge, more than it keeps, and
        // files named as the bridge's of old.
        session(
            &socket,
            &victims.0,
            &[],
            &[modern(1, "server/discover", json!({}))],
        )
        .await;
        let genuine = fs::read_dir(&victims.0)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        for n in 0..300 {
            let name = format!("mcpb-{:016x}.answer", n);
            fs::copy(&genuine, victims.0.join(name)).unwrap();
            fs::write(victims.0.join(format!("{:016x}.answers", n)), "kept").unwrap();
        }
        let before = victims.entries();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, cache, victims) = (stop.clone(), cache.clone(), victims.0.clone());
            let aside = parent.0.join("aside");
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Mostly in place, swapped now and then, briefly.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    if fs::rename(&cache, &aside).is_ok() {
                        let _ = std::os::unix::fs::symlink(&victims, &cache);
                        let _ = fs::remove_file(&cache);
                        let _ = fs::rename(&aside, &cache);
                    }
                }
            })
        };
        // Sessions of their own: a bridge that found a link where its
        // directory was gives up on the cache for the session.
        for _ in 0..SWAP_SESSIONS {
            let mut client = bridge(&socket, &cache, "allowed", &[]);
            for id in 1..=10 {
                let reply = ask(&mut client, &modern(id, "server/discover", json!({})), id).await;
                assert!(reply.get("result").is_some(), "{}", reply);
            }
            client.finish_with_stderr().await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        let after = victims.entries();
        let lost: Vec<&String> = before.iter().filter(|name| !after.contains(name)).collect();
        assert!(lost.is_empty(), "lost {} files: {:?}", lost.len(), lost);
        assert_eq!(after.len(), before.len());
    });
    app.stop();
}

/// Issue 42, only inside its own directory: a parent of `XDG_CACHE_HOME`
/// that is a symbolic link another user (uid 65534) planted in a shared
/// sticky directory, pointing to a directory of theirs, is never followed:
/// the cache is off for the session (said once, naming the link), nothing
/// is created or written where the link points, and the session goes on.
#[test]
fn a_link_another_user_planted_above_the_cache_is_never_followed() {
    if !is_root() {
        eprintln!("skipped: planting a link as another user needs root");
        return;
    }
    let setup = Setup::new("planted", 0o755);
    let socket = setup.socket();
    let shared = TempDir::new("planted-shared", 0o1777);
    let theirs = TempDir::new("planted-theirs", 0o755);
    let link = shared.0.join("home");
    std::os::unix::fs::symlink(&theirs.0, &link).unwrap();
    for path in [&theirs.0, &link] {
        let status = Command::new("chown")
            .args(["-h", &NOBODY.to_string()])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        let mut command = bridge_command(&socket, "p", "allowed");
        command
            .env_remove("MCP_BRIDGE_CACHE_DIR")
            .env("XDG_CACHE_HOME", link.join("cache"))
            .stderr(Stdio::piped());
        let mut client = Bridge::spawn(&mut command);
        for id in 1..=2 {
            let reply = ask(&mut client, &initialize(id, "2025-06-18"), id).await;
            assert_eq!(reply["result"]["serverInfo"]["name"], "app", "{}", reply);
        }
        let (code, stderr) = client.finish_with_stderr().await;
        assert_eq!(code, Some(0), "{}", stderr);
        let said = "not using the answers cache";
        assert_eq!(stderr.matches(said).count(), 1, "{}", stderr);
        assert!(stderr.contains("'home'"), "{}", stderr);
    });
    app.stop();
    assert_eq!(theirs.entries(), Vec::<String>::new());
}

/// Item 3: a `--cache-dir` of the user's own, holding files named like the
/// bridge's (of old, and of now) that the bridge did not write, loses none
/// of them, however many answers are saved beside them.
#[test]
fn a_cache_dir_holding_other_files_loses_none_of_them() {
    let setup = Setup::new("theirs", 0o755);
    let socket = setup.socket();
    let cache = setup.cache();
    fs::create_dir(&cache).unwrap();
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();
    for n in 0..300 {
        fs::write(cache.join(format!("{:016x}.answers", n)), "the user's").unwrap();
        fs::write(cache.join(format!("mcpb-{:016x}.answer", n)), "the user's").unwrap();
    }
    fs::write(cache.join("notes.txt"), "the user's").unwrap();
    let theirs: Vec<PathBuf> = fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        for project in 0..3 {
            let mut client = bridge_command(&socket, &project.to_string(), "allowed");
            client.arg("--cache-dir").arg(&cache).stderr(Stdio::piped());
            let mut client = Bridge::spawn(&mut client);
            ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
            ask(&mut client, &request(2, "tools/list", json!({})), 2).await;
            ask(&mut client, &modern(3, "server/discover", json!({})), 3).await;
            client.finish_with_stderr().await;
        }
    });
    app.stop();
    for file in &theirs {
        assert_eq!(
            fs::read_to_string(file).unwrap(),
            "the user's",
            "{}",
            file.display()
        );
    }
}

/// Item 4: the app refuses requester `blocked`; with a cache that holds
/// the `initialize` result it gave `allowed`, `blocked` still gets the
/// refusal (`app_refused`), not that result.
#[test]
fn a_refused_client_gets_the_refusal_not_a_cached_answer() {
    let setup = Setup::new("refused", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        session(&socket, &cache, &[], &[initialize(1, "2025-06-18")]).await;
        let mut client = bridge(&socket, &cache, "blocked", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reason(&reply), "app_refused", "{}", reply);
        client.send(INITIALIZED).await;
        let reply = ask(&mut client, &request(2, "tools/list", json!({})), 2).await;
        assert_eq!(reason(&reply), "app_refused", "{}", reply);
    });
    app.stop();
}

/// Item 5: an `initialize` is answered from the cache only for the
/// protocol version the kept answer was given for: another version gets
/// the reason, each kept version its own answer.
#[test]
fn initialize_is_answered_only_for_the_version_it_asked() {
    let setup = Setup::new("version", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        session(&socket, &cache, &[], &[initialize(1, "2025-11-25")]).await;
        session(&socket, &cache, &[], &[initialize(1, "2025-06-18")]).await;
        app.stop();
        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2024-11-05"), 1).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
        for version in ["2025-11-25", "2025-06-18"] {
            let mut client = bridge(&socket, &cache, "allowed", &[]);
            let reply = ask(&mut client, &initialize(1, version), 1).await;
            assert_eq!(reply["result"]["protocolVersion"], version, "{}", reply);
        }
    });
}

/// The only answer file in `cache`.
fn the_file(cache: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{:?}", files);
    files.remove(0)
}

/// A way to damage an answer file's text.
type Damage = fn(&str) -> String;

/// Item 6: a damaged entry (a truncated result, or one with an `id`
/// smuggled in after it) is never written to stdout: the client gets the
/// reason under its own id, and stderr says the entry was discarded.
#[test]
fn a_damaged_entry_is_discarded_and_said() {
    let damages: [(&str, Damage); 2] = [
        ("truncated", |text| {
            let at = text.find("\"capabil").unwrap();
            format!("{}}}\n", &text[..at + 8])
        }),
        ("smuggled id", |text| {
            let end = text.trim_end().len();
            format!("{},\"id\":999{}", &text[..end], &text[end..])
        }),
    ];
    for (what, damage) in damages {
        let setup = Setup::new("damaged", 0o755);
        let (socket, cache) = (setup.socket(), setup.cache());
        let app = App::start(&setup.dir, &socket, None, "app");
        smol::block_on(async {
            session(&socket, &cache, &[], &[initialize(1, "2025-06-18")]).await;
            app.stop();
            let file = the_file(&cache);
            let text = fs::read_to_string(&file).unwrap();
            fs::write(&file, damage(&text)).unwrap();
            let mut client = bridge(&socket, &cache, "allowed", &[]);
            let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
            assert_eq!(reason(&reply), "app_not_running", "{}: {}", what, reply);
            let (_, stderr) = client.finish_with_stderr().await;
            assert_eq!(
                stderr.matches("discarded").count(),
                1,
                "{}: {}",
                what,
                stderr
            );
        });
    }
}

/// Item 6, the write: an answer reaches its file synced before it is
/// renamed into place (seen with strace; skipped where there is none).
#[test]
fn an_answer_is_synced_before_it_is_renamed_into_place() {
    let traced = Command::new("strace").arg("-V").output();
    if !traced.map_or(false, |out| out.status.success()) {
        eprintln!("skipped: no strace");
        return;
    }
    let setup = Setup::new("fsync", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let trace = setup.cache.0.join("trace");
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        let mut command = smol::process::Command::new("strace");
        command
            .args([
                "-f",
                "-qq",
                "-e",
                "trace=fsync,fdatasync,rename,renameat,renameat2",
                "-o",
            ])
            .arg(&trace)
            .arg(bin())
            .arg("mcp-server")
            .arg("--endpoint")
            .arg(&socket)
            .args(["--project", "p", "--requester", "allowed", "--cache-dir"])
            .arg(&cache)
            .stderr(Stdio::piped());
        let mut client = Bridge::spawn(&mut command);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert!(reply.get("result").is_some(), "{}", reply);
        client.finish_with_stderr().await;
    });
    app.stop();
    let trace = fs::read_to_string(trace).unwrap();
    let calls: Vec<&str> = trace.lines().filter(|l| !l.contains("resumed>")).collect();
    let renamed = calls
        .iter()
        .position(|l| l.contains("rename"))
        .expect(&trace);
    assert!(
        calls[..renamed].iter().any(|l| l.contains("fsync(")),
        "{}",
        trace
    );
}

/// A client that has the app's answer may kill its bridge the moment it
/// has it: the TypeScript 2.x SDK ends its `server/discover` probe's bridge
/// so (SIGTERM; SIGKILL here, which nothing catches). The answer is kept by
/// then: the next bridge, with the app away, answers the probe from the
/// cache. Twenty rounds, each from an empty cache.
#[test]
fn an_answer_is_kept_before_the_client_has_it() {
    let setup = Setup::new("killed", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let discover = modern(1, "server/discover", json!({}));
    smol::block_on(async {
        for round in 0..20 {
            let _ = fs::remove_dir_all(&cache);
            let app = App::start(&setup.dir, &socket, None, "probed");
            let mut probe = bridge(&socket, &cache, "allowed", &[]);
            let live = ask(&mut probe, &discover, 1).await;
            probe.child.kill().unwrap();
            within("the killed bridge to exit", probe.child.status())
                .await
                .unwrap();
            app.stop();
            let mut early = bridge(&socket, &cache, "allowed", &[]);
            let reply = ask(&mut early, &discover, 1).await;
            assert!(
                reply.get("result").is_some(),
                "round {}: the answer the killed bridge gave was not kept: {}",
                round,
                reply
            );
            assert_cached(&reply, &live["result"]);
            early.finish().await;
        }
    });
}

/// Item 7: two bridges of one project at once, a 2026-07-28 session and a
/// legacy one: both answers are kept, each answered when the app is gone.
#[test]
fn two_eras_of_one_project_keep_both_answers() {
    let setup = Setup::new("eras", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        let mut modern_client = bridge(&socket, &cache, "allowed", &[]);
        let mut legacy_client = bridge(&socket, &cache, "allowed", &[]);
        let discover = modern(1, "server/discover", json!({}));
        ask(&mut modern_client, &discover, 1).await;
        ask(&mut legacy_client, &initialize(1, "2025-06-18"), 1).await;
        modern_client.finish_with_stderr().await;
        legacy_client.finish_with_stderr().await;
        app.stop();
        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &discover, 1).await;
        assert_eq!(reply["result"]["serverInfo"]["name"], "app", "{}", reply);
        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reply["result"]["serverInfo"]["name"], "app", "{}", reply);
    });
}

/// Item 8: app v2 answers with more than the cache keeps: v1's answers
/// (the `initialize`, the tools) are gone, and a client started while the
/// app is away gets the reason, not v1's answers.
#[test]
fn a_newer_answer_too_long_to_keep_removes_the_older() {
    let setup = Setup::new("newer", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let asked = [
        initialize(1, "2025-06-18"),
        request(2, "tools/list", json!({})),
    ];
    smol::block_on(async {
        let v1 = App::start(&setup.dir, &socket, None, "v1");
        session(&socket, &cache, &[], &asked).await;
        v1.stop();
        let v2 = App::start(&setup.dir, &socket, None, "big-v2");
        session(&socket, &cache, &[], &asked).await;
        v2.stop();
        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &asked[0], 1).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
        client.send(INITIALIZED).await;
        let reply = ask(&mut client, &asked[1], 2).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
    });
}

/// Item 9: two endpoints whose paths differ only in bytes that are not
/// UTF-8 share no answer.
#[test]
fn endpoints_differing_in_bytes_that_are_not_utf8_share_nothing() {
    let setup = Setup::new("bytes", 0o755);
    let cache = setup.cache();
    let served = setup.dir.0.join(std::ffi::OsStr::from_bytes(b"\xff.sock"));
    let other = setup.dir.0.join(std::ffi::OsStr::from_bytes(b"\xfe.sock"));
    let app = App::start(&setup.dir, &served, None, "app");
    smol::block_on(async {
        session(&served, &cache, &[], &[initialize(1, "2025-06-18")]).await;
        app.stop();
        let mut client = bridge(&served, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reply["result"]["serverInfo"]["name"], "app", "{}", reply);
        let mut client = bridge(&other, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
    });
}

/// Issue 42, keys by the spec: an answer whose `cacheScope` is `"private"`
/// (a 2026-07-28 `tools/list`), or whose scope is not said (a 2025
/// `initialize`, its `instructions`), is given only to the requester it
/// was given to; a `"public"` one (`server/discover`) to every requester.
#[test]
fn private_answers_are_given_only_to_their_requester() {
    let setup = Setup::new("private", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, None, "app");
    let asked = [
        initialize(1, "2025-06-18"),
        modern(2, "tools/list", json!({})),
        modern(3, "server/discover", json!({})),
    ];
    smol::block_on(async {
        let mut alice = bridge(&socket, &cache, "alice", &[]);
        for (n, line) in asked.iter().enumerate() {
            let reply = ask(&mut alice, line, n as u32 + 1).await;
            assert!(reply.get("result").is_some(), "{}", reply);
        }
        alice.finish().await;
        app.stop();

        let mut bob = bridge(&socket, &cache, "bob", &[]);
        for (n, line) in asked.iter().take(2).enumerate() {
            let reply = ask(&mut bob, line, n as u32 + 1).await;
            assert_eq!(reason(&reply), "app_not_running", "{}", reply);
        }
        let reply = ask(&mut bob, &asked[2], 3).await;
        assert_eq!(reply["result"]["cacheScope"], "public", "{}", reply);
        bob.finish().await;

        let mut alice = bridge(&socket, &cache, "alice", &[]);
        let reply = ask(&mut alice, &asked[0], 1).await;
        let instructions = &reply["result"]["instructions"];
        assert_eq!(instructions, "instructions of app", "{}", reply);
        let reply = ask(&mut alice, &asked[1], 2).await;
        assert_eq!(reply["result"]["cacheScope"], "private", "{}", reply);
        alice.finish().await;
    });
}

/// Issue 42, keys by the spec: two apps each reached with `--endpoint
/// mcp.sock` from their own working directory, in one project, are two
/// endpoints: the second app's client never gets the first app's answers.
#[test]
fn one_relative_endpoint_from_two_directories_shares_nothing() {
    let setup = Setup::new("relative", 0o755);
    let cache = setup.cache();
    let (first, second) = (setup.dir.0.join("first"), setup.dir.0.join("second"));
    fs::create_dir(&first).unwrap();
    fs::create_dir(&second).unwrap();
    let app = App::start(&setup.dir, &first.join("mcp.sock"), None, "first");
    let from = |dir: &Path| {
        let mut command = bridge_command(Path::new("mcp.sock"), "p", "allowed");
        command
            .current_dir(dir)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--connect-timeout", "1"])
            .stderr(Stdio::piped());
        Bridge::spawn(&mut command)
    };
    smol::block_on(async {
        let mut client = from(&first);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reply["result"]["serverInfo"]["name"], "first", "{}", reply);
        client.finish().await;
        app.stop();

        let mut client = from(&second);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
        client.finish().await;
        let mut client = from(&first);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(reply["result"]["serverInfo"]["name"], "first", "{}", reply);
        client.finish().await;
    });
}

/// Item 10: an answer from the cache is said: on stderr once a session,
/// in the traffic log each time; a 2026-07-28 result comes with what is
/// left of its `ttlMs` and the app's `cacheScope`.
#[test]
fn every_cached_answer_is_said_with_what_is_left_of_its_ttl() {
    let setup = Setup::new("said", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let log = setup.cache.0.join("traffic.log");
    let log_arg = log.to_string_lossy().into_owned();
    let app = App::start(&setup.dir, &socket, None, "app");
    smol::block_on(async {
        let discover = modern(1, "server/discover", json!({}));
        let live = session(&socket, &cache, &[], std::slice::from_ref(&discover)).await;
        assert_eq!(live[0]["result"]["ttlMs"], 60000);
        app.stop();
        let mut client = bridge(&socket, &cache, "allowed", &["--log", &log_arg]);
        for id in 1..=2 {
            let discover = modern(id, "server/discover", json!({}));
            let reply = ask(&mut client, &discover, id).await;
            assert_cached(&reply, &live[0]["result"]);
            assert_eq!(reply["result"]["cacheScope"], "public");
        }
        let (_, stderr) = client.finish_with_stderr().await;
        let said = "answered \"server/discover\" from the answers cache";
        assert_eq!(stderr.matches(said).count(), 1, "{}", stderr);
        if cfg!(feature = "log") {
            let logged = fs::read_to_string(&log).unwrap();
            assert_eq!(logged.matches(said).count(), 2, "{}", logged);
        }
    });
}

/// The lists: a client that starts before the app (Codex keeps the first
/// `tools/list` it gets for 30 minutes) gets the app's last lists, every
/// page, from the cache, `ttlMs` 0; a call gets the reason at once, with
/// `data`; once the app is up, the call reaches it.
#[test]
fn a_client_before_the_app_gets_the_last_lists_and_a_call_the_reason() {
    let setup = Setup::new("lists", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let lists = [
        initialize(1, "2025-06-18"),
        request(2, "tools/list", json!({})),
        request(3, "tools/list", json!({"cursor": "2"})),
        request(4, "prompts/list", json!({})),
        request(5, "resources/list", json!({})),
        request(6, "resources/templates/list", json!({})),
    ];
    smol::block_on(async {
        let earlier = App::start(&setup.dir, &socket, None, "earlier");
        let live = session(&socket, &cache, &[], &lists).await;
        earlier.stop();

        let mut client = bridge(&socket, &cache, "allowed", &[]);
        for (n, line) in lists.iter().enumerate() {
            let reply = ask(&mut client, line, n as u32 + 1).await;
            assert_cached(&reply, &live[n]["result"]);
            if n == 0 {
                client.send(INITIALIZED).await;
            }
        }
        let call = request(
            7,
            "tools/call",
            json!({"name": "earlier-tool-1", "arguments": {}}),
        );
        let reply = ask(&mut client, &call, 7).await;
        assert_eq!(reason(&reply), "app_not_running", "{}", reply);
        assert_eq!(reply["error"]["data"]["source"], "mcp-bridge");

        let later = App::start(&setup.dir, &socket, None, "later");
        let stderr = client.child.stderr.take().unwrap();
        let mut stderr = futures_lite::io::BufReader::new(stderr);
        within("the bridge to say it took the app", async {
            let mut line = String::new();
            while !line.contains("took the session") {
                line.clear();
                assert!(
                    stderr.read_line(&mut line).await.unwrap() > 0,
                    "stderr ended"
                );
            }
        })
        .await;
        let call = request(
            8,
            "tools/call",
            json!({"name": "earlier-tool-1", "arguments": {}}),
        );
        let reply = ask(&mut client, &call, 8).await;
        assert_eq!(
            reply["result"]["content"][0]["text"], "called later",
            "{}",
            reply
        );
        client.finish().await;
        later.stop();
    });
}

/// An app upgraded while away, which declares no `listChanged`: the client
/// was given its old tools from the cache, and once the new version is
/// there it is told the tools may have changed (never stale in silence),
/// and lists the new ones.
#[test]
fn a_client_given_cached_tools_is_told_they_may_have_changed() {
    let setup = Setup::new("upgraded", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let list = request(2, "tools/list", json!({}));
    smol::block_on(async {
        let old = App::start(&setup.dir, &socket, None, "static-old");
        session(
            &socket,
            &cache,
            &[],
            &[initialize(1, "2025-06-18"), list.clone()],
        )
        .await;
        old.stop();

        let mut client = bridge(&socket, &cache, "allowed", &[]);
        let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
        assert_eq!(
            reply["result"]["capabilities"]["tools"],
            json!({}),
            "{}",
            reply
        );
        client.send(INITIALIZED).await;
        let reply = ask(&mut client, &list, 2).await;
        assert_eq!(
            reply["result"]["tools"][0]["name"], "static-old-tool-1",
            "{}",
            reply
        );

        let new = App::start(&setup.dir, &socket, None, "static-new");
        let told = within("the client to be told its tools may have changed", async {
            loop {
                let message = client.json().await;
                if message.get("method").is_some() {
                    return message;
                }
            }
        })
        .await;
        assert_eq!(
            told["method"], "notifications/tools/list_changed",
            "{}",
            told
        );
        let reply = ask(&mut client, &request(3, "tools/list", json!({})), 3).await;
        assert_eq!(
            reply["result"]["tools"][0]["name"], "static-new-tool-1",
            "{}",
            reply
        );
        client.finish().await;
        new.stop();
    });
}

/// `reply` is the fresh cached answer of the app's `live` result: the
/// same, but for a `ttlMs` that is what is left of the app's (more than 0:
/// it was kept moments ago).
fn assert_cached(reply: &Value, live: &Value) {
    let mut expected = live.clone();
    if let Some(ttl) = live["ttlMs"].as_u64() {
        let left = reply["result"]["ttlMs"].as_u64().unwrap_or(0);
        assert!(
            left > 0 && left <= ttl,
            "ttlMs {} of {}: {}",
            left,
            ttl,
            reply
        );
        expected["ttlMs"] = left.into();
    }
    assert_eq!(reply["result"], expected, "{}", reply);
}

/// Sets the modification time of every file in `cache` `seconds` back.
fn age_files(cache: &Path, seconds: u64) {
    let then = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - seconds;
    for entry in fs::read_dir(cache).unwrap() {
        let status = Command::new("touch")
            .arg("-m")
            .arg("-d")
            .arg(format!("@{}", then))
            .arg(entry.unwrap().path())
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// `ttlMs` as the spec says: freshness from when the answer was kept; a
/// stale answer is given only while the app is away, with `ttlMs` 0, and
/// said stale on stderr, once; once the app is back, its own answer.
#[test]
fn a_stale_answer_is_served_only_while_the_app_is_away_and_said_stale() {
    let setup = Setup::new("stale", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let discover = |id| modern(id, "server/discover", json!({}));
    smol::block_on(async {
        let app = App::start(&setup.dir, &socket, None, "kept");
        let live = results_of(&socket, &cache, "p", &[discover(1)]).await;
        app.stop();
        // Fresh: what is left of its 60 s, nothing said of staleness.
        let mut client = bridge_of(&socket, &cache, "p");
        let reply = ask(&mut client, &discover(1), 1).await;
        assert_cached(&reply, &live[0]);
        let (_, stderr) = client.finish_with_stderr().await;
        assert!(!stderr.contains("stale"), "{}", stderr);
        // Kept 2 minutes ago: stale, given with ttlMs 0, said once.
        age_files(&cache, 120);
        let mut client = bridge_of(&socket, &cache, "p");
        for id in 1..=2 {
            let reply = ask(&mut client, &discover(id), id).await;
            let mut expected = live[0].clone();
            expected["ttlMs"] = 0.into();
            assert_eq!(reply["result"], expected, "{}", reply);
        }
        let (_, stderr) = client.finish_with_stderr().await;
        assert_eq!(stderr.matches("is stale").count(), 1, "{}", stderr);
        // The app back: its own answer, not the stale one.
        let app = App::start(&setup.dir, &socket, None, "back");
        let mut client = bridge_of(&socket, &cache, "p");
        let reply = ask(&mut client, &discover(1), 1).await;
        assert_eq!(reply["result"]["serverInfo"]["name"], "back", "{}", reply);
        assert_eq!(reply["result"]["ttlMs"], 60000, "{}", reply);
        let (_, stderr) = client.finish_with_stderr().await;
        assert!(!stderr.contains("stale"), "{}", stderr);
        app.stop();
    });
}

/// A bridge of `project` to `socket`, with the cache in `cache`.
fn bridge_of(socket: &Path, cache: &Path, project: &str) -> Bridge {
    let mut command = bridge_command(socket, project, "allowed");
    command
        .arg("--cache-dir")
        .arg(cache)
        .args(["--connect-timeout", "1"])
        .stderr(Stdio::piped());
    Bridge::spawn(&mut command)
}

/// Asks `lines` of a bridge of `project` (ids 1, 2, ...), each answered
/// with a result; returns the results.
async fn results_of(socket: &Path, cache: &Path, project: &str, lines: &[String]) -> Vec<Value> {
    let mut client = bridge_of(socket, cache, project);
    let mut results = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let reply = ask(&mut client, line, n as u32 + 1).await;
        assert!(reply.get("result").is_some(), "{}", reply);
        results.push(reply["result"].clone());
    }
    let (code, stderr) = client.finish_with_stderr().await;
    assert_eq!(code, Some(0), "{}", stderr);
    results
}

/// The answers cache's files and their bytes.
fn cache_files(cache: &Path) -> (usize, u64) {
    let files: Vec<fs::Metadata> = fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .collect();
    (files.len(), files.iter().map(fs::Metadata::len).sum())
}

/// The bound keeps what matters: a 300-page `tools/list` evicts neither
/// that project's `initialize` answer nor another project's.
#[test]
fn a_long_catalog_leaves_the_initialize_answers_in_place() {
    let setup = Setup::new("catalog", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, None, "catalog");
    smol::block_on(async {
        let other = results_of(&socket, &cache, "q", &[initialize(1, "2025-06-18")]).await;
        let mut lines = vec![initialize(1, "2025-06-18")];
        for page in 0..300u32 {
            let cursor = format!("page-{}", page);
            lines.push(request(page + 2, "tools/list", json!({ "cursor": cursor })));
        }
        let live = results_of(&socket, &cache, "p", &lines).await;
        app.stop();
        for (project, live) in [("q", &other[0]), ("p", &live[0])] {
            let mut client = bridge_of(&socket, &cache, project);
            let reply = ask(&mut client, &initialize(1, "2025-06-18"), 1).await;
            assert_eq!(&reply["result"], live, "project {}: {}", project, reply);
            client.finish().await;
        }
    });
}

/// The bound is in bytes: list pages with 40 KiB cursors and 60 KiB
/// results leave the directory within its 16 MiB, the key written once.
#[test]
fn the_answers_cache_stays_within_its_bytes() {
    let setup = Setup::new("bytes", 0o755);
    let (socket, cache) = (setup.socket(), setup.cache());
    let app = App::start(&setup.dir, &socket, None, "wide");
    smol::block_on(async {
        let mut lines = vec![initialize(1, "2025-06-18")];
        for page in 0..200u32 {
            let cursor = format!("{:03}{}", page, "c".repeat(40 * 1024));
            lines.push(request(page + 2, "tools/list", json!({ "cursor": cursor })));
        }
        let live = results_of(&socket, &cache, "p", &lines).await;
        app.stop();
        let (files, bytes) = cache_files(&cache);
        assert!(files > 1, "{} files", files);
        assert!(
            bytes <= 16 * 1024 * 1024,
            "{} files, {} bytes",
            files,
            bytes
        );
        let mut client = bridge_of(&socket, &cache, "p");
        let reply = ask(&mut client, &lines[0], 1).await;
        assert_eq!(reply["result"], live[0], "{}", reply);
        let last = lines.last().unwrap();
        let reply = ask(&mut client, last, 201).await;
        assert_cached(&reply, &live[200]);
        client.finish().await;
    });
}
