//! [`RemoteControl`]: the init-time [`Control`] interface over wire v2.

use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;

use dmtx_memnode::server::wire::{self, ControlReply, ControlReq, Kind};
use dmtx_memnode::{Control, ControlError, TableMeta};
use dmtx_verbs::MnId;

use crate::transport::dense_addrs;
use crate::{conn, NetError, Result, TcpConfig};

/// Largest LOAD sent in one frame; bigger loads are split.
pub const LOAD_CHUNK_BYTES: usize = 4 << 20;

/// The memory pool's control interface, spoken over one blocking connection per node.
///
/// Through the [`Control`] trait, a transport failure becomes
/// [`ControlError::Unreachable`](dmtx_memnode::ControlError::Unreachable) naming the
/// node; the `try_*` methods return the full [`NetError`].
#[derive(Debug)]
pub struct RemoteControl {
    nodes: Vec<Mutex<CtlConn>>,
}

#[derive(Debug)]
struct CtlConn {
    mn: MnId,
    addr: SocketAddr,
    config: TcpConfig,
    stream: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
    next_req: u64,
    broken: Option<String>,
}

impl CtlConn {
    fn call(&mut self, req: &ControlReq<'_>) -> Result<ControlReply> {
        let mn = self.mn;
        if let Some(why) = &self.broken {
            // Reopen (the node may have restarted); control calls are rare, so no backoff.
            match conn::open(mn, self.addr, &self.config, self.config.op_deadline) {
                Ok(h) => {
                    self.stream = h.stream;
                    self.broken = None;
                }
                Err(e) => {
                    return Err(NetError::Lost {
                        mn,
                        why: format!("{why}; reconnecting: {e}"),
                    })
                }
            }
        }
        let id = self.next_req;
        self.next_req += 1;
        self.out.clear();
        let s = wire::begin_frame(&mut self.out, Kind::Control, id);
        req.encode(&mut self.out);
        wire::end_frame(&mut self.out, s);
        let r = self.exchange(id);
        if let Err(e) = &r {
            if !matches!(e, NetError::Refused { code, .. } if *code == wire::ErrorCode::BAD_REQUEST.0) {
                self.broken = Some(e.to_string());
            }
        }
        r
    }

    fn exchange(&mut self, id: u64) -> Result<ControlReply> {
        use std::io::Write;
        let mn = self.mn;
        self.stream
            .write_all(&self.out)
            .map_err(|e| NetError::Lost { mn, why: e.to_string() })?;
        let h = conn::read_frame(mn, &mut self.stream, &mut self.buf)?;
        if h.kind != Kind::ControlResult {
            return Err(conn::unexpected(mn, h.kind, &self.buf));
        }
        if h.request_id != id {
            return Err(NetError::Protocol {
                mn,
                why: format!("reply {} to request {id}", h.request_id),
            });
        }
        ControlReply::decode(&self.buf).map_err(|e| NetError::Protocol { mn, why: e.to_string() })
    }
}

fn unexpected_reply(mn: MnId, r: ControlReply) -> NetError {
    match r {
        ControlReply::Failed(e) => NetError::Control(e),
        r => NetError::Protocol {
            mn,
            why: format!("unexpected control reply {r:?}"),
        },
    }
}

impl RemoteControl {
    /// Connect to every node (`mn0..mnN`, any order) and shake hands. Calls wait at most
    /// `config.op_deadline` for a reply.
    pub fn connect(nodes: Vec<(MnId, SocketAddr)>, config: &TcpConfig) -> Result<Self> {
        let addrs = dense_addrs(nodes)?;
        let mut conns = Vec::with_capacity(addrs.len());
        for (i, addr) in addrs.into_iter().enumerate() {
            let mn = MnId(i as u16);
            let h = conn::open(mn, addr, config, config.op_deadline)?;
            conns.push(Mutex::new(CtlConn {
                mn,
                addr,
                config: config.clone(),
                stream: h.stream,
                buf: Vec::new(),
                out: Vec::new(),
                next_req: 1,
                broken: None,
            }));
        }
        Ok(Self { nodes: conns })
    }

    fn node(&self, mn: MnId) -> Result<&Mutex<CtlConn>> {
        self.nodes
            .get(mn.index())
            .ok_or(NetError::Control(ControlError::UnknownNode {
                mn,
                mn_count: self.nodes.len(),
            }))
    }

    fn call(&self, mn: MnId, req: &ControlReq<'_>) -> Result<ControlReply> {
        self.node(mn)?.lock().unwrap_or_else(|p| p.into_inner()).call(req)
    }

    /// [`Control::alloc`], with transport errors as values.
    pub fn try_alloc(&self, mn: MnId, bytes: u64, align: u64) -> Result<u64> {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        match self.call(mn, &ControlReq::Alloc { bytes, align })? {
            ControlReply::Offset(o) => Ok(o),
            r => Err(unexpected_reply(mn, r)),
        }
    }

    /// [`Control::load`], with transport errors as values. Splits large loads.
    pub fn try_load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> Result<()> {
        let mut at = offset;
        for chunk in bytes.chunks(LOAD_CHUNK_BYTES) {
            match self.call(
                mn,
                &ControlReq::Load {
                    offset: at,
                    data: chunk,
                },
            )? {
                ControlReply::Done => {}
                ControlReply::Failed(ControlError::OutOfRange { region_bytes, .. }) => {
                    // Name the whole load, not the chunk.
                    return Err(NetError::Control(ControlError::OutOfRange {
                        mn,
                        offset,
                        len: bytes.len() as u64,
                        region_bytes,
                    }));
                }
                r => return Err(unexpected_reply(mn, r)),
            }
            at += chunk.len() as u64;
        }
        Ok(())
    }

