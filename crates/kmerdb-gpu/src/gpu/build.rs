//! Batches of sequences on the GPU: their layout for the kernels (`struct Batch` in
//! `cuda/build.cu`), the sketch parameters, and the pinned, double-buffered uploads of the build
//! (`gpu::passes` runs the build itself).

use crate::gpu::address::DevAddr;
use crate::gpu::table::launch_config;
use crate::gpu::{Gpu, GpuError};
use crate::sketch::Pending;
use crate::sketch::SketchParams;
use cudarc::driver::{CudaEvent, CudaStream, DeviceRepr, PinnedHostSlice, PushKernelArg};
use std::sync::Arc;

/// Bases sent to the GPU per batch.
pub const BATCH_BASES: usize = 64 << 20;

/// Kernel view of a batch; must match `struct Batch` in `cuda/build.cu`. It borrows the batch's
/// buffers ([`DeviceBatch::args`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchArgs<'a> {
    seq: DevAddr<'a>,
    offset: DevAddr<'a>,
    len: DevAddr<'a>,
    target: DevAddr<'a>,
    first_window: DevAddr<'a>,
    records: u32,
    _pad: u32,
    windows: u64,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for BatchArgs<'_> {}
// Kernels read it as `struct Batch` (cuda/build.cu), which asserts the same size.
const _: () = assert!(std::mem::size_of::<BatchArgs>() == 56);

/// Kernel view of the sketch parameters; must match `struct Sketching` in `cuda/build.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SketchArgs {
    k: u32,
    window: u32,
    stride: u32,
    sketch_size: u32,
    seed: u64,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for SketchArgs {}
// Kernels read it as `struct Sketching` (cuda/build.cu), which asserts the same size.
const _: () = assert!(std::mem::size_of::<SketchArgs>() == 24);

impl From<&SketchParams> for SketchArgs {
    fn from(p: &SketchParams) -> Self {
        Self { k: p.k, window: p.window, stride: p.stride, sketch_size: p.sketch_size, seed: p.hash_seed }
    }
}

/// A batch of sequences on the device, laid out for the kernels.
pub struct DeviceBatch {
    seq: cudarc::driver::CudaSlice<u8>,
    offset: cudarc::driver::CudaSlice<u64>,
    len: cudarc::driver::CudaSlice<u32>,
    target: cudarc::driver::CudaSlice<u32>,
    first_window: cudarc::driver::CudaSlice<u64>,
    /// Per record: the global number of its target's first window (`Pending::first_window`).
    global_first: cudarc::driver::CudaSlice<u64>,
    records: u32,
    pub windows: u64,
}

impl DeviceBatch {
    /// Uploads sequences with their targets.
    pub fn upload(gpu: &Gpu, batch: &[Pending], params: &SketchParams) -> Result<Self, GpuError> {
        let total: usize = batch.iter().map(|p| p.seq.len()).sum();
        let mut seq = Vec::with_capacity(total);
        let (mut offset, mut len, mut target, mut first_window) = (Vec::new(), Vec::new(), Vec::new(), vec![0u64]);
        let mut global_first = Vec::new();
        for p in batch {
            offset.push(seq.len() as u64);
            len.push(p.seq.len() as u32);
            target.push(p.target);
            global_first.push(p.first_window);
            seq.extend_from_slice(&p.seq);
            first_window.push(first_window.last().unwrap() + params.window_count(p.seq.len()));
        }
        let s = &gpu.stream;
        let windows = *first_window.last().unwrap();
        let upload_u8 = |v: &[u8]| if v.is_empty() { s.alloc_zeros::<u8>(1) } else { s.clone_htod(v) };
        Ok(Self {
            seq: upload_u8(&seq)?,
            offset: s.clone_htod(&offset)?,
            len: s.clone_htod(&len)?,
            target: s.clone_htod(&target)?,
            first_window: s.clone_htod(&first_window)?,
            global_first: if global_first.is_empty() { s.alloc_zeros::<u64>(1)? } else { s.clone_htod(&global_first)? },
            records: batch.len() as u32,
            windows,
        })
    }

    /// Device address of the records' global first windows (`Split::global_first`).
    pub(crate) fn global_first(&self, gpu: &Gpu) -> DevAddr<'_> {
        DevAddr::of(gpu, &self.global_first)
    }

    /// The kernels' view of the batch, borrowing its buffers.
    pub(crate) fn args(&self, gpu: &Gpu) -> BatchArgs<'_> {
        BatchArgs {
            seq: DevAddr::of(gpu, &self.seq),
            offset: DevAddr::of(gpu, &self.offset),
            len: DevAddr::of(gpu, &self.len),
            target: DevAddr::of(gpu, &self.target),
            first_window: DevAddr::of(gpu, &self.first_window),
            records: self.records,
            _pad: 0,
            windows: self.windows,
        }
    }

    /// Every window's sketch, padded with `NO_FEATURE` to the sketch size (the CPU-twin test).
    pub fn sketches(&self, gpu: &Gpu, params: &SketchParams) -> Result<Vec<u32>, GpuError> {
        let s = &gpu.stream;
        let out = s.alloc_zeros::<u32>((self.windows * params.sketch_size as u64).max(1) as usize)?;
        let f = gpu.function("sketch_windows")?;
        let (b, p) = (self.args(gpu), SketchArgs::from(params));
        let mut l = s.launch_builder(&f);
        l.arg(&b).arg(&p).arg(&out);
        // SAFETY: writes windows * sketch_size words of `out`.
        unsafe { l.launch(launch_config(gpu, self.windows)) }?;
        let mut v = s.clone_dtoh(&out)?;
        v.truncate((self.windows * params.sketch_size as u64) as usize);
        Ok(v)
    }
}

