//! Deterministic records for `woods load`, `woods verify`, `woods read` and `woods bench`.
//!
//! Record `i` (for a seed `s`) has
//! - key: `h = splitmix64(i ^ c)` with `c = splitmix64(s ^ KEY_SALT)`, written big-endian and
//!   repeated (the last copy cut short) to the key size, which must be at least 8 bytes;
//! - value: the key size's worth of bytes of an xorshift64* stream seeded from `h` and `s`.
//!
//! `splitmix64` is a bijection on `u64`, so distinct records have distinct keys, and a key maps
//! back to its record index with [`RecordGen::index_of`] (no table of keys is needed to verify).

/// Smallest key size the generator accepts (one whole 64-bit hash).
pub const MIN_KEY_SIZE: usize = 8;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
const M1: u64 = 0xbf58_476d_1ce4_e5b9;
const M2: u64 = 0x94d0_49bb_1331_11eb;
const KEY_SALT: u64 = 0x5851_f42d_4c95_7f2d;
const VALUE_SALT: u64 = 0xd1b5_4a32_d192_ed03;

/// The splitmix64 output function of `x` (that is, of state `x` after one increment).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(M1);
    z = (z ^ (z >> 27)).wrapping_mul(M2);
    z ^ (z >> 31)
}

/// The inverse of [`splitmix64`].
pub fn unsplitmix64(h: u64) -> u64 {
    let mut z = unxorshift(h, 31);
    z = unxorshift(z.wrapping_mul(mul_inverse(M2)), 27);
    z = unxorshift(z.wrapping_mul(mul_inverse(M1)), 30);
    z.wrapping_sub(GOLDEN)
}

/// Inverts `y = x ^ (x >> s)`.
fn unxorshift(y: u64, s: u32) -> u64 {
    let mut x = y;
    let mut k = s;
    while k < 64 {
        x = y ^ (x >> s);
        k += s;
    }
    x
}

/// The inverse of an odd `a` modulo 2^64 (Newton's iteration).
const fn mul_inverse(a: u64) -> u64 {
    let mut x = a; // correct to 3 bits for odd a
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// Generates the keys and values of records `0..` for one seed and shape.
#[derive(Clone, Debug)]
pub struct RecordGen {
    key_size: usize,
    value_size: usize,
    seed: u64,
    key_const: u64,
}

impl RecordGen {
    /// A generator; errors (with a message for the user) when `key_size` is below 8.
    pub fn new(key_size: usize, value_size: usize, seed: u64) -> Result<RecordGen, String> {
        if key_size < MIN_KEY_SIZE {
            return Err(format!(
                "--key-size {key_size} is too small: generated keys need at least {MIN_KEY_SIZE} bytes \
                 (one 64-bit hash)"
            ));
        }
        Ok(RecordGen {
            key_size,
            value_size,
            seed,
            key_const: splitmix64(seed ^ KEY_SALT),
        })
    }

    pub fn key_size(&self) -> usize {
        self.key_size
    }

    pub fn value_size(&self) -> usize {
        self.value_size
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn hash(&self, i: u64) -> u64 {
        splitmix64(i ^ self.key_const)
    }

    /// Writes record `i`'s key into `out` (cleared first).
    pub fn key_into(&self, i: u64, out: &mut Vec<u8>) {
        out.clear();
        let h = self.hash(i).to_be_bytes();
        while out.len() < self.key_size {
            let n = (self.key_size - out.len()).min(8);
            out.extend_from_slice(&h[..n]);
        }
    }

    /// Record `i`'s key.
    pub fn key(&self, i: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.key_size);
        self.key_into(i, &mut k);
        k
    }

    /// Writes record `i`'s value into `out` (cleared first).
    pub fn value_into(&self, i: u64, out: &mut Vec<u8>) {
        out.clear();
        let mut x = splitmix64(self.hash(i) ^ self.seed.rotate_left(32) ^ VALUE_SALT);
        if x == 0 {
            x = GOLDEN;
        }
        while out.len() < self.value_size {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let w = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            let n = (self.value_size - out.len()).min(8);
            out.extend_from_slice(&w[..n]);
        }
    }

    /// Record `i`'s value.
    pub fn value(&self, i: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.value_size);
        self.value_into(i, &mut v);
        v
    }

    /// The record index whose key is `key`, if `key` is the key of some record `0..records`.
    pub fn index_of(&self, key: &[u8], records: u64) -> Option<u64> {
        if key.len() != self.key_size {
            return None;
        }
        let h = u64::from_be_bytes(key[..8].try_into().ok()?);
        let i = unsplitmix64(h) ^ self.key_const;
        if i >= records || self.key(i) != key {
            return None;
        }
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_inverts() {
        for x in [0u64, 1, 2, 12345, u64::MAX, GOLDEN, 1 << 63] {
            assert_eq!(unsplitmix64(splitmix64(x)), x);
        }
        let mut x = 7u64;
        for _ in 0..10_000 {
            x = splitmix64(x);
            assert_eq!(unsplitmix64(splitmix64(x)), x);
        }
    }

    #[test]
    fn keys_map_back() {
        for (k, seed) in [(8, 0), (16, 1), (13, 99), (40, u64::MAX)] {
            let g = RecordGen::new(k, 100, seed).unwrap();
            for i in 0..2000 {
                let key = g.key(i);
                assert_eq!(key.len(), k);
                assert_eq!(g.index_of(&key, 2000), Some(i));
                assert_eq!(g.index_of(&key, i), None);
            }
        }
        let g = RecordGen::new(16, 0, 0).unwrap();
        assert_eq!(g.index_of(b"not a record key", 1 << 40), None);
        assert!(g.value(3).is_empty());
    }

    #[test]
    fn values_depend_on_index_and_seed() {
        let a = RecordGen::new(16, 100, 0).unwrap();
        let b = RecordGen::new(16, 100, 1).unwrap();
        assert_eq!(a.value(5).len(), 100);
        assert_eq!(a.value(5), a.value(5));
        assert_ne!(a.value(5), a.value(6));
        assert_ne!(a.value(5), b.value(5));
        assert_ne!(a.key(5), b.key(5));
    }

    #[test]
    fn small_keys_rejected() {
        assert!(RecordGen::new(7, 10, 0).unwrap_err().contains("at least 8"));
    }
}
