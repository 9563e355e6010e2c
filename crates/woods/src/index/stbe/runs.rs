//! Sequential runs of a frozen memtable (issue 25 item 3): the key ranges whose entries were
//! written in key order, found from their sequence numbers, so that the memtable is built as
//! several key-disjoint branches. A run's branch then overlaps no other branch of the batches
//! it travels in and moves down the trunk by reference (a pointer-only flush, [`super::edit`]),
//! while the keys written in random order are compacted level by level as before.
//!
//! Without this, a few random inserts spread every memtable's single branch over the whole
//! key space; each flush then carried the sequential part into a batch compaction at every
//! level, and write amplification stayed that of a random load (docs/results/stbe.md).

use super::branch::Key;

/// How runs are found and which are cut out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunRules {
    /// Largest step in sequence number between neighbouring keys of one run: an ascending
    /// (or descending) stream interleaved with a few other writes still steps by a little;
    /// a key written at a random time falls next to the run with a step of about the
    /// memtable's length, and ends it.
    pub max_step: u64,
    /// Least size (memtable units) of a run worth a branch of its own.
    pub min_units: u64,
    /// Most runs cut out of one memtable (the largest), so that one memtable adds at most
    /// `2 * max_runs + 1` references to the root.
    pub max_runs: usize,
}

impl RunRules {
    /// The rules for memtables of `memtable_units`: runs of at least a sixteenth of one, at
    /// most two a memtable.
    pub fn for_memtable(memtable_units: u64) -> RunRules {
        RunRules {
            max_step: 16,
            min_units: (memtable_units / 16).max(1),
            max_runs: 2,
        }
    }
}

/// A run found: its first key, the key after its last (`None`: it ends the memtable), and
/// its size.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Found<'a> {
    lo: &'a [u8],
    hi: Option<&'a [u8]>,
    units: u64,
}

