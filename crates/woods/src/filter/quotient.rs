//! A quotient filter over user keys, in the rank-and-select layout (Pandey et al. 2017), built
//! once from the sorted key hashes of a run (the `stbe` index's branch filter, SplinterDB's
//! choice: one hash per lookup, one or two cache lines touched, space within 0.8–1.2× a
//! blocked bloom filter).
//!
//! A key's [`hash64`](super::hash64) `h` gives an `r`-bit *remainder* (its low `r` bits) and a
//! *quotient* in `0..nq` (the high `64 - r` bits scaled to `nq`, so that `nq` need not be a
//! power of two). Remainders are stored in *runs*, one per occupied quotient, in quotient
//! order; a run starts at its quotient's slot or just after the previous run, whichever is
//! later. Two bit vectors describe the layout: `occupieds` (bit `x`: some key has quotient
//! `x`) and `runends` (bit `y`: slot `y` ends a run). Slots are grouped in blocks of 64; each
//! block stores, besides its 64 bits of each vector and its 64 remainders, its *spill*: the
//! number of runs of quotients before the block that end inside or after it, so that a lookup
//! finds the end of its run with two popcounts and a select, starting in its own block.
//!
//! `nq = ⌈n / 0.9⌉` for `n` distinct fingerprints, so the false-positive rate is about
//! `(n / nq) · 2⁻ʳ ≈ 0.9 / 2ʳ` (1/284 at the default `r = 8`, SplinterDB's 1/256 target), at
//! `(8 + 2.5) / 0.9 ≈ 11.7` bits per key.
//!
//! Serialized form (all integers little-endian), as [`QuotientBuilder::finish`] writes it and
//! [`QuotientFilter::from_bytes`] reads it:
//!
//! | offset | size | field                                                   |
//! |--------|------|---------------------------------------------------------|
//! | 0      | 1    | filter kind, `2` = this quotient filter                 |
//! | 1      | 1    | `r`, remainder bits (1..=16)                            |
//! | 2      | 8    | `nq`, quotient range (≥ 1)                              |
//! | 10     | 8    | `nb`, blocks (≥ 1, `64·nb ≥ nq`)                        |
//! | 18     | 8    | distinct fingerprints stored                            |
//! | 26     | `nb · (20 + 8r)` | the blocks                                     |
//!
//! Block: `occupieds u64`, `runends u64`, `spill u32`, then 64 remainders of `r` bits packed
//! little-endian (slot `j`'s remainder is bits `j·r .. j·r + r` of the `8r`-byte field). Blocks
//! past `nq / 64` hold the runs that overflow the end of the quotient range.

use crate::error::{Error, Result};

/// The filter kind byte of a quotient filter.
pub const KIND_QUOTIENT: u8 = 2;
/// Remainder bits giving SplinterDB's false-positive target of about 1/256.
pub const DEFAULT_REMAINDER_BITS: u32 = 8;
/// Bytes before the blocks.
const HEADER: usize = 26;
/// Bytes of a block before its remainders: occupieds, runends, spill.
const BLOCK_META: usize = 20;
/// Most remainder bits (remainders are read as at most three bytes).
const MAX_REMAINDER_BITS: u32 = 16;
/// Most blocks a probe reads: a run ending further from its quotient's block answers "may
/// contain" (at a load of at most 0.9 no run comes near; a damaged spill count could otherwise
/// send a probe of a paged filter through every page).
const MAX_PROBE_BLOCKS: u64 = 64;

fn block_bytes(r: u32) -> usize {
    BLOCK_META + 8 * r as usize
}

/// The quotient range for `n` distinct fingerprints: load factor at most 0.9.
fn quotient_range(n: u64) -> u64 {
    n.saturating_mul(10).div_ceil(9).max(1)
}

/// Quotient and remainder of a hash for a filter with `nq` quotients and `r` remainder bits.
#[inline]
fn split(h: u64, nq: u64, r: u32) -> (u64, u64) {
    let high = h >> r;
    let q = ((u128::from(high) * u128::from(nq)) >> (64 - r)) as u64;
    (q, h & ((1u64 << r) - 1))
}

/// Prefetches the cache line at `p` (and nothing elsewhere than x86-64).
#[inline]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch neither reads nor faults: any address is allowed, and `p` points
    // into a live slice anyway.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Position of the `k`-th set bit (0-based) of `w`; `k < w.count_ones()`.
