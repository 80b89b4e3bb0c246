//! Key generators: uniform, and YCSB's scrambled Zipfian.
//!
//! FORD's KVS (FORD §6.1) and Motor's (Motor §7.1) draw keys uniformly or "following the
//! Zipfian distribution with the default skewness 0.99". [`Zipf`] is what YCSB's
//! `ScrambledZipfianGenerator` does: ranks come from the closed-form sampler of Gray et
//! al., "Quickly generating billion-record synthetic databases" (SIGMOD'94), then a hash
//! scrambles the rank into a key, so the hot keys are spread over the key space (and over
//! the memory nodes' buckets) rather than packed at its start.
//!
//! # The rank sampler (Gray et al.)
//!
//! With `ζ(n, θ) = Σ_{i=1..n} i^-θ`, `α = 1/(1-θ)` and
//! `η = (1 - (2/n)^(1-θ)) / (1 - ζ(2, θ)/ζ(n, θ))`, a uniform `u ∈ [0, 1)` gives rank 0
//! when `u·ζ(n) < 1`, rank 1 when `u·ζ(n) < 1 + 2^-θ`, and `⌊n·(η·u - η + 1)^α⌋` otherwise.
//! Ranks 0 and 1 are exact; the rest follow a continuous approximation of the Zipf mass
//! (the same one YCSB ships). With `θ = 0` the sampler is exactly uniform.
//!
//! # ζ(n, θ) in constant time
//!
//! YCSB sums `ζ(n, θ)` term by term, which for n = 10 M costs ~10 M `powf`s. [`zeta`]
//! sums the first [`ZETA_HEAD`] terms exactly and the tail with the Euler–Maclaurin
//! formula (integral, end-point and two derivative corrections); the next correction
//! term is below `θ(θ+1)…(θ+4)/30240 · ZETA_HEAD^-(θ+5)`, i.e. a relative error far below
//! 1e-12 for every θ in `[0, 1)`, so a 10 M-key generator builds in microseconds.
//!
//! # Scrambling (deviation from YCSB)
//!
//! YCSB draws ranks over 10 billion items and maps `fnv64(rank) % n`. That map is not a
//! bijection: about a third of the keys are never drawn and colliding ranks pile their
//! mass on one key, so the key distribution is not the Zipf distribution the knob names.
//! dmtx scrambles with a fixed **bijection** of `[0, n)`: an invertible xorshift-multiply
//! hash on the smallest power of two `2^b ≥ n`, applied again while the result is `≥ n`
//! (cycle walking; fewer than 2 rounds on average since `2^b < 2n`). Key `k` therefore
//! has exactly the mass of its rank, and every coordinator, whatever its seed, agrees on
//! which keys are hot (the scramble is not seeded).

use rand::Rng;

/// Terms of `ζ(n, θ)` summed exactly before the Euler–Maclaurin tail takes over.
pub const ZETA_HEAD: u64 = 1024;

/// `ζ(n, θ) = Σ_{i=1..n} i^-θ`, exact up to [`ZETA_HEAD`] terms, Euler–Maclaurin beyond
/// (relative error far below 1e-12). `n = 0` gives 0.
pub fn zeta(n: u64, theta: f64) -> f64 {
    let head = n.min(ZETA_HEAD);
    // Smallest terms first, for a slightly better rounded sum.
    let mut sum = 0.0;
    for i in (1..=head).rev() {
        sum += (i as f64).powf(-theta);
    }
    if n <= ZETA_HEAD {
        return sum;
    }
    // Σ_{i=a+1..b} f(i) with f(x) = x^-θ, a = ZETA_HEAD, b = n:
    //   Σ_{i=a..b} f(i) = ∫_a^b f + (f(a) + f(b))/2 + (f'(b) - f'(a))/12
    //                     - (f'''(b) - f'''(a))/720 + R,
    // and f(a) is already in the head.
    let a = ZETA_HEAD as f64;
    let b = n as f64;
    let f = |x: f64| x.powf(-theta);
    let f1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let f3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    let s = 1.0 - theta;
    let ln_ratio = (b / a).ln();
    // ∫_a^b x^-θ dx = a^s (e^{s ln(b/a)} - 1) / s, written with expm1 so that θ near 1
    // does not cancel; at θ = 1 it is ln(b/a).
    let integral = if s.abs() < 1e-15 {
        ln_ratio
    } else {
        a.powf(s) * (s * ln_ratio).exp_m1() / s
    };
    let tail = integral + (f(a) + f(b)) / 2.0 + (f1(b) - f1(a)) / 12.0 - (f3(b) - f3(a)) / 720.0;
    sum + tail - f(a)
}

/// A fixed bijection of `[0, n)` (see the module doc, "Scrambling").
#[derive(Clone, Debug)]
struct Scramble {
    n: u64,
    mask: u64,
    shift: u32,
}

