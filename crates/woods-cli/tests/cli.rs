//! End-to-end tests of the `woods` binary.
//!
//! Every test that loads data runs for every index kind (`btree`, `lsm`, `nbtree`, `stbe`). Seeds, kill points
//! and results are printed: run with `--nocapture` to see them, and pass a printed seed to
//! `woods load/verify --seed` to reproduce a failure by hand.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use woods_cli::gen::{splitmix64, RecordGen};

const BIN: &str = env!("CARGO_BIN_EXE_woods");

fn woods(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running woods")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs woods and asserts the exit status; returns stdout.
fn ok(args: &[&str]) -> String {
    let o = woods(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "woods {args:?} failed: {}{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn code(args: &[&str]) -> (Option<i32>, String, String) {
    let o = woods(args);
    (o.status.code(), stdout(&o), stderr(&o))
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn path(dir: &Path) -> &str {
    dir.to_str().expect("utf-8 temp path")
}

/// A fresh random number for seeds and delays (no rand dependency: clock + a counter, mixed).
fn random() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    splitmix64(t ^ splitmix64(N.fetch_add(1, Ordering::Relaxed)) ^ u64::from(std::process::id()))
}

/// Parses `intact prefix k of N` from verify's output.
fn intact_prefix(out: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("intact prefix "))
        .unwrap_or_else(|| panic!("verify said {out:?}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(w.len(), 5, "{line}");
    (w[2].parse().unwrap(), w[4].parse().unwrap())
}

/// The library creates no database without an index kind; `woods put` names lsm for a new
/// one when `--index` is not given, and reads the kind of an existing one.
#[test]
fn put_creates_an_lsm_database_without_index() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&["put", db, "k", "v"]);
    assert!(ok(&["stats", db]).contains("kind              lsm"));
    ok(&["put", db, "k2", "v2"]);
    assert_eq!(ok(&["get", db, "k2"]), "v2\n");
    let (status, _, err) = code(&["put", db, "k3", "v3", "--index", "btree"]);
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("index"), "{err}");
}

#[test]
fn put_get_del_scan_round_trip() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&["put", db, "b", "2", "--index", "btree"]);
    ok(&["put", db, "a", "1"]);
    ok(&["put", db, "c", "three"]);
    ok(&["put", db, "0x00ff", "0x0102"]);
    ok(&["put", db, "d", "tab\there"]);
    ok(&["put", db, "e", "0x"]);
    assert_eq!(ok(&["get", db, "a"]), "1\n");
    assert_eq!(ok(&["get", db, "c"]), "three\n");
    assert_eq!(ok(&["get", db, "0x00FF"]), "0x0102\n");
    assert_eq!(ok(&["get", db, "0x61"]), "1\n"); // "a" in hex
    assert_eq!(ok(&["get", db, "d"]), "0x7461620968657265\n"); // a tab is not printable
    assert_eq!(ok(&["get", db, "e"]), "\n");

    let all = "0x00ff\t0x0102\na\t1\nb\t2\nc\tthree\nd\t0x7461620968657265\ne\t\n";
    assert_eq!(ok(&["scan", db]), all);
    assert_eq!(
        ok(&["scan", db, "--from", "a", "--to", "c"]),
        "a\t1\nb\t2\n"
    );
    assert_eq!(
        ok(&["scan", db, "--from", "0x62"]),
        "b\t2\nc\tthree\nd\t0x7461620968657265\ne\t\n"
    );
    assert_eq!(ok(&["scan", db, "--to", "a"]), "0x00ff\t0x0102\n");
    assert_eq!(
        ok(&["scan", db, "--reverse", "--limit", "2"]),
        "e\t\nd\t0x7461620968657265\n"
    );
    assert_eq!(
        ok(&["scan", db, "--reverse", "--from", "a", "--to", "c"]),
        "b\t2\na\t1\n"
    );
    assert_eq!(ok(&["scan", db, "--limit", "1"]), "0x00ff\t0x0102\n");
    assert_eq!(ok(&["scan", db, "--limit", "0"]), "");
    assert_eq!(ok(&["scan", db, "--from", "c", "--to", "b"]), "");

    ok(&["del", db, "b"]);
    ok(&["delete", db, "0x00ff"]);
    ok(&["del", db, "nothing-here"]);
    assert_eq!(code(&["get", db, "b"]).0, Some(1));
    assert_eq!(ok(&["scan", db, "--to", "d"]), "a\t1\nc\tthree\n");

    // Overwrite, then everything survives reopening and passes check.
    ok(&["put", db, "a", "one"]);
    assert_eq!(ok(&["get", db, "a"]), "one\n");
    let check = ok(&["check", db]);
    assert!(check.starts_with("live keys          4 "), "{check}");
    assert!(check.ends_with("\nok\n"), "{check}");
    let stats = ok(&["stats", db]);
    for want in [
        "kind              btree",
        "shape",
        "device I/O",
        "wal",
        "direct I/O",
        "pacing delays",
        "stalls",
        "cache",
    ] {
        assert!(stats.contains(want), "stats lacks {want:?}:\n{stats}");
    }
}

