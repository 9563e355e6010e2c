//! A fast wrong engine is not a result: woods wrapped in an adapter that answers wrongly in one
//! way or another must fail the run with "WRONG ANSWER", for every kind of check the
//! workloads make. The same wrapper answering rightly passes.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use woods_bench::engine::{self, BenchResult, Engine, EngineConfig, OwnCounters};
use woods_bench::workload::{run_with, Phase, RunSpec, Workload};

/// How the wrapper lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// Every 50th hit returns its value with the last byte flipped.
    CorruptValue,
    /// Every 50th hit returns another record's value (the same for every call).
    OtherRecordsValue,
    /// Every 50th hit returns "not found".
    LoseRecord,
    /// A get that finds nothing returns a value anyway.
    Phantom,
    /// Every 20th put is dropped after the run's first 3000 (the old value stays).
    LoseUpdate,
    /// Deletes do nothing.
    IgnoreDelete,
    /// Scans leave out their third entry.
    ScanSkips,
    /// Scans leave out their first entry.
    ScanSkipsFirst,
    /// Scans swap their second and third entries.
    ScanDisorders,
    /// Scans return their second entry's key with one byte changed.
    ScanForeignKey,
}

struct Faulty {
    inner: Box<dyn Engine>,
    fault: Fault,
    /// Operations of the whole run (the engine is opened once per phase).
    gets: Arc<AtomicU64>,
    puts: Arc<AtomicU64>,
}

impl Engine for Faulty {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn direct_io(&self) -> bool {
        self.inner.direct_io()
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        let n = self.puts.fetch_add(1, Ordering::Relaxed);
        if self.fault == Fault::LoseUpdate && n > 3000 && n.is_multiple_of(20) {
            return Ok(());
        }
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let n = self.gets.fetch_add(1, Ordering::Relaxed);
        let got = self.inner.get(key)?;
        let nth = n % 50 == 49;
        Ok(match (self.fault, got) {
            (Fault::CorruptValue, Some(mut v)) if nth => {
                *v.last_mut().unwrap() ^= 1;
                Some(v)
            }
            (Fault::OtherRecordsValue, Some(v)) if nth => {
                let mut other = None;
                self.inner
                    .scan(b"", 1, &mut |_, v| other = Some(v.to_vec()))?;
                Some(other.filter(|o| *o != v).unwrap_or(v))
            }
            (Fault::LoseRecord, Some(_)) if nth => None,
            (Fault::Phantom, None) => Some(vec![7; 100]),
            (_, got) => got,
        })
    }
    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        if self.fault == Fault::IgnoreDelete {
            return Ok(());
        }
        self.inner.delete(key)
    }
    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> BenchResult<usize> {
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        // One more than asked, so that leaving one out can still fill the limit.
        self.inner.scan(start, limit + 1, &mut |k, v| {
            entries.push((k.to_vec(), v.to_vec()))
        })?;
        match self.fault {
            Fault::ScanSkips if entries.len() > 2 => {
                entries.remove(2);
            }
            Fault::ScanSkipsFirst if !entries.is_empty() => {
                entries.remove(0);
            }
            Fault::ScanDisorders if entries.len() > 2 => entries.swap(1, 2),
            Fault::ScanForeignKey if entries.len() > 1 => {
                let k = &mut entries[1].0;
                let last = k.len() - 1;
                k[last] ^= 0x40;
            }
            _ => {}
        }
        entries.truncate(limit);
        for (k, v) in &entries {
            visit(k, v);
        }
        Ok(entries.len())
    }
    fn drain(&mut self) -> BenchResult<()> {
        self.inner.drain()
    }
    fn counters(&self) -> OwnCounters {
        self.inner.counters()
    }
    fn close(self: Box<Self>) -> BenchResult<()> {
        self.inner.close()
    }
}

/// The bench compares woods' written bytes with the process's: runs in this process take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn spec(dir: &Path, phases: &[(Workload, u64)]) -> RunSpec {
    let phases = phases
        .iter()
        .map(|&(workload, ops)| Phase { workload, ops })
        .collect();
    let config = EngineConfig::new(1 << 20, true);
    RunSpec {
        seed: 1,
        ..RunSpec::new("woods:lsm", dir.to_path_buf(), config, phases, 1000)
    }
}

