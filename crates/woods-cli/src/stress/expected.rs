//! The expected state of `woods stress`: what every key may hold, in a file that outlives the
//! process that writes the database.
//!
//! Layout (all integers little-endian):
//! - bytes 0..64, the header: `WSTRESS1`, keys (u32), writer threads (u32), zeros;
//! - from byte 64, 8 bytes per key: its committed state (u32), then its pending state (u32)
//!   (states as in `woods_cli::stress_model`);
//! - then [`BATCH_RECORD`] bytes per writer thread: the batch it has in flight, an entry count
//!   (u32), 4 zero bytes, then per entry key id, state before and state after (u32 each) and 4
//!   zero bytes.
//!
//! A writer stores a key's pending state (and, for a batch, its batch record) before it writes
//! the database, and the committed state after the write is acknowledged, each with positional
//! writes to the file that a kill cannot tear (a key's states are eight aligned bytes; a batch
//! record is written entries first and count last, see `Expected::batch_writes`): the operating
//! system keeps them when the process is killed.
//! After a kill a key must therefore hold its committed or its pending state, and a batch the
//! state before of all its keys or the state after of all of them.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// The most keys one batch writes.
pub const MAX_BATCH: usize = 8;
const MAGIC: &[u8; 8] = b"WSTRESS1";
const HEADER: u64 = 64;
/// Bytes of one writer's batch record.
pub const BATCH_RECORD: u64 = 8 + 16 * MAX_BATCH as u64;

/// One key of a batch in flight: its id, its state before and its state after.
pub type BatchEntry = (u32, u32, u32);

