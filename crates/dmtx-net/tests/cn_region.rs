//! Compute nodes as verb targets: a compute node registers a small region that other
//! nodes reach with one-sided verbs, as OOCC's lease manager updates each compute
//! node's lease word with RDMA WRITEs (OOCC §VII-A). The compute node reads its own
//! words locally, without a round trip.
//!
//! Node ids of verb targets: memory nodes first, then compute-node regions. Over `tcp` a
//! compute node serves its region with the same server as a memory node
//! (`dmtx_memnode::server`), so the token, rkey, fencing and verb contract are the same.

use std::sync::Arc;

use dmtx_memnode::server::{Server, ServerConfig};
use dmtx_net::{TcpConfig, TcpFabric};
use dmtx_runtime::block_on;
use dmtx_verbs::{Fabric, MemFabric, MnId, Post, Region, RemotePtr, Submitted, Transport, VerbError};

const TOKEN: &[u8] = b"lease-test-token";
/// Bytes of each compute node's lease region: one word per lease.
const LEASE_REGION: u64 = 4096;

/// Submit a post on any transport and wait for it.
fn outcome(t: &dyn Transport, post: &mut Post) -> Result<(), VerbError> {
    match t.submit(post) {
        Submitted::Done(r) => r,
        Submitted::Pending(ticket) => block_on(std::future::poll_fn(|cx| {
            t.progress();
            t.poll(ticket, post, cx)
        })),
    }
}

fn run(t: &dyn Transport, post: &mut Post) {
    outcome(t, post).unwrap();
}

/// The lease manager's part: extend the lease of the compute node whose region is node
/// `cn_region` to `expiry`, and bump its renewal counter with FAA, in one doorbell batch.
fn grant_lease(t: &dyn Transport, cn_region: MnId, expiry: u64) -> u64 {
    let mut post = Post::new();
    post.write(RemotePtr::new(cn_region, 0), &expiry.to_le_bytes());
    let renewals = post.faa(RemotePtr::new(cn_region, 8), 1);
    run(t, &mut post);
    post.old(renewals)
}

/// The leased compute node's part: read its own words, locally.
fn local_lease(region: &Region) -> (u64, u64) {
    let mut b = [0u8; 16];
    region.read(0, &mut b).unwrap();
    (
        u64::from_le_bytes(b[..8].try_into().unwrap()),
        u64::from_le_bytes(b[8..].try_into().unwrap()),
    )
}

/// Goal: in-process, a compute node's region is one more verb target of the fabric.
#[test]
fn lease_words_on_a_compute_node_over_mem() {
    let mn0 = Arc::new(Region::new(1 << 16));
    let cn1_leases = Arc::new(Region::new(LEASE_REGION));
    let fabric = MemFabric::new(vec![mn0, Arc::clone(&cn1_leases)]);
    let manager = fabric.transport();
    assert_eq!(grant_lease(&manager, MnId(1), 1_000), 0);
    assert_eq!(grant_lease(&manager, MnId(1), 2_000), 1);
    assert_eq!(local_lease(&cn1_leases), (2_000, 2));
}

/// Goal: over `tcp`, a compute node serves its lease region (node id after the memory
/// nodes) and the manager updates it with verbs; a client without the token is refused,
/// and an access past the small region is an error, not a crash.
#[test]
fn lease_words_on_a_compute_node_over_tcp() {
    let server = |id: u16, bytes: u64| {
        let mut c = ServerConfig::new(MnId(id), bytes);
        c.token = TOKEN.to_vec();
        c.cluster_id = 3;
        Server::bind(c).unwrap().spawn()
    };
    let mn0 = server(0, 1 << 16);
    // Compute node 1 registers its lease region as verb target 1.
    let cn1 = server(1, LEASE_REGION);
    let nodes = vec![(MnId(0), mn0.local_addr()), (MnId(1), cn1.local_addr())];
    let fabric = TcpFabric::connect(nodes.clone(), TcpConfig::new(3, TOKEN)).unwrap();
    assert_eq!(fabric.region_bytes(MnId(1)), LEASE_REGION);
    let manager = fabric.endpoint(0).unwrap();
    assert_eq!(grant_lease(manager.as_ref(), MnId(1), 5_000), 0);
    assert_eq!(grant_lease(manager.as_ref(), MnId(1), 9_000), 1);
    assert_eq!(local_lease(cn1.region()), (9_000, 2));

    let mut post = Post::new();
    post.write(RemotePtr::new(MnId(1), LEASE_REGION), &[0u8; 8]);
    assert!(outcome(manager.as_ref(), &mut post).is_err(), "past the lease region");

    assert!(
        TcpFabric::connect(nodes, TcpConfig::new(3, b"not-the-token-00")).is_err(),
        "a stranger cannot reach the lease words"
    );
}
