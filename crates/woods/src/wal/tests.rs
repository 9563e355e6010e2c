use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::storage::{FaultFs, FaultPlan};

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn setup() -> (FaultFs, Arc<IoCounters>) {
    let fs = FaultFs::new();
    fs.create_dir_all(&dir()).unwrap();
    (fs, Arc::new(IoCounters::default()))
}

fn payload(i: usize) -> Vec<u8> {
    let len = 1 + (i * 37) % 300;
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

fn writer(fs: &FaultFs, number: u64, counters: &Arc<IoCounters>) -> WalWriter {
    WalWriter::create(
        Arc::new(fs.clone()),
        &dir(),
        number,
        counters.clone(),
        64 << 10,
    )
    .unwrap()
}

#[test]
fn wal_round_trip() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    let mut last = 0;
    for i in 0..100 {
        let pos = w.append(&payload(i)).unwrap();
        assert!(pos > last);
        last = pos;
    }
    w.append(&[]).unwrap();
    w.sync_to(last).unwrap();
    assert_eq!(w.number(), 1);
    assert_eq!(
        fs.file_len(&wal_file_path(&dir(), 1)),
        Some(w.bytes_written())
    );
    assert!(counters.snapshot().written(Purpose::Wal) == w.bytes_written());

    let r = replay(&fs, &dir(), &counters).unwrap();
    let mut want: Vec<Vec<u8>> = (0..100).map(payload).collect();
    want.push(Vec::new());
    assert_eq!(r.records, want);
    assert_eq!(r.files, vec![1]);
    assert!(!r.torn);
    assert_eq!(counters.snapshot().read(Purpose::Wal), w.bytes_written());
}

#[test]
fn wal_empty_directory_replays_nothing() {
    let (fs, counters) = setup();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r, Replay::default());
    assert_eq!(list_wal_files(&fs, &dir()).unwrap(), Vec::<u64>::new());
}

#[test]
fn wal_create_truncates_leftover_file() {
    let (fs, counters) = setup();
    let w = writer(&fs, 3, &counters);
    w.append(b"old").unwrap();
    drop(w);
    let w = writer(&fs, 3, &counters);
    w.append(b"new").unwrap();
    assert_eq!(
        replay(&fs, &dir(), &counters).unwrap().records,
        vec![b"new".to_vec()]
    );
}

#[test]
fn wal_torn_tail_is_cut_at_every_length() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    let mut ends = vec![WAL_HEADER_LEN as u64];
    for i in 0..5 {
        w.append(&payload(i)).unwrap();
        ends.push(fs.file_len(&wal_file_path(&dir(), 1)).unwrap());
    }
    let full = *ends.last().unwrap();
    let path = wal_file_path(&dir(), 1);
    for cut in 0..full {
        let fs2 = FaultFs::new();
        fs2.create_dir_all(&dir()).unwrap();
        // Rebuild the file truncated to `cut` bytes.
        let src = fs.open(&path, OpenMode::default()).unwrap();
        let mut buf = vec![0u8; cut as usize];
        src.read_exact_at(&mut buf, 0).unwrap();
        let dst = fs2
            .open(
                &path,
                OpenMode {
                    create: true,
                    direct: false,
                },
            )
            .unwrap();
        dst.write_all_at(&buf, 0).unwrap();
        let r = replay(&fs2, &dir(), &counters).unwrap();
        let whole = ends.iter().filter(|&&e| e <= cut).count().saturating_sub(1);
        assert_eq!(
            r.records,
            (0..whole).map(payload).collect::<Vec<_>>(),
            "cut at {cut}"
        );
        assert_eq!(r.torn, !ends.contains(&cut), "cut at {cut}");
    }
}

