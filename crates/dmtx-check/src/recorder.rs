//! Recording histories from running coordinators.
//!
//! A [`Recorder`] is the [`TxnObserver`] of one coordinator. The coordinators of a
//! worker thread share one [`History`] through an `Rc<RefCell<_>>` (they run on one
//! thread, so there is no synchronisation), and each thread's history is merged with
//! [`History::append`] after the run. Recording a transaction appends its metadata and
//! its reads and writes to flat vectors: no allocation once they have grown.

use std::cell::RefCell;
use std::rc::Rc;

use dmtx_runtime::{Access, Phase, TxnObserver, TxnSummary};

use crate::history::{History, Outcome, Read, Write, WriteKind};

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
            if let Some(version) = o.version_read {
                h.reads.push(Read {
                    table: o.table,
                    key: o.key,
                    version,
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
                // The version a write installs is its transaction's id; an aborted
                // transaction's id marks what it would have installed (G1a evidence).
                version: txn.txn_id,
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
            outcome,
            reads_at: reads_at as u32,
            reads_len: (h.reads.len() - reads_at) as u16,
            writes_at: writes_at as u32,
            writes_len: (h.writes.len() - writes_at) as u16,
        };
        h.txns.push(meta);
    }
}
