//! `dmtx bench --cluster FILE --cn I`: one compute node of a run whose compute nodes are
//! separate processes (on separate hosts), meeting at the memory nodes.
//!
//! # How the processes agree
//!
//! Every CN process is started with the same flags but its own `--cn`. They meet
//! through the memory nodes' named metadata (the init-time control RPC, `PUT_NAMED` /
//! `NAMED` / `NAMES`, on memory node 0), which every CN reaches anyway; no extra port
//! and no clock agreement is needed:
//!
//! 1. **Loading.** The *loader*, the compute node with the smallest id in the cluster
//!    file (CN 0 in a dense list), refuses memory nodes that hold a run already (a run
//!    needs fresh memory nodes, as with one CN), runs the protocol's `setup_run`, loads
//!    the tables and then publishes [`RUN_NAME`]: a random run id and a fingerprint of
//!    the settings every CN must share (protocol, workload, knobs, threads, coroutines,
//!    seed, stop rule, warm-up, `--check`). The other CNs poll for it (every
//!    [`LOAD_POLL`], at most [`LOAD_WAIT_MAX`]) and refuse a fingerprint that is not
//!    their own, naming both settings.
//! 2. **Start.** Each CN connects (fetching the catalog the loader wrote), sets up its
//!    threads and coordinators, publishes `dmtx/run/<run id>/ready/<cn>` and polls
//!    `NAMES` every [`READY_POLL`] until every CN of the file is ready (at most
//!    [`READY_WAIT_MAX`]). It starts when it sees the last one: the CNs' starts differ
//!    by at most one poll interval plus one control round trip.
//! 3. **Stop.** With `--duration` each CN stops that long after its own start (so
//!    within the same skew of the others); with `--txns N` each CN commits its share
//!    ([`txns_share`]: `N / CNs`, the first `N % CNs` CNs one more).
//!
//! Each CN writes its own record (`-o`), carrying `cn` (its id, the CN count, the run
//! id and its committed-latency histogram, so `dmtx report` can merge the run's records
//! into cluster totals with exact percentiles), and its own history (`--history`), whose
//! times are Unix-epoch nanoseconds of its host's wall clock so that `dmtx check` can
//! merge them. A CN sees only its own coordinators, so with more than one CN neither
//! the workload's invariant nor the history is checked per CN: check the histories
//! together (`dmtx check H0 H1 ...`), as `dmtx cluster up --compute-nodes` does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmtx_memnode::{Control, ControlError};
use dmtx_verbs::MnId;

use crate::config::{BenchConfig, StopRule};

/// The named entry the loader publishes once the tables are loaded.
pub const RUN_NAME: &str = "dmtx/run";
/// How often a CN looks for the loader's [`RUN_NAME`].
pub const LOAD_POLL: Duration = Duration::from_millis(20);
/// The longest a CN waits for the loader to load the tables.
pub const LOAD_WAIT_MAX: Duration = Duration::from_secs(600);
/// How often a ready CN looks for the others.
pub const READY_POLL: Duration = Duration::from_millis(2);
/// The longest a ready CN waits for the others.
pub const READY_WAIT_MAX: Duration = Duration::from_secs(120);
/// Where the run's entries live: every CN reaches memory node 0.
const META_MN: MnId = MnId(0);

