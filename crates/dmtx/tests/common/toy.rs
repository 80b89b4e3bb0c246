//! What test-only protocols share: a bank workload whose invariant and histories catch a
//! broken protocol, the run configuration for `mem` and `sim`, a run through the real
//! driver, and the bucket walk that finds a record's slot in a toy layout.

#![allow(dead_code)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dmtx::config::{SimSetup, TransportKind};
use dmtx::driver::{self, RunHooks, Silent};
use dmtx::results::BenchResult;
use dmtx::{BenchArgs, BenchConfig, OutTarget};
use dmtx_runtime::{Abort, AbortReason, Access, CoordId, Coordinator, KnobError, KnobSpec, Knobs, Protocol, Table};
use dmtx_store::{scan_bucket, StoreError, TableSpec};
use dmtx_verbs::Post;
use dmtx_workloads::{InvariantError, Outcome, RecordSink, Snapshot, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Bucket READ rounds to locate one attempt's objects (chain length bound).
pub const LOOKUP_ROUNDS_MAX: u32 = 64;

/// Little-endian word at byte `at` of `b`.
pub fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Where an object is being looked for: the bucket to read next, and the slot's
/// table-relative offset once found.
pub type Locating = (Option<u64>, Option<u64>);

/// Find the table-relative slot offset of every object from `from` on whose `rel`
/// (reached with `rel_of`) is unset, reading bucket chains one round at a time. A key
/// not found aborts `not_found`; a failed verb aborts `fault`.
pub async fn locate<P: Protocol>(
    coord: &mut Coordinator<P>,
    from: usize,
    rel_of: fn(&mut P::ObjState) -> &mut Locating,
) -> Result<(), Abort> {
    let catalog = Arc::clone(&coord.ctx.catalog);
    let proto = Arc::clone(&coord.proto);
    for round in 1.. {
        assert!(
            round <= LOOKUP_ROUNDS_MAX,
            "bucket chain longer than {LOOKUP_ROUNDS_MAX}"
        );
        let mut post = Post::new();
        let mut reads = Vec::new();
        for i in from..coord.set.objs.len() {
            let o = &mut coord.set.objs[i];
            assert!(
                matches!(o.access, Access::ReadOnly | Access::ReadWrite),
                "toy protocols neither insert nor delete"
            );
            let info = catalog.get(o.table).unwrap();
            let (bucket, rel) = rel_of(&mut o.proto);
            if rel.is_some() {
                continue;
            }
            let b = *bucket.get_or_insert(info.shape.home_bucket(o.key));
            let read = post.read(info.ptr(0, info.shape.bucket_off(b)), info.shape.bucket_bytes as usize);
            reads.push((i, b, read));
        }
        if reads.is_empty() {
            return Ok(());
        }
        coord
            .ctx
            .post(&mut post)
            .await
            .map_err(|_| Abort::new(AbortReason::Fault))?;
        for (i, b, read) in reads {
            let o = &mut coord.set.objs[i];
            let shape = &catalog.get(o.table).unwrap().shape;
            let scan = scan_bucket(shape, proto.layout(), post.bytes(read), o.key);
            let (bucket, rel) = rel_of(&mut o.proto);
            match (scan.found, scan.next) {
                (Some(slot), _) => *rel = Some(shape.slot_off(b, slot)),
                (None, Some(next)) => *bucket = Some(next),
                (None, None) => return Err(Abort::new(AbortReason::NotFound)),
            }
        }
    }
    unreachable!()
}

// ---------------------------------------------------------------------------------
// Transfers and audits over a few hot accounts.

/// The accounts' table.
pub const BALANCES: Table<u64> = Table::new(0);
/// Every account's opening balance.
pub const INITIAL: u64 = 100;

/// Transfers of one unit between two accounts and audits reading two; the sum of the
/// balances is the invariant, and a lost update or a torn read shows in the history.
pub struct Bank {
    /// How many accounts.
    pub accounts: u64,
}

/// A coordinator's draws.
pub struct BankLocal {
    rng: SmallRng,
}

impl Workload for Bank {
    type Local = BankLocal;
    type Input = (usize, u64, u64);
    const NAME: &'static str = "toy-bank";
    const ABOUT: &'static str = "test-only transfers and audits";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self { accounts: 8 })
    }
    fn txn_types(&self) -> &'static [&'static str] {
        &["transfer", "audit"]
    }
    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec::new(BALANCES.id(), "balances", 8, self.accounts)]
    }
    fn load(&self, _table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        (0..self.accounts).try_for_each(|k| insert(k, &INITIAL.to_le_bytes()))
    }
    fn local(&self, _coord: CoordId, seed: u64) -> BankLocal {
        BankLocal {
            rng: SmallRng::seed_from_u64(seed),
        }
    }
    fn draw(&self, local: &mut BankLocal) -> (usize, Self::Input) {
        let a = local.rng.random_range(0..self.accounts);
        let b = (a + local.rng.random_range(1..self.accounts)) % self.accounts;
        let ty = usize::from(!local.rng.random_bool(0.5));
        (ty, (ty, a, b))
    }
    /// A transfer is placed by the account it debits; an audit by none.
    fn route_key(&self, &(ty, a, _): &Self::Input) -> Option<u64> {
        (ty == 0).then_some(a)
    }
    async fn run<P: Protocol>(
        &self,
        _local: &mut BankLocal,
        &(ty, a, b): &Self::Input,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let mut txn = coord.begin();
        if ty == 0 {
            let (ra, rb) = (txn.add_rw(BALANCES, a), txn.add_rw(BALANCES, b));
            txn.execute().await?;
            *txn.get_mut(ra) = txn.get(ra).wrapping_sub(1);
            *txn.get_mut(rb) += 1;
        } else {
            txn.add_ro(BALANCES, a);
            txn.add_ro(BALANCES, b);
            txn.execute().await?;
        }
        txn.commit().await.map(|()| Outcome::Committed)
    }
    fn check(&self, _locals: &[BankLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let sum: u64 = snapshot
            .iter(BALANCES.id())
            .map(|(_, v)| u64::from_le_bytes(v.try_into().unwrap()))
            .fold(0, u64::wrapping_add);
        if sum != self.accounts * INITIAL {
            return Err(InvariantError {
                invariant: "sum",
                detail: format!("balances sum to {sum}, not {}", self.accounts * INITIAL),
            });
        }
        Ok(format!("balances sum to {sum}"))
    }
}

