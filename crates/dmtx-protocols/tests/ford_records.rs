//! FORD's bytes on the memory nodes, decoded after the fact: undo logs and their status
//! word after commits and rollbacks, locks given back after a failed execution post,
//! the address cache after a delete, the exact re-read limit, the table id in the meta
//! word, the `log_bytes` knob's bounds, and a known-answer test of the tear checksum.
//! Method: the suite's in-process cluster, with records and logs read straight from the
//! memory nodes' regions.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use dmtx_memnode::{Control, LocalCluster, TableMeta};
use dmtx_protocols::ford::layout::{checksum, meta, SlotView, INVISIBLE, META, VALUE, VERSION, VLOCK};
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_protocols::onever::undo_log::{
    LOG_COMMITTED, LOG_ENTRY_HEADER_BYTES, LOG_HEADER_BYTES, LOG_PENDING, LOG_STATUS_OFFSET,
};
use dmtx_runtime::{block_on, AbortReason, Coordinator, Knobs, Protocol, Worker};
use dmtx_store::{TableSpec, BUCKET_LOCK_OFFSET};
use dmtx_verbs::{MnId, RemotePtr};

/// A `Control` that remembers every allocation, to find a coordinator's log areas.
struct Recording {
    inner: LocalCluster,
    allocs: Mutex<Vec<(MnId, u64, u64)>>,
}

impl Control for Recording {
    fn mn_count(&self) -> usize {
        self.inner.mn_count()
    }
    fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> dmtx_memnode::Result<u64> {
        let at = self.inner.alloc(mn, bytes, align)?;
        self.allocs.lock().unwrap().push((mn, at, bytes));
        Ok(at)
    }
    fn load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> dmtx_memnode::Result<()> {
        self.inner.load(mn, offset, bytes)
    }
    fn put_table(&self, mn: MnId, meta: &TableMeta) -> dmtx_memnode::Result<()> {
        self.inner.put_table(mn, meta)
    }
    fn tables(&self, mn: MnId) -> dmtx_memnode::Result<Vec<TableMeta>> {
        self.inner.tables(mn)
    }
    fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> dmtx_memnode::Result<()> {
        self.inner.put_named(mn, name, value)
    }
    fn named(&self, mn: MnId, name: &str) -> dmtx_memnode::Result<Vec<u8>> {
        self.inner.named(mn, name)
    }
    fn names(&self, mn: MnId) -> dmtx_memnode::Result<Vec<String>> {
        self.inner.names(mn)
    }
}

/// A coordinator and where its undo log lives on each memory node.
fn logged_coord(env: &Env, w: &Worker, coroutine: u16) -> (Coordinator<Ford>, Vec<RemotePtr>) {
    let rec = Recording {
        inner: env.cluster.clone(),
        allocs: Mutex::new(Vec::new()),
    };
    let ctx = w.ctx(coroutine);
    let state = env.ford.coord_state(&ctx, &rec).unwrap();
    let areas: Vec<RemotePtr> = rec
        .allocs
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|(mn, at, bytes)| {
            assert_eq!(bytes, env.ford.config().log_bytes as u64);
            RemotePtr::new(mn, at)
        })
        .collect();
    assert_eq!(areas.len(), dmtx_suite::env::MNS, "one log area per memory node");
    (Coordinator::new(ctx, Arc::clone(&env.ford), state), areas)
}

fn words(env: &Env, at: RemotePtr, n: usize) -> Vec<u64> {
    let region = env.region(at.mn.0);
    (0..n as u64).map(|i| region.load(at.offset + 8 * i).unwrap()).collect()
}

fn bytes(env: &Env, at: RemotePtr, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    env.region(at.mn.0).read(at.offset, &mut b).unwrap();
    b
}

/// Table 0's slot of `key` on replica `r`.
fn slot_of(env: &Env, key: u64, r: usize) -> RemotePtr {
    let rel = env.suite.slots(0)[&key];
    env.suite.catalog().get(0).unwrap().ptr(r, rel)
}

fn slot_bytes(env: &Env) -> usize {
    env.suite.catalog().get(0).unwrap().shape.slot_bytes as usize
}

/// One decoded log: header words and `(table, rel, image)` entries.
struct Log {
    coord: u64,
    txn_seq: u64,
    status: u64,
    entries: Vec<(u64, u64, Vec<u8>)>,
}

