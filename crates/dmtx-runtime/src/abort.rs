//! Why a transaction aborted.
//!
//! The reasons every protocol shares are variants of [`AbortReason`]; a protocol adds its
//! own by declaring them in `Protocol::ABORT_REASONS` (a table of [`AbortReasonSpec`])
//! and aborting with [`AbortReason::Protocol`] and the entry's index. Either way the
//! reason is one `Copy` word: results name it from the tables once, after the run, and
//! the driver's retry decision reads the spec's `retryable` (an array index, no string).

use std::fmt;

/// Most reasons one protocol may declare in `Protocol::ABORT_REASONS`: results keep a
/// fixed slot per reason, so the counters of a run stay an array.
pub const PROTOCOL_ABORT_REASONS_MAX: usize = 16;

/// What an abort reason is called, whether the driver retries it, and what it means.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AbortReasonSpec {
    /// snake_case name used in results (`abort_reasons`); unique among the shared
    /// reasons' names and the protocol's.
    pub name: &'static str,
    /// Whether the same inputs may well commit on a later attempt (a concurrency abort),
    /// so the driver runs them again (`retry_aborts`).
    pub retryable: bool,
    /// One line for the documentation and the summary: when the protocol aborts with it.
    pub help: &'static str,
}

impl AbortReasonSpec {
    /// A reason named `name`.
    pub const fn new(name: &'static str, retryable: bool, help: &'static str) -> Self {
        Self { name, retryable, help }
    }
}

/// The reason a transaction did not commit. Aborts are values, counted in results; they
/// are not errors.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AbortReason {
    /// A lock was held by another transaction.
    LockConflict,
    /// Validation found a record changed or locked since it was read.
    Validation,
    /// A record stayed invisible (being committed by another transaction) through every re-read.
    Invisible,
    /// A lock-free read kept returning a torn record through every re-read.
    Torn,
    /// A key that must exist does not.
    NotFound,
    /// An insert found its key already present.
    Duplicate,
    /// The workload's own logic rolled back (e.g. TPC-C's 1% NewOrder rollback).
    User,
    /// A verb failed (memory node down, connection lost); the transaction rolled back.
    Fault,
    /// An insert found no free slot in its bucket chain and the overflow space was used up.
    TableFull,
    /// The transaction's undo log needs more room than the protocol's log area holds
    /// (FORD's `log_bytes`): it can never commit, so a run stops on it.
    LogFull,
    /// A reason of the protocol's own: the index of its entry in
    /// `Protocol::ABORT_REASONS` (below [`PROTOCOL_ABORT_REASONS_MAX`]).
    Protocol(u8),
}

impl AbortReason {
    /// Every reason, in result order.
    pub const ALL: [AbortReason; 10] = [
        AbortReason::LockConflict,
        AbortReason::Validation,
        AbortReason::Invisible,
        AbortReason::Torn,
        AbortReason::NotFound,
        AbortReason::Duplicate,
        AbortReason::User,
        AbortReason::Fault,
        AbortReason::TableFull,
        AbortReason::LogFull,
    ];

    /// The shared reasons' specs, indexed like [`AbortReason::ALL`]. Retried: the
    /// concurrency aborts, whose next attempt may well commit, and `not_found` and
    /// `duplicate`, which escape a workload only where a concurrent commit explains them
    /// (TPC-C StockLevel's ORDER not inserted yet; TATP's not-found is an outcome). Not
    /// retried: the workload's own decision, a lost node, a full table or log, which the
    /// same inputs would meet again.
    pub const SHARED: [AbortReasonSpec; 10] = [
        AbortReasonSpec::new("lock_conflict", true, "a lock was held by another transaction"),
        AbortReasonSpec::new(
            "validation",
            true,
            "validation found a record changed or locked since it was read",
        ),
        AbortReasonSpec::new(
            "invisible",
            true,
            "a record stayed invisible (being committed) through every re-read",
        ),
        AbortReasonSpec::new("torn", true, "a lock-free read stayed torn through every re-read"),
        AbortReasonSpec::new("not_found", true, "a key that must exist does not"),
        AbortReasonSpec::new("duplicate", true, "an insert found its key already present"),
        AbortReasonSpec::new("user", false, "the workload's own logic rolled back"),
        AbortReasonSpec::new("fault", false, "a verb failed (memory node down, connection lost)"),
        AbortReasonSpec::new(
            "table_full",
            false,
            "an insert found no free slot and no overflow space",
        ),
        AbortReasonSpec::new(
            "log_full",
            false,
            "the undo log needs more room than the log area holds",
        ),
    ];

    /// Where this reason's counters go: its index in [`AbortReason::ALL`] for a shared
    /// reason, `ALL.len() + i` for `Protocol(i)`. Below
    /// `ALL.len() + PROTOCOL_ABORT_REASONS_MAX`, except for a protocol index out of range.
    #[inline]
    pub const fn slot(self) -> usize {
        match self {
            AbortReason::LockConflict => 0,
            AbortReason::Validation => 1,
            AbortReason::Invisible => 2,
            AbortReason::Torn => 3,
            AbortReason::NotFound => 4,
            AbortReason::Duplicate => 5,
            AbortReason::User => 6,
            AbortReason::Fault => 7,
            AbortReason::TableFull => 8,
            AbortReason::LogFull => 9,
            AbortReason::Protocol(i) => Self::ALL.len() + i as usize,
        }
    }

