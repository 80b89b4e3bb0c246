//! A worker thread's TCP mailbox: its outgoing connections, its incoming ones, and the
//! queue of messages to itself.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use dmtx_memnode::server::wire::{self, Hello, HelloOk, Kind, PeerHello};
use dmtx_verbs::msg::{check_size, decode_entries, encode_entry, Entry, Event, Mailbox, MsgError, WorkerAddr};

use super::{Inner, RECONNECT_BACKOFF};
use crate::reopen::{Reopen, Step};

/// Entries of one frame stop growing past this; the next push starts a new frame.
const FRAME_SOFT_MAX: usize = 1 << 20;
/// Initial receive buffer per incoming connection.
const RECV_BYTES_INITIAL: usize = 16 << 10;

/// One worker thread's [`Mailbox`] over TCP (see the module doc of [`super`]).
#[derive(Debug)]
pub struct TcpMailbox {
    inner: Arc<Inner>,
    addr: WorkerAddr,
    out: RefCell<Vec<Out>>,
    incoming: RefCell<Vec<In>>,
    /// Entries to this worker itself, encoded back to back.
    to_self: RefCell<Vec<u8>>,
    self_spare: RefCell<Vec<u8>>,
    lost: RefCell<Vec<(WorkerAddr, String)>>,
    pollfds: RefCell<Vec<libc::pollfd>>,
}

/// The connection to one peer, by index into the cluster's worker list.
#[derive(Debug)]
struct Out {
    to: WorkerAddr,
    conn: Option<TcpStream>,
    /// Bytes not yet written: whole frames, the last one possibly still open.
    buf: Vec<u8>,
    written: usize,
    /// Start of the frame entries are being added to, if one is open.
    open_frame: Option<usize>,
    /// No connect attempt before this (after a failed one).
    retry_at: Option<Instant>,
    /// The connection being opened; entries pushed meanwhile wait in `buf`.
    opening: Option<Reopen>,
}

