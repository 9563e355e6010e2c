//! B-tree node pages (leaf and internal) as read from the data file: decoding never panics, a
//! leaf that decodes re-encodes to a body that decodes to the same encoding, and the in-place
//! reads of a lookup never panic and refuse exactly what the decoder refuses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    let (in_place, decoded) = fuzzing::btree_node_in_place(data);
    assert_eq!(in_place.ok(), decoded.ok(), "in-place reads and decoder disagree");
    let _ = fuzzing::btree_internal(data);
    if let Ok(body) = fuzzing::btree_leaf(data) {
        let again = fuzzing::btree_leaf(&body).expect("a re-encoded leaf decodes");
        assert_eq!(again, body, "leaf decode(encode(x)) differs");
    }
});
