//! FaRM's round trips per transaction kind as issue 27 item 6 tabulates them (RO 1
//! record: 1, RO several: 2, RW without RO data: 5, RW with RO data: 5; §4.6's count),
//! and the verbs behind them. Method: one transaction of each kind on an idle bank with
//! `dmtx_suite::rtt::measure`, read from the coordinator's verb counters, `execute` and
//! `commit` together (truncation is cleanup's, never the transaction's). The phase by
//! phase budget is `FARM_BUDGET` in `farm_suite.rs`.

use dmtx_protocols::farm::Farm;
use dmtx_runtime::{Knobs, Protocol};
use dmtx_suite::rtt::{measure, Cache, TxnKind};
use dmtx_suite::{Env, Setup};
use dmtx_verbs::OpKind;

/// Issue 27 item 6, FaRM's row.
const ITEM_6: [(TxnKind, u64); 4] = [
    (TxnKind::ReadOnlyOne, 1),
    (TxnKind::ReadOnlyMany, 2),
    (TxnKind::ReadWrite, 5),
    (TxnKind::ReadWriteWithRo, 5),
];

fn bank(replicas: usize, knobs: &[&str]) -> Env<Farm> {
    let proto = Farm::from_knobs(&Knobs::parse(knobs.iter().copied()).unwrap()).unwrap();
    Env::bank(proto, Setup::new(replicas, 20))
}

#[test]
fn round_trips_per_transaction_match_issue_27s_table() {
    for knobs in [&[][..], &["addr_cache=true"]] {
        for replicas in [2, 3] {
            let env = bank(replicas, knobs);
            for (i, (kind, rtts)) in ITEM_6.into_iter().enumerate() {
                for (j, cache) in [Cache::Cold, Cache::Warm].into_iter().enumerate() {
                    let m = measure(&env, kind, cache, (2 * i + j) as u16);
                    assert_eq!(
                        m.execute + m.commit,
                        rtts,
                        "{kind:?} {cache:?}, {replicas} replicas, {knobs:?}: {m:?}"
                    );
                    let trunc = if matches!(kind, TxnKind::ReadOnlyOne | TxnKind::ReadOnlyMany) {
                        0
                    } else {
                        2
                    };
                    assert_eq!(m.cleanup, trunc, "{kind:?}: truncation is cleanup's");
                }
            }
        }
    }
}

/// Reads are of primaries only, one READ per record in execution and one 16-byte READ
/// per record in validation; nothing is locked.
#[test]
fn read_only_reads_primaries_and_locks_nothing() {
    let env = bank(2, &[]);
    let one = measure(&env, TxnKind::ReadOnlyOne, Cache::Warm, 0).attempt;
    assert_eq!(one.ops_total(), 1, "a lone unlocked record skips validation");
    let many = measure(&env, TxnKind::ReadOnlyMany, Cache::Warm, 1).attempt;
    assert_eq!(many.ops_of(OpKind::Read), 3 + 3);
    assert_eq!(many.ops_of(OpKind::Cas), 0);
    for n in [one, many] {
        assert_eq!(n.ops_of(OpKind::Write) + n.ops_of(OpKind::Flush), 0);
    }
}

/// Per written record: an execution READ, the lock CAS, a 16-byte validation READ, the
/// in-place WRITE and the unlock WRITE on the primary; per backup node one redo-log
/// WRITE and one FLUSH. Backups are never read or written in place by the transaction.
#[test]
fn read_write_verbs_follow_the_replica_count() {
    for replicas in 1..=3u64 {
        let env = bank(replicas as usize, &[]);
        let n = measure(&env, TxnKind::ReadWrite, Cache::Warm, 0).attempt;
        let objs = 2;
        let backups = replicas - 1;
        assert_eq!(n.ops_of(OpKind::Read), 2 * objs, "{replicas} replicas");
        assert_eq!(n.ops_of(OpKind::Cas), objs, "{replicas} replicas");
        assert_eq!(n.ops_of(OpKind::Write), backups + 2 * objs, "{replicas} replicas");
        assert_eq!(n.ops_of(OpKind::Flush), backups, "{replicas} replicas");
    }
}

/// The address cache changes bytes, not round trips: a warm record is READ from its
/// slot instead of its bucket.
#[test]
fn the_address_cache_saves_bytes_only() {
    let off = measure(&bank(2, &[]), TxnKind::ReadOnlyOne, Cache::Warm, 0);
    let on = measure(&bank(2, &["addr_cache=true"]), TxnKind::ReadOnlyOne, Cache::Warm, 0);
    assert_eq!((off.execute, off.commit), (on.execute, on.commit));
    assert!(on.attempt.bytes_in < off.attempt.bytes_in, "{on:?} vs {off:?}");
}
