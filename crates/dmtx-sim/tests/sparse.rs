//! Memory-node regions are sparse: a page costs memory only once touched, so a simulation
//! may give its memory nodes paper-sized regions (LOTUS's 105-warehouse TPC-C, Motor's
//! 10 M-key KVS) on a machine with far less memory, as long as what is touched fits.

use std::sync::Arc;

use dmtx_sim::{Sim, SimConfig, SimExecutor, SimFabric};
use dmtx_verbs::{MnId, Post, Region, RemotePtr, Submitted, Transport};

/// Resident set size of this process, bytes (Linux `/proc/self/statm`).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Goal: four memory nodes of 16 GiB each (64 GiB, more than a CI machine has) are
/// created, written and read at scattered addresses, and the process grows by the
/// touched pages only.
#[test]
fn regions_cost_only_the_pages_touched() {
    let before = rss_bytes();
    let regions: Vec<Arc<Region>> = (0..4).map(|_| Arc::new(Region::new(16 << 30))).collect();
    let sim = Sim::new(SimConfig::new(5), regions);
    let t = SimFabric::new(&sim, 0).transport();
    let mut ex = SimExecutor::new(&sim);
    ex.spawn(async move {
        let mut post = Post::new();
        for i in 0..64u64 {
            let at = RemotePtr::new(MnId((i % 4) as u16), (i * 997 % 16_000) << 20);
            post.clear();
            post.write(at, &i.to_le_bytes());
            let read = post.read(at, 8);
            let Submitted::Pending(ticket) = t.submit(&mut post) else {
                unreachable!()
            };
            std::future::poll_fn(|cx| t.poll(ticket, &mut post, cx)).await.unwrap();
            assert_eq!(post.bytes(read), i.to_le_bytes());
        }
    });
    ex.run().unwrap();
    let grown = rss_bytes().saturating_sub(before);
    // 64 touched pages, each at most a 2 MiB huge page.
    assert!(
        grown < 256 << 20,
        "64 GiB of regions made the process grow by {grown} bytes"
    );
}
