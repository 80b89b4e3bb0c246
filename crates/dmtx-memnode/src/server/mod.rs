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
//! - FLUSH checks its address; on a DRAM node there is nothing to persist (ops of a
//!   connection already complete in order, so READ-after-WRITE holds), on a node backed
//!   by a file ([`ServerConfig::backing`]) it syncs the mapping ([`Region::persist`])
//!   before answering.
//! - The rkey is random per server start, so a client that kept one across a restart is
//!   refused (`BadRkey`) instead of writing into a fresh region.
//!
//! # Threads and polling
//!
//! One accept thread (the caller of [`Server::serve_until`], or the thread that
//! [`Server::spawn`] starts) and [`ServerConfig::threads`] serving threads. The acceptor
//! enforces [`ServerConfig::connections_max`] (see "Strangers" below), sets `TCP_NODELAY`
//! and hands each new connection to one serving thread, which owns it until it closes:
//! the thread that is not inside an op right now and owns the fewest connections (ties
//! rotate). Each serving
//! thread polls its sockets with edge-triggered epoll (`mio`); handshake, idle and write
//! timeouts are checked every 20 ms. One poll round of a connection is:
//!
//! - **at most one `read`**, into a per-connection buffer. A short read took everything
//!   the socket had (epoll reports the next bytes), so only a read that filled the buffer
//!   is followed by another one, next round; the usual read that returns `WouldBlock` is
//!   never issued.
//! - **every complete frame answered** (pipelining), in order, into a per-connection
//!   output buffer: replies are encoded in place and READ data is copied from the region
//!   straight into it, so nothing is allocated per op once the buffers have grown.
//! - **at most one `write`** of all pending replies. They are one contiguous buffer, so
//!   one `write(2)` sends them (no `writev` needed). A partial write keeps the tail
//!   queued and registers WRITABLE interest, only while replies are pending.
//!
//! A lone request thus costs the server three syscalls: `epoll_wait`, `read`, `write`.
//!
//! **Backpressure.** Once a connection has 1 MiB of replies unsent or 1024 replies queued
//! since its queue was last empty, it answers no frame and reads nothing until the
//! client takes replies; the client's pipelined requests wait in the sockets and its sends
//! block. A connection holds at most its receive buffer (64 KiB, or the largest frame
//! received), the send budget and one reply (a READ reply is at most
//! [`wire::FRAME_PAYLOAD_MAX`]), and a client that never reads does not slow the other
//! connections of its thread.
//!
//! **What a stall blocks.** A serving thread runs one op at a time, like a processing unit
//! of an RDMA NIC: an op stalled by the test knob ([`Region::arm_stall`]), or slowed by a
//! page fault on a backed region, holds up every connection of that thread, and only
//! those. New connections avoid a thread that is inside an op, so a client that connects
//! while another's op is stalled is served (the conformance suite's tear test needs
//! exactly that). The default thread count is the machine's parallelism clamped to 2..=4:
//! at least two so that one stalled op never stops a whole node, at most four because a
//! node is bound by syscalls and, on one machine, shares the CPUs with compute nodes and
//! other memory nodes.
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
//! - each connection has a fence: a `fenced` flag and a `running` mutex. Its serving thread
//!   holds `running` while it answers the frames of one round of that connection, and
//!   checks `fenced` before each VERBS / CONTROL frame. REVOKE sets `fenced` on every
//!   connection of the id (under the registry lock, so a concurrent HELLO either is
//!   refused or is found), then takes each one's `running` once. So when REVOKE is
//!   answered, a frame of the revoked client either ran entirely before (its ops landed)
//!   or will never run any op (it gets `REVOKED` and the connection closes). The cost is
//!   one uncontended lock per connection and round.
//! - Threads do not change the argument: a thread holds a fence only while it answers
//!   frames of that very connection, and checks the flag before each one, so REVOKE waits
//!   at most for the op in progress (e.g. one stalled by the test knob), never for the
//!   revoked client's network or for other connections. A REVOKE answered on thread A
//!   never waits for itself (its own fence is skipped), and the other connections of A
//!   hold no fence while A runs the REVOKE (a thread answers one connection at a time).
//!
//! Client ids are trusted like everything else after the handshake (see below): two
//! compute nodes must not share an id, and a revoked node must rejoin under a new id.
//!
//! # Strangers: the connection cap and the handshake deadline
//!
//! A node serves at most [`ServerConfig::connections_max`] connections
//! ([`CONNECTIONS_MAX_DEFAULT`]). A connection that has not passed its HELLO is a
//! *stranger*: it must pass it within [`ServerConfig::handshake_timeout`]
//! ([`HANDSHAKE_TIMEOUT_DEFAULT`], ample for a client, which sends HELLO right after
//! connecting) or it gets an ERROR `TIMEOUT` and is closed. When the cap is reached, a
//! new connection is admitted by cutting the **oldest stranger** (no ERROR frame; it
//! just drops), sparing strangers whose first bytes wait unread in their socket or are
//! being answered by their serving thread (their HELLO is about to be answered) unless
//! all are such. So a flood of connections that never say HELLO cannot lock out a
//! client with the token: its connection is among the newest, and from the moment its
//! HELLO arrives until it is answered it is spared. The accept queue is 1024 long
//! (`LISTEN_BACKLOG`, not std's 128), so a flood does not make the kernel drop the
//! client's SYN. Only when every slot holds a client that passed the handshake is a new
//! connection refused (ERROR `TOO_MANY_CONNECTIONS`). Cut strangers free their slots at
//! once, but their descriptors close when their serving thread sees the cut (within a
//! poll round); at most [`ServerConfig::connections_max`] cut strangers wait for that at
//! a time, beyond which the acceptor leaves new connections in the listen backlog for a
//! tick. So the node holds at most twice the cap in descriptors.
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
//! Several regions per node (the wire format already carries a list), a way to raise the
//! epoch of a running server, and moving a busy connection to an idle serving thread
//! (connections stay on the thread they were given).

