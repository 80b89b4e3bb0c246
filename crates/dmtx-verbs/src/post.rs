//! Ops, doorbell batches and posts.
//!
//! A [`Post`] is a reusable buffer of ops. Ops to the same memory node form that node's
//! batch and run in the order they were added; batches to different nodes run in
//! parallel. The coordinator that owns a post fills it, hands it to a
//! [`Transport`](crate::Transport), waits once (one round trip), and reads results back
//! out of the same buffer. Nothing is allocated once the buffers have grown to the
//! largest post a coordinator issues.

use crate::RemotePtr;

/// The kind of a verb.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpKind {
    /// One-sided READ.
    Read = 0,
    /// One-sided WRITE.
    Write = 1,
    /// 8-byte compare-and-swap.
    Cas = 2,
    /// 8-byte fetch-and-add.
    Faa = 3,
    /// Persist everything written before it on this connection (READ-after-WRITE semantics).
    Flush = 4,
}

impl OpKind {
    /// Every kind, in counter order.
    pub const ALL: [OpKind; 5] = [OpKind::Read, OpKind::Write, OpKind::Cas, OpKind::Faa, OpKind::Flush];
    /// Number of kinds (the length of per-kind counter arrays).
    pub const COUNT: usize = 5;

    /// Lower-case name, as used in results.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Cas => "cas",
            OpKind::Faa => "faa",
            OpKind::Flush => "flush",
        }
    }
}

/// One op of a post, as a transport sees it.
///
/// Laid out as a tag byte (the [`OpKind`]) and every variant's fields in declaration
/// order, so that the address, and a READ's or WRITE's length, sit at one offset
/// whatever the kind: a transport can read them without a jump on the kind, which a
/// stream of mixed ops makes unpredictable.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(C, u8)]
pub enum Op {
    /// Read `len` bytes at `ptr` into the post's read buffer at byte `dst`.
    Read {
        /// Source address.
        ptr: RemotePtr,
        /// Bytes to read.
        len: u32,
        /// Destination offset in the read buffer (8-byte aligned).
        dst: u32,
    },
    /// Write `len` bytes from the post's write buffer at byte `src` to `ptr`.
    Write {
        /// Destination address.
        ptr: RemotePtr,
        /// Bytes to write (at a READ's `len` offset: see the type's doc).
        len: u32,
        /// Source offset in the write buffer.
        src: u32,
    },
    /// If the word at `ptr` equals `expect`, replace it with `swap`; return the old word.
    Cas {
        /// The word (8-byte aligned).
        ptr: RemotePtr,
        /// Value compared against.
        expect: u64,
        /// Value stored on equality.
        swap: u64,
    },
    /// Add `add` (wrapping) to the word at `ptr`; return the old word.
    Faa {
        /// The word (8-byte aligned).
        ptr: RemotePtr,
        /// Addend.
        add: u64,
    },
    /// Persist what this connection wrote before; `ptr` names the node (and a byte that
    /// a READ-after-WRITE implementation reads).
    Flush {
        /// Any address on the node to flush.
        ptr: RemotePtr,
    },
}

impl Op {
    /// The op's kind.
    #[inline]
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Write { .. } => OpKind::Write,
            Op::Cas { .. } => OpKind::Cas,
            Op::Faa { .. } => OpKind::Faa,
            Op::Flush { .. } => OpKind::Flush,
        }
    }

    /// The address the op targets.
    #[inline]
    pub fn ptr(&self) -> RemotePtr {
        match *self {
            Op::Read { ptr, .. }
            | Op::Write { ptr, .. }
            | Op::Cas { ptr, .. }
            | Op::Faa { ptr, .. }
            | Op::Flush { ptr } => ptr,
        }
    }

    /// Bytes a READ or WRITE moves; 0 for the other kinds.
    #[inline]
    pub fn payload_len(&self) -> u32 {
        match *self {
            Op::Read { len, .. } | Op::Write { len, .. } => len,
            Op::Cas { .. } | Op::Faa { .. } | Op::Flush { .. } => 0,
        }
    }

    /// Payload bytes sent to the MN (headers are the transport model's business).
    #[inline]
    pub fn bytes_out(&self) -> u64 {
        match *self {
            Op::Read { .. } | Op::Flush { .. } => 0,
            Op::Write { len, .. } => len as u64,
            Op::Cas { .. } => 16,
            Op::Faa { .. } => 8,
        }
    }

    /// Payload bytes returned by the MN.
    #[inline]
    pub fn bytes_in(&self) -> u64 {
        match *self {
            Op::Read { len, .. } => len as u64,
            Op::Write { .. } | Op::Flush { .. } => 0,
            Op::Cas { .. } | Op::Faa { .. } => 8,
        }
    }
}

