//! kmerdb's CUDA backend ([`gpu`]): the build's fused kernel and passes, the classification's
//! lookups and candidates, the index's copies on the devices. It imports only `kmerdb-core`; the
//! stages (the `kmerdb` crate) drive it.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(unreachable_pub)]

// The core's modules under the names the backend's code uses for them (`crate::index`, ...).
pub(crate) use kmerdb_core::{
    compute, errors, hits, index, input, protein, resources, sketch, slab_hash, taxonomy, temp_files,
};

pub mod gpu;
