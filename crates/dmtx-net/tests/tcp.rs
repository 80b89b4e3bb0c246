//! The `tcp` transport against in-process memory-node servers on 127.0.0.1.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use dmtx_memnode::server::{wire, Server, ServerConfig, ServerHandle};
use dmtx_memnode::{Control, ControlError, TableMeta};
use dmtx_net::{NetError, RemoteControl, TcpConfig, TcpFabric, TcpTransport};
use dmtx_verbs::conformance::{self, REGION_BYTES_MIN};
use dmtx_verbs::{Fabric, MnId, OpKind, Post, Region, RemotePtr, StallKind, Submitted, Transport, VerbError};

const CLUSTER: u64 = 42;
const TOKEN: &[u8] = b"cluster-token";

fn servers(n: usize) -> Vec<ServerHandle> {
    (0..n)
        .map(|i| {
            let mut c = ServerConfig::new(MnId(i as u16), REGION_BYTES_MIN);
            c.cluster_id = CLUSTER;
            c.token = TOKEN.to_vec();
            Server::bind(c).unwrap().spawn()
        })
        .collect()
}

fn addrs(s: &[ServerHandle]) -> Vec<(MnId, std::net::SocketAddr)> {
    s.iter()
        .enumerate()
        .map(|(i, h)| (MnId(i as u16), h.local_addr()))
        .collect()
}

fn config(deadline: Duration) -> TcpConfig {
    TcpConfig {
        op_deadline: deadline,
        ..TcpConfig::new(CLUSTER, TOKEN)
    }
}

fn fabric(s: &[ServerHandle], deadline: Duration) -> TcpFabric {
    TcpFabric::connect(addrs(s), config(deadline)).unwrap()
}

fn wait(t: &dyn Transport, post: &mut Post) -> dmtx_verbs::Result<()> {
    match t.submit(post) {
        Submitted::Done(r) => r,
        Submitted::Pending(ticket) => wait_ticket(t, ticket, post),
    }
}

fn wait_ticket(t: &dyn Transport, ticket: dmtx_verbs::Ticket, post: &mut Post) -> dmtx_verbs::Result<()> {
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(r) = t.poll(ticket, post, &mut cx) {
            return r;
        }
        t.progress();
    }
}

/// Goal: the tcp transport honours the whole verb contract. Method: the shared
/// conformance suite over two servers, with the stall knob armed on the servers' regions.
#[test]
fn tcp_transport_conforms() {
    let s = servers(2);
    let f = fabric(&s, Duration::from_secs(10));
    let regions: Vec<Arc<Region>> = s.iter().map(|h| Arc::clone(h.region())).collect();
    let of = move |mn: MnId| Arc::clone(&regions[mn.index()]);
    assert_eq!(conformance::run_all(&f, &of), 4);
}

/// Goal: several posts in flight on one transport complete independently, polled in any
/// order, and detached posts land without anyone waiting.
#[test]
fn pipelined_posts_complete_out_of_poll_order() {
    let s = servers(2);
    let f = fabric(&s, Duration::from_secs(10));
    let t = f.transport().unwrap();
    let mut posts: Vec<Post> = (0..8).map(|_| Post::new()).collect();
    let mut tickets = Vec::new();
    for (i, p) in posts.iter_mut().enumerate() {
        p.faa(RemotePtr::new(MnId((i % 2) as u16), 256), 1);
        p.write(RemotePtr::new(MnId(1), 512 + 8 * i as u64), &(i as u64).to_le_bytes());
        let Submitted::Pending(tk) = t.submit(p) else {
            panic!("tcp posts are pending")
        };
        tickets.push(tk);
    }
    let mut bg = Post::new();
    bg.faa(RemotePtr::new(MnId(0), 1024), 7);
    t.submit_detached(&mut bg);
    bg.clear(); // the transport keeps what it needs
    for i in (0..8).rev() {
        wait_ticket(&t, tickets[i], &mut posts[i]).unwrap();
    }
    let mut p = Post::new();
    let a = p.read(RemotePtr::new(MnId(0), 256), 8);
    let b = p.read(RemotePtr::new(MnId(1), 256), 8);
    let w = p.read(RemotePtr::new(MnId(1), 512), 64);
    let d = p.read(RemotePtr::new(MnId(0), 1024), 8);
    wait(&t, &mut p).unwrap();
    assert_eq!(p.bytes(a), 4u64.to_le_bytes());
    assert_eq!(p.bytes(b), 4u64.to_le_bytes());
    let words: Vec<u64> = p
        .bytes(w)
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, (0..8).collect::<Vec<u64>>());
    assert_eq!(
        p.bytes(d),
        7u64.to_le_bytes(),
        "detached FAA landed before a later READ"
    );
    assert_eq!(t.in_flight(), 0, "no slot leaked");
}

