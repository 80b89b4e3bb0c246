//! FORD's record layout: the one-version record ([`crate::onever::record`]), FORD §5.1
//! FObj plus dmtx's checksum ([`crate::onever::tear`]).
//!
//! FORD's own use of the lock word: a commit turns a primary's `vlock` from `owner` to
//! `INVISIBLE | owner` by CAS before its WRITE, and writes `INVISIBLE | owner` to each
//! backup with the record (§4.3.2); readers skip invisible records, and the checksum
//! catches the reads that started before the CAS.

pub use crate::onever::record::{
    encode_image, meta, SlotView, CHECKSUM, HEADER_BYTES, INVISIBLE, KEY, LOADED_VERSION, META, VALUE, VERSION, VLOCK,
};
pub use crate::onever::tear::checksum;

/// FORD's [`dmtx_store::SlotLayout`].
pub type FordLayout = crate::onever::record::OneVersionLayout;
