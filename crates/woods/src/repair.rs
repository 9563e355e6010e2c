//! Repair of a database whose `CURRENT` file or manifest log is damaged or missing
//! ([`Db::repair`], `woods repair DIR`).
//!
//! The index's roots and extents live only in the manifest, so repair works from the manifest
//! logs that are in the directory: it reads each one without trusting `CURRENT`
//! ([`Manifest::salvage`]: every log's newest state it can reach: past a bad record when a
//! snapshot record follows it, since a snapshot holds the whole state and the log holds one
//! every [`manifest::SNAPSHOT_EVERY`] records; else up to the bad record), tries their states
//! newest first (most commits; the lower log number on a tie, since a higher-numbered log with
//! as many commits is the leftover of a rollover that never became current), and keeps the
//! first whose index checks clean against the data file: it is written as the snapshot of a
//! new log, which `CURRENT` then names, and the other logs are renamed `*.old`. When none checks
//! clean, the directory is put back as it was. Nothing but manifest files is written, so a state tried
//! and refused leaves the data file and the write-ahead log as they were. Log records above the
//! kept state's durable sequence number are replayed by the next open, as after any crash.
//!
//! Every state repair tries is installed with a rollback point after it (`storage::Stamp`):
//! pages written by any later commit, or by any incarnation after the state's, are stale. So the
//! check of a state refuses it when it reaches a page that later work freed and wrote again
//! (its checksum is good, its stamp is not), and the next opens keep refusing such pages. The
//! new incarnation is above every stamp in the data file (repair reads every page's trailer)
//! and every incarnation a manifest log names.

use std::path::Path;
use std::sync::Arc;

use crate::batch;
use crate::db::{open_parts, Db, DATA_FILE, EXTENT_PAGES, LOCK_FILE};
use crate::error::{Error, Result};
use crate::manifest::{self, Manifest, ManifestState, CURRENT_TMP_FILE};
use crate::options::{Options, PersistedConfig};
use crate::storage::{
    verify, AlignedBuf, Fs, IoCounters, OpenMode, RealFs, RollbackPoint, PAGE_SIZE,
};
use crate::wal;

/// What [`Db::repair`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// The manifest log repair wrote, which `CURRENT` now names (`None`: nothing needed
    /// repair, and nothing was written).
    pub installed_log: Option<u64>,
    /// The manifest log whose state was kept (`None` when none could be read and an empty
    /// state was written: a database whose creation was cut short).
    pub from_log: Option<u64>,
    /// Writes up to this sequence number are in the index of the kept state; the log files'
    /// records after it are replayed by the next open.
    pub durable_seq: u64,
    /// Commits found in a damaged log after its damage: missing from the kept state.
    pub lost_commits: u64,
    /// Writes known lost: log records start above `durable_seq + 1`, so those between were
    /// neither in the kept index nor in the log (`first..=last` sequence numbers).
    pub lost_seqs: Option<(u64, u64)>,
    /// Valid log records after a damaged one that repair dropped (point-in-time recovery: the
    /// log now ends before the damage; the damaged file and the later ones are kept as
    /// `wal-*.log.old`). Their sequence numbers are in `lost_seqs`.
    pub log_records_dropped: u64,
    /// Entries (all versions) the check of the kept index counted.
    pub entries: u64,
    /// What repair found and did, one sentence each.
    pub notes: Vec<String>,
}

/// woods' files in `dir` that make it a database (or the remains of one), sorted: the data
/// file, manifest logs, `CURRENT.tmp` and log files. `LOCK` is not one: opening takes it.
pub(crate) fn leftovers(fs: &dyn Fs, dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = fs
        .list(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            n == DATA_FILE
                || n == CURRENT_TMP_FILE
                || manifest::parse_manifest_file_name(n).is_some()
                || wal::parse_wal_file_name(n).is_some()
        })
        .collect();
    found.sort();
    found
}

