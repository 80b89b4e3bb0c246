//! Serving threads: each owns a set of connections and polls them with epoll (`mio`).
//!
//! One poll round of a serving thread: `epoll_wait`, then for every connection with an
//! event (or left over from the previous round, see `Conn::service`): at most one `read`,
//! answer every complete frame up to the send-queue budget, at most one `write` of the
//! whole output buffer. A request that arrives alone therefore costs the server three
//! syscalls: `epoll_wait`, `read`, `write`.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use super::frames::{self, ConnCtx, Next};
use super::wire::{self, ErrorCode};
use super::{Fence, Shared, TICK};

/// Initial receive buffer per connection (grows to the largest frame seen).
const RECV_BYTES_INITIAL: usize = 64 << 10;
/// Initial send buffer per connection (grows with the replies of one round).
const SEND_BYTES_INITIAL: usize = 64 << 10;
/// Send-queue budget of one connection: once this many reply bytes wait to be sent, or
/// [`SEND_QUEUE_FRAMES`] replies were queued since the queue was last empty, the
/// connection answers no more frames and reads nothing until the client takes replies.
/// One reply may overshoot the budget (a READ reply is up to [`wire::FRAME_PAYLOAD_MAX`]).
pub(super) const SEND_QUEUE_BYTES: usize = 1 << 20;
/// Send-queue budget in replies (see [`SEND_QUEUE_BYTES`]).
pub(super) const SEND_QUEUE_FRAMES: usize = 1024;
/// A peer that takes none of our pending replies for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection that got an ERROR frame may take to receive it before it is cut.
const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// Compact the send buffer after a partial write once this much of it was sent.
const SEND_COMPACT_BYTES: usize = 64 << 10;
/// The token of a serving thread's waker (new connections, shutdown).
const WAKER: Token = Token(usize::MAX);
/// Events taken from one `epoll_wait`.
const EVENTS_MAX: usize = 256;

/// A connection accepted for a serving thread, waiting in its inbox.
#[derive(Debug)]
pub(super) struct Adopt {
    /// Registry id.
    pub id: u64,
    /// The socket, nonblocking, `TCP_NODELAY` set.
    pub stream: std::net::TcpStream,
    /// Its fence (also in the registry).
    pub fence: Arc<Fence>,
    /// When it was accepted (the handshake timeout runs from here).
    pub opened: Instant,
}

/// What the acceptor and the server handle see of a serving thread.
#[derive(Debug)]
pub(super) struct Link {
    /// Connections handed to this thread and not yet adopted.
    pub inbox: Mutex<Vec<Adopt>>,
    /// Wakes the thread's `epoll_wait` (new connections, shutdown).
    pub waker: Waker,
    /// Connections this thread owns (adopted or in its inbox).
    pub conns: AtomicUsize,
    /// True while the thread is answering frames (false while it waits in `epoll_wait`);
    /// a hint for the acceptor, so relaxed loads and stores suffice.
    /// A thread stuck inside an op (the test stall knob, a slow page fault) stays true, so
    /// the acceptor gives new connections to another thread.
    pub inside: AtomicBool,
    /// Bytes of receive and send buffers its connections hold (their capacities).
    pub held: AtomicUsize,
}

impl Link {
    /// Hand `a` to this thread and wake it.
    pub fn hand(&self, a: Adopt) {
        self.conns.fetch_add(1, Ordering::SeqCst);
        self.inbox.lock().unwrap().push(a);
        let _ = self.waker.wake();
    }

    /// Forget every connection still in the inbox (the thread has ended or is ending).
    pub fn drain(&self, shared: &Shared) {
        for a in std::mem::take(&mut *self.inbox.lock().unwrap()) {
            self.conns.fetch_sub(1, Ordering::SeqCst);
            shared.forget(a.id);
            let _ = a.stream.shutdown(Shutdown::Both);
        }
    }
}

/// A serving thread's poller, made when the server binds (so failures surface there).
#[derive(Debug)]
pub(super) struct Poller {
    poll: Poll,
    link: Arc<Link>,
}

