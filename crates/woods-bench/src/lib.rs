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
//! let spec = RunSpec {
//!     engine: "woods:lsm".into(),
//!     dir: dir.clone(),
//!     config: EngineConfig { memory_bytes: 4 << 20, direct_io: true, sync: false, no_wal: false, background_threads: None },
//!     phases: vec![phase(Workload::YcsbLoad, 0), phase(Workload::YcsbA, 500)],
//!     records: 1000,
//!     key_size: 24,
//!     value_size: 100,
//!     threads: 2,
//!     miss_ratio: 0.0,
//!     sequential_percent: 0.0,
//!     seek_nexts: 10,
//!     distribution: None, // YCSB's own: zipfian for A
//!     seed: 7,
//!     progress: false,
//! };
//! let result = workload::run(&spec)?;
//! let a = result.phase(Workload::YcsbA).unwrap();
//! assert_eq!(a.ops, 500);
//! assert_eq!(a.checked, a.mix.reads); // every read was checked
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), woods_bench::engine::BenchError>(())
//! ```

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
pub mod report;
pub mod series;
pub mod workload;
