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