#[test]
fn errors_and_exit_codes() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&["put", db, "k", "v", "--index", "btree"]);

    let (c, out, err) = code(&["get", db, "missing"]);
    assert_eq!(c, Some(1), "{out}{err}");
    assert_eq!(out, "");
    assert!(err.contains("not found"), "{err}");

    let nowhere = d.path().join("nowhere");
    let (c, _, err) = code(&["get", path(&nowhere), "k"]);
    assert_eq!(c, Some(2));
    assert!(err.contains("no woods database"), "{err}");
    assert!(!nowhere.exists(), "get must not create a database");

    let (c, _, err) = code(&["put", db, "0xabc", "v"]);
    assert_eq!(c, Some(2));
    assert!(err.contains("even number"), "{err}");
    let (c, _, err) = code(&["get", db, "0xzz"]);
    assert_eq!(c, Some(2));
    assert!(err.contains("hex digit"), "{err}");

    let (c, _, err) = code(&["put", db, "k", "v", "--index", "nope"]);
    assert_eq!(c, Some(2));
    assert!(err.contains("unknown index kind"), "{err}");

    let (c, _, err) = code(&[
        "load",
        path(&d.path().join("l")),
        "--index",
        "btree",
        "--records",
        "10",
        "--key-size",
        "7",
    ]);
    assert_eq!(c, Some(2));
    assert!(err.contains("at least 8"), "{err}");
    assert!(!d.path().join("l").exists());

    let (c, _, err) = code(&["put", db, "", "v"]);
    assert_eq!(c, Some(2));
    assert!(err.contains("invalid key"), "{err}");

    // A second process cannot open a database that is in use: covered by the library; here a
    // usage error from clap exits 2 as well.
    assert_eq!(code(&["frobnicate"]).0, Some(2));
    assert_eq!(code(&["get", db]).0, Some(2));
}

#[test]
fn help_documents_commands() {
    let top = ok(&["--help"]);
    for cmd in [
        "put",
        "get",
        "del",
        "scan",
        "stats",
        "check",
        "load",
        "verify",
        "0x",
        "Exit status",
    ] {
        assert!(top.contains(cmd), "--help lacks {cmd:?}:\n{top}");
    }
    let load = ok(&["load", "--help"]);
    for w in [
        "--index",
        "--records",
        "--key-size",
        "--value-size",
        "--seed",
        "--sync",
        "--cache-bytes",
        "--memtable-bytes",
        "acknowledged",
        "write amplification",
    ] {
        assert!(load.contains(w), "load --help lacks {w:?}:\n{load}");
    }
    let scan = ok(&["scan", "--help"]);
    for w in [
        "--from",
        "--to",
        "--reverse",
        "--limit",
        "inclusive",
        "exclusive",
        "0x",
    ] {
        assert!(scan.contains(w), "scan --help lacks {w:?}:\n{scan}");
    }
    assert!(ok(&["verify", "--help"]).contains("intact prefix"));
}

