//! Errors outside `dmtx bench`'s run path, as a user meets them (issue 25).
//!
//! Goal: every refusal is one line on stderr with exit code 2; it names the cause once
//! (no error type repeats its source's text), names the flag or file field the user
//! wrote, and names what is missing. `cluster up` honours or refuses the bench's node
//! counts and leaves no directory of its own behind.
//! Method: run the built binary with `std::process::Command`; memory nodes are real
//! `dmtx memnode` processes on loopback.

mod common;

use common::{dmtx, scratch_dir, text};

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_dmtx");

/// The one `error: ` line of a run that failed with exit code 2 (other stderr lines,
/// such as a warning or the `cluster up` banner, are allowed around it).
fn error_line(out: &Output) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "one error line: {err:?}");
    lines[0].to_string()
}

/// `needle` occurs exactly once in `haystack`.
fn assert_once(haystack: &str, needle: &str) {
    assert_eq!(haystack.matches(needle).count(), 1, "`{needle}` once in: {haystack}");
}

/// Write a 0600 token file `name` in `dir`.
fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// A cluster file `cluster.toml` in `dir` for one memory node at `addr`.
fn cluster_file(dir: &Path, addr: &str, bytes: &str, token: &str) -> PathBuf {
    let p = dir.join("cluster.toml");
    std::fs::write(
        &p,
        format!(
            "format = \"dmtx-cluster\"\nversion = 1\ncluster_id = 9\nepoch = 0\ntoken_file = \"{token}\"\n\
             replicas = 1\n\n[[memory_nodes]]\nid = 0\naddress = \"{addr}\"\nbytes = \"{bytes}\"\n"
        ),
    )
    .unwrap();
    p
}

/// A `dmtx memnode` process, killed when dropped.
struct Memnode {
    child: Child,
    addr: String,
}

