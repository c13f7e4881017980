//! The accept loop: takes every peer the platform accepts, reads each
//! one's handshake in a task of its own, and bounds how many wait.
//!
//! Why it never stops to wait: a silent peer must not keep a bridge that has
//! already sent its handshake waiting in the kernel's backlog, so memory and
//! descriptors are bounded by dropping the oldest waiting peer instead. At
//! the descriptor limit too: there the oldest waiting peer is dropped to
//! accept the next connection, rather than every connection waiting in the
//! kernel's queue behind the silent ones until their handshake time is up.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_io::Timer;
use smol::channel::Sender;
use smol::Task;

use super::handshake_line::{read_handshake, HandshakeFailure};
use super::peer_log::{PeerLog, ACCEPTING_HELD_BACK, PEERS_HELD_BACK};
use super::{lock, platform, Connection, LogSink, Options, Peer, Writer};

/// Most connections that may be between "accepted" and "taken by
/// [`Listener::accept`]" at once: reading their handshake, or waiting for
/// the app (on Unix, half the soft limit of open files if that is lower).
/// Beyond it, the oldest is dropped to make room for the newest, so
/// accepting never stops. Bounds our memory (a socket, a small task and at
/// most one handshake each) when peers connect and say nothing, or the app
/// stops calling accept; high enough that hundreds of silent peers do not
/// push out a bridge whose handshake is already on its way.
///
/// [`Listener::accept`]: super::Listener::accept
pub const MAX_PENDING: usize = 1024;

/// How long the accept loop pauses after a transient failure (such as
/// running out of file descriptors) so it does not spin while it lasts.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How many connections the accept loop takes in a row before it lets the
/// other tasks on its thread run.
const ACCEPTS_BEFORE_YIELD: u32 = 32;

/// What the platform's accept produced.
pub(super) enum Accepted {
    /// A peer that passed the platform's checks (same user). Boxed: the
    /// streams are large, and the other variants are common under attack.
    Peer(Box<(platform::Reader, platform::Writer, Peer)>),
    /// A peer that was refused and already dropped; the text says why.
    Refused(String),
    /// A failure that may heal (out of memory, an aborted connection); the
    /// loop logs it, pauses and carries on.
    Retry(io::Error),
    /// Out of file descriptors: a [`Retry`](Accepted::Retry), unless a
    /// peer waiting for its handshake can give its descriptor up.
    #[cfg_attr(not(unix), allow(dead_code))]
    OutOfDescriptors(io::Error),
}

/// The peers accepted but not yet taken by the app (reading their
/// handshake, or waiting for [`Listener::accept`]), by accept order, so the
/// oldest is the first one found. Each task removes itself when it ends.
///
/// [`Listener::accept`]: super::Listener::accept
type Pending = Mutex<BTreeMap<u64, Waiting>>;

/// One pending peer: the task reading its handshake (dropping it cancels
/// it, which drops the peer), and whether the peer has sent anything yet.
struct Waiting {
    task: Task<()>,
    heard: Arc<AtomicBool>,
}

