//! The transport abstraction: how a coordinator's posts reach memory nodes.

use std::task::{Context, Poll};

use crate::{Post, Result};

/// What [`Transport::submit`] did with a post.
#[derive(Debug)]
pub enum Submitted {
    /// The post already completed (the `mem` transport runs it in place).
    Done(Result<()>),
    /// The post is in flight; poll it with this ticket.
    Pending(Ticket),
}

/// Names an in-flight post of one transport.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(pub u64);

/// One worker thread's connections to every memory node (its queue pairs).
///
/// A transport is used by the coordinators of one worker thread only, from that thread's
/// executor, so it needs no locks between them. Implementations: `mem` (here), `tcp`,
/// `sim` and `rdma` (their own crates). Nothing above this trait may assume which one
/// it talks to.
pub trait Transport {
    /// Number of memory nodes reachable.
    fn mn_count(&self) -> usize;

    /// Hand the post's batches to the NIC: one doorbell batch per memory node, in the
    /// order the ops were added, batches of different nodes in parallel. Until the poll
    /// that completes it, the post's contents belong to the transport (it may have
    /// swapped them out: read nothing from the post in between); on completion it holds
    /// its ops and results again.
    fn submit(&self, post: &mut Post) -> Submitted;

    /// Poll an in-flight post. On `Ready(Ok)`, READ data and atomic results are in
    /// `post`. A lost connection completes every op in flight with an error.
    fn poll(&self, ticket: Ticket, post: &mut Post, cx: &mut Context<'_>) -> Poll<Result<()>>;

    /// Submit a post nobody will wait for (background release). Its results are
    /// discarded; the transport keeps whatever it needs, so `post` may be reused at once.
    fn submit_detached(&self, post: &mut Post);

    /// Let the transport make progress (poll sockets, advance the NIC model). Called by
    /// executors when every coordinator is waiting.
    fn progress(&self) {}

    /// Like [`Transport::progress`], but never sleeps waiting for the network: for an
    /// executor that must also poll something else each pass (CN↔CN messages).
    fn progress_nowait(&self) {
        self.progress()
    }

    /// How many times this endpoint found a memory node restarted (it reconnected and the
    /// node's region key had changed). When it grows, the node's memory may have been
    /// reset or reloaded: cached remote addresses and table metadata must be refetched.
    fn restarts(&self) -> u64 {
        0
    }
}

/// A cluster's network: hands each worker thread its own [`Transport`].
pub trait Fabric: Send + Sync {
    /// Short name for results (`mem`, `tcp`, `sim`, `rdma`).
    fn name(&self) -> &'static str;
    /// Number of memory nodes.
    fn mn_count(&self) -> usize;
    /// Connect one worker thread (called on that thread).
    fn endpoint(&self, worker: u32) -> Result<Box<dyn Transport>>;
}