fn decode_log(env: &Env, at: RemotePtr) -> Log {
    let h = words(env, at, 4);
    let img = slot_bytes(env) - VERSION;
    let mut entries = Vec::new();
    for i in 0..h[2] as usize {
        let e = RemotePtr::new(
            at.mn,
            at.offset + (LOG_HEADER_BYTES + i * (LOG_ENTRY_HEADER_BYTES + img)) as u64,
        );
        let head = words(env, e, 2);
        let image = bytes(env, RemotePtr::new(e.mn, e.offset + LOG_ENTRY_HEADER_BYTES as u64), img);
        entries.push((head[0], head[1], image));
    }
    Log {
        coord: h[0],
        txn_seq: h[1],
        status: words(env, RemotePtr::new(at.mn, at.offset + LOG_STATUS_OFFSET), 1)[0],
        entries,
    }
}

/// Goal: after a commit, the log on each replica's node names the coordinator and the
/// transaction, holds one entry per written record (not the read-only one) with its
/// table, slot and image before the commit, and says `committed`; a node holding no
/// replica gets no log.
#[test]
fn a_commit_leaves_committed_logs_of_the_old_images_on_each_replica_node() {
    let env = Env::small(8);
    let w = env.worker(0);
    let (mut c, areas) = logged_coord(&env, &w, 0);
    bump(&mut c, 1, 0).unwrap();
    bump(&mut c, 2, 0).unwrap();
    let before: Vec<Vec<u8>> = [1, 2]
        .iter()
        .map(|&k| bytes(&env, slot_of(&env, k, 0), slot_bytes(&env)))
        .collect();
    block_on(async {
        let mut t = c.begin();
        let a = t.add_rw(ACCTS, 1);
        let b = t.add_rw(ACCTS, 2);
        t.add_ro(ACCTS, 3);
        t.execute().await?;
        t.get_mut(a).balance -= 10;
        t.get_mut(b).balance += 10;
        t.commit().await
    })
    .unwrap();
    let seq = c.set.txn_seq;
    for (r, area) in areas.iter().enumerate() {
        let log = decode_log(&env, *area);
        if r >= 2 {
            assert_eq!(
                (log.txn_seq, log.status),
                (0, 0),
                "memory node {r} holds no replica: no log"
            );
            continue;
        }
        assert_eq!(log.coord, c.ctx.id.global(), "node {r}");
        assert_eq!(log.txn_seq, seq, "node {r}");
        assert_eq!(log.status, LOG_COMMITTED, "node {r}: the release marks it committed");
        assert_eq!(log.entries.len(), 2, "node {r}: the read-only record is not logged");
        for (i, key) in [1u64, 2].into_iter().enumerate() {
            let (table, rel, image) = &log.entries[i];
            assert_eq!(*table, 0);
            assert_eq!(
                *rel,
                env.suite.slots(0)[&key],
                "node {r} entry {i}: the slot of key {key}"
            );
            assert_eq!(
                image[..],
                before[i][VERSION..],
                "node {r} entry {i}: the image before the commit"
            );
        }
    }
    assert_eq!(read_one(&mut c, 1).unwrap().balance, 90);
}

