//! Read sources over one pinned version: a table of L0, or a whole level >= 1 read as one
//! concatenated stream that opens its tables lazily, in key order or reversed.

use std::ops::Bound;
use std::sync::Arc;

use super::version::{Table, Version};
use crate::entry::Entry;
use crate::error::Result;
use crate::merge::{parts_meeting, range_meets, Concat, Parts};
use crate::run::RunIter;
use crate::storage::Purpose;

/// Whether a table's key range meets the bounds.
pub fn table_in_bounds(t: &Table, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let m = t.meta();
    m.entries > 0 && range_meets(&m.min_key, &m.max_key, lo, hi)
}

/// One table's entries, holding the version (so the table's extents stay allocated).
pub struct TableIter {
    _version: Arc<Version>,
    inner: RunIter,
}

impl TableIter {
    /// Iterates `table` (of `version`) within the bounds.
    pub fn new(
        version: Arc<Version>,
        table: &Table,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        purpose: Purpose,
    ) -> Result<TableIter> {
        Ok(TableIter {
            inner: table.run()?.iter(lo, hi, reverse, purpose),
            _version: version,
        })
    }
}

impl Iterator for TableIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        self.inner.next()
    }
}

/// The tables of one level >= 1 (sorted, non-overlapping) as one stream.
pub type LevelIter = Concat<RunIter, Box<dyn FnMut(usize) -> Result<RunIter> + Send>>;

/// Iterates the tables at `positions` of `level` in that order, each within the bounds.
fn level_iter(
    version: Arc<Version>,
    level: usize,
    positions: impl Into<Parts>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
) -> LevelIter {
    Concat::new(
        positions,
        Box::new(move |i| {
            let t = &version.levels[level][i];
            Ok(t.run()?.iter(lo.clone(), hi.clone(), reverse, purpose))
        }),
    )
}

/// Iterates `level` of `version` within the bounds; `None` when no table meets them.
pub fn level(
    version: Arc<Version>,
    level: usize,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
) -> Option<LevelIter> {
    let tables = version.levels.get(level)?;
    let todo = parts_meeting(tables, reverse, &lo, &hi, |t| {
        let m = t.meta();
        (&m.min_key[..], &m.max_key[..])
    })?;
    Some(level_iter(version, level, todo, lo, hi, reverse, purpose))
}

/// Iterates the tables at `positions` (ascending, non-overlapping) of `level` in full, in key
/// order: one merge source for a compaction's inputs of a level >= 1.
pub fn tables(
    version: Arc<Version>,
    level: usize,
    positions: Vec<usize>,
    purpose: Purpose,
) -> LevelIter {
    level_iter(
        version,
        level,
        positions,
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        purpose,
    )
}
