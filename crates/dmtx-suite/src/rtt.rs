//! Round-trip budgets: a protocol (or its test) declares, per transaction kind and
//! address-cache state, how many round trips each phase takes; [`assert_budgets`] runs
//! one transaction of each kind on an idle cluster and compares, phase by phase.
//!
//! Phases as the coordinator counts them: `execute` (every `Txn::execute`), `commit`
//! (validation and commit, `Txn::commit`), `cleanup` (the awaited per-attempt
//! [`Protocol::cleanup`](dmtx_runtime::Protocol::cleanup)), and `background` (posts never
//! waited for, such as a release).

use dmtx_runtime::{block_on, Coordinator, Protocol, TxnHints, Worker};
use dmtx_verbs::PostCounters;

use crate::bank;
use crate::env::Env;

/// A transaction kind the budget table names, on the bank table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TxnKind {
    /// Read one record.
    ReadOnlyOne,
    /// Read three records.
    ReadOnlyMany,
    /// Update two records, read nothing else.
    ReadWrite,
    /// Read one record, update another.
    ReadWriteWithRo,
    /// Insert a new record.
    Insert,
    /// Delete a record.
    Delete,
}

impl TxnKind {
    /// What its transaction promises at begin: every kind adds its keys up front, and
    /// the read-only kinds write nothing.
    pub fn hints(self) -> TxnHints {
        match self {
            TxnKind::ReadOnlyOne | TxnKind::ReadOnlyMany => TxnHints::READ_ONLY_DECLARED,
            _ => TxnHints::DECLARED,
        }
    }
}

/// The address cache before the measured transaction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cache {
    /// The same transaction ran once before on the same coordinator (for an insert:
    /// an insert of another key).
    Warm,
    /// A fresh compute node: nothing cached.
    Cold,
}

/// One row of a protocol's declared budget.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RttBudget {
    /// Transaction kind.
    pub kind: TxnKind,
    /// Cache state.
    pub cache: Cache,
    /// Round trips of `execute`.
    pub execute: u64,
    /// Round trips of `commit` (validation included).
    pub commit: u64,
    /// Round trips of the awaited cleanup.
    pub cleanup: u64,
    /// Posts never waited for.
    pub background: u64,
}

impl RttBudget {
    /// A row with no cleanup and no background posts.
    pub const fn new(kind: TxnKind, cache: Cache, execute: u64, commit: u64) -> Self {
        Self {
            kind,
            cache,
            execute,
            commit,
            cleanup: 0,
            background: 0,
        }
    }

    /// The same row with `n` background posts.
    pub const fn background(mut self, n: u64) -> Self {
        self.background = n;
        self
    }

    /// The same row with `n` cleanup round trips.
    pub const fn cleanup(mut self, n: u64) -> Self {
        self.cleanup = n;
        self
    }
}

/// What one transaction cost, by phase.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// Round trips of `execute`.
    pub execute: u64,
    /// Round trips of `commit`.
    pub commit: u64,
    /// Round trips of the cleanup.
    pub cleanup: u64,
    /// Posts never waited for (execute, commit and cleanup together).
    pub background: u64,
    /// Everything the attempt posted (ops by kind, bytes), cleanup excluded.
    pub attempt: PostCounters,
}

/// Keys the measurements use: read `1..=3`, write `4` and `5`, delete `6`; insert keys
/// from [`INSERT_KEY`].
const RO: [u64; 3] = [1, 2, 3];
const RW: [u64; 2] = [4, 5];
const DELETE_KEY: u64 = 6;
/// First key the insert measurements create.
pub const INSERT_KEY: u64 = 1000;

