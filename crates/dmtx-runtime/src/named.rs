//! Run-wide named areas: memory a protocol sets up once per run and every compute node
//! finds by name.
//!
//! A protocol's [`Protocol::setup_run`](crate::Protocol::setup_run) allocates what the
//! whole run shares (a cluster-wide FAA counter, RCBench's T^g slots, LOTUS's latency
//! region, the log areas recovery must discover) and publishes each as a [`NamedArea`]
//! with [`publish`] or [`alloc_and_publish`]. Each coordinator, on whichever compute
//! node it runs, finds it in [`Protocol::coord_state`](crate::Protocol::coord_state)
//! with [`fetch`]. Both go through the init-time [`Control`] interface only, so the same
//! code serves in-process clusters, `tcp` memory nodes and the driver's sizing pass.
//!
//! An entry is published on every memory node, so any node that still answers can say
//! where an area is (recovery after a node loss needs that); [`fetch`] asks node 0 first
//! and moves on only past an unreachable node.
//!
//! # Record (little-endian)
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | version u8 ([`RECORD_VERSION`]) |
//! | 1..3  | memory node u16 |
//! | 3..11 | byte offset u64 |
//! | 11..19 | length u64 |
//! | 19..  | payload, at most [`PAYLOAD_BYTES_MAX`] bytes (protocol-defined: a slot count, a stride) |
//!
//! ```
//! use dmtx_memnode::LocalCluster;
//! use dmtx_runtime::named;
//! use dmtx_verbs::MnId;
//!
//! let cluster = LocalCluster::new(2, 1 << 20);
//! let area = named::alloc_and_publish(&cluster, "example/counter", MnId(1), 8, 8, &[]).unwrap();
//! assert_eq!(named::fetch(&cluster, "example/counter").unwrap(), area);
//! ```

use dmtx_memnode::{Control, ControlError, NAMED_VALUE_BYTES_MAX};
use dmtx_verbs::{MnId, RemotePtr};

/// The record format this code writes and reads.
pub const RECORD_VERSION: u8 = 1;
/// Bytes of a record before its payload.
pub const RECORD_HEADER_BYTES: usize = 1 + 2 + 8 + 8;
/// Largest payload a record carries: what a memory node's named entry holds, less the header.
pub const PAYLOAD_BYTES_MAX: usize = NAMED_VALUE_BYTES_MAX - RECORD_HEADER_BYTES;

/// Why a named area could not be published or fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NamedError {
    /// The control interface refused (unknown name, duplicate, a node unreachable, ...).
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The entry under `name` is not a record this build reads.
    #[error("named area `{name}` on {mn}: {why}; the memory nodes were set up by another dmtx build or protocol: restart them")]
    Malformed {
        /// The name.
        name: String,
        /// The node that answered.
        mn: MnId,
        /// What is wrong.
        why: String,
    },
    /// A payload longer than [`PAYLOAD_BYTES_MAX`].
    #[error(
        "named area `{name}`: payload of {bytes} bytes exceeds {PAYLOAD_BYTES_MAX}; keep bulk data in the area itself"
    )]
    PayloadTooLarge {
        /// The name.
        name: String,
        /// The payload's size.
        bytes: usize,
    },
}

/// A run-wide area: where it is, how long, and a small protocol-defined payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedArea {
    /// Its first byte.
    pub at: RemotePtr,
    /// Its length in bytes.
    pub bytes: u64,
    /// What else a coordinator needs to use it (≤ [`PAYLOAD_BYTES_MAX`] bytes).
    pub payload: Vec<u8>,
}

