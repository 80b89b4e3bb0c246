//! Service tasks: work a protocol runs beside its coordinators on a worker's executor.
//!
//! OOCC's lease manager (§VII-B) renews and reclaims leases on a period, LOTUS (§5)
//! collects garbage every 500 ms of the local clock, Calvin's sequencer closes an epoch
//! every few ms. Such work is per worker thread, not per transaction: a protocol returns
//! it from [`Protocol::services`](crate::Protocol::services) and the driver spawns each
//! future on the thread's executor (the real-time [`crate::LocalExecutor`] or the
//! simulator's), beside the coordinators. A service waits for time with
//! [`ServiceStop::sleep_until`], which returns early once the run is over, and then ends:
//!
//! 1. The driver raises the [`ServiceStop`] only after every coordinator of the run
//!    (on every compute node) has finished and drained, so a service (and the thread's
//!    CN↔CN request handler, which the executor drives while any task is left) keeps
//!    serving the other nodes' coordinators until the last one is done.
//! 2. A service must end soon after the stop is raised: the executor runs until every
//!    task has finished, and on the simulator a service that keeps sleeping would keep
//!    virtual time running.
//!
//! Raising the stop wakes every task waiting on it, so on the simulator a sleeping
//! service ends at the instant of the stop, not at its next deadline. On the simulator a
//! service runs on its worker thread's virtual CPU: its polls are charged like a
//! coordinator's, so a busy service slows that thread's coordinators.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::{sleep_until, Clock};

/// A service task of one worker thread ([`Protocol::services`](crate::Protocol::services)).
pub type ServiceTask = Pin<Box<dyn Future<Output = ()>>>;

/// The end-of-run signal of one worker thread's services. Clones share it.
#[derive(Clone, Default)]
pub struct ServiceStop(Rc<StopState>);

#[derive(Default)]
struct StopState {
    raised: Cell<bool>,
    wakers: RefCell<Vec<Waker>>,
}

impl std::fmt::Debug for ServiceStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceStop(raised: {})", self.is_raised())
    }
}

impl ServiceStop {
    /// A stop not raised yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raise it (the driver, once every coordinator of the run is done) and wake every
    /// task waiting on it.
    pub fn raise(&self) {
        self.0.raised.set(true);
        for w in self.0.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Whether it was raised.
    pub fn is_raised(&self) -> bool {
        self.0.raised.get()
    }

    fn register(&self, w: &Waker) {
        let mut ws = self.0.wakers.borrow_mut();
        if !ws.iter().any(|x| x.will_wake(w)) {
            ws.push(w.clone());
        }
    }

    /// Wait until it is raised.
    pub fn raised(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_raised() {
                return Poll::Ready(());
            }
            self.register(cx.waker());
            Poll::Pending
        })
    }

    /// Sleep until `clock` reads `deadline_ns` ([`crate::sleep_until`]), or until the stop
    /// is raised: `true` when the deadline came, `false` when the run is over (the
    /// service should return).
    pub async fn sleep_until(&self, clock: &dyn Clock, deadline_ns: u64) -> bool {
        let mut nap = std::pin::pin!(sleep_until(clock, deadline_ns));
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if self.is_raised() {
                return Poll::Ready(false);
            }
            if nap.as_mut().poll(cx).is_ready() {
                return Poll::Ready(true);
            }
            self.register(cx.waker());
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalExecutor, RealClock};

    /// Goal: a service sleeping in `ServiceStop::sleep_until` ends as soon as the stop is
    /// raised, long before its deadline, and one whose deadline comes first sees `true`.
    /// Method: a 10 s sleep and a 1 ms sleep on one executor; a third task raises the stop
    /// after the short one woke.
    #[test]
    fn a_raised_stop_ends_a_long_sleep() {
        let clock = RealClock::new();
        let stop = ServiceStop::new();
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let t = fabric.transport();
        let outcomes = RefCell::new(Vec::new());
        let short_done = Cell::new(false);
        let mut ex = LocalExecutor::new();
        let (c, s, o, d) = (&clock, &stop, &outcomes, &short_done);
        ex.spawn(async move {
            let woke = s.sleep_until(c, c.now_ns() + 10_000_000_000).await;
            o.borrow_mut().push(("long", woke));
        });
        ex.spawn(async move {
            let woke = s.sleep_until(c, c.now_ns() + 1_000_000).await;
            o.borrow_mut().push(("short", woke));
            d.set(true);
        });
        ex.spawn(async move {
            while !d.get() {
                crate::yield_now().await;
            }
            s.raise();
        });
        let t0 = std::time::Instant::now();
        ex.run(&t);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "the long sleep was cut"
        );
        assert_eq!(*outcomes.borrow(), [("short", true), ("long", false)]);
        assert!(stop.is_raised());
    }
}
