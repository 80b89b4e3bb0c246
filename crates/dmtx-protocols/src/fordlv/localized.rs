//! Publish, localized validation, FORD's commit, finalize (ford.txt §4.7, Fig. 10).
//! The order and the rules are the module doc's.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};
use dmtx_verbs::msg::WorkerAddr;

use super::serve::{self, Status, Ver};
use super::{FordLv, FordLvVariant, VcacheMode};
use crate::ford;
use crate::vcache::{Lookup, Stamp, Vcache};

/// Publish `pubs`, then look up `checks`, on a Vcache this thread can reach: the
/// coordinator's own node's, or the one a request named. `out` gets one status per
/// check.
pub(super) fn apply(cache: &Vcache, pubs: &[Ver], checks: &[Ver], out: &mut Vec<Status>) {
    for p in pubs {
        cache.publish(p.table, p.key, p.version);
    }
    out.extend(checks.iter().map(|c| check(cache, c)));
}

/// Look up one read-only version: unchanged only if settled at the version read.
fn check(cache: &Vcache, c: &Ver) -> Status {
    match cache.lookup(c.table, c.key) {
        Lookup::Hit { version, pending } if !pending && version == c.version => Status::Unchanged,
        Lookup::Hit { .. } => Status::Changed,
        Lookup::Miss(stamp) => Status::Miss(stamp),
    }
}

/// Install a fetched, unlocked version after a miss stamped `stamp` (guarded; the
/// variant overwrites). Returns whether it went in.
pub(super) fn insert(cache: &Vcache, variant: FordLvVariant, v: Ver, stamp: Stamp) -> bool {
    if variant == FordLvVariant::StaleInsert {
        cache.overwrite(v.table, v.key, v.version);
        true
    } else {
        cache.insert(v.table, v.key, v.version, stamp)
    }
}

/// Where a version's entry lives.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Home {
    /// This node's Vcache.
    Here,
    /// Compute node `n`'s.
    Node(u16),
    /// None: validated over RDMA, never published.
    Nowhere,
}

/// A read-only object to validate over RDMA, with what its lookup found.
struct Miss {
    obj: usize,
    /// The stamp of its Vcache miss, and where that Vcache is (none: no Vcache).
    stamp: Option<(Stamp, Home)>,
}

