//! One round of `woods stress`, in its own process: open the database (recovering it after the
//! last kill), verify it against the expected state, then write and read with several threads
//! until killed, or until standard input closes (the last round: stop, close, reopen, verify).
//!
//! It tells the parent how far it got on standard output, one line each: `ready N E` once
//! verified (N keys present, E entries counted by `check`), `ops W R S` (writes, reads and
//! snapshots so far) every 250 ms, and `done N E` after the last round's final verification.
//! Exit status: 0 when stopped cleanly, 3 on a mismatch, 2 on an error.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use woods::{Db, DbIter, Durability, IndexKind, Options, WriteBatch};
use woods_bench::dist::Rng;

use super::expected::{BatchEntry, Expected, MAX_BATCH};
use woods_cli::stress_model::{
    self as model, absent, describe, key, key_id, version, visible, StressMerge,
};

/// What the parent passes to each round.
#[derive(clap::Args, Clone, Debug)]
pub struct ChildArgs {
    /// The run's directory: `db/` and `expected`.
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub index: String,
    #[arg(long)]
    pub threads: u32,
    #[arg(long)]
    pub readers: u32,
    #[arg(long)]
    pub keys: u32,
    #[arg(long)]
    pub seed: u64,
    #[arg(long)]
    pub memtable_bytes: u64,
    #[arg(long)]
    pub cache_bytes: u64,
    /// Arm the pause points in one round of two.
    #[arg(long)]
    pub pauses: bool,
}

/// Why a round failed.
pub enum Failure {
    /// The database disagrees with the expected state or with itself.
    Mismatch(String),
    /// Something failed (a database or I/O error).
    Error(String),
}

type Res<T> = Result<T, Failure>;

fn db_err(what: impl Into<String>) -> impl FnOnce(woods::Error) -> Failure {
    let what = what.into();
    move |e| Failure::Error(format!("{what}: {e}"))
}

fn mismatch<T>(m: String) -> Res<T> {
    Err(Failure::Mismatch(m))
}

/// Runs one round; returns the exit status.
pub fn run(a: &ChildArgs, base: Options) -> u8 {
    // Each round draws how background work is done: one thread (the default), two, or none
    // (the writers do it inline).
    let background_threads = [1, 1, 2, 0][Rng::new(a.seed, 0).below(4) as usize];
    // And, one round in two, whether threads pause now and then between the steps of the
    // engine's protocols (`woods::pause`), to widen the windows of races between them
    // (`WOODS_PAUSES` set by the user arms them in every round).
    if a.pauses && Rng::new(a.seed, 1).below(2) == 0 {
        woods::pause::arm(a.seed, 8, 300);
    }
    let pauses = if woods::pause::armed() { "on" } else { "off" };
    let (code, what, m) = match round(a, base, background_threads) {
        Ok(()) => return 0,
        Err(Failure::Mismatch(m)) => (3, "MISMATCH", m),
        Err(Failure::Error(m)) => (2, "error", m),
    };
    eprintln!(
        "woods stress: {what}: {m} (in a round with background_threads = {background_threads}, \
         pauses {pauses})"
    );
    code
}

fn say(line: &str) -> Res<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::Error(format!("writing to the parent: {e}")))
}

fn open(a: &ChildArgs, base: &Options, background_threads: usize) -> Res<Db> {
    let kind = IndexKind::from_name(&a.index).map_err(db_err("--index"))?;
    let opts = Options {
        index: Some(kind),
        memtable_bytes: a.memtable_bytes,
        cache_bytes: a.cache_bytes,
        merge_operator: Some(Arc::new(StressMerge)),
        background_threads,
        ..base.clone()
    };
    let path = a.dir.join("db");
    Db::open(&path, opts).map_err(db_err(format!("opening {}", path.display())))
}

