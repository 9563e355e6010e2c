//! Versioned entries: the unit every layer of woods stores and merges.
//!
//! Order: user key ascending (bytewise, a proper prefix first), then sequence number
//! descending, so that the newest version of a key comes first.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value (or merge operand), in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 20;
/// Largest sequence number (56 bits; the top byte of the packed trailer holds the kind).
pub const MAX_SEQ: u64 = (1 << 56) - 1;

/// What an entry does to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Deletes every older version.
    Delete = 0,
    /// Sets the value.
    Put = 1,
    /// A merge operand, folded onto older versions by the merge operator.
    Merge = 2,
}

impl Kind {
    /// Decodes a kind byte read from disk.
    pub fn from_u8(b: u8) -> Result<Kind> {
        match b {
            0 => Ok(Kind::Delete),
            1 => Ok(Kind::Put),
            2 => Ok(Kind::Merge),
            _ => Err(Error::corruption(
                "entry",
                None,
                format!("unknown entry kind {b}"),
            )),
        }
    }
}

/// One version of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Arc<[u8]>,
    /// The sequence number of the write: newer versions have larger ones.
    pub seq: u64,
    /// Put, Delete or Merge.
    pub kind: Kind,
    /// The value (Put), the operand (Merge), or empty (Delete).
    pub value: Arc<[u8]>,
}

impl Entry {
    /// An entry holding copies of `key` and `value`.
    pub fn new(key: &[u8], seq: u64, kind: Kind, value: &[u8]) -> Entry {
        Entry {
            key: Arc::from(key),
            seq,
            kind,
            value: Arc::from(value),
        }
    }

    /// Key and value bytes: what a user wrote.
    pub fn user_bytes(&self) -> usize {
        self.key.len() + self.value.len()
    }
}

/// The total order of entries: key ascending, then sequence descending.
pub fn cmp_entries(a_key: &[u8], a_seq: u64, b_key: &[u8], b_seq: u64) -> Ordering {
    a_key.cmp(b_key).then(b_seq.cmp(&a_seq))
}

/// Checks a key against the limits.
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey { len: key.len() });
    }
    Ok(())
}

/// Checks a value against the limits.
pub fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge { len: value.len() });
    }
    Ok(())
}

/// Little helpers for the byte formats: explicit little-endian integers and LEB128 varints.
#[doc(hidden)]
pub mod codec {
    use crate::error::{Error, Result};

    #[inline]
    pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    #[inline]
    pub fn put_u16(out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_u32(out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_u64(out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
        put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    /// A cursor over a byte slice whose every read is bounds-checked and reports corruption
    /// (never panics) when the input is short.
    pub struct Reader<'a> {
        pub buf: &'a [u8],
        pub pos: usize,
        what: &'static str,
    }

    impl<'a> Reader<'a> {
        pub fn new(buf: &'a [u8], what: &'static str) -> Self {
            Reader { buf, pos: 0, what }
        }
        #[cold]
        #[inline(never)]
        fn short(&self) -> Error {
            Error::corruption(self.what, None, format!("truncated at byte {}", self.pos))
        }
        #[inline]
        pub fn remaining(&self) -> usize {
            self.buf.len() - self.pos
        }
        #[inline]
        pub fn is_empty(&self) -> bool {
            self.pos >= self.buf.len()
        }
        #[inline]
        pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
            if self.remaining() < n {
                return Err(self.short());
            }
            let s = &self.buf[self.pos..self.pos + n];
            self.pos += n;
            Ok(s)
        }
        #[inline]
        pub fn u8(&mut self) -> Result<u8> {
            Ok(self.take(1)?[0])
        }
        #[inline]
        pub fn u16(&mut self) -> Result<u16> {
            let b = self.take(2)?;
            Ok(u16::from_le_bytes([b[0], b[1]]))
        }
        #[inline]
        pub fn u32(&mut self) -> Result<u32> {
            let b = self.take(4)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        #[inline]
        pub fn u64(&mut self) -> Result<u64> {
            let b = self.take(8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_le_bytes(a))
        }
        #[inline]
        pub fn varint(&mut self) -> Result<u64> {
            // Lengths and most sequence numbers of small entries fit one byte.
            match self.buf.get(self.pos) {
                Some(&b) if b < 0x80 => {
                    self.pos += 1;
                    Ok(b as u64)
                }
                _ => self.varint_long(),
            }
        }
        fn varint_long(&mut self) -> Result<u64> {
            let mut v = 0u64;
            let mut shift = 0;
            while let Some(&b) = self.buf.get(self.pos) {
                self.pos += 1;
                v |= ((b & 0x7f) as u64) << shift;
                if b & 0x80 == 0 {
                    return Ok(v);
                }
                shift += 7;
                if shift > 63 {
                    return Err(Error::corruption(self.what, None, "varint too long"));
                }
            }
            Err(self.short())
        }
        #[inline]
        pub fn bytes(&mut self) -> Result<&'a [u8]> {
            let n = self.varint()?;
            if n > self.remaining() as u64 {
                return Err(self.short());
            }
            self.take(n as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::codec::{put_varint, Reader};

    #[test]
    fn varints_round_trip_at_every_length() {
        let mut values = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        for v in values {
            let mut out = vec![0xaa];
            put_varint(&mut out, v);
            assert_eq!(
                out.len() - 1,
                (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
            );
            out.push(0x55);
            let mut r = Reader::new(&out, "test");
            assert_eq!(r.u8().ok(), Some(0xaa));
            assert_eq!(r.varint().ok(), Some(v), "value {v}");
            assert_eq!(r.u8().ok(), Some(0x55), "{v} consumed its bytes only");
            assert!(r.is_empty());
        }
    }

    #[test]
    fn a_truncated_or_overlong_varint_is_corruption() {
        let mut out = Vec::new();
        put_varint(&mut out, 1 << 40);
        for cut in 0..out.len() {
            let mut r = Reader::new(&out[..cut], "test");
            let err = r.varint().expect_err("truncated");
            assert!(err.to_string().contains("truncated"), "{err}");
        }
        let long = [0x80u8; 11];
        let err = Reader::new(&long, "test").varint().expect_err("overlong");
        assert!(err.to_string().contains("too long"), "{err}");
        let mut r = Reader::new(&[0x80, 0x80], "test");
        assert!(r.bytes().is_err());
    }
}
