//! The on-disk history format, version 1: JSON lines.
//!
//! ```text
//! {"format":"dmtx-history","version":1}
//! {"id":4398046511105,"coord":1,"start_ns":120,"end_ns":910,"outcome":"committed",
//!  "reads":[{"table":0,"key":7,"version":0}],
//!  "writes":[{"table":0,"key":7,"prev":0,"version":4398046511105,"kind":"update"}]}
//! ...
//! ```
//!
//! The first line is the header; every other line is one transaction (a
//! [`TxnRecord`], one line each, shown folded above):
//!
//! | field | meaning |
//! | --- | --- |
//! | `id` | cluster-unique transaction id: coordinator (24 bits) << 40 \| sequence; also the version its writes install |
//! | `coord` | coordinator: CN << 16 \| thread << 8 \| coroutine |
//! | `start_ns`, `end_ns` | clock readings at begin and at the outcome (one clock per compute node) |
//! | `outcome` | `committed` or `aborted` |
//! | `reads` | `{table, key, version}`: every version the transaction read |
//! | `writes` | `{table, key, prev, version, kind}`: `prev` is the version replaced (`null` for an insert), `kind` is `update`, `insert` or `delete` |
//!
//! Version `0` is a record as bulk-loaded. Read-write objects appear in both lists.
//! Readers refuse a header they do not know, naming the version they support.

use std::io::{BufRead, Write as _};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::history::{History, TxnRecord};

/// Name in the header line.
pub const FORMAT_NAME: &str = "dmtx-history";
/// Version written and read by this build.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
}

/// Why a history file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file could not be opened, read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The OS error (its text is in the message, so it is no `source`).
        error: std::io::Error,
    },
    /// The first line is not a dmtx history header.
    #[error(
        "{path}: not a dmtx history (first line must be {{\"format\":\"dmtx-history\",\"version\":{FORMAT_VERSION}}})"
    )]
    NotAHistory {
        /// The file.
        path: String,
    },
    /// A history of a format version this build cannot read.
    #[error("{path}: history format version {found}, this dmtx reads version {FORMAT_VERSION}")]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// The version in the header.
        found: u32,
    },
    /// A transaction line does not parse.
    #[error("{path}:{line}: {why}")]
    BadLine {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        why: String,
    },
}

/// Write `history` to `path`.
pub fn write_history(path: &Path, history: &History) -> Result<(), FormatError> {
    let io = |error| FormatError::Io {
        path: path.display().to_string(),
        error,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let header = Header {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
    };
    serde_json::to_writer(&mut out, &header).map_err(|e| io(e.into()))?;
    out.write_all(b"\n").map_err(io)?;
    for i in 0..history.len() {
        serde_json::to_writer(&mut out, &history.record(i)).map_err(|e| io(e.into()))?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)
}

/// Read a history from `path`.
pub fn read_history(path: &Path) -> Result<History, FormatError> {
    let name = path.display().to_string();
    let io = |error| FormatError::Io {
        path: name.clone(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    read_from(std::io::BufReader::with_capacity(1 << 20, file), &name)
}

/// Read a history from any reader; `name` is used in messages.
pub fn read_from(reader: impl BufRead, name: &str) -> Result<History, FormatError> {
    let mut lines = reader.lines();
    let not_history = || FormatError::NotAHistory { path: name.to_string() };
    let first = match lines.next() {
        Some(Ok(l)) => l,
        Some(Err(error)) => {
            return Err(FormatError::Io {
                path: name.to_string(),
                error,
            })
        }
        None => return Err(not_history()),
    };
    let header: Header = serde_json::from_str(&first).map_err(|_| not_history())?;
    if header.format != FORMAT_NAME {
        return Err(not_history());
    }
    if header.version != FORMAT_VERSION {
        return Err(FormatError::UnsupportedVersion {
            path: name.to_string(),
            found: header.version,
        });
    }
    let mut history = History::new();
    for (i, line) in lines.enumerate() {
        let line = line.map_err(|error| FormatError::Io {
            path: name.to_string(),
            error,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: TxnRecord = serde_json::from_str(&line).map_err(|e| FormatError::BadLine {
            path: name.to_string(),
            line: i + 2,
            why: e.to_string(),
        })?;
        history.push(&rec);
    }
    Ok(history)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Outcome, Read, Write, WriteKind};

    fn sample() -> History {
        History::from_records(&[
            TxnRecord {
                id: (1 << 40) | 1,
                coord: 1,
                start_ns: 5,
                end_ns: 9,
                outcome: Outcome::Committed,
                reads: vec![Read {
                    table: 0,
                    key: 7,
                    version: 0,
                }],
                writes: vec![Write {
                    table: 0,
                    key: 7,
                    prev: Some(0),
                    version: (1 << 40) | 1,
                    kind: WriteKind::Update,
                }],
            },
            TxnRecord {
                id: (1 << 40) | 2,
                coord: 1,
                start_ns: 10,
                end_ns: 12,
                outcome: Outcome::Aborted,
                reads: vec![],
                writes: vec![Write {
                    table: 0,
                    key: 9,
                    prev: None,
                    version: (1 << 40) | 2,
                    kind: WriteKind::Insert,
                }],
            },
        ])
    }

    #[test]
    fn round_trips_and_refuses_what_it_cannot_read() {
        let dir = std::env::temp_dir().join(format!("dmtx-format-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("h.jsonl");
        let h = sample();
        write_history(&p, &h).unwrap();
        assert_eq!(read_history(&p).unwrap(), h);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("{\"format\":\"dmtx-history\",\"version\":1}\n"));

        let bad = |s: &str| read_from(std::io::Cursor::new(s.to_string()), "x");
        assert!(matches!(bad(""), Err(FormatError::NotAHistory { .. })));
        assert!(matches!(bad("{\"a\":1}\n"), Err(FormatError::NotAHistory { .. })));
        assert!(matches!(
            bad("{\"format\":\"dmtx-history\",\"version\":9}\n"),
            Err(FormatError::UnsupportedVersion { found: 9, .. })
        ));
        let e = bad("{\"format\":\"dmtx-history\",\"version\":1}\n{\"id\":1}\n").unwrap_err();
        assert!(e.to_string().starts_with("x:2:"), "{e}");
        assert!(matches!(
            read_history(&dir.join("missing")),
            Err(FormatError::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