/// A bad record ends its file only: the next file is read too (whether its records continue the
/// log is the Db's to decide, by sequence number).
#[test]
fn wal_flipped_byte_ends_that_file_only() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    let mut ends = vec![WAL_HEADER_LEN as u64];
    for i in 0..6 {
        w.append(&payload(i)).unwrap();
        ends.push(fs.file_len(&wal_file_path(&dir(), 1)).unwrap());
    }
    w.rotate(2).unwrap();
    w.append(b"later file").unwrap();
    // Flip a byte inside record 3 (its length field, then separately its payload).
    for off in [ends[3] + 5, ends[3] + 10, ends[4] - 1] {
        let fs2 = fs.clone();
        assert!(fs2.flip_byte(&wal_file_path(&dir(), 1), off));
        let r = replay(&fs2, &dir(), &counters).unwrap();
        let mut want = (0..3).map(payload).collect::<Vec<_>>();
        want.push(b"later file".to_vec());
        assert_eq!(r.records, want);
        assert!(r.torn);
        assert_eq!(r.files, vec![1, 2]);
        assert_eq!(
            r.tears
                .iter()
                .map(|t| (t.file, t.offset))
                .collect::<Vec<_>>(),
            vec![(1, ends[3])]
        );
        // What follows the damage in its file is found, and the file is of this boot.
        assert_eq!(r.tears[0].followed_by, vec![payload(4), payload(5)]);
        assert!(r.tears[0].this_boot);
        assert_eq!(r.record_files, vec![1, 1, 1, 2]);
        let after: Vec<&[u8]> = r.after_tear(0).collect();
        assert_eq!(after, vec![&payload(4)[..], &payload(5)[..], b"later file"]);
        assert!(fs2.flip_byte(&wal_file_path(&dir(), 1), off)); // flip back
    }
    assert_eq!(replay(&fs, &dir(), &counters).unwrap().records.len(), 7);
}

/// A file's header carries the boot it was created in: after a power cut (a new boot) its
/// tears are no longer this boot's, and a torn tail has nothing after it.
#[test]
fn wal_tears_know_their_boot_and_a_torn_tail_has_nothing_after_it() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    let mut ends = vec![WAL_HEADER_LEN as u64];
    for i in 0..4 {
        let pos = w.append(&payload(i)).unwrap();
        w.sync_to(pos).unwrap();
        ends.push(fs.file_len(&wal_file_path(&dir(), 1)).unwrap());
    }
    drop(w);
    let path = wal_file_path(&dir(), 1);
    // The last record damaged: a torn tail, nothing valid after it.
    assert!(fs.flip_byte(&path, ends[4] - 1));
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.tears.len(), 1);
    assert!(r.tears[0].followed_by.is_empty());
    assert!(r.tears[0].this_boot);
    assert!(fs.flip_byte(&path, ends[4] - 1));
    // A middle record damaged, then the machine restarts.
    assert!(fs.flip_byte(&path, ends[1] + 9));
    fs.power_cut();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.tears.len(), 1);
    assert_eq!(r.tears[0].followed_by, vec![payload(2), payload(3)]);
    assert!(!r.tears[0].this_boot, "a power cut is a new boot");
}

#[test]
fn wal_impossible_length_is_torn() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    w.append(b"one").unwrap();
    let end = fs.file_len(&wal_file_path(&dir(), 1)).unwrap();
    w.append(b"two").unwrap();
    let f = fs
        .open(&wal_file_path(&dir(), 1), OpenMode::default())
        .unwrap();
    f.write_all_at(&u32::MAX.to_le_bytes(), end + 4).unwrap();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, vec![b"one".to_vec()]);
    assert!(r.torn);
}

#[test]
fn wal_power_cut_keeps_exactly_the_synced_prefix() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    let mut pos = 0;
    for i in 0..10 {
        pos = w.append(&payload(i)).unwrap();
    }
    w.sync_to(pos).unwrap();
    for i in 10..15 {
        w.append(&payload(i)).unwrap();
    }
    fs.power_cut();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, (0..10).map(payload).collect::<Vec<_>>());
    assert!(!r.torn);
}

#[test]
fn wal_process_crash_keeps_unsynced_records() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    for i in 0..10 {
        w.append(&payload(i)).unwrap();
    }
    fs.kill_process();
    assert_eq!(replay(&fs, &dir(), &counters).unwrap().records.len(), 10);
    assert!(w.append(b"x").is_err());
    assert!(w.poisoned());
}

#[test]
fn wal_rotation_keeps_order_and_prefix_across_files() {
    let (fs, counters) = setup();
    let w = writer(&fs, 4, &counters);
    let mut n = 0;
    let mut pos = 0;
    for file in 4..8 {
        assert_eq!(w.number(), file);
        for _ in 0..7 {
            let p = w.append(&payload(n)).unwrap();
            assert!(p > pos);
            pos = p;
            n += 1;
        }
        if file < 7 {
            w.rotate(file + 1).unwrap();
        }
    }
    assert_eq!(list_wal_files(&fs, &dir()).unwrap(), vec![4, 5, 6, 7]);
    // Rotation syncs nothing: a power cut now loses every record (the files themselves stay).
    let fs_cut = fs.clone();
    fs_cut.power_cut();
    let r = replay(&fs_cut, &dir(), &counters).unwrap();
    assert!(
        r.records.is_empty(),
        "{} unsynced records survived",
        r.records.len()
    );
    assert_eq!(r.files, vec![4, 5, 6, 7]);
}

