//! KVS: the key-value micro-benchmark of FORD §6.1–6.2 and Motor §7.1.
//!
//! One table of `keys` records, 8-byte keys and 40-byte values (FORD: 1 M pairs, Motor:
//! 10 M; dmtx defaults to 100 k for a fast start). Keys are drawn uniformly or from a
//! scrambled Zipfian of skew `zipf_theta` (default 0.99, as both papers). A fraction
//! `rw_ratio` of the transactions are read-write (FORD §6.2.1's "read:write ratio" and
//! Motor's "ratio of read-write transactions" are per transaction); the rest are
//! read-only. Each transaction touches `objects` distinct keys.
//!
//! | type | index | objects |
//! | --- | --- | --- |
//! | `read_only` | 0 | `objects` × AddRO |
//! | `read_write` | 1 | `objects` × AddRW, each updated |
//!
//! # Value scheme and invariants
//!
//! The papers write a magic word; dmtx writes values that make lost updates, torn
//! records and misplaced records visible after the run. A value is [`KvsValue`]:
//! `balance | writes | key | writer | checksum`, five little-endian words. A read-write
//! transaction over objects `o_0 … o_{m-1}` draws an amount `a ∈ [1, AMOUNT_MAX]`, moves
//! `a·(m-1)` out of `o_0` and `a` into each other object, increments every `writes`, sets
//! `writer` to its coordinator and reseals `checksum`. [`Kvs::check`] asserts on the
//! quiesced table:
//!
//! 1. every key `0..keys` is present exactly once;
//! 2. every record names its own key and its checksum matches (no torn or misplaced
//!    record was ever installed);
//! 3. `Σ balance = keys × INITIAL_BALANCE` (conservation: a lost update breaks it);
//! 4. `Σ writes` equals the object writes of committed read-write transactions, counted
//!    by each coordinator only after `commit` returned `Ok` (a lost or phantom commit
//!    breaks it);
//! 5. no committed transaction read a record that failed 2 (a protocol must never let a
//!    torn read commit; the check runs before commit, is counted after it).
//!
//! With `objects = 1` invariant 3 is trivially kept (nothing moves), and 4 still counts.
//! The default `objects = 2` is the smallest set where a transaction moves value, so
//! conservation is tested; FORD §6.2 uses 1 for its lock-duration runs and varies it
//! for the flush runs (§6.2.4).

use bytemuck::{Pod, Zeroable};
use dmtx_runtime::{Abort, CoordId, Coordinator, KnobError, KnobSpec, Knobs, ObjRef, Protocol, Table, TxnHints};
use dmtx_store::{attrs, key_hash, Attr, StoreError, TableSpec};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::workload::invalid;
use crate::zipf::{uniform, KeyGen, Zipf};
use crate::{InvariantError, Outcome, RecordSink, Snapshot, Workload};

/// Id of the KVS table.
pub const KVS_TABLE_ID: u32 = 0;
/// The KVS table, typed.
const KVS: Table<KvsValue> = Table::new(KVS_TABLE_ID);
/// Most objects one transaction may touch (`objects` knob limit).
pub const OBJECTS_MAX: usize = 16;
/// `balance` of every record at load.
pub const INITIAL_BALANCE: i64 = 1_000_000;
/// Largest amount a read-write transaction moves per receiving object.
pub const AMOUNT_MAX: u64 = 100;
/// Draws of a key before falling back to the next unused key (distinct keys).
const KEY_DRAW_MAX: u32 = 64;

/// A KVS value: 40 bytes, five words.
///
/// Invariants, checked by [`Kvs::check`]:
/// 1. `key` is the record's key, for its whole life;
/// 2. `checksum == checksum_of(balance, writes, key, writer)`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct KvsValue {
    /// Value moved between records by read-write transactions; its sum is conserved.
    pub balance: i64,
    /// Committed writes of this record.
    pub writes: u64,
    /// The record's own key (invariant 1).
    pub key: u64,
    /// `CoordId::global()` of the last writer; 0 at load.
    pub writer: u64,
    /// Hash of the four words above (invariant 2).
    pub checksum: u64,
}

