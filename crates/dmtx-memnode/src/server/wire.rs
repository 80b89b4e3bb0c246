//! Wire protocol v2 between compute nodes and a memory-node server.
//!
//! Shared by the server ([`crate::server`]) and the `tcp` transport client (`dmtx-net`).
//! Everything is little-endian, encoded and decoded by hand into caller-owned buffers, so
//! the hot path (VERBS / VERBS_RESULT) allocates nothing once buffers have grown.
//!
//! # Frame
//!
//! | bytes | field        | meaning                                                       |
//! |-------|--------------|---------------------------------------------------------------|
//! | 0..4  | `len` u32    | payload bytes after the header; at most [`FRAME_PAYLOAD_MAX`]  |
//! | 4     | `kind` u8    | [`Kind`]                                                      |
//! | 5..8  | reserved     | must be zero                                                  |
//! | 8..16 | `request` u64| request id; a reply carries the id of its request             |
//! | 16..  | payload      | `len` bytes, laid out per kind (below)                        |
//!
//! `len` is checked against [`FRAME_PAYLOAD_MAX`] as soon as the 16 header bytes are in,
//! before any buffer grows for the payload.
//!
//! # Payloads
//!
//! | kind | dir | payload |
//! |------|-----|---------|
//! | 1 HELLO | CN→MN | magic u32 (`b"DMTX"`), version u16, cluster id u64, client id u32, epoch u64, token len u16, token bytes (≤ [`TOKEN_BYTES_MAX`]) |
//! | 2 HELLO_OK | MN→CN | node id u16, epoch u64, region count u16 (≤ [`REGIONS_MAX`]), per region: rkey u64, size u64 |
//! | 3 VERBS | CN→MN | op count u32, then per op: op kind u8 ([`OpKind`] value), rkey u64, offset u64, then READ: len u32; WRITE: len u32 + bytes; CAS: expect u64, swap u64; FAA: add u64; FLUSH: nothing |
//! | 4 VERBS_RESULT | MN→CN | result count u32, then per op: status u8 ([`OpResult`]), then OLD: u64; DATA: len u32 + bytes; OUT_OF_RANGE: region bytes u64; others nothing |
//! | 5 CONTROL | CN→MN | op u8: 1 ALLOC bytes u64, align u64; 2 LOAD offset u64, len u32, bytes; 3 PUT_TABLE [`TableMeta`]; 4 TABLES; 5 REVOKE client id u32; 6 PUT_NAMED name len u16 + UTF-8, value len u32 + bytes; 7 NAMED name len u16 + UTF-8; 8 NAMES |
//! | 6 CONTROL_RESULT | MN→CN | tag u8: 1 OFFSET u64; 2 DONE; 3 TABLES count u32 + metas; 4 FAILED [`ControlError`] (code u8 + fields); 5 VALUE len u32 + bytes; 6 NAMES count u32, per name: len u16 + UTF-8 |
//! | 7 ERROR | both | code u16 ([`ErrorCode`]), message len u16, UTF-8 message |
//! | 8 PING / 9 PONG | both | empty |
//! | 10 PEER_HELLO | CN→CN | from thread u16, to node u16, to thread u16, then a HELLO payload (its client id is the sending compute node) |
//! | 11 MESSAGES | CN→CN | entries of `dmtx_verbs::msg` back to back (kind u8, flags u8, 2 zero bytes, len u32, id u64, payload) |
//!
//! A [`TableMeta`] is: id u32, name len u16 + UTF-8, value bytes u32, slot bytes u32,
//! slots per bucket u32, bucket bytes u32, bucket count u64, overflow bucket count u64,
//! replica count u16 (≤ [`REPLICAS_MAX`]), per replica: node u16, offset u64; then runs
//! u8 (0 none, 1 some), and with 1: seq shift u8, seq bits u8, run log2 u8, segment
//! buckets u64 ([`crate::Runs`]); then value region u8 (0 none, 1 some), and with 1:
//! offset u64, bytes u64 ([`crate::ValueRegion`]); then attribute count u16 (≤
//! [`ATTRS_MAX`]), per attribute: name len u16 + UTF-8, offset u32, bytes u32
//! ([`crate::Attr`]). Version 2 added the value region and the attributes.
//!
//! A named entry's limits ([`crate::NAME_BYTES_MAX`], [`crate::NAMED_VALUE_BYTES_MAX`],
//! [`crate::NAMED_COUNT_MAX`]) are the node's to enforce: PUT_NAMED past one decodes, and
//! is answered FAILED with a `NamedLimit` error, so the connection stays open. A name
//! that is not UTF-8 is a frame that does not decode (ERROR BAD_FRAME, then close).
//!
//! Decoders never trust a count for an allocation: lists grow as elements actually decode,
//! so a lying count costs nothing but a typed error. Trailing bytes after a payload are an
//! error. Every decode returns `Ok` or a [`WireError`]; none panics on any input.

use dmtx_verbs::{MnId, OpKind};

use std::collections::BTreeMap;

use crate::{ControlError, NamedLimitKind, TableMeta};

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 16;
/// Largest payload a frame may carry (16 MiB); longer frames close the connection.
pub const FRAME_PAYLOAD_MAX: u32 = 16 << 20;
/// `b"DMTX"` read as a little-endian u32; the first field of HELLO.
pub const MAGIC: u32 = u32::from_le_bytes(*b"DMTX");
/// The protocol version this code speaks.
pub const PROTOCOL_VERSION: u16 = 2;
/// Longest cluster token.
pub const TOKEN_BYTES_MAX: usize = 256;
/// Most regions a node announces.
pub const REGIONS_MAX: usize = 64;
/// Most replicas a table names.
pub const REPLICAS_MAX: usize = 1024;
/// Most attributes a table's schema declares (a protocol's bitmap of changed attributes
/// is one 64-bit word).
pub const ATTRS_MAX: usize = 64;

/// Bytes a VERBS op takes on the wire before its kind-specific fields.
pub const OP_HEADER_BYTES: usize = 1 + 8 + 8;
/// Bytes a VERBS_RESULT entry takes on the wire at most, besides READ data.
pub const RESULT_OVERHEAD_BYTES: usize = 1 + 8;