fn round(a: &ChildArgs, base: Options, background_threads: usize) -> Res<()> {
    let exp = Expected::open(&a.dir.join("expected"), a.keys, a.threads).map_err(Failure::Error)?;
    let db = open(a, &base, background_threads)?;
    let ordered = IndexKind::from_name(&a.index)
        .map_err(db_err("--index"))?
        .ordered();
    let (present, entries) = verify(&db, &exp, ordered)?;
    say(&format!("ready {present} {entries}"))?;

    let stop_rx = watch_stdin();
    let sh = Shared {
        db,
        exp,
        stop: AtomicBool::new(false),
        failure: Mutex::new(None),
        writes: AtomicU64::new(0),
        reads: AtomicU64::new(0),
        snapshots: AtomicU64::new(0),
        ordered,
    };
    std::thread::scope(|s| -> Res<()> {
        let keys = a.keys;
        for w in 0..a.threads {
            let (lo, hi) = (
                (u64::from(keys) * u64::from(w) / u64::from(a.threads)) as u32,
                (u64::from(keys) * u64::from(w + 1) / u64::from(a.threads)) as u32,
            );
            let rng = Rng::new(a.seed, 100 + u64::from(w));
            let sh = &sh;
            s.spawn(move || sh.guard(|| writer(sh, w, lo, hi, rng)));
        }
        for r in 0..a.readers {
            let rng = Rng::new(a.seed, 1000 + u64::from(r));
            let sh = &sh;
            s.spawn(move || sh.guard(|| reader(sh, rng)));
        }
        // Until standard input closes (the last round ends) or a thread fails.
        let mut said = Ok(());
        while let Err(mpsc::RecvTimeoutError::Timeout) =
            stop_rx.recv_timeout(Duration::from_millis(250))
        {
            if sh.stopped() {
                break;
            }
            said = say(&sh.ops_line());
            if said.is_err() {
                break;
            }
        }
        sh.stop.store(true, Ordering::Release);
        said
    })?;
    if let Some(f) = sh.failure.lock().map_err(|_| poisoned())?.take() {
        return Err(f);
    }
    say(&sh.ops_line())?;
    let Shared { db, exp, .. } = sh;
    db.close().map_err(db_err("closing the database"))?;
    let db = open(a, &base, background_threads)?;
    let (present, entries) = verify(&db, &exp, ordered)?;
    db.close().map_err(db_err("closing the database"))?;
    say(&format!("done {present} {entries}"))
}

fn poisoned() -> Failure {
    Failure::Error("a stress thread panicked".into())
}

/// A channel that disconnects when standard input reaches its end (or fails).
fn watch_stdin() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = String::new();
        let mut stdin = io::stdin().lock();
        while matches!(stdin.read_line(&mut sink), Ok(n) if n > 0) {
            sink.clear();
        }
        drop(tx);
    });
    rx
}

struct Shared {
    db: Db,
    exp: Expected,
    stop: AtomicBool,
    failure: Mutex<Option<Failure>>,
    writes: AtomicU64,
    reads: AtomicU64,
    snapshots: AtomicU64,
    /// Whether the kind keeps keys in order; a point-only kind (`boa`) is read key by key
    /// where an ordered one is scanned.
    ordered: bool,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Runs a thread's body; its failure or panic (the first of all threads) stops every
    /// thread.
    fn guard(&self, body: impl FnOnce() -> Res<()>) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
            .unwrap_or_else(|_| Err(poisoned()));
        if let Err(f) = r {
            if let Ok(mut slot) = self.failure.lock() {
                slot.get_or_insert(f);
            }
            self.stop.store(true, Ordering::Release);
        }
    }

    fn ops_line(&self) -> String {
        format!(
            "ops {} {} {}",
            self.writes.load(Ordering::Relaxed),
            self.reads.load(Ordering::Relaxed),
            self.snapshots.load(Ordering::Relaxed)
        )
    }
}

