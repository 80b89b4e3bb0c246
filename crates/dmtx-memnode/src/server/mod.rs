//! The memory-node TCP server (`dmtx memnode`): one [`MemNode`] served over wire v1.
//!
//! A compute-node worker opens one connection per memory node: that connection is its
//! queue pair. After a HELLO / HELLO_OK handshake ([`wire`]), the client sends VERBS
//! frames (doorbell batches) and CONTROL frames; the server answers each frame in order
//! with VERBS_RESULT / CONTROL_RESULT carrying the request's id.
//!
//! # Semantics (DESIGN §2)
//!
//! - Ops of one VERBS frame run in order through the same [`Region`] methods as the `mem`
//!   transport, so READs and WRITEs tear word by word exactly as there, and CAS/FAA are
//!   atomic on their word.
//! - A semantic error (out of range, misaligned atomic, unknown rkey) is a status of that
//!   op; every later op of the same frame answers `Skipped`, as the rest of a doorbell
//!   batch on an RDMA queue pair in the error state is flushed. The next frame runs
//!   normally (the `mem` transport and the conformance suite expect a connection to keep
//!   serving after a refused op).
//! - A protocol violation (a frame over [`wire::FRAME_PAYLOAD_MAX`], an unknown kind, an
//!   undecodable payload, a frame before HELLO, wrong magic, version, cluster id, token or
//!   a stale epoch) gets one ERROR frame and closes **that connection only**.
//! - FLUSH only checks its address: the region is DRAM, so there is nothing to persist,
//!   and ops of a connection already complete in order (READ-after-WRITE holds).
//! - The rkey is random per server start, so a client that kept one across a restart is
//!   refused (`BadRkey`) instead of writing into a fresh region.
//!
//! # Fencing (REVOKE)
//!
//! A compute node declared dead must not land a write afterwards (FORD §4.8; FaRM's
//! precise membership). The CONTROL op REVOKE(client id) — sent by any client, e.g. the
//! membership service through `RemoteControl::revoke` — fences that id out on this node:
//!
//! - every connection whose HELLO named the id is shut down, and the id is added to a
//!   revoked set that lives as long as the server: its next HELLO gets an ERROR
//!   `REVOKED` and is closed (a restarted node forgets the set, but also changes its
//!   rkey, so old connections' ops are refused anyway);
//! - each connection runs every VERBS / CONTROL frame under its own fence mutex after
//!   checking a `fenced` flag; REVOKE sets the flag and then takes each fenced
//!   connection's mutex once. So when REVOKE is answered, a frame of the revoked client
//!   either ran entirely before (its ops landed) or will never run any op (it gets
//!   `REVOKED` and the connection closes). The cost is one uncontended lock per frame.
//! - REVOKE waits for a frame of the revoked client that is inside an op (e.g. one stalled
//!   by the test knob) to finish; it never waits for the revoked client's network.
//!
//! Client ids are trusted like everything else after the handshake (see below): two
//! compute nodes must not share an id, and a revoked node must rejoin under a new id.
//!
//! # Threads
//!
//! One accept thread, plus one thread per connection, up to
//! [`ServerConfig::connections_max`]. Thread-per-connection is the simplest design that
//! keeps the verb contract: a READ stalled by the test knob (or a slow page fault) blocks
//! only its own queue pair. A poll-based design with N serving threads is future work.
//! Each connection reads whatever the socket has, answers every complete frame in the
//! buffer, and sends all the replies with one `write_all` (pipelining, batched replies).
//! `TCP_NODELAY` is set on every socket.
//!
//! # Threat model
//!
//! The network is trusted: nothing is encrypted or authenticated per frame, and TLS is out
//! of scope. The cluster id and token (compared in constant time) keep out strangers and
//! clients of other clusters; the epoch keeps out clients fenced out of the membership
//! view, and REVOKE fences out single clients. A client that passed the handshake can
//! read and write the whole region. What a client sends never crashes the server:
//! lengths are checked before any allocation, every decode is bounds-checked, and every
//! op is range-checked.
//!
//! # Not done yet
//!
//! Several regions per node (the wire format already carries a list), N-thread polling,
//! a way to raise the epoch of a running server, and persistence (FLUSH to PMem/SSD).

pub mod wire;

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dmtx_verbs::region::RegionError;
use dmtx_verbs::{MnId, Region};

use crate::MemNode;
use wire::{ControlReply, ControlReq, ErrorCode, Kind, OpResult, WireOp};

