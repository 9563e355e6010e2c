//! Helpers shared by the crate's unit tests.

/// The seed of a randomized unit test: `WOODS_SEED` if set, else from the clock. Always printed,
/// so that a failure replays with `WOODS_SEED=...`.
pub fn seed() -> u64 {
    let s = std::env::var("WOODS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("WOODS_SEED={s}");
    s
}

use std::path::Path;
use std::sync::Arc;

use crate::cache::Cache;
use crate::index::{IndexContext, Snapshots};
use crate::manifest::{Manifest, ManifestState};
use crate::storage::{Allocator, FaultFs, File, Fs, IoCounters, OpenMode, PageFile};

/// The data file of a unit test's index on a fault-injecting file system: `/db/data`.
fn fault_data_file(fs: &FaultFs) -> Arc<dyn File> {
    fs.open(
        Path::new("/db/data"),
        OpenMode {
            create: true,
            direct: false,
        },
    )
    .expect("data file")
}

fn fault_ctx_with(
    fs: &FaultFs,
    manifest: Manifest,
    alloc: Allocator,
    io: Arc<IoCounters>,
    memtable_bytes: u64,
) -> IndexContext {
    let store = PageFile::new(fault_data_file(fs), Cache::new(4 << 20), alloc, io);
    IndexContext {
        store: Arc::new(store),
        manifest: Arc::new(manifest),
        snapshots: Arc::new(Snapshots::default()),
        merge_op: None,
        dir: "/db".into(),
        memtable_bytes,
    }
}

/// A new, empty index context in `/db` of `fs`, as a unit test drives an index without a Db.
pub fn fault_ctx(fs: &FaultFs, memtable_bytes: u64) -> IndexContext {
    fs.create_dir_all(Path::new("/db")).expect("dir");
    let io = Arc::new(IoCounters::default());
    let manifest = Manifest::create(
        Arc::new(fs.clone()),
        Path::new("/db"),
        4096,
        64,
        b"cfg".to_vec(),
        io.clone(),
    )
    .expect("manifest");
    fault_ctx_with(fs, manifest, Allocator::new(1), io, memtable_bytes)
}

/// The context of [`fault_ctx`] reopened from what its manifest holds (as after a crash), with
/// that state.
pub fn reopen_fault_ctx(fs: &FaultFs, memtable_bytes: u64) -> (IndexContext, ManifestState) {
    let io = Arc::new(IoCounters::default());
    let (manifest, state) =
        Manifest::open(Arc::new(fs.clone()), Path::new("/db"), io.clone()).expect("manifest");
    let alloc = Allocator::from_allocated(1, &state.allocated);
    let ctx = fault_ctx_with(fs, manifest, alloc, io, memtable_bytes);
    (ctx, state)
}
