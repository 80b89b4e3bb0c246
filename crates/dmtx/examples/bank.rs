//! Embedding dmtx: start an in-process cluster, create a table, run concurrent
//! transfers written against the Txn API with FORD, and check that money is conserved.
//!
//! `cargo run --release --example bank`

use std::sync::Arc;

use dmtx::memnode::LocalCluster;
use dmtx::protocols::ford::{Ford, FordConfig};
use dmtx::runtime::{Abort, Cn, Coordinator, LocalExecutor, Protocol, RealClock, Table};
use dmtx::store::{create_table, placement, TableBuilder, TableSpec};

/// An account record, viewed in place in fetched memory.
#[repr(C)]
#[derive(Copy, Clone, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct Account {
    balance: i64,
    transfers: u64,
}

const ACCOUNTS: Table<Account> = Table::new(0);
const N_ACCOUNTS: u64 = 1000;
const INITIAL: i64 = 1_000;
const THREADS: u16 = 2;
const COROUTINES: u16 = 4;
const TRANSFERS_PER_COORDINATOR: u64 = 20_000;

/// Move `amount` from `from` to `to` unless `from` would go negative.
async fn transfer(c: &mut Coordinator<Ford>, from: u64, to: u64, amount: i64) -> Result<bool, Abort> {
    let mut txn = c.begin();
    let a = txn.add_rw(ACCOUNTS, from);
    let b = txn.add_rw(ACCOUNTS, to);
    txn.execute().await?;
    if txn.get(a).balance < amount {
        txn.abort();
        return Ok(false);
    }
    txn.get_mut(a).balance -= amount;
    txn.get_mut(b).balance += amount;
    txn.get_mut(a).transfers += 1;
    txn.commit().await?;
    Ok(true)
}

/// Sum every balance in one serializable read-only transaction.
async fn audit(c: &mut Coordinator<Ford>) -> Result<i64, Abort> {
    let mut txn = c.begin();
    let objs: Vec<_> = (0..N_ACCOUNTS).map(|k| txn.add_ro(ACCOUNTS, k)).collect();
    txn.execute().await?;
    let total = objs.iter().map(|&o| txn.get(o).balance).sum();
    txn.commit().await?;
    Ok(total)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two memory nodes; every table has a primary and a backup.
    let cluster = LocalCluster::new(2, 64 << 20);
    let ford = Arc::new(Ford::new(FordConfig::default()));

    let mut table = TableBuilder::new(TableSpec::new(0, "accounts", 16, N_ACCOUNTS), ford.layout());
    for k in 0..N_ACCOUNTS {
        let acct = Account {
            balance: INITIAL,
            transfers: 0,
        };
        table.insert(k, bytemuck::bytes_of(&acct))?;
    }
    create_table(&cluster, table, &placement(0, 2, 2)?)?;

    // One compute node; each worker thread runs its coordinators on its own executor.
    let cn = Cn::connect(
        0,
        Arc::new(cluster.fabric().clone()),
        Arc::new(cluster.clone()),
        Arc::new(RealClock::new()),
    )?;
    let committed: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (cn, ford) = (cn.clone(), Arc::clone(&ford));
                s.spawn(move || {
                    let worker = cn.worker(t).expect("worker");
                    let mut coords: Vec<_> = (0..COROUTINES)
                        .map(|k| worker.coordinator(&ford, k).expect("coordinator"))
                        .collect();
                    let done = std::cell::Cell::new(0u64);
                    let mut ex = LocalExecutor::new();
                    for (k, c) in coords.iter_mut().enumerate() {
                        let done = &done;
                        ex.spawn(async move {
                            let mut x =
                                (t as u64 * COROUTINES as u64 + k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                            for _ in 0..TRANSFERS_PER_COORDINATOR {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                let (from, to) = (x % N_ACCOUNTS, (x >> 20) % N_ACCOUNTS);
                                if from != to && transfer(c, from, to, (x >> 40) as i64 % 50).await == Ok(true) {
                                    done.set(done.get() + 1);
                                }
                            }
                        });
                    }
                    ex.run(worker.transport().as_ref());
                    done.get()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker thread")).sum()
    });

    let worker = cn.worker(THREADS)?;
    let mut c = worker.coordinator(&ford, 0)?;
    let total = loop {
        // A concurrent writer could abort the audit; here nothing runs, but retry anyway.
        if let Ok(total) = dmtx::runtime::block_on(audit(&mut c)) {
            break total;
        }
    };
    let attempted = THREADS as u64 * COROUTINES as u64 * TRANSFERS_PER_COORDINATOR;
    println!("{committed} of {attempted} transfers committed; total balance {total}");
    assert_eq!(total, N_ACCOUNTS as i64 * INITIAL, "money was created or destroyed");
    Ok(())
}
