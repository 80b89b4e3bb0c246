//! Run-wide named areas end to end: a protocol's `setup_run` allocates a cluster-wide
//! counter and publishes it by name; two compute nodes set up coordinators that fetch it
//! in `coord_state` and FAA it. Goal: every compute node finds the same word, so the
//! values the FAAs return form one sequence with no gap and no repeat. Method: the same
//! test over in-process memory nodes (`mem`) and over `tcp` memory-node servers on
//! loopback, where each compute node has its own control connection, fabric and
//! protocol instance (as two compute-node processes would). The remote control calls'
//! bad-input paths are tested at the end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dmtx_memnode::server::{Server, ServerConfig, ServerHandle};
use dmtx_memnode::{Control, ControlError, LocalCluster, NamedLimitKind};
use dmtx_net::{NetError, RemoteControl, TcpConfig, TcpFabric};
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::named::{self, NamedError};
use dmtx_runtime::{
    block_on, Abort, Cn, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, Protocol, RealClock, RuntimeError, Txn,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::{Fabric, MnId, Post, RemotePtr};

/// The counter's name.
const COUNTER: &str = "test/counter";
/// FAAs each coordinator issues.
const FAA_PER_COORD: u64 = 200;
/// Coordinators per compute node (one worker thread each).
const COORDS_PER_CN: u16 = 3;

/// A test-only protocol whose run-wide state is one FAA counter on the last memory node.
/// Its transactions are never run: the coordinators use the counter directly.
struct Counter {
    ford: Ford,
}

impl Protocol for Counter {
    type CoordState = RemotePtr;
    type ObjState = ();
    type CnState = ();
    type ThreadState = ();
    const NAME: &'static str = "test-counter";
    const ABOUT: &'static str = "a cluster-wide FAA counter (test only)";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(counter())
    }
    fn isolation(&self) -> Isolation {
        Isolation::Unchecked
    }
    fn layout(&self) -> &dyn SlotLayout {
        self.ford.layout()
    }
    fn setup_run(&self, control: &dyn Control) -> dmtx_runtime::Result<()> {
        let last = MnId(control.mn_count() as u16 - 1);
        named::alloc_and_publish(control, COUNTER, last, 8, 8, b"faa")?;
        Ok(())
    }
    fn coord_state(&self, _: &CoordCtx, control: &dyn Control) -> dmtx_runtime::Result<RemotePtr> {
        let area = named::fetch(control, COUNTER)?;
        assert_eq!(area.bytes, 8);
        assert_eq!(area.payload, b"faa");
        Ok(area.at)
    }
    async fn execute(_: &mut Txn<'_, Self>) -> Result<(), Abort> {
        unreachable!("the counter protocol runs no transactions")
    }
    async fn commit(_: &mut Txn<'_, Self>) -> Result<(), Abort> {
        unreachable!("the counter protocol runs no transactions")
    }
    fn abort(_: &mut Txn<'_, Self>) {}
}

fn counter() -> Counter {
    Counter {
        ford: Ford::new(FordConfig::default()),
    }
}

/// Run `COORDS_PER_CN` coordinators of `proto` on `cn`, one worker thread each, and
/// return every value their FAAs saw.
fn faa_all(cn: &Cn, proto: &Arc<Counter>) -> Vec<u64> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..COORDS_PER_CN)
            .map(|t| {
                s.spawn(move || {
                    let w = cn.worker(t).unwrap();
                    let mut c = w.coordinator(proto, 0).unwrap();
                    let at = c.state;
                    (0..FAA_PER_COORD)
                        .map(|_| {
                            let mut post = Post::new();
                            let id = post.faa(at, 1);
                            block_on(c.ctx.post(&mut post)).unwrap();
                            post.old(id)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// The values from both compute nodes are exactly 0..N, once each.
fn assert_one_sequence(mut seen: Vec<u64>) {
    let n = 2 * u64::from(COORDS_PER_CN) * FAA_PER_COORD;
    assert_eq!(seen.len() as u64, n);
    seen.sort_unstable();
    assert!(
        seen.iter().copied().eq(0..n),
        "FAAs of two compute nodes did not form one sequence"
    );
}

#[test]
fn two_in_process_compute_nodes_share_a_named_counter() {
    let cluster = Arc::new(LocalCluster::new(2, 1 << 20));
    let proto = Arc::new(counter());
    proto.setup_run(cluster.as_ref()).unwrap();
    let fabric: Arc<dyn Fabric> = Arc::new(cluster.fabric().clone());
    let cns: Vec<Cn> = (0..2)
        .map(|i| {
            let control: Arc<dyn Control> = cluster.clone();
            Cn::connect(i, Arc::clone(&fabric), control, Arc::new(RealClock::new())).unwrap()
        })
        .collect();
    let seen = std::thread::scope(|s| {
        let hs: Vec<_> = cns.iter().map(|cn| s.spawn(|| faa_all(cn, &proto))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_one_sequence(seen);
}

/// Without `setup_run`, a coordinator's setup fails and names the missing entry.
#[test]
fn a_coordinator_without_the_run_setup_is_refused_with_the_name() {
    let cluster = Arc::new(LocalCluster::new(1, 1 << 20));
    let cn = Cn::connect(
        0,
        Arc::new(cluster.fabric().clone()),
        cluster,
        Arc::new(RealClock::new()),
    )
    .unwrap();
    let e = cn
        .worker(0)
        .unwrap()
        .coordinator(&Arc::new(counter()), 0)
        .err()
        .unwrap();
    assert!(
        matches!(&e, RuntimeError::Named(NamedError::Control(ControlError::UnknownName { name, .. })) if name == COUNTER),
        "{e}"
    );
}

const TOKEN: &[u8] = b"named-run-token!";

fn config() -> TcpConfig {
    let mut c = TcpConfig::new(11, TOKEN);
    c.op_deadline = Duration::from_secs(5);
    c.connect_timeout = Duration::from_secs(2);
    c
}

fn servers(n: u16) -> (Vec<ServerHandle>, Vec<(MnId, SocketAddr)>) {
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let mut c = ServerConfig::new(MnId(i), 1 << 20);
            c.cluster_id = 11;
            c.token = TOKEN.to_vec();
            c.listen = "127.0.0.1:0".parse().unwrap();
            Server::bind(c).unwrap().spawn()
        })
        .collect();
    let addrs = hs
        .iter()
        .enumerate()
        .map(|(i, s)| (MnId(i as u16), s.local_addr()))
        .collect();
    (hs, addrs)
}

/// Compute node `id` as its own process would be: own control connections, fabric and
/// protocol instance.
fn tcp_cn(id: u16, nodes: &[(MnId, SocketAddr)]) -> Cn {
    let control = RemoteControl::connect(nodes.to_vec(), &config()).unwrap();
    let fabric = TcpFabric::connect(nodes.to_vec(), config()).unwrap();
    Cn::connect(id, Arc::new(fabric), Arc::new(control), Arc::new(RealClock::new())).unwrap()
}

#[test]
fn two_tcp_compute_nodes_share_a_named_counter() {
    let (_servers, nodes) = servers(2);
    // The run's setup, from its own control connection (the driver's).
    let setup = RemoteControl::connect(nodes.clone(), &config()).unwrap();
    counter().setup_run(&setup).unwrap();
    let published = named::fetch(&setup, COUNTER).unwrap();
    assert_eq!(published.at.mn, MnId(1));
    let cns = [tcp_cn(0, &nodes), tcp_cn(1, &nodes)];
    let seen = std::thread::scope(|s| {
        let hs: Vec<_> = cns
            .iter()
            .map(|cn| s.spawn(|| faa_all(cn, &Arc::new(counter()))))
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_one_sequence(seen);
    // A second run's setup against the same nodes is refused by name.
    let e = counter().setup_run(&setup).unwrap_err();
    assert!(e.to_string().contains("already published"), "{e}");
}

/// Goal: every refusal of a named call comes back over the wire as the node's typed
/// error on a connection that keeps working, and entries the node would refuse for
/// their size are refused before they are sent.
#[test]
fn remote_named_calls_report_refusals_and_keep_the_connection() {
    let (_servers, nodes) = servers(1);
    let c = RemoteControl::connect(nodes, &config()).unwrap();
    let mn = MnId(0);
    c.put_named(mn, "a", b"1").unwrap();
    assert!(matches!(
        c.put_named(mn, "a", b"2"),
        Err(ControlError::DuplicateName { .. })
    ));
    assert!(matches!(c.named(mn, "b"), Err(ControlError::UnknownName { .. })));
    let long = "x".repeat(dmtx_memnode::NAME_BYTES_MAX + 1);
    match c.try_put_named(mn, &long, b"") {
        Err(NetError::Control(ControlError::NamedLimit { what, .. })) => assert_eq!(what, NamedLimitKind::NameBytes),
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        c.put_named(MnId(3), "a", b""),
        Err(ControlError::UnknownNode { mn_count: 1, .. })
    ));
    for i in 1..dmtx_memnode::NAMED_COUNT_MAX {
        c.put_named(mn, &format!("k{i}"), b"").unwrap();
    }
    match c.put_named(mn, "full", b"") {
        Err(ControlError::NamedLimit { what, limit, .. }) => assert_eq!((what, limit), (NamedLimitKind::Count, 256)),
        r => panic!("{r:?}"),
    }
    assert_eq!(c.named(mn, "a").unwrap(), b"1");
    assert_eq!(c.names(mn).unwrap().len(), dmtx_memnode::NAMED_COUNT_MAX);
}

/// Goal: a `--backing` node restarted on its file still has the run's named entries.
#[test]
fn a_backed_node_keeps_named_entries_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("dmtx-named-backed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let serve = |listen: SocketAddr| {
        let mut c = ServerConfig::new(MnId(0), 1 << 20);
        c.cluster_id = 11;
        c.token = TOKEN.to_vec();
        c.listen = listen;
        c.backing = Some(dir.join("mn0"));
        Server::bind(c).unwrap().spawn()
    };
    let s = serve("127.0.0.1:0".parse().unwrap());
    let nodes = vec![(MnId(0), s.local_addr())];
    let c = RemoteControl::connect(nodes.clone(), &config()).unwrap();
    let area = named::alloc_and_publish(&c, "log/discovery", MnId(0), 4096, 64, b"v1").unwrap();
    drop(c);
    s.shutdown();
    s.join();
    let s = serve("127.0.0.1:0".parse().unwrap());
    let c = RemoteControl::connect(vec![(MnId(0), s.local_addr())], &config()).unwrap();
    assert_eq!(named::fetch(&c, "log/discovery").unwrap(), area);
    s.shutdown();
    s.join();
    std::fs::remove_dir_all(&dir).unwrap();
}
