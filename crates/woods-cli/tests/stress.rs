//! `woods stress` at CI scale: a few seconds of kills and restarts for every index kind, and
//! proof that its checker fails a run when the database or the expected state is wrong.
//!
//! Seeds are drawn from the clock and printed (run with `--nocapture`); `WOODS_SEED` replays
//! one, `WOODS_SCALE` multiplies the durations.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use woods::{Db, Options};
use woods_cli::stress_model::{decode, key_id, value, StressMerge};

const BIN: &str = env!("CARGO_BIN_EXE_woods");

fn seed(test: &str) -> u64 {
    let s = std::env::var("WOODS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {s} (replay with WOODS_SEED={s})");
    s
}

fn scale() -> u64 {
    std::env::var("WOODS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn stress(kind: &str, secs: u64, seed: u64, dir: Option<&Path>) -> Output {
    stress_with(kind, secs, seed, dir, &["--keys", "2000"])
}

fn stress_with(kind: &str, secs: u64, seed: u64, dir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(["stress", "--index", kind])
        .args(["--duration", &format!("{}s", secs * scale())])
        .args(["--kill-interval", "700ms"])
        .args(args)
        .args(["--seed", &seed.to_string()]);
    if let Some(d) = dir {
        c.arg("--dir").arg(d);
    }
    let o = c.output().expect("running woods stress");
    eprintln!(
        "woods stress --index {kind}: {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The counts of the summary line `stress ok: KIND, T s, N kills (...), M verifications, ...`.
fn kills_and_verifications(o: &Output) -> (u64, u64) {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("stress ok: "))
        .unwrap_or_else(|| panic!("no summary line in {out:?}"));
    let count = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what} in {line}"));
        let before = line[..at].trim_end();
        let n = before.rsplit(' ').next().unwrap_or_default();
        n.parse().unwrap_or_else(|_| panic!("{what} in {line}"))
    };
    (count(" kills"), count(" verifications"))
}

#[test]
fn stress_survives_random_kills_for_every_kind() {
    let s = seed("stress_survives_random_kills_for_every_kind");
    for kind in ["btree", "lsm", "nbtree", "stbe", "lsa", "iam", "pbt", "boa"] {
        let o = stress(kind, 5, s, None);
        assert_eq!(
            o.status.code(),
            Some(0),
            "woods stress --index {kind} failed"
        );
        let (kills, verifications) = kills_and_verifications(&o);
        assert!(kills >= 2, "{kind}: only {kills} kills in 5 s");
        // Every round killed after its start checks the database; the last checks it twice.
        assert!(verifications >= 2, "{kind}: {verifications} verifications");
    }
}

/// With a cache of 16 pages, runs' filters pass the half of it they may take whole: runs read
/// their filters a page at a time through the cache (`filter::partitioned` for `lsm` and
/// `nbtree`, `stbe`'s quotient filters by block), and kills and recoveries lose nothing there
/// either. The database each run leaves is opened with that
/// cache after it, to show that its filters are paged there.
#[test]
fn stress_with_filters_read_a_page_at_a_time() {
    let s = seed("stress_with_filters_read_a_page_at_a_time");
    // Rounds of 6 s resume the run in the same directory until some filter passes its share
    // (at 10 to 12 bits a key, 22,000 to 26,000 keys fill the half; an idle machine writes
    // about 40,000 in 5 s), at most twelve, so that a loaded machine only takes longer (a
    // clean-clone CI beside a kill test wrote 9,500 to 17,300 a round, and four rounds were
    // not enough).
    for kind in ["lsm", "nbtree", "stbe"] {
        let d = tempfile::tempdir().expect("tempdir");
        let args = ["--keys", "100000", "--cache-bytes", "64K"];
        let mut paged = 0;
        for _ in 0..12 {
            let o = stress_with(kind, 6, s, Some(d.path()), &args);
            assert_eq!(
                o.status.code(),
                Some(0),
                "woods stress --index {kind} failed"
            );
            let (kills, verifications) = kills_and_verifications(&o);
            assert!(
                kills >= 1 && verifications >= 2,
                "{kind}: {kills} kills, {verifications} verifications"
            );
            let db = open_stress_db_with(d.path(), 64 << 10);
            // A lookup of every key opens every run.
            for id in 0..100_000u32 {
                db.get(woods_cli::stress_model::key(id)).expect("get");
            }
            paged = db.stats().cache.paged_filters;
            db.close().expect("close");
            if paged > 0 {
                break;
            }
        }
        assert!(
            paged > 0,
            "{kind}: no run's filter is paged with a 64K cache"
        );
    }
    let o = stress_with("lsm", 1, s, None, &["--cache-bytes", "32K"]);
    assert_eq!(o.status.code(), Some(2), "a cache under 64K is refused");
}

