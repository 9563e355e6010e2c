//! Run data and index pages and the run header page: parsing a page and decoding every item of
//! it never panics or reads out of the page. The first byte picks the page kind.
#![no_main]
use libfuzzer_sys::fuzz_target;
use woods::fuzzing;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, page)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => {
            let _ = fuzzing::run_page(page, 0);
        }
        1 => {
            let _ = fuzzing::run_page(page, 1 + pick / 3 % 4);
        }
        _ => {
            let _ = fuzzing::run_header(page);
        }
    }
});
