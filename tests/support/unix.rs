//! The Unix half of the shared test helpers: temporary directories with a
//! given mode, and running a bridge as another user.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::BIN;

/// The unprivileged user (and group) root's tests run a foreign bridge as.
pub const NOBODY: u32 = 65534;

/// A temporary directory with the given mode, removed on drop.
///
/// It lives under the system's temporary directory, never under the
/// checkout: the socket paths tests build in it must stay far below the
/// 107-byte limit however deep the checkout is, and a foreign user must be
/// able to reach it (given the mode) however private the checkout is.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str, mode: u32) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path =
            std::env::temp_dir().join(format!("mcpb-{}-{}-{}", tag, std::process::id(), nanos));
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        TempDir(path)
    }

    /// The socket path tests bind or connect to.
    pub fn socket(&self) -> PathBuf {
        self.0.join("app.sock")
    }

    /// The names in the directory, sorted.
    pub fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Whether this process may run others as another user (the foreign-user
/// tests need root).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The one way a test runs a bridge as user [`NOBODY`]: a command for a
/// copy of the bridge in `dir` (see [`foreign_command`]).
pub fn foreign_bridge(dir: &TempDir) -> Command {
    foreign_command(dir, Path::new(BIN))
}

/// The one way a test runs a program cargo built (the bridge, or the test
/// binary itself in a helper role) as user [`NOBODY`]: a command for a copy
/// of `program` in `dir`, which that user must be able to enter (a mode with
/// o+x, such as 0755).
///
/// Never the built binary itself: the checkout, and so the build directory,
/// may sit under a directory that user cannot enter (a 0700 home, a
/// `mktemp -d`), and the exec would fail before the program ran at all.
///
/// `cp` writes the copy, not this process: the test harness forks from many
/// threads at once, and a child forked while we held the new file open for
/// writing would keep that descriptor until its exec, making our own exec of
/// the copy fail with "Text file busy" (ETXTBSY).
pub fn foreign_command(dir: &TempDir, program: &Path) -> Command {
    let mode = fs::metadata(&dir.0).unwrap().permissions().mode();
    assert!(
        mode & 0o001 != 0,
        "{} (mode {:o}) is closed to user {}",
        dir.0.display(),
        mode,
        NOBODY
    );
    let copy = dir.0.join(program.file_name().unwrap());
    let status = Command::new("cp").arg(program).arg(&copy).status().unwrap();
    assert!(
        status.success(),
        "cp {} failed: {}",
        program.display(),
        status
    );
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = Command::new(copy);
    command.uid(NOBODY).gid(NOBODY);
    command
}

/// Starts a bridge as user [`NOBODY`] (see [`foreign_bridge`]) against
/// `socket`, every stdio piped (stdin left open, so only the host can end
/// it).
pub fn spawn_foreign_bridge(dir: &TempDir, socket: &Path) -> smol::process::Child {
    let mut command = foreign_bridge(dir);
    super::plain_relay(&mut command, socket, "intruder");
    // Stdio set on the smol command: it does not carry std's settings over.
    smol::process::Command::from(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The foreign bridge did connect (so file permissions let it in) and was
/// then hung up on: either before its handshake went out (a broken pipe)
/// or after, with nothing said (a refusal). Which one is a race; both are
/// exit 1, and both prove the refusal came after connecting.
pub fn assert_hung_up_after_connecting(status: std::process::ExitStatus, stderr: &str) {
    assert!(!stderr.contains("cannot connect"), "{}", stderr);
    let sent_nothing =
        stderr.contains("connected to") && stderr.contains("could not send the handshake");
    let refused = stderr.contains("closed the connection before answering anything");
    assert!(
        status.code() == Some(1) && (sent_nothing || refused),
        "{}: {}",
        status,
        stderr
    );
}

/// Whether `pid` is still running: gone, or a zombie its new parent has yet
/// to reap, both count as stopped.
pub fn is_running(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{}/stat", pid)) {
        // The state follows the parenthesised command name.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => rustix::process::Pid::from_raw(pid as i32)
            .map_or(false, |pid| rustix::process::test_kill_process(pid).is_ok()),
    }
}

/// Waits until `pid` has stopped running; fails the test if it never does
/// within [`HANG_GUARD`](super::HANG_GUARD).
pub async fn stops_running(pid: u32) {
    super::eventually("a process to stop", || !is_running(pid)).await
}

/// Our own child `pid` is reaped: its pid is gone, not even a zombie.
pub fn assert_reaped(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a child pid is positive");
    assert_eq!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH),
        "pid {:?} still exists (zombie or running)",
        pid
    );
}

/// Whether process `pid` exists, a zombie included: a child its parent has
/// yet to reap still counts, which is what a test of the reaping asks (see
/// [`is_running`] for whether it still runs).
pub fn exists(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .map_or(false, |pid| rustix::process::test_kill_process(pid).is_ok())
}

/// A small file system of its own (a tmpfs of a given size, mounted on a
/// fresh [`TempDir`]), for the tests of a full disk; unmounted on drop.
pub struct SmallDisk {
    dir: TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes`; `None` where this process may not mount
    /// (it needs root, and CAP_SYS_ADMIN in its namespace), after saying
    /// so on stderr: a test that needs it is then skipped, not failed.
    pub fn mount(tag: &str, bytes: u64) -> Option<SmallDisk> {
        let dir = TempDir::new(tag, 0o700);
        let mounted = is_root()
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={},mode=0700", bytes))
                .arg("tmpfs")
                .arg(&dir.0)
                .stderr(Stdio::null())
                .status()
                .map_or(false, |status| status.success());
        if !mounted {
            eprintln!(
                "skipped: cannot mount a {}-byte tmpfs on {} (not root, or no CAP_SYS_ADMIN)",
                bytes,
                dir.0.display()
            );
            return None;
        }
        Some(SmallDisk { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir.0
    }

    /// Takes every free block with a file of its own (returned, to be
    /// removed when the disk should have room again).
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.dir.0.join("filler");
        let mut file = fs::File::create(&path).unwrap();
        let block = [0u8; 4096];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) => {
                    break
                }
                Err(e) => panic!("filling {}: {}", path.display(), e),
            }
        }
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir.0).status();
    }
}
