//! The error type every fallible woods call returns.

use std::fmt;
use std::io;

/// Everything that can go wrong in woods. Each variant says what failed in words a user can
/// act on; none of them is ever produced by a panic.
#[derive(Debug)]
pub enum Error {
    /// An operating-system I/O call failed (the operation is named in `context`).
    Io {
        /// What woods was doing, with the path.
        context: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// A page or record failed its checksum or structural check.
    Corruption {
        /// The structure that failed (`btree`, `manifest`, `data file header`, ...).
        what: String,
        /// The page of the data file, where one is at fault.
        page: Option<u64>,
        /// What was wrong.
        detail: String,
    },
    /// The key is empty or longer than [`crate::MAX_KEY_LEN`].
    InvalidKey {
        /// The key's length.
        len: usize,
    },
    /// The value is longer than [`crate::MAX_VALUE_LEN`].
    ValueTooLarge {
        /// The value's length.
        len: usize,
    },
    /// A write batch is larger than half of `memtable_bytes` or than one WAL record can carry
    /// (64 MiB).
    BatchTooLarge {
        /// The batch's size as the memtable charges it ([`crate::WriteBatch::size_bytes`]).
        bytes: usize,
        /// The most this database takes in one write.
        limit: usize,
    },
    /// An option is outside its valid range.
    InvalidOption(String),
    /// An explicit option differs from what the existing database was created with.
    OptionsMismatch {
        /// The option's name (`index`, `merge_operator`).
        option: String,
        /// What the database holds.
        stored: String,
        /// What the options gave.
        given: String,
    },
    /// The database was written by an incompatible format version.
    UnsupportedFormat {
        /// The major version in the database.
        found_major: u16,
        /// The major version this build reads.
        supported_major: u16,
    },
    /// Another handle (in this or another process) has the database open.
    Locked {
        /// The lock file.
        path: String,
    },
    /// The database holds Merge entries, or a merge was requested, and no merge operator is
    /// configured (or a different one than the database was written with).
    MergeOperator(String),
    /// An earlier write or sync failed; the database refuses writes until it is reopened.
    ReadOnly {
        /// The first failure, which turned the database read-only.
        cause: String,
    },
    /// The database handle is closed.
    Closed,
    /// The operation needs something the database's index kind does not have: range scans,
    /// iterators and reverse scans on a point-only kind (`boa`, which orders keys by hash).
    Unsupported {
        /// What was asked for, and of which kind (`range scan on index kind boa`).
        what: String,
    },
}

/// Shorthand used throughout woods.
pub type Result<T> = std::result::Result<T, Error>;

/// The first failure of a database's writes, once there is one: the database is read-only from
/// then on. The page file trips it on a failed write or sync before the error reaches the
/// caller, so that no other thread commits work built on the lost write meanwhile (the
/// manifest refuses every commit once it is tripped).
#[derive(Default)]
#[doc(hidden)]
pub struct Latch {
    cause: parking_lot::Mutex<Option<String>>,
}

impl Latch {
    /// Records `e` as the cause, unless an earlier failure is already recorded.
    pub fn trip(&self, e: &Error) {
        let mut c = self.cause.lock();
        if c.is_none() {
            *c = Some(e.to_string());
        }
    }

    /// Passes `r` through, tripping the latch when it is an error.
    pub fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.trip(e);
        }
        r
    }

    pub fn is_tripped(&self) -> bool {
        self.cause.lock().is_some()
    }

    /// `ReadOnly` with the first failure's cause once tripped.
    pub fn check(&self) -> Result<()> {
        match &*self.cause.lock() {
            Some(cause) => Err(Error::ReadOnly {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        what: impl Into<String>,
        page: Option<u64>,
        detail: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            what: what.into(),
            page,
            detail: detail.into(),
        }
    }

    /// A copy of this error for handing to several callers (I/O sources are rebuilt from their kind
    /// and text, since `io::Error` is not `Clone`).
    pub fn duplicate(&self) -> Self {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption { what, page, detail } => Error::Corruption {
                what: what.clone(),
                page: *page,
                detail: detail.clone(),
            },
            Error::InvalidKey { len } => Error::InvalidKey { len: *len },
            Error::ValueTooLarge { len } => Error::ValueTooLarge { len: *len },
            Error::BatchTooLarge { bytes, limit } => Error::BatchTooLarge {
                bytes: *bytes,
                limit: *limit,
            },
            Error::InvalidOption(s) => Error::InvalidOption(s.clone()),
            Error::OptionsMismatch {
                option,
                stored,
                given,
            } => Error::OptionsMismatch {
                option: option.clone(),
                stored: stored.clone(),
                given: given.clone(),
            },
            Error::UnsupportedFormat {
                found_major,
                supported_major,
            } => Error::UnsupportedFormat {
                found_major: *found_major,
                supported_major: *supported_major,
            },
            Error::Locked { path } => Error::Locked { path: path.clone() },
            Error::MergeOperator(s) => Error::MergeOperator(s.clone()),
            Error::ReadOnly { cause } => Error::ReadOnly {
                cause: cause.clone(),
            },
            Error::Closed => Error::Closed,
            Error::Unsupported { what } => Error::Unsupported { what: what.clone() },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "I/O error while {context}: {source}"),
            Error::Corruption { what, page: Some(p), detail } => {
                write!(f, "corruption in {what} at page {p}: {detail}")
            }
            Error::Corruption { what, page: None, detail } => write!(f, "corruption in {what}: {detail}"),
            Error::InvalidKey { len } => {
                write!(f, "invalid key of {len} bytes: keys must be 1 to {} bytes", crate::MAX_KEY_LEN)
            }
            Error::ValueTooLarge { len } => {
                write!(f, "value of {len} bytes exceeds the limit of {} bytes", crate::MAX_VALUE_LEN)
            }
            Error::BatchTooLarge { bytes, limit } => write!(
                f,
                "write batch of {bytes} bytes exceeds {limit} bytes (half of memtable_bytes, at most a WAL record); split it"
            ),
            Error::InvalidOption(s) => write!(f, "invalid option: {s}"),
            Error::OptionsMismatch { option, stored, given } => write!(
                f,
                "option {option} is {given} but the database was created with {stored}; \
                 leave it unset to use the stored value"
            ),
            Error::UnsupportedFormat { found_major, supported_major } => write!(
                f,
                "database format major version {found_major} is not supported (this build reads {supported_major})"
            ),
            Error::Locked { path } => write!(f, "database {path} is already open (locked by another handle)"),
            Error::MergeOperator(s) => write!(f, "merge operator: {s}"),
            Error::ReadOnly { cause } => {
                write!(f, "database is read-only after an earlier failure ({cause}); reopen it")
            }
            Error::Closed => write!(f, "database is closed"),
            Error::Unsupported { what } => write!(
                f,
                "unsupported: {what} (the index kind keeps no key order: point operations only)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
