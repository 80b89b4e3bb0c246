//! [`TcpFabric`] and the per-worker [`TcpTransport`].

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use dmtx_memnode::server::wire::{self, Kind, OpResult, WireOp};
use dmtx_verbs::{Fabric, MnId, Op, Post, PostParts, Result, Submitted, Ticket, Transport, VerbError};

use crate::conn;
use crate::reopen::{Reopen, Step};
use crate::{NetError, TcpConfig};

/// Most posts in flight on one connection; a submit beyond it first waits for replies.
pub const INFLIGHT_MAX: usize = 1024;
/// A connection that failed to reopen is not tried again for this long.
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(500);
/// Longest a `progress` call sleeps in `poll(2)` when nothing has arrived.
const PROGRESS_WAIT_MAX: Duration = Duration::from_millis(1);
/// Initial receive buffer per connection (grows to the largest reply seen).
const RECV_BYTES_INITIAL: usize = 64 << 10;

/// Memory nodes reached over TCP; hands each worker thread its own connections.
#[derive(Clone, Debug)]
pub struct TcpFabric {
    /// Node `i`'s address is `addrs[i]`.
    addrs: Vec<SocketAddr>,
    region_bytes: Vec<u64>,
    config: TcpConfig,
}

/// Sort `(node, address)` pairs by node and check they are exactly `mn0..mnN`.
pub(crate) fn dense_addrs(mut nodes: Vec<(MnId, SocketAddr)>) -> crate::Result<Vec<SocketAddr>> {
    if nodes.is_empty() {
        return Err(NetError::Config(
            "no memory nodes given; list at least one address".into(),
        ));
    }
    nodes.sort_by_key(|(mn, _)| *mn);
    for (i, (mn, _)) in nodes.iter().enumerate() {
        if mn.index() != i {
            return Err(NetError::Config(format!(
                "memory nodes must be numbered mn0..mn{} without gaps or repeats; found {mn} at position {i}",
                nodes.len() - 1
            )));
        }
    }
    Ok(nodes.into_iter().map(|(_, a)| a).collect())
}

impl TcpFabric {
    /// Check every node once (connect and handshake), so a wrong address, token or
    /// cluster id fails here with a clear error rather than in the first worker.
    pub fn connect(nodes: Vec<(MnId, SocketAddr)>, config: TcpConfig) -> crate::Result<Self> {
        let addrs = dense_addrs(nodes)?;
        let mut region_bytes = Vec::with_capacity(addrs.len());
        for (i, addr) in addrs.iter().enumerate() {
            let h = conn::open(MnId(i as u16), *addr, &config, config.connect_timeout)?;
            region_bytes.push(h.region_bytes);
        }
        Ok(Self {
            addrs,
            region_bytes,
            config,
        })
    }

    /// The region size each node announced.
    pub fn region_bytes(&self, mn: MnId) -> u64 {
        self.region_bytes[mn.index()]
    }

    /// Open a worker's connections (what [`Fabric::endpoint`] does), with the full error.
    pub fn transport(&self) -> crate::Result<TcpTransport> {
        let mut conns = Vec::with_capacity(self.addrs.len());
        for (i, addr) in self.addrs.iter().enumerate() {
            let mn = MnId(i as u16);
            let h = conn::open(mn, *addr, &self.config, self.config.connect_timeout)?;
            h.stream
                .set_nonblocking(true)
                .map_err(|e| NetError::Lost { mn, why: e.to_string() })?;
            conns.push(Conn {
                mn,
                stream: h.stream,
                rkey: h.rkey,
                out: Vec::new(),
                sent: 0,
                inb: vec![0; RECV_BYTES_INITIAL],
                start: 0,
                end: 0,
                pending: VecDeque::new(),
                dead: None,
                last_heard: Instant::now(),
                ping_out: false,
                retry_at: None,
                reopen: None,
            });
        }
        let n = conns.len();
        Ok(TcpTransport {
            inner: RefCell::new(Inner {
                conns,
                slots: Vec::new(),
                free: Vec::new(),
                next_req: 1,
                op_deadline: self.config.op_deadline,
                keepalive: self.config.keepalive,
                open: vec![None; n],
                pollfds: Vec::with_capacity(n),
                addrs: self.addrs.clone(),
                config: self.config.clone(),
                restarts: 0,
                attached_live: 0,
                polls_since_io: 0,
                replied_since_progress: false,
            }),
        })
    }
}

