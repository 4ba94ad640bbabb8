#![no_main]
//! `kmerdb::fuzzing::fastx_compressed`: see its documentation for the input and what is checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kmerdb::fuzzing::fastx_compressed(data);
});
