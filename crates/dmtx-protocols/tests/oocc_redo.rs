//! OOCC's redo log (§V, issue 29 item 5): a read-write commit's new images and id are
//! in the log of every memory node holding a replica of a written record, ACKed before
//! any record is written; a transaction that aborts after RTT2 invalidates its logs
//! before it releases a lock.

use dmtx_protocols::onever::undo_log::{LOG_ENTRY_HEADER_BYTES, LOG_HEADER_BYTES, LOG_PENDING, LOG_STATUS_OFFSET};
use dmtx_protocols::oocc::{Oocc, OoccConfig};
use dmtx_runtime::{block_on, AbortReason, Coordinator};
use dmtx_suite::{bank, Env, Setup};
use dmtx_verbs::MnId;

fn env() -> Env<Oocc> {
    let cfg = OoccConfig {
        lease_us: 2_000,
        lease_adjust: false,
        clock_check: false,
        ..OoccConfig::default()
    };
    Env::bank(Oocc::new(cfg), Setup::new(2, 20))
}

/// The 8-byte word at `at` of coordinator `c`'s log area on `mn`.
fn log_word(e: &Env<Oocc>, c: &Coordinator<Oocc>, mn: MnId, at: u64) -> u64 {
    let area = c.state.log_area(mn);
    let mut b = [0u8; 8];
    e.region(mn).read(area.offset + at, &mut b).expect("log area");
    u64::from_le_bytes(b)
}

fn restamp(t: &mut dmtx_runtime::Txn<'_, Oocc>, i: usize) {
    let key = t.coord.set.objs[i].key;
    let v = t.coord.set.value_mut(i);
    let (b, s) = bank::decode(key, v).unwrap_or((bank::INITIAL, 0));
    bank::encode(key, b, s + 1, v);
}

/// Goal: a committed transaction's log on each replica's node holds its id and the new
/// image, valid; one aborted by validation after RTT2 leaves every log invalid.
#[test]
fn a_commit_logs_new_images_and_an_abort_after_rtt2_invalidates_them() {
    let e = env();
    let w = e.mem_cn(0).worker(0).expect("worker");
    let mut c1 = w.coordinator(&e.proto, 0).expect("coordinator");
    let mns: Vec<MnId> = e
        .catalog()
        .get(bank::TABLE.id())
        .expect("bank")
        .meta
        .replicas
        .iter()
        .map(|&(m, _)| m)
        .collect();
    assert_eq!(mns.len(), 2);
    block_on(async {
        let mut t = c1.begin();
        t.add_rw(bank::TABLE, 3);
        t.execute().await.expect("idle");
        restamp(&mut t, 0);
        let id = t.id();
        t.commit().await.expect("idle: commits");
        for &mn in &mns {
            assert_eq!(
                log_word(&e, &c1, mn, LOG_STATUS_OFFSET),
                LOG_PENDING,
                "valid: replay on recovery"
            );
            assert_eq!(log_word(&e, &c1, mn, 16), 1, "one entry");
            let image = (LOG_HEADER_BYTES + LOG_ENTRY_HEADER_BYTES) as u64;
            assert_eq!(log_word(&e, &c1, mn, image), id, "the new image names the writer");
        }

        // T1 reads 1 and writes 2; another transaction intention-locks 1 before T1's
        // RTT2, whose validation of 1 fails after the logs were written.
        let mut t1 = c1.begin();
        t1.add_ro(bank::TABLE, 1);
        t1.add_rw(bank::TABLE, 2);
        t1.execute().await.expect("T1 reads 1, locks 2");
        let ptr = e
            .catalog()
            .get(bank::TABLE.id())
            .expect("bank")
            .ptr(0, e.slots(bank::TABLE.id())[&1]);
        e.region(ptr.mn)
            .cas(ptr.offset, 0, 0x4000_0000_0000_0999)
            .expect("lock 1");
        restamp(&mut t1, 1);
        let got = t1.commit().await.expect_err("1 is locked at validation");
        assert_eq!(got.reason, AbortReason::Validation);
        for &mn in &mns {
            assert_eq!(
                log_word(&e, &c1, mn, LOG_STATUS_OFFSET),
                0,
                "invalidated before the release"
            );
        }
    });
}
