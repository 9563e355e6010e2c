//! Deterministic records for `woods load`, `woods verify`, `woods read` and `woods bench`.
//!
//! Record `i` (for a seed `s`) has
//! - key: `h = splitmix64(i ^ c)` with `c = splitmix64(s ^ KEY_SALT)`, written big-endian and
//!   repeated (the last copy cut short) to the key size, which must be at least 8 bytes;
//! - value: the key size's worth of bytes of an xorshift64* stream seeded from `h` and `s`.
//!
//! `splitmix64` is a bijection on `u64`, so distinct records have distinct keys, and a key maps
//! back to its record index with [`RecordGen::index_of`] (no table of keys is needed to verify).
//!
//! `woods bench` makes its records with [`Keys`] (db_bench's or YCSB's key format) and
//! [`Values`] (values that name their record and version), and loads them in the order of a
//! [`Permutation`].

use serde::{Deserialize, Serialize};

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

/// How the keys of a `woods bench` run are made. The run's first load phase sets it: `fillseq`
/// and `fillrandom` load db_bench keys (hashed ones with `--hashed-keys`), `ycsb-load` YCSB
/// keys; every later phase uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyFormat {
    /// db_bench's `GenerateKeyFromInt`: record `i` as 8 big-endian bytes, then ASCII `'0'` up to
    /// the key size. Key order is record order.
    DbBench,
    /// YCSB's `CoreWorkload.buildKeyName` with hashed inserts: `"user"` followed by the decimal
    /// of `fnvhash64(i)`, zero-padded after `"user"` to the key size (YCSB's `zeropadding` =
    /// key size − 4). Key order is a random order of the records.
    Ycsb,
    /// db_bench's layout over a bijective hash of the record: `splitmix64(i)` as 8 big-endian
    /// bytes, then ASCII `'0'` up to the key size. Key order is a random order of the records,
    /// so records inserted after the load land uniformly between the loaded ones (the FD-tree
    /// paper's unique keys drawn uniformly from the key space), and a key maps back to its
    /// record exactly ([`unsplitmix64`]) whatever the value size.
    Hashed,
}

impl KeyFormat {
    pub fn name(self) -> &'static str {
        match self {
            KeyFormat::DbBench => "db_bench",
            KeyFormat::Ycsb => "ycsb",
            KeyFormat::Hashed => "hashed",
        }
    }
}

/// Smallest key size that holds every YCSB key: `"user"` and the 20 characters of
/// `Long.toString` of a hash (19 digits, or `-9223372036854775808`).
pub const YCSB_MIN_KEY_SIZE: usize = 24;

/// YCSB's `Utils.fnvhash64`: FNV-1 over the 8 bytes of `val`, least significant first, then
/// Java's `Math.abs` (which leaves `i64::MIN` negative).
pub fn fnvhash64(val: i64) -> i64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut v = val;
    let mut h = OFFSET_BASIS;
    for _ in 0..8 {
        h ^= (v & 0xff) as u64;
        v >>= 8;
        h = h.wrapping_mul(PRIME);
    }
    (h as i64).wrapping_abs()
}

/// `"user"`, zeros, and the decimal of `h` (Java's `Long.toString`), `key_size` bytes in all
/// (at least [`YCSB_MIN_KEY_SIZE`]), appended to `out`; without allocating, as this runs for
/// every operation.
fn ycsb_key_into(h: i64, key_size: usize, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = h.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if h < 0 {
        at -= 1;
        digits[at] = b'-';
    }
    out.extend_from_slice(b"user");
    out.resize(key_size - (digits.len() - at), b'0');
    out.extend_from_slice(&digits[at..]);
}

/// The keys of a `woods bench` run: record `i`'s key for a [`KeyFormat`] and key size.
#[derive(Clone, Debug)]
pub struct Keys {
    format: KeyFormat,
    key_size: usize,
}

impl Keys {
    /// Errors (with a message for the user) when the key size cannot hold the format's keys:
    /// 8 bytes for db_bench keys, 24 for YCSB keys.
    pub fn new(format: KeyFormat, key_size: usize) -> Result<Keys, String> {
        let min = match format {
            KeyFormat::DbBench | KeyFormat::Hashed => MIN_KEY_SIZE,
            KeyFormat::Ycsb => YCSB_MIN_KEY_SIZE,
        };
        if key_size < min {
            return Err(format!(
                "--key-size {key_size} is too small for {} keys: they need at least {min} bytes",
                format.name()
            ));
        }
        Ok(Keys { format, key_size })
    }

