//! What the in-process bench tests share.

#![allow(dead_code)]

use std::sync::atomic::AtomicBool;

use dmtx::driver::{RunHooks, Silent};
use dmtx::results::BenchResult;
use dmtx::{registry, BenchArgs, BenchConfig};

/// Validate `args` and run them through the registry, silently, to the end.
pub fn run_registry(args: &BenchArgs) -> BenchResult {
    let cfg = BenchConfig::from_args(args).unwrap();
    let stop = AtomicBool::new(false);
    registry::run(
        &cfg,
        &RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        },
    )
    .unwrap()
}

/// Run `cfg` through the registry, silently, expecting an error; its message.
pub fn run_error(cfg: &BenchConfig) -> String {
    let stop = AtomicBool::new(false);
    registry::run(
        cfg,
        &RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        },
    )
    .unwrap_err()
    .to_string()
}
