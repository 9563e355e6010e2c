//! Library part of the `woods` command-line tool: the deterministic record generator shared by
//! `woods load`, `woods verify` and `woods bench` (it lives in `woods-bench`), and the text
//! encoding of keys and values.

pub mod encoding;
pub use woods_bench::gen;