#[inline]
fn select64(mut w: u64, k: u32) -> u64 {
    for _ in 0..k {
        w &= w - 1;
    }
    u64::from(w.trailing_zeros())
}

/// Collects key hashes and produces the serialized filter sized for them. It keeps one `u64`
/// per added key until [`QuotientBuilder::finish`], like the bloom builder. Adding a key twice
/// is harmless (fingerprints are deduplicated).
#[derive(Debug)]
pub struct QuotientBuilder {
    r: u32,
    hashes: Vec<u64>,
}

impl QuotientBuilder {
    /// A builder with `remainder_bits` bits per remainder (clamped to 1..=16).
    pub fn new(remainder_bits: u32) -> QuotientBuilder {
        QuotientBuilder {
            r: remainder_bits.clamp(1, MAX_REMAINDER_BITS),
            hashes: Vec::new(),
        }
    }

    /// Adds one key.
    pub fn add_key(&mut self, key: &[u8]) {
        self.hashes.push(super::hash64(key));
    }

    /// Adds a key by its [`hash64`](super::hash64).
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

    /// The serialized filter (format in the module documentation), in one go.
    pub fn finish(self) -> Vec<u8> {
        let mut f = self.start_finish();
        while !f.step(usize::MAX) {}
        f.into_bytes()
    }

    /// Starts building the filter in bounded steps ([`QuotientFinish::step`]).
    pub fn start_finish(self) -> QuotientFinish {
        QuotientFinish::new(self.r, self.hashes)
    }
}

/// Phases of a quotient filter's construction.
#[derive(Debug)]
enum Phase {
    /// Turning hashes into fingerprints in place and counting them per bucket.
    Count {
        pos: usize,
    },
    /// Moving fingerprints to their bucket.
    Scatter {
        pos: usize,
    },
    /// Sorting bucket `b` and laying out its runs.
    Layout {
        b: usize,
    },
    /// Writing block `b`'s bit vectors and spill count.
    Blocks {
        b: usize,
    },
    Done,
}

/// A quotient filter being built from its keys' hashes in steps of bounded work: fingerprints
/// are bucketed by quotient range (a counting sort), each bucket is sorted and laid out in
/// order, then the blocks' metadata is written. The result equals [`QuotientBuilder::finish`].
#[derive(Debug)]
pub struct QuotientFinish {
    r: u32,
    nq: u64,
    bb: usize,
    shift: u32,
    fps: Vec<u64>,
    tmp: Vec<u64>,
    /// Start of each bucket in `tmp` (one more than the buckets).
    starts: Vec<usize>,
    out: Vec<u8>,
    occ: Vec<u64>,
    ends: Vec<u64>,
    next_free: u64,
    last: Option<u64>,
    keys: u64,
    occ_before: u64,
    ends_before: u64,
    phase: Phase,
}

impl QuotientFinish {
    fn new(r: u32, hashes: Vec<u64>) -> QuotientFinish {
        // The table is sized for the keys added: the caller adds each distinct key once (a
        // repeated key only lowers the load a little).
        let nq = quotient_range(hashes.len() as u64);
        // Buckets of about 256 fingerprints, by the high bits of the quotient.
        let buckets = (hashes.len() / 256).clamp(1, 1 << 16) as u64;
        let mut shift = 0;
        while (nq - 1) >> shift >= buckets {
            shift += 1;
        }
        let nbuckets = ((nq - 1) >> shift) as usize + 1;
        QuotientFinish {
            r,
            nq,
            bb: block_bytes(r),
            shift,
            fps: hashes,
            tmp: Vec::new(),
            starts: vec![0; nbuckets + 1],
            out: Vec::new(),
            occ: Vec::new(),
            ends: Vec::new(),
            next_free: 0,
            last: None,
            keys: 0,
            occ_before: 0,
            ends_before: 0,
            phase: Phase::Count { pos: 0 },
        }
    }

    /// Makes sure blocks up to `b` exist.
    fn grow(&mut self, b: usize) {
        if self.occ.len() <= b {
            self.occ.resize(b + 1, 0);
            self.ends.resize(b + 1, 0);
            self.out.resize(HEADER + (b + 1) * self.bb, 0);
        }
    }

