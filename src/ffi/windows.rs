//! Win32 calls that std does not wrap: named pipes opened for overlapped
//! I/O, the overlapped reads, writes and connects on them, and the events
//! that signal their completion or ask for their cancellation; the
//! owner-only security descriptor pipes are created with, and the owner SID
//! read back from a pipe; and the console control handler that turns Ctrl+C
//! into a stop request.
//!
//! # Overlapped I/O
//!
//! The one invariant that makes overlapped I/O sound is that the `OVERLAPPED`
//! structure and the data buffer outlive the operation, which the kernel may
//! still be carrying out after `ReadFile` returns. The `ReadFile`
//! documentation: "neither the offset nor any other part of the structure
//! should be modified, freed, or reused by the application until the event
//! is signaled (that is, the read completes)", and of the buffer: "This
//! buffer must remain valid for the duration of the read operation. The
//! caller must not use this buffer until the read operation is completed."
//! Every operation here is therefore *finished* before the function that
//! started it returns: it waits for completion (or cancels and then waits),
//! while holding the buffer borrowed. Callers get plain blocking calls with
//! a way to abort them from another thread ([`Event::set`] on the `stop`
//! event), and never see a pending operation.
//!
//! The kernel writes the `OVERLAPPED`'s status fields while the operation is
//! in flight, behind Rust's back. So no Rust reference may cover the
//! structure during that time: a `&mut` to it (or to a struct holding it by
//! value) asserts that nothing else writes it, which the kernel does.
//! [`Overlapped`] therefore keeps the structure in its own heap allocation
//! and holds only a raw pointer to it; every access, ours and the kernel's,
//! goes through that one pointer, and `&mut Overlapped` covers the pointer,
//! never the structure.

use std::ffi::OsStr;
use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::{
    AsHandle, AsRawHandle, BorrowedHandle, FromRawHandle, HandleOrInvalid, HandleOrNull,
    OwnedHandle,
};
use std::path::Path;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use windows_sys::Wdk::Storage::FileSystem::{
    FilePipeLocalInformation, NtQueryInformationFile, FILE_PIPE_CLOSING_STATE,
    FILE_PIPE_CONNECTED_STATE, FILE_PIPE_LOCAL_INFORMATION,
};
use windows_sys::Win32::Foundation::{
    LocalFree, RtlNtStatusToDosError, ERROR_INSUFFICIENT_BUFFER, ERROR_IO_PENDING, ERROR_MORE_DATA,
    ERROR_NO_DATA, ERROR_PIPE_CONNECTED, FILETIME, HANDLE, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW,
    ConvertStringSidToSidW, GetSecurityInfo, SDDL_REVISION_1, SE_KERNEL_OBJECT, SE_OBJECT_TYPE,
};
use windows_sys::Win32::Security::{
    GetSidSubAuthority, GetSidSubAuthorityCount, GetTokenInformation, TokenIntegrityLevel,
    TokenUser, OWNER_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, PSID, SECURITY_ATTRIBUTES,
    TOKEN_INFORMATION_CLASS, TOKEN_MANDATORY_LABEL, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, GetFileType, ReadFile, WriteFile, FILE_APPEND_DATA, FILE_ATTRIBUTE_NORMAL,
    FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED, FILE_READ_ATTRIBUTES, FILE_SHARE_DELETE,
    FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_TYPE_PIPE, OPEN_ALWAYS, PIPE_ACCESS_DUPLEX,
    READ_CONTROL, SECURITY_IDENTIFICATION, SECURITY_SQOS_PRESENT, SYNCHRONIZE,
};
use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Process32FirstW, Process32NextW, Thread32First, Thread32Next,
    PROCESSENTRY32W, TH32CS_SNAPPROCESS, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Pipes::{
    ConnectNamedPipe, CreateNamedPipeW, GetNamedPipeClientProcessId, GetNamedPipeServerProcessId,
    PeekNamedPipe, WaitNamedPipeW, PIPE_READMODE_BYTE, PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE,
    PIPE_UNLIMITED_INSTANCES, PIPE_WAIT,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, GetCurrentProcess, GetProcessTimes, OpenProcess, OpenProcessToken, OpenThread,
    ResetEvent, ResumeThread, SetEvent, WaitForMultipleObjects, WaitForSingleObject, INFINITE,
    PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE, THREAD_SUSPEND_RESUME,
};
use windows_sys::Win32::System::IO::{
    CancelIoEx, GetOverlappedResult, IO_STATUS_BLOCK, OVERLAPPED,
};

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

