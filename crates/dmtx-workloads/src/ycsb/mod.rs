//! YCSB (Cooper et al., SoCC'10) as the transactional papers run it: RCBench §6.1 and
//! §6.6.1 (on Deneva's YCSB), OOCC §VIII-B–D.
//!
//! One logical table of `records` records, each `fields × field_bytes` bytes (default
//! 10 × 100 B = 1 KB, RCBench §6.1; OOCC §VIII-B uses one 8-byte field and sweeps 8 B–1 KB
//! in §VIII-G). A transaction runs `ops_per_txn` operations on distinct keys (default 10,
//! Deneva's `REQ_PER_QUERY`, which RCBench runs; its §6.6.1 scalability test uses 15).
//! Keys are drawn uniformly or from a scrambled Zipfian of skew `zipf_theta`
//! ([`KeyGen`]). RCBench loads 10 M records per node; dmtx defaults to 100 k (≈ 100 MB per
//! replica at 1 KB) so a run starts fast. OOCC does not give its record count.
//!
//! # Write ratio: per operation or per transaction (`write_unit`)
//!
//! The papers mean different things by "write ratio", so the unit is explicit:
//!
//! - `write_unit=op` (default): each operation is an update with probability
//!   `write_ratio`, independently (RCBench §6.1: "0.2 means 80% reads and 20% writes";
//!   Deneva's `gen_requests`). A transaction with at least one update is read-write.
//! - `write_unit=txn`: a transaction is read-write with probability `write_ratio` and then
//!   updates every key it touches, otherwise it is read-only (OOCC §VIII-D: "10% of
//!   transactions are write operations while the remaining 90% are read-only"; FORD's
//!   KVS `rw_ratio`).
//!
//! An update rewrites the whole record (`update=record`, default) or one random field
//! (`update=field`, YCSB's `writeallfields=false`). Every update reads the record first
//! (AddRW: the protocol fetches what it locks, FORD §4.2), so it is a read-modify-write.
//! Defaults follow RCBench §6.1: `write_ratio=0.2`, `zipf_theta=0.2`.
//!
//! # Core workloads (`core`)
//!
//! `core=a|b|c|d|f` fixes the per-operation mix of that YCSB core workload (`write_unit=op`;
//! setting `write_ratio` or `write_unit` beside it is refused) and makes `zipf_theta`
//! default to YCSB's 0.99 unless it is set. `ops_per_txn` operations still make one
//! transaction (`ops_per_txn=1` gives YCSB's single-operation requests).
//!
//! | `core` | mix per operation | keys |
//! | --- | --- | --- |
//! | `a` | 50% read, 50% update | Zipfian |
//! | `b` | 95% read, 5% update | Zipfian |
//! | `c` | 100% read | Zipfian |
//! | `d` | 95% read, 5% insert of a new key | latest |
//! | `f` | 50% read, 50% read-modify-write | Zipfian |
//!
//! **E** (short range scans) is refused: dmtx's tables are FORD's hash index, which has
//! no ordered scan. **F equals A** here: since an update already reads the record it
//! locks, A's update and F's read-modify-write issue the same verbs; F is kept so that
//! the names match YCSB's.
//!
//! **D** inserts keys no one else uses: a coordinator's `i`-th insert into partition `p`
//! has key `(2^53 | i << 24 | c) · partitions + p`, with `c` the coordinator's 24-bit
//! [`CoordId::compact`] id, so coordinators never collide and no coordination is needed.
//! YCSB's "latest" distribution (`SkewedLatestGenerator`) reads the newest records most:
//! rank `r` of an unscrambled Zipfian is the `r`-th newest record. YCSB orders all
//! acknowledged inserts with a shared counter; dmtx coordinators share nothing, so each
//! ranks **its own** committed inserts newest first, then the loaded records from the
//! highest key down (a simplification: a coordinator never reads another's fresh
//! inserts, and the Zipfian spans the loaded count, so the oldest `own inserts` loaded
//! records are never drawn). The tables are sized with `insert_room` extra records:
//! unless given, enough for the run (its `--txns`, or its length at
//! [`TXNS_PER_COORDINATOR_SECOND_MAX`] commits per coordinator per second, about
//! `0.05 × ops_per_txn` inserts each), else `records`; once a table is full, inserts
//! abort with `table_full`. With a power-of-two partition count and the run's
//! coordinators known, a table is placed by runs of each coordinator's insert index
//! (`dmtx_store::KeyRuns`), so the room costs memory only as inserts fill it.
//!
//! # Transaction types
//!
//! | type | index | objects |
//! | --- | --- | --- |
//! | `read_only` | 0 | `ops_per_txn` × AddRO |
//! | `read_write` | 1 | AddRO for reads, AddRW for updates (at least one) |
//! | `insert` (preset `d`, in place of `read_write`) | 1 | AddRO for reads, AddInsert for inserts (at least one) |
//!
//! # Partitions and transaction scalability (RCBench §6.6.1)
//!
//! `partitions=N` splits the key space `k mod N` into N tables, ids `0..N`, table `i`
//! holding the keys `k ≡ i (mod N)`. The driver puts table `i`'s primary on memory node
//! `i mod memory-nodes` ([`dmtx_store::placement`]), so with `partitions` set to the
//! number of memory nodes, partition `i` is memory node `i`.
//!
//! `nodes_per_txn=0` (default) draws keys over the whole table; the partitions follow
//! from the keys. `nodes_per_txn=K` (1 ≤ K ≤ N, K ≤ `ops_per_txn`) is RCBench's θ: a
//! transaction picks K distinct partitions, the first its home, and spreads its
//! operations evenly over them in blocks as Deneva does (operation `i` goes to partition
//! `⌊i·K / ops⌋` of the list), drawing each key from that partition's own Zipfian over
//! its `records / N` keys (Deneva: `row · part_cnt + part`). RCBench's 15-op test with
//! K = 15 thus has 14 of 15 operations away from home. RCBench's nodes hold both compute
//! and data, so "home" is local and the rest remote; dmtx's memory nodes hold only data
//! and every access is remote, so K counts the memory nodes a transaction spans, and the
//! home is drawn uniformly per transaction (Deneva fixes it per server thread) so every
//! memory node is home equally often whatever the coordinator count.
//!
//! # Value scheme and invariants
//!
//! Every field starts with an 8-byte stamp `writes << 32 | check`, where `writes` counts
//! the committed updates of that field and `check` is a 32-bit hash of (key, field,
//! writes); the rest of the field repeats the stamp's bytes. An update increments
//! `writes` and rewrites the field. Each transaction verifies every record it read
//! before commit and counts, after `commit` returned `Ok`, the field writes it made and
//! the inserts it made. [`Ycsb::check`] asserts on the quiesced tables:
//!
//! 1. `ycsb_key_set`: table `p` holds exactly the loaded keys `k < records` with
//!    `k mod N = p`, each once, plus inserted keys (`ycsb_partition` if a key sits in
//!    another table);
//! 2. `ycsb_record_intact`: every field's stamp matches its key and index and its bytes
//!    repeat the stamp (a torn, misplaced or zeroed record fails);
//! 3. `ycsb_record_atomic` (`update=record`): all fields of a record carry the same
//!    `writes` (a half-installed record fails);
//! 4. `ycsb_write_count`: `Σ writes` over all fields equals the field writes of committed
//!    transactions (a lost update or a phantom commit fails);
//! 5. `ycsb_inserts`: the inserted keys of coordinator `c` in partition `p` are exactly
//!    its first `n` insert keys, `n` its committed inserts there, each once;
//! 6. `ycsb_committed_reads_intact`: no committed transaction read a record failing 2
//!    or 3.

