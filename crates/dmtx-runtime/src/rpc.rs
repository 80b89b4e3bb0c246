//! Request/response between compute-node worker threads, on any [`Mailbox`].
//!
//! [`Rpc`] is one worker thread's end: its coordinators [`Rpc::call`] other workers (or
//! send one-way messages and broadcasts), and the thread's [`Handler`] answers the
//! requests that arrive. Everything runs on the worker's executor: [`Rpc::progress`],
//! called by the executor after each pass over the coordinators, flushes what the pass
//! queued, hands arrived requests to the handler and completes calls whose replies came
//! in. So a handler runs between coordinators, never concurrently with them, and may
//! touch the same thread-local state without locks (LOTUS §4.1 serves the i-th
//! coordinator's locks on the i-th thread this way).
//!
//! - **Batching**: every request, reply and one-way message a thread queues to one peer
//!   during a pass travels in one message ([`Mailbox::flush`] once per pass).
//!   [`Rpc::call_many`] issues several calls at once and waits for all.
//! - **Ids**: a call's id is unique on its thread; a reply is matched by (peer, id). A
//!   reply nobody waits for any more (a late one after a timeout, a duplicate) is dropped
//!   and counted in [`RpcStats::stray_replies`].
//! - **Timeouts and retries**: a call that has no reply within [`RpcConfig::timeout`], or
//!   whose peer is reported lost, is sent again with the same id and the `retry` flag,
//!   up to [`RpcConfig::retries`] times, then fails with [`RpcError`]. A retried request
//!   may reach the handler twice, so handlers must be idempotent per (peer, id); the
//!   flag says when to look (LOTUS's lock state rejects a duplicate lock request).
//! - **Deferred replies**: a handler that cannot answer at once returns
//!   [`Handled::Later`] and answers afterwards with [`Rpc::reply`].
//! - A request to a thread with no handler is dropped and counted
//!   ([`RpcStats::unhandled`]); its caller times out.
//! - **Services**: a thread has one handler, but several services may share its
//!   threads (LOTUS's lock service and the timestamp oracle on cn0/t0). Either a thread
//!   has one plain handler ([`Rpc::set_handler`]: it sees every request whole), or it
//!   has tagged services ([`Rpc::add_service`]): the first byte of every request is a
//!   service tag (the `TAG_*` constants below, one per service), and the rest goes to
//!   that service's handler. Replies carry no tag (they are matched by id).
//!
//! Time comes from the [`Clock`] (virtual under the simulator).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use dmtx_verbs::msg::{Entry, EntryKind, Event, Mailbox, MsgError, WorkerAddr};
use rustc_hash::FxHashMap;

use crate::Clock;

/// Limits of calls.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RpcConfig {
    /// A call with no reply for this long is retried (or fails when out of retries).
    pub timeout: Duration,
    /// How many times a call is sent again after a timeout or a lost peer.
    pub retries: u32,
}

impl Default for RpcConfig {
    /// 100 ms, 2 retries.
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(100),
            retries: 2,
        }
    }
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// No reply after every retry.
    #[error("no reply from {to} after {attempts} attempts of {timeout:?} each")]
    Timeout {
        /// The callee.
        to: WorkerAddr,
        /// Sends made.
        attempts: u32,
        /// Time allowed per attempt.
        timeout: Duration,
    },
    /// The transport lost the callee and no retries were left.
    #[error("lost {to}: {why}")]
    PeerLost {
        /// The callee.
        to: WorkerAddr,
        /// What the transport knows.
        why: String,
    },
    /// The request could not be queued (unknown peer, too large).
    #[error(transparent)]
    Refused(#[from] MsgError),
}

/// A request (or one-way message) as a handler sees it.
#[derive(Copy, Clone, Debug)]
pub struct Request<'a> {
    /// The sending worker.
    pub from: WorkerAddr,
    /// The caller's id for it.
    pub id: u64,
    /// Sent again after a timeout or loss: it may have been handled already.
    pub retry: bool,
    /// One-way: whatever the handler returns is not sent anywhere.
    pub one_way: bool,
    /// The bytes.
    pub payload: &'a [u8],
}

impl Request<'_> {
    /// Where a deferred reply goes ([`Rpc::reply`]).
    pub fn reply_to(&self) -> ReplyTo {
        ReplyTo {
            to: self.from,
            id: self.id,
        }
    }
}

/// The address of a reply to send later.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplyTo {
    /// The caller.
    pub to: WorkerAddr,
    /// Its request id.
    pub id: u64,
}

