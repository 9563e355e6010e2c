//! The decisions of the `lsa` and `iam` kinds as pure functions over ranges and sizes
//! (specs/lsa-iam-tree.md §3), testable without I/O: the next step of work, the action for one
//! child of a flush, the cut keys between children, the combine candidate, and m and k.

/// The class of a level (§2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Append,
    Mixed,
    Merge,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Append => "append",
            Class::Mixed => "mixed",
            Class::Merge => "merge",
        }
    }
}

/// The class of 1-based level `level` with mixed level `m` (`m` past the last level: none).
pub fn class_of(level: usize, m: u32) -> Class {
    let m = m as usize;
    match level.cmp(&m) {
        std::cmp::Ordering::Less => Class::Append,
        std::cmp::Ordering::Equal => Class::Mixed,
        std::cmp::Ordering::Greater => Class::Merge,
    }
}

/// What a flush does with one child's partition (§3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Append the partition as a new sequence.
    Append,
    /// Merge the child's sequences with the partition into one sequence.
    Merge,
    /// Merge, then cut the output into new leaf nodes of the leaf target size.
    MergeSplit,
}

/// The action for a child with `seqs` sequences at 1-based level `level`, of class given by
/// `m` and `k`; `leaf_full` when the child is a full leaf (§3.3 last row, P13).
pub fn action(level: usize, m: u32, k: u32, seqs: usize, leaf_full: bool) -> Action {
    if leaf_full {
        return Action::MergeSplit;
    }
    if seqs == 0 {
        return Action::Append;
    }
    match class_of(level, m) {
        Class::Append => Action::Append,
        // Correction 2: append while the child has fewer than k sequences.
        Class::Mixed if seqs < k.max(1) as usize => Action::Append,
        Class::Mixed | Class::Merge => Action::Merge,
    }
}

/// The bound on sequences a child keeps after receiving under `action` (0: none).
pub fn bound_after(level: usize, m: u32, k: u32, action: Action) -> u32 {
    match (action, class_of(level, m)) {
        (Action::Merge | Action::MergeSplit, _) => 1,
        (Action::Append, Class::Append) => 0,
        (Action::Append, Class::Mixed) => k.max(1),
        (Action::Append, Class::Merge) => 1,
    }
}

/// §3.8's closed form: the largest 1-based `m` in `1..=n+1` with `Σ_{j<m} D_j ≤ budget`, and
/// for `m ≤ n`, `k = 1 + ⌊t·(budget − Σ_{j<m} D_j) / D_m⌋`, within `1..=t`. `level_bytes[j]`
/// is `D_{j+1}`.
pub fn choose_mk(level_bytes: &[u64], budget: u64, t: u32) -> (u32, u32) {
    let mut sum = 0u64;
    for (j, &d) in level_bytes.iter().enumerate() {
        if sum.saturating_add(d) > budget {
            let spare = u128::from(budget - sum);
            let k = 1 + (u128::from(t) * spare / u128::from(d.max(1))) as u64;
            return ((j + 1) as u32, k.clamp(1, u64::from(t.max(1))) as u32);
        }
        sum += d;
    }
    ((level_bytes.len() + 1) as u32, t.max(1))
}

/// A key between `a` and `b` (`a < b`): the bytes past their common prefix read as big-endian
/// fractions and averaged (spec P4, the code's `MiddleString`). The result `c` has
/// `a < c <= b`.
pub fn middle_key(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a >= b {
        return b.to_vec();
    }
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let frac = |s: &[u8]| -> u128 {
        let mut v = 0u128;
        for i in 0..8 {
            v = (v << 8) | u128::from(s.get(common + i).copied().unwrap_or(0));
        }
        v
    };
    let mid = (frac(a) + frac(b)).div_ceil(2);
    let mut out = b[..common].to_vec();
    out.extend_from_slice(&(mid as u64).to_be_bytes());
    while out.len() > common + 1 && out.last() == Some(&0) {
        out.pop();
    }
    if out.as_slice() > a && out.as_slice() <= b {
        out
    } else {
        b.to_vec()
    }
}