impl Poller {
    pub fn new() -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok(Self {
            poll,
            link: Arc::new(Link {
                inbox: Mutex::new(Vec::new()),
                waker,
                conns: AtomicUsize::new(0),
                inside: AtomicBool::new(false),
                held: AtomicUsize::new(0),
            }),
        })
    }

    pub fn link(&self) -> &Arc<Link> {
        &self.link
    }

    /// Serve until the server stops, then close every connection of this thread.
    pub fn run(self, shared: Arc<Shared>) {
        let Poller { mut poll, link } = self;
        let mut events = Events::with_capacity(EVENTS_MAX);
        let mut st = Conns {
            shared,
            link,
            slab: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            again_now: Vec::new(),
            round: 0,
        };
        let mut last_sweep = Instant::now();
        loop {
            let timeout = if st.again.is_empty() { TICK } else { Duration::ZERO };
            if let Err(e) = poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    // Not expected from epoll_wait with valid arguments; do not spin.
                    std::thread::sleep(TICK);
                }
                continue;
            }
            let now = Instant::now();
            if st.shared.stop.load(Ordering::SeqCst) {
                break;
            }
            st.round += 1;
            st.link.inside.store(true, Ordering::Relaxed);
            let reg = poll.registry();
            // Left over from the last round; this round's leftovers go to `again`.
            std::mem::swap(&mut st.again, &mut st.again_now);
            let mut woken = false;
            for ev in events.iter() {
                if ev.token() == WAKER {
                    woken = true;
                    continue;
                }
                if let Some(c) = st.slab.get_mut(ev.token().0).and_then(Option::as_mut) {
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        c.readable = true;
                    }
                    st.drive(reg, ev.token().0, now);
                }
            }
            for i in 0..st.again_now.len() {
                let (token, id) = st.again_now[i];
                if st.slab[token].as_ref().is_some_and(|c| c.id == id) {
                    st.drive(reg, token, now);
                }
            }
            st.again_now.clear();
            if woken {
                st.adopt(reg);
            }
            st.link.inside.store(false, Ordering::Relaxed);
            if now.duration_since(last_sweep) >= TICK {
                last_sweep = now;
                st.sweep(reg, now);
            }
        }
        st.link.inside.store(false, Ordering::Relaxed);
        st.stop_all(poll.registry());
    }
}

/// The connections of one serving thread.
struct Conns {
    shared: Arc<Shared>,
    link: Arc<Link>,
    /// Indexed by token.
    slab: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// (token, id) of connections to service next round without waiting for an event.
    again: Vec<(usize, u64)>,
    again_now: Vec<(usize, u64)>,
    round: u64,
}

/// What a connection needs after a service.
#[derive(PartialEq, Eq)]
enum After {
    /// Wait for its next event.
    Idle,
    /// Service it next round without an event (more input or frames to answer).
    Again,
    Close,
}

impl Conns {
    /// Service connection `token` once this round.
    fn drive(&mut self, reg: &Registry, token: usize, now: Instant) {
        let Some(c) = self.slab[token].as_mut() else { return };
        if c.serviced == self.round {
            return;
        }
        c.serviced = self.round;
        let after = c.service(&self.shared, reg, Token(token), now);
        c.account(&self.link);
        match after {
            After::Idle => {}
            After::Again => self.again.push((token, c.id)),
            After::Close => self.close(reg, token),
        }
    }

    /// Take the connections the acceptor handed over.
    fn adopt(&mut self, reg: &Registry) {
        let new = std::mem::take(&mut *self.link.inbox.lock().unwrap());
        for a in new {
            let token = self.free.pop().unwrap_or_else(|| {
                self.slab.push(None);
                self.slab.len() - 1
            });
            let mut c = Conn::new(a, Arc::clone(&self.shared));
            if reg.register(&mut c.stream, Token(token), Interest::READABLE).is_err() {
                self.free.push(token);
                self.link.conns.fetch_sub(1, Ordering::SeqCst);
                let _ = c.stream.shutdown(Shutdown::Both);
                continue; // dropping `c` forgets it
            }
            // Data that arrived before the registration is reported by epoll too, but a
            // first read costs one syscall per connection and relies on nothing.
            c.readable = true;
            c.account(&self.link);
            self.again.push((token, c.id));
            self.slab[token] = Some(c);
        }
    }

    /// Enforce the handshake, idle, write and linger timeouts.
    fn sweep(&mut self, reg: &Registry, now: Instant) {
        let handshake_timeout = self.shared.config.handshake_timeout;
        let idle_timeout = self.shared.config.idle_timeout;
        for token in 0..self.slab.len() {
            let Some(c) = self.slab[token].as_mut() else { continue };
            let expired = match (c.closing, c.blocked_since) {
                (Some(deadline), _) if now >= deadline => true,
                (_, Some(since)) if now.duration_since(since) > WRITE_TIMEOUT => true,
                _ => false,
            };
            if expired {
                self.close(reg, token);
                continue;
            }
            if c.closing.is_some() {
                continue;
            }
            if !c.ready && now.duration_since(c.opened) > handshake_timeout {
                let m = format!("no HELLO within {handshake_timeout:?}");
                c.fail(ErrorCode::TIMEOUT, &m, now);
            } else if let Some(idle) = idle_timeout.filter(|&idle| now.duration_since(c.last_frame) > idle) {
                c.fail(ErrorCode::TIMEOUT, &format!("idle for more than {idle:?}"), now);
            } else {
                continue;
            }
            c.serviced = self.round;
            let after = c.service(&self.shared, reg, Token(token), now);
            c.account(&self.link);
            if after == After::Close {
                self.close(reg, token);
            }
        }
    }

