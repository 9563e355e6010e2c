//! woods-bench: the instrument behind `woods bench`. It runs woods' index kinds and, with the
//! `peers` feature, other engines through the same workloads, each engine in its own child
//! process, and reports throughput, latency percentiles, write, space and read amplification,
//! CPU time and peak memory.
//!
//! One engine can also be run in this process, which is how the child does it:
//!
//! ```
//! use woods_bench::engine::EngineConfig;
//! use woods_bench::workload::{self, Phase, RunSpec, Workload};
//! # let dir = std::env::temp_dir().join(format!("woods-bench-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let phase = |workload, ops| Phase { workload, ops };
//! let phases = vec![phase(Workload::YcsbLoad, 0), phase(Workload::YcsbA, 500)];
//! let config = EngineConfig::new(4 << 20, true); // a 4 MiB budget, direct I/O
//! let spec = RunSpec {
//!     threads: 2,
//!     seed: 7,
//!     // 24-byte keys, 100-byte values, YCSB's own distribution: zipfian for A
//!     ..RunSpec::new("woods:lsm", dir.clone(), config, phases, 1000)
//! };
//! let result = workload::run(&spec)?;
//! let a = result.phase(Workload::YcsbA).unwrap();
//! assert_eq!(a.ops, 500);
//! assert_eq!(a.checked, a.mix.reads); // every read was checked
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), woods_bench::engine::BenchError>(())
//! ```

pub mod aging;
pub mod cgroup;
pub mod charts;
pub mod child;
pub mod cli;
pub mod device;
pub mod dist;
pub mod engine;
pub mod expected;
pub mod gen;
pub mod machine;
pub mod metrics;
pub mod output;
pub mod recycle;
pub mod report;
pub mod series;
pub mod tpcc;
pub mod workload;

/// The seed of a randomized test: `WOODS_SEED` when set (to replay a run), else the clock's;
/// printed either way. For this crate's tests.
#[doc(hidden)]
pub fn test_seed() -> u64 {
    let seed = std::env::var("WOODS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("WOODS_SEED={seed}");
    seed
}