/// The cut between adjacent children `a` and `b` of a flush: keys below it go to `a`, the
/// rest to `b`. For leaf children the middle key of the gap (P4); for internal children the
/// boundary among the uncovered grandchildren in the gap (`gap_lows`, their low keys in
/// order) that brings the two children's child counts (`ca`, `cb`) closest (P5).
pub fn cut_between(a_hi: &[u8], b_lo: &[u8], ca: usize, cb: usize, gap_lows: &[&[u8]]) -> Vec<u8> {
    if gap_lows.is_empty() {
        return middle_key(a_hi, b_lo);
    }
    let u = gap_lows.len();
    let best = (0..=u)
        .min_by_key(|&j| (ca + j).abs_diff(cb + u - j))
        .unwrap_or(u);
    match gap_lows.get(best) {
        Some(k) => k.to_vec(),
        None => b_lo.to_vec(),
    }
}

/// The combine candidate of a level with too many nodes (§3.7, P8): `t_cn[i]` is the number
/// of children covered by node `i` with its neighbours, `own[i]` its own children, `bytes[i]`
/// its data. Candidates have two neighbours and `T_cn ≤ 3t`; the smallest `T_cn` wins, then
/// the least data. Without one, the smallest `T_cn` of all nodes (ends counting one
/// neighbour). Nodes with `2t` or more own children are skipped.
pub fn combine_candidate(t_cn: &[usize], own: &[usize], bytes: &[u64], t: u32) -> Option<usize> {
    let t = t as usize;
    let n = t_cn.len();
    let pick = |inner: bool, cap: usize| {
        (0..n)
            .filter(|&i| own[i] < 2 * t && t_cn[i] <= cap)
            .filter(|&i| !inner || (i > 0 && i + 1 < n))
            .min_by_key(|&i| (t_cn[i], bytes[i]))
    };
    pick(true, 3 * t).or_else(|| pick(false, usize::MAX))
}

/// Eq. (5): write amplification of splits, `2·Σ_{j=1}^{n−1} (2/t)^j`.
pub fn split_wa(t: f64, n: u32) -> f64 {
    (1..n).map(|j| 2.0 * (2.0 / t).powi(j as i32)).sum()
}