/// Why bytes from the network did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// A payload ended before a field.
    #[error("truncated {what}: needed {needed} more bytes, {left} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        left: usize,
    },
    /// A frame header announced more than [`FRAME_PAYLOAD_MAX`].
    #[error("frame of {len} bytes exceeds the maximum of {max}; the peer is not speaking dmtx wire v1")]
    FrameTooLarge {
        /// Announced payload length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Reserved header bytes were not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// HELLO did not start with [`MAGIC`].
    #[error("bad magic {0:#010x}; the peer is not a dmtx client")]
    BadMagic(u32),
    /// Unknown op kind in VERBS.
    #[error("unknown op kind {0}")]
    UnknownOp(u8),
    /// Unknown status in VERBS_RESULT.
    #[error("unknown op status {0}")]
    UnknownStatus(u8),
    /// Unknown control op, result tag or error code.
    #[error("unknown {what} {value}")]
    UnknownTag {
        /// Which tag.
        what: &'static str,
        /// Its value.
        value: u8,
    },
    /// A list or string longer than its limit.
    #[error("{what} of {len} exceeds the limit of {max}")]
    TooLong {
        /// Which field.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A string was not UTF-8.
    #[error("{0} is not UTF-8")]
    BadUtf8(&'static str),
    /// Bytes were left after a complete payload.
    #[error("{extra} trailing bytes after {what}")]
    Trailing {
        /// The payload.
        what: &'static str,
        /// Bytes left over.
        extra: usize,
    },
    /// A MESSAGES payload is not a list of entries.
    #[error("malformed messages: {0}")]
    Messages(String),
}

/// `Result` with a [`WireError`].
pub type Result<T> = std::result::Result<T, WireError>;

/// The kind of a frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Client handshake.
    Hello = 1,
    /// Server accepts the handshake.
    HelloOk = 2,
    /// A doorbell batch of ops.
    Verbs = 3,
    /// Per-op results of a batch.
    VerbsResult = 4,
    /// An init-time control request.
    Control = 5,
    /// Its result.
    ControlResult = 6,
    /// A refusal; the sender closes the connection after it unless the code says otherwise.
    Error = 7,
    /// Liveness probe.
    Ping = 8,
    /// Its answer.
    Pong = 9,
    /// Compute-node handshake on a CN↔CN messaging connection ([`PeerHello`]).
    PeerHello = 10,
    /// CN↔CN messages: the entries of `dmtx_verbs::msg`, back to back.
    Messages = 11,
}

impl Kind {
    /// The kind with wire value `v`.
    pub fn from_u8(v: u8) -> Result<Self> {
        Ok(match v {
            1 => Kind::Hello,
            2 => Kind::HelloOk,
            3 => Kind::Verbs,
            4 => Kind::VerbsResult,
            5 => Kind::Control,
            6 => Kind::ControlResult,
            7 => Kind::Error,
            8 => Kind::Ping,
            9 => Kind::Pong,
            10 => Kind::PeerHello,
            11 => Kind::Messages,
            v => return Err(WireError::UnknownKind(v)),
        })
    }
}

/// A decoded frame header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Frame kind.
    pub kind: Kind,
    /// Request id.
    pub request_id: u64,
    /// Payload bytes following the header.
    pub payload_bytes: u32,
}

/// Decode a header from the start of `buf`; `Ok(None)` until 16 bytes are there.
///
/// The length is checked against [`FRAME_PAYLOAD_MAX`] here, before anyone allocates.
pub fn decode_header(buf: &[u8]) -> Result<Option<Header>> {
    if buf.len() < HEADER_BYTES {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    if len > FRAME_PAYLOAD_MAX {
        return Err(WireError::FrameTooLarge {
            len,
            max: FRAME_PAYLOAD_MAX,
        });
    }
    let kind = Kind::from_u8(buf[4])?;
    if buf[5..8] != [0, 0, 0] {
        return Err(WireError::Reserved);
    }
    Ok(Some(Header {
        kind,
        request_id: u64::from_le_bytes(buf[8..16].try_into().unwrap()),
        payload_bytes: len,
    }))
}

/// Split one complete frame off the start of `buf`: its header, its payload and the bytes
/// it used. `Ok(None)` while the frame is incomplete.
pub fn split_frame(buf: &[u8]) -> Result<Option<(Header, &[u8], usize)>> {
    let Some(h) = decode_header(buf)? else {
        return Ok(None);
    };
    let total = HEADER_BYTES + h.payload_bytes as usize;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((h, &buf[HEADER_BYTES..total], total)))
}

/// Start a frame at the end of `out`; returns its start for [`end_frame`].
pub fn begin_frame(out: &mut Vec<u8>, kind: Kind, request_id: u64) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, kind as u8, 0, 0, 0]);
    out.extend_from_slice(&request_id.to_le_bytes());
    start
}

/// Patch the length of the frame begun at `start`. Panics if the payload exceeds
/// [`FRAME_PAYLOAD_MAX`]: encoders check their sizes first (a programmer error).
pub fn end_frame(out: &mut [u8], start: usize) {
    let len = out.len() - start - HEADER_BYTES;
    assert!(
        len <= FRAME_PAYLOAD_MAX as usize,
        "frame payload of {len} bytes exceeds {FRAME_PAYLOAD_MAX}; split the batch"
    );
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
}

/// Append a whole frame with `payload`.
pub fn put_frame(out: &mut Vec<u8>, kind: Kind, request_id: u64, payload: &[u8]) {
    let s = begin_frame(out, kind, request_id);
    out.extend_from_slice(payload);
    end_frame(out, s);
}

/// A bounds-checked little-endian reader over a payload.
#[derive(Debug)]
struct Cur<'a> {
    buf: &'a [u8],
}

impl<'a> Cur<'a> {
    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(WireError::Truncated {
                what,
                needed: n,
                left: self.buf.len(),
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.bytes(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8, what)?.try_into().unwrap()))
    }
    fn str16(&mut self, what: &'static str) -> Result<String> {
        let n = self.u16(what)? as usize;
        let b = self.bytes(n, what)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| WireError::BadUtf8(what))
    }
    fn finish(&self, what: &'static str) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing {
                what,
                extra: self.buf.len(),
            })
        }
    }
}

fn put_str16(out: &mut Vec<u8>, s: &str) {
    // Longer strings are cut at a character boundary, so the decoder sees valid UTF-8.
    let mut n = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..n]);
}

/// Client handshake (HELLO).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version the client speaks ([`PROTOCOL_VERSION`]).
    pub version: u16,
    /// Cluster the client belongs to; must match the server's.
    pub cluster_id: u64,
    /// The client's (compute node's) id: for logs, and the unit REVOKE fences out.
    pub client_id: u32,
    /// The membership epoch the client acts in; older than the server's is refused.
    pub epoch: u64,
    /// Shared secret of the cluster (≤ [`TOKEN_BYTES_MAX`] bytes).
    pub token: Vec<u8>,
}

impl Hello {
    /// Append as a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(
            self.token.len() <= TOKEN_BYTES_MAX,
            "token longer than {TOKEN_BYTES_MAX} bytes"
        );
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.cluster_id.to_le_bytes());
        out.extend_from_slice(&self.client_id.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&(self.token.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.token);
    }

    /// Decode a payload.
    pub fn decode(p: &[u8]) -> Result<Self> {
        let mut c = Cur { buf: p };
        let magic = c.u32("hello magic")?;
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = c.u16("hello version")?;
        let cluster_id = c.u64("hello cluster id")?;
        let client_id = c.u32("hello client id")?;
        let epoch = c.u64("hello epoch")?;
        let n = c.u16("hello token length")? as usize;
        if n > TOKEN_BYTES_MAX {
            return Err(WireError::TooLong {
                what: "token",
                len: n,
                max: TOKEN_BYTES_MAX,
            });
        }
        let token = c.bytes(n, "hello token")?.to_vec();
        c.finish("HELLO")?;
        Ok(Self {
            version,
            cluster_id,
            client_id,
            epoch,
            token,
        })
    }
}

