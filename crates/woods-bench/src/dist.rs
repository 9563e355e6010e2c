//! Random choices of the workloads: a seeded generator, and YCSB's request distributions
//! (`ZipfianGenerator`, `ScrambledZipfianGenerator`, `SkewedLatestGenerator`,
//! `DiscreteGenerator`) with YCSB's constants and arithmetic, so that the popularity of keys
//! is the one published YCSB results had.
//!
//! Each client thread owns its generators (YCSB shares one between threads under a lock); their
//! draws come from the thread's own [`Rng`], seeded from `--seed` and the thread number.

use crate::gen::{fnvhash64, splitmix64};

/// xorshift64*: reproducible from its seed, fast, and good enough to pick keys.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`; `salt` separates the streams of different uses and threads.
    pub fn new(seed: u64, salt: u64) -> Rng {
        let s = splitmix64(seed ^ splitmix64(salt));
        Rng(if s == 0 { 1 } else { s })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is below 2^-40 for the counts used here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[0, 1)`, like Java's `Random.nextDouble` (53 bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// YCSB's zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly Generating Billion-Record Synthetic
/// Databases", SIGMOD 1994): item `min` is the most popular, `min + 1` the next, and so on.
/// The number of items may grow between draws ([`Zipfian::next_in`]); zeta is then extended
/// incrementally, and `eta` recomputed with the original item count, as YCSB does.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

/// `sum_{i=st}^{n-1} 1 / (i + 1)^theta`, added to `initial` (YCSB's `zetastatic`).
pub fn zeta(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

impl Zipfian {
    /// Items `min..=max` with YCSB's constant 0.99; computes zeta over all of them (about a
    /// second per 50 million items).
    pub fn new(min: u64, max: u64) -> Zipfian {
        let n = max - min + 1;
        Zipfian::with_zetan(min, max, zeta(0, n, ZIPFIAN_CONSTANT, 0.0))
    }

    /// Items `min..=max` with a precomputed zeta of their count.
    pub fn with_zetan(min: u64, max: u64, zetan: f64) -> Zipfian {
        let items = max - min + 1;
        let theta = ZIPFIAN_CONSTANT;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan),
            count_for_zeta: items,
        }
    }

    /// A draw over the generator's own item count.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.next_in(self.items, rng)
    }

    /// A draw over `item_count` items (YCSB's `nextLong(itemcount)`): a larger count than
    /// before extends zeta; a smaller one keeps it (YCSB's `allowitemcountdecrease = false`).
    pub fn next_in(&mut self, item_count: u64, rng: &mut Rng) -> u64 {
        if item_count > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, item_count, self.theta, self.zetan);
            self.count_for_zeta = item_count;
            self.eta = (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta))
                / (1.0 - self.zeta2theta / self.zetan);
        }
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }
}

/// YCSB's `ScrambledZipfianGenerator`: a zipfian draw over 10^16 items (with YCSB's
/// precomputed zeta), hashed with `fnvhash64` and taken modulo the item count, so that the
/// popular items are scattered over `min..=max` instead of being its first ones.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    item_count: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    /// YCSB's `ZETAN`: zeta of its item count for the constant 0.99.
    pub const ZETAN: f64 = 26.469_028_201_783_02;
    /// YCSB's `ITEM_COUNT`.
    pub const ITEM_COUNT: u64 = 10_000_000_000_000_000;

    pub fn new(min: u64, max: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            item_count: max - min + 1,
            gen: Zipfian::with_zetan(0, Self::ITEM_COUNT, Self::ZETAN),
        }
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let r = self.gen.next(rng);
        // YCSB computes `min + fnvhash64(r) % itemcount` on signed longs; the hash is
        // non-negative except for one value in 2^64, which is folded in here.
        self.min + fnvhash64(r as i64).unsigned_abs() % self.item_count
    }
}

/// YCSB's `SkewedLatestGenerator` (workload D's `latest`): the most recently inserted record is
/// the most popular, the one before it the next, and so on; `last` is the highest record
/// acknowledged so far.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// As YCSB: a zipfian over `last` items (`ZipfianGenerator(basis.lastValue())`).
    pub fn new(last: u64) -> SkewedLatest {
        SkewedLatest {
            zipf: Zipfian::new(0, last.max(2) - 1),
        }
    }

    /// `last - zipfian.nextLong(last)`, as YCSB: in `1..=last` (YCSB never picks record 0
    /// here), or 0 while `last` is 0.
    pub fn next(&mut self, last: u64, rng: &mut Rng) -> u64 {
        if last == 0 {
            return 0;
        }
        last.saturating_sub(self.zipf.next_in(last, rng))
    }
}

/// YCSB's `DiscreteGenerator`: picks one of a few choices with fixed weights.
#[derive(Clone, Debug)]
pub struct Discrete<T: Copy> {
    choices: Vec<(f64, T)>,
}

impl<T: Copy> Discrete<T> {
    /// Choices with positive weights (the others are dropped, as YCSB does).
    pub fn new(choices: &[(f64, T)]) -> Discrete<T> {
        let sum: f64 = choices.iter().map(|c| c.0).filter(|&w| w > 0.0).sum();
        Discrete {
            choices: choices
                .iter()
                .filter(|c| c.0 > 0.0)
                .map(|&(w, t)| (w / sum, t))
                .collect(),
        }
    }

    pub fn next(&self, rng: &mut Rng) -> T {
        let mut v = rng.unit();
        for &(w, t) in &self.choices {
            if v < w {
                return t;
            }
            v -= w;
        }
        self.choices.last().expect("at least one choice").1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u64, draws: usize, mut f: impl FnMut() -> u64) -> Vec<u64> {
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            let x = f();
            assert!(x < n, "{x} out of 0..{n}");
            c[x as usize] += 1;
        }
        c
    }

    #[test]
    fn rng_unit_is_in_range() {
        let mut r = Rng::new(1, 2);
        let mut sum = 0.0;
        for _ in 0..100_000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            sum += u;
        }
        assert!((sum / 100_000.0 - 0.5).abs() < 0.01);
    }

    #[test]
    fn zipfian_head_has_its_share() {
        // Item 0 is drawn with probability 1/zeta(n), item 1 with 2^-0.99/zeta(n).
        let n = 1000;
        let mut z = Zipfian::new(0, n - 1);
        let mut rng = Rng::new(5, 0);
        let draws = 200_000;
        let c = counts(n, draws, || z.next(&mut rng));
        let z_n = zeta(0, n, ZIPFIAN_CONSTANT, 0.0);
        let p0 = c[0] as f64 / draws as f64;
        let p1 = c[1] as f64 / draws as f64;
        assert!((p0 - 1.0 / z_n).abs() < 0.005, "p0 {p0} vs {}", 1.0 / z_n);
        assert!((p1 - 0.5f64.powf(0.99) / z_n).abs() < 0.005, "p1 {p1}");
        assert!(c[0] > c[10] && c[10] > c[500]);
    }

    #[test]
    fn zipfian_grows_incrementally() {
        let mut z = Zipfian::new(0, 99);
        let mut rng = Rng::new(1, 1);
        for _ in 0..1000 {
            assert!(z.next_in(200, &mut rng) < 200);
        }
        assert!((z.zetan - zeta(0, 200, ZIPFIAN_CONSTANT, 0.0)).abs() < 1e-9);
    }

    #[test]
    fn scrambled_zipfian_scatters_hot_keys() {
        let n = 10_000;
        let mut z = ScrambledZipfian::new(0, n - 1);
        let mut rng = Rng::new(7, 0);
        let draws = 200_000;
        let c = counts(n, draws, || z.next(&mut rng));
        let mut sorted = c.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        // YCSB's hottest item: the draw 0, with probability 1/ZETAN, lands on fnvhash64(0) % n.
        let hot = (fnvhash64(0) as u64 % n) as usize;
        let p_hot = c[hot] as f64 / draws as f64;
        assert!(p_hot > 0.9 / ScrambledZipfian::ZETAN, "{p_hot}");
        assert_eq!(sorted[0], c[hot]);
        // The hot items are not the first ones.
        let top: Vec<usize> = (0..n as usize).filter(|&i| c[i] >= sorted[9]).collect();
        assert!(top.iter().any(|&i| i > 100), "{top:?}");
        // Skewed: the 1% hottest items get far more than 1% of the draws (about 20%: the
        // zipfian head of 10^16 items, sum of i^-0.99 for i <= 100, over ZETAN).
        let head = sorted[..100].iter().sum::<u64>() as f64 / draws as f64;
        assert!((0.15..0.3).contains(&head), "{head}");
    }

    #[test]
    fn latest_prefers_the_newest() {
        let mut l = SkewedLatest::new(999);
        let mut rng = Rng::new(3, 0);
        let mut near = 0;
        for _ in 0..10_000 {
            let x = l.next(999, &mut rng);
            assert!((1..=999).contains(&x));
            if x >= 990 {
                near += 1;
            }
        }
        assert!(near > 3000, "{near}");
        // New records become the most popular as soon as they are acknowledged.
        let x: Vec<u64> = (0..100).map(|_| l.next(5000, &mut rng)).collect();
        assert!(x.iter().filter(|&&v| v > 4900).count() > 30);
    }

    #[test]
    fn discrete_keeps_proportions() {
        let d = Discrete::new(&[(0.95, 'r'), (0.05, 'w'), (0.0, 'x')]);
        let mut rng = Rng::new(1, 9);
        let w = (0..100_000).filter(|_| d.next(&mut rng) == 'w').count();
        assert!((4000..6000).contains(&w), "{w}");
    }
}
