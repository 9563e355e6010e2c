//! `woods stress`: a randomized crash-and-restart stress test, in the spirit of RocksDB's
//! `db_stress` and `db_crashtest.py`. The parent process runs rounds: each round is a child
//! process (`woods stress-child`, in `child`) that recovers and verifies the database, then
//! writes and reads with several threads until the parent kills it with SIGKILL at a random
//! time. The expected state (`expected`) lives in a file the writers update around every write,
//! so it survives the kill and tells the next round what every key may hold.

pub mod child;
mod expected;
mod watch;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use woods::IndexKind;
use woods_bench::dist::Rng;
use woods_cli::gen::splitmix64;

use crate::{parse_size, CliError, CliResult};

pub const STRESS_HELP: &str = "\
A randomized crash test, in the spirit of RocksDB's db_stress and db_crashtest.py: for --duration, \
rounds of a child process that writes and reads the database with several threads are killed \
(SIGKILL) at random times and restarted, and after each kill the whole database is checked \
against an expected state that outlives the process.

Keys 0..K are split among --threads writer threads, so that each key has one writer. A writer \
makes single puts, merges and deletes, and batches of 2 to 8 of them over its keys, one write in \
sixteen with Durability::Sync; now and then it flushes or syncs. Every write to a key advances \
the key's version by one, and every value describes itself: key, version, a payload of varying \
length (up to 3,000 bytes) drawn from them, and a checksum, so any read is checked alone. Merges \
use the merge operator `woods-stress`: each operand names the version it expects the key at and \
the version it makes, and the fold checks the whole chain. Before each write a writer records \
the keys' pending states (and the batch it is about to write) in the file DIR/expected, after \
the write is acknowledged their committed states; after a kill every key must hold its committed \
or its pending state, and every batch must be there whole or not at all.

--readers threads read at the same time: point gets, and scans of up to 100 keys (forward, \
reverse, through snapshots, and now and then the whole key space), each checked against the \
states before and after the read; snapshots are held across later writes and read again, forward, \
reverse and key by key, which must give the same answer. On a point-only kind (boa) every \
range is read key by key with gets, and the scans below are left out.

