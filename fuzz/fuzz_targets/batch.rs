//! Write-batch payloads: decoding arbitrary bytes never panics or allocates without bound, and
//! an encoded batch of arbitrary operations decodes to those operations.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    raw: Vec<u8>,
    first_seq: u64,
    ops: Vec<(u8, Vec<u8>, Vec<u8>)>,
}

fuzz_target!(|input: Input| {
    let _ = fuzzing::batch(&input.raw);
    let (payload, want) = fuzzing::batch_encode(input.first_seq, &input.ops);
    let (seq, ops) = fuzzing::batch(&payload).expect("an encoded batch decodes");
    assert_eq!(seq, input.first_seq);
    assert_eq!(ops, want, "batch decode(encode(x)) differs");
});
