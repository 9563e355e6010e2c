//! A bloom filter partitioned by key range, one partition a filter page, so that a run's
//! filter can be read a page at a time through the cache instead of whole into memory.
//!
//! A run's keys arrive in order; the builder cuts them into partitions of at most
//! [`keys_per_partition`] distinct keys, each a classic bloom filter (the probe positions of
//! [`super::bloom`]) sized for its keys and filling at most one filter page's payload. Between
//! two partitions it records a separator: a key at or after every key of the partition before
//! and before every key of the partition after (the shortest prefix of the next partition's
//! first key that does, else the last key). A lookup finds its partition by a binary search of
//! the separators, then probes that partition's bits: one page per lookup, however large the
//! run. The builder holds the finished partitions' bits (⌈bits_per_key/8⌉ bytes a key) and the
//! hashes of one partition, never the hashes of the whole run.
//!
//! Serialized form (as the run's filter bytes, cut into [`PAYLOAD`]-byte pieces, one a page):
//! `n` partitions, each but the last zero-padded to [`PAYLOAD`] bytes (partition `i` is page
//! `i`), then the index section, right after the last partition's bit array (a filter of one
//! small partition is one page).
//!
//! Partition:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | [`KIND_PARTITION`] (4) |
//! | 1 | 1 | `k`, the number of probes (1..=30) |
//! | 2 | 4 | u32 `bits` (64 ..= [`MAX_PARTITION_BITS`]) = max(64, keys · bits_per_key) |
//! | 6 | ⌈bits/8⌉ | the bit array (bit `i` is `byte[i/8] >> (i%8) & 1`) |
//!
//! Index section: for each partition its separator (varint length, bytes), ascending; then a
//! trailer of u32 `n`, u32 the index section's length in bytes (trailer included) and the kind
//! byte [`KIND_PARTITIONED`] (3), which is the last byte of the filter.

use super::bloom::{self, hash64, MAX_PROBES};
use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::run::format::PAYLOAD;

/// The first byte of every partition, and so of a partitioned filter's bytes.
pub const KIND_PARTITION: u8 = 4;
/// The last byte of a partitioned filter's bytes.
pub const KIND_PARTITIONED: u8 = 3;
/// Bytes of a partition before its bit array.
const PART_HEADER: usize = 6;
/// Bits of the largest partition: what one page's payload holds after the partition header.
pub const MAX_PARTITION_BITS: u64 = ((PAYLOAD - PART_HEADER) * 8) as u64;
/// Fewest bits a partition has, so that tiny partitions are not all ones.
const MIN_BITS: u64 = 64;
/// Bytes of the index section's trailer.
const TRAILER: usize = 9;

fn bad(detail: impl Into<String>) -> Error {
    Error::corruption("partitioned bloom filter", None, detail)
}

/// Distinct keys in each partition but the last, for a bits-per-key setting (at least one).
pub fn keys_per_partition(bits_per_key: u32) -> usize {
    (MAX_PARTITION_BITS / u64::from(bits_per_key.max(1))).max(1) as usize
}

/// A key `s` with `a <= s < b`, as short as a prefix of `b` allows (`a < b`).
fn separator(a: &[u8], b: &[u8]) -> Vec<u8> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if b.len() > common + 1 {
        b[..common + 1].to_vec()
    } else {
        a.to_vec()
    }
}

/// Builds a partitioned filter from a run's distinct keys in ascending order.
#[derive(Debug)]
pub struct PartitionedBuilder {
    bits_per_key: u32,
    k: u8,
    per_partition: usize,
    /// Hashes of the partition being filled.
    hashes: Vec<u64>,
    /// The last key added.
    last: Vec<u8>,
    /// The finished partitions, [`PAYLOAD`] bytes each.
    out: Vec<u8>,
    /// Bytes of the last finished partition without its padding.
    last_len: usize,
    /// The separators of the finished partitions (varint length, bytes).
    index: Vec<u8>,
    partitions: u32,
}

impl PartitionedBuilder {
    /// A builder for `bits_per_key` bits per distinct key (at least 1).
    pub fn new(bits_per_key: u32) -> PartitionedBuilder {
        let bits_per_key = bits_per_key.max(1);
        PartitionedBuilder {
            bits_per_key,
            k: bloom::BloomBuilder::probes(bits_per_key),
            per_partition: keys_per_partition(bits_per_key),
            hashes: Vec::new(),
            last: Vec::new(),
            out: Vec::new(),
            last_len: 0,
            index: Vec::new(),
            partitions: 0,
        }
    }

