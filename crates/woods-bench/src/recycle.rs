//! `woods bench recycle`: a simulator of the ball-recycling game of seed 004 chapter 5
//! (`specs/hashing-aging-insert-buffers.md` §3), driving the flush policies of
//! [`woods::index::btree::buffer_policy`], the same code the `btree` insertion buffer uses.
//!
//! Two games:
//! - the *static* game (§3.1, §3.3): m balls in n fixed bins, hits i.i.d. from p (uniform or
//!   the skyscraper of §3.3); each step recycles one non-empty bin. The rate is the mean
//!   number of balls per step after a warm-up, beside the bounds 2m/(n+1) (fullest bin and
//!   golden gate, Theorem 7) and (2m+n−1)/‖p‖½ (every strategy, Lemma 26), and random ball's
//!   identity E[R²]/E[R] = (2m+n−1)/(n+1) on uniform hits (Lemma 32) as a self-check.
//! - the *B-tree* game (§3.5, the chapter's Fig. 5.4): an insertion buffer of 2,500 keys in
//!   front of leaves that split when they exceed 160 keys, starting from one leaf; keys from
//!   uniform, Pareto, normal and sequential-with-noise distributions. The rate is the keys per
//!   flush over the last 50,000 inserts before each checkpoint.

use std::io::Write;

use clap::{Args, ValueEnum};
use woods::index::btree::buffer_policy::{
    choose, BufferView, FlushPolicy, IidTest, DEFAULT_IID_WINDOW,
};

use crate::dist::Rng;

/// Arguments of `woods bench recycle`.
#[derive(Args, Clone, Debug)]
pub struct RecycleArgs {
    /// Which games to play.
    #[arg(long, value_enum, default_value_t = Game::All)]
    pub game: Game,
    /// Measured steps of each static game (after a warm-up of a tenth as many).
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub steps: u64,
    /// Inserts of each B-tree game; checkpoints at 50,000 and each doubling up to it.
    #[arg(long, value_name = "N", default_value_t = 400_000)]
    pub inserts: u64,
    /// Buffer capacity of the B-tree game, in keys.
    #[arg(long, value_name = "M", default_value_t = 2_500)]
    pub buffer: u64,
    /// A leaf of the B-tree game splits when it holds more keys than this.
    #[arg(long, value_name = "B", default_value_t = 160)]
    pub leaf: usize,
    /// Seed of every random choice.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
}

/// The games `woods bench recycle` plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Game {
    /// The static game on fixed bins (spec §3.3).
    Static,
    /// The B-tree game with splitting leaves (spec §3.5).
    Btree,
    /// Both.
    All,
}

/// A strategy of the simulator: a flush policy, or least-full non-empty bin (only the
/// skyscraper observation of §3.3 uses it; no buffer should).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// One of the engine's policies.
    Policy(FlushPolicy),
    /// The least-full non-empty bin (ties: the lowest).
    LeastFull,
}

impl Strategy {
    /// The strategies every table lists.
    pub const ALL: [Strategy; 5] = [
        Strategy::Policy(FlushPolicy::FullestLeaf),
        Strategy::Policy(FlushPolicy::RandomBall),
        Strategy::Policy(FlushPolicy::GoldenGate),
        Strategy::Policy(FlushPolicy::Adaptive),
        Strategy::LeastFull,
    ];

    /// The strategy's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Policy(p) => p.name(),
            Strategy::LeastFull => "least-full",
        }
    }

    fn pick<K: Ord + Clone>(self, view: &BufferView<'_, K>) -> Option<K> {
        match self {
            Strategy::Policy(p) => choose(p, view),
            Strategy::LeastFull => {
                let mut best: Option<&(K, u64)> = None;
                for b in view.bins {
                    if best.is_none_or(|x| b.1 < x.1) {
                        best = Some(b);
                    }
                }
                best.map(|b| b.0.clone())
            }
        }
    }
}

/// The hit distribution of a static game.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hits {
    /// Every bin 1/n.
    Uniform,
    /// Bin 0 takes 1 − 1/n + 1/n², every other bin 1/n² (spec §3.3).
    Skyscraper,
}

