//! The README against the code it describes.
//!
//! Goal: the README's knob table, crate dependency table and introduction cannot drift
//! from the registry and the crates' `Cargo.toml` files. Method: read `README.md` at the
//! workspace root, parse its tables, and compare them both ways with what the code
//! declares (`registry::PROTOCOLS` / `WORKLOADS` knobs, each crate's `[dependencies]` on
//! other workspace crates). Each failure says which row to add, change or remove.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dmtx::registry::{Entry, DRIVER, PROTOCOLS, WORKLOADS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn readme() -> String {
    let path = root().join("README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of a Markdown table row (`| a | b |` → `["a", "b"]`), or `None` for a line
/// that is not one.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.strip_prefix("| ")?.strip_suffix(" |")?;
    Some(inner.split(" | ").map(str::trim).collect())
}

fn unquote(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.strip_suffix('`')
}

/// The rows of the table that follows the HTML comment `marker` (header and rule
/// skipped), up to the first line that is not a table row.
fn table_after<'a>(text: &'a str, marker: &str) -> Vec<Vec<&'a str>> {
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("README.md has no `{marker}` comment above its table"));
    text[start..].lines().skip(1).map_while(cells).skip(2).collect()
}

fn entries() -> impl Iterator<Item = &'static Entry> {
    PROTOCOLS.iter().chain(WORKLOADS).chain(std::iter::once(&DRIVER))
}

#[test]
fn knob_table_lists_every_knob_with_its_default_and_help() {
    let text = readme();
    let rows = table_after(&text, "<!-- knobs:");
    let mut in_readme = BTreeMap::new();
    for row in &rows {
        let [owner, knob, default, help] = row[..] else {
            panic!("knob table row {row:?}: expected | owner | `knob` | `default` | meaning |");
        };
        let (Some(knob), Some(default)) = (unquote(knob), unquote(default)) else {
            panic!("knob table row {row:?}: knob and default go in backticks");
        };
        let dup = in_readme.insert(
            (owner.to_string(), knob.to_string()),
            (default.to_string(), help.to_string()),
        );
        assert!(dup.is_none(), "knob table lists {owner} `{knob}` twice");
    }
    let mut in_code = BTreeMap::new();
    for e in entries() {
        for k in e.knobs {
            in_code.insert(
                (e.name.to_string(), k.name.to_string()),
                (k.default.to_string(), k.help.to_string()),
            );
        }
    }
    for ((owner, knob), (default, help)) in &in_code {
        let row = format!("| {owner} | `{knob}` | `{default}` | {help} |");
        match in_readme.get(&(owner.clone(), knob.clone())) {
            None => panic!("README.md's knob table lacks {owner} `{knob}`; add the row\n{row}"),
            Some(got) => assert_eq!(
                got,
                &(default.clone(), help.clone()),
                "README.md's knob table row for {owner} `{knob}` differs from the code; it should read\n{row}"
            ),
        }
    }
    for (owner, knob) in in_readme.keys() {
        assert!(
            in_code.contains_key(&(owner.clone(), knob.clone())),
            "README.md's knob table lists {owner} `{knob}`, which `dmtx list` does not have; remove the row"
        );
    }
    assert!(
        in_code.len() >= 30,
        "the registry has {} knobs: fewer than the five workloads and ford declare",
        in_code.len()
    );
}

/// Each workspace crate's `[dependencies]` on other workspace crates, from its
/// `Cargo.toml` (dev-dependencies excluded).
fn crate_deps() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let dir = root().join("crates");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let name = doc["package"]["name"].as_str().unwrap().to_string();
        let deps = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|t| t.keys().filter(|k| k.starts_with("dmtx")).cloned().collect())
            .unwrap_or_default();
        out.insert(name, deps);
    }
    out
}

/// A crate's layer: 0 without workspace dependencies, else one above its highest.
fn layer(name: &str, deps: &BTreeMap<String, BTreeSet<String>>) -> usize {
    deps[name].iter().map(|d| layer(d, deps) + 1).max().unwrap_or(0)
}

