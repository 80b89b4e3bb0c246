//! `dmtx bench` flags: parsed by clap into [`BenchArgs`], then validated once into a
//! [`BenchConfig`] that the driver trusts.
//!
//! Every refusal is a [`ConfigError`] whose message names the flag, the value given and
//! the fix; an unknown protocol, workload or knob lists the valid ones with a
//! "did you mean".

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dmtx_runtime::{KnobError, Knobs};

use crate::registry::{self, Entry};

/// Most worker threads per compute node: a transaction id holds 8 bits of thread id
/// (`CoordId::compact`).
pub const THREADS_MAX: u32 = 256;
/// Most coordinators per thread: a transaction id holds 8 bits of coroutine id.
pub const COROUTINES_MAX: u32 = 256;
/// Most memory nodes of an in-process cluster.
pub const MEMORY_NODES_MAX: u32 = 64;

/// Most compute nodes of a simulated run (transaction ids hold 8 bits of CN id).
pub const COMPUTE_NODES_MAX: u32 = 255;
/// Longest run, in seconds (a guard against a unit mistake such as `--duration 10000m`).
pub const DURATION_S_MAX: f64 = 7.0 * 24.0 * 3600.0;

/// Default run length when neither `--duration` nor `--txns` is given.
pub const DURATION_DEFAULT: Duration = Duration::from_secs(10);
/// Default simulated run length (`--transport sim`): 0.2 s of virtual time, several
/// hundred thousand transactions on the default setup.
pub const SIM_DURATION_DEFAULT: Duration = Duration::from_millis(200);
/// Default warm-up of a simulated run without --duration: virtual time before measuring.
pub const SIM_WARMUP_DEFAULT: Duration = Duration::from_millis(20);

/// The raw flags of `dmtx bench`, as clap parses them. Nothing here is validated yet:
/// call [`BenchConfig::from_args`].
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct BenchArgs {
    /// Protocol to run (`dmtx list` shows them).
    #[arg(long, short = 'p', default_value = "ford")]
    pub protocol: String,

    /// Workload to run (`dmtx list` shows them).
    #[arg(long, short = 'w', default_value = "smallbank")]
    pub workload: String,

    /// Worker threads of the compute node.
    #[arg(long, short = 't', default_value_t = 2)]
    pub threads: u32,

    /// Coordinators (coroutines) per worker thread.
    #[arg(long, short = 'c', default_value_t = 8)]
    pub coroutines: u32,

    /// Run length: seconds, or a number with `ms`, `s`, `m` [default: 10s, or 200ms of
    /// virtual time on --transport sim, unless --txns].
    #[arg(long, short = 'd', value_name = "TIME")]
    pub duration: Option<String>,

    /// Run this long first without measuring (caches and queues fill); then --duration
    /// is measured [default: 0, or 20ms on --transport sim without --duration].
    #[arg(long, value_name = "TIME")]
    pub warmup: Option<String>,

    /// Stop after this many committed transactions instead of after a time.
    #[arg(long, value_name = "N")]
    pub txns: Option<u64>,

    /// Seed of every random choice the workload makes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// A protocol or workload knob, `key=value`; repeat for several (`dmtx list` shows them).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Memory nodes of the in-process cluster [default: 2, or the preset's].
    #[arg(long = "memory-nodes", short = 'm', value_name = "N")]
    pub memory_nodes: Option<u32>,

    /// Copies of every table (1 primary + backups); at most --memory-nodes [default: 2,
    /// or the preset's].
    #[arg(long, short = 'r', value_name = "N")]
    pub replicas: Option<u32>,

    /// A paper's setup (`ford`, `motor`, `lotus`, `oocc`, `rcbench`): memory nodes,
    /// replication and workload knobs as its setup section states; flags and --set win.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,

    /// Region size of each memory node, e.g. `512MiB` [default: sized from the tables].
    #[arg(long = "mn-bytes", value_name = "BYTES")]
    pub mn_bytes: Option<String>,

    /// Where the JSON goes: a path ending in `.json`, a directory (a file named for the
    /// run is created in it), or `-` for stdout (the summary then goes to stderr).
    #[arg(long, short = 'o', default_value = "results/", value_name = "PATH")]
    pub out: String,

    /// Print nothing but errors (the JSON is still written).
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Print the run's settings and its memory plan (dataset, bytes per memory node and
    /// on this host), then exit without building anything.
    #[arg(long = "dry-run")]
    pub dry_run: bool,

    /// Record every transaction and check the history for isolation anomalies against
    /// the protocol's claimed level (exit code 1 if any is found).
    #[arg(long)]
    pub check: bool,

    /// Also write the recorded history to this file (JSON lines; implies --check).
    #[arg(long, value_name = "FILE")]
    pub history: Option<String>,

    /// Run against the memory nodes of this cluster file over `tcp` instead of an
    /// in-process cluster (memory nodes and replicas then come from the file).
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<String>,

    /// With --cluster: run as compute node ID of the file's `[[compute_nodes]]`. Start one
    /// `dmtx bench` per compute node with the same flags and its own --cn; they meet at
    /// the memory nodes, start together and each writes its own record and history
    /// (`dmtx report` merges the records, `dmtx check` takes the histories together).
    #[arg(long, value_name = "ID", requires = "cluster")]
    pub cn: Option<u16>,

    /// How compute threads reach the memory nodes in-process: `mem` (direct, real time) or
    /// `sim` (the simulator's NIC model on virtual time; `--duration` is virtual).
    #[arg(long, value_enum, default_value_t = TransportKind::Mem)]
    pub transport: TransportKind,

    /// Compute nodes in this process, each with --threads worker threads, its own caches
    /// and protocol state (`mem` and `sim`; a --cluster run has one per process)
    /// [default: 1].
    #[arg(long = "compute-nodes", value_name = "N")]
    pub compute_nodes: Option<u32>,

    /// The simulator's NIC profile: `cx3`, `cx5`, `cx6` or a TOML file
    /// (`--transport sim` only) [default: cx5, or the preset's].
    #[arg(long, value_name = "PROFILE")]
    pub nic: Option<String>,

    /// Faults to inject (`--transport sim` only): a TOML file, or a one-line script such
    /// as `"crash-mn mn=1 mode=pm at=2ms restart=5ms; lose-response on=kind:cas nth=3"`
    /// (the `dmtx_sim::faults` module doc lists every fault and trigger); `--set
    /// fault=SCRIPT` is the same.
    #[arg(long, value_name = "FILE|SCRIPT")]
    pub faults: Option<String>,

    /// The simulator's compute-node CPU model: `model` charges the profile's costs,
    /// `off` makes compute free, `measured` charges real poll times (not deterministic)
    /// (`--transport sim` only) [default: the profile's].
    #[arg(long = "cpu", value_enum, value_name = "MODE")]
    pub cpu: Option<CpuArg>,

    /// What a transaction that loses a memory node (`fault` abort: unreachable node,
    /// missed op deadline) does to the run: `stop` ends it at once with an error naming
    /// the node; `continue` keeps running and counts fault aborts (failure experiments).
    #[arg(long = "on-fault", value_enum, default_value_t = OnFault::Stop)]
    pub on_fault: OnFault,

    /// Print a status line to stderr this often (real time) while the run goes: txn/s,
    /// abort rate and p99 latency over the run's time since the previous line (virtual
    /// on --transport sim); `0` or `off` prints none [default: 10s when stderr is not a
    /// terminal, which gets a progress bar instead].
    #[arg(long = "status-interval", value_name = "TIME")]
    pub status_interval: Option<String>,
}