/// The handshake of a CN↔CN messaging connection (PEER_HELLO): a [`Hello`] whose
/// `client_id` is the sending compute node, plus the worker threads at both ends. The
/// listener answers HELLO_OK (its compute-node id, no regions) or ERROR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerHello {
    /// Cluster, version, epoch, token and the sending compute node (`client_id`).
    pub hello: Hello,
    /// The sending worker thread.
    pub from_thread: u16,
    /// The receiving compute node (a listener refuses another's messages).
    pub to_cn: u16,
    /// The receiving worker thread.
    pub to_thread: u16,
}

impl PeerHello {
    /// Append as a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.from_thread, self.to_cn, self.to_thread] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        self.hello.encode(out);
    }

    /// Decode a payload.
    pub fn decode(p: &[u8]) -> Result<Self> {
        let mut c = Cur { buf: p };
        let from_thread = c.u16("peer hello from thread")?;
        let to_cn = c.u16("peer hello to node")?;
        let to_thread = c.u16("peer hello to thread")?;
        Ok(Self {
            hello: Hello::decode(c.buf)?,
            from_thread,
            to_cn,
            to_thread,
        })
    }
}

/// Compare two secrets in time that depends only on their lengths (the token check of
/// every handshake).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        diff |= u64::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    std::hint::black_box(diff) == 0
}

/// One registered region as announced in HELLO_OK.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Remote key every op on the region must carry; random per server start.
    pub rkey: u64,
    /// Region size in bytes.
    pub bytes: u64,
}

/// Server accepts a handshake (HELLO_OK).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloOk {
    /// The server's memory-node id.
    pub node_id: u16,
    /// The server's membership epoch.
    pub epoch: u64,
    /// Its registered regions (one today).
    pub regions: Vec<RegionInfo>,
}

impl HelloOk {
    /// Append as a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.regions.len() <= REGIONS_MAX);
        out.extend_from_slice(&self.node_id.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&(self.regions.len() as u16).to_le_bytes());
        for r in &self.regions {
            out.extend_from_slice(&r.rkey.to_le_bytes());
            out.extend_from_slice(&r.bytes.to_le_bytes());
        }
    }

    /// Decode a payload.
    pub fn decode(p: &[u8]) -> Result<Self> {
        let mut c = Cur { buf: p };
        let node_id = c.u16("hello_ok node id")?;
        let epoch = c.u64("hello_ok epoch")?;
        let n = c.u16("hello_ok region count")? as usize;
        if n > REGIONS_MAX {
            return Err(WireError::TooLong {
                what: "region list",
                len: n,
                max: REGIONS_MAX,
            });
        }
        let mut regions = Vec::new();
        for _ in 0..n {
            regions.push(RegionInfo {
                rkey: c.u64("region rkey")?,
                bytes: c.u64("region size")?,
            });
        }
        c.finish("HELLO_OK")?;
        Ok(Self {
            node_id,
            epoch,
            regions,
        })
    }
}

/// One op of a VERBS payload; WRITE data borrows the payload (no copy).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WireOp<'a> {
    /// READ `len` bytes.
    Read {
        /// Region key.
        rkey: u64,
        /// Byte offset in the region.
        offset: u64,
        /// Bytes to read.
        len: u32,
    },
    /// WRITE `data`.
    Write {
        /// Region key.
        rkey: u64,
        /// Byte offset in the region.
        offset: u64,
        /// Bytes to write.
        data: &'a [u8],
    },
    /// Compare-and-swap one word.
    Cas {
        /// Region key.
        rkey: u64,
        /// Byte offset of the word.
        offset: u64,
        /// Compared value.
        expect: u64,
        /// Stored on equality.
        swap: u64,
    },
    /// Fetch-and-add one word.
    Faa {
        /// Region key.
        rkey: u64,
        /// Byte offset of the word.
        offset: u64,
        /// Addend.
        add: u64,
    },
    /// Flush (a no-op on a DRAM node beyond its range check).
    Flush {
        /// Region key.
        rkey: u64,
        /// Any byte offset in the region.
        offset: u64,
    },
}

impl WireOp<'_> {
    /// The op's verb kind.
    pub fn kind(&self) -> OpKind {
        match self {
            WireOp::Read { .. } => OpKind::Read,
            WireOp::Write { .. } => OpKind::Write,
            WireOp::Cas { .. } => OpKind::Cas,
            WireOp::Faa { .. } => OpKind::Faa,
            WireOp::Flush { .. } => OpKind::Flush,
        }
    }

    /// Append this op to a VERBS payload (after [`begin_verbs`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (rkey, offset) = match *self {
            WireOp::Read { rkey, offset, .. }
            | WireOp::Write { rkey, offset, .. }
            | WireOp::Cas { rkey, offset, .. }
            | WireOp::Faa { rkey, offset, .. }
            | WireOp::Flush { rkey, offset } => (rkey, offset),
        };
        out.push(self.kind() as u8);
        out.extend_from_slice(&rkey.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        match *self {
            WireOp::Read { len, .. } => out.extend_from_slice(&len.to_le_bytes()),
            WireOp::Write { data, .. } => {
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                out.extend_from_slice(data);
            }
            WireOp::Cas { expect, swap, .. } => {
                out.extend_from_slice(&expect.to_le_bytes());
                out.extend_from_slice(&swap.to_le_bytes());
            }
            WireOp::Faa { add, .. } => out.extend_from_slice(&add.to_le_bytes()),
            WireOp::Flush { .. } => {}
        }
    }
}

/// Append the op-count placeholder of a VERBS or VERBS_RESULT payload; returns where it
/// is, for [`set_count`].
pub fn begin_verbs(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    at
}

/// Patch the count written by [`begin_verbs`].
pub fn set_count(out: &mut [u8], at: usize, count: u32) {
    out[at..at + 4].copy_from_slice(&count.to_le_bytes());
}

/// Streaming decoder of a VERBS payload: yields ops without copying WRITE data.
#[derive(Debug)]
pub struct OpsReader<'a> {
    cur: Cur<'a>,
    left: u32,
}

impl<'a> OpsReader<'a> {
    /// Start decoding `payload`.
    pub fn new(payload: &'a [u8]) -> Result<Self> {
        let mut cur = Cur { buf: payload };
        let left = cur.u32("op count")?;
        Ok(Self { cur, left })
    }

    /// Ops not yet decoded, as announced.
    pub fn remaining(&self) -> u32 {
        self.left
    }

    /// The next op; `Ok(None)` after the last, which also checks nothing trails.
    pub fn next_op(&mut self) -> Result<Option<WireOp<'a>>> {
        if self.left == 0 {
            self.cur.finish("VERBS")?;
            return Ok(None);
        }
        self.left -= 1;
        let c = &mut self.cur;
        let kind = c.u8("op kind")?;
        let rkey = c.u64("op rkey")?;
        let offset = c.u64("op offset")?;
        Ok(Some(match kind {
            0 => WireOp::Read {
                rkey,
                offset,
                len: c.u32("read length")?,
            },
            1 => {
                let n = c.u32("write length")? as usize;
                WireOp::Write {
                    rkey,
                    offset,
                    data: c.bytes(n, "write data")?,
                }
            }
            2 => WireOp::Cas {
                rkey,
                offset,
                expect: c.u64("cas expect")?,
                swap: c.u64("cas swap")?,
            },
            3 => WireOp::Faa {
                rkey,
                offset,
                add: c.u64("faa add")?,
            },
            4 => WireOp::Flush { rkey, offset },
            k => return Err(WireError::UnknownOp(k)),
        }))
    }
}

