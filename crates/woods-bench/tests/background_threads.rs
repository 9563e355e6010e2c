//! `--background-threads 0`: woods engines with no background thread, two client threads doing
//! every step of index work inline (as SplinterDB's evaluation ran), and every answer checked.

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, Phase, RunSpec, Workload};

#[test]
fn two_writers_doing_all_index_work_load_and_read_back_everything() {
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:stbe", "woods:nbtree"] {
        let spec = RunSpec {
            engine: engine.into(),
            dir: tmp.path().join(engine.replace(':', "-")),
            config: EngineConfig {
                memory_bytes: 1 << 20,
                direct_io: true,
                sync: false,
                no_wal: false,
                background_threads: Some(0),
            },
            phases: vec![
                Phase {
                    workload: Workload::YcsbLoad,
                    ops: 0,
                },
                Phase {
                    workload: Workload::ReadRandom,
                    ops: 2_000,
                },
            ],
            records: 20_000,
            key_size: 24,
            value_size: 100,
            threads: 2,
            miss_ratio: 0.0,
            sequential_percent: 0.0,
            seek_nexts: 10,
            distribution: None,
            seed: 4,
            progress: false,
        };
        let r = run(&spec).unwrap_or_else(|e| panic!("{engine}: {e}"));
        assert_eq!(r.spec.config.background_threads, Some(0));
        let waits = r.phases[0]
            .own
            .write_waits
            .expect("woods records its waits");
        assert!(waits.paced > 0, "{engine}: no writer paced");
        assert_eq!(r.phases[1].checked, 2_000, "{engine}");
        assert_eq!(r.phases[1].mix.not_found, 0, "{engine}");
    }
}