/// `--transport`: how an in-process run reaches its memory nodes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportKind {
    /// Direct access to the regions, on real time.
    #[default]
    Mem,
    /// The simulator: a model of an RDMA NIC (ConnectX-5 parameters) on virtual time,
    /// every coordinator on one deterministic thread.
    Sim,
}

/// `--faults`: a TOML file when the value names one, else a one-line script.
fn parse_faults(value: &str) -> Result<dmtx_sim::FaultScript, ConfigError> {
    let path = std::path::Path::new(value);
    let parsed = if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::invalid("--faults", value, &format!("cannot read the file: {e}")))?;
        dmtx_sim::FaultScript::from_toml(&text)
    } else if value.ends_with(".toml") {
        return Err(ConfigError::invalid(
            "--faults",
            value,
            "no such file; give an existing TOML file or a one-line script",
        ));
    } else {
        dmtx_sim::FaultScript::parse_line(value)
    };
    parsed.map_err(|e| ConfigError::invalid("--faults", value, &e.to_string()))
}

/// `--cpu`: the simulator's CPU model.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuArg {
    /// Charge the profile's costs (deterministic).
    Model,
    /// Compute is free: the NIC alone limits throughput.
    Off,
    /// Charge each poll's real time (for cross-checks; not deterministic).
    Measured,
}

impl TransportKind {
    /// As on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Mem => "mem",
            TransportKind::Sim => "sim",
        }
    }
}

impl CpuArg {
    /// The simulator's mode.
    pub fn mode(self) -> dmtx_sim::CpuMode {
        match self {
            CpuArg::Model => dmtx_sim::CpuMode::Model,
            CpuArg::Off => dmtx_sim::CpuMode::Off,
            CpuArg::Measured => dmtx_sim::CpuMode::Measured,
        }
    }
}

/// `--on-fault`: what a lost memory node does to a run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFault {
    /// End the run with an error naming the node.
    #[default]
    Stop,
    /// Keep running; the affected transactions abort with reason `fault`.
    Continue,
}

impl Default for BenchArgs {
    /// The flags' defaults, as `dmtx bench` with no flag gets them.
    fn default() -> Self {
        Self {
            protocol: "ford".into(),
            workload: "smallbank".into(),
            threads: 2,
            coroutines: 8,
            duration: None,
            warmup: None,
            txns: None,
            seed: 1,
            set: Vec::new(),
            memory_nodes: None,
            replicas: None,
            preset: None,
            mn_bytes: None,
            out: "results/".into(),
            quiet: false,
            dry_run: false,
            check: false,
            history: None,
            cluster: None,
            cn: None,
            on_fault: OnFault::Stop,
            transport: TransportKind::Mem,
            compute_nodes: None,
            nic: None,
            cpu: None,
            faults: None,
            status_interval: None,
        }
    }
}

