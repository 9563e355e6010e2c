use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::storage::{FaultFs, FaultPlan};

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn counters() -> Arc<IoCounters> {
    Arc::new(IoCounters::default())
}

fn create(fs: &FaultFs) -> Manifest {
    Manifest::create(
        Arc::new(fs.clone()),
        &dir(),
        4096,
        256,
        b"config v1".to_vec(),
        counters(),
    )
    .unwrap()
}

fn open(fs: &FaultFs) -> Result<(Manifest, ManifestState)> {
    Manifest::open(Arc::new(fs.clone()), &dir(), counters())
}

fn ext(start: u64, pages: u64) -> Extent {
    Extent { start, pages }
}

fn log_path(n: u64) -> PathBuf {
    dir().join(manifest_file_name(n))
}

/// A step of a scripted history.
#[derive(Clone, Debug)]
enum Step {
    Commit(Commit),
    SetConfig(Vec<u8>),
}

/// A deterministic history: commits that allocate new extents and free old ones, index metadata
/// of varying size, and one config change.
fn history(steps: usize) -> Vec<Step> {
    let mut out = Vec::new();
    let mut live: Vec<Extent> = Vec::new();
    let mut next_page = 1;
    for i in 0..steps {
        if i == steps / 2 {
            out.push(Step::SetConfig(format!("config v2 at {i}").into_bytes()));
        }
        let added: Vec<Extent> = (0..(i % 3) as u64)
            .map(|k| {
                let e = ext(next_page, 1 + (i as u64 + k) % 5);
                next_page += e.pages + (k % 2);
                e
            })
            .collect();
        let freed: Vec<Extent> = if i % 4 == 3 && !live.is_empty() {
            vec![live.remove(0)]
        } else {
            Vec::new()
        };
        live.extend(added.iter().copied());
        let index_meta = (0..(10 + (i * 13) % 90)).map(|j| (i + j) as u8).collect();
        out.push(Step::Commit(Commit {
            index_meta,
            durable_seq: 100 * i as u64,
            added,
            freed,
        }));
    }
    out
}

fn run_step(m: &Manifest, step: &Step) -> Result<()> {
    match step {
        Step::Commit(c) => m.commit(c.clone()),
        Step::SetConfig(c) => m.set_config(c.clone()),
    }
}

/// The state after each prefix of `steps` (index 0: just created).
fn expected_states(steps: &[Step]) -> Vec<ManifestState> {
    let fs = FaultFs::new();
    let m = create(&fs);
    let mut states = vec![m.state()];
    for s in steps {
        run_step(&m, s).unwrap();
        states.push(m.state());
    }
    states
}

#[test]
fn manifest_create_open_round_trip() {
    let fs = FaultFs::new();
    assert!(!Manifest::exists(&fs, &dir()));
    let m = create(&fs);
    assert!(Manifest::exists(&fs, &dir()));
    let want = ManifestState {
        config: b"config v1".to_vec(),
        index_meta: Vec::new(),
        durable_seq: 0,
        allocated: Vec::new(),
        page_size: 4096,
        extent_pages: 256,
        commits: 0,
        incarnation: 0,
        rollbacks: Vec::new(),
    };
    assert_eq!(m.state(), want);
    drop(m);
    // Creation is durable as soon as it returns.
    fs.power_cut();
    let (m, state) = open(&fs).unwrap();
    assert_eq!(state, want);
    assert_eq!(m.state(), want);
    assert!(Manifest::create(
        Arc::new(fs.clone()),
        &dir(),
        4096,
        256,
        Vec::new(),
        counters()
    )
    .is_err());
}

