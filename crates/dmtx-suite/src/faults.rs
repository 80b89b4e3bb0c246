//! A seeded fault sweep on `sim`, as TigerBeetle's VOPR: each seed draws which faults
//! strike (swarm: each enabled kind on or off) and their parameters, runs the contended
//! bank under them, and requires every claim to hold. A failure prints the seed and the
//! drawn script; `DMTX_SEED=<n>` replays exactly that run.
//!
//! What is drawn is what a protocol without recovery must survive: lost replies, delays,
//! and one link down or partition shorter than the transport timeout (so a rollback
//! posted after a failed commit reaches every replica; two outages in a row may not
//! leave it that chance). A compute-node crash (`crash_cn`, with
//! two compute nodes or more) leaves half-applied commits for a recovery, so after one
//! only the history is held to the protocol's level, not the state checks.

use dmtx_runtime::Protocol;
use dmtx_sim::FaultScript;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::contended;
use crate::env::{Env, Setup};

/// Which fault kinds a sweep may draw (a protocol enables the ones it claims to survive).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FaultMenu {
    /// Ops that apply but whose reply is lost.
    pub lose_response: bool,
    /// Completions delayed.
    pub delay: bool,
    /// A compute node cut from a memory node for less than the timeout.
    pub partition: bool,
    /// A memory node's link down for less than the timeout.
    pub link_down: bool,
    /// A compute node crashes (needs two compute nodes or more).
    pub crash_cn: bool,
}

impl FaultMenu {
    /// Every kind.
    pub const ALL: Self = Self {
        lose_response: true,
        delay: true,
        partition: true,
        link_down: true,
        crash_cn: true,
    };
}

/// Transport timeout of every drawn script, in µs.
const TIMEOUT_US: u64 = 40;

/// The fault script seed `seed` draws for `setup` (one-line form, see
/// `dmtx_sim::faults`).
pub fn draw(seed: u64, menu: &FaultMenu, setup: &Setup) -> String {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xfa17_5eed);
    let mns = setup.replicas as u64;
    let cns = setup.compute_nodes as u64;
    let kinds = ["read", "write", "cas"];
    let mut kinds_on: Vec<&str> = Vec::new();
    let menu_kinds = [
        ("lose-response", menu.lose_response),
        ("delay", menu.delay),
        ("partition", menu.partition),
        ("link-down", menu.link_down),
        ("crash-cn", menu.crash_cn && cns >= 2),
    ];
    let enabled: Vec<&str> = menu_kinds.iter().filter(|k| k.1).map(|k| k.0).collect();
    assert!(!enabled.is_empty(), "the fault menu enables nothing this setup can run");
    // At most one outage (link down or partition) per run: two outages in a row can
    // outlast the timeout together, and a rollback posted into the second is lost.
    let outage = enabled
        .iter()
        .filter(|k| matches!(**k, "link-down" | "partition"))
        .nth(rng.random_range(0..2));
    for k in &enabled {
        let on = match *k {
            "link-down" | "partition" => Some(k) == outage && rng.random_bool(0.7),
            _ => rng.random_bool(0.5),
        };
        if on {
            kinds_on.push(k);
        }
    }
    let mut clauses = vec![format!("timeout={TIMEOUT_US}us")];
    for k in kinds_on {
        let mn = rng.random_range(0..mns);
        let cn = rng.random_range(0..cns);
        let kind = kinds[rng.random_range(0..kinds.len())];
        let at = rng.random_range(20..600);
        let dur = rng.random_range(5..TIMEOUT_US - 5);
        clauses.push(match k {
            "lose-response" => format!(
                "lose-response on=kind:{kind},mn:{mn} nth={} count={}",
                rng.random_range(1..80),
                rng.random_range(1..8)
            ),
            "delay" => format!(
                "delay by={}us on=kind:{kind},mn:{mn} nth={} count={}",
                rng.random_range(5..40),
                rng.random_range(1..100),
                rng.random_range(1..40)
            ),
            "partition" => format!("partition side=cn{cn},mn{mn} at={at}us for={dur}us"),
            "link-down" => format!("link-down node=mn{mn} at={at}us for={dur}us"),
            "crash-cn" => format!("crash-cn cn={cn} at={at}us"),
            _ => unreachable!(),
        });
    }
    clauses.join("; ")
}

/// Run seeds `seeds` (or only `DMTX_SEED`) of `make()` under drawn faults; panic on the
/// first failing seed with the seed, the script and the faults fired.
pub fn sweep<P: Protocol>(make: impl Fn() -> P, setup: &Setup, menu: &FaultMenu, seeds: std::ops::Range<u64>) {
    for seed in contended::seeds(seeds) {
        let script = draw(seed, menu, setup);
        let faults: FaultScript = script
            .parse()
            .unwrap_or_else(|e| panic!("DMTX_SEED={seed}: drawn script `{script}` does not parse: {e}"));
        // Printed first, so even a panic inside the protocol names what replays it.
        eprintln!("{}: DMTX_SEED={seed} faults `{script}`", P::NAME);
        let env = Env::bank(make(), setup.clone());
        let out = contended::run_sim(&env, seed, Some(faults));
        let findings = out.findings(&env);
        assert!(
            findings.is_empty(),
            "{}: fault sweep failed; DMTX_SEED={seed} replays it\n  script: {script}\n  fired: {:?}\n{}",
            P::NAME,
            out.faults,
            findings.join("\n")
        );
        assert!(
            out.commits > 0,
            "{}: DMTX_SEED={seed}: nothing committed under `{script}`",
            P::NAME
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_one_script_and_seeds_differ() {
        let setup = Setup {
            compute_nodes: 2,
            ..Setup::new(2, 20)
        };
        let a = draw(7, &FaultMenu::ALL, &setup);
        assert_eq!(a, draw(7, &FaultMenu::ALL, &setup));
        let all: std::collections::BTreeSet<String> = (0..32).map(|s| draw(s, &FaultMenu::ALL, &setup)).collect();
        assert!(all.len() > 28, "seeds draw the same scripts");
        for kind in ["lose-response", "delay", "partition", "link-down", "crash-cn"] {
            assert!(all.iter().any(|s| s.contains(kind)), "{kind} is never drawn");
        }
        for s in &all {
            s.parse::<FaultScript>().unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        let one_cn = draw(7, &FaultMenu::ALL, &Setup::new(2, 20));
        assert!(
            !one_cn.contains("crash"),
            "a lone compute node is never crashed: {one_cn}"
        );
    }
}