/// When a run stops (besides Ctrl-C).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum StopRule {
    /// After this much time from the start barrier.
    Duration(Duration),
    /// After this many committed transactions (over all coordinators).
    Txns(u64),
}

/// Where the JSON record of a run goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutTarget {
    /// Nowhere (tests and library callers that read the result in memory).
    None,
    /// To stdout.
    Stdout,
    /// To exactly this file (parents are created, an existing file is replaced).
    File(PathBuf),
    /// To a new file named for the run inside this directory (created if missing).
    Dir(PathBuf),
}

impl OutTarget {
    /// Read an `--out` value: `-` is stdout; an existing directory, a path ending in `/`
    /// or a path without an extension is a directory; any other path (`run.json`,
    /// `run.txt`) is a file. A path that exists as a file but has no extension is
    /// refused, since it cannot be the directory it would name.
    pub fn parse(raw: &str) -> Result<Self, ConfigError> {
        if raw == "-" {
            return Ok(Self::Stdout);
        }
        if raw.trim().is_empty() {
            return Err(ConfigError::invalid(
                "--out",
                raw,
                "is empty; give a directory, a file such as run.json, or `-` for stdout",
            ));
        }
        let path = PathBuf::from(raw);
        if path.is_dir() || raw.ends_with('/') {
            return Ok(Self::Dir(path));
        }
        if path.extension().is_some() {
            return Ok(Self::File(path));
        }
        if path.exists() {
            return Err(ConfigError::invalid(
                "--out",
                raw,
                "is an existing file without an extension; give a directory, or a file name such as run.json",
            ));
        }
        Ok(Self::Dir(path))
    }

    /// Make sure the record can be written before the run: create the directory (or
    /// the file's parent) and check that a file can be created there. Errors name the
    /// path and the reason.
    pub fn prepare(&self) -> Result<(), ConfigError> {
        let (dir, file) = match self {
            Self::None | Self::Stdout => return Ok(()),
            Self::File(p) => (p.parent().filter(|d| !d.as_os_str().is_empty()), Some(p.as_path())),
            Self::Dir(d) => (Some(d.as_path()), None),
        };
        writable("--out", dir, file)
    }

    /// The file a run named `stem` writes to: `None` for [`OutTarget::None`] and
    /// [`OutTarget::Stdout`], the file itself, or `dir/stem.json`. The caller adds a
    /// suffix if that name is taken (see `results::write`).
    pub fn file_for(&self, stem: &str) -> Option<PathBuf> {
        match self {
            Self::None | Self::Stdout => None,
            Self::File(p) => Some(p.clone()),
            Self::Dir(d) => Some(d.join(format!("{stem}.json"))),
        }
    }
}

/// One validated `dmtx bench` run. Fields are public so that library callers (tests)
/// can build one directly; [`BenchConfig::from_args`] is the checked way in.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// Protocol name (a registry entry, or a test's own).
    pub protocol: String,
    /// Workload name.
    pub workload: String,
    /// Worker threads, `1..=THREADS_MAX`.
    pub threads: u16,
    /// Coordinators per thread, `1..=COROUTINES_MAX`.
    pub coroutines: u16,
    /// When the run stops.
    pub stop: StopRule,
    /// How long the run goes before measuring starts (with [`StopRule::Duration`] only).
    pub warmup: Duration,
    /// Seed of the workload's random choices.
    pub seed: u64,
    /// `--set` values (only declared keys).
    pub knobs: Knobs,
    /// Every knob of the protocol and workload with its effective value (defaults filled in).
    pub knobs_effective: BTreeMap<String, String>,
    /// Memory nodes.
    pub memory_nodes: u16,
    /// Copies of each table, `1..=memory_nodes`.
    pub replicas: u16,
    /// Region size per memory node; `None` sizes it from the tables.
    pub mn_bytes: Option<u64>,
    /// Where the JSON goes.
    pub out: OutTarget,
    /// Print nothing but errors.
    pub quiet: bool,
    /// Record and check the history.
    pub check: bool,
    /// Where to write the history, if anywhere.
    pub history: Option<PathBuf>,
    /// Remote memory nodes (`--cluster`); `None` runs an in-process cluster.
    pub cluster: Option<crate::cluster::ClusterView>,
    /// The `--preset` applied, if any.
    pub preset: Option<String>,
    /// What a `fault` abort does to the run.
    pub on_fault: OnFault,
    /// `mem` or `sim` for an in-process run.
    pub transport: TransportKind,
    /// Compute nodes (more than one only on `sim`).
    pub compute_nodes: u16,
    /// The simulator's setup, when `transport` is `sim`.
    pub sim: Option<SimSetup>,
}

/// What `--transport sim` runs on.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSetup {
    /// The NIC and CPU profile (`--nic`, with `--cpu` applied).
    pub profile: dmtx_sim::Profile,
    /// `--faults`, parsed.
    pub faults: Option<dmtx_sim::FaultScript>,
}

