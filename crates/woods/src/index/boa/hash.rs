//! Key fingerprints (spec §1.11 item 1): a seeded 128-bit hash of the user key. Routing-filter
//! prefixes come from the front of the high half, check characters from the low half, so the
//! two never overlap; the high half, big-endian, is put in front of the key in a run so that a
//! run sorted by key bytes is sorted by fingerprint. The full key is stored and compared on
//! every hit, so fingerprint collisions cost a probe, never a wrong answer.

use crate::filter::hash64_seeded;

/// Bytes of the fingerprint in front of each key in a run.
pub const PREFIX_LEN: usize = 8;

/// Seeds the two halves of a fingerprint apart (the golden ratio's bits).
const SECOND: u64 = 0x9E37_79B9_7F4A_7C15;

/// A key's 128-bit fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The high half: the run order and the routing-filter prefixes.
    pub hi: u64,
    /// The low half: the check characters.
    pub lo: u64,
}

impl Fingerprint {
    /// The fingerprint of `key` under the database's `seed`.
    pub fn of(seed: u64, key: &[u8]) -> Fingerprint {
        Fingerprint {
            hi: hash64_seeded(seed, key),
            lo: hash64_seeded(seed ^ SECOND, key),
        }
    }

    /// P(K): the first `bits` bits (0..=64) of the fingerprint.
    pub fn prefix(&self, bits: u32) -> u64 {
        prefix_of(self.hi, bits)
    }

    /// C_level(K): the check character of `level` (0-based), `bits` wide, counted from the end
    /// of the fingerprint (each level its own character, spec §1.5).
    pub fn check(&self, level: usize, bits: u32) -> u16 {
        let shift = (level as u64 * u64::from(bits)) % 64;
        let mask = (1u64 << bits.min(16)) - 1;
        (self.lo.rotate_right(shift as u32) & mask) as u16
    }
}

/// The first `bits` bits of a fingerprint's high half.
pub fn prefix_of(hi: u64, bits: u32) -> u64 {
    if bits == 0 {
        0
    } else {
        hi >> (64 - bits.min(64))
    }
}

/// The key a run stores for `key`: the fingerprint's high half, big-endian, then the key.
pub fn run_key(fp: &Fingerprint, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(PREFIX_LEN + key.len());
    k.extend_from_slice(&fp.hi.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// Splits a run key into the fingerprint's high half and the user key; `None` for a key too
/// short to hold a fingerprint (a damaged run).
pub fn split_run_key(k: &[u8]) -> Option<(u64, &[u8])> {
    if k.len() <= PREFIX_LEN {
        return None;
    }
    let mut hi = [0u8; PREFIX_LEN];
    hi.copy_from_slice(&k[..PREFIX_LEN]);
    Some((u64::from_be_bytes(hi), &k[PREFIX_LEN..]))
}
