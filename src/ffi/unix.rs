//! Unix calls without a safe wrapper elsewhere.

/// The effective uid of the process at the other end of a connected Unix
/// socket, through `getpeereid(3)`. Linux uses rustix's `SO_PEERCRED`
/// instead; rustix has no wrapper for this call, and it lives in every
/// BSD's and macOS's libc, which std already links.
#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
pub(crate) fn peer_uid(socket: std::os::unix::io::BorrowedFd<'_>) -> std::io::Result<u32> {
    use std::os::raw::c_int;
    use std::os::unix::io::AsRawFd;

    // uid_t and gid_t are u32 on every one of these systems.
    extern "C" {
        fn getpeereid(socket: c_int, euid: *mut u32, egid: *mut u32) -> c_int;
    }
    let mut uid: u32 = 0;
    let mut gid: u32 = 0;
    // SAFETY: `socket` is a valid open descriptor for the borrow's lifetime,
    // and both out-pointers point to live, writable u32s on our stack that
    // outlive the call; getpeereid writes nothing else.
    let result = unsafe { getpeereid(socket.as_raw_fd(), &mut uid, &mut gid) };
    if result == 0 {
        Ok(uid)
    } else {
        Err(std::io::Error::last_os_error())
    }
}
