//! `dmtx`: run and list benchmarks of transaction protocols on disaggregated memory.
//!
//! Exit codes: 0 ok; 1 an anomaly was found (a run's invariant or history check, or
//! `dmtx check` on a file; results are still written); 2 an error (bad flag, bad config,
//! failed setup, unreadable history, a run that does not fit), printed as one line
//! `error: …`; 130 interrupted by Ctrl-C (a run stopped early still writes its results;
//! a second Ctrl-C quits at once). A closed stdout (`| head`) ends the program quietly.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use dmtx::driver::{Monitor, Progress, RunHooks, Silent};
use dmtx::{registry, results, BenchArgs, BenchConfig, OutTarget, StopRule};
use indicatif::{ProgressBar, ProgressStyle};

/// Everything went as asked.
const EXIT_OK: i32 = 0;
/// An invariant or isolation check found an anomaly.
const EXIT_ANOMALY: i32 = 1;
/// Bad input or a failure to set up, run or record.
const EXIT_ERROR: i32 = 2;
/// Interrupted (Ctrl-C): a run stopped early (its results so far are written), or
/// stopped before it began (nothing is written); a second Ctrl-C quits at once.
const EXIT_INTERRUPTED: i32 = 130;

#[derive(Parser, Debug)]
#[command(
    name = "dmtx",
    version,
    about = "ACID transactions on disaggregated memory over one-sided verbs",
    after_help = "Exit codes: 0 ok, 1 an anomaly was found (invariant or isolation check), 2 error, 130 interrupted (Ctrl-C)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a protocol on a workload; print a summary and write a JSON record.
    #[command(after_help = "Examples:\n  \
        dmtx bench\n  \
        dmtx bench --protocol ford --workload smallbank --threads 2 --coroutines 8 --duration 10 --out results/\n  \
        dmtx bench --workload kvs --txns 100000 --set backup_read=false --out run.json")]
    Bench(Box<BenchArgs>),
    /// List protocols and workloads with their knobs.
    List,
    /// Check a recorded history (`dmtx bench --history FILE`) for isolation anomalies;
    /// several files (one per compute node of a `--cn` run) are checked as one history.
    #[command(
        after_help = "Real time (--level strict) over several files compares times taken on different \
hosts: `dmtx bench --cn` writes Unix-epoch nanoseconds of its host's wall clock, so the check is only as \
good as the hosts' clock agreement. Give --clock-offset-max, the most any two hosts' clocks can differ \
during the run (e.g. what NTP or PTP guarantees, plus drift); a transaction is then ordered after another \
only if it began more than that after the other ended. One file has one clock per compute node and needs \
no bound.\n\nExamples:\n  dmtx check run.history\n  dmtx check cn0.history cn1.history cn2.history\n  \
dmtx check cn*.history --level strict --clock-offset-max 1ms"
    )]
    Check(CheckArgs),
    /// Tabulate run records (`dmtx bench --out` JSON files, or directories of them).
    Report {
        /// JSON files or directories.
        #[arg(required = true)]
        paths: Vec<std::path::PathBuf>,
        /// Also draw the runs' throughput over time (`timeseries`: real seconds on
        /// mem/tcp, virtual milliseconds on sim, one clock per plot), with the faults
        /// simulated runs fired, as an SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<std::path::PathBuf>,
        /// With --plot: draw throughput and median latency against this setting instead
        /// (threads, coroutines, compute-nodes, memory-nodes, replicas or a numeric knob),
        /// one line per group of runs that agree on every other setting.
        #[arg(long, value_name = "FIELD", requires = "plot")]
        plot_vs: Option<String>,
        /// Also write every scalar of every record as CSV, one row per run (columns:
        /// `file`, then the dotted field names in name order).
        #[arg(long, value_name = "FILE")]
        csv: Option<std::path::PathBuf>,
    },
    /// Serve one memory node over TCP (verbs and the init-time control RPC only).
    Memnode(MemnodeArgs),
    /// Start memory-node processes (`cluster up --local N [-- bench ARGS...]`).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// The simulator's NIC/CPU profiles: print one, or calibrate the CPU costs.
    #[command(subcommand)]
    Sim(SimCommand),
}

/// `dmtx sim` subcommands.
#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Print a profile as TOML (`cx3`, `cx5`, `cx6` or a file): a starting point for your own.
    Profile {
        /// Profile name or file.
        #[arg(default_value = "cx5")]
        name: String,
    },
    /// Fit the CPU costs of a profile from `mem` runs on this host (one thread, one
    /// coroutine per workload) and print the profile with the fitted `[cpu]` table.
    Calibrate {
        /// The profile whose NIC parameters and starting CPU costs to use.
        #[arg(long, default_value = "cx5")]
        base: String,
        /// Workloads to run, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "kvs,smallbank,tatp,tpcc,ycsb")]
        workloads: Vec<String>,
        /// Run length per workload.
        #[arg(long, default_value = "1s")]
        duration: String,
        /// Rounds over the workloads; each transaction type keeps its median round (on a
        /// shared host single rounds differ by tens of percent).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=9))]
        repeat: u16,
        /// Write the profile here instead of to stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
}