/// Why compute nodes could not join one run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// Reading or publishing the run's named entries failed.
    #[error("--cn {cn}: {error}")]
    Control {
        /// This CN.
        cn: u16,
        /// The control error.
        error: ControlError,
    },
    /// The memory nodes hold a run already.
    #[error("--cn {cn}: the memory nodes already hold run {run_id:016x}; every run needs freshly started memory nodes: restart them")]
    Stale {
        /// This CN.
        cn: u16,
        /// The run found.
        run_id: u64,
    },
    /// The loader runs other settings than this CN.
    #[error("--cn {cn}: the loader (cn {loader}) runs `{theirs}`, this compute node `{ours}`; start every compute node with the same flags but --cn")]
    Mismatch {
        /// This CN.
        cn: u16,
        /// The loader's id.
        loader: u16,
        /// The loader's settings.
        theirs: String,
        /// Ours.
        ours: String,
    },
    /// A published entry this build cannot read.
    #[error(
        "--cn {cn}: the entry `{RUN_NAME}` on mn0 is not a run record of this dmtx build; restart the memory nodes"
    )]
    Malformed {
        /// This CN.
        cn: u16,
    },
    /// Waited too long for the loader or the other CNs.
    #[error("--cn {cn}: {waiting} after {after:?}; start `dmtx bench --cluster FILE --cn ID` with the same flags for every compute node of the cluster file")]
    Timeout {
        /// This CN.
        cn: u16,
        /// What did not come.
        waiting: String,
        /// How long it waited.
        after: Duration,
    },
    /// This CN cannot listen for the others' messages.
    #[error("--cn {cn}: {error}")]
    Listen {
        /// This CN.
        cn: u16,
        /// Why.
        error: dmtx_net::msg::MsgSetupError,
    },
    /// Ctrl-C while waiting.
    #[error("--cn {cn}: interrupted while waiting for the other compute nodes")]
    Interrupted {
        /// This CN.
        cn: u16,
    },
}

/// This process's place among the cluster file's compute nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// Its id (`--cn`).
    pub id: u16,
    /// Every CN id of the file, ascending.
    pub ids: Vec<u16>,
    /// Where it listens for CN-to-CN messages.
    pub addr: SocketAddr,
    /// The settings every CN must share ([`settings`]), of the whole run.
    pub settings: String,
}

impl Role {
    /// The role `cfg` gives this process (`--cluster FILE --cn I`), if any.
    pub fn of(cfg: &BenchConfig) -> Option<Self> {
        let view = cfg.cluster.as_ref()?;
        let id = view.cn?;
        let mut ids: Vec<u16> = view.compute_nodes.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        let addr = view.compute_nodes.iter().find(|c| c.id == id)?.address;
        Some(Self {
            id,
            ids,
            addr,
            settings: settings(cfg),
        })
    }

    /// `cfg` as this CN runs it: with its share of `--txns`.
    pub fn share_of(&self, cfg: &BenchConfig) -> BenchConfig {
        let mut mine = cfg.clone();
        mine.stop = stop_share(cfg.stop, self);
        mine
    }

    /// Whether this CN loads the tables: the smallest id does.
    pub fn loads(&self) -> bool {
        self.ids.first() == Some(&self.id)
    }

    /// Position among the CNs.
    fn index(&self) -> usize {
        self.ids
            .iter()
            .position(|&i| i == self.id)
            .expect("a role's id is listed")
    }
}

/// Compute node `index`'s share of `--txns n` over `cns` CNs: `n / cns`, and one more
/// for each of the first `n % cns` (the shares sum to `n`).
pub fn txns_share(n: u64, index: usize, cns: usize) -> u64 {
    assert!(index < cns, "CN index {index} of {cns}");
    let cns = cns as u64;
    n / cns + u64::from((index as u64) < n % cns)
}

/// The `--txns` this process runs under `role`: its share.
pub fn stop_share(stop: StopRule, role: &Role) -> StopRule {
    match stop {
        StopRule::Txns(n) => StopRule::Txns(txns_share(n, role.index(), role.ids.len()).max(1)),
        d => d,
    }
}

/// The settings every CN of a run must share, as one line (compared by the loader's
/// fingerprint, and shown when they differ).
pub fn settings(cfg: &BenchConfig) -> String {
    let stop = match cfg.stop {
        StopRule::Duration(d) => format!("{d:?}"),
        StopRule::Txns(n) => format!("{n} txns"),
    };
    let knobs: Vec<String> = cfg.knobs_effective.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "{} {} {}x{} seed {} {stop} warmup {:?}{} {}",
        cfg.protocol,
        cfg.workload,
        cfg.threads,
        cfg.coroutines,
        cfg.seed,
        cfg.warmup,
        if cfg.check { " check" } else { "" },
        knobs.join(",")
    )
}