impl BenchConfig {
    /// Validate raw flags against the registry's protocols and workloads.
    pub fn from_args(args: &BenchArgs) -> Result<Self, ConfigError> {
        let protocol = find_entry(registry::PROTOCOLS, &args.protocol, "--protocol", "protocol")?;
        let workload = find_entry(registry::WORKLOADS, &args.workload, "--workload", "workload")?;
        let mut args = args.clone();
        let mut pairs: Vec<String> = Vec::new();
        if let Some(name) = &args.preset {
            let (preset, knobs) = crate::preset::lookup(name, &args.workload)?;
            args.memory_nodes = args.memory_nodes.or(Some(preset.memory_nodes));
            args.replicas = args.replicas.or(Some(preset.replicas));
            pairs = knobs;
        }
        // `--set fault=SCRIPT` is `--faults SCRIPT` (several join with `;`).
        let (fault_sets, sets): (Vec<&String>, Vec<&String>) = args
            .set
            .iter()
            .partition(|p| p.split_once('=').is_some_and(|(k, _)| k.trim() == "fault"));
        if !fault_sets.is_empty() {
            if args.faults.is_some() {
                return Err(ConfigError::Conflict {
                    first: "--faults".into(),
                    second: "--set fault=...".into(),
                    fix: "both give the fault script; put every fault in one of them",
                });
            }
            let clauses: Vec<&str> = fault_sets
                .iter()
                .filter_map(|p| p.split_once('='))
                .map(|(_, v)| v)
                .collect();
            args.faults = Some(clauses.join("; "));
        }
        pairs.extend(sets.into_iter().cloned());
        let args = &args;
        let knobs = Knobs::parse(pairs.iter().map(String::as_str))?;
        knobs.check_known(&[protocol.knobs, workload.knobs, registry::DRIVER.knobs])?;
        (protocol.check)(&knobs)?;
        (workload.check)(&knobs)?;
        (registry::DRIVER.check)(&knobs)?;
        registry::check_pair(
            protocol.name,
            (protocol.requires_declared_keys)(&knobs),
            workload,
            &knobs,
            registry::PROTOCOLS,
            registry::WORKLOADS,
        )?;
        let mut cfg = Self::from_args_unchecked(args, knobs)?;
        cfg.knobs_effective = effective_knobs(&cfg.knobs, &[protocol, workload, &registry::DRIVER]);
        if let (Some(_), TransportKind::Sim) = (&args.cluster, args.transport) {
            return Err(ConfigError::Conflict {
                first: "--cluster".into(),
                second: "--transport sim".into(),
                fix: "the simulator models its own memory nodes in-process; drop one",
            });
        }
        if args.cluster.is_some() && args.compute_nodes.is_some_and(|n| n != 1) {
            return Err(ConfigError::Conflict {
                first: "--compute-nodes".into(),
                second: "--cluster".into(),
                fix: "a --cluster run is one compute node per process; drop --compute-nodes",
            });
        }
        if args.transport != TransportKind::Sim {
            for (given, flag) in [
                (args.nic.is_some(), "--nic"),
                (args.cpu.is_some(), "--cpu"),
                (args.faults.is_some(), "--faults"),
            ] {
                if given {
                    return Err(ConfigError::Conflict {
                        first: flag.into(),
                        second: format!("--transport {}", args.transport.name()),
                        fix: "it configures the simulator; add --transport sim, or drop it",
                    });
                }
            }
        }
        if args.transport == TransportKind::Sim {
            let name = match (&args.nic, &args.preset) {
                (Some(n), _) => n.clone(),
                (None, Some(p)) => crate::preset::sim_nic(p).to_string(),
                (None, None) => "cx5".to_string(),
            };
            let mut profile =
                dmtx_sim::Profile::load(&name).map_err(|e| ConfigError::invalid("--nic", &name, &e.to_string()))?;
            if let Some(cpu) = args.cpu {
                profile.cpu.mode = cpu.mode();
            }
            let faults = args.faults.as_deref().map(parse_faults).transpose()?;
            cfg.sim = Some(SimSetup { profile, faults });
        }
        if let Some(path) = &args.cluster {
            let mut view = crate::cluster::ClusterView::load(std::path::Path::new(path))?;
            if let Some(id) = args.cn {
                view.select_cn(id, std::path::Path::new(path))?;
            }
            cfg.memory_nodes = view.memory_nodes.len() as u16;
            cfg.replicas = view.replicas;
            cfg.cluster = Some(view);
        }
        Ok(cfg)
    }

