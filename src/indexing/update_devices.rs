//! The GPU an update's stage 3 runs on, as `update` sees it: none on the CPU or without GPU
//! support, so that `Shards::lay_out_on` calls the same two functions either way (as the build's
//! stages call `indexing::devices`). Without GPU support the GPU is a type with no values.

use super::{Shards, UpdateConfig};
use crate::index::IndexWriter;
use crate::index::condensed::ShardStats;
use crate::indexing::error::BuildError;
use crate::indexing::sketching::Bin;

/// The GPU stage 3 runs on.
#[cfg(feature = "gpu")]
pub(super) type UpdateGpu = crate::gpu::Gpu;
/// Never made without GPU support.
#[cfg(not(feature = "gpu"))]
pub(super) enum UpdateGpu {}

/// The first GPU `config.gpus` asks for (none: the CPU); without GPU support, naming GPUs is an
/// error.
pub(super) fn first(config: &UpdateConfig) -> Result<Option<UpdateGpu>, BuildError> {
    #[cfg(feature = "gpu")]
    return Ok(crate::gpu::device::select(&config.gpus)?.into_iter().next());
    #[cfg(not(feature = "gpu"))]
    match &config.gpus {
        crate::compute::GpuRequest::List(_) => Err(BuildError::NoGpuSupport(config.gpus.to_string())),
        _ => Ok(None),
    }
}

/// Stage 3 on `gpu` (`update_on_gpu`). Returns the writer, the shards' counts and the GPU's name.
pub(super) fn lay_out(
    shards: &Shards,
    config: &UpdateConfig,
    bins: Vec<Bin>,
    writer: IndexWriter,
    gpu: &UpdateGpu,
) -> Result<(IndexWriter, ShardStats, String), BuildError> {
    #[cfg(feature = "gpu")]
    {
        let (writer, stats) = super::on_gpu::lay_out(shards, bins, writer, gpu, config.gpu_pass_values)
            .map_err(|e| e.naming_index(&config.db))?;
        Ok((writer, stats, crate::gpu::device::describe(std::slice::from_ref(gpu))))
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (shards, config, bins, writer);
        match *gpu {}
    }
}
