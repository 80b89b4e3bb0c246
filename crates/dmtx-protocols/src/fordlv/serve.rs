//! A Vcache served to other compute nodes over CN↔CN messages (`partition` and
//! `global`, ford.txt §4.7): the request formats and the handler every thread of a node
//! that keeps a Vcache installs.
//!
//! ```text
//! round     1 | n_pub u16 | n_check u16 | n_pub × ver | n_check × ver   (call)
//!   reply   0xa5 | n_check × status: 0 unchanged | 1 changed | 2 miss, bucket u32, seq u64
//! finalize  2 | n × (ver, keep u8)                                      (one-way)
//! remove    3 | n × ver                                                 (one-way)
//! insert    4 | n × (ver, bucket u32, seq u64)                          (one-way)
//! ver       table u32 | key u64 | version u64
//! ```
//!
//! A round publishes before it checks (the variant aside), in one handler run, so the
//! caller's publish-before-validate holds at the serving node. A retried round repeats
//! the same publishes (idempotent) and checks again.

use std::sync::Arc;

use dmtx_runtime::{Handled, Request, Rpc};

use super::localized::{apply, insert};
use super::{FordLvVariant, LvCn};
use crate::vcache::Stamp;

const OP_ROUND: u8 = 1;
const OP_FINALIZE: u8 = 2;
const OP_REMOVE: u8 = 3;
const OP_INSERT: u8 = 4;

/// First byte of a round's reply: the round was applied (an empty reply is not).
const ROUND_SERVED: u8 = 0xa5;

const VER_BYTES: usize = 20;
const STATUS_BYTES: usize = 13;

/// One version for a Vcache.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Ver {
    pub table: u32,
    pub key: u64,
    pub version: u64,
}

/// What a check found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Status {
    /// The version read, settled.
    Unchanged,
    /// Another version, or a pending one.
    Changed,
    /// Absent.
    Miss(Stamp),
}

