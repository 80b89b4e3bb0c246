//! The protocol kit end to end: a lock table kept on compute nodes, served over CN↔CN
//! messaging, with a timer-driven lease, on several compute nodes in one process.
//!
//! Goal: a protocol whose locks live in per-CN state (`Protocol::CnState`), are taken
//! and released with RPCs to the node that owns the key (`ctx.rpc`, a handler installed
//! in `Protocol::thread_state`), and expire unless renewed (a lease manager per node, a
//! `Protocol::services` task on virtual or real time), runs serializably with 3 compute
//! nodes on `mem` and `sim`: the bank's sum invariant holds and its histories pass the
//! isolation checker. A variant that releases its locks before its writes land is caught
//! within a few seeds. Locks that holders never release (a variant that forgets them
//! after an abort, as a crashed holder would) are reclaimed by the lease manager once
//! their lease lapses, and the run stays correct. Over `tcp`, three compute-node runs
//! (`--cn`, as three processes would) serve each other's locks until every node is done
//! (the driver's end barrier), and their merged histories pass the checker. It passes
//! the protocol suite (`dmtx_suite::run_all`, 3 compute nodes, with the suite's tear
//! injector on `mem`), which catches the broken variant too. Method:
//! [`LeaseLocks`], a test-only No-Wait exclusive-lock protocol over the toy bank
//! (`common/toy.rs`).
//!
//! [`LeaseLocks`] is not registered in the CLI. Its record is `key + 1 | version |
//! value` (8-byte words, one replica); no lock word is in memory. The lock of key `k`
//! lives in the lock table of compute node `k % nodes` ([`LockTable`]); a coordinator on
//! thread `t` asks thread `t` of that node. Round trips of an attempt: a bucket READ to
//! locate each object, one RPC round to lock every object (batched per node), one READ
//! round, and at commit one WRITE round; the unlock RPC round is the cleanup's.
//!
//! Lease invariants (the lock table's, numbered where they are kept):
//! 1. A lock is granted only when its key has no entry; an entry is removed by its
//!    holder's unlock, or by the lease manager once the clock reads at least its expiry.
//! 2. A holder writes only while at least `lease_ns / 2` of every lease it holds is
//!    left (renewing first when less is), and its WRITEs land within that margin; so no
//!    other transaction can hold the lock before the holder's writes have landed.
//! 3. Every node's clock is the run's clock (no offset or drift on `mem` and these `sim`
//!    runs), so an expiry the owner computes is the holder's too.

mod common;
#[path = "common/toy.rs"]
mod toy;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dmtx::config::TransportKind;
use dmtx::results::BenchResult;
use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, AbortReason, Access, Clock, Cn, CoordCtx, Coordinator, Handled, Isolation, KnobError, KnobSpec, Knobs,
    Phase, Protocol, Request, Route, Rpc, ServiceStop, ServiceTask, Txn, Worker,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::msg::WorkerAddr;
use dmtx_verbs::Post;
use toy::Bank;

const KEY: usize = 0;
const VERSION: usize = 8;
const VALUE: usize = 16;

/// `key + 1 | version | value`.
struct RecLayout;

impl SlotLayout for RecLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        VALUE as u32 + value_bytes.next_multiple_of(8)
    }
    fn encode(&self, _table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        slot[KEY..VERSION].copy_from_slice(&(key + 1).to_le_bytes());
        slot[VERSION..VALUE].fill(0);
        slot[VALUE..VALUE + value.len()].copy_from_slice(value);
    }
    fn key(&self, slot: &[u8]) -> Option<u64> {
        toy::word(slot, KEY).checked_sub(1)
    }
    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        &slot[VALUE..VALUE + value_bytes as usize]
    }
}

/// What the runs did, shared with the test.
#[derive(Clone, Debug, Default)]
struct Marks {
    /// `cn_state` and `thread_state` calls.
    cn_states: Arc<AtomicU64>,
    thread_states: Arc<AtomicU64>,
    /// Lock requests granted by a node for a coordinator of another node.
    remote_grants: Arc<AtomicU64>,
    /// Requests that reached a node that does not own the key.
    misrouted: Arc<AtomicU64>,
    /// Lease renewals granted.
    renewals: Arc<AtomicU64>,
    /// Locks the lease managers reclaimed after their lease lapsed.
    reclaimed: Arc<AtomicU64>,
    /// Lock-table sweeps the lease managers ran.
    sweeps: Arc<AtomicU64>,
    /// Entries left in the lock tables when the lease managers stopped.
    locks_left: Arc<AtomicU64>,
    /// Lease managers that saw the stop.
    stopped: Arc<AtomicU64>,
    /// Committed transfers run on the node that owns the account they debit, and
    /// elsewhere.
    transfers_home: Arc<AtomicU64>,
    transfers_away: Arc<AtomicU64>,
    /// Audits routed to each node (at random, as LOTUS routes read-only transactions).
    audits_to: Arc<[AtomicU64; 3]>,
}

