//! Recording histories from running coordinators.
//!
//! A [`Recorder`] is the [`TxnObserver`] of one coordinator. The coordinators of a
//! worker thread share one [`History`] through an `Rc<RefCell<_>>` (they run on one
//! thread, so there is no synchronisation), and each thread's history is merged with
//! [`History::append`] after the run. Recording a transaction appends its metadata and
//! its reads and writes to flat vectors: no allocation once they have grown.
//!
//! What is recorded of each object ([`ObjSummary`](dmtx_runtime::ObjSummary)):
//!
//! - a read when the protocol set `version_read` (the version its snapshot selected) or
//!   `read_absent` (then the version is the deleter's tombstone, or
//!   [`INITIAL_VERSION`] when the protocol saw no version at all);
//! - a write for every read-write, insert or delete object, of the version the protocol
//!   installed (`version_written`), or of the transaction's id when it set none (an
//!   aborted transaction's id marks what it would have installed: G1a evidence), over
//!   `version_read`;
//! - the transaction's start and commit timestamps when the protocol took them.

use std::cell::RefCell;
use std::rc::Rc;

use dmtx_runtime::{Access, Phase, TxnObserver, TxnSummary};

use crate::history::{History, Outcome, Read, Write, WriteKind, INITIAL_VERSION, NO_TS};

/// Records every transaction of a coordinator into a shared [`History`].
pub struct Recorder {
    history: Rc<RefCell<History>>,
}

impl Recorder {
    /// A recorder appending to `history` (share one per worker thread).
    pub fn new(history: Rc<RefCell<History>>) -> Self {
        Self { history }
    }
}

impl TxnObserver for Recorder {
    fn on_finish(&mut self, txn: &TxnSummary<'_>) {
        let mut h = self.history.borrow_mut();
        let reads_at = h.reads.len();
        let writes_at = h.writes.len();
        for o in txn.objs {
            if o.version_read.is_some() || o.read_absent {
                h.reads.push(Read {
                    table: o.table,
                    key: o.key,
                    version: o.version_read.unwrap_or(INITIAL_VERSION),
                    absent: o.read_absent,
                });
            }
            let kind = match o.access {
                Access::ReadOnly => continue,
                Access::ReadWrite => WriteKind::Update,
                Access::Insert => WriteKind::Insert,
                Access::Delete => WriteKind::Delete,
            };
            h.writes.push(Write {
                table: o.table,
                key: o.key,
                prev: o.version_read,
                version: o.version_written.unwrap_or(txn.txn_id),
                kind,
            });
        }
        let outcome = match txn.outcome {
            Phase::Committed => Outcome::Committed,
            Phase::Aborted(_) | Phase::Active => Outcome::Aborted,
        };
        let meta = crate::history::TxnMeta {
            id: txn.txn_id,
            coord: txn.coord.compact(),
            start_ns: txn.start_ns,
            end_ns: txn.end_ns,
            start_ts: txn.start_ts.unwrap_or(NO_TS),
            commit_ts: txn.commit_ts.unwrap_or(NO_TS),
            outcome,
            reads_at: reads_at as u32,
            reads_len: (h.reads.len() - reads_at) as u16,
            writes_at: writes_at as u32,
            writes_len: (h.writes.len() - writes_at) as u16,
        };
        h.txns.push(meta);
    }
}

#[cfg(test)]
mod tests {
    use dmtx_runtime::{AbortReason, CoordId, ObjSummary};

    use super::*;

    fn obj(key: u64, access: Access, read: Option<u64>, absent: bool, written: Option<u64>) -> ObjSummary {
        ObjSummary {
            table: 1,
            key,
            access,
            version_read: read,
            read_absent: absent,
            version_written: written,
        }
    }

    /// Goal: the recorder keeps what the protocol reported: the version it installed
    /// (else the transaction's id), the version its snapshot read, absent reads with and
    /// without a tombstone, and the timestamps. Method: two summaries through
    /// `on_finish`, then the records they became.
    #[test]
    fn records_versions_absent_reads_and_timestamps() {
        let h = Rc::new(RefCell::new(History::new()));
        let mut rec = Recorder::new(h.clone());
        let coord = CoordId {
            cn: 0,
            thread: 1,
            coroutine: 2,
        };
        let id = coord.txn_id(3);
        let objs = [
            obj(10, Access::ReadOnly, Some(77), false, None),
            obj(11, Access::ReadOnly, Some(78), true, None),
            obj(12, Access::ReadOnly, None, true, None),
            obj(13, Access::ReadWrite, Some(5), false, Some(id)),
            obj(14, Access::Insert, Some(79), true, Some(id)),
            obj(15, Access::ReadOnly, None, false, None),
        ];
        rec.on_finish(&TxnSummary {
            coord,
            txn_seq: 3,
            txn_id: id,
            start_ns: 100,
            end_ns: 200,
            start_ts: Some(40),
            commit_ts: Some(44),
            outcome: Phase::Committed,
            objs: &objs,
        });
        // Aborted, no timestamps, nothing installed: writes name the transaction's id.
        let aborted = [obj(13, Access::Delete, Some(id), false, None)];
        rec.on_finish(&TxnSummary {
            coord,
            txn_seq: 4,
            txn_id: id + 1,
            start_ns: 300,
            end_ns: 400,
            start_ts: None,
            commit_ts: None,
            outcome: Phase::Aborted(AbortReason::LockConflict),
            objs: &aborted,
        });
        drop(rec);
        let h = Rc::try_unwrap(h).unwrap().into_inner();
        let t = h.record(0);
        assert_eq!((t.id, t.coord, t.start_ns, t.end_ns), (id, coord.compact(), 100, 200));
        assert_eq!((t.start_ts, t.commit_ts), (Some(40), Some(44)));
        assert_eq!(
            t.reads,
            [
                Read::of(1, 10, 77),
                Read::absent(1, 11, 78),
                Read::absent(1, 12, INITIAL_VERSION),
                Read::of(1, 13, 5),
                Read::absent(1, 14, 79),
            ],
            "object 15 was never fetched: no read"
        );
        let w = |key, prev, version, kind| Write {
            table: 1,
            key,
            prev,
            version,
            kind,
        };
        assert_eq!(
            t.writes,
            [
                w(13, Some(5), id, WriteKind::Update),
                w(14, Some(79), id, WriteKind::Insert),
            ]
        );
        let t = h.record(1);
        assert_eq!((t.outcome, t.start_ts, t.commit_ts), (Outcome::Aborted, None, None));
        assert_eq!(t.writes, [w(13, Some(id), id + 1, WriteKind::Delete)]);
    }

    /// Goal: a protocol that installs versions other than its transaction id is recorded
    /// with them (the version is the protocol's, not the recorder's guess).
    #[test]
    fn records_the_version_installed() {
        let h = Rc::new(RefCell::new(History::new()));
        let mut rec = Recorder::new(h.clone());
        let coord = CoordId {
            cn: 1,
            thread: 0,
            coroutine: 0,
        };
        let objs = [obj(1, Access::ReadWrite, Some(0), false, Some(999))];
        rec.on_finish(&TxnSummary {
            coord,
            txn_seq: 1,
            txn_id: coord.txn_id(1),
            start_ns: 0,
            end_ns: 0,
            start_ts: None,
            commit_ts: None,
            outcome: Phase::Committed,
            objs: &objs,
        });
        assert_eq!(h.borrow().writes[0].version, 999);
    }
}
