//! The protocols and workloads `dmtx bench` can run, and the dispatch from their names
//! to one generic call of [`driver::run::<P, W>`](crate::driver::run).
//!
//! Adding a protocol or a workload is one line in the `registry!` invocation below: a
//! protocol type implements `dmtx_runtime::Protocol`, a workload type
//! `dmtx_workloads::Workload`.
//!
//! Not every pair runs: a protocol that requires every key declared before the first
//! execute (`Protocol::requires_declared_keys`, Calvin) runs only workloads whose every
//! transaction type declares them (`Workload::txn_hints`). [`check_pair`] refuses the
//! others before anything is built, and `dmtx list` shows which protocols each workload
//! runs.

use std::fmt::Write as _;

use dmtx_runtime::{KnobError, KnobSpec, Knobs, Protocol, TxnHints};
use dmtx_workloads::Workload;

use crate::config::ConfigError;
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
    /// Each transaction type with what every transaction of it promises at begin, for
    /// the workload built from these knobs (workloads; empty for protocols, and for
    /// knobs the workload refuses).
    pub txn_hints: fn(&Knobs) -> Vec<(&'static str, TxnHints)>,
    /// Whether the protocol built from these knobs requires every key declared before
    /// the first execute (protocols; `false` for workloads, and for knobs the protocol
    /// refuses).
    pub requires_declared_keys: fn(&Knobs) -> bool,
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
        txn_hints: txn_hints_of::<W>,
        requires_declared_keys: requires_nothing,
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
        txn_hints: no_txn_hints,
        requires_declared_keys: requires_declared_keys_of::<P>,
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

fn txn_hints_of<W: Workload>(knobs: &Knobs) -> Vec<(&'static str, TxnHints)> {
    W::from_knobs(knobs).map_or_else(
        |_| Vec::new(),
        |w| {
            let types = w.txn_types();
            types
                .iter()
                .enumerate()
                .map(|(ty, &name)| (name, w.txn_hints(ty)))
                .collect()
        },
    )
}

fn no_txn_hints(_: &Knobs) -> Vec<(&'static str, TxnHints)> {
    Vec::new()
}

fn requires_declared_keys_of<P: Protocol>(knobs: &Knobs) -> bool {
    P::from_knobs(knobs).is_ok_and(|p| p.requires_declared_keys())
}

fn requires_nothing(_: &Knobs) -> bool {
    false
}

/// The transaction types of `workload`, built from `knobs`, that cannot give a protocol
/// what it requires (`requires_declared_keys`: every key declared before the first
/// execute); empty when the pair runs.
pub fn unmet_types(requires_declared_keys: bool, workload: &Entry, knobs: &Knobs) -> Vec<&'static str> {
    if !requires_declared_keys {
        return Vec::new();
    }
    (workload.txn_hints)(knobs)
        .into_iter()
        .filter(|(_, h)| !h.keys_declared)
        .map(|(name, _)| name)
        .collect()
}

/// Refuse `protocol` (which requires declared keys, or not) on `workload` built from
/// `knobs` when some transaction type cannot give it what it requires; the error names
/// those types, and what to run instead: the other workloads of `workloads` that run the
/// protocol, and the protocols of `protocols` that run the workload (default knobs).
/// `dmtx bench` calls it before anything is built.
pub fn check_pair(
    protocol: &str,
    requires_declared_keys: bool,
    workload: &Entry,
    knobs: &Knobs,
    protocols: &[Entry],
    workloads: &[Entry],
) -> Result<(), ConfigError> {
    let unmet = unmet_types(requires_declared_keys, workload, knobs);
    if unmet.is_empty() {
        return Ok(());
    }
    let mut instead = Vec::new();
    let defaults = Knobs::default();
    let others: Vec<&str> = workloads
        .iter()
        .filter(|w| w.name != workload.name && unmet_types(requires_declared_keys, w, &defaults).is_empty())
        .map(|w| w.name)
        .collect();
    if !others.is_empty() {
        instead.push(format!("run {protocol} on {}", others.join(", ")));
    }
    let runs: Vec<&str> = protocols
        .iter()
        .filter(|p| unmet_types((p.requires_declared_keys)(&defaults), workload, knobs).is_empty())
        .map(|p| p.name)
        .collect();
    if !runs.is_empty() {
        instead.push(format!("run {} with {}", workload.name, runs.join(", ")));
    }
    Err(ConfigError::Incompatible {
        protocol: protocol.to_string(),
        workload: workload.name.to_string(),
        types: unmet.join(", "),
        instead: if instead.is_empty() {
            "no registered pair runs it; see `dmtx list`".to_string()
        } else {
            instead.join("; or ")
        },
    })
}

