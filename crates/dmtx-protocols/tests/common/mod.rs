//! FORD's scenario tests on the suite's cluster ([`dmtx_suite::Env`]): a table of
//! 40-byte accounts, FORD coordinators on it, and helpers for one-off transactions.
//! What every protocol must pass runs in `ford_suite.rs` through `dmtx_suite::run_all`;
//! the tests here drive FORD into exact interleavings (stalls, failed nodes) and look at
//! its bytes.

#![allow(dead_code)]

use std::sync::Arc;

use dmtx_memnode::LocalCluster;
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, Cn, Coordinator, Table, Worker};
use dmtx_store::TableSpec;
use dmtx_suite::rtt::{Cache, RttBudget, TxnKind};
use dmtx_suite::Setup;
use dmtx_verbs::{MnId, Region};

/// FORD's round trips per phase, per transaction kind and cache state (its module doc's
/// table), for any replica count: what `dmtx_suite::rtt::assert_budgets` checks.
pub const FORD_BUDGET: [RttBudget; 11] = [
    // One READ; cold, the bucket READ returns the record.
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Cold, 1, 0),
    // Execute, then validation.
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 1, 1),
    // CAS+READ, then the coalescent commit; release in the background.
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 1).background(1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Cold, 2, 1).background(1),
    // Execute, validation, commit; cold costs +1 for the locked object only.
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 2).background(1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 2, 2).background(1),
    // Lookup round (bucket lock CAS + bucket READ), lock round, commit.
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 1).background(1),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 1).background(1),
    RttBudget::new(TxnKind::Delete, Cache::Cold, 2, 1).background(1),
];

/// A 40-byte record: a balance and filler, so records span several words.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Acct {
    pub balance: i64,
    pub writes: u64,
    pub fill: [u64; 3],
}

impl Acct {
    pub fn new(balance: i64) -> Self {
        Self {
            balance,
            writes: 0,
            fill: [balance as u64; 3],
        }
    }
}

pub const ACCTS: Table<Acct> = Table::new(0);

pub struct Env {
    pub suite: dmtx_suite::Env<Ford>,
    pub cluster: LocalCluster,
    pub cn: Cn,
    pub ford: Arc<Ford>,
}

impl Env {
    /// `keys` accounts with balance `initial` each, in a table sized for `capacity`
    /// records with `slots` slots per bucket, replicated on 2 memory nodes.
    pub fn new(keys: u64, initial: i64, capacity: u64, slots: u32, cfg: FordConfig) -> Self {
        Self::replicated(2, keys, initial, capacity, slots, cfg)
    }

    /// As [`Env::new`], with `replicas` replicas.
    pub fn replicated(replicas: usize, keys: u64, initial: i64, capacity: u64, slots: u32, cfg: FordConfig) -> Self {
        let mut spec = TableSpec::new(0, "accts", 40, capacity);
        spec.slots_per_bucket = slots;
        let suite = dmtx_suite::Env::with_tables(Ford::new(cfg), Setup::new(replicas, 40), &[spec], |_, insert| {
            for k in 0..keys {
                insert(k, bytemuck::bytes_of(&Acct::new(initial)))?;
            }
            Ok(())
        });
        let cn = suite.mem_cn(0);
        Self {
            cluster: suite.cluster.clone(),
            ford: suite.proto.clone(),
            cn,
            suite,
        }
    }

    pub fn small(keys: u64) -> Self {
        Self::new(keys, 100, keys * 2 + 16, 4, FordConfig::default())
    }

    /// Another compute node on the same memory nodes, with its own address cache.
    pub fn other_cn(&self, id: u16) -> Cn {
        self.suite.mem_cn(id)
    }

    pub fn worker(&self, thread: u16) -> Worker {
        self.cn.worker(thread).unwrap()
    }

    pub fn coord(&self, w: &Worker, coroutine: u16) -> Coordinator<Ford> {
        w.coordinator(&self.ford, coroutine).unwrap()
    }

