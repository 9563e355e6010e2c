//! Library part of the `woods` command-line tool: the deterministic record generator shared by
//! `woods load` and `woods verify`, and the text encoding of keys and values.

pub mod encoding;
pub mod gen;
