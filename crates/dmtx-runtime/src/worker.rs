//! Compute nodes and their worker threads.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use dmtx_memnode::Control;
use dmtx_store::Catalog;
use dmtx_verbs::msg::MsgFabric;
use dmtx_verbs::{Fabric, Transport};

use crate::rpc::{Rpc, RpcConfig};
use crate::{
    AddrCache, Clock, CoordCtx, CoordId, Coordinator, LocalExecutor, Protocol, Result, ServiceStop, ServiceTask,
    SharedAddrCache,
};

/// Protocol states of one node (one thread), one per protocol type: a run has one
/// protocol, so the list has one entry, searched once per coordinator setup.
type CnStates = Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>;

/// A compute node: its view of the cluster and the caches its threads share.
#[derive(Clone)]
pub struct Cn {
    /// Compute-node id.
    pub id: u16,
    /// How its threads reach memory nodes.
    pub fabric: Arc<dyn Fabric>,
    /// The memory pool's init-time interface.
    pub control: Arc<dyn Control>,
    /// Table metadata fetched at connect.
    pub catalog: Arc<Catalog>,
    /// The CN-wide level of the address cache.
    pub cache: Arc<SharedAddrCache>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// CN↔CN messaging, when the cluster has it ([`Cn::with_messaging`]).
    pub msg: Option<Arc<dyn MsgFabric>>,
    /// Limits of the threads' calls.
    pub rpc_config: RpcConfig,
    /// Gives each worker thread its [`crate::Probe`] ([`Cn::with_probes`]).
    pub probes: crate::probe::Probes,
    /// The protocol's [`Protocol::CnState`] of this node, built by its first
    /// coordinator's setup ([`Worker::cn_state`]); clones of the `Cn` share it.
    states: Arc<CnStates>,
}

impl Cn {
    /// Join the cluster: fetch every table's metadata (FORD §4.1 ❷).
    pub fn connect(id: u16, fabric: Arc<dyn Fabric>, control: Arc<dyn Control>, clock: Arc<dyn Clock>) -> Result<Self> {
        let catalog = Arc::new(Catalog::fetch(control.as_ref())?);
        Ok(Self {
            id,
            fabric,
            control,
            catalog,
            cache: Arc::new(SharedAddrCache::new()),
            clock,
            msg: None,
            rpc_config: RpcConfig::default(),
            probes: None,
            states: Arc::default(),
        })
    }

    /// Give the node's threads CN↔CN messaging: each worker gets an [`Rpc`] on its
    /// mailbox of `fabric`, driven by its executor.
    pub fn with_messaging(mut self, fabric: Arc<dyn MsgFabric>, config: RpcConfig) -> Self {
        self.msg = Some(fabric);
        self.rpc_config = config;
        self
    }

    /// Give each worker thread a probe from `source` (the simulator's CPU model and
    /// fault points).
    pub fn with_probes(mut self, source: Arc<dyn crate::ProbeSource>) -> Self {
        self.probes = Some(source);
        self
    }

    /// Set up worker thread `thread`; call this on that thread.
    pub fn worker(&self, thread: u16) -> Result<Worker> {
        let transport: Rc<dyn Transport> = Rc::from(self.fabric.endpoint(thread as u32)?);
        let rpc = match &self.msg {
            Some(m) => Some(Rc::new(Rpc::new(
                m.mailbox(thread)?,
                Arc::clone(&self.clock),
                self.rpc_config,
            ))),
            None => None,
        };
        Ok(Worker {
            cn: self.clone(),
            thread,
            transport,
            cache: Rc::new(AddrCache::new(Arc::clone(&self.cache))),
            rpc,
            probe: self.probes.as_ref().map(|p| p.probe(thread)),
            states: RefCell::default(),
        })
    }
}

/// One worker thread of a compute node: its transport and its level of the cache.
pub struct Worker {
    cn: Cn,
    thread: u16,
    transport: Rc<dyn Transport>,
    cache: Rc<AddrCache>,
    rpc: Option<Rc<Rpc>>,
    probe: Option<Rc<dyn crate::Probe>>,
    /// The protocol's [`Protocol::ThreadState`] of this thread ([`Worker::thread_state`]).
    states: RefCell<Vec<(TypeId, Rc<dyn Any>)>>,
}

impl Worker {
    /// The thread's transport (give it to the executor for progress).
    pub fn transport(&self) -> &Rc<dyn Transport> {
        &self.transport
    }