/// The expected-state file, with the states in memory for the threads of this process.
pub struct Expected {
    file: File,
    keys: u32,
    writers: u32,
    committed: Vec<AtomicU32>,
    pending: Vec<AtomicU32>,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

impl Expected {
    /// Opens the file at `path`, creating it (every key never written) if it does not exist.
    /// An existing file must have been made for the same key and writer counts.
    pub fn open(path: &Path, keys: u32, writers: u32) -> Result<Expected, String> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err("opening", path, e))?;
        let len = HEADER + 8 * u64::from(keys) + BATCH_RECORD * u64::from(writers);
        let have = file
            .metadata()
            .map_err(|e| io_err("reading the size of", path, e))?
            .len();
        if have == 0 {
            let mut h = [0u8; HEADER as usize];
            h[..8].copy_from_slice(MAGIC);
            h[8..12].copy_from_slice(&keys.to_le_bytes());
            h[12..16].copy_from_slice(&writers.to_le_bytes());
            file.set_len(len).map_err(|e| io_err("sizing", path, e))?;
            file.write_all_at(&h, 0)
                .map_err(|e| io_err("writing", path, e))?;
        }
        let mut all = vec![0u8; usize::try_from(len).map_err(|_| "too many keys".to_string())?];
        file.read_exact_at(&mut all, 0)
            .map_err(|e| io_err("reading", path, e))?;
        let word = |at: usize| u32::from_le_bytes([all[at], all[at + 1], all[at + 2], all[at + 3]]);
        if &all[..8] != MAGIC || word(8) != keys || word(12) != writers || have > len {
            return Err(format!(
                "{} is not the expected state of a stress run with {keys} keys and {writers} \
                 writer threads (it was made for {} keys and {} threads)",
                path.display(),
                word(8),
                word(12)
            ));
        }
        let at = |id: u32| HEADER as usize + 8 * id as usize;
        let committed = (0..keys).map(|id| AtomicU32::new(word(at(id)))).collect();
        let pending = (0..keys)
            .map(|id| AtomicU32::new(word(at(id) + 4)))
            .collect();
        Ok(Expected {
            file,
            keys,
            writers,
            committed,
            pending,
        })
    }

    pub fn keys(&self) -> u32 {
        self.keys
    }

    pub fn writers(&self) -> u32 {
        self.writers
    }

    /// The committed state of key `id` (its last acknowledged write).
    pub fn committed(&self, id: u32) -> u32 {
        self.committed[id as usize].load(Ordering::Acquire)
    }

    /// The pending state of key `id` (its last write begun).
    pub fn pending(&self, id: u32) -> u32 {
        self.pending[id as usize].load(Ordering::Acquire)
    }

    fn store(&self, id: u32, committed: u32, pending: u32) -> Result<(), String> {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&committed.to_le_bytes());
        b[4..].copy_from_slice(&pending.to_le_bytes());
        self.file
            .write_all_at(&b, HEADER + 8 * u64::from(id))
            .map_err(|e| format!("writing the expected state: {e}"))
    }

    /// Records that a write taking key `id` to `state` is about to be made.
    pub fn begin(&self, id: u32, state: u32) -> Result<(), String> {
        self.pending[id as usize].store(state, Ordering::Release);
        self.store(id, self.committed(id), state)
    }

    /// Records that the write taking key `id` to `state` was acknowledged.
    pub fn commit(&self, id: u32, state: u32) -> Result<(), String> {
        self.store(id, state, state)?;
        self.committed[id as usize].store(state, Ordering::Release);
        Ok(())
    }

    /// Sets both states of key `id` (the state found after a restart).
    pub fn settle(&self, id: u32, state: u32) -> Result<(), String> {
        self.store(id, state, state)?;
        self.pending[id as usize].store(state, Ordering::Release);
        self.committed[id as usize].store(state, Ordering::Release);
        Ok(())
    }

    fn batch_at(&self, writer: u32) -> u64 {
        HEADER + 8 * u64::from(self.keys) + BATCH_RECORD * u64::from(writer)
    }

    /// Records the batch `writer` is about to write (an empty one clears the record).
    pub fn set_batch(&self, writer: u32, entries: &[BatchEntry]) -> Result<(), String> {
        for (at, bytes) in self.batch_writes(writer, entries) {
            self.file
                .write_all_at(&bytes, at)
                .map_err(|e| format!("writing the expected state: {e}"))?;
        }
        Ok(())
    }

    /// The positional writes that record `entries` as `writer`'s batch, in the order they must
    /// be made. A kill can cut a write short: the kernel copies a write a page at a time and a
    /// fatal signal stops it between two pages, so a record written in one piece across a page
    /// boundary could be left with the new count and the first entries over the last batch's
    /// other entries, a batch that never was. So the count goes to zero first, then the entries
    /// are written, and the count last: each count is four aligned bytes, inside one page.
    fn batch_writes(&self, writer: u32, entries: &[BatchEntry]) -> Vec<(u64, Vec<u8>)> {
        let at = self.batch_at(writer);
        let count = |n: u32| (at, n.to_le_bytes().to_vec());
        if entries.is_empty() {
            return vec![count(0)];
        }
        let mut b = Vec::with_capacity(BATCH_RECORD as usize - 8);
        for &(id, before, after) in entries {
            for w in [id, before, after, 0] {
                b.extend_from_slice(&w.to_le_bytes());
            }
        }
        vec![count(0), (at + 8, b), count(entries.len() as u32)]
    }

    /// The batch `writer` had in flight, if any.
    pub fn batch(&self, writer: u32) -> Result<Vec<BatchEntry>, String> {
        let mut b = [0u8; BATCH_RECORD as usize];
        self.file
            .read_exact_at(&mut b, self.batch_at(writer))
            .map_err(|e| format!("reading the expected state: {e}"))?;
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let n = word(0) as usize;
        if n > MAX_BATCH {
            return Err(format!(
                "the expected state's batch record of writer {writer} holds {n} entries"
            ));
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let at = 8 + 16 * i;
            let id = word(at);
            if id >= self.keys {
                return Err(format!(
                    "the expected state's batch record of writer {writer} names key {id}"
                ));
            }
            out.push((id, word(at + 4), word(at + 8)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kill that cuts the recording of a batch at any byte of any of its writes leaves the
    /// record saying "no batch" or the whole new batch, never a mix with the batch before.
    #[test]
    fn a_batch_record_cut_anywhere_reads_as_no_batch_or_the_whole_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (keys, writers) = (2000, 4);
        let old: Vec<BatchEntry> = vec![(1000, 1, 2), (1001, 1, 2), (1002, 1, 2), (1009, 177, 178)];
        let new: Vec<BatchEntry> = vec![(1003, 5, 6), (1004, 5, 6), (1011, 204, 205), (1012, 8, 9)];
        for writer in 0..writers {
            let path = dir.path().join(format!("expected-{writer}"));
            let exp = Expected::open(&path, keys, writers).expect("open");
            // The batch before, acknowledged and cleared, as a writer leaves it.
            exp.set_batch(writer, &old).expect("set");
            exp.set_batch(writer, &[]).expect("clear");
            let before = std::fs::read(&path).expect("read");
            let writes = exp.batch_writes(writer, &new);
            for (i, (_, bytes)) in writes.iter().enumerate() {
                for cut in 0..=bytes.len() {
                    std::fs::write(&path, &before).expect("restore");
                    let e = Expected::open(&path, keys, writers).expect("reopen");
                    for (at, b) in &writes[..i] {
                        e.file.write_all_at(b, *at).expect("write");
                    }
                    let (at, b) = &writes[i];
                    e.file.write_all_at(&b[..cut], *at).expect("write");
                    let got = e.batch(writer).expect("batch");
                    assert!(
                        got.is_empty() || got == new,
                        "writer {writer}, write {i} cut after {cut} bytes: the record reads \
                         {got:?}"
                    );
                }
            }
        }
    }
}
