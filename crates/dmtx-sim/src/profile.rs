//! Hardware profiles: a NIC model, a CPU model and optional persistent-memory media,
//! read from TOML.
//!
//! A profile file has a top-level `name`, a `[nic]` table with every field of
//! [`NicModel`], an optional `[cpu]` table (any subset of [`CpuModel`]'s fields; the rest
//! keep their defaults) and an optional `[pm]` table ([`PmModel`]). Unknown keys are
//! errors. Three profiles are built in, embedded from `crates/dmtx-sim/profiles/`:
//!
//! | name | hardware | testbed |
//! | --- | --- | --- |
//! | `cx3` | ConnectX-3, 56 Gb/s FDR, PCIe 3.0 x8 | LOTUS §8.1 |
//! | `cx5` | ConnectX-5, 100 Gb/s EDR, PCIe 3.0 x16 | FORD §6.1, Motor §7.1 |
//! | `cx6` | ConnectX-6, 200 Gb/s HDR, PCIe 4.0 x16 | OOCC §VIII-A |
//!
//! Each number in them carries its kind (spec, measured, assumed) and source; the
//! tables are repeated in `docs/sim-model.md`.
//!
//! ```
//! use dmtx_sim::{Profile, SimConfig};
//!
//! let cx3 = Profile::load("cx3").unwrap();
//! assert_eq!(cx3.nic.atomic_nic_gap_ns, 400); // 2.5 M CAS/s NIC-wide (LOTUS §2.2)
//! let config = SimConfig::from_profile(7, &cx3);
//! assert_eq!(config.nic, cx3.nic);
//! assert!(Profile::load("cx9").unwrap_err().to_string().contains("cx3, cx5, cx6"));
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::nic::{NicModel, PmModel};
use crate::CpuModel;

/// A hardware profile (module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name (`cx5`, or the name a custom file gives itself).
    pub name: String,
    /// Every node's NIC and link.
    pub nic: NicModel,
    /// The compute nodes' CPUs; defaults when the file has no `[cpu]`.
    #[serde(default)]
    pub cpu: CpuModel,
    /// Persistent-memory media of the memory nodes; DRAM when absent.
    #[serde(default)]
    pub pm: Option<PmModel>,
    /// Where it was read from: `built-in cx5` or the file's path (not part of the TOML).
    #[serde(skip)]
    pub source: String,
}

/// Built-in profiles: name and TOML text.
const BUILTINS: [(&str, &str); 3] = [
    ("cx3", include_str!("../profiles/cx3.toml")),
    ("cx5", include_str!("../profiles/cx5.toml")),
    ("cx6", include_str!("../profiles/cx6.toml")),
];

/// Why a profile could not be loaded. Every message names the file, the field and the
/// fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The name is no built-in profile and no readable file.
    #[error("profile `{name}` is no built-in profile ({builtins}) and cannot be read as a file: {error}; pass a built-in name or the path of a .toml profile")]
    NotFound {
        /// What was asked for.
        name: String,
        /// The built-in names, comma-separated.
        builtins: String,
        /// Why the file could not be read.
        error: std::io::Error,
    },
    /// The TOML does not parse or does not match the profile's fields.
    #[error("profile {file}, line {line}: {message}; {fix}")]
    Parse {
        /// The file (or `built-in <name>`).
        file: String,
        /// 1-based line of the error (0 when unknown).
        line: usize,
        /// The parser's message.
        message: String,
        /// What to change.
        fix: String,
    },
    /// A field parsed but its value is out of range.
    #[error("profile {file}: [{table}] {field} = {value} is out of range: {rule}; {fix}")]
    Invalid {
        /// The file (or `built-in <name>`).
        file: String,
        /// The table (`nic` or `pm`).
        table: &'static str,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The rule it breaks.
        rule: &'static str,
        /// What to change.
        fix: &'static str,
    },
}