#[test]
fn wal_sync_covers_files_rotated_away_first() {
    let (fs, counters) = setup();
    let w = writer(&fs, 4, &counters);
    let mut pos = 0;
    for (n, file) in (4..8).enumerate() {
        for i in 0..7 {
            pos = w.append(&payload(n * 7 + i)).unwrap();
        }
        if file < 7 {
            w.rotate(file + 1).unwrap();
        }
    }
    let syncs = counters.snapshot().syncs;
    w.sync_to(pos).unwrap();
    // The three files rotated away, then the live one.
    assert_eq!(counters.snapshot().syncs - syncs, 4);
    fs.power_cut();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, (0..28).map(payload).collect::<Vec<_>>());
    assert!(!r.torn);
    // A retired file (its records durable elsewhere) is not synced again.
    let w = writer(&fs, 8, &counters);
    let p = w.append(b"x").unwrap();
    w.rotate(9).unwrap();
    w.retire(8);
    let q = w.append(b"y").unwrap();
    assert!(q > p);
    let syncs = counters.snapshot().syncs;
    w.sync_to(q).unwrap();
    assert_eq!(counters.snapshot().syncs - syncs, 1);
}

/// Regression (issue 17, item 4): a tear in a file that is not the last one used to end the
/// whole log, and sealing deleted every later file, Sync-acknowledged records included; a
/// retired file brought back by a power cut with torn contents did exactly that. Now the tear
/// ends its file only, and sealing cuts that file and keeps the later ones.
#[test]
fn wal_torn_middle_file_ends_that_file_only_and_is_cut_by_sealing() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    w.append(b"a").unwrap();
    w.append(b"b").unwrap();
    w.rotate(2).unwrap();
    w.append(b"c").unwrap();
    w.rotate(3).unwrap();
    w.append(b"d").unwrap();
    drop(w);
    let f1 = wal_file_path(&dir(), 2);
    assert!(fs.flip_byte(&f1, WAL_HEADER_LEN as u64 + 8));
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, vec![b"a".to_vec(), b"b".to_vec(), b"d".to_vec()]);
    assert!(r.torn);
    let kept = seal_recovered(&fs, &dir(), &r, &counters).unwrap();
    assert_eq!(kept, vec![1, 2, 3]);
    assert_eq!(list_wal_files(&fs, &dir()).unwrap(), kept);
    assert_eq!(
        fs.file_len(&f1),
        Some(WAL_HEADER_LEN as u64),
        "the torn file is cut at its tear"
    );
    // New records after the repair are replayed after the recovered ones, with no tear.
    let w = writer(&fs, 4, &counters);
    let p = w.append(b"e").unwrap();
    w.sync_to(p).unwrap();
    fs.power_cut();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(
        r.records,
        vec![b"a".to_vec(), b"b".to_vec(), b"d".to_vec(), b"e".to_vec()]
    );
    assert!(!r.torn);
}