#[test]
fn manifest_many_commits_then_reopen_gives_last_state() {
    let fs = FaultFs::new();
    let m = create(&fs);
    let steps = history(60);
    for s in &steps {
        run_step(&m, s).unwrap();
    }
    let want = m.state();
    assert_eq!(want.commits, 60);
    fs.power_cut();
    let (m2, state) = open(&fs).unwrap();
    assert_eq!(state, want);
    // The reopened manifest keeps committing where the old one stopped.
    m2.commit(Commit {
        index_meta: b"more".to_vec(),
        durable_seq: 1 << 40,
        added: vec![],
        freed: vec![],
    })
    .unwrap();
    let want2 = m2.state();
    fs.power_cut();
    assert_eq!(open(&fs).unwrap().1, want2);
}

#[test]
fn manifest_rollover_happens_and_reopen_after_it_works() {
    let fs = FaultFs::new();
    let m = create(&fs);
    m.set_min_rollover_bytes(600);
    let steps = history(80);
    for (i, s) in steps.iter().enumerate() {
        run_step(&m, s).unwrap();
        if i % 7 == 0 {
            let want = m.state();
            let fs2 = fs.clone();
            assert_eq!(open(&fs2).unwrap().1, want, "after step {i}");
        }
    }
    assert!(
        m.log_number() > 3,
        "only {} logs: rollover did not happen",
        m.log_number()
    );
    // Old logs are removed; only the live one is left.
    let logs: Vec<String> = fs
        .list(&dir())
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("MANIFEST-"))
        .collect();
    assert_eq!(logs, vec![manifest_file_name(m.log_number())]);
    assert!(!fs.exists(&dir().join(CURRENT_TMP_FILE)));
    let want = m.state();
    fs.power_cut();
    assert_eq!(open(&fs).unwrap().1, want);
}

#[test]
fn manifest_rollover_threshold_is_four_times_the_snapshot() {
    let fs = FaultFs::new();
    let m = create(&fs);
    m.set_min_rollover_bytes(0);
    // A large snapshot (big config) lets several deltas follow it before a rollover.
    m.set_config(vec![7u8; 4000]).unwrap();
    let number = m.log_number();
    for i in 0..5 {
        m.commit(Commit {
            index_meta: vec![1; 100],
            durable_seq: i,
            added: vec![],
            freed: vec![],
        })
        .unwrap();
    }
    assert_eq!(m.log_number(), number);
}

#[test]
fn manifest_power_cut_at_every_operation_recovers_a_committed_state() {
    let steps = history(40);
    let states = expected_states(&steps);
    // Count the mutating operations of a clean run, then fail each one in turn.
    let total_ops = {
        let fs = FaultFs::new();
        let m = create(&fs);
        m.set_min_rollover_bytes(500);
        fs.set_plan(FaultPlan::default());
        for s in &steps {
            run_step(&m, s).unwrap();
        }
        fs.ops()
    };
    assert!(total_ops > 80);
    for crash in ["power cut", "process kill"] {
        for n in 0..=total_ops {
            let fs = FaultFs::new();
            let m = create(&fs);
            m.set_min_rollover_bytes(500);
            fs.set_plan(FaultPlan {
                fail_op: Some(n),
                sticky: true,
            });
            let mut last_ok = 0;
            let mut failed_at = None;
            for (i, s) in steps.iter().enumerate() {
                match run_step(&m, s) {
                    Ok(()) => last_ok = i + 1,
                    Err(_) => {
                        failed_at = Some(i + 1);
                        break;
                    }
                }
            }
            if failed_at.is_some() {
                assert!(m.poisoned());
                assert!(matches!(
                    m.commit(Commit::default()),
                    Err(Error::ReadOnly { .. })
                ));
                assert!(m.set_config(Vec::new()).is_err());
            } else {
                assert_eq!(n, total_ops);
            }
            assert_eq!(m.state(), states[last_ok]);
            if crash == "power cut" {
                fs.power_cut();
            } else {
                fs.kill_process();
            }
            let (m2, got) = match open(&fs) {
                Ok(v) => v,
                Err(e) => panic!("{crash} at op {n}: open failed: {e}"),
            };
            let ok = got == states[last_ok] || failed_at.is_some_and(|k| got == states[k]);
            assert!(
                ok,
                "{crash} at op {n}: recovered {got:?}, last ok state {last_ok}, failed at {failed_at:?}"
            );
            // The recovered manifest takes new commits (after cutting any torn tail), durably.
            let next = Commit {
                index_meta: b"after".to_vec(),
                durable_seq: 999_999,
                added: vec![],
                freed: vec![],
            };
            m2.commit(next).unwrap();
            let want = m2.state();
            fs.power_cut();
            assert_eq!(
                open(&fs).unwrap().1,
                want,
                "{crash} at op {n}: commit after recovery"
            );
        }
    }
}