    /// Say SHUTDOWN to every connection (one write attempt each) and close them all.
    fn stop_all(&mut self, reg: &Registry) {
        let now = Instant::now();
        for token in 0..self.slab.len() {
            let Some(c) = self.slab[token].as_mut() else { continue };
            if c.closing.is_none() {
                c.fail(ErrorCode::SHUTDOWN, "memory node is shutting down", now);
            }
            let _ = c.write_once(now);
            self.close(reg, token);
        }
        self.link.drain(&self.shared);
    }

    fn close(&mut self, reg: &Registry, token: usize) {
        let Some(mut c) = self.slab[token].take() else { return };
        let _ = reg.deregister(&mut c.stream);
        let _ = c.stream.shutdown(Shutdown::Both);
        self.link.held.fetch_sub(c.held, Ordering::SeqCst);
        self.link.conns.fetch_sub(1, Ordering::SeqCst);
        self.free.push(token);
        // Dropping `c` removes it from the registry before its socket is closed.
    }
}

/// One connection: one client queue pair.
struct Conn {
    id: u64,
    stream: TcpStream,
    fence: Arc<Fence>,
    shared: Arc<Shared>,
    /// Receive buffer: bytes `start..end` are received and not yet answered.
    inb: Vec<u8>,
    start: usize,
    end: usize,
    /// Send buffer: bytes `sent..` are replies not yet taken by the socket.
    out: Vec<u8>,
    sent: usize,
    /// Replies queued since the send buffer was last empty.
    queued: usize,
    /// The handshake passed.
    ready: bool,
    /// The socket may hold unread bytes (an event came, or the last read filled the buffer).
    readable: bool,
    /// The peer closed its side: answer what is buffered, then close.
    eof: bool,
    /// An ERROR frame is queued: close once it is sent, or at this deadline.
    closing: Option<Instant>,
    /// WRITABLE interest is registered (only while replies are pending).
    want_write: bool,
    /// Since when pending replies made no progress (`None` while none are pending).
    blocked_since: Option<Instant>,
    opened: Instant,
    last_frame: Instant,
    /// The round it was last serviced in (at most once per round).
    serviced: u64,
    /// Buffer bytes accounted in its thread's `Link::held`.
    held: usize,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Before the socket closes: the registry must never name a closed descriptor.
        self.shared.forget(self.id);
    }
}

impl Conn {
    fn new(a: Adopt, shared: Arc<Shared>) -> Self {
        Self {
            id: a.id,
            stream: TcpStream::from_std(a.stream),
            fence: a.fence,
            shared,
            inb: vec![0; RECV_BYTES_INITIAL],
            start: 0,
            end: 0,
            out: Vec::with_capacity(SEND_BYTES_INITIAL),
            sent: 0,
            queued: 0,
            ready: false,
            readable: false,
            eof: false,
            closing: None,
            want_write: false,
            blocked_since: None,
            opened: a.opened,
            last_frame: a.opened,
            serviced: 0,
            held: 0,
        }
    }

    fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// The send queue is full: answer nothing and read nothing until it drains.
    fn backpressured(&self) -> bool {
        self.pending() >= SEND_QUEUE_BYTES || self.queued >= SEND_QUEUE_FRAMES
    }

    /// Queue an ERROR frame and start closing.
    fn fail(&mut self, code: ErrorCode, message: &str, now: Instant) {
        wire::put_error(&mut self.out, 0, code, message);
        self.closing = Some(now + CLOSE_LINGER);
    }

    /// One round: read once, answer what is complete, write once.
    fn service(&mut self, shared: &Shared, reg: &Registry, token: Token, now: Instant) -> After {
        // A HELLO read here is answered in this very call; until then the acceptor must
        // not cut the connection to make room (module doc of `server`, "Strangers").
        let greeting = !self.ready;
        if greeting {
            self.fence.greeting.store(true, Ordering::SeqCst);
        }
        let after = self.service_round(shared, reg, token, now);
        if greeting {
            self.fence.greeting.store(false, Ordering::SeqCst);
        }
        after
    }