/// Eq. (1): `S_{m,k} = D_m·(k−1)/t`.
pub fn appended_bytes(d_m: f64, k: u32, t: f64) -> f64 {
    d_m * f64::from(k.saturating_sub(1)) / t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_actions_follow_the_mixed_level_rule() {
        // m = 3: L1, L2 append, L3 mixed, L4 merge.
        assert_eq!(class_of(2, 3), Class::Append);
        assert_eq!(class_of(3, 3), Class::Mixed);
        assert_eq!(class_of(4, 3), Class::Merge);
        assert_eq!(action(2, 3, 2, 5, false), Action::Append);
        assert_eq!(action(3, 3, 2, 1, false), Action::Append);
        assert_eq!(action(3, 3, 2, 2, false), Action::Merge);
        assert_eq!(action(4, 3, 2, 1, false), Action::Merge);
        assert_eq!(action(4, 3, 2, 0, false), Action::Append);
        assert_eq!(action(2, 3, 2, 5, true), Action::MergeSplit);
        // LSA: m past every level.
        assert_eq!(action(7, u32::MAX, 1, 9, false), Action::Append);
        assert_eq!(bound_after(3, 3, 2, Action::Append), 2);
        assert_eq!(bound_after(2, 3, 2, Action::Append), 0);
        assert_eq!(bound_after(4, 3, 2, Action::Merge), 1);
    }

    #[test]
    fn m_and_k_are_maximal_under_eq_2() {
        // The spec's worked example: 100 GB with B = 16 GB gives m = 3, k = 2.
        let gb = 1u64 << 30;
        let d = [64 * gb / 100, 64 * gb / 10, 64 * gb];
        assert_eq!(choose_mk(&d, 16 * gb, 10), (3, 2));
        // 1 TB with 64 GB: k = 9 with B = 64 GB, 4 with B = 32 GB (D_3 = 64 GB, D_4 = 640 GB
        // in the example's proportions do not change m = 3).
        let d = [64 * gb / 100, 64 * gb / 10, 64 * gb, 640 * gb];
        assert_eq!(choose_mk(&d, 64 * gb, 10).0, 3);
        // Everything fits: no mixed level.
        assert_eq!(choose_mk(&[10, 20], 100, 10), (3, 10));
        // Nothing fits: m = 1 and k within 1..=t.
        let (m, k) = choose_mk(&[1000, 10], 10, 10);
        assert_eq!((m, k), (1, 1));
        for budget in [0u64, 5, 50, 500, 5000] {
            let d = [100u64, 1000, 10000];
            let (m, k) = choose_mk(&d, budget, 10);
            assert!((1..=10).contains(&k));
            let before: u64 = d[..m as usize - 1].iter().sum();
            assert!(before <= budget);
            if (m as usize) <= d.len() {
                let s = appended_bytes(d[m as usize - 1] as f64, k, 10.0);
                assert!(before as f64 + s <= budget as f64 + 1e-9, "eq. 2 holds");
                let s_more = appended_bytes(d[m as usize - 1] as f64, k + 1, 10.0);
                assert!(
                    k == 10 || before as f64 + s_more > budget as f64,
                    "k is maximal"
                );
            }
        }
    }

    #[test]
    fn formulas_match_the_spec() {
        assert!((split_wa(10.0, 5) - 0.4992).abs() < 1e-9);
        assert!((split_wa(10.0, 2) - 0.4).abs() < 1e-9);
        assert!((appended_bytes(100.0, 3, 10.0) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn middle_key_lies_between() {
        for (a, b) in [
            (&b"a"[..], &b"c"[..]),
            (b"abc", b"abd"),
            (b"a", b"a\x00"),
            (b"user1", b"user2"),
            (b"", b"\x01"),
            (b"\xff", b"\xff\xff"),
        ] {
            let m = middle_key(a, b);
            assert!(
                m.as_slice() > a && m.as_slice() <= b,
                "{a:?} {b:?} -> {m:?}"
            );
        }
        assert_eq!(middle_key(b"a", b"c"), b"b");
    }

    #[test]
    fn internal_cuts_balance_child_counts() {
        // a has 5 children, b 10, and 6 uncovered grandchildren lie in the gap: cutting after
        // 5 of them gives 10 and 11, after 6 gives 11 and 10; the first minimum wins.
        let lows: Vec<Vec<u8>> = (0..6).map(|i| vec![b'm', b'0' + i]).collect();
        let refs: Vec<&[u8]> = lows.iter().map(|v| v.as_slice()).collect();
        let cut = cut_between(b"k", b"p", 5, 10, &refs);
        assert_eq!(cut, lows[5]);
        // No uncovered grandchildren: the middle of the gap.
        assert_eq!(cut_between(b"a", b"c", 1, 1, &[]), b"b");
    }

    #[test]
    fn combine_picks_the_smallest_cover_with_two_neighbours() {
        let t = 3;
        assert_eq!(
            combine_candidate(&[2, 8, 4, 5, 1], &[1, 2, 1, 2, 0], &[5, 5, 5, 5, 5], t),
            Some(2)
        );
        // Ties go to the least data.
        assert_eq!(
            combine_candidate(&[2, 4, 4, 5, 1], &[1, 2, 1, 2, 0], &[5, 9, 3, 5, 5], t),
            Some(2)
        );
        // Every inner candidate too large: the smallest overall (an end).
        assert_eq!(
            combine_candidate(&[2, 20, 20, 1], &[0, 2, 2, 0], &[1, 1, 1, 1], t),
            Some(3)
        );
        // A node with 2t children is never chosen.
        assert_eq!(
            combine_candidate(&[1, 1, 1], &[6, 6, 6], &[1, 1, 1], t),
            None
        );
    }
}