impl Fabric for TcpFabric {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn mn_count(&self) -> usize {
        self.addrs.len()
    }
    fn endpoint(&self, _worker: u32) -> Result<Box<dyn Transport>> {
        match self.transport() {
            Ok(t) => Ok(Box::new(t)),
            Err(e) => {
                let mn = match &e {
                    NetError::Connect { mn, .. }
                    | NetError::Lost { mn, .. }
                    | NetError::Refused { mn, .. }
                    | NetError::Protocol { mn, .. }
                    | NetError::WrongNode { mn, .. } => *mn,
                    _ => MnId(0),
                };
                Err(e.to_verb_error(mn))
            }
        }
    }
}

/// One worker thread's queue pairs: one TCP connection per memory node.
///
/// Posts are pipelined: `submit` appends one VERBS frame per node to that connection's
/// send buffer and writes what the socket takes without blocking; `poll` and `progress`
/// read replies without blocking (`progress` sleeps in `poll(2)` for at most 1 ms when
/// nothing arrived and posts are in flight), match them by request id, and keep them in
/// the post's slot until the post is polled. A connection that breaks, sends garbage or
/// misses the op deadline fails every post in flight on it with
/// [`VerbError::Unreachable`] and stays failed (no reconnect yet).
#[derive(Debug)]
pub struct TcpTransport {
    inner: RefCell<Inner>,
}

#[derive(Debug)]
struct Inner {
    conns: Vec<Conn>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    next_req: u64,
    op_deadline: Duration,
    /// Send a PING on a connection with posts in flight silent for this long.
    keepalive: Option<Duration>,
    /// Per node, the VERBS frame being built by the current submit.
    open: Vec<Option<OpenFrame>>,
    pollfds: Vec<libc::pollfd>,
    /// Where each node listens and how to shake hands: for reconnecting.
    addrs: Vec<SocketAddr>,
    config: TcpConfig,
    /// Reconnects that found a node restarted (a new rkey).
    restarts: u64,
    /// Posts in flight that a coordinator polls (not detached).
    attached_live: usize,
    /// Polls of waiting posts since the sockets were last read. `poll` reads only once
    /// every waiting post had its look, i.e. once per executor pass, not once per
    /// coordinator: with 16 coordinators waiting, one `read` per socket per pass
    /// instead of 16 that mostly return `EAGAIN`.
    polls_since_io: usize,
    /// A reply arrived since the executor last called `progress`: some coordinator can
    /// run, so `progress` must not sleep.
    replied_since_progress: bool,
}

#[derive(Copy, Clone, Debug)]
struct OpenFrame {
    frame: usize,
    count_at: usize,
    count: u32,
    /// Bytes the reply will carry.
    reply_bytes: usize,
}

#[derive(Debug)]
struct Conn {
    mn: MnId,
    stream: TcpStream,
    rkey: u64,
    /// Frames not yet taken by the socket, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    inb: Vec<u8>,
    start: usize,
    end: usize,
    /// Requests sent and not yet answered, in send order (the server answers in order).
    pending: VecDeque<Pending>,
    /// Why the connection is unusable.
    dead: Option<String>,
    /// When bytes last arrived (or the first request of a busy spell was queued).
    last_heard: Instant,
    /// A PING was sent and its PONG has not come back yet.
    ping_out: bool,
    /// A dead connection is not reopened before this (after a failed attempt).
    retry_at: Option<Instant>,
    /// The reconnect under way, if any.
    reopen: Option<Reopen>,
}

#[derive(Copy, Clone, Debug)]
struct Pending {
    req: u64,
    slot: u32,
    gen: u32,
}

#[derive(Debug)]
enum MnState {
    /// The post has no op for this node.
    Idle,
    /// Sent, no reply yet.
    Waiting,
    /// The reply payload is in `Slot::replies`.
    Replied,
    /// The connection failed.
    Failed(VerbError),
}

/// An in-flight post. Invariant: `waiting` counts the nodes in state `Waiting`.
#[derive(Debug)]
struct Slot {
    gen: u32,
    live: bool,
    detached: bool,
    waiting: u32,
    /// A coordinator has polled it before (its first poll, right after submit, never
    /// reads: the reply cannot be there yet).
    polled: bool,
    deadline: Instant,
    state: Vec<MnState>,
    replies: Vec<Vec<u8>>,
}

