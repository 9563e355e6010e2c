//! The Db API against a BTreeMap model, on the fault-injecting file system: the first input byte
//! picks the index kind, the rest is a sequence of operations (writes, reads, scans, snapshots,
//! flushes, reopens, process kills, power cuts and fault countdowns). Every read is checked
//! against the model; after a process kill every acknowledged write is there; after a power cut
//! the state is the model after some prefix of the acknowledged writes that holds every write
//! acknowledged by a Sync write, `sync` or `flush`. A write that fails (an injected fault) may or
//! may not have happened: the database is reopened at once and either state is accepted.
#![no_main]
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use woods::storage::{FaultFs, FaultPlan, Fs};
use woods::{
    BTreeParams, Db, Durability, IndexKind, LsmParams, MergeOperator, NbTreeParams, Options,
    StbeParams, WriteBatch,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Appends operands to the value.
struct Append;

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "append"
    }
    fn full_merge(&self, _key: &[u8], base: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
        let mut v = base.map(|b| b.to_vec()).unwrap_or_default();
        for o in operands {
            v.extend_from_slice(o);
        }
        v
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Key(u8);

impl Key {
    fn bytes(self) -> Vec<u8> {
        // A few long keys among short ones; 24 keys in all, so that writes collide.
        let k = self.0 % 24;
        if k >= 20 {
            vec![b'l'; 200 + k as usize]
        } else {
            vec![b'k', k]
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Value {
    byte: u8,
    len: u16,
}

impl Value {
    fn bytes(self) -> Vec<u8> {
        // Mostly small; now and then large enough to go out of line.
        let len = if self.len % 16 == 0 {
            self.len as usize % 20_000
        } else {
            self.len as usize % 64
        };
        vec![self.byte; len]
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Write {
    Put(Key, Value),
    Delete(Key),
    Merge(Key, Value),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Write(Write, bool),
    Batch(Vec<Write>, bool),
    Get(Key),
    Scan {
        lo: Option<(Key, bool)>,
        hi: Option<(Key, bool)>,
        reverse: bool,
    },
    Snapshot,
    SnapshotGet(u8, Key),
    SnapshotScan(u8, bool),
    Sync,
    Flush,
    Drain,
    Reopen,
    KillProcess,
    PowerCut,
    FailAfter(u8, bool),
}

fn apply(model: &mut Model, w: &Write) {
    match w {
        Write::Put(k, v) => {
            model.insert(k.bytes(), v.bytes());
        }
        Write::Delete(k) => {
            model.remove(&k.bytes());
        }
        Write::Merge(k, v) => {
            model.entry(k.bytes()).or_default().extend(v.bytes());
        }
    }
}

fn kind(pick: u8) -> IndexKind {
    match pick % 4 {
        0 => IndexKind::BTree(BTreeParams::default()),
        1 => IndexKind::Lsm(LsmParams {
            table_bytes: 16 << 10,
            level1_bytes: 64 << 10,
            size_ratio: 4,
            ..LsmParams::default()
        }),
        2 => IndexKind::NbTree(NbTreeParams::default()),
        _ => IndexKind::Stbe(StbeParams {
            fanout: 4,
            dead_percent: 25,
            node_bytes: 128 << 10,
            ..StbeParams::default()
        }),
    }
}

fn bound(b: Option<(Key, bool)>) -> Bound<Vec<u8>> {
    match b {
        None => Bound::Unbounded,
        Some((k, true)) => Bound::Included(k.bytes()),
        Some((k, false)) => Bound::Excluded(k.bytes()),
    }
}

/// The model's entries in a range, or none when the bounds cross (BTreeMap refuses those).
fn model_range(
    m: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) =
        (lo, hi)
    {
        if a > b
            || (a == b && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))))
        {
            return None;
        }
    }
    Some(
        m.range((lo.clone(), hi.clone()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

struct Harness {
    fs: FaultFs,
    opts: Options,
    db: Option<Db>,
    /// Every acknowledged write (a batch is one), in commit order.
    log: Vec<Vec<Write>>,
    /// How many of `log` a power cut must keep.
    durable: usize,
    /// The state after all of `log`.
    model: Model,
    /// Whether a fault countdown is set (operations may then fail).
    faults: bool,
    /// Open snapshots and the model each saw (dropped before the database closes).
    snaps: Vec<(woods::Snapshot, Model)>,
}

impl Harness {
    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
    }

    fn state(&self) -> Model {
        self.db()
            .iter()
            .expect("iter")
            .map(|r| r.expect("scan"))
            .collect()
    }

    fn open(&mut self) {
        self.fs.set_plan(FaultPlan::default());
        self.faults = false;
        self.db = Some(Db::open(Path::new("/db"), self.opts.clone()).expect("reopen"));
    }

    /// Reopens after the process died (`cut == false`) or the power was cut, with `maybe` the
    /// write that failed, if any; checks the state and makes the model what was found.
    fn crash(&mut self, cut: bool, maybe: Option<Vec<Write>>) {
        self.snaps.clear();
        if cut {
            self.fs.power_cut();
        } else {
            self.fs.kill_process();
        }
        self.db = None;
        self.open();
        let got = self.state();
        let mut log = std::mem::take(&mut self.log);
        log.extend(maybe.clone());
        let must = if cut {
            self.durable
        } else {
            log.len() - usize::from(maybe.is_some())
        };
        let mut m = Model::new();
        for w in &log[..must] {
            for w in w {
                apply(&mut m, w);
            }
        }
        let mut n = must;
        while m != got && n < log.len() {
            for w in &log[n] {
                apply(&mut m, w);
            }
            n += 1;
        }
        assert!(
            m == got,
            "after a {}: the state is not the model after a prefix of at least {must} of the {} writes",
            if cut { "power cut" } else { "process kill" },
            log.len()
        );
        log.truncate(n);
        self.log = log;
        // What a power cut found was durable; what a kill found need not be.
        self.durable = if cut { n } else { self.durable.min(n) };
        self.model = got;
        self.db().check().expect("check after reopening");
    }

    fn write(&mut self, ws: Vec<Write>, sync: bool) {
        let mut b = WriteBatch::new();
        for w in &ws {
            match w {
                Write::Put(k, v) => b.put(k.bytes(), v.bytes()),
                Write::Delete(k) => b.delete(k.bytes()),
                Write::Merge(k, v) => b.merge(k.bytes(), v.bytes()),
            };
        }
        let d = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        match self.db().write_with(&b, d) {
            // A batch over the database's limit for one write is refused whole, before
            // anything is written: the model stays as it is.
            Err(woods::Error::BatchTooLarge { bytes, limit }) => {
                assert!(bytes > limit, "a batch of {bytes} bytes refused, limit {limit}");
                assert_eq!(bytes, b.size_bytes(), "the refusal names the batch's size");
            }
            Ok(()) => {
                for w in &ws {
                    apply(&mut self.model, w);
                }
                self.log.push(ws);
                if sync {
                    self.durable = self.log.len();
                }
            }
            Err(e) => {
                assert!(self.faults, "write failed with no fault set: {e}");
                self.crash(false, Some(ws));
            }
        }
    }

    /// An operation that makes everything durable (sync, flush): on success, a power cut keeps
    /// all acknowledged writes; on failure (faults only), the database is reopened.
    fn persist(&mut self, r: woods::Result<()>) {
        match r {
            Ok(()) => self.durable = self.log.len(),
            Err(e) => {
                assert!(self.faults, "sync or flush failed with no fault set: {e}");
                self.crash(false, None);
            }
        }
    }
}

fuzz_target!(init: woods::fuzzing::start_reader_pool(), |data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let fs = FaultFs::new();
    let opts = Options {
        index: Some(kind(pick)),
        cache_bytes: 256 << 10,
        row_cache_bytes: 64 << 10,
        memtable_bytes: 64 << 10,
        merge_operator: Some(Arc::new(Append)),
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..Options::default()
    };
    let mut h = Harness {
        fs,
        opts,
        db: None,
        log: Vec::new(),
        durable: 0,
        model: Model::new(),
        faults: false,
        snaps: Vec::new(),
    };
    h.open();
    let mut u = Unstructured::new(rest);
    let Ok(ops) = u.arbitrary_iter::<Op>() else {
        return;
    };
    let trace = std::env::var_os("WOODS_FUZZ_TRACE").is_some();
    if trace {
        eprintln!("kind {:?}", kind(pick));
    }
    for op in ops.take(200) {
        let Ok(op) = op else { break };
        if trace {
            eprintln!("{op:?}");
        }
        match op {
            Op::Write(w, sync) => h.write(vec![w], sync),
            Op::Batch(ws, sync) => h.write(ws.into_iter().take(16).collect(), sync),
            Op::Get(k) => match h.db().get(k.bytes()) {
                Ok(v) => assert_eq!(v.as_ref(), h.model.get(&k.bytes()), "get {k:?}"),
                Err(e) => assert!(h.faults, "get failed with no fault set: {e}"),
            },
            Op::Scan { lo, hi, reverse } => {
                let (lo, hi) = (bound(lo), bound(hi));
                let Some(mut want) = model_range(&h.model, &lo, &hi) else {
                    continue;
                };
                let it = if reverse {
                    want.reverse();
                    h.db().range_rev((lo, hi))
                } else {
                    h.db().range((lo, hi))
                };
                match it.and_then(|it| it.collect::<woods::Result<Vec<_>>>()) {
                    Ok(got) => assert!(got == want, "scan (reverse: {reverse}) differs"),
                    Err(e) => assert!(h.faults, "scan failed with no fault set: {e}"),
                }
            }
            Op::Snapshot => {
                if h.snaps.len() == 3 {
                    h.snaps.remove(0);
                }
                h.snaps.push((h.db().snapshot(), h.model.clone()));
            }
            Op::SnapshotGet(i, k) => {
                if let Some((s, m)) = h.snaps.get(i as usize % h.snaps.len().max(1)) {
                    match s.get(k.bytes()) {
                        Ok(v) => assert_eq!(v.as_ref(), m.get(&k.bytes()), "snapshot get {k:?}"),
                        Err(e) => assert!(h.faults, "snapshot get failed with no fault set: {e}"),
                    }
                }
            }
            Op::SnapshotScan(i, reverse) => {
                if let Some((s, m)) = h.snaps.get(i as usize % h.snaps.len().max(1)) {
                    let mut want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    let it = if reverse {
                        want.reverse();
                        s.iter_rev()
                    } else {
                        s.iter()
                    };
                    match it.and_then(|it| it.collect::<woods::Result<Vec<_>>>()) {
                        Ok(got) => assert!(got == want, "snapshot scan differs"),
                        Err(e) => assert!(h.faults, "snapshot scan failed with no fault set: {e}"),
                    }
                }
            }
            Op::Sync => {
                let r = h.db().sync();
                h.persist(r);
            }
            Op::Flush => {
                let r = h.db().flush();
                h.persist(r);
            }
            Op::Drain => {
                if let Err(e) = h.db().drain() {
                    assert!(h.faults, "drain failed with no fault set: {e}");
                    h.crash(false, None);
                }
            }
            Op::Reopen => {
                h.snaps.clear();
                let db = h.db.take().expect("open");
                if let Err(e) = db.close() {
                    assert!(h.faults, "close failed with no fault set: {e}");
                    h.crash(false, None);
                } else {
                    h.durable = h.log.len();
                    h.open();
                    assert!(h.state() == h.model, "state after close and reopen differs");
                }
            }
            Op::KillProcess => {
                h.crash(false, None);
            }
            Op::PowerCut => {
                h.crash(true, None);
            }
            Op::FailAfter(n, sticky) => {
                h.fs.set_plan(FaultPlan {
                    fail_op: Some(u64::from(n % 64)),
                    sticky,
                });
                h.faults = true;
            }
        }
    }
    h.snaps.clear();
    if let Some(db) = h.db.take() {
        if db.close().is_err() {
            assert!(h.faults, "close failed with no fault set");
        }
    }
});
