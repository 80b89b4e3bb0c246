//! Memory planning: what a run will hold, computed from the table specs alone before
//! anything is built, and the refusal when it cannot fit.
//!
//! A run needs, on each memory node, its share of the table replicas (FORD's hash index:
//! hashed and overflow buckets, and the value region when the protocol's format gives
//! the table one, [`dmtx_store::footprint`]) and every coordinator's areas
//! (undo logs), and on the compute node the table images it builds before shipping them.
//! Regions are reserved sparse: only the pages a load or an insert writes cost memory,
//! so a table has three sizes: reserved (region space; must fit `--mn-bytes`), loaded
//! (resident once loaded) and full (resident if the run fills its room for inserts). An
//! in-process run (`mem`, `sim`) holds the nodes in this process, so what it holds once
//! loaded must fit in the memory the host can give ([`host_available_bytes`],
//! `MemAvailable`); a `--cluster` run holds only the images here, and each node's region
//! must be large enough. Growth past the load is watched while the run goes (the
//! driver's memory guard stops it before the host runs out).
//!
//! When a run does not fit, [`PlanError`] names the estimate, what it exceeds, and the
//! knobs that shrink it, with the largest value of the workload's scale knob that fits
//! ([`Workload::SCALE_KNOB`]).

use std::fmt;

use dmtx_runtime::{Knobs, Protocol};
use dmtx_store::{check_spec, footprint, placement, SlotLayout, TableSpec};
use dmtx_verbs::MnId;
use dmtx_workloads::Workload;

use crate::config::BenchConfig;
use crate::error::RunError;
use crate::units::{bytes, si};

/// Share of the host's available memory an in-process run may plan to fill; the rest is
/// left to the system, the coordinators' caches, the history and the results.
pub const HOST_SHARE: f64 = 0.9;
/// Headroom over the planned need when `--mn-bytes` is not given: need × 5/4 + this many
/// bytes (untouched region pages cost no memory).
pub const MN_HEADROOM_BYTES: u64 = 16 << 20;
/// Bytes before the first allocation of a region.
const REGION_HEADER_BYTES: u64 = 64;

/// One table as planned.
#[derive(Clone, Debug, PartialEq)]
pub struct TablePlan {
    /// Name.
    pub name: String,
    /// Records it has room for (loaded and inserted during the run).
    pub capacity: u64,
    /// Region bytes one replica reserves.
    pub replica_bytes: u64,
    /// Resident bytes of one replica once loaded.
    pub loaded_bytes: u64,
    /// Resident bytes of one replica if the run fills its room.
    pub full_bytes: u64,
    /// Bytes of one slot, as the protocol's format sizes it for this table.
    pub slot_bytes: u32,
    /// Region bytes of one replica's value region (0: the protocol keeps values in the
    /// slots); part of `replica_bytes`.
    pub value_region_bytes: u64,
    /// Resident bytes of one replica's value region once loaded; part of `loaded_bytes`.
    pub value_region_loaded_bytes: u64,
    /// The nodes holding its replicas, primary first.
    pub nodes: Vec<MnId>,
}

/// What a run needs, per memory node and on this host.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPlan {
    /// Every table.
    pub tables: Vec<TablePlan>,
    /// Region bytes of table replicas on each memory node.
    pub tables_per_mn: Vec<u64>,
    /// Resident bytes of table replicas on each memory node once loaded.
    pub loaded_per_mn: Vec<u64>,
    /// Resident bytes of table replicas on each memory node if every table fills.
    pub full_per_mn: Vec<u64>,
    /// Bytes of coordinator areas (logs) on each memory node, all coordinators together.
    pub coordinators_per_mn: Vec<u64>,
    /// Region bytes each memory node needs at least.
    pub need_per_mn: Vec<u64>,
    /// Resident bytes of the table images the compute node builds before shipping them
    /// (all at once: tables are built in parallel; an image is resident where written).
    pub build_bytes: u64,
    /// Whether the memory nodes live in this process (`mem`, `sim`).
    pub in_process: bool,
}