pub(super) async fn commit(txn: &mut Txn<'_, FordLv>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let validate = ford::validate::needs_validation(txn);
    if !writes && !validate {
        return Ok(());
    }
    let c = &mut *txn.coord;
    let cfg = c.proto.config();
    let (mode, variant) = (cfg.mode, cfg.variant);
    let me = c.ctx.id.cn;
    let nodes = c.thread_state.nodes.max(1);
    let here = c.cn_state.cache.is_some();
    let home = |table: u32| -> Home {
        let owner = match mode {
            VcacheMode::Local => me,
            VcacheMode::Global => 0,
            VcacheMode::Partition => (table % u32::from(nodes)) as u16,
        };
        if owner != me {
            Home::Node(owner)
        } else if here {
            Home::Here
        } else {
            Home::Nowhere
        }
    };

    // What goes where: publishes of every written record, checks of read-only ones.
    let txn_id = c.set.txn_id;
    let mut pubs: Vec<(Home, Ver)> = Vec::new();
    let mut checks: Vec<(usize, Home, Ver)> = Vec::new();
    let mut misses: Vec<Miss> = Vec::new();
    for (i, o) in c.set.objs.iter().enumerate() {
        let (table, key) = (o.table, o.key);
        if o.access.writes() {
            let h = home(table);
            if h != Home::Nowhere {
                pubs.push((
                    h,
                    Ver {
                        table,
                        key,
                        version: txn_id,
                    },
                ));
            }
        } else if validate {
            let version = o.proto.version;
            match home(table) {
                // Partition: another node's table is validated over RDMA.
                Home::Node(_) if mode == VcacheMode::Partition => {
                    c.ctx.metric(super::METRIC_REMOTE, 1);
                    misses.push(Miss { obj: i, stamp: None });
                }
                Home::Nowhere => misses.push(Miss { obj: i, stamp: None }),
                h => checks.push((i, h, Ver { table, key, version })),
            }
        }
    }
    c.ctx.step(super::STEP_VCACHE, (pubs.len() + checks.len()) as u32);

    // 1. Publishes (and checks) on other nodes: one message round to them all, before
    //    any local check. Only `global` sends checks away, to its one node, which
    //    publishes before it checks.
    let mut remote: Vec<(u16, Vec<u8>)> = Vec::new();
    for h in pubs.iter().map(|(h, _)| *h).chain(checks.iter().map(|(_, h, _)| *h)) {
        if let Home::Node(n) = h {
            if !remote.iter().any(|(m, _)| *m == n) {
                remote.push((n, Vec::new()));
            }
        }
    }
    let mut statuses: Vec<(usize, Status, Home)> = Vec::new();
    if !remote.is_empty() {
        for (n, req) in &mut remote {
            let p: Vec<Ver> = pubs
                .iter()
                .filter(|(h, _)| *h == Home::Node(*n))
                .map(|(_, v)| *v)
                .collect();
            let k: Vec<Ver> = checks
                .iter()
                .filter(|(_, h, _)| *h == Home::Node(*n))
                .map(|(_, _, v)| *v)
                .collect();
            *req = serve::encode_round(&p, &k);
        }
        let thread = c.ctx.id.thread;
        let reqs: Vec<(WorkerAddr, &[u8])> = remote
            .iter()
            .map(|(n, req)| (WorkerAddr::new(*n, thread), req.as_slice()))
            .collect();
        c.ctx.metric(super::METRIC_MSG_RTTS, 1);
        let replies = c.ctx.call_many(&reqs).await;
        let mut failed = false;
        for ((n, _), reply) in remote.iter().zip(replies) {
            let Ok(reply) = reply else {
                failed = true;
                continue;
            };
            let mine = checks.iter().filter(|(_, h, _)| *h == Home::Node(*n));
            // Every check needs its status: one left out would pass unvalidated.
            let Some(got) = serve::decode_statuses(&reply, mine.clone().count()) else {
                failed = true;
                continue;
            };
            for ((i, _, _), s) in mine.zip(got) {
                statuses.push((*i, s, Home::Node(*n)));
            }
        }
        if failed {
            unpublish(txn, &pubs);
            return Err(Abort::new(AbortReason::Fault));
        }
    }

    // 2. Publishes and checks on this node's Vcache.
    let c = &mut *txn.coord;
    let late = variant == FordLvVariant::ValidateBeforePublish;
    if let Some(cache) = c.cn_state.cache.as_ref() {
        let mut used = false;
        // The broken variant publishes this node's versions only after validating.
        for (_, v) in pubs.iter().filter(|(h, _)| *h == Home::Here && !late) {
            cache.publish(v.table, v.key, v.version);
            used = true;
        }
        for &(i, _, v) in checks.iter().filter(|(_, h, _)| *h == Home::Here) {
            statuses.push((i, check(cache, &v), Home::Here));
            used = true;
        }
        if used {
            c.ctx.metric(super::METRIC_BYTES, cache.bytes());
        }
    }
    c.ctx.metric(super::METRIC_PUBLISHES, pubs.len() as u64);

    // 3. What the lookups found.
    let mut changed = false;
    for &(i, s, h) in &statuses {
        match s {
            Status::Unchanged => {
                c.ctx.metric(super::METRIC_HITS, 1);
                c.ctx.metric(super::METRIC_HIT_RATE, 1);
            }
            Status::Changed => {
                c.ctx.metric(super::METRIC_HITS, 1);
                c.ctx.metric(super::METRIC_HIT_RATE, 1);
                c.ctx.metric(super::METRIC_CHANGED, 1);
                changed = true;
            }
            Status::Miss(stamp) => {
                c.ctx.metric(super::METRIC_MISSES, 1);
                c.ctx.metric(super::METRIC_HIT_RATE, 0);
                if variant != FordLvVariant::AbsentAsUnchanged {
                    misses.push(Miss {
                        obj: i,
                        stamp: Some((stamp, h)),
                    });
                }
            }
        }
    }
    if changed {
        unpublish(txn, &pubs);
        return Err(Abort::new(AbortReason::Validation));
    }

    // 4. Misses over RDMA (FORD's validation round), then the fetched versions in.
    if !misses.is_empty() {
        misses.sort_unstable_by_key(|m| m.obj);
        let picked = |i: usize| misses.binary_search_by_key(&i, |m| m.obj).is_ok();
        if let Err(a) = ford::validate::validate_remote(txn, picked).await {
            unpublish(txn, &pubs);
            return Err(a);
        }
        insert_fetched(txn, &misses, variant);
    }
    if late {
        let c = &mut *txn.coord;
        if let Some(cache) = c.cn_state.cache.as_ref() {
            for (_, v) in pubs.iter().filter(|(h, _)| *h == Home::Here) {
                cache.publish(v.table, v.key, v.version);
            }
        }
    }

    // 5. FORD's coalescent commit; then the entries are settled (or taken back).
    match ford::commit::commit(txn).await {
        Ok(()) => {
            finalize(txn, &pubs);
            Ok(())
        }
        Err(a) => {
            unpublish(txn, &pubs);
            Err(a)
        }
    }
}

