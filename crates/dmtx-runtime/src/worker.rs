//! Compute nodes and their worker threads.

use std::rc::Rc;
use std::sync::Arc;

use dmtx_memnode::Control;
use dmtx_store::Catalog;
use dmtx_verbs::msg::MsgFabric;
use dmtx_verbs::{Fabric, Transport};

use crate::rpc::{Rpc, RpcConfig};
use crate::{AddrCache, Clock, CoordCtx, CoordId, Coordinator, LocalExecutor, Protocol, Result, SharedAddrCache};

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

    /// A coordinator running `proto` as coroutine `coroutine` of this thread.
    pub fn coordinator<P: Protocol>(&self, proto: &Arc<P>, coroutine: u16) -> Result<Coordinator<P>> {
        let ctx = self.ctx(coroutine);
        let state = proto.coord_state(&ctx, self.cn.control.as_ref())?;
        Ok(Coordinator::new(ctx, Arc::clone(proto), state))
    }
}