fn fingerprint(s: &str) -> u64 {
    // FNV-1a: stable across builds and hosts.
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A fresh run id: random, never 0.
fn fresh_run_id() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    let id = match random {
        Ok(()) => u64::from_le_bytes(b),
        // No /dev/urandom: time and pid differ between runs well enough for an id.
        Err(_) => fingerprint(&format!(
            "{} {}",
            crate::results::wall_clock_unix_s(),
            std::process::id()
        )),
    };
    id.max(1)
}

/// One CN's part in a multi-process run (see the module doc).
pub struct Join {
    role: Role,
    control: Arc<dyn Control>,
    /// The settings line and its fingerprint.
    settings: String,
    /// The run id, once the loader has published it.
    run_id: u64,
}

/// The value of [`RUN_NAME`]: run id, fingerprint, the loader's settings line.
fn encode_run(run_id: u64, settings: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + settings.len());
    v.extend_from_slice(&run_id.to_le_bytes());
    v.extend_from_slice(&fingerprint(settings).to_le_bytes());
    // The line is for the message only: cut it to what an entry holds.
    let room = dmtx_memnode::NAMED_VALUE_BYTES_MAX - 16;
    let mut cut = settings.len().min(room);
    while !settings.is_char_boundary(cut) {
        cut -= 1;
    }
    v.extend_from_slice(&settings.as_bytes()[..cut]);
    v
}

fn decode_run(v: &[u8]) -> Option<(u64, u64, String)> {
    let id = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
    let fp = u64::from_le_bytes(v.get(8..16)?.try_into().ok()?);
    Some((id, fp, String::from_utf8_lossy(&v[16..]).into_owned()))
}

impl Join {
    /// Join as `role` through `control`.
    pub fn new(role: Role, control: Arc<dyn Control>) -> Self {
        Self {
            settings: role.settings.clone(),
            role,
            control,
            run_id: 0,
        }
    }

    /// This CN's role.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The run id (after [`Join::tables_loaded`]), as the records print it.
    pub fn run_id(&self) -> String {
        format!("{:016x}", self.run_id)
    }

    /// Whether this CN checks the invariant and history alone: only when it is the only CN.
    pub fn checks_alone(&self) -> bool {
        self.role.ids.len() == 1
    }

    fn control_err(&self, error: ControlError) -> JoinError {
        JoinError::Control {
            cn: self.role.id,
            error,
        }
    }

    /// The entry under `name` on mn0, `None` when nothing is published there.
    fn named(&self, name: &str) -> Result<Option<Vec<u8>>, JoinError> {
        match self.control.named(META_MN, name) {
            Ok(v) => Ok(Some(v)),
            Err(ControlError::UnknownName { .. }) => Ok(None),
            Err(e) => Err(self.control_err(e)),
        }
    }

    /// The loader, before it loads: refuse memory nodes that hold a run already.
    pub fn before_load(&self) -> Result<(), JoinError> {
        if !self.role.loads() {
            return Ok(());
        }
        match self.named(RUN_NAME)? {
            None => Ok(()),
            Some(v) => Err(JoinError::Stale {
                cn: self.role.id,
                run_id: decode_run(&v).map_or(0, |r| r.0),
            }),
        }
    }

    /// The loader publishes the run; the others wait for it and compare settings.
    pub fn tables_loaded(&mut self, stop: &AtomicBool) -> Result<(), JoinError> {
        let cn = self.role.id;
        if self.role.loads() {
            self.run_id = fresh_run_id();
            return self
                .control
                .put_named(META_MN, RUN_NAME, &encode_run(self.run_id, &self.settings))
                .map_err(|e| self.control_err(e));
        }
        let since = Instant::now();
        let v = loop {
            if let Some(v) = self.named(RUN_NAME)? {
                break v;
            }
            if stop.load(Ordering::Relaxed) {
                return Err(JoinError::Interrupted { cn });
            }
            if since.elapsed() > LOAD_WAIT_MAX {
                return Err(JoinError::Timeout {
                    cn,
                    waiting: format!("the loader (cn {}) has not loaded the tables", self.role.ids[0]),
                    after: LOAD_WAIT_MAX,
                });
            }
            std::thread::sleep(LOAD_POLL);
        };
        let (run_id, fp, theirs) = decode_run(&v).ok_or(JoinError::Malformed { cn })?;
        if fp != fingerprint(&self.settings) {
            return Err(JoinError::Mismatch {
                cn,
                loader: self.role.ids[0],
                theirs,
                ours: self.settings.clone(),
            });
        }
        self.run_id = run_id;
        Ok(())
    }