/// The versions the RDMA validation fetched for `misses` go into the Vcache they
/// missed in, if their record was unlocked (the insert itself checks the stamp).
fn insert_fetched(txn: &mut Txn<'_, FordLv>, misses: &[Miss], variant: FordLvVariant) {
    let c = &mut *txn.coord;
    let mut away: Vec<(u16, Vec<(Ver, Stamp)>)> = Vec::new();
    for m in misses {
        let Some((stamp, h)) = m.stamp else { continue };
        let o = &c.set.objs[m.obj];
        let (vlock, version) = ford::validate::fetched(&c.state.post, &o.proto);
        let v = Ver {
            table: o.table,
            key: o.key,
            version,
        };
        if vlock != 0 && variant != FordLvVariant::StaleInsert {
            c.ctx.metric(super::METRIC_STALE_SKIPS, 1);
            continue;
        }
        match h {
            Home::Here => {
                let cache = c.cn_state.cache.as_ref().expect("a miss here has a Vcache");
                let done = insert(cache, variant, v, stamp);
                c.ctx.metric(
                    if done {
                        super::METRIC_INSERTS
                    } else {
                        super::METRIC_STALE_SKIPS
                    },
                    1,
                );
            }
            Home::Node(n) => match away.iter_mut().find(|(m, _)| *m == n) {
                Some((_, list)) => list.push((v, stamp)),
                None => away.push((n, vec![(v, stamp)])),
            },
            Home::Nowhere => {}
        }
    }
    for (n, list) in away {
        send(txn, n, &serve::encode_inserts(&list));
    }
}

/// A one-way message to compute node `n`'s Vcache (same thread).
fn send(txn: &mut Txn<'_, FordLv>, n: u16, msg: &[u8]) {
    let c = &mut *txn.coord;
    let rpc = c.ctx.rpc.as_ref().expect("a Vcache on another node means messaging");
    // A lost message loses an entry's update: finalize and insert are optional, and a
    // lost remove leaves a pending entry the next writer of the key replaces.
    let _ = rpc.send(WorkerAddr::new(n, c.ctx.id.thread), msg);
    c.ctx.metric(super::METRIC_MSGS, 1);
}

/// The writes landed: clear the pending marks (a delete drops its entry).
fn finalize(txn: &mut Txn<'_, FordLv>, pubs: &[(Home, Ver)]) {
    settle(txn, pubs, true);
}

/// The transaction aborts after publishing: take its entries back.
fn unpublish(txn: &mut Txn<'_, FordLv>, pubs: &[(Home, Ver)]) {
    settle(txn, pubs, false);
}

fn settle(txn: &mut Txn<'_, FordLv>, pubs: &[(Home, Ver)], committed: bool) {
    if pubs.is_empty() {
        return;
    }
    let c = &mut *txn.coord;
    let deleted = |v: &Ver| {
        c.set
            .objs
            .iter()
            .any(|o| o.table == v.table && o.key == v.key && o.access == Access::Delete)
    };
    let mut away: Vec<(u16, Vec<(Ver, bool)>)> = Vec::new();
    for &(h, v) in pubs {
        let keep = committed && !deleted(&v);
        match h {
            Home::Here => {
                let cache = c.cn_state.cache.as_ref().expect("a publish here has a Vcache");
                if committed {
                    cache.finalize(v.table, v.key, v.version, keep);
                } else {
                    cache.remove(v.table, v.key, v.version);
                }
            }
            Home::Node(n) => match away.iter_mut().find(|(m, _)| *m == n) {
                Some((_, list)) => list.push((v, keep)),
                None => away.push((n, vec![(v, keep)])),
            },
            Home::Nowhere => {}
        }
    }
    for (n, list) in away {
        let msg = if committed {
            serve::encode_finalize(&list)
        } else {
            serve::encode_remove(&list)
        };
        send(txn, n, &msg);
    }
}
