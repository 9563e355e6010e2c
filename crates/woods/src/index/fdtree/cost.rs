//! The FD-tree cost model (specs/fdtree.md §5.4, paper App. C.3): choosing k.
//!
//! The paper gives no closed form for the best k. It enumerates candidates, estimates the
//! time of the workload for each — searches by Eq. 10, inserts by simulating merges with
//! Algorithm 5, mixed by Eq. 11 — and takes the cheapest with `k < f − 1`. This module does
//! the same, with Algorithm 5's line 9 as the spec corrects it (the non-fence entries of `L_i`
//! move down) and correction 8 (the fence levels above a cascade's last level are rewritten
//! and counted). It is pure arithmetic: tested without I/O.

use crate::run::format::HEADER_LEN;
use crate::storage::PAGE_BODY;

/// Bytes of the entry the cost model plans for: an 8-byte key and an 8-byte value, standing
/// for the paper's 4-byte key and 30-bit record id.
pub const ENTRY_BYTES: u64 = 16;

/// Bytes a 16-byte entry takes in a data page: kind 1, seq varint (at most 8 for seqs below
/// 2^56, 4 typically), two length bytes, the key and value, and its 2-byte slot.
const ENTRY_IN_PAGE: u64 = ENTRY_BYTES + 10;

/// Memtable bytes one entry takes (key + value + 64: the memtable's accounting).
pub const MEMTABLE_ENTRY_BYTES: u64 = ENTRY_BYTES + 64;

/// f, entries of [`ENTRY_BYTES`] a data page holds.
pub fn fanout() -> u64 {
    ((PAGE_BODY - HEADER_LEN) as u64 / ENTRY_IN_PAGE).max(4)
}

/// The device the model plans for, as times per unit (microseconds): a random page read, and
/// one entry read or written sequentially. Defaults: an SSD reading a random 4 KiB page in
/// 100 µs and streaming 500 MB/s both ways (26-byte entries: about 0.05 µs each).
#[derive(Clone, Copy, Debug)]
pub struct Device {
    pub random_page_us: f64,
    pub seq_read_entry_us: f64,
    pub seq_write_entry_us: f64,
}

impl Default for Device {
    fn default() -> Self {
        let entry = ENTRY_IN_PAGE as f64 / 500.0; // µs at 500 bytes/µs
        Device {
            random_page_us: 100.0,
            seq_read_entry_us: entry,
            seq_write_entry_us: entry,
        }
    }
}

/// What the model estimates for one k.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub k: u64,
    /// Levels with L0 (the paper's l).
    pub levels: u32,
    /// µs per search (Eq. 10, the head tree in memory: one page per run).
    pub search_us: f64,
    /// µs per insert (Algorithm 5: entries read and written by merges, per insert).
    pub insert_us: f64,
    /// The mix (Eq. 11).
    pub total_us: f64,
}

/// Runs below the head tree for `n` entries: `⌈log_k(n/|L0|)⌉`, at least 1.
pub fn runs_for(n: u64, l0: u64, k: u64) -> u32 {
    let mut cap = l0.max(1) as u128;
    let mut runs = 0u32;
    while cap < u128::from(n) || runs == 0 {
        cap = cap.saturating_mul(u128::from(k.max(2)));
        runs += 1;
        if runs >= 64 {
            break;
        }
    }
    runs
}

/// Algorithm 5 (corrected): merge entries read and written per insert while a tree of
/// `runs` runs below the head tree fills from empty, with capacity `l0·k^i` for `L_i`
/// (fences counted). `None` when the tree cannot work (`k ≥ f − 1`).
pub fn insert_io(l0: u64, k: u64, f: u64, runs: u32) -> Option<(f64, f64)> {
    if k < 2 || k + 1 >= f || l0 == 0 {
        return None;
    }
    let l = runs as usize + 1;
    let cap: Vec<f64> = (0..l)
        .map(|i| l0 as f64 * (k as f64).powi(i as i32))
        .collect();
    let mut card = vec![0f64; l];
    let (mut inserts, mut read, mut write) = (0f64, 0f64, 0f64);
    let f = f as f64;
    // Bounded: each round inserts at least |L0| − |L1|/f > 0 entries (k < f − 1).
    for _ in 0..10_000_000u64 {
        inserts += cap[0] - card[0];
        card[0] = cap[0];
        let mut i = 0;
        while i < l - 1 && card[i] >= cap[i] {
            read += card[i] + card[i + 1];
            // Line 9 as corrected: L_i's entries without its fences into the old L_{i+1}.
            card[i + 1] += card[i] - (card[i + 1] / f).ceil();
            card[i] = (card[i + 1] / f).ceil();
            write += card[i] + card[i + 1];
            i += 1;
        }
        // Correction 8: the fence levels above the last merged level are rebuilt.
        for j in (0..i.saturating_sub(1)).rev() {
            card[j] = (card[j + 1] / f).ceil();
            write += card[j];
        }
        if i == l - 1 {
            return Some((read / inserts, write / inserts));
        }
    }
    None
}

