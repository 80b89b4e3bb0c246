//! The protocols of dmtx, one module per protocol, each implementing
//! [`dmtx_runtime::Protocol`].
//!
//! | module | paper | isolation |
//! | --- | --- | --- |
//! | [`drtm`] | DrTM's lease-based shared lock, no HTM (OOCC's baseline, oocc.txt §VIII-A) | serializable |
//! | [`drtmh`] | DrTM+H on one-sided verbs (FORD §3.2, §4.2, §6.1) | serializable (`strict=true`; see its window) |
//! | [`farm`] | FaRM on one-sided verbs (FORD §2.3, §3.2, §6.1) | serializable |
//! | [`ford`] | FORD (ACM TOS 2023; FAST'22), §4.2–4.6, §4.8 | serializable |
//! | [`fordlv`] | FORD-LV: FORD with localized validation (ACM TOS 2023, §4.7) | serializable |
//! | [`motor`] | Motor (OSDI'24): consecutive version tuples, §4–5 | serializable or snapshot isolation (`isolation=si`) |
//! | [`nowait`] | No-Wait 2PL on RCBench's primitives (rcbench §5.1) | serializable |
//! | [`oocc`] | OOCC (oocc.txt), §III–VI | strict serializable |
//! | [`to`] | T/O with cascading aborts on RCBench's primitives and T^g (rcbench §5.2, Alg. 3) | serializable |
//! | [`waitdie`] | Wait-Die 2PL on RCBench's primitives (rcbench §5.1, Alg. 2) | serializable |
//! | [`woundwait`] | Wound-Wait 2PL on RCBench's primitives and T^g (rcbench §5.1, Alg. 2) | serializable |
//!
//! Each module's doc gives its record layout, its round-trip budget per transaction
//! kind and its deviations from the paper. Protocols never name a transport or a
//! workload: they speak verbs through `dmtx-runtime`.
//!
//! What several protocols share lives beside them, never copied into each:
//! [`onever`] holds the one-version record machinery (record layout, tear detector,
//! bucket walk, undo log, replica fan-out, release and rollback); [`vcache`] is the
//! compute-node version cache (FORD §4.7) with its concurrency rules; [`rcbench`] holds
//! RCBench's item layout, primitives, T^g and switches.

#![warn(missing_docs)]
#![allow(async_fn_in_trait)]

pub mod drtm;
pub mod drtmh;
pub mod farm;
pub mod ford;
pub mod fordlv;
pub mod motor;
pub mod nowait;
pub mod onever;
pub mod oocc;
pub mod rcbench;
pub mod to;
pub mod vcache;
pub mod waitdie;
pub mod woundwait;