impl MemoryPlan {
    /// Plan `specs` laid out by `layout` over `cfg`'s memory nodes, with `per_coord` bytes
    /// of coordinator areas per node per coordinator.
    pub fn new(
        specs: &[TableSpec],
        layout: &dyn SlotLayout,
        cfg: &BenchConfig,
        per_coord: &[u64],
    ) -> Result<Self, RunError> {
        let mn_count = cfg.memory_nodes as usize;
        let replicas = cfg.replicas as usize;
        let mut tables_per_mn = vec![0u64; mn_count];
        let mut loaded_per_mn = vec![0u64; mn_count];
        let mut full_per_mn = vec![0u64; mn_count];
        let mut tables = Vec::with_capacity(specs.len());
        let mut build_bytes = 0;
        for spec in specs {
            // A schema that does not tile the value, or a value region too small for
            // the load, is refused here, before anything is built.
            check_spec(spec, layout)?;
            let fp = footprint(spec, layout);
            let bytes = fp.reserved_bytes;
            let nodes = match cfg.cluster.as_ref().and_then(|v| v.primary_of(&spec.name)) {
                // The cluster file names the primary; backups follow it round-robin.
                Some(primary) => placement(primary as u32, mn_count, replicas)?,
                None => placement(spec.id, mn_count, replicas)?,
            };
            for mn in &nodes {
                // A table with a value region starts on a page (`create_table`): up to a
                // page of alignment before it, besides the usual 64-byte rounding.
                let align_slack = if fp.value_region_bytes > 0 { 4096 } else { 0 };
                tables_per_mn[mn.index()] += bytes.next_multiple_of(64) + align_slack;
                loaded_per_mn[mn.index()] += fp.loaded_bytes;
                full_per_mn[mn.index()] += fp.full_bytes;
            }
            build_bytes += fp.loaded_bytes;
            tables.push(TablePlan {
                name: spec.name.clone(),
                capacity: spec.capacity,
                replica_bytes: bytes,
                loaded_bytes: fp.loaded_bytes,
                full_bytes: fp.full_bytes,
                slot_bytes: fp.slot_bytes,
                value_region_bytes: fp.value_region_bytes,
                value_region_loaded_bytes: fp.value_region_loaded_bytes,
                nodes,
            });
        }
        let coords = cfg.coordinators() as u64;
        let coordinators_per_mn: Vec<u64> = (0..mn_count)
            .map(|i| coords * per_coord.get(i).copied().unwrap_or(0))
            .collect();
        let need_per_mn = (0..mn_count)
            .map(|i| REGION_HEADER_BYTES + tables_per_mn[i] + coordinators_per_mn[i])
            .collect();
        Ok(Self {
            tables,
            tables_per_mn,
            loaded_per_mn,
            full_per_mn,
            coordinators_per_mn,
            need_per_mn,
            build_bytes,
            in_process: cfg.cluster.is_none(),
        })
    }

    /// The node that needs the most, and its need.
    pub fn largest_need(&self) -> (usize, u64) {
        self.need_per_mn
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(_, b)| b)
            .unwrap_or((0, 0))
    }

    /// The region size each node gets: `--mn-bytes`, or the largest need with headroom.
    pub fn mn_bytes(&self, given: Option<u64>) -> u64 {
        given.unwrap_or_else(|| {
            let need = self.largest_need().1;
            (need + need / 4 + MN_HEADROOM_BYTES).next_multiple_of(1 << 20)
        })
    }

    /// Records over all tables (their room, inserts included).
    pub fn records(&self) -> u64 {
        self.tables.iter().map(|t| t.capacity).sum()
    }

    /// Resident bytes of every node's loaded tables (all replicas).
    pub fn loaded_tables_bytes(&self) -> u64 {
        self.loaded_per_mn.iter().sum()
    }

    /// Bytes this process holds at its peak while loading: the built images and,
    /// in-process, every node's loaded tables and coordinator areas.
    pub fn host_bytes(&self) -> u64 {
        let nodes: u64 = if self.in_process {
            self.loaded_tables_bytes() + self.coordinators_per_mn.iter().sum::<u64>()
        } else {
            0
        };
        self.build_bytes + nodes
    }

    /// Bytes the memory nodes hold in this process if every growing table fills its
    /// room (0 for a `--cluster` run).
    pub fn host_full_bytes(&self) -> u64 {
        if self.in_process {
            self.full_per_mn.iter().sum::<u64>() + self.coordinators_per_mn.iter().sum::<u64>()
        } else {
            0
        }
    }

    /// What keeps this plan from running, if anything: the regions against `--mn-bytes`
    /// (`given`), then this process against `available` bytes of host memory.
    pub fn limit_hit(&self, given: Option<u64>, available: Option<u64>) -> Option<Limit> {
        let (mn, need) = self.largest_need();
        if let Some(g) = given.filter(|&g| g < need) {
            return Some(Limit::Region { given: g, mn, need });
        }
        let avail = available?;
        let allowed = (avail as f64 * HOST_SHARE) as u64;
        (self.host_bytes() > allowed).then_some(Limit::Host {
            need: self.host_bytes(),
            available: avail,
        })
    }

    /// One line: the dataset and the memory it takes (`dmtx list`, `--dry-run`).
    pub fn describe(&self, cfg: &BenchConfig) -> String {
        let (_, need) = self.largest_need();
        let plural = |n: usize, one: &str| {
            if n == 1 {
                format!("1 {one}")
            } else {
                format!("{n} {one}s")
            }
        };
        let full = self.host_full_bytes();
        format!(
            "{} records in {}; {} reserved per memory node (largest) on {} x {}; {} on this host{}{}",
            si(self.records() as f64),
            plural(self.tables.len(), "table"),
            bytes(need),
            plural(cfg.memory_nodes as usize, "memory node"),
            plural(cfg.replicas as usize, "replica"),
            bytes(self.host_bytes()),
            if self.in_process {
                " once loaded (regions and table images)"
            } else {
                " (table images to ship)"
            },
            if full > self.loaded_tables_bytes() + self.coordinators_per_mn.iter().sum::<u64>() {
                format!(", up to {} if every growing table fills", bytes(full))
            } else {
                String::new()
            },
        )
    }
}