/// The keys at which a memtable's build cuts its output, in ascending order: piece `i` holds
/// the keys in `[cuts[i-1], cuts[i])` (the first piece everything below `cuts[0]`, the last
/// everything from the last cut). `entries` is the memtable in entry order (key ascending,
/// newest version first) as `(key, seq, units)`. Empty: one branch, as without runs.
pub fn cuts<'a>(entries: impl Iterator<Item = (&'a [u8], u64, u64)>, r: &RunRules) -> Vec<Key> {
    let mut found: Vec<Found<'a>> = Vec::new();
    let mut first: Option<&'a [u8]> = None;
    // The current run (its first key and units), the previous key (its newest seq and its
    // units, versions included) and the run's direction (0: not known yet).
    let mut cur: Option<(&'a [u8], u64)> = None;
    let mut prev: Option<(&'a [u8], u64, u64)> = None;
    let mut dir = 0i8;
    // The current run's steps: their sum, their number, the last one.
    let mut steps = (0u64, 0u64, 0u64);
    let close = |found: &mut Vec<Found<'a>>, run: Option<(&'a [u8], u64)>, hi| {
        if let Some((lo, units)) = run {
            if units >= r.min_units {
                found.push(Found { lo, hi, units });
            }
        }
    };
    // A run that ends where a key written at another time joined it by chance (a step near
    // enough, in its direction) ends before that key: its step stands out from the run's.
    let end = |found: &mut Vec<Found<'a>>,
               run: Option<(&'a [u8], u64)>,
               (sum, n, last): (u64, u64, u64),
               prev: Option<(&'a [u8], u64, u64)>,
               hi: Option<&'a [u8]>| {
        let stray = n >= 3 && last > 2 && last * (n - 1) > 2 * (sum - last);
        match (run, prev) {
            (Some((lo, u)), Some((pk, _, pu))) if stray => {
                close(found, Some((lo, u - pu)), Some(pk))
            }
            _ => close(found, run, hi),
        }
    };
    for (key, seq, units) in entries {
        first.get_or_insert(key);
        if let Some((pk, ps, pu)) = &mut prev {
            if *pk == key {
                // An older version of the same key: part of whatever holds the key.
                *pu += units;
                if let Some(c) = &mut cur {
                    c.1 += units;
                }
                continue;
            }
            let step = i128::from(seq) - i128::from(*ps);
            let d = step.signum() as i8;
            let near = step != 0 && step.unsigned_abs() <= u128::from(r.max_step);
            if near && (dir == 0 || dir == d) {
                dir = d;
                let a = step.unsigned_abs() as u64;
                steps = (steps.0 + a, steps.1 + 1, a);
            } else if near && steps.1 <= 1 {
                // The direction turned after one step: the key before that step was written
                // at another time, and a new run may begin with the previous key. (After a
                // longer run, the previous key is the run's last, and a key written just
                // before it ends the run below: given to the next piece, it would stretch
                // that piece over the keys the run goes on to write in later memtables.)
                let (pk, pu) = (*pk, *pu);
                let run = cur.take().map(|(lo, u)| (lo, u - pu));
                close(&mut found, run, Some(pk));
                cur = Some((pk, pu));
                dir = d;
                let a = step.unsigned_abs() as u64;
                steps = (a, 1, a);
            } else {
                end(&mut found, cur.take(), steps, prev, Some(key));
                dir = 0;
                steps = (0, 0, 0);
            }
        }
        match &mut cur {
            Some(c) => c.1 += units,
            None => cur = Some((key, units)),
        }
        prev = Some((key, seq, units));
    }

    end(&mut found, cur, steps, prev, None);
    if found.len() > r.max_runs {
        found.sort_by_key(|f| std::cmp::Reverse(f.units));
        found.truncate(r.max_runs);
        found.sort_by(|a, b| a.lo.cmp(b.lo));
    }
    let mut out: Vec<Key> = Vec::with_capacity(2 * found.len());
    for f in &found {
        if Some(f.lo) != first && out.last().is_none_or(|k| k.as_ref() < f.lo) {
            out.push(Key::from(f.lo));
        }
        if let Some(hi) = f.hi {
            out.push(Key::from(hi));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> RunRules {
        RunRules {
            max_step: 4,
            min_units: 10,
            max_runs: 2,
        }
    }

    /// Entries of one unit each, given as (key, seq), sorted into entry order.
    fn plan(mut e: Vec<(String, u64)>, r: &RunRules) -> Vec<String> {
        e.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        cuts(e.iter().map(|(k, s)| (k.as_bytes(), *s, 1)), r)
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn an_interleaved_ascending_run_is_cut_out_of_random_keys() {
        // 30 keys "a00".."a29" written in order, one random "z.." key after every third.
        let mut e = Vec::new();
        let mut seq = 0;
        for i in 0..30 {
            seq += 1;
            e.push((format!("a{i:02}"), seq));
            if i % 3 == 2 {
                seq += 1;
                e.push((format!("z{:02}", (i * 37) % 97), seq));
            }
        }
        let after = e
            .iter()
            .filter(|x| x.0.as_str() > "z")
            .map(|x| x.0.clone())
            .min();
        // Keys below the run too, written at random times (the second just before the run
        // began: it steps down to the run's first key, then the run turns up).
        e.push(("0x".into(), 500));
        e.push(("0y".into(), 3));
        assert_eq!(plan(e, &rules()), vec!["a00".to_string(), after.unwrap()]);
    }

    #[test]
    fn a_key_that_joins_a_run_by_chance_at_its_end_is_left_out() {
        // k00..k29 step by 1; "z1" was written at another time, 4 after the run's last key
        // (near enough, in the run's direction); "z2" far from both.
        let mut e: Vec<(String, u64)> = (0..30).map(|i| (format!("k{i:02}"), i + 1)).collect();
        e.push(("a".into(), 500));
        e.push(("z1".into(), 34));
        e.push(("z2".into(), 900));
        assert_eq!(plan(e, &rules()), vec!["k00", "z1"]);
    }

    #[test]
    fn a_key_written_just_before_a_runs_end_leaves_the_run_its_last_key() {
        // k00..k29 in order, with "z1" written between k26 and k27: after the run's last key
        // (seq 31), z1 (seq 28) steps back by 3, near enough but the other way.
        let mut e = Vec::new();
        let mut seq = 0;
        for i in 0..30 {
            seq += 1;
            if i == 27 {
                e.push(("z1".to_string(), seq));
                seq += 1;
            }
            e.push((format!("k{i:02}"), seq));
        }
        e.push(("z2".into(), 900));
        assert_eq!(plan(e, &rules()), vec!["z1"]);
    }

    #[test]
    fn a_descending_run_counts_and_a_run_may_end_the_memtable() {
        let mut e: Vec<(String, u64)> = (0..20).map(|i| (format!("k{i:02}"), 100 - i)).collect();
        e.push(("a".into(), 7));
        assert_eq!(plan(e, &rules()), vec!["k00"]);
    }

    #[test]
    fn random_keys_short_runs_and_direction_changes_give_no_cut() {
        // Seqs alternate direction: up, down, up...: no run longer than two keys.
        let e: Vec<(String, u64)> = (0..40)
            .map(|i| (format!("k{i:02}"), if i % 2 == 0 { 50 + i } else { 50 - i }))
            .collect();
        assert!(plan(e, &rules()).is_empty());
        // A run of nine keys: below the least size.
        let e: Vec<(String, u64)> = (0..9).map(|i| (format!("k{i}"), i + 1)).collect();
        assert!(plan(e, &rules()).is_empty());
        // Steps of 5 between neighbours: too far apart.
        let e: Vec<(String, u64)> = (0..30).map(|i| (format!("k{i:02}"), 5 * i + 1)).collect();
        assert!(plan(e, &rules()).is_empty());
    }

    #[test]
    fn versions_of_a_key_stay_in_its_run_and_only_the_largest_runs_are_cut() {
        let mut e = Vec::new();
        // Run "b": 12 keys, each written twice (the second write much later).
        for i in 0..12u64 {
            e.push((format!("b{i:02}"), i + 1));
            e.push((format!("b{i:02}"), 1000 + 50 * i));
        }
        assert_eq!(
            plan(e.clone(), &rules()),
            Vec::<String>::new(),
            "newest seqs step by 50"
        );
        let mut e: Vec<(String, u64)> = Vec::new();
        // Three runs of 10, 15 and 20 keys, far apart in time, separated by a random key.
        for (p, n, t) in [("c", 10u64, 100u64), ("e", 15, 300), ("g", 20, 600)] {
            for i in 0..n {
                e.push((format!("{p}{i:02}"), t + i));
            }
        }
        e.push(("d".into(), 5000));
        e.push(("f".into(), 9000));
        assert_eq!(plan(e, &rules()), vec!["e00", "f", "g00"]);
    }
}
