use std::fs;
use std::path::PathBuf;

use futures_lite::io::{AsyncReadExt, Cursor};

use super::*;

/// A fresh directory for one test's log files, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path =
            std::env::temp_dir().join(format!("mcpb-log-{}-{}-{}", tag, std::process::id(), nanos));
        fs::create_dir(&path).unwrap();
        Dir(path)
    }

    fn file(&self) -> PathBuf {
        self.0.join("traffic.log")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const FLUSHED: Duration = Duration::from_secs(30);

/// The records of a log file without their timestamps.
fn records(path: &Path) -> Vec<String> {
    let text = fs::read(path).unwrap();
    let text = String::from_utf8(text).expect("the log is UTF-8");
    text.lines()
        .map(|line| {
            let (stamp, rest) = line.split_once(' ').unwrap();
            assert_eq!(stamp.len(), "1970-01-01T00:00:00.000000Z".len(), "{}", line);
            rest.to_string()
        })
        .collect()
}

/// A stream of three messages and a last line with no `\n`.
const STREAM: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n\
{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r\n\
\n\
{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":1,\"message\":\"no\"}}\n\
not json";

fn expected_stream_records(direction: &str) -> Vec<String> {
    vec![
        format!(
            "{} request id=1 method=initialize len=46 {{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}}",
            direction
        ),
        format!(
            "{} notification method=notifications/initialized len=55 {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\\x0d",
            direction
        ),
        format!("{} other len=0", direction),
        format!(
            "{} error id=\"x\" len=60 {{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{{\"code\":1,\"message\":\"no\"}}}}",
            direction
        ),
        format!("{} other len=8 not json", direction),
    ]
}

/// The relay's reads cut lines anywhere: every way of cutting the stream
/// in two, and byte by byte, gives the same records.
#[test]
fn a_tap_makes_one_record_per_line_however_the_stream_is_cut() {
    let dir = Dir::new("cuts");
    let log = TrafficLog::open(&dir.file(), LogOptions::default()).unwrap();
    let mut expected = Vec::new();
    for cut in 0..=STREAM.len() {
        let mut tap = log.tap(Direction::CliToApp);
        tap.feed(&STREAM[..cut]);
        tap.feed(&STREAM[cut..]);
        drop(tap);
        expected.extend(expected_stream_records("cli->app"));
    }
    let mut tap = log.tap(Direction::AppToCli);
    for byte in STREAM.chunks(1) {
        tap.feed(byte);
    }
    tap.finish();
    expected.extend(expected_stream_records("app->cli"));
    assert!(log.flush(FLUSHED));
    let got = records(&dir.file());
    for (n, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "record {}", n);
    }
    assert_eq!(got.len(), expected.len());
}

/// A message longer than the cap keeps its start, and says how much of it
/// is not there; the tap holds only the cap, not the line.
#[test]
fn long_messages_are_cut_at_the_cap() {
    let dir = Dir::new("cap");
    let options = LogOptions {
        message_cap: 32,
        ..LogOptions::default()
    };
    let log = TrafficLog::open(&dir.file(), options).unwrap();
    let mut line = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"".to_vec();
    line.extend(std::iter::repeat(b'x').take(1_000_000));
    line.extend_from_slice(b"\"}}\n");
    let mut tap = log.tap(Direction::AppToCli);
    for chunk in line.chunks(65_536) {
        tap.feed(chunk);
        assert!(tap.start.len() <= 32);
    }
    drop(tap);
    assert!(log.flush(FLUSHED));
    assert_eq!(
        records(&dir.file()),
        [format!(
            "app->cli response id=7 len={} {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\" \u{2026} ({} bytes left out)",
            line.len() - 1,
            line.len() - 1 - 32
        )]
    );
}

/// What a tapped reader hands on is exactly what it read; the log sees
/// the same lines, the last one without `\n` at EOF.
#[test]
fn a_tapped_reader_passes_bytes_unchanged() {
    smol::block_on(async {
        let dir = Dir::new("read");
        let log = TrafficLog::open(&dir.file(), LogOptions::default()).unwrap();
        let mut reader = TapRead::new(
            Cursor::new(STREAM.to_vec()),
            Some(log.for_connection(4).tap(Direction::CliToApp)),
        );
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, STREAM);
        assert!(log.flush(FLUSHED));
        let expected: Vec<String> = expected_stream_records("cli->app")
            .into_iter()
            .map(|r| r.replacen("cli->app", "cli->app conn=4", 1))
            .collect();
        assert_eq!(records(&dir.file()), expected);
    });
}

/// A disk that cannot keep up (here: a writer stuck with a full queue)
/// costs records, never a wait; the next record that fits says how many
/// were lost.
#[test]
fn a_full_queue_drops_records_and_counts_them() {
    let dir = Dir::new("full");
    let options = LogOptions {
        queue_limit: 4096,
        ..LogOptions::default()
    };
    let log = TrafficLog::open(&dir.file(), options).unwrap();
    log.event(format_args!("before"));
    assert!(log.flush(FLUSHED));
    // As if the writer were stuck writing a full queue's worth.
    log.handle.shared.lock().in_flight = 4096;
    let started = Instant::now();
    for n in 0..1000 {
        log.event(format_args!("lost {}", n));
    }
    assert!(started.elapsed() < FLUSHED, "dropping never waits");
    assert_eq!(log.handle.shared.lock().dropped, 1000);
    log.handle.shared.lock().in_flight = 0;
    log.event(format_args!("after"));
    assert!(log.flush(FLUSHED));
    assert_eq!(
        records(&dir.file()),
        [
            "event before",
            "event dropped 1000 records: the log could not keep up, or could not be written",
            "event after",
        ]
    );
}

/// The file never grows past the cap by more than nothing: records go to
/// a new file once the next would not fit, one old file is kept, and no
/// record is split between the two.
#[test]
fn the_file_is_rotated_at_the_cap_keeping_one_old_file() {
    let dir = Dir::new("rotate");
    let options = LogOptions {
        max_file_bytes: 1000,
        ..LogOptions::default()
    };
    let log = TrafficLog::open(&dir.file(), options).unwrap();
    for n in 0..200 {
        log.event(format_args!("record number {:04}", n));
        if n % 50 == 0 {
            assert!(log.flush(FLUSHED));
        }
    }
    assert!(log.flush(FLUSHED));
    let mut names: Vec<String> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["traffic.log", "traffic.log.1"]);
    let old = dir.0.join("traffic.log.1");
    for path in [&dir.file(), &old] {
        let len = fs::metadata(path).unwrap().len();
        assert!(len <= 1000, "{} has {} bytes", path.display(), len);
    }
    let old_records = records(&old);
    let new_records = records(&dir.file());
    assert!(old_records.len() > 10, "{:?}", old_records);
    assert_eq!(new_records.last().unwrap(), "event record number 0199");
    // The old file ends right where the new one starts.
    let last_old: u32 = old_records.last().unwrap()[20..].parse().unwrap();
    let first_new: u32 = new_records[0][20..].parse().unwrap();
    assert_eq!(last_old + 1, first_new);
}

