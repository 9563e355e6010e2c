//! Bloom and quotient filters as read from a run's filter pages: decoding never panics, lookups
//! on a decoded filter never panic, and its bytes read back to the same filter; a quotient
//! filter read a page at a time (header checked, blocks unchecked) never panics either.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    let hashes = [0, u64::MAX, woods::filter::hash64(data), 0x9E37_79B9_7F4A_7C15];
    let _ = fuzzing::paged_quotient(data, &hashes);
    if let Ok(f) = fuzzing::filter(data) {
        for key in [&b""[..], b"a", b"key", data] {
            let _ = f.may_contain(key);
        }
        let again = fuzzing::filter(f.as_bytes()).expect("a filter's bytes decode");
        assert_eq!(again.as_bytes(), f.as_bytes());
        assert_eq!(again.may_contain(data), f.may_contain(data));
    }
});
