//! The queue of messages the child sends on its own initiative: bounded by the memory
//! its messages hold, and never blocking the task that routes responses.
//!
//! Three policies were possible for a child that writes faster than its messages are
//! received: wait (stop reading its stdout until there is room), drop messages, or end
//! the connection. Waiting would stall the very responses a caller may be awaiting
//! while it does not receive (the usual order: `request("initialize")` first,
//! `incoming()` after), a deadlock in all but name; dropping would lose approvals the
//! child then waits for in vain. So the queue is weighed, and a child that fills it
//! ends the connection with [`AppServerError::IncomingFull`], which names the limit.

use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use smol::channel::{self, Receiver, RecvError, Sender, TryRecvError};

use super::{AppServerError, Incoming};

/// The default limit on the memory held by messages waiting in the incoming queue, and
/// on the decoded form of any one message: 128 MiB.
///
/// It is measured before decoding, as an upper bound of what the decoded
/// `serde_json::Value` will hold (within about 2x of it), so it is a limit on memory,
/// not on JSON text: a 60 MB diff inside one string fits, a 60 MB array of small
/// numbers (about 1 GB decoded) does not. 128 MiB is twice the default line limit,
/// so any string-heavy line that limit accepts can be decoded, and a queue of more
/// than a hundred thousand small notifications can wait for a caller that is busy
/// awaiting a response.
pub const MAX_INCOMING_MEMORY: usize = 128 * 1024 * 1024;

/// What a queued message costs beyond its decoded parameters and method name: the
/// message itself, and its slot in the channel.
const QUEUED_MESSAGE: usize = 2 * size_of::<Incoming>();

/// The receiving end of the incoming queue: notifications and requests from the child,
/// in the order it sent them. Made by [`AppServerClient::incoming`].
///
/// Every clone receives from the same queue, so each message goes to exactly one
/// receiver. The queue closes once the child's stdout has ended (or the connection
/// ended for another reason) and every message in it was received.
///
/// [`AppServerClient::incoming`]: super::AppServerClient::incoming
#[derive(Clone, Debug)]
pub struct Inbox {
    receiver: Receiver<(Incoming, usize)>,
    used: Arc<Memory>,
}

impl Inbox {
    /// The next message, waiting for one if the queue is empty.
    ///
    /// # Errors
    ///
    /// Once the queue is empty and closed.
    pub async fn recv(&self) -> Result<Incoming, RecvError> {
        let (message, weight) = self.receiver.recv().await?;
        self.used.release(weight);
        Ok(message)
    }

    /// The next message if one is waiting.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] if none is, [`TryRecvError::Closed`] once the queue is
    /// empty and closed.
    pub fn try_recv(&self) -> Result<Incoming, TryRecvError> {
        let (message, weight) = self.receiver.try_recv()?;
        self.used.release(weight);
        Ok(message)
    }

    /// How many messages are waiting.
    pub fn len(&self) -> usize {
        self.receiver.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }

    /// The memory the waiting messages hold, as estimated against the limit.
    pub fn memory(&self) -> usize {
        self.used.0.load(Ordering::Relaxed)
    }
}

/// The reader's end of the queue.
#[derive(Debug)]
pub(crate) struct InboxSender {
    sender: Sender<(Incoming, usize)>,
    used: Arc<Memory>,
    limit: usize,
}

/// A new queue holding at most `limit` bytes of messages.
pub(crate) fn inbox(limit: usize) -> (InboxSender, Inbox) {
    let (sender, receiver) = channel::unbounded();
    let used = Arc::new(Memory(AtomicUsize::new(0)));
    let inbox = Inbox {
        receiver,
        used: used.clone(),
    };
    (
        InboxSender {
            sender,
            used,
            limit,
        },
        inbox,
    )
}

impl InboxSender {
    /// The limit in bytes, which also bounds any one decoded message.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Queues `message`, whose parameters decode to `params_size` bytes, without ever
    /// waiting.
    ///
    /// # Errors
    ///
    /// [`AppServerError::IncomingFull`] if it does not fit, which ends the connection.
    pub(crate) fn push(&self, message: Incoming, params_size: usize) -> Result<(), AppServerError> {
        let weight = QUEUED_MESSAGE
            .saturating_add(message.method().len())
            .saturating_add(params_size);
        // Only this sender adds, so the sum cannot grow between the check and the add;
        // receivers only take away.
        if self.used.0.load(Ordering::Relaxed).saturating_add(weight) > self.limit {
            return Err(AppServerError::IncomingFull { limit: self.limit });
        }
        self.used.0.fetch_add(weight, Ordering::Relaxed);
        // Fails only when every receiver is gone, and the message with them.
        if self.sender.try_send((message, weight)).is_err() {
            self.used.release(weight);
        }
        Ok(())
    }
}

/// The estimated bytes held by queued messages.
#[derive(Debug)]
struct Memory(AtomicUsize);

impl Memory {
    fn release(&self, weight: usize) {
        self.0.fetch_sub(weight, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn note(method: &str) -> Incoming {
        Incoming::Notification {
            method: method.to_string(),
            params: Value::Null,
        }
    }

    #[test]
    fn a_full_queue_refuses_until_a_message_is_received() {
        let (sender, inbox) = inbox(3 * QUEUED_MESSAGE + 3);
        for method in ["a", "b", "c"] {
            sender.push(note(method), 0).unwrap();
        }
        assert_eq!(inbox.memory(), 3 * QUEUED_MESSAGE + 3);
        let refused = sender.push(note("d"), 0).unwrap_err();
        assert_eq!(
            refused.to_string(),
            AppServerError::IncomingFull {
                limit: 3 * QUEUED_MESSAGE + 3
            }
            .to_string()
        );

        assert_eq!(inbox.try_recv().unwrap(), note("a"));
        sender.push(note("d"), 0).unwrap();
        let order: Vec<String> = (0..3)
            .map(|_| inbox.try_recv().unwrap().method().to_string())
            .collect();
        assert_eq!(order, ["b", "c", "d"]);
        assert_eq!(inbox.memory(), 0);
        assert!(inbox.is_empty());
    }

    #[test]
    fn parameters_count_against_the_limit() {
        let (sender, inbox) = inbox(QUEUED_MESSAGE + 1000);
        assert!(sender.push(note("a"), 2000).is_err());
        sender.push(note("a"), 999).unwrap();
        assert_eq!(inbox.len(), 1);
    }
}