/// Goal: a crashed memory node fails in-flight and later ops with Unreachable, fast, and
/// the other node keeps working. Method: stall a READ inside the server, shut the server
/// down, then poll.
#[test]
fn shutdown_fails_in_flight_and_later_ops() {
    let mut s = servers(2);
    let f = fabric(&s, Duration::from_secs(10));
    let t = f.transport().unwrap();
    let gate = s[1].region().arm_stall(StallKind::Read, 4096);
    let mut p = Post::new();
    p.read(RemotePtr::new(MnId(1), 4096), 8);
    p.faa(RemotePtr::new(MnId(0), 64), 1);
    let Submitted::Pending(tk) = t.submit(&mut p) else {
        panic!()
    };
    gate.wait_stalled();
    let started = Instant::now();
    s[1].shutdown();
    let e = wait_ticket(&t, tk, &mut p).unwrap_err();
    assert!(matches!(e, VerbError::Unreachable { mn: MnId(1), .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "failure took {:?}",
        started.elapsed()
    );
    drop(gate);
    s.pop().unwrap().join();

    p.clear();
    p.read(RemotePtr::new(MnId(1), 0), 8);
    let e = wait(&t, &mut p).unwrap_err();
    assert!(matches!(e, VerbError::Unreachable { mn: MnId(1), .. }), "{e}");
    p.clear();
    let r = p.read(RemotePtr::new(MnId(0), 64), 8);
    wait(&t, &mut p).unwrap();
    assert_eq!(p.bytes(r), 1u64.to_le_bytes(), "the live node still serves");
    // A new endpoint cannot reach the dead node.
    assert!(matches!(f.endpoint(1), Err(VerbError::Unreachable { mn: MnId(1), .. })));
}

/// Goal: a node that stops answering (stalled, not dead) fails the post after the
/// deadline instead of hanging.
#[test]
fn op_deadline_bounds_a_stalled_node() {
    let s = servers(1);
    let f = fabric(&s, Duration::from_millis(150));
    let t = f.transport().unwrap();
    let gate = s[0].region().arm_stall(StallKind::Write, 2048);
    let mut p = Post::new();
    p.write(RemotePtr::new(MnId(0), 2048), &[1; 8]);
    let started = Instant::now();
    let e = wait(&t, &mut p).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, VerbError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("op deadline"), "{e}");
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "{took:?}"
    );
    drop(gate);
}

/// Goal: per-op errors keep their kind and address over the wire; the batch after the
/// failure is not run, and the connection keeps serving.
#[test]
fn op_errors_map_to_verb_errors() {
    let s = servers(2);
    let f = fabric(&s, Duration::from_secs(10));
    let t = f.transport().unwrap();
    let mut p = Post::new();
    p.write(RemotePtr::new(MnId(1), 0), &[9; 8]);
    p.faa(RemotePtr::new(MnId(0), 12), 1);
    p.write(RemotePtr::new(MnId(0), 16), &[1; 8]);
    let e = wait(&t, &mut p).unwrap_err();
    assert_eq!(
        e,
        VerbError::Misaligned {
            kind: OpKind::Faa,
            ptr: RemotePtr::new(MnId(0), 12)
        }
    );
    assert_eq!(s[0].region().load(16).unwrap(), 0, "op after the failure was skipped");
    assert_eq!(s[1].region().load(0).unwrap(), u64::from_le_bytes([9; 8]));
    p.clear();
    p.write(RemotePtr::new(MnId(1), REGION_BYTES_MIN - 4), &[1; 8]);
    assert_eq!(
        wait(&t, &mut p).unwrap_err(),
        VerbError::OutOfRange {
            kind: OpKind::Write,
            ptr: RemotePtr::new(MnId(1), REGION_BYTES_MIN - 4),
            len: 8,
            region_bytes: REGION_BYTES_MIN
        }
    );
    p.clear();
    p.flush(RemotePtr::new(MnId(0), 0));
    wait(&t, &mut p).unwrap();
}