impl Scramble {
    fn new(n: u64) -> Self {
        assert!(n > 0, "a scramble over no keys");
        let bits = 64 - (n - 1).leading_zeros();
        let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        Self {
            n,
            mask,
            shift: (bits / 2).max(1),
        }
    }

    /// One round: a bijection of `[0, 2^b)`. Each step is invertible on b-bit words:
    /// adding a constant, `x ^= x >> s` (s ≥ 1), and multiplying by an odd constant.
    #[inline]
    fn round(&self, x: u64) -> u64 {
        let m = self.mask;
        let s = self.shift;
        let mut x = x.wrapping_add(0x9e37_79b9_7f4a_7c15) & m;
        x ^= x >> s;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd) & m;
        x ^= x >> s;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53) & m;
        x ^ (x >> s)
    }

    /// Cycle walking: rounds until the value falls back into `[0, n)`. It does, at the
    /// latest when the walk returns to `x` on `round`'s cycle, so the loop is bounded by
    /// `2^b - n + 1 ≤ n` rounds (expected < 2).
    #[inline]
    fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mut y = self.round(x);
        while y >= self.n {
            y = self.round(y);
        }
        y
    }
}

/// YCSB's scrambled Zipfian generator over keys `[0, n)` with skew `θ ∈ [0, 1)`.
///
/// Immutable after construction; the caller passes its own RNG to each draw, so one
/// generator is shared by every coordinator.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// `1 + 2^-θ`: `u·ζ(n)` below this (and ≥ 1) is rank 1.
    rank1_bound: f64,
    scramble: Scramble,
}

impl Zipf {
    /// Why `(n, theta)` cannot make a generator, or `Ok`.
    pub fn validate(n: u64, theta: f64) -> Result<(), String> {
        if n == 0 {
            return Err("a Zipfian generator needs at least one key".into());
        }
        if !(theta.is_finite() && (0.0..1.0).contains(&theta)) {
            return Err(format!(
                "zipf theta must be in [0, 1) (Gray et al.'s sampler diverges at 1), got {theta}"
            ));
        }
        Ok(())
    }

    /// A generator over `n` keys with skew `theta` (0 = uniform, 0.99 = YCSB/FORD default).
    ///
    /// # Panics
    ///
    /// If [`Zipf::validate`] refuses `(n, theta)`.
    pub fn new(n: u64, theta: f64) -> Self {
        if let Err(e) = Self::validate(n, theta) {
            panic!("{e}");
        }
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        // For n ≤ 2 every draw is rank 0 or 1 and η is never used (it would be 0/0).
        let eta = if n <= 2 {
            0.0
        } else {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Self {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
            rank1_bound: 1.0 + 0.5f64.powf(theta),
            scramble: Scramble::new(n),
        }
    }

    /// Keys in the domain.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The skew.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// `ζ(n, θ)`, the normalising constant: rank `r` has mass `(r+1)^-θ / ζ(n, θ)`.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// A rank in `[0, n)`, 0 the most popular (Gray et al.).
    #[inline]
    pub fn rank<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.rank1_bound {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        // u < 1 keeps r below n in exact arithmetic; rounding may not.
        r.min(self.n - 1)
    }

    /// The key that rank `rank` maps to (a fixed bijection of `[0, n)`).
    #[inline]
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        self.scramble.apply(rank)
    }

    /// A key in `[0, n)`: a Zipfian rank, scrambled.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.key_of_rank(self.rank(rng))
    }
}

/// How a workload draws keys in `[0, n)`.
#[derive(Clone, Debug)]
pub enum KeyGen {
    /// Every key equally likely.
    Uniform {
        /// Keys in the domain.
        n: u64,
    },
    /// Scrambled Zipfian.
    Zipf(Zipf),
}

impl KeyGen {
    /// Uniform when `theta == 0`, scrambled Zipfian otherwise.
    ///
    /// # Panics
    ///
    /// If [`Zipf::validate`] refuses `(n, theta)`.
    pub fn new(n: u64, theta: f64) -> Self {
        if let Err(e) = Zipf::validate(n, theta) {
            panic!("{e}");
        }
        if theta == 0.0 {
            KeyGen::Uniform { n }
        } else {
            KeyGen::Zipf(Zipf::new(n, theta))
        }
    }

    /// Keys in the domain.
    pub fn n(&self) -> u64 {
        match self {
            KeyGen::Uniform { n } => *n,
            KeyGen::Zipf(z) => z.n(),
        }
    }

    /// A key in `[0, n)`.
    #[inline]
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self {
            KeyGen::Uniform { n } => uniform(rng, *n),
            KeyGen::Zipf(z) => z.sample(rng),
        }
    }
}

