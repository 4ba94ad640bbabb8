//! `kmerdb build` on one GPU.
//!
//! Stage 1 (`GpuBuild::insert_batch`): each batch of sequences read on the host goes to the GPU,
//! where one fused kernel (`build_insert_g*` in `cuda/build.cu`) sketches every window and inserts
//! each (feature, provisional target, window) into the bucket-list table. The status word is read
//! after every batch: a full table or pool stops the build with a message, never silently.
//!
//! Stage 3 (`GpuBuild::condense`, in `gpu::condense`): once targets have their final numbers, the
//! GPU lays out every shard's key index and list stream, with the CPU build's bytes.

use crate::build::BuildError;
use crate::build::condense::ShardStats;
use crate::build::sketching::Pending;
use crate::gpu::table::{BucketListTable, TableConfig, launch_config, ptr};
use crate::gpu::{Gpu, GpuError};
use crate::index::LocationLayout;
use crate::index::write::ShardData;
use crate::input::Source;
use crate::sketch::SketchParams;
use cudarc::driver::{CudaEvent, CudaStream, DeviceRepr, PinnedHostSlice, PushKernelArg};
use std::sync::{Arc, Mutex};

/// Bases sent to the GPU per batch.
pub const BATCH_BASES: usize = 64 << 20;

/// Kernel view of a batch; must match `struct Batch` in `cuda/build.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchArgs {
    seq: u64,
    offset: u64,
    len: u64,
    target: u64,
    first_window: u64,
    records: u32,
    _pad: u32,
    windows: u64,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for BatchArgs {}

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
    records: u32,
    pub windows: u64,
}

impl DeviceBatch {
    /// Uploads sequences with their targets.
    pub fn upload(gpu: &Gpu, batch: &[Pending], params: &SketchParams) -> Result<Self, GpuError> {
        let total: usize = batch.iter().map(|p| p.seq.len()).sum();
        let mut seq = Vec::with_capacity(total);
        let (mut offset, mut len, mut target, mut first_window) = (Vec::new(), Vec::new(), Vec::new(), vec![0u64]);
        for p in batch {
            offset.push(seq.len() as u64);
            len.push(p.seq.len() as u32);
            target.push(p.target);
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
            records: batch.len() as u32,
            windows,
        })
    }

    pub(crate) fn args(&self, gpu: &Gpu) -> BatchArgs {
        BatchArgs {
            seq: ptr(gpu, &self.seq),
            offset: ptr(gpu, &self.offset),
            len: ptr(gpu, &self.len),
            target: ptr(gpu, &self.target),
            first_window: ptr(gpu, &self.first_window),
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
    dev: DeviceBatch,
    /// Recorded after the last kernel that read `dev`.
    done: Option<CudaEvent>,
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
            )
        };
        let dev = DeviceBatch {
            seq: s.alloc_zeros::<u8>(bases)?,
            offset: s.alloc_zeros::<u64>(records)?,
            len: s.alloc_zeros::<u32>(records)?,
            target: s.alloc_zeros::<u32>(records)?,
            first_window: s.alloc_zeros::<u64>(records + 1)?,
            records: 0,
            windows: 0,
        };
        // The copy stream writes these buffers: their allocation must be complete first.
        s.synchronize()?;
        let (seq, offset, len, target, first_window) = pinned;
        Ok(Self { seq, offset, len, target, first_window, dev, done: None })
    }

    pub(crate) fn fits(&self, bases: usize, records: usize) -> bool {
        bases <= self.seq.len() && records <= self.len.len()
    }

    /// The batch last staged, on the device.
    pub(crate) fn batch(&self) -> &DeviceBatch {
        &self.dev
    }

    /// Packs `batch` into pinned memory and queues its upload on `copy`; returns the event the
    /// kernel must wait for.
    pub(crate) fn stage(
        &mut self,
        copy: &Arc<CudaStream>,
        batch: &[Pending],
        params: &SketchParams,
    ) -> Result<CudaEvent, GpuError> {
        if let Some(done) = self.done.take() {
            done.synchronize()?;
        }
        let (seq, offset, len, target, first_window) = (
            self.seq.as_mut_slice()?,
            self.offset.as_mut_slice()?,
            self.len.as_mut_slice()?,
            self.target.as_mut_slice()?,
            self.first_window.as_mut_slice()?,
        );
        // Pinned memory is write-combined: written once in order, never read back.
        let (mut at, mut windows) = (0usize, 0u64);
        first_window[0] = 0;
        for (r, p) in batch.iter().enumerate() {
            seq[at..at + p.seq.len()].copy_from_slice(&p.seq);
            offset[r] = at as u64;
            len[r] = p.seq.len() as u32;
            target[r] = p.target;
            windows += params.window_count(p.seq.len());
            first_window[r + 1] = windows;
            at += p.seq.len();
        }
        let records = batch.len();
        let d = &mut self.dev;
        copy.memcpy_htod(&seq[..at], &mut d.seq.slice_mut(..at))?;
        copy.memcpy_htod(&offset[..records], &mut d.offset.slice_mut(..records))?;
        copy.memcpy_htod(&len[..records], &mut d.len.slice_mut(..records))?;
        copy.memcpy_htod(&target[..records], &mut d.target.slice_mut(..records))?;
        copy.memcpy_htod(&first_window[..=records], &mut d.first_window.slice_mut(..=records))?;
        d.records = records as u32;
        d.windows = windows;
        Ok(copy.record_event(None)?)
    }
}