#[derive(Debug)]
struct In {
    from: WorkerAddr,
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl TcpMailbox {
    pub(super) fn new(inner: Arc<Inner>, addr: WorkerAddr) -> Self {
        Self {
            inner,
            addr,
            out: RefCell::new(Vec::new()),
            incoming: RefCell::new(Vec::new()),
            to_self: RefCell::new(Vec::new()),
            self_spare: RefCell::new(Vec::new()),
            lost: RefCell::new(Vec::new()),
            pollfds: RefCell::new(Vec::new()),
        }
    }

    /// Start opening the connection to `to` (nonblocking; [`Self::advance`] finishes it).
    fn open(&self, to: WorkerAddr) -> Result<Reopen, String> {
        let peer = self
            .inner
            .peers
            .iter()
            .find(|p| p.cn == to.cn)
            .ok_or_else(|| format!("{to} is not listed"))?;
        let c = &self.inner.config;
        let mut hello = Vec::new();
        let f = wire::begin_frame(&mut hello, Kind::PeerHello, 0);
        PeerHello {
            hello: Hello {
                version: wire::PROTOCOL_VERSION,
                cluster_id: c.cluster_id,
                client_id: u32::from(self.addr.cn),
                epoch: c.epoch,
                token: c.token.clone(),
            },
            from_thread: self.addr.thread,
            to_cn: to.cn,
            to_thread: to.thread,
        }
        .encode(&mut hello);
        wire::end_frame(&mut hello, f);
        Reopen::start(peer.addr, hello, c.op_deadline)
            .map_err(|e| format!("cannot connect to {to} at {}: {e}", peer.addr))
    }

    /// Work on the connection being opened to `o.to`: once the peer accepted, the
    /// entries queued meanwhile go out with the next write.
    fn advance(&self, o: &mut Out) {
        let Some(mut r) = o.opening.take() else { return };
        let to = o.to;
        let judge = |kind: Kind, payload: &[u8]| match kind {
            Kind::HelloOk => match HelloOk::decode(payload) {
                Ok(ok) if ok.node_id == to.cn => Ok(0),
                Ok(ok) => Err(format!("answers as cn{}, not cn{}", ok.node_id, to.cn)),
                Err(e) => Err(e.to_string()),
            },
            k => Err(format!(
                "refused: {}",
                crate::conn::unexpected(dmtx_verbs::MnId(to.cn), k, payload)
            )),
        };
        match r.step(self.inner.config.connect_timeout, &judge) {
            Step::Pending => o.opening = Some(r),
            Step::Done(_) => {
                o.conn = Some(r.into_stream());
                o.retry_at = None;
            }
            Step::Failed(why) => {
                o.retry_at = Some(Instant::now() + RECONNECT_BACKOFF);
                self.lose(o, format!("connecting to {to}: {why}"));
            }
        }
    }

    fn lose(&self, o: &mut Out, why: String) {
        o.conn = None;
        o.buf.clear();
        o.written = 0;
        o.open_frame = None;
        self.lost.borrow_mut().push((o.to, why));
    }

    /// Take the sockets the listener accepted for this worker.
    fn adopt_incoming(&self) {
        let mut handed = self.inner.handoff[usize::from(self.addr.thread)].lock().unwrap();
        if handed.is_empty() {
            return;
        }
        let mut incoming = self.incoming.borrow_mut();
        for (from, stream) in handed.drain(..) {
            incoming.push(In {
                from,
                stream,
                buf: vec![0; RECV_BYTES_INITIAL],
                start: 0,
                end: 0,
            });
        }
    }

    /// Read what `c` has and hand over its complete frames. `Err` means the connection is
    /// done (closed, broken, or it sent something that is not a MESSAGES frame).
    fn read_from(c: &mut In, f: &mut dyn FnMut(Event<'_>), n: &mut usize) -> Result<(), String> {
        loop {
            wire::make_room(&mut c.buf, &mut c.start, &mut c.end);
            let got = match c.stream.read(&mut c.buf[c.end..]) {
                Ok(0) => return Err(format!("{} closed the connection", c.from)),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("connection from {}: {e}", c.from)),
            };
            c.end += got;
            loop {
                let frame = wire::split_frame(&c.buf[c.start..c.end]).map_err(|e| format!("{}: {e}", c.from))?;
                let Some((h, payload, used)) = frame else { break };
                match h.kind {
                    Kind::Messages => {
                        let from = c.from;
                        *n += decode_entries(payload, &mut |entry| f(Event::Entry { from, entry }))
                            .map_err(|e| format!("{from} sent {e}"))?;
                    }
                    Kind::Ping => {}
                    k => return Err(format!("{} sent an unexpected {k:?} frame", c.from)),
                }
                c.start += used;
            }
            if c.end < c.buf.len() {
                // A short read: the socket is empty now, no need to ask again.
                return Ok(());
            }
        }
    }
}

impl Mailbox for TcpMailbox {
    fn addr(&self) -> WorkerAddr {
        self.addr
    }

    fn workers(&self) -> &[WorkerAddr] {
        &self.inner.workers
    }

    fn push(&self, to: WorkerAddr, entry: Entry<'_>) -> Result<(), MsgError> {
        check_size(&entry)?;
        if self.inner.workers.binary_search(&to).is_err() {
            return Err(MsgError::UnknownPeer { to });
        }
        if to == self.addr {
            encode_entry(&mut self.to_self.borrow_mut(), &entry);
            return Ok(());
        }
        let mut outs = self.out.borrow_mut();
        let i = match outs.iter().position(|o| o.to == to) {
            Some(i) => i,
            None => {
                outs.push(Out {
                    to,
                    conn: None,
                    buf: Vec::new(),
                    written: 0,
                    open_frame: None,
                    retry_at: None,
                    opening: None,
                });
                outs.len() - 1
            }
        };
        let o = &mut outs[i];
        if o.conn.is_none() && o.opening.is_none() {
            if o.retry_at.is_some_and(|t| Instant::now() < t) {
                self.lost
                    .borrow_mut()
                    .push((to, format!("{to} is unreachable (retrying shortly)")));
                return Ok(());
            }
            match self.open(to) {
                Ok(r) => o.opening = Some(r),
                Err(why) => {
                    o.retry_at = Some(Instant::now() + RECONNECT_BACKOFF);
                    self.lose(o, why);
                    return Ok(());
                }
            }
        }
        if o.open_frame.is_some_and(|s| o.buf.len() - s > FRAME_SOFT_MAX) {
            wire::end_frame(&mut o.buf, o.open_frame.take().unwrap());
        }
        if o.open_frame.is_none() {
            o.open_frame = Some(wire::begin_frame(&mut o.buf, Kind::Messages, 0));
        }
        encode_entry(&mut o.buf, &entry);
        Ok(())
    }

