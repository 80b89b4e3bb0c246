//! `--preset`: each paper's experimental setup, by knobs alone.
//!
//! A preset sets the memory nodes, the replication and the workload's knobs as the
//! paper's setup section states them; flags and `--set` given on the command line win
//! over it. What a paper does not state is left at dmtx's default, and a workload the
//! paper did not run is refused. The papers measured on RDMA clusters with many compute
//! threads; sizes (10 M accounts, 105 warehouses) are the papers', so an in-process run
//! needs the memory for them.
//!
//! | preset | source | memory nodes × replicas |
//! | --- | --- | --- |
//! | `ford` | FORD §6.1 | 2 × 2 (PM pool of two machines, one primary and one backup) |
//! | `motor` | Motor §7.1 | 3 × 3 |
//! | `lotus` | LOTUS §8.1 | 3 × 3 |
//! | `oocc` | OOCC §VIII-A/B | 2 × 1 (two compute pools; no replication stated) |
//! | `rcbench` | RCBench §6.1 | 4 × 1 (4 nodes holding data; RCBench's nodes also compute) |

use crate::config::ConfigError;

/// One paper's setup.
#[derive(Debug)]
pub struct Preset {
    /// `--preset` value.
    pub name: &'static str,
    /// Where the numbers come from.
    pub source: &'static str,
    /// Memory nodes.
    pub memory_nodes: u32,
    /// Copies of each table.
    pub replicas: u32,
    /// Per workload, the knobs the paper states.
    pub workloads: &'static [(&'static str, &'static [(&'static str, &'static str)])],
    /// `retry_aborts` per workload as the paper's code retries; `*` for the others.
    pub retry_aborts: &'static [(&'static str, &'static str)],
    /// Where `retry_aborts` comes from.
    pub retry_source: &'static str,
}

impl Preset {
    /// The `retry_aborts` value of this preset for `workload`.
    pub fn retry_aborts_for(&self, workload: &str) -> &'static str {
        let find = |w: &str| self.retry_aborts.iter().find(|(n, _)| *n == w).map(|(_, v)| *v);
        find(workload)
            .or_else(|| find("*"))
            .unwrap_or(crate::driver::RETRY_ABORTS.default)
    }
}

/// The simulator's NIC profile for a preset's testbed (`--transport sim`): FORD §6.1,
/// Motor §7.1 and RCBench §6.1 used 100 Gb/s ConnectX-5, LOTUS §8.1 56 Gb/s ConnectX-3,
/// OOCC §VIII-A 200 Gb/s ConnectX-6. An unknown preset gets `cx5`; `lookup` reports it.
pub fn sim_nic(preset: &str) -> &'static str {
    match preset {
        "lotus" => "cx3",
        "oocc" => "cx6",
        _ => "cx5",
    }
}