/// `dmtx cluster` subcommands.
#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Start N memory nodes on loopback and write their cluster file; with `-- bench
    /// ARGS` run that benchmark against them over tcp and stop them afterwards,
    /// otherwise serve until Ctrl-C. With `--compute-nodes N` the bench runs as N
    /// compute-node processes (`bench --cn I`), whose records are merged and whose
    /// histories are checked together.
    #[command(
        after_help = "Examples:\n  dmtx cluster up --local 2 -- bench --workload smallbank --txns 100000 --check\n  \
dmtx cluster up --local 2 --compute-nodes 3 -- bench --protocol ford -w kvs --txns 30000 --check\n\n\
With --compute-nodes, each compute node writes its own record next to --out (`NAME-cnI.json`; a directory \
gets `PROTOCOL-WORKLOAD-TxC-UNIXSECS-cnI.json`) and, with --check or --history, its own history \
(`--history H` gives `H-cnI`, otherwise they go to the cluster directory)."
    )]
    Up(ClusterUpArgs),
}

/// `dmtx cluster up` flags.
#[derive(clap::Args, Debug)]
struct ClusterUpArgs {
    /// Memory nodes to start on 127.0.0.1.
    #[arg(long, value_name = "N")]
    local: u16,
    /// Region size of each.
    #[arg(long, default_value = "1GiB", value_name = "BYTES")]
    size: String,
    /// Copies of every table [default: the `-r`/`--replicas` of the bench after `--`, or
    /// 2 (1 with `--local 1`)].
    #[arg(long, value_name = "N")]
    replicas: Option<u16>,
    /// Where the token and cluster file go, kept afterwards [default: a fresh directory
    /// under the temp dir, removed when `cluster up` ends].
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// Run the bench as this many compute-node processes on loopback (each `bench
    /// --cluster FILE --cn I`); they start together and their results are merged.
    #[arg(long = "compute-nodes", value_name = "N", default_value_t = 1)]
    compute_nodes: u16,
    /// `bench` and its flags, after `--`.
    #[arg(last = true, value_name = "BENCH ARGS")]
    then: Vec<String>,
}

/// `dmtx memnode` flags.
#[derive(clap::Args, Debug)]
struct MemnodeArgs {
    /// Address to listen on; port 0 picks a free one (printed on the first line).
    #[arg(long, value_name = "ADDR")]
    listen: std::net::SocketAddr,
    /// Region size, e.g. `4GiB`.
    #[arg(long, default_value = "1GiB", value_name = "BYTES")]
    size: String,
    /// File holding the cluster token (must not be readable by others). Without it any
    /// client that reaches the port may connect.
    #[arg(long, value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// This node's id in the cluster file.
    #[arg(long, default_value_t = 0)]
    node_id: u16,
    /// The cluster id of the cluster file.
    #[arg(long, default_value_t = 0)]
    cluster_id: u64,
    /// The membership epoch of the cluster file.
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// Back the region with this file (a PM-like node): FLUSH persists, and a restart on
    /// the same file keeps the region's bytes. Without it the node is DRAM and restarts empty.
    #[arg(long, value_name = "FILE")]
    backing: Option<std::path::PathBuf>,
    /// Serving threads, each polling its share of the connections [default: the CPUs,
    /// clamped to 2..=4].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

/// `dmtx check` flags.
#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// The history files (JSON lines, format version 1 or 2), checked as one history.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<std::path::PathBuf>,
    /// The level to check: `serializable`, `si` (snapshot isolation) or `strict`
    /// (serializable in real-time order).
    #[arg(long, default_value = "serializable")]
    level: String,
    /// Do not require each coordinator's transactions to be serialized in the order it
    /// ran them (session order, checked by default).
    #[arg(long = "no-sessions")]
    no_sessions: bool,
    /// With --level strict over several files: the most the clocks of the hosts that
    /// wrote them can differ (`500us`, `2ms`, `0` when they share one clock); required
    /// there (see below).
    #[arg(long = "clock-offset-max", value_name = "TIME")]
    clock_offset_max: Option<String>,
}

fn main() {
    let code = match Cli::try_parse() {
        Ok(cli) => match run(cli) {
            Ok(code) => code,
            Err(e) if is_broken_pipe(&e) => EXIT_OK,
            Err(e) => {
                eprintln!("error: {}", one_line(&format!("{e:#}")));
                EXIT_ERROR
            }
        },
        Err(e) => clap_exit(e),
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::List => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", registry::render_list())?;
            out.flush()?;
            Ok(EXIT_OK)
        }
        Command::Bench(args) => bench(&args),
        Command::Check(args) => check(&args),
        Command::Memnode(args) => memnode(&args),
        Command::Cluster(ClusterCommand::Up(args)) => cluster_up(&args),
        Command::Sim(cmd) => sim(cmd),
        Command::Report {
            paths,
            plot,
            plot_vs,
            csv,
        } => {
            let loaded = dmtx::report::load(&paths)?;
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            let merged = dmtx::report::merge_cn_runs(loaded.runs);
            for n in &merged.notes {
                eprintln!("{n}");
            }
            let runs = merged.runs;
            if let Some(path) = plot {
                let svg = match plot_vs {
                    Some(field) => dmtx::plot::sweep_svg(&runs, &field)?,
                    None => {
                        let drawn = dmtx::plot::throughput_svg(&runs)?;
                        for w in &drawn.warnings {
                            eprintln!("warning: {w}");
                        }
                        drawn.svg
                    }
                };
                std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("plot: {}", path.display());
            }
            if let Some(path) = csv {
                std::fs::write(&path, dmtx::report::csv(&runs))
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("csv: {}", path.display());
            }
            let mut out = std::io::stdout().lock();
            out.write_all(dmtx::report::render(&runs).as_bytes())?;
            out.flush()?;
            Ok(EXIT_OK)
        }
    }
}