impl KvsValue {
    /// The value's attributes: its five words.
    pub fn attrs() -> Vec<Attr> {
        attrs!(KvsValue {
            "balance" => balance,
            "writes" => writes,
            "key" => key,
            "writer" => writer,
            "checksum" => checksum,
        })
    }
}

const _: () = assert!(std::mem::size_of::<KvsValue>() == 40);

impl KvsValue {
    /// The record of `key` as loaded.
    pub fn initial(key: u64) -> Self {
        let mut v = Self {
            balance: INITIAL_BALANCE,
            writes: 0,
            key,
            writer: 0,
            checksum: 0,
        };
        v.seal();
        v
    }

    /// The checksum the four data words call for.
    #[inline]
    pub fn checksum_of(&self) -> u64 {
        let mut h = key_hash(self.writer ^ 0x6b76_735f_7661_6c75);
        h = key_hash(h ^ self.key);
        h = key_hash(h ^ self.writes);
        key_hash(h ^ self.balance as u64)
    }

    /// Set `checksum` after changing the data words.
    #[inline]
    pub fn seal(&mut self) {
        self.checksum = self.checksum_of();
    }

    /// Invariants 1 and 2 hold for a record read under `key`.
    #[inline]
    pub fn is_intact(&self, key: u64) -> bool {
        self.key == key && self.checksum == self.checksum_of()
    }
}

const KEYS: KnobSpec = KnobSpec {
    name: "keys",
    default: "100000",
    help: "records in the table (FORD uses 1000000, Motor 10000000)",
};
const ZIPF_THETA: KnobSpec = KnobSpec {
    name: "zipf_theta",
    default: "0.99",
    help: "Zipfian skew of key choice in [0, 1); 0 = uniform",
};
const RW_RATIO: KnobSpec = KnobSpec {
    name: "rw_ratio",
    default: "0.5",
    help: "fraction of transactions that are read-write, in [0, 1]",
};
const OBJECTS: KnobSpec = KnobSpec {
    name: "objects",
    default: "2",
    help: "distinct keys per transaction, 1..=16",
};

/// KVS settings (what the knobs hold).
#[derive(Clone, Debug, PartialEq)]
pub struct KvsConfig {
    /// Records in the table.
    pub keys: u64,
    /// Zipfian skew in `[0, 1)`, 0 = uniform.
    pub zipf_theta: f64,
    /// Fraction of read-write transactions, in `[0, 1]`.
    pub rw_ratio: f64,
    /// Distinct keys per transaction, `1..=OBJECTS_MAX`, at most `keys`.
    pub objects: u32,
}

impl Default for KvsConfig {
    fn default() -> Self {
        Self {
            keys: 100_000,
            zipf_theta: 0.99,
            rw_ratio: 0.5,
            objects: 2,
        }
    }
}

/// The KVS workload.
#[derive(Clone, Debug)]
pub struct Kvs {
    cfg: KvsConfig,
    keygen: KeyGen,
}

/// Per-coordinator KVS state.
#[derive(Debug)]
pub struct KvsLocal {
    rng: SmallRng,
    writer: u64,
    writes_committed: u64,
    bad_reads: u64,
}

impl KvsLocal {
    /// Object writes of this coordinator's committed read-write transactions.
    pub fn writes_committed(&self) -> u64 {
        self.writes_committed
    }

    /// Committed transactions that had read a record failing invariant 1 or 2.
    pub fn bad_reads(&self) -> u64 {
        self.bad_reads
    }
}

