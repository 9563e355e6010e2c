//! `woods load` and `woods verify`.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use woods::storage::Purpose;
use woods::{Durability, IndexKind, Options, WriteBatch};
use woods_cli::encoding;
use woods_cli::gen::RecordGen;

use crate::{
    open_existing, open_or_create, out_err, CliError, CliResult, Context, GenArgs, LoadArgs,
    ReadArgs,
};

pub const LOAD_HELP: &str = "\
Write generated records 0..N to DB in order, one put (one write batch) per record, creating the \
database if DB holds none.

Record i's key is a seeded 64-bit hash of i (splitmix64 of i xor a constant derived from --seed; \
a bijection, so keys are distinct and `verify` maps a key back to its record), written big-endian \
and repeated to --key-size bytes (at least 8). Its value is --value-size bytes of an xorshift64* \
stream seeded from the hash and the seed. `woods verify` with the same --records, --key-size, \
--value-size and --seed checks the result.

Acknowledgements: a line `acknowledged I` on stdout (flushed) means records 0..=I are written \
with the durability in use. With --sync every put is written with Durability::Sync (the log is \
synced to the device before the put returns: survives a power cut) and every record is \
acknowledged. Without it puts use Durability::Buffered (in the operating system when the put \
returns: survives a crash of this process), acknowledged at least every 1,000 records and every \
100 ms, and after the last record.

A progress bar is drawn on stderr when stderr is a terminal. At the end the database is drained \
(every memtable moved into the index and all background work, compactions included, done) and \
closed, and a summary line is printed: records, seconds (including the drain and close), inserts \
per second, write amplification (device bytes written / user key+value bytes) \
with and without the write-ahead log's bytes, the longest stall and the longest pacing delay.";

pub const VERIFY_HELP: &str = "\
Check that DB holds exactly records 0..k of the records `woods load` generates with the same \
--records N, --key-size, --value-size and --seed, for some k <= N: every key in the database must \
be the key of one of records 0..N-1, k is the number of such records present, every record below \
k must be present with exactly its value, and every record from k on absent. On a point-only \
index kind (boa), which cannot be scanned, records 0..N are looked up instead, so keys of no \
record are not seen.

Prints `intact prefix k of N` and exits 0, or prints the first problem (the record index and \
what is wrong, or an unexpected key) and exits 1. Database errors exit 2.

After `woods load --sync` is killed, k must be at least the last acknowledged index + 1.";

/// Prints `acknowledged I` lines.
struct Acks<'a> {
    out: io::StdoutLock<'a>,
    printed: Option<u64>,
    at: Instant,
}

/// A failed acknowledgement stops the load with an error, also when the reader has gone.
fn ack_err(e: io::Error) -> CliError {
    CliError::Msg(format!(
        "writing acknowledgements to standard output: {e}; load stopped"
    ))
}

impl Acks<'_> {
    fn ack(&mut self, i: u64) -> CliResult<()> {
        writeln!(self.out, "acknowledged {i}").map_err(ack_err)?;
        self.out.flush().map_err(ack_err)?;
        self.printed = Some(i);
        self.at = Instant::now();
        Ok(())
    }
}