Each round first opens the database (recovering it), checks every key with a get, every batch \
in flight, a scan each way against the gets, and Db::check, then adopts the state found as the \
expected one. A round is killed at a random time around --kill-interval after that (0.5 to 1.5 \
times it); one round in eight (after the first) is killed during its recovery and verification \
instead, at a time drawn between its start and the time the round before took to get through \
them. \
The number of background threads of each round is drawn from 0, 1 and 2, and with --pauses one \
round in two arms woods' pause points (the library's `pause` module; `WOODS_PAUSES=SEED[:ONE_IN[:MAX_US]]` \
arms them in every round): a thread now and then stops for up to 300 us between two steps of a \
protocol (a debt read and its store, a publish and its commit, a read's memtables and its \
index), which widens race windows a few instructions long. The last round is \
stopped cleanly at the end of --duration, closed, reopened and checked once more.

A progress line is printed every 10 seconds and a summary line at the end: kills, verifications, \
writes (and per second), reads and snapshots. On any mismatch, or an error, a hang (no progress \
for 120 s while the round used almost no processor time, or for 20 minutes however busy it was; \
a hang prints each thread's state and wait channel) or a child that dies of itself, it prints what was wrong with the seed, keeps the \
directory, and exits 1 (a mismatch) or 2 (anything else).

The directory (--dir, or a new one under the temporary directory, removed after a run that \
passes) holds db/ and expected, and before-round/: a copy of both made before each round opens \
the database, so that a failing round's recovery can be replayed from what it found (--dir \
DIR/before-round). A run on an existing --dir resumes it: its first round checks \
what the last run left. expected's layout (little-endian): a 64-byte header (`WSTRESS1`, keys \
u32, threads u32), then per key its committed and its pending state (u32 each: the version, with \
bit 31 set when the last write deleted the key, 0 when never written), then per writer thread \
a record of its batch in flight (136 bytes).";

/// Options of `woods stress`.
#[derive(clap::Args, Debug)]
pub struct StressArgs {
    /// Index kind: btree, btree-buffered[:POLICY], lsm, lsm-dynamic, nbtree, stbe, lsa, iam,
    /// fdtree, fdtree-d, pbt or boa (point-only: its ranges are read key by key, and it has no scans to check).
    #[arg(long, value_name = "KIND")]
    pub index: String,
    /// How long to run: seconds, or a number with ms, s, m or h.
    #[arg(long, value_name = "T", default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Average time a round runs (after its verification) before it is killed.
    #[arg(long, value_name = "T", default_value = "5s", value_parser = parse_duration)]
    pub kill_interval: Duration,
    /// Writer threads (each writes its own share of the keys).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub threads: u32,
    /// Reader threads.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub readers: u32,
    /// Number of keys K.
    #[arg(long, value_name = "K", default_value_t = 10_000)]
    pub keys: u32,
    /// Seed of every random choice [default: drawn from the clock, printed].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Arm woods' pause points in one round of two (see above).
    #[arg(long)]
    pub pauses: bool,
    /// Memtable size in bytes (at least 64K): small, so that index work is under way at every
    /// kill.
    #[arg(long, value_name = "B", default_value = "128K", value_parser = parse_size)]
    pub memtable_bytes: u64,
    /// Cache size in bytes (at least 64K): a small one makes runs read their filters a page at
    /// a time and pages come and go from the cache while the rounds run.
    #[arg(long, value_name = "B", default_value = "64M", value_parser = parse_size)]
    pub cache_bytes: u64,
    /// Directory of the run [default: a new one under the temporary directory, removed if the
    /// run passes].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// A duration: seconds, or a number with a unit (ms, s, m, h).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 30s, 5m, 1h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// Counts of a whole run.
#[derive(Default)]
struct Totals {
    rounds: u64,
    kills: u64,
    early_kills: u64,
    verifications: u64,
    writes: u64,
    reads: u64,
    snapshots: u64,
    /// How long the last round took from its start to the end of its verification.
    last_recovery: Option<Duration>,
}

impl Totals {
    fn line(&self, secs: f64) -> String {
        format!(
            "{} kills ({} during recovery), {} verifications, {} writes ({:.0}/s), {} reads, {} \
             snapshots",
            self.kills,
            self.early_kills,
            self.verifications,
            self.writes,
            self.writes as f64 / secs.max(1e-9),
            self.reads,
            self.snapshots
        )
    }
}

/// Why a run stopped early.
enum Stop {
    Mismatch(String),
    Error(String),
}

/// What a round's child said, line by line, on its standard output.
enum Said {
    Ready,
    Ops(u64, u64, u64),
    Done,
}

fn parse_line(line: &str) -> Option<Said> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok());
    match *w.first()? {
        "ready" => Some(Said::Ready),
        "done" => Some(Said::Done),
        "ops" => Some(Said::Ops(num(1)?, num(2)?, num(3)?)),
        _ => None,
    }
}

use watch::{Hang, Watch};

/// What a hang is reported as: `what` made no progress for so long, how busy it was, `state`,
/// and each of its threads.
fn hung(what: &str, h: &Hang, state: &str) -> String {
    let mut m = format!(
        "{what} made no progress for {} s (hung{}); {state}",
        h.secs,
        if h.busy {
            ", busy all along"
        } else {
            ", using almost no processor time"
        }
    );
    for l in &h.threads {
        m.push_str("\n  ");
        m.push_str(l);
    }
    m
}

/// Runs `woods stress`; returns the exit status.
pub fn stress(a: &StressArgs, no_direct_io: bool) -> CliResult<u8> {
    IndexKind::from_name(&a.index)?;
    if a.threads == 0 || a.keys < 8 * a.threads {
        return Err(CliError::Msg(format!(
            "--keys ({}) must be at least 8 per writer thread (--threads {})",
            a.keys, a.threads
        )));
    }
    if a.memtable_bytes < 64 << 10 {
        return Err(CliError::Msg(
            "--memtable-bytes must be at least 64K (a batch of long values must fit)".into(),
        ));
    }
    if a.cache_bytes < 64 << 10 {
        return Err(CliError::Msg("--cache-bytes must be at least 64K".into()));
    }
    let seed = a.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id())
    });
    let (dir, remove_after) = match &a.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("woods-stress-{}-{seed}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Msg(format!("creating {}: {e}", dir.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Msg(format!("cannot find this binary to run rounds: {e}")))?;
    println!(
        "woods stress: {}, {:.0} s, {} writers, {} readers, {} keys, memtable {} bytes, kill \
         interval {:.1} s, cache {} bytes, seed {seed}, directory {}",
        a.index,
        a.duration.as_secs_f64(),
        a.threads,
        a.readers,
        a.keys,
        a.memtable_bytes,
        a.kill_interval.as_secs_f64(),
        a.cache_bytes,
        dir.display()
    );
    let start = Instant::now();
    let mut t = Totals::default();
    let run = Run {
        a,
        exe: &exe,
        dir: &dir,
        no_direct_io,
        seed,
        deadline: start + a.duration,
    };
    let mut rng = Rng::new(seed, 1);
    let mut printed = start;
    let outcome = loop {
        t.rounds += 1;
        match run.round(t.rounds, &mut rng, &mut t) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(s) => break Err(s),
        }
        if printed.elapsed() >= Duration::from_secs(10) {
            printed = Instant::now();
            let secs = start.elapsed().as_secs_f64();
            println!("[{secs:7.1}s] {}", t.line(secs));
            let _ = std::io::stdout().flush();
        }
    };
    let secs = start.elapsed().as_secs_f64();
    match outcome {
        Ok(()) => {
            println!(
                "stress ok: {}, {secs:.1} s, {}, seed {seed}",
                a.index,
                t.line(secs)
            );
            if remove_after {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(0)
        }
        Err(s) => {
            let (code, why) = match s {
                Stop::Mismatch(m) => (1, m),
                Stop::Error(m) => (2, m),
            };
            eprintln!(
                "woods stress: FAILED: {} in round {} after {secs:.1} s and {} kills: {why}\n\
                 seed {seed}; the database and expected state are kept in {}, and as that \
                 round found them, before its recovery, in {} (resume that copy with --dir to \
                 replay the round's recovery; rerun: woods \
                 {}stress --index {} --seed {seed} --duration {}ms --threads {} --readers {} \
                 --keys {} --memtable-bytes {} --cache-bytes {} --kill-interval {}ms)",
                a.index,
                t.rounds,
                t.kills,
                dir.display(),
                dir.join(BEFORE_ROUND).display(),
                if no_direct_io { "--no-direct-io " } else { "" },
                a.index,
                a.duration.as_millis(),
                a.threads,
                a.readers,
                a.keys,
                a.memtable_bytes,
                a.cache_bytes,
                a.kill_interval.as_millis()
            );
            Ok(code)
        }
    }
}

