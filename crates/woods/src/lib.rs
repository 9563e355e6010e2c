//! woods: an embedded key-value storage engine for insertion-intensive workloads.
//!
//! ```
//! use woods::{Db, Durability, IndexKind, Options};
//! # let dir = std::env::temp_dir().join(format!("woods-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! // A new database names its index kind; reopening may leave `Options::index` None.
//! let db = Db::open(&dir, Options::with_index(IndexKind::from_name("btree")?))?;
//! db.put(b"hello", b"world")?;
//! db.put_with(b"help", b"me", Durability::Sync)?; // on the device when this returns
//! assert_eq!(db.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! // Range bounds may be borrowed: `&[u8]`, `&str`, or owned `Vec<u8>`.
//! let from = b"hell".to_vec();
//! let keys: Vec<Vec<u8>> = db
//!     .range(from.as_slice()..)?
//!     .take(1)
//!     .map(|r| r.map(|(k, _)| k))
//!     .collect::<woods::Result<_>>()?;
//! assert_eq!(keys, [b"hello".to_vec()]);
//! assert_eq!(db.range("a".."z")?.count(), 2);
//! assert_eq!(db.check()?.live_keys, 2);
//! db.close()?;
//! # let db = Db::open(&dir, Options::default())?; // reopens: the kind is read from the database
//! # assert_eq!(db.index_kind().name(), "btree");
//! # db.close()?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), woods::Error>(())
//! ```
//!
//! Start at [`Db`] (what dropping it without [`Db::close`] means is in its documentation),
//! [`Options`] (every limit, and the error past it) and [`Error`].

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
pub mod pause;
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
pub use index::btree::buffer_policy::FlushPolicy;
pub use options::{
    BTreeParams, BoaParams, Durability, FdTreeParams, IamParams, IndexKind, InsertBuffer,
    LsmParams, MergeOperator, NbTreeParams, Options, PbtParams, StbeParams,
};
pub use repair::RepairReport;
