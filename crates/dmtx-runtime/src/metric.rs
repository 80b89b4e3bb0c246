//! Named figures a protocol counts beyond the shared counters (lock hold times, a
//! cache's hit rate, a lease's slack, ...).
//!
//! A protocol declares its figures once, in `Protocol::METRICS`, a table of
//! [`MetricSpec`]; its code adds to entry `i` with [`CoordCtx::metric`](crate::CoordCtx::metric),
//! an add into a per-coordinator array (no lookup by name, no lock, no allocation once the
//! array exists). The driver sums the coordinators' arrays after the run (only what
//! was added after the warm-up) and the results name each entry (`protocol_metrics`).

use hdrhistogram::Histogram;

/// What kind of figure an entry is, which decides how results show it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Events counted: results give the `sum` of what was added and the sum per commit
    /// (add 1 per event).
    Counter,
    /// A value observed many times (a chain length, a batch size): results give how many
    /// were added (`count`), their `sum`, `mean` and `max`: a histogram, lite.
    Value,
    /// A time in ns observed many times (a lock's hold time, time spent re-reading),
    /// added with [`CoordCtx::metric_ns`](crate::CoordCtx::metric_ns): results give what
    /// a `Value` does, and `p50` and `p99` from an HDR histogram
    /// ([`DURATION_SIGFIGS`] significant figures), and `share`, the sum over the
    /// coordinators' measured time (each coordinator counts the run's length).
    Duration,
}

/// Significant figures of a [`MetricKind::Duration`]'s histogram: percentiles within 1 %.
pub const DURATION_SIGFIGS: u8 = 2;
/// Largest time a [`MetricKind::Duration`] histogram holds (1 hour); longer ones count as
/// that.
pub const DURATION_NS_MAX: u64 = 3_600_000_000_000;

/// An empty histogram of a [`MetricKind::Duration`] entry.
pub fn duration_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, DURATION_NS_MAX, DURATION_SIGFIGS).expect("constant histogram bounds are valid")
}

impl MetricKind {
    /// Lower-case name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Value => "value",
            MetricKind::Duration => "duration",
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

/// What one entry gathered: every value added, summed, counted, and the largest; for a
/// [`MetricKind::Duration`], their distribution too.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricSum {
    /// Values added.
    pub count: u64,
    /// Their sum (saturating).
    pub sum: u64,
    /// The largest (0 when none).
    pub max: u64,
    /// The values added with [`MetricSum::add_ns`] (allocated by the first).
    pub hist: Option<Box<Histogram<u64>>>,
}

impl MetricSum {
    /// Add one value.
    #[inline]
    pub fn add(&mut self, value: u64) {
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.max = self.max.max(value);
    }

    /// Add one time, in ns, to the sums and the histogram.
    #[inline]
    pub fn add_ns(&mut self, ns: u64) {
        self.add(ns);
        self.hist
            .get_or_insert_with(|| Box::new(duration_histogram()))
            .saturating_record(ns.max(1));
    }

    /// Add what `other` gathered.
    pub fn merge(&mut self, other: &MetricSum) {
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
        if let Some(h) = &other.hist {
            self.hist
                .get_or_insert_with(|| Box::new(duration_histogram()))
                .add(h.as_ref())
                .expect("duration histograms share their bounds");
        }
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
        assert_eq!((b.count, b.sum, b.max), (3, 17, 10));
        assert!(b.hist.is_none(), "plain values keep no histogram");
        b.add(u64::MAX);
        assert_eq!(b.sum, u64::MAX, "saturates");
    }

    #[test]
    fn durations_keep_a_distribution_that_merges() {
        let mut a = MetricSum::default();
        for ns in 1..=99 {
            a.add_ns(ns * 1000);
        }
        let mut b = MetricSum::default();
        b.add_ns(1_000_000);
        b.merge(&a);
        let h = b.hist.as_ref().expect("a histogram");
        assert_eq!((b.count, h.len()), (100, 100));
        let p50 = h.value_at_quantile(0.5);
        assert!((49_000..=51_000).contains(&p50), "p50 {p50}");
        assert!(h.value_at_quantile(1.0) >= 990_000, "the merged max is kept");
    }

    #[test]
    fn a_table_with_a_duplicate_name_is_refused() {
        let m = MetricSpec::new("hits", MetricKind::Counter, "");
        assert_eq!(check_metrics("p", &[m]), Ok(()));
        assert!(check_metrics("p", &[m, m]).unwrap_err().contains("metric 1"));
        assert!(check_metrics("p", &[MetricSpec::new("", MetricKind::Value, "")]).is_err());
    }
}