/// What a run exceeds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `--mn-bytes` is smaller than a node's need.
    Region {
        /// The size given.
        given: u64,
        /// The node.
        mn: usize,
        /// Its need.
        need: u64,
    },
    /// This process would hold more than the host can give.
    Host {
        /// Bytes this process would hold.
        need: u64,
        /// `MemAvailable`.
        available: u64,
    },
}

/// A run that does not fit, with how to shrink it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PlanError {
    /// What was exceeded.
    pub limit: Limit,
    /// Per-node detail of the need (tables, coordinator areas).
    pub detail: String,
    /// The preset whose dataset it is, if any.
    pub preset: Option<String>,
    /// The scale knob and the largest value that fits, if one does.
    pub fits: Option<(String, u64)>,
    /// The scale knob's current value.
    pub scale: Option<(String, String)>,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = match (&self.preset, &self.scale) {
            (Some(p), Some((k, v))) => format!("--preset {p}'s dataset ({k}={v})"),
            (Some(p), None) => format!("--preset {p}'s dataset"),
            (None, Some((k, v))) => format!("the dataset ({k}={v})"),
            (None, None) => "the dataset".to_string(),
        };
        let shrink = match &self.fits {
            Some((k, v)) => format!("--set {k}={v} is the largest that fits"),
            None => "no scale of this workload fits".to_string(),
        };
        match self.limit {
            Limit::Region { given, mn, need } => write!(
                f,
                "--mn-bytes {}: {whose} needs {} on memory node mn{mn} ({}); pass --mn-bytes {} or more, \
                 drop --mn-bytes to size it automatically, or shrink the data: {shrink}",
                bytes(given),
                bytes(need),
                self.detail,
                mib(need),
            ),
            Limit::Host { need, available } => write!(
                f,
                "{whose} needs about {} of this host's memory ({}), more than the {} it can give \
                 ({:.0}% of MemAvailable {}); shrink it: {shrink}, or use fewer --replicas, or \
                 run the memory nodes on other hosts (--cluster)",
                bytes(need),
                self.detail,
                bytes((available as f64 * HOST_SHARE) as u64),
                HOST_SHARE * 100.0,
                bytes(available),
            ),
        }
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes; `None` where it cannot be read.
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&text)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn host_total_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemTotal:")
}

/// This process's resident memory (`/proc/self/statm`), in bytes.
pub fn process_resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the running system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(4096) as u64)
}

fn meminfo_available(text: &str) -> Option<u64> {
    meminfo_field(text, "MemAvailable:")
}

fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Plan `workload` under `proto` for `cfg`, and refuse it (before anything is built) if
/// it exceeds `--mn-bytes` or `available` bytes of host memory.
pub fn plan_and_check<P: Protocol, W: Workload>(
    proto: &P,
    workload: &W,
    cfg: &BenchConfig,
    per_coord: &[u64],
    available: Option<u64>,
) -> Result<MemoryPlan, RunError> {
    match assess(proto, workload, cfg, per_coord, available)? {
        (plan, None) => Ok(plan),
        (_, Some(e)) => Err(RunError::DoesNotFit(Box::new(e))),
    }
}

/// The plan, and why it cannot run if it cannot.
pub fn assess<P: Protocol, W: Workload>(
    proto: &P,
    workload: &W,
    cfg: &BenchConfig,
    per_coord: &[u64],
    available: Option<u64>,
) -> Result<(MemoryPlan, Option<PlanError>), RunError> {
    let plan = MemoryPlan::new(&workload.tables(), proto.layout(), cfg, per_coord)?;
    let Some(limit) = plan.limit_hit(cfg.mn_bytes, available) else {
        return Ok((plan, None));
    };
    let detail = match limit {
        Limit::Region { mn, .. } => format!(
            "{} of tables, {} of coordinator areas",
            bytes(plan.tables_per_mn[mn]),
            bytes(plan.coordinators_per_mn[mn])
        ),
        Limit::Host { .. } => format!(
            "{} of loaded tables on {} memory nodes, {} to build them, {} of coordinator areas",
            bytes(plan.loaded_tables_bytes()),
            cfg.memory_nodes,
            bytes(plan.build_bytes),
            bytes(plan.coordinators_per_mn.iter().sum()),
        ),
    };
    let scale = W::SCALE_KNOB.and_then(|k| cfg.knobs_effective.get(k).map(|v| (k.to_string(), v.clone())));
    let fits = largest_fitting_scale::<P, W>(proto, cfg, per_coord, available);
    let error = PlanError {
        limit,
        detail,
        preset: cfg.preset.clone(),
        fits,
        scale,
    };
    Ok((plan, Some(error)))
}

/// `dmtx list`'s table of presets: each paper's knob values per workload, its dataset
/// and memory estimate (FORD's layout, default threads and coroutines), and whether it
/// fits this host.
pub fn render_presets() -> String {
    let available = host_available_bytes();
    let mut out = format!(
        "preset datasets (--protocol ford, default threads x coroutines; this host: {}):\n",
        available.map_or("memory unknown".to_string(), |a| format!(
            "{} of MemAvailable, {} usable",
            bytes(a),
            bytes((a as f64 * HOST_SHARE) as u64)
        ))
    );
    for p in crate::preset::PRESETS {
        for (workload, knobs) in p.workloads {
            let args = crate::config::BenchArgs {
                preset: Some(p.name.to_string()),
                workload: workload.to_string(),
                ..Default::default()
            };
            let settings: Vec<String> = knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let estimate = match BenchConfig::from_args(&args)
                .map_err(|e| e.to_string())
                .and_then(|cfg| crate::registry::plan(&cfg).map(|r| (cfg, r)).map_err(|e| e.to_string()))
            {
                Ok((cfg, (plan, None))) => plan.describe(&cfg),
                Ok((cfg, (plan, Some(e)))) => format!(
                    "{}; DOES NOT FIT this host{}",
                    plan.describe(&cfg),
                    e.fits.map_or(String::new(), |(k, v)| format!(": --set {k}={v} fits"))
                ),
                Err(e) => format!("cannot plan: {e}"),
            };
            out += &format!(
                "  {:<8} {:<10} {}\n  {:<8} {:<10}   {estimate}\n",
                p.name,
                workload,
                if settings.is_empty() {
                    "(dmtx defaults)".to_string()
                } else {
                    settings.join(" ")
                },
                "",
                ""
            );
        }
    }
    out
}

