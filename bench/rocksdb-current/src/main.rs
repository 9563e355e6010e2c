//! `woods-bench-rc`: `woods bench` with one more engine, `rocksdb-current`, which is RocksDB
//! compiled from source by the newest `rocksdb` crate. The adapter is woods-bench's own
//! (`crates/woods-bench/src/engine/rocksdb.rs`), compiled here against that crate, so the two
//! RocksDB builds get exactly the same settings.
//!
//! Build with `scripts/build-rocksdb-current.sh`; run like `woods bench`, e.g.
//! `woods-bench-rc --engines woods:lsm,rocksdb-current --records 1000000`.

use std::path::Path;
use std::process::ExitCode;

// What the shared adapter reaches through `super::` and `crate::metrics`.
use woods_bench::engine::{
    rocksdb_log_version, BenchError, BenchResult, Engine, EngineConfig, OwnCounters,
};

mod metrics {
    pub use woods_bench::metrics::direct_io_supported;
}

#[path = "../../../crates/woods-bench/src/engine/rocksdb.rs"]
mod rocksdb_adapter;

/// The command-line name of the source-built RocksDB.
const NAME: &str = "rocksdb-current";

fn open_current(dir: &Path, cfg: &EngineConfig) -> BenchResult<Box<dyn Engine>> {
    Ok(Box::new(rocksdb_adapter::RocksDbEngine::open(
        NAME, dir, cfg,
    )?))
}

fn main() -> ExitCode {
    woods_bench::cli::main_with(&[(NAME, open_current)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_writes_reads_and_names_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig::new(8 << 20, false);
        let mut e = open_current(dir.path(), &cfg).unwrap();
        assert_eq!(e.name(), NAME);
        e.put(b"k1", b"v1").unwrap();
        e.put(b"k2", b"v2").unwrap();
        e.delete(b"k1").unwrap();
        assert_eq!(e.get(b"k1").unwrap(), None);
        assert_eq!(e.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
        e.drain().unwrap();
        let v = e.version().expect("RocksDB names its version in its LOG");
        let major: u32 = v
            .strip_prefix("RocksDB ")
            .and_then(|s| s.split('.').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        assert!(major >= 9, "{v} is not a current RocksDB");
        e.close().unwrap();
    }
}