    /// Validate everything but the names and knobs (which the caller vouches for): for
    /// tests that run a protocol or workload the registry does not list.
    pub fn from_args_unchecked(args: &BenchArgs, knobs: Knobs) -> Result<Self, ConfigError> {
        let threads = in_range("--threads", args.threads, 1, THREADS_MAX)?;
        let coroutines = in_range("--coroutines", args.coroutines, 1, COROUTINES_MAX)?;
        let memory_nodes = in_range("--memory-nodes", args.memory_nodes.unwrap_or(2), 1, MEMORY_NODES_MAX)?;
        let replicas = args.replicas.unwrap_or(2);
        if replicas == 0 {
            return Err(ConfigError::invalid(
                "--replicas",
                0,
                "every table needs a primary; pass --replicas 1 or more",
            ));
        }
        if replicas > memory_nodes {
            return Err(ConfigError::invalid(
                "--replicas",
                replicas,
                &format!(
                    "exceeds --memory-nodes {}: each copy of a table lives on its own node; \
                     lower --replicas or raise --memory-nodes",
                    memory_nodes
                ),
            ));
        }
        let stop = match (&args.duration, args.txns) {
            (Some(d), Some(n)) => {
                return Err(ConfigError::Conflict {
                    first: format!("--duration {d}"),
                    second: format!("--txns {n}"),
                    fix: "a run stops on one of them; drop one",
                })
            }
            (Some(d), None) => StopRule::Duration(parse_duration(d)?),
            (None, Some(0)) => {
                return Err(ConfigError::invalid(
                    "--txns",
                    0,
                    "must be at least 1; or use --duration",
                ))
            }
            (None, Some(n)) => StopRule::Txns(n),
            (None, None) if args.transport == TransportKind::Sim => StopRule::Duration(SIM_DURATION_DEFAULT),
            (None, None) => StopRule::Duration(DURATION_DEFAULT),
        };
        let mn_bytes = args.mn_bytes.as_deref().map(parse_mn_bytes).transpose()?;
        let warmup = match (&args.warmup, &stop) {
            (Some(w), StopRule::Duration(_)) => parse_time("--warmup", w)?,
            (Some(w), StopRule::Txns(n)) => {
                return Err(ConfigError::Conflict {
                    first: format!("--warmup {w}"),
                    second: format!("--txns {n}"),
                    fix: "a warm-up precedes a timed run; use --duration with it",
                })
            }
            // The simulator's default window: warm up, then 0.2 s of virtual time.
            (None, _) if args.transport == TransportKind::Sim && args.duration.is_none() && args.txns.is_none() => {
                SIM_WARMUP_DEFAULT
            }
            (None, _) => Duration::ZERO,
        };
        let compute_nodes = in_range("--compute-nodes", args.compute_nodes.unwrap_or(1), 1, COMPUTE_NODES_MAX)?;
        Ok(Self {
            protocol: args.protocol.clone(),
            workload: args.workload.clone(),
            threads: threads as u16,
            coroutines: coroutines as u16,
            stop,
            warmup,
            seed: args.seed,
            knobs_effective: knobs.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            knobs,
            memory_nodes: memory_nodes as u16,
            replicas: replicas as u16,
            mn_bytes,
            out: OutTarget::parse(&args.out)?,
            quiet: args.quiet,
            check: args.check || args.history.is_some(),
            history: args.history.as_deref().map(history_path).transpose()?,
            cluster: None,
            preset: args.preset.clone(),
            on_fault: args.on_fault,
            transport: args.transport,
            compute_nodes: compute_nodes as u16,
            sim: None,
        })
    }

    /// Check before the run that its record (`--out`) and history (`--history`) can be
    /// written: directories are created, and an unwritable place is an error now.
    pub fn prepare_outputs(&self) -> Result<(), ConfigError> {
        self.out.prepare()?;
        if let Some(h) = &self.history {
            writable("--history", h.parent().filter(|d| !d.as_os_str().is_empty()), Some(h))?;
        }
        Ok(())
    }

    /// Coordinators over all compute nodes and threads.
    pub fn coordinators(&self) -> usize {
        self.compute_nodes as usize * self.threads as usize * self.coroutines as usize
    }

    /// Worker threads over all compute nodes.
    pub fn worker_threads(&self) -> usize {
        self.compute_nodes as usize * self.threads as usize
    }

    /// The name of the run's JSON file inside an `--out` directory, without `.json`:
    /// `{protocol}-{workload}-{threads}x{coroutines}-{unix_secs}`.
    pub fn file_stem(&self, unix_secs: u64) -> String {
        format!(
            "{}-{}-{}x{}-{unix_secs}",
            self.protocol, self.workload, self.threads, self.coroutines
        )
    }
}

/// A `--history` value: a file path (stdout carries the summary, so `-` is refused).
fn history_path(raw: &str) -> Result<PathBuf, ConfigError> {
    if raw == "-" || raw.trim().is_empty() {
        return Err(ConfigError::invalid(
            "--history",
            raw,
            "needs a file name (stdout carries the summary); e.g. --history run.history.jsonl",
        ));
    }
    Ok(PathBuf::from(raw))
}