    /// Does about `budget` fingerprints' worth of work; true when the filter is complete.
    pub fn step(&mut self, budget: usize) -> bool {
        let mut left = budget.max(1);
        let r = self.r;
        let mask = (1u64 << r) - 1;
        loop {
            match self.phase {
                Phase::Count { pos } => {
                    let end = pos.saturating_add(left).min(self.fps.len());
                    for i in pos..end {
                        let (q, rem) = split(self.fps[i], self.nq, r);
                        self.fps[i] = (q << r) | rem;
                        self.starts[(q >> self.shift) as usize + 1] += 1;
                    }
                    left -= (end - pos).min(left);
                    self.phase = Phase::Count { pos: end };
                    if end < self.fps.len() {
                        return false;
                    }
                    for i in 1..self.starts.len() {
                        self.starts[i] += self.starts[i - 1];
                    }
                    self.tmp = vec![0; self.fps.len()];
                    self.phase = Phase::Scatter { pos: 0 };
                }
                Phase::Scatter { pos } => {
                    // `starts[b]` serves as bucket b's fill cursor here; it is rebuilt below.
                    let end = pos.saturating_add(left).min(self.fps.len());
                    for i in pos..end {
                        let x = self.fps[i];
                        let b = ((x >> r) >> self.shift) as usize;
                        self.tmp[self.starts[b]] = x;
                        self.starts[b] += 1;
                    }
                    left -= (end - pos).min(left);
                    self.phase = Phase::Scatter { pos: end };
                    if end < self.fps.len() {
                        return false;
                    }
                    // Every cursor now sits at its bucket's end: shift them back to starts.
                    for b in (1..self.starts.len()).rev() {
                        self.starts[b] = self.starts[b - 1];
                    }
                    self.starts[0] = 0;
                    self.fps = Vec::new();
                    self.phase = Phase::Layout { b: 0 };
                }
                Phase::Layout { b } => {
                    let b0 = b;
                    if b0 + 1 >= self.starts.len() {
                        let nb = self.nq.max(self.next_free).div_ceil(64).max(1) as usize;
                        self.grow(nb - 1);
                        self.tmp = Vec::new();
                        self.phase = Phase::Blocks { b: 0 };
                        continue;
                    }
                    let (lo, hi) = (self.starts[b0], self.starts[b0 + 1]);
                    self.tmp[lo..hi].sort_unstable();
                    for i in lo..hi {
                        let fp = self.tmp[i];
                        if self.last == Some(fp) {
                            continue;
                        }
                        let q = fp >> r;
                        let same_run = self.last.is_some_and(|l| l >> r == q);
                        let slot = if same_run {
                            // Extend the run: its end moves to the next slot.
                            let prev = self.next_free - 1;
                            self.ends[(prev / 64) as usize] &= !(1 << (prev % 64));
                            self.next_free
                        } else {
                            q.max(self.next_free)
                        };
                        self.grow((slot / 64) as usize);
                        put_rem(&mut self.out, self.bb, r, slot, fp & mask);
                        self.occ[(q / 64) as usize] |= 1 << (q % 64);
                        self.ends[(slot / 64) as usize] |= 1 << (slot % 64);
                        self.next_free = slot + 1;
                        self.last = Some(fp);
                        self.keys += 1;
                    }
                    left = left.saturating_sub((hi - lo).max(1));
                    self.phase = Phase::Layout { b: b0 + 1 };
                    if left == 0 {
                        return false;
                    }
                }
                Phase::Blocks { b } => {
                    let nb = self.occ.len();
                    let end = b.saturating_add(left / 64 + 1).min(nb);
                    for i in b..end {
                        let base = HEADER + i * self.bb;
                        self.out[base..base + 8].copy_from_slice(&self.occ[i].to_le_bytes());
                        self.out[base + 8..base + 16].copy_from_slice(&self.ends[i].to_le_bytes());
                        let spill = (self.occ_before - self.ends_before) as u32;
                        self.out[base + 16..base + 20].copy_from_slice(&spill.to_le_bytes());
                        self.occ_before += u64::from(self.occ[i].count_ones());
                        self.ends_before += u64::from(self.ends[i].count_ones());
                    }
                    left = left.saturating_sub((end - b) * 64);
                    self.phase = Phase::Blocks { b: end };
                    if end < nb {
                        return false;
                    }
                    self.out[0] = KIND_QUOTIENT;
                    self.out[1] = r as u8;
                    self.out[2..10].copy_from_slice(&self.nq.to_le_bytes());
                    self.out[10..18].copy_from_slice(&(nb as u64).to_le_bytes());
                    self.out[18..26].copy_from_slice(&self.keys.to_le_bytes());
                    self.phase = Phase::Done;
                }
                Phase::Done => return true,
            }
        }
    }