impl Kvs {
    /// KVS with `cfg`, or the knob that is out of range.
    pub fn new(cfg: KvsConfig) -> Result<Self, KnobError> {
        if cfg.keys == 0 {
            return Err(invalid(&KEYS, cfg.keys, "must be at least 1"));
        }
        Zipf::validate(cfg.keys, cfg.zipf_theta).map_err(|why| invalid(&ZIPF_THETA, cfg.zipf_theta, why))?;
        if !(0.0..=1.0).contains(&cfg.rw_ratio) {
            return Err(invalid(&RW_RATIO, cfg.rw_ratio, "must be in [0, 1]"));
        }
        if cfg.objects == 0 || cfg.objects as usize > OBJECTS_MAX {
            return Err(invalid(&OBJECTS, cfg.objects, format!("must be in 1..={OBJECTS_MAX}")));
        }
        if cfg.objects as u64 > cfg.keys {
            return Err(invalid(
                &OBJECTS,
                cfg.objects,
                format!(
                    "a transaction needs that many distinct keys but `keys` is {}; raise `keys` or lower `objects`",
                    cfg.keys
                ),
            ));
        }
        let keygen = KeyGen::new(cfg.keys, cfg.zipf_theta);
        Ok(Self { cfg, keygen })
    }

    /// The settings.
    pub fn config(&self) -> &KvsConfig {
        &self.cfg
    }

    /// Read-write (true) or read-only, per `rw_ratio`.
    #[inline]
    fn pick_rw(&self, rng: &mut SmallRng) -> bool {
        rng.random::<f64>() < self.cfg.rw_ratio
    }

    /// Fill `keys` with distinct keys from the generator. A key drawn
    /// [`KEY_DRAW_MAX`] times without a new one gives way to the next unused key, so
    /// the loop is bounded even when `objects` is close to `keys` under high skew.
    #[inline]
    fn pick_keys(&self, rng: &mut SmallRng, keys: &mut [u64]) {
        let n = self.cfg.keys;
        debug_assert!(keys.len() as u64 <= n);
        for i in 0..keys.len() {
            let (taken, rest) = keys.split_at_mut(i);
            let mut k = self.keygen.next(rng);
            let mut draws = 1;
            while taken.contains(&k) {
                if draws < KEY_DRAW_MAX {
                    k = self.keygen.next(rng);
                    draws += 1;
                } else {
                    k = if k + 1 == n { 0 } else { k + 1 };
                }
            }
            rest[0] = k;
        }
    }
}

/// One KVS transaction: read-only or read-write, its distinct keys (the first
/// `objects` of them) and the amount it moves.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KvsInput {
    rw: bool,
    keys: [u64; OBJECTS_MAX],
    amount: i64,
}

impl Workload for Kvs {
    type Local = KvsLocal;
    type Input = KvsInput;

    const NAME: &'static str = "kvs";
    const TXN_STEP: &'static str = "kvs.txn";
    const SCALE_KNOB: Option<&'static str> = Some("keys");
    const ABOUT: &'static str =
        "key-value micro-benchmark (FORD §6.1, Motor §7.1): 40-byte values, Zipfian or uniform keys";
    const KNOBS: &'static [KnobSpec] = &[KEYS, ZIPF_THETA, RW_RATIO, OBJECTS];

    fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError> {
        Self::new(KvsConfig {
            keys: knobs.get(&KEYS)?,
            zipf_theta: knobs.get(&ZIPF_THETA)?,
            rw_ratio: knobs.get(&RW_RATIO)?,
            objects: knobs.get(&OBJECTS)?,
        })
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &["read_only", "read_write"]
    }

