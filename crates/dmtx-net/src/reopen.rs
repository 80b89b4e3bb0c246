//! Reopening a memory-node connection without blocking the worker thread.
//!
//! A worker whose connection died must not sit in `connect(2)` for the connect timeout
//! (a silently cut link would freeze every coordinator of the thread). [`Reopen`] starts a
//! nonblocking connect and is stepped by the transport on every pass: connect completes,
//! HELLO goes out, HELLO_OK comes back. Posts to the node fail at once until it is done.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use dmtx_memnode::server::wire;
use dmtx_verbs::MnId;

use crate::conn;
use crate::TcpConfig;

/// A reconnect in progress.
#[derive(Debug)]
pub(crate) struct Reopen {
    stream: TcpStream,
    addr: SocketAddr,
    started: Instant,
    hello: Vec<u8>,
    sent: usize,
    buf: Vec<u8>,
}

/// Where a [`Reopen`] stands.
#[derive(Debug)]
pub(crate) enum Step {
    Pending,
    /// Handshake done: the node's region key; take the stream with
    /// [`Reopen::into_stream`].
    Done {
        rkey: u64,
    },
    Failed(String),
}

impl Reopen {
    /// Start connecting to `addr`.
    pub fn start(addr: SocketAddr, config: &TcpConfig) -> io::Result<Self> {
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
        conn::set_user_timeout(&stream, config.op_deadline)?;
        Ok(Self {
            stream,
            addr,
            started: Instant::now(),
            hello: conn::hello_frame(config),
            sent: 0,
            buf: Vec::new(),
        })
    }

    /// Advance as far as the socket allows without blocking.
    pub fn step(&mut self, mn: MnId, config: &TcpConfig) -> Step {
        match self.try_step(mn) {
            Ok(Some(rkey)) => Step::Done { rkey },
            Ok(None) if self.started.elapsed() >= config.connect_timeout => Step::Failed(format!(
                "reconnecting to {mn} at {}: no handshake within {:?}",
                self.addr, config.connect_timeout
            )),
            Ok(None) => Step::Pending,
            Err(why) => Step::Failed(format!("reconnecting to {mn} at {}: {why}", self.addr)),
        }
    }

    /// The connection, once [`Step::Done`].
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn try_step(&mut self, mn: MnId) -> Result<Option<u64>, String> {
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
                return conn::accept(mn, self.addr, h.kind, payload)
                    .map(|(rkey, _)| Some(rkey))
                    .map_err(|e| e.to_string());
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the node closed the connection during the handshake".into()),
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}
