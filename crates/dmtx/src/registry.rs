//! The protocols and workloads `dmtx bench` can run, and the dispatch from their names
//! to one generic call of [`driver::run::<P, W>`](crate::driver::run).
//!
//! Adding a protocol or a workload is one line in the `registry!` invocation below: a
//! protocol type implements `dmtx_runtime::Protocol`, a workload type
//! `dmtx_workloads::Workload`.

use std::fmt::Write as _;

use dmtx_runtime::{KnobError, KnobSpec, Knobs, Protocol};
use dmtx_workloads::Workload;

use crate::driver::{self, RunHooks};
use crate::error::RunError;
use crate::plan::{MemoryPlan, PlanError};
use crate::results::BenchResult;
use crate::BenchConfig;

/// One runnable protocol or workload, as `dmtx list` shows it and config validation
/// checks it.
#[derive(Copy, Clone)]
pub struct Entry {
    /// Command-line name.
    pub name: &'static str,
    /// One-line description.
    pub about: &'static str,
    /// `--set` knobs it accepts.
    pub knobs: &'static [KnobSpec],
    /// Build it from knobs and throw it away: checks the knob values.
    pub check: fn(&Knobs) -> Result<(), KnobError>,
    /// Transaction types (workloads; empty for protocols).
    pub txn_types: fn() -> &'static [&'static str],
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("knobs", &self.knobs.len())
            .finish_non_exhaustive()
    }
}

/// The registry entry of workload `W`.
pub const fn workload_entry<W: Workload>() -> Entry {
    Entry {
        name: W::NAME,
        about: W::ABOUT,
        knobs: W::KNOBS,
        check: check_workload::<W>,
        txn_types: txn_types_of::<W>,
    }
}

/// The registry entry of protocol `P`.
pub const fn protocol_entry<P: Protocol>() -> Entry {
    Entry {
        name: P::NAME,
        about: P::ABOUT,
        knobs: P::KNOBS,
        check: check_protocol::<P>,
        txn_types: no_txn_types,
    }
}

fn check_protocol<P: Protocol>(knobs: &Knobs) -> Result<(), KnobError> {
    P::from_knobs(knobs).map(drop)
}

fn check_workload<W: Workload>(knobs: &Knobs) -> Result<(), KnobError> {
    W::from_knobs(knobs).map(drop)
}

fn txn_types_of<W: Workload>() -> &'static [&'static str] {
    W::from_knobs(&Knobs::default()).map_or(&[], |w| w.txn_types())
}

fn no_txn_types() -> &'static [&'static str] {
    &[]
}

/// The driver's knobs, which every run accepts whatever its protocol and workload
/// ([`driver::KNOBS`]: `retry_aborts`).
pub static DRIVER: Entry = Entry {
    name: "driver",
    about: "every run",
    knobs: driver::KNOBS,
    check: check_driver,
    txn_types: no_txn_types,
};

fn check_driver(knobs: &Knobs) -> Result<(), KnobError> {
    driver::Retries::from_knobs(knobs)?;
    driver::addr_cache_entries(knobs).map(drop)
}

