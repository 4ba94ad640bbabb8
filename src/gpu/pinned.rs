//! Page-locked ("pinned") host memory that every GPU of the process can copy to and from at full
//! speed, and asynchronous copies between any two addresses (unified addressing: host, this GPU,
//! another GPU).
//!
//! cudarc's own pinned slices belong to one context and track their use with its events; the
//! build moves pairs and shards between several GPUs and the host, so it uses these plain buffers
//! and orders the copies itself (the caller's safety contract on each access).
//!
//! Copies take [`DevAddr`]s, which keep their buffers borrowed while a copy is queued; the copy
//! runs later, so keeping the memory alive until the stream has passed it stays the caller's
//! part (the `# Safety` of [`copy_async`]).

use crate::gpu::address::DevAddr;
use crate::gpu::{Gpu, GpuError};
use cudarc::driver::{CudaContext, CudaStream, sys};
use std::sync::Arc;

/// A pinned, portable (usable by every context), CPU-cached host buffer of `len` items.
pub(crate) struct HostBuffer<T> {
    ptr: *mut T,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is plain memory owned by this value; access is the owner's, through &/&mut.
unsafe impl<T: Send> Send for HostBuffer<T> {}
// SAFETY: as above: shared references only read.
unsafe impl<T: Sync> Sync for HostBuffer<T> {}

impl<T: bytemuck::Pod> HostBuffer<T> {
    /// Allocates `len` items (at least one), uninitialised as far as the GPU is concerned; the
    /// memory reads as zeros until written.
    pub fn new(gpu: &Gpu, len: usize) -> Result<Self, GpuError> {
        gpu.ctx.bind_to_thread()?;
        let bytes = len.max(1) * std::mem::size_of::<T>();
        // SAFETY: a plain allocation; PORTABLE makes it pinned for every context. Not
        // write-combined: the CPU reads these buffers (walks, writes to disk).
        let ptr = unsafe { cudarc::driver::result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }?;
        Ok(Self { ptr: ptr.cast(), len, ctx: gpu.ctx.clone() })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The address of item `at`, for [`copy_async`], borrowing the buffer.
    pub(crate) fn addr(&self, at: usize) -> DevAddr<'_> {
        assert!(at <= self.len);
        // SAFETY: pinned and portable memory, which every GPU of the process addresses at its
        // host address (unified addressing); allocated until `self` is dropped, which the
        // returned borrow of `self` rules out while it lives.
        unsafe { DevAddr::from_raw(self.ptr as u64 + (at * std::mem::size_of::<T>()) as u64) }
    }

    /// # Safety
    /// No copy into the buffer may be in flight (its stream was synchronized after it).
    pub unsafe fn as_slice(&self) -> &[T] {
        // SAFETY: `len` items were allocated; the caller rules out concurrent device writes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// # Safety
    /// No copy into or out of the buffer may be in flight.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as for `as_slice`, and `&mut self` rules out other host references.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by `malloc_host` and freed once; the owner has waited for its copies.
        let _ = unsafe { cudarc::driver::result::free_host(self.ptr.cast()) };
    }
}

/// Queues a copy of `bytes` from `src` to `dst` on `stream`; either address may be host pinned
/// memory, this GPU's or another GPU's (the driver infers which from the address).
///
/// # Safety
/// Both ranges must stay valid, and not be touched by anything else, until the stream has passed
/// the copy (the addresses' borrows end when this returns, before the copy has run).
pub unsafe fn copy_async(
    dst: DevAddr<'_>,
    src: DevAddr<'_>,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    if bytes == 0 {
        return Ok(());
    }
    stream.context().bind_to_thread()?;
    // SAFETY: the caller's contract.
    unsafe { sys::cuMemcpyAsync(dst.raw(), src.raw(), bytes, stream.cu_stream()) }.result()?;
    Ok(())
}
