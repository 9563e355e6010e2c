//! Concatenation: the parts of one level (sorted, non-overlapping key ranges) read as one
//! stream, each part opened only when the stream reaches it.

use std::ops::Bound;

use crate::entry::Entry;
use crate::error::Result;

/// Whether the key range `[min, max]` meets the bounds `lo..hi`.
pub fn range_meets(min: &[u8], max: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let above_lo = match lo {
        Bound::Included(l) => max >= l.as_slice(),
        Bound::Excluded(l) => max > l.as_slice(),
        Bound::Unbounded => true,
    };
    above_lo && within_hi(min, hi)
}

/// Whether `key` lies within the upper bound `hi`.
pub fn within_hi(key: &[u8], hi: &Bound<Vec<u8>>) -> bool {
    match hi {
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
        Bound::Unbounded => true,
    }
}

/// The positions of `parts` whose key ranges meet the bounds `lo..hi`, in reading order
/// (descending when `reverse`); `None` when none does. The parts are those of one level:
/// `range(p)` is part `p`'s first and last key, ascending along `parts` and disjoint, so the
/// parts that meet the bounds are one span of positions, found by two binary searches (a scan
/// of a level of a thousand tables looks at twenty of them, not every one).
pub fn parts_meeting<T>(
    parts: &[T],
    reverse: bool,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    range: impl Fn(&T) -> (&[u8], &[u8]),
) -> Option<Parts> {
    // The first part whose last key is at or above `lo`, and the first past it whose first key
    // is above `hi`.
    let meets = |p: &T, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>| {
        let (min, max) = range(p);
        range_meets(min, max, lo, hi)
    };
    let start = parts.partition_point(|p| !meets(p, lo, &Bound::Unbounded));
    let end = start + parts[start..].partition_point(|p| meets(p, &Bound::Unbounded, hi));
    (start < end).then_some(Parts::Span {
        next: start,
        end,
        reverse,
    })
}

/// The positions a [`Concat`] opens, in its order.
pub enum Parts {
    /// Positions as listed.
    List(std::vec::IntoIter<usize>),
    /// `next..end`, ascending, or descending from `end - 1` when `reverse`.
    Span {
        next: usize,
        end: usize,
        reverse: bool,
    },
}

impl From<Vec<usize>> for Parts {
    fn from(v: Vec<usize>) -> Parts {
        Parts::List(v.into_iter())
    }
}

impl Iterator for Parts {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        match self {
            Parts::List(l) => l.next(),
            Parts::Span { next, end, reverse } => {
                if next >= end {
                    None
                } else if *reverse {
                    *end -= 1;
                    Some(*end)
                } else {
                    *next += 1;
                    Some(*next - 1)
                }
            }
        }
    }
}

/// The streams `open(p)` for each `p` of `parts`, in that order, one after another. The first
/// error ends the stream.
pub struct Concat<I, F> {
    parts: Parts,
    open: F,
    current: Option<I>,
    failed: bool,
}

impl<I, F> Concat<I, F>
where
    I: Iterator<Item = Result<Entry>>,
    F: FnMut(usize) -> Result<I>,
{
    /// Reads the parts in the order given (reversed by the caller for a reverse scan).
    pub fn new(parts: impl Into<Parts>, open: F) -> Concat<I, F> {
        Concat {
            parts: parts.into(),
            open,
            current: None,
            failed: false,
        }
    }
}

