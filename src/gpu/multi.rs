//! `kmerdb build` on several GPUs of one machine: one index sharded by feature hash range
//! (REFERENCE.md §3, multi-GPU HashGraph and WarpCore's distributed mode).
//!
//! GPU `d` of `n` owns the shards `s` with `s * n / 2^shard_bits == d`, a contiguous range of
//! feature hashes. Batches go to the GPUs in turn; the GPU that gets a batch sketches it and sorts
//! each (feature, location) pair by owner (`sketch_split` in `cuda/build.cu`), then every owner
//! copies its pairs over (peer copies) and inserts them into its own bucket-list table. At the end
//! each GPU condenses its table (`gpu::condense`), which holds every location of its shards and
//! nothing else, so the shards come out as one GPU or the CPU would write them.

use crate::build::BuildError;
use crate::build::condense::ShardStats;
use crate::build::sketching::Pending;
use crate::gpu::build::{DeviceBatch, GpuBuildOptions, SketchArgs, table_config};
use crate::gpu::table::{BucketListTable, launch_config, ptr};
use crate::gpu::{Gpu, GpuError};
use crate::index::LocationLayout;
use crate::index::write::ShardData;
use crate::input::Source;
use crate::sketch::SketchParams;
use cudarc::driver::{DeviceRepr, PushKernelArg};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Kernel view of the split's outputs; must match `struct Split` in `cuda/build.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct SplitArgs {
    keys: u64,
    values: u64,
    counts: u64,
    capacity: u64,
    gpus: u32,
    shard_bits: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for SplitArgs {}

/// The shards GPU `d` of `gpus` owns among `shards`: those with `shard * gpus / shards == d`, a
/// contiguous range (the same rule as `sketch_split` in `cuda/build.cu`).
pub fn owned_shards(d: usize, gpus: usize, shards: usize) -> std::ops::Range<usize> {
    let first = (0..shards).find(|&s| s * gpus / shards == d).unwrap_or(shards);
    let end = (first..shards).find(|&s| s * gpus / shards != d).unwrap_or(shards);
    first..end
}

/// A build across several GPUs.
pub struct MultiBuild<'g> {
    gpus: Vec<&'g Gpu>,
    params: SketchParams,
    shard_bits: u32,
    /// Each GPU's table (its shards' pairs), one lock each.
    tables: Vec<Mutex<BucketListTable<'g>>>,
    /// Each GPU's sketching, one batch at a time.
    sketchers: Vec<Mutex<()>>,
    next: AtomicUsize,
}

