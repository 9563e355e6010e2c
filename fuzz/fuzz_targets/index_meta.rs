//! Index metadata as the manifest holds it (LSM levels, nb-tree and STBE trees): decoding never
//! panics or allocates without bound. The first byte picks the index kind.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    if let Some((&kind, meta)) = data.split_first() {
        let _ = fuzzing::index_meta(kind, meta);
    }
});
