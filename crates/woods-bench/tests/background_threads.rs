//! `--background-threads 0`: woods engines with no background thread, two client threads doing
//! every step of index work inline (as SplinterDB's evaluation ran), and every answer checked.

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, Phase, RunSpec, Workload};

#[test]
fn two_writers_doing_all_index_work_load_and_read_back_everything() {
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:stbe", "woods:nbtree"] {
        let phases = vec![
            Phase {
                workload: Workload::YcsbLoad,
                ops: 0,
            },
            Phase {
                workload: Workload::ReadRandom,
                ops: 2_000,
            },
        ];
        let config = EngineConfig {
            background_threads: Some(0),
            ..EngineConfig::new(1 << 20, true)
        };
        let dir = tmp.path().join(engine.replace(':', "-"));
        let spec = RunSpec {
            threads: 2,
            seed: 4,
            ..RunSpec::new(engine, dir, config, phases, 20_000)
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
