//! `dmtx_runtime::sleep_until` on the simulator: a sleep is one event at the first
//! virtual instant its node's clock reads the deadline (offset, drift and clock faults
//! applied), it never spins, it is deterministic, and a sleeper left at a run's end is
//! dropped harmlessly. And each node clock reports its configured drift as its bound.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use dmtx_runtime::{sleep, sleep_until, Clock};
use dmtx_sim::{FaultScript, Node, NodeClock, Sim, SimConfig, SimExecutor};
use dmtx_verbs::Region;
use rand::{Rng, SeedableRng};

fn sim(seed: u64) -> Sim {
    Sim::new(SimConfig::new(seed), vec![Arc::new(Region::new(1 << 12))])
}

/// What one sleep saw: its node, its deadline, and the virtual time it woke.
type Woke = (usize, u64, u64);

/// Tasks on nodes with different offsets and drifts each sleep a few random spans;
/// returns every wake-up, the clocks and the run's polls.
fn sleepers(seed: u64) -> (Vec<Woke>, Vec<NodeClock>, u64) {
    let sim = sim(seed);
    let clocks: Vec<NodeClock> = [
        (0, 0),
        (5_000, 100),
        (-3_000, -250),
        (1_000_000, 300_000),
        (0, -600_000),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (off, ppm))| sim.node_clock(Node::Cn(i as u32), off, ppm).unwrap())
    .collect();
    const SLEEPS: usize = 20;
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    for (i, clock) in clocks.iter().enumerate() {
        for _ in 0..3 {
            let (clock, log, s) = (clock.clone(), Rc::clone(&log), sim.clone());
            let mut rng = rand::rngs::SmallRng::seed_from_u64(sim.fork_rng().random());
            ex.spawn(async move {
                for _ in 0..SLEEPS {
                    let deadline = clock.now_ns() + rng.random_range(1..2_000_000);
                    sleep_until(&clock, deadline).await;
                    log.borrow_mut().push((i, deadline, s.now()));
                }
            });
        }
    }
    let tasks = clocks.len() * 3;
    let report = ex.run().unwrap();
    assert_eq!(report.finished, tasks);
    let log = log.borrow().clone();
    assert_eq!(log.len(), tasks * SLEEPS);
    (log, clocks, report.polls)
}

/// Goal: every sleep wakes at exactly the first virtual instant its node's clock reads
/// the deadline, whatever the clock's offset and drift; each costs one poll to start and
/// one at its event (no spinning); the same seed gives the same wake-ups.
#[test]
fn virtual_sleeps_wake_at_exactly_the_deadline_and_never_spin() {
    let (log, clocks, polls) = sleepers(9);
    for &(i, deadline, at) in &log {
        let c = &clocks[i];
        assert!(
            c.at(at) >= deadline,
            "cn{i} woke at {at}, clock {} < {deadline}",
            c.at(at)
        );
        assert!(
            c.at(at - 1) < deadline,
            "cn{i} woke late: at {} the clock already read {}",
            at - 1,
            c.at(at - 1)
        );
    }
    // One poll per sleep (its event) plus the first poll of each task.
    assert_eq!(
        polls,
        log.len() as u64 + 15,
        "a sleep was polled more than at its event"
    );
    assert_eq!(sleepers(9).0, log, "one seed, one run");
}

/// Goal: a sleep on a clock that a fault script jumps back while it waits does not
/// return early: it returns once the clock reads the deadline, later in virtual time.
#[test]
fn a_sleep_outlasts_a_backward_clock_jump() {
    let sim = sim(1);
    let clock = sim.node_clock(Node::Cn(0), 0, 0).unwrap();
    sim.install_faults("clock-jump node=cn0 by=-4us at=10us".parse::<FaultScript>().unwrap())
        .unwrap();
    let woke = Rc::new(RefCell::new(None));
    let mut ex = SimExecutor::new(&sim);
    let (w, s) = (Rc::clone(&woke), sim.clone());
    ex.spawn(async move {
        sleep_until(&clock, 20_000).await;
        *w.borrow_mut() = Some((s.now(), clock.now_ns()));
    });
    ex.run().unwrap();
    assert_eq!(*woke.borrow(), Some((24_000, 20_000)));
}

/// Goal: a run that ends at a deadline with a task asleep beyond it drops the task
/// (counted pending); its wake-up event is left behind and the next run on the same
/// simulation passes it harmlessly.
#[test]
fn a_sleeper_dropped_at_the_end_of_a_run_is_harmless() {
    let sim = sim(2);
    let clock = sim.node_clock(Node::Cn(0), 0, 0).unwrap();
    let mut ex = SimExecutor::new(&sim);
    let c = clock.clone();
    ex.spawn(async move {
        sleep(&c, 1_000_000).await;
        unreachable!("the run ends first");
    });
    let report = ex.run_until(500_000).unwrap();
    assert_eq!((report.pending, report.end_ns), (1, 500_000));
    let mut ex = SimExecutor::new(&sim);
    let s = sim.clone();
    let woke = Rc::new(RefCell::new(0));
    let w = Rc::clone(&woke);
    ex.spawn(async move {
        sleep(&clock, 2_000_000).await;
        *w.borrow_mut() = s.now();
    });
    let report = ex.run().unwrap();
    assert_eq!((report.finished, report.pending), (1, 0));
    assert_eq!(*woke.borrow(), 2_500_000);
}