#[test]
fn crate_table_matches_every_cargo_toml() {
    let deps = crate_deps();
    assert_eq!(deps.len(), 11, "crates found under crates/: {:?}", deps.keys());
    let text = readme();
    let rows = table_after(&text, "<!-- crate-deps:");
    let mut seen = BTreeSet::new();
    for row in &rows {
        let name = unquote(row[0]).unwrap_or_else(|| panic!("crate table row {row:?}: crate name in backticks"));
        let Some(want) = deps.get(name) else {
            panic!("README.md's crate table lists `{name}`, which is no crate under crates/; remove the row");
        };
        let listed: BTreeSet<String> = if row[2] == "none" {
            BTreeSet::new()
        } else {
            row[2]
                .split(", ")
                .map(|d| unquote(d).unwrap_or(d).to_string())
                .collect()
        };
        let fix: Vec<_> = want.iter().map(|d| format!("`{d}`")).collect();
        assert_eq!(
            &listed,
            want,
            "README.md's crate table: `{name}` depends on {}",
            fix.join(", ")
        );
        assert_eq!(
            row[1],
            layer(name, &deps).to_string(),
            "README.md's crate table: `{name}` is on layer {}",
            layer(name, &deps)
        );
        seen.insert(name.to_string());
    }
    for name in deps.keys() {
        assert!(
            seen.contains(name),
            "README.md's crate table lacks `{name}`; add its row"
        );
    }
}

#[test]
fn introduction_names_every_protocol_and_workload() {
    let text = readme();
    let intro = &text[..text
        .find("## Two commands")
        .expect("README.md keeps its `## Two commands` section")];
    for e in PROTOCOLS.iter().chain(WORKLOADS) {
        assert!(
            intro.contains(&format!("`{}`", e.name)),
            "README.md's introduction does not name `{}`",
            e.name
        );
    }
}

#[test]
fn two_commands_come_first() {
    let text = readme();
    let first = text.find("\n## ").expect("README.md has sections");
    assert!(
        text[first..].starts_with("\n## Two commands"),
        "the first section of README.md is `## Two commands`"
    );
    for cmd in ["cargo run --release -- bench", "cargo test --workspace"] {
        assert!(
            text.contains(&format!("\n{cmd} ")),
            "README.md's `Two commands` lost `{cmd}`"
        );
    }
}

/// The long flags (`--name`) a `dmtx <subcommand> --help` lists, `--help` itself left out.
fn long_flags(subcommand: &[&str]) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dmtx"))
        .args(subcommand)
        .arg("--help")
        .output()
        .expect("run dmtx");
    assert!(out.status.success(), "dmtx {subcommand:?} --help failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let line = line
            .strip_prefix('-')
            .and_then(|l| l.split_once(", "))
            .map_or(line, |(_, rest)| rest);
        if let Some(rest) = line.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if name != "help" && !name.is_empty() {
                flags.push(format!("--{name}"));
            }
        }
    }
    flags
}

#[test]
fn command_line_section_names_every_flag() {
    let text = readme();
    let start = text
        .find("## The command line")
        .expect("README.md keeps `## The command line`");
    let end = start + text[start..].find("\n## ").unwrap_or(text.len() - start);
    let section = &text[start..end];
    let subcommands: [&[&str]; 7] = [
        &["bench"],
        &["check"],
        &["report"],
        &["memnode"],
        &["cluster", "up"],
        &["sim", "profile"],
        &["sim", "calibrate"],
    ];
    let mut seen = 0;
    for sub in subcommands {
        for flag in long_flags(sub) {
            seen += 1;
            assert!(
                section.contains(&flag),
                "README.md's `The command line` does not show `dmtx {} {flag}`; add it with its default",
                sub.join(" ")
            );
        }
    }
    assert!(
        seen >= 30,
        "only {seen} flags parsed from the --help texts: the parser lost them"
    );
}
