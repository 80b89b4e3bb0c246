//! Clusters for the suite: memory nodes in one process, tables created with the
//! protocol's layout and any replica count, compute nodes on `mem`, over `tcp` or on a `Sim`, and
//! scans that read quiesced memory straight from the regions (no transport, so the same
//! scan serves every transport).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use dmtx_memnode::server::{Server, ServerConfig, ServerHandle};
use dmtx_memnode::LocalCluster;
use dmtx_net::msg::{PeerNode, TcpMsgFabric};
use dmtx_net::{RemoteControl, TcpConfig, TcpFabric};
use dmtx_runtime::{Cn, Protocol, RealClock, RpcConfig};
use dmtx_sim::{FaultScript, Node, Sim, SimConfig, SimFabric, SimMsgNet};
use dmtx_store::{create_table, placement, Catalog, StoreError, TableBuilder, TableSpec, BUCKET_HEADER_BYTES};
use dmtx_verbs::msg::MemMsgNet;
use dmtx_verbs::{MnId, Region};

use crate::bank;

/// Memory nodes of every suite cluster: enough for 3 replicas.
pub const MNS: usize = 3;
/// Region bytes per memory node (sparse: untouched pages cost nothing).
pub const REGION_BYTES: u64 = 64 << 20;
/// The cluster id the `tcp` servers and clients of the suite name in HELLO.
const TCP_CLUSTER_ID: u64 = 0x5_0173;

/// Where the coordinators run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// In-process verbs, one OS thread per worker, with tears injected by stalling READs
    /// and WRITEs of hot records at seed-chosen words ([`crate::contended`]).
    Mem,
    /// The deterministic simulator (it tears READs racing WRITEs by its own model).
    Sim,
    /// The memory nodes served over TCP on loopback (`dmtx-net`'s client, the memnode
    /// server), CN↔CN messages over TCP too; threads and tears as on [`Transport::Mem`]
    /// (the injector stalls the server's op on the node's region; each connection has a
    /// serving thread of its own, so the stall holds up that connection only).
    Tcp,
}

/// The shape of one suite case.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Replicas of every table (1..=[`MNS`]).
    pub replicas: usize,
    /// Value bytes of the bank table (at least [`bank::VALUE_BYTES_MIN`]); pick sizes
    /// that are not a multiple of 8 to exercise partial words.
    pub value_bytes: u32,
    /// Accounts in the bank table: few, so transactions conflict.
    pub keys: u64,
    /// Records the bank table can hold (inserts included).
    pub capacity: u64,
    /// Slots per bucket of the bank table.
    pub slots_per_bucket: u32,
    /// Compute nodes.
    pub compute_nodes: u16,
    /// Worker threads per compute node.
    pub threads: u16,
    /// Coordinators per worker thread.
    pub coroutines: u16,
    /// Transactions each coordinator runs.
    pub txns: u32,
    /// Run only transfers (two read-write records) instead of the bank's mix.
    pub transfers_only: bool,
    /// Hold each coordinator's transactions to its session order in the isolation
    /// check (the checker's default; see `dmtx_check::CheckOptions::sessions`).
    pub sessions: bool,
}

impl Setup {
    /// A contended case: 8 accounts of `value_bytes`, `replicas` replicas, one compute
    /// node of 2 threads × 4 coordinators, 150 transactions each.
    pub fn new(replicas: usize, value_bytes: u32) -> Self {
        Self {
            replicas,
            value_bytes,
            keys: 8,
            capacity: 64,
            slots_per_bucket: 4,
            compute_nodes: 1,
            threads: 2,
            coroutines: 4,
            txns: 150,
            transfers_only: false,
            sessions: true,
        }
    }
}

/// The compute nodes of a threaded run (`mem` or `tcp`) and, over `tcp`, the memory-node
/// servers they reach; dropped compute nodes first.
pub struct Threaded {
    /// The compute nodes, by id.
    pub cns: Vec<Cn>,
    _servers: Vec<ServerHandle>,
}

/// A cluster of [`MNS`] memory nodes in this process with `proto`'s tables on it.
pub struct Env<P: Protocol> {
    /// The memory nodes (also the `Control` of every compute node).
    pub cluster: LocalCluster,
    /// The protocol instance every coordinator shares.
    pub proto: Arc<P>,
    /// The case.
    pub setup: Setup,
    /// The host clock every compute node of a threaded run shares (one origin, so the
    /// histories' real-time order across nodes is the host's).
    pub clock: Arc<RealClock>,
}

