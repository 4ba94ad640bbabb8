//! A batch's mates on a GPU, as the classify kernels (`gpu::classify`) and the amino-acid k-mers'
//! kernel (`gpu::protein`) read them: a module of its own, so that neither of the two imports the
//! other for it.

use crate::gpu::address::DevAddr;
use crate::gpu::{Gpu, GpuError};
use cudarc::driver::{CudaSlice, DeviceRepr};

/// Kernel view of a batch's mates; must match `struct Mates` in `cuda/classify.cuh`. It borrows
/// the batch's buffers ([`DeviceMates::args`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatesArgs<'a> {
    seq: DevAddr<'a>,
    offset: DevAddr<'a>,
    len: DevAddr<'a>,
    feature_first: DevAddr<'a>,
    count: u64,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for MatesArgs<'_> {}
// Kernels read it as `struct Mates` (cuda/classify.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<MatesArgs>() == 40);

/// A batch's mates on the device: the bases back to back, and per mate where its bases start, its
/// length and where its room for features starts; `count` mates.
pub(crate) struct DeviceMates {
    pub(crate) seq: CudaSlice<u8>,
    pub(crate) offset: CudaSlice<u64>,
    pub(crate) len: CudaSlice<u32>,
    pub(crate) feature_first: CudaSlice<u64>,
    pub(crate) count: u64,
}

impl DeviceMates {
    /// The kernels' view of the mates, borrowing their buffers.
    pub(crate) fn args(&self, gpu: &Gpu) -> MatesArgs<'_> {
        MatesArgs {
            seq: DevAddr::of(gpu, &self.seq),
            offset: DevAddr::of(gpu, &self.offset),
            len: DevAddr::of(gpu, &self.len),
            feature_first: DevAddr::of(gpu, &self.feature_first),
            count: self.count,
        }
    }

    /// `mates` copied to the device as they are, without room for features: for kernels that
    /// need only the bases (the amino-acid k-mers' twin test).
    pub(crate) fn plain(gpu: &Gpu, mates: &[&[u8]]) -> Result<Self, GpuError> {
        let s = &gpu.stream;
        let mut offset = Vec::with_capacity(mates.len());
        let mut at = 0u64;
        for m in mates {
            offset.push(at);
            at += m.len() as u64;
        }
        let bases = mates.concat();
        let len: Vec<u32> = mates.iter().map(|m| m.len() as u32).collect();
        let nonempty = |v: &[u8]| if v.is_empty() { s.alloc_zeros::<u8>(1) } else { s.clone_htod(v) };
        Ok(Self {
            seq: nonempty(&bases)?,
            offset: s.clone_htod(&[offset, vec![0]].concat())?,
            len: s.clone_htod(&[len, vec![0]].concat())?,
            feature_first: s.alloc_zeros::<u64>(mates.len() + 1)?,
            count: mates.len() as u64,
        })
    }
}