    fn ready_prefix(&self) -> String {
        format!("{RUN_NAME}/{:016x}/ready/", self.run_id)
    }

    /// Say this CN is ready and wait until every CN is.
    pub fn start_barrier(&self, stop: &AtomicBool) -> Result<(), JoinError> {
        self.barrier(&self.ready_prefix(), "did not join", stop)
    }

    /// Say this CN's coordinators are done and wait until every CN's are: until then its
    /// worker threads keep serving the others' CN↔CN requests (a messaging protocol's
    /// locks or leases live on the node that serves them).
    pub fn end_barrier(&self, stop: &AtomicBool) -> Result<(), JoinError> {
        self.barrier(
            &format!("{RUN_NAME}/{:016x}/done/", self.run_id),
            "did not finish",
            stop,
        )
    }

    /// Publish `{prefix}{cn}` and wait until every CN of the run has.
    fn barrier(&self, prefix: &str, missing_why: &str, stop: &AtomicBool) -> Result<(), JoinError> {
        assert!(self.run_id != 0, "the run id is known before a barrier");
        let cn = self.role.id;
        self.control
            .put_named(META_MN, &format!("{prefix}{cn}"), &[1])
            .map_err(|e| self.control_err(e))?;
        let since = Instant::now();
        loop {
            let names = self.control.names(META_MN).map_err(|e| self.control_err(e))?;
            let missing: Vec<u16> = self
                .role
                .ids
                .iter()
                .copied()
                .filter(|id| !names.iter().any(|n| n.strip_prefix(prefix) == Some(&id.to_string())))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if stop.load(Ordering::Relaxed) {
                return Err(JoinError::Interrupted { cn });
            }
            if since.elapsed() > READY_WAIT_MAX {
                let missing: Vec<String> = missing.iter().map(|m| format!("cn {m}")).collect();
                return Err(JoinError::Timeout {
                    cn,
                    waiting: format!("{} {missing_why}", missing.join(", ")),
                    after: READY_WAIT_MAX,
                });
            }
            std::thread::sleep(READY_POLL);
        }
    }
}

/// What a CN's record says of its place in a multi-process run (`cn` in the JSON).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CnRecord {
    /// This CN's id.
    pub id: u16,
    /// Compute nodes in the run.
    pub compute_nodes: u16,
    /// The run id every CN of the run shares (16 hex digits).
    pub run_id: String,
    /// The committed-latency histogram (all types), as `[ns, count]` pairs of its
    /// recorded buckets: `dmtx report` merges them into the run's percentiles.
    pub latency_ns: Vec<(u64, u64)>,
}

