//! Workloads and the run of one engine through them, in this process.
//!
//! Records are those of [`RecordGen`]: record `i`'s key is a seeded 64-bit hash of `i`
//! repeated to the key size, so writing records `0..N` in index order writes `N` distinct keys
//! in uniformly random key order (db_bench's `fillrandom` without its duplicates).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::{self, BenchError, BenchResult, Engine, EngineConfig, OwnCounters};
use crate::gen::RecordGen;
use crate::metrics::{disk_bytes, Latency, ProcIo, Recorder, Usage};

/// One phase of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Records `0..N`, one put each: distinct keys in uniformly random order.
    FillRandom,
    /// Puts of new values for records chosen uniformly at random among `0..N`.
    Overwrite,
    /// Gets of records chosen uniformly at random among `0..N` (all hits), every value checked.
    ReadRandom,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::FillRandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::ReadRandom => "readrandom",
        }
    }

    fn writes(self) -> bool {
        !matches!(self, Workload::ReadRandom)
    }
}

/// Everything a child process needs to run one engine: passed to it as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Engine name (`woods:lsm`, `rocksdb`).
    pub engine: String,
    /// The engine's database directory (created; should be empty).
    pub dir: PathBuf,
    pub config: EngineConfig,
    /// Phases in order; each opens the engine, runs, drains (writes) and closes it.
    pub workloads: Vec<Workload>,
    /// Number of records N.
    pub records: u64,
    /// Operations of `readrandom`.
    pub reads: u64,
    /// Operations of `overwrite`.
    pub overwrites: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub seed: u64,
    /// Print a progress line on stderr about once a second.
    pub progress: bool,
}

/// The figures of one phase. Write phases include draining the engine's background work and
/// closing it in their time and I/O.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    pub workload: Workload,
    pub ops: u64,
    /// Wall time from the first operation until the engine was drained and closed.
    pub secs: f64,
    pub ops_per_sec: f64,
    /// Latency of every operation (the drain is in `secs`, not here).
    pub latency: Latency,
    /// Operations completed in each second of the phase.
    pub per_second: Vec<u64>,
    /// Key + value bytes the phase wrote.
    pub user_bytes: u64,
    /// Device bytes written by the process (write_bytes − cancelled_write_bytes from
    /// /proc/self/io), from before opening the engine to after closing it.
    pub proc_written: Option<u64>,
    /// Device bytes read by the process over the same span.
    pub proc_read: Option<u64>,
    /// The engine's own counters (since it was opened for this phase).
    pub own: OwnCounters,
    /// proc_written ÷ user_bytes.
    pub write_amp: Option<f64>,
    /// (proc_written − the engine's WAL bytes) ÷ user_bytes.
    pub write_amp_no_wal: Option<f64>,
    /// The engine's own written bytes ÷ user_bytes.
    pub own_write_amp: Option<f64>,
    /// The engine's own written bytes less WAL ÷ user_bytes.
    pub own_write_amp_no_wal: Option<f64>,
    /// Device bytes read per operation (/proc).
    pub read_bytes_per_op: Option<f64>,
    /// The engine's own user-read bytes per operation.
    pub own_read_bytes_per_op: Option<f64>,
    /// Bytes allocated under the engine's directory after the phase.
    pub disk_bytes: u64,
    /// Records × (key + value): what a user holds in the engine.
    pub live_user_bytes: u64,
    /// disk_bytes ÷ live_user_bytes.
    pub space_amp: f64,
    /// Reads whose value was checked against the expected one (all of them).
    pub checked: u64,
    pub cpu_user_secs: f64,
    pub cpu_system_secs: f64,
    /// Peak resident memory of the process so far.
    pub peak_rss_bytes: u64,
    pub direct_io: bool,
}

/// The figures of one engine: what the child prints as one JSON line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineResult {
    pub engine: String,
    pub spec: RunSpec,
    pub phases: Vec<PhaseResult>,
}

impl EngineResult {
    pub fn phase(&self, w: Workload) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.workload == w)
    }
}

/// xorshift64*: uniform record indices, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, salt: u64) -> Rng {
        let s = crate::gen::splitmix64(seed ^ salt);
        Rng(if s == 0 { 1 } else { s })
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Which records hold their overwritten value.
struct Overwritten(Vec<u64>);

impl Overwritten {
    fn new(records: u64) -> Overwritten {
        Overwritten(vec![0; records.div_ceil(64) as usize])
    }
    fn set(&mut self, i: u64) {
        self.0[(i / 64) as usize] |= 1 << (i % 64);
    }
    fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
}