impl Db {
    /// Repairs the database in `path` when its `CURRENT` file or manifest is damaged or
    /// missing, from the manifest logs that are there (see the module documentation of
    /// `woods::repair`), or whose write-ahead log is damaged in the middle (valid records after
    /// a damaged one, which an open refuses), by recovering the log to the point before the
    /// damage; and says what it found and did. A database that opens and checks clean, with a
    /// log that replays whole, is left untouched. The database must not be open.
    ///
    /// Errors: the directory holds no database files; no manifest log can be read while the
    /// data file holds more than its header (the index cannot be found without one); no state
    /// checks clean (damage in the data file itself, or states older than pages rewritten
    /// since), which repair cannot undo: it then leaves the directory as it was.
    pub fn repair(path: impl AsRef<Path>, opts: Options) -> Result<RepairReport> {
        opts.validate()?;
        let dir = path.as_ref();
        let fs: Arc<dyn Fs> = opts.fs.clone().unwrap_or_else(|| Arc::new(RealFs));
        let present = leftovers(&*fs, dir);
        if !Manifest::exists(&*fs, dir) && present.is_empty() {
            return Err(Error::corruption(
                "database directory",
                None,
                format!(
                    "{} holds no woods database: nothing to repair",
                    dir.display()
                ),
            ));
        }
        let _lock = fs.lock(&dir.join(LOCK_FILE))?;
        let io = Arc::new(IoCounters::default());
        let mut report = RepairReport::default();

        if Manifest::exists(&*fs, dir) {
            match open_parts(&fs, dir, &opts, &io, false, false) {
                Ok(parts) => {
                    report.entries = parts.index.check()?;
                    report.durable_seq = parts.state.durable_seq;
                    report.notes.push(
                        "CURRENT names a sound manifest log and the index checks clean".into(),
                    );
                    drop(parts);
                    let damaged = repair_log(&*fs, dir, &io, &mut report)?;
                    if !repair_missing_log(&*fs, dir, &io, &mut report)? && !damaged {
                        report
                            .notes
                            .push("the log has no damage: nothing to repair".into());
                    }
                    return Ok(report);
                }
                Err(e @ Error::Corruption { .. }) => {
                    report.notes.push(format!("opening fails: {e}"));
                }
                Err(e) => return Err(e),
            }
        } else {
            report.notes.push(format!(
                "CURRENT is missing; the directory holds {}",
                present.join(", ")
            ));
        }

        let mut candidates = Vec::new();
        for (number, salvaged) in Manifest::salvage(&*fs, dir, &io) {
            let name = manifest::manifest_file_name(number);
            match salvaged {
                Ok(s) => {
                    for (off, between) in &s.passed_damage {
                        report.notes.push(format!(
                            "{name} is damaged at byte {off}; a snapshot {between} valid \
                             record(s) after it holds the whole state from there on, so the \
                             damage costs no commit (the log's newest state is commit {})",
                            s.state.commits
                        ));
                    }
                    if let Some(off) = s.damaged_at {
                        report.notes.push(format!(
                            "{name} is damaged at byte {off}, with {} valid record(s) after \
                             the damage; its state before the damage is commit {}",
                            s.lost_records, s.state.commits
                        ));
                    }
                    candidates.push(s);
                }
                Err(e) => report.notes.push(format!("{name} is unreadable: {e}")),
            }
        }
        if candidates.is_empty() {
            return fresh_manifest(&fs, dir, &opts, &io, report);
        }
        // Newest first: most commits, then the lower number (see the module documentation).
        candidates.sort_by_key(|c| (std::cmp::Reverse(c.state.commits), c.number));
        let current = dir.join(manifest::CURRENT_FILE);
        let original = if fs.exists(&current) {
            let f = fs.open(&current, OpenMode::default())?;
            let mut bytes = vec![0u8; (f.len()?).min(4096) as usize];
            f.read_exact_at(&mut bytes, 0)?;
            Some(bytes)
        } else {
            None
        };
        // Above every stamp in the data file and every incarnation the logs name or could have.
        let next = candidates
            .iter()
            .map(|c| c.incarnation_bound)
            .max()
            .unwrap_or(1)
            .max(max_stamped_incarnation(&*fs, dir)? + 1);
        let mut refused = Vec::new();
        let mut written = Vec::new();
        for c in &candidates {
            let mut state = c.state.clone();
            state.rollbacks.push(RollbackPoint {
                incarnation: state.incarnation,
                commit: state.commits,
                next,
            });
            state.incarnation = next;
            let installed = Manifest::install(&*fs, dir, &state, &io)?;
            written.push(installed);
            match open_parts(&fs, dir, &opts, &io, false, false).and_then(|p| p.index.check()) {
                Ok(entries) => {
                    for &n in written.iter().filter(|&&n| n != installed) {
                        fs.remove(&dir.join(manifest::manifest_file_name(n)))?;
                    }
                    Manifest::set_aside_logs(&*fs, dir, installed, &io)?;
                    report.installed_log = Some(installed);
                    report.from_log = Some(c.number);
                    report.durable_seq = c.state.durable_seq;
                    report.lost_commits = c.lost_records;
                    report.entries = entries;
                    report.notes.push(format!(
                        "kept the state of {} (commit {}, writes up to sequence number {} in \
                         the index), written as {}, which CURRENT now names; the other logs are \
                         renamed *.old",
                        manifest::manifest_file_name(c.number),
                        c.state.commits,
                        c.state.durable_seq,
                        manifest::manifest_file_name(installed)
                    ));
                    repair_log(&*fs, dir, &io, &mut report)?;
                    repair_missing_log(&*fs, dir, &io, &mut report)?;
                    report_log_gap(&*fs, dir, &io, &mut report)?;
                    return Ok(report);
                }
                Err(e) => {
                    report.notes.push(format!(
                        "the state of {} (commit {}) does not check clean: {e}",
                        manifest::manifest_file_name(c.number),
                        c.state.commits
                    ));
                    refused.push(e);
                }
            }
        }
        // None checks clean: every state names pages that are damaged, or that later work
        // freed and wrote again (a page's checksum does not tell which run it belongs to, so
        // such a state could read wrong values without an error). Keep none: the directory is
        // put back as it was, and still refuses to open.
        Manifest::restore_current(&*fs, dir, original.as_deref(), &written, &io)?;
        Err(Error::corruption(
            "repair",
            None,
            format!(
                "no manifest state checks clean against the data file (the newest, that of {}: \
                 {}); nothing was kept, and the directory is as it was",
                manifest::manifest_file_name(candidates[0].number),
                refused[0]
            ),
        ))
    }
}

