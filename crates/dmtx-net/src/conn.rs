//! Opening a connection: TCP connect and the HELLO / HELLO_OK handshake (blocking).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use dmtx_memnode::server::wire::{self, ErrorFrame, Hello, HelloOk, Kind};
use dmtx_verbs::MnId;

use crate::{NetError, Result, TcpConfig};

/// A connection that passed the handshake.
#[derive(Debug)]
pub(crate) struct Handshaken {
    pub stream: TcpStream,
    pub rkey: u64,
    pub region_bytes: u64,
}

/// The HELLO a config sends.
pub(crate) fn hello(config: &TcpConfig) -> Hello {
    Hello {
        version: wire::PROTOCOL_VERSION,
        cluster_id: config.cluster_id,
        client_id: config.client_id,
        epoch: config.epoch,
        token: config.token.clone(),
    }
}

/// Connect to `mn` at `addr` and shake hands. The stream is left blocking, with read and
/// write timeouts of `timeout`.
pub(crate) fn open(mn: MnId, addr: SocketAddr, config: &TcpConfig, timeout: Duration) -> Result<Handshaken> {
    let mut stream = TcpStream::connect_timeout(&addr, config.connect_timeout).map_err(|source| NetError::Connect {
        mn,
        addr,
        source,
    })?;
    let lost = |e: std::io::Error| NetError::Lost { mn, why: e.to_string() };
    stream.set_nodelay(true).map_err(lost)?;
    stream.set_read_timeout(Some(timeout)).map_err(lost)?;
    stream.set_write_timeout(Some(timeout)).map_err(lost)?;
    let mut out = Vec::new();
    let s = wire::begin_frame(&mut out, Kind::Hello, 0);
    hello(config).encode(&mut out);
    wire::end_frame(&mut out, s);
    stream.write_all(&out).map_err(lost)?;
    let mut buf = Vec::new();
    let h = read_frame(mn, &mut stream, &mut buf)?;
    match h.kind {
        Kind::HelloOk => {
            let ok = HelloOk::decode(&buf).map_err(|e| NetError::Protocol { mn, why: e.to_string() })?;
            if ok.node_id != mn.0 {
                return Err(NetError::WrongNode {
                    mn,
                    addr,
                    served: ok.node_id,
                });
            }
            let Some(r) = ok.regions.first() else {
                return Err(NetError::Protocol {
                    mn,
                    why: "HELLO_OK announced no region".into(),
                });
            };
            Ok(Handshaken {
                stream,
                rkey: r.rkey,
                region_bytes: r.bytes,
            })
        }
        k => Err(unexpected(mn, k, &buf)),
    }
}

/// The error for a frame of kind `k` where another was expected (an ERROR is a refusal).
pub(crate) fn unexpected(mn: MnId, k: Kind, payload: &[u8]) -> NetError {
    match k {
        Kind::Error => match ErrorFrame::decode(payload) {
            Ok(e) => NetError::Refused {
                mn,
                code: e.code.0,
                message: e.message,
            },
            Err(e) => NetError::Protocol { mn, why: e.to_string() },
        },
        k => NetError::Protocol {
            mn,
            why: format!("unexpected {k:?} frame"),
        },
    }
}

/// Read one whole frame (blocking); its payload lands in `buf`.
pub(crate) fn read_frame(mn: MnId, stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<wire::Header> {
    let lost = |e: std::io::Error| NetError::Lost { mn, why: e.to_string() };
    let mut hb = [0u8; wire::HEADER_BYTES];
    stream.read_exact(&mut hb).map_err(lost)?;
    let h = wire::decode_header(&hb)
        .map_err(|e| NetError::Protocol { mn, why: e.to_string() })?
        .expect("a whole header was read");
    buf.clear();
    buf.resize(h.payload_bytes as usize, 0);
    stream.read_exact(buf).map_err(lost)?;
    Ok(h)
}