/// Goal: a wrong token, cluster id or node order is refused with a clear error, and the
/// server keeps serving the right clients.
#[test]
fn bad_handshakes_are_refused_clearly() {
    let s = servers(2);
    let e = TcpFabric::connect(addrs(&s), TcpConfig::new(CLUSTER, b"nope")).unwrap_err();
    assert!(
        matches!(e, NetError::Refused { code, .. } if code == wire::ErrorCode::BAD_TOKEN.0),
        "{e}"
    );
    let e = TcpFabric::connect(addrs(&s), TcpConfig::new(CLUSTER + 1, TOKEN)).unwrap_err();
    assert!(e.to_string().contains("cluster id"), "{e}");
    let swapped = vec![(MnId(0), s[1].local_addr()), (MnId(1), s[0].local_addr())];
    let e = TcpFabric::connect(swapped, config(Duration::from_secs(1))).unwrap_err();
    assert!(matches!(e, NetError::WrongNode { served: 1, .. }), "{e}");
    let e = TcpFabric::connect(vec![(MnId(1), s[0].local_addr())], config(Duration::from_secs(1))).unwrap_err();
    assert!(matches!(e, NetError::Config(_)), "{e}");
    let f = fabric(&s, Duration::from_secs(5));
    let t = f.endpoint(0).unwrap();
    let mut p = Post::new();
    p.faa(RemotePtr::new(MnId(1), 0), 1);
    wait(t.as_ref(), &mut p).unwrap();
}

/// Goal: the control interface round-trips over TCP, errors included, and what it
/// loads is what the verbs read.
#[test]
fn remote_control_round_trips() {
    let s = servers(2);
    let ctl = RemoteControl::connect(addrs(&s), &config(Duration::from_secs(5))).unwrap();
    assert_eq!(ctl.mn_count(), 2);
    let at = ctl.alloc(MnId(1), 100, 64).unwrap();
    assert_eq!(at, 64);
    ctl.load(MnId(1), at, b"hello, world").unwrap();
    assert!(matches!(
        ctl.alloc(MnId(0), 1 << 40, 8),
        Err(ControlError::OutOfMemory { .. })
    ));
    assert!(matches!(
        ctl.load(MnId(0), REGION_BYTES_MIN - 2, b"abcd"),
        Err(ControlError::OutOfRange { len: 4, .. })
    ));
    assert!(matches!(ctl.tables(MnId(5)), Err(ControlError::UnknownNode { .. })));
    let meta = TableMeta {
        id: 3,
        name: "checking".into(),
        value_bytes: 8,
        slot_bytes: 48,
        slots_per_bucket: 4,
        bucket_bytes: 200,
        bucket_count: 16,
        overflow_bucket_count: 2,
        replicas: vec![(MnId(1), at), (MnId(0), 4096)],
        runs: None,
        // The per-table format travels with the table: a value region after the buckets
        // and the value's attribute schema.
        value_region: Some(dmtx_memnode::ValueRegion {
            offset: 3648,
            bytes: 8192,
        }),
        attrs: vec![dmtx_memnode::Attr::new("balance", 0, 8)],
    };
    ctl.put_table(MnId(1), &meta).unwrap();
    assert!(matches!(
        ctl.put_table(MnId(1), &meta),
        Err(ControlError::DuplicateTable { id: 3, .. })
    ));
    assert_eq!(ctl.tables(MnId(1)).unwrap(), vec![meta]);
    assert_eq!(ctl.tables(MnId(0)).unwrap(), vec![]);
    // A load larger than one chunk is split and lands whole.
    let big: Vec<u8> = (0..(dmtx_net::LOAD_CHUNK_BYTES + 100)).map(|i| i as u8).collect();
    let mut c = ServerConfig::new(MnId(0), 8 << 20);
    c.cluster_id = CLUSTER;
    c.token = TOKEN.to_vec();
    let s2 = Server::bind(c).unwrap().spawn();
    let ctl2 = RemoteControl::connect(vec![(MnId(0), s2.local_addr())], &config(Duration::from_secs(5))).unwrap();
    ctl2.load(MnId(0), 64, &big).unwrap();
    let mut back = vec![0u8; big.len()];
    s2.region().read(64, &mut back).unwrap();
    assert!(back == big, "chunked load differs");

    let f = fabric(&s, Duration::from_secs(5));
    let t: TcpTransport = f.transport().unwrap();
    let mut p = Post::new();
    let r = p.read(RemotePtr::new(MnId(1), at), 12);
    wait(&t, &mut p).unwrap();
    assert_eq!(p.bytes(r), b"hello, world");
}