/// Check that a file can be created in `dir` (created if missing), at `file` if given,
/// leaving nothing behind that was not there before.
pub fn writable(
    flag: &'static str,
    dir: Option<&std::path::Path>,
    file: Option<&std::path::Path>,
) -> Result<(), ConfigError> {
    let fail = |path: &std::path::Path, e: std::io::Error| {
        ConfigError::invalid(
            flag,
            path.display(),
            &format!("cannot be written: {e}; pick a writable place"),
        )
    };
    if let Some(d) = dir {
        std::fs::create_dir_all(d).map_err(|e| fail(d, e))?;
    }
    let probe = match file {
        Some(f) if f.is_dir() => {
            return Err(ConfigError::invalid(flag, f.display(), "is a directory; name a file"));
        }
        Some(f) if f.exists() => {
            // Replaced at the end of the run: it must open for writing now.
            return std::fs::OpenOptions::new()
                .append(true)
                .open(f)
                .map(drop)
                .map_err(|e| fail(f, e));
        }
        Some(f) => f.to_path_buf(),
        None => dir
            .unwrap_or(std::path::Path::new("."))
            .join(format!(".dmtx-write-probe-{}", std::process::id())),
    };
    std::fs::File::create(&probe).map_err(|e| fail(&probe, e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Every knob the entries declare, with the value given or its default.
pub fn effective_knobs(knobs: &Knobs, entries: &[&Entry]) -> BTreeMap<String, String> {
    let given: BTreeMap<&str, &str> = knobs.iter().collect();
    let mut out = BTreeMap::new();
    for e in entries {
        for spec in e.knobs {
            let v = given.get(spec.name).copied().unwrap_or(spec.default);
            out.insert(spec.name.to_string(), v.to_string());
        }
    }
    out
}

/// Why `dmtx bench` flags were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The cluster file (`--cluster`) is unusable.
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// A protocol or workload name the registry does not list.
    #[error("{flag} `{given}`: no such {what}{hint}; valid: {valid} (see `dmtx list`)")]
    UnknownName {
        /// The flag (`--protocol`, `--workload`).
        flag: &'static str,
        /// `protocol` or `workload`.
        what: &'static str,
        /// The name given.
        given: String,
        /// " (did you mean `x`?)" or empty.
        hint: String,
        /// Every valid name.
        valid: String,
    },
    /// A flag's value is out of range or malformed.
    #[error("{flag} {value}: {why}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is wrong and what to pass instead.
        why: String,
    },
    /// Two flags that exclude each other.
    #[error("{first} and {second} both given: {fix}")]
    Conflict {
        /// The first flag and its value.
        first: String,
        /// The second flag and its value.
        second: String,
        /// What to do.
        fix: &'static str,
    },
    /// A `--set` knob is unknown or has a bad value.
    #[error("--set: {0}")]
    Knob(KnobError),
    /// The protocol requires every key declared before the first execute, and some
    /// transaction types of the workload choose keys from what they read.
    #[error(
        "--protocol {protocol} requires every key declared before the first execute, which \
         workload `{workload}` cannot do in {types} (they pick keys from what they read); {instead}"
    )]
    Incompatible {
        /// The protocol.
        protocol: String,
        /// The workload.
        workload: String,
        /// Its transaction types that cannot declare their keys, comma-separated.
        types: String,
        /// What to run instead.
        instead: String,
    },
}

// By hand rather than `#[from]`, which would also make the knob error this one's
// `source` and print its text twice in a one-line `{:#}` chain.
impl From<KnobError> for ConfigError {
    fn from(e: KnobError) -> Self {
        Self::Knob(e)
    }
}

impl ConfigError {
    pub(crate) fn invalid(flag: &'static str, value: impl std::fmt::Display, why: &str) -> Self {
        Self::Invalid {
            flag,
            value: value.to_string(),
            why: why.to_string(),
        }
    }
}

fn in_range(flag: &'static str, v: u32, min: u32, max: u32) -> Result<u32, ConfigError> {
    if v < min || v > max {
        return Err(ConfigError::invalid(
            flag,
            v,
            &format!("must be between {min} and {max}; pass a value in that range"),
        ));
    }
    Ok(v)
}

fn find_entry(
    entries: &'static [Entry],
    given: &str,
    flag: &'static str,
    what: &'static str,
) -> Result<&'static Entry, ConfigError> {
    if let Some(e) = entries.iter().find(|e| e.name == given) {
        return Ok(e);
    }
    let names: Vec<&str> = entries.iter().map(|e| e.name).collect();
    Err(ConfigError::UnknownName {
        flag,
        what,
        given: given.to_string(),
        hint: did_you_mean(given, &names),
        valid: if names.is_empty() {
            "(none registered)".to_string()
        } else {
            names.join(", ")
        },
    })
}

pub use dmtx_runtime::did_you_mean;

/// Parse `--duration`: plain seconds (`10`, `0.5`) or a number with `ms`, `s` or `m`.
pub fn parse_duration(raw: &str) -> Result<Duration, ConfigError> {
    parse_time("--duration", raw)
}

/// Default `--status-interval` when stderr is not a terminal.
pub const STATUS_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);

/// `--status-interval`: how often to print a status line, or `None` for never. Without
/// the flag, [`STATUS_INTERVAL_DEFAULT`] unless stderr is a terminal (which shows a
/// progress bar instead).
pub fn status_interval(raw: Option<&str>, stderr_is_terminal: bool) -> Result<Option<Duration>, ConfigError> {
    match raw.map(str::trim) {
        None if stderr_is_terminal => Ok(None),
        None => Ok(Some(STATUS_INTERVAL_DEFAULT)),
        Some("0" | "off") => Ok(None),
        Some(t) => parse_time("--status-interval", t).map(Some),
    }
}

