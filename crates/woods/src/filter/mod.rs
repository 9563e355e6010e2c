//! Filters over run keys: probabilistic membership tests that let a lookup skip a run whose
//! pages cannot hold the key.
//!
//! - [`bloom`]: a classic bloom filter with double hashing (the runs of databases written
//!   before partitioned filters, and `pbt`'s partitions).
//! - [`partitioned`]: bloom filters of a page each over consecutive key ranges, what runs are
//!   built with now: a lookup reads one page of it, so a run's filter need not be in memory.
//! - [`quotient`]: a quotient filter (rank-and-select layout), bulk-built from sorted hashes;
//!   a lookup touches one block of it (or a few), so it too can be read a page at a time.
//!
//! Each hashes a key once with [`hash64`]; the serialized form of each starts with a
//! filter-kind byte (1 bloom, 2 quotient, 4 a partition of a partitioned filter), which is how
//! a run's reader tells them apart ([`Filter`]).

pub mod bloom;
pub mod partitioned;
pub mod quotient;

pub use bloom::{hash64, hash64_seeded, Bloom, BloomBuilder, BloomFinish};
pub use partitioned::{PartitionIndex, PartitionedBloom, PartitionedBuilder};
pub use quotient::{QuotientBuilder, QuotientFilter, QuotientFinish, Shape as QuotientShape};

use crate::error::{Error, Result};

/// Which filter a run is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterSpec {
    /// No filter.
    None,
    /// A bloom filter of `bits_per_key` bits per distinct key, partitioned by key range
    /// ([`partitioned`]).
    Bloom { bits_per_key: u32 },
    /// A quotient filter with `remainder_bits` bits per remainder (false-positive rate about
    /// 0.9 · 2⁻ʳ).
    Quotient { remainder_bits: u32 },
}

/// A loaded filter of any kind.
#[derive(Clone, Debug)]
pub enum Filter {
    Bloom(Bloom),
    Partitioned(PartitionedBloom),
    Quotient(QuotientFilter),
}

impl Filter {
    /// Parses a serialized filter of any kind, by its kind byte.
    pub fn from_bytes(data: Vec<u8>) -> Result<Filter> {
        match data.first() {
            Some(&quotient::KIND_QUOTIENT) => {
                QuotientFilter::from_bytes(data).map(Filter::Quotient)
            }
            Some(&partitioned::KIND_PARTITION) => {
                PartitionedBloom::from_bytes(data).map(Filter::Partitioned)
            }
            Some(_) => Bloom::from_bytes(data).map(Filter::Bloom),
            None => Err(Error::corruption("filter", None, "empty filter")),
        }
    }

    /// Whether `key`, whose [`hash64`] is `h`, may be present (`false` is certain).
    pub fn may_contain_hashed(&self, key: &[u8], h: u64) -> bool {
        match self {
            Filter::Bloom(b) => b.may_contain_hash(h),
            Filter::Partitioned(p) => p.may_contain_hashed(key, h),
            Filter::Quotient(q) => q.may_contain_hash(h),
        }
    }

    /// Whether `key` may be present (`false` is certain).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hashed(key, hash64(key))
    }

    /// The serialized form (what the filter occupies in memory).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Filter::Bloom(b) => b.as_bytes(),
            Filter::Partitioned(p) => p.as_bytes(),
            Filter::Quotient(q) => q.as_bytes(),
        }
    }
}

/// Collects the keys of a run being built, for either filter kind.
#[derive(Debug)]
pub(crate) enum FilterBuilder {
    Partitioned(PartitionedBuilder),
    Quotient(QuotientBuilder),
}

impl FilterBuilder {
    /// The builder for a spec (`None` for [`FilterSpec::None`]).
    pub(crate) fn for_spec(spec: FilterSpec) -> Option<FilterBuilder> {
        match spec {
            FilterSpec::None => None,
            FilterSpec::Bloom { bits_per_key } if bits_per_key > 0 => Some(
                FilterBuilder::Partitioned(PartitionedBuilder::new(bits_per_key)),
            ),
            FilterSpec::Bloom { .. } => None,
            FilterSpec::Quotient { remainder_bits } => Some(FilterBuilder::Quotient(
                QuotientBuilder::new(remainder_bits),
            )),
        }
    }

    pub(crate) fn add_key(&mut self, key: &[u8]) {
        match self {
            FilterBuilder::Partitioned(b) => b.add_key(key),
            FilterBuilder::Quotient(q) => q.add_key(key),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            FilterBuilder::Partitioned(b) => b.is_empty(),
            FilterBuilder::Quotient(q) => q.is_empty(),
        }
    }

    /// Starts building the filter in bounded steps.
    pub(crate) fn start_finish(self) -> FilterFinish {
        match self {
            // A partition's bits are set when it fills: what is left is one partition and the
            // separators.
            FilterBuilder::Partitioned(b) => FilterFinish::Partitioned(b.finish()),
            FilterBuilder::Quotient(q) => FilterFinish::Quotient(Box::new(q.start_finish())),
        }
    }
}

/// A filter of either kind being built in bounded steps.
#[derive(Debug)]
pub(crate) enum FilterFinish {
    /// Complete (`None`: no key was added).
    Partitioned(Option<Vec<u8>>),
    Quotient(Box<QuotientFinish>),
}

impl FilterFinish {
    /// Does about `budget` keys' worth of work; true when the filter is complete.
    pub(crate) fn step(&mut self, budget: usize) -> bool {
        match self {
            FilterFinish::Partitioned(_) => true,
            FilterFinish::Quotient(q) => q.step(budget),
        }
    }

    /// The serialized filter (once `step` returned true).
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        match self {
            FilterFinish::Partitioned(b) => b.unwrap_or_default(),
            FilterFinish::Quotient(q) => q.into_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_kind_loads_by_its_kind_byte() {
        let mut b = FilterBuilder::for_spec(FilterSpec::Bloom { bits_per_key: 10 }).expect("bloom");
        let mut q =
            FilterBuilder::for_spec(FilterSpec::Quotient { remainder_bits: 8 }).expect("qf");
        for i in 0..100u32 {
            b.add_key(&i.to_le_bytes());
            q.add_key(&i.to_le_bytes());
        }
        let finish = |f: FilterBuilder| {
            let mut f = f.start_finish();
            while !f.step(10) {}
            f.into_bytes()
        };
        let b = Filter::from_bytes(finish(b)).expect("bloom loads");
        let q = Filter::from_bytes(finish(q)).expect("quotient loads");
        assert!(matches!(b, Filter::Partitioned(_)));
        assert!(matches!(q, Filter::Quotient(_)));
        for i in 0..100u32 {
            assert!(b.may_contain(&i.to_le_bytes()) && q.may_contain(&i.to_le_bytes()));
        }
        assert!(FilterBuilder::for_spec(FilterSpec::None).is_none());
        assert!(FilterBuilder::for_spec(FilterSpec::Bloom { bits_per_key: 0 }).is_none());
        assert!(Filter::from_bytes(Vec::new()).is_err());
        assert!(Filter::from_bytes(vec![7, 0, 0]).is_err());
    }
}
