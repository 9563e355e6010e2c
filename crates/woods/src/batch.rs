//! Atomic write batches and their write-ahead-log encoding.

use crate::entry::codec::{self, Reader};
use crate::entry::{check_key, check_value, Kind};
use crate::error::Result;
use crate::memtable::ENTRY_OVERHEAD;
use crate::wal::MAX_WAL_RECORD;

/// Bytes of a batch's log payload before its first op: first sequence number and op count.
const PAYLOAD_HEADER: usize = 8 + 4;

// An op's encoding overhead (kind byte, two varint lengths of at most 10 bytes each) fits in the
// per-entry charge, so a batch's log payload is at most `size_bytes() + PAYLOAD_HEADER` long.
const _: () = assert!(1 + 10 + 10 <= ENTRY_OVERHEAD as usize);

/// The largest batch ([`WriteBatch::size_bytes`]) a database with `memtable_bytes` accepts: half
/// a memtable, and never more than one log record can carry.
pub(crate) fn max_batch_bytes(memtable_bytes: u64) -> usize {
    let half = usize::try_from(memtable_bytes / 2).unwrap_or(usize::MAX);
    half.min(MAX_WAL_RECORD as usize - PAYLOAD_HEADER)
}

/// A group of writes applied atomically, in order: all or none survive a crash.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<(Kind, Vec<u8>, Vec<u8>)>,
    pub(crate) bytes: usize,
}

impl WriteBatch {
    /// An empty batch. Its writes are checked when it is written ([`crate::Db::write`]): a
    /// key or value past its limit, or a batch larger than half of
    /// [`crate::Options::memtable_bytes`], is refused whole and nothing of it is applied.
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
        self.bytes += key.len() + value.len() + ENTRY_OVERHEAD as usize;
        self.ops.push((kind, key.to_vec(), value.to_vec()));
        self
    }
    /// Writes in the batch (puts, deletes and merges).
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether the batch holds no write (writing it does nothing).
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Size in bytes as the memtable charges it (keys, values and per-entry overhead); at least
    /// the encoded size of the batch's ops.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }
    /// Removes every write, keeping the memory for reuse.
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
        let mut out = Vec::with_capacity(self.bytes + PAYLOAD_HEADER);
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

/// The sequence numbers a log record's batch takes, `first..=last`, read from its header alone
/// (an empty batch takes its first number).
pub(crate) fn seq_range(payload: &[u8]) -> Result<(u64, u64)> {
    let mut r = Reader::new(payload, "write-ahead log record");
    let first_seq = r.u64()?;
    let n = r.u32()?;
    Ok((first_seq, first_seq.saturating_add(u64::from(n.max(1)) - 1)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{MAX_KEY_LEN, MAX_VALUE_LEN};

    #[test]
    fn payload_fits_the_charged_size() {
        let mut b = WriteBatch::new();
        b.put(vec![1u8; MAX_KEY_LEN], vec![2u8; MAX_VALUE_LEN]);
        b.delete(b"k");
        b.merge(vec![3u8; 200], vec![4u8; 70_000]);
        b.put(b"x", b"");
        assert!(b.encode(1).len() <= b.size_bytes() + PAYLOAD_HEADER);
    }

    #[test]
    fn batch_limit_respects_the_log_record_limit() {
        assert_eq!(max_batch_bytes(64 << 10), 32 << 10);
        assert_eq!(
            max_batch_bytes(256 << 20),
            MAX_WAL_RECORD as usize - PAYLOAD_HEADER
        );
        assert!(max_batch_bytes(1 << 34) + PAYLOAD_HEADER <= MAX_WAL_RECORD as usize);
    }
}