/// Loads 20,000 records with small memtables (so the index absorbs many of them), then verifies.
fn load_then_verify(index: &str) {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    let seed = random() % 1000;
    println!("index {index} seed {seed}");
    let s = seed.to_string();
    let (c, out, err) = code(&[
        "load",
        db,
        "--index",
        index,
        "--records",
        "20000",
        "--memtable-bytes",
        "65536",
        "--seed",
        &s,
    ]);
    assert_eq!(c, Some(0), "load failed: {out}{err}");
    let last = out
        .lines()
        .rev()
        .find(|l| l.starts_with("acknowledged "))
        .expect("acknowledgements");
    assert_eq!(last, "acknowledged 19999");
    let summary = out.lines().last().unwrap();
    for w in [
        "loaded 20000 records",
        "inserts/s",
        "write amplification",
        "without WAL",
        "max stall",
        "max pacing delay",
    ] {
        assert!(summary.contains(w), "summary lacks {w:?}: {summary}");
    }
    assert!(
        out.lines()
            .filter(|l| l.starts_with("acknowledged"))
            .count()
            >= 20,
        "{out}"
    );
    assert_eq!(
        intact_prefix(&ok(&["verify", db, "--records", "20000", "--seed", &s])),
        (20000, 20000)
    );
    assert!(ok(&["check", db]).ends_with("\nok\n"));

    // verify catches a missing record, a wrong value and a foreign key.
    let g = RecordGen::new(16, 100, seed).unwrap();
    let hex = |b: &[u8]| {
        format!(
            "0x{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        )
    };
    ok(&["del", db, &hex(&g.key(1234))]);
    let (c, out, _) = code(&["verify", db, "--records", "20000", "--seed", &s]);
    assert_eq!(c, Some(1));
    assert!(out.starts_with("bad record 1234: missing"), "{out}");
    ok(&["put", db, &hex(&g.key(1234)), "0x00"]);
    let (c, out, _) = code(&["verify", db, "--records", "20000", "--seed", &s]);
    assert_eq!(c, Some(1));
    assert!(out.starts_with("bad record 1234: wrong value"), "{out}");
    ok(&["put", db, &hex(&g.key(1234)), &hex(&g.value(1234))]);
    assert_eq!(
        intact_prefix(&ok(&["verify", db, "--records", "20000", "--seed", &s])),
        (20000, 20000)
    );
    assert_eq!(
        intact_prefix(&ok(&["verify", db, "--records", "30000", "--seed", &s])),
        (20000, 30000)
    );
    if index == "boa" {
        // A point-only kind is verified by lookups of records 0..N: keys of no record go
        // unseen (VERIFY_HELP says so).
        return;
    }
    let (c, out, _) = code(&["verify", db, "--records", "19999", "--seed", &s]);
    assert_eq!(c, Some(1));
    assert!(out.contains("unexpected key"), "{out}");
    ok(&["put", db, "stray", "x"]);
    let (c, out, _) = code(&["verify", db, "--records", "20000", "--seed", &s]);
    assert_eq!(c, Some(1));
    assert!(out.contains("unexpected key stray"), "{out}");
}

#[test]
fn load_verify_btree() {
    load_then_verify("btree");
}

#[test]
fn load_verify_lsm() {
    load_then_verify("lsm");
}

#[test]
fn load_verify_nbtree() {
    load_then_verify("nbtree");
}

#[test]
fn load_verify_stbe() {
    load_then_verify("stbe");
}

#[test]
fn load_verify_lsa() {
    load_then_verify("lsa");
}

#[test]
fn load_verify_iam() {
    load_then_verify("iam");
}

/// `woods stats` shows the IAM-tree's levels (nodes, sequences per node, bytes, class), m and
/// k and a counter for every reorganisation; `woods check` verifies its node invariants.
#[test]
fn iam_stats_and_check() {
    for kind in ["lsa", "iam"] {
        let d = tmp();
        let db = d.path().join("db");
        let db = path(&db);
        ok(&[
            "load",
            db,
            "--index",
            kind,
            "--records",
            "60000",
            "--memtable-bytes",
            "256K",
        ]);
        assert!(ok(&["check", db]).ends_with("\nok\n"));
        let stats = ok(&["stats", db]);
        for want in [
            &format!("kind              {kind}")[..],
            "L1: ",
            "sequences per node",
            "class append",
            "m none",
            "memtable_flushes",
            "appends",
            "moves",
        ] {
            assert!(
                stats.contains(want),
                "{kind}: stats lacks {want:?}:\n{stats}"
            );
        }
    }
}

#[test]
fn load_verify_pbt() {
    load_then_verify("pbt");
}

#[test]
fn load_verify_boa() {
    load_then_verify("boa");
}

/// `woods scan` on a point-only kind fails with exit status 2 and says why; `woods stats`
/// shows the levels, runs, filter bytes and reads per lookup; `woods check` verifies the run
/// layouts and the filters' routing.
#[test]
fn boa_scan_fails_and_stats_and_check() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&[
        "load",
        db,
        "--index",
        "boa",
        "--records",
        "60000",
        "--memtable-bytes",
        "256K",
    ]);
    for args in [&["scan", db][..], &["scan", db, "--reverse"][..]] {
        let (c, _, err) = code(args);
        assert_eq!(c, Some(2), "{args:?}: {err}");
        assert!(err.contains("unsupported") && err.contains("boa"), "{err}");
    }
    assert!(ok(&["check", db]).ends_with("\nok\n"));
    ok(&["read", db, "--records", "60000", "--reads", "2000"]);
    let stats = ok(&["stats", db]);
    for want in [
        "kind              boa",
        "filter bytes",
        "L1: ",
        "runs (at most 15)",
        "prefix",
        "merges",
        "runs_probed",
    ] {
        assert!(stats.contains(want), "stats lacks {want:?}:\n{stats}");
    }
}