/// How a memory-node server is set up.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Bytes of the registered region.
    pub region_bytes: u64,
    /// This node's id in the cluster.
    pub node_id: MnId,
    /// The cluster's id; HELLO must name it.
    pub cluster_id: u64,
    /// The cluster's shared token (≤ [`wire::TOKEN_BYTES_MAX`] bytes); HELLO must carry it.
    pub token: Vec<u8>,
    /// Membership epoch; HELLO naming an older one is refused.
    pub epoch: u64,
    /// Most connections served at once (one thread each); more are refused.
    pub connections_max: usize,
    /// Time a new connection has to complete its HELLO.
    pub handshake_timeout: Duration,
    /// A connection with no frame for this long is closed; `None` keeps it forever.
    pub idle_timeout: Option<Duration>,
    /// Back the region with this file (a PM-like node): FLUSH persists, and a restart on
    /// the same file keeps the region's bytes. `None` is a DRAM node that starts empty.
    pub backing: Option<std::path::PathBuf>,
}

impl ServerConfig {
    /// Defaults for node `node_id` with a region of `region_bytes`: loopback with a free
    /// port, cluster 0, empty token, epoch 0, 256 connections, 5 s handshake, no idle limit.
    pub fn new(node_id: MnId, region_bytes: u64) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            region_bytes,
            node_id,
            cluster_id: 0,
            token: Vec::new(),
            epoch: 0,
            connections_max: 256,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: None,
            backing: None,
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}; pick another address or port (`--listen`)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The configuration is unusable.
    #[error("bad memory-node config: {0}")]
    Config(String),
    /// Another I/O failure while starting.
    #[error("memory-node server: {0}")]
    Io(#[from] io::Error),
}

/// How often blocked threads look at the shutdown flag and their timeouts.
const TICK: Duration = Duration::from_millis(20);
/// A peer that does not take our replies for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Initial receive buffer per connection (grows to the largest frame seen).
const RECV_BYTES_INITIAL: usize = 64 << 10;

/// A bound, not yet serving memory-node server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: ServerConfig,
    node: Arc<MemNode>,
    rkey: u64,
    stop: AtomicBool,
    /// Live connections and revoked client ids.
    registry: Mutex<Registry>,
    live_count: AtomicUsize,
    next_conn: AtomicU64,
}

#[derive(Debug, Default)]
struct Registry {
    live: Vec<Live>,
    /// Client ids fenced out by REVOKE; their HELLOs are refused.
    revoked: HashSet<u32>,
}

/// A live connection as the registry sees it.
#[derive(Debug)]
struct Live {
    id: u64,
    /// A clone of its socket, so shutdown and revoke can cut it at once.
    stream: TcpStream,
    /// The client id of its HELLO, once the handshake passed.
    client: Option<u32>,
    fence: Arc<Fence>,
}

/// Per-connection fence. A connection runs every VERBS / CONTROL frame holding `running`
/// and checks `fenced` first; REVOKE sets `fenced` and then takes `running` once, so when
/// it returns, no op of the revoked connection is running or can start.
#[derive(Debug, Default)]
struct Fence {
    fenced: AtomicBool,
    running: Mutex<()>,
}

