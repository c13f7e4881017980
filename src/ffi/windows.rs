//! Win32 calls that std does not wrap: named pipes opened for overlapped
//! I/O, the overlapped reads, writes and connects on them, and the events
//! that signal their completion or ask for their cancellation; the
//! owner-only security descriptor pipes are created with; and the console
//! control handler that turns Ctrl+C into a stop request.
//!
//! The one invariant that makes overlapped I/O sound is that the `OVERLAPPED`
//! structure and the data buffer outlive the operation, which the kernel may
//! still be carrying out after `ReadFile` returns. Every operation here is
//! therefore *finished* before the function that started it returns: it
//! waits for completion (or cancels and then waits), while holding the
//! `&mut Overlapped` and the buffer borrowed. Callers get plain blocking
//! calls with a way to abort them from another thread ([`Event::set`] on the
//! `stop` event), and never see a pending operation.

use std::ffi::OsStr;
use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::{
    AsRawHandle, FromRawHandle, HandleOrInvalid, HandleOrNull, OwnedHandle,
};
use std::path::Path;
use std::ptr;
use std::time::Duration;

use windows_sys::Win32::Foundation::{
    LocalFree, ERROR_INSUFFICIENT_BUFFER, ERROR_IO_PENDING, ERROR_MORE_DATA, ERROR_NO_DATA,
    ERROR_PIPE_CONNECTED, HANDLE, WAIT_OBJECT_0,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{
    GetTokenInformation, TokenUser, PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES, TOKEN_QUERY,
    TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    ReadFile, WriteFile, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED, PIPE_ACCESS_DUPLEX,
    SECURITY_IDENTIFICATION, SECURITY_SQOS_PRESENT,
};
use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
use windows_sys::Win32::System::Pipes::{
    ConnectNamedPipe, CreateNamedPipeW, WaitNamedPipeW, PIPE_READMODE_BYTE,
    PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES, PIPE_WAIT,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, GetCurrentProcess, OpenProcessToken, ResetEvent, SetEvent,
    WaitForMultipleObjects, INFINITE,
};
use windows_sys::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};

/// `name` as a NUL-terminated UTF-16 string, for the `W` functions.
pub(crate) fn wide(name: &OsStr) -> io::Result<Vec<u16>> {
    let mut wide: Vec<u16> = name.encode_wide().collect();
    if wide.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the name contains a NUL character",
        ));
    }
    wide.push(0);
    Ok(wide)
}

/// A manual-reset event, created unsignaled.
#[derive(Debug)]
pub(crate) struct Event(OwnedHandle);

impl Event {
    pub(crate) fn new() -> io::Result<Event> {
        // SAFETY: all pointer arguments may be NULL (default security, no
        // name). The returned handle, if not NULL, is ours to own and close.
        let handle =
            unsafe { HandleOrNull::from_raw_handle(CreateEventW(ptr::null(), 1, 0, ptr::null())) };
        OwnedHandle::try_from(handle)
            .map(Event)
            .map_err(|_| io::Error::last_os_error())
    }

    /// Signals the event. It stays signaled: nothing here ever resets a
    /// `stop` event, so a stop request cannot be missed.
    pub(crate) fn set(&self) {
        // SAFETY: the handle is a valid event handle owned by `self`.
        // SetEvent on a valid event handle cannot fail in a way we could act
        // on, so its result is ignored.
        unsafe {
            SetEvent(self.raw());
        }
    }

    fn reset(&self) {
        // SAFETY: as in `set`.
        unsafe {
            ResetEvent(self.raw());
        }
    }

    fn raw(&self) -> HANDLE {
        self.0.as_raw_handle()
    }
}

/// The `OVERLAPPED` structure and completion event of one operation at a
/// time. Each direction of a pipe has its own, so a read and a write can be
/// in flight together.
pub(crate) struct Overlapped {
    raw: OVERLAPPED,
    done: Event,
}

// SAFETY: `OVERLAPPED` holds raw pointers (the event handle, and fields the
// kernel writes) only because it is a C struct. The kernel touches it only
// while an operation started through `&mut self` is in flight, and every
// such operation completes before that borrow ends (see the module docs), so
// moving it to another thread between operations is sound.
unsafe impl Send for Overlapped {}

impl Overlapped {
    pub(crate) fn new() -> io::Result<Overlapped> {
        Ok(Overlapped {
            raw: OVERLAPPED::default(),
            done: Event::new()?,
        })
    }

    /// A zeroed `OVERLAPPED` pointing at our event, ready for a new operation
    /// (Win32 requires unused fields to be zero before each use).
    fn prepare(&mut self) -> *mut OVERLAPPED {
        self.done.reset();
        self.raw = OVERLAPPED::default();
        self.raw.hEvent = self.done.raw();
        &mut self.raw
    }
}