/// The protocols of `protocols` that run `workload` with its default knobs, for
/// `dmtx list`.
fn runs_on(workload: &Entry, protocols: &[Entry]) -> Vec<&'static str> {
    let defaults = Knobs::default();
    protocols
        .iter()
        .filter(|p| unmet_types((p.requires_declared_keys)(&defaults), workload, &defaults).is_empty())
        .map(|p| p.name)
        .collect()
}

/// The driver's knobs, which every run accepts whatever its protocol and workload
/// ([`driver::KNOBS`]: `retry_aborts`).
pub static DRIVER: Entry = Entry {
    name: "driver",
    about: "every run",
    knobs: driver::KNOBS,
    check: check_driver,
    txn_types: no_txn_types,
    txn_hints: no_txn_hints,
    requires_declared_keys: requires_nothing,
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
        dmtx_protocols::farm::Farm,
        dmtx_protocols::drtmh::Drtmh,
        dmtx_protocols::fordlv::FordLv,
        dmtx_protocols::motor::Motor,
        dmtx_protocols::oocc::Oocc,
        dmtx_protocols::drtm::Drtm,
        dmtx_protocols::nowait::Nowait,
        dmtx_protocols::waitdie::Waitdie,
        dmtx_protocols::woundwait::Woundwait,
        dmtx_protocols::to::To,
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
/// transaction types and their hints, the protocols each workload runs, and every knob
/// (default and help).
pub fn render_list() -> String {
    render_list_of(PROTOCOLS, WORKLOADS)
}

/// [`render_list`] over the given entries (a test adds an unregistered protocol).
pub fn render_list_of(protocols: &[Entry], workloads: &[Entry]) -> String {
    let mut out = String::new();
    let setting = |k: &KnobSpec| format!("{}={}", k.name, k.default);
    let width = protocols
        .iter()
        .chain(workloads)
        .chain([&DRIVER])
        .flat_map(|e| e.knobs.iter().map(|k| setting(k).len()))
        .max()
        .unwrap_or(0);
    for (title, entries) in [("protocols", protocols), ("workloads", workloads)] {
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
            let hints = (e.txn_hints)(&Knobs::default());
            if !hints.is_empty() {
                let which = |f: fn(&TxnHints) -> bool| {
                    let names: Vec<&str> = hints.iter().filter(|(_, h)| f(h)).map(|(n, _)| *n).collect();
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                };
                let _ = writeln!(out, "  {:<12}   read-only: {}", "", which(|h| h.read_only));
                let _ = writeln!(
                    out,
                    "  {:<12}   keys declared up front: {}",
                    "",
                    which(|h| h.keys_declared)
                );
                let runs = runs_on(e, protocols);
                let runs = if runs.is_empty() {
                    "none".to_string()
                } else {
                    runs.join(", ")
                };
                let _ = writeln!(out, "  {:<12}   protocols: {runs}", "");
            }
            if (e.requires_declared_keys)(&Knobs::default()) {
                let _ = writeln!(
                    out,
                    "  {:<12}   requires: every key declared before the first execute",
                    ""
                );
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
