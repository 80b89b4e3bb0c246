//! The on-disk history format, version 2: JSON lines.
//!
//! ```text
//! {"format":"dmtx-history","version":2}
//! {"id":4398046511105,"coord":1,"start_ns":120,"end_ns":910,"start_ts":41,"commit_ts":44,
//!  "outcome":"committed",
//!  "reads":[{"table":0,"key":7,"version":0},{"table":0,"key":9,"version":0,"absent":true}],
//!  "writes":[{"table":0,"key":7,"prev":0,"version":4398046511105,"kind":"update"}]}
//! ...
//! ```
//!
//! The first line is the header, `{"format":"dmtx-history","version":2}`; every other
//! line is one transaction (a [`TxnRecord`], one line each, shown folded above), in any
//! order. Blank lines are skipped.
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `id` | u64 | cluster-unique transaction id: coordinator (24 bits) << 40 \| sequence (from 1). The coordinator's transactions in sequence order are its **session**. |
//! | `coord` | u32, default 0 | coordinator: CN << 16 \| thread << 8 \| coroutine; transactions with the same `coord` form one session |
//! | `start_ns`, `end_ns` | u64, default 0 | clock readings at begin and at the outcome (one clock per compute node; Unix-epoch ns of the host's wall clock in histories of `dmtx bench --cn` runs, so that several hosts' histories compare up to their clocks' offset), for real-time order |
//! | `start_ts` | u64, optional | the start (snapshot, read) timestamp, for protocols that take one: every read must see the newest version committed with `commit_ts <= start_ts`, or the transaction's own write |
//! | `commit_ts` | u64, optional | the commit timestamp, for protocols that take one; absent for read-only transactions that take none |
//! | `outcome` | `"committed"` or `"aborted"` | how it ended; an aborted transaction's writes must be invisible |
//! | `reads` | list, default empty | every version read, see below |
//! | `writes` | list, default empty | every version installed (or, when aborted, that would have been), see below |
//!
//! A read is `{table, key, version, absent}`:
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `table` | u32 | table id |
//! | `key` | u64 | key |
//! | `version` | u64 | the version read, named by its writer's id; `0` is the record as bulk-loaded. A multi-version protocol names the version its snapshot selected, which may be older than the newest. |
//! | `absent` | bool, default `false`, written only when `true` | the key was absent: `version` is the tombstone a delete installed, or `0` when no version at all was seen |
//!
//! A write is `{table, key, prev, version, kind}`:
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `table`, `key` | u32, u64 | the object |
//! | `prev` | u64 or `null` | the version replaced (`null` for an insert into a free slot) |
//! | `version` | u64 | the version installed, unique per key: the writer's id for every protocol so far |
//! | `kind` | `"update"`, `"insert"` or `"delete"` | what the write did; a delete's `version` names its tombstone |
//!
//! Read-write objects appear in both lists.
//!
//! **Versions.** Version 1 had no `start_ts`, `commit_ts` or `absent`; this build reads
//! version 1 files as version 2 files without them, and writes version 2 (a history
//! without timestamps or absent reads differs from version 1 only in its header).
//! Readers refuse a header they do not know, naming the versions they read.

use std::io::{BufRead, Write as _};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::history::{History, TxnRecord};

