//! Filters over run keys: probabilistic membership tests that let a lookup skip a run whose
//! pages cannot hold the key.
//!
//! - [`bloom`]: a classic bloom filter with double hashing, stored with each run.

pub mod bloom;

pub use bloom::{hash64, Bloom, BloomBuilder};
