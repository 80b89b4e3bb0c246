//! Sleeping until a clock reads a deadline, on whichever executor runs the caller.
//!
//! Leases (OOCC §VII-B's write-wait until `lease + offset`, DrTM-lease), periodic
//! service tasks (LOTUS §5's garbage collection every 500 ms of the local clock) and
//! backoff (No-Wait, Wait-Die) wait for time, not for a completion. Protocol code awaits
//! [`sleep_until`]`(&*ctx.clock, deadline_ns)` (or [`sleep`]) the same way on every
//! transport; the future finds the current executor's timer service itself:
//!
//! | executor | how a sleeping task waits | cost |
//! | --- | --- | --- |
//! | [`crate::LocalExecutor`] (`mem`, `tcp`) | it is polled every pass like any task (one clock read, [`Clock::ns_until`]); when the pass's sleeps are as many as its tasks, the executor blocks the thread until the earliest deadline, in slices of at most [`IDLE_SLICE_MAX`] so CN↔CN requests and background completions are still served | nothing when no task sleeps: one thread-local read per pass, no allocation |
//! | `dmtx_sim::SimExecutor` (`sim`) | one `Wake` event at the virtual instant the node's clock reaches the deadline ([`Clock::ns_until`] of its `NodeClock`: offset and drift applied), like `Sim::sleep` | no spinning and no polls before the event |
//! | [`crate::block_on`] (setup) | as the local executor, one task | — |
//!
//! The simulator installs its service for the length of a run ([`install_timer_service`]);
//! without one, a sleep is a real-time sleep. On wake the future reads the clock again,
//! so a clock that jumped back (a scripted clock fault) makes it wait on: it returns only
//! once the clock reads at least the deadline.
//!
//! The local executor counts sleeps, not tasks, so a task awaits at most one sleep at a
//! time (two at once would make a busy thread look asleep and stall it for up to
//! [`IDLE_SLICE_MAX`] a pass). A task that awaits a sleep and something else at once (a
//! `select`) is woken late by up to [`IDLE_SLICE_MAX`] if every task of the thread sleeps
//! meanwhile. A sleeping task dropped before its deadline (a run's end)
//! leaves at most a stale `Wake` event behind, which wakes nothing.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::Clock;

/// The longest a local executor blocks its thread at a time while every task sleeps:
/// it bounds how late a CN↔CN request to the thread, or a background completion, is
/// handled meanwhile. 200 µs of blocking costs a few µs of CPU per slice.
pub const IDLE_SLICE_MAX: Duration = Duration::from_micros(200);

/// A virtual-time executor's timers (the simulator's event queue).
pub trait TimerService {
    /// The executor's time now, ns.
    fn now_ns(&self) -> u64;
    /// Wake `waker` at the executor's time `at_ns`.
    fn wake_at(&self, at_ns: u64, waker: &Waker);
}

thread_local! {
    /// The timer service of the executor running on this thread, if it has one.
    static SERVICE: RefCell<Option<Rc<dyn TimerService>>> = const { RefCell::new(None) };
    /// Sleeps that returned `Pending` since the local executor last looked (once per
    /// pass), and the shortest of their waits (host ns).
    static PARKED: Cell<(usize, u64)> = const { Cell::new((0, u64::MAX)) };
}

/// Restores the previous timer service when dropped ([`install_timer_service`]).
#[must_use = "the service is uninstalled when the guard is dropped"]
pub struct TimerServiceGuard {
    previous: Option<Rc<dyn TimerService>>,
}

impl Drop for TimerServiceGuard {
    fn drop(&mut self) {
        SERVICE.with(|s| *s.borrow_mut() = self.previous.take());
    }
}

/// Make `service` this thread's timer service until the guard drops (a virtual-time
/// executor, for the length of a run).
pub fn install_timer_service(service: Rc<dyn TimerService>) -> TimerServiceGuard {
    let previous = SERVICE.with(|s| s.borrow_mut().replace(service));
    TimerServiceGuard { previous }
}

/// How many sleeps parked since the last call and the shortest wait, clearing them (the
/// local executor, once per pass).
#[inline]
pub(crate) fn take_parked() -> Option<(usize, u64)> {
    // A load alone when nothing sleeps.
    let p = PARKED.get();
    if p.0 == 0 {
        return None;
    }
    PARKED.set((0, u64::MAX));
    Some(p)
}

