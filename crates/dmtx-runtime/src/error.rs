//! Runtime setup errors.

/// Why a compute node, worker or coordinator could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Table metadata or placement.
    #[error(transparent)]
    Store(#[from] dmtx_store::StoreError),
    /// The memory pool's control interface.
    #[error(transparent)]
    Control(#[from] dmtx_memnode::ControlError),
    /// A verb failed during setup.
    #[error(transparent)]
    Verb(#[from] dmtx_verbs::VerbError),
    /// A run-wide named area could not be published or fetched.
    #[error(transparent)]
    Named(#[from] crate::named::NamedError),
    /// CN↔CN messaging could not be set up.
    #[error(transparent)]
    Msg(#[from] dmtx_verbs::msg::MsgError),
    /// The protocol cannot run on this compute node as configured (a knob that needs one
    /// compute node, on another).
    #[error("{protocol}: {why}")]
    Protocol {
        /// The protocol's name.
        protocol: &'static str,
        /// What is wrong and what to change.
        why: String,
    },
}

/// `Result` with a [`RuntimeError`].
pub type Result<T> = std::result::Result<T, RuntimeError>;
