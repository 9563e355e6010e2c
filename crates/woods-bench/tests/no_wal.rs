//! `--no-wal` on woods, through the bench's own run: a load writes no log bytes by woods' own
//! count, and every record reads back after the close and reopen between phases; the same run
//! with the log writes about one log byte per user byte.

use std::path::Path;

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, Phase, RunSpec, Workload};

const RECORDS: u64 = 2_000;

fn spec(dir: &Path, engine: &str, no_wal: bool) -> RunSpec {
    let phase = |workload, ops| Phase { workload, ops };
    let phases = vec![
        phase(Workload::YcsbLoad, 0),
        phase(Workload::ReadRandom, 500),
    ];
    let config = EngineConfig {
        no_wal,
        ..EngineConfig::new(1 << 20, true)
    };
    let dir = dir.join(format!("{}-{no_wal}", engine.replace(':', "-")));
    RunSpec {
        seed: 3,
        ..RunSpec::new(engine, dir, config, phases, RECORDS)
    }
}

#[test]
fn no_wal_writes_no_log_and_every_record_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:lsm", "woods:stbe", "woods:nbtree", "woods:btree"] {
        for no_wal in [true, false] {
            let r = run(&spec(tmp.path(), engine, no_wal)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.spec.config.no_wal, no_wal);
            let load = &r.phases[0];
            let wal = load.own.wal_written.expect("woods counts its log bytes");
            if no_wal {
                assert_eq!(wal, 0, "{engine}: {wal} log bytes without a log");
            } else {
                assert!(
                    wal >= load.user_bytes,
                    "{engine}: {wal} log bytes for {} user bytes",
                    load.user_bytes
                );
            }
            // WA-WAL is what the engine wrote besides its log, whether or not the log reached
            // the device (/proc less the log count would subtract a cancelled log twice).
            let written = load.own.written.expect("woods counts its writes");
            let data = (written - wal) as f64 / load.user_bytes as f64;
            let wa_wal = load.write_amp_no_wal.expect("WA-WAL");
            assert!(
                (wa_wal - data).abs() < 1e-9,
                "{engine}: WA-WAL {wa_wal}, data {data}"
            );
            if no_wal {
                assert_eq!(load.write_amp_no_wal, load.own_write_amp);
            }
            // Every get is checked against the record's value: a lost write fails the run.
            let reads = &r.phases[1];
            assert_eq!(reads.checked, 500, "{engine} no_wal={no_wal}");
            assert_eq!(reads.mix.not_found, 0, "{engine} no_wal={no_wal}");
        }
    }
}
