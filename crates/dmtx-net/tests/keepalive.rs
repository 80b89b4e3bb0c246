//! Keepalive and dead links, against scripted fake memory nodes on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use dmtx_memnode::server::wire::{self, Hello, HelloOk, Kind, OpResult, RegionInfo};
use dmtx_net::{TcpConfig, TcpFabric};
use dmtx_verbs::{MnId, Post, RemotePtr, Submitted, Transport, VerbError};

const REGION: u64 = 32 << 20;

fn read_frame(t: &mut TcpStream) -> Option<(wire::Header, Vec<u8>)> {
    let mut h = [0u8; wire::HEADER_BYTES];
    t.read_exact(&mut h).ok()?;
    let h = wire::decode_header(&h).unwrap().unwrap();
    let mut p = vec![0u8; h.payload_bytes as usize];
    t.read_exact(&mut p).ok()?;
    Some((h, p))
}

fn put(t: &mut TcpStream, kind: Kind, id: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let mut out = Vec::new();
    let s = wire::begin_frame(&mut out, kind, id);
    body(&mut out);
    wire::end_frame(&mut out, s);
    let _ = t.write_all(&out);
}

/// A fake node 0: answers every HELLO, then runs `script` on each connection after the
/// first (the first is the fabric's check in `TcpFabric::connect`).
fn fake_node(script: impl Fn(TcpStream) + Send + Sync + 'static) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            // Like the real server: no Nagle delay between a PONG and the next reply.
            s.set_nodelay(true).unwrap();
            let (h, p) = read_frame(&mut s).unwrap();
            assert_eq!(h.kind, Kind::Hello);
            Hello::decode(&p).unwrap();
            put(&mut s, Kind::HelloOk, h.request_id, |o| {
                HelloOk {
                    node_id: 0,
                    epoch: 0,
                    regions: vec![RegionInfo { rkey: 5, bytes: REGION }],
                }
                .encode(o)
            });
            if n > 0 {
                script(s);
                return;
            }
        }
    });
    addr
}

fn config(deadline: Duration, keepalive: Option<Duration>) -> TcpConfig {
    TcpConfig {
        op_deadline: deadline,
        keepalive,
        ..TcpConfig::new(0, b"")
    }
}

fn wait(t: &dyn Transport, post: &mut Post) -> dmtx_verbs::Result<()> {
    let mut cx = Context::from_waker(Waker::noop());
    let ticket = match t.submit(post) {
        Submitted::Done(r) => return r,
        Submitted::Pending(t) => t,
    };
    loop {
        if let Poll::Ready(r) = t.poll(ticket, post, &mut cx) {
            return r;
        }
        t.progress();
    }
}

