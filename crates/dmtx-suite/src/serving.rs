//! Running a protocol that messages other compute nodes (`Protocol::messaging()`):
//! every worker thread keeps serving CN↔CN requests, and the protocol's service tasks
//! run, until every coordinator of every compute node has finished, as the driver does.
//! A thread that stopped early would leave its peers' calls unanswered.
//!
//! Nothing here runs for a protocol that does not message: its runs stay as they were.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dmtx_runtime::{LocalExecutor, Protocol, ServiceStop, Worker};
use dmtx_sim::{ServeStop, SimExecutor, SimMsgNet};

/// How often a `mem` worker whose coordinators are done looks whether every coordinator
/// of the run is, to stop its services and request handling.
const STOP_POLL_NS: u64 = 100_000;

/// Coordinators of a `mem` run not finished yet, on every thread of every node.
pub(crate) struct MemLive(AtomicUsize);

impl MemLive {
    pub(crate) fn new(coordinators: usize) -> Self {
        Self(AtomicUsize::new(coordinators))
    }

    /// True once every share was given back.
    pub(crate) fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// One coordinator's share, given back when dropped (finished, or unwound by a
    /// panic, so the other threads do not serve forever).
    pub(crate) fn share(&self) -> LiveShare<'_> {
        LiveShare(&self.0)
    }
}

/// One coordinator's share of [`MemLive`].
pub(crate) struct LiveShare<'a>(&'a AtomicUsize);

impl Drop for LiveShare<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// On `ex`, the executor of `w` (whose messaging it drives): `w`'s service tasks and a
/// task that keeps the executor running until `live` reaches 0, then stops them.
pub(crate) fn serve_mem<'a, P: Protocol>(ex: &mut LocalExecutor<'a>, w: &Worker, proto: &P, live: &'a MemLive) {
    let stop = ServiceStop::new();
    let services = w
        .services(proto, &stop)
        .unwrap_or_else(|e| panic!("{}: services of {}: {e}", P::NAME, w.thread()));
    for s in services {
        ex.spawn(s);
    }
    let clock = Arc::clone(&w.cn().clock);
    ex.spawn(async move {
        while live.0.load(Ordering::Acquire) > 0 {
            dmtx_runtime::sleep(clock.as_ref(), STOP_POLL_NS).await;
        }
        stop.raise();
    });
}

/// Run `task` to its end on worker `w`: on `w`'s executor when `w` messages (so its
/// calls are driven), else with `block_on` as before.
pub(crate) fn run_on<T>(w: &Worker, task: impl Future<Output = T>) -> T {
    if w.rpc().is_none() {
        return dmtx_runtime::block_on(task);
    }
    let out = RefCell::new(None);
    {
        let mut ex = w.executor();
        let out = &out;
        ex.spawn(async move {
            *out.borrow_mut() = Some(task.await);
        });
        ex.run(w.transport().as_ref());
    }
    out.into_inner().expect("the task ran to its end")
}

/// Serve requests to worker `w`, which runs no coordinator, until `live` reaches 0.
pub(crate) fn serve_only<P: Protocol>(w: &Worker, proto: &P, live: &MemLive) {
    let mut ex = w.executor();
    serve_mem(&mut ex, w, proto, live);
    ex.run(w.transport().as_ref());
}

/// Coordinators of a `sim` run not finished yet, and what stops the services and
/// request handlers once the last one has.
#[derive(Default)]
pub(crate) struct SimLive {
    left: Cell<usize>,
    stops: RefCell<Vec<ServiceStop>>,
    serve: ServeStop,
}

impl SimLive {
    pub(crate) fn new(coordinators: usize) -> Self {
        Self {
            left: Cell::new(coordinators),
            ..Self::default()
        }
    }

    /// A coordinator finished.
    pub(crate) fn done_one(&self) {
        let left = self.left.get() - 1;
        self.left.set(left);
        if left == 0 {
            for s in self.stops.borrow().iter() {
                s.raise();
            }
            self.serve.stop();
        }
    }

    /// On `ex`: `w`'s service tasks and its request handler on `net`.
    pub(crate) fn serve<'a, P: Protocol>(&self, ex: &mut SimExecutor<'a>, net: &SimMsgNet, w: &Worker, proto: &P) {
        let stop = ServiceStop::new();
        let services = w
            .services(proto, &stop)
            .unwrap_or_else(|e| panic!("{}: services of {}: {e}", P::NAME, w.thread()));
        self.stops.borrow_mut().push(stop);
        for s in services {
            ex.spawn(s);
        }
        let rpc = Rc::clone(w.rpc().expect("a messaging protocol's worker has an Rpc"));
        ex.spawn(dmtx_sim::serve(net, rpc, self.serve.clone()));
    }
}
