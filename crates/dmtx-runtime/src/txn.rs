//! The Txn API (FORD §5.2 FLib: TxBegin / AddRO / AddRW / TxExecute / TxCommit).

use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use bytemuck::Pod;
use dmtx_verbs::PostCounters;

use crate::{Abort, AbortReason, CoordCtx, CoordId, Protocol};

/// A table, typed by the record `T` its values hold (`[u8]` for raw bytes).
pub struct Table<T: ?Sized = [u8]> {
    id: u32,
    _t: PhantomData<fn() -> T>,
}

impl<T: ?Sized> Table<T> {
    /// The table with id `id`.
    pub const fn new(id: u32) -> Self {
        Self { id, _t: PhantomData }
    }

    /// Its id.
    pub const fn id(&self) -> u32 {
        self.id
    }
}

impl<T: ?Sized> Clone for Table<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for Table<T> {}
impl<T: ?Sized> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({})", self.id)
    }
}

/// A handle to an object added to a transaction.
pub struct ObjRef<T: ?Sized = [u8]> {
    idx: u32,
    _t: PhantomData<fn() -> T>,
}

impl<T: ?Sized> ObjRef<T> {
    /// Position in the transaction's object list.
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}
impl<T: ?Sized> Clone for ObjRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for ObjRef<T> {}
impl<T: ?Sized> std::fmt::Debug for ObjRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjRef({})", self.idx)
    }
}

/// How a transaction uses an object.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only (AddRO).
    ReadOnly,
    /// Read, then written back (AddRW).
    ReadWrite,
    /// Created by this transaction.
    Insert,
    /// Read, then removed.
    Delete,
}

impl Access {
    /// True for accesses that lock and write.
    #[inline]
    pub fn writes(self) -> bool {
        !matches!(self, Access::ReadOnly)
    }
}

/// One object of a transaction's read/write set.
#[derive(Debug)]
pub struct Obj<S> {
    /// Table id.
    pub table: u32,
    /// Key.
    pub key: u64,
    /// How it is used.
    pub access: Access,
    /// Start of its value in the arena, in words.
    pub value_word: u32,
    /// Value length in bytes.
    pub value_len: u32,
    /// The version this transaction read (set by the protocol, for histories): its
    /// writer's id. A multi-version protocol names the version its snapshot selected,
    /// which may be older than the newest.
    pub version_read: Option<u64>,
    /// The protocol found the key absent (never inserted, or deleted): set with
    /// `version_read` naming the deleter's tombstone, or `None` when the protocol saw no
    /// version at all.
    pub read_absent: bool,
    /// The version this transaction installed (set by the protocol at commit); `None`
    /// records the transaction's id, which is what a protocol that installs writer ids
    /// would install.
    pub version_written: Option<u64>,
    /// Protocol scratch state.
    pub proto: S,
}

/// What a transaction promises at begin ([`Coordinator::begin_with`]), for protocols
/// that take a cheaper path when they know it (the read-only paths of Motor §4, LOTUS
/// §4 and OOCC §V) or that must know the whole read/write set before running (Calvin's
/// sequencer locks it up front). A protocol reads them with [`Txn::hints`].
///
/// The runtime holds the workload to each promise where it is cheap, with an assertion
/// in [`Txn`]'s add methods that stays on in release builds: a protocol trusts a hint to
/// skip work (locks, validation), so a broken promise would otherwise commit
/// unprotected writes without a sound. Breaking one is a programming error in the
/// workload, not an abort.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TxnHints {
    /// Every object is added read-only (AddRO): an add that writes (read-write,
    /// insert, delete) panics.
    pub read_only: bool,
    /// Every object is added before the first [`Txn::execute`] (or `commit`): an add
    /// after it panics, so the protocol's first `execute` sees the whole set.
    pub keys_declared: bool,
}

impl TxnHints {
    /// No promise: what [`Coordinator::begin`] gives.
    pub const NONE: Self = Self {
        read_only: false,
        keys_declared: false,
    };

    /// Promises read-only and every key declared.
    pub const READ_ONLY_DECLARED: Self = Self {
        read_only: true,
        keys_declared: true,
    };

    /// Promises every key declared, and writes.
    pub const DECLARED: Self = Self {
        read_only: false,
        keys_declared: true,
    };

    /// Promises read-only, with keys chosen from what is read.
    pub const READ_ONLY: Self = Self {
        read_only: true,
        keys_declared: false,
    };

    /// Whether these hints promise at least everything `other` does.
    pub fn covers(self, other: TxnHints) -> bool {
        (self.read_only || !other.read_only) && (self.keys_declared || !other.keys_declared)
    }
}

/// Where a transaction is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Between begin and commit/abort.
    Active,
    /// Committed.
    Committed,
    /// Aborted.
    Aborted(AbortReason),
}

/// The read/write set of the current transaction and its values. Buffers are reused
/// from one transaction to the next.
#[derive(Debug)]
pub struct TxnSet<S> {
    /// Objects in the order added.
    pub objs: Vec<Obj<S>>,
    /// Values, word-aligned so records can be viewed in place.
    pub arena: Vec<u64>,
    /// Objects before this index have been fetched by `execute`.
    pub fetched: usize,
    /// What the transaction promised at begin.
    pub hints: TxnHints,
    /// `execute` (or `commit`) has been called in this transaction: with
    /// `hints.keys_declared`, no object may be added any more.
    pub executed: bool,
    /// Per-coordinator transaction sequence number.
    pub txn_seq: u64,
    /// Cluster-unique id of the current transaction ([`CoordId::txn_id`]).
    pub txn_id: u64,
    /// Start (snapshot, read) timestamp, for protocols that take one: every read sees
    /// the versions committed at or before it. Reset to `None` at begin.
    pub start_ts: Option<u64>,
    /// Commit timestamp, for protocols that take one. Reset to `None` at begin.
    pub commit_ts: Option<u64>,
    /// Life cycle.
    pub phase: Phase,
}

