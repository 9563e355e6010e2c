//! woods: an embedded key-value storage engine for insertion-intensive workloads.

pub mod cache;
pub mod entry;
pub mod error;
pub mod storage;

pub use entry::{Entry, Kind, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use error::{Error, Result};
