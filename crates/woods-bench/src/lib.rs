//! woods-bench: the instrument behind `woods bench`. It runs woods' index kinds and, with the
//! `peers` feature, other engines through the same workloads, each engine in its own child
//! process, and reports throughput, latency percentiles, write, space and read amplification,
//! CPU time and peak memory.
//!
//! One engine can also be run in this process, which is how the child does it:
//!
//! ```
//! use woods_bench::engine::EngineConfig;
//! use woods_bench::workload::{self, RunSpec, Workload};
//! # let dir = std::env::temp_dir().join(format!("woods-bench-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let spec = RunSpec {
//!     engine: "woods:lsm".into(),
//!     dir: dir.clone(),
//!     config: EngineConfig { memory_bytes: 4 << 20, direct_io: true },
//!     workloads: vec![Workload::FillRandom, Workload::ReadRandom],
//!     records: 1000,
//!     reads: 500,
//!     overwrites: 0,
//!     key_size: 24,
//!     value_size: 100,
//!     seed: 7,
//!     progress: false,
//! };
//! let result = workload::run(&spec)?;
//! assert_eq!(result.phase(Workload::ReadRandom).unwrap().checked, 500);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), woods_bench::engine::BenchError>(())
//! ```

pub mod child;
pub mod cli;
pub mod engine;
pub mod gen;
pub mod metrics;
pub mod report;
pub mod workload;