/// Prints `engine workload: done/total, ops/s` on stderr about once a second.
struct Progress {
    on: bool,
    label: String,
    total: u64,
    last: Instant,
    last_done: u64,
}

impl Progress {
    fn tick(&mut self, done: u64) {
        if !self.on || !done.is_multiple_of(1024) {
            return;
        }
        let dt = self.last.elapsed();
        if dt < Duration::from_secs(1) {
            return;
        }
        let rate = (done - self.last_done) as f64 / dt.as_secs_f64();
        let pct = 100.0 * done as f64 / self.total.max(1) as f64;
        let _ = writeln!(
            std::io::stderr(),
            "  {}: {done}/{} ({pct:.0}%), {rate:.0} ops/s",
            self.label,
            self.total
        );
        self.last = Instant::now();
        self.last_done = done;
    }

    fn note(&self, what: &str) {
        if self.on {
            let _ = writeln!(std::io::stderr(), "  {}: {what}", self.label);
        }
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Runs every workload of `spec` against its engine in this process.
pub fn run(spec: &RunSpec) -> BenchResult<EngineResult> {
    engine::check_name(&spec.engine)?;
    if spec.records == 0 {
        return Err(BenchError::new("--records must be at least 1"));
    }
    let gen = RecordGen::new(spec.key_size, spec.value_size, spec.seed).map_err(BenchError)?;
    // Overwrites write the values of another seed, so that a read tells old from new.
    let regen = RecordGen::new(spec.key_size, spec.value_size, spec.seed ^ 0x0EE0_0EE0)
        .map_err(BenchError)?;
    let mut overwritten = Overwritten::new(spec.records);
    let mut loaded = false;
    let mut phases = Vec::new();
    for &w in &spec.workloads {
        if w != Workload::FillRandom && !loaded {
            return Err(BenchError::new(format!(
                "{} needs the records: run fillrandom first",
                w.name()
            )));
        }
        let p = run_phase(spec, w, &gen, &regen, &mut overwritten)?;
        if spec.engine.starts_with("woods:") {
            cross_check(&spec.engine, &p)?;
        }
        loaded |= w == Workload::FillRandom;
        phases.push(p);
    }
    Ok(EngineResult {
        engine: spec.engine.clone(),
        spec: spec.clone(),
        phases,
    })
}

fn run_phase(
    spec: &RunSpec,
    w: Workload,
    gen: &RecordGen,
    regen: &RecordGen,
    overwritten: &mut Overwritten,
) -> BenchResult<PhaseResult> {
    let io0 = ProcIo::now();
    let u0 = Usage::now();
    let mut db = engine::open(&spec.engine, &spec.dir, &spec.config)?;
    let direct_io = db.direct_io();
    let ops = match w {
        Workload::FillRandom => spec.records,
        Workload::Overwrite => spec.overwrites,
        Workload::ReadRandom => spec.reads,
    };
    let mut progress = Progress {
        on: spec.progress,
        label: format!("{} {}", spec.engine, w.name()),
        total: ops,
        last: Instant::now(),
        last_done: 0,
    };
    let mut rec = Recorder::new();
    let mut key = Vec::with_capacity(spec.key_size);
    let mut value = Vec::with_capacity(spec.value_size);
    let mut checked = 0;
    match w {
        Workload::FillRandom => {
            for i in 0..ops {
                gen.key_into(i, &mut key);
                gen.value_into(i, &mut value);
                timed_put(db.as_ref(), &mut rec, &key, &value)
                    .map_err(|e| BenchError::new(format!("record {i}: {e}")))?;
                progress.tick(i + 1);
            }
        }
        Workload::Overwrite => {
            let mut rng = Rng::new(spec.seed, 0x0BE5_0BE5);
            for n in 0..ops {
                let i = rng.below(spec.records);
                gen.key_into(i, &mut key);
                regen.value_into(i, &mut value);
                timed_put(db.as_ref(), &mut rec, &key, &value)
                    .map_err(|e| BenchError::new(format!("record {i}: {e}")))?;
                overwritten.set(i);
                progress.tick(n + 1);
            }
        }
        Workload::ReadRandom => {
            let mut rng = Rng::new(spec.seed, 0x0EAD_0EAD);
            for n in 0..ops {
                let i = rng.below(spec.records);
                gen.key_into(i, &mut key);
                if overwritten.get(i) {
                    regen.value_into(i, &mut value);
                } else {
                    gen.value_into(i, &mut value);
                }
                let t0 = Instant::now();
                let got = db.get(&key)?;
                rec.record(t0, Instant::now());
                match got {
                    Some(v) if v == value => checked += 1,
                    Some(v) => {
                        return Err(BenchError::new(format!(
                            "WRONG VALUE from {}: record {i} (lookup {n}) returned {} bytes that \
                             differ from the {} bytes written; a fast wrong engine is not a result",
                            spec.engine,
                            v.len(),
                            value.len()
                        )))
                    }
                    None => {
                        return Err(BenchError::new(format!(
                            "MISSING RECORD in {}: record {i} (lookup {n}) was written but get \
                             returned nothing; a fast wrong engine is not a result",
                            spec.engine
                        )))
                    }
                }
                progress.tick(n + 1);
            }
        }
    }
    if w.writes() {
        progress.note("draining background work");
        db.drain()?;
    }
    let own = db.counters();
    db.close()?;
    let secs = rec.start().elapsed().as_secs_f64();
    let io1 = ProcIo::now();
    let u1 = Usage::now();

    let (proc_written, proc_read) = match (io0, io1) {
        (Some(a), Some(b)) => (Some(a.net_written_until(&b)), Some(a.read_until(&b))),
        _ => (None, None),
    };
    let per_record = (spec.key_size + spec.value_size) as u64;
    let user_bytes = if w.writes() { ops * per_record } else { 0 };
    let live_user_bytes = spec.records * per_record;
    let disk = disk_bytes(&spec.dir)
        .map_err(|e| BenchError::new(format!("measuring {}: {e}", spec.dir.display())))?;
    let no_wal = |total: Option<u64>| Some(total?.saturating_sub(own.wal_written?));
    let write_amp = |b: Option<u64>| ratio(b?, user_bytes);
    let per_op = |b: Option<u64>| {
        let b = b?;
        (!w.writes() && ops > 0).then(|| b as f64 / ops as f64)
    };
    Ok(PhaseResult {
        workload: w,
        ops,
        secs,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        latency: rec.latency(),
        per_second: rec.per_second().to_vec(),
        user_bytes,
        proc_written,
        proc_read,
        own,
        write_amp: write_amp(proc_written),
        write_amp_no_wal: write_amp(no_wal(proc_written)),
        own_write_amp: write_amp(own.written),
        own_write_amp_no_wal: write_amp(no_wal(own.written)),
        read_bytes_per_op: per_op(proc_read),
        own_read_bytes_per_op: per_op(own.user_read),
        disk_bytes: disk,
        live_user_bytes,
        space_amp: ratio(disk, live_user_bytes).unwrap_or(0.0),
        checked,
        cpu_user_secs: u1.user.saturating_sub(u0.user).as_secs_f64(),
        cpu_system_secs: u1.system.saturating_sub(u0.system).as_secs_f64(),
        peak_rss_bytes: u1.max_rss_bytes,
        direct_io,
    })
}

/// Least bytes written in a phase for the woods counters to be compared with /proc: below it,
/// a few pages of file-system bookkeeping would dominate.
const CROSS_CHECK_MIN_BYTES: u64 = 1 << 20;

/// woods counts every byte it writes; /proc counts what reached the device layer. More than
/// 5% apart means one of them is wrong, and then no write amplification can be trusted.
fn cross_check(engine: &str, p: &PhaseResult) -> BenchResult<()> {
    let (Some(proc_w), Some(own)) = (p.proc_written, p.own.written) else {
        return Ok(());
    };
    if proc_w == 0 || proc_w.max(own) < CROSS_CHECK_MIN_BYTES {
        return Ok(()); // no device accounting (tmpfs), or too little to compare
    }
    let diff = proc_w.abs_diff(own) as f64 / proc_w as f64;
    if diff > 0.05 {
        return Err(BenchError::new(format!(
            "{engine} {}: its own counters say {own} bytes written, /proc/self/io says {proc_w} \
             ({:.1}% apart, more than 5%): write amplification cannot be trusted",
            p.workload.name(),
            diff * 100.0
        )));
    }
    Ok(())
}

fn timed_put(db: &dyn Engine, rec: &mut Recorder, key: &[u8], value: &[u8]) -> BenchResult<()> {
    let t0 = Instant::now();
    db.put(key, value)?;
    rec.record(t0, Instant::now());
    Ok(())
}