impl NamedArea {
    /// The record bytes ([module docs](self)).
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.payload.len() <= PAYLOAD_BYTES_MAX,
            "payload of {} bytes; publish checks it",
            self.payload.len()
        );
        let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + self.payload.len());
        out.push(RECORD_VERSION);
        out.extend_from_slice(&self.at.mn.0.to_le_bytes());
        out.extend_from_slice(&self.at.offset.to_le_bytes());
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Decode a record fetched as `name` from `mn`.
    pub fn decode(name: &str, mn: MnId, b: &[u8]) -> Result<Self, NamedError> {
        let malformed = |why: String| NamedError::Malformed {
            name: name.to_owned(),
            mn,
            why,
        };
        if b.len() < RECORD_HEADER_BYTES {
            return Err(malformed(format!(
                "record of {} bytes, shorter than its {RECORD_HEADER_BYTES}-byte header",
                b.len()
            )));
        }
        if b[0] != RECORD_VERSION {
            return Err(malformed(format!(
                "record version {}, this build reads {RECORD_VERSION}",
                b[0]
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Ok(Self {
            at: RemotePtr::new(MnId(u16::from_le_bytes([b[1], b[2]])), u64_at(3)),
            bytes: u64_at(11),
            payload: b[RECORD_HEADER_BYTES..].to_vec(),
        })
    }
}

/// Publish `area` under `name` on every memory node.
pub fn publish(control: &dyn Control, name: &str, area: &NamedArea) -> Result<(), NamedError> {
    if area.payload.len() > PAYLOAD_BYTES_MAX {
        return Err(NamedError::PayloadTooLarge {
            name: name.to_owned(),
            bytes: area.payload.len(),
        });
    }
    let record = area.encode();
    for mn in 0..control.mn_count() {
        control.put_named(MnId(mn as u16), name, &record)?;
    }
    Ok(())
}

/// Allocate `bytes` aligned to `align` on `mn` and publish the area under `name` with
/// `payload` ([`publish`]). The area's bytes are whatever the region held (zero on a
/// fresh node); load initial contents through `control` before coordinators start.
pub fn alloc_and_publish(
    control: &dyn Control,
    name: &str,
    mn: MnId,
    bytes: u64,
    align: u64,
    payload: &[u8],
) -> Result<NamedArea, NamedError> {
    if payload.len() > PAYLOAD_BYTES_MAX {
        return Err(NamedError::PayloadTooLarge {
            name: name.to_owned(),
            bytes: payload.len(),
        });
    }
    let offset = control.alloc(mn, bytes, align)?;
    let area = NamedArea {
        at: RemotePtr::new(mn, offset),
        bytes,
        payload: payload.to_vec(),
    };
    publish(control, name, &area)?;
    Ok(area)
}

/// The area published under `name`: asked of node 0, then of the next node only while
/// the one asked is unreachable.
pub fn fetch(control: &dyn Control, name: &str) -> Result<NamedArea, NamedError> {
    let mn_count = control.mn_count();
    assert!(mn_count > 0, "a cluster has at least one memory node");
    let mut last = None;
    for mn in (0..mn_count).map(|i| MnId(i as u16)) {
        match control.named(mn, name) {
            Ok(b) => return NamedArea::decode(name, mn, &b),
            Err(e @ ControlError::Unreachable { .. }) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.expect("every node was asked").into())
}

#[cfg(test)]
mod tests {
    use dmtx_memnode::LocalCluster;

    use super::*;

    /// Goal: a published area comes back as it was, from every node.
    #[test]
    fn publish_then_fetch_round_trips_on_every_node() {
        let c = LocalCluster::new(3, 1 << 16);
        let area = alloc_and_publish(&c, "t/slots", MnId(2), 4096, 64, b"stride=64").unwrap();
        assert_eq!(area.at.mn, MnId(2));
        assert_eq!(area.at.offset % 64, 0);
        assert_eq!(fetch(&c, "t/slots").unwrap(), area);
        for mn in 0..3 {
            let b = c.named(MnId(mn), "t/slots").unwrap();
            assert_eq!(NamedArea::decode("t/slots", MnId(mn), &b).unwrap(), area);
        }
    }

    #[test]
    fn an_unknown_name_and_a_duplicate_are_control_errors() {
        let c = LocalCluster::new(1, 1 << 16);
        assert!(matches!(
            fetch(&c, "missing"),
            Err(NamedError::Control(ControlError::UnknownName { .. }))
        ));
        alloc_and_publish(&c, "x", MnId(0), 8, 8, &[]).unwrap();
        assert!(matches!(
            alloc_and_publish(&c, "x", MnId(0), 8, 8, &[]),
            Err(NamedError::Control(ControlError::DuplicateName { .. }))
        ));
    }

    #[test]
    fn oversized_payloads_and_foreign_records_are_refused() {
        let c = LocalCluster::new(1, 1 << 16);
        let big = vec![0; PAYLOAD_BYTES_MAX + 1];
        let e = alloc_and_publish(&c, "big", MnId(0), 8, 8, &big).unwrap_err();
        assert!(matches!(e, NamedError::PayloadTooLarge { bytes: 4078, .. }), "{e}");
        assert_eq!(c.names(MnId(0)).unwrap(), Vec::<String>::new(), "nothing published");
        let full = vec![1; PAYLOAD_BYTES_MAX];
        alloc_and_publish(&c, "full", MnId(0), 8, 8, &full).unwrap();
        assert_eq!(fetch(&c, "full").unwrap().payload, full);

        c.put_named(MnId(0), "short", b"abc").unwrap();
        let e = fetch(&c, "short").unwrap_err();
        assert!(e.to_string().contains("shorter than its 19-byte header"), "{e}");
        let mut rec = NamedArea {
            at: RemotePtr::new(MnId(0), 64),
            bytes: 8,
            payload: vec![],
        }
        .encode();
        rec[0] = 9;
        c.put_named(MnId(0), "v9", &rec).unwrap();
        assert!(matches!(fetch(&c, "v9"), Err(NamedError::Malformed { .. })));
    }

    /// A control whose first `down` nodes are unreachable, over a local cluster.
    struct PartlyDown {
        inner: LocalCluster,
        down: usize,
    }

    impl Control for PartlyDown {
        fn mn_count(&self) -> usize {
            self.inner.mn_count()
        }
        fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> dmtx_memnode::Result<u64> {
            self.inner.alloc(mn, bytes, align)
        }
        fn load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> dmtx_memnode::Result<()> {
            self.inner.load(mn, offset, bytes)
        }
        fn put_table(&self, mn: MnId, meta: &dmtx_memnode::TableMeta) -> dmtx_memnode::Result<()> {
            self.inner.put_table(mn, meta)
        }
        fn tables(&self, mn: MnId) -> dmtx_memnode::Result<Vec<dmtx_memnode::TableMeta>> {
            self.inner.tables(mn)
        }
        fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> dmtx_memnode::Result<()> {
            self.inner.put_named(mn, name, value)
        }
        fn named(&self, mn: MnId, name: &str) -> dmtx_memnode::Result<Vec<u8>> {
            if mn.index() < self.down {
                return Err(ControlError::Unreachable {
                    mn,
                    why: "down in this test".into(),
                });
            }
            self.inner.named(mn, name)
        }
        fn names(&self, mn: MnId) -> dmtx_memnode::Result<Vec<String>> {
            self.inner.names(mn)
        }
    }

    /// Goal: an area is still found while some memory nodes cannot answer, and when none
    /// can, the error says a node is unreachable (not that the name is unknown).
    #[test]
    fn fetch_moves_past_unreachable_nodes() {
        let c = PartlyDown {
            inner: LocalCluster::new(3, 1 << 16),
            down: 2,
        };
        let area = alloc_and_publish(&c, "a", MnId(0), 8, 8, &[]).unwrap();
        assert_eq!(fetch(&c, "a").unwrap(), area);
        let c = PartlyDown { down: 3, ..c };
        assert!(matches!(
            fetch(&c, "a"),
            Err(NamedError::Control(ControlError::Unreachable { mn: MnId(2), .. }))
        ));
    }
}