/// Name in the header line.
pub const FORMAT_NAME: &str = "dmtx-history";
/// Version written by this build.
pub const FORMAT_VERSION: u32 = 2;
/// Every version this build reads.
pub const FORMAT_VERSIONS_READ: [u32; 2] = [1, 2];

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
    #[error("{path}: history format version {found}, this dmtx reads versions 1 and 2; check it with the dmtx that wrote it")]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// The version in the header.
        found: u32,
    },
    /// Two histories given together hold the same transaction id.
    #[error("transaction {id} is in both {first} and {second}: give each compute node's history once (histories of different runs cannot be checked together)")]
    DuplicateId {
        /// The id.
        id: u64,
        /// One file holding it.
        first: String,
        /// Another (or the same file, twice).
        second: String,
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

/// Read several histories (one per compute node of a multi-process run) as one.
/// Transaction ids and coordinators name their compute node, so the files' transactions
/// never collide; one that does is a [`FormatError::DuplicateId`].
pub fn read_histories(paths: &[impl AsRef<Path>]) -> Result<History, FormatError> {
    let mut all = History::new();
    let mut files: Vec<(u64, usize)> = Vec::new();
    for (f, p) in paths.iter().enumerate() {
        let h = read_history(p.as_ref())?;
        files.extend(h.txns.iter().map(|t| (t.id, f)));
        all.append(h);
    }
    files.sort_unstable();
    if let Some(w) = files.windows(2).find(|w| w[0].0 == w[1].0) {
        let name = |f: usize| paths[f].as_ref().display().to_string();
        return Err(FormatError::DuplicateId {
            id: w[0].0,
            first: name(w[0].1),
            second: name(w[1].1),
        });
    }
    Ok(all)
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
    if !FORMAT_VERSIONS_READ.contains(&header.version) {
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
        if header.version == 1 {
            if let Some(field) = newer_field(&rec) {
                return Err(FormatError::BadLine {
                    path: name.to_string(),
                    line: i + 2,
                    why: format!(
                        "`{field}` is a version 2 field, but the header says version 1; write the header as version 2"
                    ),
                });
            }
        }
        history.push(&rec);
    }
    Ok(history)
}

/// The first field of `rec` that version 1 did not have.
fn newer_field(rec: &TxnRecord) -> Option<&'static str> {
    if rec.start_ts.is_some() {
        Some("start_ts")
    } else if rec.commit_ts.is_some() {
        Some("commit_ts")
    } else if rec.reads.iter().any(|r| r.absent) {
        Some("absent")
    } else {
        None
    }
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
                start_ts: None,
                commit_ts: None,
                outcome: Outcome::Committed,
                reads: vec![Read::of(0, 7, 0)],
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
                start_ts: None,
                commit_ts: None,
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

    /// `sample` with version 2's fields: timestamps and an absent read.
    fn sample_v2() -> History {
        let mut records: Vec<TxnRecord> = (0..sample().len()).map(|i| sample().record(i)).collect();
        records[0].start_ts = Some(40);
        records[0].commit_ts = Some(44);
        records[0].reads.push(Read::absent(0, 9, 0));
        records[1].start_ts = Some(45);
        History::from_records(&records)
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("dmtx-format-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn parse(s: &str) -> Result<History, FormatError> {
        read_from(std::io::Cursor::new(s.to_string()), "x")
    }

    /// Goal: version 2 round-trips timestamps and absent reads and writes them as
    /// documented; a history without them differs from version 1 only in its header.
    #[test]
    fn round_trips_version_2() {
        let dir = scratch("v2");
        let p = dir.join("h.jsonl");
        let h = sample_v2();
        write_history(&p, &h).unwrap();
        assert_eq!(read_history(&p).unwrap(), h);
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "{\"format\":\"dmtx-history\",\"version\":2}");
        assert_eq!(
            lines[1],
            "{\"id\":1099511627777,\"coord\":1,\"start_ns\":5,\"end_ns\":9,\"start_ts\":40,\"commit_ts\":44,\
             \"outcome\":\"committed\",\"reads\":[{\"table\":0,\"key\":7,\"version\":0},\
             {\"table\":0,\"key\":9,\"version\":0,\"absent\":true}],\"writes\":[{\"table\":0,\"key\":7,\
             \"prev\":0,\"version\":1099511627777,\"kind\":\"update\"}]}"
        );
        assert!(lines[2].contains("\"start_ts\":45,\"outcome\""), "{}", lines[2]);
        assert!(
            !lines[2].contains("commit_ts"),
            "an untaken timestamp is left out: {}",
            lines[2]
        );

        write_history(&p, &sample()).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains("_ts") && !text.contains("absent"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Goal: several files read as one history (every transaction once, each file's reads
    /// and writes still its own), shifted times included; a transaction in two files is
    /// refused naming both.
    #[test]
    fn reads_several_files_as_one() {
        let dir = scratch("several");
        let (a, b) = (dir.join("cn0.jsonl"), dir.join("cn1.jsonl"));
        let mut first = sample();
        first.shift_times(1000);
        assert_eq!((first.txns[0].start_ns, first.txns[0].end_ns), (1005, 1009));
        write_history(&a, &first).unwrap();
        write_history(&b, &sample_v2_other_cn()).unwrap();
        let both = read_histories(&[&a, &b]).unwrap();
        let mut want = first.clone();
        want.append(sample_v2_other_cn());
        assert_eq!(both, want);
        let e = read_histories(&[&a, &a]).unwrap_err().to_string();
        assert!(e.contains("is in both") && e.contains("cn0.jsonl"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `sample_v2` as run by compute node 1 (other coordinators and transaction ids).
    fn sample_v2_other_cn() -> History {
        let h = sample_v2();
        History::from_records(
            &(0..h.len())
                .map(|i| {
                    let mut r = h.record(i);
                    r.coord |= 1 << 16;
                    r.id |= 1 << 56;
                    r
                })
                .collect::<Vec<_>>(),
        )
    }

    /// Goal: version 1 files (as dmtx wrote them before version 2) still read, to the
    /// same history; a version 1 file that uses a version 2 field is refused naming it.
    #[test]
    fn reads_version_1() {
        let v1 = "{\"format\":\"dmtx-history\",\"version\":1}\n\
            {\"id\":1099511627777,\"coord\":1,\"start_ns\":5,\"end_ns\":9,\"outcome\":\"committed\",\
            \"reads\":[{\"table\":0,\"key\":7,\"version\":0}],\
            \"writes\":[{\"table\":0,\"key\":7,\"prev\":0,\"version\":1099511627777,\"kind\":\"update\"}]}\n\
            \n\
            {\"id\":1099511627778,\"coord\":1,\"start_ns\":10,\"end_ns\":12,\"outcome\":\"aborted\",\
            \"writes\":[{\"table\":0,\"key\":9,\"prev\":null,\"version\":1099511627778,\"kind\":\"insert\"}]}\n";
        assert_eq!(parse(v1).unwrap(), sample());
        let h = parse(v1).unwrap();
        assert!(h
            .txns
            .iter()
            .all(|t| t.start_ts == crate::history::NO_TS && t.commit_ts == crate::history::NO_TS));

        let e =
            parse("{\"format\":\"dmtx-history\",\"version\":1}\n{\"id\":1,\"outcome\":\"committed\",\"start_ts\":3}\n")
                .unwrap_err()
                .to_string();
        assert_eq!(
            e,
            "x:2: `start_ts` is a version 2 field, but the header says version 1; write the header as version 2"
        );
        let e = parse(
            "{\"format\":\"dmtx-history\",\"version\":1}\n\
             {\"id\":1,\"outcome\":\"committed\",\"reads\":[{\"table\":0,\"key\":1,\"version\":0,\"absent\":true}]}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`absent` is a version 2 field"), "{e}");
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let dir = scratch("bad");
        assert!(matches!(parse(""), Err(FormatError::NotAHistory { .. })));
        assert!(matches!(parse("{\"a\":1}\n"), Err(FormatError::NotAHistory { .. })));
        let e = parse("{\"format\":\"dmtx-history\",\"version\":9}\n").unwrap_err();
        assert!(matches!(e, FormatError::UnsupportedVersion { found: 9, .. }));
        assert_eq!(
            e.to_string(),
            "x: history format version 9, this dmtx reads versions 1 and 2; check it with the dmtx that wrote it"
        );
        let e = parse("{\"format\":\"dmtx-history\",\"version\":2}\n{\"id\":1}\n").unwrap_err();
        assert!(e.to_string().starts_with("x:2:"), "{e}");
        assert!(matches!(
            read_history(&dir.join("missing")),
            Err(FormatError::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