pub fn load(a: &LoadArgs, base: Options) -> CliResult<u8> {
    let g = &a.gen;
    let gen = RecordGen::new(g.key_size, g.value_size, g.seed).map_err(CliError::Msg)?;
    let kind = IndexKind::from_name(&a.index)?;
    let mut opts = Options {
        index: Some(kind),
        ..base
    };
    if let Some(b) = a.cache_bytes {
        opts.cache_bytes = b;
    }
    if let Some(b) = a.memtable_bytes {
        opts.memtable_bytes = b;
    }
    let durability = if a.sync {
        Durability::Sync
    } else {
        Durability::Buffered
    };

    let start = Instant::now();
    let db = open_or_create(&g.db, opts)?;
    let pb = if io::stderr().is_terminal() {
        let pb = ProgressBar::with_draw_target(Some(g.records), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records ({rate}, eta {eta})",
        ) {
            pb.set_style(style.with_key(
                "rate",
                |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0} records/s", s.per_sec());
                },
            ));
        }
        pb
    } else {
        ProgressBar::hidden()
    };
    let mut acks = Acks {
        out: io::stdout().lock(),
        printed: None,
        at: Instant::now(),
    };
    let mut key = Vec::with_capacity(g.key_size);
    let mut value = Vec::with_capacity(g.value_size);
    let mut batch = WriteBatch::new();
    const ACK_EVERY: u64 = 1000;
    const ACK_INTERVAL: Duration = Duration::from_millis(100);
    for i in 0..g.records {
        gen.key_into(i, &mut key);
        gen.value_into(i, &mut value);
        batch.clear();
        batch.put(&key, &value);
        db.write_with(&batch, durability)
            .ctx(|| format!("writing record {i}"))?;
        let due = a.sync
            || i + 1 == g.records
            || acks
                .printed
                .map_or(i + 1 >= ACK_EVERY, |p| i - p >= ACK_EVERY)
            || acks.at.elapsed() >= ACK_INTERVAL;
        if due {
            acks.ack(i)?;
            pb.set_position(i + 1);
        }
    }
    pb.finish_and_clear();
    drop(acks);

    db.drain()
        .ctx(|| "draining the database's background work".into())?;
    let stats = db.stats();
    db.close().ctx(|| "closing the database".into())?;
    let secs = start.elapsed().as_secs_f64();

    let user = stats.user_bytes;
    let total = stats.io.total_written();
    let wal = stats.io.written(Purpose::Wal);
    let amp = |bytes: u64| {
        if user == 0 {
            0.0
        } else {
            bytes as f64 / user as f64
        }
    };
    let rate = if secs > 0.0 {
        g.records as f64 / secs
    } else {
        0.0
    };
    writeln!(
        io::stdout(),
        "loaded {} records in {:.3} s, {:.0} inserts/s, write amplification {:.3} ({:.3} without WAL), \
         max stall {:.3} ms, max pacing delay {:.3} ms",
        g.records,
        secs,
        rate,
        amp(total),
        amp(total.saturating_sub(wal)),
        ms(stats.stall_max),
        ms(stats.pacing_max),
    )
    .map_err(out_err)?;
    Ok(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One thing wrong with the database's contents.
struct Problem {
    /// The record index, or None for a key of no record.
    index: Option<u64>,
    what: String,
}

/// A key and its value, as read back.
type Record = (Vec<u8>, Vec<u8>);

pub fn verify(g: &GenArgs, base: Options) -> CliResult<u8> {
    let gen = RecordGen::new(g.key_size, g.value_size, g.seed).map_err(CliError::Msg)?;
    let n = g.records;
    let slots =
        usize::try_from(n).map_err(|_| CliError::Msg(format!("--records {n} is too large")))?;
    let db = open_existing(&g.db, base)?;
    let mut present = vec![false; slots];
    let mut first_unexpected: Option<Problem> = None;
    let mut unexpected = 0u64;
    let mut bad_value: Option<Problem> = None;
    let mut expected = Vec::with_capacity(g.value_size);
    // A point-only kind cannot be scanned: records 0..N are looked up instead, so a key of no
    // record goes unseen there.
    let items: Box<dyn Iterator<Item = woods::Result<Record>>> = if db.index_kind().ordered() {
        Box::new(db.iter().ctx(|| "scanning the database".into())?)
    } else {
        let db = &db;
        let gen = &gen;
        Box::new((0..n).filter_map(move |i| {
            let k = gen.key(i);
            db.get(&k).map(|v| v.map(|v| (k, v))).transpose()
        }))
    };
    for item in items {
        let (k, v) = item.ctx(|| "reading the database".into())?;
        let Some(i) = gen.index_of(&k, n) else {
            unexpected += 1;
            if first_unexpected.is_none() {
                first_unexpected = Some(Problem {
                    index: None,
                    what: format!(
                        "unexpected key {} ({} bytes): not the key of any of records 0..{n} \
                         (key size {}, seed {})",
                        encoding::display(&k),
                        k.len(),
                        g.key_size,
                        g.seed
                    ),
                });
            }
            continue;
        };
        present[i as usize] = true;
        gen.value_into(i, &mut expected);
        if v != expected && bad_value.as_ref().is_none_or(|p| p.index > Some(i)) {
            let what = match v.iter().zip(&expected).position(|(a, b)| a != b) {
                Some(p) => format!(
                    "wrong value: differs at byte {p} ({} bytes, expected {})",
                    v.len(),
                    expected.len()
                ),
                None => format!(
                    "wrong value: {} bytes, expected {}",
                    v.len(),
                    expected.len()
                ),
            };
            bad_value = Some(Problem {
                index: Some(i),
                what,
            });
        }
    }
    db.close().ctx(|| "closing the database".into())?;

    let k = present.iter().filter(|&&p| p).count() as u64;
    let mut problems: Vec<Problem> = Vec::new();
    problems.extend(bad_value);
    if let Some(m) = present[..k as usize].iter().position(|&p| !p) {
        problems.push(Problem {
            index: Some(m as u64),
            what: format!("missing, although {k} records are present (a gap below the prefix they should form)"),
        });
    }
    if let Some(p) = present[k as usize..].iter().position(|&p| p) {
        problems.push(Problem {
            index: Some(k + p as u64),
            what: format!(
                "present beyond the first {k} records (the present records do not form a prefix)"
            ),
        });
    }
    problems.sort_by_key(|p| p.index);
    let first = first_unexpected.or_else(|| problems.into_iter().next());
    let mut out = io::stdout().lock();
    match first {
        None => {
            writeln!(out, "intact prefix {k} of {n}").map_err(out_err)?;
            Ok(0)
        }
        Some(p) => {
            match p.index {
                Some(i) => writeln!(out, "bad record {i}: {}", p.what),
                None => writeln!(
                    out,
                    "bad database: {} ({unexpected} unexpected keys in all)",
                    p.what
                ),
            }
            .map_err(out_err)?;
            writeln!(out, "{k} of {n} records present").map_err(out_err)?;
            Ok(1)
        }
    }
}

pub const READ_HELP: &str = "\
Look up --reads records chosen uniformly at random (seeded by --seed) among records 0..N that \
`woods load` wrote with the same --records, --key-size, --value-size and --seed, checking every \
value. Prints lookups per second, device bytes read per lookup (user_read purpose) and the \
cache hit rate. A missing or wrong record is an error (exit 1): a fast wrong answer is not a \
result.";

pub fn read(a: &ReadArgs, base: Options) -> CliResult<u8> {
    let g = &a.gen;
    let gen = RecordGen::new(g.key_size, g.value_size, g.seed).map_err(CliError::Msg)?;
    if g.records == 0 {
        return Err(CliError::Msg("--records must be at least 1".into()));
    }
    let mut opts = base;
    if let Some(b) = a.cache_bytes {
        opts.cache_bytes = b;
    }
    let db = open_existing(&g.db, opts)?;
    let before = db.stats();
    let mut state = g.seed ^ 0x5DEE_CE66_D1CE_4E5B;
    let mut key = Vec::with_capacity(g.key_size);
    let mut expected = Vec::with_capacity(g.value_size);
    let start = Instant::now();
    for n in 0..a.reads {
        // xorshift64*: uniform record indices, reproducible from the seed.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let i = state.wrapping_mul(0x2545_F491_4F6C_DD1D) % g.records;
        gen.key_into(i, &mut key);
        gen.value_into(i, &mut expected);
        match db.get(&key).ctx(|| format!("looking up record {i}"))? {
            Some(v) if v == expected => {}
            Some(_) => {
                println!("bad record {i}: wrong value (lookup {n})");
                return Ok(1);
            }
            None => {
                println!("bad record {i}: missing (lookup {n})");
                return Ok(1);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let after = db.stats();
    let read = after.io.read(Purpose::UserRead) - before.io.read(Purpose::UserRead);
    let hits = after.cache.hits - before.cache.hits;
    let misses = after.cache.misses - before.cache.misses;
    db.close().ctx(|| "closing the database".into())?;
    println!(
        "{} lookups in {:.2} s, {:.0} lookups/s, {:.0} bytes read per lookup, cache hit rate {:.1}%, direct I/O {}",
        a.reads,
        secs,
        a.reads as f64 / secs.max(1e-9),
        read as f64 / a.reads.max(1) as f64,
        100.0 * hits as f64 / (hits + misses).max(1) as f64,
        if after.direct_io { "on" } else { "off" }
    );
    Ok(0)
}
