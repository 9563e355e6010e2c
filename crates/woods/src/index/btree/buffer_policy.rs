//! Which leaf a full insertion buffer flushes: the ball-recycling strategies of seed 004
//! chapter 5 (`specs/hashing-aging-insert-buffers.md` §3.2, §3.6, corrections 4 and 10), as
//! pure functions over what the buffer holds, so that the decision is testable without I/O
//! and the same code drives `woods-bench recycle`'s simulator and (later) the `btree` kind's
//! insertion buffer.
//!
//! A *bin* is a target leaf, named by a key `K` that orders the leaves (the leaf's low key in
//! the engine, the bin's index in the simulator). The buffer is seen as its non-empty bins in
//! key order, each with how many buffered entries (balls) wait for it. Flushing a bin writes
//! all of them in one leaf read-modify-write; the number written is the *recycle rate*, the
//! buffer's speed-up over writing each entry alone.
//!
//! - [`FlushPolicy::FullestLeaf`]: the bin with the most entries (ties: the lowest key).
//!   Optimal to an additive constant when leaves are hit uniformly (Theorem 7), pessimal on
//!   skewed hits (the skyscraper of §3.3).
//! - [`FlushPolicy::RandomBall`]: the bin of a uniformly random buffered entry. Θ(1)-optimal
//!   for every hit distribution (Theorem 6), about 0.8 of golden gate on uniform hits.
//! - [`FlushPolicy::GoldenGate`]: round robin over the key space. A cursor holds the upper
//!   bound of the last flushed bin; the next flush takes the smallest buffered key at or after
//!   the cursor, wrapping to the smallest buffered key (correction 10). As good as fullest
//!   leaf on uniform hits (Theorem 7) with no per-leaf counts.
//! - [`FlushPolicy::Adaptive`]: golden gate while [`IidTest`] says the inserts look i.i.d.
//!   over near-uniform leaves, random ball otherwise and until the test has seen a full window
//!   (correction 4: fullest bin and golden gate are right only for i.i.d. inserts).

use std::collections::{BTreeMap, VecDeque};

/// A flush choice policy (spec §3.2 and §3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushPolicy {
    /// The leaf with the most buffered entries.
    FullestLeaf,
    /// The leaf of a uniformly random buffered entry.
    RandomBall,
    /// Round robin over the key space from a cursor (correction 10).
    GoldenGate,
    /// Golden gate while inserts look i.i.d. ([`IidTest`]), random ball otherwise.
    Adaptive,
}

impl FlushPolicy {
    /// Every policy, in the order reports list them.
    pub const ALL: [FlushPolicy; 4] = [
        FlushPolicy::FullestLeaf,
        FlushPolicy::RandomBall,
        FlushPolicy::GoldenGate,
        FlushPolicy::Adaptive,
    ];

    /// The policy's name in options and reports.
    pub fn name(self) -> &'static str {
        match self {
            FlushPolicy::FullestLeaf => "fullest-leaf",
            FlushPolicy::RandomBall => "random-ball",
            FlushPolicy::GoldenGate => "golden-gate",
            FlushPolicy::Adaptive => "adaptive",
        }
    }

    /// The policy called `name` ([`FlushPolicy::name`]).
    pub fn from_name(name: &str) -> Option<FlushPolicy> {
        FlushPolicy::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// What a policy sees of a full buffer.
#[derive(Clone, Copy, Debug)]
pub struct BufferView<'a, K> {
    /// The non-empty bins in ascending key order, each with its count of buffered entries
    /// (every count above zero).
    pub bins: &'a [(K, u64)],
    /// Golden gate's cursor: the upper bound of the last flushed bin (None before the first
    /// flush, or after a flush of the highest bin, which wraps).
    pub cursor: Option<&'a K>,
    /// A uniform random draw for random ball; only `ball % total` is used, so any `u64` from
    /// a uniform generator does.
    pub ball: u64,
    /// The adaptive policy's verdict: whether the inserts look i.i.d. ([`IidTest::verdict`]).
    pub iid: bool,
}