fn sim(cmd: SimCommand) -> anyhow::Result<i32> {
    match cmd {
        SimCommand::Profile { name } => {
            let profile = dmtx_sim::Profile::load(&name)?;
            let mut out = std::io::stdout().lock();
            out.write_all(profile.to_toml().as_bytes())?;
            out.flush()?;
        }
        SimCommand::Calibrate {
            base,
            workloads,
            duration,
            repeat,
            out,
        } => {
            eprintln!(
                "calibrating: {} workload(s) x {duration} x {repeat} round(s) on mem, one thread, one coroutine",
                workloads.len()
            );
            let (toml, report) = dmtx::calibrate::calibrate(&base, &workloads, &duration, repeat as usize)?;
            eprint!("{report}");
            match out {
                Some(path) => {
                    std::fs::write(&path, toml).with_context(|| format!("writing {}", path.display()))?;
                    eprintln!(
                        "wrote {}; use it with `dmtx bench --transport sim --nic {}`",
                        path.display(),
                        path.display()
                    );
                }
                None => {
                    let mut o = std::io::stdout().lock();
                    o.write_all(toml.as_bytes())?;
                    o.flush()?;
                }
            }
        }
    }
    Ok(EXIT_OK)
}

/// The preset a bench names, if it is one (an unknown name is the bench's error to report).
fn preset_of(args: &BenchArgs) -> Option<&'static dmtx::preset::Preset> {
    let name = args.preset.as_deref()?;
    dmtx::preset::PRESETS.iter().find(|p| p.name == name)
}