/// How a broken variant breaks the protocol.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Variant {
    Correct,
    /// Unlocks before the commit's WRITEs land: another transaction can lock, read the
    /// old value and overwrite the update.
    ReleaseBeforeWrite,
    /// Never unlocks after an abort, as a holder that crashed would: its locks stay until
    /// the lease manager reclaims them. Still correct.
    ForgetOnAbort,
}

/// Test-only lock table on compute nodes with leases.
struct LeaseLocks {
    nodes: u16,
    lease_ns: u64,
    variant: Variant,
    /// Run each transfer on the node that owns the account it debits (LOTUS's routing).
    routing: bool,
    marks: Marks,
}

/// A node's locks: (table, key) → (holder's txn id, expiry ns of the run's clock).
#[derive(Default)]
struct LockTable {
    locks: Mutex<HashMap<(u32, u64), (u64, u64)>>,
}

#[derive(Debug, Default)]
struct LockObj {
    /// Bucket to read next while locating, and the table-relative slot offset.
    at: (Option<u64>, Option<u64>),
    /// The lock is held, until this expiry.
    expires_ns: Option<u64>,
}

const OP_LOCK: u8 = 1;
const OP_RENEW: u8 = 2;
const OP_UNLOCK: u8 = 3;

fn request(op: u8, table: u32, key: u64, txn: u64) -> Vec<u8> {
    let mut r = vec![op];
    r.extend_from_slice(&table.to_le_bytes());
    r.extend_from_slice(&key.to_le_bytes());
    r.extend_from_slice(&txn.to_le_bytes());
    r
}

impl LeaseLocks {
    fn new(nodes: u16, variant: Variant, marks: &Marks) -> Self {
        Self {
            nodes,
            lease_ns: 200_000,
            variant,
            routing: false,
            marks: marks.clone(),
        }
    }

    /// With leases of `ns`.
    fn lease_ns(self, ns: u64) -> Self {
        Self { lease_ns: ns, ..self }
    }

    fn owner(&self, key: u64) -> u16 {
        (key % u64::from(self.nodes)) as u16
    }

    /// Serve one request on node `cn` (invariant 1).
    fn handle(&self, cn: u16, table: &LockTable, clock: &dyn Clock, req: Request<'_>, reply: &mut Vec<u8>) {
        let p = req.payload;
        let (op, t, key, txn) = (
            p[0],
            u32::from_le_bytes(p[1..5].try_into().unwrap()),
            toy::word(p, 5),
            toy::word(p, 13),
        );
        if self.owner(key) != cn {
            self.marks.misrouted.fetch_add(1, Ordering::Relaxed);
        }
        let now = clock.now_ns();
        let mut locks = table.locks.lock().unwrap();
        let granted = match (op, locks.get(&(t, key)).copied()) {
            // A retried request of the holder is granted again (idempotent per txn).
            (OP_LOCK, None) => Some(now + self.lease_ns),
            (OP_LOCK | OP_RENEW, Some((holder, expires))) if holder == txn && now < expires => {
                if op == OP_RENEW {
                    self.marks.renewals.fetch_add(1, Ordering::Relaxed);
                    Some(now + self.lease_ns)
                } else {
                    Some(expires)
                }
            }
            (OP_UNLOCK, Some((holder, _))) if holder == txn => {
                locks.remove(&(t, key));
                None
            }
            _ => None,
        };
        if let Some(expires) = granted {
            locks.insert((t, key), (txn, expires));
            if op == OP_LOCK && req.from.cn != cn {
                self.marks.remote_grants.fetch_add(1, Ordering::Relaxed);
            }
            reply.push(1);
            reply.extend_from_slice(&expires.to_le_bytes());
        }
    }

