//! The BOA's levels and their persisted metadata.
//!
//! A [`Version`] is an immutable list of levels shared by readers as `Arc<Version>`; each level
//! holds its runs (index 0 oldest) and its routing filter. Runs are `lsm`'s [`Table`]s: a
//! substrate run with an id, opened on first use, whose extents are released when the last
//! version holding it is dropped after a commit removed it.

use std::sync::Arc;

use super::filter::RoutingFilter;
use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::index::lsm::version::Table;
use crate::run::RunMeta;
use crate::storage::{Extent, PageFile};

/// Version byte of the encoded metadata.
const META_VERSION: u8 = 1;

/// The most levels the metadata may name (λ ≥ 2 and memtables of at least a page: 64 levels
/// are more entries than a file holds).
pub const MAX_LEVELS: usize = 64;

/// One level: up to λ − 1 runs, oldest first, and the routing filter over them.
#[derive(Clone, Default)]
pub struct Level {
    /// The runs, index = run number j (0 oldest).
    pub runs: Vec<Arc<Table>>,
    /// The routing filter (`None` when the level has no runs, or when its pages were damaged:
    /// then `damage` says how, lookups probe every run of the level, and `check` fails).
    pub filter: Option<Arc<RoutingFilter>>,
    /// Why the persisted filter could not be read at open.
    pub damage: Option<String>,
    /// Where the filter is persisted, and its byte length.
    pub filter_at: Option<(Extent, u64)>,
}

impl Level {
    /// Bytes of user data in the level's runs.
    pub fn user_bytes(&self) -> u64 {
        self.runs.iter().map(|t| t.meta().user_bytes).sum()
    }

    /// Entries (all versions) in the level's runs.
    pub fn entries(&self) -> u64 {
        self.runs.iter().map(|t| t.meta().entries).sum()
    }
}

/// One published shape of the BOA.
#[derive(Clone, Default)]
pub struct Version {
    /// Levels, 1 first (index 0); no trailing empty level.
    pub levels: Vec<Level>,
    /// Every write up to this sequence number is in the levels.
    pub seq: u64,
}

impl Version {
    /// Runs per level.
    pub fn run_counts(&self) -> Vec<usize> {
        self.levels.iter().map(|l| l.runs.len()).collect()
    }

    /// Whether no level below `level` (0-based) holds a run: a merge output at `level` is
    /// then the oldest data in the store (spec correction 1).
    pub fn empty_from(&self, level: usize) -> bool {
        self.levels.iter().skip(level).all(|l| l.runs.is_empty())
    }

    /// Bytes of all filters in memory.
    pub fn filter_bytes(&self) -> u64 {
        self.levels
            .iter()
            .filter_map(|l| l.filter.as_ref())
            .map(|f| f.bytes())
            .sum()
    }
}

/// What the metadata holds besides the levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaState {
    /// The fingerprint seed, chosen when the database is created.
    pub seed: u64,
    /// Next run id.
    pub next_id: u64,
}

/// Encodes the metadata: version byte, seed, next id, level count, and per level its runs (id,
/// run metadata) and, when it has runs, its filter's extent and byte length.
pub fn encode_meta(v: &Version, m: &MetaState) -> Vec<u8> {
    let mut out = vec![META_VERSION];
    codec::put_u64(&mut out, m.seed);
    codec::put_varint(&mut out, m.next_id);
    codec::put_varint(&mut out, v.levels.len() as u64);
    for l in &v.levels {
        codec::put_varint(&mut out, l.runs.len() as u64);
        for t in &l.runs {
            codec::put_varint(&mut out, t.id);
            t.meta().encode(&mut out);
        }
        if !l.runs.is_empty() {
            let (e, len) = l.filter_at.unwrap_or((Extent { start: 0, pages: 0 }, 0));
            codec::put_varint(&mut out, e.start);
            codec::put_varint(&mut out, e.pages);
            codec::put_varint(&mut out, len);
        }
    }
    out
}

/// Decodes [`encode_meta`]'s bytes and opens the version: runs are opened on first use, the
/// filters are read now (a lookup needs them all). `max_runs` is λ − 1.
pub fn decode_meta(
    store: &Arc<PageFile>,
    buf: &[u8],
    max_runs: usize,
) -> Result<(MetaState, Version)> {
    let bad = |d: String| Error::corruption("boa metadata", None, d);
    let mut r = Reader::new(buf, "boa metadata");
    let v = r.u8()?;
    if v != META_VERSION {
        return Err(bad(format!("unknown version {v}")));
    }
    let seed = r.u64()?;
    let next_id = r.varint()?;
    let n = r.varint()?;
    if n > MAX_LEVELS as u64 {
        return Err(bad(format!("{n} levels")));
    }
    let mut levels = Vec::with_capacity(n as usize);
    for i in 0..n {
        let count = r.varint()?;
        if count > max_runs as u64 {
            return Err(bad(format!(
                "level {} holds {count} runs, at most {max_runs}",
                i + 1
            )));
        }
        let mut level = Level::default();
        for _ in 0..count {
            let id = r.varint()?;
            if id >= next_id {
                return Err(bad(format!("run id {id} not below the next id {next_id}")));
            }
            let meta = RunMeta::decode(&mut r)?;
            level
                .runs
                .push(Arc::new(Table::from_meta(id, meta, store.clone())));
        }
        if count > 0 {
            let ext = Extent {
                start: r.varint()?,
                pages: r.varint()?,
            };
            let len = r.varint()?;
            level.filter_at = Some((ext, len));
            // A damaged filter loses no data: the level opens without it (lookups then probe
            // every run of the level) and `check` reports the damage.
            match RoutingFilter::read(store, ext, len) {
                Ok(f) if f.shape().run_bits > 8 || (1usize << f.shape().run_bits) <= max_runs => {
                    level.damage = Some(format!(
                        "{}-bit run indices for {max_runs} runs",
                        f.shape().run_bits
                    ));
                }
                Ok(f) => level.filter = Some(Arc::new(f)),
                Err(e @ Error::Corruption { .. }) => level.damage = Some(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        levels.push(level);
    }
    if !r.is_empty() {
        return Err(bad(format!("{} trailing bytes", r.remaining())));
    }
    Ok((MetaState { seed, next_id }, Version { levels, seq: 0 }))
}