    /// This reason's spec: a shared one's, or entry `i` of `protocol` (the protocol's
    /// `ABORT_REASONS`) for `Protocol(i)`; `None` for an index the table lacks.
    #[inline]
    pub fn spec(self, protocol: &'static [AbortReasonSpec]) -> Option<&'static AbortReasonSpec> {
        match self {
            AbortReason::Protocol(i) => protocol.get(i as usize),
            shared => Some(&Self::SHARED[shared.slot()]),
        }
    }

    /// snake_case name used in results; a protocol's reason is named by its table
    /// ([`AbortReason::spec`]), so here it is just `protocol`.
    pub fn name(self) -> &'static str {
        match self {
            AbortReason::Protocol(_) => "protocol",
            shared => Self::SHARED[shared.slot()].name,
        }
    }

    /// Whether the driver runs the same inputs again after this abort: the spec's
    /// `retryable`; an undeclared protocol index is not retried.
    #[inline]
    pub fn retryable(self, protocol: &'static [AbortReasonSpec]) -> bool {
        self.spec(protocol).is_some_and(|s| s.retryable)
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Protocol(i) => write!(f, "protocol reason {i}"),
            shared => f.write_str(shared.name()),
        }
    }
}

/// Check a protocol's `ABORT_REASONS` table: at most [`PROTOCOL_ABORT_REASONS_MAX`]
/// entries, names non-empty and unique among themselves and the shared reasons'.
/// Returns the first problem, worded for the protocol's author.
pub fn check_abort_reasons(protocol: &str, table: &[AbortReasonSpec]) -> Result<(), String> {
    if table.len() > PROTOCOL_ABORT_REASONS_MAX {
        return Err(format!(
            "protocol `{protocol}` declares {} abort reasons, more than the {PROTOCOL_ABORT_REASONS_MAX} results keep; merge some",
            table.len()
        ));
    }
    for (i, spec) in table.iter().enumerate() {
        let clash = AbortReason::SHARED
            .iter()
            .chain(&table[..i])
            .any(|s| s.name == spec.name);
        if spec.name.is_empty() || clash {
            return Err(format!(
                "protocol `{protocol}`: abort reason {i} is named `{}`, which is empty or already a reason's name; rename it in ABORT_REASONS",
                spec.name
            ));
        }
    }
    Ok(())
}

/// A transaction aborted. By the time a caller sees this, every lock the transaction
/// took is being released and nothing it wrote is visible.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Abort {
    /// Why.
    pub reason: AbortReason,
}

impl Abort {
    /// An abort for `reason`.
    #[inline]
    pub const fn new(reason: AbortReason) -> Self {
        Self { reason }
    }
}

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "aborted: {}", self.reason)
    }
}

impl std::error::Error for Abort {}

#[cfg(test)]
mod tests {
    use super::*;

    const MINE: &[AbortReasonSpec] = &[
        AbortReasonSpec::new("lease_expired", true, "a lease ran out"),
        AbortReasonSpec::new("too_old", false, "the snapshot is gone"),
    ];

    #[test]
    fn shared_slots_follow_all_and_protocol_reasons_follow_them() {
        for (i, r) in AbortReason::ALL.iter().enumerate() {
            assert_eq!(r.slot(), i, "{r}");
            assert_eq!(r.spec(MINE).unwrap().name, r.name());
        }
        assert_eq!(AbortReason::Protocol(1).slot(), AbortReason::ALL.len() + 1);
        assert_eq!(AbortReason::Protocol(0).spec(MINE).unwrap().name, "lease_expired");
        assert_eq!(AbortReason::Protocol(2).spec(MINE), None);
    }

    #[test]
    fn retryable_reads_the_spec() {
        let retried: Vec<&str> = AbortReason::ALL
            .iter()
            .filter(|r| r.retryable(&[]))
            .map(|r| r.name())
            .collect();
        assert_eq!(
            retried,
            [
                "lock_conflict",
                "validation",
                "invisible",
                "torn",
                "not_found",
                "duplicate"
            ]
        );
        assert!(AbortReason::Protocol(0).retryable(MINE));
        assert!(!AbortReason::Protocol(1).retryable(MINE));
        assert!(!AbortReason::Protocol(7).retryable(MINE), "undeclared: not retried");
    }

    #[test]
    fn a_table_with_a_clashing_or_empty_name_or_too_many_entries_is_refused() {
        assert_eq!(check_abort_reasons("p", MINE), Ok(()));
        let clash = [AbortReasonSpec::new("torn", true, "")];
        assert!(check_abort_reasons("p", &clash).unwrap_err().contains("`torn`"));
        let twice = [MINE[0], MINE[0]];
        assert!(check_abort_reasons("p", &twice).unwrap_err().contains("abort reason 1"));
        let empty = [AbortReasonSpec::new("", true, "")];
        assert!(check_abort_reasons("p", &empty).is_err());
        let many = [MINE[0]; PROTOCOL_ABORT_REASONS_MAX + 1];
        assert!(check_abort_reasons("p", &many)
            .unwrap_err()
            .contains("17 abort reasons"));
    }
}