/// Whether `e` carries the Win32 error `code` (an `ERROR_*` constant).
pub(crate) fn has_code(e: &io::Error, code: u32) -> bool {
    e.raw_os_error() == Some(code as i32)
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

/// Sets its event when dropped: how the owner of a blocking operation (a
/// pipe half, an accept) that goes away tells the pool thread carrying the
/// operation out to abandon it.
#[derive(Debug)]
pub(crate) struct SetOnDrop(pub(crate) Arc<Event>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// The `OVERLAPPED` structure and completion event of one operation at a
/// time. Each direction of a pipe has its own, so a read and a write can be
/// in flight together.
///
/// The structure lives in a heap allocation of its own that no Rust
/// reference ever covers (see the module docs): `raw` comes from
/// `Box::into_raw` and goes back to a `Box` only in `drop`, and every access
/// in between is through `raw` itself.
pub(crate) struct Overlapped {
    raw: *mut OVERLAPPED,
    done: Event,
}

// SAFETY: `raw` points to an allocation owned by this value alone (nothing
// else holds the pointer), like a `Box`. The kernel writes to it only while
// an operation started through `&mut self` is in flight, and every such
// operation completes before that borrow ends (see the module docs), so
// moving it to another thread between operations is sound.
unsafe impl Send for Overlapped {}

impl Overlapped {
    pub(crate) fn new() -> io::Result<Overlapped> {
        Ok(Overlapped {
            raw: Box::into_raw(Box::default()),
            done: Event::new()?,
        })
    }

    /// A zeroed `OVERLAPPED` pointing at our event, ready for a new operation
    /// (Win32 requires unused fields to be zero before each use), and the one
    /// pointer through which the operation is started, cancelled and
    /// finished.
    fn prepare(&mut self) -> *mut OVERLAPPED {
        self.done.reset();
        // SAFETY: `raw` is valid and aligned (from `Box::into_raw`), and no
        // operation is in flight on it: each one finishes before the
        // `&mut self` that started it is released.
        unsafe {
            self.raw.write(OVERLAPPED {
                hEvent: self.done.raw(),
                ..OVERLAPPED::default()
            });
        }
        self.raw
    }
}

impl Drop for Overlapped {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `Box::into_raw` in `new` and is freed only
        // here, once; no operation is in flight (see `prepare`).
        drop(unsafe { Box::from_raw(self.raw) });
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
        let byte_mode = PIPE_TYPE_BYTE | PIPE_READMODE_BYTE;
        Pipe::create_as(name, first, buffer_size, security, byte_mode)
    }

    /// [`create`](Pipe::create), for a message-type pipe such as .NET and
    /// WCF servers create: the kind of server whose zero-byte writes a
    /// reader must tell from the end of the stream.
    #[cfg(test)]
    pub(crate) fn create_message_type(
        name: &[u16],
        security: &SecurityDescriptor,
    ) -> io::Result<Pipe> {
        use windows_sys::Win32::System::Pipes::{PIPE_READMODE_MESSAGE, PIPE_TYPE_MESSAGE};
        let message_mode = PIPE_TYPE_MESSAGE | PIPE_READMODE_MESSAGE;
        Pipe::create_as(name, true, 4096, security, message_mode)
    }

    fn create_as(
        name: &[u16],
        first: bool,
        buffer_size: u32,
        security: &SecurityDescriptor,
        type_and_read_mode: u32,
    ) -> io::Result<Pipe> {
        assert_eq!(name.last(), Some(&0), "the name must be NUL-terminated");
        let mut open_mode = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED;
        if first {
            open_mode |= FILE_FLAG_FIRST_PIPE_INSTANCE;
        }
        let pipe_mode = type_and_read_mode | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS;
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

    /// Reads into `buf`, waiting until the read completes: with some bytes,
    /// with none (the other end wrote zero bytes: see `endpoint::windows`
    /// for why that is not the end of the stream), with an error when the
    /// pipe ends (such as `ERROR_BROKEN_PIPE`), or because `stop` was set
    /// (the read is cancelled: `ERROR_OPERATION_ABORTED`, unless it completed
    /// first).
    pub(crate) fn read(
        &self,
        op: &mut Overlapped,
        buf: &mut [u8],
        stop: &Event,
    ) -> io::Result<usize> {
        let len = clamp_len(buf.len());
        let data = buf.as_mut_ptr();
        let overlapped = op.prepare();
        let mut ignored = 0u32;
        // SAFETY: `data` is valid for `len` writable bytes, and `buf` (which
        // it was derived from) stays borrowed and untouched until `finish`
        // has waited for the operation to complete, so the buffer neither
        // moves nor is freed nor is used while the kernel may write to it.
        // `overlapped` is `op`'s one pointer to its OVERLAPPED (see
        // `Overlapped`). `ignored` outlives the call: see `ignored_count`.
        let started = unsafe {
            ReadFile(
                self.raw(),
                data,
                len,
                ignored_count(&mut ignored),
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
        let mut ignored = 0u32;
        // SAFETY: as in `read`; `buf` is valid for `len` readable bytes, and
        // the kernel only reads it.
        let started = unsafe {
            WriteFile(
                self.raw(),
                buf.as_ptr(),
                len,
                ignored_count(&mut ignored),
                overlapped,
            )
        };
        self.finish(op, started, stop)
    }

    /// Server side: waits for a client to connect to this instance, or for
    /// `stop`. A client that connected before the call (`ERROR_PIPE_CONNECTED`),
    /// or that connected and already left (`ERROR_NO_DATA`: its reads will
    /// see the end at once), counts as connected. A wait that `stop`
    /// cancelled fails with `ERROR_OPERATION_ABORTED` and leaves the instance
    /// as it was, listening, for the next call.
    pub(crate) fn connect(&self, op: &mut Overlapped, stop: &Event) -> io::Result<()> {
        let overlapped = op.prepare();
        // SAFETY: `overlapped` is `op`'s one pointer to its OVERLAPPED, which
        // stays allocated until `finish` has waited for the operation to
        // complete.
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
    ///
    /// `op` is borrowed `&mut` here while the kernel may still write its
    /// OVERLAPPED: sound, because that borrow covers only `op.raw`, the
    /// pointer, and the structure is reached through it alone.
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
                CancelIoEx(self.raw(), op.raw);
            }
        }
        let mut transferred = 0u32;
        // SAFETY: `op.raw` is the OVERLAPPED of the operation started on this
        // handle; with bWait = TRUE the call returns only once it completed.
        let ok = unsafe { GetOverlappedResult(self.raw(), op.raw, &mut transferred, 1) };
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

    /// The owner SID of the pipe in string form (`S-1-5-21-...`), or `None`
    /// if its security descriptor names no owner. Works on either end: a
    /// client's handle reads the descriptor its server created the pipe with.
    ///
    /// Needs `READ_CONTROL` on the handle, which the `GENERIC_READ` that both
    /// ends are opened with includes. GetSecurityInfo: "To read the owner,
    /// group, or DACL from the object's security descriptor, the calling
    /// process must have been granted READ_CONTROL access when the handle was
    /// opened."
    pub(crate) fn owner_sid(&self) -> io::Result<Option<String>> {
        owner_sid_of(self.handle(), SE_KERNEL_OBJECT)
    }

    /// The id of the process that created this pipe instance: the server
    /// we are connected to, not whoever created the name first.
    /// GetNamedPipeServerProcessId: "Retrieves the server process
    /// identifier for the specified named pipe."
    pub(crate) fn server_process_id(&self) -> io::Result<u32> {
        let mut pid = 0u32;
        // SAFETY: the handle is valid for the call; `pid` is a valid place
        // for the answer.
        if unsafe { GetNamedPipeServerProcessId(self.raw(), &mut pid) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(pid)
    }

    /// The id of the process at the client end of this server instance, as
    /// the system recorded it when the client opened the pipe.
    /// GetNamedPipeClientProcessId: "Retrieves the client process
    /// identifier for the specified named pipe."
    pub(crate) fn client_process_id(&self) -> io::Result<u32> {
        let mut pid = 0u32;
        // SAFETY: the handle is valid for the call; `pid` is a valid place
        // for the answer.
        if unsafe { GetNamedPipeClientProcessId(self.raw(), &mut pid) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(pid)
    }

    /// The handle, for the questions any pipe handle can be asked.
    pub(crate) fn handle(&self) -> BorrowedHandle<'_> {
        self.0.as_handle()
    }

    fn raw(&self) -> HANDLE {
        self.0.as_raw_handle()
    }
}

/// The owner SID, in string form, of the object `handle` (a kernel object
/// or a file, as `kind` says), or `None` if its security descriptor names
/// none. The handle needs `READ_CONTROL`.
pub(crate) fn owner_sid_of(
    handle: BorrowedHandle<'_>,
    kind: SE_OBJECT_TYPE,
) -> io::Result<Option<String>> {
    let mut owner: PSID = ptr::null_mut();
    let mut descriptor: PSECURITY_DESCRIPTOR = ptr::null_mut();
    // SAFETY: the handle is valid for the duration of the call; `owner`
    // and `descriptor` are valid places for the results. On success
    // `descriptor` is a LocalAlloc'd block that `owned` frees, and
    // `owner`, if not NULL, points into it.
    let status = unsafe {
        GetSecurityInfo(
            handle.as_raw_handle(),
            kind,
            OWNER_SECURITY_INFORMATION,
            &mut owner,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut descriptor,
        )
    };
    if status != 0 {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    let owned = LocalBlock(descriptor);
    if owner.is_null() {
        return Ok(None);
    }
    // SAFETY: `owner` is a valid SID inside `owned`, which is alive.
    let sid = unsafe { sid_string(owner) };
    drop(owned);
    sid.map(Some)
}

/// Opens the file `path` for appending, creating it with `security` if it
/// does not exist (`OPEN_ALWAYS`; an existing file keeps its own
/// descriptor). Shared for reading, writing and deletion, as std shares,
/// so another process may rotate it away. The handle can also read the
/// file's owner (`READ_CONTROL`) and attributes.
pub(crate) fn open_append_creating(
    path: &Path,
    security: &SecurityDescriptor,
) -> io::Result<std::fs::File> {
    let name = wide(path.as_os_str())?;
    let attributes = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: security.0,
        bInheritHandle: 0,
    };
    // SAFETY: `name` is a NUL-terminated UTF-16 string and `attributes`
    // points at a valid descriptor owned by `security`; both outlive the
    // call, which only reads them. The returned handle, unless
    // INVALID_HANDLE_VALUE, is ours to own and close.
    let handle = unsafe {
        HandleOrInvalid::from_raw_handle(CreateFileW(
            name.as_ptr(),
            FILE_APPEND_DATA | FILE_READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            &attributes,
            OPEN_ALWAYS,
            FILE_ATTRIBUTE_NORMAL,
            ptr::null_mut(),
        ))
    };
    OwnedHandle::try_from(handle)
        .map(std::fs::File::from)
        .map_err(|_| io::Error::last_os_error())
}

/// Whether `handle` is a pipe (anonymous or named), rather than a console,
/// a file or a character device.
pub(crate) fn is_pipe(handle: BorrowedHandle<'_>) -> bool {
    // SAFETY: the handle is valid for the call (borrowed).
    unsafe { GetFileType(handle.as_raw_handle()) == FILE_TYPE_PIPE }
}

/// Asks the read end `handle` of a pipe how many bytes wait in it, without
/// reading them. Fails with `ERROR_BROKEN_PIPE` once every writer has gone
/// and nothing is left to read. PeekNamedPipe: "The handle must have
/// GENERIC_READ access to the pipe", and it works on anonymous pipes too
/// ("hNamedPipe: A handle to the pipe. This parameter can be a handle to a
/// named pipe instance, as returned by the CreateNamedPipe or CreateFile
/// function, or it can be a handle to the read end of an anonymous pipe").
pub(crate) fn bytes_waiting(handle: BorrowedHandle<'_>) -> io::Result<u32> {
    let mut available = 0u32;
    // SAFETY: the handle is valid for the call (borrowed); a NULL buffer of
    // size 0 reads nothing; `available` is a valid place for the count and
    // the other counts are not asked for.
    let ok = unsafe {
        PeekNamedPipe(
            handle.as_raw_handle(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            &mut available,
            ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(available)
}

/// Whether the other end of the pipe `handle` (either end of a named or an
/// anonymous pipe) has closed: its state is `FILE_PIPE_CLOSING_STATE`
/// ("The pipe has been closed by the other end", `FILE_PIPE_LOCAL_INFORMATION`
/// in ntifs.h), even while bytes it wrote are still waiting to be read.
/// `Ok(None)` when the system does not say. Needs
/// `FILE_READ_ATTRIBUTES` access ("FilePipeLocalInformation ... The
/// FileHandle must have FILE_READ_ATTRIBUTES access", NtQueryInformationFile
/// in the docs of `ZwQueryInformationFile`), which both ends of an anonymous
/// pipe and both ends of our named pipes have.
pub(crate) fn other_end_closed(handle: BorrowedHandle<'_>) -> io::Result<Option<bool>> {
    let mut status = IO_STATUS_BLOCK::default();
    let mut info = FILE_PIPE_LOCAL_INFORMATION::default();
    // SAFETY: the handle is valid for the call (borrowed); `status` and
    // `info` are valid places of the sizes given for the answer. The call
    // is synchronous: nothing is written after it returns.
    let ntstatus = unsafe {
        NtQueryInformationFile(
            handle.as_raw_handle(),
            &mut status,
            (&mut info as *mut FILE_PIPE_LOCAL_INFORMATION).cast(),
            std::mem::size_of::<FILE_PIPE_LOCAL_INFORMATION>() as u32,
            FilePipeLocalInformation,
        )
    };
    if ntstatus < 0 {
        // SAFETY: plain conversion of a status code.
        let code = unsafe { RtlNtStatusToDosError(ntstatus) };
        return Err(io::Error::from_raw_os_error(code as i32));
    }
    Ok(match info.NamedPipeState {
        FILE_PIPE_CLOSING_STATE => Some(true),
        FILE_PIPE_CONNECTED_STATE => Some(false),
        _ => None,
    })
}

/// Where ReadFile and WriteFile may store a byte count that nobody reads:
/// on an overlapped handle the count comes from GetOverlappedResult. It
/// cannot be NULL, though the documentation recommends NULL here. ReadFile's
/// documentation (WriteFile's says the same): "Use NULL for this parameter
/// if this is an asynchronous operation to avoid potentially erroneous
/// results. This parameter can be NULL only when the lpOverlapped parameter
/// is not NULL. Windows 7: This parameter can not be NULL." Rust 1.63's
/// Windows target still supports Windows 7, so a NULL would be a fault
/// there; a count we ignore has no erroneous result to fear. The caller
/// keeps `ignored` alive until the operation has finished, in case the
/// system writes it late.
fn ignored_count(ignored: &mut u32) -> *mut u32 {
    ignored
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
    ///
    /// It names that same user as the owner (`O:`), which is what a bridge
    /// checks before it trusts the pipe. Left out, the owner would be the
    /// token's *default* owner, which for an elevated process is the
    /// Administrators group, not the user ("The owner of a new object is the
    /// default owner security identifier (SID) from the primary or
    /// impersonation token of the creating process", Microsoft's "Owner of a
    /// New Object"); and Wine records no owner at all unless one is given.
    /// Naming our own user SID is always allowed: it is the token's user.
    pub(crate) fn owner_only() -> io::Result<SecurityDescriptor> {
        let user = current_user_sid()?;
        SecurityDescriptor::from_sddl(&format!("O:{}D:P(A;;GA;;;{})", user, user))
    }

    /// A descriptor from SDDL text, for tests that need a pipe created some
    /// other way than [`owner_only`](SecurityDescriptor::owner_only).
    #[cfg(test)]
    pub(crate) fn for_test(sddl: &str) -> io::Result<SecurityDescriptor> {
        SecurityDescriptor::from_sddl(sddl)
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

/// A block of memory that a Win32 call allocated with `LocalAlloc` for us
/// (a SID, a security descriptor), freed on drop.
struct LocalBlock(*mut std::ffi::c_void);

impl Drop for LocalBlock {
    fn drop(&mut self) {
        // SAFETY: the pointer came from LocalAlloc (through the call that
        // filled it in) and is freed only here, once. LocalFree(NULL) does
        // nothing.
        unsafe {
            LocalFree(self.0);
        }
    }
}

/// The SID of the user this process runs as, in string form
/// (`S-1-5-21-...`), from the process token.
pub(crate) fn current_user_sid() -> io::Result<String> {
    // SAFETY: GetCurrentProcess returns a pseudo-handle that needs no
    // closing and is valid for the whole life of the process.
    let token = open_token(unsafe { GetCurrentProcess() })?;
    token_user(&token)
}

/// Who a process runs as, from its token: the user SID (`S-1-5-21-...`)
/// and the integrity level (the RID of its mandatory label: 0x1000 low,
/// 0x2000 medium, 0x3000 high, 0x4000 system).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenFacts {
    pub(crate) user: String,
    pub(crate) integrity: u32,
}

/// This process's own [`TokenFacts`].
pub(crate) fn own_token_facts() -> io::Result<TokenFacts> {
    // SAFETY: as in `current_user_sid`.
    token_facts(unsafe { GetCurrentProcess() })
}

fn token_facts(process: HANDLE) -> io::Result<TokenFacts> {
    let token = open_token(process)?;
    Ok(TokenFacts {
        user: token_user(&token)?,
        integrity: token_integrity(&token)?,
    })
}

/// The token of `process` (a handle with at least
/// PROCESS_QUERY_LIMITED_INFORMATION access), opened for querying.
fn open_token(process: HANDLE) -> io::Result<OwnedHandle> {
    let mut raw: HANDLE = ptr::null_mut();
    // SAFETY: `process` is a valid process handle for the duration of the
    // call (the caller's); `raw` is a valid place for the token handle.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &mut raw) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success `raw` is a token handle that we own; OwnedHandle
    // closes it.
    Ok(unsafe { OwnedHandle::from_raw_handle(raw) })
}

/// One `GetTokenInformation` class of `token`, in a buffer of u64s so
/// that the structure at its start (which holds pointers) is aligned.
fn token_information(token: &OwnedHandle, class: TOKEN_INFORMATION_CLASS) -> io::Result<Vec<u64>> {
    let mut needed = 0u32;
    // SAFETY: asking for the size only: a NULL buffer of length 0, and
    // `needed` is a valid place for the answer.
    unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            class,
            ptr::null_mut(),
            0,
            &mut needed,
        );
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(ERROR_INSUFFICIENT_BUFFER as i32) {
        return Err(e);
    }
    let mut buffer = vec![0u64; (needed as usize + 7) / 8];
    // SAFETY: `buffer` is valid for `needed` writable bytes (rounded up) and
    // aligned for any token information structure; `needed` is a valid
    // place for the length.
    let ok = unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            class,
            buffer.as_mut_ptr().cast(),
            needed,
            &mut needed,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(buffer)
}

fn token_user(token: &OwnedHandle) -> io::Result<String> {
    let buffer = token_information(token, TokenUser)?;
    // SAFETY: GetTokenInformation filled the buffer with a TOKEN_USER
    // (whose SID pointer points further into `buffer`, still alive).
    let sid = unsafe { (*buffer.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    // SAFETY: `sid` is a valid SID inside `buffer`, which is alive.
    unsafe { sid_string(sid) }
}

/// The RID of the token's mandatory label: its last subauthority
/// (`S-1-16-8192` is medium, 0x2000).
fn token_integrity(token: &OwnedHandle) -> io::Result<u32> {
    let buffer = token_information(token, TokenIntegrityLevel)?;
    // SAFETY: GetTokenInformation filled the buffer with a
    // TOKEN_MANDATORY_LABEL, whose SID points further into `buffer`.
    let sid = unsafe { (*buffer.as_ptr().cast::<TOKEN_MANDATORY_LABEL>()).Label.Sid };
    // SAFETY: `sid` is a valid SID inside `buffer`, which is alive; the
    // subauthority count is read before indexing, so the index is in range.
    let rid = unsafe {
        let count = *GetSidSubAuthorityCount(sid);
        if count == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the token's integrity label has no level",
            ));
        }
        *GetSidSubAuthority(sid, u32::from(count) - 1)
    };
    Ok(rid)
}

/// A handle to another process, opened with the least access that tells
/// who runs it and when it exits.
#[derive(Debug)]
pub(crate) struct Process(OwnedHandle);

impl Process {
    /// Opens the process `pid` with PROCESS_QUERY_LIMITED_INFORMATION (enough
    /// for OpenProcessToken: "The handle must have
    /// PROCESS_QUERY_LIMITED_INFORMATION access") and SYNCHRONIZE (to wait
    /// for its exit).
    pub(crate) fn open(pid: u32) -> io::Result<Process> {
        // SAFETY: plain call; the returned handle, if not NULL, is ours to
        // own and close.
        let handle = unsafe {
            HandleOrNull::from_raw_handle(OpenProcess(
                PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_SYNCHRONIZE,
                0,
                pid,
            ))
        };
        OwnedHandle::try_from(handle)
            .map(Process)
            .map_err(|_| io::Error::last_os_error())
    }

    /// Who runs it: its token's user and integrity level.
    pub(crate) fn token_facts(&self) -> io::Result<TokenFacts> {
        token_facts(self.0.as_raw_handle())
    }

    /// Whether it has not exited yet.
    pub(crate) fn is_running(&self) -> io::Result<bool> {
        // SAFETY: the handle is valid and has SYNCHRONIZE access.
        match unsafe { WaitForSingleObject(self.0.as_raw_handle(), 0) } {
            WAIT_TIMEOUT => Ok(true),
            WAIT_OBJECT_0 => Ok(false),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Waits until it exits, or until `stop` is set; returns whether it
    /// exited.
    pub(crate) fn wait_exit(&self, stop: &Event) -> io::Result<bool> {
        let handles = [self.0.as_raw_handle(), stop.raw()];
        // SAFETY: both handles are valid and waitable, and outlive the call.
        match unsafe { WaitForMultipleObjects(2, handles.as_ptr(), 0, INFINITE) } {
            WAIT_OBJECT_0 => Ok(true),
            w if w == WAIT_OBJECT_0 + 1 => Ok(false),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// When it was created, in 100 ns units since 1601.
    pub(crate) fn created(&self) -> io::Result<u64> {
        process_created(self.0.as_raw_handle())
    }
}

/// This process's creation time, as [`Process::created`] gives it.
pub(crate) fn own_creation_time() -> io::Result<u64> {
    // SAFETY: as in `current_user_sid`.
    process_created(unsafe { GetCurrentProcess() })
}

fn process_created(process: HANDLE) -> io::Result<u64> {
    let mut times = [FILETIME::default(); 4];
    let [created, exited, kernel, user] = &mut times;
    // SAFETY: `process` is valid (the caller's) with at least
    // PROCESS_QUERY_LIMITED_INFORMATION; the four out-pointers are valid.
    if unsafe { GetProcessTimes(process, created, exited, kernel, user) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(times[0].dwHighDateTime) << 32 | u64::from(times[0].dwLowDateTime))
}

/// The process id of our parent: the process that created us, as the
/// system's process snapshot records it (Windows keeps no link to a
/// parent, only its id at our creation), or `None` if we are not in the
/// snapshot.
pub(crate) fn parent_process_id() -> io::Result<Option<u32>> {
    let me = std::process::id();
    let mut parent = None;
    for_each_snapshot_entry(TH32CS_SNAPPROCESS, |snapshot| {
        let mut entry = PROCESSENTRY32W {
            dwSize: std::mem::size_of::<PROCESSENTRY32W>() as u32,
            ..PROCESSENTRY32W::default()
        };
        // SAFETY: `snapshot` is a valid process snapshot and `entry` a
        // PROCESSENTRY32W with dwSize set, as Process32FirstW requires.
        let mut more = unsafe { Process32FirstW(snapshot, &mut entry) } != 0;
        while more {
            if entry.th32ProcessID == me {
                parent = Some(entry.th32ParentProcessID);
                break;
            }
            // SAFETY: as above.
            more = unsafe { Process32NextW(snapshot, &mut entry) } != 0;
        }
    })?;
    Ok(parent)
}

/// Resumes every thread of the process `pid` (created suspended: its one
/// thread). std does not hand out the thread handle CreateProcessW
/// returned, so the threads are found in a snapshot.
pub(crate) fn resume_threads(pid: u32) -> io::Result<()> {
    let mut result = Ok(());
    let mut resumed = 0;
    for_each_snapshot_entry(TH32CS_SNAPTHREAD, |snapshot| {
        let mut entry = THREADENTRY32 {
            dwSize: std::mem::size_of::<THREADENTRY32>() as u32,
            ..THREADENTRY32::default()
        };
        // SAFETY: `snapshot` is a valid thread snapshot and `entry` a
        // THREADENTRY32 with dwSize set, as Thread32First requires.
        let mut more = unsafe { Thread32First(snapshot, &mut entry) } != 0;
        while more {
            if entry.th32OwnerProcessID == pid {
                if let Err(e) = resume_thread(entry.th32ThreadID) {
                    result = Err(e);
                }
                resumed += 1;
            }
            // SAFETY: as above.
            more = unsafe { Thread32Next(snapshot, &mut entry) } != 0;
        }
    })?;
    if resumed == 0 && result.is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the new process has no thread to resume",
        ));
    }
    result
}

fn resume_thread(tid: u32) -> io::Result<()> {
    // SAFETY: plain call; the returned handle, if not NULL, is ours to own
    // and close.
    let handle =
        unsafe { HandleOrNull::from_raw_handle(OpenThread(THREAD_SUSPEND_RESUME, 0, tid)) };
    let thread = OwnedHandle::try_from(handle).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the handle is valid with THREAD_SUSPEND_RESUME access.
    if unsafe { ResumeThread(thread.as_raw_handle()) } == u32::MAX {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes a Toolhelp snapshot of the kind `flags` and hands it to `walk`.
fn for_each_snapshot_entry(flags: u32, walk: impl FnOnce(HANDLE)) -> io::Result<()> {
    // SAFETY: plain call; the returned handle, unless INVALID_HANDLE_VALUE,
    // is ours to own and close.
    let handle = unsafe { HandleOrInvalid::from_raw_handle(CreateToolhelp32Snapshot(flags, 0)) };
    let snapshot = OwnedHandle::try_from(handle).map_err(|_| io::Error::last_os_error())?;
    walk(snapshot.as_raw_handle());
    Ok(())
}

/// A job object whose processes are all killed when its last handle
/// closes (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE): when we drop it, or when
/// this process ends, however it ends.
#[derive(Debug)]
pub(crate) struct Job(OwnedHandle);

impl Job {
    pub(crate) fn new() -> io::Result<Job> {
        // SAFETY: NULL attributes (default security, not inheritable) and no
        // name; the returned handle, if not NULL, is ours to own and close.
        let handle =
            unsafe { HandleOrNull::from_raw_handle(CreateJobObjectW(ptr::null(), ptr::null())) };
        let job = OwnedHandle::try_from(handle)
            .map(Job)
            .map_err(|_| io::Error::last_os_error())?;
        let mut limits = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: the job handle is valid; `limits` is the structure the
        // class names, of the size given, alive for the call.
        let ok = unsafe {
            SetInformationJobObject(
                job.0.as_raw_handle(),
                JobObjectExtendedLimitInformation,
                (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(job)
    }

    /// Puts the process `process` (a handle with PROCESS_SET_QUOTA and
    /// PROCESS_TERMINATE access, such as CreateProcess returns) in the job.
    pub(crate) fn assign(&self, process: &impl AsRawHandle) -> io::Result<()> {
        // SAFETY: both handles are valid for the call.
        if unsafe { AssignProcessToJobObject(self.0.as_raw_handle(), process.as_raw_handle()) } == 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many processes in the job are still running.
    pub(crate) fn active_processes(&self) -> io::Result<u32> {
        let mut info = JOBOBJECT_BASIC_ACCOUNTING_INFORMATION::default();
        // SAFETY: the job handle is valid; `info` is the structure the class
        // names, of the size given; the returned length is not asked for.
        let ok = unsafe {
            QueryInformationJobObject(
                self.0.as_raw_handle(),
                JobObjectBasicAccountingInformation,
                (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(info.ActiveProcesses)
    }

    /// Ends every process in the job with exit code 1.
    pub(crate) fn terminate(&self) -> io::Result<()> {
        // SAFETY: the job handle is valid and has JOB_OBJECT_TERMINATE (all
        // access, as created).
        if unsafe { TerminateJobObject(self.0.as_raw_handle(), 1) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// `text`, a SID in string form (`S-1-5-18`, `s-1-5-21-...`), checked by
/// the system and written back the way the system writes SIDs, so that two
/// spellings of one SID compare equal as strings.
pub(crate) fn canonical_sid(text: &str) -> io::Result<String> {
    let wide_text = wide(OsStr::new(text))?;
    let mut sid: PSID = ptr::null_mut();
    // SAFETY: `wide_text` is a NUL-terminated UTF-16 string that outlives the
    // call; `sid` is a valid place for the result, a LocalAlloc'd SID that
    // `owned` frees.
    if unsafe { ConvertStringSidToSidW(wide_text.as_ptr(), &mut sid) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let owned = LocalBlock(sid);
    // SAFETY: `owned.0` is the valid SID just converted, alive until the end.
    let canonical = unsafe { sid_string(owned.0) };
    drop(owned);
    canonical
}

/// The SID at `sid` in string form, `S-1-5-21-...`.
///
/// # Safety
///
/// `sid` must point to a valid SID for the duration of the call.
unsafe fn sid_string(sid: PSID) -> io::Result<String> {
    let mut text: *mut u16 = ptr::null_mut();
    // Sound by the contract above; `text` is a valid place for the result, a
    // LocalAlloc'd NUL-terminated string that is freed below.
    if ConvertSidToStringSidW(sid, &mut text) == 0 {
        return Err(io::Error::last_os_error());
    }
    // `text` is the NUL-terminated string just returned, freed once.
    Ok(take_local_wide_string(text))
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

impl Pipe {
    /// The pipe's DACL in SDDL, such as `D:P(A;;FA;;;S-1-5-21-...)`. For
    /// tests that check what a pipe was really created with.
    #[cfg(test)]
    pub(crate) fn dacl_sddl(&self) -> io::Result<String> {
        use windows_sys::Win32::Security::Authorization::ConvertSecurityDescriptorToStringSecurityDescriptorW;
        use windows_sys::Win32::Security::DACL_SECURITY_INFORMATION;

        let mut descriptor: PSECURITY_DESCRIPTOR = ptr::null_mut();
        // SAFETY: the handle is valid for the duration of the call; the
        // NULL out-pointers ask for nothing, and `descriptor` receives a
        // LocalAlloc'd descriptor that `owned` frees.
        let status = unsafe {
            GetSecurityInfo(
                self.raw(),
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
        let owned = LocalBlock(descriptor);
        let mut text: *mut u16 = ptr::null_mut();
        // SAFETY: `owned.0` is a valid descriptor; `text` receives a
        // LocalAlloc'd NUL-terminated string, freed below; the length is not
        // asked for.
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
        // SAFETY: `text` is the NUL-terminated string just returned, freed
        // once.
        Ok(unsafe { take_local_wide_string(text) })
    }
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