    /// Adds the next distinct key (greater than every key added before).
    pub fn add_key(&mut self, key: &[u8]) {
        debug_assert!(self.hashes.is_empty() || self.last.as_slice() < key);
        if self.hashes.len() == self.per_partition {
            let sep = separator(&self.last, key);
            self.close(&sep);
        }
        self.hashes.push(hash64(key));
        self.last.clear();
        self.last.extend_from_slice(key);
    }

    /// Whether no key was added.
    pub fn is_empty(&self) -> bool {
        self.partitions == 0 && self.hashes.is_empty()
    }

    /// Writes the partition being filled, with separator `sep`.
    fn close(&mut self, sep: &[u8]) {
        let bits = (self.hashes.len() as u64 * u64::from(self.bits_per_key))
            .clamp(MIN_BITS, MAX_PARTITION_BITS);
        let start = self.out.len();
        self.out.resize(start + PAYLOAD, 0);
        let part = &mut self.out[start..];
        part[0] = KIND_PARTITION;
        part[1] = self.k;
        part[2..PART_HEADER].copy_from_slice(&(bits as u32).to_le_bytes());
        let array = &mut part[PART_HEADER..];
        for &h in &self.hashes {
            bloom::set_bits(array, bits, self.k, h);
        }
        self.hashes.clear();
        self.last_len = PART_HEADER + bits.div_ceil(8) as usize;
        codec::put_bytes(&mut self.index, sep);
        self.partitions += 1;
    }

    /// The serialized filter (format in the module documentation); `None` when no key was
    /// added.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        if !self.hashes.is_empty() {
            let last = std::mem::take(&mut self.last);
            self.close(&last);
        }
        if self.partitions == 0 {
            return None;
        }
        let section = self.index.len() + TRAILER;
        self.out
            .truncate((self.partitions as usize - 1) * PAYLOAD + self.last_len);
        self.out.extend_from_slice(&self.index);
        codec::put_u32(&mut self.out, self.partitions);
        codec::put_u32(&mut self.out, section as u32);
        self.out.push(KIND_PARTITIONED);
        // The run keeps these bytes while its filter is held whole, and is charged their
        // length: not the room of a doubled vector, nor a padded last page.
        self.out.shrink_to_fit();
        Some(self.out)
    }
}

/// The separators of a partitioned filter: what a lookup needs in memory to find the one
/// partition (page) that can hold its key.
#[derive(Clone, Debug)]
pub struct PartitionIndex {
    /// The separators, back to back.
    seps: Vec<u8>,
    /// The end of each separator in `seps`.
    ends: Vec<u32>,
}

impl PartitionIndex {
    /// Reads the trailer at the end of a filter's bytes (the last page's payload will do):
    /// (partitions, bytes of the index section).
    pub fn trailer(tail: &[u8]) -> Result<(u64, u64)> {
        let t = tail
            .len()
            .checked_sub(TRAILER)
            .map(|s| &tail[s..])
            .ok_or_else(|| bad("shorter than its trailer"))?;
        if t[8] != KIND_PARTITIONED {
            return Err(bad(format!(
                "trailer kind {} is not {KIND_PARTITIONED}",
                t[8]
            )));
        }
        let n = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let len = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
        if n == 0 || (len as usize) < TRAILER {
            return Err(bad(format!("{n} partitions, index of {len} bytes")));
        }
        Ok((u64::from(n), u64::from(len)))
    }

    /// Parses the index section (trailer included) of a filter of `n` partitions, checking
    /// that the separators ascend.
    pub fn parse(section: &[u8], n: u64) -> Result<PartitionIndex> {
        let (tn, len) = PartitionIndex::trailer(section)?;
        if tn != n || len != section.len() as u64 {
            return Err(bad(format!(
                "trailer says {tn} partitions and {len} bytes, the filter has {n} and {}",
                section.len()
            )));
        }
        let mut r = Reader::new(
            &section[..section.len() - TRAILER],
            "partitioned bloom filter",
        );
        let mut seps = Vec::with_capacity(r.remaining());
        let mut ends = Vec::with_capacity(n as usize);
        let mut prev = 0usize;
        for i in 0..n {
            let s = r.bytes()?;
            if i > 0 && seps[prev..] >= *s {
                return Err(bad(format!("separator {i} does not ascend")));
            }
            prev = seps.len();
            seps.extend_from_slice(s);
            ends.push(seps.len() as u32);
        }
        if !r.is_empty() {
            return Err(bad("bytes after the last separator"));
        }
        Ok(PartitionIndex { seps, ends })
    }