use dmtx_runtime::{
    did_you_mean, Abort, CoordId, Coordinator, KnobError, KnobSpec, Knobs, ObjRef, Protocol, Table, TxnHints,
};
use dmtx_store::{Attr, KeyRuns, StoreError, TableSpec};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::workload::invalid;
use crate::zipf::{KeyGen, Zipf};
use crate::{room_per_part, InvariantError, Outcome, RecordSink, RunHint, Snapshot, Workload};
use plan::{Dist, OpKind, Plan};

mod check;
mod plan;
mod record;

/// Most operations in one transaction (`ops_per_txn` limit).
pub const OPS_MAX: usize = 32;
/// Most partitions (`partitions` limit).
pub const PARTITIONS_MAX: u32 = 256;
/// Most fields per record.
pub const FIELDS_MAX: u32 = 64;
/// Bytes of a field's stamp, and the smallest field.
pub const FIELD_BYTES_MIN: u32 = 8;
/// Largest field.
pub const FIELD_BYTES_MAX: u32 = 65536;
/// Largest record (`fields × field_bytes`).
pub const RECORD_BYTES_MAX: u64 = 1 << 20;
/// Most records (`records` limit), so loaded keys never reach the insert key space.
pub const RECORDS_MAX: u64 = 1 << 40;
/// Flag of an inserted key's per-partition index (see the module doc, preset D).
const INSERT_FLAG: u64 = 1 << 53;
/// Bits of the coordinator id in an inserted key.
const COORD_BITS: u32 = 24;
/// Most inserts per coordinator per partition.
const INSERT_SEQ_MAX: u64 = 1 << 29;
/// Draws of a key before falling back to the next unused key (distinct keys).
const KEY_DRAW_MAX: u32 = 64;
/// Seed of the field check hash.
const STAMP_SEED: u64 = 0x7963_7362_5f76_616c;