macro_rules! registry {
    (
        protocols { $($p:ty),* $(,)? }
        workloads { $($w:ty),* $(,)? }
    ) => {
        /// Every protocol, in `dmtx list` order.
        pub static PROTOCOLS: &[Entry] = &[$(protocol_entry::<$p>(),)*];

        /// Every workload, in `dmtx list` order.
        pub static WORKLOADS: &[Entry] = &[$(workload_entry::<$w>(),)*];

        /// Run the protocol and workload `cfg` names. The names and knobs were checked
        /// by [`BenchConfig::from_args`]; an unlisted name here is a caller's mistake
        /// and an error, not a panic.
        pub fn run(cfg: &BenchConfig, hooks: &RunHooks<'_>) -> Result<BenchResult, RunError> {
            $(
                if cfg.protocol == <$p as Protocol>::NAME {
                    return run_with(<$p as Protocol>::from_knobs(&cfg.knobs)?, cfg, hooks);
                }
            )*
            Err(RunError::Unregistered { what: "protocol", name: cfg.protocol.clone() })
        }

        fn run_with<P: Protocol>(
            proto: P,
            cfg: &BenchConfig,
            hooks: &RunHooks<'_>,
        ) -> Result<BenchResult, RunError> {
            $(
                if cfg.workload == <$w as Workload>::NAME {
                    let workload = <$w as Workload>::from_knobs(&cfg.knobs)?;
                    return driver::run(proto, workload, cfg, hooks);
                }
            )*
            let _ = (proto, hooks);
            Err(RunError::Unregistered { what: "workload", name: cfg.workload.clone() })
        }

        /// The memory plan of the run `cfg` names, and why it cannot run on this host (or
        /// within `--mn-bytes`) if it cannot; nothing is built.
        pub fn plan(cfg: &BenchConfig) -> Result<(MemoryPlan, Option<PlanError>), RunError> {
            $(
                if cfg.protocol == <$p as Protocol>::NAME {
                    return plan_with(<$p as Protocol>::from_knobs(&cfg.knobs)?, cfg);
                }
            )*
            Err(RunError::Unregistered { what: "protocol", name: cfg.protocol.clone() })
        }

        fn plan_with<P: Protocol>(proto: P, cfg: &BenchConfig) -> Result<(MemoryPlan, Option<PlanError>), RunError> {
            $(
                if cfg.workload == <$w as Workload>::NAME {
                    let workload = driver::fit_to_run(<$w as Workload>::from_knobs(&cfg.knobs)?, cfg);
                    let per_coord = driver::coordinator_bytes(&proto, cfg.memory_nodes as usize)?;
                    return crate::plan::assess(&proto, &workload, cfg, &per_coord, crate::plan::host_available_bytes());
                }
            )*
            let _ = proto;
            Err(RunError::Unregistered { what: "workload", name: cfg.workload.clone() })
        }
    };
}

registry! {
    protocols {
        dmtx_protocols::ford::Ford,
    }
    workloads {
        dmtx_workloads::Kvs,
        dmtx_workloads::SmallBank,
        dmtx_workloads::Tatp,
        dmtx_workloads::Tpcc,
        dmtx_workloads::Ycsb,
    }
}

/// The text of `dmtx list`: every protocol and workload with its description, its
/// transaction types and its knobs (default and help).
pub fn render_list() -> String {
    let mut out = String::new();
    let setting = |k: &KnobSpec| format!("{}={}", k.name, k.default);
    let width = PROTOCOLS
        .iter()
        .chain(WORKLOADS)
        .chain([&DRIVER])
        .flat_map(|e| e.knobs.iter().map(|k| setting(k).len()))
        .max()
        .unwrap_or(0);
    for (title, entries) in [("protocols", PROTOCOLS), ("workloads", WORKLOADS)] {
        let _ = writeln!(out, "{title}:");
        if entries.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for e in entries {
            let _ = writeln!(out, "  {:<12} {}", e.name, e.about);
            let types = (e.txn_types)();
            if !types.is_empty() {
                let _ = writeln!(out, "  {:<12}   txn types: {}", "", types.join(", "));
            }
            for k in e.knobs {
                let _ = writeln!(out, "  {:<12}   --set {:<width$}  {}", "", setting(k), k.help);
            }
        }
        out.push('\n');
    }
    let _ = writeln!(out, "every run:");
    for k in DRIVER.knobs {
        let _ = writeln!(out, "  {:<12}   --set {:<width$}  {}", "", setting(k), k.help);
    }
    out.push('\n');
    out += &crate::preset::render();
    out.push('\n');
    out += &crate::plan::render_presets();
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_list_names_every_entry_and_knob() {
        let text = render_list();
        for e in PROTOCOLS.iter().chain(WORKLOADS) {
            assert!(text.contains(e.name), "{text}");
            assert!(text.contains(e.about), "{text}");
            for k in e.knobs {
                assert!(text.contains(&format!("--set {}=", k.name)), "{text}");
            }
        }
        assert!(text.contains("ford"));
        assert!(
            text.contains("every run:") && text.contains("--set retry_aborts=unbounded"),
            "{text}"
        );
    }

    #[test]
    fn test_names_are_unique_and_knobs_check() {
        for list in [PROTOCOLS, WORKLOADS] {
            let mut names: Vec<_> = list.iter().map(|e| e.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), list.len(), "duplicate registry name");
            for e in list {
                (e.check)(&Knobs::default()).unwrap_or_else(|err| panic!("{}: defaults refused: {err}", e.name));
            }
        }
    }
}
