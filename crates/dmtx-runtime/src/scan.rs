//! Reading whole tables through verbs (invariant checks after a run).

use dmtx_store::{RegionBytes, SlotLayout, BUCKET_HEADER_BYTES};
use dmtx_verbs::{Post, VerbError};

use crate::CoordCtx;

/// Bytes per READ while scanning.
const SCAN_CHUNK_BYTES: u64 = 256 << 10;

/// Call `f(key, value)` for every occupied slot of table `table` on replica `replica`
/// (0 = primary), the value decoded by the layout ([`SlotLayout::value_into`]). Meant for
/// a quiesced cluster: it reads without locks or detectors. A table with a value region
/// has it read whole first, so values the slots point to are at hand.
///
/// # Panics
///
/// When a slot points outside its table's value region: the protocol wrote a damaged
/// slot.
pub async fn scan_table(
    ctx: &mut CoordCtx,
    table: u32,
    replica: usize,
    layout: &dyn SlotLayout,
    mut f: impl FnMut(u64, &[u8]),
) -> Result<(), VerbError> {
    let info = ctx
        .catalog
        .get(table)
        .expect("scan of a table the catalog lacks")
        .clone();
    let shape = info.shape;
    let buckets_total = shape.bucket_count + shape.overflow_count;
    let per_chunk = (SCAN_CHUNK_BYTES / shape.bucket_bytes as u64).max(1);
    let mut post = Post::new();
    let mut region_bytes = Vec::new();
    if let Some(r) = shape.value_region {
        region_bytes.reserve_exact(r.bytes as usize);
        let mut at = 0;
        while at < r.bytes {
            let n = SCAN_CHUNK_BYTES.min(r.bytes - at);
            post.clear();
            let id = post.read(info.ptr(replica, r.offset + at), n as usize);
            ctx.post(&mut post).await?;
            region_bytes.extend_from_slice(post.bytes(id));
            at += n;
        }
    }
    let region = match shape.value_region {
        Some(r) => RegionBytes::new(&info.meta.name, r, &region_bytes),
        None => RegionBytes::none(&info.meta.name),
    };
    let mut value = vec![0u8; info.meta.value_bytes as usize];
    let mut first = 0;
    while first < buckets_total {
        let n = per_chunk.min(buckets_total - first);
        post.clear();
        let id = post.read(
            info.ptr(replica, shape.bucket_off(first)),
            (n * shape.bucket_bytes as u64) as usize,
        );
        ctx.post(&mut post).await?;
        let bytes = post.bytes(id);
        for b in bytes.chunks_exact(shape.bucket_bytes as usize) {
            for s in b[BUCKET_HEADER_BYTES as usize..].chunks_exact(shape.slot_bytes as usize) {
                if let Some(key) = layout.key(s) {
                    if let Err(e) = layout.value_into(s, &region, &mut value) {
                        panic!("scan of table {table}, key {key}: {e}");
                    }
                    f(key, &value);
                }
            }
        }
        first += n;
    }
    Ok(())
}
