//! Whole WAL files as replay reads them from a directory: arbitrary contents of one or two WAL
//! files never make replay panic; it returns records or a typed error.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input into two consecutive WAL files (0: one file).
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let cut = if split == 0 {
        rest.len()
    } else {
        (split as usize * rest.len() / 255).min(rest.len())
    };
    let (a, b) = rest.split_at(cut);
    let n1 = fuzzing::wal_file_name(1);
    let n2 = fuzzing::wal_file_name(2);
    let mut files: Vec<(&str, &[u8])> = vec![(&n1, a)];
    if split != 0 {
        files.push((&n2, b));
    }
    let fs = fuzzing::fault_fs_with(&files).expect("set up the files");
    let _ = fuzzing::wal_replay(&fs);
});