/// `dmtx cluster up`. The bench after `--` runs on the cluster's `--local` memory nodes:
/// its `-m`/`--memory-nodes` (or its `--preset`'s) must equal `--local` (or be left
/// out), and its `-r`/`--replicas` (or its preset's) becomes the cluster's replica count
/// (unless `cluster up --replicas` says otherwise, which is an error). Both are checked
/// before any node starts. A directory it made itself (no `--dir`) is removed on every
/// way out.
fn cluster_up(args: &ClusterUpArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.local > 0, "--local 0: start at least one memory node");
    anyhow::ensure!(
        args.compute_nodes > 0,
        "--compute-nodes 0: run at least one compute node"
    );
    anyhow::ensure!(
        args.compute_nodes == 1 || !args.then.is_empty(),
        "--compute-nodes {}: give the bench they run after `--`",
        args.compute_nodes
    );
    let bytes =
        dmtx::config::parse_region_bytes(&args.size).map_err(|why| anyhow::anyhow!("--size {}: {why}", args.size))?;
    let bench_args = if args.then.is_empty() {
        None
    } else {
        let mut argv = vec!["dmtx".to_string()];
        argv.extend(args.then.iter().cloned());
        let cli = Cli::try_parse_from(&argv).map_err(|e| anyhow::anyhow!("after --: {}", clap_message(&e, &argv)))?;
        let Command::Bench(bench_args) = cli.command else {
            anyhow::bail!("after --: only `bench ...` can run against the cluster");
        };
        anyhow::ensure!(
            bench_args.cluster.is_none(),
            "after --: drop --cluster, `cluster up` provides it"
        );
        if let Some(m) = bench_args.memory_nodes.filter(|&m| m != u32::from(args.local)) {
            anyhow::bail!(
                "after --: --memory-nodes {m} differs from --local {}; the bench runs on the cluster's memory nodes, \
                 so pass --local {m} or drop --memory-nodes",
                args.local
            );
        }
        if let Some(p) = preset_of(&bench_args)
            .filter(|p| bench_args.memory_nodes.is_none() && p.memory_nodes != u32::from(args.local))
        {
            anyhow::bail!(
                "after --: --preset {} runs on {} memory nodes, not --local {}; pass --local {}",
                p.name,
                p.memory_nodes,
                args.local,
                p.memory_nodes
            );
        }
        Some(bench_args)
    };
    // The bench's replica count: its -r, else its preset's.
    let bench_replicas = bench_args.as_ref().and_then(|b| {
        b.replicas
            .map(|r| (r, format!("--replicas {r}")))
            .or_else(|| preset_of(b).map(|p| (p.replicas, format!("--preset {} (replicas {})", p.name, p.replicas))))
    });
    let replicas = match (args.replicas, bench_replicas) {
        (Some(c), Some((b, what))) if u32::from(c) != b => {
            anyhow::bail!("--replicas {c} and, after --, {what} differ; give the replica count once")
        }
        (Some(c), _) => c,
        (None, Some((b, _))) => u16::try_from(b).unwrap_or(u16::MAX),
        (None, None) => 2.min(args.local),
    };
    anyhow::ensure!(
        replicas >= 1 && replicas <= args.local,
        "--replicas {replicas}: must be between 1 and --local {}; lower --replicas or raise --local",
        args.local
    );
    // Declared before the nodes so that it is removed after they are stopped.
    let (scratch, dir) = match &args.dir {
        Some(d) => (None, d.clone()),
        None => {
            let d = std::env::temp_dir().join(format!("dmtx-cluster-{}", std::process::id()));
            let s = dmtx::cluster::ScratchDir::create(&d)?;
            (Some(s), d)
        }
    };
    let exe = std::env::current_exe().context("locating the dmtx binary")?;
    let nodes = dmtx::cluster::LocalNodes::start(&exe, args.local, bytes, replicas, &dir)?;
    eprintln!(
        "cluster: {} memory nodes, {replicas} replicas, cluster file {}{}",
        args.local,
        nodes.cluster_file.display(),
        if scratch.is_some() { " (removed on exit)" } else { "" }
    );
    let Some(mut bench_args) = bench_args else {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        return Ok(EXIT_OK);
    };
    if args.compute_nodes > 1 {
        nodes.add_compute_nodes(args.compute_nodes)?;
        let code = run_compute_nodes(&exe, &nodes, &bench_args, &args.then, args.compute_nodes);
        drop(nodes);
        drop(scratch);
        return code;
    }
    bench_args.cluster = Some(nodes.cluster_file.display().to_string());
    let me = std::process::id();
    let (cpu_before, own_before) = (nodes.cpu_seconds(), dmtx::cluster::process_cpu_seconds(me));
    let started = std::time::Instant::now();
    let code = bench(&bench_args);
    // How busy the memory nodes were: with enough coroutines the compute side, not the
    // memory node, should be the bottleneck.
    let wall = started.elapsed().as_secs_f64();
    for (i, (a, b)) in cpu_before.iter().zip(nodes.cpu_seconds()).enumerate() {
        if let (Some(a), Some(b)) = (a, b) {
            eprintln!(
                "memory node {i}: {:.2} s CPU in {wall:.1} s ({:.2} cores, loading included)",
                b - a,
                (b - a) / wall
            );
        }
    }
    if let (Some(a), Some(b)) = (own_before, dmtx::cluster::process_cpu_seconds(me)) {
        eprintln!(
            "compute node (this process): {:.2} s CPU in {wall:.1} s ({:.2} cores)",
            b - a,
            (b - a) / wall
        );
    }
    drop(nodes);
    drop(scratch);
    code
}

/// `argv` without the flags in `drop` (`--out V`, `--out=V`, `-o V`, `-oV`, `-o=V`;
/// flags without a value, like `-q`, when `takes_value` is false).
fn without_flags(argv: &[String], drop: &[(&str, Option<&str>, bool)]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let hit = drop.iter().find_map(|&(long, short, takes_value)| {
            let exact = a == long || short.is_some_and(|s| a == s);
            let joined = a.starts_with(&format!("{long}="))
                || short.is_some_and(|s| a.len() > s.len() && a.starts_with(s) && takes_value);
            (exact || joined).then_some((exact, takes_value))
        });
        match hit {
            Some((true, true)) => {
                it.next();
            }
            Some(_) => {}
            None => out.push(a.clone()),
        }
    }
    out
}

/// `path` with `-cnI` before its extension: `run.json` → `run-cn2.json`.
fn per_cn(path: &std::path::Path, i: u16) -> std::path::PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-cn{i}.{}", ext.to_string_lossy()),
        None => format!("{stem}-cn{i}"),
    };
    path.with_file_name(name)
}