pub use crate::compute::GpuBuildOptions;

/// A GPU build in progress.
pub struct GpuBuild<'g> {
    gpu: &'g Gpu,
    params: SketchParams,
    shard_bits: u32,
    /// Batches arrive from several reading threads; the GPU takes them one at a time.
    table: Mutex<Rounds<'g>>,
}

/// The table and what earlier rounds flushed from it.
struct Rounds<'g> {
    table: BucketListTable<'g>,
    /// First global window of each provisional target seen so far (see `build::sketching::Pair`).
    first_window: Vec<u64>,
    /// Per-shard bins of the flushed rounds, in the CPU build's form; empty while everything fits.
    bins: Vec<crate::build::sketching::Bin>,
    rounds: usize,
    /// Values inserted since the last flush: an upper bound of the keys in use.
    inserted: u64,
    /// Double-buffered uploads: batch i is copied into `staging[i % 2]` on `copy` while batch
    /// i - 1 is inserted.
    staging: [Option<Staging>; 2],
    next: usize,
    copy: Arc<CudaStream>,
}

/// What stage 1 on the GPU leaves: the table, or (after rounds) host bins for the CPU condense.
pub enum Inserted<'g> {
    Table(GpuBuild<'g>),
    Bins(Vec<crate::build::sketching::Bin>),
}

/// Bases the inputs hold, guessed from their sizes (compressed files count 4 bases a byte).
fn estimate_bases(sources: &[Source]) -> Option<u64> {
    if sources.is_empty() {
        return None;
    }
    let mut total = 0u64;
    for s in sources {
        let Source::File(p) = s else { return None };
        let size = std::fs::metadata(p).ok()?.len();
        let mut magic = [0u8; 4];
        let n = std::fs::File::open(p).and_then(|mut f| std::io::Read::read(&mut f, &mut magic)).unwrap_or(0);
        let compressed = n >= 2 && (magic[..2] == [0x1f, 0x8b] || magic[..2] == [b'B', b'Z'])
            || n >= 4 && (magic == [0xfd, b'7', b'z', b'X'] || magic == [0x28, 0xb5, 0x2f, 0xfd]);
        total += if compressed { size * 4 } else { size };
    }
    Some(total)
}

/// Device bytes a table takes per value it is sized for: 2 pool slots (first buckets of 2, growth
/// 1.5, links) of 8 bytes and 0.75 key slots of 12 bytes.
const TABLE_BYTES_PER_VALUE: u64 = 25;