const PRESET: KnobSpec = KnobSpec {
    name: "core",
    default: "none",
    help: "YCSB core mix: a (50% update), b (5% update), c (read-only), d (5% insert, read latest), \
           f (50% read-modify-write) or none; e needs range scans, which the hash index lacks",
};
const RECORDS: KnobSpec = KnobSpec {
    name: "records",
    default: "100000",
    help: "records loaded (RCBench §6.1: 10 M per node)",
};
const FIELDS: KnobSpec = KnobSpec {
    name: "fields",
    default: "10",
    help: "fields per record, 1..=64 (YCSB, RCBench: 10)",
};
const FIELD_BYTES: KnobSpec = KnobSpec {
    name: "field_bytes",
    default: "100",
    help: "bytes per field, 8..=65536 (YCSB, RCBench: 100, a 1 KB record; OOCC: one 8-byte field)",
};
const OPS_PER_TXN: KnobSpec = KnobSpec {
    name: "ops_per_txn",
    default: "10",
    help: "operations on distinct keys per transaction, 1..=32 (Deneva/RCBench: 10; RCBench §6.6.1: 15)",
};
const ZIPF_THETA: KnobSpec = KnobSpec {
    name: "zipf_theta",
    default: "0.2",
    help: "Zipfian skew in [0, 1), 0 = uniform (RCBench §6.1: 0.2); 0.99 under `core` unless set",
};
const WRITE_RATIO: KnobSpec = KnobSpec {
    name: "write_ratio",
    default: "0.2",
    help: "share of writes in [0, 1], per operation or per transaction (write_unit); RCBench §6.1: 0.2",
};
const WRITE_UNIT: KnobSpec = KnobSpec {
    name: "write_unit",
    default: "op",
    help: "op: each operation writes with probability write_ratio (RCBench, Deneva); \
           txn: a transaction writes all its keys with that probability (OOCC, FORD KVS)",
};
const UPDATE: KnobSpec = KnobSpec {
    name: "update",
    default: "record",
    help: "record: an update rewrites every field; field: one random field (YCSB writeallfields=false)",
};
const PARTITIONS: KnobSpec = KnobSpec {
    name: "partitions",
    default: "1",
    help: "tables, key k in table k mod N, table i's primary on memory node i mod MNs; \
           set it to the memory-node count (1..=256)",
};
const NODES_PER_TXN: KnobSpec = KnobSpec {
    name: "nodes_per_txn",
    default: "0",
    help: "partitions per transaction, the first its home, ops spread evenly (RCBench §6.6.1); \
           0 = keys drawn over the whole table",
};
const INSERT_ROOM: KnobSpec = KnobSpec {
    name: "insert_room",
    default: "0",
    help: "extra records of room for inserts (core=d, ~0.05 x ops_per_txn per txn; a full table \
           aborts them with table_full); default: sized from the run's length; 0 = as many as `records`",
};

/// The unit of `write_ratio`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WriteUnit {
    /// Each operation writes with probability `write_ratio` (RCBench, Deneva).
    Op,
    /// A transaction is read-write with probability `write_ratio` and writes every key
    /// (OOCC, FORD's KVS).
    Txn,
}

/// What an update rewrites.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UpdateScope {
    /// Every field.
    Record,
    /// One field drawn uniformly.
    Field,
}

/// A YCSB core workload (see the module doc).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Preset {
    /// The knobs alone decide the mix.
    None,
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// Read only.
    C,
    /// 95% read of the latest records, 5% insert.
    D,
    /// 50% read, 50% read-modify-write.
    F,
}

impl Preset {
    /// Its knob value.
    pub fn name(self) -> &'static str {
        match self {
            Preset::None => "none",
            Preset::A => "a",
            Preset::B => "b",
            Preset::C => "c",
            Preset::D => "d",
            Preset::F => "f",
        }
    }

    /// The write (or insert) share per operation it fixes; `None` for [`Preset::None`].
    pub fn write_ratio(self) -> Option<f64> {
        match self {
            Preset::None => None,
            Preset::A | Preset::F => Some(0.5),
            Preset::B | Preset::D => Some(0.05),
            Preset::C => Some(0.0),
        }
    }
}

