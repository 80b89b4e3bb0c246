//! How figures print: sizes in binary units, counts and rates in SI units.

/// Bytes in the largest binary unit that keeps a whole part: `3.1 GiB`, `64.0 MiB`.
pub use dmtx_verbs::region::binary_units as bytes;

/// A count or rate in SI units: `950`, `431.2 k`, `1.25 M`.
pub fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_keep_their_unit_and_precision() {
        assert_eq!(bytes(64 << 20), "64.0 MiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(si(950.0), "950");
        assert_eq!(si(431_249.0), "431.2 k");
        assert_eq!(si(1_250_000.0), "1.25 M");
    }
}