/// The highest incarnation any page of the data file is stamped with (pages whose checksum
/// fails are skipped): a new incarnation must be above it, or a page written by a lost history
/// could pass for one of its own.
fn max_stamped_incarnation(fs: &dyn Fs, dir: &Path) -> Result<u64> {
    let path = dir.join(DATA_FILE);
    if !fs.exists(&path) {
        return Ok(0);
    }
    let file = fs.open(&path, OpenMode::default())?;
    let pages = file.len()? / PAGE_SIZE as u64;
    const CHUNK: u64 = 256;
    let mut buf = AlignedBuf::zeroed(CHUNK as usize * PAGE_SIZE);
    let mut max = 0;
    let mut start = 0;
    while start < pages {
        let n = (pages - start).min(CHUNK);
        let bytes = &mut buf[..n as usize * PAGE_SIZE];
        file.read_exact_at(bytes, start * PAGE_SIZE as u64)?;
        for (i, page) in bytes.chunks_exact(PAGE_SIZE).enumerate() {
            if let Ok(stamp) = verify(start + i as u64, page) {
                max = max.max(stamp.incarnation);
            }
        }
        start += n;
    }
    Ok(max)
}

/// No manifest log can be read. Safe only when the data file holds nothing but its header (a
/// creation cut short, before any index page was written): then the index is empty, and an
/// empty state with durable sequence number 0 lets the next open replay every log record.
fn fresh_manifest(
    fs: &Arc<dyn Fs>,
    dir: &Path,
    opts: &Options,
    io: &Arc<IoCounters>,
    mut report: RepairReport,
) -> Result<RepairReport> {
    let data = dir.join(DATA_FILE);
    let file = if fs.exists(&data) {
        Some(fs.open(&data, OpenMode::default())?)
    } else {
        None
    };
    let len = match &file {
        Some(f) => f.len()?,
        None => 0,
    };
    if len > PAGE_SIZE as u64 {
        return Err(Error::corruption(
            "repair",
            None,
            format!(
                "no manifest log can be read, and {DATA_FILE} holds {len} bytes: the index's \
                 roots and extents cannot be found without a manifest"
            ),
        ));
    }
    let stored = match &file {
        Some(f) if len == PAGE_SIZE as u64 => {
            let mut page = crate::storage::AlignedBuf::zeroed(PAGE_SIZE);
            f.read_exact_at(&mut page, 0)
                .and_then(|()| crate::db::header_config(&page))
        }
        Some(_) => Err(Error::corruption(DATA_FILE, Some(0), "short header")),
        None => Err(Error::corruption(DATA_FILE, None, "missing")),
    };
    let config = match stored {
        Ok(c) => c,
        Err(e) => {
            let config = config_from_options(opts, &format!("{DATA_FILE}'s header is lost ({e})"))?;
            let f = fs.open(
                &data,
                OpenMode {
                    create: true,
                    direct: false,
                },
            )?;
            f.set_len(0)?;
            f.write_all_at(&crate::db::write_header(&config), 0)?;
            f.sync()?;
            fs.sync_dir(dir)?;
            report
                .notes
                .push(format!("wrote the header of {DATA_FILE} afresh"));
            config
        }
    };
    let state = ManifestState {
        config: config.encode(),
        page_size: PAGE_SIZE as u32,
        extent_pages: EXTENT_PAGES,
        ..ManifestState::default()
    };
    let installed = Manifest::install(&**fs, dir, &state, io)?;
    report.installed_log = Some(installed);
    report.notes.push(format!(
        "no manifest log could be read and {DATA_FILE} holds no index page (a creation cut \
         short): wrote an empty {} naming a {} index, which CURRENT now names; the log's \
         records are replayed by the next open",
        manifest::manifest_file_name(installed),
        config.index.name()
    ));
    report_log_gap(&**fs, dir, io, &mut report)?;
    Ok(report)
}