impl<S> Default for TxnSet<S> {
    fn default() -> Self {
        Self {
            objs: Vec::new(),
            arena: Vec::new(),
            fetched: 0,
            hints: TxnHints::NONE,
            executed: false,
            txn_seq: 0,
            txn_id: 0,
            start_ts: None,
            commit_ts: None,
            phase: Phase::Committed,
        }
    }
}

impl<S> TxnSet<S> {
    /// The value bytes of object `i`.
    #[inline]
    pub fn value(&self, i: usize) -> &[u8] {
        let o = &self.objs[i];
        let words = &self.arena[o.value_word as usize..];
        &bytemuck::cast_slice::<u64, u8>(words)[..o.value_len as usize]
    }

    /// The value bytes of object `i`, writable.
    #[inline]
    pub fn value_mut(&mut self, i: usize) -> &mut [u8] {
        let o = &self.objs[i];
        let len = o.value_len as usize;
        let words = &mut self.arena[o.value_word as usize..];
        &mut bytemuck::cast_slice_mut::<u64, u8>(words)[..len]
    }
}

/// What an observer (history recorder) learns about each finished transaction.
#[derive(Debug)]
pub struct TxnSummary<'a> {
    /// Coordinator.
    pub coord: CoordId,
    /// Per-coordinator sequence number.
    pub txn_seq: u64,
    /// Cluster-unique transaction id (the version its writes install, unless
    /// [`ObjSummary::version_written`] names another).
    pub txn_id: u64,
    /// Clock reading at begin.
    pub start_ns: u64,
    /// Clock reading at the outcome.
    pub end_ns: u64,
    /// Start (snapshot) timestamp, when the protocol took one.
    pub start_ts: Option<u64>,
    /// Commit timestamp, when the protocol took one.
    pub commit_ts: Option<u64>,
    /// Outcome.
    pub outcome: Phase,
    /// What the transaction did to each object.
    pub objs: &'a [ObjSummary],
}

/// One object of a finished transaction, for histories.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ObjSummary {
    /// Table id.
    pub table: u32,
    /// Key.
    pub key: u64,
    /// How it was used.
    pub access: Access,
    /// The version read (its writer's id).
    pub version_read: Option<u64>,
    /// The key was found absent ([`Obj::read_absent`]).
    pub read_absent: bool,
    /// The version installed.
    pub version_written: Option<u64>,
}

/// Receives every finished transaction of a coordinator (the isolation checker's hook).
pub trait TxnObserver {
    /// Called once per transaction, after its outcome is known.
    fn on_finish(&mut self, txn: &TxnSummary<'_>);
}

/// A coordinator: one async task that runs transactions one after another.
pub struct Coordinator<P: Protocol> {
    /// Runtime resources and counters.
    pub ctx: CoordCtx,
    /// The protocol (shared by all coordinators).
    pub proto: Arc<P>,
    /// Protocol resources of this coordinator.
    pub state: P::CoordState,
    /// The compute node's protocol state ([`Protocol::cn_state`]), shared with the
    /// node's other coordinators.
    pub cn_state: Arc<P::CnState>,
    /// The worker thread's protocol state ([`Protocol::thread_state`]), shared with the
    /// thread's other coordinators and its services.
    pub thread_state: Rc<P::ThreadState>,
    /// The current transaction.
    pub set: TxnSet<P::ObjState>,
    observer: Option<Box<dyn TxnObserver>>,
    start_ns: u64,
    summary_buf: Vec<ObjSummary>,
    /// An attempt finished and [`Coordinator::cleanup`] has not run for it yet.
    cleanup_due: bool,
}

impl<P: Protocol> Coordinator<P> {
    /// A coordinator with its protocol state. Its node and thread state are fresh
    /// defaults, its own; [`crate::Worker::coordinator`] gives it those of its node and
    /// thread.
    pub fn new(ctx: CoordCtx, proto: Arc<P>, state: P::CoordState) -> Self {
        Self {
            ctx,
            proto,
            state,
            cn_state: Arc::default(),
            thread_state: Rc::default(),
            set: TxnSet::default(),
            observer: None,
            start_ns: 0,
            summary_buf: Vec::new(),
            cleanup_due: false,
        }
    }

    /// Report every finished transaction to `observer`.
    pub fn set_observer(&mut self, observer: Box<dyn TxnObserver>) {
        self.observer = Some(observer);
    }

    /// Take the observer back.
    pub fn take_observer(&mut self) -> Option<Box<dyn TxnObserver>> {
        self.observer.take()
    }

