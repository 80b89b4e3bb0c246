//! Why a transaction aborted.

use std::fmt;

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

    /// snake_case name used in results.
    pub fn name(self) -> &'static str {
        match self {
            AbortReason::LockConflict => "lock_conflict",
            AbortReason::Validation => "validation",
            AbortReason::Invisible => "invisible",
            AbortReason::Torn => "torn",
            AbortReason::NotFound => "not_found",
            AbortReason::Duplicate => "duplicate",
            AbortReason::User => "user",
            AbortReason::Fault => "fault",
            AbortReason::TableFull => "table_full",
            AbortReason::LogFull => "log_full",
        }
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
