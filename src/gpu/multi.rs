//! `kmerdb build` on several GPUs of one machine: one index sharded by feature hash
//! (REFERENCE.md §3, multi-GPU HashGraph and WarpCore's distributed mode).
//!
//! GPU `d` of `n` owns the shards `s` with `s * n / 2^shard_bits == d`, a contiguous range of
//! shards, each an even share of the features (`index::format::shard_of`). Batches go to the GPUs in turn. The GPU that gets a batch uploads it (pinned,
//! double-buffered, as on one GPU), sketches it and sorts each (feature, location) pair by owner
//! (`sketch_split` in `cuda/build.cu`: the partition); each owner copies its stretch over (a peer
//! copy on its own stream: the exchange) and inserts it into its own bucket-list table. Nothing
//! on the way waits on the host but the split's per-owner counts, so batches on different GPUs,
//! and the copies and inserts of one GPU, overlap. At the end every GPU condenses its table at
//! once (`gpu::condense`); a table holds every location of its shards and nothing else, so the
//! shards come out as one GPU or the CPU would write them.
//!
//! Streams per GPU: `copy` (uploads), `split` (sketching), `recv` (incoming peer copies, one per
//! sender) and the
//! GPU's own stream (its table). Events order them; a buffer is freed on a stream that has waited
//! for its last reader.

use crate::build::BuildError;
use crate::build::condense::ShardStats;
use crate::build::sketching::Pending;
use crate::gpu::build::{BATCH_BASES, DeviceBatch, GpuBuildOptions, SketchArgs, Staging, table_config};
use crate::gpu::table::{BucketListTable, launch_config, ptr};
use crate::gpu::{Gpu, GpuError};
use crate::index::LocationLayout;
use crate::index::write::ShardData;
use crate::input::Source;
use crate::sketch::SketchParams;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DeviceRepr, PushKernelArg};
use std::sync::Arc;
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

/// The most GPUs `sketch_split` sorts pairs for (`MAX_SPLIT_GPUS` in `cuda/build.cu`).
pub const MAX_GPUS: usize = 32;

/// The shards GPU `d` of `gpus` owns among `shards`: those with `shard * gpus / shards == d`, a
/// contiguous range (the same rule as `sketch_split` in `cuda/build.cu`).
pub fn owned_shards(d: usize, gpus: usize, shards: usize) -> std::ops::Range<usize> {
    let first = (0..shards).find(|&s| s * gpus / shards == d).unwrap_or(shards);
    let end = (first..shards).find(|&s| s * gpus / shards != d).unwrap_or(shards);
    first..end
}

/// A batch's pairs sorted by owner on the GPU that sketched it: owner `d`'s stretch starts at
/// `d * capacity`.
pub struct Partition {
    pub keys: CudaSlice<u32>,
    pub values: CudaSlice<u64>,
    counts: CudaSlice<u32>,
    pub capacity: u64,
}

impl Partition {
    /// Room for a batch of `windows` windows on `gpus` GPUs, on `stream`.
    pub fn new(stream: &Arc<CudaStream>, windows: u64, sketch_size: u32, gpus: usize) -> Result<Self, GpuError> {
        let capacity = (windows * sketch_size as u64).max(1);
        let total = capacity as usize * gpus;
        Ok(Self {
            keys: stream.alloc_zeros::<u32>(total)?,
            values: stream.alloc_zeros::<u64>(total)?,
            counts: stream.alloc_zeros::<u32>(gpus)?,
            capacity,
        })
    }

    /// Device addresses of owner `d`'s stretch (keys, values).
    pub fn stretch(&self, gpu: &Gpu, d: usize) -> (u64, u64) {
        let at = d as u64 * self.capacity;
        (ptr(gpu, &self.keys) + at * 4, ptr(gpu, &self.values) + at * 8)
    }
}

