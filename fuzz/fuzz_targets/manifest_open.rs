//! Opening a database's manifest from a directory whose CURRENT and manifest log hold arbitrary
//! bytes: never panics; a typed error or a state.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the length of CURRENT's contents; the rest is the log.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n as usize % 24).min(rest.len());
    let (current, log) = rest.split_at(n);
    let current = if n == 0 {
        &b"MANIFEST-000001\n"[..]
    } else {
        current
    };
    let fs = fuzzing::fault_fs_with(&[("CURRENT", current), ("MANIFEST-000001", log)])
        .expect("set up the files");
    let _ = fuzzing::manifest_open(&fs);
});