impl<P: Protocol> Env<P> {
    /// The bank table ([`bank`], id [`bank::TABLE`]) with `setup.keys` accounts of
    /// [`bank::INITIAL`].
    pub fn bank(proto: P, setup: Setup) -> Self {
        assert!(
            setup.value_bytes >= bank::VALUE_BYTES_MIN,
            "bank values of {} bytes cannot hold a balance, a stamp and a check; use at least {}",
            setup.value_bytes,
            bank::VALUE_BYTES_MIN
        );
        let mut spec = TableSpec::new(bank::TABLE.id(), "bank", setup.value_bytes, setup.capacity);
        spec.slots_per_bucket = setup.slots_per_bucket;
        let keys = setup.keys;
        let vb = setup.value_bytes as usize;
        Self::with_tables(proto, setup, &[spec], |_, insert| {
            let mut v = vec![0u8; vb];
            for k in 0..keys {
                bank::encode(k, bank::INITIAL, 0, &mut v);
                insert(k, &v)?;
            }
            Ok(())
        })
    }

    /// Tables `specs`, each filled by `load(table id, insert)`, with `setup.replicas`
    /// replicas placed round-robin.
    pub fn with_tables(
        proto: P,
        setup: Setup,
        specs: &[TableSpec],
        mut load: impl FnMut(u32, &mut dyn FnMut(u64, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError>,
    ) -> Self {
        assert!((1..=MNS).contains(&setup.replicas), "replicas must be 1..={MNS}");
        let cluster = LocalCluster::new(MNS, REGION_BYTES);
        for spec in specs {
            let mut b = TableBuilder::new(spec.clone(), proto.layout());
            load(spec.id, &mut |k, v| b.insert(k, v)).unwrap_or_else(|e| panic!("table `{}`: {e}", spec.name));
            let replicas = placement(spec.id, MNS, setup.replicas).expect("replicas checked above");
            create_table(&cluster, b, &replicas).unwrap_or_else(|e| panic!("table `{}`: {e}", spec.name));
        }
        proto
            .setup_run(&cluster)
            .unwrap_or_else(|e| panic!("{}: setup_run: {e}", P::NAME));
        Self {
            cluster,
            proto: Arc::new(proto),
            setup,
            clock: Arc::new(RealClock::new()),
        }
    }

    /// Compute node `id` on the `mem` transport, with its own address cache.
    pub fn mem_cn(&self, id: u16) -> Cn {
        Cn::connect(
            id,
            Arc::new(self.cluster.fabric().clone()),
            Arc::new(self.cluster.clone()),
            self.clock.clone(),
        )
        .expect("connect to an in-process cluster")
    }

    /// The `setup.compute_nodes` compute nodes of a `mem` run; for a protocol that
    /// messages other compute nodes, each with a mailbox per worker thread
    /// (`0..setup.threads`) on one in-memory network. A worker beyond those threads has
    /// no mailbox: take it from [`Env::mem_cn`].
    pub fn mem_cns(&self) -> Vec<Cn> {
        self.mem_cns_with_mailboxes(self.setup.threads)
    }

    /// [`Env::mem_cns`] with `mailboxes` workers per node on the messaging network
    /// (threads `0..mailboxes`; at least `setup.threads`).
    pub fn mem_cns_with_mailboxes(&self, mailboxes: u16) -> Vec<Cn> {
        assert!(mailboxes >= self.setup.threads, "every worker thread needs a mailbox");
        let nodes = self.setup.compute_nodes;
        let cns = (0..nodes).map(|id| self.mem_cn(id));
        if !self.proto.messaging() {
            return cns.collect();
        }
        let net = MemMsgNet::new(nodes, mailboxes);
        cns.map(|cn| {
            let fabric = Arc::new(net.fabric(cn.id));
            cn.with_messaging(fabric, RpcConfig::default())
        })
        .collect()
    }

    /// The `setup.compute_nodes` compute nodes of a threaded run on `transport` (`Mem` or
    /// `Tcp`), messaging as in [`Env::mem_cns_with_mailboxes`]. Over `tcp` each memory
    /// node is served (its region in place) on a loopback port, each compute node has
    /// its own client id, and messages go over TCP between per-node listeners.
    pub fn threaded(&self, transport: Transport, mailboxes: u16) -> Threaded {
        match transport {
            Transport::Mem => Threaded {
                cns: self.mem_cns_with_mailboxes(mailboxes),
                _servers: Vec::new(),
            },
            Transport::Tcp => self.tcp_cns(mailboxes),
            Transport::Sim => panic!("a sim run is not threaded: use Env::sim"),
        }
    }

    fn tcp_cns(&self, mailboxes: u16) -> Threaded {
        assert!(mailboxes >= self.setup.threads, "every worker thread needs a mailbox");
        let servers: Vec<ServerHandle> = (0..MNS)
            .map(|i| {
                let node = Arc::clone(self.cluster.node(MnId(i as u16)).expect("node of the cluster"));
                let mut config = ServerConfig::new(MnId(i as u16), REGION_BYTES);
                config.cluster_id = TCP_CLUSTER_ID;
                // A serving thread per connection (each worker's, each node's control
                // one): a stalled op then holds up only its own connection, as on `mem`
                // it holds up only its worker.
                config.threads = self.setup.compute_nodes as usize * (mailboxes as usize + 1) + 1;
                Server::serving(config, node).expect("serve a node on loopback").spawn()
            })
            .collect();
        let nodes: Vec<(MnId, SocketAddr)> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (MnId(i as u16), s.local_addr()))
            .collect();
        let count = self.setup.compute_nodes;
        let listeners: Vec<TcpListener> = if self.proto.messaging() {
            (0..count)
                .map(|_| TcpListener::bind("127.0.0.1:0").expect("a loopback port"))
                .collect()
        } else {
            Vec::new()
        };
        let peers: Vec<PeerNode> = listeners
            .iter()
            .enumerate()
            .map(|(cn, l)| PeerNode {
                cn: cn as u16,
                addr: l.local_addr().expect("a bound listener"),
                threads: mailboxes,
            })
            .collect();
        let mut listeners = listeners.into_iter();
        let cns = (0..count)
            .map(|id| {
                let mut tcp = TcpConfig::new(TCP_CLUSTER_ID, b"");
                tcp.client_id = id as u32 + 1;
                let control = RemoteControl::connect(nodes.clone(), &tcp).expect("control connections on loopback");
                let fabric = TcpFabric::connect(nodes.clone(), tcp.clone()).expect("connect on loopback");
                let cn = Cn::connect(id, Arc::new(fabric), Arc::new(control), self.clock.clone())
                    .expect("connect to the served cluster");
                match listeners.next() {
                    Some(l) => {
                        let msg = TcpMsgFabric::with_listener(id, l, peers.clone(), tcp).expect("a messaging listener");
                        cn.with_messaging(Arc::new(msg), RpcConfig::default())
                    }
                    None => cn,
                }
            })
            .collect();
        Threaded { cns, _servers: servers }
    }

    /// A simulation of these memory nodes seeded `seed` with `faults` installed, and
    /// `setup.compute_nodes` compute nodes on it (each with its probes, so fault points
    /// fire, and a clock `5 µs × id` ahead and `50 ppm × id` fast). For a protocol that
    /// messages other compute nodes, also the simulated network its workers
    /// (`0..setup.threads` of each node) have mailboxes on.
    pub fn sim(&self, seed: u64, faults: Option<FaultScript>) -> (Sim, Vec<Cn>, Option<Arc<SimMsgNet>>) {
        let sim = Sim::new(SimConfig::new(seed), self.regions());
        if let Some(f) = faults {
            sim.install_faults(f).expect("fault script installs");
        }
        let net = self
            .proto
            .messaging()
            .then(|| SimMsgNet::new(&sim, self.setup.compute_nodes, self.setup.threads));
        let cns = (0..self.setup.compute_nodes)
            .map(|id| {
                let fabric = Arc::new(SimFabric::new(&sim, id as u32));
                Cn::connect(
                    id,
                    fabric.clone(),
                    Arc::new(self.cluster.clone()),
                    // Each node's clock 5 µs further ahead and 50 ppm faster than the
                    // last: protocols that read clocks must live with skew and drift. It
                    // follows the script's clock faults (OOCC's drift guard).
                    Arc::new(
                        sim.node_clock(Node::Cn(id as u32), 5_000 * id as i64, 50 * id as i64)
                            .expect("a clock within bounds"),
                    ),
                )
                .expect("connect to the simulated cluster")
                .with_probes(fabric)
            })
            .map(|cn: Cn| match &net {
                Some(net) => {
                    let fabric = Arc::new(net.fabric(cn.id));
                    cn.with_messaging(fabric, RpcConfig::default())
                }
                None => cn,
            })
            .collect();
        (sim, cns, net)
    }

    /// The region of memory node `mn`.
    pub fn region(&self, mn: MnId) -> Arc<Region> {
        Arc::clone(self.cluster.node(mn).expect("node of the cluster").region())
    }

    /// Every memory node's region, by id.
    pub fn regions(&self) -> Vec<Arc<Region>> {
        (0..MNS).map(|i| self.region(MnId(i as u16))).collect()
    }

    /// The tables' metadata.
    pub fn catalog(&self) -> Catalog {
        Catalog::fetch(&self.cluster).expect("catalog of an in-process cluster")
    }

    /// Every record `(key, value, table-relative slot offset)` of `table` on replica
    /// `replica`, by key, read straight from memory (call it on a quiesced cluster).
    pub fn scan(&self, table: u32, replica: usize) -> Vec<(u64, Vec<u8>, u64)> {
        let catalog = self.catalog();
        let info = catalog.get(table).expect("table of the cluster");
        let shape = info.shape;
        let layout = self.proto.layout();
        let mut bucket = vec![0u8; shape.bucket_bytes as usize];
        let mut out = Vec::new();
        // Values a slot only points to are decoded from the value region, read whole.
        let mut region_bytes = Vec::new();
        if let Some(r) = shape.value_region {
            region_bytes = vec![0u8; r.bytes as usize];
            let ptr = info.ptr(replica, r.offset);
            self.region(ptr.mn)
                .read(ptr.offset, &mut region_bytes)
                .expect("value region in range");
        }
        let region = match shape.value_region {
            Some(r) => dmtx_store::RegionBytes::new(&info.meta.name, r, &region_bytes),
            None => dmtx_store::RegionBytes::none(&info.meta.name),
        };
        for idx in 0..shape.bucket_count + shape.overflow_count {
            let ptr = info.ptr(replica, shape.bucket_off(idx));
            self.region(ptr.mn)
                .read(ptr.offset, &mut bucket)
                .expect("bucket in range");
            let slots = bucket[BUCKET_HEADER_BYTES as usize..].chunks_exact(shape.slot_bytes as usize);
            for (s, slot) in slots.enumerate() {
                if let Some(key) = layout.key(slot) {
                    let mut value = vec![0u8; info.meta.value_bytes as usize];
                    layout
                        .value_into(slot, &region, &mut value)
                        .expect("a quiesced slot decodes");
                    out.push((key, value, shape.slot_off(idx, s as u32)));
                }
            }
        }
        out.sort_by_key(|r| r.0);
        out
    }

    /// The isolation check of this case: the protocol's level, sessions as set.
    pub fn check_options(&self) -> dmtx_check::CheckOptions {
        dmtx_check::CheckOptions {
            sessions: self.setup.sessions,
            ..dmtx_check::check_options(self.proto.isolation())
        }
    }

    /// Where each key of `table` lives (table-relative slot offset), from the primary.
    pub fn slots(&self, table: u32) -> BTreeMap<u64, u64> {
        self.scan(table, 0).into_iter().map(|(k, _, rel)| (k, rel)).collect()
    }

    /// `None` when every replica of `table` holds the same records as the primary, else
    /// what differs.
    pub fn replicas_differ(&self, table: u32) -> Option<String> {
        let primary: Vec<_> = self.scan(table, 0).into_iter().map(|(k, v, _)| (k, v)).collect();
        for r in 1..self.setup.replicas {
            let other: Vec<_> = self.scan(table, r).into_iter().map(|(k, v, _)| (k, v)).collect();
            if other != primary {
                let keys: Vec<u64> = primary
                    .iter()
                    .zip(&other)
                    .filter(|(a, b)| a != b)
                    .map(|(a, _)| a.0)
                    .collect();
                return Some(format!(
                    "replica {r} of table {table} differs from the primary ({} vs {} records; differing keys {keys:?})",
                    other.len(),
                    primary.len()
                ));
            }
        }
        None
    }
}