    /// The serialized filter (call once [`QuotientFinish::step`] returned true).
    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }
}

fn put_rem(out: &mut [u8], bb: usize, r: u32, slot: u64, rem: u64) {
    let base = HEADER + (slot / 64) as usize * bb + BLOCK_META;
    let bit = (slot % 64) as usize * r as usize;
    let v = rem << (bit % 8);
    for t in 0..3 {
        let byte = (v >> (8 * t)) as u8;
        if byte != 0 {
            out[base + bit / 8 + t] |= byte;
        }
    }
}

/// A loaded quotient filter.
#[derive(Clone, Debug)]
pub struct QuotientFilter {
    shape: Shape,
    data: Vec<u8>,
}

fn bad(detail: String) -> Error {
    Error::corruption("quotient filter", None, detail)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// What a lookup needs of a quotient filter besides its blocks: the header's fields. A run
/// whose filter does not fit the cache's share for filters keeps only this, and reads the
/// blocks a lookup touches from the filter's pages ([`Shape::probe`] over a [`Blocks`] source).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    r: u32,
    nq: u64,
    nb: u64,
    keys: u64,
    bb: usize,
}

/// Where a lookup finds a quotient filter's blocks: the filter's bytes in memory, or its pages.
pub trait Blocks {
    /// The bytes of blocks `first..first + n` of the filter, contiguous (`n` ≥ 1 and `first +
    /// n` at most the filter's blocks; `n` block sizes long, or an error).
    fn blocks(&mut self, first: u64, n: u64) -> Result<&[u8]>;
}

/// The blocks of a filter whose serialized bytes are in memory (blocks past them are an
/// error).
pub struct InMemory<'a> {
    data: &'a [u8],
    shape: Shape,
}

impl<'a> InMemory<'a> {
    /// The blocks of `data`, a filter of shape `shape`.
    pub fn new(data: &'a [u8], shape: Shape) -> InMemory<'a> {
        InMemory { data, shape }
    }
}

impl Blocks for InMemory<'_> {
    #[inline]
    fn blocks(&mut self, first: u64, n: u64) -> Result<&[u8]> {
        let at = self.shape.block_offset(first) as usize;
        self.data
            .get(at..at + n as usize * self.shape.bb)
            .ok_or_else(|| bad(format!("blocks {first}..+{n} past the filter's bytes")))
    }
}

impl Shape {
    /// Parses the header from a filter's first bytes (`head`, at least the header) and checks
    /// it against the filter's serialized length, which lies in `len - slack + 1..=len`
    /// (`slack` 1: exactly `len`; a page's payload for a filter whose last page was not read).
    pub fn parse(head: &[u8], len: u64, slack: u64) -> Result<Shape> {
        if head.len() < HEADER {
            return Err(bad(format!(
                "{} bytes is shorter than the {HEADER}-byte header",
                head.len()
            )));
        }
        if head[0] != KIND_QUOTIENT {
            return Err(bad(format!("unknown filter kind {}", head[0])));
        }
        let r = u32::from(head[1]);
        if !(1..=MAX_REMAINDER_BITS).contains(&r) {
            return Err(bad(format!(
                "{r} remainder bits is outside 1..={MAX_REMAINDER_BITS}"
            )));
        }
        let (nq, nb, keys) = (le64(head, 2), le64(head, 10), le64(head, 18));
        let bb = block_bytes(r);
        let want = (nb as usize)
            .checked_mul(bb)
            .and_then(|x| x.checked_add(HEADER))
            .filter(|_| nb <= (usize::MAX / 64) as u64)
            .map(|w| w as u64);
        let fits = want.is_some_and(|w| w <= len && w + slack > len);
        if nq == 0 || nb == 0 || nb.saturating_mul(64) < nq || !fits {
            return Err(bad(format!(
                "{nq} quotients in {nb} blocks does not match {len} bytes"
            )));
        }
        if keys > nb * 64 {
            return Err(bad(format!("{keys} keys in {} slots", nb * 64)));
        }
        Ok(Shape {
            r,
            nq,
            nb,
            keys,
            bb,
        })
    }