/// The bin `policy` flushes, or None when the buffer is empty.
pub fn choose<K: Ord + Clone>(policy: FlushPolicy, view: &BufferView<'_, K>) -> Option<K> {
    match policy {
        FlushPolicy::FullestLeaf => fullest_leaf(view.bins),
        FlushPolicy::RandomBall => random_ball(view.bins, view.ball),
        FlushPolicy::GoldenGate => golden_gate(view.bins, view.cursor),
        FlushPolicy::Adaptive if view.iid => golden_gate(view.bins, view.cursor),
        FlushPolicy::Adaptive => random_ball(view.bins, view.ball),
    }
}

/// The bin with the most entries; of equal counts, the lowest key.
pub fn fullest_leaf<K: Clone>(bins: &[(K, u64)]) -> Option<K> {
    let mut best: Option<&(K, u64)> = None;
    for b in bins {
        if best.is_none_or(|x| b.1 > x.1) {
            best = Some(b);
        }
    }
    best.map(|b| b.0.clone())
}

/// The bin holding ball number `ball % total` when the balls are counted in key order: each
/// bin is chosen with probability count ÷ total when `ball` is uniform.
pub fn random_ball<K: Clone>(bins: &[(K, u64)], ball: u64) -> Option<K> {
    let total: u64 = bins.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let mut left = ball % total;
    for b in bins {
        if left < b.1 {
            return Some(b.0.clone());
        }
        left -= b.1;
    }
    None
}

/// The smallest non-empty bin at or after `cursor`, wrapping to the smallest non-empty bin
/// (correction 10). `bins` must be in ascending key order.
pub fn golden_gate<K: Ord + Clone>(bins: &[(K, u64)], cursor: Option<&K>) -> Option<K> {
    let at = match cursor {
        Some(c) => bins.partition_point(|b| b.0 < *c),
        None => 0,
    };
    bins.get(at).or(bins.first()).map(|b| b.0.clone())
}

/// The adaptive policy's test of whether inserts look i.i.d. over near-uniform leaves (the
/// condition under which correction 4 allows golden gate), over a sliding window of the last
/// `window` inserts' target bins. Two statistics, both cheap to keep up to date:
///
/// 1. *Collisions*: the number of pairs of inserts in the window that hit the same bin. With
///    i.i.d. hits spread evenly over `n` bins its mean is E = W(W−1)/(2n); a skewed hit
///    distribution p multiplies it by n·Σp² (hot ranges, appends at the end of the key space
///    and sequential inserts all raise it many times). A B-tree's leaves under i.i.d. inserts
///    hold between half and all of a leaf's worth, so n·Σp² stays below about 1.15 (spec §3.5:
///    the heaviest leaf weighs under 2.3/n). The test passes while collisions ≤ 1.5·E +
///    3·√E + 2 (1.5 times the mean, plus three standard deviations of a Poisson count).
/// 2. *Order*: among consecutive inserts to different bins, the share that go to a higher bin
///    than the insert before. I.i.d. hits make it ½ (standard deviation ½/√k over k pairs);
///    a sorted batch merged across existing leaves, or a sweep, makes it near 1 (or 0) with
///    few collisions. The test passes while |share − ½| ≤ 3·½/√k + 0.05.
///
/// Until the window has filled the verdict is not i.i.d.: random ball is the safe choice for
/// unknown patterns (correction 4).
#[derive(Clone, Debug)]
pub struct IidTest<K> {
    window: usize,
    recent: VecDeque<K>,
    counts: BTreeMap<K, u64>,
    same_pairs: u64,
    /// Per consecutive pair in the window: +1 up, -1 down, 0 same bin.
    steps: VecDeque<i8>,
    ups: u64,
    downs: u64,
}

/// The inserts the default [`IidTest`] window holds.
pub const DEFAULT_IID_WINDOW: usize = 1024;

