//! RCBench's primitives (rcbench §4.2, Prim. 1–6): the verbs each takes, σ counted per
//! call, T^g's Tid checks (a reused slot answers NULL), the Tid ring of Eq. 2, and the
//! §5.5 switches' round trips.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use dmtx_protocols::rcbench::prims::{
    state_word, tid_of, Prims, Sigma, Switches, TgArea, Verbs, ST_AB, ST_CM, ST_RN, TG_RING,
};
use dmtx_verbs::{MemFabric, MemTransport, MnId, OpKind, Post, Region, RemotePtr, Submitted, Transport, VerbError};

fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a mem-transport future pended"),
    }
}

/// Counts round trips and verbs by kind.
struct Counting {
    t: MemTransport,
    posts: u32,
    kinds: Vec<OpKind>,
}

impl Verbs for Counting {
    async fn post(&mut self, post: &mut Post) -> Result<(), VerbError> {
        self.posts += 1;
        self.kinds.extend(post.ops().iter().map(|o| o.kind()));
        match self.t.submit(post) {
            Submitted::Done(r) => r,
            Submitted::Pending(_) => panic!("mem completes at submit"),
        }
    }
}

fn setup() -> (MemFabric, Counting, TgArea) {
    let fabric = MemFabric::new((0..2).map(|_| Arc::new(Region::new(1 << 20))).collect());
    let v = Counting {
        t: fabric.transport(),
        posts: 0,
        kinds: Vec::new(),
    };
    let tg = TgArea {
        theta: 24,
        delta: 8 * TG_RING,
        bases: vec![(MnId(0), 4096), (MnId(1), 4096)],
    };
    (fabric, v, tg)
}

fn take(v: &mut Counting) -> (u32, Vec<OpKind>) {
    let out = (v.posts, std::mem::take(&mut v.kinds));
    v.posts = 0;
    out
}

fn own_words(tid: u64, st: u64) -> [u8; 16] {
    let mut w = [0u8; 16];
    w[..8].copy_from_slice(&tid.to_le_bytes());
    w[8..].copy_from_slice(&state_word(tid, st).to_le_bytes());
    w
}

#[test]
fn tid_ring_walks_r_slots_per_coordinator() {
    // Goal: Tid % Δ stays in coordinator c's ring of R slots and walks all of them;
    // Tids never repeat and are never 0.
    let coords = 5;
    let delta = coords * TG_RING;
    let mut seen = std::collections::BTreeSet::new();
    for c in 0..coords {
        let slots: std::collections::BTreeSet<u64> = (0..8).map(|s| tid_of(c, s, coords) % delta).collect();
        assert_eq!(slots, (c * TG_RING..(c + 1) * TG_RING).collect());
        for s in 0..50 {
            let t = tid_of(c, s, coords);
            assert!(t != 0);
            assert!(seen.insert(t), "Tid {t} repeats");
        }
    }
}

#[test]
fn verbs_per_primitive() {
    // Goal: each primitive takes exactly the verbs of its row (module doc) and counts one
    // σ call.
    let (_f, mut v, tg) = setup();
    let mut p = Prims::new(Switches::default());
    let mut post = Post::new();
    let item = RemotePtr::new(MnId(1), 64);

    post.clear();
    p.read_di(&mut post, item, 40);
    now(p.post(&mut v, &mut post)).unwrap();
    assert_eq!(take(&mut v), (1, vec![OpKind::Read]));

    post.clear();
    p.write_di(&mut post, item, &[1; 40]);
    now(p.post(&mut v, &mut post)).unwrap();
    assert_eq!(take(&mut v), (1, vec![OpKind::Write]));

    post.clear();
    let c = p.amod_im(&mut post, item, 0, 9);
    now(p.post(&mut v, &mut post)).unwrap();
    assert_eq!(take(&mut v), (1, vec![OpKind::Cas]));
    assert_eq!(
        post.old(c),
        u64::from_le_bytes([1; 8]),
        "CAS refused: old word returned"
    );

    let tid = tid_of(3, 0, 8);
    post.clear();
    p.write_own_tm(&mut post, &tg, tid, &own_words(tid, ST_RN));
    now(p.post(&mut v, &mut post)).unwrap();
    assert_eq!(take(&mut v), (1, vec![OpKind::Write]), "own T^g: one WRITE, no READ");

    let seen = now(p.read_tm(&mut v, &mut post, &tg, tid)).unwrap().unwrap();
    assert_eq!(seen.st, ST_RN);
    assert_eq!(take(&mut v), (1, vec![OpKind::Read]));

    assert!(now(p.write_tm(&mut v, &mut post, &tg, tid, 16, &[5; 8])).unwrap());
    assert_eq!(take(&mut v), (2, vec![OpKind::Read, OpKind::Write]));

    assert_eq!(
        now(p.amod_tm(&mut v, &mut post, &tg, tid, ST_RN, ST_AB)).unwrap(),
        Some(true)
    );
    assert_eq!(take(&mut v), (2, vec![OpKind::Read, OpKind::Cas]));
    assert_eq!(now(p.read_tm(&mut v, &mut post, &tg, tid)).unwrap().unwrap().st, ST_AB);
    take(&mut v);
    // A refused transition: the READ shows the state, no CAS.
    assert_eq!(
        now(p.amod_tm(&mut v, &mut post, &tg, tid, ST_RN, ST_AB)).unwrap(),
        Some(false)
    );
    assert_eq!(take(&mut v), (1, vec![OpKind::Read]));

    post.clear();
    let own = p.amod_own_tm(&mut post, &tg, tid, ST_AB, ST_CM);
    now(p.post(&mut v, &mut post)).unwrap();
    assert_eq!(take(&mut v), (1, vec![OpKind::Cas]), "own state: one CAS");
    assert_eq!(post.old(own), state_word(tid, ST_AB));

    assert_eq!(
        p.sigma,
        Sigma {
            read_di: 1,
            write_di: 1,
            amod_im: 1,
            read_tm: 2,
            write_tm: 2,
            amod_tm: 3,
            index_reads: 0,
        }
    );
    assert_eq!(p.sigma.total(), 10);
}