/// Parse a time given to `flag` (the error names it).
fn parse_time(flag: &'static str, raw: &str) -> Result<Duration, ConfigError> {
    let bad = |why: &str| ConfigError::invalid(flag, raw, why);
    let s = raw.trim();
    let (num, scale_s) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| bad("is not a time; write seconds (`10`, `0.5`) or `500ms`, `10s`, `2m`"))?;
    let secs = v * scale_s;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(bad("must be more than zero; pass e.g. `10` or `500ms`"));
    }
    if secs > DURATION_S_MAX {
        return Err(bad(&format!(
            "is longer than the {} s limit; pass a shorter time",
            DURATION_S_MAX as u64
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse `--mn-bytes`: a byte count, optionally with `K`, `M`, `G` (powers of 1024,
/// `KiB`/`KB`/`k` spellings accepted).
pub fn parse_mn_bytes(raw: &str) -> Result<u64, ConfigError> {
    parse_region_bytes(raw).map_err(|why| ConfigError::invalid("--mn-bytes", raw, &why))
}

/// Parse a memory-node region size as [`parse_mn_bytes`] does, for any flag or file
/// field: the error is what is wrong and the fix ("has an unknown unit; use ..."), for
/// the caller to prefix with the flag or field and the value.
pub fn parse_region_bytes(raw: &str) -> Result<u64, String> {
    let bad = |why: &str| why.to_string();
    let s = raw.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| bad("is not a size; write bytes (`1073741824`) or `512MiB`, `2GiB`"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad("has an unknown unit; use B, KiB, MiB, GiB or TiB")),
    };
    let bytes = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| bad("does not fit in 64 bits"))?;
    if bytes < 4096 {
        return Err(bad("is below 4 KiB; a memory node needs room for its tables"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> BenchArgs {
        BenchArgs {
            out: "-".into(),
            ..BenchArgs::default()
        }
    }

    /// Goal: a run without --duration or --txns lasts 10 s of real time, or 0.2 s of
    /// virtual time on the simulator (whose seconds cost several real ones).
    #[test]
    fn test_default_run_length_depends_on_the_transport() {
        let real = BenchConfig::from_args(&args()).unwrap();
        assert_eq!(real.stop, StopRule::Duration(DURATION_DEFAULT));
        let sim = BenchConfig::from_args(&BenchArgs {
            transport: TransportKind::Sim,
            ..args()
        })
        .unwrap();
        assert_eq!(sim.stop, StopRule::Duration(SIM_DURATION_DEFAULT));
        assert_eq!(sim.warmup, SIM_WARMUP_DEFAULT);
        assert_eq!(real.warmup, Duration::ZERO);
        let e = BenchConfig::from_args(&BenchArgs {
            warmup: Some("1s".into()),
            txns: Some(10),
            ..args()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--warmup") && e.contains("--duration"), "{e}");
    }

    #[test]
    fn test_protocol_unknown_lists_valid_and_suggests() {
        let e = BenchConfig::from_args(&BenchArgs {
            protocol: "frod".into(),
            ..args()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--protocol `frod`"), "{e}");
        assert!(e.contains("did you mean `ford`"), "{e}");
        assert!(e.contains("valid: ford"), "{e}");
    }

    #[test]
    fn test_workload_unknown_lists_valid() {
        let e = BenchConfig::from_args(&BenchArgs {
            workload: "tpcz".into(),
            ..args()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--workload `tpcz`: no such workload"), "{e}");
        assert!(e.contains("valid: kvs, smallbank"), "{e}");
    }

    #[test]
    fn test_set_unknown_knob_lists_valid() {
        let e = BenchConfig::from_args(&BenchArgs {
            set: vec!["backup_reed=false".into()],
            ..args()
        });
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("--set: unknown knob `backup_reed`"), "{e}");
        assert!(e.contains("did you mean `backup_read`"), "{e}");
        // Both the protocol's and the workload's knobs are listed.
        assert!(e.contains("log_bytes"), "{e}");
        assert!(e.contains("accounts"), "{e}");
    }

    #[test]
    fn test_set_bad_value_and_syntax() {
        let e = BenchConfig::from_args(&BenchArgs {
            set: vec!["accounts=lots".into()],
            ..args()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("`accounts` = `lots`"), "{e}");
        let e = BenchConfig::from_args(&BenchArgs {
            set: vec!["accounts".into()],
            ..args()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("not of the form key=value"), "{e}");
    }

    #[test]
    fn test_effective_knobs_include_defaults() {
        let c = BenchConfig::from_args(&BenchArgs {
            set: vec!["accounts=500".into()],
            ..args()
        })
        .unwrap();
        assert_eq!(c.knobs_effective["accounts"], "500");
        assert_eq!(c.knobs_effective["backup_read"], "true");
        assert_eq!(c.knobs_effective["hot_pct"], "90");
        assert!(!c.knobs_effective.contains_key("zipf_theta"), "kvs knob");
    }

    #[test]
    fn test_duration_and_txns_conflict() {
        let e = BenchConfig::from_args_unchecked(
            &BenchArgs {
                duration: Some("5".into()),
                txns: Some(10),
                ..args()
            },
            Knobs::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--duration 5 and --txns 10 both given"), "{e}");
    }

    #[test]
    fn test_duration_forms() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        let e = parse_duration("ten").unwrap_err().to_string();
        assert!(e.starts_with("--duration ten: is not a time"), "{e}");
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("1e9").is_err());
    }

    #[test]
    fn test_mn_bytes_forms() {
        assert_eq!(parse_mn_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_mn_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_mn_bytes("2G").unwrap(), 2 << 30);
        assert_eq!(parse_mn_bytes("1_048_576").unwrap(), 1 << 20);
        assert!(parse_mn_bytes("12 furlongs")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_mn_bytes("100").is_err());
    }

    #[test]
    fn test_ranges_name_flag_and_fix() {
        let e = BenchConfig::from_args_unchecked(&BenchArgs { threads: 0, ..args() }, Knobs::default())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--threads 0: must be between 1 and 256; pass a value in that range");
        let e = BenchConfig::from_args_unchecked(
            &BenchArgs {
                replicas: Some(3),
                ..args()
            },
            Knobs::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--replicas 3: exceeds --memory-nodes 2"), "{e}");
        let e = BenchConfig::from_args_unchecked(
            &BenchArgs {
                txns: Some(0),
                ..args()
            },
            Knobs::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--txns 0: must be at least 1"), "{e}");
    }

    /// Goal: `--set fault=SCRIPT` is `--faults SCRIPT` (clauses of several join), it is
    /// not taken for a knob, and giving both is a conflict that names them.
    #[test]
    fn test_set_fault_is_the_fault_script() {
        let sim = |set: &[&str], faults: Option<&str>| {
            BenchConfig::from_args(&BenchArgs {
                transport: TransportKind::Sim,
                set: set.iter().map(|s| s.to_string()).collect(),
                faults: faults.map(str::to_string),
                ..args()
            })
        };
        let c = sim(
            &[
                "fault=crash-mn mn=1 mode=pm at=2ms",
                "fault=lose-response on=kind:cas nth=3",
            ],
            None,
        )
        .unwrap();
        let want =
            dmtx_sim::FaultScript::parse_line("crash-mn mn=1 mode=pm at=2ms; lose-response on=kind:cas nth=3").unwrap();
        assert_eq!(c.sim.unwrap().faults, Some(want));
        let e = sim(&["fault=crash-mn mn=1 at=2ms"], Some("crash-mn mn=0 at=1ms"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--faults") && e.contains("--set fault"), "{e}");
        let e = sim(&["fault=crash-mn mn=9 at=2ms"], None).unwrap_err().to_string();
        assert!(e.contains("--faults"), "a bad script names the flag: {e}");
    }

    #[test]
    fn test_defaults() {
        let c = BenchConfig::from_args_unchecked(&BenchArgs::default(), Knobs::default()).unwrap();
        assert_eq!(c.threads, 2);
        assert_eq!(c.coroutines, 8);
        assert_eq!(c.stop, StopRule::Duration(Duration::from_secs(10)));
        assert_eq!(c.memory_nodes, 2);
        assert_eq!(c.replicas, 2);
        assert_eq!(c.out, OutTarget::Dir("results/".into()));
        assert_eq!(c.file_stem(7), "ford-smallbank-2x8-7");
    }

    #[test]
    fn test_out_target() {
        assert_eq!(OutTarget::parse("-").unwrap(), OutTarget::Stdout);
        assert_eq!(
            OutTarget::parse("x/run.json").unwrap(),
            OutTarget::File("x/run.json".into())
        );
        assert_eq!(OutTarget::parse("x/runs").unwrap(), OutTarget::Dir("x/runs".into()));
        assert_eq!(
            OutTarget::Dir("d".into()).file_for("a-b-1x1-5"),
            Some(PathBuf::from("d/a-b-1x1-5.json"))
        );
        assert_eq!(
            OutTarget::File("f.JSON".into()).file_for("ignored"),
            Some(PathBuf::from("f.JSON"))
        );
        assert_eq!(OutTarget::Stdout.file_for("s"), None);
        assert!(OutTarget::parse("").is_err());
        // Any extension names a file; a trailing slash a directory.
        assert_eq!(OutTarget::parse("run.txt").unwrap(), OutTarget::File("run.txt".into()));
        assert_eq!(OutTarget::parse("runs.d/").unwrap(), OutTarget::Dir("runs.d/".into()));
        // An existing file without an extension cannot be a directory.
        let file = std::env::temp_dir().join(format!("dmtx-out-file-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let e = OutTarget::parse(file.to_str().unwrap()).unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(e.contains("existing file"), "{e}");
        // An existing directory is one, whatever its name.
        let dir = std::env::temp_dir().join(format!("dmtx-out-{}.json", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let parsed = OutTarget::parse(dir.to_str().unwrap()).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(parsed, OutTarget::Dir(dir));
    }

    #[test]
    fn test_did_you_mean() {
        assert_eq!(
            did_you_mean("smalbank", &["kvs", "smallbank"]),
            " (did you mean `smallbank`?)"
        );
        assert_eq!(did_you_mean("zzzzzz", &["kvs", "smallbank"]), "");
    }
}
