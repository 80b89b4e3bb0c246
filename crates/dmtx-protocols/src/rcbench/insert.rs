//! A run-time insert of a key the cuckoo index lacks (issue 30 item 2), shared by the
//! RCBench protocols: claim a free slot (home bucket, else the coordinator's overflow
//! bucket taken by FAA on the table's overflow cursor), lock it, mark it claimed (PK
//! set, tombstone, lock kept), then index it.

use dmtx_store::cuckoo::{rt_insert, CuckooPlace, RtInsert};
use dmtx_store::{TableInfo, BUCKET_HEADER_BYTES, OVERFLOW_CURSOR_OFFSET};
use dmtx_verbs::{Post, RemotePtr};

use super::layout::{ItemLayout, TOMBSTONE};
use super::prims::{Prims, Verbs};

/// How far an insert got.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum FreshStage {
    /// No slot held.
    #[default]
    None,
    /// The slot at `rel` is locked (with the caller's lock value) and holds another key:
    /// the caller only unlocks it.
    Locked,
    /// Claimed and locked, not yet indexed: an abort frees it (zeros, lock last).
    Claimed,
    /// Claimed and indexed: an abort leaves it a tombstone (unlock).
    Indexed,
}

/// Why an insert failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FreshFail {
    /// A verb failed.
    Fault,
    /// The overflow space is used up.
    TableFull,
    /// Another transaction holds the slot or indexes the key.
    Conflict,
    /// The key's three cuckoo candidates are taken.
    IndexFull,
}

/// An insert's outcome: the slot (table-relative), how far it got, and the result.
#[derive(Copy, Clone, Debug)]
pub struct Fresh {
    /// The slot's table-relative offset (meaningful unless `stage` is `None`).
    pub rel: u64,
    /// How far it got.
    pub stage: FreshStage,
    /// `Ok` when indexed.
    pub result: Result<(), FreshFail>,
}

/// What the insert needs from its caller.
pub struct FreshCtx<'a> {
    /// The table.
    pub info: &'a TableInfo,
    /// Its cuckoo index.
    pub place: &'a CuckooPlace,
    /// The item layout.
    pub layout: ItemLayout,
    /// The key.
    pub key: u64,
    /// The value the slot's lock word takes.
    pub lock_val: u64,
    /// Slots this transaction holds already (not free for it).
    pub mine: &'a [u64],
}

fn word(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Insert `f.key`: per table, `overflow` holds the coordinator's overflow bucket as
/// (table, next free slot, slots left).
pub async fn insert_fresh(
    v: &mut impl Verbs,
    prims: &mut Prims,
    post: &mut Post,
    overflow: &mut Vec<(u32, u64, u32)>,
    f: FreshCtx<'_>,
) -> Fresh {
    let mut out = Fresh {
        rel: 0,
        stage: FreshStage::None,
        result: Err(FreshFail::Fault),
    };
    let info = f.info;
    let table = info.meta.id;
    let vb = info.meta.value_bytes;
    let item_len = f.layout.item_bytes(vb) as usize;
    let lock_off = f.layout.lock_off(vb) as u64;
    let shape = info.shape;
    let home = shape.home_bucket(f.key);
    post.clear();
    let id = post.read(info.ptr(0, shape.bucket_off(home)), shape.bucket_bytes as usize);
    if prims.post(v, post).await.is_err() {
        return out;
    }
    let bucket = post.bytes(id);
    let mut rel = None;
    for s in 0..shape.slots {
        let at = BUCKET_HEADER_BYTES as usize + (s * shape.slot_bytes) as usize;
        let slot = &bucket[at..at + shape.slot_bytes as usize];
        let off = shape.slot_off(home, s);
        if word(slot, 0) == 0 && word(slot, lock_off as usize) == 0 && !f.mine.contains(&off) {
            rel = Some(off);
            break;
        }
    }
    let rel = match rel {
        Some(r) => r,
        None => {
            let pos = match overflow.iter().position(|e| e.0 == table && e.2 > 0) {
                Some(p) => p,
                None => {
                    post.clear();
                    let faa = post.faa(info.ptr(0, OVERFLOW_CURSOR_OFFSET), 1);
                    if prims.post(v, post).await.is_err() {
                        return out;
                    }
                    let b = post.old(faa);
                    if b >= shape.overflow_count {
                        out.result = Err(FreshFail::TableFull);
                        return out;
                    }
                    overflow.retain(|e| e.0 != table);
                    overflow.push((table, shape.slot_off(shape.overflow_bucket(b), 0), shape.slots));
                    overflow.len() - 1
                }
            };
            let e = &mut overflow[pos];
            let r = e.1;
            e.1 += shape.slot_bytes as u64;
            e.2 -= 1;
            r
        }
    };
    let item = info.ptr(0, rel);
    let lock = RemotePtr::new(item.mn, item.offset + lock_off);
    post.clear();
    let cas = prims.amod_im(post, lock, 0, f.lock_val);
    let read = prims.read_di(post, item, item_len);
    if prims.post(v, post).await.is_err() {
        // The CAS may have landed: the caller's unlock frees only its own word.
        out.rel = rel;
        out.stage = FreshStage::Locked;
        return out;
    }
    if post.old(cas) != 0 {
        out.result = Err(FreshFail::Conflict);
        return out;
    }
    out.rel = rel;
    out.stage = FreshStage::Locked;
    if word(post.bytes(read), 0) != 0 {
        // Claimed and indexed by another key between the bucket READ and the CAS.
        out.result = Err(FreshFail::Conflict);
        return out;
    }
    out.stage = FreshStage::Claimed;
    let version_off = f.layout.meta_off(vb) as usize;
    let key = f.key;
    post.clear();
    prims.write_di_with(post, item, lock_off as usize, |b| {
        b.fill(0);
        b[..8].copy_from_slice(&(key + 1).to_le_bytes());
        b[version_off..version_off + 8].copy_from_slice(&TOMBSTONE.to_le_bytes());
    });
    if prims.post(v, post).await.is_err() {
        return out;
    }
    let r = match rt_insert(v, f.place, key, rel, item_len as u64, post).await {
        Ok(r) => r,
        Err(_) => return out,
    };
    out.result = match r {
        RtInsert::Inserted { .. } => {
            out.stage = FreshStage::Indexed;
            Ok(())
        }
        RtInsert::Exists { .. } | RtInsert::Contended => Err(FreshFail::Conflict),
        RtInsert::Full => Err(FreshFail::IndexFull),
    };
    out
}