fn config_from_options(opts: &Options, why: &str) -> Result<PersistedConfig> {
    let Some(index) = opts.index.clone() else {
        return Err(Error::InvalidOption(format!(
            "repair must write a new manifest and {why}: name the index kind the database was \
             created with (Options::index, `woods repair --index KIND`)"
        )));
    };
    Ok(PersistedConfig {
        index,
        comparator: "bytewise".into(),
        merge_operator: opts.merge_operator.as_ref().map(|m| m.name().to_string()),
    })
}

/// Point-in-time recovery of a log damaged in the middle ([`log_damage`]): the damaged file is
/// cut before the damage and the later files set aside, so the next open replays the log up to
/// the damage; the dropped records are reported. Each file changed or set aside keeps its
/// original bytes as `wal-*.log.old`. Returns whether it changed anything.
fn repair_log(fs: &dyn Fs, dir: &Path, io: &IoCounters, report: &mut RepairReport) -> Result<bool> {
    let replay = wal::replay(fs, dir, io)?;
    let Some(d) = log_damage(&replay, report.durable_seq)? else {
        return Ok(false);
    };
    let old = |n: u64| dir.join(format!("{}.old", wal::wal_file_name(n)));
    let path = wal::wal_file_path(dir, d.file);
    if d.offset < wal::WAL_HEADER_LEN as u64 {
        fs.rename(&path, &old(d.file))?;
    } else {
        let f = fs.open(&path, OpenMode::default())?;
        let bytes = crate::storage::read_whole(&*f, &format!("WAL file {}", path.display()))?;
        let copy = fs.open(
            &old(d.file),
            OpenMode {
                create: true,
                direct: false,
            },
        )?;
        copy.set_len(0)?;
        copy.write_all_at(&bytes, 0)?;
        copy.sync()?;
        f.set_len(d.offset)?;
        f.sync()?;
    }
    for &n in replay.files.iter().filter(|&&n| n > d.file) {
        fs.rename(&wal::wal_file_path(dir, n), &old(n))?;
    }
    fs.sync_dir(dir)?;
    report.log_records_dropped = d.records;
    report.lost_seqs = Some(match report.lost_seqs {
        Some((a, b)) => (a.min(d.seqs.0), b.max(d.seqs.1)),
        None => d.seqs,
    });
    report.notes.push(format!(
        "{} is damaged at byte {} ({}), and {} valid record(s) follow it: the log now ends \
         before the damage (point-in-time recovery), so the writes with sequence numbers {} to \
         {} are lost; the original files are kept as wal-*.log.old",
        wal::wal_file_name(d.file),
        d.offset,
        d.reason,
        d.records,
        d.seqs.0,
        d.seqs.1
    ));
    Ok(true)
}