/// A checked run of `protocol` on the toy bank: `compute_nodes` nodes of 2 threads × 2
/// coroutines, one replica, for `duration` (virtual on `sim`, whose CPU is the profile's
/// model so a seed replays the run).
pub fn config(protocol: &str, transport: TransportKind, duration: &str, compute_nodes: u32, seed: u64) -> BenchConfig {
    let mut cfg = BenchConfig::from_args_unchecked(
        &BenchArgs {
            protocol: protocol.into(),
            workload: Bank::NAME.into(),
            threads: 2,
            coroutines: 2,
            duration: Some(duration.into()),
            replicas: Some(1),
            compute_nodes: Some(compute_nodes),
            seed,
            check: true,
            transport,
            out: "-".into(),
            quiet: true,
            ..BenchArgs::default()
        },
        Knobs::default(),
    )
    .unwrap();
    cfg.out = OutTarget::None;
    if transport == TransportKind::Sim {
        let mut profile = dmtx_sim::Profile::load("cx5").unwrap();
        profile.cpu.mode = dmtx_sim::CpuMode::Model;
        cfg.sim = Some(SimSetup { profile, faults: None });
    }
    cfg
}

/// Run `proto` on `workload` through the driver, silently.
pub fn run<P: Protocol, W: Workload>(proto: P, workload: W, cfg: &BenchConfig) -> BenchResult {
    let stop = AtomicBool::new(false);
    driver::run(
        proto,
        workload,
        cfg,
        &RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        },
    )
    .unwrap()
}

/// Whether the run's history or invariant shows an anomaly.
pub fn caught(r: &BenchResult) -> bool {
    !r.invariant.ok || r.check.as_ref().is_some_and(|c| !c.clean)
}
