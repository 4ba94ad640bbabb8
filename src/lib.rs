//! kmerdb: a metagenomic k-mer index and read classifier.
//!
//! The library holds every stage; the `kmerdb` command (`src/bin/kmerdb/`) only parses the command
//! line into configs, calls the library and reports. What the stages share is the crate
//! `kmerdb-core` (re-exported here: [`input`], [`taxonomy`], [`sketch`], [`index`], [`hits`], ...);
//! the CUDA backend is `kmerdb-gpu` ([`gpu`]), which imports only the core.
//! Modules:
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

#![deny(unsafe_op_in_unsafe_fn)]
// `pub` only on what the binaries, tests and fuzz targets can reach (the rest `pub(crate)`).
#![warn(unreachable_pub)]

// The core's modules (crates/kmerdb-core) and the CUDA backend (crates/kmerdb-gpu), under the
// names the stages use for them (`crate::index`, `kmerdb::sketch`, ...).
#[doc(hidden)]
pub use kmerdb_core::pipeline;
pub use kmerdb_core::{
    compute, cpu_time, errors, hits, index, input, mapped, protein, replacing, resources, sketch, slab_hash, taxonomy,
    temp_files, terminal,
};
#[cfg(feature = "gpu")]
pub use kmerdb_gpu::gpu;

pub mod bracken;
pub mod classify;
pub mod download;
#[doc(hidden)]
pub mod fuzzing;
pub mod indexing;
pub mod info;
pub mod inspect;
pub mod merge;
pub mod output;
pub mod paths;
