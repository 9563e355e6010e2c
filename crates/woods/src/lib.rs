//! woods: an embedded key-value storage engine for insertion-intensive workloads.
//!
//! ```
//! use woods::{Db, Options, IndexKind};
//! # let dir = std::env::temp_dir().join(format!("woods-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let db = Db::open(&dir, Options::with_index(IndexKind::from_name("btree")?))?;
//! db.put(b"hello", b"world")?;
//! assert_eq!(db.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! db.close()?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), woods::Error>(())
//! ```

#![warn(missing_docs)]
// The internal modules (`#[doc(hidden)]`: the index kinds, runs, memtables, the log, the
// manifest) link their private items in their docs for readers of the source.
#![allow(rustdoc::private_intra_doc_links)]

pub mod batch;
pub mod cache;
#[doc(hidden)]
pub mod crashpoint;
pub mod db;
pub mod entry;
pub mod error;
#[doc(hidden)]
pub mod filter;
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod heap;
pub mod index;
#[doc(hidden)]
pub mod manifest;
#[doc(hidden)]
pub mod memtable;
#[doc(hidden)]
pub mod merge;
pub mod options;
pub mod repair;
#[doc(hidden)]
pub mod run;
pub mod storage;
#[doc(hidden)]
pub mod wal;

#[cfg(test)]
mod testutil;

pub use batch::WriteBatch;
pub use db::{CheckReport, Db, DbIter, Snapshot, Stats};
pub use entry::{Entry, Kind, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use error::{Error, Result};
pub use options::{
    BTreeParams, Durability, IndexKind, LsmParams, MergeOperator, NbTreeParams, Options, StbeParams,
};
pub use repair::RepairReport;
