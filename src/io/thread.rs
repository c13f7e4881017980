//! Stdio that cannot be polled (a terminal, a regular file, `/dev/null`),
//! driven by one plain thread of its own.
//!
//! This used to be `blocking::Unblock`, which runs the file's reads and
//! writes on `blocking`'s thread pool through an in-memory pipe. The bridge
//! needs one thread per stream at most, never a pool, and the pool with its
//! pipe and task machinery was 12 KB of the bridge-only binary. What is kept
//! is what the relay relies on: the thread starts on the first read or write
//! (an unused stdin is never read), reading runs at most one buffer ahead
//! of the reader (bounded memory), a write completes once its bytes are
//! queued (at most one buffer), `flush` waits until the file has them, and
//! errors come back on the next call. A thread blocked reading a terminal
//! cannot be woken; it is left behind when the stream is dropped, as the
//! pool's thread was, and ends with the process.

use std::fmt;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_lite::io::{AsyncRead, AsyncWrite};

/// A blocking file read or written on a thread of its own.
pub(crate) struct Threaded<T> {
    capacity: usize,
    state: State<T>,
}

enum State<T> {
    /// Not used yet: no thread.
    Idle(Option<T>),
    Reading(Arc<Shared<ReadQueue>>),
    Writing(Arc<Shared<WriteQueue>>),
}

// The file is never pinned: only the thread touches it, by value.
impl<T> Unpin for Threaded<T> {}

impl<T> fmt::Debug for Threaded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle(_) => "idle",
            State::Reading(_) => "reading",
            State::Writing(_) => "writing",
        };
        f.debug_struct("Threaded").field("state", &state).finish()
    }
}

/// What the thread and the async side share: a queue under a lock, a
/// condition variable the thread waits on, and the waker of the task
/// waiting on the thread.
struct Shared<Q> {
    queue: Mutex<(Q, Option<Waker>)>,
    thread_wakes: Condvar,
}

impl<Q> Shared<Q> {
    fn new(queue: Q) -> Arc<Self> {
        Arc::new(Shared {
            queue: Mutex::new((queue, None)),
            thread_wakes: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, (Q, Option<Waker>)> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Wakes the waiting task, if any, once the lock is released.
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

#[derive(Default)]
struct ReadQueue {
    /// Bytes read and not taken yet, from `start`.
    bytes: Vec<u8>,
    start: usize,
    /// The read that ended the thread: end of file (`Ok`) or its error.
    end: Option<io::Result<()>>,
    /// The async side is gone: the thread stops after its current read.
    dropped: bool,
}

#[derive(Default)]
struct WriteQueue {
    /// Bytes written by the async side, not yet taken by the thread.
    bytes: Vec<u8>,
    /// The thread is writing bytes it took (so the file lacks them).
    writing: bool,
    /// The first write error, reported on the next call.
    error: Option<io::Error>,
    /// No more bytes will come: the thread ends once the queue is written.
    closed: bool,
}

impl<T> Threaded<T> {
    /// A stream over `file` whose reads run at most `capacity` bytes ahead,
    /// and whose writes queue at most `capacity` bytes.
    pub(crate) fn with_capacity(capacity: usize, file: T) -> Threaded<T> {
        Threaded {
            capacity: capacity.max(1),
            state: State::Idle(Some(file)),
        }
    }
}

impl<T: Read + Send + 'static> Threaded<T> {
    fn reader(&mut self) -> io::Result<&Arc<Shared<ReadQueue>>> {
        if let State::Idle(file) = &mut self.state {
            let file = file.take().ok_or_else(gone)?;
            let shared = Shared::new(ReadQueue::default());
            let thread = shared.clone();
            let capacity = self.capacity;
            std::thread::Builder::new()
                .name("mcp-bridge-stdio".into())
                .stack_size(super::SMALL_STACK)
                .spawn(move || read_forever(&thread, file, capacity))?;
            self.state = State::Reading(shared);
        }
        match &self.state {
            State::Reading(shared) => Ok(shared),
            _ => Err(io::Error::new(
                io::ErrorKind::Other,
                "stdio stream written before read",
            )),
        }
    }
}

impl<T: Write + Send + 'static> Threaded<T> {
    fn writer(&mut self) -> io::Result<&Arc<Shared<WriteQueue>>> {
        if let State::Idle(file) = &mut self.state {
            let file = file.take().ok_or_else(gone)?;
            let shared = Shared::new(WriteQueue::default());
            let thread = shared.clone();
            std::thread::Builder::new()
                .name("mcp-bridge-stdio".into())
                .stack_size(super::SMALL_STACK)
                .spawn(move || write_forever(&thread, file))?;
            self.state = State::Writing(shared);
        }
        match &self.state {
            State::Writing(shared) => Ok(shared),
            _ => Err(io::Error::new(
                io::ErrorKind::Other,
                "stdio stream read before written",
            )),
        }
    }
}

/// The stream was closed, or its thread could not start (which left no
/// file to start another with).
fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::Other,
        "the stdio stream is closed (or its thread could not start)",
    )
}