    /// Run the protocol's per-attempt cleanup ([`Protocol::cleanup`]) for the attempt
    /// that just finished, and return what it posted. Whoever runs transactions awaits it
    /// after every attempt, before the next `begin` (the driver does). Runs once per
    /// attempt: a second call, or a call before any attempt finished, does nothing.
    ///
    /// Its posts are counted apart: `ctx.txn_counters` holds the attempt's counters
    /// before and after, and the cleanup's are returned. Then every deferred post
    /// ([`CoordCtx::post_deferred`]) of the attempt or the cleanup is waited for; a
    /// failed one is kept as `ctx.last_fault`.
    pub async fn cleanup(&mut self) -> PostCounters {
        assert!(self.set.phase != Phase::Active, "cleanup while a transaction is active");
        let mut spent = PostCounters::default();
        if std::mem::take(&mut self.cleanup_due) {
            let attempt = std::mem::take(&mut self.ctx.txn_counters);
            P::cleanup(self).await;
            spent = std::mem::replace(&mut self.ctx.txn_counters, attempt);
        }
        if self.ctx.deferred_in_flight() > 0 {
            let _ = self.ctx.settle_deferred().await;
        }
        spent
    }

    /// Finish the coordinator's background work ([`Protocol::drain`]) before it stops,
    /// after the last attempt's cleanup (run here if still due), and wait for every
    /// deferred post; returns what the cleanup and the drain posted. `ctx.txn_counters`
    /// is left as it was.
    pub async fn drain(&mut self) -> PostCounters {
        let mut spent = self.cleanup().await;
        let attempt = std::mem::take(&mut self.ctx.txn_counters);
        P::drain(self).await;
        spent.add(&std::mem::replace(&mut self.ctx.txn_counters, attempt));
        if self.ctx.deferred_in_flight() > 0 {
            let _ = self.ctx.settle_deferred().await;
        }
        debug_assert_eq!(self.ctx.deferred_in_flight(), 0, "nothing in flight after the drain");
        spent
    }

    /// Start a transaction (TxBegin) that promises nothing ([`TxnHints::NONE`]).
    pub fn begin(&mut self) -> Txn<'_, P> {
        self.begin_with(TxnHints::NONE)
    }

    /// Start a transaction (TxBegin) that promises `hints`; the protocol reads them with
    /// [`Txn::hints`].
    ///
    /// # Panics
    ///
    /// When a transaction is active, or when the protocol requires declared keys
    /// ([`Protocol::requires_declared_keys`]) and `hints` does not promise them: the
    /// registry refuses such a protocol and workload pair before a run, so reaching this
    /// is a caller that bypassed it.
    pub fn begin_with(&mut self, hints: TxnHints) -> Txn<'_, P> {
        assert!(self.set.phase != Phase::Active, "begin while a transaction is active");
        assert!(
            hints.keys_declared || !self.proto.requires_declared_keys(),
            "protocol `{}` requires every key declared before the first execute, and this \
             transaction was begun without `keys_declared`; run the protocol on a workload \
             whose transactions declare their keys (`dmtx list` shows which)",
            P::NAME
        );
        self.set.objs.clear();
        self.set.arena.clear();
        self.set.fetched = 0;
        self.set.hints = hints;
        self.set.executed = false;
        self.set.txn_seq += 1;
        self.set.txn_id = self.ctx.id.txn_id(self.set.txn_seq);
        self.set.start_ts = None;
        self.set.commit_ts = None;
        self.set.phase = Phase::Active;
        self.ctx.txn_counters = Default::default();
        if self.observer.is_some() {
            self.start_ns = self.ctx.clock.now_ns();
        }
        Txn { coord: self }
    }

    fn finish(&mut self, phase: Phase) {
        self.set.phase = phase;
        self.cleanup_due = true;
        if let Some(obs) = self.observer.as_mut() {
            self.summary_buf.clear();
            self.summary_buf.extend(self.set.objs.iter().map(|o| ObjSummary {
                table: o.table,
                key: o.key,
                access: o.access,
                version_read: o.version_read,
                read_absent: o.read_absent,
                version_written: o.version_written,
            }));
            obs.on_finish(&TxnSummary {
                coord: self.ctx.id,
                txn_seq: self.set.txn_seq,
                txn_id: self.set.txn_id,
                start_ns: self.start_ns,
                end_ns: self.ctx.clock.now_ns(),
                start_ts: self.set.start_ts,
                commit_ts: self.set.commit_ts,
                outcome: phase,
                objs: &self.summary_buf,
            });
        }
    }
}

/// The CPU step charged for every record a workload adds to a transaction (its key
/// computation and bookkeeping).
pub const STEP_ADD: &str = "txn.add";

/// A transaction in progress. Dropping it without `commit` aborts it.
pub struct Txn<'c, P: Protocol> {
    /// The coordinator running it (protocols reach their state through this).
    pub coord: &'c mut Coordinator<P>,
}

impl<'c, P: Protocol> Txn<'c, P> {
    /// This transaction's cluster-unique id.
    pub fn id(&self) -> u64 {
        self.coord.set.txn_id
    }

    /// The coordinator running it.
    pub fn coord_id(&self) -> CoordId {
        self.coord.ctx.id
    }

    /// What it promised at begin ([`Coordinator::begin_with`]).
    #[inline]
    pub fn hints(&self) -> TxnHints {
        self.coord.set.hints
    }