/// Goal: a commit whose post fails leaves its log `pending` on the nodes it reached,
/// with the old images the rollback restored; a node that was down still holds the
/// previous transaction's committed log. A transaction aborted before commit writes no
/// log at all.
#[test]
fn a_rolled_back_commit_leaves_its_log_pending_and_an_early_abort_none() {
    let env = Env::small(8);
    let w = env.worker(0);
    let (mut c, areas) = logged_coord(&env, &w, 0);
    bump(&mut c, 4, 0).unwrap();
    let committed_seq = c.set.txn_seq;
    let old = bytes(&env, slot_of(&env, 4, 0), slot_bytes(&env));
    let fabric = env.cluster.fabric().clone();
    let res = block_on(async {
        let mut t = c.begin();
        let o = t.add_rw(ACCTS, 4);
        t.execute().await?;
        t.get_mut(o).balance += 500;
        fabric.set_down(MnId(1), true);
        t.commit().await
    });
    assert_eq!(res.unwrap_err().reason, AbortReason::Fault);
    fabric.set_down(MnId(1), false);
    let failed_seq = c.set.txn_seq;
    let primary = decode_log(&env, areas[0]);
    assert_eq!((primary.txn_seq, primary.status), (failed_seq, LOG_PENDING));
    assert_eq!(primary.entries.len(), 1);
    assert_eq!(primary.entries[0].2[..], old[VERSION..], "the old image");
    let now = bytes(&env, slot_of(&env, 4, 0), slot_bytes(&env));
    assert_eq!(
        now[VERSION..],
        old[VERSION..],
        "the rollback restored what the log holds"
    );
    let backup = decode_log(&env, areas[1]);
    assert_eq!(
        (backup.txn_seq, backup.status),
        (committed_seq, LOG_COMMITTED),
        "the node that was down kept the earlier log"
    );

    // A lock conflict aborts in execute: the log stays as it was.
    let mut other = env.coord(&w, 1);
    block_on(async {
        let mut t = other.begin();
        t.add_rw(ACCTS, 5);
        t.execute().await.unwrap();
        let res = async {
            let mut u = c.begin();
            u.add_rw(ACCTS, 5);
            u.commit().await
        }
        .await;
        assert_eq!(res.unwrap_err().reason, AbortReason::LockConflict);
        drop(t);
    });
    let after = decode_log(&env, areas[0]);
    assert_eq!((after.txn_seq, after.status), (failed_seq, LOG_PENDING));
}

/// Goal: when an execution post fails, every lock it took is given back: a slot lock on
/// a node that applied its CAS, and a bucket chain's insert lock. Method: the backup is
/// down, so the post (the lock CAS or the insert's lookup CAS on the primary, a backup
/// READ) fails after the primary applied its part; the lock words are then read.
#[test]
fn a_failed_execution_post_gives_back_its_slot_and_bucket_locks() {
    let env = Env::small(8);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    bump(&mut c, 2, 0).unwrap();
    read_one(&mut c, 3).unwrap();
    let fabric = env.cluster.fabric().clone();
    let info = env.suite.catalog().get(0).unwrap().clone();
    let home = info.shape.home_bucket(77);
    let bucket_lock = info.ptr(0, info.shape.bucket_off(home) + BUCKET_LOCK_OFFSET);
    let vlock = slot_of(&env, 2, 0);
    fabric.set_down(MnId(1), true);
    let res = block_on(async {
        let mut t = c.begin();
        t.add_rw(ACCTS, 2);
        t.add_insert(ACCTS, 77);
        t.add_ro(ACCTS, 3); // from the dead backup
        t.execute().await
    });
    fabric.set_down(MnId(1), false);
    assert_eq!(res.unwrap_err().reason, AbortReason::Fault);
    assert_eq!(words(&env, vlock, 1)[0], 0, "the slot lock was given back");
    assert_eq!(words(&env, bucket_lock, 1)[0], 0, "the insert lock was given back");
    bump(&mut c, 2, 1).unwrap();
}

/// Goal: a committed delete evicts the key from the address cache at both levels (the
/// worker's and the compute node's), so no later transaction goes to the freed slot.
#[test]
fn a_delete_evicts_the_key_from_the_address_cache() {
    let env = Env::small(8);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    read_one(&mut c, 6).unwrap();
    assert!(c.ctx.cache.get(0, 6).is_some(), "the read cached the address");
    block_on(async {
        let mut t = c.begin();
        t.add_delete(ACCTS, 6);
        t.commit().await
    })
    .unwrap();
    assert_eq!(c.ctx.cache.get(0, 6), None, "the worker's level");
    assert_eq!(env.worker(1).ctx(0).cache.get(0, 6), None, "the compute node's level");
    assert_eq!(read_one(&mut c, 6).unwrap_err().reason, AbortReason::NotFound);
}

