//! A bloom filter over user keys.
//!
//! Each key is hashed once to 64 bits ([`hash64`]); the `k` probe positions are derived from
//! that hash by double hashing (`h1 + i * h2 mod bits`, Kirsch–Mitzenmacher), so a lookup costs
//! one pass over the key. `k = round(bits_per_key * ln 2)`, clamped to `1..=30`.
//!
//! Serialized form (all integers little-endian), as [`BloomBuilder::finish`] writes it and
//! [`Bloom::from_bytes`] reads it:
//!
//! | offset | size | field                                      |
//! |--------|------|--------------------------------------------|
//! | 0      | 1    | filter kind, `1` = this bloom filter       |
//! | 1      | 1    | `k`, the number of probes (1..=30)          |
//! | 2      | 8    | `bits`, the number of bits (>= 64)          |
//! | 10     | ⌈bits/8⌉ | the bit array; bit `i` is `byte[i/8] >> (i%8) & 1` |

use crate::error::{Error, Result};

/// The filter kind byte of a bloom filter.
const KIND_BLOOM: u8 = 1;
/// Bytes before the bit array.
const HEADER: usize = 10;
/// Fewest bits a filter has, so that tiny filters are not all ones.
const MIN_BITS: u64 = 64;
/// Most probes a filter may ask for.
pub(crate) const MAX_PROBES: u8 = 30;

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;