/// What [`IidTest::verdict`] found, with the statistics behind it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IidVerdict {
    /// Both statistics pass on a full window.
    pub iid: bool,
    /// Same-bin pairs in the window ÷ their mean under uniform i.i.d. hits.
    pub collision_ratio: f64,
    /// The share of consecutive inserts to different bins that went up.
    pub up_share: f64,
}

impl<K: Ord + Clone> IidTest<K> {
    /// A test over the last `window` inserts (at least 2).
    pub fn new(window: usize) -> IidTest<K> {
        IidTest {
            window: window.max(2),
            recent: VecDeque::new(),
            counts: BTreeMap::new(),
            same_pairs: 0,
            steps: VecDeque::new(),
            ups: 0,
            downs: 0,
        }
    }

    /// Records an insert into `bin`.
    pub fn observe(&mut self, bin: K) {
        if let Some(prev) = self.recent.back() {
            let step = match bin.cmp(prev) {
                std::cmp::Ordering::Greater => 1,
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
            };
            self.push_step(step);
        }
        let c = self.counts.entry(bin.clone()).or_insert(0);
        self.same_pairs += *c;
        *c += 1;
        self.recent.push_back(bin);
        if self.recent.len() > self.window {
            if let Some(old) = self.recent.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    self.same_pairs -= *c;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
            if let Some(s) = self.steps.pop_front() {
                match s {
                    1 => self.ups -= 1,
                    -1 => self.downs -= 1,
                    _ => {}
                }
            }
        }
    }

    fn push_step(&mut self, step: i8) {
        match step {
            1 => self.ups += 1,
            -1 => self.downs += 1,
            _ => {}
        }
        self.steps.push_back(step);
    }