impl Drop for Memnode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn memnode(token: &Path) -> Memnode {
    let mut child = Command::new(BIN)
        .args([
            "memnode",
            "--listen",
            "127.0.0.1:0",
            "--size",
            "64MiB",
            "--cluster-id",
            "9",
        ])
        .arg("--token-file")
        .arg(token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dmtx memnode");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "memnode 0 listening on 127.0.0.1:PORT (...)"
    let addr = line.split_whitespace().nth(4).expect("the address line").to_string();
    Memnode { child, addr }
}

/// A loopback address nothing listens on (bound, then released).
fn dead_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

const TINY_BENCH: &[&str] = &[
    "--workload",
    "kvs",
    "--txns",
    "200",
    "--threads",
    "1",
    "--coroutines",
    "2",
    "--set",
    "keys=1000",
    "--quiet",
    "--out",
    "-",
];

// ---- C: each cause once ----

#[test]
fn check_of_a_missing_file_names_the_cause_once() {
    let e = error_line(&dmtx(&["check", "no-such-history.jsonl"]));
    assert!(e.contains("no-such-history.jsonl"), "{e}");
    assert_once(&e, "No such file or directory");
}

#[test]
fn report_of_a_missing_file_names_the_cause_once() {
    let e = error_line(&dmtx(&["report", "no-such-run.json"]));
    assert!(e.contains("no-such-run.json"), "{e}");
    assert_once(&e, "No such file or directory");
}

#[test]
fn report_of_a_file_that_is_no_record_names_the_cause_once() {
    let dir = scratch_dir("report-bad");
    let f = dir.join("x.json");
    std::fs::write(&f, "{}").unwrap();
    let e = error_line(&dmtx(&["report", f.to_str().unwrap()]));
    assert!(e.contains("not a dmtx run record"), "{e}");
    assert_once(&e, "schema_version");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_sim_profile_names_the_cause_once() {
    let e = error_line(&dmtx(&["sim", "profile", "cx4"]));
    assert!(e.contains("profile `cx4`"), "{e}");
    assert_once(&e, "No such file or directory");
}

#[test]
fn a_dead_memory_node_names_the_refusal_once() {
    let dir = scratch_dir("dead");
    token_file(&dir, "token", "a-test-token-of-32-bytes-or-so!!");
    let cluster = cluster_file(&dir, &dead_addr(), "64MiB", "token");
    let mut args = vec!["bench", "--cluster", cluster.to_str().unwrap()];
    args.extend_from_slice(TINY_BENCH);
    let e = error_line(&dmtx(&args));
    assert!(e.contains("cannot connect to mn0"), "{e}");
    assert_once(&e, "Connection refused");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_memnode_on_a_used_port_names_the_cause_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let e = error_line(&dmtx(&["memnode", "--listen", &addr, "--size", "1MiB"]));
    assert!(e.contains(&format!("cannot listen on {addr}")), "{e}");
    assert_once(&e, "Address already in use");
}

/// Also D: the refusal points at the token files, not at a `--token` flag that does
/// not exist.
#[test]
fn a_wrong_token_is_named_once_with_the_token_file_to_fix() {
    let dir = scratch_dir("token");
    let right = token_file(&dir, "token", "a-test-token-of-32-bytes-or-so!!");
    token_file(&dir, "other", "another-token-of-32-bytes-or-so!");
    let node = memnode(&right);
    let cluster = cluster_file(&dir, &node.addr, "64MiB", "other");
    let mut args = vec!["bench", "--cluster", cluster.to_str().unwrap()];
    args.extend_from_slice(TINY_BENCH);
    let e = error_line(&dmtx(&args));
    assert_once(&e, "wrong cluster token");
    assert!(e.contains("--token-file") && e.contains("`token_file`"), "{e}");
    assert!(!e.contains("--token "), "names a flag that does not exist: {e}");
    drop(node);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- B: no abort from a size ----

/// `dmtx memnode --size 100TiB` aborted (rc 134) with "memory allocation ... failed".
/// A size beyond the address space fails the same allocation on every machine.
#[test]
fn a_region_too_large_to_map_is_a_clean_error() {
    let e = error_line(&dmtx(&["memnode", "--listen", "127.0.0.1:0", "--size", "16000000TiB"]));
    assert!(
        e.contains("cannot allocate a memory-node region of 17592186044416000000 bytes"),
        "{e}"
    );
    assert!(e.contains("--size"), "{e}");
}

// ---- D: the names the user wrote ----

#[test]
fn a_bad_memnode_size_names_size_not_mn_bytes() {
    let e = error_line(&dmtx(&["memnode", "--listen", "127.0.0.1:0", "--size", "64XB"]));
    assert!(e.starts_with("error: --size 64XB: has an unknown unit"), "{e}");
    assert!(!e.contains("--mn-bytes"), "{e}");
    let e = error_line(&dmtx(&["cluster", "up", "--local", "1", "--size", "64XB"]));
    assert!(e.starts_with("error: --size 64XB: "), "{e}");
    assert!(!e.contains("--mn-bytes"), "{e}");
}

#[test]
fn a_bad_bytes_in_a_cluster_file_names_the_field_and_node() {
    let dir = scratch_dir("bytes");
    token_file(&dir, "token", "a-test-token-of-32-bytes-or-so!!");
    let cluster = cluster_file(&dir, "127.0.0.1:7400", "lots", "token");
    let e = error_line(&dmtx(&["bench", "--cluster", cluster.to_str().unwrap()]));
    assert!(
        e.contains("`bytes` = \"lots\" of memory node 0 (`memory_nodes[0]`): is not a size"),
        "{e}"
    );
    assert!(!e.contains("--mn-bytes"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn loading_into_nodes_of_an_earlier_run_says_to_restart_them() {
    let dir = scratch_dir("again");
    let token = token_file(&dir, "token", "a-test-token-of-32-bytes-or-so!!");
    let node = memnode(&token);
    let cluster = cluster_file(&dir, &node.addr, "64MiB", "token");
    let mut args = vec!["bench", "--cluster", cluster.to_str().unwrap()];
    args.extend_from_slice(TINY_BENCH);
    let first = dmtx(&args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let e = error_line(&dmtx(&args));
    assert!(e.contains("already defined"), "{e}");
    assert!(e.contains("restart them") && e.contains("dmtx cluster up"), "{e}");
    drop(node);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- E: missing arguments are named ----

#[test]
fn missing_arguments_are_named_with_the_subcommand_help() {
    for (args, names) in [
        (&["memnode"][..], "--listen <ADDR>; see `dmtx memnode --help`"),
        (&["check"][..], "<FILE>...; see `dmtx check --help`"),
        (&["report"][..], "<PATHS>...; see `dmtx report --help`"),
        (&["cluster", "up"][..], "--local <N>; see `dmtx cluster up --help`"),
        (
            &["report", "x.json", "--plot-vs", "coroutines"][..],
            "--plot <FILE.svg>; see `dmtx report --help`",
        ),
    ] {
        let e = error_line(&dmtx(args));
        let want = format!("error: the following required arguments were not provided: {names}");
        assert_eq!(e, want, "{args:?}");
    }
}

#[test]
fn an_invalid_transport_lists_the_valid_values() {
    let e = error_line(&dmtx(&["bench", "--transport", "foo"]));
    assert!(e.contains("invalid value 'foo' for '--transport <TRANSPORT>'"), "{e}");
    assert!(e.contains("[possible values: mem, sim]"), "{e}");
    assert!(e.ends_with("see `dmtx bench --help`"), "{e}");
}

// ---- F: `cluster up` and the bench after `--` ----

/// `cluster up` with `TMPDIR` set to a fresh directory, so what it leaves there shows.
fn cluster_up(tmp: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .env("TMPDIR", tmp)
        .args(["cluster", "up"])
        .args(args)
        .output()
        .expect("run dmtx cluster up")
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect()
}

#[test]
fn cluster_up_refuses_memory_nodes_that_differ_from_local() {
    let tmp = scratch_dir("up-m");
    let out = cluster_up(&tmp, &["--local", "2", "--", "bench", "-m", "3"]);
    let e = error_line(&out);
    assert!(e.contains("--memory-nodes 3 differs from --local 2"), "{e}");
    assert!(!text(&out.stderr).contains("cluster: "), "no node was started");
    let out = cluster_up(&tmp, &["--local", "2", "--replicas", "2", "--", "bench", "-r", "1"]);
    assert!(error_line(&out).contains("--replicas 2 and, after --, --replicas 1 differ"));
    let out = cluster_up(&tmp, &["--local", "1", "--", "bench", "-r", "2"]);
    assert!(error_line(&out).contains("--replicas 2: must be between 1 and --local 1"));
    // A preset's node counts are held to the same rules (motor: 3 nodes x 3 replicas).
    let out = cluster_up(&tmp, &["--local", "2", "--", "bench", "--preset", "motor"]);
    assert!(error_line(&out).contains("--preset motor runs on 3 memory nodes, not --local 2; pass --local 3"));
    let out = cluster_up(
        &tmp,
        &["--local", "3", "--replicas", "2", "--", "bench", "--preset", "motor"],
    );
    let e = error_line(&out);
    assert!(
        e.contains("--replicas 2 and, after --, --preset motor (replicas 3) differ"),
        "{e}"
    );
    assert_eq!(entries(&tmp), Vec::<PathBuf>::new());
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Goal: `-r` after `--` is the cluster's replica count (it ran 2×2 and recorded 2/2),
/// and the directory `cluster up` made for its token is gone afterwards.
#[test]
fn cluster_up_honours_replicas_and_removes_its_directory() {
    let tmp = scratch_dir("up-r");
    let mut args = vec!["--local", "2", "--size", "64MiB", "--", "bench", "-m", "2", "-r", "1"];
    args.extend_from_slice(TINY_BENCH);
    let out = cluster_up(&tmp, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["config"]["memory_nodes"], 2, "{json}");
    assert_eq!(json["config"]["replicas"], 1, "{json}");
    assert_eq!(entries(&tmp), Vec::<PathBuf>::new(), "left behind");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn cluster_up_removes_its_directory_when_the_bench_fails() {
    let tmp = scratch_dir("up-fail");
    let out = cluster_up(
        &tmp,
        &["--local", "1", "--size", "64MiB", "--", "bench", "--workload", "nosuch"],
    );
    assert!(error_line(&out).contains("--workload `nosuch`"));
    assert!(
        text(&out.stderr).contains("cluster: 1 memory nodes"),
        "the nodes had started"
    );
    assert_eq!(entries(&tmp), Vec::<PathBuf>::new(), "left behind");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Goal: a memory node that cannot start is reported once, with its own cause, and
/// `cluster up` still removes its directory (it printed the node's `error:` line and
/// then its own "did not start: ``").
#[test]
fn cluster_up_reports_a_node_that_cannot_start_once() {
    let tmp = scratch_dir("up-size");
    let out = cluster_up(&tmp, &["--local", "1", "--size", "16000000TiB", "--", "bench"]);
    let e = error_line(&out);
    assert!(
        e.contains("memory node 0 did not start: cannot allocate a memory-node region"),
        "{e}"
    );
    assert_eq!(entries(&tmp), Vec::<PathBuf>::new(), "left behind");
    std::fs::remove_dir_all(&tmp).unwrap();
}
