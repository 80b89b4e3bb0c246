//! The per-worker-thread executor.
//!
//! Each worker thread runs one [`LocalExecutor`]: its coordinators are async tasks on
//! that thread and nothing else touches them, so they share the thread's transport and
//! caches without locks. The executor polls every task in turn, as an RDMA worker polls
//! its completion queue; a task waiting for the network costs one cheap poll. Protocol
//! code depends only on `Future` and `Waker`, so another executor (the simulator's
//! virtual-time one) can drive the same coordinators.
//!
//! A task may sleep ([`crate::sleep_until`], module [`crate::timer`]): it stays in the
//! round and checks its clock when polled, and when every task of the pass was asleep
//! the executor blocks the thread until the earliest deadline (in slices of
//! [`crate::timer::IDLE_SLICE_MAX`]) instead of spinning. Telling whether every task
//! sleeps costs one thread-local read per pass.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use std::rc::Rc;

use dmtx_verbs::Transport;

use crate::rpc::Progress;
use crate::timer;

/// Round-robin executor for one worker thread.
#[derive(Default)]
pub struct LocalExecutor<'a> {
    tasks: Vec<Pin<Box<dyn Future<Output = ()> + 'a>>>,
    /// Driven after the transport on every pass: the thread's messaging endpoint.
    pollers: Vec<Rc<dyn Progress>>,
}

impl<'a> LocalExecutor<'a> {
    /// An executor with no tasks.
    pub fn new() -> Self {
        Self {
            tasks: Vec::new(),
            pollers: Vec::new(),
        }
    }

    /// Drive `p` after every pass, as the transport is (a worker's [`crate::Rpc`], so its
    /// handler runs between coordinators).
    pub fn add_poller(&mut self, p: Rc<dyn Progress>) {
        self.pollers.push(p);
    }

    /// Add a task (a coordinator's loop).
    pub fn spawn(&mut self, task: impl Future<Output = ()> + 'a) {
        self.tasks.push(Box::pin(task));
    }

    /// Run until every task has finished. `transport` is given a chance to make progress
    /// after each pass over the tasks.
    pub fn run(mut self, transport: &dyn Transport) {
        let mut cx = Context::from_waker(Waker::noop());
        // A sleep parked outside this run is nobody's here.
        let _ = timer::take_parked();
        while !self.tasks.is_empty() {
            let mut i = 0;
            while i < self.tasks.len() {
                if self.tasks[i].as_mut().poll(&mut cx).is_ready() {
                    drop(self.tasks.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            // The sleeps of this pass, and the shortest wait (one per sleeping task).
            let parked = timer::take_parked();
            if self.pollers.is_empty() {
                transport.progress();
            } else {
                // Incoming messages must not wait for the transport's sleep in poll(2).
                transport.progress_nowait();
                for p in &self.pollers {
                    p.progress();
                }
            }
            if let Some((asleep, wait_ns)) = parked {
                if asleep >= self.tasks.len() {
                    timer::idle(wait_ns);
                }
            }
        }
    }
}

/// Run one future to completion on this thread (setup, scans, examples).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        // No spin hint: a pending future here is one that yielded, and is ready again.
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        if let Some((_, wait_ns)) = timer::take_parked() {
            timer::idle(wait_ns);
        }
    }
}

/// Return `Pending` once, letting the executor run the thread's other coordinators.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn tasks_interleave_at_yields() {
        let log = RefCell::new(Vec::new());
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let t = fabric.transport();
        let mut ex = LocalExecutor::new();
        for id in 0..2 {
            let log = &log;
            ex.spawn(async move {
                for step in 0..3 {
                    log.borrow_mut().push((id, step));
                    yield_now().await;
                }
            });
        }
        ex.run(&t);
        assert_eq!(log.into_inner(), [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]);
    }
}
