//! The client's requests the app instance has not answered yet: what the
//! bridge answers with an error, or sends again, when the app goes away
//! before answering.
//!
//! Looked up once per reply on the relay's path, so a hash map (a linear
//! scan made 2,000 replies take 3 s); bounded, so a client that never gets
//! answers (or cancels everything) cannot grow it for the connection's
//! life: beyond [`PENDING_LIMIT`] ids or [`PENDING_BYTES`] bytes the oldest
//! is forgotten (it then gets no error of the bridge's at a restart; a
//! client has long given up on a request that old), and from then on a
//! reply the bridge cannot place is passed on rather than dropped.
//!
//! Requests with an id longer than [`ID_CAP`](crate::envelope::ID_CAP)
//! cannot be told apart: they are counted, a reply with such an id counts
//! one down, and each still owed gets an error with `"id":null` (JSON-RPC
//! 2.0's id for one that could not be determined).
//!
//! [`Batches`] does the same for batch arrays: a batch is answered by the
//! app with one array, so it is in flight until an array answering any of
//! its requests comes back, and owed one array of errors otherwise.
//!
//! The ids are hashed with FNV-1a ([`IdHasher`]), not std's SipHash with
//! random keys: SipHash's keys defend a map against keys chosen to collide,
//! but every id here comes from the client, the one party the bridge
//! serves, which could only slow its own session down; std's hasher and
//! its key setup cost the bridge-only build 2.5 KB.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::id::key;
use super::{Method, Recorded};

/// FNV-1a, 64 bits: a hash of a few lines with no key, good enough for ids
/// (see the [module docs](self) for why no keyed hash is needed).
pub(in crate::bridge) struct IdHasher(u64);