    fn add<T: ?Sized>(&mut self, table: u32, key: u64, access: Access) -> ObjRef<T> {
        assert_eq!(self.coord.set.phase, Phase::Active, "add to a finished transaction");
        let hints = self.coord.set.hints;
        assert!(
            !(hints.read_only && access.writes()),
            "table {table} key {key} added as {access:?} to a transaction begun read-only; \
             begin it without `read_only` (TxnHints) or add the key with add_ro"
        );
        assert!(
            !(hints.keys_declared && self.coord.set.executed),
            "table {table} key {key} added after the first execute of a transaction begun \
             with `keys_declared`; add every key before execute, or begin it without \
             `keys_declared` (TxnHints)"
        );
        self.coord.ctx.step(STEP_ADD, 1);
        let value_len = match self.coord.ctx.catalog.get(table) {
            Ok(t) => t.meta.value_bytes,
            Err(e) => panic!("{e}: the workload names a table it did not create"),
        };
        let set = &mut self.coord.set;
        debug_assert!(
            !set.objs.iter().any(|o| o.table == table && o.key == key),
            "table {table} key {key} added twice to one transaction"
        );
        let value_word = set.arena.len();
        set.arena.resize(value_word + (value_len as usize).div_ceil(8), 0);
        set.objs.push(Obj {
            table,
            key,
            access,
            value_word: value_word as u32,
            value_len,
            version_read: None,
            read_absent: false,
            version_written: None,
            proto: P::ObjState::default(),
        });
        ObjRef {
            idx: set.objs.len() as u32 - 1,
            _t: PhantomData,
        }
    }

    /// `n` units of the workload's own CPU work named `name` (see [`crate::Probe`]):
    /// what a model charges beyond the per-record [`STEP_ADD`].
    #[inline]
    pub fn step(&self, name: &'static str, n: u32) {
        self.coord.ctx.step(name, n);
    }

    /// Add a record to read (AddRO).
    pub fn add_ro<T: ?Sized>(&mut self, table: Table<T>, key: u64) -> ObjRef<T> {
        self.add(table.id, key, Access::ReadOnly)
    }

    /// Add a record to read and update (AddRW).
    pub fn add_rw<T: ?Sized>(&mut self, table: Table<T>, key: u64) -> ObjRef<T> {
        self.add(table.id, key, Access::ReadWrite)
    }

    /// Add a record to create; its value starts zeroed, fill it before commit.
    pub fn add_insert<T: ?Sized>(&mut self, table: Table<T>, key: u64) -> ObjRef<T> {
        self.add(table.id, key, Access::Insert)
    }

    /// Add a record to delete.
    pub fn add_delete<T: ?Sized>(&mut self, table: Table<T>, key: u64) -> ObjRef<T> {
        self.add(table.id, key, Access::Delete)
    }

    /// Fetch everything added since the last call (TxExecute). May be called several
    /// times. On `Err` the transaction is over and its locks are being released.
    pub async fn execute(&mut self) -> Result<(), Abort> {
        match self.coord.set.phase {
            Phase::Active => {}
            Phase::Aborted(reason) => return Err(Abort::new(reason)),
            Phase::Committed => panic!("execute after commit"),
        }
        self.coord.set.executed = true;
        if self.coord.set.fetched == self.coord.set.objs.len() {
            return Ok(());
        }
        let res = P::execute(self).await;
        match res {
            Ok(()) => {
                debug_assert_eq!(self.coord.set.fetched, self.coord.set.objs.len());
                Ok(())
            }
            Err(abort) => Err(self.fail(abort)),
        }
    }

    fn fail(&mut self, abort: Abort) -> Abort {
        P::abort(self);
        self.coord.finish(Phase::Aborted(abort.reason));
        abort
    }

    fn check_fetched(&self, i: usize) {
        assert!(
            i < self.coord.set.fetched,
            "object {i} read before execute() fetched it"
        );
    }

    /// The value of a fetched object as raw bytes.
    pub fn bytes<T: ?Sized>(&self, obj: ObjRef<T>) -> &[u8] {
        self.check_fetched(obj.index());
        self.coord.set.value(obj.index())
    }

    /// The value of a fetched read-write or inserted object, writable.
    pub fn bytes_mut<T: ?Sized>(&mut self, obj: ObjRef<T>) -> &mut [u8] {
        self.check_fetched(obj.index());
        let access = self.coord.set.objs[obj.index()].access;
        assert!(
            matches!(access, Access::ReadWrite | Access::Insert),
            "object {} is {access:?}; only read-write and inserted objects can be written",
            obj.index()
        );
        self.coord.set.value_mut(obj.index())
    }

    /// The fetched record, viewed in place.
    pub fn get<T: Pod>(&self, obj: ObjRef<T>) -> &T {
        let b = self.bytes(obj);
        bytemuck::from_bytes(&b[..std::mem::size_of::<T>()])
    }

    /// The fetched record, writable in place.
    pub fn get_mut<T: Pod>(&mut self, obj: ObjRef<T>) -> &mut T {
        let b = self.bytes_mut(obj);
        bytemuck::from_bytes_mut(&mut b[..std::mem::size_of::<T>()])
    }

    /// Validate and commit (TxCommit). Fetches anything still pending first.
    pub async fn commit(mut self) -> Result<(), Abort> {
        self.execute().await?;
        match P::commit(&mut self).await {
            Ok(()) => {
                self.coord.finish(Phase::Committed);
                Ok(())
            }
            Err(abort) => Err(self.fail(abort)),
        }
    }

    /// Give up (the workload's own decision); returns the abort to hand back.
    pub fn abort(mut self) -> Abort {
        self.fail(Abort::new(AbortReason::User))
    }
}