    /// The verdict for a tree of `bins` leaves (the bins an insert can hit, empty or not).
    pub fn verdict(&self, bins: u64) -> IidVerdict {
        let w = self.recent.len() as f64;
        let mean = w * (w - 1.0) / 2.0 / bins.max(1) as f64;
        let pairs = self.same_pairs as f64;
        let collision_ratio = if mean > 0.0 { pairs / mean } else { 0.0 };
        let moves = (self.ups + self.downs) as f64;
        let up_share = if moves > 0.0 {
            self.ups as f64 / moves
        } else {
            0.5
        };
        let full = self.recent.len() >= self.window;
        let few_collisions = pairs <= 1.5 * mean + 3.0 * mean.sqrt() + 2.0;
        let unordered = moves > 0.0 && (up_share - 0.5).abs() <= 1.5 / moves.sqrt() + 0.05;
        IidVerdict {
            iid: full && few_collisions && unordered,
            collision_ratio,
            up_share,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(bins: &[(u32, u64)], cursor: Option<&u32>, ball: u64) -> Vec<Option<u32>> {
        [false, true]
            .iter()
            .flat_map(|&iid| {
                FlushPolicy::ALL.map(|p| {
                    let v = BufferView {
                        bins,
                        cursor,
                        ball,
                        iid,
                    };
                    choose(p, &v)
                })
            })
            .collect()
    }

    #[test]
    fn an_empty_buffer_flushes_nothing() {
        assert!(view(&[], None, 7).iter().all(|c| c.is_none()));
    }

    #[test]
    fn fullest_leaf_takes_the_largest_count_and_the_lowest_key_of_a_tie() {
        assert_eq!(fullest_leaf(&[(1, 3), (4, 9), (7, 2)]), Some(4));
        assert_eq!(fullest_leaf(&[(1, 5), (4, 9), (7, 9)]), Some(4));
    }

    #[test]
    fn random_ball_counts_balls_in_key_order() {
        let bins = [(10u32, 2u64), (20, 1), (30, 3)];
        let picks: Vec<u32> = (0..6).filter_map(|b| random_ball(&bins, b)).collect();
        assert_eq!(picks, [10, 10, 20, 30, 30, 30]);
        // Past the total the draw wraps, so any uniform u64 picks in proportion to counts.
        assert_eq!(random_ball(&bins, 6), Some(10));
        assert_eq!(random_ball(&bins, u64::MAX), Some(30)); // 2^64-1 ≡ 3 (mod 6)
    }

    #[test]
    fn golden_gate_takes_the_first_bin_at_or_after_the_cursor_and_wraps() {
        let bins = [(10u32, 1u64), (20, 5), (30, 1)];
        assert_eq!(golden_gate(&bins, None), Some(10));
        assert_eq!(golden_gate(&bins, Some(&11)), Some(20));
        // Correction 10: a bin that starts exactly at the cursor is the next one.
        assert_eq!(golden_gate(&bins, Some(&20)), Some(20));
        assert_eq!(golden_gate(&bins, Some(&31)), Some(10));
    }

    #[test]
    fn adaptive_follows_the_verdict() {
        let bins = [(10u32, 1u64), (20, 5), (30, 1)];
        // ball 0 is bin 10's; the cursor points at 30.
        let c = view(&bins, Some(&25), 0);
        // [FB, RB, GG, AD] without iid, then with.
        assert_eq!(
            c,
            [20, 10, 30, 10, 20, 10, 30, 30].map(Some),
            "adaptive is random ball without iid, golden gate with"
        );
    }

    #[test]
    fn policy_names_round_trip() {
        for p in FlushPolicy::ALL {
            assert_eq!(FlushPolicy::from_name(p.name()), Some(p));
        }
        assert_eq!(FlushPolicy::from_name("fullest"), None);
    }

    /// A tiny deterministic generator for the tests (splitmix64).
    fn draws(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    #[test]
    fn iid_test_passes_uniform_hits_and_fails_skew_and_order() {
        let n = 500u64;
        let mut next = draws(1);
        let mut uniform = IidTest::new(DEFAULT_IID_WINDOW);
        assert!(!uniform.verdict(n).iid, "an empty window is not i.i.d.");
        for _ in 0..5000 {
            uniform.observe(next() % n);
        }
        let v = uniform.verdict(n);
        assert!(v.iid, "uniform hits: {v:?}");

        // Half the inserts append at the end of the key space: one leaf takes half the hits.
        let mut appends = IidTest::new(DEFAULT_IID_WINDOW);
        for i in 0..5000u64 {
            appends.observe(if i.is_multiple_of(2) {
                n - 1
            } else {
                next() % n
            });
        }
        let v = appends.verdict(n);
        assert!(!v.iid && v.collision_ratio > 10.0, "appends: {v:?}");

        // A sorted batch merged across the leaves: no collisions, always up.
        let mut sweep = IidTest::new(DEFAULT_IID_WINDOW);
        for i in 0..5000u64 {
            sweep.observe(i % n);
        }
        let v = sweep.verdict(n);
        assert!(!v.iid && v.up_share > 0.9, "sweep: {v:?}");

        // A hot range: 90% of the inserts in a tenth of the leaves.
        let mut hot = IidTest::new(DEFAULT_IID_WINDOW);
        for _ in 0..5000u64 {
            let r = next();
            hot.observe(if !r.is_multiple_of(10) {
                r % (n / 10)
            } else {
                r % n
            });
        }
        let v = hot.verdict(n);
        assert!(!v.iid && v.collision_ratio > 5.0, "hot range: {v:?}");
    }

    #[test]
    fn iid_test_forgets_what_left_the_window() {
        let n = 100u64;
        let mut t = IidTest::new(64);
        for _ in 0..1000 {
            t.observe(7u64);
        }
        assert!(!t.verdict(n).iid);
        let mut next = draws(2);
        for _ in 0..64 {
            t.observe(next() % n);
        }
        // Only the 64 uniform hits remain: the statistics match a fresh test's.
        let mut fresh = IidTest::new(64);
        let mut again = draws(2);
        for _ in 0..64 {
            fresh.observe(again() % n);
        }
        assert_eq!(t.same_pairs, fresh.same_pairs);
        assert_eq!((t.ups, t.downs), (fresh.ups, fresh.downs));
    }
}
