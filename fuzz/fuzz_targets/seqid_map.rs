#![no_main]
//! `kmerdb::fuzzing::seqid_map`: see its documentation for the input and what is checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kmerdb::fuzzing::seqid_map(data);
});