impl Conn {
    /// Write what the socket takes; Err(why) when the connection broke.
    fn flush(&mut self) -> std::result::Result<(), String> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err("the connection was closed while sending".into()),
                Ok(k) => self.sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("send failed: {e}")),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(())
    }

    /// Compact the receive buffer and make room for the frame being received (its length
    /// was checked against the maximum when its header was decoded).
    fn make_room(&mut self) {
        wire::make_room(&mut self.inb, &mut self.start, &mut self.end);
    }
}

impl Inner {
    fn alloc_slot(&mut self, detached: bool) -> (u32, u32) {
        let n = self.conns.len();
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    live: false,
                    detached: false,
                    waiting: 0,
                    polled: false,
                    deadline: Instant::now(),
                    state: (0..n).map(|_| MnState::Idle).collect(),
                    replies: (0..n).map(|_| Vec::new()).collect(),
                });
                (self.slots.len() - 1) as u32
            }
        };
        if !detached {
            self.attached_live += 1;
        }
        let s = &mut self.slots[idx as usize];
        debug_assert!(!s.live, "a free slot is not live");
        s.live = true;
        s.detached = detached;
        s.waiting = 0;
        s.polled = false;
        s.deadline = Instant::now() + self.op_deadline;
        for st in &mut s.state {
            *st = MnState::Idle;
        }
        (idx, s.gen)
    }

    /// Work on reopening dead connection `m` (like resetting an RDMA queue pair) without
    /// blocking: start a nonblocking connect (at most once per [`RECONNECT_BACKOFF`]
    /// after a failed one), or advance the one under way. Posts that were in flight on
    /// the old connection already failed; a node that answers with a new rkey restarted,
    /// which [`Transport::restarts`] reports.
    fn revive(&mut self, m: usize) {
        let c = &mut self.conns[m];
        if c.dead.is_none() {
            return;
        }
        let Some(mut r) = c.reopen.take() else {
            if c.retry_at.is_some_and(|t| Instant::now() < t) {
                return;
            }
            match Reopen::start(self.addrs[m], conn::hello_frame(&self.config), self.config.op_deadline) {
                Ok(r) => c.reopen = Some(r),
                Err(e) => {
                    c.dead = Some(format!("reconnecting to {}: {e}", c.mn));
                    c.retry_at = Some(Instant::now() + RECONNECT_BACKOFF);
                }
            }
            return;
        };
        let (mn, addr) = (c.mn, self.addrs[m]);
        let judge = |kind: Kind, payload: &[u8]| {
            conn::accept(mn, addr, kind, payload)
                .map(|(rkey, _)| rkey)
                .map_err(|e| e.to_string())
        };
        match r.step(self.config.connect_timeout, &judge) {
            Step::Pending => c.reopen = Some(r),
            Step::Failed(why) => {
                c.dead = Some(format!("reconnecting to {mn}: {why}"));
                c.retry_at = Some(Instant::now() + RECONNECT_BACKOFF);
            }
            Step::Done(rkey) => {
                if rkey != c.rkey {
                    self.restarts += 1;
                }
                c.stream = r.into_stream();
                c.rkey = rkey;
                c.out.clear();
                c.sent = 0;
                c.start = 0;
                c.end = 0;
                c.dead = None;
                c.ping_out = false;
                c.retry_at = None;
                c.last_heard = Instant::now();
            }
        }
    }

    fn free_slot(slots: &mut [Slot], free: &mut Vec<u32>, idx: u32) {
        let s = &mut slots[idx as usize];
        debug_assert!(s.live);
        s.live = false;
        s.gen = s.gen.wrapping_add(1);
        free.push(idx);
    }

    /// Mark connection `m` failed and fail every post in flight on it.
    fn kill(&mut self, m: usize, why: String) {
        let conn = &mut self.conns[m];
        if conn.dead.is_some() {
            return;
        }
        let _ = conn.stream.shutdown(Shutdown::Both);
        conn.out.clear();
        conn.sent = 0;
        let mn = conn.mn;
        while let Some(p) = conn.pending.pop_front() {
            let s = &mut self.slots[p.slot as usize];
            if s.live && s.gen == p.gen && matches!(s.state[m], MnState::Waiting) {
                s.state[m] = MnState::Failed(VerbError::Unreachable { mn, why: why.clone() });
                s.waiting -= 1;
                if s.detached && s.waiting == 0 {
                    Self::free_slot(&mut self.slots, &mut self.free, p.slot);
                }
            }
        }
        conn.dead = Some(why);
    }

    /// Send and receive whatever the sockets allow without blocking; true if a reply came.
    fn io(&mut self) -> bool {
        self.polls_since_io = 0;
        let mut got = false;
        for m in 0..self.conns.len() {
            if self.conns[m].dead.is_some() {
                if self.conns[m].reopen.is_some() {
                    self.revive(m);
                }
                continue;
            }
            if let Err(why) = self.conns[m].flush() {
                self.kill(m, why);
                continue;
            }
            if self.conns[m].pending.is_empty() {
                continue;
            }
            loop {
                let c = &mut self.conns[m];
                c.make_room();
                match c.stream.read(&mut c.inb[c.end..]) {
                    Ok(0) => {
                        self.kill(m, "the memory node closed the connection".into());
                        break;
                    }
                    Ok(k) => {
                        c.end += k;
                        c.last_heard = Instant::now();
                        // A read that did not fill the buffer emptied the socket: asking
                        // again would only cost a syscall that returns EAGAIN.
                        let drained = c.end < c.inb.len();
                        match self.take_frames(m) {
                            Ok(n) => got |= n > 0,
                            Err(why) => {
                                self.kill(m, why);
                                break;
                            }
                        }
                        if drained {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.kill(m, format!("receive failed: {e}"));
                        break;
                    }
                }
            }
            self.keepalive(m);
        }
        self.replied_since_progress |= got;
        got
    }

    /// Send a PING on connection `m` if it has posts in flight, no PING outstanding and
    /// has heard nothing for the keepalive interval.
    fn keepalive(&mut self, m: usize) {
        let Some(every) = self.keepalive else { return };
        let c = &mut self.conns[m];
        if c.dead.is_some() || c.pending.is_empty() || c.ping_out || c.last_heard.elapsed() < every {
            return;
        }
        wire::put_frame(&mut c.out, Kind::Ping, 0, &[]);
        c.ping_out = true;
        if let Err(why) = c.flush() {
            self.kill(m, why);
        }
    }

    /// Dispatch every complete frame buffered on connection `m`; returns how many.
    fn take_frames(&mut self, m: usize) -> std::result::Result<usize, String> {
        let Inner { conns, slots, free, .. } = self;
        let c = &mut conns[m];
        let mut n = 0;
        loop {
            let (h, used) = match wire::split_frame(&c.inb[c.start..c.end]) {
                Ok(Some((h, _, used))) => (h, used),
                Ok(None) => return Ok(n),
                Err(e) => return Err(format!("malformed frame from the memory node: {e}")),
            };
            let payload = &c.inb[c.start + wire::HEADER_BYTES..c.start + used];
            match h.kind {
                Kind::VerbsResult => {
                    let Some(p) = c.pending.pop_front() else {
                        return Err(format!("reply {} to no request", h.request_id));
                    };
                    if p.req != h.request_id {
                        return Err(format!(
                            "reply {} out of order (expected {}); the memory node broke the protocol",
                            h.request_id, p.req
                        ));
                    }
                    let s = &mut slots[p.slot as usize];
                    if s.live && s.gen == p.gen && matches!(s.state[m], MnState::Waiting) {
                        s.replies[m].clear();
                        s.replies[m].extend_from_slice(payload);
                        s.state[m] = MnState::Replied;
                        s.waiting -= 1;
                        if s.detached && s.waiting == 0 {
                            Self::free_slot(slots, free, p.slot);
                        }
                    }
                }
                Kind::Error => {
                    let why = match wire::ErrorFrame::decode(payload) {
                        Ok(e) => format!("the memory node closed the connection: {}", e.message),
                        Err(e) => format!("malformed ERROR frame: {e}"),
                    };
                    return Err(why);
                }
                Kind::Pong => c.ping_out = false,
                k => return Err(format!("unexpected {k:?} frame from the memory node")),
            }
            c.start += used;
            n += 1;
        }
    }

    /// Fail the connections of every post past its deadline.
    fn enforce_deadlines(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.live && s.waiting > 0 && now >= s.deadline {
                self.expire(i);
            }
        }
    }

    /// Slot `i` missed its deadline: its waiting connections are failed (queue pair in the
    /// error state), which fails every other post in flight on them too.
    fn expire(&mut self, i: usize) {
        let why = format!(
            "no reply within the op deadline of {:?}; the memory node is stalled, overloaded or gone (raise `op_deadline` if it is just slow)",
            self.op_deadline
        );
        for m in 0..self.conns.len() {
            if matches!(self.slots[i].state[m], MnState::Waiting) {
                self.kill(m, why.clone());
            }
        }
    }

    fn in_flight(&self) -> bool {
        self.conns.iter().any(|c| c.dead.is_none() && !c.pending.is_empty())
    }

    /// Sleep in `poll(2)` until a connection with requests in flight is readable (or can
    /// take more of its send buffer), at most `max`.
    fn wait(&mut self, max: Duration) {
        self.pollfds.clear();
        for c in &self.conns {
            if c.dead.is_some() {
                continue;
            }
            let mut events = 0;
            if !c.pending.is_empty() {
                events |= libc::POLLIN;
            }
            if c.sent < c.out.len() {
                events |= libc::POLLOUT;
            }
            if events != 0 {
                self.pollfds.push(libc::pollfd {
                    fd: c.stream.as_raw_fd(),
                    events,
                    revents: 0,
                });
            }
        }
        if self.pollfds.is_empty() {
            return;
        }
        let ms = max.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `pollfds` is a valid array of `len` pollfd structs owned by us.
        unsafe { libc::poll(self.pollfds.as_mut_ptr(), self.pollfds.len() as libc::nfds_t, ms) };
    }

    fn submit(&mut self, post: &Post, detached: bool) -> Submitted {
        let n = self.conns.len();
        if post.is_empty() {
            return Submitted::Done(Ok(()));
        }
        for op in post.ops() {
            let mn = op.ptr().mn;
            if mn.index() >= n {
                return Submitted::Done(Err(VerbError::UnknownNode { mn, mn_count: n }));
            }
            self.revive(mn.index());
            let c = &self.conns[mn.index()];
            if let Some(why) = &c.dead {
                return Submitted::Done(Err(VerbError::Unreachable { mn, why: why.clone() }));
            }
        }
        // Bound the pipeline: wait for replies (within the deadline) before going deeper.
        for op in post.ops() {
            let m = op.ptr().mn.index();
            while self.conns[m].dead.is_none() && self.conns[m].pending.len() >= INFLIGHT_MAX {
                if !self.io() {
                    self.enforce_deadlines();
                    self.wait(PROGRESS_WAIT_MAX);
                }
            }
            if let Some(why) = &self.conns[m].dead {
                let mn = self.conns[m].mn;
                return Submitted::Done(Err(VerbError::Unreachable { mn, why: why.clone() }));
            }
        }
        let (slot, gen) = self.alloc_slot(detached);
        let req = self.next_req;
        self.next_req += 1;
        let Inner { conns, open, .. } = self;
        for op in post.ops() {
            let m = op.ptr().mn.index();
            let c = &mut conns[m];
            let f = open[m].get_or_insert_with(|| {
                let frame = wire::begin_frame(&mut c.out, Kind::Verbs, req);
                OpenFrame {
                    frame,
                    count_at: wire::begin_verbs(&mut c.out),
                    count: 0,
                    reply_bytes: 4,
                }
            });
            let (rkey, offset) = (c.rkey, op.ptr().offset);
            let w = match *op {
                Op::Read { len, .. } => WireOp::Read { rkey, offset, len },
                Op::Write { .. } => WireOp::Write {
                    rkey,
                    offset,
                    data: post.write_data(op),
                },
                Op::Cas { expect, swap, .. } => WireOp::Cas {
                    rkey,
                    offset,
                    expect,
                    swap,
                },
                Op::Faa { add, .. } => WireOp::Faa { rkey, offset, add },
                Op::Flush { .. } => WireOp::Flush { rkey, offset },
            };
            w.encode(&mut c.out);
            f.count += 1;
            f.reply_bytes += wire::RESULT_OVERHEAD_BYTES + op.bytes_in() as usize;
        }
        for m in 0..n {
            let Some(f) = open[m].take() else { continue };
            let c = &mut conns[m];
            assert!(
                f.reply_bytes <= wire::FRAME_PAYLOAD_MAX as usize,
                "the batch to {} reads {} bytes, more than one frame ({} bytes) carries; split the post",
                c.mn,
                f.reply_bytes,
                wire::FRAME_PAYLOAD_MAX
            );
            wire::set_count(&mut c.out, f.count_at, f.count);
            wire::end_frame(&mut c.out, f.frame);
            if c.pending.is_empty() {
                c.last_heard = Instant::now();
            }
            c.pending.push_back(Pending { req, slot, gen });
            let s = &mut self.slots[slot as usize];
            s.state[m] = MnState::Waiting;
            s.waiting += 1;
        }
        for m in 0..n {
            if matches!(self.slots[slot as usize].state[m], MnState::Waiting) {
                if let Err(why) = self.conns[m].flush() {
                    self.kill(m, why);
                }
            }
        }
        Submitted::Pending(Ticket((u64::from(gen) << 32) | u64::from(slot)))
    }

    /// Move a complete slot's replies into `post`; the first failing op (in post order)
    /// names the error.
    fn complete(&mut self, idx: usize, post: &mut Post) -> Result<()> {
        let mut first: Option<(usize, VerbError)> = None;
        let mut note = |i: usize, e: VerbError| {
            if first.as_ref().is_none_or(|(j, _)| i < *j) {
                first = Some((i, e));
            }
        };
        let mut broken = Vec::new();
        let mut parts = post.parts_mut();
        for m in 0..self.conns.len() {
            let mn = self.conns[m].mn;
            match &self.slots[idx].state[m] {
                MnState::Idle => {}
                MnState::Waiting => unreachable!("complete() on a slot still waiting"),
                MnState::Failed(e) => {
                    let i = parts.ops.iter().position(|op| op.ptr().mn == mn).unwrap_or(0);
                    note(i, e.clone());
                }
                MnState::Replied => {
                    if let Err((i, e, fatal)) = apply_reply(mn, &self.slots[idx].replies[m], &mut parts) {
                        if fatal {
                            broken.push((m, e.to_string()));
                        }
                        note(i, e);
                    }
                }
            }
        }
        Self::free_slot(&mut self.slots, &mut self.free, idx as u32);
        for (m, why) in broken {
            self.kill(m, why);
        }
        match first {
            None => Ok(()),
            Some((_, e)) => Err(e),
        }
    }
}