/// `raw` as one of `choices` (case-insensitive), or an error naming them.
fn choose<T: Copy>(spec: &KnobSpec, raw: &str, choices: &[(&str, T)]) -> Result<T, KnobError> {
    let lower = raw.to_ascii_lowercase();
    if let Some(&(_, v)) = choices.iter().find(|(name, _)| *name == lower) {
        return Ok(v);
    }
    let names: Vec<&str> = choices.iter().map(|c| c.0).collect();
    Err(invalid(
        spec,
        raw,
        format!("expected one of {}{}", names.join(", "), did_you_mean(&lower, &names)),
    ))
}

/// YCSB settings (what the knobs hold, after a preset was applied).
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbConfig {
    /// The core workload, or [`Preset::None`].
    pub preset: Preset,
    /// Records loaded.
    pub records: u64,
    /// Fields per record.
    pub fields: u32,
    /// Bytes per field.
    pub field_bytes: u32,
    /// Operations (distinct keys) per transaction.
    pub ops_per_txn: u32,
    /// Zipfian skew in `[0, 1)`, 0 = uniform.
    pub zipf_theta: f64,
    /// Share of writes, in `[0, 1]`, per `write_unit`.
    pub write_ratio: f64,
    /// Unit of `write_ratio`.
    pub write_unit: WriteUnit,
    /// What an update rewrites.
    pub update: UpdateScope,
    /// Tables the key space is split into (`k mod partitions`).
    pub partitions: u32,
    /// Partitions per transaction; 0 = keys over the whole table.
    pub nodes_per_txn: u32,
    /// Extra records of room for inserts (preset D); 0 = `records`.
    pub insert_room: u64,
}

impl Default for YcsbConfig {
    fn default() -> Self {
        Self {
            preset: Preset::None,
            records: 100_000,
            fields: 10,
            field_bytes: 100,
            ops_per_txn: 10,
            zipf_theta: 0.2,
            write_ratio: 0.2,
            write_unit: WriteUnit::Op,
            update: UpdateScope::Record,
            partitions: 1,
            nodes_per_txn: 0,
            insert_room: 0,
        }
    }
}

impl YcsbConfig {
    /// The defaults with `preset`'s mix and YCSB's skew 0.99.
    pub fn preset(preset: Preset) -> Self {
        let mut cfg = Self {
            preset,
            ..Self::default()
        };
        if let Some(w) = preset.write_ratio() {
            cfg.write_ratio = w;
            cfg.zipf_theta = 0.99;
        }
        cfg
    }
}

/// The YCSB workload.
#[derive(Clone, Debug)]
pub struct Ycsb {
    cfg: YcsbConfig,
    /// Generators: `[0]` over the whole table (`nodes_per_txn = 0`) or over a partition
    /// of `records / N` keys; `[1]` over the partitions of one more key.
    dists: Vec<Dist>,
    /// `insert_room` was given, not derived from the run.
    room_fixed: bool,
    /// Coordinators of the run, when known: inserts are then placed by runs of each
    /// coordinator's insert index.
    coordinators: usize,
}

/// Committed core=d transactions per coordinator per second that no run reaches: the
/// room for inserts sized from a run's length assumes it.
pub const TXNS_PER_COORDINATOR_SECOND_MAX: f64 = 10_000.0;

/// Smallest run of a coordinator's insert index.
const INSERT_RUN_LOG2_MIN: u32 = 10;

/// Per-coordinator YCSB state.
#[derive(Debug)]
pub struct YcsbLocal {
    rng: SmallRng,
    coord: CoordId,
    compact: u64,
    field_writes: u64,
    bad_reads: u64,
    /// Committed inserts per partition.
    inserted: Vec<u64>,
    inserted_total: u64,
}

impl YcsbLocal {
    /// Field writes of this coordinator's committed transactions.
    pub fn field_writes_committed(&self) -> u64 {
        self.field_writes
    }

    /// Committed transactions that had read a torn, misplaced or half-written record.
    pub fn bad_reads(&self) -> u64 {
        self.bad_reads
    }

    /// Records this coordinator inserted in committed transactions.
    pub fn inserts_committed(&self) -> u64 {
        self.inserted_total
    }
}