    /// The thread's messaging endpoint, when the node has messaging.
    pub fn rpc(&self) -> Option<&Rc<Rpc>> {
        self.rpc.as_ref()
    }

    /// An executor for this thread's coordinators that also drives its messaging, so
    /// requests are handled between coordinators. Run it with [`Worker::transport`].
    pub fn executor<'a>(&self) -> LocalExecutor<'a> {
        let mut ex = LocalExecutor::new();
        if let Some(r) = &self.rpc {
            ex.add_poller(Rc::clone(r) as Rc<dyn crate::rpc::Progress>);
        }
        ex
    }

    /// The worker thread's id within its compute node.
    pub fn thread(&self) -> u16 {
        self.thread
    }

    /// The compute node.
    pub fn cn(&self) -> &Cn {
        &self.cn
    }

    /// A bare context for coroutine `coroutine` (setup work, scans).
    pub fn ctx(&self, coroutine: u16) -> CoordCtx {
        let mut ctx = CoordCtx::new(
            CoordId {
                cn: self.cn.id,
                thread: self.thread,
                coroutine,
            },
            Rc::clone(&self.transport),
            Arc::clone(&self.cn.clock),
            Arc::clone(&self.cn.catalog),
            Rc::clone(&self.cache),
        );
        ctx.rpc = self.rpc.clone();
        ctx.control = Some(Arc::clone(&self.cn.control));
        ctx.probe = self.probe.clone();
        ctx
    }

    /// A coordinator running `proto` as coroutine `coroutine` of this thread, holding the
    /// node's and the thread's protocol state (built here for the first one).
    pub fn coordinator<P: Protocol>(&self, proto: &Arc<P>, coroutine: u16) -> Result<Coordinator<P>> {
        let cn_state = self.cn_state(proto.as_ref())?;
        let thread_state = self.thread_state(proto.as_ref())?;
        let ctx = self.ctx(coroutine);
        let state = proto.coord_state(&ctx, self.cn.control.as_ref())?;
        let mut coord = Coordinator::new(ctx, Arc::clone(proto), state);
        coord.cn_state = cn_state;
        coord.thread_state = thread_state;
        Ok(coord)
    }

    /// The compute node's state for `proto` ([`Protocol::cn_state`]), built on the first
    /// call on any of the node's threads and shared from then on.
    pub fn cn_state<P: Protocol>(&self, proto: &P) -> Result<Arc<P::CnState>> {
        let mut states = self.cn.states.lock().unwrap_or_else(|e| e.into_inner());
        let any = match states.iter().find(|(t, _)| *t == TypeId::of::<P>()) {
            Some((_, s)) => Arc::clone(s),
            None => {
                let s: Arc<dyn Any + Send + Sync> = Arc::new(proto.cn_state(&self.cn)?);
                states.push((TypeId::of::<P>(), Arc::clone(&s)));
                s
            }
        };
        Ok(any.downcast().expect("keyed by the protocol's type"))
    }

    /// This thread's state for `proto` ([`Protocol::thread_state`]), built on the first
    /// call and shared by the thread's coordinators and services.
    pub fn thread_state<P: Protocol>(&self, proto: &P) -> Result<Rc<P::ThreadState>> {
        let found = self
            .states
            .borrow()
            .iter()
            .find(|(t, _)| *t == TypeId::of::<P>())
            .map(|(_, s)| Rc::clone(s));
        let any = match found {
            Some(s) => s,
            None => {
                let cn = self.cn_state(proto)?;
                // Not borrowed meanwhile: the hook may ask this worker for its state.
                let s: Rc<dyn Any> = Rc::new(proto.thread_state(&cn, self)?);
                self.states.borrow_mut().push((TypeId::of::<P>(), Rc::clone(&s)));
                s
            }
        };
        Ok(any.downcast().expect("keyed by the protocol's type"))
    }

    /// This thread's service tasks for `proto` ([`Protocol::services`]), each to end
    /// once `stop` is raised.
    pub fn services<P: Protocol>(&self, proto: &P, stop: &ServiceStop) -> Result<Vec<ServiceTask>> {
        let cn = self.cn_state(proto)?;
        let thread = self.thread_state(proto)?;
        Ok(proto.services(&cn, &thread, self, stop))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering};

    use dmtx_store::SlotLayout;

    use super::*;
    use crate::{Abort, Isolation, KnobError, KnobSpec, Knobs, RealClock, Txn};

    struct NoLayout;