impl<P: Protocol> Drop for Txn<'_, P> {
    fn drop(&mut self) {
        if self.coord.set.phase == Phase::Active {
            self.fail(Abort::new(AbortReason::User));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use dmtx_memnode::Control;
    use dmtx_store::{Catalog, SlotLayout};

    use super::*;
    use crate::{block_on, AddrCache, Isolation, KnobError, KnobSpec, Knobs, RealClock, SharedAddrCache};

    struct NoLayout;

    impl SlotLayout for NoLayout {
        fn slot_bytes(&self, value_bytes: u32) -> u32 {
            value_bytes
        }
        fn encode(&self, _: u32, _: u64, _: &[u8], _: &mut [u8]) {}
        fn key(&self, _: &[u8]) -> Option<u64> {
            None
        }
        fn value<'a>(&self, slot: &'a [u8], _: u32) -> &'a [u8] {
            slot
        }
    }

    /// A protocol that takes start and commit timestamps in odd transactions only, reads
    /// odd keys absent (even keys at version `key`) and installs version `100 + key`.
    struct OddStamps(NoLayout);

    impl Protocol for OddStamps {
        type CoordState = ();
        type ObjState = ();
        type CnState = ();
        type ThreadState = ();
        const NAME: &'static str = "odd-stamps";
        const ABOUT: &'static str = "test protocol";
        const KNOBS: &'static [KnobSpec] = &[];

        fn from_knobs(_: &Knobs) -> std::result::Result<Self, KnobError> {
            Ok(OddStamps(NoLayout))
        }
        fn isolation(&self) -> Isolation {
            Isolation::SnapshotIsolation
        }
        fn layout(&self) -> &dyn SlotLayout {
            &self.0
        }
        fn coord_state(&self, _: &CoordCtx, _: &dyn Control) -> crate::Result<()> {
            Ok(())
        }
        async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            let set = &mut txn.coord.set;
            for o in &mut set.objs[set.fetched..] {
                o.read_absent = o.key % 2 == 1;
                o.version_read = (o.key % 2 == 0).then_some(o.key);
            }
            set.fetched = set.objs.len();
            Ok(())
        }
        async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            let set = &mut txn.coord.set;
            for o in set.objs.iter_mut().filter(|o| o.access.writes()) {
                o.version_written = Some(100 + o.key);
            }
            if set.txn_seq % 2 == 1 {
                set.start_ts = Some(10 * set.txn_seq);
                set.commit_ts = Some(10 * set.txn_seq + 1);
            }
            Ok(())
        }
        fn abort(_: &mut Txn<'_, Self>) {}
    }

    type Stamps = Rc<RefCell<Vec<(u64, Option<u64>, Option<u64>)>>>;

    struct Seen(Stamps, Rc<RefCell<Vec<ObjSummary>>>);

    impl TxnObserver for Seen {
        fn on_finish(&mut self, t: &TxnSummary<'_>) {
            self.0.borrow_mut().push((t.txn_seq, t.start_ts, t.commit_ts));
            self.1.borrow_mut().extend_from_slice(t.objs);
        }
    }

    /// Goal: the observer receives the timestamps a protocol took, and a transaction
    /// that takes none reports none (begin resets what the last one took). Method: a
    /// protocol that stamps odd transactions only, three transactions, what the
    /// observer saw.
    #[test]
    fn observer_sees_the_timestamps_of_each_transaction_only() {
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let ctx = CoordCtx::new(
            CoordId {
                cn: 0,
                thread: 0,
                coroutine: 1,
            },
            Rc::new(fabric.transport()),
            Arc::new(RealClock::new()),
            Arc::new(Catalog::default()),
            Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
        );
        let mut c = Coordinator::new(ctx, Arc::new(OddStamps(NoLayout)), ());
        let seen = Stamps::default();
        c.set_observer(Box::new(Seen(seen.clone(), Default::default())));
        for _ in 0..3 {
            block_on(c.begin().commit()).unwrap();
        }
        assert_eq!(
            *seen.borrow(),
            [(1, Some(10), Some(11)), (2, None, None), (3, Some(30), Some(31))]
        );
    }

    /// Goal: the observer receives, per object, the version the protocol read, whether
    /// it found the key absent, and the version it installed. Method: one transaction
    /// reading key 2 and writing key 3 on a one-table catalog.
    #[test]
    fn observer_sees_what_the_protocol_read_and_installed() {
        let meta = dmtx_memnode::TableMeta {
            id: 0,
            name: "t".into(),
            value_bytes: 8,
            slot_bytes: 8,
            slots_per_bucket: 1,
            bucket_bytes: 8,
            bucket_count: 1,
            overflow_bucket_count: 0,
            runs: None,
            value_region: None,
            attrs: Vec::new(),
            replicas: vec![(dmtx_verbs::MnId(0), 0)],
        };
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let ctx = CoordCtx::new(
            CoordId {
                cn: 0,
                thread: 0,
                coroutine: 1,
            },
            Rc::new(fabric.transport()),
            Arc::new(RealClock::new()),
            Arc::new(Catalog::from_metas([meta])),
            Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
        );
        let mut c = Coordinator::new(ctx, Arc::new(OddStamps(NoLayout)), ());
        let objs: Rc<RefCell<Vec<ObjSummary>>> = Default::default();
        c.set_observer(Box::new(Seen(Default::default(), objs.clone())));
        let t: Table = Table::new(0);
        let mut tx = c.begin();
        tx.add_ro(t, 2);
        tx.add_rw(t, 3);
        block_on(tx.commit()).unwrap();
        let o = |key, access, version_read, read_absent, version_written| ObjSummary {
            table: 0,
            key,
            access,
            version_read,
            read_absent,
            version_written,
        };
        assert_eq!(
            *objs.borrow(),
            [
                o(2, Access::ReadOnly, Some(2), false, None),
                o(3, Access::ReadWrite, None, true, Some(103)),
            ]
        );
    }

    /// A coordinator of `proto` on a one-table catalog (table 0, 8-byte values).
    fn one_table_coordinator<P: Protocol<CoordState = ()>>(proto: P) -> Coordinator<P> {
        let meta = dmtx_memnode::TableMeta {
            id: 0,
            name: "t".into(),
            value_bytes: 8,
            slot_bytes: 8,
            slots_per_bucket: 1,
            bucket_bytes: 8,
            bucket_count: 1,
            overflow_bucket_count: 0,
            runs: None,
            value_region: None,
            attrs: Vec::new(),
            replicas: vec![(dmtx_verbs::MnId(0), 0)],
        };
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let ctx = CoordCtx::new(
            CoordId {
                cn: 0,
                thread: 0,
                coroutine: 1,
            },
            Rc::new(fabric.transport()),
            Arc::new(RealClock::new()),
            Arc::new(Catalog::from_metas([meta])),
            Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
        );
        Coordinator::new(ctx, Arc::new(proto), ())
    }

    /// Goal: the hints given at begin are what the protocol reads, objects added before
    /// the first execute are accepted under `keys_declared`, and `begin` resets the hints
    /// of the transaction before. Method: a declared read-only transaction, then a plain
    /// one, on a one-table catalog.
    #[test]
    fn hints_given_at_begin_are_what_the_protocol_reads() {
        let mut c = one_table_coordinator(OddStamps(NoLayout));
        let t: Table = Table::new(0);
        let mut tx = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        assert_eq!(tx.hints(), TxnHints::READ_ONLY_DECLARED);
        tx.add_ro(t, 2);
        tx.add_ro(t, 4);
        block_on(tx.execute()).unwrap();
        block_on(tx.commit()).unwrap();
        assert_eq!(c.set.hints, TxnHints::READ_ONLY_DECLARED, "kept after the outcome");
        let mut tx = c.begin();
        assert_eq!(tx.hints(), TxnHints::NONE, "begin promises nothing");
        tx.add_ro(t, 2);
        block_on(tx.execute()).unwrap();
        tx.add_rw(t, 3);
        block_on(tx.commit()).unwrap();
    }

    /// Goal: a transaction begun read-only that adds a write is stopped at the add, with
    /// a message naming the key and the fix. Method: AddRW in a read-only transaction.
    #[test]
    #[should_panic(expected = "table 0 key 3 added as ReadWrite to a transaction begun read-only")]
    fn a_write_in_a_read_only_transaction_panics() {
        let mut c = one_table_coordinator(OddStamps(NoLayout));
        let mut tx = c.begin_with(TxnHints::READ_ONLY);
        tx.add_ro(Table::<[u8]>::new(0), 2);
        tx.add_rw(Table::<[u8]>::new(0), 3);
    }

    /// Goal: the insert and delete accesses are writes for the read-only promise too.
    /// Method: AddDelete in a read-only transaction.
    #[test]
    #[should_panic(expected = "added as Delete to a transaction begun read-only")]
    fn a_delete_in_a_read_only_transaction_panics() {
        let mut c = one_table_coordinator(OddStamps(NoLayout));
        let mut tx = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        tx.add_delete(Table::<[u8]>::new(0), 3);
    }

    /// Goal: under `keys_declared`, a key added after the first execute is stopped at the
    /// add. Method: one key, execute, a second key.
    #[test]
    #[should_panic(
        expected = "table 0 key 5 added after the first execute of a transaction begun with `keys_declared`"
    )]
    fn a_key_added_after_execute_under_keys_declared_panics() {
        let mut c = one_table_coordinator(OddStamps(NoLayout));
        let mut tx = c.begin_with(TxnHints::DECLARED);
        tx.add_rw(Table::<[u8]>::new(0), 4);
        block_on(tx.execute()).unwrap();
        tx.add_ro(Table::<[u8]>::new(0), 5);
    }

    /// Goal: the first execute closes the set even when it had nothing to fetch (an
    /// empty set, or a second execute after everything was fetched). Method: execute on
    /// an empty declared transaction, then an add.
    #[test]
    #[should_panic(expected = "added after the first execute")]
    fn an_empty_first_execute_closes_a_declared_set() {
        let mut c = one_table_coordinator(OddStamps(NoLayout));
        let mut tx = c.begin_with(TxnHints::DECLARED);
        block_on(tx.execute()).unwrap();
        tx.add_ro(Table::<[u8]>::new(0), 5);
    }

    /// A protocol that requires declared keys and does nothing else.
    struct NeedsKeys(NoLayout);

    impl Protocol for NeedsKeys {
        type CoordState = ();
        type ObjState = ();
        type CnState = ();
        type ThreadState = ();
        const NAME: &'static str = "needs-keys";
        const ABOUT: &'static str = "test protocol";
        const KNOBS: &'static [KnobSpec] = &[];

        fn from_knobs(_: &Knobs) -> std::result::Result<Self, KnobError> {
            Ok(NeedsKeys(NoLayout))
        }
        fn isolation(&self) -> Isolation {
            Isolation::Serializable
        }
        fn layout(&self) -> &dyn SlotLayout {
            &self.0
        }
        fn coord_state(&self, _: &CoordCtx, _: &dyn Control) -> crate::Result<()> {
            Ok(())
        }
        async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            txn.coord.set.fetched = txn.coord.set.objs.len();
            Ok(())
        }
        async fn commit(_: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            Ok(())
        }
        fn abort(_: &mut Txn<'_, Self>) {}
        fn requires_declared_keys(&self) -> bool {
            true
        }
    }

    /// Goal: a protocol that requires declared keys runs transactions that declare them
    /// and stops, at begin, one that does not. Method: `begin_with(DECLARED)` commits;
    /// `begin()` panics naming the protocol.
    #[test]
    #[should_panic(expected = "protocol `needs-keys` requires every key declared before the first execute")]
    fn a_protocol_requiring_declared_keys_refuses_an_undeclared_begin() {
        let mut c = one_table_coordinator(NeedsKeys(NoLayout));
        let mut tx = c.begin_with(TxnHints::DECLARED);
        tx.add_rw(Table::<[u8]>::new(0), 1);
        block_on(tx.commit()).unwrap();
        drop(c.begin());
    }

    #[test]
    fn covers_orders_promises() {
        use TxnHints as H;
        for h in [H::NONE, H::READ_ONLY, H::DECLARED, H::READ_ONLY_DECLARED] {
            assert!(h.covers(h) && h.covers(H::NONE) && H::READ_ONLY_DECLARED.covers(h));
        }
        assert!(!H::READ_ONLY.covers(H::DECLARED));
        assert!(!H::DECLARED.covers(H::READ_ONLY));
        assert!(!H::NONE.covers(H::READ_ONLY));
    }

    /// A protocol whose execute takes one round trip, whose cleanup waits one READ and
    /// leaves one background post, and whose drain waits one READ; it counts the calls.
    struct Cleans(NoLayout);

    thread_local! {
        static CALLS: RefCell<(u32, u32)> = const { RefCell::new((0, 0)) };
    }

    fn read_word(coord: &mut Coordinator<Cleans>) -> dmtx_verbs::Post {
        let mut p = dmtx_verbs::Post::new();
        p.read(dmtx_verbs::RemotePtr::new(dmtx_verbs::MnId(0), 0), 8);
        let _ = &coord.set;
        p
    }

    impl Protocol for Cleans {
        type CoordState = ();
        type ObjState = ();
        type CnState = ();
        type ThreadState = ();
        const NAME: &'static str = "cleans";
        const ABOUT: &'static str = "test protocol";
        const KNOBS: &'static [KnobSpec] = &[];

        fn from_knobs(_: &Knobs) -> std::result::Result<Self, KnobError> {
            Ok(Cleans(NoLayout))
        }
        fn isolation(&self) -> Isolation {
            Isolation::Serializable
        }
        fn layout(&self) -> &dyn SlotLayout {
            &self.0
        }
        fn coord_state(&self, _: &CoordCtx, _: &dyn Control) -> crate::Result<()> {
            Ok(())
        }
        async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            txn.coord.set.fetched = txn.coord.set.objs.len();
            Ok(())
        }
        async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            let mut p = read_word(txn.coord);
            txn.coord
                .ctx
                .post(&mut p)
                .await
                .map_err(|_| Abort::new(AbortReason::Fault))
        }
        /// Leaves one deferred READ: a synchronous abort cannot wait, the cleanup does.
        fn abort(txn: &mut Txn<'_, Self>) {
            let mut p = read_word(txn.coord);
            txn.coord.ctx.post_deferred(&mut p);
            assert!(p.is_empty(), "post_deferred takes the post's contents");
        }
        async fn cleanup(coord: &mut Coordinator<Self>) {
            assert_ne!(coord.set.phase, Phase::Active, "cleanup sees the finished attempt");
            CALLS.with(|c| c.borrow_mut().0 += 1);
            let mut p = read_word(coord);
            coord.ctx.post(&mut p).await.unwrap();
            let mut p = read_word(coord);
            coord.ctx.post_background(&mut p);
        }
        async fn drain(coord: &mut Coordinator<Self>) {
            CALLS.with(|c| c.borrow_mut().1 += 1);
            let mut p = read_word(coord);
            coord.ctx.post(&mut p).await.unwrap();
        }
    }

    /// Goal: `Coordinator::cleanup` runs the protocol's cleanup once per finished attempt
    /// and counts its posts apart (the attempt's counters are left as they were), and
    /// `drain` runs a cleanup still due, then the drain. Method: a protocol whose commit,
    /// cleanup and drain each wait one READ; counts and call tallies after each step.
    #[test]
    fn cleanup_runs_once_per_attempt_and_is_counted_apart() {
        let fabric = dmtx_verbs::MemFabric::new(vec![Arc::new(dmtx_verbs::Region::new(64))]);
        let ctx = CoordCtx::new(
            CoordId {
                cn: 0,
                thread: 0,
                coroutine: 1,
            },
            Rc::new(fabric.transport()),
            Arc::new(RealClock::new()),
            Arc::new(Catalog::default()),
            Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
        );
        let mut c = Coordinator::new(ctx, Arc::new(Cleans(NoLayout)), ());
        let calls = || CALLS.with(|c| *c.borrow());
        assert_eq!(block_on(c.cleanup()), PostCounters::default(), "no attempt yet");
        block_on(c.begin().commit()).unwrap();
        assert_eq!(c.ctx.txn_counters.rtts, 1, "the commit's READ");
        let spent = block_on(c.cleanup());
        assert_eq!((spent.rtts, spent.background_posts, spent.ops_total()), (1, 1, 2));
        assert_eq!(c.ctx.txn_counters.rtts, 1, "the attempt's counters are untouched");
        assert_eq!(c.ctx.txn_counters.background_posts, 0);
        assert_eq!(calls(), (1, 0));
        assert_eq!(block_on(c.cleanup()), PostCounters::default(), "once per attempt");
        assert_eq!(calls(), (1, 0));
        // An aborted attempt is cleaned up too; drain runs it when still due.
        drop(c.begin());
        assert_eq!(c.ctx.txn_counters.background_posts, 1, "the abort's deferred READ");
        let spent = block_on(c.drain());
        assert_eq!((spent.rtts, spent.background_posts), (2, 1), "cleanup + drain");
        assert_eq!(calls(), (2, 1));
        assert_eq!(
            c.ctx.per_mn[0].ops[dmtx_verbs::OpKind::Read as usize],
            7,
            "commit 1, abort 1, cleanups 2 + 2, drain 1: all load the node"
        );
    }

    /// A transport whose every post completes on its second poll; `fail` names a ticket
    /// that completes with an error.
    #[derive(Default)]
    struct Slow {
        next: std::cell::Cell<u64>,
        polled: RefCell<std::collections::HashSet<u64>>,
        polls: std::cell::Cell<u32>,
        fail: Option<u64>,
    }

    impl dmtx_verbs::Transport for Slow {
        fn mn_count(&self) -> usize {
            1
        }
        fn submit(&self, _: &mut dmtx_verbs::Post) -> dmtx_verbs::Submitted {
            let t = self.next.get();
            self.next.set(t + 1);
            dmtx_verbs::Submitted::Pending(dmtx_verbs::Ticket(t))
        }
        fn poll(
            &self,
            ticket: dmtx_verbs::Ticket,
            _: &mut dmtx_verbs::Post,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<dmtx_verbs::Result<()>> {
            self.polls.set(self.polls.get() + 1);
            if self.polled.borrow_mut().insert(ticket.0) {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(match self.fail {
                Some(t) if t == ticket.0 => Err(dmtx_verbs::VerbError::Unreachable {
                    mn: dmtx_verbs::MnId(0),
                    why: "test".into(),
                }),
                _ => Ok(()),
            })
        }
        fn submit_detached(&self, _: &mut dmtx_verbs::Post) {}
    }

    fn slow_coordinator(slow: Rc<Slow>) -> Coordinator<Cleans> {
        let ctx = CoordCtx::new(
            CoordId {
                cn: 0,
                thread: 0,
                coroutine: 1,
            },
            slow,
            Arc::new(RealClock::new()),
            Arc::new(Catalog::default()),
            Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
        );
        Coordinator::new(ctx, Arc::new(Cleans(NoLayout)), ())
    }

    /// Goal: a deferred post left by the synchronous abort is still in flight after the
    /// attempt, and `Coordinator::cleanup` waits for it before the next transaction;
    /// `drain` leaves nothing in flight. Method: a transport that completes every post on
    /// its second poll; tickets in flight and polls after each step.
    #[test]
    fn deferred_posts_are_settled_by_the_cleanup() {
        let slow = Rc::new(Slow::default());
        let mut c = slow_coordinator(Rc::clone(&slow));
        drop(c.begin());
        assert_eq!(c.ctx.deferred_in_flight(), 1, "the abort cannot wait for it");
        assert_eq!((c.ctx.txn_counters.rtts, c.ctx.txn_counters.background_posts), (0, 1));
        let spent = block_on(c.cleanup());
        assert_eq!(c.ctx.deferred_in_flight(), 0, "settled before the next transaction");
        assert_eq!(
            (spent.rtts, spent.background_posts),
            (1, 1),
            "the cleanup's own READ and background post"
        );
        // The cleanup's awaited READ and the deferred READ, each polled twice.
        assert_eq!(slow.polls.get(), 4);
        drop(c.begin());
        assert_eq!(c.ctx.deferred_in_flight(), 1);
        block_on(c.drain());
        assert_eq!(
            c.ctx.deferred_in_flight(),
            0,
            "nothing in flight when the coordinator stops"
        );
        assert!(c.ctx.last_fault.is_none());
    }

    /// Goal: a deferred post that fails is reported (first error returned, kept as the
    /// last fault) and its buffer still comes back. Method: two deferred posts, the
    /// second failing, settled directly.
    #[test]
    fn a_failed_deferred_post_is_kept_as_the_last_fault() {
        let slow = Rc::new(Slow {
            fail: Some(1),
            ..Slow::default()
        });
        let mut c = slow_coordinator(slow);
        for _ in 0..2 {
            let mut p = read_word(&mut c);
            c.ctx.post_deferred(&mut p);
        }
        assert_eq!(c.ctx.deferred_in_flight(), 2);
        assert!(block_on(c.ctx.settle_deferred()).is_err());
        assert_eq!(c.ctx.deferred_in_flight(), 0);
        assert!(c.ctx.last_fault.as_ref().unwrap().to_string().contains("test"));
    }
}