/// Goal: a read-only record that stays invisible (or torn) is re-read exactly
/// `reread_max` times, one round trip each, then the transaction aborts; it reads it
/// once more it is whole again. Method: set the invisible bit, or break the checksum,
/// by writing the slot on every replica directly.
#[test]
fn an_invisible_or_torn_record_is_reread_exactly_reread_max_times() {
    for reread_max in [0u32, 1, 3] {
        let env = Env::new(
            4,
            100,
            16,
            4,
            FordConfig {
                reread_max,
                ..FordConfig::default()
            },
        );
        let w = env.worker(0);
        let mut c = env.coord(&w, 0);
        read_one(&mut c, 1).unwrap(); // warm
        for (what, reason) in [("invisible", AbortReason::Invisible), ("torn", AbortReason::Torn)] {
            let saved: Vec<Vec<u8>> = (0..2)
                .map(|r| bytes(&env, slot_of(&env, 1, r), slot_bytes(&env)))
                .collect();
            for r in 0..2 {
                let s = slot_of(&env, 1, r);
                let region = env.region(s.mn.0);
                if what == "invisible" {
                    region
                        .write(s.offset + VLOCK as u64, &(INVISIBLE | 9).to_le_bytes())
                        .unwrap();
                } else {
                    region.write(s.offset + VALUE as u64, &777u64.to_le_bytes()).unwrap();
                }
            }
            let res = read_one(&mut c, 1);
            assert_eq!(res.unwrap_err().reason, reason, "{what}, reread_max {reread_max}");
            let n = c.ctx.txn_counters;
            assert_eq!(n.rtts, 1 + reread_max as u64, "{what}: the first read and each re-read");
            assert_eq!(n.ops_total(), 1 + reread_max as u64);
            for (r, img) in saved.iter().enumerate() {
                let s = slot_of(&env, 1, r);
                env.region(s.mn.0).write(s.offset, img).unwrap();
            }
            assert_eq!(read_one(&mut c, 1).unwrap().balance, 100);
        }
    }
}

/// Goal: the meta word of every record holds its table's id (bits 32-63) and the
/// occupied bit, as loaded, as written by a commit and an insert, and after a delete
/// (occupied cleared, table kept).
#[test]
fn the_meta_word_names_the_table() {
    const T: u32 = 5;
    let specs = [TableSpec::new(0, "zero", 40, 16), TableSpec::new(T, "five", 40, 16)];
    let suite = dmtx_suite::Env::with_tables(
        Ford::new(FordConfig::default()),
        dmtx_suite::Setup::new(2, 40),
        &specs,
        |_, insert| {
            for k in 0..4 {
                insert(k, bytemuck::bytes_of(&Acct::new(1)))?;
            }
            Ok(())
        },
    );
    let table: dmtx_runtime::Table<Acct> = dmtx_runtime::Table::new(T);
    let catalog = suite.catalog();
    let info = catalog.get(T).unwrap();
    let meta_of = |key: u64| -> Vec<u64> {
        let all = suite.scan(T, 0);
        let rel = all.iter().find(|r| r.0 == key).map(|r| r.2);
        let rel = rel.unwrap_or_else(|| suite.slots(T).get(&key).copied().expect("key"));
        (0..2)
            .map(|r| {
                let p = info.ptr(r, rel);
                suite.region(p.mn).load(p.offset + META as u64).unwrap()
            })
            .collect()
    };
    assert_eq!(meta_of(2), [meta(T, true); 2], "as loaded");
    let cn = suite.mem_cn(0);
    let w = cn.worker(0).unwrap();
    let mut c = w.coordinator(&suite.proto, 0).unwrap();
    block_on(async {
        let mut t = c.begin();
        let o = t.add_rw(table, 2);
        let n = t.add_insert(table, 40);
        t.execute().await?;
        t.get_mut(o).balance += 1;
        *t.get_mut(n) = Acct::new(3);
        t.commit().await
    })
    .unwrap();
    assert_eq!(meta_of(2), [meta(T, true); 2], "as a commit wrote it");
    assert_eq!(meta_of(40), [meta(T, true); 2], "as an insert wrote it");
    let rel = suite.slots(T)[&40];
    block_on(async {
        let mut t = c.begin();
        t.add_delete(table, 40);
        t.commit().await
    })
    .unwrap();
    for r in 0..2 {
        let p = info.ptr(r, rel);
        let m = suite.region(p.mn).load(p.offset + META as u64).unwrap();
        assert_eq!(m, meta(T, false), "replica {r}: deleted, table kept");
    }
    assert_eq!(meta(T, true) >> 32, T as u64);
    assert_eq!(meta(0, true), 1);
}