impl Shared {
    fn close_all(&self) {
        for l in self.registry.lock().unwrap().live.iter() {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
    }

    /// Fence `client` out: refuse its future HELLOs, cut its connections, and wait until
    /// none of them is inside an op. `own` is the calling connection's fence (not waited
    /// for: it is the caller's own frame).
    fn revoke(&self, client: u32, own: Option<&Arc<Fence>>) {
        let fences: Vec<Arc<Fence>> = {
            let mut reg = self.registry.lock().unwrap();
            reg.revoked.insert(client);
            reg.live
                .iter()
                .filter(|l| l.client == Some(client))
                .map(|l| {
                    l.fence.fenced.store(true, Ordering::SeqCst);
                    let _ = l.stream.shutdown(Shutdown::Both);
                    Arc::clone(&l.fence)
                })
                .collect()
        };
        for f in fences {
            if own.is_some_and(|o| Arc::ptr_eq(o, &f)) {
                continue;
            }
            drop(f.running.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    fn forget(&self, id: u64) {
        self.registry.lock().unwrap().live.retain(|l| l.id != id);
        self.live_count.fetch_sub(1, Ordering::SeqCst);
    }

    fn stopped(&self, external: Option<&AtomicBool>) -> bool {
        self.stop.load(Ordering::SeqCst) || external.is_some_and(|f| f.load(Ordering::SeqCst))
    }
}

/// A fresh random rkey (never 0), different at every server start.
fn random_rkey() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS per process and differs per call; no RNG crate
    // is needed for a key that only has to differ between starts.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish() | 1
}

impl Server {
    /// Validate `config`, allocate the region and bind the listener.
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        if config.token.len() > wire::TOKEN_BYTES_MAX {
            return Err(ServerError::Config(format!(
                "token of {} bytes exceeds {} bytes; use a shorter token",
                config.token.len(),
                wire::TOKEN_BYTES_MAX
            )));
        }
        if config.connections_max == 0 {
            return Err(ServerError::Config(
                "connections_max is 0; allow at least one connection".into(),
            ));
        }
        if config.region_bytes == 0 {
            return Err(ServerError::Config(
                "region_bytes is 0; give the region some memory".into(),
            ));
        }
        let listener = TcpListener::bind(config.listen).map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
        listener.set_nonblocking(true)?;
        let node = Arc::new(match &config.backing {
            None => MemNode::new(config.node_id, config.region_bytes),
            Some(path) => {
                let region = Region::map_file(path, config.region_bytes).map_err(|e| {
                    ServerError::Config(format!(
                        "--backing {}: {e}; check the path and free space",
                        path.display()
                    ))
                })?;
                MemNode::with_region(config.node_id, region)
            }
        });
        Ok(Self {
            listener,
            shared: Arc::new(Shared {
                config,
                node,
                rkey: random_rkey(),
                stop: AtomicBool::new(false),
                registry: Mutex::new(Registry::default()),
                live_count: AtomicUsize::new(0),
                next_conn: AtomicU64::new(0),
            }),
        })
    }

    /// The address actually bound (with the port the OS picked).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The node served (region, allocator, catalog).
    pub fn node(&self) -> &Arc<MemNode> {
        &self.shared.node
    }

    /// The registered region (for tests: arming stalls, checking bytes).
    pub fn region(&self) -> &Arc<Region> {
        self.shared.node.region()
    }

    /// The region's rkey for this start.
    pub fn rkey(&self) -> u64 {
        self.shared.rkey
    }

    /// Serve on this thread until `stop` is set, then close every connection and return
    /// once their threads have ended.
    pub fn serve_until(self, stop: &AtomicBool) {
        accept_loop(self.listener, self.shared, Some(stop));
    }

    /// Serve on a background thread; the handle shuts it down.
    pub fn spawn(self) -> ServerHandle {
        let addr = self.local_addr();
        let shared = Arc::clone(&self.shared);
        let name = format!("dmtx-{}-accept", shared.config.node_id);
        let listener = self.listener;
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || accept_loop(listener, s2, None))
            .expect("spawn the accept thread");
        ServerHandle {
            addr,
            shared,
            thread: Some(thread),
        }
    }
}

/// A server running on background threads. Dropping it shuts it down and waits.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The node served.
    pub fn node(&self) -> &Arc<MemNode> {
        &self.shared.node
    }

    /// The registered region (for tests).
    pub fn region(&self) -> &Arc<Region> {
        self.shared.node.region()
    }

    /// The region's rkey for this start.
    pub fn rkey(&self) -> u64 {
        self.shared.rkey
    }

    /// Connections being served now.
    pub fn connection_count(&self) -> usize {
        self.shared.live_count.load(Ordering::SeqCst)
    }

    /// Fence compute node `client_id` out, as the REVOKE control op does: cut every
    /// connection whose HELLO named it, refuse its HELLOs from now on, and return once
    /// none of its ops is running (so none can land afterwards).
    pub fn revoke(&self, client_id: u32) {
        self.shared.revoke(client_id, None);
    }

    /// Whether `client_id` was revoked on this server.
    pub fn is_revoked(&self, client_id: u32) -> bool {
        self.shared.registry.lock().unwrap().revoked.contains(&client_id)
    }

    /// Stop accepting and cut every connection now (clients see the connection drop).
    /// Does not wait: a connection thread stalled inside an op ends when the op does.
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.close_all();
    }

    /// Shut down and wait for every server thread to end.
    pub fn join(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Wait up to `timeout` for `fd` to become readable.
fn wait_readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, count 1.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    n > 0
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, external: Option<&AtomicBool>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stopped(external) {
        if !wait_readable(listener.as_raw_fd(), TICK) {
            workers.retain(|h| !h.is_finished());
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _peer)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                // Out of descriptors or similar: back off instead of spinning.
                std::thread::sleep(TICK);
                continue;
            }
        };
        workers.retain(|h| !h.is_finished());
        let _ = stream.set_nodelay(true);
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let max = shared.config.connections_max;
        if shared.live_count.load(Ordering::SeqCst) >= max {
            refuse(
                stream,
                ErrorCode::TOO_MANY_CONNECTIONS,
                &format!(
                    "{} serves at most {max} connections; raise connections_max or use fewer workers",
                    shared.config.node_id
                ),
            );
            continue;
        }
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        let Ok(clone) = stream.try_clone() else { continue };
        let fence = Arc::new(Fence::default());
        shared.registry.lock().unwrap().live.push(Live {
            id,
            stream: clone,
            client: None,
            fence: Arc::clone(&fence),
        });
        shared.live_count.fetch_add(1, Ordering::SeqCst);
        let s2 = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("dmtx-{}-conn{id}", shared.config.node_id))
            .spawn(move || {
                Conn::new(stream, Arc::clone(&s2), ConnCtx { id, fence }).run();
                s2.forget(id);
            });
        match spawned {
            Ok(h) => workers.push(h),
            Err(_) => shared.forget(id),
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
    shared.close_all();
    for h in workers {
        let _ = h.join();
    }
}

