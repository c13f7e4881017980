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

use crate::bridge::BATCH_LIMIT;
use crate::envelope::{batch_ids, first_byte_after_space};

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

/// A map keyed by raw ids.
pub(in crate::bridge) type IdMap<V> = HashMap<Vec<u8>, V, BuildHasherDefault<IdHasher>>;

/// A set of raw ids.
pub(in crate::bridge) type IdSet = HashSet<Vec<u8>, BuildHasherDefault<IdHasher>>;

/// Most ids remembered.
pub(in crate::bridge) const PENDING_LIMIT: usize = 65_536;

/// Most bytes of ids remembered (ids can be long, see
/// [`ID_CAP`](crate::envelope::ID_CAP)).
pub(in crate::bridge) const PENDING_BYTES: usize = 16 * 1024 * 1024;

/// Raw ids (as written) of requests in flight, oldest first.
#[derive(Debug, Default)]
pub(in crate::bridge) struct Pending {
    /// Id -> its sequence number, which tells a current entry of `order`
    /// from a stale one.
    ids: IdMap<u64>,
    /// Ids in the order they were sent, with their sequence number; entries
    /// of ids answered since are stale and skipped (and compacted away).
    order: VecDeque<(u64, Vec<u8>)>,
    next: u64,
    bytes: usize,
    /// The batches in flight.
    pub(in crate::bridge) batches: Batches,
    /// Requests in flight whose id was too long to keep.
    long_ids: usize,
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
    pub(in crate::bridge) fn insert(&mut self, id: &[u8]) {
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
    pub(in crate::bridge) fn remove(&mut self, id: &[u8]) {
        if self.ids.remove(id).is_some() {
            self.bytes -= id.len();
        }
    }

    #[cfg(test)]
    pub(in crate::bridge) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every id still pending, oldest first (then a `null` per long id),
    /// leaving the set empty.
    pub(in crate::bridge) fn drain(&mut self) -> Vec<Vec<u8>> {
        let ids = std::mem::take(&mut self.ids);
        self.bytes = 0;
        let mut out: Vec<Vec<u8>> = std::mem::take(&mut self.order)
            .into_iter()
            .filter(|(seq, id)| ids.get(id) == Some(seq))
            .map(|(_, id)| id)
            .collect();
        for _ in 0..std::mem::take(&mut self.long_ids) {
            out.push(b"null".to_vec());
        }
        out
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

/// Most batches in flight remembered; beyond it (or [`PENDING_BYTES`] of
/// their ids) the oldest is forgotten, as in [`Pending`].
const BATCHES_LIMIT: usize = 1024;

/// The bytes of the lines starting with `[` (after whitespace or a BOM) in
/// one direction, kept up to [`BATCH_LIMIT`] as their chunks pass; other
/// lines cost a look at their first byte.
#[derive(Debug, Default)]
pub(in crate::bridge) struct Arrays {
    /// The current line so far, while it is or may be an array.
    line: Option<Vec<u8>>,
    /// Bytes of the current line in earlier chunks.
    seen: u64,
    /// Where the current line starts in the chunk being fed.
    start: usize,
}

impl Arrays {
    /// A chunk is about to be fed to the scanner, which is `mid_line` or
    /// not.
    pub(in crate::bridge) fn chunk(&mut self, chunk: &[u8], mid_line: bool) {
        self.start = 0;
        if !mid_line {
            self.seen = 0;
            self.line = Some(Vec::new());
        }
        self.decide(chunk);
    }

    /// The scanner ended a line `len` bytes long in `chunk`: that line, if
    /// an array (up to [`BATCH_LIMIT`] of it).
    pub(in crate::bridge) fn line_end(&mut self, chunk: &[u8], len: u64) -> Option<Vec<u8>> {
        let end = (self.start as u64 + len.saturating_sub(self.seen)) as usize;
        let end = end.min(chunk.len()).max(self.start);
        let line = self.line.take().map(|mut line| {
            keep(&mut line, &chunk[self.start..end]);
            line
        });
        self.seen = 0;
        self.start = end;
        self.line = Some(Vec::new());
        self.decide(&chunk[end..]);
        line.filter(|line| first_byte_after_space(line) == Some(b'['))
    }

    /// The scanner has seen all of `chunk`.
    pub(in crate::bridge) fn chunk_end(&mut self, chunk: &[u8]) {
        if let Some(line) = &mut self.line {
            keep(line, &chunk[self.start..]);
        }
        self.seen += (chunk.len() - self.start) as u64;
    }

    /// The relay goes on with a line `seen` bytes into it, kept offline
    /// (`line`) if it is a batch.
    pub(in crate::bridge) fn carry(&mut self, line: Option<Vec<u8>>, seen: u64) {
        self.line = line;
        self.seen = seen;
    }

    /// Takes the current line, if it is an array not ended yet.
    pub(in crate::bridge) fn take_current(&mut self) -> Option<Vec<u8>> {
        self.line
            .take()
            .filter(|line| first_byte_after_space(line) == Some(b'['))
    }

    /// Stops keeping the current line once a byte of it says it is no
    /// array: whitespace and BOM bytes (a BOM may be cut by a chunk's end)
    /// say nothing.
    fn decide(&mut self, rest: &[u8]) {
        let telling = |bytes: &[u8]| {
            bytes
                .iter()
                .copied()
                .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | 0xEF | 0xBB | 0xBF))
        };
        if let Some(line) = &self.line {
            if telling(line)
                .or_else(|| telling(rest))
                .map_or(false, |b| b != b'[')
            {
                self.line = None;
            }
        }
    }
}

fn keep(line: &mut Vec<u8>, bytes: &[u8]) {
    let room = BATCH_LIMIT.saturating_sub(line.len());
    line.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// The client's batches relayed to the app and not answered yet: the raw
/// ids of the requests in each (as [`batch_ids`] gives them), oldest
/// first. A request of a batch the client cancels is still answered with
/// the others (the client ignores answers to what it cancelled).
#[derive(Debug, Default)]
pub(in crate::bridge) struct Batches {
    pub(in crate::bridge) up: Arrays,
    pub(in crate::bridge) down: Arrays,
    sent: Vec<Vec<u8>>,
    bytes: usize,
}

impl Batches {
    /// The scanner ended a client line `len` bytes long in `chunk`.
    pub(in crate::bridge) fn up_line(&mut self, chunk: &[u8], len: u64) {
        if let Some(line) = self.up.line_end(chunk, len) {
            self.sent(&line);
        }
    }

    /// The scanner ended an app line `len` bytes long in `chunk`.
    pub(in crate::bridge) fn down_line(&mut self, chunk: &[u8], len: u64) {
        if let Some(line) = self.down.line_end(chunk, len) {
            self.answered(&line);
        }
    }

    /// A batch line went to the app.
    pub(in crate::bridge) fn sent(&mut self, line: &[u8]) {
        let ids = batch_ids(line, false);
        if ids.is_empty() {
            return;
        }
        self.bytes += ids.len();
        self.sent.push(ids);
        while self.sent.len() > BATCHES_LIMIT || self.bytes > PENDING_BYTES {
            self.forget(0);
        }
    }

    /// An array line came from the app: the batch it answers (the one with
    /// the id of its first response) is answered. An array whose first
    /// element is longer than [`BATCH_LIMIT`] answers the oldest.
    pub(in crate::bridge) fn answered(&mut self, line: &[u8]) {
        let ids = batch_ids(line, true);
        let at = match ids.split(|&b| b == b'\n').nth(1) {
            Some(first) => self
                .sent
                .iter()
                .position(|sent| sent.split(|&b| b == b'\n').any(|id| id == first)),
            None if line.len() >= BATCH_LIMIT => Some(0),
            None => None,
        };
        if let Some(at) = at {
            self.forget(at);
        }
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
    use crate::envelope::Scanner;

    #[test]
    fn array_lines_are_kept_whole_wherever_the_chunks_are_cut() {
        let stream: &[u8] = b"{\"id\":1,\"method\":\"x\",\"params\":[1]}\n\xEF\xBB\xBF [{\"id\":2}]\n  {\"a\":[1]}\n\n[1,\"]\\n\"]\n \t\n[]";
        for size in 1..=stream.len() {
            let (mut scanner, mut arrays, mut found) = (Scanner::new(), Arrays::default(), vec![]);
            for chunk in stream.chunks(size) {
                arrays.chunk(chunk, scanner.mid_line());
                scanner.feed(chunk, |envelope| {
                    found.extend(arrays.line_end(chunk, envelope.len));
                });
                arrays.chunk_end(chunk);
            }
            found.extend(arrays.take_current());
            let expected: Vec<&[u8]> =
                vec![b"\xEF\xBB\xBF [{\"id\":2}]\n", b"[1,\"]\\n\"]\n", b"[]"];
            assert_eq!(found, expected, "chunks of {}", size);
        }
    }

    #[test]
    fn a_batch_is_answered_by_the_array_with_its_first_response_id() {
        let mut batches = Batches::default();
        batches.sent(br#"[{"id":1,"method":"a"},{"id":2,"method":"a"}]"#);
        batches.sent(br#"[{"method":"n"}]"#);
        batches.sent(br#"[{"id":3,"method":"a"}]"#);
        batches.sent(br#"[{"id":4,"method":"a"}]"#);
        batches.answered(br#"[{"id":3,"result":{}}]"#);
        batches.answered(br#"[{"id":9,"result":{}}]"#);
        batches.answered(br#"[{"id":2,"result":{}},{"id":1,"result":{}}]"#);
        assert_eq!(batches.drain(), vec![b"\n4".to_vec()]);
        for n in 0..(BATCHES_LIMIT + 5) {
            batches.sent(format!(r#"[{{"id":{},"method":"a"}}]"#, n).as_bytes());
        }
        let kept = batches.drain();
        assert_eq!(kept.len(), BATCHES_LIMIT);
        assert_eq!(kept[0], b"\n5".to_vec());
    }

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