/// The state of key `id` after one more write, a delete or not.
fn next_state(state: u32, delete: bool) -> u32 {
    let v = version(state) + 1;
    if delete {
        v | model::DELETED
    } else {
        v
    }
}

/// Writes keys `lo..hi`, which no other thread writes: single puts, merges and deletes, and
/// batches of up to `MAX_BATCH` of them, one write in sixteen with `Durability::Sync`.
fn writer(sh: &Shared, w: u32, lo: u32, hi: u32, mut rng: Rng) -> Res<()> {
    let span = u64::from(hi - lo);
    // Half the writes go to a sixteenth of the keys: long version chains, merges on merges.
    let hot = (span / 16).max(1);
    let mut batch = WriteBatch::new();
    let mut entries: Vec<BatchEntry> = Vec::with_capacity(MAX_BATCH);
    while !sh.stopped() {
        match rng.below(1000) {
            0 => sh.db.flush().map_err(db_err("flush"))?,
            1 => sh.db.sync().map_err(db_err("sync"))?,
            _ => {}
        }
        let n = if rng.below(4) == 0 {
            2 + rng.below((MAX_BATCH as u64 - 1).min(span - 1)) as usize
        } else {
            1
        };
        batch.clear();
        entries.clear();
        while entries.len() < n {
            let id = lo
                + if rng.below(2) == 0 {
                    rng.below(hot)
                } else {
                    rng.below(span)
                } as u32;
            if entries.iter().any(|e| e.0 == id) {
                continue;
            }
            let before = sh.exp.committed(id);
            let k = key(id);
            let after = match rng.below(10) {
                0..=4 => {
                    let after = next_state(before, false);
                    batch.put(&k, model::value(id, after));
                    after
                }
                5..=7 => {
                    let after = next_state(before, false);
                    batch.merge(&k, model::operand(visible(before), after));
                    after
                }
                _ => {
                    batch.delete(&k);
                    next_state(before, true)
                }
            };
            entries.push((id, before, after));
        }
        let durability = if rng.below(16) == 0 {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        if n > 1 {
            sh.exp.set_batch(w, &entries).map_err(Failure::Error)?;
        }
        for &(id, _, after) in &entries {
            sh.exp.begin(id, after).map_err(Failure::Error)?;
        }
        sh.db
            .write_with(&batch, durability)
            .map_err(db_err(format!("writing a batch of {n}")))?;
        for &(id, _, after) in &entries {
            sh.exp.commit(id, after).map_err(Failure::Error)?;
        }
        if n > 1 {
            sh.exp.set_batch(w, &[]).map_err(Failure::Error)?;
        }
        sh.writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Whether a read that began when key's committed state was `c` and ended when its pending
/// state was `p` may have returned `got`. Versions only grow, by one per write; between `c`
/// and `p` the states are unknown, so any version between them passes, and absence when one of
/// them may have been a delete.
fn allowed(c: u32, p: u32, got: Option<u32>) -> bool {
    let (vc, vp) = (version(c), version(p));
    match got {
        None => absent(c) || absent(p) || vp >= vc + 2,
        Some(v) => visible(c) == Some(v) || visible(p) == Some(v) || (vc < v && v < vp),
    }
}

/// What a read of keys `lo..hi` found: per key, the version present, or `None`.
type Found = Vec<Option<u32>>;

/// Collects an iterator over keys `lo..hi` into what it found, checking that every key is a
/// stress key of the range, in strict order, with a valid value.
fn collect(it: DbIter, lo: u32, hi: u32, reverse: bool, what: &str) -> Res<Found> {
    let mut found = vec![None; (hi - lo) as usize];
    let mut last: Option<u32> = None;
    for item in it {
        let (k, v) = item.map_err(db_err(what.to_string()))?;
        let Some(id) = key_id(&k).filter(|id| (lo..hi).contains(id)) else {
            return mismatch(format!(
                "{what} of keys {lo}..{hi} returned key {}",
                woods_cli::encoding::display(&k)
            ));
        };
        if let Some(l) = last {
            if (id > l) == reverse || id == l {
                return mismatch(format!("{what}: key {id} came after key {l}"));
            }
        }
        last = Some(id);
        let ver = model::decode(id, &v).or_else(|e| mismatch(format!("{what}: key {id}: {e}")))?;
        found[(id - lo) as usize] = Some(ver);
    }
    Ok(found)
}

fn check_found(what: &str, lo: u32, c: &[u32], p: &[u32], found: &Found) -> Res<()> {
    for (i, got) in found.iter().enumerate() {
        if !allowed(c[i], p[i], *got) {
            let id = lo + i as u32;
            return mismatch(format!(
                "{what}: key {id} read as {} while its state went from {} (acknowledged) \
                 to {} (in flight)",
                got.map_or("absent".into(), |v| format!("version {v}")),
                describe(c[i]),
                describe(p[i])
            ));
        }
    }
    Ok(())
}

fn range_of(lo: u32, hi: u32) -> std::ops::Range<Vec<u8>> {
    key(lo)..key(hi)
}

/// What a read goes through: the database, or a snapshot of it.
#[derive(Clone, Copy)]
enum Source<'a> {
    Db(&'a Db),
    Snap(&'a woods::Snapshot),
}

impl Source<'_> {
    fn get(self, id: u32) -> woods::Result<Option<Vec<u8>>> {
        match self {
            Source::Db(db) => db.get(key(id)),
            Source::Snap(s) => s.get(key(id)),
        }
    }

    fn scan(self, lo: u32, hi: u32, reverse: bool) -> woods::Result<DbIter> {
        match (self, reverse) {
            (Source::Db(db), false) => db.range(range_of(lo, hi)),
            (Source::Db(db), true) => db.range_rev(range_of(lo, hi)),
            (Source::Snap(s), false) => s.range(range_of(lo, hi)),
            (Source::Snap(s), true) => s.range_rev(range_of(lo, hi)),
        }
    }
}

/// Reads keys `lo..hi` through `src`: one scan (forward or reverse) where the kind is
/// `ordered`, and where it is point-only, a get per key in the same order.
fn read_range(
    src: Source<'_>,
    ordered: bool,
    (lo, hi): (u32, u32),
    reverse: bool,
    what: &str,
) -> Res<Found> {
    if ordered {
        let it = src
            .scan(lo, hi, reverse)
            .map_err(db_err(what.to_string()))?;
        return collect(it, lo, hi, reverse, what);
    }
    let mut found = vec![None; (hi - lo) as usize];
    let ids: Box<dyn Iterator<Item = u32>> = if reverse {
        Box::new((lo..hi).rev())
    } else {
        Box::new(lo..hi)
    };
    for id in ids {
        if let Some(v) = src.get(id).map_err(db_err(what.to_string()))? {
            let ver =
                model::decode(id, &v).or_else(|e| mismatch(format!("{what}: key {id}: {e}")))?;
            found[(id - lo) as usize] = Some(ver);
        }
    }
    Ok(found)
}

/// A snapshot a reader holds, with what it first read through it, to read again later.
struct Held {
    snap: woods::Snapshot,
    lo: u32,
    hi: u32,
    found: Found,
    due: u64,
}

/// Reads random keys and ranges, plain and through snapshots held across later writes; checks
/// each answer against the expected state and each snapshot's later answers against its first.
fn reader(sh: &Shared, mut rng: Rng) -> Res<()> {
    let keys = sh.exp.keys();
    let exp = &sh.exp;
    let mut held: Vec<Held> = Vec::new();
    let mut n = 0u64;
    let states = |lo: u32, hi: u32, f: &dyn Fn(u32) -> u32| (lo..hi).map(f).collect::<Vec<_>>();
    while !sh.stopped() {
        n += 1;
        let r = rng.below(100);
        if r < 50 {
            let id = rng.below(u64::from(keys)) as u32;
            let c = exp.committed(id);
            let got = sh.db.get(key(id)).map_err(db_err("get"))?;
            let p = exp.pending(id);
            let ver = match got {
                None => None,
                Some(v) => Some(
                    model::decode(id, &v).or_else(|e| mismatch(format!("get: key {id}: {e}")))?,
                ),
            };
            check_found("get", id, &[c], &[p], &vec![ver])?;
        } else {
            // A range of up to 100 keys; one read in a hundred reads them all.
            let (lo, hi) = if r == 99 {
                (0, keys)
            } else {
                let lo = rng.below(u64::from(keys)) as u32;
                (lo, (lo + 1 + rng.below(100) as u32).min(keys))
            };
            let c = states(lo, hi, &|id| exp.committed(id));
            if r < 85 {
                let reverse = r >= 70;
                let found = read_range(Source::Db(&sh.db), sh.ordered, (lo, hi), reverse, "scan")?;
                let p = states(lo, hi, &|id| exp.pending(id));
                check_found("scan", lo, &c, &p, &found)?;
            } else {
                let snap = sh.db.snapshot();
                let p = states(lo, hi, &|id| exp.pending(id));
                let src = Source::Snap(&snap);
                let found = read_range(src, sh.ordered, (lo, hi), false, "snapshot scan")?;
                check_found("snapshot scan", lo, &c, &p, &found)?;
                sh.snapshots.fetch_add(1, Ordering::Relaxed);
                if held.len() < 4 {
                    let due = n + 10 + rng.below(500);
                    held.push(Held {
                        snap,
                        lo,
                        hi,
                        found,
                        due,
                    });
                }
            }
        }
        sh.reads.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = held.iter().position(|h| h.due <= n) {
            recheck(&held.swap_remove(i), sh.ordered, &mut rng)?;
        }
    }
    Ok(())
}

/// Reads a held snapshot's range again, both ways and key by key: the answers must not change.
fn recheck(h: &Held, ordered: bool, rng: &mut Rng) -> Res<()> {
    let (lo, hi) = (h.lo, h.hi);
    let src = Source::Snap(&h.snap);
    let fwd = read_range(src, ordered, (lo, hi), false, "snapshot rescan")?;
    let rev = read_range(src, ordered, (lo, hi), true, "snapshot reverse rescan")?;
    for (what, again) in [("rescan", &fwd), ("reverse rescan", &rev)] {
        if let Some(i) = (0..h.found.len()).find(|&i| again[i] != h.found[i]) {
            return mismatch(format!(
                "snapshot {what}: key {} read as {:?}, earlier through the same snapshot as {:?}",
                lo + i as u32,
                again[i],
                h.found[i]
            ));
        }
    }
    for _ in 0..4 {
        let i = rng.below(u64::from(hi - lo)) as usize;
        let id = lo + i as u32;
        let got = h.snap.get(key(id)).map_err(db_err("snapshot get"))?;
        let ver = match got {
            None => None,
            Some(v) => Some(
                model::decode(id, &v)
                    .or_else(|e| mismatch(format!("snapshot get: key {id}: {e}")))?,
            ),
        };
        if ver != h.found[i] {
            return mismatch(format!(
                "snapshot get: key {id} read as {ver:?}, earlier through the same snapshot's \
                 scan as {:?}",
                h.found[i]
            ));
        }
    }
    Ok(())
}

/// Checks the whole database against the expected state after a restart, then makes the state
/// found the expected one: every key holds its committed or its pending state; every batch in
/// flight is there whole or not at all; a scan each way agrees with the point reads (where the
/// kind is `ordered`); `check` is clean. Returns the keys present and `check`'s entry count.
fn verify(db: &Db, exp: &Expected, ordered: bool) -> Res<(u64, u64)> {
    let keys = exp.keys();
    let mut state = Vec::with_capacity(keys as usize);
    let mut present = 0u64;
    for id in 0..keys {
        let (c, p) = (exp.committed(id), exp.pending(id));
        let got = match db.get(key(id)).map_err(db_err("get"))? {
            None => None,
            Some(v) => Some(
                model::decode(id, &v)
                    .or_else(|e| mismatch(format!("after restart: key {id}: {e}")))?,
            ),
        };
        present += u64::from(got.is_some());
        let s = match got {
            None if absent(c) => c,
            None if absent(p) => p,
            Some(v) if visible(c) == Some(v) => c,
            Some(v) if visible(p) == Some(v) => p,
            _ => {
                return mismatch(format!(
                    "after restart: key {id} is {} but must be {} (acknowledged) or {} (in flight)",
                    got.map_or("absent".into(), |v| format!("at version {v}")),
                    describe(c),
                    describe(p)
                ))
            }
        };
        state.push(s);
    }
    for w in 0..exp.writers() {
        let entries = exp.batch(w).map_err(Failure::Error)?;
        // Each key of the batch is at its state before, its state after, or (a delete of a
        // deleted key) either; all must be on the same side.
        let side = |&(id, before, after): &BatchEntry| {
            let now = visible(state[id as usize]);
            (now == visible(before), now == visible(after))
        };
        let old = entries.iter().find(|e| side(e) == (true, false));
        let new = entries.iter().find(|e| side(e) == (false, true));
        if let (Some(o), Some(n)) = (old, new) {
            return mismatch(format!(
                "after restart: a batch of {} keys is there in part: key {} is at its state \
                 after the batch ({}), key {} at its state before it ({})",
                entries.len(),
                n.0,
                describe(n.2),
                o.0,
                describe(o.1)
            ));
        }
    }
    if ordered {
        full_scans_agree(db, &state)?;
    }
    let entries = db.check().map_err(db_err("check"))?.index_versions;
    for (id, &s) in state.iter().enumerate() {
        let id = id as u32;
        if exp.committed(id) != s || exp.pending(id) != s {
            exp.settle(id, s).map_err(Failure::Error)?;
        }
    }
    for w in 0..exp.writers() {
        exp.set_batch(w, &[]).map_err(Failure::Error)?;
    }
    Ok((present, entries))
}

/// A full scan each way reads every key as the gets did (`state`).
fn full_scans_agree(db: &Db, state: &[u32]) -> Res<()> {
    let keys = state.len() as u32;
    let fwd = collect(
        db.iter().map_err(db_err("scan"))?,
        0,
        keys,
        false,
        "full scan",
    )?;
    let rev = collect(
        db.iter_rev().map_err(db_err("scan"))?,
        0,
        keys,
        true,
        "full reverse scan",
    )?;
    for id in 0..keys as usize {
        let want = visible(state[id]);
        if fwd[id] != want || rev[id] != want {
            return mismatch(format!(
                "after restart: key {id} reads as {want:?} by get, {:?} by a scan and {:?} by a \
                 reverse scan",
                fwd[id], rev[id]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_passes_only_between_its_bounds() {
        let d = |v| v | model::DELETED;
        assert!(allowed(3, 3, Some(3)));
        assert!(!allowed(3, 3, Some(2)), "an acknowledged write lost");
        assert!(!allowed(3, 3, None));
        assert!(allowed(3, 4, Some(4)));
        assert!(!allowed(3, 4, Some(5)), "a write not yet begun");
        assert!(allowed(3, d(4), None));
        assert!(
            !allowed(3, d(4), Some(4)),
            "a delete's version is never read"
        );
        assert!(allowed(0, 0, None));
        assert!(!allowed(0, 1, Some(2)));
        assert!(allowed(3, 9, Some(6)) && allowed(3, 9, None));
        assert!(allowed(d(3), 4, None) && !allowed(d(3), 4, Some(3)));
    }
}