impl Hits {
    fn throw(self, n: u64, rng: &mut Rng) -> u64 {
        match self {
            Hits::Uniform => rng.below(n),
            Hits::Skyscraper => {
                let nf = n as f64;
                if rng.unit() < 1.0 - 1.0 / nf + 1.0 / (nf * nf) {
                    0
                } else {
                    1 + rng.below(n - 1)
                }
            }
        }
    }

    /// ‖p‖½ = (Σ √p_i)².
    pub fn half_norm(self, n: u64) -> f64 {
        let nf = n as f64;
        match self {
            Hits::Uniform => nf,
            Hits::Skyscraper => {
                let s = (1.0 - 1.0 / nf + 1.0 / (nf * nf)).sqrt() + (nf - 1.0) / nf;
                s * s
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Hits::Uniform => "uniform",
            Hits::Skyscraper => "skyscraper",
        }
    }
}

/// What one static game measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GameResult {
    /// Mean balls recycled per step (the recycle rate).
    pub rate: f64,
    /// E[R²] ÷ E[R] over the measured steps.
    pub second_moment_ratio: f64,
    /// Share of steps the adaptive policy ran golden gate.
    pub golden_share: f64,
}

/// Plays `steps` measured steps (after `warmup` unmeasured ones) of the static game with `m`
/// balls in `n` bins.
pub fn play(
    n: u64,
    m: u64,
    hits: Hits,
    strategy: Strategy,
    warmup: u64,
    steps: u64,
    seed: u64,
) -> GameResult {
    let mut rng = Rng::new(seed, n * 1_000_003 + m);
    let mut counts = vec![0u64; n as usize];
    let mut test = IidTest::new(DEFAULT_IID_WINDOW);
    let throw = |k: u64, counts: &mut [u64], rng: &mut Rng, test: &mut IidTest<u64>| {
        for _ in 0..k {
            let b = hits.throw(n, rng);
            counts[b as usize] += 1;
            test.observe(b);
        }
    };
    throw(m, &mut counts, &mut rng, &mut test);
    let mut cursor: Option<u64> = None;
    let (mut sum, mut sum_sq, mut golden) = (0f64, 0f64, 0u64);
    let mut bins: Vec<(u64, u64)> = Vec::with_capacity(n as usize);
    for step in 0..warmup + steps {
        bins.clear();
        bins.extend(
            counts
                .iter()
                .enumerate()
                .filter(|c| *c.1 > 0)
                .map(|(i, &c)| (i as u64, c)),
        );
        let iid = test.verdict(n).iid;
        let view = BufferView {
            bins: &bins,
            cursor: cursor.as_ref(),
            ball: rng.next_u64(),
            iid,
        };
        let Some(b) = strategy.pick(&view) else {
            break;
        };
        let r = std::mem::take(&mut counts[b as usize]);
        cursor = (b + 1 < n).then_some(b + 1);
        if step >= warmup {
            sum += r as f64;
            sum_sq += (r * r) as f64;
            golden += u64::from(iid);
        }
        throw(r, &mut counts, &mut rng, &mut test);
    }
    GameResult {
        rate: sum / steps.max(1) as f64,
        second_moment_ratio: if sum > 0.0 { sum_sq / sum } else { 0.0 },
        golden_share: golden as f64 / steps.max(1) as f64,
    }
}

/// The key distribution of a B-tree game.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Keys {
    /// Uniform on [0, 1000].
    Uniform,
    /// Pareto with x_m = 1 and this α.
    Pareto(f64),
    /// Normal, mean 0, standard deviation 1000.
    Normal,
    /// Insert i: every other one the next of an ascending sequence (above every key so far),
    /// the others uniform below it: appends at the end of the key space with noise.
    SeqNoise,
}

impl Keys {
    /// The distributions of the B-tree table (the chapter's, and sequential with noise).
    pub const ALL: [Keys; 6] = [
        Keys::Uniform,
        Keys::Pareto(0.5),
        Keys::Pareto(1.0),
        Keys::Pareto(2.0),
        Keys::Normal,
        Keys::SeqNoise,
    ];