    /// Both types add their keys, drawn up front, before the one execute.
    fn txn_hints(&self, ty: usize) -> TxnHints {
        [TxnHints::READ_ONLY_DECLARED, TxnHints::DECLARED][ty]
    }

    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec::new(
            KVS_TABLE_ID,
            "kvs",
            std::mem::size_of::<KvsValue>() as u32,
            self.cfg.keys,
        )
        .with_attrs(KvsValue::attrs())]
    }

    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        if table != KVS_TABLE_ID {
            return Err(StoreError::UnknownTable(table));
        }
        for key in 0..self.cfg.keys {
            insert(key, bytemuck::bytes_of(&KvsValue::initial(key)))?;
        }
        Ok(())
    }

    fn local(&self, coord: CoordId, seed: u64) -> KvsLocal {
        KvsLocal {
            rng: SmallRng::seed_from_u64(seed),
            writer: coord.global(),
            writes_committed: 0,
            bad_reads: 0,
        }
    }

    fn draw(&self, local: &mut KvsLocal) -> (usize, KvsInput) {
        let rw = self.pick_rw(&mut local.rng);
        let mut keys = [0u64; OBJECTS_MAX];
        self.pick_keys(&mut local.rng, &mut keys[..self.cfg.objects as usize]);
        let amount = if rw {
            1 + uniform(&mut local.rng, AMOUNT_MAX) as i64
        } else {
            0
        };
        (usize::from(rw), KvsInput { rw, keys, amount })
    }

    async fn run<P: Protocol>(
        &self,
        local: &mut KvsLocal,
        input: &KvsInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let n = self.cfg.objects as usize;
        let rw = input.rw;
        let keys = &input.keys[..n];

        let mut objs = [None::<ObjRef<KvsValue>>; OBJECTS_MAX];
        let objs = &mut objs[..n];
        let mut txn = coord.begin_with(self.txn_hints(usize::from(rw)));
        for (o, &k) in objs.iter_mut().zip(keys.iter()) {
            *o = Some(if rw { txn.add_rw(KVS, k) } else { txn.add_ro(KVS, k) });
        }
        txn.execute().await?;
        let objs = objs.iter().map(|o| o.expect("every object was added"));
        let mut intact = true;
        for (o, &k) in objs.clone().zip(keys.iter()) {
            intact &= txn.get(o).is_intact(k);
        }
        // A torn or misplaced record is written back as read, so the final scan sees it too.
        if rw && intact {
            let amount = input.amount;
            let out = amount * (n as i64 - 1);
            for (i, o) in objs.enumerate() {
                let v = txn.get_mut(o);
                v.balance += if i == 0 { -out } else { amount };
                v.writes += 1;
                v.writer = local.writer;
                v.seal();
            }
        }
        txn.commit().await?;
        // Only the attempt that commits records its writes (a retried one left none).
        if !intact {
            local.bad_reads += 1;
        } else if rw {
            local.writes_committed += n as u64;
        }
        Ok(Outcome::Committed)
    }

    fn check(&self, locals: &[KvsLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let records = snapshot.len(KVS_TABLE_ID) as u64;
        if records != self.cfg.keys {
            return Err(InvariantError {
                invariant: "kvs_key_set",
                detail: format!("expected {} records, found {records}", self.cfg.keys),
            });
        }
        let mut balance_sum: i128 = 0;
        let mut writes_sum: u128 = 0;
        for (i, (key, bytes)) in snapshot.iter(KVS_TABLE_ID).enumerate() {
            if key != i as u64 {
                return Err(InvariantError {
                    invariant: "kvs_key_set",
                    detail: format!(
                        "keys must be exactly 0..{}; position {i} holds key {key}",
                        self.cfg.keys
                    ),
                });
            }
            if bytes.len() != std::mem::size_of::<KvsValue>() {
                return Err(InvariantError {
                    invariant: "kvs_record_size",
                    detail: format!("key {key}: {}-byte value, expected 40", bytes.len()),
                });
            }
            let v: KvsValue = bytemuck::pod_read_unaligned(bytes);
            if v.key != key {
                return Err(InvariantError {
                    invariant: "kvs_record_identity",
                    detail: format!(
                        "record of key {key} holds the value of key {} (last writer {:#x})",
                        v.key, v.writer
                    ),
                });
            }
            if v.checksum != v.checksum_of() {
                return Err(InvariantError {
                    invariant: "kvs_record_checksum",
                    detail: format!(
                        "key {key}: checksum {:#x}, its words call for {:#x}: a torn record was installed (last writer {:#x})",
                        v.checksum,
                        v.checksum_of(),
                        v.writer
                    ),
                });
            }
            balance_sum += v.balance as i128;
            writes_sum += v.writes as u128;
        }
        let bad_reads: u64 = locals.iter().map(|l| l.bad_reads).sum();
        if bad_reads > 0 {
            return Err(InvariantError {
                invariant: "kvs_committed_reads_intact",
                detail: format!("{bad_reads} committed transactions read a torn or misplaced record"),
            });
        }
        let expect_balance = self.cfg.keys as i128 * INITIAL_BALANCE as i128;
        if balance_sum != expect_balance {
            return Err(InvariantError {
                invariant: "kvs_balance_conservation",
                detail: format!(
                    "Σ balance = {balance_sum}, expected {expect_balance} ({} keys × {INITIAL_BALANCE}); an update was lost or applied twice",
                    self.cfg.keys
                ),
            });
        }
        let expect_writes: u128 = locals.iter().map(|l| l.writes_committed as u128).sum();
        if writes_sum != expect_writes {
            return Err(InvariantError {
                invariant: "kvs_write_count",
                detail: format!("Σ writes = {writes_sum}, but committed transactions wrote {expect_writes} objects"),
            });
        }
        Ok(format!(
            "kvs: {records} records intact, Σ balance = {balance_sum} conserved, Σ writes = {writes_sum} = committed object writes"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, knobs};

    #[test]
    fn the_value_declares_its_five_words_as_attributes() {
        let s = testkit::declared_schemas(&Kvs::from_knobs(&Knobs::default()).unwrap());
        let words: Vec<(String, u32)> = ["balance", "writes", "key", "writer", "checksum"]
            .iter()
            .map(|n| (n.to_string(), 8))
            .collect();
        assert_eq!(s["kvs"], words);
    }

    #[test]
    fn from_knobs_defaults_and_errors() {
        let k = Kvs::from_knobs(&Knobs::default()).unwrap();
        assert_eq!(k.config(), &KvsConfig::default());
        let k = Kvs::from_knobs(&knobs(&["keys=10", "zipf_theta=0", "objects=10"])).unwrap();
        assert!(matches!(k.keygen, KeyGen::Uniform { n: 10 }));
        for (bad, needle) in [
            ("keys=0", "`keys` = `0`"),
            ("keys=-1", "`keys` = `-1`"),
            ("zipf_theta=1", "[0, 1)"),
            ("zipf_theta=-0.5", "[0, 1)"),
            ("zipf_theta=x", "`zipf_theta` = `x`"),
            ("rw_ratio=1.5", "must be in [0, 1]"),
            ("objects=0", "1..=16"),
            ("objects=17", "1..=16"),
        ] {
            let e = Kvs::from_knobs(&knobs(&[bad])).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        let e = Kvs::from_knobs(&knobs(&["keys=3", "objects=4"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("raise `keys` or lower `objects`"), "{e}");
    }

    #[test]
    fn load_produces_every_key_once() {
        let k = Kvs::new(KvsConfig {
            keys: 500,
            ..KvsConfig::default()
        })
        .unwrap();
        let specs = k.tables();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].value_bytes, 40);
        assert_eq!(specs[0].capacity, 500);
        let mut seen = Vec::new();
        k.load(KVS_TABLE_ID, &mut |key, v| {
            let v: KvsValue = bytemuck::pod_read_unaligned(v);
            assert_eq!(v, KvsValue::initial(key));
            assert!(v.is_intact(key));
            assert!(!v.is_intact(key + 1));
            seen.push(key);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, (0..500).collect::<Vec<_>>());
        assert!(matches!(
            k.load(1, &mut |_, _| Ok(())),
            Err(StoreError::UnknownTable(1))
        ));
    }

    #[test]
    fn rw_mix_follows_rw_ratio() {
        for ratio in [0.0, 0.25, 0.8, 1.0] {
            let k = Kvs::new(KvsConfig {
                rw_ratio: ratio,
                ..KvsConfig::default()
            })
            .unwrap();
            let mut rng = SmallRng::seed_from_u64(5);
            let picks = 100_000;
            let rw = (0..picks).filter(|_| k.pick_rw(&mut rng)).count();
            let share = rw as f64 / picks as f64;
            assert!((share - ratio).abs() < 0.01, "{ratio}: {share}");
        }
    }

    #[test]
    fn keys_of_one_txn_are_distinct_even_when_crowded() {
        for (keys, objects, theta) in [(16, 16, 0.99), (1000, 16, 0.99), (2, 2, 0.0), (1, 1, 0.5)] {
            let k = Kvs::new(KvsConfig {
                keys,
                zipf_theta: theta,
                rw_ratio: 0.5,
                objects,
            })
            .unwrap();
            let mut rng = SmallRng::seed_from_u64(9);
            let mut buf = [0u64; OBJECTS_MAX];
            for _ in 0..2000 {
                let ks = &mut buf[..objects as usize];
                k.pick_keys(&mut rng, ks);
                let mut sorted = ks.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), objects as usize);
                assert!(ks.iter().all(|&x| x < keys));
            }
        }
    }

    #[test]
    fn check_catches_broken_tables() {
        let k = Kvs::new(KvsConfig {
            keys: 4,
            ..KvsConfig::default()
        })
        .unwrap();
        let build = |f: &dyn Fn(u64, &mut KvsValue)| {
            let mut s = Snapshot::new();
            for key in 0..4 {
                let mut v = KvsValue::initial(key);
                f(key, &mut v);
                s.push(KVS_TABLE_ID, key, bytemuck::bytes_of(&v));
            }
            s.seal();
            s
        };
        let local = || {
            k.local(
                CoordId {
                    cn: 0,
                    thread: 0,
                    coroutine: 1,
                },
                1,
            )
        };
        assert!(k.check(&[local()], &build(&|_, _| {})).is_ok());
        let e = k
            .check(
                &[local()],
                &build(&|key, v| {
                    if key == 2 {
                        v.balance += 1;
                        v.seal();
                    }
                }),
            )
            .unwrap_err();
        assert_eq!(e.invariant, "kvs_balance_conservation");
        let e = k
            .check(
                &[local()],
                &build(&|key, v| {
                    if key == 1 {
                        v.writes += 1;
                    }
                }),
            )
            .unwrap_err();
        assert_eq!(e.invariant, "kvs_record_checksum");
        let e = k
            .check(
                &[local()],
                &build(&|key, v| {
                    if key == 0 {
                        v.writes += 1;
                        v.seal();
                    }
                }),
            )
            .unwrap_err();
        assert_eq!(e.invariant, "kvs_write_count");
        let e = k
            .check(
                &[local()],
                &build(&|key, v| {
                    if key == 3 {
                        *v = KvsValue::initial(0);
                    }
                }),
            )
            .unwrap_err();
        assert_eq!(e.invariant, "kvs_record_identity");
    }

    #[test]
    fn end_to_end_under_ford_keeps_the_invariants() {
        // Goal: KVS run under FORD, several coordinators interleaved on one thread so
        // their transactions conflict, keeps every invariant. Method: a hot 200-key
        // table, 4 objects per transaction, then scan and check.
        let w = Kvs::new(KvsConfig {
            keys: 200,
            zipf_theta: 0.99,
            rw_ratio: 0.7,
            objects: 4,
        })
        .unwrap();
        let run = testkit::run_under_ford(&w, 4, 1000, 42);
        assert_eq!(run.attempted(), 4000);
        assert!(run.committed[1] > 500, "{run:?}");
        assert!(run.committed[0] > 200, "{run:?}");
        let desc = w.check(&run.locals, &run.snapshot).unwrap();
        assert!(desc.contains("conserved"), "{desc}");
        let writes: u64 = run.locals.iter().map(|l| l.writes_committed()).sum();
        assert_eq!(writes, run.committed[1] * 4);
    }
}
