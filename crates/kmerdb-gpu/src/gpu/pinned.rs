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
//! part (the `# Safety` of `copy_async`).

use crate::gpu::address::DevAddr;
use crate::gpu::{Gpu, GpuError};
use cudarc::driver::{CudaContext, CudaStream, sys};
use std::sync::Arc;

/// A pinned, portable (usable by every context), CPU-cached host buffer of `len` items.
///
/// Mapped by us, faulted in on a few threads, then pinned by `cuMemHostRegister`, rather than
/// allocated by `cuMemHostAlloc`: that faults the pages in itself, on one thread under a lock of
/// the whole process (2.0 GB/s on one thread, 1.7 GB/s on two at once, on a 2-H200 host), and a
/// GPU build's first pass pins some 4 GB a GPU before its shards can leave the GPU. Faulting in
/// ran at 4.4 GB/s on one thread and registering the faulted memory at 39 GB/s
/// (`kmerdb-gpu-bench --host-memory`).
pub(crate) struct HostBuffer<T> {
    ptr: *mut T,
    len: usize,
    /// The mapping's length in bytes (whole pages), or 0 where the buffer came from
    /// `cuMemHostAlloc` (registering failed).
    mapped: usize,
    ctx: Arc<CudaContext>,
}

/// Threads that fault a new buffer's pages in: one for each [`FAULT_SHARE`] bytes, at most.
const FAULT_THREADS: usize = 4;
const FAULT_SHARE: usize = 32 << 20;
/// The host's page (the mappings' unit; huge pages are whole numbers of them).
const PAGE: usize = 4096;

/// Maps `bytes` (whole pages) of anonymous memory, huge pages asked for, and writes a byte of each
/// page so that every page is there before it is pinned.
fn map_faulted(bytes: usize) -> std::io::Result<*mut u8> {
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: advice on the mapping just made; failing (no huge pages here) changes nothing.
    unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
    let pages = bytes / PAGE;
    let threads = (bytes / FAULT_SHARE).clamp(1, FAULT_THREADS);
    let share = pages.div_ceil(threads);
    let base = ptr as usize;
    let touch = |part: usize| {
        for p in part * share..((part + 1) * share).min(pages) {
            // SAFETY: inside the mapping, which is readable and writable; a volatile write so
            // that the page is faulted in even though nothing reads it here.
            unsafe { std::ptr::write_volatile((base + p * PAGE) as *mut u8, 0) };
        }
    };
    std::thread::scope(|scope| {
        for part in 1..threads {
            // Without a thread to spare, this one faults the part in.
            if std::thread::Builder::new().spawn_scoped(scope, move || touch(part)).is_err() {
                touch(part);
            }
        }
        touch(0);
    });
    Ok(ptr.cast())
}

// SAFETY: the buffer is plain memory owned by this value; access is the owner's, through &/&mut.
unsafe impl<T: Send> Send for HostBuffer<T> {}
// SAFETY: as above: shared references only read.
unsafe impl<T: Sync> Sync for HostBuffer<T> {}

impl<T: bytemuck::Pod> HostBuffer<T> {
    /// Allocates `len` items (at least one), uninitialised as far as the GPU is concerned; the
    /// memory reads as zeros until written.
    pub(crate) fn new(gpu: &Gpu, len: usize) -> Result<Self, GpuError> {
        gpu.ctx.bind_to_thread()?;
        let mapped = (len.max(1) * std::mem::size_of::<T>()).next_multiple_of(PAGE);
        let ptr = map_faulted(mapped).map_err(|source| GpuError::HostMemory { bytes: mapped as u64, source })?;
        // SAFETY: the mapping just made, whole pages; PORTABLE pins it for every context. Not
        // write-combined: the CPU reads these buffers (walks, writes to disk).
        let registered = unsafe { sys::cuMemHostRegister_v2(ptr.cast(), mapped, sys::CU_MEMHOSTREGISTER_PORTABLE) };
        if let Err(e) = registered.result() {
            // SAFETY: the mapping made above, not registered, not referred to.
            unsafe { libc::munmap(ptr.cast(), mapped) };
            // Where registering is refused, the driver's own allocation (slower to pin).
            log::debug!("pinning {mapped} bytes by registering failed ({e}); allocating them pinned instead");
            // SAFETY: a plain allocation, freed by `drop`.
            let ptr = unsafe { cudarc::driver::result::malloc_host(mapped, sys::CU_MEMHOSTALLOC_PORTABLE) }?;
            return Ok(Self { ptr: ptr.cast(), len, mapped: 0, ctx: gpu.ctx.clone() });
        }
        Ok(Self { ptr: ptr.cast(), len, mapped, ctx: gpu.ctx.clone() })
    }

