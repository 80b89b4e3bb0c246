//! Cost of one FORD transaction on the `mem` transport, one coordinator, no contention:
//! what the protocol and runtime cost per transaction when the network is free.
//!
//! `cargo bench -p dmtx-protocols --bench ford_mem`

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use criterion::{criterion_group, criterion_main, Criterion};
use dmtx_runtime::block_on;

fn ford(c: &mut Criterion) {
    let env = Env::new(1024, 100, 4096, 4, Default::default());
    let w = env.worker(0);
    let mut coord = env.coord(&w, 0);
    for k in 0..1024 {
        read_one(&mut coord, k).unwrap();
    }
    let mut k = 0u64;
    let mut g = c.benchmark_group("ford_mem");
    g.bench_function("read_only_1", |b| {
        b.iter(|| {
            k = (k + 1) % 1024;
            read_one(&mut coord, k).unwrap()
        })
    });
    g.bench_function("read_write_1", |b| {
        b.iter(|| {
            k = (k + 1) % 1024;
            bump(&mut coord, k, 1).unwrap()
        })
    });
    g.bench_function("ro_1_rw_2", |b| {
        b.iter(|| {
            k = (k + 3) % 1021;
            block_on(async {
                let mut t = coord.begin();
                let a = t.add_ro(ACCTS, k);
                let x = t.add_rw(ACCTS, k + 1);
                let y = t.add_rw(ACCTS, k + 2);
                t.execute().await.unwrap();
                let v = t.get(a).balance & 1;
                t.get_mut(x).balance -= v;
                t.get_mut(y).balance += v;
                t.commit().await.unwrap();
            })
        })
    });
    g.finish();
}

criterion_group!(benches, ford);
criterion_main!(benches);
