//! `lsm`: leveled LSM-tree (placeholder while it is being written).
use std::ops::Bound;
use std::sync::Arc;

use super::{Index, IndexContext, IndexStats};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::LsmParams;

pub struct Lsm;

impl Lsm {
    pub fn open(_ctx: IndexContext, _p: LsmParams, _meta: &[u8], _d: u64) -> Result<Lsm> {
        Err(Error::InvalidOption("lsm is not built yet".into()))
    }
}

impl Index for Lsm {
    fn absorb(&self, _mem: Arc<Memtable>) -> Result<()> { Ok(()) }
    fn debt(&self) -> u64 { 0 }
    fn work(&self, _b: u64) -> Result<u64> { Ok(0) }
    fn durable_seq(&self) -> u64 { 0 }
    fn get(&self, _k: &[u8], _s: u64, _o: &mut Vec<Entry>) -> Result<()> { Ok(()) }
    fn iter(&self, _l: Bound<Vec<u8>>, _h: Bound<Vec<u8>>, _r: bool) -> Result<Vec<EntryIter>> { Ok(vec![]) }
    fn stats(&self) -> IndexStats { IndexStats::default() }
    fn check(&self) -> Result<u64> { Ok(0) }
}