/// Queues `sketch_split` of `dev` into `out` on `stream` (after zeroing its counts) and returns
/// the pairs per owner, which waits for it.
pub fn partition(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    dev: &DeviceBatch,
    params: &SketchParams,
    shard_bits: u32,
    gpus: usize,
    out: &mut Partition,
) -> Result<Vec<u32>, GpuError> {
    assert!(gpus <= MAX_GPUS, "at most {MAX_GPUS} GPUs");
    assert!(dev.windows * params.sketch_size as u64 <= out.capacity, "the partition has room for the batch");
    stream.memset_zeros(&mut out.counts)?;
    if dev.windows > 0 {
        let split = SplitArgs {
            keys: ptr(gpu, &out.keys),
            values: ptr(gpu, &out.values),
            counts: ptr(gpu, &out.counts),
            capacity: out.capacity,
            gpus: gpus as u32,
            shard_bits,
        };
        let f = gpu.function("sketch_split")?;
        let (b, p) = (dev.args(gpu), SketchArgs::from(params));
        let mut l = stream.launch_builder(&f);
        l.arg(&b).arg(&p).arg(&split);
        // SAFETY: each window writes at most sketch_size pairs, each into its owner's stretch of
        // `capacity` pairs, which holds the whole batch's.
        unsafe { l.launch(launch_config(gpu, dev.windows)) }?;
    }
    Ok(stream.clone_dtoh(&out.counts)?)
}

/// Queues a copy of `bytes` from `src_ptr` on `src` to `dst_ptr` on `dst`, on `stream` (one of
/// `dst`'s). The caller keeps both buffers alive until the stream has passed it.
pub fn queue_peer_copy(
    dst: &Gpu,
    dst_ptr: u64,
    src: &Gpu,
    src_ptr: u64,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    // SAFETY: both ranges are valid device memory for `bytes` (the caller's promise).
    unsafe {
        cudarc::driver::sys::cuMemcpyPeerAsync(
            dst_ptr,
            dst.ctx.cu_ctx(),
            src_ptr,
            src.ctx.cu_ctx(),
            bytes,
            stream.cu_stream(),
        )
        .result()?;
    }
    Ok(())
}

/// Queues the copy of `count` (key, value) pairs from the stretch at `src_pairs` (keys, values) on
/// `src` to `dst_pairs` on `dst`, on `stream` (one of `dst`'s): the exchange of one stretch.
pub fn queue_pairs_copy(
    dst: &Gpu,
    dst_pairs: (u64, u64),
    src: &Gpu,
    src_pairs: (u64, u64),
    count: u64,
    stream: &CudaStream,
) -> Result<(), GpuError> {
    let count = count as usize;
    queue_peer_copy(dst, dst_pairs.0, src, src_pairs.0, count * 4, stream)?;
    queue_peer_copy(dst, dst_pairs.1, src, src_pairs.1, count * 8, stream)
}

/// Condenses GPU `d`'s table (of `gpus`) and keeps the shards it owns, which hold every location of
/// their features: `gpu::condense` of one GPU's share.
#[allow(clippy::too_many_arguments)]
pub fn condense_owned(
    table: &BucketListTable,
    gpu: &Gpu,
    d: usize,
    gpus: usize,
    final_id: &[Option<u32>],
    layout: &LocationLayout,
    cap: u32,
    shard_bits: u32,
) -> Result<Vec<(ShardData, ShardStats)>, BuildError> {
    let mine = owned_shards(d, gpus, 1 << shard_bits);
    let all = crate::gpu::condense::condense(table, gpu, final_id, layout, cap, shard_bits)?;
    Ok(all.into_iter().enumerate().filter(|(s, _)| mine.contains(s)).map(|(_, x)| x).collect())
}

/// A GPU's sketching side: its upload buffers and partitions, used for every other batch in turn.
struct Sender {
    slots: [Option<SendSlot>; 2],
    next: usize,
    copy: Arc<CudaStream>,
    split: Arc<CudaStream>,
}