/// Accepts peers for as long as the listener lives, reading each one's
/// handshake in its own task so a slow peer holds up nobody else.
///
/// It never waits for a handshake before accepting the next peer: a silent
/// peer must not keep a bridge that has already sent its handshake waiting
/// in the kernel's backlog. Memory and descriptors are bounded by dropping
/// the oldest pending peer instead (see [`MAX_PENDING`] and
/// `platform::pending_limit`). Dropping the loop drops `pending`, which
/// cancels every handshake still being read.
pub(super) async fn accept_loop(
    acceptor: platform::Acceptor,
    options: Options,
    ready: Sender<io::Result<Connection>>,
) {
    let most_pending = platform::pending_limit(MAX_PENDING);
    let pending: Arc<Pending> = Arc::new(Mutex::new(BTreeMap::new()));
    let peer_log = Arc::new(PeerLog::new(PEERS_HELD_BACK, options.log.clone()));
    let accept_log = Arc::new(PeerLog::new(ACCEPTING_HELD_BACK, options.log.clone()));
    let mut outage: Option<Outage> = None;
    let mut next_id: u64 = 0;
    let mut accepted_in_a_row = 0u32;
    loop {
        // With connections always queued, accept never waits: a flood of them
        // (refused ones included) would otherwise keep this loop from ever
        // returning to the executor, stalling every task that shares it.
        accepted_in_a_row += 1;
        if accepted_in_a_row >= ACCEPTS_BEFORE_YIELD {
            accepted_in_a_row = 0;
            futures_lite::future::yield_now().await;
        }
        let accepted = acceptor.accept().await;
        if !matches!(
            accepted,
            Ok(Accepted::Retry(_)) | Ok(Accepted::OutOfDescriptors(_))
        ) {
            if let Some(outage) = outage.take() {
                outage.ended(&options.log);
            }
        }
        let (reader, writer, peer) = match accepted {
            Ok(Accepted::Peer(streams)) => *streams,
            Ok(Accepted::Refused(why)) => {
                peer_log.line(format_args!("refused {}", why));
                continue;
            }
            Ok(Accepted::Retry(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(Accepted::Retry(e)) if e.kind() == io::ErrorKind::ConnectionAborted => {
                peer_log.line(format_args!(
                    "a connection was closed by its peer before it could be accepted ({})",
                    e
                ));
                continue;
            }
            Ok(Accepted::OutOfDescriptors(e)) => {
                // The connection at the head of the kernel's queue may be a bridge
                // that sent its handshake at once, while the oldest silent peer
                // held has sent nothing all this time: that one gives up its
                // descriptor. A peer that has spoken is kept (it may be a bridge
                // waiting for the app), and the loop waits as for any outage.
                if drop_oldest(&pending, Silent::Only).await {
                    peer_log.line(format_args!(
                        "dropped a connection: out of file descriptors ({}), and it was \
                         the oldest waiting for its handshake or for the app",
                        e
                    ));
                    continue;
                }
                outage = Some(Outage::go_on(outage, e, &accept_log));
                Timer::after(RETRY_PAUSE).await;
                continue;
            }
            Ok(Accepted::Retry(e)) => {
                // Out of memory, say: the connections stay in the kernel's queue
                // meanwhile, and are accepted once it passes. Say so, once per
                // outage, rather than a line per attempt.
                outage = Some(Outage::go_on(outage, e, &accept_log));
                Timer::after(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => {
                options
                    .log
                    .line(format_args!("stopped accepting connections: {}", e));
                let _ = ready.send(Err(e)).await;
                return;
            }
        };
        next_id += 1;
        let id = next_id;
        let heard = Arc::new(AtomicBool::new(platform::has_spoken(&reader)));
        let work = take_handshake(
            (reader, writer, peer),
            (options.handshake_limit, options.handshake_timeout),
            ready.clone(),
            peer_log.clone(),
            heard.clone(),
        );
        let registry = Arc::downgrade(&pending);
        let crowded = {
            // Locked across the spawn, so the task cannot try to remove
            // itself before it is in the map.
            let mut peers = lock(&pending);
            let task = crate::spawn(async move {
                work.await;
                forget(&registry, id);
            });
            peers.insert(id, Waiting { task, heard });
            peers.len() > most_pending
        };
        if crowded && drop_oldest(&pending, Silent::First).await {
            peer_log.line(format_args!(
                "dropped a connection: more than {} were waiting for their handshake \
                 or for the app, and it was the oldest that had sent nothing (or the \
                 oldest, all having spoken)",
                most_pending
            ));
        }
    }
}

/// A time in which accepting fails for a reason that may heal (out of file
/// descriptors, say). Connections are not lost meanwhile: they wait in the
/// kernel's queue, and are accepted once it passes, so the log says that,
/// once when it begins and once when it ends.
///
/// The two lines of an outage go together: the first is limited like the
/// lines about single peers (so outages that come and go quickly are
/// counted, not each logged), and the second is written exactly when the
/// first was.
#[derive(Debug)]
struct Outage {
    began: Instant,
    attempts: u64,
    error: io::Error,
    /// Whether its first line was written (not held back).
    logged: bool,
}

impl Outage {
    fn began(error: io::Error, log: &Arc<PeerLog>) -> Outage {
        let logged = log.line(format_args!(
            "cannot accept connections for now: {}; connections wait in the kernel's \
             queue meanwhile, and accepting is tried again every {:?}",
            error, RETRY_PAUSE
        ));
        Outage {
            began: Instant::now(),
            attempts: 1,
            error,
            logged,
        }
    }

    /// `outage` with one more failed attempt, or one that begins now.
    fn go_on(outage: Option<Outage>, error: io::Error, log: &Arc<PeerLog>) -> Outage {
        match outage {
            Some(mut outage) => {
                outage.attempts += 1;
                outage
            }
            None => Outage::began(error, log),
        }
    }

    fn ended(self, log: &LogSink) {
        if self.logged {
            log.line(format_args!(
                "accepting connections again after {} failed attempt(s) in {:.1?} ({}): \
                 the connections that waited meanwhile were delayed, not dropped",
                self.attempts,
                self.began.elapsed(),
                self.error
            ));
        }
    }
}

/// Removes a finished handshake task from the pending map.
fn forget(registry: &Weak<Pending>, id: u64) {
    if let Some(pending) = registry.upgrade() {
        // The running task's own handle: let it finish on its own.
        if let Some(waiting) = lock(&pending).remove(&id) {
            waiting.task.detach();
        }
    }
}

/// Which pending peer [`drop_oldest`] may drop.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Silent {
    /// The oldest that has sent nothing yet, or else the oldest of all.
    First,
    /// Only the oldest that has sent nothing yet.
    Only,
}

/// Cancels the task of the oldest pending peer that `which` allows, and
/// waits until it is gone (its socket closed); `false` if there is none.
async fn drop_oldest(pending: &Pending, which: Silent) -> bool {
    let oldest = {
        let mut peers = lock(pending);
        let silent = peers
            .iter()
            .find(|(_, waiting)| !waiting.heard.load(Ordering::Relaxed))
            .map(|(&id, _)| id);
        let first = match which {
            Silent::First => silent.or_else(|| peers.keys().next().copied()),
            Silent::Only => silent,
        };
        first.and_then(|id| peers.remove(&id))
    };
    match oldest {
        Some(waiting) => {
            waiting.task.cancel().await;
            true
        }
        None => false,
    }
}

/// Reads one peer's handshake, at most `limit` bytes within `timeout`
/// (the listener's [`Options`]), and hands the connection to the app.
async fn take_handshake(
    (reader, writer, peer): (platform::Reader, platform::Writer, Peer),
    (limit, timeout): (usize, Duration),
    ready: Sender<io::Result<Connection>>,
    peer_log: Arc<PeerLog>,
    heard: Arc<AtomicBool>,
) {
    match read_handshake(reader, limit, timeout, &heard).await {
        Ok((handshake, reader)) => {
            let connection = Connection {
                handshake,
                peer,
                reader,
                writer: Writer(writer),
            };
            // Fails only when the listener is gone: the peer is then
            // dropped, which is all there is left to do.
            let _ = ready.send(Ok(connection)).await;
        }
        // Not worth a line: a liveness probe (such as another
        // `Listener::bind` checking whether we are alive).
        Err(HandshakeFailure::Probe) => {}
        Err(failure) => {
            peer_log.line(format_args!("dropped a connection: {}", failure));
        }
    }
}