/// What a handler did with a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The reply is in the buffer the handler was given (empty is a valid reply).
    Reply,
    /// The handler keeps [`Request::reply_to`] and answers later with [`Rpc::reply`].
    Later,
}

/// A worker thread's request handler: it gets the request and a cleared reply buffer.
pub trait Handler {
    /// Handle one request or one-way message.
    fn handle(&mut self, rpc: &Rpc, req: Request<'_>, reply: &mut Vec<u8>) -> Handled;

    /// The tagged-service table, when this handler is one ([`Rpc::add_service`]).
    fn as_services(&mut self) -> Option<&mut Services> {
        None
    }
}

impl<F: FnMut(&Rpc, Request<'_>, &mut Vec<u8>) -> Handled> Handler for F {
    fn handle(&mut self, rpc: &Rpc, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        self(rpc, req, reply)
    }
}

/// Service tag of the timestamp oracle (`crate::timestamp`). A new service sharing
/// worker threads takes the next free value here, so tags stay unique in one place.
pub const TAG_TIMESTAMPS: u8 = 1;

/// Services a thread offers at once, routed by the request's first byte (a tag). See the
/// module doc; installed by [`Rpc::add_service`].
#[derive(Default)]
pub struct Services {
    /// (tag, handler); a few entries, searched in order.
    routes: Vec<(u8, Box<dyn Handler>)>,
}

impl Handler for Services {
    fn handle(&mut self, rpc: &Rpc, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let Some((&tag, rest)) = req.payload.split_first() else {
            rpc.count(|s| s.unhandled += 1);
            return Handled::Later;
        };
        match self.routes.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, h)) => h.handle(rpc, Request { payload: rest, ..req }, reply),
            None => {
                // Dropped like a request to a thread with no handler: the caller times out.
                rpc.count(|s| s.unhandled += 1);
                Handled::Later
            }
        }
    }

    fn as_services(&mut self) -> Option<&mut Services> {
        Some(self)
    }
}

/// Counters of one thread's messaging.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// Calls started.
    pub calls: u64,
    /// Calls sent again (timeout or lost peer).
    pub retries: u64,
    /// Calls that failed.
    pub failed: u64,
    /// One-way messages sent (a broadcast counts once per receiver).
    pub one_way: u64,
    /// Requests and one-way messages handled here.
    pub handled: u64,
    /// Requests dropped because this thread has no handler.
    pub unhandled: u64,
    /// Replies that matched no waiting call.
    pub stray_replies: u64,
    /// Executor passes whose drain handed over at least one event.
    pub busy_drains: u64,
}

struct Pending {
    to: WorkerAddr,
    payload: Vec<u8>,
    deadline_ns: u64,
    attempts: u32,
    outcome: Option<Result<Vec<u8>, RpcError>>,
    /// The waiting call's task, woken when `outcome` is set.
    waker: Option<std::task::Waker>,
}

impl Pending {
    fn settle(&mut self, r: Result<Vec<u8>, RpcError>) {
        self.outcome = Some(r);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// One worker thread's RPC endpoint. See the module doc.
pub struct Rpc {
    mailbox: Box<dyn Mailbox>,
    clock: Arc<dyn Clock>,
    config: RpcConfig,
    next_id: Cell<u64>,
    pending: RefCell<FxHashMap<u64, Pending>>,
    handler: RefCell<Option<Box<dyn Handler>>>,
    reply_buf: RefCell<Vec<u8>>,
    stats: Cell<RpcStats>,
}

impl std::fmt::Debug for Rpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpc")
            .field("addr", &self.mailbox.addr())
            .field("pending", &self.pending.borrow().len())
            .finish_non_exhaustive()
    }
}

impl Rpc {
    /// An endpoint on `mailbox`.
    pub fn new(mailbox: Box<dyn Mailbox>, clock: Arc<dyn Clock>, config: RpcConfig) -> Self {
        Self {
            mailbox,
            clock,
            config,
            next_id: Cell::new(1),
            pending: RefCell::new(FxHashMap::default()),
            handler: RefCell::new(None),
            reply_buf: RefCell::new(Vec::new()),
            stats: Cell::new(RpcStats::default()),
        }
    }

    /// This worker's address.
    pub fn addr(&self) -> WorkerAddr {
        self.mailbox.addr()
    }

    /// Every worker of the cluster, this one included.
    pub fn workers(&self) -> &[WorkerAddr] {
        self.mailbox.workers()
    }