/// The estimate for one k.
pub fn estimate(
    n: u64,
    l0: u64,
    f: u64,
    k: u64,
    search_share: f64,
    dev: &Device,
) -> Option<Estimate> {
    let runs = runs_for(n, l0, k);
    let (r, w) = insert_io(l0, k, f, runs)?;
    let search_us = f64::from(runs) * dev.random_page_us;
    let insert_us = r * dev.seq_read_entry_us + w * dev.seq_write_entry_us;
    let ps = search_share.clamp(0.0, 1.0);
    Some(Estimate {
        k,
        levels: runs + 1,
        search_us,
        insert_us,
        total_us: ps * search_us + (1.0 - ps) * insert_us,
    })
}

/// The k the cost model chooses for `n` entries, head tree `l0`, f entries a page and a
/// share of searches: for each number of levels, the smallest k that reaches `n` (Theorem 1:
/// equal ratios), each estimated, the cheapest taken. Always `2 ≤ k < f − 1`.
pub fn choose_k(n: u64, l0: u64, f: u64, search_share: f64, dev: &Device) -> Estimate {
    let ratio = (n.max(1) as f64 / l0.max(1) as f64).max(1.0);
    let mut best: Option<Estimate> = None;
    for runs in 1..=16u32 {
        let k = (ratio.powf(1.0 / f64::from(runs)).ceil() as u64).max(2);
        if let Some(e) = estimate(n, l0, f, k, search_share, dev) {
            if best.is_none_or(|b| e.total_us < b.total_us) {
                best = Some(e);
            }
        }
    }
    best.unwrap_or(Estimate {
        k: 2,
        levels: runs_for(n, l0, 2) + 1,
        search_us: 0.0,
        insert_us: 0.0,
        total_us: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_k_is_below_f_minus_one() {
        let f = fanout();
        for (n, l0) in [
            (1u64 << 30, 65_536u64),
            (100_000_000, 209_715),
            (1 << 20, 819),
            (10, 10),
        ] {
            for s in [0.0, 0.5, 0.9, 1.0] {
                let e = choose_k(n, l0, f, s, &Device::default());
                assert!(
                    e.k >= 2 && e.k + 1 < f,
                    "n {n} l0 {l0} share {s}: k {}",
                    e.k
                );
            }
        }
    }

    #[test]
    fn more_searches_choose_fewer_levels() {
        // Spec §8 test 16: the chosen k moves toward fewer levels as the search share grows.
        let (n, l0, f) = (1u64 << 30, 65_536, fanout());
        let dev = Device::default();
        let mut last = u32::MAX;
        for s in [0.0, 0.25, 0.5, 0.75, 0.99] {
            let e = choose_k(n, l0, f, s, &dev);
            assert!(
                e.levels <= last,
                "share {s}: {} levels after {last}",
                e.levels
            );
            last = e.levels;
        }
        assert!(choose_k(n, l0, f, 0.0, &dev).levels > choose_k(n, l0, f, 0.99, &dev).levels);
    }

    #[test]
    fn insert_cost_grows_sharply_as_k_nears_f() {
        // The paper's Fig. 5(b): insertion slows slightly at small k, sharply near f.
        let f = 256;
        let cost = |k| {
            let (r, w) = insert_io(1000, k, f, 3).expect("valid k");
            r + w
        };
        assert!(cost(250) > 4.0 * cost(50), "{} vs {}", cost(250), cost(50));
        assert!(insert_io(1000, 255, f, 3).is_none(), "k = f - 1 is refused");
    }

    #[test]
    fn runs_cover_the_data() {
        assert_eq!(runs_for(1000, 1000, 10), 1);
        assert_eq!(runs_for(10_001, 1000, 10), 2);
        assert_eq!(runs_for(100_000, 1000, 10), 2);
        assert_eq!(runs_for(100_001, 1000, 10), 3);
    }
}