/// Goal: background posts are not lost when a worker's transport is dropped right after
/// posting them (the last lock release of a worker).
#[test]
fn dropping_a_transport_delivers_detached_posts() {
    let s = servers(1);
    let f = fabric(&s, Duration::from_secs(5));
    for round in 0..20u64 {
        let t = f.transport().unwrap();
        let mut p = Post::new();
        for i in 0..16u64 {
            p.faa(RemotePtr::new(MnId(0), 8 * i), 1);
        }
        t.submit_detached(&mut p);
        drop(t);
        for i in 0..16u64 {
            assert_eq!(
                s[0].region().load(8 * i).unwrap(),
                round + 1,
                "word {i} after round {round}"
            );
        }
    }
}

/// Goal: fencing (FORD §4.8). A compute node revoked through `RemoteControl::revoke`
/// cannot land a write afterwards, cannot reconnect under its id, and other clients keep
/// working. Method: client 1 writes fine; the controller revokes it on both nodes; its
/// next post fails fast and its bytes are not in the region.
#[test]
fn revoked_client_cannot_write_or_reconnect() {
    let s = servers(2);
    let as_client = |id: u32| TcpConfig {
        client_id: id,
        ..config(Duration::from_secs(5))
    };
    let f1 = TcpFabric::connect(addrs(&s), as_client(1)).unwrap();
    let t1 = f1.transport().unwrap();
    let mut p = Post::new();
    p.write(RemotePtr::new(MnId(0), 64), &[7; 8]);
    p.write(RemotePtr::new(MnId(1), 64), &[7; 8]);
    wait(&t1, &mut p).unwrap();

    let ctl = RemoteControl::connect(addrs(&s), &as_client(2)).unwrap();
    ctl.revoke(MnId(0), 1).unwrap();
    ctl.try_revoke(MnId(1), 1).unwrap();

    p.clear();
    p.write(RemotePtr::new(MnId(0), 128), &[9; 8]);
    p.write(RemotePtr::new(MnId(1), 128), &[9; 8]);
    let started = Instant::now();
    let e = wait(&t1, &mut p).unwrap_err();
    assert!(matches!(e, VerbError::Unreachable { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    for srv in &s {
        assert_eq!(srv.region().load(64).unwrap(), u64::from_le_bytes([7; 8]));
        assert_eq!(srv.region().load(128).unwrap(), 0, "a revoked client's write landed");
    }
    // Reconnecting under the revoked id is refused, by the fabric and by a new endpoint.
    let e = TcpFabric::connect(addrs(&s), as_client(1)).unwrap_err();
    assert!(
        matches!(e, NetError::Refused { code, .. } if code == wire::ErrorCode::REVOKED.0),
        "{e}"
    );
    assert!(matches!(f1.endpoint(0), Err(VerbError::Unreachable { .. })));
    // The controller and other clients keep working.
    assert_eq!(ctl.tables(MnId(0)).unwrap(), vec![]);
    let t3 = TcpFabric::connect(addrs(&s), as_client(3))
        .unwrap()
        .transport()
        .unwrap();
    p.clear();
    p.write(RemotePtr::new(MnId(1), 192), &[3; 8]);
    wait(&t3, &mut p).unwrap();
    assert_eq!(s[1].region().load(192).unwrap(), u64::from_le_bytes([3; 8]));
}

/// `--backing`: what a client wrote and flushed is still there after the node restarts
/// on the same file; a DRAM node restarts empty.
#[test]
fn a_backed_node_keeps_flushed_data_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("dmtx-backing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mn0.region");
    let start = |backing: Option<std::path::PathBuf>| {
        let mut c = ServerConfig::new(MnId(0), REGION_BYTES_MIN);
        c.cluster_id = CLUSTER;
        c.token = TOKEN.to_vec();
        c.backing = backing;
        Server::bind(c).unwrap().spawn()
    };
    let at = RemotePtr::new(MnId(0), 8192);
    for (backing, kept) in [(Some(file.clone()), true), (None, false)] {
        let node = start(backing.clone());
        let f = fabric(std::slice::from_ref(&node), Duration::from_secs(5));
        let t = f.endpoint(0).unwrap();
        let mut p = Post::new();
        p.write(at, b"durable!");
        p.flush(at);
        wait(t.as_ref(), &mut p).unwrap();
        drop(t);
        drop(f);
        node.shutdown();
        node.join();

        let node = start(backing);
        let f = fabric(std::slice::from_ref(&node), Duration::from_secs(5));
        let t = f.endpoint(0).unwrap();
        p.clear();
        let r = p.read(at, 8);
        wait(t.as_ref(), &mut p).unwrap();
        let expect: &[u8] = if kept { b"durable!" } else { &[0; 8] };
        assert_eq!(p.bytes(r), expect, "backed = {kept}");
        drop(t);
        drop(f);
        node.shutdown();
        node.join();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