/// The commits of a scripted history in log 1: the manifest, the state after each commit (the
/// created one first) and where each commit's record ends.
fn commits_in_one_log(fs: &FaultFs) -> (Manifest, Vec<ManifestState>, Vec<u64>) {
    let m = create(fs);
    let mut states = vec![m.state()];
    let mut ends = vec![fs.file_len(&log_path(1)).unwrap()];
    for s in history(6).iter().filter(|s| matches!(s, Step::Commit(_))) {
        run_step(&m, s).unwrap();
        states.push(m.state());
        ends.push(fs.file_len(&log_path(1)).unwrap());
    }
    (m, states, ends)
}

#[test]
fn manifest_flipped_byte_in_tail_record_drops_just_that_record() {
    let fs = FaultFs::new();
    let (m, states, ends) = commits_in_one_log(&fs);
    assert_eq!(m.log_number(), 1);
    let last = states.len() - 1;
    // Flip a byte in the last record's header, then in its payload.
    for off in [ends[last - 1] + 2, ends[last] - 1] {
        let fs2 = fs.clone();
        assert!(fs2.flip_byte(&log_path(1), off));
        assert_eq!(open(&fs2).unwrap().1, states[last - 1]);
        assert!(fs2.flip_byte(&log_path(1), off));
    }
    // A torn last record is cut by the next commit, which appends after the valid prefix.
    let fs2 = fs.clone();
    assert!(fs2.flip_byte(&log_path(1), ends[last] - 1));
    let (m2, got) = open(&fs2).unwrap();
    assert_eq!(got, states[last - 1]);
    let c = Commit {
        index_meta: b"x".to_vec(),
        durable_seq: 5,
        added: vec![ext(10_000, 3)],
        freed: vec![],
    };
    m2.commit(c).unwrap();
    assert!(fs2.file_len(&log_path(1)).unwrap() < ends[last]);
    let want = m2.state();
    fs2.power_cut();
    assert_eq!(open(&fs2).unwrap().1, want);
}

/// Regression (issue 17, item 3): a bad record in the middle of the log used to be taken for a
/// torn tail, and the next commit cut every record after it, silently rolling the database
/// back to a state whose extents may since have been reused. Only a bad record with no valid
/// record after it is a torn tail; anything else is corruption, and salvage (for repair) keeps
/// the state before the damage and counts the records lost after it.
#[test]
fn manifest_damaged_middle_record_is_corruption_not_a_torn_tail() {
    let fs = FaultFs::new();
    let (m, states, ends) = commits_in_one_log(&fs);
    drop(m);
    let last = states.len() - 1;
    assert!(last >= 4, "the history has too few commits");
    // The record after ends[2] (commit 3): its checksum, its length, its payload.
    for off in [ends[2] + 1, ends[2] + 5, ends[2] + 9, ends[3] - 1] {
        let fs2 = fs.clone();
        assert!(fs2.flip_byte(&log_path(1), off));
        match open(&fs2) {
            Err(Error::Corruption { detail, .. }) => assert!(
                detail.contains("valid record(s) follow"),
                "flip at {off}: {detail}"
            ),
            Err(e) => panic!("flip at {off}: expected corruption, got {e}"),
            Ok((_, st)) => panic!(
                "flip at {off}: opened at commit {} of {last}, silently rolled back",
                st.commits
            ),
        }
        let salvaged = Manifest::salvage(&fs2, &dir(), &counters());
        assert_eq!(salvaged.len(), 1);
        let s = salvaged[0].1.as_ref().unwrap();
        assert_eq!(s.state, states[2], "flip at {off}");
        assert_eq!(s.damaged_at, Some(ends[2]), "flip at {off}");
        assert_eq!(s.lost_records, (last - 3) as u64, "flip at {off}");
        assert!(fs2.flip_byte(&log_path(1), off)); // flip back
    }
    assert_eq!(open(&fs).unwrap().1, states[last]);
}

