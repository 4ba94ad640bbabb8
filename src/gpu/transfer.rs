//! Large device-to-host copies through pinned memory.
//!
//! A copy into ordinary (pageable) host memory runs at about 10 GB/s and goes through the driver's
//! own staging, which the copies of several GPUs' threads share: measured, four GPUs condensing at
//! once took twice as long as one. Here each GPU copies into two pinned buffers of its own in turn
//! (about 50 GB/s) while the host moves the chunk before into place.

use crate::gpu::{Gpu, GpuError};
use cudarc::driver::{CudaView, DeviceRepr};

/// Bytes per pinned chunk.
const CHUNK: usize = 32 << 20;
/// Below this, one plain copy is cheaper than the pipeline.
const SMALL: usize = 4 << 20;

/// Copies `src` into `dst` (the same length) on the GPU's stream and waits for it.
pub fn download<T: DeviceRepr>(gpu: &Gpu, src: &CudaView<T>, dst: &mut [T]) -> Result<(), GpuError> {
    assert_eq!(src.len(), dst.len(), "download into a slice of the same length");
    let s = &gpu.stream;
    let bytes = std::mem::size_of_val(dst);
    if bytes < SMALL {
        s.memcpy_dtoh(src, dst)?;
        return Ok(());
    }
    let mut staging = gpu.download_staging.lock().expect("no download panicked");
    while staging.len() < 2 {
        // Cached, not write-combined: the host reads these back.
        // SAFETY: only bytes the device has written are read.
        staging.push(unsafe { gpu.ctx.alloc_pinned_with_flags::<u8>(CHUNK, 0)? });
    }
    // SAFETY: plain old data of `bytes` bytes, viewed as bytes.
    let src = unsafe { src.transmute::<u8>(bytes) }.expect("a view of its own size");
    // SAFETY: `dst` is `bytes` bytes of `DeviceRepr` (plain old) data, which any bytes may fill.
    let dst = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u8, bytes) };
    let chunks = bytes.div_ceil(CHUNK);
    let mut done: [Option<cudarc::driver::CudaEvent>; 2] = [None, None];
    // Chunk i is copied into buffer i % 2 while chunk i - 1 is moved out of the other.
    for i in 0..=chunks {
        if i < chunks {
            let b = i % 2;
            let range = i * CHUNK..(bytes).min((i + 1) * CHUNK);
            let len = range.len();
            let host = staging[b].as_mut_slice()?;
            s.memcpy_dtoh(&src.slice(range), &mut host[..len])?;
            done[b] = Some(s.record_event(None)?);
        }
        if i > 0 {
            let (p, b) = (i - 1, (i - 1) % 2);
            if let Some(e) = done[b].take() {
                e.synchronize()?;
            }
            let range = p * CHUNK..bytes.min((p + 1) * CHUNK);
            let len = range.len();
            dst[range].copy_from_slice(&staging[b].as_slice()?[..len]);
        }
    }
    Ok(())
}