/// Handle to the data of a READ in a completed post.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReadId(u32);

/// Handle to the old value returned by a CAS or FAA in a completed post.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AtomicId(u32);

/// A reusable post: the ops of one doorbell batch per memory node, plus their buffers.
///
/// A transport that keeps posts in flight may swap a whole `Post` with one of its own
/// (`std::mem::swap`) at submit and back at completion, instead of copying its buffers:
/// between [`Transport::submit`](crate::Transport::submit) and the poll that completes it,
/// a post's contents belong to the transport.
#[derive(Default, Debug)]
pub struct Post {
    ops: Vec<Op>,
    write_data: Vec<u8>,
    /// Read destinations; `u64` so every READ lands 8-byte aligned for zero-copy casts.
    read_buf: Vec<u64>,
    read_words: usize,
    /// Old values of atomics, indexed like `ops`.
    old: Vec<u64>,
}

impl Clone for Post {
    fn clone(&self) -> Self {
        let mut p = Post::new();
        p.clone_from(self);
        p
    }

    /// Reuses this post's buffers (a transport copying posts it keeps must not allocate
    /// per post). Results are copied too, so a clone is the post as it stands.
    fn clone_from(&mut self, src: &Self) {
        self.ops.clone_from(&src.ops);
        self.write_data.clone_from(&src.write_data);
        self.read_words = src.read_words;
        self.read_buf.clear();
        self.read_buf.extend_from_slice(&src.read_buf[..src.read_words]);
        self.old.clone_from(&src.old);
    }
}

impl Post {
    /// An empty post.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget all ops, keeping the buffers for reuse.
    #[inline]
    pub fn clear(&mut self) {
        self.ops.clear();
        self.write_data.clear();
        self.read_words = 0;
        self.old.clear();
    }

    /// True when no op has been added.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The ops, in the order added.
    #[inline]
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Add a READ of `len` bytes at `ptr`.
    #[inline]
    pub fn read(&mut self, ptr: RemotePtr, len: usize) -> ReadId {
        let words = len.div_ceil(8);
        let dst = self.read_words * 8;
        self.read_words += words;
        if self.read_buf.len() < self.read_words {
            self.read_buf.resize(self.read_words, 0);
        }
        let len = u32::try_from(len).expect("READ longer than 4 GiB");
        self.push(Op::Read {
            ptr,
            len,
            dst: dst as u32,
        });
        ReadId(self.ops.len() as u32 - 1)
    }

    /// Add a WRITE of `bytes` to `ptr`.
    #[inline]
    pub fn write(&mut self, ptr: RemotePtr, bytes: &[u8]) {
        let src = self.write_data.len();
        self.write_data.extend_from_slice(bytes);
        self.push(Op::Write {
            ptr,
            src: src as u32,
            len: bytes.len() as u32,
        });
    }

    /// Add a WRITE of `len` bytes to `ptr`, letting `fill` encode them in place (no copy
    /// through a temporary).
    pub fn write_with(&mut self, ptr: RemotePtr, len: usize, fill: impl FnOnce(&mut [u8])) {
        let src = self.write_data.len();
        self.write_data.resize(src + len, 0);
        fill(&mut self.write_data[src..]);
        self.push(Op::Write {
            ptr,
            src: src as u32,
            len: len as u32,
        });
    }

    /// Add a CAS on the word at `ptr`.
    pub fn cas(&mut self, ptr: RemotePtr, expect: u64, swap: u64) -> AtomicId {
        self.push(Op::Cas { ptr, expect, swap });
        AtomicId(self.ops.len() as u32 - 1)
    }

    /// Add an FAA on the word at `ptr`.
    pub fn faa(&mut self, ptr: RemotePtr, add: u64) -> AtomicId {
        self.push(Op::Faa { ptr, add });
        AtomicId(self.ops.len() as u32 - 1)
    }

    /// Add a FLUSH of everything written before it to `ptr.mn` on this connection.
    pub fn flush(&mut self, ptr: RemotePtr) {
        self.push(Op::Flush { ptr });
    }

    #[inline]
    fn push(&mut self, op: Op) {
        self.ops.push(op);
        self.old.push(0);
    }

    /// The bytes a completed READ returned.
    #[inline]
    pub fn bytes(&self, id: ReadId) -> &[u8] {
        match self.ops[id.0 as usize] {
            Op::Read { dst, len, .. } => {
                let all: &[u8] = bytemuck::cast_slice(&self.read_buf[..self.read_words]);
                &all[dst as usize..dst as usize + len as usize]
            }
            op => panic!("ReadId names a {:?}", op.kind()),
        }
    }