fn put_ver(out: &mut Vec<u8>, v: &Ver) {
    out.extend_from_slice(&v.table.to_le_bytes());
    out.extend_from_slice(&v.key.to_le_bytes());
    out.extend_from_slice(&v.version.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn ver_at(b: &[u8], at: usize) -> Ver {
    Ver {
        table: u32_at(b, at),
        key: u64_at(b, at + 4),
        version: u64_at(b, at + 12),
    }
}

/// A round: publish `pubs`, then check `checks`.
pub(super) fn encode_round(pubs: &[Ver], checks: &[Ver]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + (pubs.len() + checks.len()) * VER_BYTES);
    out.push(OP_ROUND);
    out.extend_from_slice(&(pubs.len() as u16).to_le_bytes());
    out.extend_from_slice(&(checks.len() as u16).to_le_bytes());
    for v in pubs.iter().chain(checks) {
        put_ver(&mut out, v);
    }
    out
}

/// The statuses of a round's reply, in check order; `None` unless the round was
/// served (its publishes done) and answered every one of `checks` checks.
pub(super) fn decode_statuses(reply: &[u8], checks: usize) -> Option<Vec<Status>> {
    let (&served, rest) = reply.split_first()?;
    if served != ROUND_SERVED || rest.len() != checks * STATUS_BYTES {
        return None;
    }
    Some(
        rest.chunks_exact(STATUS_BYTES)
            .map(|s| match s[0] {
                0 => Status::Unchanged,
                1 => Status::Changed,
                _ => Status::Miss(Stamp::from_parts(u32_at(s, 1), u64_at(s, 5))),
            })
            .collect(),
    )
}

/// Finalize (`keep`) or drop (a delete) each published version.
pub(super) fn encode_finalize(list: &[(Ver, bool)]) -> Vec<u8> {
    let mut out = vec![OP_FINALIZE];
    for (v, keep) in list {
        put_ver(&mut out, v);
        out.push(u8::from(*keep));
    }
    out
}

/// Take back each published version.
pub(super) fn encode_remove(list: &[(Ver, bool)]) -> Vec<u8> {
    let mut out = vec![OP_REMOVE];
    for (v, _) in list {
        put_ver(&mut out, v);
    }
    out
}

/// Insert each fetched version under the stamp of its miss.
pub(super) fn encode_inserts(list: &[(Ver, Stamp)]) -> Vec<u8> {
    let mut out = vec![OP_INSERT];
    for (v, stamp) in list {
        put_ver(&mut out, v);
        let (bucket, seq) = stamp.to_parts();
        out.extend_from_slice(&bucket.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
    }
    out
}

/// Serve this node's Vcache on the thread of `rpc`.
pub(super) fn install(rpc: &Rpc, cn: Arc<LvCn>, variant: FordLvVariant) {
    rpc.set_handler(move |_: &Rpc, req: Request<'_>, reply: &mut Vec<u8>| {
        handle(&cn, variant, req.payload, reply);
        Handled::Reply
    });
}

/// One request. A malformed one is answered with nothing (its caller's statuses come
/// up short and it aborts).
fn handle(cn: &LvCn, variant: FordLvVariant, p: &[u8], reply: &mut Vec<u8>) {
    let Some(cache) = cn.cache.as_ref() else { return };
    let Some((&op, body)) = p.split_first() else { return };
    match op {
        OP_ROUND if body.len() >= 4 => {
            let (np, nc) = (
                u16::from_le_bytes([body[0], body[1]]) as usize,
                u16::from_le_bytes([body[2], body[3]]) as usize,
            );
            if body.len() != 4 + (np + nc) * VER_BYTES {
                return;
            }
            let vers: Vec<Ver> = (0..np + nc).map(|i| ver_at(body, 4 + i * VER_BYTES)).collect();
            let mut out = Vec::with_capacity(nc);
            apply(cache, &vers[..np], &vers[np..], &mut out);
            reply.push(ROUND_SERVED);
            for s in out {
                match s {
                    Status::Unchanged => reply.extend_from_slice(&[0; STATUS_BYTES]),
                    Status::Changed => {
                        reply.push(1);
                        reply.extend_from_slice(&[0; STATUS_BYTES - 1]);
                    }
                    Status::Miss(stamp) => {
                        let (bucket, seq) = stamp.to_parts();
                        reply.push(2);
                        reply.extend_from_slice(&bucket.to_le_bytes());
                        reply.extend_from_slice(&seq.to_le_bytes());
                    }
                }
            }
        }
        OP_FINALIZE => {
            for e in body.chunks_exact(VER_BYTES + 1) {
                let v = ver_at(e, 0);
                cache.finalize(v.table, v.key, v.version, e[VER_BYTES] != 0);
            }
        }
        OP_REMOVE => {
            for e in body.chunks_exact(VER_BYTES) {
                let v = ver_at(e, 0);
                cache.remove(v.table, v.key, v.version);
            }
        }
        OP_INSERT => {
            for e in body.chunks_exact(VER_BYTES + 12) {
                let v = ver_at(e, 0);
                let stamp = Stamp::from_parts(u32_at(e, VER_BYTES), u64_at(e, VER_BYTES + 4));
                insert(cache, variant, v, stamp);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_publishes_then_checks_and_its_reply_decodes() {
        let cn = LvCn {
            cache: Some(crate::vcache::Vcache::new(1 << 12)),
        };
        let a = Ver {
            table: 1,
            key: 5,
            version: 50,
        };
        let mut reply = Vec::new();
        // A writer's own key, checked in its round, is pending: changed.
        handle(&cn, FordLvVariant::Fixed, &encode_round(&[a], &[a]), &mut reply);
        assert_eq!(decode_statuses(&reply, 1), Some(vec![Status::Changed]));
        assert_eq!(decode_statuses(&reply, 2), None, "a check left unanswered");
        assert_eq!(decode_statuses(&[], 0), None, "a round not served");
        handle(
            &cn,
            FordLvVariant::Fixed,
            &encode_finalize(&[(a, true)]),
            &mut Vec::new(),
        );
        let b = Ver { key: 6, ..a };
        let mut reply = Vec::new();
        handle(&cn, FordLvVariant::Fixed, &encode_round(&[], &[a, b]), &mut reply);
        let got = decode_statuses(&reply, 2).unwrap();
        assert_eq!(got[0], Status::Unchanged);
        let Status::Miss(stamp) = got[1] else { panic!("{got:?}") };
        handle(
            &cn,
            FordLvVariant::Fixed,
            &encode_inserts(&[(b, stamp)]),
            &mut Vec::new(),
        );
        handle(
            &cn,
            FordLvVariant::Fixed,
            &encode_remove(&[(a, false)]),
            &mut Vec::new(),
        );
        let mut reply = Vec::new();
        handle(&cn, FordLvVariant::Fixed, &encode_round(&[], &[a, b]), &mut reply);
        let got = decode_statuses(&reply, 2).unwrap();
        assert!(matches!(got[0], Status::Miss(_)), "removed");
        assert_eq!(got[1], Status::Unchanged, "inserted under its stamp");
    }
}
