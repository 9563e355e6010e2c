//! The buffered `btree`'s insertion buffer is durable on its own: with the write-ahead log off,
//! entries that `Db::sync` moved into the buffer (and not yet into the tree) survive a power
//! cut, under every flush policy, through rounds of puts, overwrites, deletes and merges that
//! make the buffer drain leaves into the tree between the cuts.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use woods::storage::{FaultFs, Fs};
use woods::{Db, Options};

fn options(kind: &woods::IndexKind, fs: &FaultFs) -> Options {
    Options {
        wal: false,
        // No background thread: nothing drains the buffer between the count and the cut.
        background_threads: 0,
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..common::small_options(kind)
    }
}

#[test]
fn buffered_entries_survive_power_cuts_without_the_log() {
    for kind in common::buffered_kinds() {
        let name = kind.name();
        let seed = common::seed(&format!("buffer power cut [{name}]"));
        let mut rng = SmallRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let keys = 4_000 * common::scale();
        let mut buffered_at_a_cut = 0;
        for round in 0..6 {
            let db = Db::open(dir, options(&kind, &fs)).expect("open");
            for i in 0..3_000 * common::scale() {
                let k = format!("key-{:06}", rng.gen_range(0..keys)).into_bytes();
                match rng.gen_range(0..10) {
                    0 => {
                        db.delete(&k).expect("delete");
                        model.remove(&k);
                    }
                    1 => {
                        db.merge(&k, b"+").expect("merge");
                        model.entry(k).or_default().push(b'+');
                    }
                    _ => {
                        let v = format!("round {round} op {i}").into_bytes();
                        db.put(&k, &v).expect("put");
                        model.insert(k, v);
                    }
                }
            }
            db.sync().expect("sync");
            let buffered = db.stats().index.counters.get("buffer_entries").copied();
            let buffered = buffered.expect("a buffered btree counts its buffer");
            buffered_at_a_cut += buffered;
            fs.power_cut();
            drop(db);
            let db = Db::open(dir, options(&kind, &fs)).expect("reopen");
            let after = db.stats().index.counters.get("buffer_entries").copied();
            assert_eq!(
                after,
                Some(buffered),
                "{name} seed {seed} round {round}: the buffer after the cut"
            );
            let got: BTreeMap<Vec<u8>, Vec<u8>> = db
                .iter()
                .expect("iter")
                .collect::<woods::Result<_>>()
                .expect("scan");
            assert!(
                got == model,
                "{name} seed {seed} round {round}: contents differ"
            );
            db.check().expect("check");
            db.close().expect("close");
        }
        assert!(
            buffered_at_a_cut > 0,
            "{name}: no cut found entries in the buffer"
        );
    }
}
