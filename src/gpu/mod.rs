//! The GPU backend (cargo feature `gpu`, on by default): CUDA through cudarc, loaded at run time,
//! so the same binary runs on machines with and without a GPU.
//!
//! - [`kernels`]: the sources in `cuda/`, compiled by NVRTC for the device and cached on disk;
//! - [`device`]: choosing GPUs (`--gpus`), contexts, streams, loaded kernels;
//! - [`table`]: the host side of the bucket-list multi-value table (`cuda/bucket_list.cuh`);
//! - [`build`]: `kmerdb build` on a GPU, writing the very bytes of the CPU build;
//! - [`condense`]: its last stage, the table to the index's shards.
//!
//! Every kernel has a CPU twin and a test comparing them bit for bit; those tests need a GPU and
//! are `#[ignore]`d in ordinary runs (`scripts/gpu-tests.sh` runs them on a GPU machine).

pub mod build;
pub mod classify;
pub mod condense;
pub mod device;
pub mod kernels;
pub mod multi;
pub mod table;

pub use device::Gpu;

pub use crate::compute::GpuRequest;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("NVRTC could not compile the kernels:\n{log}")]
    Nvrtc { log: String },
    #[error("libnvrtc (CUDA's run-time compiler) cannot be loaded; install it or use --gpus none")]
    NoNvrtc,
    #[error("--gpus asks for GPU {wanted}, but {reason}")]
    Missing { wanted: usize, reason: String },
    #[error(
        "the GPU table ran out of room ({what}) with {needed}: one batch needs more than the table holds; build on the CPU (--gpus none) or a GPU with more memory"
    )]
    TableFull { what: String, needed: String },
    #[error("GPU {ordinal} has {free} bytes free, {needed} are needed")]
    OutOfMemory { ordinal: usize, free: usize, needed: u64 },
}
