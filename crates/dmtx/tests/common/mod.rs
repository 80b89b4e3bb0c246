//! What the tests of the `dmtx` crate share: in-process runs through the registry, and
//! running the built binary.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
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

/// Run the built `dmtx` binary with `args` to its end.
pub fn dmtx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmtx"))
        .args(args)
        .output()
        .expect("run the dmtx binary")
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh, empty scratch directory for test `name`, unique to this test binary and
/// process.
pub fn scratch_dir(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let binary = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
    let dir = std::env::temp_dir().join(format!("dmtx-{binary}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
