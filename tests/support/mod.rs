//! Helpers shared by the Unix integration tests (each test file includes
//! this module and uses only part of it).
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// A temporary directory with the given mode, removed on drop.
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

/// The foreign bridge did connect (so file permissions let it in) and was
/// then hung up on: either before its handshake went out (a broken pipe,
/// exit 1) or after (the host's EOF ends it cleanly, as its stdin is still
/// open). Which one is a race; both prove the refusal came after connecting.
pub fn assert_hung_up_after_connecting(status: std::process::ExitStatus, stderr: &str) {
    assert!(!stderr.contains("cannot connect"), "{}", stderr);
    assert!(
        status.success()
            || stderr.contains("connected to") && stderr.contains("could not send the handshake"),
        "{}: {}",
        status,
        stderr
    );
}
