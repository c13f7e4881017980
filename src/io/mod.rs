//! The I/O helpers the relay, the platform stdio, the endpoint and the host
//! share, so that none of them imports another's module for them: a platform
//! file reaches for its buffer size here, not in the relay.
//!
//! - [`BUFFER_SIZE`]: the one bound on a read, for the relay and for every
//!   platform stream that buffers (pipes, threaded stdio);
//! - `forward`: the `AsyncRead`/`AsyncWrite` impls of the public stream
//!   newtypes, written once;
//! - `readiness` (Unix): when a non-blocking read waits for readiness first;
//! - `thread` (Unix): a blocking file read or written on a thread of its own;
//! - `SMALL_STACK`: the stack of every helper thread.

#[macro_use]
mod forward;
#[cfg(unix)]
pub(crate) mod readiness;
#[cfg(unix)]
pub(crate) mod thread;

/// Stack size of this crate's helper threads (the stderr queue's writer,
/// the stdio hang-up watcher, threaded stdio), which only wait in blocking
/// system calls, their buffers on the heap: 64 KiB instead of std's 2 MiB
/// each. Only the pages a thread touches are resident either way (8 KiB
/// here), so this is address space, not memory, and no huge page can back
/// a stack this small.
pub(crate) const SMALL_STACK: usize = 64 * 1024;

/// Bytes moved per read. Large enough that a 64 KiB line (a full pipe) moves
/// in one system call each way; small enough that two of them are all the
/// memory the relay ever holds.
pub const BUFFER_SIZE: usize = 64 * 1024;
