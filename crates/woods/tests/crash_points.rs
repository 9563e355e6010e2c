//! Whitebox crash points (issue 17), as RocksDB's crash test has: for every index kind and
//! every point of `woods::crashpoint::POINTS` (each data sync, manifest append, `CURRENT`
//! switch, log rotation, sync and removal, extent release, hole punch, and the steps of
//! recovery), a child process runs a workload that passes through the point and is aborted
//! there (`WOODS_CRASH_AT`); the database is then reopened and must hold a prefix of the
//! writes containing every acknowledged one, and check clean.
//!
//! The child does, in order: 150 puts, then drops the database without closing it and opens
//! it again (a log replay, through the recovery points), one merge (the first one records the
//! merge operator: a manifest rollover), then puts with every seventh one `Sync`, a flush every
//! 400 and a drain at the end (hole punching), acknowledging each put on stdout.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{kind, kinds, seed, small_options};
use woods::crashpoint::POINTS;
use woods::{Db, Durability, Error, Options, WriteBatch};

const RECORDS: u64 = 3_000;

fn key(i: u64) -> Vec<u8> {
    format!("cp{:010}", i.wrapping_mul(0x9E37_79B9) % 10_000_000_000).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-")
        .repeat(1 + (i % 5) as usize)
        .into_bytes()
}

/// The child: runs the workload of the module documentation until the crash point aborts it.
#[test]
fn crash_points_child() {
    let (Ok(dir), Ok(kind_name)) = (
        std::env::var("WOODS_CP_DIR"),
        std::env::var("WOODS_CP_KIND"),
    ) else {
        return; // only meaningful when spawned by crash_points_test
    };
    let opts = || Options {
        index: None,
        ..small_options(&kind(&kind_name))
    };
    let mut out = std::io::stdout().lock();
    let mut ack = |i: u64| {
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("flush stdout");
    };
    let db = Db::open(&dir, small_options(&kind(&kind_name))).expect("child open");
    for i in 0..150 {
        db.put(key(i), value(i)).expect("put");
        ack(i);
    }
    drop(db);
    let db = Db::open(&dir, opts()).expect("child reopen");
    db.merge(b"merged", b"x").expect("merge");
    for i in 150..RECORDS {
        let mut b = WriteBatch::new();
        b.put(key(i), value(i));
        let d = if i % 7 == 0 {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        db.write_with(&b, d).expect("write");
        ack(i);
        if i % 400 == 0 {
            db.flush().expect("flush");
        }
    }
    db.drain().expect("drain");
    db.close().expect("close");
    writeln!(std::io::stdout(), "done").expect("stdout");
}

/// What a child run did: the last acknowledged record, and whether it crashed.
struct Run {
    last_ack: Option<u64>,
    crashed: bool,
}

/// Held while a child is spawned, and while `verify` opens and repairs a directory. The
/// directory lock is an `flock` on a close-on-exec descriptor: a child forked by another test's
/// thread holds a copy of the descriptor, and so the lock, from its fork to its exec, and an
/// open in that window after a close or a repair here found the directory `Locked` (CI, once:
/// "open after repair: Locked", btree). `Command::spawn` returns after the exec, so no open
/// under this lock meets such a copy.
static SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_child(dir: &std::path::Path, kind_name: &str, at: &str) -> Run {
    let exe = std::env::current_exe().expect("test binary");
    let spawning = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "crash_points_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WOODS_CP_DIR", dir)
        .env("WOODS_CP_KIND", kind_name)
        .env("WOODS_CRASH_AT", at)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    drop(spawning);
    let stdout = child.stdout.take().expect("child stdout");
    let mut last_ack = None;
    let mut done = false;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(i) = line.strip_prefix("ack ") {
            last_ack = Some(i.trim().parse::<u64>().expect("ack number"));
        } else if line.trim() == "done" {
            done = true;
        }
    }
    let status = child.wait().expect("reap child");
    assert!(
        done || !status.success(),
        "{kind_name} at {at}: the child neither finished nor crashed"
    );
    Run {
        last_ack,
        crashed: !done,
    }
}