fn refuse(mut stream: TcpStream, code: ErrorCode, message: &str) {
    let mut out = Vec::new();
    wire::put_error(&mut out, 0, code, message);
    let _ = stream.set_write_timeout(Some(TICK));
    let _ = stream.write_all(&out);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Compare secrets in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        diff |= u64::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    std::hint::black_box(diff) == 0
}

/// What to do with a connection after a frame.
enum Next {
    Continue,
    /// An ERROR frame is in `out`; send it and close.
    Close,
}

/// What a connection's frame handler needs to know about its connection.
struct ConnCtx {
    id: u64,
    fence: Arc<Fence>,
}

/// One connection: one client queue pair.
struct Conn {
    stream: TcpStream,
    shared: Arc<Shared>,
    ctx: ConnCtx,
    inb: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    ready: bool,
}

impl Conn {
    fn new(stream: TcpStream, shared: Arc<Shared>, ctx: ConnCtx) -> Self {
        Self {
            stream,
            shared,
            ctx,
            inb: vec![0; RECV_BYTES_INITIAL],
            start: 0,
            end: 0,
            out: Vec::with_capacity(RECV_BYTES_INITIAL),
            ready: false,
        }
    }

    fn run(mut self) {
        let _ = self.stream.set_read_timeout(Some(TICK));
        let opened = Instant::now();
        let mut last_frame = opened;
        loop {
            // Answer every complete frame already buffered (pipelining).
            loop {
                match wire::split_frame(&self.inb[self.start..self.end]) {
                    Ok(Some((h, _, used))) => {
                        let payload = self.start + wire::HEADER_BYTES..self.start + used;
                        let next = handle(
                            &self.shared,
                            &self.ctx,
                            &mut self.ready,
                            h,
                            &self.inb[payload],
                            &mut self.out,
                        );
                        self.start += used;
                        last_frame = Instant::now();
                        if let Next::Close = next {
                            return self.close();
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        wire::put_error(&mut self.out, 0, ErrorCode::BAD_FRAME, &e.to_string());
                        return self.close();
                    }
                }
            }
            // One write for all replies of this read.
            if !self.out.is_empty() {
                if self.stream.write_all(&self.out).is_err() {
                    return;
                }
                self.out.clear();
            }
            self.make_room();
            match self.stream.read(&mut self.inb[self.end..]) {
                Ok(0) => return,
                Ok(n) => self.end += n,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    if self.shared.stop.load(Ordering::SeqCst) {
                        wire::put_error(&mut self.out, 0, ErrorCode::SHUTDOWN, "memory node is shutting down");
                        return self.close();
                    }
                    let cfg = &self.shared.config;
                    if !self.ready && opened.elapsed() > cfg.handshake_timeout {
                        let m = format!("no HELLO within {:?}", cfg.handshake_timeout);
                        wire::put_error(&mut self.out, 0, ErrorCode::TIMEOUT, &m);
                        return self.close();
                    }
                    if let Some(idle) = cfg.idle_timeout {
                        if last_frame.elapsed() > idle {
                            let m = format!("idle for more than {idle:?}");
                            wire::put_error(&mut self.out, 0, ErrorCode::TIMEOUT, &m);
                            return self.close();
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Compact the receive buffer and grow it to hold the frame being received. The frame
    /// length was checked against the maximum by `split_frame` before this grows.
    fn make_room(&mut self) {
        wire::make_room(&mut self.inb, &mut self.start, &mut self.end);
        debug_assert!(self.end < self.inb.len(), "a complete frame would have been answered");
    }

    fn close(mut self) {
        if !self.out.is_empty() {
            let _ = self.stream.set_write_timeout(Some(TICK));
            let _ = self.stream.write_all(&self.out);
        }
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Answer one frame into `out`.
fn handle(
    shared: &Shared,
    ctx: &ConnCtx,
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
                return violation(out, ErrorCode::BAD_TOKEN, "wrong cluster token; check --token".into());
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
            let _running = ctx.fence.running.lock().unwrap_or_else(|p| p.into_inner());
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

fn serve_control(shared: &Shared, ctx: &ConnCtx, req: u64, payload: &[u8], out: &mut Vec<u8>) -> Next {
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
            shared.revoke(client_id, Some(&ctx.fence));
            ControlReply::Done
        }
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

#[cfg(test)]
mod tests;