    /// Number of partitions.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the index has no partition (never, for a parsed one).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn sep(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.seps[start..self.ends[i] as usize]
    }

    /// The partition that holds `key` if any partition does: the first whose separator is at
    /// or after it (`None`: the key is past every key of the filter).
    pub fn partition(&self, key: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.ends.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.sep(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < self.ends.len()).then_some(lo)
    }

    /// Bytes it holds in memory.
    pub fn memory(&self) -> usize {
        self.seps.len() + 4 * self.ends.len() + std::mem::size_of::<Self>()
    }
}

/// Where the index section of a filter of `total` bytes starts, from its trailer's `n`
/// partitions and `len` bytes of section: past the first `n - 1` partitions' pages and within
/// the last partition's page, room left for a partition header.
pub fn section_start(n: u64, len: u64, total: u64) -> Result<u64> {
    let full = (n - 1).saturating_mul(PAYLOAD as u64);
    total
        .checked_sub(len)
        .filter(|&s| s >= full.saturating_add(PART_HEADER as u64) && s <= full + PAYLOAD as u64)
        .ok_or_else(|| {
            bad(format!(
                "{n} partitions and {len} index bytes do not fit {total} bytes"
            ))
        })
}

/// Checks a partition's header: (k, bits, the bit array).
fn partition_parts(part: &[u8]) -> Result<(u8, u64, &[u8])> {
    if part.len() < PART_HEADER || part[0] != KIND_PARTITION {
        return Err(bad("a partition without its header"));
    }
    let k = part[1];
    let bits = u64::from(u32::from_le_bytes([part[2], part[3], part[4], part[5]]));
    if k == 0 || k > MAX_PROBES {
        return Err(bad(format!("{k} probes is outside 1..={MAX_PROBES}")));
    }
    let array = part
        .get(PART_HEADER..PART_HEADER + bits.div_ceil(8) as usize)
        .filter(|_| (MIN_BITS..=MAX_PARTITION_BITS).contains(&bits))
        .ok_or_else(|| bad(format!("partition of {bits} bits in {} bytes", part.len())))?;
    Ok((k, bits, array))
}

/// Whether a key of hash `h` may be in the partition `part` (one page's payload); a malformed
/// partition is `Error::Corruption`.
pub fn probe_partition(part: &[u8], h: u64) -> Result<bool> {
    let (k, bits, array) = partition_parts(part)?;
    Ok(bloom::test_bits_once(array, bits, k, h))
}

/// A partitioned filter held whole in memory.
#[derive(Clone, Debug)]
pub struct PartitionedBloom {
    index: PartitionIndex,
    data: Vec<u8>,
    /// Where the index section starts in `data`.
    start: usize,
}

impl PartitionedBloom {
    /// Parses a whole serialized filter, checking the index and every partition's header.
    pub fn from_bytes(data: Vec<u8>) -> Result<PartitionedBloom> {
        let (n, len) = PartitionIndex::trailer(&data)?;
        let start = section_start(n, len, data.len() as u64)? as usize;
        let index = PartitionIndex::parse(&data[start..], n)?;
        let b = PartitionedBloom { index, data, start };
        for i in 0..n as usize {
            partition_parts(b.partition(i))?;
        }
        Ok(b)
    }

    fn partition(&self, i: usize) -> &[u8] {
        &self.data[i * PAYLOAD..((i + 1) * PAYLOAD).min(self.start)]
    }

    /// Whether `key` (of [`hash64`] `h`) may be present: `false` is certain.
    pub fn may_contain_hashed(&self, key: &[u8], h: u64) -> bool {
        self.index.partition(key).is_some_and(|i| {
            // Checked by `from_bytes`.
            probe_partition(self.partition(i), h).unwrap_or(true)
        })
    }

