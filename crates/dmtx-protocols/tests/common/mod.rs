//! Test scaffolding: an in-process cluster with one table of accounts, and FORD
//! coordinators on it.

#![allow(dead_code)]

use std::sync::Arc;

use dmtx_memnode::LocalCluster;
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, Cn, Coordinator, Protocol, RealClock, Table, Worker};
use dmtx_store::{create_table, placement, TableBuilder, TableSpec};
use dmtx_verbs::{MnId, Region};

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
    pub cluster: LocalCluster,
    pub cn: Cn,
    pub ford: Arc<Ford>,
}

impl Env {
    /// `keys` accounts with balance `initial` each, in a table sized for `capacity`
    /// records with `slots` slots per bucket, replicated on 2 memory nodes.
    pub fn new(keys: u64, initial: i64, capacity: u64, slots: u32, cfg: FordConfig) -> Self {
        let cluster = LocalCluster::new(2, 64 << 20);
        let ford = Arc::new(Ford::new(cfg));
        let mut spec = TableSpec::new(0, "accts", 40, capacity);
        spec.slots_per_bucket = slots;
        let mut b = TableBuilder::new(spec, ford.layout());
        for k in 0..keys {
            b.insert(k, bytemuck::bytes_of(&Acct::new(initial))).unwrap();
        }
        create_table(&cluster, b, &placement(0, 2, 2).unwrap()).unwrap();
        let cn = Cn::connect(
            0,
            Arc::new(cluster.fabric().clone()),
            Arc::new(cluster.clone()),
            Arc::new(RealClock::new()),
        )
        .unwrap();
        Self { cluster, cn, ford }
    }

    pub fn small(keys: u64) -> Self {
        Self::new(keys, 100, keys * 2 + 16, 4, FordConfig::default())
    }

    /// Another compute node on the same memory nodes, with its own address cache.
    pub fn other_cn(&self, id: u16) -> Cn {
        Cn::connect(
            id,
            Arc::new(self.cluster.fabric().clone()),
            Arc::new(self.cluster.clone()),
            Arc::new(RealClock::new()),
        )
        .unwrap()
    }

    pub fn worker(&self, thread: u16) -> Worker {
        self.cn.worker(thread).unwrap()
    }

    pub fn coord(&self, w: &Worker, coroutine: u16) -> Coordinator<Ford> {
        w.coordinator(&self.ford, coroutine).unwrap()
    }

    pub fn region(&self, mn: u16) -> &Arc<Region> {
        self.cluster.fabric().region(MnId(mn))
    }

    /// Sum of balances and number of records, read from replica `r`.
    pub fn scan(&self, r: usize) -> (i64, u64, Vec<(u64, Acct)>) {
        let w = self.worker(900 + r as u16);
        let mut ctx = w.ctx(0);
        let mut all = Vec::new();
        block_on(dmtx_runtime::scan_table(&mut ctx, 0, r, self.ford.layout(), |k, v| {
            all.push((k, *bytemuck::from_bytes::<Acct>(v)));
        }))
        .unwrap();
        all.sort_by_key(|(k, _)| *k);
        (all.iter().map(|(_, a)| a.balance).sum(), all.len() as u64, all)
    }

    /// Both replicas hold the same records.
    pub fn assert_replicas_agree(&self) {
        let (_, _, p) = self.scan(0);
        let (_, _, b) = self.scan(1);
        assert_eq!(p, b, "primary and backup diverged");
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
                    let mut ex = dmtx_runtime::LocalExecutor::new();
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

/// Check a history for serializability, with real-time order off (clocks of different
/// threads are comparable here, but FORD does not claim strictness).
pub fn check(history: &dmtx_check::history::History) -> dmtx_check::Report {
    dmtx_check::check(history, &dmtx_check::CheckOptions::default())
}

/// Fail with the checker's evidence unless `history` is serializable.
pub fn assert_serializable(history: &dmtx_check::history::History) {
    let report = check(history);
    assert!(report.is_clean(), "{report}");
    assert!(report.committed > 0, "nothing committed: the test checked nothing");
}
