//! What a file-backed (`--backing`) memory node keeps beside its region file.
//!
//! The region's bytes live in the mapped file itself; the node's allocator cursor and
//! table catalog live in a sidecar, `FILE.meta`, so a node restarted on the same file
//! comes back with its tables published and never hands out space twice.
//!
//! # Format (little-endian)
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..8  | magic `b"DMTXMETA"` |
//! | 8..12 | format version u32 (4: table entries carry their value region and attribute schema) |
//! | 12..14 | node id u16 |
//! | 14..22 | region bytes u64 |
//! | 22..30 | allocator cursor (`next_free`) u64 |
//! | 30..34 | `T`, bytes of the table list u32 |
//! | 34..34+T | the table list, encoded as a CONTROL_RESULT `TABLES` payload ([`crate::server::wire`]) |
//! | 34+T.. | the named entries: count u32, per entry name len u16 + UTF-8, value len u32 + bytes |
//!
//! Sidecars of earlier formats (1: no runs, no named entries; 2: one of the two; 3: no
//! value region, no attributes) are refused with the fix: their table entries do not
//! decode as this build writes them.
//!
//! A table's value region ([`crate::ValueRegion`]) lies inside the space allocated for
//! the table, so its bytes are in the region file like the buckets', and the sidecar
//! records where it is with the rest of the table's metadata.
//!
//! # Crash ordering
//!
//! The sidecar is replaced atomically (write a temporary file, fsync, rename, fsync the
//! directory), after every allocation, every published table and every named entry.
//! Before a table or a named entry enters the sidecar, the whole region is msynced, so an
//! entry in the catalog implies the bytes loaded before it are durable. A crash between an allocation and its sidecar update loses only
//! the record of space nobody has been told about yet.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use dmtx_verbs::MnId;

use crate::server::wire::{decode_named_entries, encode_named_entries, ControlReply};
use crate::TableMeta;

const MAGIC: &[u8; 8] = b"DMTXMETA";
const VERSION: u32 = 4;
const HEADER_BYTES: usize = 30;

/// A backed node's durable state besides its region bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeMeta {
    pub node: MnId,
    pub region_bytes: u64,
    pub next_free: u64,
    pub tables: Vec<TableMeta>,
    pub named: BTreeMap<String, Vec<u8>>,
}

/// Where a backed node's sidecar lives.
#[derive(Debug)]
pub(crate) struct Sidecar {
    path: PathBuf,
}

/// Why a sidecar could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    /// Reading or writing the sidecar failed.
    #[error("{path}: {error}")]
    Io {
        /// The sidecar.
        path: PathBuf,
        /// The OS error (its text is in the message, so it is no `source`).
        error: io::Error,
    },
    /// The sidecar is not one this version wrote, or is damaged.
    #[error("{path}: {why}; move the backing file and its .meta aside to start empty")]
    Corrupt {
        /// The sidecar.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The file was created for another node or another region size.
    #[error(
        "{path}: made by node {was_node} with a region of {was_bytes} bytes, now started as node {node} \
         with {bytes} bytes; restart with --node-id {was_node} --size {was_bytes}, or use a new file"
    )]
    Mismatch {
        /// The sidecar.
        path: PathBuf,
        /// Node id recorded.
        was_node: u16,
        /// Region size recorded.
        was_bytes: u64,
        /// Node id now.
        node: u16,
        /// Region size now.
        bytes: u64,
    },
}

impl Sidecar {
    /// The sidecar of region file `backing`.
    pub fn of(backing: &Path) -> Self {
        let mut name = backing.as_os_str().to_owned();
        name.push(".meta");
        Self { path: name.into() }
    }