/// Copy one node's VERBS_RESULT into the post. Err carries the op index, the error, and
/// whether the reply itself was malformed (the connection must be dropped).
fn apply_reply(
    mn: MnId,
    payload: &[u8],
    parts: &mut PostParts<'_>,
) -> std::result::Result<(), (usize, VerbError, bool)> {
    let fatal = |i: usize, why: String| {
        Err((
            i,
            VerbError::Unreachable {
                mn,
                why: format!("malformed reply: {why}"),
            },
            true,
        ))
    };
    let mut rr = match wire::ResultsReader::new(payload) {
        Ok(r) => r,
        Err(e) => return fatal(0, e.to_string()),
    };
    let mut err: Option<(usize, VerbError)> = None;
    for (i, op) in parts.ops.iter().enumerate() {
        let ptr = op.ptr();
        if ptr.mn != mn {
            continue;
        }
        let r = match rr.next_result() {
            Ok(Some(r)) => r,
            Ok(None) => return fatal(i, "fewer results than ops".into()),
            Err(e) => return fatal(i, e.to_string()),
        };
        let kind = op.kind();
        let e = match (*op, r) {
            (Op::Read { len, dst, .. }, OpResult::Data(d)) if d.len() == len as usize => {
                parts.read_buf[dst as usize..dst as usize + d.len()].copy_from_slice(d);
                None
            }
            (Op::Cas { .. } | Op::Faa { .. }, OpResult::Old(v)) => {
                parts.old[i] = v;
                None
            }
            (Op::Write { .. } | Op::Flush { .. }, OpResult::Done) => None,
            (_, OpResult::OutOfRange { region_bytes }) => {
                let len = match *op {
                    Op::Read { len, .. } | Op::Write { len, .. } => u64::from(len),
                    Op::Cas { .. } | Op::Faa { .. } => 8,
                    Op::Flush { .. } => 1,
                };
                Some(VerbError::OutOfRange {
                    kind,
                    ptr,
                    len,
                    region_bytes,
                })
            }
            (Op::Cas { .. } | Op::Faa { .. }, OpResult::Misaligned) => Some(VerbError::Misaligned { kind, ptr }),
            (_, OpResult::BadRkey) => Some(VerbError::Unreachable {
                mn,
                why: "the memory node refused this connection's rkey: it restarted since the connection was opened; reconnect".into(),
            }),
            (_, OpResult::TooLarge) => Some(VerbError::Unreachable {
                mn,
                why: format!(
                    "the reply to this batch exceeds {} bytes; split the post",
                    wire::FRAME_PAYLOAD_MAX
                ),
            }),
            (_, OpResult::Skipped) if err.is_some() => None,
            (op, r) => return fatal(i, format!("{r:?} does not answer {:?}", op.kind())),
        };
        if let (Some(e), None) = (e, &err) {
            err = Some((i, e));
        }
    }
    match rr.next_result() {
        Ok(None) => {}
        _ => return fatal(0, "more results than ops".into()),
    }
    match err {
        None => Ok(()),
        Some((i, e)) => Err((i, e, false)),
    }
}