    /// The lease manager of one node: every half lease, reclaim the locks whose lease
    /// lapsed (invariant 1); when the run is over, count what is left.
    async fn manage(self: Arc<Self>, table: Arc<LockTable>, clock: Arc<dyn Clock>, stop: ServiceStop) {
        let period = self.lease_ns / 2;
        while stop.sleep_until(clock.as_ref(), clock.now_ns() + period).await {
            let now = clock.now_ns();
            let mut locks = table.locks.lock().unwrap();
            let before = locks.len();
            locks.retain(|_, &mut (_, expires)| now < expires);
            self.marks
                .reclaimed
                .fetch_add((before - locks.len()) as u64, Ordering::Relaxed);
            self.marks.sweeps.fetch_add(1, Ordering::Relaxed);
        }
        let left = table.locks.lock().unwrap().len() as u64;
        self.marks.locks_left.fetch_add(left, Ordering::Relaxed);
        self.marks.stopped.fetch_add(1, Ordering::Relaxed);
    }

    fn dest(coord: &Coordinator<Self>, key: u64) -> WorkerAddr {
        WorkerAddr::new(coord.proto.owner(key), coord.ctx.id.thread)
    }

    /// Lock (or renew) objects `idx` with one RPC round; false when any was refused.
    async fn lock(coord: &mut Coordinator<Self>, op: u8, idx: &[usize]) -> Result<bool, Abort> {
        let rpc = Rc::clone(coord.ctx.rpc.as_ref().expect("a messaging protocol has an Rpc"));
        let reqs: Vec<(WorkerAddr, Vec<u8>)> = idx
            .iter()
            .map(|&i| {
                let o = &coord.set.objs[i];
                (Self::dest(coord, o.key), request(op, o.table, o.key, coord.set.txn_id))
            })
            .collect();
        let refs: Vec<(WorkerAddr, &[u8])> = reqs.iter().map(|(a, r)| (*a, r.as_slice())).collect();
        let replies = rpc.call_many(&refs).await;
        let mut all = true;
        for (&i, reply) in idx.iter().zip(replies) {
            let reply = reply.map_err(|_| Abort::new(AbortReason::Fault))?;
            match reply.first() {
                Some(1) => coord.set.objs[i].proto.expires_ns = Some(toy::word(&reply, 1)),
                _ => all = false,
            }
        }
        Ok(all)
    }

    /// Unlock every held object with one RPC round.
    async fn unlock(coord: &mut Coordinator<Self>) {
        let held: Vec<usize> = (0..coord.set.objs.len())
            .filter(|&i| coord.set.objs[i].proto.expires_ns.is_some())
            .collect();
        if held.is_empty() {
            return;
        }
        let _ = Self::lock(coord, OP_UNLOCK, &held).await;
        for i in held {
            coord.set.objs[i].proto.expires_ns = None;
        }
    }
}

fn fault(_: dmtx_verbs::VerbError) -> Abort {
    Abort::new(AbortReason::Fault)
}

