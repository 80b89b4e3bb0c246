//! FORD's behaviour, pinned. Goal: a change to the shared one-version machinery of
//! `dmtx-protocols` (bucket walk, undo log, replica fan-out, release, tear detector) or to
//! FORD itself that alters what FORD sends fails here. Method: fixed-seed runs on the
//! deterministic simulator, one per workload (plus one with three replicas and one
//! whose link failures make commits roll back), and per
//! transaction type the exact committed and aborted counts, abort reasons, round trips,
//! verbs by kind and bytes each way, compared with golden values taken from the code
//! before the machinery moved out of `ford/` (KVS's since its inputs are drawn apart
//! from running them, which changed the order of its random draws; TATP's since a lone
//! declared read goes to the primary and is validated when it finds it locked). Each drawn
//! transaction runs once (`retry_aborts=0`): the driver's retry policy is not FORD's.
//!
//! A deliberate change of FORD's verbs (or of a workload's or the simulator's model)
//! changes these numbers too: run with `DMTX_GOLDEN_PRINT=1` and `--nocapture` to print
//! the new table, check the difference is the intended one, and paste it.

mod common;

use common::run_registry;
use dmtx::config::{OnFault, TransportKind};
use dmtx::BenchArgs;

/// One fixed-seed simulated run: 5 ms of virtual time after the default warm-up, with
/// `mns_replicas` memory nodes and replicas and the fault script `faults` if given.
fn run(workload: &str, set: &[&str], mns_replicas: Option<(u32, u32)>, faults: Option<&str>) -> Vec<String> {
    let args = BenchArgs {
        workload: workload.into(),
        transport: TransportKind::Sim,
        duration: Some("5ms".into()),
        seed: 7,
        // One attempt per drawn transaction: the driver's retry policy is not FORD's.
        set: set
            .iter()
            .map(|s| s.to_string())
            .chain(std::iter::once("retry_aborts=0".to_string()))
            .collect(),
        memory_nodes: mns_replicas.map(|m| m.0),
        replicas: mns_replicas.map(|m| m.1),
        faults: faults.map(String::from),
        on_fault: if faults.is_some() {
            OnFault::Continue
        } else {
            OnFault::Stop
        },
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    };
    let r = run_registry(&args);
    let v = serde_json::to_value(&r).unwrap();
    let types = v["per_txn_type"].as_object().expect("per_txn_type is an object");
    assert!(!types.is_empty(), "{workload}: no transaction types in the result");
    let counters = |c: &serde_json::Value| {
        let ops = &c["ops"];
        format!(
            "rtts={} bg={} cas={} faa={} flush={} read={} write={} out={} in={}",
            c["rtts"],
            c["background_posts"],
            ops["cas"],
            ops["faa"],
            ops["flush"],
            ops["read"],
            ops["write"],
            c["bytes_out"],
            c["bytes_in"]
        )
    };
    types
        .iter()
        .map(|(name, t)| {
            let reasons: Vec<String> = t["abort_reasons"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(_, n)| n.as_u64() != Some(0))
                .map(|(k, n)| format!("{k}:{n}"))
                .collect();
            format!(
                "{name} committed={} aborted={} rolled_back={} reasons=[{}] | {} | aborted: {}",
                t["committed"],
                t["aborted"],
                t["rolled_back"],
                reasons.join(","),
                counters(&t["committed_counters"]),
                counters(&t["aborted_counters"]),
            )
        })
        .collect()
}

fn check(label: &str, got: Vec<String>, golden: &[&str]) {
    if std::env::var_os("DMTX_GOLDEN_PRINT").is_some() {
        println!("// {label}");
        for l in &got {
            println!("\"{l}\",");
        }
        return;
    }
    assert_eq!(
        got.len(),
        golden.len(),
        "{label}: {} transaction types, golden has {}:\n{}",
        got.len(),
        golden.len(),
        got.join("\n")
    );
    for (g, want) in got.iter().zip(golden) {
        assert_eq!(
            g, want,
            "{label}: FORD's behaviour changed (rerun with DMTX_GOLDEN_PRINT=1 --nocapture if intended)"
        );
    }
}