impl Join {
    /// This CN's part of the record, from its merged counters.
    pub fn record(&self, stats: &crate::stats::RunStats) -> CnRecord {
        let total = stats.total();
        CnRecord {
            id: self.role.id,
            compute_nodes: self.role.ids.len() as u16,
            run_id: self.run_id(),
            latency_ns: total
                .latency_ns
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }

    /// CN↔CN messaging over TCP: this CN's listener on its cluster-file address, the
    /// other CNs as its peers (each with `threads` worker threads: every CN runs the
    /// same flags).
    pub fn messaging(
        &self,
        view: &crate::cluster::ClusterView,
        threads: u16,
    ) -> Result<dmtx_net::msg::TcpMsgFabric, crate::error::RunError> {
        let tcp = view.tcp_config()?;
        let peers = view
            .compute_nodes
            .iter()
            .map(|c| dmtx_net::msg::PeerNode {
                cn: c.id,
                addr: c.address,
                threads,
            })
            .collect();
        dmtx_net::msg::TcpMsgFabric::bind(self.role.id, self.role.addr, peers, tcp).map_err(|error| {
            JoinError::Listen {
                cn: self.role.id,
                error,
            }
            .into()
        })
    }

    /// Why this CN does not check the workload's invariant alone, when it does not.
    pub fn unchecked_invariant(&self) -> Option<String> {
        (!self.checks_alone()).then(|| {
            format!(
                "not checked by cn {} alone: its coordinators are 1 of {} compute nodes'",
                self.role.id,
                self.role.ids.len()
            )
        })
    }
}

/// Nanoseconds to add to a reading of `clock` to make it Unix-epoch nanoseconds of this
/// host's wall clock (measured once: histories of several hosts are then comparable up
/// to the hosts' clock offset).
///
/// The workspace bans `SystemTime::now` so that nothing a run computes depends on the
/// wall clock; this only relabels a `--cn` history's times after the run (never on the
/// simulator), so that histories of several hosts can be compared.
#[allow(clippy::disallowed_methods)]
pub fn unix_offset_ns(clock: &dyn dmtx_runtime::Clock) -> u64 {
    let unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    unix_ns.saturating_sub(clock.now_ns())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmtx_memnode::LocalCluster;

    fn role(id: u16, ids: &[u16], cfg: &BenchConfig) -> Role {
        Role {
            id,
            ids: ids.to_vec(),
            addr: "127.0.0.1:1".parse().unwrap(),
            settings: settings(cfg),
        }
    }

    #[test]
    fn txns_shares_sum_to_the_budget() {
        for (n, cns) in [(10u64, 3usize), (2, 3), (9, 3), (1000, 7)] {
            let shares: Vec<u64> = (0..cns).map(|i| txns_share(n, i, cns)).collect();
            assert_eq!(shares.iter().sum::<u64>(), n, "{n} over {cns}: {shares:?}");
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
        assert_eq!(txns_share(10, 0, 3), 4);
        assert_eq!(txns_share(10, 2, 3), 3);
    }

    fn cfg() -> BenchConfig {
        BenchConfig::from_args(&crate::config::BenchArgs::default()).unwrap()
    }

    /// Goal: three CNs meet through the memory nodes: the loader publishes, the others
    /// get its run id, and nobody passes the start barrier before all are ready.
    /// Method: three threads on one in-process cluster; CN 2 arrives late.
    #[test]
    fn three_cns_meet_at_the_memory_nodes() {
        let cluster: Arc<dyn Control> = Arc::new(LocalCluster::new(1, 1 << 20));
        let stop = AtomicBool::new(false);
        let cfg = cfg();
        let passed = std::sync::atomic::AtomicUsize::new(0);
        let ids = std::thread::scope(|s| {
            let hs: Vec<_> = [0u16, 1, 2]
                .into_iter()
                .map(|id| {
                    let (cluster, stop, cfg, passed) = (&cluster, &stop, &cfg, &passed);
                    s.spawn(move || {
                        if id == 2 {
                            std::thread::sleep(Duration::from_millis(100));
                            assert_eq!(passed.load(Ordering::SeqCst), 0, "nobody starts without cn 2");
                        }
                        let mut j = Join::new(role(id, &[0, 1, 2], cfg), Arc::clone(cluster));
                        j.before_load().unwrap();
                        j.tables_loaded(stop).unwrap();
                        j.start_barrier(stop).unwrap();
                        passed.fetch_add(1, Ordering::SeqCst);
                        j.run_id()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        assert!(ids.iter().all(|i| i == &ids[0]), "{ids:?}");
        // The memory nodes now hold a run: a new loader refuses them.
        let j = Join::new(role(0, &[0, 1], &cfg), Arc::clone(&cluster));
        assert!(matches!(j.before_load(), Err(JoinError::Stale { .. })));
    }

    #[test]
    fn a_cn_with_other_settings_is_refused() {
        let cluster: Arc<dyn Control> = Arc::new(LocalCluster::new(1, 1 << 20));
        let stop = AtomicBool::new(false);
        let a = cfg();
        let mut b = cfg();
        b.seed = 99;
        let mut loader = Join::new(role(0, &[0, 1], &a), Arc::clone(&cluster));
        loader.tables_loaded(&stop).unwrap();
        let mut other = Join::new(role(1, &[0, 1], &b), Arc::clone(&cluster));
        let e = other.tables_loaded(&stop).unwrap_err().to_string();
        assert!(e.contains("seed 1") && e.contains("seed 99"), "{e}");
    }

    /// Goal: the messaging a `--cn` compute node builds listens on its cluster-file
    /// address and reaches the other CNs of the file with their thread counts and the
    /// cluster's credentials. Method: two CNs of one parsed cluster file on free
    /// loopback ports; a one-way entry from cn0's thread 0 to cn1's thread 1.
    #[test]
    fn cns_of_a_cluster_file_message_each_other_over_tcp() {
        use dmtx_verbs::msg::{Entry, EntryKind, Event, MsgFabric, WorkerAddr};
        let dir = std::env::temp_dir().join(format!("dmtx-cn-msg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&token)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"0123456789abcdef0123\n"))
                .unwrap();
        }
        let ports: Vec<std::net::TcpListener> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let mut text = "format = \"dmtx-cluster\"\nversion = 1\ncluster_id = 5\nepoch = 0\ntoken_file = \"token\"\nreplicas = 1\n\n[[memory_nodes]]\nid = 0\naddress = \"127.0.0.1:9\"\nbytes = \"1MiB\"\n".to_string();
        for (i, l) in ports.iter().enumerate() {
            text += &format!(
                "\n[[compute_nodes]]\nid = {i}\naddress = \"{}\"\n",
                l.local_addr().unwrap()
            );
        }
        drop(ports);
        let path = dir.join("cluster.toml");
        let view = crate::cluster::ClusterView::parse(&text, &path).unwrap();
        let control: Arc<dyn Control> = Arc::new(LocalCluster::new(1, 1 << 20));
        let mut cfg = cfg();
        cfg.threads = 2;
        let mut join = |id: u16| {
            let mut v = view.clone();
            v.select_cn(id, &path).unwrap();
            cfg.cluster = Some(v);
            Join::new(Role::of(&cfg).unwrap(), Arc::clone(&control))
        };
        let (a, b) = (join(0), join(1));
        let fa = a.messaging(&view, cfg.threads).unwrap();
        let fb = b.messaging(&view, cfg.threads).unwrap();
        assert_eq!(fb.local_addr(), view.compute_nodes[1].address);
        assert_eq!(fa.workers().len(), 4, "2 CNs x 2 threads");
        let (from, to) = (fa.mailbox(0).unwrap(), fb.mailbox(1).unwrap());
        let entry = Entry {
            kind: EntryKind::OneWay,
            retry: false,
            id: 7,
            payload: b"hello",
        };
        from.push(WorkerAddr::new(1, 1), entry).unwrap();
        let since = Instant::now();
        let mut got = None;
        while got.is_none() && since.elapsed() < Duration::from_secs(10) {
            from.flush();
            to.drain(&mut |e| {
                if let Event::Entry { from, entry } = e {
                    got = Some((from, entry.id, entry.payload.to_vec()));
                }
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, Some((WorkerAddr::new(0, 0), 7, b"hello".to_vec())));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_cn_times_out_or_is_interrupted() {
        let cluster: Arc<dyn Control> = Arc::new(LocalCluster::new(1, 1 << 20));
        let stop = AtomicBool::new(false);
        let cfg = cfg();
        let mut j = Join::new(role(0, &[0, 1], &cfg), Arc::clone(&cluster));
        j.tables_loaded(&stop).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(matches!(j.start_barrier(&stop), Err(JoinError::Interrupted { cn: 0 })));
    }
}