/// Runs `phases` through woods wrapped with `fault`; the run's error, if any.
fn run_faulty(fault: Fault, phases: &[(Workload, u64)], tweak: impl Fn(&mut RunSpec)) -> String {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(&tmp.path().join("db"), phases);
    tweak(&mut s);
    let (gets, puts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let open = |s: &RunSpec| -> BenchResult<Box<dyn Engine>> {
        Ok(Box::new(Faulty {
            inner: engine::open(&s.engine, &s.dir, &s.config)?,
            fault,
            gets: gets.clone(),
            puts: puts.clone(),
        }))
    };
    match run_with(&s, &open) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

fn assert_caught(fault: Fault, phases: &[(Workload, u64)], what: &str) {
    assert_caught_with(fault, phases, |_| {}, what)
}

fn assert_caught_with(
    fault: Fault,
    phases: &[(Workload, u64)],
    tweak: impl Fn(&mut RunSpec),
    what: &str,
) {
    let e = run_faulty(fault, phases, tweak);
    assert!(
        e.contains("WRONG ANSWER") && e.contains(what),
        "{fault:?} was not caught as {what:?}: {e:?}"
    );
}

use Workload::*;

#[test]
fn a_right_engine_passes() {
    let phases = [
        (FillRandom, 0),
        (ReadRandom, 300),
        (Overwrite, 300),
        (DeleteRandom, 100),
        (ReadRandom, 300),
        (SeekRandom, 100),
        (ReadSeq, 2000),
        (YcsbA, 300),
        (YcsbE, 100),
    ];
    assert_eq!(run_faulty(Fault::None, &phases, |s| s.miss_ratio = 0.2), "");
    let ycsb = [(YcsbLoad, 0), (YcsbE, 200), (ReadSeq, 2000), (YcsbF, 300)];
    assert_eq!(run_faulty(Fault::None, &ycsb, |_| {}), "");
}

#[test]
fn corrupt_values_are_caught() {
    assert_caught(
        Fault::CorruptValue,
        &[(FillRandom, 0), (ReadRandom, 500)],
        "corrupt value",
    );
    assert_caught(
        Fault::CorruptValue,
        &[(YcsbLoad, 0), (YcsbC, 500)],
        "corrupt value",
    );
    assert_caught(
        Fault::CorruptValue,
        &[(YcsbLoad, 0), (YcsbF, 500)],
        "corrupt value",
    );
}

#[test]
fn values_of_other_records_are_caught() {
    assert_caught(
        Fault::OtherRecordsValue,
        &[(FillSeq, 0), (ReadRandom, 500)],
        "a value of record",
    );
    // Without a header in the values, the check tries the versions the record may hold.
    assert_caught_with(
        Fault::OtherRecordsValue,
        &[(FillSeq, 0), (ReadRandom, 500)],
        |s| s.value_size = 6,
        "none of the versions",
    );
}

#[test]
fn lost_records_are_caught() {
    assert_caught(
        Fault::LoseRecord,
        &[(YcsbLoad, 0), (YcsbB, 500)],
        "get returned nothing",
    );
}

#[test]
fn phantom_records_are_caught() {
    assert_caught_with(
        Fault::Phantom,
        &[(FillRandom, 0), (ReadRandom, 200)],
        |s| s.miss_ratio = 0.5,
        "which no record has",
    );
    assert_caught(
        Fault::Phantom,
        &[(FillRandom, 0), (DeleteRandom, 300), (ReadRandom, 500)],
        "returned a value of record",
    );
}

#[test]
fn lost_updates_are_caught() {
    assert_caught(
        Fault::LoseUpdate,
        &[(FillSeq, 0), (Overwrite, 3000), (ReadRandom, 2000)],
        "which it does not hold",
    );
    assert_caught(
        Fault::LoseUpdate,
        &[(YcsbLoad, 0), (YcsbA, 6000), (YcsbC, 3000)],
        "which it does not hold",
    );
}

#[test]
fn ignored_deletes_are_caught() {
    assert_caught(
        Fault::IgnoreDelete,
        &[(FillSeq, 0), (DeleteRandom, 300), (ReadRandom, 300)],
        "a record that is deleted",
    );
    assert_caught(
        Fault::IgnoreDelete,
        &[(FillSeq, 0), (DeleteRandom, 300), (ReadSeq, 2000)],
        "has a value it does not hold",
    );
}

#[test]
fn skipped_records_are_caught() {
    assert_caught(
        Fault::ScanSkips,
        &[(FillSeq, 0), (SeekRandom, 100)],
        "the scan skipped it",
    );
    assert_caught(
        Fault::ScanSkips,
        &[(FillRandom, 0), (ReadSeq, 100)],
        "the scan skipped it",
    );
    // YCSB keys: the bench cannot know the order, but the first entry must be the start.
    assert_caught(
        Fault::ScanSkipsFirst,
        &[(YcsbLoad, 0), (YcsbE, 100)],
        "not at record",
    );
    // And a scan over everything must meet every record.
    assert_caught(
        Fault::ScanSkips,
        &[(YcsbLoad, 0), (ReadSeq, 5000)],
        "are present",
    );
}

#[test]
fn disordered_scans_are_caught() {
    assert_caught(
        Fault::ScanDisorders,
        &[(YcsbLoad, 0), (YcsbE, 100)],
        "does not come after",
    );
    // db_bench keys: the entry that came early is first seen as a skip.
    assert_caught(
        Fault::ScanDisorders,
        &[(FillSeq, 0), (ReadSeq, 100)],
        "the scan skipped it",
    );
}

#[test]
fn foreign_keys_are_caught() {
    assert_caught(
        Fault::ScanForeignKey,
        &[(YcsbLoad, 0), (YcsbE, 100)],
        "no record's key",
    );
    assert_caught(
        Fault::ScanForeignKey,
        &[(FillSeq, 0), (SeekRandom, 100)],
        "no record's key",
    );
}

#[test]
fn wrong_answers_fail_with_threads() {
    assert_caught_with(
        Fault::CorruptValue,
        &[(YcsbLoad, 0), (YcsbA, 2000)],
        |s| s.threads = 4,
        "corrupt value",
    );
    assert_caught_with(
        Fault::ScanSkips,
        &[(FillSeq, 0), (SeekRandom, 200)],
        |s| s.threads = 3,
        "the scan skipped it",
    );
}

/// The FD-tree mixes check their searches as readrandom does (a search is of a present record,
/// so a lost one is caught in the phase); a delete the engine ignored is caught by the read
/// after the phase (the mixes never search a record they deleted).
#[test]
fn wrong_answers_fail_in_fd_mixes() {
    let hashed = |s: &mut RunSpec| s.hashed_keys = true;
    assert_eq!(
        run_faulty(
            Fault::None,
            &[(FillRandom, 0), (FdWDelete, 500), (ReadSeq, 5000)],
            hashed
        ),
        ""
    );
    assert_caught_with(
        Fault::LoseRecord,
        &[(FillRandom, 0), (SearchInsert, 500)],
        hashed,
        "get returned nothing",
    );
    assert_caught_with(
        Fault::IgnoreDelete,
        &[(FillRandom, 0), (FdWDelete, 500), (ReadSeq, 5000)],
        hashed,
        "has a value it does not hold",
    );
}