    /// Where block `b` begins in the serialized filter.
    pub fn block_offset(&self, b: u64) -> u64 {
        HEADER as u64 + b * self.bb as u64
    }

    /// Bytes of one block.
    pub fn block_bytes(&self) -> usize {
        self.bb
    }

    /// Whether a key of hash `h` may have been added, reading the blocks it needs (one, or a
    /// few where its run crosses a block's end) from `src`. Never panics, whatever bytes `src`
    /// gives: bytes that contradict each other answer `true` (never a false negative) or
    /// `false` for that key alone; [`QuotientFilter::from_bytes`] checks a whole filter's.
    #[inline]
    pub fn probe<S: Blocks>(&self, h: u64, src: &mut S) -> Result<bool> {
        if self.keys == 0 {
            return Ok(false);
        }
        let bb = self.bb;
        let (q, rem) = split(h, self.nq, self.r);
        let b = q / 64;
        if b >= self.nb {
            return Ok(true);
        }
        let i = (q % 64) as u32;
        let mut w = src.blocks(b, 1)?;
        let occ = le64(w, 0);
        if occ >> i & 1 == 0 {
            return Ok(false);
        }
        // The run of q ends at the k-th run end at or after the block's first slot.
        let mask = if i == 63 {
            u64::MAX
        } else {
            (1u64 << (i + 1)) - 1
        };
        let spill = u32::from_le_bytes([w[16], w[17], w[18], w[19]]);
        let mut k = u64::from((occ & mask).count_ones()) - 1 + u64::from(spill);
        let mut n = 1;
        let mut x = b;
        let end = loop {
            if x >= self.nb || x - b >= MAX_PROBE_BLOCKS {
                // Only damaged bytes (or a run longer than any at the filter's load) get here;
                // never answer with a false negative.
                return Ok(true);
            }
            if x >= b + n {
                n = x - b + 1;
                w = src.blocks(b, n)?;
            }
            let ends = le64(w, (x - b) as usize * bb + 8);
            let c = u64::from(ends.count_ones());
            if k < c {
                break x * 64 + select64(ends, k as u32);
            }
            k -= c;
            x += 1;
        };
        // Remainders of a run ascend: scan it from its end down to its quotient's slot. Every
        // slot scanned lies in blocks b..b + n (from the end, at most down to q).
        let is_runend = |w: &[u8], slot: u64| {
            let at = (slot / 64 - b) as usize * bb + 8;
            le64(w, at) >> (slot % 64) & 1 == 1
        };
        let mut slot = end;
        loop {
            let x = rem_at(w, (slot / 64 - b) as usize * bb, self.r, slot);
            if x == rem {
                return Ok(true);
            }
            if x < rem || slot <= q {
                return Ok(false);
            }
            slot -= 1;
            if is_runend(w, slot) {
                return Ok(false);
            }
        }
    }
}

/// The remainder of `slot`, whose block begins at `block` in `w`.
#[inline]
fn rem_at(w: &[u8], block: usize, r: u32, slot: u64) -> u64 {
    let base = block + BLOCK_META;
    let j = (slot % 64) as usize;
    if r == 8 {
        return u64::from(w[base + j]);
    }
    let bit = j * r as usize;
    let at = base + bit / 8;
    let mut x = 0u64;
    for t in 0..3 {
        if let Some(&y) = w.get(at + t) {
            x |= u64::from(y) << (8 * t);
        }
    }
    (x >> (bit % 8)) & ((1u64 << r) - 1)
}

impl QuotientFilter {
    /// Parses a serialized filter, checking every header field, the size, and that the blocks'
    /// bit vectors and spill counts agree (a bad one is `Error::Corruption`). Lookups on any
    /// accepted bytes never panic.
    pub fn from_bytes(data: Vec<u8>) -> Result<QuotientFilter> {
        let shape = Shape::parse(&data, data.len() as u64, 1)?;
        let f = QuotientFilter { shape, data };
        let (mut occ_before, mut ends_before) = (0u64, 0u64);
        for b in 0..shape.nb {
            let occ = f.occupieds(b);
            if occ != 0 && b * 64 + 63 - u64::from(occ.leading_zeros()) >= shape.nq {
                return Err(bad(format!(
                    "block {b} marks a quotient beyond {}",
                    shape.nq
                )));
            }
            if u64::from(f.spill(b)) != occ_before.wrapping_sub(ends_before)
                || ends_before > occ_before
            {
                return Err(bad(format!(
                    "block {b}: spill count disagrees with the runs"
                )));
            }
            occ_before += u64::from(occ.count_ones());
            ends_before += u64::from(f.runends(b).count_ones());
        }
        if occ_before != ends_before {
            return Err(bad(format!(
                "{occ_before} occupied quotients but {ends_before} run ends"
            )));
        }
        Ok(f)
    }

