//! CN↔CN messaging over TCP: the `tcp` implementation of [`dmtx_verbs::msg`].
//!
//! Every compute node runs a [`TcpMsgFabric`]: a listener on its cluster-file address
//! and the [`Mailbox`]es of its worker threads.
//!
//! - **Connections**: worker A sends to worker B over its own connection A→B, opened on
//!   A's first message to B (TCP connect + PEER_HELLO / HELLO_OK, [`wire::PeerHello`]).
//!   B answers A over B→A. So each connection carries one direction, and FIFO per pair is
//!   TCP's order. The listener's thread only shakes hands and hands the socket to the
//!   receiving worker: it never touches a message. Receivers read their sockets when
//!   their executor drains the mailbox (one `poll(2)` over the worker's sockets per
//!   drain, then one `read` per ready socket), so handlers run on the worker's thread.
//! - **Frames**: wire v1 frames ([`wire`]), kind MESSAGES; the payload is the entries of
//!   [`dmtx_verbs::msg`]. Entries pushed to one peer between two flushes go in one frame,
//!   and each flush is one `write` per peer with data (never blocking: what the socket
//!   cannot take waits for the next flush).
//! - **Security**: PEER_HELLO carries the cluster id, token (compared in constant time),
//!   epoch (an older one is refused), the sender and the receiver; a handshake that does
//!   not match this node and its threads is refused with an ERROR frame. Same trusted
//!   network threat model as the memory nodes (`dmtx_memnode::server`).
//! - **Opening** never blocks the worker: the first push to a peer starts a nonblocking
//!   connect and PEER_HELLO, advanced at every flush; entries pushed meanwhile wait and
//!   leave once the peer accepts. A connect that fails or does not finish within
//!   [`TcpConfig::connect_timeout`] reports [`Event::PeerLost`](dmtx_verbs::msg::Event::PeerLost) (its waiting entries are
//!   lost), and no new attempt starts before [`RECONNECT_BACKOFF`].
//! - **Loss**: a write or read error, an end of stream or a malformed frame closes the
//!   connection and reports [`Event::PeerLost`](dmtx_verbs::msg::Event::PeerLost) once; the next push reopens it. Every
//!   socket has `TCP_USER_TIMEOUT` from [`TcpConfig::op_deadline`]; the RPC layer's
//!   deadlines bound every call anyway.
//! - **Self-sends** never touch a socket: they are queued in the mailbox.

mod mailbox;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dmtx_memnode::server::wire::{self, ErrorCode, HelloOk, Kind, PeerHello};
use dmtx_verbs::msg::{Mailbox, MsgError, MsgFabric, WorkerAddr};

pub use mailbox::TcpMailbox;

use crate::TcpConfig;

/// After a failed connect to a peer, pushes to it are reported lost without a new
/// attempt for this long.
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(500);

/// How often the listener thread looks at its stop flag.
const TICK: Duration = Duration::from_millis(20);

/// One compute node of the messaging network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerNode {
    /// Compute-node id.
    pub cn: u16,
    /// Its messaging address.
    pub addr: SocketAddr,
    /// Its worker threads.
    pub threads: u16,
}

/// Why the messaging listener could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MsgSetupError {
    /// The node is not in the peer list.
    #[error("cn{cn} is not among the compute nodes of the cluster file; add it under [[compute_nodes]]")]
    NotListed {
        /// The node.
        cn: u16,
    },
    /// Binding the listener failed.
    #[error("cannot listen for compute-node messages on {addr}: {error}; check the compute node's address")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error (its text is in the message, so it is no `source`).
        error: io::Error,
    },
}

/// A compute node's messaging network over TCP.
#[derive(Debug)]
pub struct TcpMsgFabric {
    inner: Arc<Inner>,
    listener: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Inner {
    cn: u16,
    config: TcpConfig,
    peers: Vec<PeerNode>,
    workers: Vec<WorkerAddr>,
    local_addr: SocketAddr,
    /// Per local thread, sockets that passed the handshake, not yet taken by the mailbox.
    handoff: Vec<Mutex<Vec<(WorkerAddr, TcpStream)>>>,
    stop: AtomicBool,
}

impl TcpMsgFabric {
    /// Start compute node `cn`'s listener on `listen`. `peers` lists every compute node,
    /// this one included (its address there is what others dial).
    pub fn bind(cn: u16, listen: SocketAddr, peers: Vec<PeerNode>, config: TcpConfig) -> Result<Self, MsgSetupError> {
        let listener = TcpListener::bind(listen).map_err(|error| MsgSetupError::Bind { addr: listen, error })?;
        Self::with_listener(cn, listener, peers, config)
    }

