//! Wound-Wait 2PL on RCBench's primitives (rcbench.txt §4.1, §5.1, Alg. 2; issue 30
//! item 5). Isolation: **serializable** (strict 2PL).
//!
//! It runs No-Wait's execution and commit ([`crate::nowait`]) with:
//!
//! - **T^g** (§4.1, Eq. 2): each attempt takes the next Tid of its coordinator's ring
//!   of R = 4 slots ([`crate::rcbench::prims`]) and WRITEs ⟨Tid, RN⟩ there with its
//!   first lock batch. The areas are run-wide, one per memory node, published as
//!   `rcbench.tg.<mn>` by `setup_run` ([`TG_COORDS`](crate::rcbench::tg::TG_COORDS) coordinators' rings each).
//! - **The lock word holds the holder's bts** and pL ⟨bts, Tid⟩ is written after a
//!   granted lock (l. 7–9). A refused lock (l. 2–6): one round trip READs the item's pL
//!   and the requester's own T^g; wounded (AB) ⇒ abort; an older requester whose pL
//!   matches the lock word wounds the holder with AModTM(RN → AB) (NULL or refused: it
//!   finished, its locks go soon); then it yields and retries, at most
//!   `wait_retries_max` times. An empty or stale pL just retries.
//! - **Commit** (l. 12): CAS the own state RN → CM, one round trip before the release
//!   post; refused ⇒ wounded ⇒ abort (`lock_conflict`). The text's T̄ is a typo for T.
//!
//! Re-reading the own state on every retry is what the paper calls optional: without it
//! T_old holds A, T_young holds B and waits for A, T_old wounds T_young and waits for B
//! forever (T_young never reaches its commit CAS).
//!
//! ```text
//! item: [pk 8 B][X^d][version 8 B][pL.bts 8 B][pL.tid 8 B][lock 8 B: holder's bts, 0 = free]
//! T^g:  [tid 8 B][state 8 B: tid << 2 | RN/CM/AB]
//! ```
//!
//! # Round trips (`BUDGET` in `tests/rcbench_woundwait.rs`)
//!
//! After index lookups, db+or on, one replica, uncontended: 2 per item (lock + READ, with
//! the own T^g WRITE in the first; then the pL WriteDI) + the state CAS + the release
//! post: 2n + 2.
//!
//! # Choices where the paper is silent
//!
//! - Only the E lock word (as [`crate::waitdie`]); pL holds one entry (E has one
//!   holder).
//! - T^g rings for [`TG_COORDS`](crate::rcbench::tg::TG_COORDS) coordinators: CN < 8, thread < 32, coroutine < 32.
//! - A wounded transaction finds out at its next refused lock or at its commit CAS (the
//!   paper's periodic check is not done).

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

/// Wound-Wait 2PL.
#[derive(Clone, Debug)]
pub struct Woundwait {
    cfg: NowaitConfig,
    layout: ItemLayout,
}

impl Woundwait {
    /// Wound-Wait with `cfg` (its `lock` must be E).
    pub fn new(cfg: NowaitConfig) -> Self {
        assert_eq!(cfg.lock, LockMode::E, "Wound-Wait offers the E lock word only");
        Self {
            cfg,
            layout: ItemLayout { meta_words: 3 },
        }
    }

    /// Wound-Wait with a test-only broken `variant`.
    pub fn with_variant(mut cfg: NowaitConfig, variant: NowaitVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }
}

impl TwoPl for Woundwait {
    const POLICY: Policy = Policy::WoundWait;
    fn cfg(&self) -> &NowaitConfig {
        &self.cfg
    }
    fn item_layout(&self) -> ItemLayout {
        self.layout
    }
}

impl Protocol for Woundwait {
    type CoordState = NowaitCoord;
    type ObjState = NowaitObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "woundwait";
    const ABOUT: &'static str = "Wound-Wait 2PL on RCBench's primitives, T^g and cuckoo index (rcbench §5.1, Alg. 2)";
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

    fn setup_run(&self, control: &dyn Control) -> Result<()> {
        crate::rcbench::tg::setup_tg(control)
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<NowaitCoord> {
        let mut st = crate::nowait::Nowait::new(self.cfg).coord_state(ctx, control)?;
        let (dense, tg) = crate::rcbench::tg::tg_area(ctx, control, Self::NAME)?;
        st.dense = dense;
        st.tg = Some(tg);
        Ok(st)
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