    fn service_round(&mut self, shared: &Shared, reg: &Registry, token: Token, now: Instant) -> After {
        if self.readable && !self.eof && self.closing.is_none() && !self.backpressured() {
            wire::make_room(&mut self.inb, &mut self.start, &mut self.end);
            let room = self.inb.len() - self.end;
            // No room: the buffer is full of complete frames the budget held back; they
            // are answered below and the socket is read next round.
            if room > 0 {
                match self.stream.read(&mut self.inb[self.end..]) {
                    Ok(0) => {
                        self.eof = true;
                        self.readable = false;
                    }
                    Ok(n) => {
                        self.end += n;
                        // A short read took everything the socket had; epoll (edge
                        // triggered) reports the next bytes. Only a full buffer may leave
                        // more behind, to be read next round. This saves the read that
                        // would return WouldBlock.
                        if n < room {
                            self.readable = false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return After::Close,
                }
            }
        }
        let more = self.closing.is_none() && self.answer(shared, now);
        if self.write_once(now).is_err() {
            return After::Close;
        }
        let pending = self.pending() > 0;
        if self.closing.is_some() && !pending {
            return After::Close;
        }
        if self.eof && !pending && !more {
            return After::Close;
        }
        if pending != self.want_write {
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if reg.reregister(&mut self.stream, token, interest).is_err() {
                return After::Close;
            }
            self.want_write = pending;
        }
        if self.closing.is_none() && (more || (self.readable && !self.eof)) && !self.backpressured() {
            After::Again
        } else {
            After::Idle
        }
    }

    /// Answer complete frames in order until none is left or the send queue is full;
    /// true if the budget stopped it (frames may be left).
    fn answer(&mut self, shared: &Shared, now: Instant) -> bool {
        // The fence is held across the frames of this round and checked before each
        // VERBS / CONTROL frame (see the module doc of `server`).
        let mut guard = None;
        let ctx = ConnCtx {
            id: self.id,
            fence: &self.fence,
        };
        loop {
            if self.out.len() - self.sent >= SEND_QUEUE_BYTES || self.queued >= SEND_QUEUE_FRAMES {
                return true;
            }
            match wire::split_frame(&self.inb[self.start..self.end]) {
                Ok(Some((h, _, used))) => {
                    if guard.is_none() {
                        guard = Some(ctx.fence.running.lock().unwrap_or_else(|p| p.into_inner()));
                    }
                    let payload = self.start + wire::HEADER_BYTES..self.start + used;
                    let next = frames::handle(shared, &ctx, &mut self.ready, h, &self.inb[payload], &mut self.out);
                    self.start += used;
                    self.queued += 1;
                    self.last_frame = now;
                    if let Next::Close = next {
                        self.closing = Some(now + CLOSE_LINGER);
                        return false;
                    }
                }
                Ok(None) => return false,
                Err(e) => {
                    wire::put_error(&mut self.out, 0, ErrorCode::BAD_FRAME, &e.to_string());
                    self.closing = Some(now + CLOSE_LINGER);
                    return false;
                }
            }
        }
    }

    /// One `write` of every pending reply; Err when the connection broke.
    fn write_once(&mut self, now: Instant) -> Result<(), ()> {
        if self.sent == self.out.len() {
            return Ok(());
        }
        let progressed = match self.stream.write(&self.out[self.sent..]) {
            Ok(0) => return Err(()),
            Ok(n) => {
                self.sent += n;
                true
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => false,
            Err(_) => return Err(()),
        };
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            self.queued = 0;
            self.blocked_since = None;
            return Ok(());
        }
        if progressed || self.blocked_since.is_none() {
            self.blocked_since = Some(now);
        }
        // Partial write: keep the unsent tail at the front so the buffer stays bounded by
        // the budget while the peer reads slowly.
        if self.sent >= SEND_COMPACT_BYTES && self.sent * 2 >= self.out.len() {
            self.out.copy_within(self.sent.., 0);
            self.out.truncate(self.out.len() - self.sent);
            self.sent = 0;
        }
        Ok(())
    }

    /// Bring its thread's buffer gauge up to date.
    fn account(&mut self, link: &Link) {
        let now = self.inb.capacity() + self.out.capacity();
        if now != self.held {
            if now > self.held {
                link.held.fetch_add(now - self.held, Ordering::SeqCst);
            } else {
                link.held.fetch_sub(self.held - now, Ordering::SeqCst);
            }
            self.held = now;
        }
    }
}
