//! A one-shot channel for the hang-up watcher: a thread sends one message
//! once, and tasks wait for it.
//!
//! It has the shape of `smol::channel`'s sender and receiver (the watcher
//! calls `try_send`, a waiter `recv().await`, and a sender dropped without
//! sending closes the channel), but none of a channel's queue: the bridge
//! only ever needs "has it happened yet", and async-channel with its
//! concurrent queue and listeners was 2 KB of the bridge-only binary, where
//! nothing else uses it.

// Windows watches nothing: its senders are dropped unsent.
#![cfg_attr(windows, allow(dead_code))]

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};

/// Where the channel is: waiting, sent, or closed without a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Sent,
    Closed,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<(State, Vec<Waker>)>,
}

impl Shared {
    /// Moves a waiting channel to `to` and wakes every waiter.
    fn settle(&self, to: State) {
        let wakers = {
            let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if guard.0 != State::Waiting {
                return;
            }
            guard.0 = to;
            std::mem::take(&mut guard.1)
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

/// The sending half: one message, once.
#[derive(Debug)]
pub(crate) struct Sender<T> {
    shared: Arc<Shared>,
    message: PhantomData<fn(T)>,
}

/// The receiving half; every waiter sees the one message.
#[derive(Debug)]
pub(crate) struct Receiver<T> {
    shared: Arc<Shared>,
    message: PhantomData<fn() -> T>,
}

/// A new one-shot channel.
pub(crate) fn bounded<T>(_capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new((State::Waiting, Vec::new())),
    });
    (
        Sender {
            shared: shared.clone(),
            message: PhantomData,
        },
        Receiver {
            shared,
            message: PhantomData,
        },
    )
}

impl<T> Sender<T> {
    /// Sends the message (the first one only: a channel of one).
    pub(crate) fn try_send(&self, _message: T) -> Result<(), T> {
        self.shared.settle(State::Sent);
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.settle(State::Closed);
    }
}

/// The sender was dropped without sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvError;

impl<T: Default> Receiver<T> {
    /// Waits for the message, or for the sender to go without one.
    pub(crate) async fn recv(&self) -> Result<T, RecvError> {
        futures_lite::future::poll_fn(|cx| {
            let mut guard = self
                .shared
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match guard.0 {
                State::Sent => Poll::Ready(Ok(T::default())),
                State::Closed => Poll::Ready(Err(RecvError)),
                State::Waiting => {
                    if !guard.1.iter().any(|w| w.will_wake(cx.waker())) {
                        guard.1.push(cx.waker().clone());
                    }
                    Poll::Pending
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future;

    #[test]
    fn every_waiter_sees_the_message() {
        let (sender, receiver) = bounded::<()>(1);
        let receiver = Arc::new(receiver);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let receiver = receiver.clone();
                std::thread::spawn(move || future::block_on(receiver.recv()))
            })
            .collect();
        let sending = std::thread::spawn(move || sender.try_send(()));
        assert_eq!(sending.join().unwrap(), Ok(()));
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap(), Ok(()));
        }
        assert_eq!(future::block_on(receiver.recv()), Ok(()));
    }

    #[test]
    fn a_sender_dropped_without_sending_closes_it() {
        let (sender, receiver) = bounded::<()>(1);
        assert!(future::block_on(future::poll_once(receiver.recv())).is_none());
        let dropping = std::thread::spawn(move || drop(sender));
        assert_eq!(future::block_on(receiver.recv()), Err(RecvError));
        dropping.join().unwrap();
    }

    #[test]
    fn a_message_sent_stays_sent_when_the_sender_goes() {
        let (sender, receiver) = bounded::<()>(1);
        sender.try_send(()).unwrap();
        drop(sender);
        assert_eq!(future::block_on(receiver.recv()), Ok(()));
    }
}
