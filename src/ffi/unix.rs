//! Unix calls without a safe wrapper elsewhere.

use std::os::unix::io::BorrowedFd;

/// fd 0, 1 or 2 (`n`), borrowed for the whole process: the standard
/// streams by their descriptor, without std's `Stdin`, `Stdout` and
/// `Stderr` handles (their locks and buffers, 3.6 KB of the binary that the
/// bridge, which never reads or writes through them, does not need).
pub(crate) fn standard_stream(n: u8) -> BorrowedFd<'static> {
    assert!(n <= 2, "not a standard stream");
    // SAFETY: fds 0-2 are the process's standard streams, open for its whole
    // life: std lends them out the same way, as `BorrowedFd<'static>`
    // (`AsFd` for `Stdin`, `Stdout`, `Stderr`), and its start-up, like the
    // binary's own entry (src/ffi/entry.rs), opens `/dev/null` on any that
    // the parent left closed. Nothing in this crate closes them.
    unsafe { BorrowedFd::borrow_raw(i32::from(n)) }
}

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

/// Makes the child that `command` spawns lead a new process group of its own
/// (`setpgid(0, 0)` between fork and exec), as `CommandExt::process_group(0)`
/// does from Rust 1.64 on, one release after this crate's minimum. Signals sent
/// to that group then reach everything the child starts, and nothing of ours.
/// Only compiled where std lacks that (see the build script).
#[cfg(not(mcp_bridge_process_group))]
pub(crate) fn lead_new_process_group(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;

    // SAFETY: `pre_exec` is unsafe because its closure runs in the forked child
    // before exec, where another thread of ours may have held a lock (the
    // allocator's, say) at the moment of the fork, so only async-signal-safe
    // work is sound there. The closure captures nothing, allocates nothing and
    // makes one call: setpgid, which POSIX lists as async-signal-safe, made by
    // rustix as a direct system call (Linux) or libc's thin wrapper. Its error
    // becomes an `io::Error` from the raw errno, which does not allocate either.
    unsafe {
        command.pre_exec(|| rustix::process::setpgid(None, None).map_err(std::io::Error::from));
    }
}

/// Catches `SIGXFSZ` with a handler that does nothing, unless the process
/// already has a disposition for it other than the default (an embedding
/// program's own choice, put back as it was). A write past `RLIMIT_FSIZE`
/// then fails with `EFBIG` instead of killing the process. Not `SIG_IGN`:
/// an ignored signal stays ignored across `exec`, a caught one does not, so
/// the commands `serve` starts keep the default.
///
/// rustix has no safe `sigaction` (only under its unstable `runtime`
/// feature), so this is `signal(3)`, which every Unix libc has, std links,
/// and which installs a handler with BSD semantics there (it stays
/// installed, and interrupted calls restart).
pub(crate) fn catch_file_size_signal() -> std::io::Result<()> {
    use std::os::raw::c_int;

    // `sighandler_t` is a pointer-sized function pointer; SIG_DFL is 0 and
    // SIG_ERR is -1 on every Unix.
    extern "C" {
        fn signal(signum: c_int, handler: usize) -> usize;
    }
    const SIG_DFL: usize = 0;
    const SIG_ERR: usize = usize::MAX;

    extern "C" fn do_nothing(_: c_int) {}

    let signum = rustix::process::Signal::XFSZ.as_raw();
    let handler: extern "C" fn(c_int) = do_nothing;
    // SAFETY: `signum` is a valid signal number (rustix's constant for this
    // target), and `handler` is an `extern "C"` function of the signature a
    // signal handler has, living as long as the program. It does nothing at
    // all, so it is async-signal-safe and cannot disturb the code it
    // interrupts. `signal` touches nothing of ours.
    let previous = unsafe { signal(signum, handler as usize) };
    if previous == SIG_ERR {
        return Err(std::io::Error::last_os_error());
    }
    if previous != SIG_DFL {
        // SAFETY: puts back the disposition `signal` just returned, which
        // was valid for this signal a moment ago (SIG_IGN or a handler the
        // program installed and still owns).
        unsafe { signal(signum, previous) };
    }
    Ok(())
}

/// Test-only: the global allocator of the library's unit tests, which counts
/// what each thread has allocated and not yet freed, so that a test can weigh
/// the data structure it just built while other tests run beside it.
#[cfg(test)]
// Clippy 1.63 takes `thread_local!`'s const initializer for an interior-mutable const.
#[allow(clippy::declare_interior_mutable_const)]
pub(crate) mod counting_allocator {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        // A constant initializer and no destructor: using it never allocates or
        // registers anything, so the allocator itself may use it.
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }

    /// Bytes this thread has allocated and not freed, as the allocator was asked
    /// (without the allocator's own overhead).
    pub(crate) fn live_bytes() -> isize {
        LIVE.with(Cell::get)
    }

    fn count(change: isize) {
        // During thread teardown the counter may be gone; the count no longer matters.
        let _ = LIVE.try_with(|live| live.set(live.get() + change));
    }

    struct Counting;

    // SAFETY: every method forwards to the system allocator with the caller's own
    // arguments, so it upholds exactly the contract `System` does; counting
    // touches only a thread-local integer and never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count(layout.size() as isize);
            // SAFETY (of the call, made in this unsafe fn): forwarded unchanged;
            // the caller upholds `alloc`'s contract.
            System.alloc(layout)
        }

        unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
            count(-(layout.size() as isize));
            // SAFETY (of the call): forwarded unchanged; `pointer` came from
            // `System` through us.
            System.dealloc(pointer, layout)
        }

        unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count(new_size as isize - layout.size() as isize);
            // SAFETY (of the call): forwarded unchanged; `pointer` came from
            // `System` through us.
            System.realloc(pointer, layout, new_size)
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;
}