mod frames;
mod poll;
pub mod wire;

use std::collections::HashSet;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dmtx_verbs::{MnId, Region};

use crate::MemNode;
use poll::{Adopt, Link, Poller};
use wire::ErrorCode;

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
    /// Most connections served at once. At the cap a new connection cuts the oldest one
    /// that has not passed its HELLO; if every one has, it is refused (module doc,
    /// "Strangers").
    pub connections_max: usize,
    /// Serving threads; each owns a share of the connections and polls them (module doc).
    /// [`ServerConfig::new`] sets [`default_threads`].
    pub threads: usize,
    /// Time a new connection has to complete its HELLO (from its accept); a stranger
    /// holds a slot at most this long (module doc, "Strangers").
    pub handshake_timeout: Duration,
    /// A connection with no frame for this long is closed; `None` keeps it forever.
    pub idle_timeout: Option<Duration>,
    /// Back the region with this file (a PM-like node): FLUSH persists, and a restart on
    /// the same file keeps the region's bytes, its allocator and its published tables
    /// (`FILE.meta`, see [`crate::MemNode::open_backed`]). `None` is a DRAM node that
    /// starts empty.
    pub backing: Option<std::path::PathBuf>,
}

/// Default of [`ServerConfig::connections_max`]: enough for 64 compute-node workers
/// times four memory-node addresses each, or 256 workers of one compute node.
pub const CONNECTIONS_MAX_DEFAULT: usize = 256;

/// Default of [`ServerConfig::handshake_timeout`]. A client sends its HELLO right after
/// connecting, so one second covers a round trip across any data center many times
/// over, while a stranger cannot hold a slot for longer.
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(1);

/// The default number of serving threads: the machine's parallelism clamped to 2..=4
/// (at least two so that one stalled op never stops a whole node; see the module doc).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4)
}

impl ServerConfig {
    /// Defaults for node `node_id` with a region of `region_bytes`: loopback with a free
    /// port, cluster 0, empty token, epoch 0, [`CONNECTIONS_MAX_DEFAULT`] connections,
    /// [`default_threads`] serving threads, [`HANDSHAKE_TIMEOUT_DEFAULT`] to say HELLO, no
    /// idle limit.
    pub fn new(node_id: MnId, region_bytes: u64) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            region_bytes,
            node_id,
            cluster_id: 0,
            token: Vec::new(),
            epoch: 0,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            threads: default_threads(),
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
            idle_timeout: None,
            backing: None,
        }
    }
}

