//! Round-trip benchmark of the `tcp` transport against a raw TCP echo, all on 127.0.0.1.
//!
//! ```text
//! cargo run --release -p dmtx-net --example rtt -- [--pings N] [--threads N]
//! ```
//!
//! `--threads` sets the memory node's serving threads (default: `ServerConfig::new`'s);
//! one connection is served by one of them.
//!
//! 1. Raw TCP echo RTT: a blocking std::net client/server pair (TCP_NODELAY on both ends)
//!    exchanging messages of exactly the sizes of a dmtx single-op 64-byte READ (request
//!    frame and VERBS_RESULT frame, computed with the wire encoders).
//! 2. dmtx single-op READ RTT through an in-process memory-node `Server` and a `TcpFabric`
//!    endpoint (submit, then poll with `progress` between polls).
//! 3. Pipelined 64-byte READs per second at depth 1, 16 and 64 on one connection.
//!
//! The client runs on CPU 0 and the server threads on CPU 1 when `sched_setaffinity`
//! allows it (the memory node's threads inherit the mask of the thread that spawned the
//! server, so they are pinned without touching the server's code).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use dmtx_memnode::server::wire::{self, Kind, OpResult, WireOp};
use dmtx_memnode::server::{Server, ServerConfig};
use dmtx_net::{TcpConfig, TcpFabric, TcpTransport};
use dmtx_verbs::{MnId, Post, RemotePtr, Submitted, Ticket, Transport};

const READ_BYTES: usize = 64;
const WARMUP: usize = 10_000;
/// Longest a latency phase may run (warm-up included); it stops early past this.
const PHASE_BUDGET: Duration = Duration::from_secs(15);
const PIPE_SECS: Duration = Duration::from_secs(2);
const CLIENT_CPU: usize = 0;
const SERVER_CPU: usize = 1;

/// Pin the calling thread to `cpu`; false if the kernel refused (or no such CPU).
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity get
    // a pointer to that local set and its exact size; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Undo pinning of the calling thread (all CPUs allowed).
fn unpin() {
    // SAFETY: as in `pin`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of this process's threads whose name starts with `prefix` (from
/// /proc/self/task/*/schedstat, nanoseconds on CPU), and their CPU affinity lists.
fn threads_cpu(prefix: &str) -> (Duration, Vec<String>) {
    let mut total = Duration::ZERO;
    let mut affinity = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (total, affinity);
    };
    for e in dir.flatten() {
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let name = name.trim();
        if !name.starts_with(prefix) {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(p.join("schedstat")) {
            if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()) {
                total += Duration::from_nanos(ns);
            }
        }
        let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("?")
            .trim()
            .to_string();
        affinity.push(format!("{name}@{cpus}"));
    }
    affinity.sort();
    (total, affinity)
}

/// The exact bytes of a single-op 64-byte READ request frame and of its reply frame.
fn frame_sizes() -> (usize, usize) {
    let mut req = Vec::new();
    let f = wire::begin_frame(&mut req, Kind::Verbs, 1);
    let at = wire::begin_verbs(&mut req);
    WireOp::Read {
        rkey: 0,
        offset: 0,
        len: READ_BYTES as u32,
    }
    .encode(&mut req);
    wire::set_count(&mut req, at, 1);
    wire::end_frame(&mut req, f);

    let mut resp = Vec::new();
    let f = wire::begin_frame(&mut resp, Kind::VerbsResult, 1);
    let at = wire::begin_verbs(&mut resp);
    OpResult::Data(&[0; READ_BYTES]).encode(&mut resp);
    wire::set_count(&mut resp, at, 1);
    wire::end_frame(&mut resp, f);
    (req.len(), resp.len())
}

struct Stats {
    n: usize,
    p50: f64,
    p99: f64,
    mean: f64,
}

fn stats(mut ns: Vec<u32>) -> Stats {
    ns.sort_unstable();
    let q = |f: f64| f64::from(ns[((ns.len() as f64 * f) as usize).min(ns.len() - 1)]) / 1000.0;
    let mean = ns.iter().map(|&v| f64::from(v)).sum::<f64>() / ns.len() as f64 / 1000.0;
    Stats {
        n: ns.len(),
        p50: q(0.50),
        p99: q(0.99),
        mean,
    }
}