/// `cluster up --compute-nodes N -- bench ...`: N `bench --cn I` processes against the
/// cluster, then their records merged (`dmtx report`'s merge) and, with a check, their
/// histories checked as one.
fn run_compute_nodes(
    exe: &std::path::Path,
    nodes: &dmtx::cluster::LocalNodes,
    bench_args: &BenchArgs,
    then: &[String],
    n: u16,
) -> anyhow::Result<i32> {
    use std::io::BufRead;
    let cfg = BenchConfig::from_args(bench_args)?;
    let unix = dmtx::results::wall_clock_unix_s() as u64;
    let records: Vec<std::path::PathBuf> = (0..n)
        .map(|i| match &cfg.out {
            OutTarget::File(f) => Ok(per_cn(f, i)),
            OutTarget::Dir(d) => Ok(d.join(format!("{}-cn{i}.json", cfg.file_stem(unix)))),
            OutTarget::Stdout | OutTarget::None => Err(anyhow::anyhow!(
                "--out -: {n} compute nodes write {n} records; give a directory or a file name (each gets -cnI)"
            )),
        })
        .collect::<anyhow::Result<_>>()?;
    let histories: Option<Vec<std::path::PathBuf>> = cfg.check.then(|| {
        (0..n)
            .map(|i| match &cfg.history {
                Some(h) => per_cn(h, i),
                None => nodes.dir.join(format!("cn{i}.history")),
            })
            .collect()
    });
    let argv = without_flags(
        then,
        &[
            ("--out", Some("-o"), true),
            ("--history", None, true),
            ("--quiet", Some("-q"), false),
        ],
    );
    eprintln!(
        "cluster: {n} compute nodes on loopback, records {}",
        records
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut children = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut cmd = std::process::Command::new(exe);
        cmd.args(&argv)
            .arg("--cluster")
            .arg(&nodes.cluster_file)
            .args(["--cn", &i.to_string(), "--quiet", "--out"])
            .arg(&records[i as usize]);
        if let Some(h) = &histories {
            cmd.arg("--history").arg(&h[i as usize]);
        }
        let mut child = cmd
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting compute node {i}"))?;
        // Each line a compute node prints is tagged with its id.
        let err = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("cn{i}: {line}");
            }
        });
        children.push(child);
    }
    let mut code = EXIT_OK;
    let codes = dmtx::cluster::wait_all_or_stop(&mut children).context("waiting for the compute nodes")?;
    for (i, c) in codes.into_iter().enumerate() {
        match c {
            Some(EXIT_OK) => {}
            Some(c) => {
                eprintln!("compute node {i} exited with {c}");
                code = code.max(c);
            }
            None => {
                eprintln!("compute node {i} was stopped: another one failed");
                code = code.max(EXIT_ERROR);
            }
        }
    }
    if code == EXIT_ERROR || code == EXIT_INTERRUPTED {
        return Ok(code);
    }
    let loaded = dmtx::report::load(&records)?;
    let merged = dmtx::report::merge_cn_runs(loaded.runs);
    for note in &merged.notes {
        eprintln!("{note}");
    }
    anyhow::ensure!(
        merged.runs.len() == 1,
        "the {n} compute nodes wrote records of {} different runs; they did not meet as one run",
        merged.runs.len()
    );
    let mut out = std::io::stdout().lock();
    out.write_all(dmtx::report::render(&merged.runs).as_bytes())?;
    out.flush()?;
    drop(out);
    if let Some(paths) = &histories {
        let isolation = match merged.runs[0].1.isolation.as_str() {
            "serializable" => Some(dmtx::runtime::Isolation::Serializable),
            "strict serializable" => Some(dmtx::runtime::Isolation::StrictSerializable),
            "snapshot isolation" => Some(dmtx::runtime::Isolation::SnapshotIsolation),
            _ => None,
        };
        if let Some(isolation) = isolation {
            let history = dmtx_check::format::read_histories(paths)?;
            let options = dmtx_check::CheckOptions {
                // The processes share this host's wall clock; the margin covers reading
                // it against each one's monotonic clock.
                clock_offset_ns_max: CLOCK_OFFSET_NS_LOOPBACK,
                ..dmtx_check::check_options(isolation)
            };
            let report = dmtx_check::check(&history, &options);
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "check of the {n} compute nodes' histories ({} txns):",
                history.len()
            )?;
            write!(out, "{report}")?;
            out.flush()?;
            if !report.is_clean() {
                eprintln!(
                    "error: isolation check failed: {} (seed {})",
                    report.summary(),
                    cfg.seed
                );
                code = EXIT_ANOMALY;
            }
        }
    }
    Ok(code)
}

/// `cluster up`'s bound on the offset between its compute nodes' clocks (one host).
const CLOCK_OFFSET_NS_LOOPBACK: u64 = 1_000_000;

fn memnode(args: &MemnodeArgs) -> anyhow::Result<i32> {
    use dmtx::memnode::server::{Server, ServerConfig};
    let bytes =
        dmtx::config::parse_region_bytes(&args.size).map_err(|why| anyhow::anyhow!("--size {}: {why}", args.size))?;
    let mut cfg = ServerConfig::new(dmtx::verbs::MnId(args.node_id), bytes);
    cfg.listen = args.listen;
    cfg.cluster_id = args.cluster_id;
    cfg.epoch = args.epoch;
    cfg.backing = args.backing.clone();
    if let Some(n) = args.threads {
        cfg.threads = n;
    }
    match &args.token_file {
        Some(path) => cfg.token = dmtx::cluster::read_token(path)?,
        None => eprintln!(
            "warning: no --token-file: any client that reaches {} may connect",
            args.listen
        ),
    }
    let server = Server::bind(cfg)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "memnode {} listening on {} ({bytes} bytes, cluster {}, epoch {})",
        args.node_id,
        server.local_addr(),
        args.cluster_id,
        args.epoch
    )?;
    out.flush()?;
    drop(out);
    server.serve_until(&stop);
    Ok(EXIT_OK)
}