    impl SlotLayout for NoLayout {
        fn slot_bytes(&self, value_bytes: u32) -> u32 {
            value_bytes
        }
        fn encode(&self, _: u32, _: u64, _: &[u8], _: &mut [u8]) {}
        fn key(&self, _: &[u8]) -> Option<u64> {
            None
        }
        fn value<'a>(&self, slot: &'a [u8], _: u32) -> &'a [u8] {
            slot
        }
    }

    /// Counts its state hooks; a node's state names the node, a thread's state the
    /// thread, and counts the coordinators that reached it.
    #[derive(Default)]
    struct Stateful {
        cn_calls: AtomicU32,
        thread_calls: AtomicU32,
    }

    #[derive(Default)]
    struct NodeState {
        cn: u16,
    }

    #[derive(Default)]
    struct ThreadState {
        thread: u16,
        coordinators: Cell<u32>,
    }

    impl Protocol for Stateful {
        type CoordState = ();
        type ObjState = ();
        type CnState = NodeState;
        type ThreadState = ThreadState;
        const NAME: &'static str = "stateful";
        const ABOUT: &'static str = "test protocol";
        const KNOBS: &'static [KnobSpec] = &[];

        fn from_knobs(_: &Knobs) -> std::result::Result<Self, KnobError> {
            Ok(Self::default())
        }
        fn isolation(&self) -> Isolation {
            Isolation::Serializable
        }
        fn layout(&self) -> &dyn SlotLayout {
            &NoLayout
        }
        fn coord_state(&self, _: &CoordCtx, _: &dyn Control) -> Result<()> {
            Ok(())
        }
        fn cn_state(&self, cn: &Cn) -> Result<NodeState> {
            self.cn_calls.fetch_add(1, Ordering::Relaxed);
            Ok(NodeState { cn: cn.id })
        }
        fn thread_state(&self, cn: &Arc<NodeState>, worker: &Worker) -> Result<ThreadState> {
            assert_eq!(cn.cn, worker.cn().id, "the thread's own node's state");
            self.thread_calls.fetch_add(1, Ordering::Relaxed);
            Ok(ThreadState {
                thread: worker.thread(),
                coordinators: Cell::new(0),
            })
        }
        async fn execute(_: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            Ok(())
        }
        async fn commit(_: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
            Ok(())
        }
        fn abort(_: &mut Txn<'_, Self>) {}
    }

    /// Goal: the node's state is built once per node and shared by every coordinator of
    /// its threads (on any OS thread); the thread's state once per worker and shared by
    /// that worker's coordinators only; two nodes have two states. Method: two nodes,
    /// two workers on node 0 (on two OS threads) and one on node 1, two coordinators
    /// each.
    #[test]
    fn state_is_built_once_per_node_and_per_thread_and_shared() {
        let cluster = Arc::new(dmtx_memnode::LocalCluster::new(1, 1 << 16));
        let node = |id| {
            Cn::connect(
                id,
                Arc::new(cluster.fabric().clone()),
                Arc::clone(&cluster) as Arc<dyn Control>,
                Arc::new(RealClock::new()),
            )
            .unwrap()
        };
        let (n0, n1) = (node(0), node(1));
        let proto = Arc::new(Stateful::default());
        // Each worker on its own OS thread, as the driver runs them; the node state's
        // address comes back.
        let run = |cn: &Cn, thread: u16| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    let w = cn.worker(thread).unwrap();
                    let a = w.coordinator(&proto, 0).unwrap();
                    let b = w.coordinator(&proto, 1).unwrap();
                    assert!(Rc::ptr_eq(&a.thread_state, &b.thread_state), "one per thread");
                    assert!(Arc::ptr_eq(&a.cn_state, &b.cn_state));
                    assert_eq!(a.thread_state.thread, thread);
                    a.thread_state.coordinators.set(a.thread_state.coordinators.get() + 2);
                    assert_eq!(b.thread_state.coordinators.get(), 2, "shared, not copied");
                    assert_eq!(a.cn_state.cn, cn.id);
                    Arc::as_ptr(&a.cn_state) as usize
                })
                .join()
                .unwrap()
            })
        };
        let (s00, s01, s10) = (run(&n0, 0), run(&n0, 1), run(&n1, 0));
        assert_eq!(s00, s01, "threads of one node share its state");
        assert_ne!(s00, s10, "each node has its own");
        assert_eq!(proto.cn_calls.load(Ordering::Relaxed), 2, "once per node");
        assert_eq!(proto.thread_calls.load(Ordering::Relaxed), 3, "once per worker");
    }
}
