//! Wait-Die 2PL on RCBench's primitives (rcbench.txt §4.1, §5.1: Alg. 2 with ">" and
//! "abort" in l. 5–6; issue 30 item 5). Isolation: **serializable** (strict 2PL).
//!
//! It runs No-Wait's execution and commit ([`crate::nowait`]) with two differences:
//!
//! - **The lock word holds the holder's bts** (`CAS(0 → bts)`), so a refused CAS
//!   returns the holder's priority without a READ. An older requester (smaller bts)
//!   waits: it yields for [`WAIT_PAUSE_NS`] and tries again, at most
//!   `wait_retries_max` times ([`WAIT_RETRIES_MAX`] by default) (then aborts `lock_conflict`; counted in
//!   `wait_retries`); a younger one dies (aborts). A holder never waits on an older
//!   transaction, so no wait-for cycle forms.
//! - **pL** (§4.1): a granted lock writes ⟨bts, Tid⟩ into the item's pL words with one
//!   WriteDI after the lock's round trip (l. 7–9); a commit's write image clears them.
//!   Wait-Die never reads pL (the lock word names the holder); it is kept because the
//!   paper's item carries it.
//!
//! bts is `(clock ns / 16 + 1) << 24 | CN ‖ thread ‖ coroutine` (issue 30 item 3:
//! clock ‖ CN ‖ coordinator, unique, 8 bits each for the coordinator's parts). It is
//! kept across aborts (a restarted transaction grows older and cannot starve) and
//! taken anew after a commit.
//!
//! ```text
//! item: [pk 8 B][X^d][version 8 B][pL.bts 8 B][pL.tid 8 B][lock 8 B: holder's bts, 0 = free]
//! ```
//!
//! # Round trips (`BUDGET` in `tests/rcbench_waitdie.rs`)
//!
//! After index lookups, db+or on, one replica, uncontended: 2 per item (lock + READ,
//! then the pL WriteDI) + 1 commit post: 2n + 1 for read-only and read-write. Backups
//! add one round trip to a writing commit, as in No-Wait.
//!
//! # Choices where the paper is silent
//!
//! - **Only the E lock word**: Fig. 16's E/S for Wait-Die is not specified by the
//!   paper, and this module does not offer it (`--set lock` is not a knob here).
//! - A wait is bounded ([`WAIT_RETRIES_MAX`] tries [`WAIT_PAUSE_NS`] apart); the
//!   authors' Wound-Wait gives up after 2 retries, their Wait-Die is not bounded. Long
//!   waits (10 000 tries) held hot records for seconds on `tcp` with stalls injected.
//! - Everything else (tombstones, inserts, backups, failures, U_CPU^e) as in
//!   [`crate::nowait`].

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, AbortReasonSpec, CoordCtx, Coordinator, Isolation, KnobError, KnobSpec, Knobs, MetricSpec, Protocol, Result,
    Txn,
};
use dmtx_store::SlotLayout;

use crate::nowait::{
    begin_attempt, cleanup_attempt, commit_attempt, execute, LockMode, NowaitConfig, NowaitCoord, NowaitObj,
    NowaitVariant, Policy, TwoPl,
};
use crate::rcbench::layout::ItemLayout;

pub use crate::nowait::{WAIT_PAUSE_NS, WAIT_RETRIES_MAX};

/// Wait-Die 2PL.
#[derive(Clone, Debug)]
pub struct Waitdie {
    cfg: NowaitConfig,
    layout: ItemLayout,
}

impl Waitdie {
    /// Wait-Die with `cfg` (its `lock` must be E).
    pub fn new(cfg: NowaitConfig) -> Self {
        assert_eq!(cfg.lock, LockMode::E, "Wait-Die offers the E lock word only");
        Self {
            cfg,
            layout: ItemLayout { meta_words: 3 },
        }
    }

    /// Wait-Die with a test-only broken `variant`.
    pub fn with_variant(mut cfg: NowaitConfig, variant: NowaitVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }
}

impl TwoPl for Waitdie {
    const POLICY: Policy = Policy::WaitDie;
    fn cfg(&self) -> &NowaitConfig {
        &self.cfg
    }
    fn item_layout(&self) -> ItemLayout {
        self.layout
    }
}

impl Protocol for Waitdie {
    type CoordState = NowaitCoord;
    type ObjState = NowaitObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "waitdie";
    const ABOUT: &'static str = "Wait-Die 2PL on RCBench's primitives and cuckoo index (rcbench §5.1, Alg. 2)";
    const KNOBS: &'static [KnobSpec] = &[
        crate::nowait::WAIT_RETRIES,
        crate::nowait::ADDR_CACHE,
        crate::rcbench::DB,
        crate::rcbench::OR,
    ];
    const METRICS: &'static [MetricSpec] = crate::nowait::METRICS;
    const ABORT_REASONS: &'static [AbortReasonSpec] = crate::nowait::ABORT_REASONS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(NowaitConfig {
            lock: LockMode::E,
            switches: crate::rcbench::switches(knobs)?,
            addr_cache: knobs.get::<crate::rcbench::OnOff>(&crate::nowait::ADDR_CACHE)?.0,
            wait_retries_max: knobs.get(&crate::nowait::WAIT_RETRIES)?,
            variant: NowaitVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<NowaitCoord> {
        crate::nowait::Nowait::new(self.cfg).coord_state(ctx, control)
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        begin_attempt(txn);
        execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        commit_attempt(txn).await
    }

    fn abort(_txn: &mut Txn<'_, Self>) {
        // Releases happen in `cleanup`.
    }

    async fn cleanup(coord: &mut Coordinator<Self>) {
        cleanup_attempt(coord).await
    }
}