/// Why a server could not start. Each message holds the text of the error under it, so
/// none is also a `source` (a `{:#}` chain would print it twice).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {error}; pick another address or port (`--listen`)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error (its text is in the message, so it is no `source`).
        error: io::Error,
    },
    /// The configuration is unusable.
    #[error("bad memory-node config: {0}")]
    Config(String),
    /// Another I/O failure while starting.
    #[error("memory-node server: {0}")]
    Io(io::Error),
    /// The region could not be allocated (too large for this machine).
    #[error(transparent)]
    Region(#[from] dmtx_verbs::region::RegionAllocError),
}

impl From<io::Error> for ServerError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Accept-queue length asked of the kernel (see [`Server::bind`]).
const LISTEN_BACKLOG: libc::c_int = 1024;

/// How often blocked threads look at the shutdown flag and their timeouts.
const TICK: Duration = Duration::from_millis(20);

/// A bound, not yet serving memory-node server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
    pollers: Vec<Poller>,
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
    /// One per serving thread.
    links: Vec<Arc<Link>>,
}

#[derive(Debug, Default)]
struct Registry {
    /// In accept order (oldest first).
    live: Vec<Live>,
    /// Entries of `live` cut to make room for newer connections and not yet closed by
    /// their serving thread. Invariant: equals the count of `live` entries with
    /// `evicted`; at most `connections_max`.
    evicted: usize,
    /// Client ids fenced out by REVOKE; their HELLOs are refused.
    revoked: HashSet<u32>,
}

/// What the acceptor does with a new connection (see [`Registry::admit`]).
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    /// A slot is free.
    Free,
    /// The oldest stranger was cut to free a slot.
    Evicted,
    /// Every slot holds a client that passed the handshake.
    Full,
}

impl Registry {
    /// Connections that hold a slot (those cut for newer ones no longer do).
    fn held(&self) -> usize {
        self.live.len() - self.evicted
    }

    /// Make room for one more connection under a cap of `max`: free if there is room,
    /// else cut the oldest connection that has not passed its HELLO.
    fn admit(&mut self, max: usize) -> Admission {
        if self.held() < max {
            return Admission::Free;
        }
        let stranger = |l: &&mut Live| l.client.is_none() && !l.evicted;
        // Spare a stranger whose first bytes wait unread, or are being answered right
        // now: its HELLO is about to be answered (a client's HELLO follows its connect at
        // once, and is usually there before the accept).
        let mut strangers = self.live.iter_mut().filter(stranger);
        let victim = match strangers.find(|l| !has_unread(l.fd) && !l.fence.greeting.load(Ordering::SeqCst)) {
            Some(v) => v,
            None => match self.live.iter_mut().find(|l| l.client.is_none() && !l.evicted) {
                Some(v) => v,
                None => return Admission::Full,
            },
        };
        victim.evicted = true;
        cut(victim.fd);
        self.evicted += 1;
        debug_assert_eq!(self.evicted, self.live.iter().filter(|l| l.evicted).count());
        Admission::Evicted
    }
}

/// A live connection as the registry sees it.
#[derive(Debug)]
struct Live {
    id: u64,
    /// Its socket's descriptor, so shutdown and revoke can cut it at once from any thread.
    /// Its owner removes the entry (under the registry lock) before closing the socket, so
    /// a descriptor found here is open and still this connection's.
    fd: RawFd,
    /// The client id of its HELLO, once the handshake passed.
    client: Option<u32>,
    /// Cut to make room for a newer connection (it never passed its HELLO); it no longer
    /// holds a slot, and its serving thread closes it at the next event.
    evicted: bool,
    fence: Arc<Fence>,
}

/// Per-connection fence. A serving thread answers the frames of a connection holding
/// `running` and checks `fenced` before each VERBS / CONTROL frame; REVOKE sets `fenced`
/// and then takes `running` once, so when it returns, no op of the revoked connection is
/// running or can start.
#[derive(Debug, Default)]
struct Fence {
    fenced: AtomicBool,
    running: Mutex<()>,
    /// Set by the serving thread while it reads and answers the bytes of a connection that
    /// has not passed its HELLO: the acceptor spares it (its HELLO may be in hand).
    greeting: AtomicBool,
}

/// Whether bytes wait unread in a live connection's socket.
fn has_unread(fd: RawFd) -> bool {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is an open socket (see `cut`); FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    r == 0 && n > 0
}