    pub fn region(&self, mn: u16) -> Arc<Region> {
        self.suite.region(MnId(mn))
    }

    /// Sum of balances and number of records, read from replica `r`.
    pub fn scan(&self, r: usize) -> (i64, u64, Vec<(u64, Acct)>) {
        let all: Vec<(u64, Acct)> = self
            .suite
            .scan(0, r)
            .into_iter()
            .map(|(k, v, _)| (k, *bytemuck::from_bytes::<Acct>(&v)))
            .collect();
        (all.iter().map(|(_, a)| a.balance).sum(), all.len() as u64, all)
    }

    /// Every replica holds the same records.
    pub fn assert_replicas_agree(&self) {
        if let Some(d) = self.suite.replicas_differ(0) {
            panic!("{d}");
        }
    }
}

/// Read one account in its own read-only transaction.
pub fn read_one(c: &mut Coordinator<Ford>, key: u64) -> Result<Acct, dmtx_runtime::Abort> {
    block_on(async {
        let mut t = c.begin();
        let a = t.add_ro(ACCTS, key);
        t.execute().await?;
        let v = *t.get(a);
        t.commit().await?;
        Ok(v)
    })
}

/// Read one account in a transaction begun read-only with its key declared.
pub fn read_one_declared(c: &mut Coordinator<Ford>, key: u64) -> Result<Acct, dmtx_runtime::Abort> {
    block_on(async {
        let mut t = c.begin_with(dmtx_runtime::TxnHints::READ_ONLY_DECLARED);
        let a = t.add_ro(ACCTS, key);
        t.execute().await?;
        let v = *t.get(a);
        t.commit().await?;
        Ok(v)
    })
}

/// Add `delta` to one account.
pub fn bump(c: &mut Coordinator<Ford>, key: u64, delta: i64) -> Result<(), dmtx_runtime::Abort> {
    block_on(async {
        let mut t = c.begin();
        let a = t.add_rw(ACCTS, key);
        t.execute().await?;
        let v = t.get_mut(a);
        v.balance += delta;
        v.writes += 1;
        v.fill = [v.balance as u64; 3];
        t.commit().await
    })
}

/// Run `body` as `coros` coordinators on each of `threads` worker threads, each thread
/// with its own executor, recording every transaction; returns the merged history when
/// every coordinator finished.
pub fn run_parallel<F>(env: &Env, threads: u16, coros: u16, body: F) -> dmtx_check::history::History
where
    F: for<'a> Fn(u16, u16, &'a mut Coordinator<Ford>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>
        + Sync,
{
    let parts: Vec<dmtx_check::history::History> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let body = &body;
                s.spawn(move || {
                    let w = env.worker(t);
                    let history = std::rc::Rc::new(std::cell::RefCell::new(dmtx_check::history::History::new()));
                    let mut coords: Vec<_> = (0..coros)
                        .map(|k| {
                            let mut c = env.coord(&w, k);
                            c.set_observer(Box::new(dmtx_check::recorder::Recorder::new(history.clone())));
                            c
                        })
                        .collect();
                    let mut ex = w.executor();
                    for (k, c) in coords.iter_mut().enumerate() {
                        ex.spawn(body(t, k as u16, c));
                    }
                    ex.run(w.transport().as_ref());
                    drop(coords);
                    std::rc::Rc::try_unwrap(history)
                        .expect("recorders dropped")
                        .into_inner()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = dmtx_check::history::History::new();
    for p in parts {
        all.append(p);
    }
    all
}

/// Check a history at FORD's level (serializable, sessions in order).
pub fn check(history: &dmtx_check::history::History) -> dmtx_check::Report {
    dmtx_check::check(
        history,
        &dmtx_check::check_options(dmtx_runtime::Isolation::Serializable),
    )
}

/// Fail with the checker's evidence unless `history` is serializable.
pub fn assert_serializable(history: &dmtx_check::history::History) {
    let report = check(history);
    assert!(report.is_clean(), "{report}");
    assert!(report.committed > 0, "nothing committed: the test checked nothing");
}