    /// [`Control::put_table`], with transport errors as values.
    pub fn try_put_table(&self, mn: MnId, meta: &TableMeta) -> Result<()> {
        match self.call(mn, &ControlReq::PutTable(meta.clone()))? {
            ControlReply::Done => Ok(()),
            r => Err(unexpected_reply(mn, r)),
        }
    }

    /// [`Control::put_named`], with transport errors as values.
    pub fn try_put_named(&self, mn: MnId, name: &str, value: &[u8]) -> Result<()> {
        // Checked here too, so an entry the node would refuse is not sent at all.
        dmtx_memnode::check_named(mn, name, value)?;
        let req = ControlReq::PutNamed {
            name: name.to_owned(),
            value,
        };
        match self.call(mn, &req)? {
            ControlReply::Done => Ok(()),
            r => Err(unexpected_reply(mn, r)),
        }
    }

    /// [`Control::named`], with transport errors as values.
    pub fn try_named(&self, mn: MnId, name: &str) -> Result<Vec<u8>> {
        let req = ControlReq::Named { name: name.to_owned() };
        // Read-only: made again on a fresh connection if the node restarted.
        let reply = match self.call(mn, &req) {
            Err(NetError::Lost { .. }) => self.call(mn, &req)?,
            r => r?,
        };
        match reply {
            ControlReply::Value(v) => Ok(v),
            r => Err(unexpected_reply(mn, r)),
        }
    }

    /// [`Control::names`], with transport errors as values.
    pub fn try_names(&self, mn: MnId) -> Result<Vec<String>> {
        let reply = match self.call(mn, &ControlReq::Names) {
            Err(NetError::Lost { .. }) => self.call(mn, &ControlReq::Names)?,
            r => r?,
        };
        match reply {
            ControlReply::Names(n) => Ok(n),
            r => Err(unexpected_reply(mn, r)),
        }
    }

    /// [`Control::tables`], with transport errors as values.
    pub fn try_tables(&self, mn: MnId) -> Result<Vec<TableMeta>> {
        // Read-only, so a call that finds its connection dead (the node restarted since
        // the last call) is simply made again on a fresh one.
        let reply = match self.call(mn, &ControlReq::Tables) {
            Err(NetError::Lost { .. }) => self.call(mn, &ControlReq::Tables)?,
            r => r?,
        };
        match reply {
            ControlReply::Tables(t) => Ok(t),
            r => Err(unexpected_reply(mn, r)),
        }
    }
}

impl RemoteControl {
    /// Fence compute node `client_id` out of memory node `mn` (FORD §4.8): the node cuts
    /// every connection whose HELLO named that id and refuses the id from now on. Once
    /// this returns `Ok`, no op of that client can land on `mn`. Fence a dead node on
    /// every memory node; a revoked compute node must rejoin under a new client id.
    pub fn try_revoke(&self, mn: MnId, client_id: u32) -> Result<()> {
        match self.call(mn, &ControlReq::Revoke { client_id })? {
            ControlReply::Done => Ok(()),
            r => Err(unexpected_reply(mn, r)),
        }
    }

    /// [`RemoteControl::try_revoke`], with transport failures as
    /// [`ControlError::Unreachable`].
    pub fn revoke(&self, mn: MnId, client_id: u32) -> dmtx_memnode::Result<()> {
        or_unreachable(mn, self.try_revoke(mn, client_id))
    }
}

/// Control errors pass through; transport failures become `Unreachable` for node `mn`.
fn or_unreachable<T>(mn: MnId, r: Result<T>) -> dmtx_memnode::Result<T> {
    match r {
        Ok(v) => Ok(v),
        Err(NetError::Control(e)) => Err(e),
        Err(e) => Err(dmtx_memnode::ControlError::Unreachable { mn, why: e.to_string() }),
    }
}

impl Control for RemoteControl {
    fn mn_count(&self) -> usize {
        self.nodes.len()
    }
    fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> dmtx_memnode::Result<u64> {
        or_unreachable(mn, self.try_alloc(mn, bytes, align))
    }
    fn load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> dmtx_memnode::Result<()> {
        or_unreachable(mn, self.try_load(mn, offset, bytes))
    }
    fn put_table(&self, mn: MnId, meta: &TableMeta) -> dmtx_memnode::Result<()> {
        or_unreachable(mn, self.try_put_table(mn, meta))
    }
    fn tables(&self, mn: MnId) -> dmtx_memnode::Result<Vec<TableMeta>> {
        or_unreachable(mn, self.try_tables(mn))
    }
    fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> dmtx_memnode::Result<()> {
        or_unreachable(mn, self.try_put_named(mn, name, value))
    }
    fn named(&self, mn: MnId, name: &str) -> dmtx_memnode::Result<Vec<u8>> {
        or_unreachable(mn, self.try_named(mn, name))
    }
    fn names(&self, mn: MnId) -> dmtx_memnode::Result<Vec<String>> {
        or_unreachable(mn, self.try_names(mn))
    }
}