/// Notes writes that neither the kept index nor the log holds: the log's first record above
/// the kept durable sequence number starts past the next one.
fn report_log_gap(
    fs: &dyn Fs,
    dir: &Path,
    io: &IoCounters,
    report: &mut RepairReport,
) -> Result<()> {
    let replay = wal::replay(fs, dir, io)?;
    let durable = report.durable_seq;
    let next = replay
        .records
        .iter()
        .filter_map(|r| batch::decode(r).ok())
        .map(|b| b.first_seq)
        .find(|&first| first > durable);
    if let Some(first) = next {
        if first > durable + 1 {
            report.lost_seqs = Some((durable + 1, first - 1));
            report.notes.push(format!(
                "writes with sequence numbers {} to {} are in neither the kept index nor the \
                 log: they are lost, and the next open drops the log records after them, which \
                 no longer continue the database",
                durable + 1,
                first - 1
            ));
        }
    }
    Ok(())
}

/// Log files missing in the middle of the log: the records above the index's durable sequence
/// number stop, and resume only in a later file, while some file number between the two is
/// absent. Nothing but damage or a careless removal explains it: a log file's name is made
/// durable before any record goes into it (no power cut takes it away), a retired file is
/// removed only once the index holds all its records durably (so its records are at or below
/// the durable sequence number), and an open removes the files its recovery stopped before
/// first, with a directory sync, before the files it replayed (`Db::open`), so that a crash
/// while it removes them leaves no later file behind an absent one. A gap with every file
/// number present is a power cut's loss of unsynced records (a file from before a restart whose
/// tail came back short), and recovery stops there, as before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MissingLog {
    /// The absent file numbers between the last record that continues the log and the file
    /// that resumes it.
    pub missing: Vec<u64>,
    /// The file whose records no longer continue the log: it and every later file are what
    /// stopping at the gap drops.
    pub resumes_in: u64,
    /// The sequence numbers in no log file, `first..=last`.
    pub absent_seqs: (u64, u64),
    /// Valid records after the gap that stopping there drops, and the sequence numbers lost in
    /// all (the absent ones and theirs).
    pub records: u64,
    pub seqs: (u64, u64),
}

impl MissingLog {
    /// The error an open returns for it.
    pub(crate) fn error(&self, dir: &Path) -> Error {
        let names: Vec<String> = self
            .missing
            .iter()
            .map(|&n| wal::wal_file_name(n))
            .collect();
        Error::corruption(
            format!(
                "WAL file {}",
                wal::wal_file_path(dir, self.missing[0]).display()
            ),
            None,
            format!(
                "missing: the log holds no record of the writes with sequence numbers {} to {}, \
                 and resumes after them in {} while {} {} absent; a retired log file is removed \
                 only once the index holds its records, so a file is missing that the database \
                 still needs; stopping at the gap would also drop the {} record(s) after it \
                 (sequence numbers {} to {}), losing the writes with sequence numbers {} to {} \
                 in all; `Db::repair` (`woods repair DIR`) recovers to the point before the gap \
                 and reports what it drops",
                self.absent_seqs.0,
                self.absent_seqs.1,
                wal::wal_file_name(self.resumes_in),
                names.join(", "),
                if names.len() == 1 { "is" } else { "are" },
                self.records,
                self.absent_seqs.1 + 1,
                self.seqs.1,
                self.seqs.0,
                self.seqs.1
            ),
        )
    }
}