/// One of the two upload buffers of a build: pinned host memory the reading thread packs a batch
/// into, and device memory of the same size that the copy stream fills while the GPU is still
/// inserting the batch before (the other buffer).
pub(crate) struct Staging {
    seq: PinnedHostSlice<u8>,
    offset: PinnedHostSlice<u64>,
    len: PinnedHostSlice<u32>,
    target: PinnedHostSlice<u32>,
    first_window: PinnedHostSlice<u64>,
    global_first: PinnedHostSlice<u64>,
    dev: DeviceBatch,
    /// Recorded after the last kernel that read `dev`.
    done: Option<CudaEvent>,
    /// Bases packed by the last `pack`.
    packed_bases: usize,
}

impl Staging {
    pub(crate) fn new(gpu: &Gpu, bases: usize, records: usize) -> Result<Self, GpuError> {
        let (bases, records) = (bases.max(1), records.max(1));
        let s = &gpu.stream;
        // SAFETY: pinned memory starts uninitialised; only the parts `stage` writes are copied.
        let pinned = unsafe {
            (
                gpu.ctx.alloc_pinned::<u8>(bases)?,
                gpu.ctx.alloc_pinned::<u64>(records)?,
                gpu.ctx.alloc_pinned::<u32>(records)?,
                gpu.ctx.alloc_pinned::<u32>(records)?,
                gpu.ctx.alloc_pinned::<u64>(records + 1)?,
                gpu.ctx.alloc_pinned::<u64>(records)?,
            )
        };
        let dev = DeviceBatch {
            seq: s.alloc_zeros::<u8>(bases)?,
            offset: s.alloc_zeros::<u64>(records)?,
            len: s.alloc_zeros::<u32>(records)?,
            target: s.alloc_zeros::<u32>(records)?,
            first_window: s.alloc_zeros::<u64>(records + 1)?,
            global_first: s.alloc_zeros::<u64>(records)?,
            records: 0,
            windows: 0,
        };
        // The copy stream writes these buffers: their allocation must be complete first.
        s.synchronize()?;
        let (seq, offset, len, target, first_window, global_first) = pinned;
        Ok(Self { seq, offset, len, target, first_window, global_first, dev, done: None, packed_bases: 0 })
    }

    pub(crate) fn fits(&self, bases: usize, records: usize) -> bool {
        bases <= self.seq.len() && records <= self.len.len()
    }

    /// The batch last staged, on the device.
    pub(crate) fn batch(&self) -> &DeviceBatch {
        &self.dev
    }

    /// Marks the batch's device buffers as in use until `event` (the last kernel that reads them).
    pub(crate) fn used_until(&mut self, event: CudaEvent) {
        self.done = Some(event);
    }

    /// Packs `batch` into the pinned buffers (after the kernel that read the batch before, if any,
    /// has finished: see [`Staging::used_until`]). Several reading threads pack into their own
    /// stagings at once.
    pub(crate) fn pack(&mut self, batch: &[Pending], params: &SketchParams) -> Result<(), GpuError> {
        if let Some(done) = self.done.take() {
            done.synchronize()?;
        }
        let (seq, offset, len, target, first_window, global_first) = (
            self.seq.as_mut_slice()?,
            self.offset.as_mut_slice()?,
            self.len.as_mut_slice()?,
            self.target.as_mut_slice()?,
            self.first_window.as_mut_slice()?,
            self.global_first.as_mut_slice()?,
        );
        // Pinned memory is write-combined: written once in order, never read back.
        let (mut at, mut windows) = (0usize, 0u64);
        first_window[0] = 0;
        for (r, p) in batch.iter().enumerate() {
            seq[at..at + p.seq.len()].copy_from_slice(&p.seq);
            offset[r] = at as u64;
            len[r] = p.seq.len() as u32;
            target[r] = p.target;
            global_first[r] = p.first_window;
            windows += params.window_count(p.seq.len());
            first_window[r + 1] = windows;
            at += p.seq.len();
        }
        self.dev.records = batch.len() as u32;
        self.dev.windows = windows;
        self.packed_bases = at;
        Ok(())
    }

    /// Queues the upload of what [`Staging::pack`] packed on `copy`; returns the event the kernel
    /// must wait for.
    pub(crate) fn upload(&mut self, copy: &Arc<CudaStream>) -> Result<CudaEvent, GpuError> {
        let (at, records) = (self.packed_bases, self.dev.records as usize);
        let d = &mut self.dev;
        // Plain slices of pinned memory: the driver copies them at pinned speed; cudarc waits for
        // each copy before returning (it cannot know the memory outlives it).
        copy.memcpy_htod(&self.seq.as_slice()?[..at], &mut d.seq.slice_mut(..at))?;
        copy.memcpy_htod(&self.offset.as_slice()?[..records], &mut d.offset.slice_mut(..records))?;
        copy.memcpy_htod(&self.len.as_slice()?[..records], &mut d.len.slice_mut(..records))?;
        copy.memcpy_htod(&self.target.as_slice()?[..records], &mut d.target.slice_mut(..records))?;
        copy.memcpy_htod(&self.first_window.as_slice()?[..=records], &mut d.first_window.slice_mut(..=records))?;
        copy.memcpy_htod(&self.global_first.as_slice()?[..records], &mut d.global_first.slice_mut(..records))?;
        Ok(copy.record_event(None)?)
    }
}

pub use crate::compute::GpuBuildOptions;