/// Every preset.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "ford",
        source: "FORD §6.1",
        memory_nodes: 2,
        replicas: 2,
        retry_aborts: &[("*", "0")],
        retry_source: "FORD's compute_pool/worker/worker.cc runs a drawn transaction once (its retry loop is compiled out)",
        workloads: &[
            ("kvs", &[("keys", "1000000"), ("zipf_theta", "0.99")]),
            ("smallbank", &[]),
            ("tatp", &[]),
            ("tpcc", &[("warehouses", "8"), ("tpcc_variant", "ford")]),
        ],
    },
    Preset {
        name: "motor",
        source: "Motor §7.1",
        memory_nodes: 3,
        replicas: 3,
        retry_aborts: &[("*", "0")],
        retry_source: "Motor's compute_node/handler/worker.cc runs a drawn transaction once (but for TPC-C StockLevel, redrawn until one commits)",
        workloads: &[
            ("kvs", &[("keys", "10000000"), ("zipf_theta", "0.99"), ("objects", "1")]),
            ("smallbank", &[("accounts", "10000000")]),
            ("tatp", &[("subscribers", "2000000")]),
            ("tpcc", &[("warehouses", "24"), ("tpcc_variant", "ford")]),
        ],
    },
    Preset {
        name: "lotus",
        source: "LOTUS §8.1",
        memory_nodes: 3,
        replicas: 3,
        retry_aborts: &[("*", "unbounded")],
        retry_source: "LOTUS's paper does not say and its code is not public: the benchmarks' rule (TPC-C, BenchBase)",
        workloads: &[
            ("kvs", &[("keys", "20000000"), ("zipf_theta", "0.99")]),
            ("smallbank", &[("accounts", "20000000")]),
            ("tatp", &[("subscribers", "3000000")]),
            ("tpcc", &[("warehouses", "105"), ("tpcc_variant", "ford")]),
        ],
    },
    Preset {
        name: "oocc",
        source: "OOCC §VIII-A/B",
        memory_nodes: 2,
        replicas: 1,
        retry_aborts: &[("tpcc", "19"), ("*", "0")],
        retry_source: "OOCC's dtx/tpcc/bench.cpp makes up to 20 attempts of a TPC-C transaction; its other benchmarks one",
        workloads: &[
            // "Read-intensive": 90% read-only transactions, 8-byte records, uniform keys.
            (
                "ycsb",
                &[
                    ("fields", "1"),
                    ("field_bytes", "8"),
                    ("write_unit", "txn"),
                    ("write_ratio", "0.1"),
                    ("zipf_theta", "0"),
                ],
            ),
            ("tatp", &[("ro_keys", "2")]),
            ("tpcc", &[("mix", "45,40,4,4,4")]),
        ],
    },
    Preset {
        name: "rcbench",
        source: "RCBench §6.1",
        memory_nodes: 4,
        replicas: 1,
        retry_aborts: &[("*", "unbounded")],
        retry_source: "RCBench (Deneva's system/abort_queue.cpp) restarts an aborted transaction after a backoff until it commits",
        workloads: &[
            // 10 M 1 KB records per node, partitioned over the 4 nodes; write ratio and
            // skew 0.2 per operation.
            (
                "ycsb",
                &[
                    ("records", "40000000"),
                    ("partitions", "4"),
                    ("fields", "10"),
                    ("field_bytes", "100"),
                    ("ops_per_txn", "10"),
                    ("write_unit", "op"),
                    ("write_ratio", "0.2"),
                    ("zipf_theta", "0.2"),
                ],
            ),
            // 32 warehouses per node; NewOrder and Payment only, 50/50.
            ("tpcc", &[("warehouses", "128"), ("mix", "50,50,0,0,0")]),
        ],
    },
];

/// The knob settings of preset `name` for `workload`, as `key=value` strings.
pub fn lookup(name: &str, workload: &str) -> Result<(&'static Preset, Vec<String>), ConfigError> {
    let Some(p) = PRESETS.iter().find(|p| p.name == name) else {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        return Err(ConfigError::invalid(
            "--preset",
            name,
            &format!(
                "expected one of {}{}",
                names.join(", "),
                dmtx_runtime::did_you_mean(name, &names)
            ),
        ));
    };
    let Some((_, knobs)) = p.workloads.iter().find(|(w, _)| *w == workload) else {
        let ran: Vec<&str> = p.workloads.iter().map(|(w, _)| *w).collect();
        return Err(ConfigError::invalid(
            "--preset",
            name,
            &format!(
                "{} did not run `{workload}`; its workloads here: {}",
                p.source,
                if ran.is_empty() {
                    "none yet".to_string()
                } else {
                    ran.join(", ")
                }
            ),
        ));
    };
    let retry = format!("{}={}", crate::driver::RETRY_ABORTS.name, p.retry_aborts_for(workload));
    Ok((
        p,
        std::iter::once(retry)
            .chain(knobs.iter().map(|(k, v)| format!("{k}={v}")))
            .collect(),
    ))
}