#[inline]
fn round(acc: u64, lane: u64) -> u64 {
    acc.wrapping_add(lane.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

#[inline]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// The 64-bit key hash the filters use: an xxHash64-style mix of 8-byte little-endian lanes
/// with a full avalanche at the end. Stable across platforms and versions (it is part of the
/// on-disk format of every filter).
pub fn hash64(data: &[u8]) -> u64 {
    hash64_seeded(0, data)
}

/// [`hash64`] under a seed (seed 0 is [`hash64`]): independent hashes of one key for
/// structures that need more than 64 bits or a per-database hash (`boa`'s fingerprints).
pub fn hash64_seeded(seed: u64, data: &[u8]) -> u64 {
    let mut h = (P3 ^ seed) ^ (data.len() as u64).wrapping_mul(P1);
    let mut lanes = data.chunks_exact(8);
    for lane in &mut lanes {
        let mut a = [0u8; 8];
        a.copy_from_slice(lane);
        h ^= round(0, u64::from_le_bytes(a));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    }
    let rest = lanes.remainder();
    if !rest.is_empty() {
        let mut a = [0u8; 8];
        a[..rest.len()].copy_from_slice(rest);
        h ^= round(0, u64::from_le_bytes(a));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    }
    avalanche(h)
}

/// The second hash of double hashing; odd so that it is coprime with power-of-two sizes.
#[inline]
fn delta(h: u64) -> u64 {
    h.rotate_left(32).wrapping_mul(P3) | 1
}

/// The probe positions of hash `h` in a filter of `bits` bits: `(h + i * delta(h)) mod bits`
/// for `i` in `0..k`, the sum taken modulo 2^64 (the format's definition), computed with two
/// divisions per key instead of one per probe: each step adds `delta mod bits` and, when the
/// 64-bit sum wrapped, takes away `2^64 mod bits`.
#[derive(Clone, Copy)]
struct Probes {
    pos: u64,
    d: u64,
    bit: u64,
    step: u64,
    wrap: u64,
    bits: u64,
}

impl Probes {
    #[inline]
    fn new(h: u64, bits: u64, wrap: u64) -> Probes {
        let d = delta(h);
        Probes {
            pos: h,
            d,
            bit: h % bits,
            step: d % bits,
            wrap,
            bits,
        }
    }

    /// `2^64 mod bits`, the same for every key of a filter.
    fn wrap_of(bits: u64) -> u64 {
        (u64::MAX % bits + 1) % bits
    }

    /// The current probe's bit; moves to the next probe.
    #[inline]
    fn next_bit(&mut self) -> u64 {
        let bit = self.bit;
        let (pos, wrapped) = self.pos.overflowing_add(self.d);
        self.pos = pos;
        // (bit + step) mod bits and (b - wrap) mod bits, written so that no sum overflows.
        let mut b = if bit >= self.bits - self.step {
            bit - (self.bits - self.step)
        } else {
            bit + self.step
        };
        if wrapped {
            b = if b >= self.wrap {
                b - self.wrap
            } else {
                b + (self.bits - self.wrap)
            };
        }
        self.bit = b;
        bit
    }
}

/// Sets the `k` probe bits of hash `h` in the bit array `array` of `bits` bits (`array` holds
/// at least ⌈bits/8⌉ bytes): the positions of the format, shared by every bloom layout.
pub(crate) fn set_bits(array: &mut [u8], bits: u64, k: u8, h: u64) {
    let mut p = Probes::new(h, bits, Probes::wrap_of(bits));
    for _ in 0..k {
        let bit = p.next_bit();
        array[(bit / 8) as usize] |= 1 << (bit % 8);
    }
}

/// Whether every one of the `k` probe bits of hash `h` is set in `array` (`bits` bits, `wrap`
/// = `2^64 mod bits`); a bit past the array's end counts as clear.
#[inline]
fn test_bits(array: &[u8], bits: u64, wrap: u64, k: u8, h: u64) -> bool {
    let mut p = Probes::new(h, bits, wrap);
    for _ in 0..k {
        let bit = p.next_bit();
        match array.get((bit / 8) as usize) {
            Some(byte) if byte & (1 << (bit % 8)) != 0 => {}
            _ => return false,
        }
    }
    true
}

/// [`test_bits`] for a filter probed once (its `wrap` computed here).
pub(crate) fn test_bits_once(array: &[u8], bits: u64, k: u8, h: u64) -> bool {
    test_bits(array, bits, Probes::wrap_of(bits), k, h)
}

/// Collects key hashes and produces the serialized filter sized for them.
///
/// It keeps one `u64` per added key until [`BloomBuilder::finish`], since the number of keys
/// (and so the filter size) is only known at the end. Feed each distinct key once.
#[derive(Debug)]
pub struct BloomBuilder {
    bits_per_key: u32,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// A builder for a filter of `bits_per_key` bits per distinct key (at least 1).
    pub fn new(bits_per_key: u32) -> BloomBuilder {
        BloomBuilder {
            bits_per_key: bits_per_key.max(1),
            hashes: Vec::new(),
        }
    }

    /// Adds one distinct key.
    pub fn add_key(&mut self, key: &[u8]) {
        self.hashes.push(hash64(key));
    }

    /// Adds a key by its [`hash64`].
    pub fn add_hash(&mut self, hash: u64) {
        self.hashes.push(hash);
    }

    /// Keys added so far.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether no key was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The number of probes for a bits-per-key setting.
    pub fn probes(bits_per_key: u32) -> u8 {
        let k = (f64::from(bits_per_key) * std::f64::consts::LN_2).round();
        (k as u8).clamp(1, MAX_PROBES)
    }

    /// The serialized filter (format in the module documentation).
    pub fn finish(self) -> Vec<u8> {
        let mut f = self.start_finish();
        while !f.step(usize::MAX) {}
        f.into_bytes()
    }

    /// Starts setting the filter's bits in bounded steps ([`BloomFinish::step`]).
    pub fn start_finish(self) -> BloomFinish {
        let k = Self::probes(self.bits_per_key);
        let bits = (self.hashes.len() as u64)
            .saturating_mul(u64::from(self.bits_per_key))
            .max(MIN_BITS);
        let nbytes = bits.div_ceil(8) as usize;
        let mut out = Vec::with_capacity(HEADER + nbytes);
        out.push(KIND_BLOOM);
        out.push(k);
        out.extend_from_slice(&bits.to_le_bytes());
        out.resize(HEADER + nbytes, 0);
        BloomFinish {
            k,
            bits,
            out,
            hashes: self.hashes,
            pos: 0,
        }
    }
}

/// A bloom filter whose bits are being set, a bounded number of keys per step.
#[derive(Debug)]
pub struct BloomFinish {
    k: u8,
    bits: u64,
    out: Vec<u8>,
    hashes: Vec<u64>,
    pos: usize,
}

impl BloomFinish {
    /// Sets the bits of about `budget / k` more keys; true when every key is in.
    pub fn step(&mut self, budget: usize) -> bool {
        let n = (budget / usize::from(self.k).max(1)).max(1);
        let end = self.pos.saturating_add(n).min(self.hashes.len());
        let array = &mut self.out[HEADER..];
        for &h in &self.hashes[self.pos..end] {
            set_bits(array, self.bits, self.k, h);
        }
        self.pos = end;
        end == self.hashes.len()
    }

    /// The serialized filter (call once [`BloomFinish::step`] returned true).
    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }
}

/// A loaded bloom filter.
#[derive(Clone, Debug)]
pub struct Bloom {
    k: u8,
    bits: u64,
    /// `2^64 mod bits` ([`Probes`]).
    wrap: u64,
    data: Vec<u8>,
}

fn bad(detail: String) -> Error {
    Error::corruption("bloom filter", None, detail)
}

impl Bloom {
    /// Parses a serialized filter, checking every field (a bad one is `Error::Corruption`).
    pub fn from_bytes(data: Vec<u8>) -> Result<Bloom> {
        if data.len() < HEADER {
            return Err(bad(format!(
                "{} bytes is shorter than the {HEADER}-byte header",
                data.len()
            )));
        }
        if data[0] != KIND_BLOOM {
            return Err(bad(format!("unknown filter kind {}", data[0])));
        }
        let k = data[1];
        if k == 0 || k > MAX_PROBES {
            return Err(bad(format!("{k} probes is outside 1..={MAX_PROBES}")));
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&data[2..HEADER]);
        let bits = u64::from_le_bytes(b);
        if bits < MIN_BITS || bits.div_ceil(8) != (data.len() - HEADER) as u64 {
            return Err(bad(format!(
                "{bits} bits does not match {} bytes of bit array",
                data.len() - HEADER
            )));
        }
        Ok(Bloom {
            k,
            bits,
            wrap: Probes::wrap_of(bits),
            data,
        })
    }

    /// Whether `key` may have been added: `false` is certain, `true` may be a false positive.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(hash64(key))
    }

    /// [`Bloom::may_contain`] for a key already hashed with [`hash64`].
    pub fn may_contain_hash(&self, h: u64) -> bool {
        test_bits(&self.data[HEADER..], self.bits, self.wrap, self.k, h)
    }

    /// The serialized form.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Number of probes per key.
    pub fn probes(&self) -> u8 {
        self.k
    }

    /// Size of the bit array in bits.
    pub fn bits(&self) -> u64 {
        self.bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The incremental probes give exactly the format's positions, `(h + i*d) mod 2^64 mod
    /// bits`, for sizes whose 64-bit sums wrap often and rarely.
    #[test]
    fn probes_match_the_formats_positions() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64);
        println!("seed {seed}");
        let mut x = seed | 1;
        let mut next = || {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let sizes = [
            64,
            65,
            1000,
            8191,
            (1 << 40) + 7,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ];
        for bits in sizes {
            let wrap = Probes::wrap_of(bits);
            for _ in 0..2000 {
                let h = next();
                let d = delta(h);
                let mut p = Probes::new(h, bits, wrap);
                let mut pos = h;
                for i in 0..MAX_PROBES {
                    assert_eq!(p.next_bit(), pos % bits, "bits {bits} h {h} probe {i}");
                    pos = pos.wrapping_add(d);
                }
            }
        }
    }

    fn key(i: u64, salt: u64) -> Vec<u8> {
        format!("key-{salt}-{i:010}").into_bytes()
    }

    #[test]
    fn no_false_negatives_and_low_fp_rate() {
        let n = 100_000u64;
        let mut b = BloomBuilder::new(10);
        for i in 0..n {
            b.add_key(&key(i, 1));
        }
        let f = Bloom::from_bytes(b.finish()).expect("valid filter");
        assert_eq!(f.probes(), 7);
        for i in 0..n {
            assert!(f.may_contain(&key(i, 1)), "false negative for key {i}");
        }
        let fp = (0..n).filter(|&i| f.may_contain(&key(i, 2))).count();
        let rate = fp as f64 / n as f64;
        println!("false-positive rate at 10 bits/key: {rate:.4}");
        assert!(rate < 0.015, "false-positive rate {rate}");
    }

    #[test]
    fn empty_and_tiny_filters() {
        let f = Bloom::from_bytes(BloomBuilder::new(10).finish()).expect("valid filter");
        assert!(!f.may_contain(b"anything"));
        let mut b = BloomBuilder::new(1);
        b.add_key(b"a");
        let f = Bloom::from_bytes(b.finish()).expect("valid filter");
        assert!(f.may_contain(b"a"));
    }

    #[test]
    fn corrupt_bytes_are_rejected() {
        let mut b = BloomBuilder::new(10);
        b.add_key(b"x");
        let good = b.finish();
        assert!(Bloom::from_bytes(Vec::new()).is_err());
        assert!(Bloom::from_bytes(good[..good.len() - 1].to_vec()).is_err());
        let mut bad_kind = good.clone();
        bad_kind[0] = 9;
        assert!(matches!(
            Bloom::from_bytes(bad_kind),
            Err(Error::Corruption { .. })
        ));
        let mut bad_k = good.clone();
        bad_k[1] = 0;
        assert!(Bloom::from_bytes(bad_k).is_err());
        let mut bad_bits = good;
        bad_bits[2..10].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Bloom::from_bytes(bad_bits).is_err());
    }

    #[test]
    fn hash_is_stable() {
        // Part of the on-disk format: these values must never change.
        let pinned: [(&[u8], u64); 4] = [
            (b"", 0xf490_368a_ba8b_feac),
            (b"a", 0x50cf_cf60_e7d2_0673),
            (b"abcdefgh", 0x6227_7382_9fec_9852),
            (b"abcdefghi", 0x86b1_68ce_ab93_dccb),
        ];
        for (input, want) in pinned {
            assert_eq!(hash64(input), want, "hash64({input:?})");
        }
        assert_ne!(hash64(b"a"), hash64(b"b"));
        assert_ne!(hash64(b"abcdefgh"), hash64(b"abcdefgh\0"));
    }
}
