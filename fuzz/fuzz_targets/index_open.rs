#![no_main]
//! `kmerdb::fuzzing::index_open`: see its documentation for the input and what is checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kmerdb::fuzzing::index_open(data);
});
