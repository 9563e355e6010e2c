//! When to switch partitions and which partitions to merge, as pure functions of sizes, so
//! that the decisions are tested without I/O.

/// Whether the ACTIVE partition must switch after a memtable was absorbed (correction 2: while
/// a memtable's worth of leaf room is still free in the PBT-Buffer): `used` pages of the buffer
/// are taken (ACTIVE and CLOSING), `room` pages is a memtable's worth, `capacity` the buffer's.
pub fn must_switch(used: u64, room: u64, capacity: u64) -> bool {
    used > 0 && used + room > capacity
}

/// Partition merge (spec §3.9, not built in the paper): given the persisted partitions' sizes
/// newest first, how many of the newest to merge into one (`None`: none). The newest run grows
/// while it is at least half the size of the next older partition (tiering: each key is
/// rewritten a logarithmic number of times); and when there are more than `max` partitions, all
/// of them are merged, which bounds the partitions a lookup may probe. `max` 0: merge is off.
pub fn choose_merge(sizes: &[u64], max: usize) -> Option<usize> {
    if max == 0 || sizes.len() < 2 {
        return None;
    }
    let mut n = 1;
    let mut acc = sizes[0];
    while n < sizes.len() && acc.saturating_mul(2) >= sizes[n] {
        acc += sizes[n];
        n += 1;
    }
    if n >= 2 {
        Some(n)
    } else if sizes.len() > max {
        Some(sizes.len())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_leaves_a_memtable_of_room() {
        assert!(!must_switch(0, 20, 10), "an empty buffer never switches");
        assert!(!must_switch(50, 20, 100));
        assert!(!must_switch(80, 20, 100));
        assert!(must_switch(81, 20, 100));
    }

    #[test]
    fn merge_choice() {
        assert_eq!(choose_merge(&[10, 10], 0), None, "merge off");
        assert_eq!(choose_merge(&[10], 4), None);
        assert_eq!(choose_merge(&[10, 10], 4), Some(2));
        assert_eq!(choose_merge(&[10, 100], 4), None, "too small to merge yet");
        assert_eq!(choose_merge(&[10, 15, 30, 200], 4), Some(3));
        assert_eq!(choose_merge(&[1, 100, 1000, 10000, 100000], 4), Some(5));
        assert_eq!(choose_merge(&[1, 100, 1000, 10000], 4), None);
    }
}
