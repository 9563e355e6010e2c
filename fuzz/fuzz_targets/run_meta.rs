//! Run metadata (as index metadata in the manifest holds it): decoding never panics, and what
//! decodes re-encodes to bytes that decode to the same metadata.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    if let Ok(meta) = fuzzing::run_meta(data) {
        let bytes = fuzzing::run_meta_encode(&meta);
        let again = fuzzing::run_meta(&bytes).expect("encoded run metadata decodes");
        assert_eq!(again, meta, "run metadata decode(encode(x)) differs");
    }
});