const KVS_GOLDEN: &[&str] = &[
    "read_only committed=2571 aborted=869 rolled_back=0 reasons=[validation:869] | rtts=5507 bg=0 cas=0 faa=0 flush=0 read=10668 write=0 out=0 in=949056 | aborted: rtts=1981 bg=0 cas=0 faa=0 flush=0 read=3726 write=0 out=0 in=257760",
    "read_write committed=2649 aborted=812 rolled_back=0 reasons=[lock_conflict:812] | rtts=6762 bg=2649 cas=15894 faa=0 flush=2649 read=7037 write=26490 out=2246352 in=1135296 | aborted: rtts=815 bg=538 cas=1399 faa=0 flush=0 read=1628 write=538 out=26688 in=200056",
];

#[test]
fn kvs_verbs_are_pinned() {
    check("kvs", run("kvs", &["keys=10000"], None, None), KVS_GOLDEN);
}

const SMALLBANK_GOLDEN: &[&str] = &[
    "amalgamate committed=811 aborted=4 rolled_back=0 reasons=[lock_conflict:4] | rtts=2335 bg=811 cas=7299 faa=0 flush=1622 read=3944 write=10543 out=687728 in=489464 | aborted: rtts=5 bg=3 cas=8 faa=0 flush=0 read=13 write=4 out=160 in=1488",
    "balance committed=881 aborted=1 rolled_back=0 reasons=[validation:1] | rtts=1773 bg=0 cas=0 faa=0 flush=0 read=3546 write=0 out=0 in=299264 | aborted: rtts=2 bg=0 cas=0 faa=0 flush=0 read=4 write=0 out=0 in=288",
    "deposit_checking committed=844 aborted=2 rolled_back=0 reasons=[lock_conflict:2] | rtts=2159 bg=844 cas=2532 faa=0 flush=844 read=1315 write=5908 out=283584 in=158736 | aborted: rtts=3 bg=0 cas=2 faa=0 flush=0 read=3 write=0 out=32 in=320",
    "send_payment committed=1308 aborted=98 rolled_back=0 reasons=[lock_conflict:13,user:85] | rtts=3640 bg=1308 cas=7848 faa=0 flush=1308 read=4191 write=13080 out=774336 in=515952 | aborted: rtts=128 bg=93 cas=191 faa=0 flush=0 read=228 write=178 out=4480 in=18392",
    "transact_saving committed=864 aborted=0 rolled_back=0 reasons=[] | rtts=2342 bg=864 cas=2592 faa=0 flush=864 read=1478 write=6048 out=290304 in=189920 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "write_check committed=855 aborted=1 rolled_back=0 reasons=[lock_conflict:1] | rtts=3032 bg=855 cas=2565 faa=0 flush=855 read=3038 write=5985 out=287280 in=314824 | aborted: rtts=1 bg=0 cas=1 faa=0 flush=0 read=2 write=0 out=16 in=264",
];

#[test]
fn smallbank_verbs_are_pinned() {
    check("smallbank", run("smallbank", &[], None, None), SMALLBANK_GOLDEN);
}

const SMALLBANK_WITH_THREE_REPLICAS_GOLDEN: &[&str] = &[
    "amalgamate committed=692 aborted=2 rolled_back=0 reasons=[lock_conflict:2] | rtts=2016 bg=692 cas=8304 faa=0 flush=2076 read=3449 write=12456 out=863616 in=451664 | aborted: rtts=3 bg=2 cas=6 faa=0 flush=0 read=7 write=4 out=128 in=544",
    "balance committed=729 aborted=0 rolled_back=0 reasons=[] | rtts=1471 bg=0 cas=0 faa=0 flush=0 read=2939 write=0 out=0 in=256496 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "deposit_checking committed=710 aborted=2 rolled_back=0 reasons=[lock_conflict:2] | rtts=1855 bg=710 cas=2840 faa=0 flush=1420 read=1145 write=7100 out=352160 in=147280 | aborted: rtts=3 bg=0 cas=2 faa=0 flush=0 read=3 write=0 out=32 in=320",
    "send_payment committed=1092 aborted=68 rolled_back=0 reasons=[lock_conflict:7,user:61] | rtts=3106 bg=1092 cas=8736 faa=0 flush=2184 read=3629 write=15288 out=952224 in=475280 | aborted: rtts=93 bg=64 cas=132 faa=0 flush=0 read=162 write=125 out=3112 in=13632",
    "transact_saving committed=728 aborted=1 rolled_back=0 reasons=[lock_conflict:1] | rtts=2006 bg=728 cas=2912 faa=0 flush=1456 read=1278 write=7280 out=361088 in=172640 | aborted: rtts=1 bg=0 cas=1 faa=0 flush=0 read=1 write=0 out=16 in=56",
    "write_check committed=708 aborted=2 rolled_back=0 reasons=[lock_conflict:2] | rtts=2537 bg=708 cas=2832 faa=0 flush=1416 read=2541 write=7080 out=351168 in=274128 | aborted: rtts=2 bg=0 cas=2 faa=0 flush=0 read=4 write=0 out=32 in=368",
];