/// Repair's building blocks: `install` makes a salvaged state the live manifest through a new
/// log (the old ones then set aside), and the result survives a power cut and takes commits.
#[test]
fn manifest_install_makes_a_state_current_durably() {
    let fs = FaultFs::new();
    let m = create(&fs);
    for s in history(8) {
        run_step(&m, &s).unwrap();
    }
    let want = m.state();
    let old = m.log_number();
    drop(m);
    fs.remove(&dir().join(CURRENT_FILE)).unwrap();
    assert!(open(&fs).is_err());
    let salvaged = Manifest::salvage(&fs, &dir(), &counters());
    let s = salvaged
        .iter()
        .find(|(n, _)| *n == old)
        .and_then(|(_, s)| s.as_ref().ok())
        .unwrap();
    assert_eq!(s.state, want);
    let n = Manifest::install(&fs, &dir(), &s.state, &counters()).unwrap();
    assert!(n > old);
    Manifest::set_aside_logs(&fs, &dir(), n, &counters()).unwrap();
    fs.power_cut();
    let (m2, got) = open(&fs).unwrap();
    assert_eq!(got, want);
    assert_eq!(m2.log_number(), n);
    assert!(fs.exists(&dir().join(format!("{}.old", manifest_file_name(old)))));
    m2.commit(Commit {
        index_meta: b"after repair".to_vec(),
        durable_seq: want.durable_seq + 1,
        added: vec![],
        freed: vec![],
    })
    .unwrap();
    fs.power_cut();
    assert_eq!(open(&fs).unwrap().1.index_meta, b"after repair".to_vec());
}

#[test]
fn manifest_unknown_major_version_is_unsupported() {
    let fs = FaultFs::new();
    drop(create(&fs));
    let f = fs.open(&log_path(1), OpenMode::default()).unwrap();
    f.write_all_at(&7u16.to_le_bytes(), 8).unwrap();
    match open(&fs) {
        Err(Error::UnsupportedFormat {
            found_major: 7,
            supported_major: 2,
        }) => {}
        other => panic!(
            "expected UnsupportedFormat, got {:?}",
            other.map(|(_, s)| s)
        ),
    }
}

fn expect_corruption(r: Result<(Manifest, ManifestState)>, needle: &str) {
    match r {
        Err(e @ Error::Corruption { .. }) => {
            assert!(
                e.to_string().contains(needle),
                "error {e} does not mention {needle:?}"
            )
        }
        Err(e) => panic!("expected corruption mentioning {needle:?}, got {e}"),
        Ok((_, s)) => panic!("expected corruption mentioning {needle:?}, opened {s:?}"),
    }
}

#[test]
fn manifest_open_refuses_what_is_not_a_database() {
    let fs = FaultFs::new();
    fs.create_dir_all(&dir()).unwrap();
    expect_corruption(open(&fs), "not a woods database");

    // A log without CURRENT: creation cut short, or a damaged database.
    let f = fs
        .open(
            &log_path(1),
            OpenMode {
                create: true,
                direct: false,
            },
        )
        .unwrap();
    f.write_all_at(b"partial", 0).unwrap();
    expect_corruption(open(&fs), "CURRENT is missing");
    // create starts over from such a leftover.
    drop(create(&fs));
    assert_eq!(open(&fs).unwrap().1.config, b"config v1".to_vec());

    let cur = fs
        .open(&dir().join(CURRENT_FILE), OpenMode::default())
        .unwrap();
    cur.set_len(0).unwrap();
    cur.write_all_at(b"garbage\n", 0).unwrap();
    expect_corruption(open(&fs), "CURRENT");
    cur.set_len(0).unwrap();
    cur.write_all_at(b"MANIFEST-000009\n", 0).unwrap();
    expect_corruption(open(&fs), "missing");
}

