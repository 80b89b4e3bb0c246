//! What `dmtx bench` decides before it builds anything: the memory plan and its refusal,
//! `--dry-run`, output paths, and Ctrl-C while loading.
//!
//! Goal: a run that cannot fit is refused at once with the estimate, the limit and the
//! knob value that fits; a record that could not be written is found out before the
//! run; an interrupt at any point exits 130. Method: run the built binary.

mod common;

use common::{dmtx, scratch_dir, text};

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mem_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(u64::MAX, |kib| kib * 1024)
}

/// RCBench's YCSB dataset (40 M records of 1 KB) needs over 100 GB in-process: refused
/// before a byte is built, naming the records that fit.
#[test]
fn a_preset_larger_than_the_host_is_refused_before_building() {
    if mem_available() > 200 << 30 {
        eprintln!("skipped: this host has room for the rcbench preset");
        return;
    }
    let started = Instant::now();
    let out = dmtx(&["bench", "--preset", "rcbench", "-w", "ycsb", "-d", "1", "-o", "-"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for want in [
        "--preset rcbench's dataset (records=40000000)",
        "GiB of this host's memory",
        "MemAvailable",
        "--set records=",
        "is the largest that fits",
    ] {
        assert!(err.contains(want), "{want:?} missing from {err}");
    }
    assert!(out.stdout.is_empty());
    // Planning alone: nothing is built (building would take tens of seconds).
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    // The value it names fits (with a margin: the host's free memory moves meanwhile).
    let fits: u64 = err
        .split("--set records=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let fits = fits / 10 * 8;
    let out = dmtx(&[
        "bench",
        "--preset",
        "rcbench",
        "-w",
        "ycsb",
        "--set",
        &format!("records={fits}"),
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("fits        yes"));
}

#[test]
fn a_region_smaller_than_the_tables_is_refused_before_building() {
    let started = Instant::now();
    let out = dmtx(&[
        "bench",
        "-w",
        "ycsb",
        "--set",
        "records=400000",
        "--mn-bytes",
        "64MiB",
        "-o",
        "-",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: --mn-bytes 64.0 MiB: the dataset (records=400000) needs"),
        "{err}"
    );
    assert!(err.contains("pass --mn-bytes") && err.contains("MiB or more"), "{err}");
    assert!(
        err.contains("--set records=") && err.contains("is the largest that fits"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    // The --mn-bytes it asks for is enough.
    let need = err.split("pass --mn-bytes ").nth(1).unwrap().split(' ').next().unwrap();
    let out = dmtx(&[
        "bench",
        "-w",
        "ycsb",
        "--set",
        "records=400000",
        "--mn-bytes",
        need,
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn dry_run_prints_the_plan_and_builds_nothing() {
    let dir = scratch_dir("dry");
    let out = dmtx(&["bench", "-w", "tpcc", "--dry-run", "-o", dir.to_str().unwrap()]);
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for want in [
        "ford on tpcc",
        "knob        warehouses=8",
        "table       order_line",
        "mn0",
        "mn1",
        "memory      ",
        "fits        yes",
    ] {
        assert!(s.contains(want), "{want:?} missing from {s}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "a dry run writes no record"
    );
}

#[test]
fn list_shows_every_presets_dataset_and_memory() {
    let out = dmtx(&["list"]);
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(s.contains("preset datasets"), "{s}");
    for (preset, line) in [
        ("ford", "ford     tpcc       warehouses=8 tpcc_variant=ford"),
        ("rcbench", "rcbench  ycsb       records=40000000"),
    ] {
        let at = s
            .find(line)
            .unwrap_or_else(|| panic!("{preset}: {line:?} missing from {s}"));
        let estimate = s[at..].lines().nth(1).unwrap();
        assert!(
            estimate.contains("records in") && estimate.contains("per memory node"),
            "{estimate}"
        );
    }
}

#[test]
fn an_out_path_with_an_extension_is_a_file() {
    let dir = scratch_dir("ext");
    let file = dir.join("run.txt");
    let out = dmtx(&[
        "bench",
        "-t",
        "1",
        "-c",
        "2",
        "--txns",
        "100",
        "--set",
        "accounts=500",
        "-q",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(file.is_file(), "{} is not a file", file.display());
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(json["run_info"]["load_records"].as_u64().unwrap() >= 1000);
    assert!(json["run_info"]["load_records_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn unwritable_outputs_are_refused_before_loading() {
    let dir = scratch_dir("unwritable");
    // A file where a directory must go: no one, root included, can create under it.
    let blocker = dir.join("blocker");
    std::fs::write(&blocker, b"x").unwrap();
    for (flag, path) in [
        ("--out", blocker.join("run.json")),
        ("--out", blocker.join("sub/")),
        ("--history", blocker.join("h.jsonl")),
    ] {
        let started = Instant::now();
        let out = dmtx(&["bench", "-w", "tatp", flag, path.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {}: {err}", path.display());
        assert!(err.contains(flag) && err.contains("cannot be written"), "{err}");
        // TATP takes seconds to load: the refusal comes first.
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }
    let out = dmtx(&["bench", "--history", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--history -: needs a file name"));
}

#[test]
fn a_record_that_cannot_be_written_after_the_run_is_saved_elsewhere() {
    let dir = scratch_dir("fallback");
    let out_dir = dir.join("out");
    let child = Command::new(env!("CARGO_BIN_EXE_dmtx"))
        .args([
            "bench",
            "-t",
            "1",
            "-c",
            "2",
            "-d",
            "1.5",
            "--set",
            "accounts=500",
            "-o",
            out_dir.join("run.json").to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the run is under way, put a file where its directory was.
    std::thread::sleep(Duration::from_millis(700));
    std::fs::remove_dir_all(&out_dir).unwrap();
    std::fs::write(&out_dir, b"in the way").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(text(&out.stdout).contains("committed"), "the summary is printed anyway");
    let saved = err
        .split("the record was saved to ")
        .nth(1)
        .unwrap_or_else(|| panic!("{err}"))
        .split(" instead")
        .next()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    assert!(json["committed"].as_u64().unwrap() > 0);
    let _ = std::fs::remove_file(saved);
}

fn interrupt_after(args: &[&str], after: Duration) -> (Output, Duration) {
    let child = Command::new(env!("CARGO_BIN_EXE_dmtx"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let sent = Instant::now();
    let out = child.wait_with_output().unwrap();
    (out, sent.elapsed())
}

/// TATP's million subscribers take seconds to load: an interrupt 0.8 s in stops the
/// loaders within a batch of records, and nothing is written.
#[test]
fn ctrl_c_while_loading_stops_within_a_second_and_exits_130() {
    let dir = scratch_dir("ctrlc-load");
    let (out, took) = interrupt_after(
        &["bench", "-w", "tatp", "-d", "5", "-o", dir.to_str().unwrap()],
        Duration::from_millis(800),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted while loading tables; nothing was run"),
        "{err}"
    );
    // A release build exits within 0.6 s; a debug build on a loaded 2-core host ships a
    // table's pages several times slower.
    assert!(took < Duration::from_secs(4), "exited {took:?} after the interrupt");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing is written");
}

#[test]
fn ctrl_c_during_the_run_writes_the_record_and_exits_130() {
    let dir = scratch_dir("ctrlc-run");
    let (out, _) = interrupt_after(
        &[
            "bench",
            "-t",
            "1",
            "-c",
            "2",
            "-d",
            "30",
            "--set",
            "accounts=500",
            "-o",
            dir.to_str().unwrap(),
        ],
        Duration::from_millis(1500),
    );
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(files[0].as_ref().unwrap().path()).unwrap()).unwrap();
    assert_eq!(json["stop_reason"], "interrupt");
}

#[test]
fn thread_and_coroutine_counts_stop_at_the_transaction_id_limit() {
    for (flag, v) in [("-t", "300"), ("-c", "257")] {
        let out = dmtx(&["bench", flag, v]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("must be between 1 and 256"), "{err}");
    }
}

/// An undo log larger than FORD's log area can never commit: the run stops at once with
/// the knob to raise (it used to hit an assertion).
#[test]
fn an_undo_log_larger_than_log_bytes_stops_the_run_naming_the_knob() {
    let out = dmtx(&[
        "bench",
        "-w",
        "tpcc",
        "--set",
        "warehouses=1",
        "--set",
        "items=1000",
        "--set",
        "customers=30",
        "--set",
        "log_bytes=4096",
        "--txns",
        "500",
        "-o",
        "-",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("4096-byte log area of `ford`"), "{err}");
    // It names what the transaction needed, and a value that holds it.
    let number_after = |marker: &str| -> u64 {
        err.split(marker)
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {marker:?} in {err}"))
    };
    let (needed, suggested) = (number_after("undo log needs "), number_after("--set log_bytes="));
    assert!(needed > 4096 && suggested >= needed, "{err}");
}

/// With `--txns`, every worker thread runs its share even if it starts a little late.
#[test]
fn every_thread_runs_its_share_of_a_txns_budget() {
    let dir = scratch_dir("share");
    let history = dir.join("h.jsonl");
    let out = dmtx(&[
        "bench",
        "--threads",
        "2",
        "--txns",
        "150",
        "-q",
        "-o",
        dir.join("r.json").to_str().unwrap(),
        "--history",
        history.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut per_thread = [0u64; 2];
    for line in std::fs::read_to_string(&history).unwrap().lines().skip(1) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["outcome"] == "committed" {
            per_thread[(v["coord"].as_u64().unwrap() >> 8) as usize & 1] += 1;
        }
    }
    assert_eq!(per_thread, [75, 75]);
}

/// A hand-edited NIC profile keeps the built-in's name, so the record also says where it
/// came from and fingerprints every parameter: the two runs cannot be mistaken.
#[test]
fn a_hand_edited_nic_profile_is_recorded_with_its_file_and_parameters() {
    let dir = scratch_dir("profile");
    let builtin = text(&dmtx(&["sim", "profile", "cx5"]).stdout);
    let edited = builtin.replace("one_way_latency_ns = 1000", "one_way_latency_ns = 2000");
    assert_ne!(builtin, edited, "the profile has the field this test edits");
    let file = dir.join("slow.toml");
    std::fs::write(&file, edited).unwrap();
    let sim = |nic: &str, out: &str| {
        let path = dir.join(out);
        let o = dmtx(&[
            "bench",
            "--transport",
            "sim",
            "--nic",
            nic,
            "-t",
            "1",
            "-c",
            "2",
            "-d",
            "1ms",
            "--set",
            "accounts=500",
            "-o",
            path.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        (json["sim"].clone(), text(&o.stdout))
    };
    let (a, summary_a) = sim("cx5", "a.json");
    let (b, summary_b) = sim(file.to_str().unwrap(), "b.json");
    assert_eq!(a["profile"], "cx5");
    assert_eq!(b["profile"], "cx5");
    assert_eq!(a["profile_source"], "built-in cx5");
    assert_eq!(b["profile_source"], file.to_str().unwrap());
    assert_ne!(a["profile_fingerprint"], b["profile_fingerprint"]);
    assert_eq!(b["profile_params"]["nic"]["one_way_latency_ns"], 2000);
    assert!(
        summary_b.contains(&format!("({}, parameters ", file.display())),
        "{summary_b}"
    );
    assert!(summary_a.contains("(built-in cx5, parameters "), "{summary_a}");
}

/// Reserving more address space than the OS will map is a clean error, not an abort.
#[test]
fn an_mn_bytes_too_large_to_map_is_a_clean_error() {
    let out = dmtx(&["bench", "--mn-bytes", "100TiB", "-o", "-"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot allocate a memory-node region") && err.contains("--mn-bytes"),
        "{err}"
    );
}