    /// Install the thread's handler (replacing any earlier one).
    pub fn set_handler(&self, h: impl Handler + 'static) {
        *self.handler.borrow_mut() = Some(Box::new(h));
    }

    /// Serve requests whose first byte is `tag` with `h` (which sees the rest of the
    /// payload), beside the thread's other services; replaces an earlier handler of the
    /// same tag. Call it on the worker's thread, outside a handler.
    ///
    /// Panics when the thread has a plain handler ([`Rpc::set_handler`]): its requests
    /// carry no tag, so the two cannot share a thread.
    pub fn add_service(&self, tag: u8, h: impl Handler + 'static) {
        let mut slot = self.handler.borrow_mut();
        let services = slot
            .get_or_insert_with(|| Box::new(Services::default()))
            .as_services()
            .unwrap_or_else(|| {
                panic!(
                    "{}: add_service(tag {tag}) on a thread with a plain handler; install every service with add_service",
                    self.addr()
                )
            });
        services.routes.retain(|(t, _)| *t != tag);
        services.routes.push((tag, Box::new(h)));
    }

    /// Counters so far.
    pub fn stats(&self) -> RpcStats {
        self.stats.get()
    }

    fn count(&self, f: impl FnOnce(&mut RpcStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Call `to` with `req` and wait for its reply.
    pub async fn call(&self, to: WorkerAddr, req: &[u8]) -> Result<Vec<u8>, RpcError> {
        let id = self.start(to, req)?;
        Call { rpc: self, id }.await
    }

    /// Call every `(to, req)` at once (requests to one peer share a message) and wait for
    /// all; results in the same order.
    pub async fn call_many(&self, reqs: &[(WorkerAddr, &[u8])]) -> Vec<Result<Vec<u8>, RpcError>> {
        let mut calls = Vec::with_capacity(reqs.len());
        for (to, req) in reqs {
            calls.push(self.start(*to, req).map(|id| Call { rpc: self, id }));
        }
        let mut out = Vec::with_capacity(reqs.len());
        for c in calls {
            out.push(match c {
                Ok(call) => call.await,
                Err(e) => Err(e),
            });
        }
        out
    }

    /// Send a one-way message to `to`.
    pub fn send(&self, to: WorkerAddr, msg: &[u8]) -> Result<(), RpcError> {
        self.mailbox.push(
            to,
            Entry {
                kind: EntryKind::OneWay,
                retry: false,
                id: 0,
                payload: msg,
            },
        )?;
        self.count(|s| s.one_way += 1);
        Ok(())
    }

    /// Send a one-way message to every other worker of the cluster.
    pub fn broadcast(&self, msg: &[u8]) -> Result<(), RpcError> {
        let me = self.addr();
        for i in 0..self.workers().len() {
            let to = self.workers()[i];
            if to != me {
                self.send(to, msg)?;
            }
        }
        Ok(())
    }

    /// Answer a request a handler deferred ([`Handled::Later`]).
    pub fn reply(&self, to: ReplyTo, payload: &[u8]) -> Result<(), RpcError> {
        self.mailbox.push(
            to.to,
            Entry {
                kind: EntryKind::Reply,
                retry: false,
                id: to.id,
                payload,
            },
        )?;
        Ok(())
    }

    fn start(&self, to: WorkerAddr, req: &[u8]) -> Result<u64, RpcError> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        self.push_request(to, id, req, false)?;
        self.pending.borrow_mut().insert(
            id,
            Pending {
                to,
                payload: req.to_vec(),
                deadline_ns: self.deadline(),
                attempts: 1,
                outcome: None,
                waker: None,
            },
        );
        self.count(|s| s.calls += 1);
        Ok(id)
    }

    fn deadline(&self) -> u64 {
        self.clock
            .now_ns()
            .saturating_add(self.config.timeout.as_nanos() as u64)
    }

    fn push_request(&self, to: WorkerAddr, id: u64, req: &[u8], retry: bool) -> Result<(), MsgError> {
        self.mailbox.push(
            to,
            Entry {
                kind: EntryKind::Request,
                retry,
                id,
                payload: req,
            },
        )
    }

    /// Send a failed attempt again, or settle it with `err` when out of retries.
    fn retry_or_fail(&self, p: &mut Pending, id: u64, err: impl FnOnce(u32) -> RpcError) {
        if p.attempts <= self.config.retries {
            p.attempts += 1;
            p.deadline_ns = self.deadline();
            self.count(|s| s.retries += 1);
            if let Err(e) = self.push_request(p.to, id, &p.payload, true) {
                p.settle(Err(e.into()));
            }
        } else {
            self.count(|s| s.failed += 1);
            p.settle(Err(err(p.attempts)));
        }
    }

    /// Flush what this pass queued, handle what arrived, enforce deadlines. Called by the
    /// executor after every pass over its coordinators.
    pub fn progress(&self) {
        self.mailbox.flush();
        let drained = self.mailbox.drain(&mut |ev| self.on_event(ev));
        if drained > 0 {
            self.count(|s| s.busy_drains += 1);
        }
        self.expire();
        // Replies the handler produced leave now, not a pass later.
        self.mailbox.flush();
    }

    fn on_event(&self, ev: Event<'_>) {
        match ev {
            Event::Entry { from, entry } => match entry.kind {
                EntryKind::Reply => {
                    let mut pending = self.pending.borrow_mut();
                    match pending.get_mut(&entry.id) {
                        Some(p) if p.to == from && p.outcome.is_none() => p.settle(Ok(entry.payload.to_vec())),
                        _ => self.count(|s| s.stray_replies += 1),
                    }
                }
                EntryKind::Request | EntryKind::OneWay => self.handle(from, entry),
            },
            Event::PeerLost { peer, why } => {
                let mut pending = self.pending.borrow_mut();
                for (id, p) in pending.iter_mut() {
                    if p.to == peer && p.outcome.is_none() {
                        self.retry_or_fail(p, *id, |_| RpcError::PeerLost {
                            to: peer,
                            why: why.clone(),
                        });
                    }
                }
            }
        }
    }

    fn handle(&self, from: WorkerAddr, entry: Entry<'_>) {
        // Taken out while it runs, so it may call back into this endpoint.
        let Some(mut h) = self.handler.borrow_mut().take() else {
            self.count(|s| s.unhandled += 1);
            return;
        };
        let one_way = entry.kind == EntryKind::OneWay;
        let req = Request {
            from,
            id: entry.id,
            retry: entry.retry,
            one_way,
            payload: entry.payload,
        };
        let mut buf = std::mem::take(&mut *self.reply_buf.borrow_mut());
        buf.clear();
        let handled = h.handle(self, req, &mut buf);
        self.count(|s| s.handled += 1);
        if handled == Handled::Reply && !one_way {
            // A reply to a peer that is gone is lost like any message; the caller retries.
            let _ = self.reply(req.reply_to(), &buf);
        }
        *self.reply_buf.borrow_mut() = buf;
        let mut slot = self.handler.borrow_mut();
        if slot.is_none() {
            *slot = Some(h);
        }
    }

    fn expire(&self) {
        let mut pending = self.pending.borrow_mut();
        if pending.is_empty() {
            return;
        }
        let now = self.clock.now_ns();
        let timeout = self.config.timeout;
        for (id, p) in pending.iter_mut() {
            if p.outcome.is_none() && now >= p.deadline_ns {
                let to = p.to;
                self.retry_or_fail(p, *id, |attempts| RpcError::Timeout { to, attempts, timeout });
            }
        }
    }

    /// Calls waiting for a reply.
    pub fn in_flight(&self) -> usize {
        self.pending.borrow().values().filter(|p| p.outcome.is_none()).count()
    }
}

/// Something an executor drives after every pass over its tasks.
pub trait Progress {
    /// Make progress without blocking.
    fn progress(&self);
}

impl Progress for Rpc {
    fn progress(&self) {
        Rpc::progress(self)
    }
}

impl<T: Progress + ?Sized> Progress for Rc<T> {
    fn progress(&self) {
        (**self).progress()
    }
}

/// A call in flight; dropping it forgets the call (a late reply is then a stray).
struct Call<'a> {
    rpc: &'a Rpc,
    id: u64,
}

impl Future for Call<'_> {
    type Output = Result<Vec<u8>, RpcError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut pending = self.rpc.pending.borrow_mut();
        let p = pending
            .get_mut(&self.id)
            .expect("a call's entry lives until it is dropped");
        match p.outcome.take() {
            Some(r) => {
                pending.remove(&self.id);
                Poll::Ready(r)
            }
            None => {
                // Woken when the reply, a failure or the deadline settles the call (the
                // executor's pass drives `progress`).
                match &p.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => p.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.rpc.pending.borrow_mut().remove(&self.id);
    }
}

#[cfg(test)]
pub(crate) mod tests;