#[test]
fn manifest_bad_header_or_snapshot_is_corruption() {
    let fs = FaultFs::new();
    drop(create(&fs));
    assert!(fs.flip_byte(&log_path(1), 3));
    expect_corruption(open(&fs), "header");
    assert!(fs.flip_byte(&log_path(1), 3));
    assert!(fs.flip_byte(&log_path(1), MANIFEST_HEADER_LEN as u64 + 9));
    expect_corruption(open(&fs), "snapshot");
}

#[test]
fn manifest_invalid_commit_is_refused_and_changes_nothing() {
    let fs = FaultFs::new();
    let m = create(&fs);
    m.commit(Commit {
        index_meta: vec![1],
        durable_seq: 1,
        added: vec![ext(10, 5)],
        freed: vec![],
    })
    .unwrap();
    let before = m.state();
    let bad = [
        Commit {
            added: vec![ext(12, 1)],
            ..Commit::default()
        },
        Commit {
            added: vec![ext(5, 6)],
            ..Commit::default()
        },
        Commit {
            added: vec![ext(14, 4)],
            ..Commit::default()
        },
        Commit {
            freed: vec![ext(9, 2)],
            ..Commit::default()
        },
        Commit {
            freed: vec![ext(14, 2)],
            ..Commit::default()
        },
        Commit {
            freed: vec![ext(20, 1)],
            ..Commit::default()
        },
        Commit {
            added: vec![ext(u64::MAX, 2)],
            ..Commit::default()
        },
        Commit {
            added: vec![ext(30, 1)],
            freed: vec![ext(30, 1), ext(30, 1)],
            ..Commit::default()
        },
    ];
    for c in bad {
        match m.commit(c.clone()) {
            Err(Error::Corruption { .. }) => {}
            other => panic!("{c:?} gave {other:?}"),
        }
        assert_eq!(m.state(), before);
        assert!(!m.poisoned());
    }
    fs.power_cut();
    assert_eq!(open(&fs).unwrap().1, before);
}

#[test]
fn manifest_checksummed_invalid_delta_on_disk_is_corruption_naming_the_record() {
    let fs = FaultFs::new();
    let m = create(&fs);
    m.commit(Commit {
        index_meta: vec![1],
        durable_seq: 1,
        added: vec![ext(10, 5)],
        freed: vec![],
    })
    .unwrap();
    drop(m);
    let end = fs.file_len(&log_path(1)).unwrap();
    let bad = frame_record(&encode_delta(&Commit {
        freed: vec![ext(40, 1)],
        ..Commit::default()
    }));
    let f = fs.open(&log_path(1), OpenMode::default()).unwrap();
    f.write_all_at(&bad, end).unwrap();
    expect_corruption(open(&fs), "record 2");
}