/// Goal: a node clock's drift bound is its configured drift's size; a scripted drift
/// change does not raise it (it is the fault the bound does not cover).
#[test]
fn node_clocks_report_their_configured_drift_as_bound() {
    let sim = sim(3);
    assert_eq!(sim.clock(0, 0).unwrap().drift_bound_ppm(), 0);
    assert_eq!(sim.clock(0, -250).unwrap().drift_bound_ppm(), 250);
    let c = sim.node_clock(Node::Cn(1), 7, 100).unwrap();
    sim.install_faults("clock-drift node=cn1 ppm=5000 at=1us".parse::<FaultScript>().unwrap())
        .unwrap();
    let mut ex = SimExecutor::new(&sim);
    let s = sim.clone();
    ex.spawn(async move { s.sleep(2_000).await });
    ex.run().unwrap();
    assert_eq!(c.drift_ppm(), 5_100);
    assert_eq!(c.drift_bound_ppm(), 100);
}

/// Goal: `reaches_at` finds the first crossing for any offset, drift and deadline
/// (checked against the clock's own readings), including a clock clamped at 0 by a
/// negative offset. Method: 20 000 random cases from one seed.
#[test]
fn reaches_at_is_the_first_crossing() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let time = dmtx_sim::VirtualTime::new();
    for _ in 0..20_000 {
        let off = rng.random_range(-1_000_000_000i64..1_000_000_000);
        let ppm = rng.random_range(-999_999i64..=999_999);
        let c = NodeClock::new(time.clone(), off, ppm).unwrap();
        let now = rng.random_range(0..1u64 << 40);
        let deadline = c.at(now) + rng.random_range(0..1u64 << 32);
        let t = c.reaches_at(now, deadline).unwrap();
        assert!(t >= now);
        assert!(c.at(t) >= deadline, "{c:?} now {now} deadline {deadline}: {t}");
        assert!(
            t == now || c.at(t - 1) < deadline,
            "{c:?} now {now} deadline {deadline}: {t} is late"
        );
    }
}

/// Goal: a coordinator on a virtual CPU (CPU model on) sleeping on its node's clock
/// wakes at exactly its deadline when its CPU is idle, and two coordinators of one CPU
/// whose deadlines coincide run one after the other (the second waits for the CPU, not
/// for another timer).
#[test]
fn a_coordinator_on_a_virtual_cpu_wakes_at_its_deadline() {
    let mut config = SimConfig::new(4);
    config.cpu.mode = dmtx_sim::CpuMode::Model;
    let sim = Sim::new(config, vec![Arc::new(Region::new(1 << 12))]);
    let clock = sim.node_clock(Node::Cn(0), 0, 0).unwrap();
    let cpu = sim.cpu_of(0, 0);
    let woke = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    for k in 0..2u64 {
        let (c, w, s) = (clock.clone(), Rc::clone(&woke), sim.clone());
        ex.spawn_on(cpu, async move {
            sleep_until(&c, 50_000).await;
            w.borrow_mut().push((k, s.now()));
        });
    }
    let report = ex.run().unwrap();
    let woke = woke.borrow();
    assert_eq!(woke[0], (0, 50_000), "the first wakes at its deadline");
    assert_eq!(woke[1].0, 1);
    assert!(woke[1].1 > 50_000, "the second waits for the CPU: {:?}", woke[1]);
    assert!(woke[1].1 < 51_000, "one poll later, not another timer: {:?}", woke[1]);
    assert_eq!(report.polls, 4, "each polled at start and at its wake-up");
}

/// Goal: a sleep on a clock that a fault script stops (−600 000 ppm configured, −500 000
/// more scripted: the clock runs backwards) asks for no wake-up at the end of time: the
/// run reports the sleeper as deadlocked.
#[test]
fn a_sleep_on_a_stopped_clock_waits_for_ever() {
    let sim = sim(5);
    let clock = sim.node_clock(Node::Cn(0), 0, -600_000).unwrap();
    sim.install_faults(
        "clock-drift node=cn0 ppm=-500000 at=1us"
            .parse::<FaultScript>()
            .unwrap(),
    )
    .unwrap();
    let mut ex = SimExecutor::new(&sim);
    let s = sim.clone();
    ex.spawn(async move {
        s.sleep(2_000).await;
        assert_eq!(clock.ns_until(clock.now_ns() + 1), u64::MAX, "stopped");
        sleep(&clock, 1_000).await;
        unreachable!("the clock never gets there");
    });
    let e = ex.run().unwrap_err();
    assert!(matches!(e, dmtx_sim::SimError::Deadlock { pending: 1, .. }), "{e}");
}