    fn flush(&self) {
        let mut outs = self.out.borrow_mut();
        for o in outs.iter_mut() {
            if let Some(s) = o.open_frame.take() {
                wire::end_frame(&mut o.buf, s);
            }
            if o.opening.is_some() {
                self.advance(o);
            }
            if o.written == o.buf.len() {
                continue;
            }
            let Some(conn) = o.conn.as_mut() else { continue };
            let r = loop {
                match conn.write(&o.buf[o.written..]) {
                    Ok(k) => {
                        o.written += k;
                        if o.written == o.buf.len() {
                            break Ok(());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            match r {
                Ok(()) if o.written == o.buf.len() => {
                    o.buf.clear();
                    o.written = 0;
                }
                Ok(()) => {}
                Err(e) => {
                    let why = format!("sending to {}: {e}", o.to);
                    self.lose(o, why);
                }
            }
        }
    }

    fn drain(&self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let mut n = 0;
        let lost = std::mem::take(&mut *self.lost.borrow_mut());
        for (peer, why) in lost {
            f(Event::PeerLost { peer, why });
            n += 1;
        }
        // Messages to itself, swapped out first so a handler may push to itself again.
        {
            let mut spare = self.self_spare.borrow_mut();
            std::mem::swap(&mut *spare, &mut *self.to_self.borrow_mut());
            if !spare.is_empty() {
                let from = self.addr;
                n += decode_entries(&spare, &mut |entry| f(Event::Entry { from, entry }))
                    .expect("entries this mailbox encoded itself");
                spare.clear();
            }
        }
        self.adopt_incoming();
        let mut incoming = self.incoming.borrow_mut();
        // One poll(2) for every socket, then reads only where something happened. Outgoing
        // connections carry nothing back, so readiness there means the peer closed or the
        // link broke: found out now, not at the next send.
        let mut fds = self.pollfds.borrow_mut();
        fds.clear();
        let pfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        fds.extend(incoming.iter().map(|c| pfd(c.stream.as_raw_fd())));
        let n_in = fds.len();
        fds.extend(
            self.out
                .borrow()
                .iter()
                .filter_map(|o| o.conn.as_ref())
                .map(|c| pfd(c.as_raw_fd())),
        );
        if fds.is_empty() {
            return n;
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs; timeout 0 never blocks.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        if ready <= 0 {
            return n;
        }
        // Handlers called from here may push (and so connect): `out` is not borrowed now.
        let mut dead = Vec::new();
        for (c, p) in incoming.iter_mut().zip(fds.iter()) {
            if p.revents == 0 {
                continue;
            }
            if let Err(why) = Self::read_from(c, f, &mut n) {
                dead.push((c.stream.as_raw_fd(), why));
            }
        }
        for (fd, why) in dead {
            let i = incoming
                .iter()
                .position(|c| c.stream.as_raw_fd() == fd)
                .expect("still there");
            let c = incoming.swap_remove(i);
            f(Event::PeerLost { peer: c.from, why });
            n += 1;
        }
        let broken: Vec<i32> = fds[n_in..].iter().filter(|p| p.revents != 0).map(|p| p.fd).collect();
        drop(incoming);
        if !broken.is_empty() {
            let mut outs = self.out.borrow_mut();
            for o in outs.iter_mut() {
                let Some(conn) = o.conn.as_mut().filter(|c| broken.contains(&c.as_raw_fd())) else {
                    continue;
                };
                let mut scratch = [0u8; 64];
                let why = match conn.read(&mut scratch) {
                    Ok(0) => format!("{} closed the connection", o.to),
                    Ok(_) => format!("{} sent data on a one-way connection", o.to),
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => continue,
                    Err(e) => format!("connection to {}: {e}", o.to),
                };
                self.lose(o, why);
            }
        }
        let lost = std::mem::take(&mut *self.lost.borrow_mut());
        for (peer, why) in lost {
            f(Event::PeerLost { peer, why });
            n += 1;
        }
        n
    }
}
