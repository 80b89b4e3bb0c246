//! What the FORD-on-the-simulator tests share: a bank of accounts replicated on two
//! memory nodes, and the transfer transaction they run.

#![allow(dead_code)]

use std::sync::Arc;

use dmtx_memnode::LocalCluster;
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{Abort, Coordinator, Protocol, Table};
use dmtx_store::{create_table, placement, TableBuilder, TableSpec};
use dmtx_verbs::{MnId, Region};

/// A record: balance in word 0, filler (40 bytes).
pub const ACCTS: Table<[u64; 5]> = Table::new(0);
/// Every account's opening balance.
pub const INITIAL: u64 = 1000;
/// Memory nodes; every table has a primary and one backup.
pub const MNS: usize = 2;

/// `keys` accounts of [`INITIAL`] each on an in-process cluster of [`MNS`] nodes, and
/// FORD; the nodes' regions, for a `Sim`.
pub fn bank(keys: u64) -> (LocalCluster, Arc<Ford>, Vec<Arc<Region>>) {
    let cluster = LocalCluster::new(MNS, 4 << 20);
    let ford = Arc::new(Ford::new(FordConfig::default()));
    let mut b = TableBuilder::new(TableSpec::new(0, "accts", 40, keys * 2 + 16), ford.layout());
    let record: Vec<u8> = [INITIAL, 0, 0, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
    for k in 0..keys {
        b.insert(k, &record).unwrap();
    }
    create_table(&cluster, b, &placement(0, MNS, 2).unwrap()).unwrap();
    let regions = (0..MNS)
        .map(|i| Arc::clone(cluster.node(MnId(i as u16)).unwrap().region()))
        .collect();
    (cluster, ford, regions)
}

/// Move `amount` from account `a` to account `b` in one transaction.
pub async fn transfer(c: &mut Coordinator<Ford>, a: u64, b: u64, amount: u64) -> Result<(), Abort> {
    let mut tx = c.begin();
    let ra = tx.add_rw(ACCTS, a);
    let rb = tx.add_rw(ACCTS, b);
    tx.execute().await?;
    tx.get_mut(ra)[0] = tx.get(ra)[0].wrapping_sub(amount);
    tx.get_mut(rb)[0] = tx.get(rb)[0].wrapping_add(amount);
    tx.commit().await
}
