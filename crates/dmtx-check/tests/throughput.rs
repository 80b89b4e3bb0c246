//! Checker throughput on large serial histories.
//!
//! Goal: the checker scales to tens of millions of transactions (1 M well under a
//! minute, 10 M in minutes on 2 cores). Method: generate a serial history (every
//! transaction reads two random keys and read-modify-writes a third, 5% abort), check it
//! with and without real time, without session order, and with start and commit
//! timestamps, assert it is clean and print transactions per second.
//! The 1 M test runs in release builds only; the 10 M one is `#[ignore]`d:
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-chk cargo test --release -p dmtx-check --test throughput -- --ignored --nocapture
//! ```

use std::time::{Duration, Instant};

use dmtx_check::history::{History, Outcome, Read, Write, WriteKind, NO_TS};
use dmtx_check::{check, CheckOptions, Level};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Tables; the keys are spread over them.
const TABLES: u32 = 4;

/// A serial history of about `n` transactions over `keys` keys in [`TABLES`] tables. With
/// `stale_per_mille > 0`, that many reads in a thousand return the key's previous
/// version instead of its latest: the history is then full of cycles. With `timestamps`,
/// transaction `i` starts at timestamp `2i` and commits at `2i + 1`.
fn serial_history(n: usize, keys: usize, seed: u64, stale_per_mille: u32, timestamps: bool) -> History {
    let mut rng = SmallRng::seed_from_u64(seed);
    let keys_per_table = (keys as u64 / TABLES as u64).max(1);
    let mut version = vec![0u64; (keys_per_table * TABLES as u64) as usize];
    let mut previous = version.clone();
    let mut h = History::new();
    h.txns.reserve(n);
    h.reads.reserve(3 * n);
    h.writes.reserve(n);
    let coords = 64u64;
    let mut seq = vec![0u64; coords as usize];
    for i in 0..n {
        let coord = rng.random_range(0..coords);
        seq[coord as usize] += 1;
        let id = (coord << 40) | seq[coord as usize];
        let pick = |rng: &mut SmallRng| {
            let table = rng.random_range(0..TABLES);
            let key = rng.random_range(0..keys_per_table);
            (table, key, (table as u64 * keys_per_table + key) as usize)
        };
        let objs = [pick(&mut rng), pick(&mut rng), pick(&mut rng)];
        let (wt, wk, wi) = objs[2];
        if objs[..2].iter().any(|o| o.2 == wi) {
            // Keep it simple: a key is read-modify-written, never also read alone.
            continue;
        }
        let mut reads: Vec<Read> = objs
            .iter()
            .map(|&(table, key, i)| Read::of(table, key, version[i]))
            .collect();
        if stale_per_mille > 0 && rng.random_ratio(stale_per_mille, 1000) {
            reads[0].version = previous[objs[0].2];
        }
        let writes = [Write {
            table: wt,
            key: wk,
            prev: Some(version[wi]),
            version: id,
            kind: WriteKind::Update,
        }];
        let outcome = if rng.random_bool(0.05) {
            Outcome::Aborted
        } else {
            Outcome::Committed
        };
        if outcome == Outcome::Committed {
            previous[wi] = version[wi];
            version[wi] = id;
        }
        let t = 1000 * i as u64;
        let ts = match (timestamps, outcome) {
            (false, _) => (NO_TS, NO_TS),
            (true, Outcome::Committed) => (2 * i as u64, 2 * i as u64 + 1),
            (true, Outcome::Aborted) => (2 * i as u64, NO_TS),
        };
        h.push_parts(id, coord as u32, (t, t + 500), ts, outcome, &reads, &writes);
    }
    h
}

fn measure(n: usize, limit: Duration) {
    let started = Instant::now();
    let plain = serial_history(n, n, 7, 0, false);
    let stamped = serial_history(n, n, 7, 0, true);
    println!(
        "generated 2 x {} txns in {:.2} s",
        plain.len(),
        started.elapsed().as_secs_f64()
    );
    for (h, opts) in [
        (&plain, CheckOptions::default()),
        (
            &plain,
            CheckOptions {
                real_time: true,
                ..CheckOptions::default()
            },
        ),
        (
            &plain,
            CheckOptions {
                level: Level::SnapshotIsolation,
                ..CheckOptions::default()
            },
        ),
        (
            &plain,
            CheckOptions {
                sessions: false,
                ..CheckOptions::default()
            },
        ),
        (&stamped, CheckOptions::default()),
    ] {
        let started = Instant::now();
        let r = check(h, &opts);
        let secs = started.elapsed().as_secs_f64();
        assert!(r.is_clean(), "{r}");
        assert!(
            r.edges.rw > 0 && r.edges.wr > 0 && r.edges.ww > 0,
            "the history has every edge kind: {r:?}"
        );
        assert_eq!(r.sessions, r.edges.so > 0, "{r:?}");
        assert_eq!(
            r.snapshot_reads > 0,
            std::ptr::eq(h, &stamped),
            "only the timestamped history is checked against snapshots: {r:?}"
        );
        println!(
            "checked {} txns ({}{}{}, {} edges) in {secs:.2} s: {:.0} txns/s",
            h.len(),
            r.level_name(),
            if opts.sessions { "" } else { ", no sessions" },
            if r.snapshot_reads > 0 { ", snapshots" } else { "" },
            r.edges.ww + r.edges.wr + r.edges.rw + r.edges.rt + r.edges.so,
            h.len() as f64 / secs
        );
        assert!(
            started.elapsed() < limit,
            "checking {n} txns took {secs:.1} s, over {limit:?}"
        );
    }
}

/// A small run under plain `cargo test`, so the bench cannot rot.
#[test]
fn check_10k_serial() {
    measure(10_000, Duration::from_secs(60));
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release builds only")]
fn check_1m_serial() {
    measure(1_000_000, Duration::from_secs(60));
}

#[test]
#[ignore = "10 M transactions: run by hand with --release --ignored --nocapture"]
fn check_10m_serial() {
    measure(10_000_000, Duration::from_secs(600));
}

/// Stale reads make cycles everywhere: the classification must stay bounded too.
#[test]
#[cfg_attr(debug_assertions, ignore = "release builds only")]
fn check_1m_with_stale_reads() {
    let h = serial_history(1_000_000, 10_000, 11, 20, false);
    for real_time in [false, true] {
        let started = Instant::now();
        let r = check(
            &h,
            &CheckOptions {
                real_time,
                ..CheckOptions::default()
            },
        );
        let secs = started.elapsed().as_secs_f64();
        print!("{r}");
        println!("checked {} txns with 2% stale reads in {secs:.2} s", h.len());
        assert!(!r.is_clean());
        assert!(r.txns_in_cycles > 0);
        assert!(secs < 120.0, "{secs:.1} s");
    }
}