impl TcpTransport {
    /// Posts in flight (not yet completed or dropped), detached ones included.
    pub fn in_flight(&self) -> usize {
        self.inner.borrow().slots.iter().filter(|s| s.live).count()
    }
}

impl Drop for TcpTransport {
    /// Deliver what was posted before closing: detached posts (background lock releases)
    /// still in flight are sent and their replies awaited, for at most the op deadline.
    fn drop(&mut self) {
        let g = self.inner.get_mut();
        while g.in_flight() || g.conns.iter().any(|c| c.dead.is_none() && c.sent < c.out.len()) {
            if !g.io() {
                g.enforce_deadlines();
                g.wait(PROGRESS_WAIT_MAX);
            }
        }
    }
}

impl Transport for TcpTransport {
    fn mn_count(&self) -> usize {
        self.inner.borrow().conns.len()
    }

    fn submit(&self, post: &mut Post) -> Submitted {
        self.inner.borrow_mut().submit(post, false)
    }

    fn poll(&self, ticket: Ticket, post: &mut Post, _cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut g = self.inner.borrow_mut();
        let idx = (ticket.0 & 0xffff_ffff) as usize;
        let gen = (ticket.0 >> 32) as u32;
        {
            let s = g.slots.get(idx);
            assert!(
                s.is_some_and(|s| s.live && s.gen == gen && !s.detached),
                "{ticket:?} is not a post in flight on this transport"
            );
        }
        if g.slots[idx].waiting > 0 {
            if !g.slots[idx].polled {
                g.slots[idx].polled = true;
            } else {
                g.polls_since_io += 1;
                if g.polls_since_io >= g.attached_live {
                    g.io();
                }
            }
        }
        if g.slots[idx].waiting > 0 {
            if Instant::now() < g.slots[idx].deadline {
                return Poll::Pending;
            }
            g.expire(idx);
        }
        g.attached_live -= 1;
        Poll::Ready(g.complete(idx, post))
    }