/// Goal: a connection with a post in flight and nothing heard sends PINGs. Method: a fake node holds the VERBS reply until it has
/// answered two PINGs; without keepalive the post would miss its 3 s deadline.
#[test]
fn idle_connections_with_posts_in_flight_ping() {
    let pings = Arc::new(AtomicUsize::new(0));
    let p2 = Arc::clone(&pings);
    let addr = fake_node(move |mut s| {
        let mut held = None;
        while let Some((h, _)) = read_frame(&mut s) {
            match h.kind {
                Kind::Ping => {
                    p2.fetch_add(1, Ordering::SeqCst);
                    put(&mut s, Kind::Pong, h.request_id, |_| {});
                }
                Kind::Verbs => held = Some(h.request_id),
                k => panic!("unexpected {k:?}"),
            }
            if let (Some(id), 2..) = (held, p2.load(Ordering::SeqCst)) {
                put(&mut s, Kind::VerbsResult, id, |o| {
                    let at = wire::begin_verbs(o);
                    OpResult::Done.encode(o);
                    wire::set_count(o, at, 1);
                });
                held = None;
            }
        }
    });
    let f = TcpFabric::connect(
        vec![(MnId(0), addr)],
        config(Duration::from_secs(3), Some(Duration::from_millis(30))),
    )
    .unwrap();
    let t = f.transport().unwrap();
    let mut p = Post::new();
    p.write(RemotePtr::new(MnId(0), 64), &[1; 8]);
    let started = Instant::now();
    wait(&t, &mut p).unwrap();
    let took = started.elapsed();
    assert!(pings.load(Ordering::SeqCst) >= 2);
    assert!(
        took >= Duration::from_millis(60) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

/// Goal: no PINGs when keepalive is off or nothing is in flight. Method: a fake node that
/// fails the test on any PING; the post gets its reply after 100 ms.
#[test]
fn no_pings_without_keepalive() {
    let pinged = Arc::new(AtomicUsize::new(0));
    let p2 = Arc::clone(&pinged);
    let addr = fake_node(move |mut s| {
        while let Some((h, _)) = read_frame(&mut s) {
            match h.kind {
                Kind::Ping => {
                    p2.fetch_add(1, Ordering::SeqCst);
                    put(&mut s, Kind::Pong, h.request_id, |_| {});
                }
                Kind::Verbs => {
                    std::thread::sleep(Duration::from_millis(100));
                    put(&mut s, Kind::VerbsResult, h.request_id, |o| {
                        let at = wire::begin_verbs(o);
                        OpResult::Done.encode(o);
                        wire::set_count(o, at, 1);
                    });
                }
                k => panic!("unexpected {k:?}"),
            }
        }
    });
    let f = TcpFabric::connect(vec![(MnId(0), addr)], config(Duration::from_secs(3), None)).unwrap();
    let t = f.transport().unwrap();
    let mut p = Post::new();
    p.write(RemotePtr::new(MnId(0), 64), &[1; 8]);
    wait(&t, &mut p).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pinged.load(Ordering::SeqCst), 0);
}

/// Goal: a node that stops reading (its socket buffers fill, nothing is acknowledged by
/// the application) fails the post within the deadline, and neither submit nor poll
/// blocks on the full socket. Method: a fake node that handshakes and then sleeps; the
/// post writes 16 MiB.
#[test]
fn a_node_that_stops_reading_fails_posts_within_the_deadline() {
    let addr = fake_node(|s| {
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let deadline = Duration::from_millis(300);
    let f = TcpFabric::connect(vec![(MnId(0), addr)], config(deadline, Some(Duration::from_millis(50)))).unwrap();
    let t = f.transport().unwrap();
    let big = vec![7u8; 16 << 20];
    let mut p = Post::new();
    p.write(RemotePtr::new(MnId(0), 0), &big[..(8 << 20)]);
    p.write(RemotePtr::new(MnId(0), 8 << 20), &big[(8 << 20)..(16 << 20) - 64]);
    let started = Instant::now();
    let e = wait(&t, &mut p).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, VerbError::Unreachable { mn: MnId(0), .. }), "{e}");
    assert!(took >= deadline && took < deadline * 4, "{took:?}");
}

/// Goal: PINGs go one at a time: no second PING before the first one's PONG. Method: a
/// fake node that reads everything and answers nothing; the post fails at its deadline
/// after exactly one PING.
#[test]
fn one_ping_at_a_time() {
    let pings = Arc::new(AtomicUsize::new(0));
    let p2 = Arc::clone(&pings);
    let addr = fake_node(move |mut s| {
        while let Some((h, _)) = read_frame(&mut s) {
            if h.kind == Kind::Ping {
                p2.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let f = TcpFabric::connect(
        vec![(MnId(0), addr)],
        config(Duration::from_millis(300), Some(Duration::from_millis(20))),
    )
    .unwrap();
    let t = f.transport().unwrap();
    let mut p = Post::new();
    p.faa(RemotePtr::new(MnId(0), 64), 1);
    let e = wait(&t, &mut p).unwrap_err();
    assert!(e.to_string().contains("op deadline"), "{e}");
    drop(t);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(pings.load(Ordering::SeqCst), 1);
}
