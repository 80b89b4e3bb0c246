//! The per-table store format through the `dmtx` crate: the memory footprint per table
//! and per memory node in the results of every protocol (Motor §7.5), specs refused
//! before a run when their schema or value region does not fit, and a table whose values
//! live in a value region read back by `scan_table`.

mod common;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use common::{run_registry, scratch_dir};
use dmtx::plan::MemoryPlan;
use dmtx::results::MemoryResult;
use dmtx::{registry, BenchArgs, BenchConfig};
use dmtx_memnode::{Control, LocalCluster};
use dmtx_protocols::onever::record::OneVersionLayout;
use dmtx_runtime::{block_on, scan_table, AddrCache, CoordCtx, CoordId, RealClock, SharedAddrCache};
use dmtx_store::{
    create_table, Attr, Catalog, RegionBytes, SlotLayout, TableBuilder, TableFormat, TableSpec, ValueArea,
};
use dmtx_verbs::MnId;

fn small(protocol: &str, workload: &str, set: &[&str]) -> BenchArgs {
    BenchArgs {
        protocol: protocol.into(),
        workload: workload.into(),
        threads: 1,
        coroutines: 2,
        txns: Some(300),
        set: set.iter().map(|s| s.to_string()).collect(),
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    }
}

/// The footprint invariants every protocol's memory record keeps.
fn check_footprint(who: &str, m: &MemoryResult, replicas: usize) {
    assert!(!m.tables.is_empty(), "{who}: no tables");
    for t in &m.tables {
        assert!(
            t.slot_bytes > 0 && t.slot_bytes % 8 == 0,
            "{who} {}: slot {}",
            t.name,
            t.slot_bytes
        );
        assert_eq!(t.nodes.len(), replicas, "{who} {}", t.name);
        assert_eq!(
            t.loaded_bytes_total,
            t.loaded_bytes * replicas as u64,
            "{who} {}",
            t.name
        );
        assert!(t.value_region_loaded_bytes <= t.loaded_bytes, "{who} {}", t.name);
        assert!(t.value_region_bytes <= t.reserved_bytes, "{who} {}", t.name);
    }
    for n in &m.per_mn {
        assert_eq!(
            n.footprint_bytes,
            n.loaded_bytes + n.coordinators_bytes,
            "{who} mn{}",
            n.mn
        );
        // A node's loaded tables are the replicas placed on it.
        let on_it: u64 = m
            .tables
            .iter()
            .filter(|t| t.nodes.contains(&n.mn))
            .map(|t| t.loaded_bytes)
            .sum();
        assert_eq!(n.loaded_bytes, on_it, "{who} mn{}", n.mn);
    }
    let per_table: u64 = m.tables.iter().map(|t| t.loaded_bytes_total).sum();
    let per_mn: u64 = m.per_mn.iter().map(|n| n.loaded_bytes).sum();
    assert_eq!(per_table, per_mn, "{who}: tables and nodes count the same bytes");
}

/// Goal: every registered protocol reports its footprint per table and per memory node.
/// Method: plan SmallBank and TPC-C under each protocol (nothing is built) and check the
/// record's invariants; FORD and FaRM keep values in their slots (no value region).
#[test]
fn every_protocol_reports_its_footprint_per_table_and_per_node() {
    let mut planned = Vec::new();
    for p in registry::PROTOCOLS {
        for (w, set) in [
            ("smallbank", &["accounts=1000", "hot_accounts=100"][..]),
            ("tpcc", &["items=1000", "customers=60"][..]),
        ] {
            let cfg = BenchConfig::from_args(&BenchArgs {
                memory_nodes: Some(3),
                replicas: Some(2),
                ..small(p.name, w, set)
            })
            .unwrap();
            let (plan, _) = match registry::plan(&cfg) {
                Ok(p) => p,
                // A protocol that refuses this workload (its pairing rules) has no plan.
                Err(e) => {
                    eprintln!("{} on {w}: {e}", p.name);
                    continue;
                }
            };
            let m = MemoryResult::of(&plan);
            check_footprint(&format!("{} on {w}", p.name), &m, 2);
            planned.push((p.name, w));
            if matches!(p.name, "ford" | "farm") {
                assert!(m.tables.iter().all(|t| t.value_region_bytes == 0), "{}", p.name);
                let customer = m.tables.iter().find(|t| t.name == "customer");
                if let Some(c) = customer {
                    // FORD's record: 40 header bytes before the 672-byte value.
                    assert_eq!(c.slot_bytes, 40 + 672, "{}", p.name);
                }
            }
        }
    }
    for pair in [
        ("ford", "smallbank"),
        ("ford", "tpcc"),
        ("farm", "smallbank"),
        ("farm", "tpcc"),
    ] {
        assert!(planned.contains(&pair), "{pair:?} was not planned: {planned:?}");
    }
}