#[test]
fn manifest_allocated_set_matches_a_page_model() {
    let mut rng = SmallRng::seed_from_u64(0x600d5);
    let fs = FaultFs::new();
    let m = create(&fs);
    m.set_min_rollover_bytes(2000);
    const PAGES: u64 = 200;
    let mut model = vec![false; PAGES as usize];
    for round in 0..300 {
        let start = rng.gen_range(0..PAGES - 1);
        let pages = rng.gen_range(1..=(PAGES - start).min(12));
        let range = start as usize..(start + pages) as usize;
        let all_free = model[range.clone()].iter().all(|&a| !a);
        let all_used = model[range.clone()].iter().all(|&a| a);
        let c = if rng.gen_bool(0.5) {
            Commit {
                added: vec![ext(start, pages)],
                durable_seq: round,
                ..Commit::default()
            }
        } else {
            Commit {
                freed: vec![ext(start, pages)],
                durable_seq: round,
                ..Commit::default()
            }
        };
        let adding = !c.added.is_empty();
        let valid = if adding { all_free } else { all_used };
        assert_eq!(m.commit(c).is_ok(), valid, "round {round}");
        if valid {
            model[range].iter_mut().for_each(|a| *a = adding);
        }
        // The state is the model's runs, coalesced.
        let mut runs = Vec::new();
        let mut p = 0;
        while p < PAGES as usize {
            if model[p] {
                let s = p;
                while p < PAGES as usize && model[p] {
                    p += 1;
                }
                runs.push(ext(s as u64, (p - s) as u64));
            } else {
                p += 1;
            }
        }
        assert_eq!(m.state().allocated, runs, "round {round}");
    }
    let want = m.state();
    fs.power_cut();
    assert_eq!(open(&fs).unwrap().1, want);
}

#[test]
fn manifest_counts_its_io_as_manifest() {
    let fs = FaultFs::new();
    let c = counters();
    let m = Manifest::create(
        Arc::new(fs.clone()),
        &dir(),
        4096,
        256,
        Vec::new(),
        c.clone(),
    )
    .unwrap();
    m.commit(Commit {
        index_meta: vec![1; 50],
        ..Commit::default()
    })
    .unwrap();
    let snap = c.snapshot();
    let on_disk =
        fs.file_len(&log_path(1)).unwrap() + fs.file_len(&dir().join(CURRENT_FILE)).unwrap();
    assert_eq!(snap.written(Purpose::Manifest), on_disk);
    assert_eq!(snap.total_written(), on_disk);
    assert!(snap.syncs >= 5);
}

#[test]
fn manifest_helpers_never_panic_on_garbage() {
    let mut rng = SmallRng::seed_from_u64(7);
    for _ in 0..2000 {
        let len = rng.gen_range(0..80);
        let mut buf: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if rng.gen_bool(0.5) && !buf.is_empty() {
            buf[0] = rng.gen_range(1..=2);
        }
        let _ = decode_record(&buf);
        let mut log = manifest_header(4096, 1).to_vec();
        log.extend_from_slice(&frame_record(&buf));
        let _ = load_log("test", &log, OnDamage::Refuse);
        let _ = load_log("test", &log, OnDamage::Salvage);
    }
}

/// Once the page file's failure latch is tripped (a failed write of the data file), the manifest
/// refuses every commit: work built on the lost write is never made durable, whichever thread
/// would commit it.
#[test]
fn manifest_refuses_commits_after_a_failed_data_file_write() {
    use crate::storage::{AlignedBuf, PAGE_SIZE};
    use crate::testutil::fault_ctx;

    let fs = FaultFs::new();
    let ctx = fault_ctx(&fs, 64 << 10);
    ctx.manifest
        .refuse_commits_after(ctx.store.failure().clone());
    let commit = |seq: u64, start: u64| Commit {
        index_meta: vec![seq as u8],
        durable_seq: seq,
        added: vec![ext(start, 1)],
        freed: vec![],
    };
    let mut page = AlignedBuf::zeroed(PAGE_SIZE);
    ctx.store
        .write(1, &mut page, Purpose::Merge)
        .expect("write before the fault");
    ctx.manifest
        .commit(commit(1, 1))
        .expect("commit before the fault");
    fs.set_plan(FaultPlan {
        fail_op: Some(0),
        sticky: false,
    });
    assert!(ctx.store.write(2, &mut page, Purpose::Merge).is_err());
    // The fault was not sticky: the write would succeed now, and the commit still must not.
    ctx.store
        .write(2, &mut page, Purpose::Merge)
        .expect("write after the fault");
    match ctx.manifest.commit(commit(2, 2)) {
        Err(Error::ReadOnly { cause }) => assert!(cause.contains("injected fault"), "{cause}"),
        other => panic!("commit after a failed write: {other:?}"),
    }
    let state = ctx.manifest.state();
    assert_eq!((state.durable_seq, state.index_meta), (1, vec![1]));
}