impl Profile {
    /// The built-in profile names.
    pub fn builtin_names() -> &'static [&'static str] {
        &["cx3", "cx5", "cx6"]
    }

    /// A built-in profile by name, or else the profile in the file at `name_or_path`.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if let Some((name, text)) = BUILTINS.iter().find(|(n, _)| *n == name_or_path) {
            let mut p = Self::from_toml_str(&format!("built-in {name} (crates/dmtx-sim/profiles/{name}.toml)"), text)?;
            p.source = format!("built-in {name}");
            return Ok(p);
        }
        let text = std::fs::read_to_string(Path::new(name_or_path)).map_err(|error| ProfileError::NotFound {
            name: name_or_path.to_string(),
            builtins: Self::builtin_names().join(", "),
            error,
        })?;
        let mut p = Self::from_toml_str(name_or_path, &text)?;
        p.source = name_or_path.to_string();
        Ok(p)
    }

    /// A fingerprint of every parameter (FNV-1a over the TOML): two runs with the same
    /// fingerprint simulated the same hardware, whatever the profiles were called.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.to_toml().bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// Parse and validate profile TOML; `file` names it in errors.
    pub fn from_toml_str(file: &str, text: &str) -> Result<Profile, ProfileError> {
        let profile: Profile = toml::from_str(text).map_err(|e| parse_error(file, text, &e))?;
        profile.validate(file)?;
        Ok(profile)
    }

    /// The profile as TOML (without the source comments of the built-in files).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a profile is plain tables of numbers and strings")
    }

    /// Check every value's range (module doc of [`NicModel`] and [`PmModel`]).
    pub fn validate(&self, file: &str) -> Result<(), ProfileError> {
        let n = &self.nic;
        let bad = |table, field, value: u64, rule, fix| {
            Err(ProfileError::Invalid {
                file: file.to_string(),
                table,
                field,
                value,
                rule,
                fix,
            })
        };
        let positive: [(&'static str, u64, &'static str); 9] = [
            (
                "link_ps_per_byte",
                n.link_ps_per_byte,
                "set it to 8000 / (link data rate in Gb/s), e.g. 80 for 100 Gb/s",
            ),
            (
                "units",
                n.units as u64,
                "set it to the responder NIC's parallel processing units, e.g. 16",
            ),
            (
                "read_service_ns",
                n.read_service_ns,
                "a responder op takes time; units / service is the NIC's message rate",
            ),
            (
                "write_service_ns",
                n.write_service_ns,
                "a responder op takes time; units / service is the NIC's message rate",
            ),
            (
                "atomic_service_ns",
                n.atomic_service_ns,
                "a responder op takes time; units / service is the NIC's message rate",
            ),
            (
                "flush_service_ns",
                n.flush_service_ns,
                "a responder op takes time; units / service is the NIC's message rate",
            ),
            (
                "atomic_nic_gap_ns",
                n.atomic_nic_gap_ns,
                "set it to 1000 / (NIC-wide atomic rate in M/s), e.g. 400 for 2.5 M/s",
            ),
            (
                "atomic_addr_ns",
                n.atomic_addr_ns,
                "set it to 1000 / (one address's atomic rate in M/s), e.g. 400",
            ),
            (
                "outstanding_rd_atomic_max",
                n.outstanding_rd_atomic_max as u64,
                "set it to the NIC's max_qp_rd_atom, e.g. 16",
            ),
        ];
        for (field, value, fix) in positive {
            if value == 0 {
                return bad(
                    "nic",
                    field,
                    value,
                    "must be at least 1 (a rate of 0 or an infinite one)",
                    fix,
                );
            }
        }
        if !(256..=4096).contains(&n.mtu_bytes) || !n.mtu_bytes.is_power_of_two() {
            return bad(
                "nic",
                "mtu_bytes",
                n.mtu_bytes,
                "an InfiniBand MTU is a power of two in 256..=4096",
                "use 256, 512, 1024, 2048 or 4096",
            );
        }
        if !(1..=5).contains(&n.pcie_gen) {
            return bad(
                "nic",
                "pcie_gen",
                n.pcie_gen.into(),
                "PCIe generations are 1..=5",
                "use 3 for PCIe 3.0, 4 for 4.0",
            );
        }
        if !n.pcie_lanes.is_power_of_two() || n.pcie_lanes > 32 {
            return bad(
                "nic",
                "pcie_lanes",
                n.pcie_lanes.into(),
                "a PCIe link has 1, 2, 4, 8, 16 or 32 lanes",
                "use the slot's width, e.g. 16",
            );
        }
        if !(1..=100).contains(&n.pcie_efficiency_pct) {
            return bad(
                "nic",
                "pcie_efficiency_pct",
                n.pcie_efficiency_pct.into(),
                "a share of the raw rate is 1..=100 percent",
                "use 87 (256-B TLPs and DLLP overhead)",
            );
        }
        if let Some(pm) = &self.pm {
            if pm.write_ps_per_byte == 0 {
                return bad(
                    "pm",
                    "write_ps_per_byte",
                    0,
                    "must be at least 1",
                    "set it to 1000 / (write bandwidth in GB/s), e.g. 78",
                );
            }
            if pm.read_ps_per_byte == 0 {
                return bad(
                    "pm",
                    "read_ps_per_byte",
                    0,
                    "must be at least 1",
                    "set it to 1000 / (read bandwidth in GB/s), e.g. 25",
                );
            }
            if pm.write_cut_max_permille >= 1000 {
                return bad(
                    "pm",
                    "write_cut_max_permille",
                    pm.write_cut_max_permille,
                    "a cut of 1000 per mille or more stops writes",
                    "use 875 (FORD's 87.5%) or less",
                );
            }
            if pm.load_window_ns == 0 {
                return bad("pm", "load_window_ns", 0, "must be at least 1", "use 10000");
            }
        }
        Ok(())
    }
}