    /// The serialized form.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// The separators.
    pub fn index(&self) -> &PartitionIndex {
        &self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> u64 {
        let s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64);
        println!("seed {s}");
        s
    }

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    /// Sorted distinct keys of random lengths over a small alphabet, so that neighbours share
    /// long prefixes and one is often a prefix of the next.
    fn keys(next: &mut impl FnMut() -> u64, n: usize) -> Vec<Vec<u8>> {
        let mut ks: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = 1 + (next() % 12) as usize;
                (0..len).map(|_| b'a' + (next() % 3) as u8).collect()
            })
            .collect();
        ks.sort();
        ks.dedup();
        ks
    }

    fn build(ks: &[Vec<u8>], bits_per_key: u32) -> Vec<u8> {
        let mut b = PartitionedBuilder::new(bits_per_key);
        for k in ks {
            b.add_key(k);
        }
        b.finish().expect("keys were added")
    }

    #[test]
    fn every_key_is_found_in_its_partition_and_separators_split_the_keys() {
        let mut next = rng(seed());
        for bits_per_key in [1, 10, 64, 40_000] {
            let ks = keys(&mut next, 60_000);
            let f = PartitionedBloom::from_bytes(build(&ks, bits_per_key)).expect("parses");
            let per = keys_per_partition(bits_per_key);
            assert_eq!(
                f.index().len(),
                ks.len().div_ceil(per),
                "bits/key {bits_per_key}"
            );
            for (i, k) in ks.iter().enumerate() {
                assert_eq!(f.index().partition(k), Some(i / per), "key {i}");
                assert!(
                    f.may_contain_hashed(k, hash64(k)),
                    "false negative for key {i}"
                );
            }
            let past = [ks.last().unwrap().as_slice(), b"z"].concat();
            assert!(!f.may_contain_hashed(&past, hash64(&past)));
        }
    }

    #[test]
    fn false_positive_rate_matches_a_whole_bloom_filter() {
        let n = 200_000u64;
        let ks: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("key-{i:010}").into_bytes())
            .collect();
        let f = PartitionedBloom::from_bytes(build(&ks, 10)).expect("parses");
        assert_eq!(f.index().len(), 62);
        let fp = (0..n)
            .map(|i| format!("key-{i:010}x").into_bytes())
            .filter(|k| f.may_contain_hashed(k, hash64(k)))
            .count();
        let rate = fp as f64 / n as f64;
        println!("false-positive rate at 10 bits/key: {rate:.4}");
        assert!(rate < 0.015, "false-positive rate {rate}");
        // Bits a key: the partitions' pages, each 4068 bytes for 3,249 keys.
        assert!((f.as_bytes().len() as f64 * 8.0 / n as f64) < 10.2);
    }

    #[test]
    fn a_single_small_partition() {
        let bytes = build(&[b"m".to_vec()], 10);
        assert!(
            bytes.len() <= 32,
            "{} bytes: the index follows the bits",
            bytes.len()
        );
        let f = PartitionedBloom::from_bytes(bytes).expect("parses");
        assert_eq!(f.index().len(), 1);
        assert!(f.may_contain_hashed(b"m", hash64(b"m")));
        assert!(!f.may_contain_hashed(b"n", hash64(b"n")));
        assert!(PartitionedBuilder::new(10).finish().is_none());
    }

    #[test]
    fn damaged_bytes_are_corruption_never_a_panic() {
        let mut next = rng(seed());
        let ks = keys(&mut next, 20_000);
        let good = build(&ks, 10);
        assert!(PartitionedBloom::from_bytes(good.clone()).is_ok());
        for _ in 0..2_000 {
            let mut b = good.clone();
            match next() % 3 {
                0 => {
                    let i = (next() % b.len() as u64) as usize;
                    b[i] ^= 1 << (next() % 8);
                }
                1 => b.truncate((next() % b.len() as u64) as usize),
                _ => {
                    // Damage the index section, where separators and the trailer lie.
                    let tail = b.len() - (next() % 200) as usize - 1;
                    b[tail] = next() as u8;
                }
            }
            if let Ok(f) = PartitionedBloom::from_bytes(b) {
                for k in ks.iter().step_by(97) {
                    let _ = f.may_contain_hashed(k, hash64(k));
                }
            }
        }
        let mut swapped = good.clone();
        let n = swapped.len();
        swapped[n - 1] = 9;
        assert!(matches!(
            PartitionedBloom::from_bytes(swapped),
            Err(Error::Corruption { .. })
        ));
    }

    #[test]
    fn separators_are_between_their_neighbours() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"abc", b"abd"),
            (b"abc", b"abdzz"),
            (b"ab", b"abc"),
            (b"ab", b"abcd"),
            (b"a", b"b"),
        ];
        for (a, b) in cases {
            let s = separator(a, b);
            assert!(a <= s.as_slice() && s.as_slice() < b, "{a:?} {s:?} {b:?}");
        }
        assert_eq!(separator(b"abc", b"abdzz"), b"abd");
    }
}