    fn submit_detached(&self, post: &mut Post) {
        let mut g = self.inner.borrow_mut();
        if let Submitted::Pending(t) = g.submit(post, true) {
            let idx = (t.0 & 0xffff_ffff) as u32;
            let s = &g.slots[idx as usize];
            if s.live && s.waiting == 0 {
                let Inner { slots, free, .. } = &mut *g;
                Inner::free_slot(slots, free, idx);
            }
        }
    }

    fn restarts(&self) -> u64 {
        self.inner.borrow().restarts
    }

    fn progress_nowait(&self) {
        let mut g = self.inner.borrow_mut();
        g.enforce_deadlines();
        g.replied_since_progress = false;
        g.io();
        g.replied_since_progress = false;
    }

    /// Sleep in `poll(2)` until a reply can be read (at most `PROGRESS_WAIT_MAX`), then
    /// read it; unless a reply already came in during this pass, so some coordinator can
    /// run now. Per lone request this makes the client's syscalls `sendto` (submit),
    /// `poll`, `recvfrom`: a read is only issued when `poll` said there is data.
    fn progress(&self) {
        let mut g = self.inner.borrow_mut();
        g.enforce_deadlines();
        if std::mem::take(&mut g.replied_since_progress) {
            return;
        }
        let unsent = g.conns.iter().any(|c| c.dead.is_none() && c.sent < c.out.len());
        if g.in_flight() || unsent {
            g.wait(PROGRESS_WAIT_MAX);
            g.io();
            g.replied_since_progress = false;
        }
    }
}