    /// The state saved by an earlier start, or `None` for a new file. `node` and
    /// `region_bytes` must match what was saved.
    pub fn load(&self, node: MnId, region_bytes: u64) -> Result<Option<NodeMeta>, BackingError> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(BackingError::Io {
                    path: self.path.clone(),
                    error,
                })
            }
        };
        let meta = self.decode(&bytes)?;
        if meta.node != node || meta.region_bytes != region_bytes {
            return Err(BackingError::Mismatch {
                path: self.path.clone(),
                was_node: meta.node.0,
                was_bytes: meta.region_bytes,
                node: node.0,
                bytes: region_bytes,
            });
        }
        Ok(Some(meta))
    }

    fn decode(&self, bytes: &[u8]) -> Result<NodeMeta, BackingError> {
        let corrupt = |why: String| BackingError::Corrupt {
            path: self.path.clone(),
            why,
        };
        if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
            return Err(corrupt("not a dmtx memory-node sidecar".into()));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(corrupt(format!(
                "format version {version}, this build reads {VERSION} (an older build made it)"
            )));
        }
        let node = MnId(u16::from_le_bytes(bytes[12..14].try_into().unwrap()));
        let (region_bytes, next_free) = (u64_at(14), u64_at(22));
        if next_free > region_bytes {
            return Err(corrupt(format!(
                "allocator cursor {next_free} beyond the region's {region_bytes} bytes"
            )));
        }
        let rest = &bytes[HEADER_BYTES..];
        let Some((len, rest)) = rest.split_first_chunk::<4>() else {
            return Err(corrupt("no table list length".into()));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > rest.len() {
            return Err(corrupt(format!(
                "table list of {len} bytes, {} left in the file",
                rest.len()
            )));
        }
        let (table_bytes, named_bytes) = rest.split_at(len);
        let tables = match ControlReply::decode(table_bytes) {
            Ok(ControlReply::Tables(t)) => t,
            Ok(_) => return Err(corrupt("no table list".into())),
            Err(e) => return Err(corrupt(format!("table list: {e}"))),
        };
        let named = decode_named_entries(named_bytes).map_err(|e| corrupt(format!("named entries: {e}")))?;
        Ok(NodeMeta {
            node,
            region_bytes,
            next_free,
            tables,
            named,
        })
    }

    /// Replace the saved state with `meta`, atomically.
    pub fn save(&self, meta: &NodeMeta) -> Result<(), BackingError> {
        let mut out = Vec::with_capacity(HEADER_BYTES + 64 * meta.tables.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&meta.node.0.to_le_bytes());
        out.extend_from_slice(&meta.region_bytes.to_le_bytes());
        out.extend_from_slice(&meta.next_free.to_le_bytes());
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        ControlReply::Tables(meta.tables.clone()).encode(&mut out);
        let table_bytes = (out.len() - len_at - 4) as u32;
        out[len_at..len_at + 4].copy_from_slice(&table_bytes.to_le_bytes());
        encode_named_entries(&mut out, &meta.named);
        let io = |error| BackingError::Io {
            path: self.path.clone(),
            error,
        };
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(&out).map_err(io)?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> NodeMeta {
        NodeMeta {
            node: MnId(2),
            region_bytes: 1 << 20,
            next_free: 4096,
            tables: vec![TableMeta {
                id: 7,
                name: "accounts".into(),
                value_bytes: 8,
                slot_bytes: 48,
                slots_per_bucket: 4,
                bucket_bytes: 208,
                bucket_count: 2,
                overflow_bucket_count: 1,
                replicas: vec![(MnId(2), 64), (MnId(0), 64)],
                runs: None,
                value_region: Some(crate::ValueRegion {
                    offset: 704,
                    bytes: 4096,
                }),
                attrs: vec![crate::Attr::new("balance", 0, 4), crate::Attr::new("flags", 4, 4)],
            }],
            named: BTreeMap::from([("log/0".to_owned(), vec![7; 20]), ("ts".to_owned(), vec![])]),
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dmtx-sidecar-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir.join("region")
    }

    #[test]
    fn saves_and_loads_back() {
        let s = Sidecar::of(&scratch("roundtrip"));
        assert_eq!(s.load(MnId(2), 1 << 20).unwrap(), None);
        s.save(&meta()).unwrap();
        assert_eq!(s.load(MnId(2), 1 << 20).unwrap(), Some(meta()));
    }

    #[test]
    fn another_node_or_size_is_refused_with_the_fix() {
        let s = Sidecar::of(&scratch("mismatch"));
        s.save(&meta()).unwrap();
        let e = s.load(MnId(2), 2 << 20).unwrap_err().to_string();
        assert!(e.contains("--size 1048576"), "{e}");
        let e = s.load(MnId(3), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("--node-id 2"), "{e}");
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let path = scratch("damage");
        let s = Sidecar::of(&path);
        s.save(&meta()).unwrap();
        let good = fs::read(&s.path).unwrap();
        for cut in [0, 5, HEADER_BYTES, good.len() - 1] {
            fs::write(&s.path, &good[..cut]).unwrap();
            assert!(
                matches!(s.load(MnId(2), 1 << 20), Err(BackingError::Corrupt { .. })),
                "cut {cut}"
            );
        }
        let mut bad = good.clone();
        bad[22..30].copy_from_slice(&u64::MAX.to_le_bytes());
        fs::write(&s.path, &bad).unwrap();
        assert!(matches!(s.load(MnId(2), 1 << 20), Err(BackingError::Corrupt { .. })));
        let mut bad = good.clone();
        bad[30..34].copy_from_slice(&u32::MAX.to_le_bytes());
        fs::write(&s.path, &bad).unwrap();
        assert!(matches!(s.load(MnId(2), 1 << 20), Err(BackingError::Corrupt { .. })));
    }

    /// Goal: a sidecar of an earlier format is refused with the fix, not misread.
    #[test]
    fn an_older_sidecar_is_refused_with_the_fix() {
        let s = Sidecar::of(&scratch("v3"));
        s.save(&meta()).unwrap();
        let mut bytes = fs::read(&s.path).unwrap();
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        fs::write(&s.path, &bytes).unwrap();
        let e = s.load(MnId(2), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("format version 3, this build reads 4"), "{e}");
        assert!(e.contains("move the backing file and its .meta aside"), "{e}");
    }
}
