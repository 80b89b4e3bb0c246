use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmtx_verbs::msg::{conformance, Entry, EntryKind, Event, MsgFabric};

use super::*;

const TOKEN: &[u8] = b"sixteen byte tok";

fn config() -> TcpConfig {
    let mut c = TcpConfig::new(7, TOKEN);
    c.connect_timeout = Duration::from_secs(2);
    c
}

/// `cns` nodes with `threads` workers each on loopback.
fn cluster(cns: u16, threads: u16) -> Vec<TcpMsgFabric> {
    let listeners: Vec<TcpListener> = (0..cns).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<PeerNode> = listeners
        .iter()
        .enumerate()
        .map(|(cn, l)| PeerNode {
            cn: cn as u16,
            addr: l.local_addr().unwrap(),
            threads,
        })
        .collect();
    listeners
        .into_iter()
        .enumerate()
        .map(|(cn, l)| TcpMsgFabric::with_listener(cn as u16, l, peers.clone(), config()).unwrap())
        .collect()
}

fn one_way(payload: &[u8]) -> Entry<'_> {
    Entry {
        kind: EntryKind::OneWay,
        retry: false,
        id: 1,
        payload,
    }
}

/// Goal: the tcp mailboxes keep the whole messaging contract (delivery, FIFO per pair,
/// batching, self-sends, refusals).
#[test]
fn conformance_over_loopback() {
    let fabrics: Vec<Arc<dyn MsgFabric>> = cluster(2, 2).into_iter().map(|f| Arc::new(f) as _).collect();
    conformance::run_all(&fabrics);
}

/// Drain `m` until `pred` holds for an event or the deadline passes, flushing `senders`
/// too (a sender's connection opens over several flushes).
fn wait_for(senders: &[&dyn Mailbox], m: &dyn Mailbox, mut pred: impl FnMut(&Event<'_>) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        for s in senders {
            s.flush();
        }
        m.flush();
        let mut hit = false;
        m.drain(&mut |ev| hit |= pred(&ev));
        if hit {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// Goal: a peer that goes away is reported as lost, and messages flow again once it is
/// back (the sender reconnects after the backoff).
#[test]
fn a_lost_peer_is_reported_and_reconnected_to() {
    let mut nodes = cluster(2, 1);
    let b_addr = nodes[1].local_addr();
    let peers: Vec<PeerNode> = vec![
        PeerNode {
            cn: 0,
            addr: nodes[0].local_addr(),
            threads: 1,
        },
        PeerNode {
            cn: 1,
            addr: b_addr,
            threads: 1,
        },
    ];
    let a = nodes[0].mailbox(0).unwrap();
    {
        let b = nodes[1].mailbox(0).unwrap();
        a.push(b.addr(), one_way(b"hello")).unwrap();
        a.flush();
        assert!(wait_for(
            &[&*a],
            &*b,
            |ev| matches!(ev, Event::Entry { entry, .. } if entry.payload == b"hello")
        ));
    }
    // cn1 crashes: its listener and mailbox go away.
    drop(nodes.pop());
    let to = WorkerAddr::new(1, 0);
    let mut lost = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lost && Instant::now() < deadline {
        a.push(to, one_way(b"anyone?")).unwrap();
        lost = wait_for(&[], &*a, |ev| matches!(ev, Event::PeerLost { peer, .. } if *peer == to));
    }
    assert!(lost, "the sender hears that cn1 is gone");
    // cn1 restarts on the same address.
    let back = TcpMsgFabric::bind(1, b_addr, peers, config()).unwrap();
    let b = back.mailbox(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = false;
    while !got && Instant::now() < deadline {
        a.push(to, one_way(b"again")).unwrap();
        a.flush();
        a.drain(&mut |_| {});
        got = wait_for(
            &[&*a],
            &*b,
            |ev| matches!(ev, Event::Entry { entry, .. } if entry.payload == b"again"),
        );
    }
    assert!(got, "messages flow again after the peer restarted");
}

/// Goal: a stranger (wrong token or cluster) or a misaddressed handshake is refused and
/// never reaches a worker.
#[test]
fn strangers_are_refused_at_the_handshake() {
    let nodes = cluster(2, 1);
    let b = nodes[1].mailbox(0).unwrap();
    let target: SocketAddr = nodes[1].local_addr();
    let try_hello = |cluster_id: u64, token: &[u8], to_cn: u16, to_thread: u16, from_cn: u32| -> Kind {
        let mut s = TcpStream::connect(target).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let f = wire::begin_frame(&mut out, Kind::PeerHello, 0);
        PeerHello {
            hello: wire::Hello {
                version: wire::PROTOCOL_VERSION,
                cluster_id,
                client_id: from_cn,
                epoch: 0,
                token: token.to_vec(),
            },
            from_thread: 0,
            to_cn,
            to_thread,
        }
        .encode(&mut out);
        wire::end_frame(&mut out, f);
        s.write_all(&out).unwrap();
        let mut p = Vec::new();
        crate::conn::read_frame(dmtx_verbs::MnId(1), &mut s, &mut p)
            .unwrap()
            .kind
    };
    assert_eq!(try_hello(7, b"wrong token12345", 1, 0, 0), Kind::Error);
    assert_eq!(try_hello(8, TOKEN, 1, 0, 0), Kind::Error);
    assert_eq!(try_hello(7, TOKEN, 0, 0, 0), Kind::Error, "the wrong node");
    assert_eq!(try_hello(7, TOKEN, 1, 5, 0), Kind::Error, "no such thread");
    assert_eq!(try_hello(7, TOKEN, 1, 0, 9), Kind::Error, "an unknown sender");
    assert_eq!(try_hello(7, TOKEN, 1, 0, 0), Kind::HelloOk);
    // Garbage instead of a handshake costs only that socket.
    let mut s = TcpStream::connect(target).unwrap();
    s.write_all(&[0xff; 64]).unwrap();
    let mut sink = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_end(&mut sink);
    // The node still serves its peers.
    let a = nodes[0].mailbox(0).unwrap();
    a.push(b.addr(), one_way(b"still here")).unwrap();
    a.flush();
    assert!(wait_for(
        &[&*a],
        &*b,
        |ev| matches!(ev, Event::Entry { entry, .. } if entry.payload == b"still here")
    ));
}

/// Goal: opening a connection never blocks the sending worker. Method: cn1's address is
/// a socket that accepts TCP but never answers the handshake; the push returns at once,
/// and the sender hears PeerLost once the connect timeout has passed.
#[test]
fn a_peer_that_never_answers_does_not_block_the_sender() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let a_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let peers = vec![
        PeerNode {
            cn: 0,
            addr: a_listener.local_addr().unwrap(),
            threads: 1,
        },
        PeerNode {
            cn: 1,
            addr: silent.local_addr().unwrap(),
            threads: 1,
        },
    ];
    let node = TcpMsgFabric::with_listener(0, a_listener, peers, config()).unwrap();
    let a = node.mailbox(0).unwrap();
    let to = WorkerAddr::new(1, 0);
    let t0 = Instant::now();
    a.push(to, one_way(b"hello?")).unwrap();
    a.flush();
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "push and flush blocked for {:?}",
        t0.elapsed()
    );
    assert!(wait_for(
        &[],
        &*a,
        |ev| matches!(ev, Event::PeerLost { peer, .. } if *peer == to)
    ));
    let waited = t0.elapsed();
    assert!(
        waited >= config().connect_timeout && waited < config().connect_timeout + Duration::from_secs(3),
        "lost after {waited:?}"
    );
}
