#![no_main]
//! `kmerdb::fuzzing::taxonomy_names`: see its documentation for the input and what is checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kmerdb::fuzzing::taxonomy_names(data);
});
