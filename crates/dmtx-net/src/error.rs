//! Errors of connecting to and talking with memory nodes.

use std::io;
use std::net::SocketAddr;

use dmtx_memnode::ControlError;
use dmtx_verbs::{MnId, VerbError};

/// Why a connection, handshake or control call to a memory node failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// TCP connect failed.
    #[error(
        "cannot connect to {mn} at {addr}: {error}; check that `dmtx memnode` runs there and the address is right"
    )]
    Connect {
        /// The node.
        mn: MnId,
        /// Its address.
        addr: SocketAddr,
        /// The OS error (its text is in the message, so it is no `source`).
        error: io::Error,
    },
    /// The connection broke or timed out.
    #[error("lost the connection to {mn}: {why}; check that the memory node is running and reachable")]
    Lost {
        /// The node.
        mn: MnId,
        /// What happened.
        why: String,
    },
    /// The node answered with an ERROR frame (bad token, cluster, version, epoch, ...).
    #[error("{mn} refused: {message} (code {code})")]
    Refused {
        /// The node.
        mn: MnId,
        /// The wire error code.
        code: u16,
        /// The node's message.
        message: String,
    },
    /// The node sent something that is not wire v2.
    #[error("{mn} broke the protocol: {why}; is it a dmtx memory node of the same version?")]
    Protocol {
        /// The node.
        mn: MnId,
        /// What was wrong.
        why: String,
    },
    /// The address serves another node id than the one it was listed as.
    #[error("{addr} serves mn{served}, but was listed as {mn}; fix the order of the memory-node addresses")]
    WrongNode {
        /// The node it was listed as.
        mn: MnId,
        /// The address.
        addr: SocketAddr,
        /// The node id it announced.
        served: u16,
    },
    /// The client configuration is unusable.
    #[error("bad tcp transport config: {0}")]
    Config(String),
    /// The node refused a control call.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl NetError {
    /// The verb error a transport reports for this failure on node `mn`.
    pub fn to_verb_error(&self, mn: MnId) -> VerbError {
        VerbError::Unreachable {
            mn,
            why: self.to_string(),
        }
    }
}

/// `Result` with a [`NetError`].
pub type Result<T> = std::result::Result<T, NetError>;