/// Run one transaction of `kind` on `c` (which must commit) and count each phase.
pub fn measure_one<P: Protocol>(c: &mut Coordinator<P>, kind: TxnKind, insert_key: u64) -> Measured {
    let mut m = Measured::default();
    block_on(async {
        let mut t = c.begin_with(kind.hints());
        match kind {
            TxnKind::ReadOnlyOne => {
                t.add_ro(bank::TABLE, RO[0]);
            }
            TxnKind::ReadOnlyMany => {
                for k in RO {
                    t.add_ro(bank::TABLE, k);
                }
            }
            TxnKind::ReadWrite => {
                for k in RW {
                    t.add_rw(bank::TABLE, k);
                }
            }
            TxnKind::ReadWriteWithRo => {
                t.add_ro(bank::TABLE, RO[0]);
                t.add_rw(bank::TABLE, RW[0]);
            }
            TxnKind::Insert => {
                t.add_insert(bank::TABLE, insert_key);
            }
            TxnKind::Delete => {
                t.add_delete(bank::TABLE, DELETE_KEY);
            }
        }
        t.execute()
            .await
            .unwrap_or_else(|a| panic!("{kind:?}: execute aborted: {a}"));
        let after_execute = t.coord.ctx.txn_counters;
        m.execute = after_execute.rtts;
        // Values stay valid bank records (a balance-preserving restamp).
        let n = t.coord.set.objs.len();
        for i in 0..n {
            let o = &t.coord.set.objs[i];
            if o.access.writes() && o.access != dmtx_runtime::Access::Delete {
                let key = o.key;
                let v = t.coord.set.value_mut(i);
                let (b, s) = bank::decode(key, v).unwrap_or((bank::INITIAL, 0));
                bank::encode(key, b, s + 1, v);
            }
        }
        t.commit()
            .await
            .unwrap_or_else(|a| panic!("{kind:?}: commit aborted: {a}"));
        m.attempt = c.ctx.txn_counters;
        m.commit = m.attempt.rtts - after_execute.rtts;
        let cleanup = c.cleanup().await;
        m.cleanup = cleanup.rtts;
        m.background = m.attempt.background_posts + cleanup.background_posts;
    });
    m
}

/// A fresh compute node's coordinator, so its address cache starts empty.
fn fresh<P: Protocol>(env: &Env<P>, id: u16) -> (Worker, u16) {
    (env.mem_cn(id).worker(0).expect("worker"), id)
}

/// Measure `kind` with `cache` on `env` (the bank, idle), using compute node `cn`.
pub fn measure<P: Protocol>(env: &Env<P>, kind: TxnKind, cache: Cache, cn: u16) -> Measured {
    let (w, _) = fresh(env, cn);
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let insert = INSERT_KEY + 2 * cn as u64;
    if cache == Cache::Warm {
        match kind {
            TxnKind::Insert => {
                measure_one(&mut c, kind, insert + 1);
            }
            // Warm the cache for the key with a read: deleting twice is not the same kind.
            TxnKind::Delete => {
                let mut seen = bank::Seen::default();
                block_on(bank::read_one(&mut c, DELETE_KEY, &mut seen)).expect("warming read");
            }
            _ => {
                measure_one(&mut c, kind, 0);
            }
        }
    }
    measure_one(&mut c, kind, insert)
}

/// Run every row of `budget` on a fresh bank of `make()` with `replicas` replicas and
/// value bytes `value_bytes`; panic naming every row whose phases differ, with what was
/// measured. Returns the measurements, in row order, for finer checks (verbs, bytes).
pub fn assert_budgets<P: Protocol>(
    make: impl Fn() -> P,
    replicas: usize,
    value_bytes: u32,
    budget: &[RttBudget],
) -> Vec<Measured> {
    assert!(!budget.is_empty(), "an empty budget table checks nothing");
    let mut out = Vec::new();
    let mut wrong = Vec::new();
    for (i, row) in budget.iter().enumerate() {
        let env = Env::bank(make(), crate::Setup::new(replicas, value_bytes));
        assert!(
            !env.proto.messaging(),
            "{}: budgets are measured on one coordinator outside any executor, which cannot drive CN↔CN calls; leave `rtt_budget` empty for a protocol that messages other compute nodes",
            P::NAME
        );
        let m = measure(&env, row.kind, row.cache, i as u16);
        let got = RttBudget {
            kind: row.kind,
            cache: row.cache,
            execute: m.execute,
            commit: m.commit,
            cleanup: m.cleanup,
            background: m.background,
        };
        if got != *row {
            wrong.push(format!("  declared {row:?}\n  measured {got:?}"));
        }
        out.push(m);
    }
    assert!(
        wrong.is_empty(),
        "{} with {replicas} replica(s), {value_bytes}-byte values: round trips differ from the declared budget:\n{}",
        P::NAME,
        wrong.join("\n")
    );
    out
}