#[test]
fn wal_garbled_header_is_torn_and_unknown_major_is_unsupported() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    w.append(b"a").unwrap();
    w.rotate(2).unwrap();
    w.append(b"b").unwrap();
    drop(w);
    // A short header in file 2 (a crash during creation).
    let f2 = fs
        .open(&wal_file_path(&dir(), 2), OpenMode::default())
        .unwrap();
    f2.set_len(10).unwrap();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, vec![b"a".to_vec()]);
    assert_eq!(
        r.tears
            .iter()
            .map(|t| (t.file, t.offset))
            .collect::<Vec<_>>(),
        vec![(2, 0)]
    );
    let kept = seal_recovered(&fs, &dir(), &r, &counters).unwrap();
    assert_eq!(kept, vec![1]);
    assert_eq!(list_wal_files(&fs, &dir()).unwrap(), kept);

    let f1 = fs
        .open(&wal_file_path(&dir(), 1), OpenMode::default())
        .unwrap();
    f1.write_all_at(&2u16.to_le_bytes(), 8).unwrap();
    match replay(&fs, &dir(), &counters) {
        Err(Error::UnsupportedFormat {
            found_major: 2,
            supported_major: 1,
        }) => {}
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn wal_list_ignores_other_files() {
    let (fs, counters) = setup();
    writer(&fs, 12, &counters);
    writer(&fs, 3, &counters);
    for name in [
        "wal-1.log",
        "wal-000004.tmp",
        "MANIFEST-000001",
        "wal-00000x.log",
    ] {
        fs.open(
            &dir().join(name),
            OpenMode {
                create: true,
                direct: false,
            },
        )
        .unwrap();
    }
    assert_eq!(list_wal_files(&fs, &dir()).unwrap(), vec![3, 12]);
}

/// Delegates to a [`FaultFs`] but makes every file sync take a while, as a device would, so that
/// group commit has something to share.
#[derive(Clone)]
struct SlowSyncFs(FaultFs);
struct SlowSyncFile(Arc<dyn File>);

impl Fs for SlowSyncFs {
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.0.create_dir_all(dir)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn File>> {
        Ok(Arc::new(SlowSyncFile(self.0.open(path, mode)?)))
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.0.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.0.rename(from, to)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.0.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.0.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn Any + Send + Sync>> {
        self.0.lock(path)
    }
}

impl File for SlowSyncFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.0.read_exact_at(buf, off)
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        self.0.read_at(buf, off)
    }
    fn write_all_at(&self, buf: &[u8], off: u64) -> Result<()> {
        self.0.write_all_at(buf, off)
    }
    fn sync(&self) -> Result<()> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.sync()
    }
    fn len(&self) -> Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.0.set_len(len)
    }
    fn is_direct(&self) -> bool {
        false
    }
}

#[test]
fn wal_group_commit_shares_syncs_across_threads() {
    let fault = FaultFs::new();
    fault.create_dir_all(&dir()).unwrap();
    let counters = Arc::new(IoCounters::default());
    let w = Arc::new(
        WalWriter::create(
            Arc::new(SlowSyncFs(fault.clone())),
            &dir(),
            1,
            counters.clone(),
            0,
        )
        .unwrap(),
    );
    let syncs_before = counters.snapshot().syncs;
    const THREADS: usize = 16;
    const PER_THREAD: usize = 25;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let w = w.clone();
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let pos = w.append(&payload(t * PER_THREAD + i)).unwrap();
                    w.sync_to(pos).unwrap();
                }
            });
        }
    });
    let syncs = counters.snapshot().syncs - syncs_before;
    let records = (THREADS * PER_THREAD) as u64;
    assert!(syncs >= 1);
    assert!(
        syncs * 3 < records,
        "{syncs} syncs for {records} synced records: group commit is not sharing"
    );
    fault.power_cut();
    let r = replay(&fault, &dir(), &counters).unwrap();
    assert_eq!(r.records.len(), THREADS * PER_THREAD);
    let mut got = r.records.clone();
    let mut want: Vec<Vec<u8>> = (0..THREADS * PER_THREAD).map(payload).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn wal_injected_failure_poisons_the_writer() {
    // Fail each mutating operation in turn: the first error poisons, nothing succeeds after it,
    // and a power cut then leaves a prefix of the appended records that covers every synced one.
    for fail_at in 0..12 {
        let (fs, counters) = setup();
        let w = writer(&fs, 1, &counters);
        fs.set_plan(FaultPlan {
            fail_op: Some(fail_at),
            sticky: false,
        });
        let mut synced = 0;
        let mut appended = 0;
        let mut failed = false;
        for i in 0..8 {
            let r = w.append(&payload(i)).and_then(|pos| {
                appended = i + 1;
                if i % 2 == 1 {
                    w.sync_to(pos)?;
                    synced = i + 1;
                }
                if i == 5 {
                    w.rotate(2)?;
                    synced = i + 1;
                }
                Ok(())
            });
            if r.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "fail_at {fail_at} injected nothing");
        assert!(w.poisoned());
        assert!(w.append(b"after").is_err());
        assert!(w.sync_to(u64::MAX).is_err());
        assert!(w.rotate(9).is_err());
        assert!(matches!(w.sync_to(0), Err(Error::ReadOnly { .. })));
        fs.power_cut();
        let r = replay(&fs, &dir(), &counters).unwrap();
        assert!(
            r.records.len() >= synced && r.records.len() <= appended,
            "fail_at {fail_at}"
        );
        assert_eq!(
            r.records,
            (0..r.records.len()).map(payload).collect::<Vec<_>>()
        );
    }
}