    /// Like [`TcpMsgFabric::bind`] on a listener bound already (tests bind every node on
    /// port 0 first, then tell each the others' addresses).
    pub fn with_listener(
        cn: u16,
        listener: TcpListener,
        peers: Vec<PeerNode>,
        config: TcpConfig,
    ) -> Result<Self, MsgSetupError> {
        let me = peers
            .iter()
            .find(|p| p.cn == cn)
            .ok_or(MsgSetupError::NotListed { cn })?;
        let (my_addr, my_threads) = (me.addr, me.threads);
        let bind_err = |error| MsgSetupError::Bind { addr: my_addr, error };
        let local_addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let mut workers: Vec<WorkerAddr> = peers
            .iter()
            .flat_map(|p| (0..p.threads).map(move |t| WorkerAddr::new(p.cn, t)))
            .collect();
        workers.sort();
        let inner = Arc::new(Inner {
            cn,
            handoff: (0..my_threads).map(|_| Mutex::new(Vec::new())).collect(),
            config,
            peers,
            workers,
            local_addr,
            stop: AtomicBool::new(false),
        });
        let i2 = Arc::clone(&inner);
        let listener = std::thread::Builder::new()
            .name(format!("dmtx-cn{cn}-msg-accept"))
            .spawn(move || accept_loop(&listener, &i2))
            .expect("spawn the messaging listener");
        Ok(Self {
            inner,
            listener: Some(listener),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }
}

impl Drop for TcpMsgFabric {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
    }
}

impl MsgFabric for TcpMsgFabric {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn workers(&self) -> Vec<WorkerAddr> {
        self.inner.workers.clone()
    }

    fn mailbox(&self, thread: u16) -> Result<Box<dyn Mailbox>, MsgError> {
        let addr = WorkerAddr::new(self.inner.cn, thread);
        if usize::from(thread) >= self.inner.handoff.len() {
            return Err(MsgError::UnknownPeer { to: addr });
        }
        Ok(Box::new(TcpMailbox::new(Arc::clone(&self.inner), addr)))
    }
}

fn accept_loop(listener: &TcpListener, inner: &Inner) {
    while !inner.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                // A failed handshake only costs that socket.
                let _ = handshake(stream, inner);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                std::thread::sleep(TICK)
            }
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

/// Check a PEER_HELLO and hand the socket to its worker, or answer ERROR and close.
fn handshake(mut stream: TcpStream, inner: &Inner) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(inner.config.connect_timeout))?;
    stream.set_write_timeout(Some(inner.config.connect_timeout))?;
    let mut hb = [0u8; wire::HEADER_BYTES];
    stream.read_exact(&mut hb)?;
    let refuse = |mut stream: TcpStream, code: ErrorCode, why: String| {
        let mut out = Vec::new();
        wire::put_error(&mut out, 0, code, &why);
        let _ = stream.write_all(&out);
        let _ = stream.shutdown(Shutdown::Both);
        Ok(())
    };
    let h = match wire::decode_header(&hb) {
        Ok(Some(h)) if h.kind == Kind::PeerHello && h.payload_bytes as usize <= 1024 => h,
        Ok(_) => return refuse(stream, ErrorCode::NOT_EXPECTED, "expected PEER_HELLO".into()),
        Err(e) => return refuse(stream, ErrorCode::BAD_FRAME, e.to_string()),
    };
    let mut p = vec![0u8; h.payload_bytes as usize];
    stream.read_exact(&mut p)?;
    let hello = match PeerHello::decode(&p) {
        Ok(hello) => hello,
        Err(e) => return refuse(stream, ErrorCode::BAD_FRAME, e.to_string()),
    };
    let c = &inner.config;
    let from = WorkerAddr::new(hello.hello.client_id as u16, hello.from_thread);
    let why = if hello.hello.version != wire::PROTOCOL_VERSION {
        Some((
            ErrorCode::BAD_VERSION,
            format!("version {} unsupported", hello.hello.version),
        ))
    } else if hello.hello.cluster_id != c.cluster_id {
        Some((
            ErrorCode::BAD_CLUSTER,
            format!("cluster {} is not this one", hello.hello.cluster_id),
        ))
    } else if !wire::constant_time_eq(&hello.hello.token, &c.token) {
        Some((ErrorCode::BAD_TOKEN, "wrong token".into()))
    } else if hello.hello.epoch < c.epoch {
        Some((
            ErrorCode::STALE_EPOCH,
            format!("epoch {} is older than {}", hello.hello.epoch, c.epoch),
        ))
    } else if hello.to_cn != inner.cn || usize::from(hello.to_thread) >= inner.handoff.len() {
        Some((
            ErrorCode::BAD_REQUEST,
            format!("this is cn{} with {} threads", inner.cn, inner.handoff.len()),
        ))
    } else if hello.hello.client_id > u32::from(u16::MAX) || inner.workers.binary_search(&from).is_err() {
        Some((
            ErrorCode::BAD_REQUEST,
            format!("{from} is not a worker of this cluster"),
        ))
    } else {
        None
    };
    if let Some((code, why)) = why {
        return refuse(stream, code, why);
    }
    let mut out = Vec::new();
    let s = wire::begin_frame(&mut out, Kind::HelloOk, 0);
    HelloOk {
        node_id: inner.cn,
        epoch: c.epoch,
        regions: Vec::new(),
    }
    .encode(&mut out);
    wire::end_frame(&mut out, s);
    stream.write_all(&out)?;
    stream.set_nonblocking(true)?;
    crate::conn::set_user_timeout(&stream, c.op_deadline)?;
    inner.handoff[usize::from(hello.to_thread)]
        .lock()
        .unwrap()
        .push((from, stream));
    Ok(())
}

#[cfg(test)]
mod tests;
