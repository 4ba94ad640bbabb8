//! kmerdb: a metagenomic k-mer index and read classifier.
//!
//! The library holds every stage; the `kmerdb` command (`src/bin/kmerdb/`) only parses the command
//! line into configs, calls the library and reports.
//! Stages, one module each:
//! - [`input`]: finding and reading FASTA/FASTQ files;
//! - [`taxonomy`]: NCBI dumps, sequence → taxid maps, the pruned tree and its LCA;
//! - [`sketch`]: k-mers, windows and minhash sketches (the specification GPU kernels follow);
//! - [`index`]: the index file: format, key index, location lists, writer and reader;
//! - [`indexing`]: `kmerdb build`, genomes → index (CPU, or one or more GPUs through [`gpu`]);
//! - [`hits`]: what a read's lookups found (candidates, hit runs), below both classifiers;
//! - [`classify`]: reads → taxa; [`output`]: the files classification writes;
//! - [`info`]: describing an index; [`bracken`]: Bracken's read distribution file;
//! - [`slab_hash`]: the dynamic slab-list hash table of the GPU (`cuda/slab_hash.cuh`, compiled as
//!   a unit of its own, not into the commands' kernels): its layout and its CPU twin;
//! - `pipeline`: stages on threads of their own joined by bounded queues (classify, merge, the
//!   builds' shards, update);
//! - [`paths`]: the files a command reads and writes, checked against each other before any work;
//! - [`temp_files`]: temporary files, named per process and removed on error, signal or next run.
//!
//! `fuzzing` (hidden) holds one fuzz target per parsing boundary, for `fuzz/` and the smoke test.

// Every unsafe operation sits in an `unsafe` block with its own `// SAFETY:` comment, also inside
// `unsafe fn`s (whose `# Safety` docs state the caller's side).
#![deny(unsafe_op_in_unsafe_fn)]
// `pub` only on what the binaries, tests and fuzz targets can reach (the rest `pub(crate)`).
#![warn(unreachable_pub)]

pub mod bracken;
pub(crate) mod checked_str;
pub mod classify;
pub mod compute;
pub mod download;
pub mod errors;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod hits;
pub mod index;
pub mod indexing;
pub mod info;
pub mod input;
pub mod inspect;
pub mod mapped;
pub mod merge;
pub mod output;
pub mod paths;
pub(crate) mod pipeline;
pub mod protein;
pub mod replacing;
pub mod resources;
pub mod sketch;
pub mod slab_hash;
pub mod taxonomy;
pub mod temp_files;
pub mod terminal;
#[cfg(test)]
mod test_support;
