//! The binary's entry point on Unix: a C `main` of its own (the binary is
//! `#![no_main]` there), compiled into the binary only, never the library.
//!
//! std's start-up (`lang_start`) does four things before `main` that the
//! bridge needs, and brings code the bridge does not: the handler that turns
//! a stack overflow into a message (with its per-thread bookkeeping), and
//! the naming of the main thread. Without them the binary is 15.9 KB
//! smaller (docs/bundling.md). What this entry keeps of std's start-up:
//!
//! - `SIGPIPE` ignored, so a write to a reader that went away fails with
//!   `EPIPE` (which the relay and the stderr queue handle) instead of killing
//!   the process. std's `Command` still gives the children it spawns the
//!   default disposition.
//! - fds 0, 1 and 2 open: one that our parent left closed is opened on
//!   `/dev/null`, as std does, so that a socket or file the bridge opens can
//!   never take a standard stream's number and receive its bytes.
//! - the arguments, from `argv`: std fills `args_os()` before `main` on its
//!   own only with glibc, not with musl (the shipped Linux builds).
//!
//! What changes, only on a bug: a stack overflow is a plain `SIGSEGV`
//! instead of std's "has overflowed its stack" and abort, and a panic on the
//! main thread names it `<unnamed>`.

use std::ffi::{CStr, OsString};
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::io::{BorrowedFd, IntoRawFd};

/// What the C runtime calls. Returns the process's exit code, which the C
/// runtime hands to `exit(3)` (running `atexit` handlers and thread-local
/// destructors as after std's `main`).
// SAFETY (of the attribute): no other `main` symbol is linked: the binary is
// `#![no_main]` on Unix outside its tests, exactly when this module is
// compiled, and the library defines none.
#[no_mangle]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    ignore_sigpipe();
    open_closed_stdio();
    let count = usize::try_from(argc).unwrap_or(0);
    let mut args = Vec::with_capacity(count.saturating_sub(1));
    for i in 1..count {
        // SAFETY: the C runtime passes `argv` with `argc` valid pointers
        // before its terminating null, each to a NUL-terminated string that
        // lives (unchanged by us) for the whole process; `i < argc`.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
        args.push(OsString::from_vec(arg.to_bytes().to_vec()));
    }
    c_int::from(crate::run_main(args))
}

/// fd 1, borrowed for the whole process: stdout by its descriptor, without
/// std's `Stdout` handle.
pub(crate) fn stdout() -> BorrowedFd<'static> {
    // SAFETY: fd 1 is the process's standard output, open for its whole life
    // (`open_closed_stdio` saw to it before anything else ran); std lends it
    // out the same way (`AsFd for Stdout`), and nothing in the binary closes
    // it.
    unsafe { BorrowedFd::borrow_raw(1) }
}

/// `signal(SIGPIPE, SIG_IGN)`, as std's start-up does.
fn ignore_sigpipe() {
    // `sighandler_t` is a pointer-sized function pointer; SIG_IGN is 1 on
    // every Unix.
    extern "C" {
        fn signal(signum: c_int, handler: usize) -> usize;
    }
    const SIG_IGN: usize = 1;
    // SAFETY: `SIGPIPE` is a valid signal number (rustix's constant for this
    // target) and `SIG_IGN` a valid disposition; it runs before any thread
    // of ours exists, and touches nothing of ours.
    unsafe { signal(rustix::process::Signal::PIPE.as_raw(), SIG_IGN) };
}

/// Opens `/dev/null` on each of fds 0-2 that is closed, lowest first (the
/// lowest free number is the one `open` takes), and leaves it open.
fn open_closed_stdio() {
    for fd in 0..3 {
        // SAFETY: the number is only handed to `fcntl(F_GETFD)`, which asks
        // whether it is open and changes nothing; the borrow ends with the
        // call, before anything could open or close that number.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if rustix::io::fcntl_getfd(borrowed) == Err(rustix::io::Errno::BADF) {
            let null = rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDWR,
                rustix::fs::Mode::empty(),
            );
            match null {
                // Kept open for the whole process, as a standard stream.
                Ok(null) => drop(null.into_raw_fd()),
                // No /dev/null: nothing better to do than go on, as std.
                Err(_) => return,
            }
        }
    }
}