    /// The distribution's name in tables.
    pub fn name(self) -> String {
        match self {
            Keys::Uniform => "uniform".into(),
            Keys::Pareto(a) => format!("pareto {a}"),
            Keys::Normal => "normal".into(),
            Keys::SeqNoise => "seq+noise".into(),
        }
    }

    fn draw(self, i: u64, rng: &mut Rng) -> u64 {
        let x = match self {
            Keys::Uniform => rng.unit() * 1000.0,
            Keys::Pareto(a) => (1.0 - rng.unit()).powf(-1.0 / a),
            Keys::Normal => {
                let u = 1.0 - rng.unit();
                let v = rng.unit();
                (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos() * 1000.0
            }
            Keys::SeqNoise if i.is_multiple_of(2) => i as f64,
            Keys::SeqNoise => rng.unit() * i as f64,
        };
        ordered(x)
    }
}

/// An f64's order as a u64 (finite values).
fn ordered(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// A leaf of the B-tree game: its low key, its keys, the buffered keys bound for it.
struct Leaf {
    low: u64,
    keys: Vec<u64>,
    pending: Vec<u64>,
}

/// One checkpoint of a B-tree game.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Checkpoint {
    /// Inserts so far.
    pub inserts: u64,
    /// Leaves at the checkpoint.
    pub leaves: u64,
    /// Keys per flush over the last 50,000 inserts (or all inserts, if fewer).
    pub rate: f64,
    /// Share of those flushes the adaptive policy ran golden gate.
    pub golden_share: f64,
}

/// The window of inserts a checkpoint's rate covers (the chapter's).
pub const RATE_WINDOW: u64 = 50_000;

/// Plays the B-tree game: `inserts` keys from `keys` through a buffer of `buffer` keys into
/// leaves that split beyond `leaf` keys; a checkpoint at each of `at`.
pub fn play_btree(
    keys: Keys,
    strategy: Strategy,
    buffer: u64,
    leaf: usize,
    at: &[u64],
    seed: u64,
) -> Vec<Checkpoint> {
    // Each distribution its own draws: a B-tree sees only the keys' ranks, so distributions
    // that are increasing functions of one uniform draw (uniform, Pareto) would otherwise
    // play the very same game.
    let salt = match keys {
        Keys::Uniform => 1,
        Keys::Pareto(a) => 2 + (a * 16.0) as u64,
        Keys::Normal => 100,
        Keys::SeqNoise => 101,
    };
    let mut rng = Rng::new(seed, 0xB7EE_0000 + salt);
    let mut leaves = vec![Leaf {
        low: 0,
        keys: Vec::new(),
        pending: Vec::new(),
    }];
    let mut test = IidTest::new(DEFAULT_IID_WINDOW);
    let mut buffered = 0u64;
    let mut cursor: Option<u64> = None;
    // (insert number, keys flushed, golden gate used) per flush
    let mut flushes: Vec<(u64, u64, bool)> = Vec::new();
    let mut out = Vec::new();
    let end = at.iter().copied().max().unwrap_or(0);
    let mut bins: Vec<(u64, u64)> = Vec::new();
    for i in 0..end {
        let k = keys.draw(i, &mut rng);
        let at_leaf = leaves.partition_point(|l| l.low <= k).saturating_sub(1);
        leaves[at_leaf].pending.push(k);
        test.observe(leaves[at_leaf].low);
        buffered += 1;
        if buffered >= buffer {
            bins.clear();
            bins.extend(
                leaves
                    .iter()
                    .filter(|l| !l.pending.is_empty())
                    .map(|l| (l.low, l.pending.len() as u64)),
            );
            let iid = test.verdict(leaves.len() as u64).iid;
            let view = BufferView {
                bins: &bins,
                cursor: cursor.as_ref(),
                ball: rng.next_u64(),
                iid,
            };
            if let Some(low) = strategy.pick(&view) {
                let j = leaves.partition_point(|l| l.low < low);
                let n = flush_leaf(&mut leaves, j, leaf);
                buffered -= n.0;
                cursor = leaves.get(j + n.1).map(|l| l.low);
                flushes.push((i, n.0, iid));
            }
        }
        if at.contains(&(i + 1)) {
            let from = (i + 1).saturating_sub(RATE_WINDOW);
            let recent: Vec<_> = flushes.iter().filter(|f| f.0 >= from).collect();
            let keys: u64 = recent.iter().map(|f| f.1).sum();
            let golden = recent.iter().filter(|f| f.2).count();
            out.push(Checkpoint {
                inserts: i + 1,
                leaves: leaves.len() as u64,
                rate: keys as f64 / recent.len().max(1) as f64,
                golden_share: golden as f64 / recent.len().max(1) as f64,
            });
        }
    }
    out
}

/// Writes leaf `j`'s buffered keys into it and splits it, as evenly as it goes, into parts of
/// at most `leaf` keys; returns the keys flushed and the leaves it became.
fn flush_leaf(leaves: &mut Vec<Leaf>, j: usize, leaf: usize) -> (u64, usize) {
    let l = &mut leaves[j];
    let flushed = l.pending.len() as u64;
    l.keys.append(&mut l.pending);
    l.keys.sort_unstable();
    let total = l.keys.len();
    let parts = total.div_ceil(leaf).max(1);
    if parts == 1 {
        return (flushed, 1);
    }
    let keys = std::mem::take(&mut l.keys);
    let low = l.low;
    let mut new = Vec::with_capacity(parts);
    for p in 0..parts {
        let (a, b) = (p * total / parts, (p + 1) * total / parts);
        let part = keys[a..b].to_vec();
        new.push(Leaf {
            low: if p == 0 { low } else { part[0] },
            keys: part,
            pending: Vec::new(),
        });
    }
    leaves.splice(j..=j, new);
    (flushed, parts)
}

/// The chapter's and the spec's figures for a static game, where it gives them: FB, GG, RB,
/// least-full (spec §4.2 [SIM]).
fn spec_figures(n: u64, m: u64, hits: Hits) -> &'static str {
    match (n, m, hits) {
        (50, 500, Hits::Uniform) => "FB 20.5, GG 19.6, RB 16.2",
        (20, 1000, Hits::Uniform) => "FB 96.0, GG 95.3, RB 76.3",
        (100, 100, Hits::Uniform) => "FB 2.9, GG 2.3, RB 2.3",
        (400, 20, Hits::Skyscraper) => "FB 1.02, RB 18.2, least-full 19.1",
        _ => "",
    }
}

