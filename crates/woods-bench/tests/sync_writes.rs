//! `--sync` on woods, through the bench's own run (in this process): every write of every kind
//! the workloads make (load puts, YCSB updates and read-modify-writes, deletes) syncs woods' log
//! before it returns, as its own counters and the kernel's counts of the process's dirtied pages
//! and of the device's writes show; the same run without `--sync` syncs exactly once per write less.
//! The woods-versus-/proc cross-check holds either way. (The peers: `peer_engines.rs`.)

use std::path::Path;

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, EngineResult, Phase, PhaseResult, RunSpec, Workload};

const RECORDS: u64 = 300;
const PAGE: u64 = 4096;

fn spec(dir: &Path, engine: &str, sync: bool) -> RunSpec {
    let phase = |workload, ops| Phase { workload, ops };
    let phases = vec![
        phase(Workload::YcsbLoad, 0),
        phase(Workload::YcsbA, 200),
        phase(Workload::YcsbF, 100),
        phase(Workload::DeleteRandom, 50),
        phase(Workload::ReadRandom, 100),
    ];
    // No background threads: every sync then happens on the writing thread in one order, so
    // the runs with and without --sync differ by exactly the flag's syncs. (A background thread
    // creates the next log file whenever it gets to it: two syncs that land in one phase or the
    // next by timing alone.)
    let config = EngineConfig {
        sync,
        background_threads: Some(0),
        ..EngineConfig::new(1 << 20, true)
    };
    let dir = dir.join(format!("{}-{sync}", engine.replace(':', "-")));
    RunSpec {
        seed: 9,
        ..RunSpec::new(engine, dir, config, phases, RECORDS)
    }
}

/// The phases that write, each with its number of writes.
fn writes(r: &EngineResult) -> Vec<(u64, &PhaseResult)> {
    r.phases
        .iter()
        .filter(|p| p.workload.writes())
        .map(|p| {
            let m = &p.mix;
            (m.puts + m.inserts + m.deletes + m.read_modify_writes, p)
        })
        .collect()
}

// One test, so that no other test of this process adds to /proc/self/io while it runs.
#[test]
fn sync_syncs_every_write_of_every_kind() {
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:lsm", "woods:btree"] {
        let synced = run(&spec(tmp.path(), engine, true)).unwrap_or_else(|e| panic!("{e}"));
        assert!(synced.spec.config.sync);
        let phases = writes(&synced);
        assert_eq!(phases.len(), 4, "{engine}");
        for (n, p) in phases {
            let w = p.workload.name();
            assert!(n > 0, "{engine} {w}: no writes");
            let syncs = p.own.syncs.expect("woods counts its syncs");
            assert!(
                syncs >= n,
                "{engine} {w}: {syncs} syncs for {n} synced writes"
            );
            // Each sync leaves the log's last page clean, so each write dirties it again (in
            // the load, 300 pages: more than the 1 MiB from which the run compares woods' own
            // count with /proc's, which must allow for it).
            if let Some(proc_w) = p.proc_written.filter(|&b| b > 0) {
                assert!(
                    proc_w >= n * PAGE,
                    "{engine} {w}: the process dirtied {proc_w} bytes for {n} synced writes"
                );
            }
            // The device wrote at least that (other processes only add to it).
            if let Some(dev) = p.device_written {
                assert!(
                    dev >= n * PAGE,
                    "{engine} {w}: the device wrote {dev} bytes for {n} synced writes"
                );
                assert_eq!(p.device_warning, None, "{engine} {w}");
                assert!(p.device_write_amp.unwrap() >= p.write_amp.unwrap() * 0.95);
            } else {
                eprintln!("{engine} {w}: {:?}", p.device_unreadable);
                assert!(p.device_unreadable.is_some());
            }
        }

        // The same operations (same seed) without --sync: the flag accounts for a sync per
        // write (the rest is opening, flushing and closing, the same in both).
        let unsynced = run(&spec(tmp.path(), engine, false)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!unsynced.spec.config.sync);
        for ((n, s), (m, u)) in writes(&synced).into_iter().zip(writes(&unsynced)) {
            assert_eq!((n, s.workload), (m, u.workload));
            let w = s.workload.name();
            let (s, u) = (s.own.syncs.unwrap(), u.own.syncs.unwrap());
            assert_eq!(
                s,
                u + n,
                "{engine} {w}: {s} syncs with --sync, {u} without, for {n} writes"
            );
        }
    }
}