/// Lets every GPU read the others' memory directly (a peer copy without it goes through the host,
/// about a tenth as fast: REFERENCE.md §6). Two grants are needed: peer access between contexts,
/// and access to each device's default memory pool, from which cudarc allocates (stream-ordered
/// allocations are not covered by peer access).
pub(crate) fn enable_peer_access(gpus: &[&Gpu]) -> Result<(), GpuError> {
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

impl<'g> MultiBuild<'g> {
    /// A table on each GPU, sized for its share of the inputs.
    pub fn new(
        gpus: &'g [Gpu],
        sources: &[Source],
        params: &SketchParams,
        opts: GpuBuildOptions,
        shard_bits: u32,
    ) -> Result<Self, GpuError> {
        let gpus: Vec<&Gpu> = gpus.iter().collect();
        enable_peer_access(&gpus)?;
        let n = gpus.len() as u64;
        let tables = gpus
            .iter()
            .map(|g| {
                // A GPU's share, and half as much again: shares differ a little, and without
                // rounds (not implemented for several GPUs) a full table stops the build. Measured:
                // a tenth more was not enough for the 2 Gbp synthetic benchmark on 2 GPUs.
                let config = table_config(g, sources, params, opts, n)?;
                let mut c = config;
                if opts.key_slots.is_none() {
                    c.key_slots = c.key_slots * 3 / 2;
                }
                if opts.pool_slots.is_none() {
                    c.pool_slots = (c.pool_slots * 3 / 2).min(u32::MAX as u64);
                }
                BucketListTable::new(g, c).map(Mutex::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            sketchers: gpus.iter().map(|_| Mutex::new(())).collect(),
            gpus,
            params: *params,
            shard_bits,
            tables,
            next: AtomicUsize::new(0),
        })
    }

    /// The shards GPU `d` owns.
    fn owned(&self, d: usize) -> std::ops::Range<usize> {
        owned_shards(d, self.gpus.len(), 1 << self.shard_bits)
    }

    /// Stage 1 for one batch: sketched on the next GPU in turn, its pairs sent to their owners.
    pub fn insert_batch(&self, batch: &[Pending]) -> Result<(), BuildError> {
        let n = self.gpus.len();
        let g = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let gpu = self.gpus[g];
        let s = &gpu.stream;
        let (keys, values, counts, capacity) = {
            let _sketching = self.sketchers[g].lock().expect("no GPU batch panicked");
            let dev = DeviceBatch::upload(gpu, batch, &self.params)?;
            let capacity = (dev.windows * self.params.sketch_size as u64).max(1);
            let total = capacity as usize * n;
            let keys = s.alloc_zeros::<u32>(total).map_err(GpuError::from)?;
            let values = s.alloc_zeros::<u64>(total).map_err(GpuError::from)?;
            let counts = s.alloc_zeros::<u32>(n).map_err(GpuError::from)?;
            let split = SplitArgs {
                keys: ptr(gpu, &keys),
                values: ptr(gpu, &values),
                counts: ptr(gpu, &counts),
                capacity,
                gpus: n as u32,
                shard_bits: self.shard_bits,
            };
            if dev.windows > 0 {
                let f = gpu.function("sketch_split")?;
                let (b, p) = (dev.args(gpu), SketchArgs::from(&self.params));
                let mut l = s.launch_builder(&f);
                l.arg(&b).arg(&p).arg(&split);
                // SAFETY: each window writes at most sketch_size pairs, each into its owner's
                // stretch of `capacity` pairs.
                unsafe { l.launch(launch_config(gpu, dev.windows)) }.map_err(GpuError::from)?;
            }
            let counts: Vec<u32> = s.clone_dtoh(&counts).map_err(GpuError::from)?;
            (keys, values, counts, capacity)
        };
        // Each owner copies its stretch over and inserts it.
        for (d, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let owner = self.gpus[d];
            let mut table = self.tables[d].lock().expect("no GPU batch panicked");
            let at = d as u64 * capacity;
            let (k, v) = if d == g {
                let s = &owner.stream;
                (
                    s.clone_dtod(&keys.slice(at as usize..(at as usize + count as usize))).map_err(GpuError::from)?,
                    s.clone_dtod(&values.slice(at as usize..(at as usize + count as usize))).map_err(GpuError::from)?,
                )
            } else {
                (
                    peer_copy(owner, gpu, ptr(gpu, &keys) + at * 4, count as usize)?,
                    peer_copy(owner, gpu, ptr(gpu, &values) + at * 8, count as usize)?,
                )
            };
            table.insert_device_pairs(&k, &v, count as u64)?;
            let status = table.status()?;
            if status.is_error() {
                return Err(GpuError::TableFull {
                    what: status.describe(),
                    needed: format!(
                        "GPU {}'s share of the index ({} key slots, {} value slots); build on fewer, larger GPUs, or on the CPU (--gpus none)",
                        owner.ordinal,
                        table.key_slots(),
                        table.config().pool_slots
                    ),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Stage 3: every GPU condenses its table; each shard comes from its owner.
    pub fn condense(
        self,
        final_id: &[Option<u32>],
        layout: &LocationLayout,
        cap: u32,
        shard_bits: u32,
    ) -> Result<Vec<(ShardData, ShardStats)>, BuildError> {
        let mut shards: Vec<Option<(ShardData, ShardStats)>> = (0..1usize << shard_bits).map(|_| None).collect();
        let owned: Vec<std::ops::Range<usize>> = (0..self.gpus.len()).map(|d| self.owned(d)).collect();
        for (d, table) in self.tables.into_iter().enumerate() {
            let table = table.into_inner().expect("no GPU batch panicked");
            let all = crate::gpu::condense::condense(&table, self.gpus[d], final_id, layout, cap, shard_bits)?;
            let mut all: Vec<Option<_>> = all.into_iter().map(Some).collect();
            for sh in owned[d].clone() {
                shards[sh] = all[sh].take();
            }
        }
        Ok(shards.into_iter().map(|s| s.expect("every shard has an owner")).collect())
    }
}

/// `count` items from `src_ptr` on `src` to a new buffer on `dst`, on `dst`'s stream.
fn peer_copy<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    dst: &Gpu,
    src: &Gpu,
    src_ptr: u64,
    count: usize,
) -> Result<cudarc::driver::CudaSlice<T>, GpuError> {
    let s = &dst.stream;
    let out = s.alloc_zeros::<T>(count)?;
    let bytes = count * std::mem::size_of::<T>();
    // SAFETY: `src_ptr` points at `count` items on `src` that live until the copy is done (the
    // caller synchronizes below); `out` holds `count` items on `dst`.
    unsafe {
        cudarc::driver::sys::cuMemcpyPeerAsync(
            ptr(dst, &out),
            dst.ctx.cu_ctx(),
            src_ptr,
            src.ctx.cu_ctx(),
            bytes,
            s.cu_stream(),
        )
        .result()?;
    }
    s.synchronize()?;
    Ok(out)
}