/// The check word of field `field` of `key` after `writes` updates.
impl Ycsb {
    /// YCSB with `cfg`, or the knob that is out of range.
    pub fn new(cfg: YcsbConfig) -> Result<Self, KnobError> {
        if cfg.records == 0 || cfg.records > RECORDS_MAX {
            return Err(invalid(&RECORDS, cfg.records, format!("must be in 1..={RECORDS_MAX}")));
        }
        if cfg.fields == 0 || cfg.fields > FIELDS_MAX {
            return Err(invalid(&FIELDS, cfg.fields, format!("must be in 1..={FIELDS_MAX}")));
        }
        if !(FIELD_BYTES_MIN..=FIELD_BYTES_MAX).contains(&cfg.field_bytes) {
            return Err(invalid(
                &FIELD_BYTES,
                cfg.field_bytes,
                format!("must be in {FIELD_BYTES_MIN}..={FIELD_BYTES_MAX} (a field starts with an 8-byte stamp)"),
            ));
        }
        let record_bytes = cfg.fields as u64 * cfg.field_bytes as u64;
        if record_bytes > RECORD_BYTES_MAX {
            return Err(invalid(
                &FIELD_BYTES,
                cfg.field_bytes,
                format!("a record of {record_bytes} bytes exceeds {RECORD_BYTES_MAX}; lower `fields` or `field_bytes`"),
            ));
        }
        if cfg.ops_per_txn == 0 || cfg.ops_per_txn as usize > OPS_MAX {
            return Err(invalid(
                &OPS_PER_TXN,
                cfg.ops_per_txn,
                format!("must be in 1..={OPS_MAX}"),
            ));
        }
        Zipf::validate(cfg.records, cfg.zipf_theta).map_err(|why| invalid(&ZIPF_THETA, cfg.zipf_theta, why))?;
        if !(0.0..=1.0).contains(&cfg.write_ratio) {
            return Err(invalid(&WRITE_RATIO, cfg.write_ratio, "must be in [0, 1]"));
        }
        if let Some(w) = cfg.preset.write_ratio() {
            if cfg.write_ratio != w || cfg.write_unit != WriteUnit::Op {
                return Err(invalid(
                    &WRITE_RATIO,
                    cfg.write_ratio,
                    format!(
                        "core workload {} fixes write_ratio={w} per op; drop `write_ratio`/`write_unit` or set core=none",
                        cfg.preset.name()
                    ),
                ));
            }
        }
        if cfg.partitions == 0 || cfg.partitions > PARTITIONS_MAX {
            return Err(invalid(
                &PARTITIONS,
                cfg.partitions,
                format!("must be in 1..={PARTITIONS_MAX}"),
            ));
        }
        let n = cfg.partitions as u64;
        let ops = cfg.ops_per_txn as u64;
        if cfg.nodes_per_txn == 0 {
            if ops > cfg.records {
                return Err(invalid(
                    &OPS_PER_TXN,
                    ops,
                    format!(
                        "a transaction needs that many distinct keys but `records` is {}; raise `records` or lower `ops_per_txn`",
                        cfg.records
                    ),
                ));
            }
        } else {
            let k = cfg.nodes_per_txn as u64;
            if k > n {
                return Err(invalid(
                    &NODES_PER_TXN,
                    k,
                    format!("a transaction cannot touch more than the {n} partitions; raise `partitions`"),
                ));
            }
            if k > ops {
                return Err(invalid(
                    &NODES_PER_TXN,
                    k,
                    format!("each partition touched needs an operation, and `ops_per_txn` is {ops}"),
                ));
            }
            let per_part = cfg.records / n;
            if per_part < ops.div_ceil(k) {
                return Err(invalid(
                    &RECORDS,
                    cfg.records,
                    format!(
                        "a partition holds {per_part} records but a transaction takes up to {} distinct keys from one; raise `records`",
                        ops.div_ceil(k)
                    ),
                ));
            }
        }
        if cfg.insert_room > 0 && cfg.preset != Preset::D {
            return Err(invalid(
                &INSERT_ROOM,
                cfg.insert_room,
                "only core workload d inserts; drop `insert_room` or set core=d",
            ));
        }
        let latest = cfg.preset == Preset::D;
        let dist = |keys: u64| {
            if latest {
                Dist::Latest(Zipf::new(keys, cfg.zipf_theta))
            } else {
                Dist::Keys(KeyGen::new(keys, cfg.zipf_theta))
            }
        };
        let dists = if cfg.nodes_per_txn == 0 {
            vec![dist(cfg.records)]
        } else {
            let m = cfg.records / n;
            let mut d = vec![dist(m)];
            if !cfg.records.is_multiple_of(n) {
                d.push(dist(m + 1));
            }
            d
        };
        Ok(Self {
            cfg,
            dists,
            room_fixed: true,
            coordinators: 0,
        })
    }

