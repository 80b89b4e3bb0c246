//! Named figures a protocol counts beyond the shared counters (lock hold times, a
//! cache's hit rate, a lease's slack, ...).
//!
//! A protocol declares its figures once, in `Protocol::METRICS`, a table of
//! [`MetricSpec`]; its code adds to entry `i` with [`CoordCtx::metric`](crate::CoordCtx::metric),
//! an add into a per-coordinator array (no lookup by name, no lock, no allocation once the
//! array exists). The driver sums the coordinators' arrays after the run (only what
//! was added after the warm-up) and the results name each entry (`protocol_metrics`).

/// What kind of figure an entry is, which decides how results show it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Events counted: results give the `sum` of what was added and the sum per commit
    /// (add 1 per event).
    Counter,
    /// A value observed many times (a hold time in ns, a chain length): results give how
    /// many were added (`count`), their `sum`, `mean` and `max`: a histogram, lite.
    Value,
}

impl MetricKind {
    /// Lower-case name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Value => "value",
        }
    }
}

/// One figure a protocol declares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MetricSpec {
    /// snake_case name used in results, with its unit last (`lock_hold_ns`).
    pub name: &'static str,
    /// How it is shown.
    pub kind: MetricKind,
    /// One line: what is added, and when.
    pub about: &'static str,
}

impl MetricSpec {
    /// An entry named `name`.
    pub const fn new(name: &'static str, kind: MetricKind, about: &'static str) -> Self {
        Self { name, kind, about }
    }
}

/// What one entry gathered: every value added, summed, counted, and the largest.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricSum {
    /// Values added.
    pub count: u64,
    /// Their sum (saturating).
    pub sum: u64,
    /// The largest (0 when none).
    pub max: u64,
}

impl MetricSum {
    /// Add one value.
    #[inline]
    pub fn add(&mut self, value: u64) {
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.max = self.max.max(value);
    }

    /// Add what `other` gathered.
    pub fn merge(&mut self, other: &MetricSum) {
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }
}

/// Most figures one protocol may declare: a bound on the per-coordinator array.
pub const PROTOCOL_METRICS_MAX: usize = 64;

/// Check a protocol's `METRICS` table: at most [`PROTOCOL_METRICS_MAX`] entries, names
/// non-empty and unique. Returns the first problem, worded for the protocol's author.
pub fn check_metrics(protocol: &str, table: &[MetricSpec]) -> Result<(), String> {
    if table.len() > PROTOCOL_METRICS_MAX {
        return Err(format!(
            "protocol `{protocol}` declares {} metrics, more than {PROTOCOL_METRICS_MAX}; merge some",
            table.len()
        ));
    }
    for (i, m) in table.iter().enumerate() {
        if m.name.is_empty() || table[..i].iter().any(|o| o.name == m.name) {
            return Err(format!(
                "protocol `{protocol}`: metric {i} is named `{}`, which is empty or already taken; rename it in METRICS",
                m.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_count_add_and_keep_the_max_across_merges() {
        let mut a = MetricSum::default();
        a.add(3);
        a.add(10);
        let mut b = MetricSum::default();
        b.add(4);
        b.merge(&a);
        assert_eq!(
            b,
            MetricSum {
                count: 3,
                sum: 17,
                max: 10
            }
        );
        b.add(u64::MAX);
        assert_eq!(b.sum, u64::MAX, "saturates");
    }

    #[test]
    fn a_table_with_a_duplicate_name_is_refused() {
        let m = MetricSpec::new("hits", MetricKind::Counter, "");
        assert_eq!(check_metrics("p", &[m]), Ok(()));
        assert!(check_metrics("p", &[m, m]).unwrap_err().contains("metric 1"));
        assert!(check_metrics("p", &[MetricSpec::new("", MetricKind::Value, "")]).is_err());
    }
}
