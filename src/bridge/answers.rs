//! The seam between the session's decisions and the app's last answers.
//!
//! The ledger decides each client line without I/O, but one of its
//! decisions needs a fact that lives on disk: whether the app's last
//! answer to this very request is kept (the [answers cache](super::cache)),
//! so that a client that comes before the app can be answered in its name.
//! That is the one synchronous question the decisions may ask, and they ask
//! it through [`Answers`]: the disk cache in the binary, a map in tests
//! (the way rustls is handed its time provider).
//!
//! What the app answers is never written from inside a decision: the
//! ledger queues a [`Learnt`] and the I/O side hands it to
//! [`Answers::learn`] before the reply it came with is written to the
//! client (a client may kill the bridge the moment it has a reply: the
//! answer is kept by then), and calls [`Answers::settle`] once the reply is
//! written, for what can wait (the directory's `fsync` and bound).

use crate::endpoint::ServerUser;

/// The app's last answers, as the session sees them.
pub(super) trait Answers {
    /// The result to answer `request` (a client's whole line) with while the
    /// app is away, if the app gave one that this bridge may repeat.
    fn answer(&mut self, request: &[u8]) -> Option<Vec<u8>>;
    /// What the app answered: keep it (or forget the older answer it
    /// replaces), so that a bridge started the next moment finds it.
    /// Called by the I/O side before the reply is written.
    fn learn(&mut self, learnt: Learnt);
    /// Finish keeping what was learnt last (what can wait), called by the
    /// I/O side once the reply is written.
    fn settle(&mut self) {}
    /// The instance the bridge is connected to is served by `server`, who
    /// passed the trust check: what is learnt from now on is its.
    fn served_by(&mut self, server: ServerUser);
}

/// What the app answered a request whose answer is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Learnt {
    /// The client's request line, as it was sent.
    pub(super) request: Vec<u8>,
    /// The result; `None` for an error or a result too long to keep, which
    /// takes the older answer out.
    pub(super) result: Option<Vec<u8>>,
}

/// No answers kept: the ledger's default (its own tests, and a ledger
/// built before the session hands it the cache).
#[derive(Debug, Default)]
pub(super) struct NoAnswers;

impl Answers for NoAnswers {
    fn answer(&mut self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn learn(&mut self, _: Learnt) {}
    fn served_by(&mut self, _: ServerUser) {}
}

impl Default for Box<dyn Answers> {
    fn default() -> Self {
        Box::new(NoAnswers)
    }
}

impl std::fmt::Debug for dyn Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Answers")
    }
}