    pub(crate) fn len(&self) -> usize {
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
    pub(crate) unsafe fn as_slice(&self) -> &[T] {
        // SAFETY: `len` items were allocated; the caller rules out concurrent device writes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// # Safety
    /// No copy into or out of the buffer may be in flight.
    pub(crate) unsafe fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as for `as_slice`, and `&mut self` rules out other host references.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: registered and mapped (or allocated) by `new`, released once; the owner has
        // waited for its copies.
        unsafe {
            if self.mapped == 0 {
                let _ = cudarc::driver::result::free_host(self.ptr.cast());
            } else {
                let _ = sys::cuMemHostUnregister(self.ptr.cast());
                libc::munmap(self.ptr.cast(), self.mapped);
            }
        }
    }
}

/// Pinned host memory a device array is copied into, grown as needed and kept for the next copy:
/// a batch's results. A copy into pinned memory runs at the bus's rate and waits for nothing on
/// the host, where one into the heap is staged by the driver through pinned memory of its own,
/// waiting for the stream first. Read as a slice once the stream has passed the copy.
pub(crate) struct Landing<T> {
    buffer: Option<HostBuffer<T>>,
    len: usize,
}

impl<T> Default for Landing<T> {
    fn default() -> Self {
        Self { buffer: None, len: 0 }
    }
}

impl<T: bytemuck::Pod + cudarc::driver::DeviceRepr> Landing<T> {
    /// Queues the copy of all of `src` into this memory on `gpu`'s stream, growing it (by a
    /// quarter more than needed) where it is too small.
    ///
    /// # Safety
    /// Nothing may read this memory, and no copy into it be in flight, until the stream has passed
    /// this copy; `src` stays allocated until then (a stream-ordered free after it is enough).
    pub(crate) unsafe fn queue_copy(&mut self, gpu: &Gpu, src: &cudarc::driver::CudaSlice<T>) -> Result<(), GpuError> {
        let n = src.len();
        if self.buffer.as_ref().is_none_or(|b| b.len() < n) {
            // The old buffer is unpinned before the new one is pinned, not held alongside it.
            self.buffer = None;
            self.buffer = Some(HostBuffer::new(gpu, n + n / 4)?);
        }
        self.len = n;
        let buffer = self.buffer.as_ref().expect("allocated above");
        // SAFETY: `n` items fit the buffer; the caller's contract covers the rest.
        unsafe { copy_async(buffer.addr(0), DevAddr::of(gpu, src), n * std::mem::size_of::<T>(), &gpu.stream) }
    }

    /// Empty, keeping the memory.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Landing<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.buffer {
            // SAFETY: `queue_copy`'s contract: read only once the stream has passed the copy.
            Some(b) => unsafe { &b.as_slice()[..self.len] },
            None => &[],
        }
    }
}

impl<T> std::fmt::Debug for Landing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Landing({} items)", self.len)
    }
}

/// Queues a copy of `bytes` from `src` to `dst` on `stream`; either address may be host pinned
/// memory, this GPU's or another GPU's (the driver infers which from the address).
///
/// # Safety
/// Both ranges must stay valid, and not be touched by anything else, until the stream has passed
/// the copy (the addresses' borrows end when this returns, before the copy has run).
pub(crate) unsafe fn copy_async(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping faulted in on several threads is all there, zeroed and writable, whatever its
    /// size against the threads' shares.
    #[test]
    fn faulted_mappings_are_zeroed_and_writable() {
        for bytes in [PAGE, 3 * PAGE, FAULT_SHARE * 3 + PAGE * 5] {
            let ptr = map_faulted(bytes).unwrap();
            // SAFETY: the mapping just made, `bytes` long.
            let s = unsafe { std::slice::from_raw_parts_mut(ptr, bytes) };
            assert!(s.iter().all(|&b| b == 0));
            s.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
            assert!(s.iter().enumerate().all(|(i, &b)| b == i as u8));
            // SAFETY: unmapped once, not used after.
            assert_eq!(unsafe { libc::munmap(ptr.cast(), bytes) }, 0);
        }
    }
}
