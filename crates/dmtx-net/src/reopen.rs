//! Opening a connection without blocking the worker thread.
//!
//! A worker must not sit in `connect(2)` for the connect timeout: a silently cut link
//! would freeze every coordinator of the thread. [`Reopen`] starts a nonblocking connect
//! and is stepped by its owner on every pass: the connect completes, the handshake frame
//! goes out, the answer comes back and the owner judges it. Used to reopen memory-node
//! connections (`transport`) and to open CN↔CN messaging connections (`msg`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dmtx_memnode::server::wire::{self, Kind};

use crate::conn;

/// A connection being opened.
#[derive(Debug)]
pub(crate) struct Reopen {
    stream: TcpStream,
    addr: SocketAddr,
    started: Instant,
    hello: Vec<u8>,
    sent: usize,
    buf: Vec<u8>,
}

/// Judges the answer to a handshake (frame kind, payload): a value for the owner (a
/// memory node's rkey) or why it is refused.
pub(crate) type Judge<'a> = &'a dyn Fn(Kind, &[u8]) -> Result<u64, String>;

/// Where a [`Reopen`] stands.
#[derive(Debug)]
pub(crate) enum Step {
    Pending,
    /// Handshake accepted: what the judge returned (a memory node's rkey); take the
    /// stream with [`Reopen::into_stream`].
    Done(u64),
    Failed(String),
}

impl Reopen {
    /// Start connecting to `addr`; `hello` is the whole handshake frame to send once
    /// connected. The socket gets `TCP_NODELAY` and `TCP_USER_TIMEOUT` of `user_timeout`.
    pub fn start(addr: SocketAddr, hello: Vec<u8>, user_timeout: Duration) -> io::Result<Self> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_nonblocking(true)?;
        socket.set_nodelay(true)?;
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let stream: TcpStream = socket.into();
        conn::set_user_timeout(&stream, user_timeout)?;
        Ok(Self {
            stream,
            addr,
            started: Instant::now(),
            hello,
            sent: 0,
            buf: Vec::new(),
        })
    }

    /// Advance as far as the socket allows without blocking; `judge` decides on the
    /// answer frame (kind, payload). Fails once `timeout` has passed since the start.
    pub fn step(&mut self, timeout: Duration, judge: Judge<'_>) -> Step {
        match self.try_step(judge) {
            Ok(Some(v)) => Step::Done(v),
            Ok(None) if self.started.elapsed() >= timeout => {
                Step::Failed(format!("{}: no handshake within {timeout:?}", self.addr))
            }
            Ok(None) => Step::Pending,
            Err(why) => Step::Failed(format!("{}: {why}", self.addr)),
        }
    }

    /// The connection, once [`Step::Done`].
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn try_step(&mut self, judge: Judge<'_>) -> Result<Option<u64>, String> {
        if let Some(e) = self.stream.take_error().map_err(|e| e.to_string())? {
            return Err(e.to_string());
        }
        if self.sent < self.hello.len() {
            // Not connected yet: no peer address.
            if self.stream.peer_addr().is_err() {
                return Ok(None);
            }
            match self.stream.write(&self.hello[self.sent..]) {
                Ok(k) => self.sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e.to_string()),
            }
            if self.sent < self.hello.len() {
                return Ok(None);
            }
        }
        let mut chunk = [0u8; 512];
        loop {
            if let Some((h, payload, _)) = wire::split_frame(&self.buf).map_err(|e| e.to_string())? {
                return judge(h.kind, payload).map(Some);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the peer closed the connection during the handshake".into()),
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}
