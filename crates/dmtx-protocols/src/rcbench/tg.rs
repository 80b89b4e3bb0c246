//! The run-wide T^g areas (§4.1, Eq. 2) the T^g protocols (Wound-Wait, T/O) share: one
//! area per memory node, published as `rcbench.tg.<mn>`, with a ring of R slots for each
//! of [`TG_COORDS`] coordinators.

use dmtx_memnode::Control;
use dmtx_runtime::{named, CoordCtx, Result};
use dmtx_verbs::MnId;

use super::prims::{TgArea, TG_BASE_BYTES, TG_RING};

/// Coordinators the T^g areas have ring slots for (8 CNs × 32 threads × 32 coroutines).
pub const TG_COORDS: u64 = 1 << 13;
/// Bytes of a T^g slot (Tid, state).
pub const TG_THETA: u64 = TG_BASE_BYTES;

fn tg_name(mn: usize) -> String {
    format!("rcbench.tg.{mn}")
}

/// Allocate and publish the areas (a protocol's `setup_run`).
pub fn setup_tg(control: &dyn Control) -> Result<()> {
    let bytes = TG_THETA * TG_COORDS * TG_RING;
    for mn in 0..control.mn_count() {
        named::alloc_and_publish(control, &tg_name(mn), MnId(mn as u16), bytes, 64, &[])?;
    }
    Ok(())
}

/// The areas as published, and this coordinator's ring index (`dense`, for
/// [`super::prims::tid_of`] with [`TG_COORDS`]).
///
/// # Panics
///
/// When the coordinator is outside the rings (CN ≥ 8, thread ≥ 32 or coroutine ≥ 32).
pub fn tg_area(ctx: &CoordCtx, control: &dyn Control, proto: &str) -> Result<(u64, TgArea)> {
    let mut bases = Vec::with_capacity(control.mn_count());
    for mn in 0..control.mn_count() {
        let area = named::fetch(control, &tg_name(mn))?;
        bases.push((area.at.mn, area.at.offset));
    }
    let id = ctx.id;
    assert!(
        id.cn < 8 && id.thread < 32 && id.coroutine < 32,
        "{id}: {proto}'s T^g rings cover 8 CNs x 32 threads x 32 coroutines; run fewer"
    );
    let dense = (id.cn as u64) << 10 | (id.thread as u64) << 5 | id.coroutine as u64;
    Ok((
        dense,
        TgArea {
            theta: TG_THETA,
            delta: TG_COORDS * TG_RING,
            bases,
        },
    ))
}
