#!/usr/bin/env bash
# Builds `woods-bench-rc`: woods bench with the engine `rocksdb-current`, current RocksDB
# (11.8.1, from the `rocksdb` crate 0.25) compiled from the C++ source its librocksdb-sys
# bundles. About 15 minutes of C++ on a fast machine, 30 or more on 2 cores;
# once per machine, never in CI. Needs clang and libclang-dev (scripts/install-peers.sh).
#
#   bash scripts/build-rocksdb-current.sh          # builds bench/rocksdb-current/target/release/woods-bench-rc
#   bench/rocksdb-current/target/release/woods-bench-rc --engines woods:lsm,rocksdb-current --records 1000000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-peers.sh
cd bench/rocksdb-current
# Its own .cargo/config.toml (read from this directory) sets ROCKSDB_COMPILE=1, so that the
# root's ROCKSDB_LIB_DIR (Debian's 7.8.3, for the `peers` build) is ignored here; set here too
# in case cargo is started from elsewhere.
export ROCKSDB_COMPILE=1
export CXXFLAGS="${CXXFLAGS:--march=native}"
# Not --locked: the lockfile pins RocksDB, and woods-bench's own dependencies may have grown since.
cargo build --release "$@"
echo "built $(pwd)/target/release/woods-bench-rc" >&2
