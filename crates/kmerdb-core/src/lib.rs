//! kmerdb's core: what every stage reads and writes, below the stages (the `kmerdb` crate) and the
//! CUDA backend (`kmerdb-gpu`), which import it and never the other way round.
//! - [`input`]: finding and reading FASTA/FASTQ files;
//! - [`taxonomy`]: NCBI dumps, sequence → taxid maps, the pruned tree and its LCA;
//! - [`sketch`]: k-mers, windows and minhash sketches (the specification GPU kernels follow);
//! - [`index`]: the index file: format, key index, location lists, writer and reader;
//! - [`protein`]: the amino-acid stage's table, translation and chance;
//! - [`hits`]: what a read's lookups found (candidates, hit runs), below both classifiers;
//! - [`slab_hash`]: the dynamic slab-list hash table of the GPU (`cuda/slab_hash.cuh`, compiled as
//!   a unit of its own, not into the commands' kernels): its layout and its CPU twin;
//! - `pipeline`: stages on threads of their own joined by bounded queues (classify, merge, the
//!   builds' shards, update);
//! - [`compute`], [`resources`]: the devices a command asks for, the machine's memory;
//! - [`cpu_time`]: the host's CPU time by kind of work, for classify's `-vv` summary;
//! - [`mapped`], [`replacing`], [`temp_files`]: mapped files, files replaced whole, temporary files
//!   named per process and removed on error, signal or next run;
//! - [`errors`], [`terminal`]: error chains, terminal output.

#![deny(unsafe_op_in_unsafe_fn)]
// `pub` only on what the stages, the backend, the binaries and tests reach (the rest `pub(crate)`).
#![warn(unreachable_pub)]

pub(crate) mod checked_str;
pub mod compute;
pub mod cpu_time;
pub mod errors;
pub mod hits;
pub mod index;
pub mod input;
pub mod mapped;
#[doc(hidden)]
pub mod pipeline;
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
