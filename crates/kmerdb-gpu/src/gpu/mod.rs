//! The GPU backend (cargo feature `gpu`, on by default): CUDA through cudarc, loaded at run time,
//! so the same binary runs on machines with and without a GPU.
//!
//! - [`kernels`]: the sources in `cuda/`, compiled by NVRTC for the device and cached on disk;
//! - [`device`]: choosing GPUs (`--gpus`), contexts, streams, loaded kernels;
//! - [`address`]: device addresses that borrow their buffers, for the kernels' argument structs;
//! - [`table`]: the host side of the bucket-list multi-value table (`cuda/bucket_list.cuh`);
//! - [`build`]: batches of sequences on the GPU and their pinned uploads;
//! - [`passes`]: `kmerdb build` on one GPU or several, in passes over the shards, writing the
//!   very bytes of the CPU build;
//! - [`condense`]: a pass's last stage, the table to the index's shards;
//! - [`pinned`]: pinned host memory and copies between any two places;
//! - [`multi`]: peer access between GPUs; [`classify`]: `kmerdb classify` on GPUs.
//!
//! Every kernel has a CPU twin and a test comparing them bit for bit; those tests need a GPU and
//! are `#[ignore]`d in ordinary runs (`scripts/gpu-tests.sh` runs them on a GPU machine).

pub mod address;
pub mod build;
pub mod classify;
pub mod condense;
pub mod device;
pub mod kernels;
pub mod mates;
pub mod multi;
pub mod passes;
pub mod pinned;
pub mod protein;
pub mod slab;
pub mod table;

pub use device::Gpu;

pub use crate::compute::GpuRequest;
use crate::resources::human_bytes;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    #[error("CUDA driver{}", driver_advice(.0))]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("NVRTC could not compile the kernels:\n{log}")]
    Nvrtc { log: String },
    #[error("libnvrtc (CUDA's run-time compiler) cannot be loaded; install it or use --gpus none")]
    NoNvrtc,
    /// A GPU that `--gpus` names and this machine or build cannot give.
    #[error("--gpus asks for GPU {wanted}, but {reason}")]
    Missing { wanted: usize, reason: String },
    /// A build asked for more GPUs than one build uses.
    #[error("--gpus names {given} GPUs; one build uses at most {max}")]
    TooManyGpus { given: usize, max: usize },
    /// Fewer keys or values than the pairs a table insertion was given.
    #[error("{pairs} pairs to insert, but {keys} keys and {values} values given")]
    PairCount { pairs: u64, keys: usize, values: usize },
    /// A GPU's worker ended without reporting its result: a failure inside kmerdb, not the user's.
    #[error(
        "the build's GPU worker {worker} (of those --gpus names) stopped before its last shard without an error: a fault in kmerdb, please report it"
    )]
    WorkerStopped { worker: usize },
    #[error(
        "GPU {ordinal}'s table ran out of room ({what}) with {key_slots} key slots and {value_slots} value slots; {advice}"
    )]
    TableFull { ordinal: usize, what: String, key_slots: u64, value_slots: u64, advice: String },
    #[error("GPU {ordinal} has {} free, {} are needed", human_bytes(*free as u64), human_bytes(*needed))]
    OutOfMemory { ordinal: usize, free: usize, needed: u64 },
    /// A job split over several GPUs whose share does not fit one of them, with what would fit.
    #[error("{what} needs about {} on each of {gpus} GPUs, but GPU {ordinal} has {} free; {advice}", human_bytes(*per_gpu), human_bytes(*free))]
    TooLarge { what: String, per_gpu: u64, gpus: usize, ordinal: usize, free: u64, advice: String },
    /// Host memory for the GPUs' copies could not be mapped.
    #[error("cannot map {} of host memory for the GPU's copies", human_bytes(*bytes))]
    HostMemory {
        bytes: u64,
        #[source]
        source: std::io::Error,
    },
    /// Reading the index's file to copy it to a GPU failed.
    #[error("reading {path} for the GPU")]
    IndexRead {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A shard the GPU laid out does not fit the index's location layout. The build turns it into
    /// its index error, which names the index (`indexing::error::BuildError`'s `From`).
    #[error(transparent)]
    ShardOverflow(#[from] crate::index::locations::ShardOverflow),
    // The build's errors that the GPU passes meet; the build's `From` turns each into its own
    // variant of the same name, so that they read as the CPU build's do.
    /// More windows than 32-bit window numbers hold.
    #[error("the inputs hold more windows than 2^32")]
    TooManyWindows,
    /// The passes' thread pools could not start.
    #[error("cannot start {threads} threads: {reason}")]
    Threads { threads: usize, reason: String },
    /// A spill file or the index's folder failed the passes.
    #[error("cannot write the index to {path}: {reason}")]
    Output { path: std::path::PathBuf, reason: String },
    /// A file could not be made or read.
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
}

/// What a user can do about a driver error they can cause, said before the driver's own words.
/// Out of memory mid-run is the usual one: kmerdb sizes its work by the memory free when it
/// starts, so another process that takes the GPU's memory after that (a second kmerdb run, a
/// training job) leaves too little.
fn driver_advice(error: &cudarc::driver::DriverError) -> &'static str {
    use cudarc::driver::sys::CUresult;
    match error.0 {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            ": the GPU's memory ran out, most likely taken by another process since this run began \
             (nvidia-smi lists them); run again when the GPU is free, or with --gpus none"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::{DriverError, sys::CUresult};

    #[test]
    fn out_of_memory_from_the_driver_says_what_to_do() {
        let oom = GpuError::from(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)).to_string();
        assert!(oom.contains("another process") && oom.contains("--gpus none"), "{oom}");
        let other = GpuError::from(DriverError(CUresult::CUDA_ERROR_LAUNCH_FAILED)).to_string();
        assert_eq!(other, "CUDA driver");
    }
}