struct SendSlot {
    staging: Staging,
    partition: Partition,
    /// Recorded by each owner once it has taken its stretch (copied, or inserted in place).
    taken: Vec<CudaEvent>,
}

/// A GPU's owning side: its table, and a stream per sending GPU for the copies from it (copies
/// from several GPUs run at once).
struct Owner<'g> {
    table: BucketListTable<'g>,
    recv: Vec<Arc<CudaStream>>,
}

/// A build across several GPUs.
pub struct MultiBuild<'g> {
    gpus: Vec<&'g Gpu>,
    params: SketchParams,
    shard_bits: u32,
    senders: Vec<Mutex<Sender>>,
    owners: Vec<Mutex<Owner<'g>>>,
    next: AtomicUsize,
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

impl<'g> MultiBuild<'g> {
    /// A table on each GPU, sized for its share of the inputs (a `TooLarge` error, saying what
    /// would fit, when a share does not fit its GPU).
    pub fn new(
        gpus: &'g [Gpu],
        sources: &[Source],
        params: &SketchParams,
        opts: GpuBuildOptions,
        shard_bits: u32,
    ) -> Result<Self, GpuError> {
        if gpus.len() > MAX_GPUS {
            return Err(GpuError::Missing {
                wanted: gpus[MAX_GPUS].ordinal,
                reason: format!("one build uses at most {MAX_GPUS} GPUs"),
            });
        }
        let gpus: Vec<&Gpu> = gpus.iter().collect();
        enable_peer_access(&gpus)?;
        let n = gpus.len() as u64;
        let mut owners = Vec::new();
        let mut senders = Vec::new();
        for g in &gpus {
            let config = table_config(g, sources, params, opts, n)?;
            let recv = gpus.iter().map(|_| g.ctx.new_stream()).collect::<Result<_, _>>()?;
            owners.push(Mutex::new(Owner { table: BucketListTable::new(g, config)?, recv }));
            senders.push(Mutex::new(Sender {
                slots: [None, None],
                next: 0,
                copy: g.ctx.new_stream()?,
                split: g.ctx.new_stream()?,
            }));
        }
        Ok(Self { gpus, params: *params, shard_bits, senders, owners, next: AtomicUsize::new(0) })
    }