impl<I, F> Iterator for Concat<I, F>
where
    I: Iterator<Item = Result<Entry>>,
    F: FnMut(usize) -> Result<I>,
{
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(cur) = &mut self.current {
                match cur.next() {
                    Some(Err(e)) => {
                        self.failed = true;
                        self.current = None;
                        return Some(Err(e));
                    }
                    Some(ok) => return Some(ok),
                    None => self.current = None,
                }
            }
            let p = self.parts.next()?;
            match (self.open)(p) {
                Ok(it) => self.current = Some(it),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;
    use crate::error::Error;

    fn entry(k: u8) -> Entry {
        Entry {
            key: vec![k].into(),
            seq: 1,
            kind: Kind::Put,
            value: Vec::new().into(),
        }
    }

    #[test]
    fn parts_in_the_given_order_opened_lazily() {
        let opened = std::cell::RefCell::new(Vec::new());
        let c = Concat::new(vec![2, 0], |p| {
            opened.borrow_mut().push(p);
            Ok(vec![Ok(entry(p as u8 * 10)), Ok(entry(p as u8 * 10 + 1))].into_iter())
        });
        let mut c = c.peekable();
        assert_eq!(c.peek().unwrap().as_ref().unwrap().key[..], [20]);
        assert_eq!(*opened.borrow(), vec![2]);
        let keys: Vec<u8> = c.map(|e| e.unwrap().key[0]).collect();
        assert_eq!(keys, vec![20, 21, 0, 1]);
        assert_eq!(*opened.borrow(), vec![2, 0]);
    }

    #[test]
    fn an_error_ends_the_stream() {
        let mut c = Concat::new(vec![0, 1, 2], |p| {
            if p == 1 {
                Err(Error::corruption("test", None, "part 1"))
            } else {
                Ok(vec![Ok(entry(p as u8))].into_iter())
            }
        });
        assert_eq!(c.next().unwrap().unwrap().key[..], [0]);
        assert!(c.next().unwrap().is_err());
        assert!(c.next().is_none());
    }

    /// The binary searches find exactly the parts a filter of every part finds, in order, for
    /// levels of sorted, disjoint ranges (single keys among them) and bounds of every kind.
    #[test]
    fn parts_meeting_finds_what_a_filter_of_every_part_finds() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(crate::testutil::seed());
        let bound = |rng: &mut SmallRng| match rng.gen_range(0..3) {
            0 => Bound::Unbounded,
            1 => Bound::Included(vec![rng.gen_range(0..=200u8)]),
            _ => Bound::Excluded(vec![rng.gen_range(0..=200u8)]),
        };
        for _ in 0..2000 {
            // Disjoint ranges [a, b] with a <= b, ascending.
            let mut ranges: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut next = rng.gen_range(0..10u8);
            while ranges.len() < rng.gen_range(0..12) && next < 190 {
                let last = next + rng.gen_range(0..8);
                ranges.push((vec![next], vec![last]));
                next = last + 1 + rng.gen_range(0..4);
            }
            let (lo, hi) = (bound(&mut rng), bound(&mut rng));
            let reverse = rng.gen_bool(0.5);
            let mut want: Vec<usize> = (0..ranges.len())
                .filter(|&i| range_meets(&ranges[i].0, &ranges[i].1, &lo, &hi))
                .collect();
            if reverse {
                want.reverse();
            }
            let got: Vec<usize> = parts_meeting(&ranges, reverse, &lo, &hi, |r| (&r.0, &r.1))
                .map(|p| p.collect())
                .unwrap_or_default();
            assert_eq!(got, want, "{ranges:?} {lo:?} {hi:?} reverse {reverse}");
        }
    }

    #[test]
    fn range_meets_bounds() {
        let inc = |k: u8| Bound::Included(vec![k]);
        let exc = |k: u8| Bound::Excluded(vec![k]);
        assert!(range_meets(
            &[3],
            &[5],
            &Bound::Unbounded,
            &Bound::Unbounded
        ));
        assert!(range_meets(&[3], &[5], &inc(5), &Bound::Unbounded));
        assert!(!range_meets(&[3], &[5], &exc(5), &Bound::Unbounded));
        assert!(range_meets(&[3], &[5], &Bound::Unbounded, &inc(3)));
        assert!(!range_meets(&[3], &[5], &Bound::Unbounded, &exc(3)));
        assert!(!range_meets(&[3], &[5], &inc(6), &inc(9)));
    }
}