    /// The placement of partition tables holding `loaded` records and `room` inserts,
    /// when the coordinators are known and the key's insert index is a bit field (a
    /// power-of-two partition count): runs of `2^k` values of every coordinator's insert
    /// index share a segment, `k` large enough that the loaded records (insert index 0)
    /// at most double the first segment's designed load. Coordinators insert at their
    /// own pace, so the segments reach twice the even share. Returns the runs and the
    /// capacity.
    fn insert_runs(&self, loaded: u64, room: u64) -> Option<(KeyRuns, u64)> {
        let n = self.cfg.partitions as u64;
        if self.coordinators == 0 || !n.is_power_of_two() || self.insert_room() == 0 {
            return None;
        }
        let coords = self.coordinators as u64;
        let k = loaded
            .div_ceil(coords)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(INSERT_RUN_LOG2_MIN, INSERT_SEQ_MAX.trailing_zeros() - 1);
        let records_per_run = coords << k;
        let index_max = (2 * room).div_ceil(coords).min(INSERT_SEQ_MAX);
        let segments = (index_max >> k) + 1;
        let runs = KeyRuns {
            seq_shift: (COORD_BITS + n.trailing_zeros()) as u8,
            seq_bits: INSERT_SEQ_MAX.trailing_zeros() as u8,
            run_log2: k as u8,
            records_per_run,
        };
        Some((runs, segments * records_per_run))
    }

    /// The settings.
    pub fn config(&self) -> &YcsbConfig {
        &self.cfg
    }

    /// Bytes of a record.
    pub fn record_bytes(&self) -> usize {
        self.cfg.fields as usize * self.cfg.field_bytes as usize
    }

    /// Loaded records of partition `p`: the keys `k < records` with `k mod N = p`.
    pub fn partition_len(&self, p: u32) -> u64 {
        let n = self.cfg.partitions as u64;
        self.cfg.records / n + u64::from((p as u64) < self.cfg.records % n)
    }

    /// Extra records of room for inserts, over all partitions.
    fn insert_room(&self) -> u64 {
        match (self.cfg.preset, self.cfg.insert_room) {
            (Preset::D, 0) => self.cfg.records,
            (Preset::D, r) => r,
            _ => 0,
        }
    }
}

fn knob_given(knobs: &Knobs, spec: &KnobSpec) -> bool {
    knobs.iter().any(|(k, _)| k == spec.name)
}

/// One YCSB transaction: its operations, drawn before it begins.
#[derive(Clone, Debug)]
pub struct YcsbInput(Plan);

impl Workload for Ycsb {
    type Local = YcsbLocal;
    type Input = YcsbInput;