/// The outcome of one op in VERBS_RESULT.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpResult<'a> {
    /// Status 0: a WRITE or FLUSH succeeded.
    Done,
    /// Status 1: a CAS or FAA succeeded; the old word.
    Old(u64),
    /// Status 2: a READ succeeded; its bytes.
    Data(&'a [u8]),
    /// Status 3: the op touched bytes outside the region of this size.
    OutOfRange {
        /// The region size.
        region_bytes: u64,
    },
    /// Status 4: an atomic on an address that is not 8-byte aligned.
    Misaligned,
    /// Status 5: the op named an rkey the server does not have (it restarted).
    BadRkey,
    /// Status 6: not run, because an earlier op of the batch failed (QP error state).
    Skipped,
    /// Status 7: the reply would exceed [`FRAME_PAYLOAD_MAX`]; not run.
    TooLarge,
}

impl OpResult<'_> {
    /// Append to a VERBS_RESULT payload. For READs the server writes
    /// [`OpResult::Data`]'s header itself and reads the region straight into `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            OpResult::Done => out.push(0),
            OpResult::Old(v) => {
                out.push(1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            OpResult::Data(d) => {
                out.push(2);
                out.extend_from_slice(&(d.len() as u32).to_le_bytes());
                out.extend_from_slice(d);
            }
            OpResult::OutOfRange { region_bytes } => {
                out.push(3);
                out.extend_from_slice(&region_bytes.to_le_bytes());
            }
            OpResult::Misaligned => out.push(4),
            OpResult::BadRkey => out.push(5),
            OpResult::Skipped => out.push(6),
            OpResult::TooLarge => out.push(7),
        }
    }
}

/// Status byte of [`OpResult::Data`], for servers writing READ data in place.
pub const STATUS_DATA: u8 = 2;

/// Streaming decoder of a VERBS_RESULT payload.
#[derive(Debug)]
pub struct ResultsReader<'a> {
    cur: Cur<'a>,
    left: u32,
}

impl<'a> ResultsReader<'a> {
    /// Start decoding `payload`.
    pub fn new(payload: &'a [u8]) -> Result<Self> {
        let mut cur = Cur { buf: payload };
        let left = cur.u32("result count")?;
        Ok(Self { cur, left })
    }

    /// Results not yet decoded, as announced.
    pub fn remaining(&self) -> u32 {
        self.left
    }

    /// The next result; `Ok(None)` after the last, which also checks nothing trails.
    pub fn next_result(&mut self) -> Result<Option<OpResult<'a>>> {
        if self.left == 0 {
            self.cur.finish("VERBS_RESULT")?;
            return Ok(None);
        }
        self.left -= 1;
        let c = &mut self.cur;
        Ok(Some(match c.u8("op status")? {
            0 => OpResult::Done,
            1 => OpResult::Old(c.u64("old word")?),
            2 => {
                let n = c.u32("read data length")? as usize;
                OpResult::Data(c.bytes(n, "read data")?)
            }
            3 => OpResult::OutOfRange {
                region_bytes: c.u64("region size")?,
            },
            4 => OpResult::Misaligned,
            5 => OpResult::BadRkey,
            6 => OpResult::Skipped,
            7 => OpResult::TooLarge,
            s => return Err(WireError::UnknownStatus(s)),
        }))
    }
}

/// Append a [`TableMeta`].
pub fn encode_table(out: &mut Vec<u8>, t: &TableMeta) {
    assert!(
        t.replicas.len() <= REPLICAS_MAX,
        "table with more than {REPLICAS_MAX} replicas"
    );
    out.extend_from_slice(&t.id.to_le_bytes());
    put_str16(out, &t.name);
    for v in [t.value_bytes, t.slot_bytes, t.slots_per_bucket, t.bucket_bytes] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&t.bucket_count.to_le_bytes());
    out.extend_from_slice(&t.overflow_bucket_count.to_le_bytes());
    out.extend_from_slice(&(t.replicas.len() as u16).to_le_bytes());
    for (mn, off) in &t.replicas {
        out.extend_from_slice(&mn.0.to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
    }
    match &t.runs {
        None => out.push(0),
        Some(r) => {
            out.extend_from_slice(&[1, r.seq_shift, r.seq_bits, r.run_log2]);
            out.extend_from_slice(&r.segment_buckets.to_le_bytes());
        }
    }
    match &t.value_region {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.offset.to_le_bytes());
            out.extend_from_slice(&v.bytes.to_le_bytes());
        }
    }
    assert!(
        t.attrs.len() <= ATTRS_MAX,
        "table with more than {ATTRS_MAX} attributes"
    );
    out.extend_from_slice(&(t.attrs.len() as u16).to_le_bytes());
    for a in &t.attrs {
        put_str16(out, &a.name);
        out.extend_from_slice(&a.offset.to_le_bytes());
        out.extend_from_slice(&a.bytes.to_le_bytes());
    }
}

fn decode_table(c: &mut Cur<'_>) -> Result<TableMeta> {
    let id = c.u32("table id")?;
    let name = c.str16("table name")?;
    let value_bytes = c.u32("value bytes")?;
    let slot_bytes = c.u32("slot bytes")?;
    let slots_per_bucket = c.u32("slots per bucket")?;
    let bucket_bytes = c.u32("bucket bytes")?;
    let bucket_count = c.u64("bucket count")?;
    let overflow_bucket_count = c.u64("overflow bucket count")?;
    let n = c.u16("replica count")? as usize;
    if n > REPLICAS_MAX {
        return Err(WireError::TooLong {
            what: "replica list",
            len: n,
            max: REPLICAS_MAX,
        });
    }
    let mut replicas = Vec::new();
    for _ in 0..n {
        replicas.push((MnId(c.u16("replica node")?), c.u64("replica offset")?));
    }
    let runs = match c.u8("runs flag")? {
        0 => None,
        _ => Some(crate::Runs {
            seq_shift: c.u8("runs seq shift")?,
            seq_bits: c.u8("runs seq bits")?,
            run_log2: c.u8("runs run log2")?,
            segment_buckets: c.u64("runs segment buckets")?,
        }),
    };
    let value_region = match c.u8("value region flag")? {
        0 => None,
        _ => Some(crate::ValueRegion {
            offset: c.u64("value region offset")?,
            bytes: c.u64("value region bytes")?,
        }),
    };
    let n = c.u16("attribute count")? as usize;
    if n > ATTRS_MAX {
        return Err(WireError::TooLong {
            what: "attribute list",
            len: n,
            max: ATTRS_MAX,
        });
    }
    let mut attrs = Vec::new();
    for _ in 0..n {
        attrs.push(crate::Attr {
            name: c.str16("attribute name")?,
            offset: c.u32("attribute offset")?,
            bytes: c.u32("attribute bytes")?,
        });
    }
    Ok(TableMeta {
        id,
        name,
        value_bytes,
        slot_bytes,
        slots_per_bucket,
        bucket_bytes,
        bucket_count,
        overflow_bucket_count,
        replicas,
        runs,
        value_region,
        attrs,
    })
}