    /// The old word a completed CAS or FAA returned.
    #[inline]
    pub fn old(&self, id: AtomicId) -> u64 {
        self.old[id.0 as usize]
    }

    /// For transports: the bytes a WRITE op carries.
    #[inline]
    pub fn write_data(&self, op: &Op) -> &[u8] {
        match *op {
            Op::Write { src, len, .. } => &self.write_data[src as usize..(src + len) as usize],
            _ => &[],
        }
    }

    /// For transports: the destination of READ op number `index`.
    #[inline]
    pub fn read_dst(&mut self, index: usize) -> &mut [u8] {
        match self.ops[index] {
            Op::Read { dst, len, .. } => {
                let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.read_buf[..self.read_words]);
                &mut all[dst as usize..dst as usize + len as usize]
            }
            op => panic!("op {index} is a {:?}, not a READ", op.kind()),
        }
    }

    /// For transports: record the old word of atomic op number `index`.
    #[inline]
    pub fn set_old(&mut self, index: usize, old: u64) {
        self.old[index] = old;
    }

    /// For transports: where the post's buffers start (ops, write data, READ results), to
    /// prefetch a post that will be executed soon. Addresses only.
    #[inline]
    pub fn buffer_addrs(&self) -> [*const u8; 3] {
        [
            self.ops.as_ptr().cast(),
            self.write_data.as_ptr(),
            self.read_buf.as_ptr().cast(),
        ]
    }

    /// For transports: split borrows of the ops, the write data, and the result areas.
    #[inline]
    pub fn parts_mut(&mut self) -> PostParts<'_> {
        PostParts {
            ops: &self.ops,
            write_data: &self.write_data,
            read_buf: bytemuck::cast_slice_mut(&mut self.read_buf[..self.read_words]),
            old: &mut self.old,
        }
    }
}

/// Disjoint borrows of a post, for transports executing it.
pub struct PostParts<'a> {
    /// The ops in order.
    pub ops: &'a [Op],
    /// Bytes WRITE ops point into.
    pub write_data: &'a [u8],
    /// Bytes READ ops land in.
    pub read_buf: &'a mut [u8],
    /// Old values of atomics, indexed like `ops`.
    pub old: &'a mut [u64],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MnId;

    #[test]
    fn reads_land_aligned_and_results_map_back() {
        let mut p = Post::new();
        let a = p.read(RemotePtr::new(MnId(0), 0), 3);
        let b = p.read(RemotePtr::new(MnId(1), 8), 16);
        let c = p.cas(RemotePtr::new(MnId(0), 8), 1, 2);
        p.write(RemotePtr::new(MnId(0), 16), &[7; 5]);
        p.read_dst(1).copy_from_slice(&[9; 16]);
        p.set_old(2, 42);
        assert_eq!(p.bytes(a).len(), 3);
        assert_eq!(p.bytes(b), &[9; 16]);
        assert_eq!(p.bytes(b).as_ptr() as usize % 8, 0);
        assert_eq!(p.old(c), 42);
        assert_eq!(p.write_data(&p.ops()[3]), &[7; 5]);
        p.clear();
        assert!(p.is_empty());
    }

    /// Goal: a clone (what a transport keeps of a detached post) has the same ops, write
    /// data and results, whatever the target's buffers held before.
    #[test]
    fn clone_from_copies_the_post_as_it_stands() {
        let mut src = Post::new();
        let r = src.read(RemotePtr::new(MnId(1), 64), 16);
        let a = src.cas(RemotePtr::new(MnId(0), 8), 1, 2);
        src.write(RemotePtr::new(MnId(0), 16), &[9; 12]);
        src.read_dst(0).copy_from_slice(&[5; 16]);
        src.set_old(1, 77);
        let mut dst = Post::new();
        dst.read(RemotePtr::new(MnId(0), 0), 64);
        dst.write(RemotePtr::new(MnId(0), 0), &[1; 100]);
        dst.read_dst(0).copy_from_slice(&[3; 64]);
        dst.clone_from(&src);
        assert_eq!(dst.ops(), src.ops());
        assert_eq!(dst.write_data(&dst.ops()[2]), &[9; 12]);
        assert_eq!(dst.bytes(r), &[5; 16]);
        assert_eq!(dst.old(a), 77);
        let c = src.clone();
        assert_eq!((c.ops(), c.bytes(r), c.old(a)), (src.ops(), &[5u8; 16][..], 77));
    }
}
