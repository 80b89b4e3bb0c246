//! Answering frames: the handshake, VERBS batches, CONTROL ops and PING, each appended to
//! the connection's output buffer (no allocation per op: replies are encoded in place).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dmtx_verbs::region::RegionError;
use dmtx_verbs::Region;

use super::wire::constant_time_eq;
use super::wire::{self, ControlReply, ControlReq, ErrorCode, Kind, OpResult, WireOp};
use super::{Fence, Shared};

/// What to do with a connection after a frame.
pub(super) enum Next {
    Continue,
    /// An ERROR frame is in `out`; send it and close.
    Close,
}

/// What a frame handler needs to know about its connection.
pub(super) struct ConnCtx<'a> {
    /// The connection's id in the registry.
    pub id: u64,
    /// Its fence; the caller holds `fence.running` while calling [`handle`].
    pub fence: &'a Arc<Fence>,
}

/// Answer one frame into `out`. The caller holds `ctx.fence.running` (see the module
/// doc of `server`: the fence argument).
pub(super) fn handle(
    shared: &Shared,
    ctx: &ConnCtx<'_>,
    ready: &mut bool,
    h: wire::Header,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Next {
    let req = h.request_id;
    let violation = |out: &mut Vec<u8>, code: ErrorCode, msg: String| {
        wire::put_error(out, req, code, &msg);
        Next::Close
    };
    if !*ready && h.kind != Kind::Hello {
        return violation(out, ErrorCode::NOT_EXPECTED, format!("{:?} before HELLO", h.kind));
    }
    match h.kind {
        Kind::Hello if *ready => violation(out, ErrorCode::NOT_EXPECTED, "second HELLO".into()),
        Kind::Hello => {
            let hello = match wire::Hello::decode(payload) {
                Ok(x) => x,
                Err(e) => return violation(out, ErrorCode::BAD_FRAME, e.to_string()),
            };
            let cfg = &shared.config;
            if hello.version != wire::PROTOCOL_VERSION {
                let m = format!(
                    "protocol version {} is not supported; this memory node speaks {}; run matching dmtx builds",
                    hello.version,
                    wire::PROTOCOL_VERSION
                );
                return violation(out, ErrorCode::BAD_VERSION, m);
            }
            if hello.cluster_id != cfg.cluster_id {
                let m = format!(
                    "cluster id {} does not match this node's {}; check --cluster-id",
                    hello.cluster_id, cfg.cluster_id
                );
                return violation(out, ErrorCode::BAD_CLUSTER, m);
            }
            if !constant_time_eq(&hello.token, &cfg.token) {
                let m = "wrong cluster token; give the client the token file this node was started with \
                         (`dmtx memnode --token-file`), e.g. as the cluster file's `token_file`";
                return violation(out, ErrorCode::BAD_TOKEN, m.into());
            }
            if hello.epoch < cfg.epoch {
                let m = format!(
                    "epoch {} is older than this node's {}; the client was fenced out, rejoin the view",
                    hello.epoch, cfg.epoch
                );
                return violation(out, ErrorCode::STALE_EPOCH, m);
            }
            {
                let mut reg = shared.registry.lock().unwrap();
                if reg.revoked.contains(&hello.client_id) {
                    drop(reg);
                    let m = format!(
                        "client {} was revoked (fenced out) on this memory node; rejoin under a new client id",
                        hello.client_id
                    );
                    return violation(out, ErrorCode::REVOKED, m);
                }
                if let Some(l) = reg.live.iter_mut().find(|l| l.id == ctx.id) {
                    l.client = Some(hello.client_id);
                }
            }
            *ready = true;
            let ok = wire::HelloOk {
                node_id: cfg.node_id.0,
                epoch: cfg.epoch,
                regions: vec![wire::RegionInfo {
                    rkey: shared.rkey,
                    bytes: shared.node.region().bytes(),
                }],
            };
            let s = wire::begin_frame(out, Kind::HelloOk, req);
            ok.encode(out);
            wire::end_frame(out, s);
            Next::Continue
        }
        Kind::Verbs | Kind::Control => {
            if ctx.fence.fenced.load(Ordering::SeqCst) {
                let m = "this client was revoked (fenced out) on this memory node".to_owned();
                return violation(out, ErrorCode::REVOKED, m);
            }
            if h.kind == Kind::Verbs {
                serve_verbs(shared, req, payload, out)
            } else {
                serve_control(shared, ctx, req, payload, out)
            }
        }
        Kind::Ping => {
            if !payload.is_empty() {
                return violation(out, ErrorCode::BAD_FRAME, "PING with a payload".into());
            }
            wire::put_frame(out, Kind::Pong, req, &[]);
            Next::Continue
        }
        k => violation(out, ErrorCode::NOT_EXPECTED, format!("{k:?} is not a request")),
    }
}

fn serve_verbs(shared: &Shared, req: u64, payload: &[u8], out: &mut Vec<u8>) -> Next {
    let region = shared.node.region();
    let frame = wire::begin_frame(out, Kind::VerbsResult, req);
    let count_at = wire::begin_verbs(out);
    let undo = |out: &mut Vec<u8>, e: wire::WireError| {
        out.truncate(frame);
        wire::put_error(out, req, ErrorCode::BAD_FRAME, &e.to_string());
        Next::Close
    };
    let mut ops = match wire::OpsReader::new(payload) {
        Ok(r) => r,
        Err(e) => return undo(out, e),
    };
    let mut count = 0u32;
    let mut failed = false;
    loop {
        let op = match ops.next_op() {
            Ok(Some(op)) => op,
            Ok(None) => break,
            Err(e) => return undo(out, e),
        };
        count += 1;
        if failed {
            OpResult::Skipped.encode(out);
            continue;
        }
        let ok = apply_op(shared.rkey, region, &op, frame, out);
        failed = !ok;
    }
    wire::set_count(out, count_at, count);
    wire::end_frame(out, frame);
    Next::Continue
}

/// Run one op and append its result; false when the op failed (the batch stops).
fn apply_op(rkey: u64, region: &Region, op: &WireOp<'_>, frame: usize, out: &mut Vec<u8>) -> bool {
    let (op_rkey, offset) = match *op {
        WireOp::Read { rkey, offset, .. }
        | WireOp::Write { rkey, offset, .. }
        | WireOp::Cas { rkey, offset, .. }
        | WireOp::Faa { rkey, offset, .. }
        | WireOp::Flush { rkey, offset } => (rkey, offset),
    };
    if op_rkey != rkey {
        OpResult::BadRkey.encode(out);
        return false;
    }
    let bytes = region.bytes();
    let refused = |out: &mut Vec<u8>, e: RegionError| {
        match e {
            RegionError::OutOfRange { region_bytes } => OpResult::OutOfRange { region_bytes }.encode(out),
            RegionError::Misaligned => OpResult::Misaligned.encode(out),
        }
        false
    };
    match *op {
        WireOp::Read { len, .. } => {
            // Range and reply size are checked before the reply grows by `len`.
            if offset.checked_add(len as u64).is_none_or(|end| end > bytes) {
                return refused(out, RegionError::OutOfRange { region_bytes: bytes });
            }
            let payload_after = out.len() - frame - wire::HEADER_BYTES + 5 + len as usize;
            if payload_after > wire::FRAME_PAYLOAD_MAX as usize {
                OpResult::TooLarge.encode(out);
                return false;
            }
            let mark = out.len();
            out.push(wire::STATUS_DATA);
            out.extend_from_slice(&len.to_le_bytes());
            let at = out.len();
            out.resize(at + len as usize, 0);
            match region.read(offset, &mut out[at..]) {
                Ok(()) => true,
                Err(e) => {
                    out.truncate(mark);
                    refused(out, e)
                }
            }
        }
        WireOp::Write { data, .. } => match region.write(offset, data) {
            Ok(()) => {
                OpResult::Done.encode(out);
                true
            }
            Err(e) => refused(out, e),
        },
        WireOp::Cas { expect, swap, .. } => match region.cas(offset, expect, swap) {
            Ok(old) => {
                OpResult::Old(old).encode(out);
                true
            }
            Err(e) => refused(out, e),
        },
        WireOp::Faa { add, .. } => match region.faa(offset, add) {
            Ok(old) => {
                OpResult::Old(old).encode(out);
                true
            }
            Err(e) => refused(out, e),
        },
        WireOp::Flush { .. } => {
            if offset >= bytes {
                return refused(out, RegionError::OutOfRange { region_bytes: bytes });
            }
            // A DRAM node has nothing to persist (ops of a connection already complete in
            // order). A file-backed node syncs the whole mapping: a superset of what this
            // connection wrote, which the kernel limits to dirty pages.
            if region.persist(0, bytes).is_err() {
                // The wire has no status for an I/O failure yet; refusing is what keeps
                // the client from believing the data durable.
                return refused(out, RegionError::OutOfRange { region_bytes: bytes });
            }
            OpResult::Done.encode(out);
            true
        }
    }
}

fn serve_control(shared: &Shared, ctx: &ConnCtx<'_>, req: u64, payload: &[u8], out: &mut Vec<u8>) -> Next {
    let node = &shared.node;
    let r = match ControlReq::decode(payload) {
        Ok(r) => r,
        Err(e) => {
            wire::put_error(out, req, ErrorCode::BAD_FRAME, &e.to_string());
            return Next::Close;
        }
    };
    let reply = match r {
        ControlReq::Alloc { align, .. } if !align.is_power_of_two() => {
            let m = format!("alloc alignment {align} is not a power of two");
            wire::put_error(out, req, ErrorCode::BAD_REQUEST, &m);
            return Next::Continue;
        }
        ControlReq::Alloc { bytes, align } => match node.alloc(bytes, align) {
            Ok(at) => ControlReply::Offset(at),
            Err(e) => ControlReply::Failed(e),
        },
        ControlReq::Load { offset, data } => match node.load(offset, data) {
            Ok(()) => ControlReply::Done,
            Err(e) => ControlReply::Failed(e),
        },
        ControlReq::PutTable(t) => match node.put_table(&t) {
            Ok(()) => ControlReply::Done,
            Err(e) => ControlReply::Failed(e),
        },
        ControlReq::Tables => ControlReply::Tables(node.tables()),
        ControlReq::Revoke { client_id } => {
            shared.revoke(client_id, Some(ctx.fence));
            ControlReply::Done
        }
        ControlReq::PutNamed { name, value } => match node.put_named(&name, value) {
            Ok(()) => ControlReply::Done,
            Err(e) => ControlReply::Failed(e),
        },
        ControlReq::Named { name } => match node.named(&name) {
            Ok(v) => ControlReply::Value(v),
            Err(e) => ControlReply::Failed(e),
        },
        ControlReq::Names => ControlReply::Names(node.names()),
    };
    let s = wire::begin_frame(out, Kind::ControlResult, req);
    reply.encode(out);
    if out.len() - s - wire::HEADER_BYTES > wire::FRAME_PAYLOAD_MAX as usize {
        out.truncate(s);
        let m = "the table catalog does not fit in one frame; publish fewer or smaller tables";
        wire::put_error(out, req, ErrorCode::BAD_REQUEST, m);
        return Next::Continue;
    }
    wire::end_frame(out, s);
    Next::Continue
}