fn check(args: &CheckArgs) -> anyhow::Result<i32> {
    let isolation = match args.level.as_str() {
        "serializable" => dmtx::runtime::Isolation::Serializable,
        "si" | "snapshot" => dmtx::runtime::Isolation::SnapshotIsolation,
        "strict" => dmtx::runtime::Isolation::StrictSerializable,
        other => anyhow::bail!("--level `{other}`: expected `serializable`, `si` or `strict`"),
    };
    let mut options = dmtx_check::CheckOptions {
        sessions: !args.no_sessions,
        ..dmtx_check::check_options(isolation)
    };
    match (&args.clock_offset_max, args.files.len()) {
        (Some(t), _) => {
            anyhow::ensure!(
                options.real_time,
                "--clock-offset-max {t}: only real-time order (--level strict) compares clocks; drop it"
            );
            options.clock_offset_ns_max = parse_clock_offset(t)?;
        }
        (None, n) if n > 1 && options.real_time => anyhow::bail!(
            "--level strict over {n} histories compares times taken on different hosts; give --clock-offset-max \
             (the most the hosts' clocks can differ, e.g. 1ms; 0 if they share one clock), or check at serializable"
        ),
        (None, _) => {}
    }
    let history = dmtx_check::format::read_histories(&args.files)?;
    if args.files.len() > 1 {
        eprintln!("merged {} histories: {} txns", args.files.len(), history.len());
    }
    let started = std::time::Instant::now();
    let report = dmtx_check::check(&history, &options);
    let secs = started.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    write!(out, "{report}")?;
    writeln!(
        out,
        "checked {} txns in {secs:.2} s ({:.0} txns/s)",
        history.len(),
        history.len() as f64 / secs.max(1e-9)
    )?;
    out.flush()?;
    Ok(if report.is_clean() { EXIT_OK } else { EXIT_ANOMALY })
}

/// A clock offset bound: `0`, or a whole number with `ns`, `us`, `ms` or `s`.
fn parse_clock_offset(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        anyhow::anyhow!("--clock-offset-max {text}: expected a whole number with a unit, e.g. 500us or 2ms")
    })?;
    let scale = match unit {
        "" if n == 0 => 0,
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        u => anyhow::bail!("--clock-offset-max {text}: unknown unit `{u}`; use ns, us, ms or s"),
    };
    Ok(n.saturating_mul(scale))
}

fn bench(args: &BenchArgs) -> anyhow::Result<i32> {
    let cfg = BenchConfig::from_args(args)?;
    if args.dry_run {
        return dry_run(&cfg);
    }
    // A run whose record or history could not be written is found out now, not after it.
    cfg.prepare_outputs()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(EXIT_INTERRUPTED);
            }
            eprintln!(
                "\ninterrupted: stopping (a run under way writes its results so far; Ctrl-C again quits at once)"
            );
        })
        .context("installing the Ctrl-C handler")?;
    }
    if !cfg.quiet {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Simulated threads are virtual: they share the one OS thread by design.
        if cfg.threads as usize > cores && cfg.sim.is_none() {
            eprintln!(
                "note: --threads {} exceeds the {cores} CPUs here; worker threads poll, so they will share cores and measure less",
                cfg.threads
            );
        }
    }
    let terminal = std::io::stderr().is_terminal();
    let status = dmtx::config::status_interval(args.status_interval.as_deref(), terminal)?;
    let console = Console {
        bar: (!cfg.quiet && terminal).then(Bar::new),
        status: status.filter(|_| !cfg.quiet).map(Status::new),
    };
    let monitor: &dyn Monitor = if console.bar.is_none() && console.status.is_none() {
        &Silent
    } else {
        &console
    };
    let result = registry::run(
        &cfg,
        &RunHooks {
            stop: &stop,
            monitor,
            probes: None,
        },
    );
    if let Some(b) = &console.bar {
        b.bar.finish_and_clear();
    }
    let result = match result {
        Err(dmtx::RunError::Interrupted { phase }) => {
            eprintln!("interrupted while {phase}; nothing was run or written");
            return Ok(EXIT_INTERRUPTED);
        }
        r => r?,
    };
    let stem = cfg.file_stem(result.run_info.started_at_unix_s as u64);
    let saved = match results::write(&result, &cfg.out, &stem) {
        Ok(saved) => saved,
        Err(e) => {
            // The run is done: keep it. Print the summary, save the JSON elsewhere.
            if !cfg.quiet {
                print!("{}", result.summary(None));
            }
            let fallback = std::env::temp_dir().join(format!("{stem}.json"));
            return match std::fs::write(&fallback, result.to_json()) {
                Ok(()) => Err(anyhow::anyhow!(
                    "{e}; the record was saved to {} instead",
                    fallback.display()
                )),
                Err(e2) => Err(anyhow::anyhow!(
                    "{e}; saving it to {} failed too: {e2}; the summary above is all that is left",
                    fallback.display()
                )),
            };
        }
    };
    if cfg.out == OutTarget::Stdout {
        let mut out = std::io::stdout().lock();
        out.write_all(result.to_json().as_bytes())?;
        out.flush()?;
        if !cfg.quiet {
            eprint!("{}", result.summary(None));
        }
    } else if !cfg.quiet {
        let mut out = std::io::stdout().lock();
        out.write_all(result.summary(saved.as_deref()).as_bytes())?;
        out.flush()?;
    }
    let mut code = EXIT_OK;
    if !result.invariant.ok {
        eprintln!(
            "error: invariant check failed: {} (seed {})",
            one_line(&result.invariant.detail),
            cfg.seed
        );
        code = EXIT_ANOMALY;
    }
    if let Some(c) = result.check.as_ref().filter(|c| !c.clean) {
        eprintln!("error: isolation check failed: {} (seed {})", c.summary, cfg.seed);
        code = EXIT_ANOMALY;
    }
    if let Some(d) = &result.stop_detail {
        // A limit cut the run short: the record says so, and so does the exit code.
        eprintln!("error: {} (seed {})", one_line(d), cfg.seed);
        code = EXIT_ERROR;
    }
    if code == EXIT_OK && result.stop_reason == results::StopReason::Interrupt {
        code = EXIT_INTERRUPTED;
    }
    Ok(code)
}

