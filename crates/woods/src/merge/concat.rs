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
    let below_hi = match hi {
        Bound::Included(h) => min <= h.as_slice(),
        Bound::Excluded(h) => min < h.as_slice(),
        Bound::Unbounded => true,
    };
    above_lo && below_hi
}

/// The positions `0..n` whose part `meets` the bounds, in reading order (descending when
/// `reverse`); `None` when none does.
pub fn parts_meeting(n: usize, reverse: bool, meets: impl Fn(usize) -> bool) -> Option<Vec<usize>> {
    let mut parts: Vec<usize> = (0..n).filter(|&i| meets(i)).collect();
    if reverse {
        parts.reverse();
    }
    (!parts.is_empty()).then_some(parts)
}

/// The streams `open(p)` for each `p` of `parts`, in that order, one after another. The first
/// error ends the stream.
pub struct Concat<I, F> {
    parts: std::vec::IntoIter<usize>,
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
    pub fn new(parts: Vec<usize>, open: F) -> Concat<I, F> {
        Concat {
            parts: parts.into_iter(),
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