    fn block(&self, b: u64) -> usize {
        self.shape.block_offset(b) as usize
    }

    fn occupieds(&self, b: u64) -> u64 {
        le64(&self.data, self.block(b))
    }

    fn runends(&self, b: u64) -> u64 {
        le64(&self.data, self.block(b) + 8)
    }

    fn spill(&self, b: u64) -> u32 {
        let at = self.block(b) + 16;
        u32::from_le_bytes([
            self.data[at],
            self.data[at + 1],
            self.data[at + 2],
            self.data[at + 3],
        ])
    }

    /// Whether `key` may have been added: `false` is certain, `true` may be a false positive.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(super::hash64(key))
    }

    /// [`QuotientFilter::may_contain`] for a key already hashed with
    /// [`hash64`](super::hash64).
    pub fn may_contain_hash(&self, h: u64) -> bool {
        let mut src = InMemory::new(&self.data, self.shape);
        self.shape.probe(h, &mut src).unwrap_or(true)
    }

    /// Asks the processor to bring the block a probe of `h` starts at into its cache (a
    /// prefetch: it does not wait). Called for several filters before probing them one after
    /// another, so that their blocks, each a cache miss in a filter of megabytes, arrive
    /// together rather than one miss after another.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        let s = &self.shape;
        let (q, _) = split(h, s.nq, s.r);
        if let Some(b) = self.data.get(self.block(q / 64)..) {
            prefetch(b.as_ptr());
        }
    }

    /// The header's fields: what a lookup reading the blocks from elsewhere needs.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The serialized form.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Remainder bits per fingerprint.
    pub fn remainder_bits(&self) -> u32 {
        self.shape.r
    }

    /// Distinct fingerprints stored.
    pub fn keys(&self) -> u64 {
        self.shape.keys
    }

    /// The quotient range (canonical slots).
    pub fn quotients(&self) -> u64 {
        self.shape.nq
    }

    /// The expected false-positive rate of a lookup of an absent key: load factor × 2⁻ʳ.
    pub fn expected_fp_rate(&self) -> f64 {
        let s = &self.shape;
        s.keys as f64 / s.nq as f64 / (1u64 << s.r) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64, salt: u64) -> Vec<u8> {
        format!("key-{salt}-{i:010}").into_bytes()
    }

    fn build(n: u64, r: u32, salt: u64) -> QuotientFilter {
        let mut b = QuotientBuilder::new(r);
        for i in 0..n {
            b.add_key(&key(i, salt));
        }
        QuotientFilter::from_bytes(b.finish()).expect("valid filter")
    }

    #[test]
    fn no_false_negatives_and_fp_rate_near_target() {
        for (n, r) in [
            (100_000u64, 8u32),
            (30_000, 5),
            (20_000, 13),
            (3, 8),
            (64, 1),
        ] {
            let f = build(n, r, 1);
            for i in 0..n {
                assert!(
                    f.may_contain(&key(i, 1)),
                    "false negative: n {n} r {r} key {i}"
                );
            }
            let trials = 1_000_000u64;
            let fp = (0..trials).filter(|&i| f.may_contain(&key(i, 2))).count();
            let rate = fp as f64 / trials as f64;
            let want = f.expected_fp_rate();
            println!("n {n} r {r}: false-positive rate {rate:.5}, expected {want:.5}");
            if n >= 1000 {
                assert!(
                    (0.8 * want..1.2 * want).contains(&rate),
                    "n {n} r {r}: false-positive rate {rate}, expected about {want}"
                );
            }
        }
        // The default setting is SplinterDB's 1/256 target (0.9/256 at full load).
        let f = build(200_000, DEFAULT_REMAINDER_BITS, 3);
        let rate = (0..1_000_000u64)
            .filter(|&i| f.may_contain(&key(i, 4)))
            .count() as f64
            / 1e6;
        assert!(rate < 1.0 / 256.0 && rate > 0.5 / 256.0, "rate {rate}");
        // About 11.7 bits per key.
        let bits = f.as_bytes().len() as f64 * 8.0 / 200_000.0;
        assert!(bits < 12.5, "{bits} bits per key");
    }

    #[test]
    fn duplicates_and_empty() {
        let mut b = QuotientBuilder::new(8);
        for _ in 0..5 {
            b.add_key(b"same");
        }
        let f = QuotientFilter::from_bytes(b.finish()).expect("valid");
        assert_eq!(f.keys(), 1);
        assert!(f.may_contain(b"same"));
        let empty = QuotientFilter::from_bytes(QuotientBuilder::new(8).finish()).expect("valid");
        assert_eq!(empty.keys(), 0);
        assert!(!empty.may_contain(b"anything"));
    }

    #[test]
    fn crowded_quotients_overflow_into_extra_blocks() {
        // Hashes chosen so that every fingerprint has the last quotient: the runs must spill
        // past the quotient range into overflow blocks and still be found.
        let mut b = QuotientBuilder::new(8);
        let hashes: Vec<u64> = (0..200u64).map(|i| u64::MAX - i).collect();
        for &h in &hashes {
            b.add_hash(h);
        }
        let f = QuotientFilter::from_bytes(b.finish()).expect("valid");
        for &h in &hashes {
            assert!(f.may_contain_hash(h));
        }
        assert!(f.shape.nb * 64 > f.shape.nq, "no overflow blocks");
    }

    /// A filter's bytes cut into pieces of `piece` bytes (a run's filter pages), read back
    /// piece by piece and copied where a request spans pieces, counting the pieces read.
    struct Pieces<'a> {
        data: &'a [u8],
        shape: Shape,
        piece: usize,
        buf: Vec<u8>,
        read: usize,
    }

    impl Blocks for Pieces<'_> {
        fn blocks(&mut self, first: u64, n: u64) -> Result<&[u8]> {
            let start = self.shape.block_offset(first) as usize;
            let end = start + n as usize * self.shape.block_bytes();
            self.buf.clear();
            let mut at = start;
            while at < end {
                let stop = ((at / self.piece + 1) * self.piece).min(end);
                self.buf.extend_from_slice(&self.data[at..stop]);
                self.read += 1;
                at = stop;
            }
            Ok(&self.buf)
        }
    }

    /// The probe over blocks read a piece at a time answers as the filter in memory does, for
    /// stored and absent keys, with crowded quotients too, and reads a piece or two a lookup.
    #[test]
    fn blocks_read_piece_by_piece_answer_as_the_whole_filter() {
        let mut crowded = QuotientBuilder::new(8);
        (0..300u64).for_each(|i| crowded.add_hash(u64::MAX - i * 3));
        let crowded = QuotientFilter::from_bytes(crowded.finish()).expect("valid");
        for (f, name) in [
            (build(50_000, 8, 5), "r 8"),
            (build(20_000, 11, 6), "r 11"),
            (crowded, "crowded"),
        ] {
            let shape = Shape::parse(
                &f.as_bytes()[..HEADER],
                f.as_bytes().len() as u64 + 100,
                4068,
            )
            .expect("header");
            assert_eq!(shape, f.shape());
            for piece in [37usize, 4068] {
                let mut src = Pieces {
                    data: f.as_bytes(),
                    shape,
                    piece,
                    buf: Vec::new(),
                    read: 0,
                };
                let hashes = (0..20_000u64)
                    .map(|i| super::super::hash64(&key(i, 5)))
                    .chain((0..20_000u64).map(|i| super::super::hash64(&key(i, 9))))
                    .chain((0..300u64).map(|i| u64::MAX - i));
                let mut probes = 0;
                for h in hashes {
                    let paged = shape.probe(h, &mut src).expect("in bounds");
                    assert_eq!(paged, f.may_contain_hash(h), "{name}, pieces of {piece}");
                    probes += 1;
                }
                let per = src.read as f64 / probes as f64;
                println!("{name}, pieces of {piece}: {per:.3} pieces read a probe");
                if piece == 4068 && name != "crowded" {
                    assert!(per < 1.1, "{name}: {per} pages a probe");
                }
            }
        }
        // A header that does not fit the pages it is said to lie in is refused.
        let f = build(1_000, 8, 1);
        let len = f.as_bytes().len() as u64;
        assert!(Shape::parse(f.as_bytes(), len + 4068, 4068).is_err());
        assert!(Shape::parse(f.as_bytes(), len - 1, 4068).is_err());
        assert!(Shape::parse(&f.as_bytes()[..HEADER - 1], len, 1).is_err());
    }

    /// Damaged blocks under a sound header (what a paged filter's reader may get from a page
    /// whose checksum still held): probes answer, never panic.
    #[test]
    fn probes_over_damaged_blocks_never_panic() {
        let f = build(5_000, 8, 3);
        let shape = f.shape();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..200 {
            let mut bytes = f.as_bytes().to_vec();
            for _ in 0..1 + round % 40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = HEADER + (x as usize) % (bytes.len() - HEADER);
                bytes[at] ^= (x >> 32) as u8 | 1;
            }
            let mut src = Pieces {
                data: &bytes,
                shape,
                piece: 4068,
                buf: Vec::new(),
                read: 0,
            };
            for i in 0..2_000u64 {
                let h = super::super::hash64(&key(i, 3 + round % 2));
                let _ = shape.probe(h, &mut src);
            }
        }
    }

    #[test]
    fn stepwise_build_equals_one_shot() {
        for n in [0u64, 1, 300, 70_000] {
            let hashes: Vec<u64> = (0..n).map(|i| super::super::hash64(&key(i, 7))).collect();
            let mut one = QuotientBuilder::new(8);
            let mut steps = QuotientBuilder::new(8);
            for &h in &hashes {
                one.add_hash(h);
                steps.add_hash(h);
            }
            let a = one.finish();
            let mut f = steps.start_finish();
            let mut calls = 0;
            while !f.step(1000) {
                calls += 1;
            }
            assert_eq!(f.into_bytes(), a, "n {n}");
            if n == 70_000 {
                assert!(calls > 50, "{calls} steps");
            }
            let q = QuotientFilter::from_bytes(a).expect("valid");
            for &h in &hashes {
                assert!(q.may_contain_hash(h));
            }
        }
    }

    #[test]
    fn round_trip() {
        let f = build(5_000, 8, 9);
        let g = QuotientFilter::from_bytes(f.as_bytes().to_vec()).expect("re-read");
        assert_eq!(f.as_bytes(), g.as_bytes());
        // Distinct fingerprints: a few of the 5000 keys collide.
        assert!(
            (4_900..=5_000).contains(&g.keys()),
            "{} fingerprints",
            g.keys()
        );
        assert_eq!((g.quotients(), g.remainder_bits()), (f.shape.nq, 8));
        for i in 0..5_000 {
            assert!(g.may_contain(&key(i, 9)));
        }
    }

    #[test]
    fn corrupt_bytes_are_errors_never_panics() {
        let good = {
            let mut b = QuotientBuilder::new(8);
            for i in 0..3_000 {
                b.add_key(&key(i, 5));
            }
            b.finish()
        };
        assert!(QuotientFilter::from_bytes(Vec::new()).is_err());
        assert!(QuotientFilter::from_bytes(good[..good.len() - 1].to_vec()).is_err());
        for (at, v) in [(0usize, 1u8), (1, 0), (1, 17)] {
            let mut b = good.clone();
            b[at] = v;
            assert!(matches!(
                QuotientFilter::from_bytes(b),
                Err(Error::Corruption { .. })
            ));
        }
        for (at, v) in [
            (2usize, u64::MAX),
            (2, 0),
            (10, 1),
            (10, u64::MAX / 3),
            (18, u64::MAX),
        ] {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            assert!(
                QuotientFilter::from_bytes(b).is_err(),
                "field at {at} = {v}"
            );
        }
        // Flipped bits anywhere: either refused or answers without panicking.
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut refused = 0;
        for _ in 0..2_000 {
            let mut b = good.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % b.len() as u64) as usize;
                b[at] ^= 1 << (next() % 8);
            }
            match QuotientFilter::from_bytes(b) {
                Ok(f) => {
                    for i in 0..200 {
                        let _ = f.may_contain(&key(i, 5));
                        let _ = f.may_contain_hash(next());
                    }
                }
                Err(_) => refused += 1,
            }
        }
        assert!(refused > 0, "no damaged filter was refused");
    }
}
