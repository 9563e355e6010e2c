//! The C allocator's settings under which a process's resident memory stays near what woods
//! counts against `cache_bytes` and `memtable_bytes`.
//!
//! glibc's malloc serves a large allocation (128 KiB and up, at first) by mapping memory of its
//! own, and when such a mapping is freed it raises that threshold to the freed size, up to
//! 32 MiB. After the first large buffer woods frees (a read-ahead window, a run builder's
//! extent, a filter being built), buffers of up to that size come from the heap instead, where
//! they interleave with long-lived small allocations and leave holes the allocator cannot give
//! back: measured here, a `stbe` database with a 128 MiB budget (5 million records, YCSB load
//! then A) peaked at 173 MiB of memory against 154 MiB with the threshold fixed, and at 50
//! million records with a 512 MiB budget it grew past its memory cgroup's limit (the budget
//! plus 144 MiB) during YCSB A, where with the threshold fixed it stays within it
//! (docs/engine.md, Memory).
//!
//! A library does not set its host's allocator policy behind its back: the `woods` binary
//! (and every engine child of `woods bench`) calls [`fix_malloc_mmap_threshold`] first thing,
//! and an application embedding woods with glibc's malloc should do the same, or set
//! `MALLOC_MMAP_THRESHOLD_=131072` in its environment, or use another allocator.

/// Fixes glibc's mmap threshold at 128 KiB (its initial value), which also stops its dynamic
/// adjustment. Returns whether the setting took effect (false on other C libraries, where it
/// is not needed in this form).
pub fn fix_malloc_mmap_threshold() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes the allocator's parameters; any value is accepted or
        // refused by its return value.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn the_threshold_is_accepted() {
        assert!(super::fix_malloc_mmap_threshold());
    }
}
