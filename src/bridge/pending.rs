//! The ids of client requests the app has not answered yet: what the bridge
//! answers with an error when the app goes away before answering.
//!
//! Looked up once per reply on the relay's path, so a hash map (a linear
//! scan made 2,000 replies take 3 s); bounded, so a client that never gets
//! answers (or cancels everything) cannot grow it for the connection's
//! life: beyond [`PENDING_LIMIT`] ids or [`PENDING_BYTES`] bytes of ids the
//! oldest is forgotten (it then gets no error of the bridge's at a
//! restart; a client has long given up on a request that old).
//!
//! The ids are hashed with FNV-1a ([`IdHasher`]), not std's SipHash with
//! random keys: SipHash's keys defend a map against keys chosen to collide,
//! but every id here comes from the client, the one party the bridge
//! serves, which could only slow its own session down; std's hasher and
//! its key setup cost the bridge-only build 2.5 KB.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, 64 bits: a hash of a few lines with no key, good enough for ids
/// (see the [module docs](self) for why no keyed hash is needed).
pub(crate) struct IdHasher(u64);

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

/// A map keyed by raw ids.
pub(crate) type IdMap<V> = HashMap<Vec<u8>, V, BuildHasherDefault<IdHasher>>;

/// A set of raw ids.
pub(crate) type IdSet = HashSet<Vec<u8>, BuildHasherDefault<IdHasher>>;

/// Most ids remembered.
pub(crate) const PENDING_LIMIT: usize = 65_536;

/// Most bytes of ids remembered (ids can be long, see
/// [`ID_CAP`](crate::envelope::ID_CAP)).
pub(crate) const PENDING_BYTES: usize = 16 * 1024 * 1024;

/// Raw ids (as written) of requests in flight, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Id -> its sequence number, which tells a current entry of `order`
    /// from a stale one.
    ids: IdMap<u64>,
    /// Ids in the order they were sent, with their sequence number; entries
    /// of ids answered since are stale and skipped (and compacted away).
    order: VecDeque<(u64, Vec<u8>)>,
    next: u64,
    bytes: usize,
}

impl Pending {
    /// Remembers a request sent to the app.
    pub(crate) fn insert(&mut self, id: &[u8]) {
        let seq = self.next;
        self.next += 1;
        if let Some(old) = self.ids.insert(id.to_vec(), seq) {
            // A client reusing an id in flight: one answer is owed.
            let _ = old;
        } else {
            self.bytes += id.len();
        }
        self.order.push_back((seq, id.to_vec()));
        while self.ids.len() > PENDING_LIMIT || self.bytes > PENDING_BYTES {
            self.forget_oldest();
        }
        if self.order.len() > 2 * self.ids.len() + 64 {
            let ids = &self.ids;
            self.order.retain(|(seq, id)| ids.get(id) == Some(seq));
        }
    }

    /// The app answered `id` (or the client cancelled it): forget it.
    pub(crate) fn remove(&mut self, id: &[u8]) {
        if self.ids.remove(id).is_some() {
            self.bytes -= id.len();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every id still pending, oldest first, leaving the set empty.
    pub(crate) fn drain(&mut self) -> Vec<Vec<u8>> {
        let ids = std::mem::take(&mut self.ids);
        self.bytes = 0;
        std::mem::take(&mut self.order)
            .into_iter()
            .filter(|(seq, id)| ids.get(id) == Some(seq))
            .map(|(_, id)| id)
            .collect()
    }

    fn forget_oldest(&mut self) {
        while let Some((seq, id)) = self.order.pop_front() {
            if self.ids.get(&id) == Some(&seq) {
                self.ids.remove(&id);
                self.bytes -= id.len();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_ids_are_forgotten_and_the_rest_drained_in_order() {
        let mut pending = Pending::default();
        for id in [&b"1"[..], b"\"a\"", b"3", b"4"] {
            pending.insert(id);
        }
        pending.remove(b"\"a\"");
        pending.remove(b"99");
        assert_eq!(pending.len(), 3);
        assert_eq!(
            pending.drain(),
            vec![b"1".to_vec(), b"3".to_vec(), b"4".to_vec()]
        );
        assert_eq!(pending.len(), 0);
        assert!(pending.drain().is_empty());
    }

    #[test]
    fn a_reused_id_is_owed_one_answer() {
        let mut pending = Pending::default();
        pending.insert(b"1");
        pending.insert(b"2");
        pending.insert(b"1");
        assert_eq!(pending.drain(), vec![b"2".to_vec(), b"1".to_vec()]);
    }

    #[test]
    fn memory_stays_bounded_by_count_whatever_the_client_leaves_unanswered() {
        let mut pending = Pending::default();
        for n in 0..(PENDING_LIMIT + 10) {
            pending.insert(n.to_string().as_bytes());
        }
        assert_eq!(pending.len(), PENDING_LIMIT);
        assert!(pending.order.len() <= 2 * PENDING_LIMIT + 64);
        // The oldest went first.
        let ids = pending.drain();
        assert_eq!(ids[0], b"10".to_vec());
        // Answered ids leave no trace behind in the order queue.
        for n in 0..(4 * PENDING_LIMIT) {
            let id = n.to_string();
            pending.insert(id.as_bytes());
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
            pending.insert(&id);
        }
        assert!(pending.bytes <= PENDING_BYTES);
        assert_eq!(pending.len(), PENDING_BYTES / long.len());
    }
}