/// `bench --dry-run`: the settings and the memory plan; nothing is built.
fn dry_run(cfg: &BenchConfig) -> anyhow::Result<i32> {
    let (plan, refusal) = registry::plan(cfg)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "dmtx bench --dry-run  {} on {}: {} threads x {} coroutines{}, {} memory nodes x {} replicas, seed {}",
        cfg.protocol,
        cfg.workload,
        cfg.threads,
        cfg.coroutines,
        if cfg.compute_nodes > 1 {
            format!(" x {} compute nodes", cfg.compute_nodes)
        } else {
            String::new()
        },
        cfg.memory_nodes,
        cfg.replicas,
        cfg.seed
    )?;
    for (k, v) in &cfg.knobs_effective {
        writeln!(out, "  knob        {k}={v}")?;
    }
    for t in &plan.tables {
        writeln!(
            out,
            "  table       {:<16} {:>12} records  {:>10} reserved, {:>10} loaded, {:>10} full per replica  x {}",
            t.name,
            t.capacity,
            dmtx::units::bytes(t.replica_bytes),
            dmtx::units::bytes(t.loaded_bytes),
            dmtx::units::bytes(t.full_bytes),
            t.nodes.len()
        )?;
    }
    for (i, need) in plan.need_per_mn.iter().enumerate() {
        writeln!(
            out,
            "  mn{i:<9} {} ({} tables, {} coordinator areas); region {}",
            dmtx::units::bytes(*need),
            dmtx::units::bytes(plan.tables_per_mn[i]),
            dmtx::units::bytes(plan.coordinators_per_mn[i]),
            dmtx::units::bytes(plan.mn_bytes(cfg.mn_bytes)),
        )?;
    }
    writeln!(out, "  memory      {}", plan.describe(cfg))?;
    out.flush()?;
    match refusal {
        None => {
            writeln!(out, "  fits        yes")?;
            Ok(EXIT_OK)
        }
        Some(e) => Err(e.into()),
    }
}

/// What `dmtx bench` shows on stderr while it runs: a progress bar on a terminal, and
/// status lines every `--status-interval` (through the bar when there is one).
struct Console {
    bar: Option<Bar>,
    status: Option<Status>,
}

impl Monitor for Console {
    fn phase(&self, what: &str) {
        if let Some(b) = &self.bar {
            b.phase(what);
        }
    }

    fn running(&self, stop: StopRule) {
        if let Some(b) = &self.bar {
            b.running(stop);
        }
        if let Some(s) = &self.status {
            s.start();
        }
    }

    fn tick(&self, p: &Progress) {
        if let Some(b) = &self.bar {
            b.tick(p);
        }
        if let Some(line) = self.status.as_ref().and_then(|s| s.line(p)) {
            match &self.bar {
                Some(b) => b.bar.println(line),
                None => eprintln!("{line}"),
            }
        }
    }

    fn finished(&self) {
        if let Some(b) = &self.bar {
            b.finished();
        }
    }
}

/// Status lines at an interval of real time: `12 s: 431.2 k txn/s, abort 13.1%, p99
/// 29 us`, each over the time since the previous line. The p99 is of commits' latency
/// (first attempt to commit) from the threads' coarse progress histograms, so within
/// 12.5% above the exact value; the summary's percentiles are exact.
struct Status {
    interval: Duration,
    state: Mutex<StatusState>,
}

struct StatusState {
    /// When the next line is due.
    due: std::time::Instant,
    /// The progress at the previous line (or the start).
    last: Progress,
}

