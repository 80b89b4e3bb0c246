//! End to end over TCP: a table created through `RemoteControl` and FORD transactions
//! run by coordinators whose posts travel through the `tcp` transport.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use dmtx_check::history::History;
use dmtx_memnode::server::{Server, ServerConfig, ServerHandle};
use dmtx_net::{RemoteControl, TcpConfig, TcpFabric};
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, yield_now, Cn, LocalExecutor, Protocol, RealClock, Table};
use dmtx_store::{create_table, placement, TableBuilder, TableSpec};
use dmtx_verbs::MnId;

/// A record: balance in word 0, a write counter in word 1, filler (40 bytes).
const ACCTS: Table<[u64; 5]> = Table::new(0);
const KEYS: u64 = 64;
const INITIAL: u64 = 1000;
const THREADS: u16 = 2;
const COROS: u16 = 4;
const TXNS_PER_COORD: u32 = 60;
const TRIES_MAX: u32 = 500;

fn cluster() -> (Vec<ServerHandle>, Cn, Arc<Ford>) {
    let servers: Vec<ServerHandle> = (0..2)
        .map(|i| {
            let mut c = ServerConfig::new(MnId(i), 8 << 20);
            c.cluster_id = 1;
            c.token = b"t".to_vec();
            Server::bind(c).unwrap().spawn()
        })
        .collect();
    let nodes: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (MnId(i as u16), s.local_addr()))
        .collect();
    let cfg = TcpConfig {
        op_deadline: Duration::from_secs(10),
        ..TcpConfig::new(1, b"t")
    };
    let control = RemoteControl::connect(nodes.clone(), &cfg).unwrap();
    let ford = Arc::new(Ford::new(FordConfig::default()));
    let mut b = TableBuilder::new(TableSpec::new(0, "accts", 40, KEYS * 2 + 16), ford.layout());
    for k in 0..KEYS {
        b.insert(k, &le_bytes(&[INITIAL, 0, 0, 0, 0])).unwrap();
    }
    create_table(&control, b, &placement(0, 2, 2).unwrap()).unwrap();
    let fabric = TcpFabric::connect(nodes, cfg).unwrap();
    let cn = Cn::connect(0, Arc::new(fabric), Arc::new(control), Arc::new(RealClock::new())).unwrap();
    (servers, cn, ford)
}

fn le_bytes(v: &[u64; 5]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Goal: FORD stays serializable and conserves money when every verb crosses TCP.
/// Method: 2 worker threads × 4 coroutines run transfers between 64 accounts, retrying
/// aborts with randomized backoff (bounded); the recorded history goes through the isolation checker, and a
/// final read-only audit sums the balances.
#[test]
fn ford_transfers_over_tcp_are_serializable() {
    let (_servers, cn, ford) = cluster();
    let parts: Vec<History> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (cn, ford) = (&cn, &ford);
                s.spawn(move || {
                    let w = cn.worker(t).unwrap();
                    let history = Rc::new(RefCell::new(History::new()));
                    let mut coords: Vec<_> = (0..COROS)
                        .map(|k| {
                            let mut c = w.coordinator(ford, k).unwrap();
                            c.set_observer(Box::new(dmtx_check::recorder::Recorder::new(history.clone())));
                            c
                        })
                        .collect();
                    let mut ex = LocalExecutor::new();
                    for (k, c) in coords.iter_mut().enumerate() {
                        ex.spawn(async move {
                            let mut x = (t as u64 * 31 + k as u64 * 7) | 1;
                            for _ in 0..TXNS_PER_COORD {
                                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                                let a = (x >> 33) % KEYS;
                                let b = (a + 1 + (x >> 40) % (KEYS - 1)) % KEYS;
                                for tries in 0..TRIES_MAX {
                                    let r = async {
                                        let mut tx = c.begin();
                                        let ra = tx.add_rw(ACCTS, a);
                                        let rb = tx.add_rw(ACCTS, b);
                                        tx.execute().await?;
                                        tx.get_mut(ra)[0] -= 3;
                                        tx.get_mut(rb)[0] += 3;
                                        tx.commit().await
                                    }
                                    .await;
                                    if r.is_ok() {
                                        break;
                                    }
                                    // Randomized exponential backoff: without it, two
                                    // transfers that each lock one of the other's keys
                                    // retry in lockstep (a livelock), which real network
                                    // latency makes likely.
                                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                                    for _ in 0..(x >> 33) % (1u64 << tries.min(8)) {
                                        yield_now().await;
                                    }
                                }
                            }
                        });
                    }
                    ex.run(w.transport().as_ref());
                    drop(coords);
                    Rc::try_unwrap(history).expect("recorders dropped").into_inner()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = History::new();
    for p in parts {
        all.append(p);
    }
    let report = dmtx_check::check(&all, &dmtx_check::CheckOptions::default());
    assert!(report.is_clean(), "{report}");
    assert!(report.committed > 0, "nothing committed");
    let wanted = (THREADS * COROS) as usize * TXNS_PER_COORD as usize;
    assert_eq!(
        report.committed, wanted,
        "every transfer commits within {TRIES_MAX} tries ({} aborts)",
        report.aborted
    );

    let w = cn.worker(50).unwrap();
    let mut c = w.coordinator(&ford, 0).unwrap();
    let sum = block_on(async {
        for _ in 0..TRIES_MAX {
            let r: Result<u64, dmtx_runtime::Abort> = async {
                let mut tx = c.begin();
                let objs: Vec<_> = (0..KEYS).map(|k| tx.add_ro(ACCTS, k)).collect();
                tx.execute().await?;
                let s = objs.iter().map(|&o| tx.get(o)[0]).sum();
                tx.commit().await?;
                Ok(s)
            }
            .await;
            if let Ok(s) = r {
                return s;
            }
        }
        panic!("audit aborted {TRIES_MAX} times");
    });
    assert_eq!(sum, KEYS * INITIAL, "money was created or destroyed");
}