/// Finds the first gap in the sequence numbers of the log's records above `durable_seq` that an
/// absent log file explains ([`MissingLog`]). Decided by sequence numbers: files absent below
/// or between files whose records the index holds durably are retired ones, as they may be.
pub(crate) fn missing_log(replay: &wal::Replay, durable_seq: u64) -> Result<Option<MissingLog>> {
    let mut last = durable_seq;
    // The file of the last record at or below `last`: the log continues up to there.
    let mut last_file: Option<u64> = None;
    let mut gap: Option<(usize, u64)> = None;
    for (i, (rec, &file)) in replay.records.iter().zip(&replay.record_files).enumerate() {
        let (first, end) = batch::seq_range(rec)?;
        if first <= last {
            last_file = Some(file);
            continue;
        }
        if first == last + 1 {
            last = end;
            last_file = Some(file);
            continue;
        }
        gap = Some((i, first));
        break;
    }
    let Some((i, first)) = gap else {
        return Ok(None);
    };
    let resumes_in = replay.record_files[i];
    // Numbers below the first file present are retired files, unless the gap starts there:
    // then the file just before it held the absent records.
    let lo = last_file.or_else(|| replay.files.first().copied().filter(|&f| f < resumes_in));
    let candidates = match lo {
        Some(lo) => (lo + 1..resumes_in).collect::<Vec<_>>(),
        None => resumes_in
            .checked_sub(1)
            .filter(|&n| n > 0)
            .into_iter()
            .collect(),
    };
    let missing: Vec<u64> = candidates
        .into_iter()
        .filter(|n| replay.files.binary_search(n).is_err())
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let mut records = 0u64;
    let mut max_end = first - 1;
    for rec in &replay.records[i..] {
        let (_, end) = batch::seq_range(rec)?;
        records += 1;
        max_end = max_end.max(end);
    }
    Ok(Some(MissingLog {
        missing,
        resumes_in,
        absent_seqs: (last + 1, first - 1),
        records,
        seqs: (last + 1, max_end),
    }))
}

/// Point-in-time recovery of a log with files missing in the middle ([`missing_log`]): the files
/// from the one that resumes the log on are set aside as `wal-*.log.old`, so that the next open
/// replays the log up to the gap; the writes lost are reported. Returns whether it changed
/// anything.
fn repair_missing_log(
    fs: &dyn Fs,
    dir: &Path,
    io: &IoCounters,
    report: &mut RepairReport,
) -> Result<bool> {
    let replay = wal::replay(fs, dir, io)?;
    let Some(m) = missing_log(&replay, report.durable_seq)? else {
        return Ok(false);
    };
    for &n in replay.files.iter().filter(|&&n| n >= m.resumes_in) {
        fs.rename(
            &wal::wal_file_path(dir, n),
            &dir.join(format!("{}.old", wal::wal_file_name(n))),
        )?;
    }
    fs.sync_dir(dir)?;
    report.log_records_dropped += m.records;
    report.lost_seqs = Some(match report.lost_seqs {
        Some((a, b)) => (a.min(m.seqs.0), b.max(m.seqs.1)),
        None => m.seqs,
    });
    let names: Vec<String> = m.missing.iter().map(|&n| wal::wal_file_name(n)).collect();
    report.notes.push(format!(
        "the log holds no record of the writes with sequence numbers {} to {} ({} missing) and \
         resumes in {}: the log now ends before the gap (point-in-time recovery), so the writes \
         with sequence numbers {} to {} are lost ({} record(s) dropped); the files from {} on \
         are kept as wal-*.log.old",
        m.absent_seqs.0,
        m.absent_seqs.1,
        names.join(", "),
        wal::wal_file_name(m.resumes_in),
        m.seqs.0,
        m.seqs.1,
        m.records,
        wal::wal_file_name(m.resumes_in)
    ));
    Ok(true)
}