#[test]
fn smallbank_with_three_replicas_verbs_are_pinned() {
    check(
        "smallbank r3",
        run("smallbank", &[], Some((3, 3)), None),
        SMALLBANK_WITH_THREE_REPLICAS_GOLDEN,
    );
}

const TATP_GOLDEN: &[&str] = &[
    "delete_call_forwarding committed=134 aborted=0 rolled_back=0 reasons=[] | rtts=434 bg=51 cas=276 faa=0 flush=90 read=570 write=456 out=29664 in=103056 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "get_access_data committed=2497 aborted=0 rolled_back=0 reasons=[] | rtts=2819 bg=0 cas=0 faa=0 flush=0 read=2819 write=0 out=0 in=648592 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "get_new_destination committed=761 aborted=0 rolled_back=0 reasons=[] | rtts=1642 bg=0 cas=0 faa=0 flush=0 read=3568 write=0 out=0 in=519736 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "get_subscriber_data committed=2397 aborted=5 rolled_back=0 reasons=[validation:5] | rtts=2582 bg=0 cas=0 faa=0 flush=0 read=2582 write=0 out=0 in=722536 | aborted: rtts=10 bg=0 cas=0 faa=0 flush=0 read=10 write=0 out=0 in=520",
    "insert_call_forwarding committed=128 aborted=0 rolled_back=0 reasons=[] | rtts=389 bg=128 cas=348 faa=4 flush=70 read=691 write=496 out=26368 in=130048 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "update_location committed=984 aborted=4 rolled_back=0 reasons=[lock_conflict:4] | rtts=4723 bg=984 cas=2952 faa=0 flush=984 read=3739 write=6888 out=488064 in=576880 | aborted: rtts=10 bg=0 cas=4 faa=0 flush=0 read=10 write=0 out=64 in=1312",
    "update_subscriber_data committed=135 aborted=0 rolled_back=0 reasons=[] | rtts=330 bg=106 cas=541 faa=0 flush=87 read=439 write=889 out=68664 in=89728 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
];

#[test]
fn tatp_verbs_are_pinned() {
    check("tatp", run("tatp", &["subscribers=10000"], None, None), TATP_GOLDEN);
}

const TPCC_GOLDEN: &[&str] = &[
    "delivery committed=7 aborted=15 rolled_back=0 reasons=[lock_conflict:15] | rtts=48 bg=7 cas=2982 faa=0 flush=14 read=1389 write=3010 out=557424 in=403344 | aborted: rtts=15 bg=0 cas=150 faa=0 flush=0 read=150 write=0 out=2400 in=8400",
    "new_order committed=3 aborted=273 rolled_back=1 reasons=[invisible:1,lock_conflict:238,validation:34] | rtts=18 bg=3 cas=224 faa=0 flush=6 read=169 write=236 out=54416 in=47952 | aborted: rtts=430 bg=268 cas=3489 faa=0 flush=0 read=7877 write=2991 out=79752 in=3059608",
    "order_status committed=20 aborted=3 rolled_back=0 reasons=[validation:3] | rtts=93 bg=0 cas=0 faa=0 flush=0 read=561 write=0 out=0 in=121184 | aborted: rtts=17 bg=0 cas=0 faa=0 flush=0 read=85 write=0 out=0 in=19560",
    "payment committed=14 aborted=265 rolled_back=0 reasons=[lock_conflict:265] | rtts=61 bg=14 cas=182 faa=0 flush=28 read=91 write=238 out=65520 in=43904 | aborted: rtts=274 bg=265 cas=870 faa=0 flush=0 read=1089 write=461 out=17608 in=532136",
    "stock_level committed=0 aborted=26 rolled_back=0 reasons=[validation:26] | rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0 | aborted: rtts=149 bg=0 cas=0 faa=0 flush=0 read=20649 write=0 out=0 in=3551992",
];

