//! Scheduling of woods' own threads against the application's.
//!
//! Writers that fall behind the background work's schedule wait for its next step (the pacing
//! of docs/engine.md, at most a millisecond at a time). On a machine with fewer cores than
//! runnable threads a writer whose wait is over still queues for a core behind the background
//! threads it was waiting for: at 20 million records on this 2-core machine the longest pacing
//! wait was 4.5 ms (`stbe`) and 6.6 ms (`nbtree`) against the 1 ms each wait is bounded by.
//! Background threads therefore run a few nice levels below the threads that call into the
//! database, as RocksDB lets its users lower its thread pools' CPU priority: a writer is
//! scheduled when its wait ends, and background work takes whatever processor time is left
//! (which pacing still holds writers to).

/// Nice levels the background threads run below the thread that starts them.
pub const BACKGROUND_NICE: i32 = 5;

/// Lowers the calling thread's priority by [`BACKGROUND_NICE`] (to at most nice 19). Returns
/// whether it took effect; where the system has no per-thread priority nothing changes.
pub fn lower_this_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid, getpriority and setpriority only read and set the calling thread's
        // scheduling priority; errno is this thread's own.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            *libc::__errno_location() = 0;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            if now == -1 && *libc::__errno_location() != 0 {
                return false;
            }
            libc::setpriority(libc::PRIO_PROCESS, tid, (now + BACKGROUND_NICE).min(19)) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn a_background_thread_runs_below_its_starter() {
        // SAFETY: reading the calling thread's priority.
        let nice = || unsafe {
            libc::getpriority(
                libc::PRIO_PROCESS,
                libc::syscall(libc::SYS_gettid) as libc::id_t,
            )
        };
        let starter = nice();
        let (before, after) = std::thread::spawn(move || {
            let before = nice();
            assert!(super::lower_this_thread());
            (before, nice())
        })
        .join()
        .unwrap();
        assert_eq!(
            before, starter,
            "a new thread starts at its starter's priority"
        );
        assert_eq!(after, (starter + super::BACKGROUND_NICE).min(19));
        assert_eq!(nice(), starter, "only the calling thread changed");
    }
}