/// The static games of the table: the spec's three uniform cases and its skyscraper, and
/// a larger uniform one at the B-tree game's buffer.
pub const STATIC_GAMES: [(u64, u64, Hits); 6] = [
    (50, 500, Hits::Uniform),
    (20, 1000, Hits::Uniform),
    (100, 100, Hits::Uniform),
    (1000, 2500, Hits::Uniform),
    (100, 10_000, Hits::Uniform),
    (400, 20, Hits::Skyscraper),
];

/// Runs `woods bench recycle`: prints the tables as markdown; the exit status.
pub fn main(args: &RecycleArgs) -> u8 {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "# woods bench recycle (seed {}, {} steps per static game, {} inserts per B-tree game)\n",
        args.seed, args.steps, args.inserts
    );
    if args.game != Game::Btree {
        static_table(&mut out, args);
    }
    if args.game != Game::Static {
        btree_table(&mut out, args);
    }
    0
}

fn static_table(out: &mut impl Write, args: &RecycleArgs) {
    let _ = writeln!(
        out,
        "## Static game: balls per step\n\n| hits | n | m | fullest-leaf | random-ball | \
         golden-gate | adaptive (GG share) | least-full | GG ÷ RB | 2m/(n+1) | (2m+n−1)/‖p‖½ \
         | RB E[R²]/E[R] (Lemma 32) | spec §4.2 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (n, m, hits) in STATIC_GAMES {
        let r: Vec<GameResult> = Strategy::ALL
            .iter()
            .map(|&s| play(n, m, hits, s, args.steps / 10, args.steps, args.seed))
            .collect();
        let lemma32 = match hits {
            Hits::Uniform => format!(
                "{:.2} (exact {:.2})",
                r[1].second_moment_ratio,
                (2 * m + n - 1) as f64 / (n + 1) as f64
            ),
            Hits::Skyscraper => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {n} | {m} | {:.2} | {:.2} | {:.2} | {:.2} ({:.0}%) | {:.2} | {:.3} | {} | {:.2} | {} | {} |",
            hits.name(),
            r[0].rate,
            r[1].rate,
            r[2].rate,
            r[3].rate,
            r[3].golden_share * 100.0,
            r[4].rate,
            r[2].rate / r[1].rate,
            match hits {
                Hits::Uniform => format!("{:.2}", 2.0 * m as f64 / (n + 1) as f64),
                Hits::Skyscraper => "—".into(),
            },
            (2 * m + n - 1) as f64 / hits.half_norm(n),
            lemma32,
            spec_figures(n, m, hits),
        );
    }
    let _ = writeln!(out);
}