#[test]
fn tpcc_verbs_are_pinned() {
    check(
        "tpcc",
        run("tpcc", &["warehouses=1", "items=1000", "customers=30"], None, None),
        TPCC_GOLDEN,
    );
}

const YCSB_GOLDEN: &[&str] = &[
    "read_only committed=31 aborted=0 rolled_back=0 reasons=[] | rtts=76 bg=0 cas=0 faa=0 flush=0 read=643 write=0 out=0 in=1254448 | aborted: rtts=0 bg=0 cas=0 faa=0 flush=0 read=0 write=0 out=0 in=0",
    "read_write committed=213 aborted=10 rolled_back=0 reasons=[validation:10] | rtts=899 bg=213 cas=1413 faa=0 flush=213 read=4407 write=2265 out=2006544 in=9415512 | aborted: rtts=30 bg=10 cas=24 faa=0 flush=0 read=202 write=24 out=576 in=408416",
];

#[test]
fn ycsb_verbs_are_pinned() {
    check("ycsb", run("ycsb", &["records=10000"], None, None), YCSB_GOLDEN);
}

/// Memory node 1's link goes down for 20 µs in the middle of the 40th commit: commit
/// posts fail and roll back (restore WRITEs, release), and later attempts time out.
const SMALLBANK_LINK_DOWN_GOLDEN: &[&str] = &[
    "amalgamate committed=801 aborted=11 rolled_back=0 reasons=[fault:5,lock_conflict:6] | rtts=2308 bg=801 cas=7209 faa=0 flush=1602 read=3894 write=10413 out=679248 in=483144 | aborted: rtts=21 bg=9 cas=37 faa=0 flush=2 read=52 write=29 out=1616 in=6952",
    "balance committed=874 aborted=2 rolled_back=0 reasons=[fault:1,validation:1] | rtts=1759 bg=0 cas=0 faa=0 flush=0 read=3518 write=0 out=0 in=297728 | aborted: rtts=3 bg=0 cas=0 faa=0 flush=0 read=6 write=0 out=0 in=544",
    "deposit_checking committed=833 aborted=6 rolled_back=0 reasons=[fault:2,lock_conflict:4] | rtts=2135 bg=833 cas=2499 faa=0 flush=833 read=1302 write=5831 out=279888 in=157528 | aborted: rtts=7 bg=1 cas=6 faa=0 flush=0 read=7 write=0 out=96 in=704",
    "send_payment committed=1286 aborted=96 rolled_back=0 reasons=[fault:4,lock_conflict:8,user:84] | rtts=3586 bg=1286 cas=7716 faa=0 flush=1286 read=4135 write=12860 out=761312 in=510288 | aborted: rtts=128 bg=94 cas=193 faa=0 flush=0 read=227 write=175 out=4488 in=18680",
    "transact_saving committed=851 aborted=4 rolled_back=0 reasons=[fault:3,lock_conflict:1] | rtts=2308 bg=851 cas=2553 faa=0 flush=851 read=1457 write=5957 out=285936 in=187320 | aborted: rtts=13 bg=0 cas=10 faa=0 flush=3 read=7 write=21 out=1216 in=896",
    "write_check committed=848 aborted=2 rolled_back=0 reasons=[fault:1,lock_conflict:1] | rtts=3010 bg=848 cas=2544 faa=0 flush=848 read=3016 write=5936 out=284928 in=313184 | aborted: rtts=7 bg=0 cas=4 faa=0 flush=1 read=7 write=7 out=416 in=976",
];

#[test]
fn smallbank_with_a_link_down_during_commits_verbs_are_pinned() {
    let faults = "timeout=50us; link-down node=mn1 for=20us point=ford.commit.after_lock occurrence=40 after=1us";
    check(
        "smallbank link down",
        run("smallbank", &[], None, Some(faults)),
        SMALLBANK_LINK_DOWN_GOLDEN,
    );
}
