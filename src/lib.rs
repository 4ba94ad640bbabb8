//! kmerdb: a metagenomic k-mer index and read classifier.
//!
//! The library holds every stage; `main.rs` only parses the command line and reports errors.
//! Stages, one module each:
//! - [`input`]: finding and reading FASTA/FASTQ files;
//! - [`taxonomy`]: NCBI dumps, sequence → taxid maps, the pruned tree and its LCA;
//! - [`sketch`]: k-mers, windows and minhash sketches (the specification GPU kernels follow);
//! - [`index`]: the index file: format, key index, location lists, writer and reader;
//! - [`build`]: the build, genomes → index (CPU, or one or more GPUs through [`gpu`]);
//! - [`classify`]: reads → taxa; [`output`]: the files classification writes;
//! - [`info`]: describing an index;
//! - [`pipeline`]: stages on threads of their own joined by bounded queues (classify's batches);
//! - [`paths`]: the files a command reads and writes, checked against each other before any work;
//! - [`temp_files`]: temporary files, named per process and removed on error, signal or next run.
//!
//! `fuzzing` (hidden) holds one fuzz target per parsing boundary, for `fuzz/` and the smoke test.

// Every unsafe operation sits in an `unsafe` block with its own `// SAFETY:` comment, also inside
// `unsafe fn`s (whose `# Safety` docs state the caller's side).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod build;
pub mod classify;
pub mod compute;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod index;
pub mod info;
pub mod input;
pub mod merge;
pub mod output;
pub mod paths;
pub mod pipeline;
pub mod resources;
pub mod sketch;
pub mod synth;
pub mod taxonomy;
pub mod temp_files;