/// Goal: `log_bytes` accepts multiples of 8 from 4096 and refuses the rest with the
/// rule; a transaction whose undo log needs one entry more than the area holds aborts
/// with `log_full`, naming the knob, and one that fits commits.
#[test]
fn log_bytes_is_bounded_and_a_log_one_entry_too_long_aborts() {
    let parse = |v: &str| Ford::from_knobs(&Knobs::parse([format!("log_bytes={v}").as_str()]).unwrap());
    for ok in ["4096", "4104", "65536"] {
        assert_eq!(parse(ok).unwrap().config().log_bytes, ok.parse::<u32>().unwrap());
    }
    for bad in ["4088", "4095", "4100", "0", "-8", "x"] {
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains("log_bytes") && e.contains(bad), "{bad}: {e}");
    }
    assert!(parse("4088").unwrap_err().to_string().contains("at least 4096"));
    assert!(parse("4100").unwrap_err().to_string().contains("multiple of 8"));

    // 40-byte values: slots of 80 bytes, log entries of 16 + 72 bytes after a 32-byte
    // header, so 4096 bytes hold 46 entries.
    let env = Env::new(
        64,
        100,
        128,
        4,
        FordConfig {
            log_bytes: 4096,
            ..FordConfig::default()
        },
    );
    let entry = LOG_ENTRY_HEADER_BYTES + slot_bytes(&env) - VERSION;
    let fits = (4096 - LOG_HEADER_BYTES) / entry;
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    let write_n = |c: &mut Coordinator<Ford>, n: u64| {
        block_on(async {
            let mut t = c.begin();
            for k in 0..n {
                t.add_rw(ACCTS, k);
            }
            t.commit().await
        })
    };
    write_n(&mut c, fits as u64).expect("a log that fits commits");
    let res = write_n(&mut c, fits as u64 + 1);
    assert_eq!(res.unwrap_err().reason, AbortReason::LogFull);
    let why = c.ctx.last_log_full.clone().expect("the abort says why");
    assert!(why.contains("log_bytes") && why.contains("4096"), "{why}");
    write_n(&mut c, 1).expect("the locks of the refused transaction were given back");
}

/// Goal: the tear checksum is the function records on disk were written with (a
/// known answer), and changing any one word it covers (version, key, meta, any value
/// word, a partial last word) changes it.
#[test]
fn the_tear_checksum_has_a_known_answer_and_covers_every_word() {
    let value: Vec<u8> = (0..44u8).collect();
    assert_eq!(checksum(1, 2, 3, &value), KNOWN_ANSWER);
    assert_eq!(checksum(0, 0, 0, &[]), KNOWN_ANSWER_EMPTY);
    for len in [20usize, 40, 44] {
        let v = &value[..len];
        let base = checksum(7, 8, 9, v);
        assert_ne!(base, checksum(7 ^ 1 << 40, 8, 9, v), "version");
        assert_ne!(base, checksum(7, 8 ^ 1, 9, v), "key");
        assert_ne!(base, checksum(7, 8, 9 ^ 1 << 33, v), "meta");
        for word in 0..len.div_ceil(8) {
            let mut m = v.to_vec();
            let last = (word * 8 + 7).min(len - 1);
            m[last] ^= 0x80;
            assert_ne!(base, checksum(7, 8, 9, &m), "{len}-byte value, word {word}");
        }
    }
    // The checksum a record carries is over exactly what SlotView checks.
    let env = Env::small(4);
    let s = bytes(&env, slot_of(&env, 1, 0), slot_bytes(&env));
    let v = SlotView(&s);
    assert!(v.intact(40));
    assert_eq!(
        u64::from_le_bytes(s[32..40].try_into().unwrap()),
        checksum(
            v.version(),
            v.key(),
            u64::from_le_bytes(s[META..META + 8].try_into().unwrap()),
            v.value(40)
        )
    );
}

/// `checksum(1, 2, 3, bytes 0..44)`: what records on memory nodes (and `--backing`
/// files) carry; a change of the function needs a new layout version.
const KNOWN_ANSWER: u64 = 0x6637_8a2a_b190_80c9;
/// `checksum(0, 0, 0, [])`.
const KNOWN_ANSWER_EMPTY: u64 = 0xf063_b995_0940_cb2c;