    const NAME: &'static str = "ycsb";
    const TXN_STEP: &'static str = "ycsb.txn";
    const SCALE_KNOB: Option<&'static str> = Some("records");
    const ABOUT: &'static str = "YCSB (RCBench §6.1, OOCC §VIII): fields × field_bytes records, Zipfian keys, \
                                 write ratio per op or per txn, core mixes a b c d f (e needs range scans: none here)";
    const KNOBS: &'static [KnobSpec] = &[
        PRESET,
        RECORDS,
        FIELDS,
        FIELD_BYTES,
        OPS_PER_TXN,
        ZIPF_THETA,
        WRITE_RATIO,
        WRITE_UNIT,
        UPDATE,
        PARTITIONS,
        NODES_PER_TXN,
        INSERT_ROOM,
    ];

    fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError> {
        let raw: String = knobs.get(&PRESET)?;
        if raw.eq_ignore_ascii_case("e") {
            return Err(invalid(
                &PRESET,
                raw,
                "YCSB E scans short key ranges, and dmtx's tables are hash indexes with no ordered scan",
            ));
        }
        let preset = choose(
            &PRESET,
            &raw,
            &[
                ("none", Preset::None),
                ("a", Preset::A),
                ("b", Preset::B),
                ("c", Preset::C),
                ("d", Preset::D),
                ("f", Preset::F),
            ],
        )?;
        let mut cfg = YcsbConfig::preset(preset);
        if preset != Preset::None {
            for spec in [&WRITE_RATIO, &WRITE_UNIT] {
                if knob_given(knobs, spec) {
                    let value: String = knobs.get(spec)?;
                    return Err(invalid(
                        spec,
                        value,
                        format!(
                            "core workload {raw} fixes the mix; drop `{}` or set core=none",
                            spec.name
                        ),
                    ));
                }
            }
        } else {
            cfg.write_ratio = knobs.get(&WRITE_RATIO)?;
            let unit: String = knobs.get(&WRITE_UNIT)?;
            cfg.write_unit = choose(&WRITE_UNIT, &unit, &[("op", WriteUnit::Op), ("txn", WriteUnit::Txn)])?;
        }
        if preset == Preset::None || knob_given(knobs, &ZIPF_THETA) {
            cfg.zipf_theta = knobs.get(&ZIPF_THETA)?;
        }
        let update: String = knobs.get(&UPDATE)?;
        cfg.update = choose(
            &UPDATE,
            &update,
            &[("record", UpdateScope::Record), ("field", UpdateScope::Field)],
        )?;
        cfg.records = knobs.get(&RECORDS)?;
        cfg.fields = knobs.get(&FIELDS)?;
        cfg.field_bytes = knobs.get(&FIELD_BYTES)?;
        cfg.ops_per_txn = knobs.get(&OPS_PER_TXN)?;
        cfg.partitions = knobs.get(&PARTITIONS)?;
        cfg.nodes_per_txn = knobs.get(&NODES_PER_TXN)?;
        cfg.insert_room = knobs.get(&INSERT_ROOM)?;
        let mut y = Self::new(cfg)?;
        y.room_fixed = knob_given(knobs, &INSERT_ROOM);
        Ok(y)
    }

    fn txn_types(&self) -> &'static [&'static str] {
        if self.cfg.preset == Preset::D {
            &["read_only", "insert"]
        } else {
            &["read_only", "read_write"]
        }
    }

    /// Every operation's key is drawn before the transaction begins; type 0 only reads.
    fn txn_hints(&self, ty: usize) -> TxnHints {
        if ty == 0 {
            TxnHints::READ_ONLY_DECLARED
        } else {
            TxnHints::DECLARED
        }
    }

    fn tables(&self) -> Vec<TableSpec> {
        let n = self.cfg.partitions as u64;
        let room = self.insert_room().div_ceil(n);
        // A record's attributes are its fields, `field0` first (YCSB's column names).
        let fb = self.cfg.field_bytes;
        let attrs: Vec<Attr> = (0..self.cfg.fields)
            .map(|f| Attr::new(format!("field{f}"), f * fb, fb))
            .collect();
        (0..self.cfg.partitions)
            .map(|p| {
                let name = if n == 1 {
                    "ycsb".to_string()
                } else {
                    format!("ycsb_{p}")
                };
                let loaded = self.partition_len(p);
                let spec = |capacity: u64| {
                    TableSpec::new(p, name, self.record_bytes() as u32, capacity).with_attrs(attrs.clone())
                };
                match (room, self.insert_runs(loaded, room)) {
                    (0, _) => spec(loaded),
                    (_, None) => spec(loaded + room).growing(loaded, INSERT_ROOM.name),
                    (_, Some((runs, capacity))) => spec(capacity.max(loaded + room))
                        .growing(loaded, INSERT_ROOM.name)
                        .with_runs(runs),
                }
            })
            .collect()
    }

    /// `insert_room` (core=d), unless given, from the run's length: about
    /// `0.05 × ops_per_txn` inserts per commit at [`TXNS_PER_COORDINATOR_SECOND_MAX`]
    /// (or among `--txns`), with [`room_per_part`]'s margin.
    fn fit_to_run(mut self, hint: &RunHint) -> Self {
        self.coordinators = hint.coordinators;
        if self.cfg.preset != Preset::D || self.room_fixed {
            return self;
        }
        if let Some(txns) = hint.txns_max(TXNS_PER_COORDINATOR_SECOND_MAX) {
            let inserts = txns * 0.05 * self.cfg.ops_per_txn as f64;
            self.cfg.insert_room = room_per_part(inserts, 1).max(1);
        }
        self
    }

    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        if table >= self.cfg.partitions {
            return Err(StoreError::UnknownTable(table));
        }
        let mut buf = vec![0u8; self.record_bytes()];
        let n = self.cfg.partitions as u64;
        for j in 0..self.partition_len(table) {
            let key = j * n + table as u64;
            self.fill_initial(key, &mut buf);
            insert(key, &buf)?;
        }
        Ok(())
    }

    fn local(&self, coord: CoordId, seed: u64) -> YcsbLocal {
        YcsbLocal {
            rng: SmallRng::seed_from_u64(seed),
            coord,
            compact: coord.compact() as u64,
            field_writes: 0,
            bad_reads: 0,
            inserted: vec![0; self.cfg.partitions as usize],
            inserted_total: 0,
        }
    }

    fn draw(&self, local: &mut YcsbLocal) -> (usize, YcsbInput) {
        let mut plan = Plan::EMPTY;
        self.plan(local, &mut plan);
        (plan.ty, YcsbInput(plan))
    }

    async fn run<P: Protocol>(
        &self,
        local: &mut YcsbLocal,
        input: &YcsbInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let plan = &input.0;
        let mut objs = [None::<ObjRef<[u8]>>; OPS_MAX];
        let mut txn = coord.begin_with(self.txn_hints(plan.ty));
        for (o, op) in objs.iter_mut().zip(plan.ops()) {
            let table = Table::<[u8]>::new(op.table);
            *o = Some(match op.kind {
                OpKind::Read => txn.add_ro(table, op.key),
                OpKind::Update => txn.add_rw(table, op.key),
                OpKind::Insert => txn.add_insert(table, op.key),
            });
        }
        txn.execute().await?;
        let objs = &objs[..plan.n];
        let obj = |i: usize| objs[i].expect("every operation was added");
        let mut intact = true;
        for (i, op) in plan.ops().iter().enumerate() {
            if op.kind != OpKind::Insert {
                intact &= self.damage(op.key, txn.bytes(obj(i))).is_ok();
            }
        }
        // A torn or misplaced record is written back as read, so the final scan sees it too.
        let mut field_writes = 0;
        for (i, op) in plan.ops().iter().enumerate() {
            match op.kind {
                OpKind::Update if intact => field_writes += self.apply_update(op.key, op.arg, txn.bytes_mut(obj(i))),
                OpKind::Insert => self.fill_initial(op.key, txn.bytes_mut(obj(i))),
                _ => {}
            }
        }
        txn.commit().await?;
        // Only the attempt that commits records its writes and inserts (a retried one
        // left none, and reuses the same insert keys).
        if intact {
            local.field_writes += field_writes;
        } else {
            local.bad_reads += 1;
        }
        for op in plan.ops().iter().filter(|o| o.kind == OpKind::Insert) {
            local.inserted[op.table as usize] += 1;
            local.inserted_total += 1;
        }
        Ok(Outcome::Committed)
    }

    fn check(&self, locals: &[YcsbLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        self.check_tables(locals, snapshot)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod room_tests {
    //! Room for core=d inserts: sized from the run, the knob wins, placed by runs.

    use std::time::Duration;

    use dmtx_runtime::AbortReason;

    use super::*;
    use crate::testkit;

    fn ycsb(pairs: &[&str]) -> Ycsb {
        Ycsb::from_knobs(&Knobs::parse(pairs.iter().copied()).unwrap()).unwrap()
    }

    fn for_secs(secs: u64) -> RunHint {
        RunHint {
            duration: Some(Duration::from_secs(secs)),
            txns: None,
            coordinators: 16,
        }
    }

    #[test]
    fn insert_room_grows_with_the_run_unless_given() {
        let short = ycsb(&["core=d"]).fit_to_run(&for_secs(10));
        let long = ycsb(&["core=d"]).fit_to_run(&for_secs(600));
        assert!(long.insert_room() > 50 * short.insert_room());
        assert!(long.tables()[0].capacity > long.insert_room());
        assert_eq!(long.tables()[0].growth_knob, Some("insert_room"));
        assert!(long.tables()[0].runs.is_some());
        let fixed = ycsb(&["core=d", "insert_room=300"]).fit_to_run(&for_secs(600));
        assert_eq!(fixed.insert_room(), 300);
        let no_inserts = ycsb(&["core=a"]).fit_to_run(&for_secs(600));
        assert_eq!(no_inserts.tables()[0].capacity, 100_000);
        assert_eq!(no_inserts.tables()[0].growth_knob, None);
    }

    /// Goal: placement by runs of the insert index keeps inserted and loaded records
    /// findable. Method: a core=d run sized for its four coordinators, checked.
    #[test]
    fn a_run_sized_insert_table_passes_the_check() {
        let y = ycsb(&["core=d", "records=2000", "fields=2", "field_bytes=8", "partitions=2"]).fit_to_run(&RunHint {
            duration: None,
            txns: Some(2000),
            coordinators: 4,
        });
        assert!(y.tables().iter().all(|t| t.runs.is_some()));
        let r = testkit::run_under_ford(&y, 4, 500, 9);
        assert_eq!(r.aborts.get(&AbortReason::TableFull), None, "{r:?}");
        assert!(r.locals.iter().map(|l| l.inserted_total).sum::<u64>() > 100);
        y.check(&r.locals, &r.snapshot).unwrap();
    }
}
