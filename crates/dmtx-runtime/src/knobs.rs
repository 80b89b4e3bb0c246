//! `--set key=value` knobs of protocols and workloads: parsed once, validated against
//! the declared knobs, with errors that name the key and the fix.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::str::FromStr;

/// A declared knob: its name, default and one-line help (shown by `dmtx list`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KnobSpec {
    /// Key used with `--set`.
    pub name: &'static str,
    /// Default value, as text.
    pub default: &'static str,
    /// One line of help.
    pub help: &'static str,
}

/// Why knobs were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KnobError {
    /// Not of the form `key=value`.
    #[error("`--set {0}` is not of the form key=value")]
    Syntax(String),
    /// A key nothing declares.
    #[error("unknown knob `{key}`{hint}; valid knobs: {valid}")]
    Unknown {
        /// The key given.
        key: String,
        /// " (did you mean `x`?)" or empty.
        hint: String,
        /// Every declared key.
        valid: String,
    },
    /// A value that does not parse or is out of range.
    #[error("knob `{key}` = `{value}`: {why}")]
    Invalid {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is expected.
        why: String,
    },
}

/// The `--set` values of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    values: BTreeMap<String, String>,
}

impl Knobs {
    /// Parse `key=value` pairs; a later pair overrides an earlier one.
    pub fn parse<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<Self, KnobError> {
        let mut values = BTreeMap::new();
        for p in pairs {
            let (k, v) = p.split_once('=').ok_or_else(|| KnobError::Syntax(p.to_string()))?;
            let k = k.trim();
            if k.is_empty() {
                return Err(KnobError::Syntax(p.to_string()));
            }
            values.insert(k.to_string(), v.trim().to_string());
        }
        Ok(Self { values })
    }

    /// Set one value.
    pub fn set(&mut self, key: &str, value: impl Display) {
        self.values.insert(key.to_string(), value.to_string());
    }

    /// Every key given, with its value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Refuse keys that none of `declared` names.
    pub fn check_known(&self, declared: &[&[KnobSpec]]) -> Result<(), KnobError> {
        let all: Vec<&str> = declared.iter().flat_map(|d| d.iter().map(|k| k.name)).collect();
        for key in self.values.keys() {
            if !all.contains(&key.as_str()) {
                let hint = did_you_mean(key, &all);
                let mut valid = all.clone();
                valid.sort_unstable();
                return Err(KnobError::Unknown {
                    key: key.clone(),
                    hint,
                    valid: valid.join(", "),
                });
            }
        }
        Ok(())
    }

    /// The value of `spec` (or its default), parsed.
    pub fn get<T: FromStr>(&self, spec: &KnobSpec) -> Result<T, KnobError>
    where
        T::Err: Display,
    {
        let raw = self.values.get(spec.name).map(String::as_str).unwrap_or(spec.default);
        raw.parse().map_err(|e: T::Err| KnobError::Invalid {
            key: spec.name.to_string(),
            value: raw.to_string(),
            why: e.to_string(),
        })
    }

    /// The value of `spec`, parsed and checked by `valid` (which says what is expected).
    pub fn get_checked<T: FromStr + Copy>(
        &self,
        spec: &KnobSpec,
        valid: impl Fn(T) -> Result<(), String>,
    ) -> Result<T, KnobError>
    where
        T::Err: Display,
    {
        let v = self.get(spec)?;
        valid(v).map_err(|why| KnobError::Invalid {
            key: spec.name.to_string(),
            value: self
                .values
                .get(spec.name)
                .map(String::as_str)
                .unwrap_or(spec.default)
                .to_string(),
            why,
        })?;
        Ok(v)
    }
}

/// " (did you mean `x`?)" for the candidate closest to `given` within a small edit
/// distance, or "" when none is close.
pub fn did_you_mean(given: &str, candidates: &[&str]) -> String {
    let given = given.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&given, c), *c))
        .filter(|&(d, c)| d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const THETA: KnobSpec = KnobSpec {
        name: "zipf_theta",
        default: "0.99",
        help: "skew",
    };
    const KEYS: KnobSpec = KnobSpec {
        name: "keys",
        default: "1000",
        help: "key count",
    };

    #[test]
    fn defaults_values_and_errors() {
        let k = Knobs::parse(["keys=5"]).unwrap();
        assert_eq!(k.get::<u64>(&KEYS).unwrap(), 5);
        assert_eq!(k.get::<f64>(&THETA).unwrap(), 0.99);
        let e = Knobs::parse(["zipf_thetta=1"])
            .unwrap()
            .check_known(&[&[THETA, KEYS]])
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("did you mean `zipf_theta`"), "{msg}");
        assert!(msg.contains("keys, zipf_theta"), "{msg}");
        let e = Knobs::parse(["keys=many"]).unwrap().get::<u64>(&KEYS).unwrap_err();
        assert!(e.to_string().contains("`keys` = `many`"), "{e}");
        assert!(Knobs::parse(["novalue"]).is_err());
        let e = Knobs::parse(["keys=0"])
            .unwrap()
            .get_checked::<u64>(&KEYS, |v| if v > 0 { Ok(()) } else { Err("must be > 0".into()) })
            .unwrap_err();
        assert!(e.to_string().contains("must be > 0"));
    }
}
