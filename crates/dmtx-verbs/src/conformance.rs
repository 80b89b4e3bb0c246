//! The verb-contract conformance suite (DESIGN §2), shared by every transport.
//!
//! Each check takes a [`Fabric`] whose memory nodes have at least [`REGION_BYTES_MIN`]
//! bytes and a way to reach a node's [`Region`] (for the stall knob), and panics with a
//! message naming the broken rule. `mem` runs it in its unit tests; `tcp` and `sim`
//! run the same functions against their own fabrics. [`run_all`] runs every check and
//! returns how many ran, so a runner can fail when a filter left it nothing.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::{Fabric, MnId, OpKind, Post, Region, RemotePtr, StallKind, Submitted, Transport, VerbError};

/// Smallest region the suite needs on every node.
pub const REGION_BYTES_MIN: u64 = 1 << 16;
/// Scratch area the suite uses, from this offset on every node.
const BASE: u64 = 4096;

/// Access to a node's region, for arming stalls.
pub type RegionOf<'a> = &'a (dyn Fn(MnId) -> Arc<Region> + Sync);

fn wait(t: &dyn Transport, post: &mut Post) -> crate::Result<()> {
    match t.submit(post) {
        Submitted::Done(r) => r,
        Submitted::Pending(ticket) => {
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                if let Poll::Ready(r) = t.poll(ticket, post, &mut cx) {
                    return r;
                }
                t.progress();
            }
        }
    }
}

/// Ops of a batch run in the order posted; batches of a post go to every node.
pub fn batch_order(fabric: &dyn Fabric) {
    let t = fabric.endpoint(0).expect("endpoint");
    let mut p = Post::new();
    for mn in 0..fabric.mn_count() {
        let at = RemotePtr::new(MnId(mn as u16), BASE);
        p.write(at, &[0u8; 16]);
    }
    wait(t.as_ref(), &mut p).expect("zeroing");
    p.clear();
    let mut checks = Vec::new();
    for mn in 0..fabric.mn_count() {
        let at = RemotePtr::new(MnId(mn as u16), BASE);
        p.write(at, &(mn as u64 + 10).to_le_bytes());
        let r1 = p.read(at, 8);
        let c = p.cas(at, mn as u64 + 10, 99);
        let r2 = p.read(at, 8);
        let f = p.faa(at, 1);
        p.flush(at);
        let r3 = p.read(at, 16);
        checks.push((mn, r1, c, r2, f, r3));
    }
    wait(t.as_ref(), &mut p).expect("ordered batch");
    for (mn, r1, c, r2, f, r3) in checks {
        assert_eq!(
            p.bytes(r1),
            (mn as u64 + 10).to_le_bytes(),
            "READ after WRITE in a batch must see it"
        );
        assert_eq!(p.old(c), mn as u64 + 10, "CAS returns the old word");
        assert_eq!(p.bytes(r2), 99u64.to_le_bytes(), "READ after CAS must see the swap");
        assert_eq!(p.old(f), 99, "FAA returns the old word");
        assert_eq!(&p.bytes(r3)[..8], 100u64.to_le_bytes(), "FAA adds");
    }
}

/// CAS and FAA are atomic on their word under concurrency from many threads.
pub fn atomics_are_atomic(fabric: &(dyn Fabric + Sync)) {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 2000;
    let counter = RemotePtr::new(MnId(0), BASE + 64);
    let casword = RemotePtr::new(MnId(0), BASE + 128);
    let t = fabric.endpoint(0).expect("endpoint");
    let mut p = Post::new();
    p.write(counter, &[0u8; 8]);
    p.write(casword, &[0u8; 8]);
    wait(t.as_ref(), &mut p).unwrap();
    std::thread::scope(|s| {
        for th in 0..THREADS {
            s.spawn(move || {
                let t = fabric.endpoint(th as u32 + 1).expect("endpoint");
                let mut p = Post::new();
                for _ in 0..ROUNDS {
                    p.clear();
                    p.faa(counter, 1);
                    wait(t.as_ref(), &mut p).unwrap();
                    // CAS increment loop: lost updates would show as a short count.
                    let mut seen = 0;
                    loop {
                        p.clear();
                        let c = p.cas(casword, seen, seen + 1);
                        wait(t.as_ref(), &mut p).unwrap();
                        if p.old(c) == seen {
                            break;
                        }
                        seen = p.old(c);
                    }
                }
            });
        }
    });
    p.clear();
    let a = p.read(counter, 8);
    let b = p.read(casword, 8);
    wait(t.as_ref(), &mut p).unwrap();
    assert_eq!(p.bytes(a), (THREADS * ROUNDS).to_le_bytes(), "FAA lost an update");
    assert_eq!(p.bytes(b), (THREADS * ROUNDS).to_le_bytes(), "CAS lost an update");
}