fn btree_table(out: &mut impl Write, args: &RecycleArgs) {
    let mut at = Vec::new();
    let mut c = RATE_WINDOW;
    while c < args.inserts {
        at.push(c);
        c *= 2;
    }
    at.push(args.inserts);
    let _ = writeln!(
        out,
        "## B-tree game: keys per flush over the last {RATE_WINDOW} inserts (buffer {}, \
         leaves split above {})\n\n| keys | inserts | leaves | fullest-leaf | random-ball | \
         golden-gate | adaptive (GG share) | GG ÷ RB | adaptive ÷ best of GG, RB | 2m/(n+1) |\n\
         |---|---|---|---|---|---|---|---|---|---|",
        args.buffer, args.leaf
    );
    for keys in Keys::ALL {
        let runs: Vec<Vec<Checkpoint>> = Strategy::ALL[..4]
            .iter()
            .map(|&s| play_btree(keys, s, args.buffer, args.leaf, &at, args.seed))
            .collect();
        for (i, &inserts) in at.iter().enumerate() {
            let r: Vec<&Checkpoint> = runs.iter().map(|c| &c[i]).collect();
            let n = r[1].leaves;
            let best = r[1].rate.max(r[2].rate);
            let _ = writeln!(
                out,
                "| {} | {inserts} | {n} | {:.2} | {:.2} | {:.2} | {:.2} ({:.0}%) | {:.3} | {:.3} | {:.2} |",
                keys.name(),
                r[0].rate,
                r[1].rate,
                r[2].rate,
                r[3].rate,
                r[3].golden_share * 100.0,
                r[2].rate / r[1].rate,
                r[3].rate / best,
                2.0 * args.buffer as f64 / (n + 1) as f64,
            );
        }
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    const FB: Strategy = Strategy::Policy(FlushPolicy::FullestLeaf);
    const RB: Strategy = Strategy::Policy(FlushPolicy::RandomBall);
    const GG: Strategy = Strategy::Policy(FlushPolicy::GoldenGate);

    #[test]
    fn one_bin_recycles_every_ball_every_step() {
        for s in Strategy::ALL {
            let r = play(1, 37, Hits::Uniform, s, 10, 100, 1);
            assert_eq!(r.rate, 37.0, "{}", s.name());
        }
    }

    #[test]
    fn one_ball_recycles_one_ball_every_step() {
        for s in Strategy::ALL {
            let r = play(10, 1, Hits::Uniform, s, 10, 100, 1);
            assert_eq!(r.rate, 1.0, "{}", s.name());
        }
    }

    #[test]
    fn two_bins_two_balls_match_the_markov_chain() {
        // Two uniform bins, two balls. States: (2,0)/(0,2) "together", (1,1) "apart". Every
        // strategy empties a full bin from "together" (2 balls, then together w.p. ½) and a
        // one-ball bin from "apart" (1 ball, back to apart w.p. ½). So the chain spends half
        // its steps in each state: rate 1.5.
        for s in Strategy::ALL {
            let r = play(2, 2, Hits::Uniform, s, 1000, 200_000, 3);
            assert!((r.rate - 1.5).abs() < 0.02, "{}: {}", s.name(), r.rate);
        }
    }

    #[test]
    fn uniform_rates_meet_the_chapter_bounds_and_order() {
        // Spec §4.2: n = 50, m = 500: FB 20.5, GG 19.6, RB 16.2; bounds 19.6 and 21.0.
        let (n, m) = (50, 500);
        let fb = play(n, m, Hits::Uniform, FB, 2000, 20_000, 5).rate;
        let gg = play(n, m, Hits::Uniform, GG, 2000, 20_000, 5).rate;
        let rb = play(n, m, Hits::Uniform, RB, 2000, 20_000, 5);
        let lower = 2.0 * m as f64 / (n + 1) as f64;
        let upper = (2 * m + n - 1) as f64 / n as f64;
        assert!(fb >= lower * 0.98 && fb <= upper * 1.01, "FB {fb}");
        assert!(gg >= lower * 0.98 && gg <= upper * 1.01, "GG {gg}");
        assert!(
            rb.rate < 1.0 + 1.994 * m as f64 / n as f64,
            "RB {}",
            rb.rate
        );
        assert!(
            fb > gg && gg > rb.rate * 1.1,
            "FB {fb} GG {gg} RB {}",
            rb.rate
        );
        // Lemma 32: E[R²]/E[R] = (2m + n − 1)/(n + 1) for random ball on uniform hits.
        let exact = (2 * m + n - 1) as f64 / (n + 1) as f64;
        assert!(
            (rb.second_moment_ratio - exact).abs() < exact * 0.03,
            "{} vs {exact}",
            rb.second_moment_ratio
        );
    }

    #[test]
    fn fullest_bin_is_pessimal_on_the_skyscraper() {
        // Spec §3.3 and §4.2: n = 400, m = 20: FB 1.02, RB 18.2, least-full 19.1.
        let fb = play(400, 20, Hits::Skyscraper, FB, 1000, 20_000, 7).rate;
        let rb = play(400, 20, Hits::Skyscraper, RB, 1000, 20_000, 7).rate;
        let lf = play(
            400,
            20,
            Hits::Skyscraper,
            Strategy::LeastFull,
            1000,
            20_000,
            7,
        )
        .rate;
        assert!(fb < 2.0, "FB {fb}");
        assert!(rb > 15.0 && lf > 15.0, "RB {rb} LF {lf}");
    }

    #[test]
    fn a_flush_splits_an_overfull_leaf_evenly() {
        let mut leaves = vec![Leaf {
            low: 0,
            keys: (0..100).map(|k| k * 2).collect(),
            pending: (0..250).map(|k| k * 2 + 1).collect(),
        }];
        let (flushed, parts) = flush_leaf(&mut leaves, 0, 160);
        assert_eq!((flushed, parts), (250, 3));
        let sizes: Vec<usize> = leaves.iter().map(|l| l.keys.len()).collect();
        assert_eq!(sizes, [116, 117, 117]);
        assert_eq!(leaves[0].low, 0);
        for w in leaves.windows(2) {
            assert_eq!(w[1].low, w[1].keys[0]);
            assert!(w[0].keys.last() < w[1].keys.first());
        }
    }

    #[test]
    fn btree_game_orders_the_strategies_on_uniform_keys() {
        // The chapter's Fig. 5.4: FB > GG > RB while the leaves are few.
        let at = [60_000];
        let rate = |s| play_btree(Keys::Uniform, s, 2500, 160, &at, 11)[0].rate;
        let (fb, gg, rb) = (rate(FB), rate(GG), rate(RB));
        assert!(fb > gg && gg > rb * 1.1, "FB {fb} GG {gg} RB {rb}");
    }
}