impl Status {
    fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new(StatusState {
                due: std::time::Instant::now() + interval,
                last: Progress {
                    elapsed: Duration::ZERO,
                    committed: 0,
                    attempted: 0,
                    latency: dmtx::driver::LatencyCounts::ZERO,
                },
            }),
        }
    }

    /// The measured run begins: the first line is one interval from now.
    fn start(&self) {
        let mut st = self.state.lock().expect("status lock");
        st.due = std::time::Instant::now() + self.interval;
    }

    /// The line to print now, if one is due.
    fn line(&self, p: &Progress) -> Option<String> {
        let mut st = self.state.lock().expect("status lock");
        let now = std::time::Instant::now();
        if now < st.due {
            return None;
        }
        st.due = now + self.interval;
        let last = std::mem::replace(&mut st.last, *p);
        let secs = p.elapsed.saturating_sub(last.elapsed).as_secs_f64().max(1e-9);
        let committed = p.committed.saturating_sub(last.committed);
        let attempted = p.attempted.saturating_sub(last.attempted);
        let aborts = if attempted > 0 {
            100.0 * attempted.saturating_sub(committed) as f64 / attempted as f64
        } else {
            0.0
        };
        let p99 = p
            .latency
            .since(&last.latency)
            .quantile_ns(0.99)
            .map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e3));
        let at = p.elapsed.as_secs_f64();
        // Whole seconds; finer early on (a simulated run lasts a fraction of a second).
        let at = match at {
            a if a < 1.0 => format!("{:.0} ms", a * 1e3),
            a if a < 10.0 => format!("{a:.1} s"),
            a => format!("{a:.0} s"),
        };
        Some(format!(
            "{at}: {} txn/s, abort {aborts:.1}%, p99 {p99} us",
            dmtx::units::si(committed as f64 / secs)
        ))
    }
}

/// The progress bar on a terminal's stderr.
struct Bar {
    bar: ProgressBar,
    stop: Mutex<Option<StopRule>>,
}

impl Bar {
    fn new() -> Self {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        Self {
            bar,
            stop: Mutex::new(None),
        }
    }
}

impl Monitor for Bar {
    fn phase(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    fn running(&self, stop: StopRule) {
        let style = ProgressStyle::with_template("{spinner} [{bar:30}] {percent:>3}% {elapsed_precise} {msg}")
            .expect("constant template")
            .progress_chars("=> ");
        self.bar.set_style(style);
        self.bar.set_length(match stop {
            StopRule::Duration(d) => d.as_millis() as u64,
            StopRule::Txns(n) => n,
        });
        self.bar.set_message("running");
        *self.stop.lock().expect("bar lock") = Some(stop);
    }

    fn tick(&self, p: &Progress) {
        let pos = match *self.stop.lock().expect("bar lock") {
            Some(StopRule::Duration(_)) => p.elapsed.as_millis() as u64,
            Some(StopRule::Txns(_)) => p.committed,
            None => 0,
        };
        self.bar.set_position(pos);
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        let aborts = if p.attempted > 0 {
            100.0 * (p.attempted - p.committed) as f64 / p.attempted as f64
        } else {
            0.0
        };
        self.bar.set_message(format!(
            "{} committed  {:.0} txn/s  {aborts:.1}% aborts",
            p.committed,
            p.committed as f64 / secs
        ));
    }

    fn finished(&self) {
        self.bar.set_style(ProgressStyle::default_spinner());
    }
}

/// Print clap's help or version as it is; turn its errors into one line.
fn clap_exit(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            EXIT_OK
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            EXIT_ERROR
        }
        _ => {
            let argv: Vec<String> = std::env::args().collect();
            eprintln!("error: {}", clap_message(&e, &argv));
            EXIT_ERROR
        }
    }
}

/// Clap's error as one line with everything it names: the missing arguments, the valid
/// values, its tips, and the help of the (sub)command `argv` was for, e.g. "the
/// following required arguments were not provided: --listen <ADDR>; see `dmtx memnode
/// --help`". Clap renders those on indented lines below its first line.
fn clap_message(e: &clap::Error, argv: &[String]) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines();
    let head = lines
        .next()
        .unwrap_or("bad command line")
        .trim_start_matches("error: ")
        .trim()
        .to_string();
    let mut details = Vec::new();
    let mut tips = Vec::new();
    for line in lines {
        // The usage and "For more information" paragraphs start unindented.
        if !line.starts_with(' ') {
            if line.trim().is_empty() {
                continue;
            }
            break;
        }
        match line.trim().strip_prefix("tip: ") {
            Some(tip) => tips.push(tip.trim()),
            None => details.push(line.trim()),
        }
    }
    let mut msg = head;
    if !details.is_empty() {
        if msg.ends_with(':') {
            msg.push(' ');
            msg.push_str(&details.join(", "));
        } else {
            msg.push_str(&format!(" {}", details.join(" ")));
        }
    }
    if !tips.is_empty() {
        msg.push_str(&format!(" ({})", tips.join("; ")));
    }
    format!("{}; see `{} --help`", one_line(&msg), command_path(argv))
}

/// The (sub)command `argv` names, as typed: `dmtx`, `dmtx memnode`, `dmtx cluster up`.
fn command_path(argv: &[String]) -> String {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let mut path = vec!["dmtx".to_string()];
    for a in argv.iter().skip(1) {
        let Some(sub) = cmd.find_subcommand(a).cloned() else {
            break;
        };
        path.push(sub.get_name().to_string());
        cmd = sub;
    }
    path.join(" ")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
