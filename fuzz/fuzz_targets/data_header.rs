//! The data file's header page: checking it and reading the configuration it holds never
//! panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    let _ = fuzzing::data_header(data);
});