    /// Stage 1 for one batch, on the next GPU in turn: upload, partition, then every owner's copy
    /// and insert queued behind it. Returns once the partition's counts are back; the copies and
    /// inserts run on.
    pub fn insert_batch(&self, batch: &[Pending]) -> Result<(), BuildError> {
        let n = self.gpus.len();
        let g = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let gpu = self.gpus[g];
        let mut sender = self.senders[g].lock().expect("no GPU batch panicked");
        let sender = &mut *sender;
        let (copy, split) = (sender.copy.clone(), sender.split.clone());
        let i = sender.next;
        sender.next ^= 1;
        // A slot is reused once every owner has taken its last batch's pairs.
        if let Some(slot) = &mut sender.slots[i] {
            for e in slot.taken.drain(..) {
                e.synchronize().map_err(GpuError::from)?;
            }
        }
        let bases: usize = batch.iter().map(|p| p.seq.len()).sum();
        let windows: u64 = batch.iter().map(|p| self.params.window_count(p.seq.len())).sum();
        let fits = |s: &SendSlot| {
            s.staging.fits(bases, batch.len()) && windows * self.params.sketch_size as u64 <= s.partition.capacity
        };
        if !sender.slots[i].as_ref().is_some_and(fits) {
            sender.slots[i] = None;
            let bases = bases.max(BATCH_BASES);
            let staging = Staging::new(gpu, bases, batch.len().max(1 << 16))?;
            let room = windows.max(self.params.window_count(bases));
            let partition = Partition::new(&split, room, self.params.sketch_size, n)?;
            split.synchronize().map_err(GpuError::from)?;
            sender.slots[i] = Some(SendSlot { staging, partition, taken: Vec::new() });
        }
        let slot = sender.slots[i].as_mut().expect("just made");

        // The partition, once the upload is in.
        let uploaded = slot.staging.stage(&copy, batch, &self.params)?;
        split.wait(&uploaded).map_err(GpuError::from)?;
        let counts =
            partition(gpu, &split, slot.staging.batch(), &self.params, self.shard_bits, n, &mut slot.partition)?;
        // `partition` waited for the kernel: the batch buffers are free again.

        // The exchange and the inserts, queued.
        for (d, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let owner_gpu = self.gpus[d];
            let owner = self.owners[d].lock().expect("no GPU batch panicked");
            let (k, v) = slot.partition.stretch(gpu, d);
            let count = count as u64;
            if d == g {
                // Its own pairs, inserted where they are.
                owner.table.queue_insert(k, v, count)?;
                slot.taken.push(owner_gpu.stream.record_event(None).map_err(GpuError::from)?);
                continue;
            }
            let recv = &owner.recv[g];
            // SAFETY: the copies below fill both before anything reads them.
            let (keys, values) = unsafe { (recv.alloc::<u32>(count as usize), recv.alloc::<u64>(count as usize)) };
            let (keys, values) = (keys.map_err(GpuError::from)?, values.map_err(GpuError::from)?);
            queue_pairs_copy(owner_gpu, (ptr(owner_gpu, &keys), ptr(owner_gpu, &values)), gpu, (k, v), count, recv)?;
            let copied = recv.record_event(None).map_err(GpuError::from)?;
            owner_gpu.stream.wait(&copied).map_err(GpuError::from)?;
            owner.table.queue_insert(ptr(owner_gpu, &keys), ptr(owner_gpu, &values), count)?;
            // The received pairs are freed (on `recv`) once the insert has read them.
            let inserted = owner_gpu.stream.record_event(None).map_err(GpuError::from)?;
            recv.wait(&inserted).map_err(GpuError::from)?;
            drop((keys, values));
            slot.taken.push(copied);
        }
        Ok(())
    }

    /// After the last batch: waits for every queued copy and insert and checks each table's status
    /// word (a full table is an error that says what would fit).
    fn finish(&self) -> Result<(), BuildError> {
        for (d, owner) in self.owners.iter().enumerate() {
            let owner = owner.lock().expect("no GPU batch panicked");
            let status = owner.table.status()?;
            if status.is_error() {
                return Err(owner
                    .table
                    .full(
                        &status,
                        &format!(
                            "GPU {}'s share of the index did not fit; build on more GPUs, on one GPU (which builds in rounds), or on the CPU (--gpus none)",
                            self.gpus[d].ordinal
                        ),
                    )
                    .into());
            }
        }
        for s in &self.senders {
            s.lock().expect("no GPU batch panicked").slots = [None, None];
        }
        Ok(())
    }

    /// Stage 3: every GPU condenses its table at once, each on its own thread; each shard comes
    /// from its owner.
    pub fn condense(
        self,
        final_id: &[Option<u32>],
        layout: &LocationLayout,
        cap: u32,
        shard_bits: u32,
    ) -> Result<Vec<(ShardData, ShardStats)>, BuildError> {
        self.finish()?;
        let (gpus, n) = (&self.gpus, self.gpus.len());
        let parts = std::thread::scope(|scope| {
            let jobs: Vec<_> = self
                .owners
                .into_iter()
                .enumerate()
                .map(|(d, owner)| {
                    scope.spawn(move || {
                        let owner = owner.into_inner().expect("no GPU batch panicked");
                        condense_owned(&owner.table, gpus[d], d, n, final_id, layout, cap, shard_bits)
                    })
                })
                .collect();
            jobs.into_iter().map(|j| j.join().expect("a GPU condense does not panic")).collect::<Result<Vec<_>, _>>()
        })?;
        // Owners in order hold consecutive shard ranges.
        Ok(parts.into_iter().flatten().collect())
    }
}