/// Each writable open starts a new incarnation, recorded durably; a clean log records no
/// rollback point, and the page file's clock follows the incarnation and every commit.
#[test]
fn manifest_begin_incarnation_is_durable_and_drives_the_stamps() {
    let fs = FaultFs::new();
    let m = create(&fs);
    let stamps = Arc::new(Stamps::default());
    m.attach_stamps(stamps.clone());
    assert_eq!(m.begin_incarnation().unwrap(), 1);
    assert_eq!(stamps.now().incarnation, 1);
    assert_eq!(stamps.now().commit, 1);
    m.commit(Commit {
        index_meta: b"a".to_vec(),
        durable_seq: 1,
        added: vec![ext(1, 4)],
        freed: vec![],
    })
    .unwrap();
    assert_eq!(stamps.now().commit, 2, "a commit advances the clock");
    drop(m);
    fs.power_cut();
    let (m, state) = open(&fs).unwrap();
    assert_eq!((state.incarnation, state.commits), (1, 1));
    assert!(state.rollbacks.is_empty());
    assert_eq!(m.begin_incarnation().unwrap(), 2);
    // A rollover carries the incarnation into its snapshot.
    m.set_config(b"config v2".to_vec()).unwrap();
    drop(m);
    let (_, state) = open(&fs).unwrap();
    assert_eq!(state.incarnation, 2);
    assert!(state.rollbacks.is_empty());
}

/// A torn tail (here a flipped byte in the last record: a lost commit) makes the next open
/// record a rollback point after the state it read, and take an incarnation above any the
/// torn bytes could have named; the point survives reopening and rollover.
#[test]
fn manifest_torn_tail_records_a_rollback_point() {
    let fs = FaultFs::new();
    let (m, states, ends) = commits_in_one_log(&fs);
    drop(m);
    let last = states.len() - 1;
    assert!(fs.flip_byte(&log_path(1), ends[last] - 1));
    let (m, state) = open(&fs).unwrap();
    assert_eq!(state.commits, states[last - 1].commits);
    let torn = ends[last] - ends[last - 1];
    let next = m.begin_incarnation().unwrap();
    assert_eq!(next, 1 + torn / MIN_OPEN_FRAME);
    let point = RollbackPoint {
        incarnation: 0,
        commit: states[last - 1].commits,
        next,
    };
    assert_eq!(m.state().rollbacks, vec![point]);
    assert_eq!(
        m.begin_incarnation().unwrap(),
        next + 1,
        "no tail left: no new point"
    );
    drop(m);
    fs.power_cut();
    let (m, state) = open(&fs).unwrap();
    assert_eq!(
        (state.incarnation, state.rollbacks.clone()),
        (next + 1, vec![point])
    );
    m.set_config(b"config v3".to_vec()).unwrap();
    drop(m);
    assert_eq!(open(&fs).unwrap().1.rollbacks, vec![point]);
}

/// An open record that does not raise the incarnation, or whose rollback point is out of
/// order, is corruption (a checksummed record is never skipped).
#[test]
fn manifest_bad_open_record_is_corruption() {
    for (incarnation, found) in [
        (0, Vec::new()),
        (
            3,
            vec![RollbackPoint {
                incarnation: 0,
                commit: 0,
                next: 4,
            }],
        ),
    ] {
        let fs = FaultFs::new();
        drop(create(&fs));
        let f = fs.open(&log_path(1), OpenMode::default()).unwrap();
        let end = f.len().unwrap();
        f.write_all_at(&frame_record(&encode_open(incarnation, &found)), end)
            .unwrap();
        expect_corruption(open(&fs), "incarnation");
    }
}