impl Protocol for LeaseLocks {
    type CoordState = ();
    type ObjState = LockObj;
    type CnState = LockTable;
    type ThreadState = ();
    const NAME: &'static str = "toy-lease-locks";
    const ABOUT: &'static str = "test-only lock table on compute nodes with leases";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self::new(1, Variant::Correct, &Marks::default()))
    }
    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }
    fn messaging(&self) -> bool {
        true
    }
    fn routes(&self) -> bool {
        self.routing
    }
    /// Transfers to the owner of the debited account, audits to a random node.
    fn route(&self, txn: &Route) -> u16 {
        assert_eq!(txn.nodes, self.nodes);
        match (self.routing, txn.key) {
            (false, _) => txn.from,
            (true, Some(key)) => self.owner(key),
            (true, None) => {
                let to = (txn.random % u64::from(txn.nodes)) as u16;
                self.marks.audits_to[to as usize].fetch_add(1, Ordering::Relaxed);
                to
            }
        }
    }
    fn layout(&self) -> &dyn SlotLayout {
        &RecLayout
    }
    fn coord_state(&self, _: &CoordCtx, _: &dyn Control) -> dmtx_runtime::Result<()> {
        Ok(())
    }

    fn cn_state(&self, cn: &Cn) -> dmtx_runtime::Result<LockTable> {
        assert!(cn.id < self.nodes, "node {} of {}", cn.id, self.nodes);
        self.marks.cn_states.fetch_add(1, Ordering::Relaxed);
        Ok(LockTable::default())
    }

    /// Serve this node's locks on this thread.
    fn thread_state(&self, table: &Arc<LockTable>, worker: &Worker) -> dmtx_runtime::Result<()> {
        self.marks.thread_states.fetch_add(1, Ordering::Relaxed);
        let rpc = worker.rpc().expect("a messaging protocol's worker has an Rpc");
        let me = Arc::new(Self {
            marks: self.marks.clone(),
            ..*self
        });
        let (table, clock, cn) = (Arc::clone(table), Arc::clone(&worker.cn().clock), worker.cn().id);
        rpc.set_handler(move |_: &Rpc, req: Request<'_>, reply: &mut Vec<u8>| {
            me.handle(cn, &table, clock.as_ref(), req, reply);
            Handled::Reply
        });
        Ok(())
    }

    /// Thread 0 of every node runs the node's lease manager.
    fn services(&self, table: &Arc<LockTable>, _: &Rc<()>, worker: &Worker, stop: &ServiceStop) -> Vec<ServiceTask> {
        if worker.thread() != 0 {
            return Vec::new();
        }
        let me = Arc::new(Self {
            marks: self.marks.clone(),
            ..*self
        });
        vec![Box::pin(me.manage(
            Arc::clone(table),
            Arc::clone(&worker.cn().clock),
            stop.clone(),
        ))]
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        let (from, n) = (coord.set.fetched, coord.set.objs.len());
        toy::locate(coord, from, |o: &mut LockObj| &mut o.at).await?;
        let idx: Vec<usize> = (from..n).collect();
        // Locks granted before a refusal are recorded: the cleanup releases them.
        if !Self::lock(coord, OP_LOCK, &idx).await? {
            return Err(Abort::new(AbortReason::LockConflict));
        }
        let catalog = Arc::clone(&coord.ctx.catalog);
        let mut post = Post::new();
        let reads: Vec<_> = idx
            .iter()
            .map(|&i| {
                let o = &coord.set.objs[i];
                let info = catalog.get(o.table).unwrap();
                post.read(info.ptr(0, o.proto.at.1.unwrap()), info.shape.slot_bytes as usize)
            })
            .collect();
        coord.ctx.post(&mut post).await.map_err(fault)?;
        for (&i, read) in idx.iter().zip(reads) {
            let slot = post.bytes(read).to_vec();
            let o = &mut coord.set.objs[i];
            o.version_read = Some(toy::word(&slot, VERSION));
            let len = o.value_len as usize;
            coord.set.value_mut(i).copy_from_slice(&slot[VALUE..VALUE + len]);
        }
        coord.set.fetched = n;
        Ok(())
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        // Invariant 2: renew what has less than half its lease left.
        let margin = coord.proto.lease_ns / 2;
        let now = coord.ctx.clock.now_ns();
        let short: Vec<usize> = (0..coord.set.objs.len())
            .filter(|&i| coord.set.objs[i].proto.expires_ns.is_some_and(|e| e < now + margin))
            .collect();
        if !short.is_empty() && !Self::lock(coord, OP_RENEW, &short).await? {
            return Err(Abort::new(AbortReason::Validation));
        }
        // A renewal that took half a lease itself leaves too little: give up.
        let now = coord.ctx.clock.now_ns();
        if !coord
            .set
            .objs
            .iter()
            .all(|o| o.proto.expires_ns.is_some_and(|e| e >= now + margin))
        {
            return Err(Abort::new(AbortReason::Validation));
        }
        if coord.proto.variant == Variant::ReleaseBeforeWrite {
            Self::unlock(coord).await;
        }
        let catalog = Arc::clone(&coord.ctx.catalog);
        let mut post = Post::new();
        for i in 0..coord.set.objs.len() {
            let o = &coord.set.objs[i];
            if o.access != Access::ReadWrite {
                continue;
            }
            let ptr = catalog
                .get(o.table)
                .unwrap()
                .ptr(0, o.proto.at.1.unwrap() + VERSION as u64);
            let mut image = coord.set.txn_id.to_le_bytes().to_vec();
            image.extend_from_slice(coord.set.value(i));
            post.write(ptr, &image);
        }
        if !post.is_empty() {
            coord.ctx.post(&mut post).await.map_err(fault)?;
            let home = coord.proto.owner(coord.set.objs[0].key) == coord.ctx.id.cn;
            let m = &coord.proto.marks;
            if home { &m.transfers_home } else { &m.transfers_away }.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Nothing: an unlock is an RPC, so it is the cleanup's.
    fn abort(_: &mut Txn<'_, Self>) {}

    async fn cleanup(coord: &mut Coordinator<Self>) {
        if coord.proto.variant == Variant::ForgetOnAbort && matches!(coord.set.phase, Phase::Aborted(_)) {
            for o in &mut coord.set.objs {
                o.proto.expires_ns = None;
            }
            return;
        }
        Self::unlock(coord).await;
    }
}

fn bank() -> Bank {
    Bank { accounts: 12 }
}

/// A `mem` run of 3 nodes of one thread each (a host of two cores is shared by them),
/// until 80 commits: how long that takes depends on the host's load, and round trips
/// between spinning threads on a busy host take a time slice.
fn mem_config(seed: u64) -> dmtx::BenchConfig {
    let mut cfg = toy::config(LeaseLocks::NAME, TransportKind::Mem, "1s", 3, seed);
    cfg.threads = 1;
    cfg.stop = dmtx::config::StopRule::Txns(80);
    cfg
}

/// What every correct run shows.
fn assert_correct(r: &BenchResult, marks: &Marks, workers: u64) {
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    let check = r.check.as_ref().expect("--check on a serializable protocol");
    assert!(check.clean, "{}", check.summary);
    let t = &r.per_txn_type["transfer"];
    assert!(t.committed > 10, "{t:?}");
    assert!(r.per_txn_type["audit"].committed > 10);
    assert_eq!(marks.cn_states.load(Ordering::Relaxed), 3, "one lock table per node");
    assert_eq!(
        marks.thread_states.load(Ordering::Relaxed),
        workers,
        "one handler per thread"
    );
    assert_eq!(marks.misrouted.load(Ordering::Relaxed), 0);
    assert!(
        marks.remote_grants.load(Ordering::Relaxed) > 0,
        "locks served across nodes"
    );
    assert!(marks.sweeps.load(Ordering::Relaxed) > 0, "the lease managers ran");
    assert_eq!(marks.stopped.load(Ordering::Relaxed), 3, "every lease manager ended");
    // Each committed transfer locked two keys, read them, wrote them: no lock word in
    // memory, so no CAS; the unlocks are the cleanup's RPCs.
    let ops = t.ops_per_commit.unwrap();
    assert_eq!((ops.cas, ops.faa), (0.0, 0.0), "{t:?}");
}

#[test]
fn lease_locks_on_three_compute_nodes_on_mem() {
    let marks = Marks::default();
    let cfg = mem_config(1);
    // Leases far beyond a thread's time slice, so a descheduled holder renews in time.
    let proto = LeaseLocks::new(3, Variant::Correct, &marks).lease_ns(50_000_000);
    let r = toy::run(proto, bank(), &cfg);
    assert_correct(&r, &marks, 3);
    assert_eq!(marks.locks_left.load(Ordering::Relaxed), 0, "every lock was released");
}

#[test]
fn lease_locks_on_three_compute_nodes_on_sim_replay_from_the_seed() {
    let go = |marks: &Marks| {
        let cfg = toy::config(LeaseLocks::NAME, TransportKind::Sim, "5ms", 3, 7);
        toy::run(LeaseLocks::new(3, Variant::Correct, marks), bank(), &cfg)
    };
    let marks = Marks::default();
    let r = go(&marks);
    assert_correct(&r, &marks, 6);
    assert_eq!(marks.locks_left.load(Ordering::Relaxed), 0, "every lock was released");
    let again = go(&Marks::default());
    let counts = |r: &BenchResult| {
        let sim = r.sim.as_ref().unwrap();
        (
            r.committed,
            r.aborted,
            sim.events,
            sim.verbs,
            r.per_txn_type["transfer"].committed,
        )
    };
    assert_eq!(counts(&r), counts(&again), "same seed, same run");
}

/// Goal: locks whose holder never releases them are reclaimed once their lease lapses,
/// and the run stays correct. Method: the variant that forgets its locks after an
/// abort, on `sim` for 40 lease periods.
#[test]
fn the_lease_manager_reclaims_forgotten_locks() {
    let marks = Marks::default();
    let cfg = toy::config(LeaseLocks::NAME, TransportKind::Sim, "8ms", 3, 3);
    let r = toy::run(LeaseLocks::new(3, Variant::ForgetOnAbort, &marks), bank(), &cfg);
    assert!(r.aborted > 0);
    assert!(marks.reclaimed.load(Ordering::Relaxed) > 0, "{marks:?}");
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    assert!(r.check.as_ref().unwrap().clean, "{}", r.check.as_ref().unwrap().summary);
    assert!(
        r.per_txn_type["transfer"].committed > 10,
        "{:?} {marks:?}",
        r.per_txn_type
    );
}

/// Goal: releasing the locks before the writes land is caught by the checker or the
/// sum invariant within a few seeds. Method: the variant on `sim`, seeds 1 to 5 (on
/// `mem` its window, one unlock reply before an inline WRITE, is rarely hit).
#[test]
fn releasing_before_the_write_lands_is_caught() {
    let seed = (1..=5).find(|&seed| {
        let cfg = toy::config(LeaseLocks::NAME, TransportKind::Sim, "3ms", 3, seed);
        let marks = Marks::default();
        toy::caught(&toy::run(
            LeaseLocks::new(3, Variant::ReleaseBeforeWrite, &marks),
            bank(),
            &cfg,
        ))
    });
    assert!(seed.is_some(), "the broken variant passed 5 seeds");
}

/// Goal: a holder whose lease runs short renews it before writing, and the run stays
/// correct. Method: leases of 10 µs on `sim`, shorter than a contended transaction.
#[test]
fn short_leases_are_renewed_before_the_writes() {
    let marks = Marks::default();
    let cfg = toy::config(LeaseLocks::NAME, TransportKind::Sim, "3ms", 3, 5);
    let r = toy::run(
        LeaseLocks::new(3, Variant::Correct, &marks).lease_ns(10_000),
        bank(),
        &cfg,
    );
    assert!(marks.renewals.load(Ordering::Relaxed) > 0, "{marks:?}");
    assert!(r.committed > 0);
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    assert!(r.check.as_ref().unwrap().clean, "{}", r.check.as_ref().unwrap().summary);
}

/// Goal: a protocol that routes transactions runs each on the node it names, in one
/// process, and stays correct. Method: transfers routed to the node owning the account
/// they debit (the workload's `route_key`), audits to a random node (`Route::random`),
/// on `sim` and `mem` with 3 nodes; without routing two thirds of the transfers run
/// elsewhere.
#[test]
fn routed_transfers_run_on_the_owner_of_their_account() {
    for transport in [TransportKind::Sim, TransportKind::Mem] {
        let run = |routing: bool| {
            let marks = Marks::default();
            let mut proto = LeaseLocks::new(3, Variant::Correct, &marks);
            proto.routing = routing;
            let cfg = match transport {
                TransportKind::Sim => toy::config(LeaseLocks::NAME, transport, "4ms", 3, 11),
                TransportKind::Mem => {
                    proto = proto.lease_ns(50_000_000);
                    mem_config(11)
                }
            };
            let r = toy::run(proto, bank(), &cfg);
            assert!(r.invariant.ok, "{transport:?}: {}", r.invariant.detail);
            assert!(r.check.as_ref().unwrap().clean, "{transport:?}");
            let (home, away) = (
                marks.transfers_home.load(Ordering::Relaxed),
                marks.transfers_away.load(Ordering::Relaxed),
            );
            assert!(home + away > 10, "{transport:?}: {home} + {away} transfers");
            if routing {
                let audits = marks.audits_to.each_ref().map(|a| a.load(Ordering::Relaxed));
                assert!(audits.iter().all(|&n| n > 0), "{transport:?}: audits routed {audits:?}");
            }
            (home, away)
        };
        let (home, away) = run(true);
        // A budget handed back after the others stopped drawing may reach a node whose
        // coordinators all left (mem's threads race there; sim replays one order).
        let away_max = if transport == TransportKind::Sim { 0 } else { 3 };
        assert!(
            away <= away_max,
            "{transport:?}: {away} of {} routed transfers ran away",
            home + away
        );
        let (home, away) = run(false);
        assert!(
            away > home / 2,
            "{transport:?}: unrouted, {home} at home and {away} away"
        );
    }
}

/// Goal: the lock table, its RPCs and the lease managers work between compute nodes
/// that are separate runs over `tcp` (what `dmtx bench --cluster FILE --cn I` runs per
/// host): every node serves the others' lock requests until all are done, so no node's
/// transactions meet a peer that stopped serving, and the merged histories are
/// serializable. Method: one memory node process, three `--cn` runs of the driver on
/// threads of this test, each with its share of `--txns`.
#[test]
fn lease_locks_on_three_compute_nodes_over_tcp() {
    const TXNS: u64 = 240;
    let dir = common::scratch_dir("lease_locks_tcp");
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_dmtx"));
    let nodes = dmtx::cluster::LocalNodes::start(exe, 1, 64 << 20, 1, &dir.join("cluster")).unwrap();
    nodes.add_compute_nodes(3).unwrap();
    let view = dmtx::cluster::ClusterView::load(&nodes.cluster_file).unwrap();
    let marks = Marks::default();
    let results: Vec<BenchResult> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u16)
            .map(|cn| {
                let mut cfg = toy::config(LeaseLocks::NAME, TransportKind::Mem, "1s", 1, 1);
                cfg.threads = 1;
                cfg.memory_nodes = 1;
                cfg.stop = dmtx::config::StopRule::Txns(TXNS);
                cfg.history = Some(dir.join(format!("cn{cn}.history")));
                let mut v = view.clone();
                v.select_cn(cn, &nodes.cluster_file).unwrap();
                cfg.cluster = Some(v);
                let proto = LeaseLocks::new(3, Variant::Correct, &marks).lease_ns(50_000_000);
                s.spawn(move || toy::run(proto, bank(), &cfg))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().map(|r| r.committed).sum::<u64>(), TXNS);
    for (cn, r) in results.iter().enumerate() {
        assert_eq!(r.cn.as_ref().unwrap().id, cn as u16);
        assert_eq!(r.transport, "tcp");
        assert_eq!(
            r.abort_reasons.get("fault").copied().unwrap_or(0),
            0,
            "cn{cn}: no peer stopped serving early"
        );
    }
    let paths: Vec<_> = (0..3).map(|cn| dir.join(format!("cn{cn}.history"))).collect();
    let h = dmtx_check::format::read_histories(&paths).unwrap();
    let report = dmtx_check::check(&h, &dmtx_check::check_options(Isolation::Serializable));
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.committed as u64, TXNS);
    assert_eq!(marks.cn_states.load(Ordering::Relaxed), 3, "one lock table per node");
    assert_eq!(marks.misrouted.load(Ordering::Relaxed), 0);
    assert!(
        marks.remote_grants.load(Ordering::Relaxed) > 0,
        "locks served across nodes"
    );
    assert_eq!(marks.stopped.load(Ordering::Relaxed), 3, "every lease manager ended");
}

// The protocol suite.

/// The suite's options for [`LeaseLocks`] on 3 compute nodes: one replica (its commit
/// writes the primary only); no workloads (its toy locate neither inserts nor deletes,
/// which tatp and tpcc do; the others run in
/// [`lease_locks_runs_the_suites_update_only_workloads`]); no round-trip budget (the
/// suite measures budgets outside any executor, where CN↔CN calls are not driven); no
/// faults (a crashed or cut-off node's locks and calls are not recovered).
fn suite_options() -> dmtx_suite::Options {
    dmtx_suite::Options {
        replicas: vec![1],
        compute_nodes: 3,
        txns: 40,
        workloads: false,
        faults: None,
        ..dmtx_suite::Options::default()
    }
}

/// Leases long enough that a preempted `mem` thread still writes within half of one
/// (invariant 2 on a host of two cores shared by every thread).
const SUITE_LEASE_NS: u64 = 50_000_000;

/// Goal: a protocol that messages other compute nodes passes the protocol suite: its
/// locks served over CN↔CN calls on 3 compute nodes, contended bank transactions on
/// `mem`, `tcp` (messages over TCP too) and `sim` with odd value sizes, histories checked serializable with session
/// order, money and audits kept, and `sim` runs replayed bit for bit. Method:
/// `dmtx_suite::run_all` with [`suite_options`]; the lease managers ran and stopped on
/// every node of every run.
#[test]
fn lease_locks_passes_the_suite() {
    let marks = Marks::default();
    let opts = suite_options();
    let ran = dmtx_suite::run_all(
        |_| LeaseLocks::new(3, Variant::Correct, &marks).lease_ns(SUITE_LEASE_NS),
        &opts,
    );
    // 2 value sizes × 3 transports, and the determinism case.
    assert_eq!(ran.cases, 7);
    assert!(marks.remote_grants.load(Ordering::Relaxed) > 0, "{marks:?}");
    assert_eq!(marks.misrouted.load(Ordering::Relaxed), 0, "{marks:?}");
    // Every node's lease manager saw the stop, in every run (2 mem, 2 tcp, 2 + 3 sim).
    assert_eq!(marks.stopped.load(Ordering::Relaxed), 3 * 9, "{marks:?}");
}

/// Goal: the suite catches a messaging protocol's broken variant: releasing the locks
/// before the commit's writes land. Method: `dmtx_suite::assert_caught` on `sim` with 3
/// compute nodes, within 5 seeds.
#[test]
fn the_suite_catches_releasing_before_the_write_lands() {
    let marks = Marks::default();
    let setup = dmtx_suite::Setup {
        compute_nodes: 3,
        txns: 60,
        ..dmtx_suite::Setup::new(1, 20)
    };
    dmtx_suite::assert_caught(
        "release-before-write",
        || LeaseLocks::new(3, Variant::ReleaseBeforeWrite, &marks).lease_ns(SUITE_LEASE_NS),
        &setup,
        dmtx_suite::Transport::Sim,
        5,
    );
}

/// Goal: on `mem`, the suite's tear injector runs against a messaging protocol too: it
/// holds READs and WRITEs of hot records while its own transactions, and its reader's,
/// lock through the nodes' lock tables; the run stays clean. Method: the suite's `mem`
/// runner on 3 compute nodes; the injector caught ops, and transactions of its thread
/// (`threads`) and its reader's (`threads + 1`) are in the checked history.
#[test]
fn the_suites_tear_injector_runs_against_lease_locks() {
    let marks = Marks::default();
    let setup = dmtx_suite::Setup {
        compute_nodes: 3,
        txns: 40,
        ..dmtx_suite::Setup::new(1, 20)
    };
    let threads = setup.threads;
    let env = dmtx_suite::Env::bank(
        LeaseLocks::new(3, Variant::Correct, &marks).lease_ns(SUITE_LEASE_NS),
        setup,
    );
    let out = dmtx_suite::contended::run_mem(&env, 1, true);
    out.assert_clean(&env, "tears on mem", 1);
    assert!(out.stalls > 0, "the injector caught no op: {out:?}");
    for t in [threads, threads + 1] {
        assert!(
            out.history.txns.iter().any(|x| (x.coord >> 8) & 0xff == u32::from(t)),
            "no transaction of thread {t} in the history"
        );
    }
}

/// Goal: the suite's workload runner drives a messaging protocol on both transports:
/// the workloads whose transactions neither insert nor delete (kvs, smallbank, ycsb)
/// keep their invariants and pass the checker on 3 compute nodes. Method:
/// `dmtx_suite::workloads::run_named` with the suite's small knob sets, on `sim`, and
/// smallbank on `mem` too (kvs and ycsb at zipf 0.99 spend a No-Wait protocol's time on
/// lock conflicts between preempted threads there: over 15 s each on two cores).
#[test]
fn lease_locks_runs_the_suites_update_only_workloads() {
    let marks = Marks::default();
    for (i, (name, set)) in dmtx_suite::workloads::SMALL
        .iter()
        .filter(|(name, _)| ["kvs", "smallbank", "ycsb"].contains(name))
        .enumerate()
    {
        let mem = (*name == "smallbank").then_some(dmtx_suite::Transport::Mem);
        for transport in mem.into_iter().chain([dmtx_suite::Transport::Sim]) {
            let setup = dmtx_suite::Setup {
                compute_nodes: 3,
                txns: 20,
                ..dmtx_suite::Setup::new(1, 20)
            };
            let run = dmtx_suite::workloads::run_named(
                || LeaseLocks::new(3, Variant::Correct, &marks).lease_ns(SUITE_LEASE_NS),
                name,
                set,
                setup,
                transport,
                i as u64,
            );
            dmtx_suite::workloads::assert_clean(&format!("{name} on {transport:?}"), &run, i as u64);
        }
    }
    assert!(marks.remote_grants.load(Ordering::Relaxed) > 0, "{marks:?}");
}

/// Goal: asking the suite for a messaging protocol's round-trip budget fails with the
/// reason, instead of hanging on a call nothing drives. Method: `assert_budgets` with
/// one row.
#[test]
#[should_panic(expected = "leave `rtt_budget` empty")]
fn the_suite_refuses_to_measure_a_messaging_protocols_budget() {
    use dmtx_suite::{Cache, RttBudget, TxnKind};
    dmtx_suite::assert_budgets(
        || LeaseLocks::new(1, Variant::Correct, &Marks::default()),
        1,
        20,
        &[RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 1)],
    );
}