#[test]
fn wal_records_read_after_a_process_crash_are_sealed_before_new_ones() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    w.append(b"unsynced 1").unwrap();
    w.append(b"unsynced 2").unwrap();
    fs.kill_process();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records.len(), 2);
    seal_recovered(&fs, &dir(), &r, &counters).unwrap();
    let w = writer(&fs, 2, &counters);
    let p = w.append(b"new").unwrap();
    w.sync_to(p).unwrap();
    fs.power_cut();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(
        r.records,
        vec![
            b"unsynced 1".to_vec(),
            b"unsynced 2".to_vec(),
            b"new".to_vec()
        ]
    );
}

/// On the real file system the live file's first bytes are preallocated and mapped: records
/// stored there and past the map's end (written), across a rotation, all replay in order after
/// the writer vanishes without its drop (a crash: the map's tail of zeros is still there and
/// reads as the end of the records); a dropped writer cuts its file back to its records.
#[test]
fn mapped_files_replay_after_a_crash_and_are_cut_when_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Fs> = Arc::new(crate::storage::RealFs);
    let counters = Arc::new(IoCounters::default());
    let prealloc = 64 << 10;
    let w = WalWriter::create(fs.clone(), tmp.path(), 1, counters.clone(), prealloc).unwrap();
    let file1 = wal_file_path(tmp.path(), 1);
    assert_eq!(
        std::fs::metadata(&file1).unwrap().len(),
        prealloc,
        "preallocated"
    );
    let mut want = Vec::new();
    // About 100 KiB: past the 64 KiB mapped, so the last records are written past the map.
    for i in 0..600 {
        w.append(&payload(i)).unwrap();
        want.push(payload(i));
    }
    w.rotate(2).unwrap();
    w.cut_tails();
    // The rotated file is cut back to its records (no tail of zeros).
    let len1 = std::fs::metadata(&file1).unwrap().len();
    assert_eq!(len1, w.bytes_written() - WAL_HEADER_LEN as u64);
    for i in 600..700 {
        w.append(&payload(i)).unwrap();
        want.push(payload(i));
    }
    // A crash: no drop, so no cut; file 2 keeps its preallocated tail of zeros.
    std::mem::forget(w);
    let file2 = wal_file_path(tmp.path(), 2);
    assert_eq!(std::fs::metadata(&file2).unwrap().len(), prealloc);
    let r = replay(fs.as_ref(), tmp.path(), &counters).unwrap();
    assert!(!r.torn, "{:?}", r.tears);
    assert_eq!(r.records, want);

    // A writer that is dropped leaves its file exactly as long as its records.
    let w = WalWriter::create(fs.clone(), tmp.path(), 3, counters.clone(), prealloc).unwrap();
    let end = (0..10)
        .map(|i| w.append(&payload(i)).unwrap())
        .last()
        .unwrap();
    drop(w);
    let len3 = std::fs::metadata(wal_file_path(tmp.path(), 3))
        .unwrap()
        .len();
    assert_eq!(len3, WAL_HEADER_LEN as u64 + end);
}

/// A rotation leaves the old file's mapped tail of zeros for `cut_tails` (a truncation waits on
/// the file system's journal, up to 170 ms measured, which a writer at a rotation must not);
/// until then the zeros read as the end of its records; a retired file is not cut.
#[test]
fn a_rotated_file_is_cut_later_and_replays_before_its_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Fs> = Arc::new(crate::storage::RealFs);
    let counters = Arc::new(IoCounters::default());
    let prealloc = 64 << 10;
    let w = WalWriter::create(fs.clone(), tmp.path(), 1, counters.clone(), prealloc).unwrap();
    let len = |n: u64| {
        std::fs::metadata(wal_file_path(tmp.path(), n))
            .unwrap()
            .len()
    };
    let mut want = Vec::new();
    let mut end = 0;
    for i in 0..10 {
        end = w.append(&payload(i)).unwrap();
        want.push(payload(i));
    }
    w.rotate(2).unwrap();
    assert_eq!(len(1), prealloc, "the rotation cut the old file");
    let r = replay(fs.as_ref(), tmp.path(), &counters).unwrap();
    assert!(!r.torn, "{:?}", r.tears);
    assert_eq!(r.records, want);
    w.cut_tails();
    assert_eq!(len(1), WAL_HEADER_LEN as u64 + end);
    // A retired file (the Db deletes it) is left as it is.
    w.append(&payload(10)).unwrap();
    w.rotate(3).unwrap();
    w.retire(2);
    w.cut_tails();
    assert_eq!(len(2), prealloc);
}