/// Time `n` calls of `once` after `WARMUP` calls, within `PHASE_BUDGET`.
fn measure(n: usize, mut once: impl FnMut()) -> Stats {
    let started = Instant::now();
    for _ in 0..WARMUP {
        once();
    }
    let mut ns = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        once();
        ns.push(t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
        if i.is_multiple_of(1024) && started.elapsed() > PHASE_BUDGET {
            break;
        }
    }
    stats(ns)
}

fn echo_rtt(n: usize, req_bytes: usize, resp_bytes: usize) -> (Stats, bool) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo listener");
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let pinned = pin(SERVER_CPU);
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).unwrap();
        let mut inb = vec![0u8; req_bytes];
        let out = vec![0x5au8; resp_bytes];
        while s.read_exact(&mut inb).is_ok() {
            if s.write_all(&out).is_err() {
                break;
            }
        }
        pinned
    });
    let mut c = TcpStream::connect(addr).expect("connect echo");
    c.set_nodelay(true).unwrap();
    let req = vec![0xa5u8; req_bytes];
    let mut inb = vec![0u8; resp_bytes];
    let st = measure(n, || {
        c.write_all(&req).unwrap();
        c.read_exact(&mut inb).unwrap();
    });
    drop(c);
    let server_pinned = server.join().unwrap();
    (st, server_pinned)
}

fn wait_ticket(t: &TcpTransport, ticket: Ticket, post: &mut Post, cx: &mut Context<'_>) {
    loop {
        if let Poll::Ready(r) = t.poll(ticket, post, cx) {
            r.expect("READ failed");
            return;
        }
        t.progress();
    }
}

fn dmtx_rtt(t: &TcpTransport, n: usize) -> Stats {
    let mut cx = Context::from_waker(Waker::noop());
    let mut post = Post::new();
    post.read(RemotePtr::new(MnId(0), 4096), READ_BYTES);
    measure(n, || {
        let Submitted::Pending(tk) = t.submit(&mut post) else {
            panic!("tcp posts are pending")
        };
        wait_ticket(t, tk, &mut post, &mut cx);
    })
}

struct PipeResult {
    depth: usize,
    reads: u64,
    secs: f64,
    process_cpu: Duration,
    server_cpu: Duration,
    client_cpu: Duration,
}

fn pipeline(t: &TcpTransport, depth: usize) -> PipeResult {
    let mut cx = Context::from_waker(Waker::noop());
    let mut free: Vec<Post> = (0..depth)
        .map(|i| {
            let mut p = Post::new();
            p.read(RemotePtr::new(MnId(0), 4096 + 64 * i as u64), READ_BYTES);
            p
        })
        .collect();
    let mut inflight: VecDeque<(Ticket, Post)> = VecDeque::with_capacity(depth);
    let mut run = |free: &mut Vec<Post>, inflight: &mut VecDeque<(Ticket, Post)>, until: Instant| -> u64 {
        let mut done = 0u64;
        let mut rounds = 0u64;
        loop {
            rounds += 1;
            // Fill the window.
            while let Some(mut p) = free.pop() {
                let Submitted::Pending(tk) = t.submit(&mut p) else {
                    panic!("tcp posts are pending")
                };
                inflight.push_back((tk, p));
            }
            if rounds.is_multiple_of(64) && Instant::now() >= until {
                break;
            }
            // Replies come back in order: poll the oldest, then any that follow it.
            let mut progressed = false;
            while let Some((tk, p)) = inflight.front_mut() {
                match t.poll(*tk, p, &mut cx) {
                    Poll::Ready(r) => {
                        r.expect("READ failed");
                        let (_, p) = inflight.pop_front().unwrap();
                        free.push(p);
                        done += 1;
                        progressed = true;
                    }
                    Poll::Pending => break,
                }
            }
            if !progressed {
                t.progress();
            }
        }
        // Drain.
        while let Some((tk, mut p)) = inflight.pop_front() {
            wait_ticket(t, tk, &mut p, &mut cx);
            free.push(p);
        }
        done
    };
    // Short warm-up.
    run(&mut free, &mut inflight, Instant::now() + Duration::from_millis(200));
    let (srv0, _) = threads_cpu("dmtx-");
    let proc0 = rusage(libc::RUSAGE_SELF);
    let cli0 = rusage(libc::RUSAGE_THREAD);
    let started = Instant::now();
    let reads = run(&mut free, &mut inflight, started + PIPE_SECS);
    let secs = started.elapsed().as_secs_f64();
    let (srv1, _) = threads_cpu("dmtx-");
    PipeResult {
        depth,
        reads,
        secs,
        process_cpu: rusage(libc::RUSAGE_SELF) - proc0,
        server_cpu: srv1.saturating_sub(srv0),
        client_cpu: rusage(libc::RUSAGE_THREAD) - cli0,
    }
}