/// Shut a live connection's socket down both ways (the peer sees the connection drop; its
/// owner sees end-of-file and closes it).
fn cut(fd: RawFd) {
    // SAFETY: `fd` is an open socket: the registry lock is held, and a connection leaves
    // the registry before its socket is closed (see `Live::fd`).
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

impl Shared {
    fn close_all(&self) {
        for l in self.registry.lock().unwrap().live.iter() {
            cut(l.fd);
        }
    }

    /// Wake every serving thread (to notice `stop`).
    fn wake_all(&self) {
        for l in &self.links {
            let _ = l.waker.wake();
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
                    cut(l.fd);
                    Arc::clone(&l.fence)
                })
                .collect()
        };
        for f in fences {
            if own.is_some_and(|o| Arc::ptr_eq(o, &f)) {
                continue;
            }
            // Wait until the fenced connection is inside no frame. Two REVOKEs naming each
            // other's clients would wait on each other's fences forever; but then the
            // caller's own connection is fenced too, and the frame the other side holds
            // its fence for is that REVOKE, which lands no write. So stop waiting once our
            // own connection is fenced.
            loop {
                match f.running.try_lock() {
                    Ok(g) => {
                        drop(g);
                        break;
                    }
                    Err(std::sync::TryLockError::Poisoned(_)) => break,
                    Err(std::sync::TryLockError::WouldBlock) => {}
                }
                if own.is_some_and(|o| o.fenced.load(Ordering::SeqCst)) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn forget(&self, id: u64) {
        let mut reg = self.registry.lock().unwrap();
        if let Some(i) = reg.live.iter().position(|l| l.id == id) {
            if reg.live.remove(i).evicted {
                reg.evicted -= 1;
            }
        }
        self.live_count.fetch_sub(1, Ordering::SeqCst);
    }

    fn stopped(&self, external: Option<&AtomicBool>) -> bool {
        self.stop.load(Ordering::SeqCst) || external.is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// Bytes held by every connection's receive and send buffers.
    fn buffered_bytes(&self) -> usize {
        self.links.iter().map(|l| l.held.load(Ordering::SeqCst)).sum()
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
    /// Validate `config`, allocate the region, bind the listener and make the serving
    /// threads' pollers (the threads start with [`Server::spawn`] or [`Server::serve_until`]).
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        Self::bind_with(config, None)
    }

    /// Like [`Server::bind`], serving `node` (its region, allocator and tables as they
    /// are) instead of allocating one: an in-process cluster loaded by a test becomes
    /// reachable over TCP with its bytes in place. `config.region_bytes` and
    /// `config.backing` are not used; `config.node_id` must be the node's id.
    pub fn serving(config: ServerConfig, node: Arc<MemNode>) -> Result<Self, ServerError> {
        if node.id() != config.node_id {
            return Err(ServerError::Config(format!(
                "node_id {} differs from the served node's id {}; give the node's id",
                config.node_id,
                node.id()
            )));
        }
        Self::bind_with(config, Some(node))
    }

    fn bind_with(config: ServerConfig, node: Option<Arc<MemNode>>) -> Result<Self, ServerError> {
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
        if config.threads == 0 {
            return Err(ServerError::Config(
                "threads is 0; serve with at least one thread (`--threads`)".into(),
            ));
        }
        if config.region_bytes == 0 && node.is_none() {
            return Err(ServerError::Config(
                "region_bytes is 0; give the region some memory".into(),
            ));
        }
        let listener = TcpListener::bind(config.listen).map_err(|error| ServerError::Bind {
            addr: config.listen,
            error,
        })?;
        listener.set_nonblocking(true)?;
        // A longer accept queue than std's 128, so that a burst of connections (a flood
        // of strangers) does not make the kernel drop a client's SYN, which costs that
        // client a 1 s retransmission. Calling listen(2) again on a listening socket
        // only changes its backlog; the kernel caps it at `net.core.somaxconn`.
        // SAFETY: listen(2) on the listener's own open descriptor.
        unsafe {
            libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG);
        }
        let pollers = (0..config.threads)
            .map(|_| Poller::new())
            .collect::<io::Result<Vec<_>>>()?;
        let node = match node {
            Some(node) => node,
            None => Arc::new(match &config.backing {
                None => MemNode::try_new(config.node_id, config.region_bytes)?,
                Some(path) => {
                    MemNode::open_backed(config.node_id, path, config.region_bytes)
                        .map_err(|e| ServerError::Config(format!("--backing: {e}")))?
                        .0
                }
            }),
        };
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
                links: pollers.iter().map(|p| Arc::clone(p.link())).collect(),
            }),
            pollers,
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

    /// Serve on this thread (as the acceptor, with the serving threads beside it) until
    /// `stop` is set, then close every connection and return once every thread has ended.
    pub fn serve_until(self, stop: &AtomicBool) {
        let workers = spawn_workers(self.pollers, &self.shared);
        accept_loop(self.listener, self.shared, workers, Some(stop));
    }

    /// Serve on background threads; the handle shuts them down.
    pub fn spawn(self) -> ServerHandle {
        let addr = self.local_addr();
        let shared = Arc::clone(&self.shared);
        let workers = spawn_workers(self.pollers, &shared);
        let name = format!("dmtx-{}-accept", shared.config.node_id);
        let listener = self.listener;
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || accept_loop(listener, s2, workers, None))
            .expect("spawn the accept thread");
        ServerHandle {
            addr,
            shared,
            thread: Some(thread),
        }
    }
}

