//! Memory nodes as their own processes: `dmtx memnode` on loopback, `dmtx bench
//! --cluster` against them over `tcp`.
//!
//! Goal: FORD runs SmallBank across processes with a clean history and its invariant;
//! killing a memory node mid-run stops the run at once with an error naming it, never a
//! hang. Method: spawn the built binary as two memory nodes on `127.0.0.1:0`, read the
//! address each prints, write a cluster file, run the bench binary against it with a time
//! limit.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dmtx::memnode::Control;
use dmtx::verbs::{Fabric, MnId, Post, RemotePtr, Submitted, Transport, VerbError};

const BIN: &str = env!("CARGO_BIN_EXE_dmtx");

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

fn memnode(dir: &Path, id: u16) -> Memnode {
    memnode_with(dir, id, &[])
}

fn memnode_with(dir: &Path, id: u16, extra: &[&str]) -> Memnode {
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
        .args(["--node-id", &id.to_string(), "--token-file"])
        .arg(dir.join("token"))
        .args(extra)
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

/// A fresh directory with the cluster's 0600 token.
fn cluster_dir(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("dmtx-tcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "a-test-token-of-32-bytes-or-so!!\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, token)
}

fn cluster(name: &str) -> (PathBuf, Vec<Memnode>) {
    let (dir, _) = cluster_dir(name);
    let nodes: Vec<Memnode> = (0..2).map(|i| memnode(&dir, i)).collect();
    let mut toml =
        "format = \"dmtx-cluster\"\nversion = 1\ncluster_id = 9\nepoch = 0\ntoken_file = \"token\"\nreplicas = 2\n"
            .to_string();
    for (i, n) in nodes.iter().enumerate() {
        toml += &format!(
            "\n[[memory_nodes]]\nid = {i}\naddress = \"{}\"\nbytes = \"64MiB\"\n",
            n.addr
        );
    }
    std::fs::write(dir.join("cluster.toml"), toml).unwrap();
    (dir, nodes)
}

fn bench(dir: &Path, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["bench", "--cluster"])
        .arg(dir.join("cluster.toml"))
        .args([
            "--threads",
            "2",
            "--coroutines",
            "4",
            "--set",
            "accounts=1000",
            "--out",
            "-",
            "--quiet",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dmtx bench")
}

#[test]
fn ford_smallbank_across_memnode_processes_is_serializable() {
    let (dir, _nodes) = cluster("ok");
    let out = bench(&dir, &["--txns", "2000", "--check"]).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["transport"], "tcp");
    assert_eq!(json["committed"], 2000);
    assert_eq!(json["invariant"]["ok"], true, "{}", json["invariant"]);
    assert_eq!(json["check"]["clean"], true, "{}", json["check"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_memnode_dying_mid_run_ends_in_errors_not_a_hang() {
    let (dir, mut nodes) = cluster("kill");
    let run = bench(&dir, &["--duration", "60"]);
    std::thread::sleep(Duration::from_millis(700));
    let killed = Instant::now();
    drop(nodes.pop()); // kill memory node 1
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // `--on-fault stop` (the default): the first coordinator that loses the node ends the
    // run with an error naming it, long before the 60 s are up.
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "the run went on for {:?} after the node died: {err}",
        killed.elapsed()
    );
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("mn1") && err.contains("stopped the run"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cluster_up_runs_a_bench_against_fresh_nodes_and_stops_them() {
    let dir = std::env::temp_dir().join(format!("dmtx-tcp-up-{}", std::process::id()));
    let out = Command::new(BIN)
        .args(["cluster", "up", "--local", "2", "--size", "64MiB", "--dir"])
        .arg(&dir)
        .args(["--", "bench", "--txns", "1000", "--threads", "1", "--coroutines", "2"])
        .args(["--set", "accounts=500", "--check", "--out", "-", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["transport"], "tcp");
    assert_eq!(json["check"]["clean"], true);
    let view = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(
        view.contains("[[memory_nodes]]") && view.contains("token_file = \"token\""),
        "{view}"
    );
    // The nodes are gone: their ports refuse connections.
    for line in view.lines().filter(|l| l.starts_with("address")) {
        let addr = line.split('"').nth(1).unwrap();
        assert!(std::net::TcpStream::connect(addr).is_err(), "{addr} still serves");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

const TOKEN: &[u8] = b"a-test-token-of-32-bytes-or-so!!";

fn tcp_config(client_id: u32) -> dmtx::net::TcpConfig {
    let mut c = dmtx::net::TcpConfig::new(9, TOKEN);
    c.client_id = client_id;
    c.op_deadline = Duration::from_secs(5);
    c
}

/// Submit `post` and wait for it.
fn run_post(t: &dyn Transport, post: &mut Post) -> Result<(), VerbError> {
    match t.submit(post) {
        Submitted::Done(r) => r,
        Submitted::Pending(ticket) => dmtx::runtime::block_on(std::future::poll_fn(|cx| {
            t.progress();
            t.poll(ticket, post, cx)
        })),
    }
}

fn node_addr(n: &Memnode) -> Vec<(MnId, std::net::SocketAddr)> {
    vec![(MnId(0), n.addr.parse().unwrap())]
}

/// Goal: fencing works against a real memory-node process: once `revoke` returns, the
/// revoked compute node's next write is refused, and so is its reconnect.
#[test]
fn a_revoked_compute_node_cannot_write_to_a_memnode_process() {
    let (dir, _) = cluster_dir("revoke");
    let node = memnode(&dir, 0);
    let fabric = dmtx::net::TcpFabric::connect(node_addr(&node), tcp_config(5)).unwrap();
    let victim = fabric.endpoint(0).unwrap();
    let word = RemotePtr::new(MnId(0), 4096);
    let mut post = Post::new();
    post.write(word, &7u64.to_le_bytes());
    run_post(victim.as_ref(), &mut post).unwrap();

    let admin = dmtx::net::RemoteControl::connect(node_addr(&node), &tcp_config(1)).unwrap();
    admin.revoke(MnId(0), 5).unwrap();

    let mut post = Post::new();
    post.write(word, &8u64.to_le_bytes());
    assert!(
        run_post(victim.as_ref(), &mut post).is_err(),
        "a fenced client's write landed"
    );
    std::thread::sleep(dmtx::net::RECONNECT_BACKOFF);
    assert!(
        run_post(victim.as_ref(), &mut post).is_err(),
        "a fenced client reconnected"
    );
    let refused = dmtx::net::TcpFabric::connect(node_addr(&node), tcp_config(5)).unwrap_err();
    assert!(refused.to_string().contains("revoked"), "{refused}");
    // Everyone else still reads the value from before the fence.
    let other = dmtx::net::TcpFabric::connect(node_addr(&node), tcp_config(6)).unwrap();
    let t = other.endpoint(0).unwrap();
    let mut post = Post::new();
    let r = post.read(word, 8);
    run_post(t.as_ref(), &mut post).unwrap();
    assert_eq!(post.bytes(r), 7u64.to_le_bytes());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: a `--backing` memory node is PM-like: data written and FLUSHed, its allocator and
/// its published tables survive a crash (SIGKILL) and restart on the same file; a node
/// without `--backing` comes back empty.
#[test]
fn a_backed_memnode_process_keeps_flushed_data_and_tables_across_a_crash() {
    let (dir, _) = cluster_dir("backing");
    let file = dir.join("mn0.region");
    let backing = ["--backing", file.to_str().unwrap()];
    let meta = dmtx::memnode::TableMeta {
        id: 3,
        name: "durable".into(),
        value_bytes: 8,
        slot_bytes: 48,
        slots_per_bucket: 4,
        bucket_bytes: 208,
        bucket_count: 2,
        overflow_bucket_count: 1,
        replicas: vec![(MnId(0), 4096)],
        runs: None,
        value_region: None,
        attrs: Vec::new(),
    };
    let at = {
        let node = memnode_with(&dir, 0, &backing);
        let control = dmtx::net::RemoteControl::connect(node_addr(&node), &tcp_config(1)).unwrap();
        let at = control.alloc(MnId(0), 4096, 64).unwrap();
        control.put_table(MnId(0), &meta).unwrap();
        let fabric = dmtx::net::TcpFabric::connect(node_addr(&node), tcp_config(1)).unwrap();
        let t = fabric.endpoint(0).unwrap();
        let mut post = Post::new();
        post.write(RemotePtr::new(MnId(0), at), b"persisted bytes!");
        post.flush(RemotePtr::new(MnId(0), at));
        run_post(t.as_ref(), &mut post).unwrap();
        at
        // `node` drops here: SIGKILL, no graceful shutdown.
    };
    let node = memnode_with(&dir, 0, &backing);
    let control = dmtx::net::RemoteControl::connect(node_addr(&node), &tcp_config(1)).unwrap();
    assert_eq!(control.tables(MnId(0)).unwrap(), vec![meta.clone()]);
    assert!(
        control.alloc(MnId(0), 64, 64).unwrap() >= at + 4096,
        "space is not handed out twice"
    );
    let fabric = dmtx::net::TcpFabric::connect(node_addr(&node), tcp_config(1)).unwrap();
    let t = fabric.endpoint(0).unwrap();
    let mut post = Post::new();
    let r = post.read(RemotePtr::new(MnId(0), at), 16);
    run_post(t.as_ref(), &mut post).unwrap();
    assert_eq!(post.bytes(r), b"persisted bytes!");
    drop(node);
    // The same without --backing: a DRAM node restarts empty.
    let node = memnode(&dir, 0);
    let control = dmtx::net::RemoteControl::connect(node_addr(&node), &tcp_config(1)).unwrap();
    assert!(control.tables(MnId(0)).unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