/// `woods stats` lists the partitions with their states, sizes and filters; `woods check`
/// verifies the partition invariants.
#[test]
fn pbt_stats_and_check() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&[
        "load",
        db,
        "--index",
        "pbt",
        "--records",
        "60000",
        "--memtable-bytes",
        "256K",
    ]);
    assert!(ok(&["check", db]).ends_with("\nok\n"));
    let stats = ok(&["stats", db]);
    assert!(stats.contains("PERSISTED"), "{stats}");
    assert!(stats.contains("bloom"), "{stats}");
    assert!(stats.contains("partition "), "{stats}");
}

/// `woods stats` shows the size-tiered trunk (a line per trunk level with its branch
/// references, the distinct branches) and the maintenance counters; `woods check` verifies its
/// invariants.
#[test]
fn stbe_stats_and_check() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&[
        "load",
        db,
        "--index",
        "stbe",
        "--records",
        "60000",
        "--memtable-bytes",
        "256K",
    ]);
    assert!(ok(&["check", db]).ends_with("\nok\n"));
    let stats = ok(&["stats", db]);
    for want in [
        "kind              stbe",
        "height",
        "filter bytes",
        "branches",
        "trunk_nodes",
        "flushes",
        "compactions",
        "root: 1 nodes",
        "leaves:",
        "distinct branches",
    ] {
        assert!(stats.contains(want), "stats lacks {want:?}:\n{stats}");
    }
}

/// `woods stats` shows the NB-tree's shape (a line per s-tree level: d-trees, live and
/// physical sizes, bloom bytes) and a counter for every reorganisation; `woods check` verifies
/// its invariants.
#[test]
fn nbtree_stats_and_check() {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    ok(&[
        "load",
        db,
        "--index",
        "nbtree",
        "--records",
        "60000",
        "--memtable-bytes",
        "256K",
    ]);
    assert!(ok(&["check", db]).ends_with("\nok\n"));
    let stats = ok(&["stats", db]);
    for want in [
        "kind              nbtree",
        "height",
        "filter bytes",
        "flushes",
        "deep_flushes",
        "leaf_splits",
        "node_splits",
        "root_splits",
        "job_steps",
        "level 0: 1 s-nodes",
        "level 1:",
        "level 2:",
        "d-trees, live",
        "bloom",
    ] {
        assert!(stats.contains(want), "stats lacks {want:?}:\n{stats}");
    }
}

/// Reads `acknowledged I` lines from a running load in a thread: the highest I seen (+1, 0 for
/// none) and a channel that gets every new count of acknowledgements.
fn watch_acks(
    out: std::process::ChildStdout,
) -> (
    Arc<AtomicU64>,
    mpsc::Receiver<u64>,
    std::thread::JoinHandle<()>,
) {
    let last = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let l = last.clone();
    let h = std::thread::spawn(move || {
        let mut seen = 0u64;
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(i) = line.strip_prefix("acknowledged ") {
                let i: u64 = i.parse().expect("acknowledged index");
                assert!(
                    i + 1 > l.load(Ordering::Relaxed),
                    "acknowledgements go backwards"
                );
                l.store(i + 1, Ordering::Relaxed);
                seen += 1;
                let _ = tx.send(seen);
            }
        }
    });
    (last, rx, h)
}