/// An init-time control request (CONTROL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlReq<'a> {
    /// Reserve `bytes` aligned to `align`.
    Alloc {
        /// Bytes.
        bytes: u64,
        /// Alignment, a power of two (the server checks).
        align: u64,
    },
    /// Bulk-load `data` at `offset`.
    Load {
        /// Byte offset.
        offset: u64,
        /// Bytes to store.
        data: &'a [u8],
    },
    /// Publish a table.
    PutTable(TableMeta),
    /// List the published tables.
    Tables,
    /// Fence a compute node out (FORD §4.8): close every connection whose HELLO named
    /// `client_id` and refuse that id from now on. Answered with DONE once no op of that
    /// client can land any more.
    Revoke {
        /// The client id to fence out, as sent in its HELLO.
        client_id: u32,
    },
    /// Publish a named entry.
    PutNamed {
        /// Its name.
        name: String,
        /// Its value.
        value: &'a [u8],
    },
    /// Fetch the value of a named entry.
    Named {
        /// Its name.
        name: String,
    },
    /// List the published names.
    Names,
}

impl<'a> ControlReq<'a> {
    /// Append as a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ControlReq::Alloc { bytes, align } => {
                out.push(1);
                out.extend_from_slice(&bytes.to_le_bytes());
                out.extend_from_slice(&align.to_le_bytes());
            }
            ControlReq::Load { offset, data } => {
                out.push(2);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                out.extend_from_slice(data);
            }
            ControlReq::PutTable(t) => {
                out.push(3);
                encode_table(out, t);
            }
            ControlReq::Tables => out.push(4),
            ControlReq::Revoke { client_id } => {
                out.push(5);
                out.extend_from_slice(&client_id.to_le_bytes());
            }
            ControlReq::PutNamed { name, value } => {
                out.push(6);
                put_str16(out, name);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
            ControlReq::Named { name } => {
                out.push(7);
                put_str16(out, name);
            }
            ControlReq::Names => out.push(8),
        }
    }

    /// Decode a payload.
    pub fn decode(p: &'a [u8]) -> Result<Self> {
        let mut c = Cur { buf: p };
        let r = match c.u8("control op")? {
            1 => ControlReq::Alloc {
                bytes: c.u64("alloc bytes")?,
                align: c.u64("alloc align")?,
            },
            2 => {
                let offset = c.u64("load offset")?;
                let n = c.u32("load length")? as usize;
                ControlReq::Load {
                    offset,
                    data: c.bytes(n, "load data")?,
                }
            }
            3 => ControlReq::PutTable(decode_table(&mut c)?),
            4 => ControlReq::Tables,
            5 => ControlReq::Revoke {
                client_id: c.u32("revoke client id")?,
            },
            6 => {
                let name = c.str16("named entry name")?;
                let n = c.u32("named value length")? as usize;
                ControlReq::PutNamed {
                    name,
                    value: c.bytes(n, "named value")?,
                }
            }
            7 => ControlReq::Named {
                name: c.str16("named entry name")?,
            },
            8 => ControlReq::Names,
            v => {
                return Err(WireError::UnknownTag {
                    what: "control op",
                    value: v,
                })
            }
        };
        c.finish("CONTROL")?;
        Ok(r)
    }
}

/// The result of a control request (CONTROL_RESULT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlReply {
    /// ALLOC succeeded at this offset.
    Offset(u64),
    /// LOAD or PUT_TABLE succeeded.
    Done,
    /// The published tables.
    Tables(Vec<TableMeta>),
    /// The node refused.
    Failed(ControlError),
    /// The value of a named entry (NAMED).
    Value(Vec<u8>),
    /// The published names (NAMES).
    Names(Vec<String>),
}

impl ControlReply {
    /// Append as a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ControlReply::Offset(o) => {
                out.push(1);
                out.extend_from_slice(&o.to_le_bytes());
            }
            ControlReply::Done => out.push(2),
            ControlReply::Tables(ts) => {
                out.push(3);
                out.extend_from_slice(&(ts.len() as u32).to_le_bytes());
                for t in ts {
                    encode_table(out, t);
                }
            }
            ControlReply::Failed(e) => {
                out.push(4);
                encode_control_error(out, e);
            }
            ControlReply::Value(v) => {
                out.push(5);
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
            ControlReply::Names(names) => {
                out.push(6);
                out.extend_from_slice(&(names.len() as u32).to_le_bytes());
                for n in names {
                    put_str16(out, n);
                }
            }
        }
    }

    /// Decode a payload.
    pub fn decode(p: &[u8]) -> Result<Self> {
        let mut c = Cur { buf: p };
        let r = match c.u8("control result")? {
            1 => ControlReply::Offset(c.u64("alloc offset")?),
            2 => ControlReply::Done,
            3 => {
                let n = c.u32("table count")?;
                let mut ts = Vec::new();
                for _ in 0..n {
                    ts.push(decode_table(&mut c)?);
                }
                ControlReply::Tables(ts)
            }
            4 => ControlReply::Failed(decode_control_error(&mut c)?),
            5 => {
                let n = c.u32("named value length")? as usize;
                ControlReply::Value(c.bytes(n, "named value")?.to_vec())
            }
            6 => {
                let n = c.u32("name count")?;
                let mut names = Vec::new();
                for _ in 0..n {
                    names.push(c.str16("name")?);
                }
                ControlReply::Names(names)
            }
            v => {
                return Err(WireError::UnknownTag {
                    what: "control result",
                    value: v,
                })
            }
        };
        c.finish("CONTROL_RESULT")?;
        Ok(r)
    }
}

fn encode_control_error(out: &mut Vec<u8>, e: &ControlError) {
    let u64s = |out: &mut Vec<u8>, code: u8, mn: MnId, vs: &[u64]| {
        out.push(code);
        out.extend_from_slice(&mn.0.to_le_bytes());
        for v in vs {
            out.extend_from_slice(&v.to_le_bytes());
        }
    };
    match e {
        ControlError::OutOfMemory {
            mn,
            requested,
            free,
            region_bytes,
        } => u64s(out, 1, *mn, &[*requested, *free, *region_bytes]),
        ControlError::OutOfRange {
            mn,
            offset,
            len,
            region_bytes,
        } => u64s(out, 2, *mn, &[*offset, *len, *region_bytes]),
        ControlError::UnknownNode { mn, mn_count } => u64s(out, 3, *mn, &[*mn_count as u64]),
        ControlError::DuplicateTable { mn, id, name } => {
            u64s(out, 4, *mn, &[]);
            out.extend_from_slice(&id.to_le_bytes());
            put_str16(out, name);
        }
        ControlError::Unreachable { mn, why } => {
            u64s(out, 5, *mn, &[]);
            put_str16(out, why);
        }
        ControlError::Persist { mn, why } => {
            u64s(out, 6, *mn, &[]);
            put_str16(out, why);
        }
        ControlError::DuplicateName { mn, name } => {
            u64s(out, 7, *mn, &[]);
            put_str16(out, name);
        }
        ControlError::UnknownName { mn, name } => {
            u64s(out, 8, *mn, &[]);
            put_str16(out, name);
        }
        ControlError::NamedLimit {
            mn,
            name,
            what,
            value,
            limit,
        } => {
            u64s(out, 9, *mn, &[]);
            out.push(what.code());
            out.extend_from_slice(&value.to_le_bytes());
            out.extend_from_slice(&limit.to_le_bytes());
            put_str16(out, name);
        }
    }
}