/// A READ racing a WRITE returns a word-wise mixture, alternating shapes included, and
/// never a torn word.
pub fn reads_tear_by_word(fabric: &(dyn Fabric + Sync), region_of: RegionOf<'_>) {
    let mn = MnId(0);
    let at = RemotePtr::new(mn, BASE + 1024);
    let region = region_of(mn);
    let t = fabric.endpoint(0).expect("endpoint");
    let mut p = Post::new();
    p.write(at, &[0u8; 64]);
    wait(t.as_ref(), &mut p).unwrap();
    let rs = region.arm_stall(StallKind::Read, at.offset + 8);
    let ws = region.arm_stall(StallKind::Write, at.offset + 32);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let t = fabric.endpoint(1).expect("endpoint");
            let mut p = Post::new();
            let r = p.read(at, 64);
            wait(t.as_ref(), &mut p).unwrap();
            p.bytes(r).to_vec()
        });
        rs.wait_stalled();
        let writer = s.spawn(|| {
            let t = fabric.endpoint(2).expect("endpoint");
            let mut p = Post::new();
            p.write(at, &[0xab; 64]);
            wait(t.as_ref(), &mut p).unwrap();
        });
        ws.wait_stalled();
        drop(rs);
        let seen = reader.join().unwrap();
        drop(ws);
        writer.join().unwrap();
        let words: Vec<u64> = seen
            .chunks(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        let new = u64::from_le_bytes([0xab; 8]);
        assert_eq!(words, [0, new, new, new, 0, 0, 0, 0], "expected old, new×3, old×4");
    });
}

/// Bad addresses are errors for the caller, and the node keeps serving.
pub fn bad_ops_are_errors(fabric: &dyn Fabric) {
    let t = fabric.endpoint(0).expect("endpoint");
    let mut p = Post::new();
    p.cas(RemotePtr::new(MnId(0), BASE + 3), 0, 1);
    match wait(t.as_ref(), &mut p) {
        Err(VerbError::Misaligned { kind: OpKind::Cas, .. }) => {}
        other => panic!("misaligned CAS: {other:?}"),
    }
    p.clear();
    p.faa(RemotePtr::new(MnId(0), BASE + 5), 1);
    assert!(matches!(
        wait(t.as_ref(), &mut p),
        Err(VerbError::Misaligned { kind: OpKind::Faa, .. })
    ));
    p.clear();
    p.read(RemotePtr::new(MnId(0), u64::MAX - 4), 8);
    assert!(matches!(
        wait(t.as_ref(), &mut p),
        Err(VerbError::OutOfRange { kind: OpKind::Read, .. })
    ));
    p.clear();
    p.write(RemotePtr::new(MnId(0), u64::MAX / 2), &[1; 8]);
    assert!(matches!(
        wait(t.as_ref(), &mut p),
        Err(VerbError::OutOfRange {
            kind: OpKind::Write,
            ..
        })
    ));
    p.clear();
    p.read(RemotePtr::new(MnId(fabric.mn_count() as u16), 0), 8);
    assert!(matches!(wait(t.as_ref(), &mut p), Err(VerbError::UnknownNode { .. })));
    p.clear();
    let r = p.read(RemotePtr::new(MnId(0), BASE), 8);
    wait(t.as_ref(), &mut p).expect("the node still serves after bad ops");
    assert_eq!(p.bytes(r).len(), 8);
}

/// Every check; returns how many ran.
pub fn run_all(fabric: &(dyn Fabric + Sync), region_of: RegionOf<'_>) -> usize {
    batch_order(fabric);
    atomics_are_atomic(fabric);
    reads_tear_by_word(fabric, region_of);
    bad_ops_are_errors(fabric);
    4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemFabric;

    #[test]
    fn mem_transport_conforms() {
        let regions: Vec<_> = (0..2).map(|_| Arc::new(Region::new(REGION_BYTES_MIN))).collect();
        let fabric = MemFabric::new(regions.clone());
        let of = move |mn: MnId| Arc::clone(&regions[mn.index()]);
        assert_eq!(run_all(&fabric, &of), 4);
    }
}
