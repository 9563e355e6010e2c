//! WAL (and manifest) record framing and the write-batch payload in it: reading records out of
//! arbitrary bytes never panics or reads past them, every payload decodes as a batch or fails
//! cleanly, and framing the payloads found gives back the bytes they were read from.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    let records = fuzzing::wal_records(data, 1 << 16);
    let mut framed = Vec::new();
    for p in &records {
        let _ = fuzzing::batch(p);
        framed.extend_from_slice(&fuzzing::frame_record(p));
    }
    assert_eq!(
        &data[..framed.len()],
        &framed[..],
        "frame(next_record(x)) differs"
    );
    assert_eq!(fuzzing::wal_records(&framed, 1 << 16), records);
});