fn main() {
    let mut pings = 100_000usize;
    let mut threads = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pings" => {
                pings = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v| v > 0)
                    .expect("--pings takes a positive number")
            }
            "--threads" => {
                threads = Some(
                    args.next()
                        .and_then(|v| v.parse::<usize>().ok())
                        .filter(|&v| v > 0)
                        .expect("--threads takes a positive number"),
                )
            }
            other => {
                eprintln!("unknown argument {other}; usage: rtt [--pings N] [--threads N]");
                std::process::exit(2);
            }
        }
    }
    let (req_bytes, resp_bytes) = frame_sizes();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "dmtx rtt: 127.0.0.1, {cpus} CPUs, {pings} pings after {WARMUP} warm-up; 64 B READ = request {req_bytes} B, reply {resp_bytes} B"
    );

    // 1. Raw echo.
    let client_pinned = pin(CLIENT_CPU);
    let (echo, echo_srv_pinned) = echo_rtt(pings, req_bytes, resp_bytes);

    // 2. dmtx: spawn the server (its accept and serving threads) with this thread pinned
    // to the server CPU, so every server thread inherits that mask; then move back to
    // the client CPU.
    let srv_pinned = pin(SERVER_CPU);
    let mut config = ServerConfig::new(MnId(0), 1 << 20);
    if let Some(n) = threads {
        config.threads = n;
    }
    let server_threads = config.threads;
    let server = Server::bind(config).expect("bind memory node").spawn();
    let fabric =
        TcpFabric::connect(vec![(MnId(0), server.local_addr())], TcpConfig::new(0, b"")).expect("connect fabric");
    let t = fabric.transport().expect("open transport");
    if client_pinned {
        pin(CLIENT_CPU);
    } else {
        unpin();
    }
    let (_, server_affinity) = threads_cpu("dmtx-");
    let dmtx = dmtx_rtt(&t, pings);

    let pin_note = |ok: bool, cpu: usize| {
        if ok {
            format!("pinned to CPU {cpu}")
        } else {
            "not pinned".into()
        }
    };
    println!(
        "pinning: client {}; echo server {}; memnode ({server_threads} serving threads) {} ({})",
        pin_note(client_pinned, CLIENT_CPU),
        pin_note(echo_srv_pinned, SERVER_CPU),
        pin_note(srv_pinned, SERVER_CPU),
        server_affinity.join(", ")
    );
    println!();
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10}",
        "latency (1 op in flight)", "pings", "p50 µs", "p99 µs", "mean µs"
    );
    for (name, s) in [("raw TCP echo", &echo), ("dmtx 64 B READ", &dmtx)] {
        println!(
            "{:<28} {:>8} {:>10.2} {:>10.2} {:>10.2}",
            name, s.n, s.p50, s.p99, s.mean
        );
    }
    println!(
        "p50 ratio dmtx/echo: {:.2}x (target <= 1.30x); p99 ratio {:.2}x",
        dmtx.p50 / echo.p50,
        dmtx.p99 / echo.p99
    );

    // 3. Pipelining.
    println!();
    println!(
        "{:<6} {:>12} {:>14} {:>14} {:>14} {:>14}",
        "depth", "reads/s", "memnode µs/rd", "client µs/rd", "process s/M", "memnode CPU%"
    );
    for depth in [1, 16, 64] {
        let r = pipeline(&t, depth);
        let per = |d: Duration| d.as_secs_f64() * 1e6 / r.reads as f64;
        println!(
            "{:<6} {:>12.0} {:>14.2} {:>14.2} {:>14.2} {:>13.0}%",
            r.depth,
            r.reads as f64 / r.secs,
            per(r.server_cpu),
            per(r.client_cpu),
            per(r.process_cpu),
            100.0 * r.server_cpu.as_secs_f64() / r.secs
        );
    }
    println!(
        "(memnode = on-CPU time of the server's threads from /proc/self/task/*/schedstat; client = this thread's \
         RUSAGE_THREAD; process s/M = getrusage(RUSAGE_SELF) CPU seconds per million reads, client + memnode + idle threads)"
    );
    drop(t);
    server.join();
}