/// Start the serving threads (they inherit the caller's CPU affinity).
fn spawn_workers(pollers: Vec<Poller>, shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    pollers
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let s = Arc::clone(shared);
            std::thread::Builder::new()
                .name(format!("dmtx-{}-serve{i}", shared.config.node_id))
                .spawn(move || p.run(s))
                .expect("spawn a serving thread")
        })
        .collect()
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

    /// Bytes the connections' receive and send buffers hold now (their capacities): what
    /// backpressure keeps bounded however much a client pipelines.
    pub fn buffered_bytes(&self) -> usize {
        self.shared.buffered_bytes()
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
    /// Does not wait: a serving thread stalled inside an op ends when the op does.
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.close_all();
        self.shared.wake_all();
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

/// The serving thread for a new connection: one not inside an op, then the one with the
/// fewest connections; ties go round-robin from `rr`.
fn pick(links: &[Arc<Link>], rr: &mut usize) -> usize {
    let n = links.len();
    let key = |i: usize| {
        (
            links[i].inside.load(Ordering::Relaxed),
            links[i].conns.load(Ordering::SeqCst),
        )
    };
    let mut best = *rr % n;
    let mut best_key = key(best);
    for k in 1..n {
        let i = (*rr + k) % n;
        let ki = key(i);
        if ki < best_key {
            best = i;
            best_key = ki;
        }
    }
    *rr = best + 1;
    best
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    external: Option<&AtomicBool>,
) {
    let mut rr = 0usize;
    while !shared.stopped(external) {
        if !wait_readable(listener.as_raw_fd(), TICK) {
            continue;
        }
        // Too many cut strangers not yet closed: leave new connections in the backlog
        // until their threads close some (module doc, "Strangers").
        if shared.registry.lock().unwrap().evicted >= shared.config.connections_max {
            std::thread::sleep(TICK);
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
        let _ = stream.set_nodelay(true);
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let max = shared.config.connections_max;
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        let fence = Arc::new(Fence::default());
        {
            let mut reg = shared.registry.lock().unwrap();
            if reg.admit(max) == Admission::Full {
                drop(reg);
                refuse(
                    stream,
                    ErrorCode::TOO_MANY_CONNECTIONS,
                    &format!(
                        "{} serves at most {max} connections and every one has a client; \
                         raise connections_max or use fewer workers",
                        shared.config.node_id
                    ),
                );
                continue;
            }
            reg.live.push(Live {
                id,
                fd: stream.as_raw_fd(),
                client: None,
                evicted: false,
                fence: Arc::clone(&fence),
            });
            shared.live_count.fetch_add(1, Ordering::SeqCst);
        }
        let w = pick(&shared.links, &mut rr);
        shared.links[w].hand(Adopt {
            id,
            stream,
            fence,
            opened: Instant::now(),
        });
    }
    shared.stop.store(true, Ordering::SeqCst);
    shared.close_all();
    shared.wake_all();
    for h in workers {
        let _ = h.join();
    }
    // Connections handed over after their thread had stopped.
    for l in &shared.links {
        l.drain(&shared);
    }
}

fn refuse(mut stream: TcpStream, code: ErrorCode, message: &str) {
    let mut out = Vec::new();
    wire::put_error(&mut out, 0, code, message);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(TICK));
    let _ = stream.write_all(&out);
    let _ = stream.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests;
