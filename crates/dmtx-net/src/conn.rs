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
    let mut stream = TcpStream::connect_timeout(&addr, config.connect_timeout).map_err(|error| NetError::Connect {
        mn,
        addr,
        error,
    })?;
    let lost = |e: std::io::Error| NetError::Lost { mn, why: e.to_string() };
    stream.set_nodelay(true).map_err(lost)?;
    set_user_timeout(&stream, config.op_deadline).map_err(lost)?;
    stream.set_read_timeout(Some(timeout)).map_err(lost)?;
    stream.set_write_timeout(Some(timeout)).map_err(lost)?;
    stream.write_all(&hello_frame(config)).map_err(lost)?;
    let mut buf = Vec::new();
    let h = read_frame(mn, &mut stream, &mut buf)?;
    let (rkey, region_bytes) = accept(mn, addr, h.kind, &buf)?;
    Ok(Handshaken {
        stream,
        rkey,
        region_bytes,
    })
}

/// The whole HELLO frame a config sends.
pub(crate) fn hello_frame(config: &TcpConfig) -> Vec<u8> {
    let mut out = Vec::new();
    let s = wire::begin_frame(&mut out, Kind::Hello, 0);
    hello(config).encode(&mut out);
    wire::end_frame(&mut out, s);
    out
}

/// Judge the answer to a HELLO: `(rkey, region bytes)` of the node's region, or why not.
pub(crate) fn accept(mn: MnId, addr: SocketAddr, kind: Kind, payload: &[u8]) -> Result<(u64, u64)> {
    if kind != Kind::HelloOk {
        return Err(unexpected(mn, kind, payload));
    }
    let ok = HelloOk::decode(payload).map_err(|e| NetError::Protocol { mn, why: e.to_string() })?;
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
    Ok((r.rkey, r.bytes))
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

/// Set `TCP_USER_TIMEOUT`: the kernel drops the connection when sent data stays
/// unacknowledged for `t` (rounded to whole milliseconds, at least 1).
#[cfg(target_os = "linux")]
pub(crate) fn set_user_timeout(stream: &TcpStream, t: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let ms = t.as_millis().clamp(1, libc::c_uint::MAX as u128) as libc::c_uint;
    // SAFETY: a valid socket descriptor and a pointer to a c_uint of the stated size.
    let r = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Not Linux: no `TCP_USER_TIMEOUT`; the op deadline and PINGs still bound every post.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_user_timeout(_stream: &TcpStream, _t: Duration) -> std::io::Result<()> {
    Ok(())
}

/// Read `TCP_USER_TIMEOUT` back.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn user_timeout(stream: &TcpStream) -> std::io::Result<Duration> {
    use std::os::fd::AsRawFd;
    let mut ms: libc::c_uint = 0;
    let mut len = std::mem::size_of::<libc::c_uint>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, a c_uint out-pointer and its length.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&mut ms as *mut libc::c_uint).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(Duration::from_millis(u64::from(ms)))
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use dmtx_memnode::server::{Server, ServerConfig};

    /// Goal: client sockets carry `TCP_USER_TIMEOUT` equal to the op deadline, so a cut
    /// link with unacknowledged data fails within it.
    #[test]
    fn client_sockets_have_the_user_timeout() {
        let server = Server::bind(ServerConfig::new(MnId(0), 1 << 16)).unwrap().spawn();
        let mut config = TcpConfig::new(0, b"");
        config.op_deadline = Duration::from_millis(1234);
        let h = open(MnId(0), server.local_addr(), &config, config.connect_timeout).unwrap();
        assert_eq!(user_timeout(&h.stream).unwrap(), Duration::from_millis(1234));
        config.op_deadline = Duration::from_nanos(10);
        let h = open(MnId(0), server.local_addr(), &config, config.connect_timeout).unwrap();
        assert_eq!(user_timeout(&h.stream).unwrap(), Duration::from_millis(1));
    }
}