    pub fn format(&self) -> KeyFormat {
        self.format
    }

    pub fn key_size(&self) -> usize {
        self.key_size
    }

    /// Writes record `i`'s key into `out` (cleared first).
    pub fn key_into(&self, i: u64, out: &mut Vec<u8>) {
        out.clear();
        match self.format {
            KeyFormat::DbBench => {
                out.extend_from_slice(&i.to_be_bytes());
                out.resize(self.key_size, b'0');
            }
            KeyFormat::Ycsb => ycsb_key_into(fnvhash64(i as i64), self.key_size, out),
            KeyFormat::Hashed => {
                out.extend_from_slice(&hashed_key(i).to_be_bytes());
                out.resize(self.key_size, b'0');
            }
        }
    }

    /// Record `i`'s key.
    pub fn key(&self, i: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.key_size);
        self.key_into(i, &mut k);
        k
    }

    /// A key that no record has, in the key range of the records (so that an engine must look
    /// it up, not reject it by its smallest and largest keys): record `i`'s key with its last
    /// byte replaced by one that no record key has there (`'1'` after db_bench's `'0'` padding,
    /// `':'` after YCSB's digits). It sorts right after record `i`'s key. With 8-byte db_bench
    /// keys there is no padding to change, and the miss is the key of record `u64::MAX - i`,
    /// past every record. Hashed keys: the key of record `u64::MAX - i`, which no run issues,
    /// at a uniformly random place among the records' keys.
    pub fn miss_key_into(&self, i: u64, out: &mut Vec<u8>) {
        if self.format == KeyFormat::Hashed
            || (self.format == KeyFormat::DbBench && self.key_size == MIN_KEY_SIZE)
        {
            self.key_into(u64::MAX - i, out);
            return;
        }
        self.key_into(i, out);
        let last = out.len() - 1;
        out[last] = match self.format {
            KeyFormat::DbBench | KeyFormat::Hashed => b'1',
            KeyFormat::Ycsb => b':',
        };
    }

    /// The record whose key is `key`, where the format can tell (db_bench and hashed keys);
    /// `None` for a key that is no record's key in that format, and always for YCSB keys (whose
    /// record is found from its value, see [`Values::decode`]).
    pub fn index_of(&self, key: &[u8]) -> Option<u64> {
        if self.format == KeyFormat::Ycsb || key.len() != self.key_size {
            return None;
        }
        let h = u64::from_be_bytes(key[..8].try_into().ok()?);
        let i = match self.format {
            KeyFormat::Hashed => unsplitmix64(h),
            _ => h,
        };
        key[8..].iter().all(|&b| b == b'0').then_some(i)
    }

    /// Where client `t` of `n` starts a sequential read over `count` records: the first of
    /// `n` equal parts of the key space (by record for db_bench keys, by hash value for YCSB
    /// and hashed keys). Client 0 starts at the empty key, before every key.
    pub fn split_point(&self, t: usize, n: usize, count: u64) -> Vec<u8> {
        if t == 0 {
            return Vec::new();
        }
        match self.format {
            KeyFormat::DbBench => self.key((count as u128 * t as u128 / n as u128) as u64),
            KeyFormat::Ycsb => {
                let h = (i64::MAX as u128 * t as u128 / n as u128) as i64;
                let mut out = Vec::with_capacity(self.key_size);
                ycsb_key_into(h, self.key_size, &mut out);
                out
            }
            KeyFormat::Hashed => {
                let h = (u64::MAX as u128 * t as u128 / n as u128) as u64;
                let mut out = h.to_be_bytes().to_vec();
                out.resize(self.key_size, b'0');
                out
            }
        }
    }
}

/// Bytes at the start of a value that name its record and version (see [`Values`]).
pub const VALUE_HEADER: usize = 9;

/// The values of a `woods bench` run: a deterministic function of the record index, a version
/// (0–127, advanced by every write of the record) and the seed, so that every read can be
/// checked without keeping the values. A value is `value size` bytes of an xorshift64* stream
/// seeded from (seed, record, version); when it has room (at least [`VALUE_HEADER`] bytes),
/// its first 8 bytes are the record index and its 9th the version, each masked by a constant
/// of the seed, so that a value found by a scan names the record it belongs to.
#[derive(Clone, Debug)]
pub struct Values {
    value_size: usize,
    seed: u64,
    index_mask: u64,
    version_mask: u8,
}