/// `dmtx list`'s lines about presets.
pub fn render() -> String {
    let mut out = String::from("presets (--preset NAME; flags and --set override it):\n");
    for p in PRESETS {
        let ws: Vec<&str> = p.workloads.iter().map(|(w, _)| *w).collect();
        out += &format!(
            "  {:<12} {}: {} memory nodes x {} replicas, --nic {} on sim; workloads: {}\n",
            p.name,
            p.source,
            p.memory_nodes,
            p.replicas,
            sim_nic(p.name),
            if ws.is_empty() {
                "none yet".to_string()
            } else {
                ws.join(", ")
            }
        );
        let retries: Vec<String> = p
            .retry_aborts
            .iter()
            .map(|(w, v)| {
                if *w == "*" {
                    v.to_string()
                } else {
                    format!("{v} on {w}")
                }
            })
            .collect();
        out += &format!(
            "  {:<12}   retry_aborts={}: {}\n",
            "",
            retries.join(", otherwise "),
            p.retry_source
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BenchArgs, BenchConfig};

    /// Goal: on the simulator a preset picks its testbed's NIC unless `--nic` is given.
    #[test]
    fn presets_pick_their_testbeds_nic_on_sim() {
        let sim = |preset: &str, nic: Option<&str>| {
            let cfg = BenchConfig::from_args(&BenchArgs {
                transport: crate::config::TransportKind::Sim,
                nic: nic.map(String::from),
                ..args(preset, "tatp")
            })
            .unwrap();
            cfg.sim.unwrap().profile.name
        };
        assert_eq!(sim("lotus", None), "cx3");
        assert_eq!(sim("oocc", None), "cx6");
        assert_eq!(sim("ford", None), "cx5");
        assert_eq!(sim("lotus", Some("cx6")), "cx6");
        assert!(render().contains("--nic cx3"));
    }

    fn args(preset: &str, workload: &str) -> BenchArgs {
        BenchArgs {
            preset: Some(preset.into()),
            workload: workload.into(),
            ..BenchArgs::default()
        }
    }

    #[test]
    fn a_preset_sets_nodes_replicas_and_knobs_and_flags_win() {
        let c = BenchConfig::from_args(&args("motor", "smallbank")).unwrap();
        assert_eq!((c.memory_nodes, c.replicas), (3, 3));
        assert_eq!(c.knobs_effective["accounts"], "10000000");
        assert_eq!(c.preset.as_deref(), Some("motor"));
        let c = BenchConfig::from_args(&BenchArgs {
            memory_nodes: Some(4),
            set: vec!["accounts=5000".into()],
            ..args("motor", "smallbank")
        })
        .unwrap();
        assert_eq!(
            (c.memory_nodes, c.replicas),
            (4, 3),
            "--memory-nodes wins, replicas stay"
        );
        assert_eq!(c.knobs_effective["accounts"], "5000", "--set wins");
    }

    /// Goal: each preset retries aborts as its paper's code does, says so in `dmtx
    /// list`, and `--set retry_aborts` wins over it.
    #[test]
    fn presets_set_retry_aborts_and_set_wins() {
        let retry = |preset: &str, workload: &str, set: &[&str]| {
            let c = BenchConfig::from_args(&BenchArgs {
                set: set.iter().map(|s| s.to_string()).collect(),
                ..args(preset, workload)
            })
            .unwrap();
            c.knobs_effective["retry_aborts"].clone()
        };
        assert_eq!(retry("ford", "smallbank", &[]), "0");
        assert_eq!(retry("motor", "tpcc", &[]), "0");
        assert_eq!(retry("oocc", "tpcc", &[]), "19");
        assert_eq!(retry("oocc", "tatp", &[]), "0");
        assert_eq!(retry("rcbench", "ycsb", &[]), "unbounded");
        assert_eq!(retry("lotus", "kvs", &[]), "unbounded");
        assert_eq!(retry("ford", "smallbank", &["retry_aborts=5"]), "5", "--set wins");
        let text = render();
        assert!(text.contains("retry_aborts=19 on tpcc, otherwise 0"), "{text}");
        assert!(text.contains("retry_aborts=0: FORD's"), "{text}");
    }

    #[test]
    fn unknown_presets_and_unrun_workloads_are_refused_clearly() {
        let e = BenchConfig::from_args(&args("mortor", "kvs")).unwrap_err().to_string();
        assert!(e.contains("--preset") && e.contains("motor"), "{e}");
        let e = lookup("oocc", "smallbank").unwrap_err().to_string();
        assert!(e.contains("did not run `smallbank`"), "{e}");
    }

    #[test]
    fn every_preset_knob_is_a_knob_of_its_workload() {
        for p in PRESETS {
            for (w, knobs) in p.workloads {
                let entry = crate::registry::WORKLOADS
                    .iter()
                    .find(|e| e.name == *w)
                    .unwrap_or_else(|| panic!("preset {} names unknown workload {w}", p.name));
                let mut all = dmtx_runtime::Knobs::default();
                for (k, v) in *knobs {
                    assert!(
                        entry.knobs.iter().any(|s| s.name == *k),
                        "{}: {w} has no knob {k}",
                        p.name
                    );
                    all.set(k, v);
                }
                (entry.check)(&all).unwrap_or_else(|e| panic!("{}: {w}: {e}", p.name));
            }
            assert!(p.replicas >= 1 && p.replicas <= p.memory_nodes, "{}", p.name);
        }
        assert!(render().contains("rcbench"));
    }
}