/// The largest value of `W`'s scale knob under which the run fits, rounded down to two
/// significant digits; `None` if the workload has no scale knob or nothing fits.
fn largest_fitting_scale<P: Protocol, W: Workload>(
    proto: &P,
    cfg: &BenchConfig,
    per_coord: &[u64],
    available: Option<u64>,
) -> Option<(String, u64)> {
    let knob = W::SCALE_KNOB?;
    let current: u64 = cfg.knobs_effective.get(knob)?.parse().ok()?;
    let fits = |v: u64| -> bool {
        let mut knobs: Knobs = cfg.knobs.clone();
        knobs.set(knob, v);
        let Ok(w) = W::from_knobs(&knobs).map(|w| crate::driver::fit_to_run(w, cfg)) else {
            return false;
        };
        MemoryPlan::new(&w.tables(), proto.layout(), cfg, per_coord)
            .is_ok_and(|p| p.limit_hit(cfg.mn_bytes, available).is_none())
    };
    // Halve until something fits (small values may be refused by the workload's own
    // checks, so the search needs a fitting point, not value 1), then bisect upwards.
    let mut lo = current / 2;
    while lo > 0 && !fits(lo) {
        lo /= 2;
    }
    if lo == 0 {
        return None;
    }
    let mut hi = (lo * 2).min(current); // does not fit (or is the current value)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let rounded = round_down_2_digits(lo);
    Some((knob.to_string(), if fits(rounded) { rounded } else { lo }))
}

/// `n` with all but its two leading digits zeroed (12 345 678 → 12 000 000).
fn round_down_2_digits(n: u64) -> u64 {
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    (n / scale) * scale
}

/// Bytes as a `--mn-bytes` value, rounded up to whole MiB.
fn mib(b: u64) -> String {
    format!("{}MiB", b.div_ceil(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_memavailable_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   22000000 kB\n";
        assert_eq!(meminfo_available(text), Some(22_000_000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn rounding_keeps_two_leading_digits() {
        assert_eq!(round_down_2_digits(12_345_678), 12_000_000);
        assert_eq!(round_down_2_digits(99), 99);
        assert_eq!(round_down_2_digits(100), 100);
        assert_eq!(round_down_2_digits(1_999), 1_900);
    }

    fn plan(tables: u64, coords: u64, build: u64, in_process: bool) -> MemoryPlan {
        MemoryPlan {
            tables: Vec::new(),
            tables_per_mn: vec![tables, tables / 2],
            loaded_per_mn: vec![tables, tables / 2],
            full_per_mn: vec![tables, tables / 2],
            coordinators_per_mn: vec![coords, coords],
            need_per_mn: vec![64 + tables + coords, 64 + tables / 2 + coords],
            build_bytes: build,
            in_process,
        }
    }

    #[test]
    fn a_region_smaller_than_the_largest_need_is_the_limit_hit() {
        let p = plan(1000, 100, 500, true);
        assert_eq!(
            p.limit_hit(Some(1163), None),
            Some(Limit::Region {
                given: 1163,
                mn: 0,
                need: 1164
            })
        );
        assert_eq!(p.limit_hit(Some(1164), None), None);
    }

    #[test]
    fn in_process_runs_count_regions_and_images_against_the_host() {
        let p = plan(1000, 100, 500, true);
        assert_eq!(p.host_bytes(), 500 + 1500 + 200);
        let enough = (2200.0 / HOST_SHARE).ceil() as u64;
        assert_eq!(p.limit_hit(None, Some(enough)), None);
        assert_eq!(
            p.limit_hit(None, Some(enough - 10)),
            Some(Limit::Host {
                need: 2200,
                available: enough - 10
            })
        );
        // Remote nodes hold the tables; this host only builds the images.
        let remote = plan(1000, 100, 500, false);
        assert_eq!(remote.host_bytes(), 500);
        assert_eq!(remote.limit_hit(None, Some(600)), None);
    }

    #[test]
    fn the_refusal_names_the_estimate_the_limit_and_the_fix() {
        let e = PlanError {
            limit: Limit::Host {
                need: 40 << 30,
                available: 20 << 30,
            },
            detail: "tables".into(),
            preset: Some("rcbench".into()),
            fits: Some(("records".into(), 16_000_000)),
            scale: Some(("records".into(), "40000000".into())),
        }
        .to_string();
        for want in [
            "--preset rcbench's dataset (records=40000000)",
            "40.0 GiB",
            "18.0 GiB",
            "MemAvailable 20.0 GiB",
            "--set records=16000000",
        ] {
            assert!(e.contains(want), "{want:?} missing from {e}");
        }
        let e = PlanError {
            limit: Limit::Region {
                given: 1 << 30,
                mn: 1,
                need: 3 << 30,
            },
            detail: "tables".into(),
            preset: None,
            fits: None,
            scale: None,
        }
        .to_string();
        assert!(e.starts_with("--mn-bytes 1.0 GiB"), "{e}");
        assert!(e.contains("mn1") && e.contains("--mn-bytes 3072MiB"), "{e}");
    }
}
