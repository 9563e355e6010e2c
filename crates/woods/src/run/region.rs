//! Append regions: one extent into which several runs are appended, data from its start and
//! metadata from its end, with the hole between kept free for the next run (the MSTable of the
//! `lsa` and `iam` kinds, specs/lsa-iam-tree.md §2.3). The layout is in `docs/format.md`
//! ("Append regions").

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::storage::Extent;

/// An append region and its two cursors: pages `extent.start..front` hold the data pages of
/// the runs appended so far, `back..extent.end()` their metadata pages, and `front..back` is the
/// hole. Runs appended never write below `front` or at or above `back`, so a region's committed
/// pages are never overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The pages the region owns (allocated whole, written only where runs were placed).
    pub extent: Extent,
    /// First page of the hole: where the next run's data goes.
    pub front: u64,
    /// First page after the hole: the next run's metadata ends just below it.
    pub back: u64,
}

impl Region {
    /// An empty region over `extent`: all of it is hole.
    pub fn new(extent: Extent) -> Region {
        Region {
            extent,
            front: extent.start,
            back: extent.end(),
        }
    }

    /// Pages left between the data and the metadata.
    pub fn hole_pages(&self) -> u64 {
        self.back.saturating_sub(self.front)
    }

    /// Pages written so far (data and metadata).
    pub fn used_pages(&self) -> u64 {
        self.extent.pages - self.hole_pages()
    }

    /// Whether `e` lies inside the region's extent.
    pub fn holds(&self, e: &Extent) -> bool {
        e.start >= self.extent.start && e.end() <= self.extent.end()
    }

    /// Appends the encoding: varints `start`, `pages`, `front − start`, `end − back`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        codec::put_varint(out, self.extent.start);
        codec::put_varint(out, self.extent.pages);
        codec::put_varint(out, self.front - self.extent.start);
        codec::put_varint(out, self.extent.end() - self.back);
    }

    /// Decodes [`Region::encode`]; cursors outside the extent or crossing are corruption.
    pub fn decode(r: &mut Reader) -> Result<Region> {
        let start = r.varint()?;
        let pages = r.varint()?;
        let data = r.varint()?;
        let meta = r.varint()?;
        let bad = || Error::corruption("append region", None, "cursors outside the region");
        let end = start.checked_add(pages).ok_or_else(bad)?;
        if data.checked_add(meta).is_none_or(|u| u > pages) {
            return Err(bad());
        }
        Ok(Region {
            extent: Extent { start, pages },
            front: start + data,
            back: end - meta,
        })
    }
}
