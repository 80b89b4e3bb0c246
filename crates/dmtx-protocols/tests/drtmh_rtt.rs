//! DrTM+H's round trips per transaction kind as issue 27 item 6 tabulates them (RO 1
//! record: 1, RO several: 2, RW without RO data: 4, RW with RO data: 4; §4.6's count;
//! `strict=true` +1 for RW with RO data), and the verbs behind them. Method: one
//! transaction of each kind on an idle bank with `dmtx_suite::rtt::measure`, read from
//! the coordinator's verb counters, `execute` and `commit` together. The phase by phase
//! budget is `DRTMH_BUDGET` in `drtmh_suite.rs`.

use dmtx_protocols::drtmh::Drtmh;
use dmtx_runtime::{Knobs, Protocol};
use dmtx_suite::rtt::{measure, Cache, TxnKind};
use dmtx_suite::{Env, Setup};
use dmtx_verbs::OpKind;

/// Issue 27 item 6, DrTM+H's row, and strict mode's.
const ITEM_6: [(TxnKind, u64, u64); 4] = [
    (TxnKind::ReadOnlyOne, 1, 1),
    (TxnKind::ReadOnlyMany, 2, 2),
    (TxnKind::ReadWrite, 4, 4),
    (TxnKind::ReadWriteWithRo, 4, 5),
];

fn bank(replicas: usize, knobs: &[&str]) -> Env<Drtmh> {
    let proto = Drtmh::from_knobs(&Knobs::parse(knobs.iter().copied()).unwrap()).unwrap();
    Env::bank(proto, Setup::new(replicas, 20))
}

#[test]
fn round_trips_per_transaction_match_issue_27s_table() {
    for knobs in [&[][..], &["addr_cache=false"], &["strict=true"]] {
        let strict = knobs.contains(&"strict=true");
        for replicas in [2, 3] {
            let env = bank(replicas, knobs);
            for (i, (kind, rtts, strict_rtts)) in ITEM_6.into_iter().enumerate() {
                for (j, cache) in [Cache::Cold, Cache::Warm].into_iter().enumerate() {
                    let m = measure(&env, kind, cache, (2 * i + j) as u16);
                    let want = if strict { strict_rtts } else { rtts };
                    assert_eq!(
                        m.execute + m.commit,
                        want,
                        "{kind:?} {cache:?}, {replicas} replicas, {knobs:?}: {m:?}"
                    );
                }
            }
        }
    }
}

/// Lock & validate: per written record a CAS and an 8-byte version READ; per read-only
/// record a 16-byte READ; in one round trip (strict: the read-only READs in a second).
#[test]
fn lock_and_validate_verbs() {
    for (knobs, rounds) in [(&[][..], 1), (&["strict=true"][..], 2)] {
        let env = bank(2, knobs);
        let m = measure(&env, TxnKind::ReadWriteWithRo, Cache::Warm, 0);
        let n = m.attempt;
        assert_eq!(n.ops_of(OpKind::Cas), 1, "{knobs:?}");
        assert_eq!(
            n.ops_of(OpKind::Read),
            2 + 1 + 1,
            "{knobs:?}: execution, version, read-only"
        );
        // The lock&validate round(s), then commit-backup and commit-primary.
        assert_eq!(m.commit, rounds + 2, "{knobs:?}");
    }
}

/// Per written record: an execution READ, the lock CAS with its version READ, the
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

/// The address cache is on by default (FORD's code gives DrTM+H one): a warm record is
/// READ from its slot, fewer bytes than the bucket FaRM's default reads, same round
/// trips.
#[test]
fn the_address_cache_is_on_by_default_and_saves_bytes_only() {
    let on = measure(&bank(2, &[]), TxnKind::ReadOnlyOne, Cache::Warm, 0);
    let off = measure(&bank(2, &["addr_cache=false"]), TxnKind::ReadOnlyOne, Cache::Warm, 0);
    assert_eq!((off.execute, off.commit), (on.execute, on.commit));
    assert!(on.attempt.bytes_in < off.attempt.bytes_in, "{on:?} vs {off:?}");
}
