//! Bloom and quotient filters as read from a run's filter pages: decoding never panics, lookups
//! on a decoded filter never panic, and its bytes read back to the same filter.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = fuzzing::filter(data) {
        for key in [&b""[..], b"a", b"key", data] {
            let _ = f.may_contain(key);
        }
        let again = fuzzing::filter(f.as_bytes()).expect("a filter's bytes decode");
        assert_eq!(again.as_bytes(), f.as_bytes());
        assert_eq!(again.may_contain(data), f.may_contain(data));
    }
});