struct Run<'a> {
    a: &'a StressArgs,
    exe: &'a Path,
    dir: &'a Path,
    no_direct_io: bool,
    seed: u64,
    deadline: Instant,
}

/// When the parent ends a round.
#[derive(Clone, Copy)]
enum Plan {
    /// Not decided yet: once the round has verified.
    AfterReady,
    /// Kill the child at this time.
    Kill(Instant),
    /// Close its standard input at the deadline: the last round.
    Finish,
}

impl Run<'_> {
    fn spawn(&self, round: u64) -> Result<Child, Stop> {
        let a = self.a;
        let mut cmd = Command::new(self.exe);
        if self.no_direct_io {
            cmd.arg("--no-direct-io");
        }
        cmd.arg("stress-child")
            .arg("--dir")
            .arg(self.dir)
            .args(["--index", &a.index])
            .args(["--threads", &a.threads.to_string()])
            .args(["--readers", &a.readers.to_string()])
            .args(["--keys", &a.keys.to_string()])
            .args(["--seed", &splitmix64(self.seed ^ round).to_string()])
            .args(["--memtable-bytes", &a.memtable_bytes.to_string()])
            .args(["--cache-bytes", &a.cache_bytes.to_string()])
            .args(a.pauses.then_some("--pauses"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        cmd.spawn()
            .map_err(|e| Stop::Error(format!("starting round {round}: {e}")))
    }

    /// Runs one round; true when it was the last one and passed.
    fn round(&self, round: u64, rng: &mut Rng, t: &mut Totals) -> Result<bool, Stop> {
        keep_before_round(self.dir)
            .map_err(|e| Stop::Error(format!("keeping the state before round {round}: {e}")))?;
        let mut child = self.spawn(round)?;
        let spawned = Instant::now();
        let (tx, rx) = mpsc::channel::<String>();
        let out = child.stdout.take();
        let lines = std::thread::spawn(move || {
            if let Some(out) = out {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        });
        let interval = self.a.kill_interval.as_secs_f64();
        // One round in eight is killed while it opens (recovers) and verifies the database, at
        // a time drawn over the last round's time to get there. The first round creates the
        // database: a kill then would test creation, not recovery.
        let mut plan = if let Some(last) = t.last_recovery.filter(|_| rng.below(8) == 0) {
            let at = spawned + last.mul_f64(rng.unit()).min(self.a.kill_interval);
            if at >= self.deadline {
                Plan::AfterReady
            } else {
                Plan::Kill(at)
            }
        } else {
            Plan::AfterReady
        };
        let early = matches!(plan, Plan::Kill(_));
        let mut ready = false;
        let mut ops = (0u64, 0u64, 0u64);
        let mut watch = Watch::new(child.id());
        let result = loop {
            let now = Instant::now();
            let wake = match plan {
                Plan::Kill(at) => at,
                Plan::Finish => self.deadline,
                Plan::AfterReady => now + Duration::from_secs(1),
            };
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(line) => match parse_line(&line) {
                    Some(Said::Ready) if !ready => {
                        ready = true;
                        watch.progress();
                        let progress = Instant::now();
                        t.verifications += 1;
                        t.last_recovery = Some(progress - spawned);
                        if matches!(plan, Plan::AfterReady) {
                            let at =
                                progress + Duration::from_secs_f64(interval * (0.5 + rng.unit()));
                            plan = if at >= self.deadline {
                                Plan::Finish
                            } else {
                                Plan::Kill(at)
                            };
                        }
                    }
                    Some(Said::Ops(w, r, s)) => {
                        if (w, r) != (ops.0, ops.1) {
                            watch.progress();
                        }
                        ops = (w, r, s);
                    }
                    _ => {}
                },
                Err(mpsc::RecvTimeoutError::Timeout) => match plan {
                    Plan::Kill(at) if Instant::now() >= at => {
                        let _ = child.kill();
                        let _ = child.wait();
                        t.kills += 1;
                        t.early_kills += u64::from(early && !ready);
                        break Ok(false);
                    }
                    Plan::Finish if Instant::now() >= self.deadline => {
                        // Closing its standard input asks the child to stop, close and verify.
                        drop(child.stdin.take());
                        break self
                            .expect_exit(&mut child, &rx, &mut ops, t)
                            .map(|()| true);
                    }
                    _ => {
                        if let Some(h) = watch.check() {
                            let _ = child.kill();
                            let _ = child.wait();
                            let what = format!("round {round}");
                            break Err(Stop::Error(hung(&what, &h, &format!("ready: {ready}"))));
                        }
                    }
                },
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The child closed its output: it has ended on its own.
                    break Err(self.ended(&mut child, round));
                }
            }
        };
        t.writes += ops.0;
        t.reads += ops.1;
        t.snapshots += ops.2;
        let _ = lines.join();
        result
    }

    /// Waits for the last round's child to stop cleanly and report its final verification.
    fn expect_exit(
        &self,
        child: &mut Child,
        rx: &mpsc::Receiver<String>,
        ops: &mut (u64, u64, u64),
        t: &mut Totals,
    ) -> Result<(), Stop> {
        // Stopping, closing, reopening and verifying print nothing until `done`: the watch
        // tells a starved round from a hung one, as it does while a round runs.
        let mut watch = Watch::new(child.id());
        let mut done = false;
        loop {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(line) => match parse_line(&line) {
                    Some(Said::Done) => {
                        done = true;
                        t.verifications += 1;
                    }
                    Some(Said::Ops(w, r, s)) => *ops = (w, r, s),
                    _ => {}
                },
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(h) = watch.check() {
                        let _ = child.kill();
                        let _ = child.wait();
                        let what = "the last round, asked to stop,";
                        return Err(Stop::Error(hung(what, &h, "closing and verifying")));
                    }
                }
            }
        }
        let status = child
            .wait()
            .map_err(|e| Stop::Error(format!("waiting for the last round: {e}")))?;
        if !status.success() || !done {
            return Err(classify(status.code(), "the last round"));
        }
        Ok(())
    }

    fn ended(&self, child: &mut Child, round: u64) -> Stop {
        match child.wait() {
            Ok(s) => classify(s.code(), &format!("round {round}")),
            Err(e) => Stop::Error(format!("waiting for round {round}: {e}")),
        }
    }
}