/// The table for GPU `gpu`'s share of the inputs' values when `shares` GPUs split them: sized from
/// the inputs (or from free memory for stdin), at most 70% of the free memory. One GPU builds in
/// rounds when its table fills; several cannot, so for them a share that does not fit is a
/// `TooLarge` error that says how many such GPUs would hold it.
pub fn table_config(
    gpu: &Gpu,
    sources: &[Source],
    params: &SketchParams,
    opts: GpuBuildOptions,
    shares: u64,
) -> Result<TableConfig, GpuError> {
    let (free, _) = gpu.memory()?;
    let fit_values = (free as u64 * 7 / 10) / TABLE_BYTES_PER_VALUE;
    let bases = estimate_bases(sources);
    let estimate = bases.map(|bases| {
        let all = (bases / params.stride as u64 + 1) * params.sketch_size as u64 * 11 / 10;
        // A share, and half as much again: shares differ a little, and a full table stops a
        // build on several GPUs. Measured: a tenth more was not enough for the 2 Gbp synthetic
        // benchmark on 2 GPUs.
        let share = if shares > 1 { all * 3 / 2 / shares } else { all };
        share + (1 << 20)
    });
    if let (Some(wanted), Some(bases), true) = (estimate, bases, shares > 1 && opts.pool_slots.is_none()) {
        if wanted > fit_values {
            let would = (wanted * shares).div_ceil(fit_values);
            return Err(GpuError::TooLarge {
                what: format!("the build table for about {:.2} Gbp of sequence", bases as f64 / 1e9),
                per_gpu: wanted * TABLE_BYTES_PER_VALUE * 10 / 7,
                gpus: shares as usize,
                ordinal: gpu.ordinal,
                free: free as u64,
                advice: format!(
                    "it would fit on {would} GPUs with as much free memory; or build on one GPU (--gpus {}), which builds in rounds through host memory, or on the CPU (--gpus none)",
                    gpu.ordinal
                ),
            });
        }
    }
    let values = estimate.unwrap_or(fit_values).min(fit_values);
    let mut config = TableConfig::new((values * 3 / 4).max(1 << 16), (2 * values).min(u32::MAX as u64));
    if let Some(k) = opts.key_slots {
        config.key_slots = k;
    }
    if let Some(p) = opts.pool_slots {
        config.pool_slots = p;
    }
    if let Some(g) = opts.group {
        config.group = g;
    }
    log::debug!(
        "GPU {} ({}): table of {} key slots and {} value slots, groups of {}",
        gpu.ordinal,
        gpu.name,
        config.key_slots,
        config.pool_slots,
        config.group
    );
    Ok(config)
}

impl<'g> GpuBuild<'g> {
    /// Sizes the table from the inputs (or from free memory for stdin) and allocates it.
    pub fn new(
        gpu: &'g Gpu,
        sources: &[Source],
        params: &SketchParams,
        opts: GpuBuildOptions,
    ) -> Result<Self, GpuError> {
        let config = table_config(gpu, sources, params, opts, 1)?;
        let table = BucketListTable::new(gpu, config)?;
        let rounds = Rounds {
            table,
            first_window: Vec::new(),
            bins: Vec::new(),
            rounds: 0,
            inserted: 0,
            staging: [None, None],
            next: 0,
            copy: gpu.ctx.new_stream()?,
        };
        Ok(Self {
            gpu,
            params: *params,
            shard_bits: crate::index::format::DEFAULT_SHARD_BITS,
            table: Mutex::new(rounds),
        })
    }

    /// Stage 1 for one batch: upload, sketch and insert. The upload overlaps the insertion of the
    /// batch before, whose status word is read meanwhile. When the pool might not hold this batch,
    /// the table's contents are first flushed to host memory (a round).
    pub fn insert_batch(&self, batch: &[Pending]) -> Result<(), BuildError> {
        // One lock from the room check to the insert: batches from other reading threads must not
        // slip in between and fill the room this one was promised.
        let mut guard = self.table.lock().expect("no GPU batch panicked");
        let r = &mut *guard;
        for p in batch {
            let t = p.target as usize;
            if r.first_window.len() <= t {
                r.first_window.resize(t + 1, 0);
            }
            r.first_window[t] = p.first_window;
        }
        // 1. Upload on the copy stream.
        let (bases, records) = (batch.iter().map(|p| p.seq.len()).sum::<usize>(), batch.len());
        let slot = r.next;
        r.next ^= 1;
        if !r.staging[slot].as_ref().is_some_and(|st| st.fits(bases, records)) {
            r.staging[slot] = None;
            r.staging[slot] = Some(Staging::new(self.gpu, bases.max(BATCH_BASES), records.max(1 << 16))?);
        }
        let staging = r.staging[slot].as_mut().expect("just made");
        let uploaded = staging.stage(&r.copy, batch, &self.params)?;

        // 2. Meanwhile, the status of the batches before (this waits for the last kernel), and
        // room for this one. Each window adds at most sketch_size values and keys, each value
        // taking at most 2 pool slots; keys are kept below 90% of the slots so that probing stays
        // short.
        let status = self.check_status(&r.table)?;
        let windows: u64 = batch.iter().map(|p| self.params.window_count(p.seq.len())).sum();
        let values = windows * self.params.sketch_size as u64;
        let key_room = r.table.key_slots() * 9 / 10;
        let pool_short = r.table.pool_free(&status) < 2 * values;
        let keys_short = r.inserted + values > key_room && r.table.occupied_keys()? + values > key_room;
        if (pool_short || keys_short) && status.pool_used > 0 {
            self.flush(r)?;
        }
        r.inserted += values;

        // 3. The kernel, once the upload is in.
        self.gpu.stream.wait(&uploaded).map_err(GpuError::from)?;
        let staging = r.staging[slot].as_mut().expect("staged above");
        self.launch_insert(&r.table, &staging.dev)?;
        staging.done = Some(self.gpu.stream.record_event(None).map_err(GpuError::from)?);
        Ok(())
    }