fn decode_control_error(c: &mut Cur<'_>) -> Result<ControlError> {
    let code = c.u8("control error code")?;
    let mn = MnId(c.u16("control error node")?);
    Ok(match code {
        1 => ControlError::OutOfMemory {
            mn,
            requested: c.u64("requested")?,
            free: c.u64("free")?,
            region_bytes: c.u64("region bytes")?,
        },
        2 => ControlError::OutOfRange {
            mn,
            offset: c.u64("offset")?,
            len: c.u64("len")?,
            region_bytes: c.u64("region bytes")?,
        },
        3 => ControlError::UnknownNode {
            mn,
            mn_count: c.u64("mn count")? as usize,
        },
        4 => ControlError::DuplicateTable {
            mn,
            id: c.u32("table id")?,
            name: c.str16("table name")?,
        },
        5 => ControlError::Unreachable {
            mn,
            why: c.str16("reason")?,
        },
        6 => ControlError::Persist {
            mn,
            why: c.str16("reason")?,
        },
        7 => ControlError::DuplicateName {
            mn,
            name: c.str16("name")?,
        },
        8 => ControlError::UnknownName {
            mn,
            name: c.str16("name")?,
        },
        9 => {
            let code = c.u8("named limit")?;
            let what = NamedLimitKind::from_code(code).ok_or(WireError::UnknownTag {
                what: "named limit",
                value: code,
            })?;
            ControlError::NamedLimit {
                mn,
                what,
                value: c.u64("named limit value")?,
                limit: c.u64("named limit")?,
                name: c.str16("name")?,
            }
        }
        v => {
            return Err(WireError::UnknownTag {
                what: "control error code",
                value: v,
            })
        }
    })
}

/// Append a node's named entries: count u32, then per entry name len u16 + UTF-8, value
/// len u32 + bytes (the `--backing` sidecar's named section).
pub(crate) fn encode_named_entries(out: &mut Vec<u8>, named: &BTreeMap<String, Vec<u8>>) {
    out.extend_from_slice(&(named.len() as u32).to_le_bytes());
    for (name, value) in named {
        put_str16(out, name);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
}

/// Decode what [`encode_named_entries`] wrote, and nothing after it.
pub(crate) fn decode_named_entries(p: &[u8]) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut c = Cur { buf: p };
    let n = c.u32("named entry count")?;
    let mut named = BTreeMap::new();
    for _ in 0..n {
        let name = c.str16("named entry name")?;
        let len = c.u32("named value length")? as usize;
        named.insert(name, c.bytes(len, "named value")?.to_vec());
    }
    c.finish("named entries")?;
    Ok(named)
}

/// Why a peer refused or closed (the code of an ERROR frame).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// A frame did not decode (closes the connection).
    pub const BAD_FRAME: Self = Self(1);
    /// HELLO named another protocol version (closes).
    pub const BAD_VERSION: Self = Self(2);
    /// HELLO named another cluster (closes).
    pub const BAD_CLUSTER: Self = Self(3);
    /// HELLO carried the wrong token (closes).
    pub const BAD_TOKEN: Self = Self(4);
    /// HELLO named an epoch older than the server's: the client is fenced out (closes).
    pub const STALE_EPOCH: Self = Self(5);
    /// A frame other than HELLO before the handshake, or a second HELLO (closes).
    pub const NOT_EXPECTED: Self = Self(6);
    /// The server is at its connection limit and every connection has passed its HELLO
    /// (closes). A connection cut to make room for a newer one gets no frame.
    pub const TOO_MANY_CONNECTIONS: Self = Self(7);
    /// A well-formed request the server cannot honour (e.g. an alignment that is not a
    /// power of two); the connection stays open.
    pub const BAD_REQUEST: Self = Self(8);
    /// No frame within the handshake or idle timeout (closes).
    pub const TIMEOUT: Self = Self(9);
    /// The server is shutting down (closes).
    pub const SHUTDOWN: Self = Self(10);
    /// The client id of the HELLO was revoked (fenced out by REVOKE); closes.
    pub const REVOKED: Self = Self(11);
}

/// A refusal (ERROR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorFrame {
    /// What went wrong.
    pub code: ErrorCode,
    /// One line for a human.
    pub message: String,
}

impl ErrorFrame {
    /// Append as a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.code.0.to_le_bytes());
        put_str16(out, &self.message);
    }

    /// Decode a payload.
    pub fn decode(p: &[u8]) -> Result<Self> {
        let mut c = Cur { buf: p };
        let code = ErrorCode(c.u16("error code")?);
        let message = c.str16("error message")?;
        c.finish("ERROR")?;
        Ok(Self { code, message })
    }
}

/// Append a complete ERROR frame.
pub fn put_error(out: &mut Vec<u8>, request_id: u64, code: ErrorCode, message: &str) {
    let s = begin_frame(out, Kind::Error, request_id);
    ErrorFrame {
        code,
        message: message.to_owned(),
    }
    .encode(out);
    end_frame(out, s);
}

/// Fully decode one payload of the given kind, discarding the result: what a peer does
/// with a frame, for fuzzing and for tests.
pub fn check_payload(kind: Kind, p: &[u8]) -> Result<()> {
    match kind {
        Kind::Hello => Hello::decode(p).map(drop),
        Kind::HelloOk => HelloOk::decode(p).map(drop),
        Kind::Verbs => {
            let mut r = OpsReader::new(p)?;
            while r.next_op()?.is_some() {}
            Ok(())
        }
        Kind::VerbsResult => {
            let mut r = ResultsReader::new(p)?;
            while r.next_result()?.is_some() {}
            Ok(())
        }
        Kind::Control => ControlReq::decode(p).map(drop),
        Kind::ControlResult => ControlReply::decode(p).map(drop),
        Kind::Error => ErrorFrame::decode(p).map(drop),
        Kind::Ping | Kind::Pong => Cur { buf: p }.finish("PING/PONG"),
        Kind::PeerHello => PeerHello::decode(p).map(drop),
        Kind::Messages => dmtx_verbs::msg::decode_entries(p, &mut |_| {})
            .map(drop)
            .map_err(|e| WireError::Messages(e.to_string())),
    }
}

