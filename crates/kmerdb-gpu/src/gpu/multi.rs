//! Several GPUs of one machine: peer access between them, and how classification spreads an
//! index's shards over them (GPU `d` of `n` holds the shards `s` with `s * n / 2^shard_bits == d`,
//! a contiguous range, so that its share of the file is one copy). The build owns shards round
//! robin instead (`gpu::passes::owner_of`): its passes go over consecutive shards, and each pass
//! then has work for every GPU.

use crate::gpu::address::DevAddr;
use crate::gpu::{Gpu, GpuError};
use cudarc::driver::CudaStream;

/// The shards GPU `d` of `gpus` holds among `shards` when classifying: those with
/// `shard * gpus / shards == d`, a contiguous range.
pub(crate) fn owned_shards(d: usize, gpus: usize, shards: usize) -> std::ops::Range<usize> {
    let first = (0..shards).find(|&s| s * gpus / shards == d).unwrap_or(shards);
    let end = (first..shards).find(|&s| s * gpus / shards != d).unwrap_or(shards);
    first..end
}

/// Queues a copy of `bytes` from `src_ptr` on `src` to `dst_ptr` on `dst`, on `stream` (one of
/// `dst`'s).
///
/// # Safety
///
/// Both ranges are device memory of their GPUs for `bytes`, kept alive (and the source
/// unchanged) until `stream` has passed the copy (the addresses' borrows end when this returns).
pub unsafe fn queue_peer_copy(
    dst: &Gpu,
    dst_ptr: DevAddr<'_>,
    src: &Gpu,
    src_ptr: DevAddr<'_>,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    // SAFETY: both ranges are valid device memory for `bytes` (this function's contract).
    unsafe {
        cudarc::driver::sys::cuMemcpyPeerAsync(
            dst_ptr.raw(),
            dst.ctx.cu_ctx(),
            src_ptr.raw(),
            src.ctx.cu_ctx(),
            bytes,
            stream.cu_stream(),
        )
        .result()?;
    }
    Ok(())
}

/// Lets every GPU read the others' memory directly (a peer copy without it goes through the host,
/// about a tenth as fast: REFERENCE.md §6). Two grants are needed: peer access between contexts,
/// and access to each device's default memory pool, from which cudarc allocates (stream-ordered
/// allocations are not covered by peer access).
pub fn enable_peer_access(gpus: &[&Gpu]) -> Result<(), GpuError> {
    use cudarc::driver::sys;
    for a in gpus {
        a.ctx.bind_to_thread()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: an out-parameter for this context's device.
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, a.ctx.cu_device()) }.result()?;
        for b in gpus.iter().filter(|b| b.ordinal != a.ordinal) {
            let desc = sys::CUmemAccessDesc {
                location: sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: b.ctx.cu_device(),
                },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: one valid descriptor for `a`'s default pool.
            unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) }.result()?;
        }
        for b in gpus {
            if a.ordinal == b.ordinal {
                continue;
            }
            // SAFETY: both contexts are alive; enabling twice is reported, not harmful.
            let r = unsafe { sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0) };
            match r {
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
                other => log::warn!(
                    "GPU {} cannot read GPU {} directly ({other:?}): copies go through the host",
                    a.ordinal,
                    b.ordinal
                ),
            }
        }
    }
    Ok(())
}