/// A uniform integer in `[0, n)` by one multiply-high (Lemire without the rejection
/// step: the bias is below `n / 2^64`, invisible at any key count dmtx uses).
#[inline]
pub(crate) fn uniform<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    debug_assert!(n > 0);
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn zeta_exact(n: u64, theta: f64) -> f64 {
        (1..=n).rev().map(|i| (i as f64).powf(-theta)).sum()
    }

    #[test]
    fn zeta_tail_matches_the_exact_sum() {
        for &theta in &[0.0, 0.2, 0.5, 0.7, 0.9, 0.99, 0.999_999] {
            for &n in &[1, 2, 1000, 1024, 1025, 5000, 300_000] {
                let exact = zeta_exact(n, theta);
                let fast = zeta(n, theta);
                let rel = ((fast - exact) / exact).abs();
                assert!(rel < 1e-11, "n {n} theta {theta}: {fast} vs {exact} (rel {rel})");
            }
        }
        assert_eq!(zeta(0, 0.5), 0.0);
    }

    #[test]
    fn ten_million_keys_construct_fast() {
        let t = std::time::Instant::now();
        let z = Zipf::new(10_000_000, 0.99);
        assert!(t.elapsed().as_millis() < 100, "took {:?}", t.elapsed());
        assert!(z.zetan() > zeta(1_000_000, 0.99));
    }

    #[test]
    fn scramble_is_a_bijection() {
        for n in [1u64, 2, 3, 7, 8, 9, 1000, 1024, 4097] {
            let s = Scramble::new(n);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = s.apply(x);
                assert!(y < n);
                assert!(!seen[y as usize], "n {n}: {y} hit twice");
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn skewed_hottest_keys_carry_the_zipf_mass() {
        // Goal: theta 0.99 over 1000 keys puts on the hottest 1% of keys (10) about the
        // analytic mass of ranks 1..=10. Method: count 400k draws, take the 10 largest counts.
        let n = 1000u64;
        let theta = 0.99;
        let z = Zipf::new(n, theta);
        let mut rng = SmallRng::seed_from_u64(7);
        let draws = 400_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            let k = z.sample(&mut rng);
            assert!(k < n);
            counts[k as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = counts[..10].iter().sum();
        let share = top as f64 / draws as f64;
        let analytic = zeta_exact(10, theta) / zeta_exact(n, theta);
        assert!(analytic > 0.35, "{analytic}");
        assert!(
            (share - analytic).abs() < 0.03,
            "hottest 1% got {share:.4}, analytic {analytic:.4}"
        );
        // Tighter: Gray's sampler puts P(rank < 10) = 1 + ((10/n)^(1/α) - 1)/η (0.3983
        // here, its continuous approximation slightly over the exact 0.3825).
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_exact(2, theta) / zeta_exact(n, theta));
        let sampler = 1.0 + ((10.0 / n as f64).powf(1.0 / alpha) - 1.0) / eta;
        assert!(
            (share - sampler).abs() < 0.005,
            "hottest 1% got {share:.4}, the sampler's own mass is {sampler:.4}"
        );
        // Rank 0 is exact in Gray's sampler.
        let hottest = counts[0] as f64 / draws as f64;
        let p0 = 1.0 / zeta_exact(n, theta);
        assert!((hottest - p0).abs() < 0.01, "{hottest} vs {p0}");
        // And the hot keys are not the first keys.
        let hot_keys: Vec<u64> = (0..10).map(|r| z.key_of_rank(r)).collect();
        assert!(hot_keys.iter().any(|&k| k >= 100), "{hot_keys:?}");
    }

    #[test]
    fn theta_zero_is_uniform() {
        // Chi-square over 100 cells with 99 degrees of freedom: mean 99, sd 14; 200 is
        // beyond 7 sd.
        let n = 100u64;
        let draws = 200_000u64;
        let expect = draws as f64 / n as f64;
        for g in [KeyGen::Zipf(Zipf::new(n, 0.0)), KeyGen::new(n, 0.0)] {
            let mut rng = SmallRng::seed_from_u64(11);
            let mut counts = vec![0u64; n as usize];
            for _ in 0..draws {
                let k = g.next(&mut rng);
                assert!(k < n);
                counts[k as usize] += 1;
            }
            let chi2: f64 = counts.iter().map(|&c| (c as f64 - expect).powi(2) / expect).sum();
            assert!(chi2 < 200.0, "{g:?}: chi2 {chi2}");
        }
        assert!(matches!(KeyGen::new(n, 0.0), KeyGen::Uniform { n: 100 }));
        assert!(matches!(KeyGen::new(n, 0.5), KeyGen::Zipf(_)));
    }

    #[test]
    fn same_seed_same_keys() {
        let g = KeyGen::new(10_000, 0.99);
        let run = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..1000).map(|_| g.next(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn tiny_domains() {
        let mut rng = SmallRng::seed_from_u64(1);
        for n in 1..=3 {
            let z = Zipf::new(n, 0.99);
            for _ in 0..1000 {
                assert!(z.sample(&mut rng) < n);
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(Zipf::validate(0, 0.5).is_err());
        assert!(Zipf::validate(10, 1.0).is_err());
        assert!(Zipf::validate(10, -0.1).is_err());
        assert!(Zipf::validate(10, f64::NAN).is_err());
        assert!(Zipf::validate(10, 0.0).is_ok());
    }
}