impl fmt::Debug for Overlapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overlapped")
            .field("done", &self.done)
            .finish()
    }
}

/// A named-pipe handle opened (client) or created (server) for overlapped
/// I/O. Reads and writes from different threads, each with its own
/// [`Overlapped`], proceed independently.
#[derive(Debug)]
pub(crate) struct Pipe(OwnedHandle);

impl Pipe {
    /// Opens the client end of the pipe `path` for overlapped reading and
    /// writing, allowing the server only to identify us, not to impersonate
    /// us. Errors are CreateFileW's (`ERROR_PIPE_BUSY` when every instance is
    /// taken).
    pub(crate) fn open(path: &Path) -> io::Result<Pipe> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(FILE_FLAG_OVERLAPPED)
            // std adds SECURITY_SQOS_PRESENT itself; naming it keeps the
            // intent visible.
            .security_qos_flags(SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION)
            .open(path)?;
        Ok(Pipe(OwnedHandle::from(file)))
    }

    /// Creates one server instance of the pipe `name` (NUL-terminated UTF-16),
    /// duplex, byte mode, local clients only, protected by `security`.
    /// `first` makes creation fail if the pipe already exists, so nobody
    /// else's pipe is joined by accident.
    pub(crate) fn create(
        name: &[u16],
        first: bool,
        buffer_size: u32,
        security: &SecurityDescriptor,
    ) -> io::Result<Pipe> {
        assert_eq!(name.last(), Some(&0), "the name must be NUL-terminated");
        let mut open_mode = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED;
        if first {
            open_mode |= FILE_FLAG_FIRST_PIPE_INSTANCE;
        }
        let pipe_mode =
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS;
        let attributes = SECURITY_ATTRIBUTES {
            nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
            lpSecurityDescriptor: security.0,
            bInheritHandle: 0,
        };
        // SAFETY: `name` is a NUL-terminated UTF-16 string (asserted above)
        // and `attributes` points at a valid security descriptor owned by
        // `security`; both outlive the call, which only reads them (the
        // kernel copies the descriptor into the pipe). The returned handle,
        // unless INVALID_HANDLE_VALUE, is ours to own and close.
        let handle = unsafe {
            HandleOrInvalid::from_raw_handle(CreateNamedPipeW(
                name.as_ptr(),
                open_mode,
                pipe_mode,
                PIPE_UNLIMITED_INSTANCES,
                buffer_size,
                buffer_size,
                0,
                &attributes,
            ))
        };
        OwnedHandle::try_from(handle)
            .map(Pipe)
            .map_err(|_| io::Error::last_os_error())
    }

    /// Reads into `buf`, waiting until some bytes arrive, the pipe ends (an
    /// error such as `ERROR_BROKEN_PIPE`), or `stop` is set (the read is
    /// cancelled: `ERROR_OPERATION_ABORTED`, unless it completed first).
    pub(crate) fn read(
        &self,
        op: &mut Overlapped,
        buf: &mut [u8],
        stop: &Event,
    ) -> io::Result<usize> {
        let len = clamp_len(buf.len());
        let overlapped = op.prepare();
        // SAFETY: `buf` is valid for `len` writable bytes and `overlapped`
        // points into `op`; both stay borrowed until `finish` has waited for
        // the operation to complete, so neither moves or is freed while the
        // kernel may write to it.
        let started = unsafe {
            ReadFile(
                self.raw(),
                buf.as_mut_ptr(),
                len,
                ptr::null_mut(),
                overlapped,
            )
        };
        self.finish(op, started, stop)
    }

    /// Writes from `buf`, waiting until the pipe has taken the bytes (as many
    /// as fit in its buffer and what the peer reads), or `stop` is set.
    pub(crate) fn write(&self, op: &mut Overlapped, buf: &[u8], stop: &Event) -> io::Result<usize> {
        let len = clamp_len(buf.len());
        let overlapped = op.prepare();
        // SAFETY: as in `read`; `buf` is valid for `len` readable bytes.
        let started =
            unsafe { WriteFile(self.raw(), buf.as_ptr(), len, ptr::null_mut(), overlapped) };
        self.finish(op, started, stop)
    }

    /// Server side: waits for a client to connect to this instance, or for
    /// `stop`. A client that connected before the call (`ERROR_PIPE_CONNECTED`),
    /// or that connected and already left (`ERROR_NO_DATA`: its reads will
    /// see the end at once), counts as connected.
    pub(crate) fn connect(&self, op: &mut Overlapped, stop: &Event) -> io::Result<()> {
        let overlapped = op.prepare();
        // SAFETY: `overlapped` points into `op`, which stays borrowed until
        // `finish` has waited for the operation to complete.
        let started = unsafe { ConnectNamedPipe(self.raw(), overlapped) };
        match self.finish(op, started, stop) {
            Ok(_) => Ok(()),
            Err(e)
                if e.raw_os_error() == Some(ERROR_PIPE_CONNECTED as i32)
                    || e.raw_os_error() == Some(ERROR_NO_DATA as i32) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Waits for the operation just started on `op` (`started` is what the
    /// starting call returned) to complete, cancelling it if `stop` is set
    /// first, and returns its result. Returns only once the kernel is done
    /// with `op` and the buffer.
    fn finish(&self, op: &mut Overlapped, started: i32, stop: &Event) -> io::Result<usize> {
        if started == 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(ERROR_IO_PENDING as i32) {
                // The operation never started: nothing is in flight.
                return Err(e);
            }
        }
        let events = [op.done.raw(), stop.raw()];
        // SAFETY: both handles are valid events owned by `op` and `stop`,
        // which outlive the call.
        let woke = unsafe { WaitForMultipleObjects(2, events.as_ptr(), 0, INFINITE) };
        if woke != WAIT_OBJECT_0 {
            // Asked to stop (or the wait failed): cancel, then still wait
            // below for the operation to finish, cancelled or not.
            // SAFETY: the handle is ours and `op.raw` is the OVERLAPPED of
            // the operation to cancel; a completed one is simply not found.
            unsafe {
                CancelIoEx(self.raw(), &op.raw);
            }
        }
        let mut transferred = 0u32;
        // SAFETY: `op.raw` is the OVERLAPPED of the operation started on this
        // handle; with bWait = TRUE the call returns only once it completed.
        let ok = unsafe { GetOverlappedResult(self.raw(), &op.raw, &mut transferred, 1) };
        if ok == 0 {
            let e = io::Error::last_os_error();
            // Only in message read mode: the part of the message that fit
            // was read, the rest comes with the next read.
            if e.raw_os_error() != Some(ERROR_MORE_DATA as i32) {
                return Err(e);
            }
        }
        Ok(transferred as usize)
    }

    fn raw(&self) -> HANDLE {
        self.0.as_raw_handle()
    }
}

/// Waits until an instance of the pipe `name` (NUL-terminated UTF-16) is
/// free, for at most `timeout`. Fails with `ERROR_SEM_TIMEOUT` when the time
/// runs out, or at once with `ERROR_FILE_NOT_FOUND` if the pipe is gone.
pub(crate) fn wait_named_pipe(name: &[u16], timeout: Duration) -> io::Result<()> {
    assert_eq!(name.last(), Some(&0), "the name must be NUL-terminated");
    // At least 1 ms: 0 would mean "the server's default time-out".
    let millis = timeout.as_millis().clamp(1, u128::from(INFINITE - 1)) as u32;
    // SAFETY: `name` is a NUL-terminated UTF-16 string that outlives the call.
    let ok = unsafe { WaitNamedPipeW(name.as_ptr(), millis) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Win32 transfer lengths are `u32`; a longer buffer is used in part.
fn clamp_len(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A security descriptor in memory from `LocalAlloc`, freed on drop.
#[derive(Debug)]
pub(crate) struct SecurityDescriptor(PSECURITY_DESCRIPTOR);

// SAFETY: the descriptor is a self-contained block of memory that we own
// alone and never change after creating it; Win32 only reads it. Reading
// it from several threads at once, or freeing it from another thread, is
// sound.
unsafe impl Send for SecurityDescriptor {}
// SAFETY: as above: shared access only ever reads.
unsafe impl Sync for SecurityDescriptor {}

impl SecurityDescriptor {
    /// A descriptor whose DACL has one entry: full access for the user
    /// this process runs as (the process token's user SID). Protected, so
    /// no inheritable entry can be added to it, and granting nothing to
    /// anyone else, LocalSystem and administrators included.
    pub(crate) fn owner_only() -> io::Result<SecurityDescriptor> {
        SecurityDescriptor::from_sddl(&format!("D:P(A;;GA;;;{})", current_user_sid()?))
    }

    fn from_sddl(sddl: &str) -> io::Result<SecurityDescriptor> {
        let sddl = wide(OsStr::new(sddl))?;
        let mut descriptor: PSECURITY_DESCRIPTOR = ptr::null_mut();
        // SAFETY: `sddl` is a NUL-terminated UTF-16 string that outlives the
        // call; `descriptor` is a valid place for the result, which on
        // success is a LocalAlloc'd block that we own and free on drop.
        let ok = unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                sddl.as_ptr(),
                SDDL_REVISION_1,
                &mut descriptor,
                ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SecurityDescriptor(descriptor))
    }
}

impl Drop for SecurityDescriptor {
    fn drop(&mut self) {
        // SAFETY: the pointer came from LocalAlloc (through the conversion
        // above) and is freed only here, once.
        unsafe {
            LocalFree(self.0);
        }
    }
}

/// The SID of the user this process runs as, in string form
/// (`S-1-5-21-...`), from the process token.
pub(crate) fn current_user_sid() -> io::Result<String> {
    let mut raw: HANDLE = ptr::null_mut();
    // SAFETY: GetCurrentProcess returns a pseudo-handle that needs no
    // closing; `raw` is a valid place for the token handle.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut raw) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success `raw` is a token handle that we own; OwnedHandle
    // closes it.
    let token = unsafe { OwnedHandle::from_raw_handle(raw) };
    let mut needed = 0u32;
    // SAFETY: asking for the size only: a NULL buffer of length 0, and
    // `needed` is a valid place for the answer.
    unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            ptr::null_mut(),
            0,
            &mut needed,
        );
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(ERROR_INSUFFICIENT_BUFFER as i32) {
        return Err(e);
    }
    // u64s, so the TOKEN_USER at its start (which holds a pointer) is
    // suitably aligned.
    let mut buffer = vec![0u64; (needed as usize + 7) / 8];
    // SAFETY: `buffer` is valid for `needed` writable bytes (rounded up) and
    // aligned for TOKEN_USER; `needed` is a valid place for the length.
    let ok = unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            buffer.as_mut_ptr().cast(),
            needed,
            &mut needed,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: GetTokenInformation filled the buffer with a TOKEN_USER
    // (whose SID pointer points further into `buffer`, still alive).
    let sid = unsafe { (*buffer.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    let mut text: *mut u16 = ptr::null_mut();
    // SAFETY: `sid` is a valid SID inside `buffer`; `text` is a valid place
    // for the result, a LocalAlloc'd NUL-terminated string we free below.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `text` is the NUL-terminated string just returned, freed once.
    Ok(unsafe { take_local_wide_string(text) })
}

/// Copies the NUL-terminated UTF-16 string at `text` into a `String`
/// (replacing invalid UTF-16) and frees it with `LocalFree`.
///
/// # Safety
///
/// `text` must be a NUL-terminated UTF-16 string allocated with
/// `LocalAlloc`, not used again afterwards.
unsafe fn take_local_wide_string(text: *mut u16) -> String {
    // Sound by the contract above: every u16 up to the NUL is readable, and
    // the block is ours to free.
    let mut len = 0;
    while *text.add(len) != 0 {
        len += 1;
    }
    let string = String::from_utf16_lossy(std::slice::from_raw_parts(text, len));
    LocalFree(text.cast());
    string
}

/// The DACL of the kernel object behind `handle` (opened with READ_CONTROL),
/// in SDDL, such as `D:P(A;;FA;;;S-1-5-21-...)`. For tests that check what
/// a pipe was really created with.
#[cfg(test)]
pub(crate) fn dacl_sddl(handle: std::os::windows::io::BorrowedHandle<'_>) -> io::Result<String> {
    use windows_sys::Win32::Security::Authorization::{
        ConvertSecurityDescriptorToStringSecurityDescriptorW, GetSecurityInfo, SE_KERNEL_OBJECT,
    };
    use windows_sys::Win32::Security::DACL_SECURITY_INFORMATION;

    let mut descriptor: PSECURITY_DESCRIPTOR = ptr::null_mut();
    // SAFETY: `handle` is a valid handle for the duration of the call; the
    // NULL out-pointers ask for nothing, and `descriptor` receives a
    // LocalAlloc'd descriptor that `owned` frees.
    let status = unsafe {
        GetSecurityInfo(
            handle.as_raw_handle(),
            SE_KERNEL_OBJECT,
            DACL_SECURITY_INFORMATION,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut descriptor,
        )
    };
    if status != 0 {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    let owned = SecurityDescriptor(descriptor);
    let mut text: *mut u16 = ptr::null_mut();
    // SAFETY: `owned.0` is a valid descriptor; `text` receives a LocalAlloc'd
    // NUL-terminated string, freed below; the length is not asked for.
    let ok = unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            owned.0,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &mut text,
            ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `text` is the NUL-terminated string just returned, freed once.
    Ok(unsafe { take_local_wide_string(text) })
}

/// Has `handler` called (on a thread the system creates) for each console
/// control event: Ctrl+C, Ctrl+Break, the console closing, logoff,
/// shutdown. It returns nonzero (TRUE) if it handled the event; otherwise
/// the next handler runs, in the end the default one, which exits the
/// process.
pub(crate) fn add_console_ctrl_handler(handler: extern "system" fn(u32) -> i32) -> io::Result<()> {
    // SAFETY: `handler` is a function with the signature Windows expects
    // (`BOOL WINAPI HandlerRoutine(DWORD)`), and a function lives as long
    // as the process, so it may be called at any later time. A safe `fn`
    // pointer coerces to the `unsafe fn` pointer type the binding takes.
    let ok = unsafe { SetConsoleCtrlHandler(Some(handler), 1) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
