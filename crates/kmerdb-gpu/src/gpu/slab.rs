//! The host side of the slab-list dynamic hash table (`cuda/slab_hash.cuh`; its CPU twin and
//! layout are in `crate::slab_hash`): allocation, batches of operations, the status word, and the
//! table's words downloaded for comparison with the twin.

use crate::gpu::address::DevAddr;
use crate::gpu::table::{fill_u32, max_threads};
use crate::gpu::{Gpu, GpuError};
use crate::slab_hash::{SLAB_BLOCK_SLABS, SLAB_EMPTY, SLAB_WORDS, SlabConfig, SlabMemory, SlabOp};
use cudarc::driver::{CudaModule, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Kernel view of a table; must match `struct SlabTable` in `cuda/slab_hash.cuh`. It holds
/// device addresses, so it borrows the table it was made from: it cannot outlive the buffers.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct SlabTableArgs<'t> {
    buckets: DevAddr<'t>,
    pool: DevAddr<'t>,
    bitmaps: DevAddr<'t>,
    status: DevAddr<'t>,
    bucket_count: u32,
    block_count: u32,
    seed: u32,
    _pad: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for SlabTableArgs<'_> {}
const _: () = assert!(std::mem::size_of::<SlabTableArgs>() == 48);

/// How a batch runs: each warp of a full-size launch taking its share (the hardware decides the
/// order), or one warp doing every operation in order, as the CPU twin does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warps {
    All,
    One,
}

/// A slab table on one GPU.
pub struct DeviceSlabTable<'g> {
    gpu: &'g Gpu,
    /// `cuda/slab_hash.cuh`, compiled for this GPU (`kernels::slab_source`: not in kmerdb's unit).
    module: Arc<CudaModule>,
    config: SlabConfig,
    buckets: CudaSlice<u32>,
    pool: CudaSlice<u32>,
    bitmaps: CudaSlice<u32>,
    status: CudaSlice<u32>,
}

/// A batch of operations on the device, in the kernel's encoding.
pub struct DeviceOps {
    ops: CudaSlice<u32>,
    keys: CudaSlice<u32>,
    values: CudaSlice<u32>,
    pub results: CudaSlice<u32>,
    pub len: usize,
}

impl DeviceOps {
    pub fn upload(gpu: &Gpu, ops: &[SlabOp]) -> Result<Self, GpuError> {
        let (mut codes, mut keys, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for op in ops {
            let (c, k, v) = op.encode();
            codes.push(c);
            keys.push(k);
            values.push(v);
        }
        let s = &gpu.stream;
        Ok(Self {
            ops: s.clone_htod(&codes)?,
            keys: s.clone_htod(&keys)?,
            values: s.clone_htod(&values)?,
            results: s.alloc_zeros::<u32>(ops.len().max(1))?,
            len: ops.len(),
        })
    }
}

impl<'g> DeviceSlabTable<'g> {
    /// An empty table: every slab all ones, no pool slab taken.
    pub fn new(gpu: &'g Gpu, config: SlabConfig) -> Result<Self, GpuError> {
        let (free, _) = gpu.memory()?;
        if config.bytes() > free as u64 {
            return Err(GpuError::OutOfMemory { ordinal: gpu.ordinal, free, needed: config.bytes() });
        }
        let s = &gpu.stream;
        let mut buckets = s.alloc_zeros::<u32>(config.buckets as usize * SLAB_WORDS)?;
        let mut pool = s.alloc_zeros::<u32>(config.blocks as usize * SLAB_BLOCK_SLABS * SLAB_WORDS)?;
        fill_u32(gpu, &mut buckets, SLAB_EMPTY)?;
        fill_u32(gpu, &mut pool, SLAB_EMPTY)?;
        let bitmaps = s.alloc_zeros::<u32>(config.blocks as usize * 32)?;
        let status = s.alloc_zeros::<u32>(1)?;
        let (cubin, _) =
            crate::gpu::kernels::cubin_of(&crate::gpu::kernels::slab_source(), "slab_hash.cuh", &gpu.arch)?;
        let module = gpu.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        Ok(Self { gpu, module, config, buckets, pool, bitmaps, status })
    }

    pub fn config(&self) -> SlabConfig {
        self.config
    }

    fn args(&self) -> SlabTableArgs<'_> {
        let g = self.gpu;
        SlabTableArgs {
            buckets: DevAddr::of(g, &self.buckets),
            pool: DevAddr::of(g, &self.pool),
            bitmaps: DevAddr::of(g, &self.bitmaps),
            status: DevAddr::of(g, &self.status),
            bucket_count: self.config.buckets,
            block_count: self.config.blocks,
            seed: self.config.seed,
            _pad: 0,
        }
    }

    /// Launches `slab_apply` on `batch` (results into `batch.results`) and returns without
    /// waiting; the table's and the batch's buffers are used on the table's GPU stream, where any
    /// later use or free of them is ordered after it.
    pub fn launch(&mut self, batch: &mut DeviceOps, warps: Warps) -> Result<(), GpuError> {
        if batch.len == 0 {
            return Ok(());
        }
        let config = match warps {
            Warps::One => LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 },
            Warps::All => {
                let threads = (batch.len as u64).min(max_threads(self.gpu) as u64).div_ceil(32) * 32;
                let blocks = threads.div_ceil(256) as u32;
                LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
            }
        };
        let args = self.args();
        let n = batch.len as u64;
        let f = self.module.load_function("slab_apply")?;
        let mut b = self.gpu.stream.launch_builder(&f);
        b.arg(&args).arg(&batch.ops).arg(&batch.keys).arg(&batch.values).arg(&n).arg(&mut batch.results);
        // SAFETY: `slab_apply` takes (SlabTable, ops, keys, values, n, results), each array of n
        // entries; the table's buffers live as long as `self`, which the launch borrows, and are
        // freed on this stream, after the kernel.
        unsafe { b.launch(config) }?;
        Ok(())
    }

    /// Uploads `ops`, runs them and returns their results.
    pub fn apply(&mut self, ops: &[SlabOp], warps: Warps) -> Result<Vec<u32>, GpuError> {
        let mut batch = DeviceOps::upload(self.gpu, ops)?;
        self.launch(&mut batch, warps)?;
        let mut results = self.gpu.stream.clone_dtoh(&batch.results)?;
        results.truncate(ops.len());
        Ok(results)
    }

    /// The status word (`STATUS_SLAB_*` bits of `crate::slab_hash`).
    pub fn status(&self) -> Result<u32, GpuError> {
        Ok(self.gpu.stream.clone_dtoh(&self.status)?[0])
    }

    /// Slabs of the pool taken (bits set in the allocator's bitmaps).
    pub fn pool_slabs_taken(&self) -> Result<u64, GpuError> {
        let words = self.gpu.stream.clone_dtoh(&self.bitmaps)?;
        Ok(words.iter().map(|w| w.count_ones() as u64).sum())
    }

    /// Every word of the table, to compare with the CPU twin or to read its contents.
    pub fn download(&self) -> Result<SlabMemory, GpuError> {
        let s = &self.gpu.stream;
        Ok(SlabMemory {
            config: self.config,
            buckets: s.clone_dtoh(&self.buckets)?,
            pool: s.clone_dtoh(&self.pool)?,
            bitmaps: s.clone_dtoh(&self.bitmaps)?,
            status: s.clone_dtoh(&self.status)?[0],
        })
    }
}