/// A TOML or serde error, with its line and a fix: the closest valid field for an
/// unknown one (serde's message lists them all), the line to add for a missing one.
fn parse_error(file: &str, text: &str, e: &toml::de::Error) -> ProfileError {
    let message = e.message().trim().to_string();
    let line = e
        .span()
        .map_or(0, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let fix = if let Some(rest) = message.strip_prefix("unknown field `") {
        let (unknown, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let valid: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        match closest(unknown, &valid) {
            Some(best) => format!("did you mean `{best}`?"),
            None => "remove it or use one of the fields listed".to_string(),
        }
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        format!("add `{field} = <value>` to that table; the built-in cx5 profile lists every field with its source")
    } else {
        "see crates/dmtx-sim/profiles/cx5.toml for the format".to_string()
    };
    ProfileError::Parse {
        file: file.to_string(),
        line,
        message,
        fix,
    }
}

/// The valid name within edit distance 3 of `name`, nearest first.
fn closest<'a>(name: &str, valid: &[&'a str]) -> Option<&'a str> {
    valid
        .iter()
        .map(|v| (edit_distance(name, v), *v))
        .filter(|&(d, _)| d <= 3)
        .min()
        .map(|(_, v)| v)
}

/// Levenshtein distance over bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: every built-in profile parses, validates and carries its own name.
    #[test]
    fn builtins_load() {
        for name in Profile::builtin_names() {
            let p = Profile::load(name).unwrap();
            assert_eq!(&p.name, name);
            assert_eq!(p.pm, None, "{name}: built-ins model DRAM");
            assert_eq!(p.cpu, CpuModel::default(), "{name}: no [cpu] table");
        }
        assert_eq!(BUILTINS.map(|(n, _)| n), Profile::builtin_names());
    }

    /// Goal: `NicModel::cx5()` is the cx5 profile, and a profile survives a TOML round trip.
    #[test]
    fn cx5_is_the_builtin_model_and_round_trips() {
        let p = Profile::load("cx5").unwrap();
        assert_eq!(p.nic, NicModel::cx5());
        let again = Profile::from_toml_str("round trip", &p.to_toml()).unwrap();
        // Every parameter survives the TOML; where it came from is not part of it.
        assert_eq!(p.source, "built-in cx5");
        assert_eq!(again.source, "");
        assert_eq!(again.fingerprint(), p.fingerprint());
        assert_eq!(
            Profile {
                source: p.source.clone(),
                ..again
            },
            p
        );
    }

    /// Goal: the commented `[pm]` block of cx5.toml is `PmModel::optane_6x()`.
    #[test]
    fn cx5_pm_block_is_optane_6x() {
        let text = include_str!("../profiles/cx5.toml");
        let start = text.find("# [pm]").expect("cx5.toml keeps FORD's PM block");
        let block: String = text[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        let with_pm = format!("{}\n{block}\n", &text[..start]);
        let p = Profile::from_toml_str("cx5 + pm", &with_pm).unwrap();
        assert_eq!(p.pm, Some(PmModel::optane_6x()));
    }

    /// Goal: the relations the profiles are built on hold: cx3's atomic cap binds and
    /// its WRITE rate is LOTUS's 35 M/s; cx6 is PCIe-bound in a Gen3 slot only.
    #[test]
    fn profile_relations() {
        let cx3 = Profile::load("cx3").unwrap().nic;
        let rate_mops = |units: usize, ns: u64| units as f64 * 1e3 / ns as f64;
        assert!((rate_mops(cx3.units, cx3.write_service_ns) - 35.0).abs() < 0.2);
        assert!(1e3 / cx3.atomic_nic_gap_ns as f64 <= 2.5);
        let cx5 = Profile::load("cx5").unwrap().nic;
        assert!(
            cx5.atomic_nic_gap_ns * 10 <= cx3.atomic_nic_gap_ns,
            "cx5's atomic cap is far higher"
        );
        let mut cx6 = Profile::load("cx6").unwrap().nic;
        assert!(
            cx6.pcie_fs_per_byte() < 1000 * cx6.link_ps_per_byte,
            "Gen4 x16 outruns HDR"
        );
        cx6.pcie_gen = 3;
        let gbps = 8e6 / cx6.pcie_fs_per_byte() as f64;
        assert!(
            (100.0..120.0).contains(&gbps),
            "Gen3 x16 caps cx6 near 100 Gb/s: {gbps:.1}"
        );
    }

    /// Goal: errors name the file, the field and the fix.
    #[test]
    fn errors_name_file_field_and_fix() {
        let cx5 = include_str!("../profiles/cx5.toml");
        let typo = cx5.replace("units = 16", "untis = 16");
        let e = Profile::from_toml_str("my.toml", &typo).unwrap_err().to_string();
        assert!(
            e.contains("my.toml") && e.contains("untis") && e.contains("did you mean `units`"),
            "{e}"
        );
        assert!(e.contains("line 24"), "{e}");

        let missing = cx5.replace("units = 16", "");
        let e = Profile::from_toml_str("my.toml", &missing).unwrap_err().to_string();
        assert!(
            e.contains("missing field `units`") && e.contains("add `units = <value>`"),
            "{e}"
        );

        for (from, to, field) in [
            ("units = 16", "units = 0", "units = 0"),
            ("mtu_bytes = 4096", "mtu_bytes = 3000", "mtu_bytes = 3000"),
            ("link_ps_per_byte = 80", "link_ps_per_byte = 0", "link_ps_per_byte = 0"),
            ("pcie_lanes = 16", "pcie_lanes = 12", "pcie_lanes = 12"),
        ] {
            let e = Profile::from_toml_str("my.toml", &cx5.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("my.toml") && e.contains(field) && e.contains("out of range"),
                "{e}"
            );
        }
        let pm = format!("{cx5}\n[pm]\nwrite_ps_per_byte = 78\nread_ps_per_byte = 25\nwrite_cut_max_permille = 1000\nload_window_ns = 1\n");
        let e = Profile::from_toml_str("pm.toml", &pm).unwrap_err().to_string();
        assert!(
            e.contains("[pm] write_cut_max_permille = 1000") && e.contains("use 875"),
            "{e}"
        );

        let e = Profile::load("/nonexistent/cx7.toml").unwrap_err().to_string();
        assert!(e.contains("cx3, cx5, cx6") && e.contains("cx7"), "{e}");
    }

    /// Goal: a partial `[cpu]` keeps the other CPU defaults; unknown top-level keys fail.
    #[test]
    fn cpu_table_is_optional_and_partial() {
        let cx5 = include_str!("../profiles/cx5.toml");
        let with_cpu = format!("{cx5}\n[cpu]\ndoorbell_ns = 99\n");
        let p = Profile::from_toml_str("cpu.toml", &with_cpu).unwrap();
        assert_eq!(p.cpu.doorbell_ns, 99);
        assert_eq!(p.cpu.wqe_ns, CpuModel::default().wqe_ns);
        let e = Profile::from_toml_str("x.toml", &format!("nmae = \"x\"\n{cx5}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `name`"), "{e}");
    }
}