impl Values {
    pub fn new(value_size: usize, seed: u64) -> Values {
        let m = splitmix64(seed ^ VALUE_SALT ^ KEY_SALT);
        Values {
            value_size,
            seed,
            index_mask: m,
            version_mask: (splitmix64(m) >> 56) as u8,
        }
    }

    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// Whether values carry their record and version ([`Values::decode`] works).
    pub fn has_header(&self) -> bool {
        self.value_size >= VALUE_HEADER
    }

    /// Writes version `version` of record `i`'s value into `out` (cleared first).
    pub fn value_into(&self, i: u64, version: u8, out: &mut Vec<u8>) {
        out.clear();
        out.resize(self.value_size, 0);
        let mut x = splitmix64(
            splitmix64(i ^ self.seed.rotate_left(17)) ^ VALUE_SALT ^ ((version as u64) << 56),
        );
        if x == 0 {
            x = GOLDEN;
        }
        for chunk in out.chunks_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let w = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        if self.has_header() {
            out[..8].copy_from_slice(&(i ^ self.index_mask).to_le_bytes());
            out[8] = version ^ self.version_mask;
        }
    }

    /// Version `version` of record `i`'s value.
    pub fn value(&self, i: u64, version: u8) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.value_size);
        self.value_into(i, version, &mut v);
        v
    }

    /// The record and version a value names in its header; `None` when values have no header
    /// or `value` has the wrong length. The caller still compares the whole value.
    pub fn decode(&self, value: &[u8]) -> Option<(u64, u8)> {
        if !self.has_header() || value.len() != self.value_size {
            return None;
        }
        let i = u64::from_le_bytes(value[..8].try_into().ok()?) ^ self.index_mask;
        Some((i, value[8] ^ self.version_mask))
    }
}

/// A pseudo-random permutation of `0..n`, computed per position without a table: a 4-round
/// Feistel network on the smallest even number of bits that covers `n`, walking the cycle until
/// the image falls below `n` (at most 4 steps on average). `fillrandom` writes records in this
/// order, so its keys are distinct and in uniformly random order.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    round_keys: [u64; 4],
}

impl Permutation {
    pub fn new(n: u64, seed: u64) -> Permutation {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let half_bits = bits.div_ceil(2);
        let mut k = seed ^ 0x7065_726d_7574_6521;
        let round_keys = [0; 4].map(|_| {
            k = splitmix64(k);
            k
        });
        Permutation {
            n,
            half_bits,
            round_keys,
        }
    }

    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for k in self.round_keys {
            let f = splitmix64(r ^ k) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// The record at position `p` (`p < n`).
    pub fn at(&self, p: u64) -> u64 {
        debug_assert!(p < self.n);
        let mut x = self.feistel(p);
        while x >= self.n {
            x = self.feistel(x);
        }
        x
    }
}

/// The first 8 bytes of record `i`'s hashed key ([`KeyFormat::Hashed`]), big-endian: hashed
/// keys order as these do ([`HashedKeyOrder`]).
fn hashed_key(i: u64) -> u64 {
    splitmix64(i)
}

/// Records `0..n` in ascending order of their hashed keys ([`KeyFormat::Hashed`]: `splitmix64(i)`
/// big-endian): the order of a bulk load, which `fillseq` writes with `--hashed-keys`.
///
/// No table of `n` keys is kept: the key space is cut into `2^bits` buckets by the keys' top bits,
/// about [`HashedKeyOrder::BUCKET`] records each, and a bucket's records are found by one pass
/// over `0..n` and sorted when the walk reaches it. Memory is one bucket (16 bytes a record) and
/// the per-bucket counts; time is one pass over `0..n` per bucket, a few milliseconds per
/// million records each.
#[derive(Clone, Debug)]
pub struct HashedKeyOrder {
    n: u64,
    bits: u32,
    /// `starts[b]`: the position of bucket `b`'s first record; `starts[2^bits] = n`.
    starts: Vec<u64>,
}

impl HashedKeyOrder {
    /// Records per bucket aimed at (4 MiB of (key, record) pairs).
    pub const BUCKET: u64 = 1 << 18;

