//! Manifest record payloads and whole manifest logs: decoding never panics, whether damage is
//! refused (opening) or salvaged (repair).
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    let _ = fuzzing::manifest_record(data);
    let _ = fuzzing::manifest_log(data, false);
    let _ = fuzzing::manifest_log(data, true);
    for p in fuzzing::wal_records(data.get(16..).unwrap_or(&[]), 1 << 20) {
        let _ = fuzzing::manifest_record(&p);
    }
});
