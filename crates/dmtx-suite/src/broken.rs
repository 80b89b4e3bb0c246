//! Testing the tests: a deliberately broken variant of a protocol must be caught — by
//! the isolation checker, a bank invariant or a torn value — within a few seeds, or the
//! suite is too weak to trust on the protocol it passes.

use dmtx_runtime::Protocol;

use crate::contended;
use crate::env::{Env, Setup, Transport};

/// The seed that caught a broken variant, and what it found.
#[derive(Debug)]
pub struct Caught {
    /// The seed.
    pub seed: u64,
    /// The findings (never empty).
    pub findings: Vec<String>,
}

/// Run `attempt(seed)` for seeds `0..seeds_max` until it returns findings; panic naming
/// `name` if none does.
pub fn assert_caught_by(name: &str, seeds_max: u64, mut attempt: impl FnMut(u64) -> Vec<String>) -> Caught {
    assert!(seeds_max > 0, "no seed to catch {name} with");
    for seed in 0..seeds_max {
        let findings = attempt(seed);
        if !findings.is_empty() {
            eprintln!("{name}: caught with DMTX_SEED={seed}: {}", findings[0]);
            return Caught { seed, findings };
        }
    }
    panic!("{name} went unnoticed in {seeds_max} seeds: the suite cannot tell it from a correct protocol");
}

/// The broken variant `make()` runs the contended bank of `setup` on `transport`; it
/// must be caught within `seeds_max` seeds.
pub fn assert_caught<P: Protocol>(
    name: &str,
    make: impl Fn() -> P,
    setup: &Setup,
    transport: Transport,
    seeds_max: u64,
) -> Caught {
    assert_caught_by(name, seeds_max, |seed| {
        let env = Env::bank(make(), setup.clone());
        contended::run(&env, transport, seed, None).findings(&env)
    })
}