/// Where a copy of the run's state (`db/` and `expected`) is kept, as the next round is about
/// to find it.
pub const BEFORE_ROUND: &str = "before-round";

/// Copies `db/` and `expected` to `dir/before-round`, replacing the last copy: the state a
/// round opens, before its recovery changes it, so that a round that fails can be replayed from
/// what it found (`woods stress --dir DIR/before-round`) however the kill that made it fell.
/// The copy is made in a new directory and renamed over the old one, so a run killed while it
/// copies keeps a whole copy.
fn keep_before_round(dir: &Path) -> std::io::Result<()> {
    let db = dir.join("db");
    if !db.exists() {
        return Ok(()); // the first round creates the database
    }
    let fresh = dir.join(format!("{BEFORE_ROUND}.new"));
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir_all(fresh.join("db"))?;
    for e in std::fs::read_dir(&db)? {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), fresh.join("db").join(e.file_name()))?;
        }
    }
    let expected = dir.join("expected");
    if expected.exists() {
        std::fs::copy(&expected, fresh.join("expected"))?;
    }
    let kept = dir.join(BEFORE_ROUND);
    let _ = std::fs::remove_dir_all(&kept);
    std::fs::rename(&fresh, &kept)
}

fn classify(code: Option<i32>, what: &str) -> Stop {
    match code {
        Some(3) => Stop::Mismatch(format!("{what} found a mismatch (printed above)")),
        Some(c) => Stop::Error(format!(
            "{what} exited with status {c} before it was killed"
        )),
        None => Stop::Error(format!("{what} died of a signal the run did not send")),
    }
}