    /// Waits for the table's work and reads its status word: a full table or pool is an error.
    fn check_status(&self, table: &BucketListTable) -> Result<crate::gpu::table::TableStatus, BuildError> {
        let status = table.status()?;
        if status.is_error() {
            // Rounds flush before a batch could overflow, so this is one batch too large.
            return Err(table.full(&status, "one batch needs more than the table holds; build on the CPU (--gpus none) or a GPU with more memory").into());
        }
        Ok(status)
    }

    /// Moves the table's contents to host bins as (feature, global window) pairs and empties it.
    fn flush(&self, r: &mut Rounds<'g>) -> Result<(), BuildError> {
        use crate::build::sketching::{BIN_CHUNK, Pair};
        if r.bins.is_empty() {
            r.bins = (0..1usize << self.shard_bits).map(|_| Vec::new()).collect();
        }
        let (lists, values) = r.table.drain_pairs()?;
        let mut at = 0usize;
        for l in &lists {
            let shard = crate::index::format::shard_of(l.key, self.shard_bits);
            for &v in &values[at..at + l.count as usize] {
                let window = r.first_window[(v >> 32) as usize] + (v & 0xffff_ffff);
                let window = u32::try_from(window).map_err(|_| BuildError::TooManyWindows)?;
                let bin = &mut r.bins[shard];
                if bin.last().is_none_or(|c| c.len() == BIN_CHUNK) {
                    bin.push(Vec::with_capacity(BIN_CHUNK));
                }
                bin.last_mut().expect("a chunk was just ensured").push(Pair { feature: l.key, window });
            }
            at += l.count as usize;
        }
        r.table.clear()?;
        r.rounds += 1;
        r.inserted = 0;
        log::info!(
            "GPU {}: table full, round {} flushed to host memory ({} values)",
            self.gpu.ordinal,
            r.rounds,
            values.len()
        );
        Ok(())
    }

    /// After the last batch: the table as it is, or, if rounds were flushed, everything in host bins
    /// for the CPU condense (which gives the same bytes).
    pub fn finish(self) -> Result<Inserted<'g>, BuildError> {
        let mut r = self.table.lock().expect("no GPU batch panicked");
        // The last batch's status.
        self.check_status(&r.table)?;
        r.staging = [None, None];
        if r.rounds == 0 {
            drop(r);
            return Ok(Inserted::Table(self));
        }
        self.flush(&mut r)?;
        Ok(Inserted::Bins(std::mem::take(&mut r.bins)))
    }

    /// Runs the fused kernel on a batch already on the device and checks the status word (the
    /// benchmark's entry point).
    pub fn insert_uploaded(&self, dev: &DeviceBatch) -> Result<(), BuildError> {
        let r = self.table.lock().expect("no GPU batch panicked");
        self.launch_insert(&r.table, dev)?;
        self.check_status(&r.table)?;
        Ok(())
    }

    fn launch_insert(&self, table: &BucketListTable, dev: &DeviceBatch) -> Result<(), BuildError> {
        let gpu = self.gpu;
        if dev.windows > 0 {
            let f = gpu.function(&format!("build_insert_g{}", table.config().group))?;
            let (b, p, t) = (dev.args(gpu), SketchArgs::from(&self.params), table.args());
            let mut l = gpu.stream.launch_builder(&f);
            l.arg(&b).arg(&p).arg(&t);
            // SAFETY: reads the batch, writes only the table.
            unsafe { l.launch(launch_config(gpu, dev.windows)) }.map_err(GpuError::from)?;
        }
        Ok(())
    }

    /// Stage 3: the shards, from the table and the final target numbers (`gpu::condense`).
    pub fn condense(
        self,
        final_id: &[Option<u32>],
        layout: &LocationLayout,
        cap: u32,
        shard_bits: u32,
    ) -> Result<Vec<(ShardData, ShardStats)>, BuildError> {
        let table = self.table.into_inner().expect("no GPU batch panicked").table;
        crate::gpu::condense::condense(&table, self.gpu, final_id, layout, cap, shard_bits)
    }
}