    pub fn new(n: u64) -> HashedKeyOrder {
        let bits = n
            .div_ceil(Self::BUCKET)
            .max(1)
            .next_power_of_two()
            .trailing_zeros();
        let mut starts = vec![0u64; (1usize << bits) + 1];
        for i in 0..n {
            starts[Self::bucket_of(bits, hashed_key(i)) + 1] += 1;
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        HashedKeyOrder { n, bits, starts }
    }

    fn bucket_of(bits: u32, key: u64) -> usize {
        key.checked_shr(64 - bits).unwrap_or(0) as usize
    }

    /// The records at positions `lo..hi` (`hi <= n`) of the key order, in order.
    pub fn range(&self, lo: u64, hi: u64) -> impl Iterator<Item = u64> + '_ {
        let hi = hi.min(self.n);
        let first = self.starts.partition_point(|&s| s <= lo).saturating_sub(1);
        (first..self.starts.len() - 1)
            .take_while(move |&b| self.starts[b] < hi)
            .flat_map(move |b| {
                let mut bucket: Vec<(u64, u64)> = (0..self.n)
                    .map(|i| (hashed_key(i), i))
                    .filter(|&(k, _)| Self::bucket_of(self.bits, k) == b)
                    .collect();
                bucket.sort_unstable();
                let at = self.starts[b];
                let from = lo.saturating_sub(at) as usize;
                let to = (hi - at).min(bucket.len() as u64) as usize;
                bucket.into_iter().take(to).skip(from).map(|(_, i)| i)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key order holds every record once, in ascending key order, and its ranges cut it
    /// anywhere (bucket edges included) without losing or repeating a record.
    #[test]
    fn hashed_key_order_is_ascending_and_complete() {
        for n in [0u64, 1, 2, 1000, 3 * HashedKeyOrder::BUCKET + 17] {
            let order = HashedKeyOrder::new(n);
            let all: Vec<u64> = order.range(0, n).collect();
            assert_eq!(all.len() as u64, n, "n {n}");
            assert!(
                all.windows(2).all(|w| hashed_key(w[0]) < hashed_key(w[1])),
                "n {n}"
            );
            let mut seen = all.clone();
            seen.sort_unstable();
            assert!(seen.iter().copied().eq(0..n), "n {n}");
            let edge = order.starts.get(1).copied().unwrap_or(0);
            for (lo, hi) in [
                (0, n / 3),
                (n / 3, n),
                (edge.saturating_sub(1), (edge + 2).min(n)),
            ] {
                let part: Vec<u64> = order.range(lo, hi).collect();
                assert_eq!(
                    part[..],
                    all[lo as usize..hi.max(lo) as usize],
                    "n {n} {lo}..{hi}"
                );
            }
        }
    }

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

    #[test]
    fn fnv_matches_ycsb() {
        // Values of YCSB's Utils.fnvhash64, computed independently.
        assert_eq!(fnvhash64(0), 6284781860667377211);
        assert_eq!(fnvhash64(1), 8517097267634966620);
        assert_eq!(fnvhash64(1000), 5952875239596136740);
        assert_eq!(fnvhash64(12345678), 2115995694829345612);
    }

    #[test]
    fn db_bench_keys_sort_by_record() {
        let k = Keys::new(KeyFormat::DbBench, 24).unwrap();
        assert_eq!(
            k.key(0x0102),
            b"\0\0\0\0\0\0\x01\x020000000000000000".to_vec()
        );
        let mut prev = Vec::new();
        for i in [0u64, 1, 255, 256, 70_000, 1 << 40] {
            let key = k.key(i);
            assert!(key > prev);
            assert_eq!(k.index_of(&key), Some(i));
            let mut miss = Vec::new();
            k.miss_key_into(i, &mut miss);
            assert!(miss > key && miss < k.key(i + 1));
            assert_eq!(k.index_of(&miss), None);
            prev = key;
        }
        let k8 = Keys::new(KeyFormat::DbBench, 8).unwrap();
        let mut miss = Vec::new();
        k8.miss_key_into(3, &mut miss);
        assert_eq!(k8.index_of(&miss), Some(u64::MAX - 3));
        assert!(Keys::new(KeyFormat::DbBench, 7).is_err());
    }

    /// Hashed keys map back to their records; records issued after a load of `0..N` have keys
    /// spread among the loaded ones, not after them; misses are no issued record's key.
    #[test]
    fn hashed_keys_interleave_new_records() {
        for size in [8usize, 16] {
            let k = Keys::new(KeyFormat::Hashed, size).unwrap();
            assert_eq!(k.key(7).len(), size);
            assert_eq!(&k.key(7)[..8], &splitmix64(7).to_be_bytes());
            for i in [0u64, 1, 2, 1000, 1 << 40, u64::MAX] {
                assert_eq!(k.index_of(&k.key(i)), Some(i), "{size} bytes, record {i}");
            }
            let mut miss = Vec::new();
            k.miss_key_into(3, &mut miss);
            assert_eq!(k.index_of(&miss), Some(u64::MAX - 3));
            // splitmix64 is fixed (no seed): these counts are the same in every run.
            let mut loaded: Vec<Vec<u8>> = (0..10_000).map(|i| k.key(i)).collect();
            loaded.sort();
            let (lo, hi) = (&loaded[0], &loaded[loaded.len() - 1]);
            let median = &loaded[loaded.len() / 2];
            let new: Vec<Vec<u8>> = (10_000..11_000).map(|i| k.key(i)).collect();
            let inside = new.iter().filter(|n| *n > lo && *n < hi).count();
            let below = new.iter().filter(|n| *n < median).count();
            assert!(
                inside >= 995,
                "{inside} of 1000 new keys between the loaded ones"
            );
            assert!(
                (400..600).contains(&below),
                "{below} of 1000 below the median"
            );
            assert!(loaded.binary_search(&new[0]).is_err());
            assert!(k.split_point(1, 2, 10) > k.split_point(0, 2, 10));
            assert_eq!(k.split_point(1, 2, 10)[0], 0x7f);
        }
        assert!(Keys::new(KeyFormat::Hashed, 7).is_err());
    }

    #[test]
    fn ycsb_keys_are_user_and_hash() {
        let k = Keys::new(KeyFormat::Ycsb, 24).unwrap();
        assert_eq!(k.key(0), b"user06284781860667377211".to_vec());
        assert_eq!(k.key(1).len(), 24);
        let k30 = Keys::new(KeyFormat::Ycsb, 30).unwrap();
        assert_eq!(k30.key(1), b"user00000008517097267634966620".to_vec());
        let mut miss = Vec::new();
        k.miss_key_into(0, &mut miss);
        assert_eq!(miss, b"user0628478186066737721:".to_vec());
        assert!(Keys::new(KeyFormat::Ycsb, 23).unwrap_err().contains("24"));
        let mut out = Vec::new();
        ycsb_key_into(i64::MIN, 24, &mut out);
        assert_eq!(out, b"user-9223372036854775808".to_vec());
        out.clear();
        ycsb_key_into(0, 24, &mut out);
        assert_eq!(out, b"user00000000000000000000".to_vec());
        assert_eq!(k.index_of(&k.key(5)), None);
        assert!(k.split_point(1, 2, 10) > b"user0".to_vec());
        assert!(k.split_point(1, 2, 10) < b"user9".to_vec());
    }

    #[test]
    fn values_name_record_and_version() {
        let v = Values::new(100, 3);
        let a = v.value(42, 7);
        assert_eq!(a.len(), 100);
        assert_eq!(v.decode(&a), Some((42, 7)));
        assert_ne!(a, v.value(42, 8));
        assert_ne!(a, v.value(43, 7));
        assert_ne!(a, Values::new(100, 4).value(42, 7));
        let small = Values::new(5, 3);
        assert_eq!(small.value(1, 0).len(), 5);
        assert_eq!(small.decode(&small.value(1, 0)), None);
        assert_ne!(small.value(1, 0), small.value(1, 1));
        assert!(Values::new(0, 0).value(1, 1).is_empty());
    }

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 17, 1000, 4096, 5000] {
            let p = Permutation::new(n, n ^ 9);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let x = p.at(i);
                assert!(x < n);
                assert!(!seen[x as usize], "{n}: {x} twice");
                seen[x as usize] = true;
            }
        }
        let p = Permutation::new(1000, 1);
        let fixed = (0..1000).filter(|&i| p.at(i) == i).count();
        assert!(fixed < 20, "{fixed} fixed points: not much of a shuffle");
    }
}
