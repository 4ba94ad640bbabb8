//! The amino-acid stage's reads on the GPU: every mate of a batch translated in six frames and its
//! sampled amino-acid k-mers listed by the kernels of `cuda/protein.cuh`, the device twins of
//! `protein::mate_kmers` (same k-mers, same order; `tests/gpu.rs` compares them). The host merges
//! a read's lists, looks them up in the table and decides (`classify::candidates::with_protein`):
//! only reads that the DNA left above genus need that, a few per cent of a sample.

use crate::gpu::mates::DeviceMates;
use crate::gpu::table::launch_config;
use crate::gpu::{Gpu, GpuError};
use crate::protein::ProteinParams;
use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg};

/// Kernel view of the k-mers' settings; must match `struct ProteinKmers` in `cuda/protein.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ProteinKmerArgs {
    k: u32,
    sample: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for ProteinKmerArgs {}
const _: () = assert!(std::mem::size_of::<ProteinKmerArgs>() == 8);

/// Every mate's amino-acid k-mers on the device: mate `m`'s are `codes[first[m]..first[m + 1]]`.
pub(crate) struct DeviceAminoKmers {
    pub first: CudaSlice<u64>,
    pub codes: CudaSlice<u32>,
}

/// Lists the amino-acid k-mers of `mates` (`protein_kmer_counts`, a scan, `protein_kmers`). Waits
/// for the counts' total, to size the list.
pub(crate) fn amino_kmers(
    gpu: &Gpu,
    mates: &DeviceMates,
    params: &ProteinParams,
) -> Result<DeviceAminoKmers, GpuError> {
    let s = &gpu.stream;
    let args = ProteinKmerArgs { k: params.k, sample: params.sample };
    let m = mates.args(gpu);
    let config = launch_config(gpu, mates.count);
    let (first, codes) = crate::gpu::condense::placed_lists(
        gpu,
        mates.count,
        |counts| {
            let f = gpu.function("protein_kmer_counts")?;
            let mut b = s.launch_builder(&f);
            b.arg(&m).arg(&args).arg(counts);
            // SAFETY: mate i writes counts[i], i < count; `mates` holds its buffers until
            // `placed_lists` synchronizes the stream.
            unsafe { b.launch(config) }?;
            Ok(())
        },
        |first, codes| {
            let f = gpu.function("protein_kmers")?;
            let mut b = s.launch_builder(&f);
            b.arg(&m).arg(&args).arg(first).arg(codes);
            // SAFETY: mate i writes its counted codes from first[i], within the total.
            unsafe { b.launch(config) }?;
            Ok(())
        },
    )?;
    Ok(DeviceAminoKmers { first, codes })
}

/// Entry points for the tests that compare the kernels with their CPU twins.
pub mod twins {
    use super::*;

    /// Each of `mates`' amino-acid k-mers as the GPU lists them (`protein::mate_kmers` on the CPU).
    pub fn mate_kmers(gpu: &Gpu, mates: &[&[u8]], params: &ProteinParams) -> Result<Vec<Vec<u32>>, GpuError> {
        let dev = DeviceMates::plain(gpu, mates)?;
        let found = amino_kmers(gpu, &dev, params)?;
        let (first, codes) = (gpu.stream.clone_dtoh(&found.first)?, gpu.stream.clone_dtoh(&found.codes)?);
        Ok(first.windows(2).map(|w| codes[w[0] as usize..w[1] as usize].to_vec()).collect())
    }
}