#[test]
fn reused_slot_answers_null() {
    // Goal: once the owner's ring comes round (Tid + R transactions later), the old Tid's
    // ReadTM, WriteTM and AModTM answer NULL and change nothing; an AModTM whose READ
    // saw the old Tid but whose CAS lands after the reuse fails too (Tid in the word).
    let (f, mut v, tg) = setup();
    let mut p = Prims::default();
    let mut post = Post::new();
    let coords = 8;
    let old = tid_of(2, 1, coords);
    let new = tid_of(2, 1 + TG_RING, coords);
    assert_eq!(tg.slot(old), tg.slot(new), "same ring slot");
    post.clear();
    p.write_own_tm(&mut post, &tg, old, &own_words(old, ST_RN));
    now(p.post(&mut v, &mut post)).unwrap();
    post.clear();
    p.write_own_tm(&mut post, &tg, new, &own_words(new, ST_RN));
    now(p.post(&mut v, &mut post)).unwrap();
    assert_eq!(now(p.read_tm(&mut v, &mut post, &tg, old)).unwrap(), None);
    assert!(!now(p.write_tm(&mut v, &mut post, &tg, old, 16, &[7; 8])).unwrap());
    assert_eq!(now(p.amod_tm(&mut v, &mut post, &tg, old, ST_RN, ST_AB)).unwrap(), None);
    let still = now(p.read_tm(&mut v, &mut post, &tg, new)).unwrap().unwrap();
    assert_eq!(still.st, ST_RN, "the new owner's state is untouched");
    let slot = tg.slot(new);
    let mut extra = [0u8; 8];
    f.region(slot.mn).read(slot.offset + 16, &mut extra).unwrap();
    assert_eq!(extra, [0; 8], "the stale WriteTM wrote nothing");
    // The CAS half alone, as if the slot was reused between AModTM's READ and CAS.
    post.clear();
    let c = post.cas(tg.state_ptr(old), state_word(old, ST_RN), state_word(old, ST_AB));
    now(v.post(&mut post)).unwrap();
    assert_ne!(post.old(c), state_word(old, ST_RN));
    assert_eq!(now(p.read_tm(&mut v, &mut post, &tg, new)).unwrap().unwrap().st, ST_RN);
}

#[test]
fn switches_set_round_trips() {
    // Goal: the same logical batch (2 ops to node 0, 2 to node 1) takes 1 round trip
    // with db+or, 2 with db alone (a node at a time), 2 with or alone (one op per node
    // per wave), 4 with all off; results land in place every time.
    for (db, or, rtts) in [(true, true, 1), (true, false, 2), (false, true, 2), (false, false, 4)] {
        let (f, mut v, _) = setup();
        let a = RemotePtr::new(MnId(0), 128);
        let b = RemotePtr::new(MnId(1), 256);
        f.region(MnId(0)).write(128, &11u64.to_le_bytes()).unwrap();
        f.region(MnId(1)).write(256, &22u64.to_le_bytes()).unwrap();
        let mut p = Prims::new(Switches { db, or });
        let mut post = Post::new();
        let ca = p.amod_im(&mut post, a, 11, 12);
        let ra = p.read_di(&mut post, a, 8);
        let cb = p.amod_im(&mut post, b, 0, 1);
        let rb = p.read_di(&mut post, b, 8);
        now(p.post(&mut v, &mut post)).unwrap();
        assert_eq!(v.posts, rtts, "db={db} or={or}");
        assert_eq!(p.waits, rtts as u64);
        assert_eq!(post.old(ca), 11);
        assert_eq!(
            post.bytes(ra),
            12u64.to_le_bytes(),
            "READ after the granted CAS sees it"
        );
        assert_eq!(post.old(cb), 22);
        assert_eq!(post.bytes(rb), 22u64.to_le_bytes());
    }
}
