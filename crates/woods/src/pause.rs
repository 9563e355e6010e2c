//! Pause points: named places between two steps of a protocol where another thread's steps may
//! come in (a debt read and the store that acts on it, a publish and the commit after it, the
//! memtables a read took and the index it reads next). A test or `woods stress` arms them so that
//! now and then a thread stops there for a moment, which widens windows a few instructions long
//! into ones the other threads fall into: FoundationDB's `BUGGIFY` and RocksDB's sync points
//! serve the same end. A race in `nbtree`'s debt that lost a memtable about once in 20 runs of a
//! test failed every run with a 300 µs pause at its window (docs/engine.md).
//!
//! `WOODS_PAUSES=SEED[:ONE_IN[:MAX_US]]` arms them for the process: each visit pauses with
//! probability 1/`ONE_IN` (default 8), for a time drawn up to `MAX_US` microseconds (default
//! 300; a draw below 20 µs yields the processor instead of sleeping), the draws coming from a
//! generator of each thread's own, seeded from `SEED`. [`arm`] does the same from a test, before
//! any visit. The setting is read once, at the first visit of any point; unarmed, a visit costs
//! one atomic load. A point may pause while its thread holds a lock (a job's): the other threads
//! then wait for it as they would for a thread the scheduler put aside.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every pause point, by the layer it belongs to.
pub const POINTS: &[&str] = &[
    // The Db: rotation, release of memtables and log files, reads.
    "db.room.after_debt",
    "db.rotate.before_absorb",
    "db.absorb_queued.before_absorb",
    "db.release.after_published",
    "db.logs.after_durable",
    "db.get.after_memtables",
    "db.iter.after_memtables",
    // The shared index machinery: a job's lock taken, a version published, a commit.
    "index.job.locked",
    "index.publish.after",
    "index.commit.after_sync",
    "index.commit.after_manifest",
    // A kind's debt computed and not yet stored.
    "nbtree.work.before_debt",
    "fdtree.work.before_debt",
];

/// How the points pause, once armed.
#[derive(Clone, Copy, Debug)]
struct Armed {
    seed: u64,
    one_in: u64,
    max_us: u64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
/// Threads that have drawn so far (each thread's generator is seeded from its number).
static THREADS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// Arms the pause points for this process: a visit pauses with probability 1/`one_in`, for up
/// to `max_us` microseconds. Returns false, arming nothing, where the points were already
/// visited or armed (by `WOODS_PAUSES` or an earlier call): call it before opening a database.
pub fn arm(seed: u64, one_in: u64, max_us: u64) -> bool {
    let want = Armed {
        seed,
        one_in: one_in.max(1),
        max_us,
    };
    ARMED.set(Some(want)).is_ok()
}

/// Whether the pause points are armed (by [`arm`] or `WOODS_PAUSES`).
pub fn armed() -> bool {
    settings().is_some()
}

fn settings() -> Option<&'static Armed> {
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("WOODS_PAUSES").ok()?;
            parse(&spec)
        })
        .as_ref()
}

/// `SEED[:ONE_IN[:MAX_US]]`; `None` for anything else.
fn parse(spec: &str) -> Option<Armed> {
    let mut parts = spec.trim().split(':');
    let seed = parts.next()?.parse().ok()?;
    let one_in = parts.next().map_or(Some(8), |s| s.parse().ok())?;
    let max_us = parts.next().map_or(Some(300), |s| s.parse().ok())?;
    if parts.next().is_some() {
        return None;
    }
    Some(Armed {
        seed,
        one_in: one_in.max(1),
        max_us,
    })
}

/// SplitMix64's step: the next state and its output.
fn next(state: u64) -> (u64, u64) {
    let s = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (s, z ^ (z >> 31))
}

/// A draw from this thread's generator.
fn draw(a: &Armed) -> u64 {
    RNG.with(|c| {
        let mut s = c.get();
        if s == 0 {
            let n = THREADS.fetch_add(1, Ordering::Relaxed) + 1;
            s = next(a.seed ^ n.wrapping_mul(0xA24B_AED4_963E_E407)).1 | 1;
        }
        let (s, out) = next(s);
        c.set(s);
        out
    })
}

/// A pause point: where armed, pauses here now and then (see the module's comment).
#[inline]
pub fn point(name: &'static str) {
    debug_assert!(
        POINTS.contains(&name),
        "pause point {name} is not in POINTS"
    );
    if let Some(a) = settings() {
        pause(a);
    }
}

#[cold]
fn pause(a: &Armed) {
    let r = draw(a);
    if !r.is_multiple_of(a.one_in) {
        return;
    }
    let us = (r >> 32) % (a.max_us + 1);
    if us < 20 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_refuse_garbage() {
        let a = parse("7").unwrap();
        assert_eq!((a.seed, a.one_in, a.max_us), (7, 8, 300));
        let a = parse("7:2:50").unwrap();
        assert_eq!((a.seed, a.one_in, a.max_us), (7, 2, 50));
        assert_eq!(parse("7:0").unwrap().one_in, 1);
        for bad in ["", "x", "7:x", "7:2:x", "7:2:50:1"] {
            assert!(parse(bad).is_none(), "{bad:?} parsed");
        }
    }

    #[test]
    fn draws_pause_about_one_visit_in_one_in() {
        let a = Armed {
            seed: 42,
            one_in: 4,
            max_us: 0,
        };
        let n = 40_000;
        let hits = (0..n).filter(|_| draw(&a).is_multiple_of(a.one_in)).count();
        // 1/4 of 40,000 is 10,000; the binomial's deviation is about 87.
        assert!(
            (9_500..10_500).contains(&hits),
            "{hits} of {n} visits paused"
        );
    }
}
