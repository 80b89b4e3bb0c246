//! The messaging contract as a test suite any [`MsgFabric`] can run.
//!
//! Give [`run_all`] one fabric per compute node of a cluster (at least two nodes with at
//! least two threads each). Every mailbox is driven from the calling thread, with a
//! deadline, so a transport that loses or reorders entries fails here instead of hanging.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Entry, EntryKind, Event, Mailbox, MsgError, MsgFabric, WorkerAddr, PAYLOAD_MAX};

/// A delivered entry as the suite records it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Got {
    at: WorkerAddr,
    from: WorkerAddr,
    kind: EntryKind,
    retry: bool,
    id: u64,
    payload: Vec<u8>,
}

struct Cluster {
    boxes: Vec<Box<dyn Mailbox>>,
}

impl Cluster {
    fn new(fabrics: &[Arc<dyn MsgFabric>]) -> Self {
        let mut boxes = Vec::new();
        for f in fabrics {
            // A fabric hands out mailboxes for its own node's threads only.
            let first = f.mailbox(0).expect("thread 0 of every node has a mailbox");
            let me = first.addr().cn;
            boxes.push(first);
            let others: Vec<u16> = f
                .workers()
                .iter()
                .filter(|w| w.cn == me && w.thread != 0)
                .map(|w| w.thread)
                .collect();
            for t in others {
                boxes.push(f.mailbox(t).expect("every listed thread has a mailbox"));
            }
        }
        boxes.sort_by_key(|b| b.addr());
        Self { boxes }
    }

    fn get(&self, a: WorkerAddr) -> &dyn Mailbox {
        self.boxes
            .iter()
            .find(|b| b.addr() == a)
            .expect("a mailbox per worker")
            .as_ref()
    }

    /// Flush and drain everyone until `want` entries arrived (or fail after a deadline).
    fn pump(&self, want: usize) -> Vec<Got> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < want {
            got.extend(self.pump_some());
            assert!(
                Instant::now() < deadline,
                "only {} of {want} entries arrived within 10 s: {got:?}",
                got.len()
            );
            std::thread::yield_now();
        }
        // Nothing more may trickle in.
        std::thread::sleep(Duration::from_millis(20));
        for b in &self.boxes {
            b.flush();
            b.drain(&mut |ev| panic!("{}: unexpected extra event {ev:?}", b.addr()));
        }
        got
    }
}

fn entry(kind: EntryKind, id: u64, payload: &[u8]) -> Entry<'_> {
    Entry {
        kind,
        retry: false,
        id,
        payload,
    }
}

/// Run every check; panics with a message on the first violation.
pub fn run_all(fabrics: &[Arc<dyn MsgFabric>]) {
    let c = Cluster::new(fabrics);
    assert!(c.boxes.len() >= 4, "the suite needs two nodes with two threads each");
    workers_are_listed_alike(&c, fabrics);
    entries_arrive_intact(&c);
    fifo_per_pair(&c);
    bad_pushes_are_refused(&c);
}

fn workers_are_listed_alike(c: &Cluster, fabrics: &[Arc<dyn MsgFabric>]) {
    let all: Vec<WorkerAddr> = c.boxes.iter().map(|b| b.addr()).collect();
    for f in fabrics {
        assert_eq!(f.workers(), all, "{}: workers() lists every worker, in order", f.name());
    }
    for b in &c.boxes {
        assert_eq!(b.workers(), all, "{}: mailbox workers() lists every worker", b.addr());
    }
}

