//! A memory node that restarts under a running compute node: the transport reconnects,
//! sees the new region key, and every coordinator context that posts afterwards drops its
//! address caches and refetches table metadata (issue: "a restarted MN means metadata is
//! refetched and address caches dropped").

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmtx_memnode::server::{Server, ServerConfig, ServerHandle};
use dmtx_net::{RemoteControl, TcpConfig, TcpFabric};
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, Cn, CoordCtx, Protocol, RealClock};
use dmtx_store::{create_table, placement, TableBuilder, TableSpec};
use dmtx_verbs::{MnId, Post, RemotePtr};

const TOKEN: &[u8] = b"restart-token-16";

fn serve(id: u16, listen: SocketAddr, backing: Option<PathBuf>) -> ServerHandle {
    let mut c = ServerConfig::new(MnId(id), 4 << 20);
    c.cluster_id = 9;
    c.token = TOKEN.to_vec();
    c.listen = listen;
    c.backing = backing;
    // The old listener's port may linger briefly after a restart.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Server::bind(c.clone()) {
            Ok(s) => return s.spawn(),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("rebinding {listen}: {e}"),
        }
    }
}

fn config() -> TcpConfig {
    let mut c = TcpConfig::new(9, TOKEN);
    c.op_deadline = Duration::from_secs(5);
    c.connect_timeout = Duration::from_secs(2);
    c
}

/// One table, primary on mn0, backup on mn1.
fn cluster(backing: Option<PathBuf>) -> (Vec<ServerHandle>, Cn) {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let servers = vec![serve(0, any, backing), serve(1, any, None)];
    let nodes: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (MnId(i as u16), s.local_addr()))
        .collect();
    let control = RemoteControl::connect(nodes.clone(), &config()).unwrap();
    let ford = Ford::new(FordConfig::default());
    let mut b = TableBuilder::new(TableSpec::new(0, "t", 8, 64), ford.layout());
    for k in 0..16u64 {
        b.insert(k, &k.to_le_bytes()).unwrap();
    }
    create_table(&control, b, &placement(0, 2, 2).unwrap()).unwrap();
    let fabric = TcpFabric::connect(nodes, config()).unwrap();
    let cn = Cn::connect(0, Arc::new(fabric), Arc::new(control), Arc::new(RealClock::new())).unwrap();
    (servers, cn)
}

/// Post a 64-byte READ of mn0 until one succeeds (the first ones after a restart fail:
/// the old connection is gone, reopening waits out the backoff).
fn read_mn0_until_ok(ctx: &mut CoordCtx) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut failures = 0;
    loop {
        let mut post = Post::new();
        post.read(RemotePtr::new(MnId(0), 64), 64);
        match block_on(ctx.post(&mut post)) {
            Ok(()) => return failures,
            Err(e) => {
                failures += 1;
                assert!(Instant::now() < deadline, "mn0 never came back: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Goal: after a DRAM memory node restarts (empty), the compute node reconnects on its
/// own, counts the restart, drops every cached address and refetches the catalog, which
/// no longer lists the restarted node's copy.
#[test]
fn a_restarted_memory_node_is_reconnected_and_caches_are_dropped() {
    let (mut servers, cn) = cluster(None);
    let worker = cn.worker(0).unwrap();
    let mut ctx = worker.ctx(0);
    assert_eq!(read_mn0_until_ok(&mut ctx), 0);
    ctx.cache.put(0, 3, 4096);
    assert_eq!(ctx.cache.get(0, 3), Some(4096));
    let before = Arc::clone(&ctx.catalog);
    assert_eq!(worker.cn().control.tables(MnId(0)).unwrap().len(), 1);

    let addr = servers[0].local_addr();
    servers.remove(0).join();
    servers.insert(0, serve(0, addr, None));

    let failed = read_mn0_until_ok(&mut ctx);
    assert!(failed >= 1, "the old connection cannot survive a restart");
    assert_eq!(ctx.transport.restarts(), 1);
    assert_eq!(ctx.cache.get(0, 3), None, "cached addresses are dropped");
    assert!(!Arc::ptr_eq(&before, &ctx.catalog), "the catalog was fetched again");
    // The control connection reopened too: the fresh (DRAM) node has no tables now.
    assert!(worker.cn().control.tables(MnId(0)).unwrap().is_empty());
}
