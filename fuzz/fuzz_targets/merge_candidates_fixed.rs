#![no_main]
//! `kmerdb::fuzzing::merge_candidates_fixed`: see its documentation for the input and what is checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kmerdb::fuzzing::merge_candidates_fixed(data);
});