impl Default for IdHasher {
    fn default() -> Self {
        IdHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by ids ([`key`]s, so that ids equal as JSON values meet).
pub(in crate::bridge) type IdMap<V> = HashMap<Vec<u8>, V, BuildHasherDefault<IdHasher>>;

/// A set of ids, as [`key`]s.
#[allow(dead_code)]
pub(in crate::bridge) type IdSet = HashSet<Vec<u8>, BuildHasherDefault<IdHasher>>;

/// Most ids remembered.
pub(in crate::bridge) const PENDING_LIMIT: usize = 65_536;

/// Most bytes of ids (and of the requests kept to be sent again)
/// remembered (ids can be long, see [`ID_CAP`](crate::envelope::ID_CAP)).
pub(in crate::bridge) const PENDING_BYTES: usize = 16 * 1024 * 1024;

/// One request in flight.
#[derive(Debug)]
pub(in crate::bridge) struct Sent {
    seq: u64,
    /// Its id as the client wrote it (the bridge answers under it).
    raw: Vec<u8>,
    /// What it asks.
    pub(in crate::bridge) method: Method,
    /// Its line, when it may be sent again to the next instance (a request
    /// that only reads, see [`Method::repeatable`]).
    pub(in crate::bridge) text: Option<Recorded>,
}

impl Sent {
    /// What it keeps: its key `id`, its raw id and its line.
    fn bytes(&self, id: &[u8]) -> usize {
        id.len() + self.raw.len() + self.text.as_ref().map_or(0, |t| t.line.len())
    }
}

/// Requests in flight by id (compared as JSON values), oldest first.
#[derive(Debug, Default)]
pub(in crate::bridge) struct Pending {
    /// Id -> the request.
    ids: IdMap<Sent>,
    /// Ids in the order they were sent, with their sequence number; entries
    /// of ids answered since are stale and skipped (and compacted away).
    order: VecDeque<(u64, Vec<u8>)>,
    next: u64,
    bytes: usize,
    /// Requests in flight whose id was too long to keep.
    long_ids: usize,
    /// Some were forgotten to stay within the bounds.
    pub(in crate::bridge) forgot: bool,
}

impl Pending {
    /// A request with an id too long to keep was sent, or (`false`) a reply
    /// with such an id came back.
    pub(in crate::bridge) fn long_id(&mut self, sent: bool) {
        if sent {
            self.long_ids = (self.long_ids + 1).min(PENDING_LIMIT);
        } else {
            self.long_ids = self.long_ids.saturating_sub(1);
        }
    }

    /// Remembers a request sent to the app.
    pub(in crate::bridge) fn insert(&mut self, id: &[u8], method: Method, text: Option<Recorded>) {
        let seq = self.next;
        self.next += 1;
        let sent = Sent {
            seq,
            raw: id.to_vec(),
            method,
            text,
        };
        let id = key(id);
        self.bytes += sent.bytes(&id);
        if let Some(old) = self.ids.insert(id.clone(), sent) {
            // A client reusing an id in flight: one answer is owed.
            self.bytes -= old.bytes(&id);
        }
        self.order.push_back((seq, id));
        while self.ids.len() > PENDING_LIMIT || self.bytes > PENDING_BYTES {
            self.forget_oldest();
        }
        if self.order.len() > 2 * self.ids.len() + 64 {
            let ids = &self.ids;
            self.order
                .retain(|(seq, id)| ids.get(id).map_or(false, |s| s.seq == *seq));
        }
    }

    /// The app answered `id` (or the client cancelled it): forgets it.
    pub(in crate::bridge) fn remove(&mut self, id: &[u8]) -> Option<Sent> {
        let id = key(id);
        let sent = self.ids.remove(&id)?;
        self.bytes -= sent.bytes(&id);
        Some(sent)
    }

    /// Whether `id` is in flight.
    pub(in crate::bridge) fn contains(&self, id: &[u8]) -> bool {
        self.ids.contains_key(&key(id))
    }

    /// What the request `id` in flight asks.
    pub(in crate::bridge) fn method_of(&self, id: &[u8]) -> Option<Method> {
        self.ids.get(&key(id)).map(|sent| sent.method)
    }

    #[cfg(test)]
    pub(in crate::bridge) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every request still in flight, oldest first (then one with the id
    /// `null` and no line per long id), leaving none.
    pub(in crate::bridge) fn drain(&mut self) -> Vec<(Vec<u8>, Sent)> {
        let mut ids = std::mem::take(&mut self.ids);
        self.bytes = 0;
        self.forgot = false;
        let mut out: Vec<(Vec<u8>, Sent)> = Vec::with_capacity(ids.len());
        for (seq, id) in std::mem::take(&mut self.order) {
            if ids.get(&id).map_or(false, |s| s.seq == seq) {
                let mut sent = ids.remove(&id).expect("just seen");
                out.push((std::mem::take(&mut sent.raw), sent));
            }
        }
        for _ in 0..std::mem::take(&mut self.long_ids) {
            let sent = Sent {
                seq: 0,
                raw: Vec::new(),
                method: Method::Other,
                text: None,
            };
            out.push((b"null".to_vec(), sent));
        }
        out
    }

    fn forget_oldest(&mut self) {
        while let Some((seq, id)) = self.order.pop_front() {
            if self.ids.get(&id).map_or(false, |s| s.seq == seq) {
                let sent = self.ids.remove(&id).expect("just seen");
                self.bytes -= sent.bytes(&id);
                self.forgot = true;
                return;
            }
        }
    }
}

/// Most batches in flight remembered; beyond it (or [`PENDING_BYTES`] of
/// their ids) the oldest is forgotten, as in [`Pending`].
const BATCHES_LIMIT: usize = 1024;

/// The client's batches relayed to the app and not answered yet: the raw
/// ids of the requests in each (as [`BatchIds`](crate::envelope::BatchIds) gives them), oldest
/// first. A request of a batch the client cancels is still answered with
/// the others (the client ignores answers to what it cancelled).
#[derive(Debug, Default)]
pub(in crate::bridge) struct Batches {
    sent: Vec<Vec<u8>>,
    bytes: usize,
}

impl Batches {
    /// A batch with the requests `ids` went to the app.
    pub(in crate::bridge) fn sent(&mut self, ids: Vec<u8>) {
        if ids.is_empty() {
            return;
        }
        self.bytes += ids.len();
        self.sent.push(ids);
        while self.sent.len() > BATCHES_LIMIT || self.bytes > PENDING_BYTES {
            self.forget(0);
        }
    }

    /// An array line came from the app, with the responses `ids` (as
    /// [`BatchIds`](crate::envelope::BatchIds) gives them): the batch it
    /// answers (the one with the id of its first response) is answered.
    pub(in crate::bridge) fn answered(&mut self, ids: &[u8]) {
        if let Some(first) = ids.split(|&b| b == b'\n').nth(1) {
            let first = key(first);
            let at = self
                .sent
                .iter()
                .position(|sent| sent.split(|&b| b == b'\n').any(|id| key(id) == first));
            if let Some(at) = at {
                self.forget(at);
            }
        }
    }

    /// Whether a request `id` is in a batch in flight.
    pub(in crate::bridge) fn contains(&self, id: &[u8]) -> bool {
        !self.sent.is_empty() && self.position(id).is_some()
    }

    /// One request of a batch was answered on a line of its own: it is
    /// owed nothing more (whether it was in a batch).
    pub(in crate::bridge) fn answered_one(&mut self, id: &[u8]) -> bool {
        if self.sent.is_empty() {
            return false;
        }
        let at = match self.position(id) {
            Some(at) => at,
            None => return false,
        };
        let wanted = key(id);
        let rest: Vec<u8> = self.sent[at]
            .split(|&b| b == b'\n')
            .filter(|i| !i.is_empty() && key(i) != wanted)
            .flat_map(|i| std::iter::once(b'\n').chain(i.iter().copied()))
            .collect();
        self.bytes -= self.sent[at].len() - rest.len();
        if rest.is_empty() {
            self.forget(at);
        } else {
            self.sent[at] = rest;
        }
        true
    }

    /// The batch `ids` went to an instance that never read it: it is not
    /// in flight (the newest such batch).
    pub(in crate::bridge) fn unsent(&mut self, ids: &[u8]) {
        if let Some(at) = self.sent.iter().rposition(|sent| sent == ids) {
            self.forget(at);
        }
    }

    fn position(&self, id: &[u8]) -> Option<usize> {
        let wanted = key(id);
        self.sent.iter().position(|sent| {
            sent.split(|&b| b == b'\n')
                .any(|i| !i.is_empty() && key(i) == wanted)
        })
    }

    /// Every batch still in flight, leaving none.
    pub(in crate::bridge) fn drain(&mut self) -> Vec<Vec<u8>> {
        self.bytes = 0;
        std::mem::take(&mut self.sent)
    }

    fn forget(&mut self, at: usize) {
        if at < self.sent.len() {
            self.bytes -= self.sent.remove(at).len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::batch_ids;

    fn ids(pending: &mut Pending) -> Vec<Vec<u8>> {
        pending.drain().into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn a_batch_is_answered_by_the_array_with_its_first_response_id() {
        let mut batches = Batches::default();
        let mut sent = |line: &[u8]| batches.sent(batch_ids(line, false));
        sent(br#"[{"id":1,"method":"a"},{"id":2,"method":"a"}]"#);
        sent(br#"[{"method":"n"}]"#);
        sent(br#"[{"id":3,"method":"a"}]"#);
        sent(br#"[{"id":4,"method":"a"}]"#);
        batches.answered(&batch_ids(br#"[{"id":3,"result":{}}]"#, true));
        batches.answered(&batch_ids(br#"[{"id":9,"result":{}}]"#, true));
        batches.answered(&batch_ids(
            br#"[{"id":2,"result":{}},{"id":1,"result":{}}]"#,
            true,
        ));
        assert_eq!(batches.drain(), vec![b"\n4".to_vec()]);
        for n in 0..(BATCHES_LIMIT + 5) {
            batches.sent(batch_ids(
                format!(r#"[{{"id":{},"method":"a"}}]"#, n).as_bytes(),
                false,
            ));
        }
        let kept = batches.drain();
        assert_eq!(kept.len(), BATCHES_LIMIT);
        assert_eq!(kept[0], b"\n5".to_vec());
    }

    #[test]
    fn answered_ids_are_forgotten_and_the_rest_drained_in_order() {
        let mut pending = Pending::default();
        for id in [&b"1"[..], b"\"a\"", b"3", b"4"] {
            pending.insert(id, Method::Other, None);
        }
        assert!(pending.remove(b"\"a\"").is_some());
        assert!(pending.remove(b"99").is_none());
        assert_eq!(pending.len(), 3);
        assert_eq!(
            ids(&mut pending),
            vec![b"1".to_vec(), b"3".to_vec(), b"4".to_vec()]
        );
        assert_eq!(pending.len(), 0);
        assert!(pending.drain().is_empty());
    }

    #[test]
    fn a_reused_id_is_owed_one_answer() {
        let mut pending = Pending::default();
        pending.insert(b"1", Method::Other, None);
        pending.insert(b"2", Method::Other, None);
        pending.insert(b"1", Method::Other, None);
        assert_eq!(ids(&mut pending), vec![b"2".to_vec(), b"1".to_vec()]);
    }

    #[test]
    fn memory_stays_bounded_by_count_whatever_the_client_leaves_unanswered() {
        let mut pending = Pending::default();
        for n in 0..(PENDING_LIMIT + 10) {
            pending.insert(n.to_string().as_bytes(), Method::Other, None);
        }
        assert_eq!(pending.len(), PENDING_LIMIT);
        assert!(pending.forgot);
        assert!(pending.order.len() <= 2 * PENDING_LIMIT + 64);
        // The oldest went first.
        assert_eq!(ids(&mut pending)[0], b"10".to_vec());
        // Answered ids leave no trace behind in the order queue.
        for n in 0..(4 * PENDING_LIMIT) {
            let id = n.to_string();
            pending.insert(id.as_bytes(), Method::Other, None);
            pending.remove(id.as_bytes());
        }
        assert_eq!(pending.len(), 0);
        assert!(pending.order.len() <= 65);
    }

    #[test]
    fn memory_stays_bounded_by_bytes() {
        let mut pending = Pending::default();
        let long = vec![b'7'; 1024 * 1024];
        for n in 0..20u8 {
            let mut id = long.clone();
            id[0] = b'1' + n % 9;
            id[1] = b'0' + n / 9;
            pending.insert(&id, Method::Other, Some(Recorded::plain(vec![b'x'; 1000])));
        }
        assert!(pending.bytes <= PENDING_BYTES);
        assert_eq!(pending.len(), PENDING_BYTES / (long.len() + 1000));
    }
}
