//! Partitioned keys (spec §2.2 with correction 1): `pnum u32 big-endian ‖ user key`.
//!
//! The prefix has a fixed width and nothing follows the user key inside a tree key (the
//! sequence number is a separate field of the leaf entry, ordered descending by the node code),
//! so memcmp order of tree keys is (pnum, user key) order without escaping the user key: its end
//! is the end of the key, whose length the node format stores. Big-endian makes byte order equal
//! pnum order, so each partition is one contiguous key range of the tree.

use std::sync::Arc;

/// Bytes of the partition prefix.
pub const PREFIX: usize = 4;

/// The tree key of `key` in partition `pnum`.
pub fn tree_key(pnum: u32, key: &[u8]) -> Arc<[u8]> {
    let mut k = Vec::with_capacity(PREFIX + key.len());
    k.extend_from_slice(&pnum.to_be_bytes());
    k.extend_from_slice(key);
    Arc::from(k)
}

/// The first tree key of partition `pnum` (every key of it is at or after this).
pub fn start_of(pnum: u32) -> Vec<u8> {
    pnum.to_be_bytes().to_vec()
}

/// The partition number of a tree key; `None` for a key shorter than the prefix.
pub fn pnum_of(tree_key: &[u8]) -> Option<u32> {
    let b: [u8; PREFIX] = tree_key.get(..PREFIX)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

/// Whether `tree_key` lies in partition `pnum`.
pub fn in_partition(tree_key: &[u8], pnum: u32) -> bool {
    pnum_of(tree_key) == Some(pnum)
}

/// The user key of a tree key (the prefix stripped: higher layers never see partition numbers).
pub fn user_key(tree_key: &[u8]) -> Arc<[u8]> {
    Arc::from(tree_key.get(PREFIX..).unwrap_or(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Spec §6 item 5: memcmp of encoded keys matches (pnum, key) order, prefix and embedded
    /// zero keys included; the user key comes back unchanged.
    #[test]
    fn encoding_keeps_partition_then_key_order() {
        let seed = crate::testutil::seed();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut keys: Vec<(u32, Vec<u8>)> = Vec::new();
        for _ in 0..2000 {
            let p = rng.gen_range(0..4u32) * 0x0100_0001;
            let len = rng.gen_range(1..6);
            let k: Vec<u8> = (0..len)
                .map(|_| *[0u8, 1, 0xff, b'a'].get(rng.gen_range(0..4)).unwrap_or(&0))
                .collect();
            keys.push((p, k));
        }
        for a in &keys {
            let ea = tree_key(a.0, &a.1);
            assert_eq!(pnum_of(&ea), Some(a.0));
            assert_eq!(&user_key(&ea)[..], &a.1[..]);
        }
        for w in keys.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert_eq!(
                tree_key(a.0, &a.1).cmp(&tree_key(b.0, &b.1)),
                (a.0, &a.1).cmp(&(b.0, &b.1)),
                "{a:?} vs {b:?}"
            );
        }
    }
}
