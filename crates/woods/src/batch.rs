//! Atomic write batches and their write-ahead-log encoding.

use crate::entry::codec::{self, Reader};
use crate::entry::{check_key, check_value, Kind};
use crate::error::Result;

/// A group of writes applied atomically, in order: all or none survive a crash.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<(Kind, Vec<u8>, Vec<u8>)>,
    pub(crate) bytes: usize,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }
    /// Sets `key` to `value`.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push(Kind::Put, key.as_ref(), value.as_ref())
    }
    /// Deletes `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        self.push(Kind::Delete, key.as_ref(), &[])
    }
    /// Adds a merge operand for `key`, folded by the merge operator.
    pub fn merge(&mut self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> &mut Self {
        self.push(Kind::Merge, key.as_ref(), operand.as_ref())
    }
    fn push(&mut self, kind: Kind, key: &[u8], value: &[u8]) -> &mut Self {
        self.bytes += key.len() + value.len() + 16;
        self.ops.push((kind, key.to_vec(), value.to_vec()));
        self
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Approximate encoded size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }
    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
    }

    pub(crate) fn validate(&self) -> Result<()> {
        for (_, k, v) in &self.ops {
            check_key(k)?;
            check_value(v)?;
        }
        Ok(())
    }

    pub(crate) fn has_merge(&self) -> bool {
        self.ops.iter().any(|(k, _, _)| *k == Kind::Merge)
    }

    /// WAL payload: first sequence number, count, then each op (kind, key, value).
    pub(crate) fn encode(&self, first_seq: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes + 16);
        codec::put_u64(&mut out, first_seq);
        codec::put_u32(&mut out, self.ops.len() as u32);
        for (kind, k, v) in &self.ops {
            out.push(*kind as u8);
            codec::put_bytes(&mut out, k);
            codec::put_bytes(&mut out, v);
        }
        out
    }
}

/// A batch read back from the log.
pub(crate) struct DecodedBatch {
    pub first_seq: u64,
    pub ops: Vec<(Kind, Vec<u8>, Vec<u8>)>,
}

pub(crate) fn decode(payload: &[u8]) -> Result<DecodedBatch> {
    let mut r = Reader::new(payload, "write-ahead log record");
    let first_seq = r.u64()?;
    let n = r.u32()?;
    let mut ops = Vec::with_capacity((n as usize).min(1 << 16));
    for _ in 0..n {
        let kind = Kind::from_u8(r.u8()?)?;
        let k = r.bytes()?.to_vec();
        let v = r.bytes()?.to_vec();
        ops.push((kind, k, v));
    }
    Ok(DecodedBatch { first_seq, ops })
}