/// Block the thread for up to `wait_ns` host ns, at most [`IDLE_SLICE_MAX`].
pub(crate) fn idle(wait_ns: u64) {
    std::thread::sleep(Duration::from_nanos(wait_ns).min(IDLE_SLICE_MAX));
}

/// Wait until `clock` reads at least `deadline_ns` (see the module doc). Ready at once
/// when it already does.
pub fn sleep_until(clock: &dyn Clock, deadline_ns: u64) -> Sleep<'_> {
    Sleep {
        clock,
        deadline_ns,
        armed_at: None,
    }
}

/// Wait until `clock` has advanced `ns` from now.
pub fn sleep(clock: &dyn Clock, ns: u64) -> Sleep<'_> {
    sleep_until(clock, clock.now_ns().saturating_add(ns))
}

/// The future of [`sleep_until`].
#[must_use = "a sleep does nothing unless awaited"]
pub struct Sleep<'c> {
    clock: &'c dyn Clock,
    deadline_ns: u64,
    /// The timer service's instant of the wake-up asked for, if one was.
    armed_at: Option<u64>,
}

impl Sleep<'_> {
    /// The deadline, in the clock's ns.
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let wait = self.clock.ns_until(self.deadline_ns);
        if wait == 0 {
            return Poll::Ready(());
        }
        let armed = SERVICE.with(|s| {
            let s = s.borrow();
            let service = s.as_ref()?;
            let now = service.now_ns();
            // Polled again before the wake-up (another of the task's futures woke it):
            // the wake-up asked for still stands. Past it, the clock was moved back.
            // A clock that never gets there (stopped) asks for no wake-up: the task waits
            // for ever, as the virtual-time executor then reports.
            if wait != u64::MAX && self.armed_at.is_none_or(|at| now >= at) {
                let at = now.saturating_add(wait);
                service.wake_at(at, cx.waker());
                Some(at)
            } else {
                self.armed_at
            }
        });
        match armed {
            Some(at) => self.armed_at = Some(at),
            None => {
                let (n, w) = PARKED.get();
                PARKED.set((n + 1, w.min(wait)));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::pin::pin;
    use std::time::Instant;

    use super::*;
    use crate::{block_on, yield_now, LocalExecutor, RealClock};

    /// CPU time this thread has used, ns (the scheduler's own count, ns-precise).
    fn thread_cpu_ns() -> u64 {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
        s.split_whitespace().next().unwrap().parse().unwrap()
    }

    /// Goal: a task sleeping 5 ms on the local executor wakes after at least 5 ms and not
    /// much later, while another task of the thread keeps running. Method: the other
    /// task yields in a loop until the sleeper is done and counts its rounds.
    #[test]
    fn a_sleeping_task_wakes_at_its_deadline_while_others_run() {
        let clock = RealClock::new();
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let t = fabric.transport();
        let (done, rounds, slept) = (Cell::new(false), Cell::new(0u64), Cell::new(Duration::ZERO));
        let mut ex = LocalExecutor::new();
        let (clock, done_r, rounds_r, slept_r) = (&clock, &done, &rounds, &slept);
        ex.spawn(async move {
            let t0 = Instant::now();
            sleep(clock, 5_000_000).await;
            slept_r.set(t0.elapsed());
            done_r.set(true);
        });
        ex.spawn(async move {
            while !done_r.get() {
                rounds_r.set(rounds_r.get() + 1);
                yield_now().await;
            }
        });
        ex.run(&t);
        let slept = slept.get();
        assert!(slept >= Duration::from_millis(5), "woke early: {slept:?}");
        // Generous for a loaded 2-core machine; a missed wake-up would take seconds.
        assert!(slept < Duration::from_millis(40), "woke late: {slept:?}");
        assert!(rounds.get() > 100, "the other task ran {} rounds", rounds.get());
    }

    /// Goal: an executor whose only task sleeps does not burn a core. Method: the
    /// thread's CPU time over a 100 ms sleep, from the scheduler, must stay well under the
    /// wall time (a spinning executor uses all of it).
    #[test]
    fn an_executor_whose_tasks_all_sleep_blocks_the_thread() {
        let clock = RealClock::new();
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let t = fabric.transport();
        let mut ex = LocalExecutor::new();
        let clock = &clock;
        for ms in [100, 60] {
            ex.spawn(async move { sleep(clock, ms * 1_000_000).await });
        }
        let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
        ex.run(&t);
        let (cpu, wall) = (thread_cpu_ns() - cpu0, wall0.elapsed());
        assert!(wall >= Duration::from_millis(100), "{wall:?}");
        assert!(
            (cpu as u128) * 5 < wall.as_nanos(),
            "{cpu} ns of CPU over {wall:?}: the executor spun"
        );
        eprintln!("sleeping 100 ms used {cpu} ns of CPU over {wall:?}");
    }

    /// Goal: `block_on` blocks too rather than spinning on a sleep.
    #[test]
    fn block_on_a_sleep_blocks_the_thread() {
        let clock = RealClock::new();
        let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
        block_on(sleep(&clock, 50_000_000));
        let (cpu, wall) = (thread_cpu_ns() - cpu0, wall0.elapsed());
        assert!(wall >= Duration::from_millis(50));
        assert!((cpu as u128) * 5 < wall.as_nanos(), "{cpu} ns of CPU over {wall:?}");
    }

    /// Goal: a sleep already due is ready at once, and a sleep dropped before its
    /// deadline (its task finished another way) holds nothing up: the run ends at once.
    #[test]
    fn a_due_sleep_is_ready_and_a_dropped_one_holds_nothing() {
        let clock = RealClock::new();
        let mut cx = Context::from_waker(Waker::noop());
        assert!(pin!(sleep_until(&clock, 0)).poll(&mut cx).is_ready());
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let t = fabric.transport();
        let mut ex = LocalExecutor::new();
        let clock = &clock;
        ex.spawn(async move {
            {
                let mut s = pin!(sleep(clock, 10_000_000_000));
                std::future::poll_fn(|cx| {
                    assert!(s.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
            }
            yield_now().await;
        });
        let wall0 = Instant::now();
        ex.run(&t);
        assert!(wall0.elapsed() < Duration::from_secs(1), "{:?}", wall0.elapsed());
    }

    /// A virtual timer service that records what it was asked.
    #[derive(Default)]
    struct Recorder {
        now: Cell<u64>,
        asked: RefCell<Vec<u64>>,
    }

    impl TimerService for Recorder {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn wake_at(&self, at_ns: u64, _: &Waker) {
            self.asked.borrow_mut().push(at_ns);
        }
    }

    /// A clock the test moves by hand.
    struct Hand(std::sync::atomic::AtomicU64);

    impl Clock for Hand {
        fn now_ns(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// Goal: under an installed timer service a sleep asks for one wake-up at the
    /// deadline, not one per poll; once past that instant with the clock moved back it
    /// asks again; it parks nothing for the local executor; the guard uninstalls it.
    #[test]
    fn under_a_timer_service_a_sleep_asks_one_wake_up_per_deadline() {
        let svc = Rc::new(Recorder::default());
        let clock = Hand(std::sync::atomic::AtomicU64::new(1_000));
        let mut cx = Context::from_waker(Waker::noop());
        {
            let _guard = install_timer_service(Rc::clone(&svc) as Rc<dyn TimerService>);
            let mut s = pin!(sleep_until(&clock, 5_000));
            assert!(s.as_mut().poll(&mut cx).is_pending());
            assert!(s.as_mut().poll(&mut cx).is_pending(), "a spurious poll");
            assert_eq!(*svc.asked.borrow(), [4_000]);
            assert_eq!(take_parked(), None);
            // The wake-up came, but the clock was set back 1 µs meanwhile.
            svc.now.set(4_000);
            clock.0.store(4_000, std::sync::atomic::Ordering::SeqCst);
            assert!(s.as_mut().poll(&mut cx).is_pending());
            assert_eq!(*svc.asked.borrow(), [4_000, 5_000]);
            clock.0.store(5_000, std::sync::atomic::Ordering::SeqCst);
            assert!(s.as_mut().poll(&mut cx).is_ready());
        }
        let mut s = pin!(sleep_until(&clock, 9_000));
        assert!(s.as_mut().poll(&mut cx).is_pending());
        assert_eq!(svc.asked.borrow().len(), 2, "uninstalled");
        assert_eq!(take_parked(), Some((1, 4_000)));
        assert_eq!(take_parked(), None, "taken");
    }
}
