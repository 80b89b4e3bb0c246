//! The `tcp` transport: compute nodes reaching memory-node servers over TCP.
//!
//! [`TcpFabric`] implements [`dmtx_verbs::Fabric`]: it knows every memory node's address
//! and the cluster's handshake parameters ([`TcpConfig`]), and `endpoint(worker)` opens
//! that worker's own connection to every node — its queue pairs — as a [`TcpTransport`]
//! (a [`dmtx_verbs::Transport`]). [`RemoteControl`] implements
//! [`dmtx_memnode::Control`] (allocate, load, publish and fetch tables) over separate
//! connections. Both speak wire v2, defined in [`dmtx_memnode::server::wire`] next to
//! the server. [`msg`] carries CN↔CN messages over TCP ([`msg::TcpMsgFabric`]).
//!
//! # Behaviour
//!
//! - A post becomes one VERBS frame per memory node it touches; the ops keep their order.
//!   Posts are pipelined on a connection (at most [`INFLIGHT_MAX`] in flight); replies
//!   come back in order and are matched by request id.
//! - Errors: an op refused by the node maps to [`VerbError::OutOfRange`] or
//!   [`VerbError::Misaligned`] naming the op's kind and address (the first failing op of
//!   the post, in post order, names the post's error). A lost connection, a malformed
//!   reply or a missed op deadline ([`TcpConfig::op_deadline`]) fails every op in flight
//!   on that connection with [`VerbError::Unreachable`]; later posts to that node fail at
//!   once. Nothing hangs past the deadline.
//! - Dead links: every client socket has `TCP_USER_TIMEOUT` (Linux) set to the op
//!   deadline, so the kernel drops a connection whose sent data stays unacknowledged that
//!   long; and a connection with posts in flight that received nothing for
//!   [`TcpConfig::keepalive`] sends a PING (the server answers PONG), so even a link cut
//!   after the requests were acknowledged has fresh data in flight and fails within the
//!   deadline instead of waiting for TCP's default (about 15 minutes of retransmits).
//! - Fencing: [`RemoteControl::revoke`] fences a compute node out of a memory node (its
//!   connections are cut, its client id refused from then on; see
//!   [`dmtx_memnode::server`]). A revoked client's posts fail with
//!   [`VerbError::Unreachable`] and its reconnects with [`NetError::Refused`]
//!   (code `REVOKED`).
//! - Reconnecting: the next post to a node whose connection died starts reopening it, as
//!   an RDMA queue pair is reset, without blocking the thread (a nonblocking connect and
//!   handshake advanced on every pass; at most one attempt per [`RECONNECT_BACKOFF`]
//!   after a failed one); posts to the node fail at once until it is back. A node that comes back with a new rkey restarted:
//!   [`dmtx_verbs::Transport::restarts`] counts it, and the runtime then drops its address
//!   caches and refetches table metadata. [`RemoteControl`] reopens a broken connection
//!   on its next call. A revoked client's reconnect is refused.
//! - Deviation from `mem`: a post naming a node that does not exist fails as a whole at
//!   submit, without running its other batches.
//!
//! # Not done yet
//!
//! N regions per node, TLS (out of scope: the network is trusted; see
//! [`dmtx_memnode::server`] for the threat model).
//!
//! Depends on `dmtx-verbs` and `dmtx-memnode` only (never on store, runtime or protocols).
//!
//! ```
//! use std::task::{Context, Poll, Waker};
//! use dmtx_memnode::server::{Server, ServerConfig};
//! use dmtx_net::{TcpConfig, TcpFabric};
//! use dmtx_verbs::{Fabric, MnId, Post, RemotePtr, Submitted};
//!
//! let server = Server::bind(ServerConfig::new(MnId(0), 1 << 20)).unwrap().spawn();
//! let fabric = TcpFabric::connect(vec![(MnId(0), server.local_addr())], TcpConfig::new(0, b"")).unwrap();
//! let t = fabric.endpoint(0).unwrap();
//! let mut post = Post::new();
//! let old = post.faa(RemotePtr::new(MnId(0), 64), 5);
//! let Submitted::Pending(ticket) = t.submit(&mut post) else { unreachable!() };
//! let mut cx = Context::from_waker(Waker::noop());
//! loop {
//!     if let Poll::Ready(r) = t.poll(ticket, &mut post, &mut cx) {
//!         r.unwrap();
//!         break;
//!     }
//!     t.progress();
//! }
//! assert_eq!(post.old(old), 0);
//! ```

#![warn(missing_docs)]

mod conn;
mod control;
mod error;
pub mod msg;
mod reopen;
mod transport;

use std::time::Duration;

pub use control::{RemoteControl, LOAD_CHUNK_BYTES};
pub use error::{NetError, Result};
pub use transport::{TcpFabric, TcpTransport, INFLIGHT_MAX, RECONNECT_BACKOFF};

#[cfg(doc)]
use dmtx_verbs::VerbError;

/// How a compute node connects: the handshake fields and the time limits.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// The cluster's id; the servers' must match.
    pub cluster_id: u64,
    /// This compute node's id (sent in HELLO, for the servers' logs).
    pub client_id: u32,
    /// The membership epoch this client acts in.
    pub epoch: u64,
    /// The cluster's shared token.
    pub token: Vec<u8>,
    /// A post (or control call) not answered within this time fails with `Unreachable`.
    pub op_deadline: Duration,
    /// Time allowed for TCP connect and the handshake.
    pub connect_timeout: Duration,
    /// A connection with posts in flight that has received nothing for this long sends a
    /// PING (one at a time, until its PONG), so a silently cut link has unacknowledged
    /// data and `TCP_USER_TIMEOUT` (set from `op_deadline`) fires. `None` never pings.
    pub keepalive: Option<Duration>,
}

impl TcpConfig {
    /// Cluster `cluster_id` with `token`; client 0, epoch 0, 10 s op deadline, 5 s
    /// connect, a PING after 1 s without a reply.
    pub fn new(cluster_id: u64, token: &[u8]) -> Self {
        Self {
            cluster_id,
            client_id: 0,
            epoch: 0,
            token: token.to_vec(),
            op_deadline: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            keepalive: Some(Duration::from_secs(1)),
        }
    }
}