/// Goal: a run's JSON record and printed summary carry the footprint per table and per
/// memory node, for FORD and FaRM. Method: a short SmallBank run of each, JSON to a
/// file and the summary, then the fields and lines.
#[test]
fn a_bench_record_holds_the_footprint_per_table_and_per_node() {
    let dir = scratch_dir("store_format_record");
    for proto in ["ford", "farm"] {
        let out = dir.join(format!("{proto}.json"));
        let r = run_registry(&BenchArgs {
            out: out.to_str().unwrap().into(),
            ..small(proto, "smallbank", &["accounts=1000", "hot_accounts=100"])
        });
        let m = r.memory.as_ref().expect("the memory record");
        check_footprint(proto, m, 2);
        let summary = r.summary(None);
        assert!(summary.contains("  footprint   "), "{proto}:\n{summary}");
        assert!(
            summary.contains("mn0 ") && summary.contains("coordinator areas"),
            "{summary}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let savings = &v["memory"]["tables"][0];
        assert_eq!(savings["name"], "savings");
        // 8-byte balances in FORD's (and FaRM's) 40-byte-header record.
        assert_eq!(savings["slot_bytes"], 48, "{proto}");
        assert_eq!(savings["value_region_bytes"], 0, "{proto}");
        assert!(savings["loaded_bytes_total"].as_u64().unwrap() > 0);
        assert!(v["memory"]["per_mn"][0]["footprint_bytes"].as_u64().unwrap() > 0);
        // The load's measured bytes, against the plan's estimate.
        for t in &m.tables {
            let w = t.written_bytes.expect("this process loaded the tables");
            assert!(
                w.abs_diff(t.loaded_bytes) * 10 <= w,
                "{proto} {}: wrote {w}, estimated {}",
                t.name,
                t.loaded_bytes
            );
        }
        assert!(summary.contains("; the load wrote "), "{summary}");
    }
}

/// Goal: bad specs are refused before anything is built, with a message that names the
/// table, the attribute and the fix. Method: plan a spec whose schema leaves a gap, one
/// whose schema stops short of the value, and one whose value region is too small.
#[test]
fn a_spec_that_does_not_fit_its_format_is_refused_by_the_plan() {
    let cfg = BenchConfig::from_args(&small("ford", "smallbank", &[])).unwrap();
    let plan = |spec: TableSpec, layout: &dyn SlotLayout| {
        MemoryPlan::new(&[spec], layout, &cfg, &[0, 0])
            .expect_err("refused")
            .to_string()
    };
    let gap =
        TableSpec::new(0, "district", 16, 10).with_attrs(vec![Attr::new("d_ytd", 0, 8), Attr::new("d_tax", 12, 4)]);
    let e = plan(gap, &OneVersionLayout);
    assert!(
        e.contains("table `district`: attribute schema attribute `d_tax` starts at byte 12"),
        "{e}"
    );
    assert!(e.contains("leaves a gap") && e.contains("TableSpec::with_attrs"), "{e}");
    let short = TableSpec::new(0, "district", 16, 10).with_attrs(vec![Attr::new("d_ytd", 0, 8)]);
    let e = plan(short, &OneVersionLayout);
    assert!(e.contains("covers 8 bytes, the value has 16"), "{e}");
    let e = plan(TableSpec::new(0, "kv", 16, 1000), &Boxed { region_bytes: 4096 });
    assert!(
        e.contains("table `kv`: value region of 4096 bytes cannot hold its 1000 loaded records"),
        "{e}"
    );
    assert!(e.contains("raise `vpkg_bytes`"), "{e}");
}

/// Values in the value region: slot = [occupied 8 B][key 8 B][value's offset 8 B].
struct Boxed {
    region_bytes: u64,
}

impl SlotLayout for Boxed {
    fn slot_bytes(&self, _value_bytes: u32) -> u32 {
        24
    }
    fn encode(&self, _table: u32, _key: u64, _value: &[u8], _slot: &mut [u8]) {
        unreachable!("Boxed encodes through encode_record")
    }
    fn key(&self, slot: &[u8]) -> Option<u64> {
        (slot[0] == 1).then(|| u64::from_le_bytes(slot[8..16].try_into().unwrap()))
    }
    fn format(&self, spec: &TableSpec) -> TableFormat {
        TableFormat::in_slot(24).with_value_region(
            self.region_bytes,
            spec.value_bytes.next_multiple_of(8),
            Some("vpkg_bytes"),
        )
    }
    fn encode_record(
        &self,
        spec: &TableSpec,
        key: u64,
        value: &[u8],
        slot: &mut [u8],
        values: &mut ValueArea<'_>,
    ) -> dmtx_store::Result<()> {
        let (at, bytes) = values.alloc(spec.value_bytes.next_multiple_of(8) as usize, 8)?;
        bytes[..value.len()].copy_from_slice(value);
        slot[0] = 1;
        slot[8..16].copy_from_slice(&key.to_le_bytes());
        slot[16..24].copy_from_slice(&at.to_le_bytes());
        Ok(())
    }
    fn value_into(&self, slot: &[u8], region: &RegionBytes<'_>, out: &mut [u8]) -> dmtx_store::Result<()> {
        let at = u64::from_le_bytes(slot[16..24].try_into().unwrap());
        out.copy_from_slice(region.get(at, out.len())?);
        Ok(())
    }
}

/// Goal: the post-run scan reads a table whose values live in its value region, from
/// every replica. Method: load such a table on two nodes, scan each replica through
/// verbs (the region is larger than one scan chunk), compare with what was loaded.
#[test]
fn scan_table_reads_values_from_the_value_region() {
    const RECORDS: u64 = 20_000;
    let layout = Boxed { region_bytes: 1 << 20 };
    let spec = TableSpec::new(3, "accounts", 36, RECORDS);
    let mut t = TableBuilder::try_new(spec, &layout).unwrap();
    let mut model = BTreeMap::new();
    for k in 0..RECORDS {
        let v: Vec<u8> = (0..36u64).map(|i| (k * 31 + i) as u8).collect();
        t.insert(k * 7 + 1, &v).unwrap();
        model.insert(k * 7 + 1, v);
    }
    let cluster = LocalCluster::new(2, 8 << 20);
    let meta = create_table(&cluster, t, &[MnId(0), MnId(1)]).unwrap();
    assert_eq!(cluster.tables(MnId(1)).unwrap()[0].value_region, meta.value_region);
    let catalog = Catalog::fetch(&cluster).unwrap();
    let mut ctx = CoordCtx::new(
        CoordId {
            cn: 0,
            thread: 0,
            coroutine: 0,
        },
        Rc::new(cluster.fabric().transport()),
        Arc::new(RealClock::new()),
        Arc::new(catalog),
        Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
    );
    for replica in 0..2 {
        let mut seen = BTreeMap::new();
        block_on(scan_table(&mut ctx, 3, replica, &layout, |k, v| {
            assert!(seen.insert(k, v.to_vec()).is_none(), "key {k} twice");
        }))
        .unwrap();
        assert_eq!(seen, model, "replica {replica}");
    }
}

/// Goal: the plan's need per memory node is enough for tables with a value region,
/// which start on a page. Method: plan such a table, give each node exactly the planned
/// need, and place the table's replicas there.
#[test]
fn the_planned_need_holds_a_table_with_a_value_region() {
    let cfg = BenchConfig::from_args(&small("ford", "smallbank", &[])).unwrap();
    let layout = Boxed { region_bytes: 64 << 10 };
    let spec = TableSpec::new(0, "kv", 40, 500);
    let plan = MemoryPlan::new(std::slice::from_ref(&spec), &layout, &cfg, &[0, 0]).unwrap();
    let need = *plan.need_per_mn.iter().max().unwrap();
    let cluster = LocalCluster::new(2, need);
    let mut t = TableBuilder::try_new(spec, &layout).unwrap();
    for k in 0..500 {
        t.insert(k, &[k as u8; 40]).unwrap();
    }
    let meta = create_table(&cluster, t, &plan.tables[0].nodes).unwrap();
    assert_eq!(plan.tables[0].value_region_bytes, 64 << 10);
    assert_eq!(meta.value_region.unwrap().bytes, 64 << 10);
}
