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

pub mod batch;
pub mod cache;
#[doc(hidden)]
pub mod crashpoint;
pub mod db;
pub mod entry;
pub mod error;
pub mod filter;
#[doc(hidden)]
pub mod fuzzing;
pub mod heap;
pub mod index;
pub mod manifest;
pub mod memtable;
pub mod merge;
pub mod options;
pub mod repair;
pub mod run;
pub mod storage;
pub mod wal;

#[cfg(test)]
mod testutil;

pub use batch::WriteBatch;
pub use db::{Db, DbIter, Snapshot, Stats};
pub use entry::{Entry, Kind, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use error::{Error, Result};
pub use options::{
    BTreeParams, Durability, IndexKind, LsmParams, MergeOperator, NbTreeParams, Options, PbtParams,
    StbeParams,
};
pub use repair::RepairReport;