/// A snapshot record every `SNAPSHOT_EVERY` records: salvage passes a damaged record that a
/// snapshot follows and reaches the log's newest state, whole (allocation included), where it
/// used to stop at the state before the damage and lose every later commit. Opening still
/// refuses the damaged log (repair decides).
#[test]
fn manifest_salvage_passes_damage_through_a_later_snapshot() {
    let fs = FaultFs::new();
    let m = create(&fs);
    let mut states = vec![m.state()];
    let mut ends = vec![fs.file_len(&log_path(1)).unwrap()];
    for s in history(22).iter().filter(|s| matches!(s, Step::Commit(_))) {
        run_step(&m, s).unwrap();
        states.push(m.state());
        ends.push(fs.file_len(&log_path(1)).unwrap());
    }
    assert_eq!(m.log_number(), 1, "the history fits one log");
    drop(m);
    let last = states.len() - 1;
    // Every eighth record after the first snapshot is a snapshot: commits 8 and 16 here.
    let buf = read_whole(&fs, &log_path(1), &counters()).unwrap();
    let tags: Vec<u8> = (1..=last)
        .map(|i| buf[ends[i - 1] as usize + RECORD_HEADER_LEN])
        .collect();
    let snapshots: Vec<usize> = (1..=last)
        .filter(|&i| tags[i - 1] == TAG_SNAPSHOT)
        .collect();
    assert_eq!(snapshots, vec![8, 16], "tags {tags:?}");
    for (commit, off) in [(3, ends[2] + 9), (10, ends[9] + 1), (3, ends[3] - 1)] {
        let fs2 = fs.clone();
        assert!(fs2.flip_byte(&log_path(1), off));
        assert!(matches!(open(&fs2), Err(Error::Corruption { .. })));
        let salvaged = Manifest::salvage(&fs2, &dir(), &counters());
        let s = salvaged[0].1.as_ref().unwrap();
        assert_eq!(s.state, states[last], "flip at {off} (commit {commit})");
        assert_eq!(s.damaged_at, None);
        assert_eq!(s.lost_records, 0);
        let next_snapshot = snapshots.iter().find(|&&i| i > commit).unwrap();
        assert_eq!(
            s.passed_damage,
            vec![(ends[commit - 1], (next_snapshot - commit - 1) as u64)]
        );
        assert!(fs2.flip_byte(&log_path(1), off));
    }
    // Damage after the last snapshot: the state before it, as before.
    let fs2 = fs.clone();
    assert!(fs2.flip_byte(&log_path(1), ends[18] + 9));
    let s = Manifest::salvage(&fs2, &dir(), &counters())
        .remove(0)
        .1
        .unwrap();
    assert_eq!(s.state, states[18]);
    assert_eq!(s.damaged_at, Some(ends[18]));
    assert_eq!(s.lost_records, (last - 19) as u64);
    assert!(fs2.flip_byte(&log_path(1), ends[18] + 9));
    // Reopened, the log goes on counting from its last snapshot (commit 16, six records
    // back): commit 23 is a delta, commit 24 the eighth record, a snapshot.
    let (m, st) = open(&fs).unwrap();
    assert_eq!(st, states[last]);
    let mut starts = Vec::new();
    for i in 0..2 {
        starts.push(fs.file_len(&log_path(1)).unwrap() as usize);
        let c = Commit {
            index_meta: format!("after reopen {i}").into_bytes(),
            durable_seq: st.durable_seq + 1 + i,
            ..Commit::default()
        };
        m.commit(c).unwrap();
    }
    let buf = read_whole(&fs, &log_path(1), &counters()).unwrap();
    assert_eq!(buf[starts[0] + RECORD_HEADER_LEN], TAG_DELTA);
    assert_eq!(buf[starts[1] + RECORD_HEADER_LEN], TAG_SNAPSHOT);
    assert_eq!(st, states[last]);
    drop(m);
}