fn read_forever<T: Read>(shared: &Shared<ReadQueue>, mut file: T, capacity: usize) {
    let mut buffer = vec![0; capacity];
    loop {
        let result = loop {
            match file.read(&mut buffer) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        let mut guard = shared.lock();
        let (queue, waker) = &mut *guard;
        match result {
            Ok(0) => queue.end = Some(Ok(())),
            Ok(n) => {
                queue.bytes.clear();
                queue
                    .bytes
                    .extend_from_slice(buffer.get(..n).unwrap_or_default());
                queue.start = 0;
            }
            Err(e) => queue.end = Some(Err(e)),
        }
        let (waker, ended) = (waker.take(), queue.end.is_some());
        drop(guard);
        wake(waker);
        if ended {
            return;
        }
        // Read ahead only once what was read is taken.
        let mut guard = shared.lock();
        while !(guard.0.dropped || guard.0.start == guard.0.bytes.len()) {
            guard = shared
                .thread_wakes
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if guard.0.dropped {
            return;
        }
    }
}

fn write_forever<T: Write>(shared: &Shared<WriteQueue>, mut file: T) {
    let mut taken = Vec::new();
    loop {
        let mut guard = shared.lock();
        guard.0.writing = false;
        while guard.0.bytes.is_empty() && !guard.0.closed {
            // A flush waiting for the write just done.
            if let Some(waker) = guard.1.take() {
                drop(guard);
                waker.wake();
                guard = shared.lock();
                continue;
            }
            guard = shared
                .thread_wakes
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if guard.0.bytes.is_empty() {
            // Closed, and everything written.
            let waker = guard.1.take();
            drop(guard);
            return wake(waker);
        }
        std::mem::swap(&mut taken, &mut guard.0.bytes);
        guard.0.writing = true;
        // A write waiting for room.
        let waker = guard.1.take();
        drop(guard);
        wake(waker);
        let result = file.write_all(&taken).and_then(|()| file.flush());
        taken.clear();
        if let Err(e) = result {
            let mut guard = shared.lock();
            guard.0.error = Some(e);
            guard.0.writing = false;
            guard.0.closed = true;
            let waker = guard.1.take();
            drop(guard);
            return wake(waker);
        }
    }
}

impl<T> Drop for Threaded<T> {
    fn drop(&mut self) {
        match &self.state {
            State::Idle(_) => {}
            State::Reading(shared) => {
                shared.lock().0.dropped = true;
                shared.thread_wakes.notify_one();
            }
            State::Writing(shared) => {
                // What is queued is still written, as the pool's thread did.
                shared.lock().0.closed = true;
                shared.thread_wakes.notify_one();
            }
        }
    }
}

impl<T: Read + Send + 'static> AsyncRead for Threaded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let shared = self.get_mut().reader()?;
        let mut guard = shared.lock();
        let (queue, waker) = &mut *guard;
        let available = queue.bytes.get(queue.start..).unwrap_or_default();
        if !available.is_empty() {
            let n = available.len().min(buf.len());
            // (`zip`, not slices: no panic sites for lengths known equal.)
            for (to, from) in buf.iter_mut().zip(available) {
                *to = *from;
            }
            queue.start += n;
            let taken = queue.start == queue.bytes.len();
            drop(guard);
            if taken {
                shared.thread_wakes.notify_one();
            }
            return Poll::Ready(Ok(n));
        }
        match &mut queue.end {
            Some(Ok(())) => Poll::Ready(Ok(0)),
            Some(Err(e)) => {
                let e = io::Error::new(e.kind(), e.to_string());
                Poll::Ready(Err(e))
            }
            None => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<T: Write + Send + 'static> AsyncWrite for Threaded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let capacity = self.capacity;
        let shared = self.get_mut().writer()?;
        let mut guard = shared.lock();
        let (queue, waker) = &mut *guard;
        if let Some(e) = queue.error.take() {
            return Poll::Ready(Err(e));
        }
        if queue.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let room = capacity.saturating_sub(queue.bytes.len());
        if room == 0 {
            *waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(buf.len());
        queue.bytes.extend_from_slice(&buf[..n]);
        drop(guard);
        shared.thread_wakes.notify_one();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let State::Idle(_) = this.state {
            return Poll::Ready(Ok(()));
        }
        let shared = this.writer()?;
        let mut guard = shared.lock();
        let (queue, waker) = &mut *guard;
        if let Some(e) = queue.error.take() {
            return Poll::Ready(Err(e));
        }
        if queue.bytes.is_empty() && !queue.writing {
            return Poll::Ready(Ok(()));
        }
        *waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        futures_lite::ready!(self.as_mut().poll_flush(cx))?;
        let this = self.get_mut();
        match std::mem::replace(&mut this.state, State::Idle(None)) {
            State::Writing(shared) => {
                shared.lock().0.closed = true;
                shared.thread_wakes.notify_one();
            }
            other => this.state = other,
        }
        Poll::Ready(Ok(()))
    }
}