/// Reopens after a crash and checks the guarantee: a prefix of the puts holding every
/// acknowledged one, and a clean check. A crash inside the database's creation (before any
/// acknowledgement) may leave a directory that only repair makes a database again.
fn verify(dir: &std::path::Path, kind_name: &str, at: &str, run: &Run) {
    let opts = || Options {
        index: None,
        ..small_options(&kind(kind_name))
    };
    let opening = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let db = match Db::open(dir, opts()) {
        Ok(db) => db,
        Err(Error::Corruption { detail, .. }) if run.last_ack.is_none() => {
            Db::repair(dir, small_options(&kind(kind_name)))
                .unwrap_or_else(|e| panic!("{kind_name} at {at}: repair after {detail}: {e}"));
            Db::open(dir, opts()).expect("open after repair")
        }
        Err(e) => panic!("{kind_name} at {at}: reopen failed: {e}"),
    };
    drop(opening);
    let mut k = 0;
    while db.get(key(k)).expect("get").is_some() {
        k += 1;
    }
    if let Some(last) = run.last_ack {
        assert!(
            k > last,
            "{kind_name} at {at}: prefix {k} misses acknowledged write {last}"
        );
    }
    for i in 0..k {
        assert_eq!(
            db.get(key(i)).expect("get"),
            Some(value(i)),
            "{kind_name} at {at}: record {i}"
        );
    }
    for i in k..(k + 50).min(RECORDS) {
        assert_eq!(
            db.get(key(i)).expect("get"),
            None,
            "{kind_name} at {at}: record {i} beyond the prefix {k}"
        );
    }
    db.check()
        .unwrap_or_else(|e| panic!("{kind_name} at {at}: check after the crash: {e}"));
    db.close().expect("close");
}

/// Points a kind's workload cannot reach, and why.
const UNREACHABLE: &[(&str, &str)] = &[(
    "btree",
    // Its copy-on-write frees a page or two at a time, below the allocator's punch minimum.
    "alloc.punch.after",
)];

fn crash_points_test(kind_name: &str) {
    let seed = seed(&format!("crash_points[{kind_name}]"));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut missed = Vec::new();
    let mut crashes = 0;
    for point in POINTS {
        if UNREACHABLE.contains(&(kind_name, point)) {
            continue;
        }
        // The first visit, or a later one: some points are visited at creation first.
        let visit = rng.gen_range(1..=3u64);
        let mut run = None;
        for at in [format!("{point}:{visit}"), format!("{point}:1")] {
            let dir = tempfile::tempdir().expect("tempdir");
            let r = run_child(dir.path(), kind_name, &at);
            if r.crashed {
                verify(dir.path(), kind_name, &at, &r);
                run = Some(at);
                break;
            }
        }
        match run {
            Some(at) => {
                crashes += 1;
                eprintln!("{kind_name}: crashed at {at}, recovered");
            }
            None => missed.push(*point),
        }
    }
    eprintln!(
        "crash points [{kind_name}]: {crashes} crashes at {} points, every one recovered (seed {seed})",
        POINTS.len()
    );
    assert!(
        missed.is_empty(),
        "{kind_name} seed {seed}: the workload never reached these points: {missed:?}"
    );
}

#[test]
fn crash_points_btree() {
    crash_points_test("btree")
}

#[test]
fn crash_points_btree_buffered() {
    crash_points_test("btree-buffered")
}

#[test]
fn crash_points_lsm() {
    crash_points_test("lsm")
}

#[test]
fn crash_points_lsm_dynamic() {
    crash_points_test("lsm-dynamic")
}

#[test]
fn crash_points_nbtree() {
    crash_points_test("nbtree")
}

#[test]
fn crash_points_stbe() {
    crash_points_test("stbe")
}

#[test]
fn crash_points_lsa() {
    crash_points_test("lsa")
}

#[test]
fn crash_points_iam() {
    crash_points_test("iam")
}

#[test]
fn crash_points_fdtree() {
    crash_points_test("fdtree")
}

#[test]
fn crash_points_fdtree_d() {
    crash_points_test("fdtree-d")
}

#[test]
fn crash_points_pbt() {
    crash_points_test("pbt")
}

#[test]
fn crash_points_boa() {
    crash_points_test("boa")
}

/// Every kind of the suite is covered above.
#[test]
fn crash_points_cover_every_kind() {
    let names: Vec<&str> = kinds().iter().map(|k| k.name()).collect();
    assert_eq!(
        names,
        [
            "btree",
            "btree-buffered",
            "lsm",
            "lsm-dynamic",
            "nbtree",
            "stbe",
            "lsa",
            "iam",
            "fdtree",
            "fdtree-d",
            "pbt",
            "boa"
        ]
    );
}
