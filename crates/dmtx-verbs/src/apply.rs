//! Executing one op on a region: what every transport that holds memory in-process (the
//! `mem` transport, the simulator) does once an op reaches its memory node.

use crate::region::RegionError;
use crate::{Op, Region, Result, VerbError};

/// Run op number `i` of a post on `region`: READ copies into `rbuf` at the op's
/// destination, WRITE takes its bytes from `wdata`, CAS and FAA leave the old word in
/// `old[i]`, FLUSH only checks its address (memory that is already durable or volatile
/// by nature has nothing to persist). A refused op changes nothing and names its kind,
/// address and length.
#[inline]
pub fn apply_op(region: &Region, i: usize, op: &Op, wdata: &[u8], rbuf: &mut [u8], old: &mut [u64]) -> Result<()> {
    let ptr = op.ptr();
    let map = |e: RegionError, len: u64| match e {
        RegionError::OutOfRange { region_bytes } => VerbError::OutOfRange {
            kind: op.kind(),
            ptr,
            len,
            region_bytes,
        },
        RegionError::Misaligned => VerbError::Misaligned { kind: op.kind(), ptr },
    };
    match *op {
        Op::Read { len, dst, .. } => {
            let dst = &mut rbuf[dst as usize..(dst + len) as usize];
            region.read(ptr.offset, dst).map_err(|e| map(e, len as u64))
        }
        Op::Write { src, len, .. } => region
            .write(ptr.offset, &wdata[src as usize..(src + len) as usize])
            .map_err(|e| map(e, len as u64)),
        Op::Cas { expect, swap, .. } => {
            old[i] = region.cas(ptr.offset, expect, swap).map_err(|e| map(e, 8))?;
            Ok(())
        }
        Op::Faa { add, .. } => {
            old[i] = region.faa(ptr.offset, add).map_err(|e| map(e, 8))?;
            Ok(())
        }
        Op::Flush { .. } => {
            if ptr.offset >= region.bytes() {
                return Err(map(
                    RegionError::OutOfRange {
                        region_bytes: region.bytes(),
                    },
                    1,
                ));
            }
            Ok(())
        }
    }
}
