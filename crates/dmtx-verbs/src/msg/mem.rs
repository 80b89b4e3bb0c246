//! The `mem` messaging transport: in-process queues between worker threads.
//!
//! Each worker has an inbox (a mutex-protected queue of whole messages). A flush moves
//! each destination's buffered entries into its inbox as one message, so FIFO per pair
//! follows from one queue per receiver. [`MemMsgNet::set_down`] stands in for a crashed
//! compute node: messages to it vanish and their senders see [`Event::PeerLost`].

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{check_size, decode_entries, Entry, Event, Mailbox, MsgError, MsgFabric, Outbox, WorkerAddr};

/// Every worker's inbox of an in-process cluster of compute nodes.
#[derive(Debug)]
pub struct MemMsgNet {
    workers: Vec<WorkerAddr>,
    inboxes: Vec<Inbox>,
    down: Vec<AtomicBool>,
    threads: u16,
}

#[derive(Debug, Default)]
struct Inbox {
    queue: Mutex<VecDeque<(WorkerAddr, Vec<u8>)>>,
}

impl MemMsgNet {
    /// A network of `cns` compute nodes with `threads` workers each.
    pub fn new(cns: u16, threads: u16) -> Arc<Self> {
        let workers: Vec<WorkerAddr> = (0..cns)
            .flat_map(|cn| (0..threads).map(move |t| WorkerAddr::new(cn, t)))
            .collect();
        Arc::new(Self {
            inboxes: workers.iter().map(|_| Inbox::default()).collect(),
            down: (0..cns).map(|_| AtomicBool::new(false)).collect(),
            workers,
            threads,
        })
    }

    /// Compute node `cn`'s view, which hands its threads their mailboxes.
    pub fn fabric(self: &Arc<Self>, cn: u16) -> MemMsgFabric {
        assert!(usize::from(cn) < self.down.len(), "cn{cn} is not in this network");
        MemMsgFabric {
            net: Arc::clone(self),
            cn,
        }
    }

    /// Crash (or revive) compute node `cn`: while down, messages to it are dropped, its
    /// inboxes are emptied, and senders get [`Event::PeerLost`].
    pub fn set_down(&self, cn: u16, down: bool) {
        self.down[usize::from(cn)].store(down, Ordering::SeqCst);
        if down {
            for (i, w) in self.workers.iter().enumerate() {
                if w.cn == cn {
                    self.inboxes[i].queue.lock().unwrap().clear();
                }
            }
        }
    }

    fn index(&self, a: WorkerAddr) -> Option<usize> {
        (usize::from(a.cn) < self.down.len() && a.thread < self.threads)
            .then(|| usize::from(a.cn) * usize::from(self.threads) + usize::from(a.thread))
    }
}

/// One compute node's view of a [`MemMsgNet`].
#[derive(Clone, Debug)]
pub struct MemMsgFabric {
    net: Arc<MemMsgNet>,
    cn: u16,
}

impl MsgFabric for MemMsgFabric {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn workers(&self) -> Vec<WorkerAddr> {
        self.net.workers.clone()
    }

    fn mailbox(&self, thread: u16) -> Result<Box<dyn Mailbox>, MsgError> {
        let addr = WorkerAddr::new(self.cn, thread);
        let index = self.net.index(addr).ok_or(MsgError::UnknownPeer { to: addr })?;
        Ok(Box::new(MemMailbox {
            net: Arc::clone(&self.net),
            addr,
            index,
            out: RefCell::new(Outbox::new()),
            arrived: RefCell::new(VecDeque::new()),
            lost: RefCell::new(Vec::new()),
        }))
    }
}

/// A worker's mailbox on a [`MemMsgNet`].
#[derive(Debug)]
pub struct MemMailbox {
    net: Arc<MemMsgNet>,
    addr: WorkerAddr,
    index: usize,
    /// Per destination, the entries queued since the last flush.
    out: RefCell<Outbox>,
    /// Messages taken from the inbox, not yet handed over.
    arrived: RefCell<VecDeque<(WorkerAddr, Vec<u8>)>>,
    lost: RefCell<Vec<(WorkerAddr, String)>>,
}

impl Mailbox for MemMailbox {
    fn addr(&self) -> WorkerAddr {
        self.addr
    }

    fn workers(&self) -> &[WorkerAddr] {
        &self.net.workers
    }

    fn push(&self, to: WorkerAddr, entry: Entry<'_>) -> Result<(), MsgError> {
        check_size(&entry)?;
        let i = self.net.index(to).ok_or(MsgError::UnknownPeer { to })?;
        self.out.borrow_mut().push(i, &entry);
        Ok(())
    }

    fn flush(&self) {
        self.out.borrow_mut().flush(|i, msg, _| {
            let to = self.net.workers[i];
            if self.net.down[usize::from(to.cn)].load(Ordering::SeqCst) {
                self.lost.borrow_mut().push((to, format!("{to} is down")));
                return;
            }
            self.net.inboxes[i].queue.lock().unwrap().push_back((self.addr, msg));
        });
    }

    fn drain(&self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let mut n = 0;
        let lost = std::mem::take(&mut *self.lost.borrow_mut());
        for (peer, why) in lost {
            f(Event::PeerLost { peer, why });
            n += 1;
        }
        let mut arrived = self.arrived.borrow_mut();
        {
            let mut q = self.net.inboxes[self.index].queue.lock().unwrap();
            if q.is_empty() && arrived.is_empty() {
                return n;
            }
            arrived.extend(q.drain(..));
        }
        while let Some((from, msg)) = arrived.pop_front() {
            match decode_entries(&msg, &mut |entry| f(Event::Entry { from, entry })) {
                Ok(k) => n += k,
                Err(e) => {
                    f(Event::PeerLost {
                        peer: from,
                        why: format!("malformed message: {e}"),
                    });
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        let net = MemMsgNet::new(2, 2);
        let fabrics: Vec<Arc<dyn MsgFabric>> = (0..2).map(|cn| Arc::new(net.fabric(cn)) as _).collect();
        crate::msg::conformance::run_all(&fabrics);
    }

    #[test]
    fn a_down_node_loses_messages_and_its_senders_hear_of_it() {
        let net = MemMsgNet::new(2, 1);
        let a = net.fabric(0).mailbox(0).unwrap();
        let b = net.fabric(1).mailbox(0).unwrap();
        net.set_down(1, true);
        let e = Entry {
            kind: crate::msg::EntryKind::OneWay,
            retry: false,
            id: 1,
            payload: b"x",
        };
        a.push(b.addr(), e).unwrap();
        a.flush();
        let mut lost = Vec::new();
        a.drain(&mut |ev| {
            if let Event::PeerLost { peer, .. } = ev {
                lost.push(peer)
            }
        });
        assert_eq!(lost, [b.addr()]);
        net.set_down(1, false);
        assert_eq!(b.drain(&mut |_| panic!("nothing was delivered")), 0);
    }
}