/// Compact a receive buffer holding unparsed bytes `inb[*start..*end]` and grow it to
/// hold the frame being received. Its length must already have been checked against
/// [`FRAME_PAYLOAD_MAX`] (when its header was decoded), so this never grows past that.
/// Shared by the server and the client so both treat partial frames alike.
pub fn make_room(inb: &mut Vec<u8>, start: &mut usize, end: &mut usize) {
    if *start == *end {
        *start = 0;
        *end = 0;
    }
    let need = match decode_header(&inb[*start..*end]) {
        Ok(Some(h)) => HEADER_BYTES + h.payload_bytes as usize,
        _ => HEADER_BYTES,
    };
    if *start + need > inb.len() || *end == inb.len() {
        inb.copy_within(*start..*end, 0);
        *end -= *start;
        *start = 0;
    }
    if need > inb.len() {
        inb.resize(need, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(kind: Kind, id: u64, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        let s = begin_frame(&mut out, kind, id);
        body(&mut out);
        end_frame(&mut out, s);
        out
    }

    /// Split exactly one frame and check its header; returns the payload.
    fn one(buf: &[u8], kind: Kind, id: u64) -> &[u8] {
        let (h, p, used) = split_frame(buf).unwrap().unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(h.kind, kind);
        assert_eq!(h.request_id, id);
        check_payload(kind, p).unwrap();
        p
    }

    /// Goal: a PUT_NAMED or NAMED whose name is not UTF-8, or whose value is shorter
    /// than its length says, is a typed decode error (the server answers BAD_FRAME).
    #[test]
    fn named_requests_with_bad_bytes_do_not_decode() {
        let mut p = vec![6u8];
        p.extend_from_slice(&2u16.to_le_bytes());
        p.extend_from_slice(&[0xff, 0xfe]);
        p.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(ControlReq::decode(&p), Err(WireError::BadUtf8("named entry name")));
        let mut p = vec![7u8, 1, 0, 0x80];
        assert_eq!(ControlReq::decode(&p), Err(WireError::BadUtf8("named entry name")));
        p = vec![6u8, 1, 0, b'a'];
        p.extend_from_slice(&100u32.to_le_bytes());
        p.extend_from_slice(b"short");
        assert!(matches!(ControlReq::decode(&p), Err(WireError::Truncated { .. })));
        p = vec![8u8, 0];
        assert!(matches!(ControlReq::decode(&p), Err(WireError::Trailing { .. })));
    }

    #[test]
    fn named_entries_round_trip_and_reject_trailing_bytes() {
        let mut m = BTreeMap::new();
        m.insert("a".to_owned(), vec![1, 2, 3]);
        m.insert("ü".to_owned(), vec![]);
        let mut out = Vec::new();
        encode_named_entries(&mut out, &m);
        assert_eq!(decode_named_entries(&out).unwrap(), m);
        out.push(0);
        assert!(matches!(decode_named_entries(&out), Err(WireError::Trailing { .. })));
    }

    #[test]
    fn header_length_is_checked_before_the_payload_arrives() {
        let mut b = vec![0u8; 16];
        b[0..4].copy_from_slice(&(FRAME_PAYLOAD_MAX + 1).to_le_bytes());
        b[4] = Kind::Ping as u8;
        assert!(matches!(split_frame(&b), Err(WireError::FrameTooLarge { .. })));
        b[0..4].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(split_frame(&b).unwrap(), None, "incomplete payload waits");
        b[4] = 42;
        assert_eq!(split_frame(&b), Err(WireError::UnknownKind(42)));
        b[4] = Kind::Ping as u8;
        b[6] = 1;
        assert_eq!(split_frame(&b), Err(WireError::Reserved));
    }

    /// Goal: a table's value region and attribute schema cross the wire, and a lying
    /// attribute count is a typed error. Method: encode a PUT_TABLE with both, decode it;
    /// then patch the count past [`ATTRS_MAX`].
    #[test]
    fn value_region_and_attributes_cross_the_wire() {
        let t = TableMeta {
            id: 4,
            name: "customer".into(),
            value_bytes: 12,
            slot_bytes: 320,
            slots_per_bucket: 4,
            bucket_bytes: 1296,
            bucket_count: 8,
            overflow_bucket_count: 2,
            replicas: vec![(MnId(0), 4096), (MnId(1), 8192)],
            runs: None,
            value_region: Some(crate::ValueRegion {
                offset: 13_024,
                bytes: 1 << 20,
            }),
            attrs: vec![crate::Attr::new("c_balance", 0, 8), crate::Attr::new("c_data", 8, 4)],
        };
        let req = ControlReq::PutTable(t.clone());
        let mut p = Vec::new();
        req.encode(&mut p);
        assert_eq!(ControlReq::decode(&p).unwrap(), req);
        // The attribute count sits after the value region: 2 attributes of (2 + name) + 8.
        let attrs_bytes: usize = t.attrs.iter().map(|a| 2 + a.name.len() + 8).sum();
        let count_at = p.len() - attrs_bytes - 2;
        assert_eq!(u16::from_le_bytes([p[count_at], p[count_at + 1]]), 2);
        p[count_at..count_at + 2].copy_from_slice(&(ATTRS_MAX as u16 + 1).to_le_bytes());
        assert!(matches!(
            ControlReq::decode(&p),
            Err(WireError::TooLong {
                what: "attribute list",
                ..
            })
        ));
    }

    fn table() -> impl Strategy<Value = TableMeta> {
        (
            any::<u32>(),
            "[a-z_]{0,12}",
            any::<[u32; 4]>(),
            any::<[u64; 2]>(),
            prop::collection::vec((any::<u16>(), any::<u64>()), 0..4),
            prop::option::of(any::<([u8; 3], u64)>()),
            prop::option::of(any::<(u64, u64)>()),
            prop::collection::vec(("[a-z_]{0,10}", any::<u32>(), any::<u32>()), 0..5),
        )
            .prop_map(|(id, name, v, c, r, runs, region, attrs)| TableMeta {
                id,
                name,
                value_bytes: v[0],
                slot_bytes: v[1],
                slots_per_bucket: v[2],
                bucket_bytes: v[3],
                bucket_count: c[0],
                overflow_bucket_count: c[1],
                replicas: r.into_iter().map(|(m, o)| (MnId(m), o)).collect(),
                runs: runs.map(|(b, segment_buckets)| crate::Runs {
                    seq_shift: b[0],
                    seq_bits: b[1],
                    run_log2: b[2],
                    segment_buckets,
                }),
                value_region: region.map(|(offset, bytes)| crate::ValueRegion { offset, bytes }),
                attrs: attrs
                    .into_iter()
                    .map(|(name, offset, bytes)| crate::Attr { name, offset, bytes })
                    .collect(),
            })
    }

    fn control_error() -> impl Strategy<Value = ControlError> {
        (0u8..9, any::<u16>(), any::<[u64; 3]>(), "[a-z]{0,8}").prop_map(|(k, mn, v, name)| {
            let mn = MnId(mn);
            match k {
                0 => ControlError::OutOfMemory {
                    mn,
                    requested: v[0],
                    free: v[1],
                    region_bytes: v[2],
                },
                1 => ControlError::OutOfRange {
                    mn,
                    offset: v[0],
                    len: v[1],
                    region_bytes: v[2],
                },
                2 => ControlError::UnknownNode {
                    mn,
                    mn_count: v[0] as u32 as usize,
                },
                3 => ControlError::DuplicateTable {
                    mn,
                    id: v[0] as u32,
                    name,
                },
                4 => ControlError::Unreachable { mn, why: name },
                5 => ControlError::Persist { mn, why: name },
                6 => ControlError::DuplicateName { mn, name },
                7 => ControlError::UnknownName { mn, name },
                _ => ControlError::NamedLimit {
                    mn,
                    name,
                    what: NamedLimitKind::from_code(1 + (v[2] % 3) as u8).unwrap(),
                    value: v[0],
                    limit: v[1],
                },
            }
        })
    }

    /// (kind 0..5, rkey, offset, a, b, data) → an op borrowing `data`.
    fn mk_op(k: u8, rkey: u64, offset: u64, a: u64, b: u64, data: &[u8]) -> WireOp<'_> {
        match k {
            0 => WireOp::Read {
                rkey,
                offset,
                len: a as u32,
            },
            1 => WireOp::Write { rkey, offset, data },
            2 => WireOp::Cas {
                rkey,
                offset,
                expect: a,
                swap: b,
            },
            3 => WireOp::Faa { rkey, offset, add: a },
            _ => WireOp::Flush { rkey, offset },
        }
    }

    fn mk_result(k: u8, a: u64, data: &[u8]) -> OpResult<'_> {
        match k {
            0 => OpResult::Done,
            1 => OpResult::Old(a),
            2 => OpResult::Data(data),
            3 => OpResult::OutOfRange { region_bytes: a },
            4 => OpResult::Misaligned,
            5 => OpResult::BadRkey,
            6 => OpResult::Skipped,
            _ => OpResult::TooLarge,
        }
    }

    type RawOp = (u8, u64, u64, u64, u64, Vec<u8>);

    fn raw_ops() -> impl Strategy<Value = Vec<RawOp>> {
        prop::collection::vec(
            (
                0u8..5,
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                prop::collection::vec(any::<u8>(), 0..24),
            ),
            0..8,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Goal: the decoder never panics. Method: random byte streams, split into frames
        /// and every payload decoded as its kind; each step is Ok or a typed error.
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), kind in 1u8..10) {
            let mut buf = &bytes[..];
            for _ in 0..64 {
                match split_frame(buf) {
                    Ok(Some((h, p, used))) => {
                        let _ = check_payload(h.kind, p);
                        buf = &buf[used..];
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            // Payload decoders on raw bytes too (a well-framed but garbage payload).
            let _ = check_payload(Kind::from_u8(kind).unwrap(), &bytes);
        }

        /// Goal: a valid header followed by garbage decodes to Ok or a typed error.
        #[test]
        fn framed_garbage_never_panics(kind in 1u8..10, body in prop::collection::vec(any::<u8>(), 0..256)) {
            let k = Kind::from_u8(kind).unwrap();
            let f = frame(k, 1, |o| o.extend_from_slice(&body));
            let (h, p, _) = split_frame(&f).unwrap().unwrap();
            let _ = check_payload(h.kind, p);
        }

        #[test]
        fn hello_round_trips(v in any::<u16>(), c in any::<u64>(), id in any::<u32>(), e in any::<u64>(),
                             token in prop::collection::vec(any::<u8>(), 0..TOKEN_BYTES_MAX), rid in any::<u64>()) {
            let h = Hello { version: v, cluster_id: c, client_id: id, epoch: e, token };
            let f = frame(Kind::Hello, rid, |o| h.encode(o));
            prop_assert_eq!(Hello::decode(one(&f, Kind::Hello, rid)).unwrap(), h);
        }

        #[test]
        fn hello_ok_round_trips(n in any::<u16>(), e in any::<u64>(), r in prop::collection::vec(any::<(u64, u64)>(), 0..4)) {
            let h = HelloOk { node_id: n, epoch: e, regions: r.into_iter().map(|(rkey, bytes)| RegionInfo { rkey, bytes }).collect() };
            let f = frame(Kind::HelloOk, 0, |o| h.encode(o));
            prop_assert_eq!(HelloOk::decode(one(&f, Kind::HelloOk, 0)).unwrap(), h);
        }

        #[test]
        fn verbs_round_trip(raw in raw_ops(), rid in any::<u64>()) {
            let ops: Vec<_> = raw.iter().map(|(k, r, o, a, b, d)| mk_op(*k, *r, *o, *a, *b, d)).collect();
            let f = frame(Kind::Verbs, rid, |o| {
                let at = begin_verbs(o);
                for op in &ops { op.encode(o); }
                set_count(o, at, ops.len() as u32);
            });
            let mut r = OpsReader::new(one(&f, Kind::Verbs, rid)).unwrap();
            for op in &ops {
                let got = r.next_op().unwrap();
                prop_assert_eq!(got.as_ref(), Some(op));
            }
            prop_assert_eq!(r.next_op().unwrap(), None);
        }

        #[test]
        fn verbs_result_round_trips(raw in raw_ops()) {
            let res: Vec<_> = raw.iter().map(|(k, _, _, a, b, d)| mk_result(k.wrapping_add(*b as u8) % 8, *a, d)).collect();
            let f = frame(Kind::VerbsResult, 3, |o| {
                let at = begin_verbs(o);
                for r in &res { r.encode(o); }
                set_count(o, at, res.len() as u32);
            });
            let mut r = ResultsReader::new(one(&f, Kind::VerbsResult, 3)).unwrap();
            for x in &res {
                let got = r.next_result().unwrap();
                prop_assert_eq!(got.as_ref(), Some(x));
            }
            prop_assert_eq!(r.next_result().unwrap(), None);
        }

        #[test]
        fn control_round_trips(k in 0u8..8, a in any::<u64>(), b in any::<u64>(), data in prop::collection::vec(any::<u8>(), 0..64), t in table(), name in ".{0,20}") {
            let req = match k {
                0 => ControlReq::Alloc { bytes: a, align: b },
                1 => ControlReq::Load { offset: a, data: &data },
                2 => ControlReq::PutTable(t),
                3 => ControlReq::Tables,
                4 => ControlReq::Revoke { client_id: a as u32 },
                5 => ControlReq::PutNamed { name, value: &data },
                6 => ControlReq::Named { name },
                _ => ControlReq::Names,
            };
            let f = frame(Kind::Control, a, |o| req.encode(o));
            prop_assert_eq!(ControlReq::decode(one(&f, Kind::Control, a)).unwrap(), req);
        }

        #[test]
        fn control_result_round_trips(k in 0u8..6, a in any::<u64>(), ts in prop::collection::vec(table(), 0..3), e in control_error(),
                                      data in prop::collection::vec(any::<u8>(), 0..64), names in prop::collection::vec(".{0,12}", 0..4)) {
            let rep = match k {
                0 => ControlReply::Offset(a),
                1 => ControlReply::Done,
                2 => ControlReply::Tables(ts),
                3 => ControlReply::Failed(e),
                4 => ControlReply::Value(data),
                _ => ControlReply::Names(names),
            };
            let f = frame(Kind::ControlResult, 9, |o| rep.encode(o));
            prop_assert_eq!(ControlReply::decode(one(&f, Kind::ControlResult, 9)).unwrap(), rep);
        }

        #[test]
        fn error_ping_pong_round_trip(code in any::<u16>(), msg in ".{0,40}", rid in any::<u64>()) {
            let mut f = Vec::new();
            put_error(&mut f, rid, ErrorCode(code), &msg);
            let e = ErrorFrame::decode(one(&f, Kind::Error, rid)).unwrap();
            prop_assert_eq!(e, ErrorFrame { code: ErrorCode(code), message: msg });
            for k in [Kind::Ping, Kind::Pong] {
                let f = frame(k, rid, |_| {});
                prop_assert!(one(&f, k, rid).is_empty());
            }
        }
    }
}
