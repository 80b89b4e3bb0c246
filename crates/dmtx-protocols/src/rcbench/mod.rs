//! What RCBench's protocols share (rcbench.txt §3–4): the item layout
//! ([`layout`]: X^d and X^m side by side, the lock word highest, found through the
//! cuckoo index of `dmtx_store::cuckoo`), and the six primitives with σ, T^g and the
//! §5.5 switches ([`prims`]).
//!
//! An RCBench node is compute and memory in one; in dmtx a `MemStore` is a memory-node
//! region and an executor is a coordinator, so every item and every T^g, the
//! coordinator's own included, is reached by verbs. What dmtx pays beyond RCBench:
//! a node's local items cost a round trip here, not a memory access; a write to one's
//! own T^g is one WRITE or CAS (no Tid-check READ).
//!
//! Choices where the paper is silent:
//! - **PK word** `key + 1`, so key 0 is indexable and 0 means "no key" (§4.2.1 reserves
//!   0); key `u64::MAX` is refused.
//! - **Tid** `(seq + 1)·Δ + coord·R + seq mod R` with Δ = coordinators · R, R = 4: the
//!   ring of Eq. 2 without a shared counter.
//! - **db/or off** split one logical batch: db off posts each op alone (ops to one node
//!   in order, one per node per wave when or is on); or off posts each node's batch
//!   alone. All off is each verb waited alone (Table 3 "one-sided").

pub mod layout;
pub mod prims;