/// Zeros are the end of a file's records only when nothing but zeros follows: a zeroed stretch
/// with a record after it (a page the OS never wrote back, before one it did) is a tear.
#[test]
fn zeros_before_more_data_are_a_tear() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    for i in 0..5 {
        w.append(&payload(i)).unwrap();
    }
    drop(w);
    let path = wal_file_path(&dir(), 1);
    let file = fs
        .open(
            &path,
            OpenMode {
                create: false,
                direct: false,
            },
        )
        .unwrap();
    let len = file.len().unwrap();
    // 100 zero bytes, then a valid record.
    file.write_all_at(&[0u8; 100], len).unwrap();
    file.write_all_at(&frame_record(&payload(9)), len + 100)
        .unwrap();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert!(r.torn);
    assert_eq!(r.records, (0..5).map(payload).collect::<Vec<_>>());
    // Only zeros after the records: the end, not a tear.
    file.set_len(len + 100).unwrap();
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert!(!r.torn);
    assert_eq!(r.records.len(), 5);
}

/// A file prepared ahead is the one the rotation switches to (no new file is created then);
/// an unused spare replays as an empty file and is removed when the writer is dropped.
#[test]
fn prepared_file_is_the_next_rotation() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    w.append(&payload(0)).unwrap();
    assert!(w.prepare_next().unwrap());
    assert!(!w.prepare_next().unwrap(), "already prepared");
    assert!(fs.exists(&wal_file_path(&dir(), 2)));
    // Replay sees the spare as an empty file after file 1's record.
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert!(!r.torn);
    assert_eq!(r.records, vec![payload(0)]);
    let syncs = counters.snapshot().syncs;
    w.rotate(2).unwrap();
    assert_eq!(
        counters.snapshot().syncs,
        syncs,
        "the rotation synced nothing"
    );
    w.append(&payload(1)).unwrap();
    assert!(w.prepare_next().unwrap());
    drop(w);
    assert!(
        !fs.exists(&wal_file_path(&dir(), 3)),
        "the spare was removed"
    );
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, vec![payload(0), payload(1)]);
}

/// Each fsync of the live file is followed by a sync mark: replay leaves marks out of the
/// records, and a tear that a valid mark after it says was synced is known as damage (no power
/// cut tears synced bytes), while one after the last mark is not.
#[test]
fn wal_sync_marks_tell_synced_damage_from_an_unsynced_tear() {
    let (fs, counters) = setup();
    let w = writer(&fs, 1, &counters);
    let path = wal_file_path(&dir(), 1);
    let mut starts = Vec::new();
    for i in 0..6 {
        starts.push(fs.file_len(&path).unwrap());
        let pos = w.append(&payload(i)).unwrap();
        if i == 2 {
            w.sync_to(pos).unwrap();
        }
    }
    drop(w);
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.records, (0..6).map(payload).collect::<Vec<_>>());
    assert!(!r.torn);
    // Record 1, before the mark: damage in the synced part.
    assert!(fs.flip_byte(&path, starts[1] + 9));
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.tears.len(), 1);
    assert_eq!(r.tears[0].offset, starts[1]);
    assert!(r.tears[0].synced, "{:?}", r.tears[0]);
    assert_eq!(
        r.tears[0].followed_by,
        vec![payload(2), payload(3), payload(4), payload(5)]
    );
    assert!(fs.flip_byte(&path, starts[1] + 9));
    // Record 4, after the only mark: no sync covered it.
    assert!(fs.flip_byte(&path, starts[4] + 9));
    let r = replay(&fs, &dir(), &counters).unwrap();
    assert_eq!(r.tears.len(), 1);
    assert!(!r.tears[0].synced, "{:?}", r.tears[0]);
    assert_eq!(r.tears[0].followed_by, vec![payload(5)]);
}

/// A reader that knows no sync marks (WAL minor 0 or 1) decodes one as an empty batch with
/// sequence number 0, which every open skips as already in the index.
#[test]
fn a_sync_mark_is_an_empty_batch_of_sequence_number_zero_to_older_readers() {
    let mark = sync_mark(4096);
    let b = crate::batch::decode(&mark).unwrap();
    assert_eq!(b.first_seq, 0);
    assert!(b.ops.is_empty());
    assert_eq!(parse_sync_mark(&mark), Some(4096));
    // A real batch is never a mark: its first sequence number is at least 1.
    let mut batch = crate::WriteBatch::new();
    batch.put(b"SYNC", [0u8; 4]);
    assert_eq!(parse_sync_mark(&batch.encode(1)), None);
}
