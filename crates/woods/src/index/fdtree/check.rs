//! `woods check` for the FD-tree: every page checksum and run invariant (the substrate's
//! [`crate::run::Run::check`]), then spec §3.3 and §8 tests 1–4 and 7 on every level: order by
//! (key, class), Invariant 1 (slot 0 of every page of a non-lowest level is a fence, internal
//! fences only there, with the key and seq of the entry after them and the page of the last
//! external fence before them), exactly one external fence per page of the next level in page
//! order with that page's first key (the empty key for page 0), none in the lowest level, the
//! `CONT_PREV` bits, the head tree's fences over L1, and capacities (`items < k^i·|L0|` for every
//! non-lowest level). Together these give Invariant 2: the last fence at or below any key
//! leads to the page of the next level holding the last item at or below it.

use super::job::capacity;
use super::version::{page_list, HeadFence, Version};
use crate::error::{Error, Result};
use crate::run::AUX_CONT_PREV;
use crate::storage::Purpose;

fn bad(level: usize, page: Option<u64>, what: String) -> Error {
    Error::corruption("fdtree", page, format!("L{level}: {what}"))
}

/// What one level's walk found.
struct Walk {
    ext: Vec<HeadFence>,
    fences: u64,
}

fn walk(v: &Version, i: usize) -> Result<Walk> {
    let level = &v.levels[i];
    let n = i + 1;
    let lowest = n == v.levels.len();
    let mut w = Walk {
        ext: Vec::new(),
        fences: 0,
    };
    let mut last_entry_key: Option<Vec<u8>> = None;
    let mut last_ext: Option<u64> = None;
    for node in level.run()?.data_pages(Purpose::Merge) {
        let node = node?;
        let page = Some(node.page);
        let mut prev_entry_key: Option<Vec<u8>> = None;
        let mut first_item_entry: Option<bool> = None;
        for s in 0..node.count {
            let item = node.data(s)?;
            match item.fence {
                Some(f) => {
                    if lowest {
                        return Err(bad(
                            n,
                            page,
                            format!("fence at slot {s} in the lowest level"),
                        ));
                    }
                    w.fences += 1;
                    if f.internal {
                        if s != 0 {
                            return Err(bad(n, page, format!("internal fence at slot {s}")));
                        }
                        let next = node.data(1).map_err(|_| {
                            bad(n, page, "internal fence with nothing after it".into())
                        })?;
                        if next.fence.is_some() || next.key != item.key || next.seq != item.seq {
                            return Err(bad(
                                n,
                                page,
                                "internal fence does not carry the key of the entry after it"
                                    .into(),
                            ));
                        }
                        if Some(f.pid) != last_ext {
                            return Err(bad(
                                n,
                                page,
                                format!(
                                    "internal fence points to page {} where the last external fence points to {last_ext:?}",
                                    f.pid
                                ),
                            ));
                        }
                    } else {
                        if prev_entry_key.as_deref() == Some(item.key) {
                            return Err(bad(
                                n,
                                page,
                                format!("external fence at slot {s} after an entry of its key"),
                            ));
                        }
                        last_ext = Some(f.pid);
                        w.ext.push((item.key.to_vec(), f.pid));
                    }
                }
                None => {
                    if s == 0 && !lowest {
                        return Err(bad(n, page, "slot 0 is not a fence (Invariant 1)".into()));
                    }
                    if first_item_entry.is_none() {
                        let cont = last_entry_key.as_deref() == Some(item.key);
                        if cont != (node.aux & AUX_CONT_PREV != 0) {
                            return Err(bad(n, page, "CONT_PREV bit is wrong".into()));
                        }
                    }
                    prev_entry_key = Some(item.key.to_vec());
                }
            }
            if first_item_entry.is_none() && !(item.fence.is_some_and(|f| f.internal)) {
                first_item_entry = Some(item.fence.is_none());
                if item.fence.is_some() && node.aux & AUX_CONT_PREV != 0 {
                    return Err(bad(
                        n,
                        page,
                        "CONT_PREV bit on a page led by a fence".into(),
                    ));
                }
            }
        }
        if let Some(k) = prev_entry_key {
            last_entry_key = Some(k);
        }
    }
    if w.fences != level.fences {
        return Err(bad(
            n,
            None,
            format!(
                "{} fences where the metadata says {}",
                w.fences, level.fences
            ),
        ));
    }
    Ok(w)
}

/// Checks the version; returns the number of index entries (fences not counted).
pub fn check(v: &Version, k: u64, l0: u64) -> Result<u64> {
    let mut total = 0u64;
    let mut extents = Vec::new();
    let mut above: Option<Vec<HeadFence>> = None;
    for (i, level) in v.levels.iter().enumerate() {
        let n = i + 1;
        let items = level.run()?.check()?;
        if items != level.items() {
            return Err(bad(
                n,
                None,
                format!("{items} items, metadata {}", level.items()),
            ));
        }
        let lowest = n == v.levels.len();
        if !lowest && items >= capacity(n, k, l0) {
            return Err(bad(
                n,
                None,
                format!(
                    "{items} items at or above the capacity {}",
                    capacity(n, k, l0)
                ),
            ));
        }
        if lowest && items == 0 {
            return Err(bad(n, None, "the lowest level is empty".into()));
        }
        let w = walk(v, i)?;
        let pages = page_list(level.run()?)?;
        let want = match &above {
            Some(ext) => ext,
            None => &**v.head()?,
        };
        if *want != pages {
            let from = if n == 1 {
                "the head tree"
            } else {
                "the level above"
            };
            return Err(bad(
                n,
                None,
                format!(
                    "{} fences in {from} do not match its {} pages (one each, with its first key)",
                    want.len(),
                    pages.len()
                ),
            ));
        }
        above = Some(w.ext);
        total += level.entries();
        extents.extend_from_slice(level.extents());
    }
    if let Some(ext) = above {
        if !ext.is_empty() {
            return Err(Error::corruption(
                "fdtree",
                None,
                format!("{} external fences in the lowest level", ext.len()),
            ));
        }
    } else if !v.head()?.is_empty() {
        return Err(Error::corruption(
            "fdtree",
            None,
            "head fences without levels",
        ));
    }
    extents.sort();
    for w in extents.windows(2) {
        if w[0].end() > w[1].start {
            return Err(Error::corruption(
                "fdtree",
                None,
                format!("extents {:?} and {:?} overlap", w[0], w[1]),
            ));
        }
    }
    Ok(total)
}