fn entries_arrive_intact(c: &Cluster) {
    let a = c.boxes[0].addr();
    let far = c.boxes.last().unwrap().addr();
    let big = vec![0xa5u8; 64 << 10];
    let src = c.get(a);
    src.push(far, entry(EntryKind::Request, 7, b"lock 42")).unwrap();
    src.push(
        far,
        Entry {
            kind: EntryKind::Request,
            retry: true,
            id: 7,
            payload: b"lock 42",
        },
    )
    .unwrap();
    src.push(far, entry(EntryKind::OneWay, 0, b"")).unwrap();
    src.push(far, entry(EntryKind::Reply, u64::MAX, &big)).unwrap();
    src.push(a, entry(EntryKind::OneWay, 3, b"to myself")).unwrap();
    let mut got = c.pump(5);
    got.sort_by_key(|g| g.at);
    let mine: Vec<&Got> = got.iter().filter(|g| g.at == a).collect();
    assert_eq!(mine.len(), 1, "a worker can message itself");
    assert_eq!(mine[0].payload, b"to myself");
    let at_far: Vec<&Got> = got.iter().filter(|g| g.at == far).collect();
    let shape: Vec<(EntryKind, bool, u64, usize)> = at_far
        .iter()
        .map(|g| (g.kind, g.retry, g.id, g.payload.len()))
        .collect();
    assert_eq!(
        shape,
        [
            (EntryKind::Request, false, 7, 7),
            (EntryKind::Request, true, 7, 7),
            (EntryKind::OneWay, false, 0, 0),
            (EntryKind::Reply, false, u64::MAX, big.len()),
        ],
        "entries arrive in push order, fields intact"
    );
    assert!(at_far.iter().all(|g| g.from == a), "the sender is reported");
    assert_eq!(at_far[3].payload, big);
}

fn fifo_per_pair(c: &Cluster) {
    // Every worker sends 300 numbered entries to every other, over many flushes.
    let addrs: Vec<WorkerAddr> = c.boxes.iter().map(|b| b.addr()).collect();
    let per_pair = 300u64;
    let mut sent = 0;
    let mut got = Vec::new();
    for round in 0..per_pair {
        for b in &c.boxes {
            for &to in &addrs {
                if to != b.addr() {
                    b.push(to, entry(EntryKind::OneWay, round, &round.to_le_bytes()))
                        .unwrap();
                    sent += 1;
                }
            }
        }
        if round % 37 == 0 {
            got.extend(c.pump_some());
        }
    }
    got.extend(c.pump(sent - got.len()));
    for &to in &addrs {
        for &from in &addrs {
            if from == to {
                continue;
            }
            let ids: Vec<u64> = got
                .iter()
                .filter(|g| g.at == to && g.from == from)
                .map(|g| g.id)
                .collect();
            assert_eq!(ids, (0..per_pair).collect::<Vec<_>>(), "FIFO from {from} to {to}");
        }
    }
}

impl Cluster {
    /// One flush-and-drain round, whatever arrives.
    fn pump_some(&self) -> Vec<Got> {
        let mut got = Vec::new();
        for b in &self.boxes {
            b.flush();
        }
        for b in &self.boxes {
            let at = b.addr();
            b.drain(&mut |ev| match ev {
                Event::Entry { from, entry } => got.push(Got {
                    at,
                    from,
                    kind: entry.kind,
                    retry: entry.retry,
                    id: entry.id,
                    payload: entry.payload.to_vec(),
                }),
                Event::PeerLost { peer, why } => panic!("{at} lost {peer} on a healthy network: {why}"),
            });
        }
        got
    }
}

fn bad_pushes_are_refused(c: &Cluster) {
    let b = &c.boxes[0];
    let nobody = WorkerAddr::new(u16::MAX, 0);
    assert_eq!(
        b.push(nobody, entry(EntryKind::OneWay, 1, b"x")),
        Err(MsgError::UnknownPeer { to: nobody })
    );
    let too_big = vec![0u8; PAYLOAD_MAX + 1];
    assert!(matches!(
        b.push(b.addr(), entry(EntryKind::OneWay, 1, &too_big)),
        Err(MsgError::TooLarge { .. })
    ));
    // Refused pushes leave nothing behind.
    assert!(c.pump(0).is_empty());
}