/// Opens a database `woods stress` wrote, with its merge operator.
fn open_stress_db(dir: &Path) -> Db {
    open_stress_db_with(dir, Options::default().cache_bytes)
}

/// [`open_stress_db`] with a cache of `cache_bytes`.
fn open_stress_db_with(dir: &Path, cache_bytes: u64) -> Db {
    let opts = Options {
        merge_operator: Some(Arc::new(StressMerge)),
        cache_bytes,
        ..Options::default()
    };
    Db::open(dir.join("db"), opts).expect("opening the stress database")
}

/// The first key present in a stress database, with its id and the version it holds.
fn first_present(db: &Db) -> (Vec<u8>, u32, u32) {
    let (k, v) = db.iter().unwrap().next().expect("a key").unwrap();
    let id = key_id(&k).expect("a stress key");
    let version = decode(id, &v).expect("a stress value");
    (k, id, version)
}

/// Runs a short clean stress run in `dir`, tampers with it, and asserts that resuming the run
/// fails with a mismatch that `says` what the tampering did.
fn assert_tampering_detected(test: &str, tamper: impl FnOnce(&Path), says: &str) {
    let s = seed(test);
    let d = tempfile::tempdir().expect("temp dir");
    let o = stress("lsm", 2, s, Some(d.path()));
    assert_eq!(o.status.code(), Some(0), "the clean run failed");
    tamper(d.path());
    let o = stress("lsm", 2, s, Some(d.path()));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "a tampered run passed: {err}");
    assert!(err.contains("MISMATCH") && err.contains(says), "{err}");
    assert!(
        err.contains(&format!("seed {s}")),
        "the seed is printed: {err}"
    );
    // The state the failing round found is kept, and resuming it fails the same way.
    let before = d.path().join("before-round");
    assert!(err.contains(&before.display().to_string()), "{err}");
    let o = stress("lsm", 1, s, Some(&before));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "the kept state passed: {err}");
    assert!(err.contains("MISMATCH") && err.contains(says), "{err}");
}

#[test]
fn stress_detects_an_expected_state_the_database_does_not_hold() {
    assert_tampering_detected(
        "stress_detects_an_expected_state_the_database_does_not_hold",
        |dir| {
            // Key 0's committed and pending states (expected's layout, in `woods stress --help`):
            // a version no run of seconds reaches.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("expected"))
                .expect("opening expected");
            let v = 0x7fff_fff0u32.to_le_bytes();
            f.write_all_at(&[v, v].concat(), 64).expect("tampering");
        },
        "key 0 ",
    );
}

#[test]
fn stress_detects_a_lost_write() {
    assert_tampering_detected(
        "stress_detects_a_lost_write",
        |dir| {
            let db = open_stress_db(dir);
            let (k, _, _) = first_present(&db);
            db.delete(&k).unwrap();
            db.close().unwrap();
        },
        "is absent but must be version",
    );
}

#[test]
fn stress_detects_a_write_never_made() {
    assert_tampering_detected(
        "stress_detects_a_write_never_made",
        |dir| {
            // A valid value, of the version the key's next write would make.
            let db = open_stress_db(dir);
            let (k, id, version) = first_present(&db);
            db.put(&k, value(id, version + 1)).unwrap();
            db.close().unwrap();
        },
        "but must be version",
    );
}

#[test]
fn stress_detects_a_damaged_value() {
    assert_tampering_detected(
        "stress_detects_a_damaged_value",
        |dir| {
            let db = open_stress_db(dir);
            let (k, id, version) = first_present(&db);
            let mut v = value(id, version);
            let last = v.len() - 5;
            v[last] ^= 1;
            db.put(&k, &v).unwrap();
            db.close().unwrap();
        },
        "checksum mismatch",
    );
}
