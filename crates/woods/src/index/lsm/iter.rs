//! Read sources over one pinned version: a table of L0, or a whole level >= 1 read as one
//! concatenated stream that opens its tables lazily, in key order or reversed.

use std::ops::Bound;
use std::sync::Arc;

use super::version::{Table, Version};
use crate::entry::Entry;
use crate::error::Result;
use crate::run::RunIter;
use crate::storage::Purpose;

/// Whether a table's key range meets the bounds.
pub fn table_in_bounds(t: &Table, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let m = t.meta();
    if m.entries == 0 {
        return false;
    }
    let above_lo = match lo {
        Bound::Included(l) => m.max_key.as_slice() >= l.as_slice(),
        Bound::Excluded(l) => m.max_key.as_slice() > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below_hi = match hi {
        Bound::Included(h) => m.min_key.as_slice() <= h.as_slice(),
        Bound::Excluded(h) => m.min_key.as_slice() < h.as_slice(),
        Bound::Unbounded => true,
    };
    above_lo && below_hi
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
pub struct LevelIter {
    version: Arc<Version>,
    level: usize,
    /// Positions of the tables still to open, in the order they are read.
    todo: std::vec::IntoIter<usize>,
    current: Option<RunIter>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
}

impl LevelIter {
    /// Iterates `level` of `version` within the bounds; `None` when no table meets them.
    pub fn new(
        version: Arc<Version>,
        level: usize,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        purpose: Purpose,
    ) -> Option<LevelIter> {
        let tables = version.levels.get(level)?;
        let mut todo: Vec<usize> = (0..tables.len())
            .filter(|&i| table_in_bounds(&tables[i], &lo, &hi))
            .collect();
        if todo.is_empty() {
            return None;
        }
        if reverse {
            todo.reverse();
        }
        Some(LevelIter {
            version,
            level,
            todo: todo.into_iter(),
            current: None,
            lo,
            hi,
            reverse,
            purpose,
        })
    }

    /// Iterates the tables at `positions` (ascending, non-overlapping) of `level` in full, in
    /// key order: one merge source for a compaction's inputs of a level >= 1.
    pub fn tables(
        version: Arc<Version>,
        level: usize,
        positions: Vec<usize>,
        purpose: Purpose,
    ) -> LevelIter {
        LevelIter {
            version,
            level,
            todo: positions.into_iter(),
            current: None,
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
            reverse: false,
            purpose,
        }
    }
}

impl Iterator for LevelIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(it) = &mut self.current {
                match it.next() {
                    Some(Ok(e)) => return Some(Ok(e)),
                    Some(Err(e)) => {
                        self.current = None;
                        self.todo = Vec::new().into_iter();
                        return Some(Err(e));
                    }
                    None => self.current = None,
                }
            }
            let i = self.todo.next()?;
            let t = self.version.levels.get(self.level).and_then(|l| l.get(i))?;
            match t.run() {
                Ok(run) => {
                    self.current =
                        Some(run.iter(self.lo.clone(), self.hi.clone(), self.reverse, self.purpose))
                }
                Err(e) => {
                    self.todo = Vec::new().into_iter();
                    return Some(Err(e));
                }
            }
        }
    }
}