/// Starts `woods load`, SIGKILLs it at a moment chosen by `kill_when` (given the receiver of the
/// acknowledgement count), then checks that verify finds at least every acknowledged record.
fn crash_and_verify(
    index: &str,
    records: u64,
    extra: &[&str],
    kill_when: impl FnOnce(&mpsc::Receiver<u64>),
) {
    let d = tmp();
    let db = d.path().join("db");
    let db = path(&db);
    let seed = random() % 1_000_000;
    println!("index {index} seed {seed} extra {extra:?}");
    let s = seed.to_string();
    let n = records.to_string();
    let mut args = vec!["load", db, "--index", index, "--records", &n, "--seed", &s];
    args.extend_from_slice(extra);
    let mut child = Command::new(BIN)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning woods load");
    let (last, rx, reader) = watch_acks(child.stdout.take().unwrap());
    kill_when(&rx);
    child.kill().expect("kill"); // SIGKILL
    let status = child.wait().expect("wait");
    reader.join().expect("ack reader");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).ok();
    let acked = last.load(Ordering::Relaxed);
    println!("  killed ({status}) after {acked} acknowledged records");
    assert!(acked > 0, "load acknowledged nothing: {status} {err}");
    assert!(
        acked < records,
        "load finished before it was killed; make it longer"
    );
    let (c, out, verr) = code(&["verify", db, "--records", &n, "--seed", &s]);
    assert_eq!(c, Some(0), "verify after crash (seed {seed}): {out}{verr}");
    let (k, total) = intact_prefix(&out);
    println!("  intact prefix {k} of {total}");
    assert_eq!(total, records);
    assert!(
        k >= acked,
        "seed {seed}: intact prefix {k} < last acknowledged index + 1 = {acked}"
    );
    assert!(ok(&["check", db]).ends_with("\nok\n"));
}

fn crash_sync(index: &str) {
    for _ in 0..3 {
        let target = 50 + random() % 1951; // 50..=2000 acknowledgements
        println!("sync crash: kill after {target} acknowledgements");
        crash_and_verify(
            index,
            200_000,
            &["--sync", "--memtable-bytes", "65536"],
            |rx| {
                while let Ok(seen) = rx.recv_timeout(Duration::from_secs(30)) {
                    if seen >= target {
                        return;
                    }
                }
                panic!("load stopped acknowledging before {target}");
            },
        );
    }
}

fn crash_buffered(index: &str) {
    for _ in 0..2 {
        let delay = Duration::from_millis(100 + random() % 900);
        println!("buffered crash: kill {delay:?} after the first acknowledgement");
        crash_and_verify(index, 50_000_000, &["--memtable-bytes", "262144"], |rx| {
            rx.recv_timeout(Duration::from_secs(30))
                .expect("first acknowledgement");
            std::thread::sleep(delay);
        });
    }
}

#[test]
fn crash_sync_btree() {
    crash_sync("btree");
}

#[test]
fn crash_sync_lsm() {
    crash_sync("lsm");
}

#[test]
fn crash_buffered_btree() {
    crash_buffered("btree");
}

#[test]
fn crash_buffered_lsm() {
    crash_buffered("lsm");
}

#[test]
fn crash_sync_nbtree() {
    crash_sync("nbtree");
}

#[test]
fn crash_buffered_nbtree() {
    crash_buffered("nbtree");
}

#[test]
fn crash_sync_stbe() {
    crash_sync("stbe");
}

#[test]
fn crash_buffered_stbe() {
    crash_buffered("stbe");
}

#[test]
fn crash_sync_pbt() {
    crash_sync("pbt");
}

#[test]
fn crash_buffered_pbt() {
    crash_buffered("pbt");
}

/// Regression (issue 17, item 1): `woods put` on a database whose CURRENT file was lost created
/// a new database over it (data.woods truncated, exit status 0). Now every command refuses with
/// a message naming what is missing, and `woods repair` gives the database back.
#[test]
fn put_never_creates_over_a_damaged_database_and_repair_rebuilds_it() {
    let d = tmp();
    let db = path(d.path());
    for i in 0..50 {
        ok(&["put", db, &format!("key-{i:03}"), &format!("value-{i}")]);
    }
    let data = d.path().join("data.woods");
    std::fs::remove_file(d.path().join("CURRENT")).expect("rm CURRENT");
    let before = std::fs::metadata(&data).expect("data file").len();
    for args in [vec!["put", db, "other", "x"], vec!["get", db, "key-007"]] {
        let (status, _, err) = code(&args);
        assert_eq!(status, Some(2), "woods {args:?}: {err}");
        assert!(
            err.contains("CURRENT") && err.contains("woods repair"),
            "woods {args:?} does not say what is missing and what to do: {err}"
        );
    }
    assert_eq!(
        std::fs::metadata(&data).expect("data file").len(),
        before,
        "the data file was touched"
    );
    let out = ok(&["repair", db]);
    assert!(out.contains("repaired: CURRENT names MANIFEST-"), "{out}");
    for i in (0..50).step_by(7) {
        assert_eq!(
            ok(&["get", db, &format!("key-{i:03}")]).trim(),
            format!("value-{i}")
        );
    }
    let again = ok(&["repair", db]);
    assert!(again.contains("nothing to repair"), "{again}");
    let (status, _, err) = code(&["repair", path(tmp().path())]);
    assert_eq!(status, Some(2), "repairing an empty directory: {err}");
}