/// Records queued when the last handle goes are written, not lost with
/// the exit.
#[test]
fn dropping_the_last_handle_writes_what_is_queued() {
    let dir = Dir::new("drop");
    let log = TrafficLog::open(&dir.file(), LogOptions::default()).unwrap();
    let tap = log.tap(Direction::AppToCli);
    log.event(format_args!("one"));
    drop(log);
    drop(tap);
    assert_eq!(records(&dir.file()), ["event one"]);
}

#[test]
fn a_log_that_cannot_be_opened_names_the_file_and_the_reason() {
    let dir = Dir::new("missing");
    let path = dir.0.join("no-such-dir").join("traffic.log");
    let e = TrafficLog::open(&path, LogOptions::default()).unwrap_err();
    let text = crate::error_chain(&e);
    assert!(
        text.starts_with(&format!(
            "cannot open the traffic log '{}': ",
            path.display()
        )),
        "{}",
        text
    );
    assert!(TrafficLog::open_or_warn(&path, LogOptions::default()).is_none());
}

/// The log holds the user's traffic: only the user may read it, even when
/// the file was there before with a wider mode.
#[cfg(unix)]
#[test]
fn the_file_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("mode");
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let log = TrafficLog::open(&dir.file(), LogOptions::default()).unwrap();
    assert_eq!(mode(&dir.file()), 0o600);
    drop(log);
    fs::set_permissions(dir.file(), fs::Permissions::from_mode(0o644)).unwrap();
    let _log = TrafficLog::open(&dir.file(), LogOptions::default()).unwrap();
    assert_eq!(mode(&dir.file()), 0o600);
}

#[test]
fn event_helpers_say_what_happened() {
    let dir = Dir::new("events");
    let log = TrafficLog::open(&dir.file(), LogOptions::default()).unwrap();
    let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
    log.connect_attempt(1, Path::new("/run/app.sock"));
    log.connect_outcome(1, Duration::from_micros(2500), Err(&refused));
    log.connect_outcome(2, Duration::from_micros(300), Ok(()));
    log.handshake_sent(b"{\"project\":\"p\",\"requester\":\"r\"}\n");
    log.error_response_sent(b"\"a\"", -32000, "the app\nis gone");
    log.exit(0, &"stdin closed");
    assert!(log.flush(FLUSHED));
    assert_eq!(
        records(&dir.file()),
        [
            "event connect attempt=1 endpoint='/run/app.sock'",
            "event connect failed attempt=1 after 2.5 ms: refused",
            "event connected attempt=2 in 0.3 ms",
            "event handshake sent {\"project\":\"p\",\"requester\":\"r\"}",
            "event sent error response id=\"a\" code=-32000: the app\\x0ais gone",
            "event exit code=0: stdin closed",
        ]
    );
}
