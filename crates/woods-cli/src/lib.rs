//! Library part of the `woods` command-line tool: the deterministic record generator shared by
//! `woods load`, `woods verify` and `woods bench` (it lives in `woods-bench`), the text
//! encoding of keys and values, and the keys, values and merge operator of `woods stress`.

pub mod encoding;
pub mod stress_model;
pub use woods_bench::gen;