/// A damaged record in the write-ahead log that records the database needs follow: stopping
/// there (point-in-time recovery) would drop them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogDamage {
    /// The log file holding the damage, and the byte where its valid prefix ends.
    pub file: u64,
    pub offset: u64,
    pub reason: String,
    /// The file was created in this boot, so no power cut can have torn it: the records after
    /// the damage were acknowledged, and dropping them silently would lose them.
    pub this_boot: bool,
    /// A sync mark after the damage says the file was synced past it: no power cut can have
    /// torn it, whatever the boot.
    pub synced: bool,
    /// Valid records after the damage (above the index's durable sequence number) that the
    /// log's valid prefix does not reach, and the sequence numbers recovery to the point
    /// before the damage loses (the damaged record's and theirs).
    pub records: u64,
    pub seqs: (u64, u64),
}

impl LogDamage {
    /// The error an open returns for it.
    pub(crate) fn error(&self, dir: &Path) -> Error {
        Error::corruption(
            format!("WAL file {}", wal::wal_file_path(dir, self.file).display()),
            None,
            format!(
                "the record at byte {} is damaged ({}) but {} valid record(s) follow it, \
                 which no crash leaves {}: not a torn tail, and stopping there would drop the \
                 writes with sequence numbers {} to {}; `Db::repair` (`woods repair DIR`) \
                 recovers to the point before the damage and reports what it drops",
                self.offset,
                self.reason,
                self.records,
                if self.this_boot {
                    "in a log file written since the machine started"
                } else {
                    "in the synced part of a log file (a sync mark after the damage says the \
                     file was synced past it)"
                },
                self.seqs.0,
                self.seqs.1
            ),
        )
    }
}

/// Finds the first damaged place of the log that drops records the database needs (above
/// `durable_seq`): records found after the bad bytes of a file, or the later files' records
/// that no longer continue the log after a tear. A torn tail (nothing needed after it) is not
/// damage. A gap between files that no tear explains is [`missing_log`]'s.
pub(crate) fn log_damage(replay: &wal::Replay, durable_seq: u64) -> Result<Option<LogDamage>> {
    // The records the open's replay applies, and the first it does not (a gap).
    let mut last = durable_seq;
    let mut dropped: Vec<(u64, u64, u64)> = Vec::new();
    for (rec, &file) in replay.records.iter().zip(&replay.record_files) {
        let b = batch::decode(rec)?;
        let end = b.first_seq + (b.ops.len() as u64).max(1) - 1;
        if b.first_seq <= durable_seq {
            continue;
        }
        if dropped.is_empty() && b.first_seq == last + 1 {
            last = end;
        } else {
            dropped.push((file, b.first_seq, end));
        }
    }
    for (i, at) in replay.tears.iter().enumerate() {
        // A record found by resynchronising may be a chance match inside a payload: only those
        // that decode count.
        let here = at
            .followed_by
            .iter()
            .filter_map(|r| batch::decode(r).ok())
            .filter(|b| b.first_seq > durable_seq)
            .map(|b| {
                (
                    at.file,
                    b.first_seq,
                    b.first_seq + (b.ops.len() as u64).max(1) - 1,
                )
            });
        let later = dropped.iter().copied().filter(|d| d.0 > at.file);
        let lost: Vec<(u64, u64, u64)> = here.chain(later).collect();
        // Records in later files are this tear's loss only when no later tear comes first.
        let next_tear = replay.tears.get(i + 1).map_or(u64::MAX, |t| t.file);
        let own = !at.followed_by.is_empty() && lost.iter().any(|d| d.0 == at.file)
            || dropped
                .first()
                .is_some_and(|d| d.0 > at.file && d.0 <= next_tear);
        if own && !lost.is_empty() {
            return Ok(Some(LogDamage {
                file: at.file,
                offset: at.offset,
                reason: at.reason.clone(),
                this_boot: at.this_boot,
                synced: at.synced,
                records: lost.len() as u64,
                // Point-in-time recovery keeps the writes up to `last`: everything after it,
                // the damaged record's own writes included, is what it drops.
                seqs: (last + 1, lost.iter().map(|d| d.2).max().unwrap_or(last)),
            }));
        }
    }
    Ok(None)
}
