//! `kmerdb build` on one GPU or several: the inputs read into (feature, window) pairs, then the
//! index's shards built in passes that fit the GPUs' memory, each written to the index file as
//! soon as it is laid out.
//!
//! **Reading** ([`PassBuild::insert_batch`], called by the reading threads). Each batch goes to
//! the next GPU in turn: uploaded through pinned, double-buffered staging, then sketched by
//! `sketch_split` (`cuda/build.cu`), which packs every pair as (feature, global window) in 8 bytes
//! into the stretch of the GPU that owns the feature's shard (`shard % gpus`) and counts every
//! shard's pairs. The owner keeps each stretch as a block: in its own memory while its share of
//! the pair budget lasts, else in pinned host memory, else in a spill file (`--tmp-dir`). Blocks
//! kept off the GPU are first sorted by shard (`count_shards`, `scatter_by_shard`), so that a
//! pass copies back only its shards' stretch.
//!
//! **Passes** ([`PassBuild::run_passes`]). Once the targets have their final numbers and every
//! shard's exact pair count is known, the 64 shards are cut into passes: runs of consecutive
//! shards whose pairs fit every GPU's free memory at [`PASS_BYTES_PER_VALUE`]. Owners are
//! round-robin, so every pass has work for every GPU. In a pass, each GPU (on its own thread)
//! selects its shards' pairs from its blocks (`select_pass`, which also turns the global window
//! back into target and window), inserts them into a bucket-list table sized for exactly that many
//! values, condenses it (`gpu::condense`) and downloads the shards into pinned buffers. Meanwhile
//! the build's stage 3 (`indexing`'s, which owns the index file and runs the pipeline) takes the
//! shards in shard order ([`ShardArrivals`]), finishes them side by side (leftover keys, layout,
//! checksum: [`ShardFinisher`]) and writes them. Nothing is refused for lack of GPU memory but a
//! single shard larger than a GPU can hold (about a 64th of 450 Gbp on an 80 GB GPU).
//!
//! A table is sized for every value it is given, so a full one is a bug, and an error; the status
//! word is read after every insert.

use crate::compute::GpuBuildOptions;
use crate::gpu::address::DevAddr;
use crate::gpu::build::{BATCH_BASES, SketchArgs, Staging};
use crate::gpu::pinned::{HostBuffer, copy_async};
use crate::gpu::table::{BucketListTable, TableConfig, launch_config};
use crate::gpu::{Gpu, GpuError};
use crate::index::bcht::KeyHash;
use crate::index::clade_lists::CladeLists;
use crate::index::condensed::ShardStats;
use crate::index::stored_shard::{self, StoredShard};
use crate::index::{GlobalWindows, LocationLayout};
use crate::input::Source;
use crate::resources::human_bytes;
use crate::sketch::Pending;
use crate::sketch::SketchParams;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, PushKernelArg};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// GPU memory a pass needs per value, worst case (every value a distinct key): the selected pairs
/// (12 bytes) and the table (about 30: key slots for all at load 0.9, two pool slots each) while
/// inserting; the table and the condense's arrays (about 49, 4 of them the lists' code bits) after.
/// The peak is the second.
pub const PASS_BYTES_PER_VALUE: u64 = 80;
/// GPU memory kept free beside a pass's arrays: kernels' stacks, scans, small tables.
pub const PASS_RESERVE: u64 = 1 << 30;
/// A table's pool offsets are 32-bit and a value may take two slots: the most values a pass can
/// give one GPU.
const MAX_PASS_VALUES: u64 = 2_000_000_000;
/// Of each GPU's free memory when the build starts, the share pairs may fill while reading.
const DEVICE_PAIR_SHARE: f64 = 0.45;
/// Of the host's available memory, the share pairs may fill before they go to spill files.
const HOST_PAIR_SHARE: f64 = 0.5;
/// The most GPUs `sketch_split` splits for (`MAX_SPLIT_GPUS` in `cuda/build.cu`).
pub(crate) const MAX_GPUS: usize = 32;

/// Kernel view of the split's outputs; must match `struct Split` in `cuda/build.cu`. It borrows
/// the arrays it points into.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct SplitArgs<'a> {
    pairs: DevAddr<'a>,
    owner_counts: DevAddr<'a>,
    shard_counts: DevAddr<'a>,
    global_first: DevAddr<'a>,
    capacity: u64,
    gpus: u32,
    shard_bits: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for SplitArgs<'_> {}
// Kernels read it as `struct Split` (cuda/build.cu), which asserts the same size.
const _: () = assert!(std::mem::size_of::<SplitArgs>() == 48);

/// Kernel view of the targets' first windows; must match `struct Windows` in `cuda/build.cu`. It
/// borrows the array of first windows.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct WindowsArgs<'a> {
    first: DevAddr<'a>,
    targets: u32,
    _pad: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for WindowsArgs<'_> {}
// Kernels read it as `struct Windows` (cuda/build.cu), which asserts the same size.
const _: () = assert!(std::mem::size_of::<WindowsArgs>() == 16);

/// What the passes lay out.
pub struct ShardsToBuild<'a> {
    /// Pairs of each shard.
    pub counts: &'a [u64],
    /// The provisional targets' first global windows (ascending).
    pub first_windows: &'a [u64],
    /// The provisional targets' final numbers (`None`: dropped).
    pub final_id: &'a [Option<u32>],
    pub layout: &'a LocationLayout,
    /// The targets' global window numbers, which stored lists hold.
    pub numbering: &'a GlobalWindows,
    /// The most locations a feature's list holds: a feature with more is a clade feature.
    pub cap: u32,
    /// The index's tree, which names the clade features' clades.
    pub clades: &'a crate::index::condensed::Clades,
}

/// The GPU (of `gpus`) that owns `shard`.
pub(crate) fn owner_of(shard: usize, gpus: usize) -> usize {
    shard % gpus
}

/// Where a block of pairs is kept between reading and the passes.
enum Held {
    /// On its owner GPU, in the order `sketch_split` wrote it.
    Device(CudaSlice<u64>),
    /// In pinned host memory, sorted by shard.
    Host(HostBuffer<u64>),
    /// In the spill file at this byte offset, sorted by shard.
    Spilled(u64),
}

/// One batch's pairs for one owner.
struct PairBlock {
    held: Held,
    pairs: u64,
    /// For blocks sorted by shard: where each shard's pairs start, and the end.
    shard_start: Vec<u64>,
}

/// The blocks a GPU owns.
struct Owner {
    blocks: Vec<PairBlock>,
    device_bytes: u64,
    device_budget: u64,
    /// A stream on this GPU per sending GPU, for the copies from it.
    recv: Vec<Arc<CudaStream>>,
}

/// Batches one GPU has in flight: each reading thread packs into a slot of its own while the GPU
/// uploads and sketches the others.
const STAGING_SLOTS: usize = 3;

/// One batch's place on a GPU: pinned staging and device buffers, and a pinned word per owner for
/// the split's counts.
struct Slot {
    staging: Option<Staging>,
    counts: HostBuffer<u32>,
}

/// A GPU's reading side.
struct Sender {
    slots: Vec<Mutex<Slot>>,
    /// Indexes of the slots no reading thread holds.
    free: Mutex<Vec<usize>>,
    freed: std::sync::Condvar,
    /// Held while a batch's upload and kernel are queued, so that they stay together.
    submit: Mutex<()>,
    copy: Arc<CudaStream>,
    split: Arc<CudaStream>,
    /// Pairs per shard of every batch this GPU sketched.
    shard_counts: CudaSlice<u64>,
}

impl Sender {
    /// A free slot's index (waits for one).
    fn take(&self) -> usize {
        let mut free = self.free.lock().expect("no GPU batch panicked");
        loop {
            if let Some(i) = free.pop() {
                return i;
            }
            free = self.freed.wait(free).expect("no GPU batch panicked");
        }
    }

    fn give_back(&self, i: usize) {
        self.free.lock().expect("no GPU batch panicked").push(i);
        self.freed.notify_one();
    }
}

/// Pairs kept off the GPUs: in host memory up to a budget, then in the spill file.
struct OffGpu {
    host_bytes: u64,
    host_budget: u64,
    spill_dir: PathBuf,
    spill: Option<crate::temp_files::TempFile>,
    spill_bytes: u64,
    /// Pinned memory blocks pass through on their way to the spill file.
    spill_staging: Option<HostBuffer<u64>>,
}

/// Where a build's pairs went, for the summary.
#[derive(Debug, Clone, Default)]
pub struct PairPlacement {
    pub device_bytes: u64,
    pub host_bytes: u64,
    pub spill_bytes: u64,
}

/// A build on GPUs, from the first batch to the last shard.
pub struct PassBuild<'g> {
    gpus: Vec<&'g Gpu>,
    params: SketchParams,
    shard_bits: u32,
    opts: GpuBuildOptions,
    senders: Vec<Sender>,
    owners: Vec<Mutex<Owner>>,
    off_gpu: Mutex<OffGpu>,
    next: AtomicUsize,
    /// Where the reading threads' time in `insert_batch` went, summed over threads (ns), and the
    /// bytes uploaded.
    reading: [std::sync::atomic::AtomicU64; 5],
}

/// Indexes of `PassBuild::reading`.
const PACK: usize = 0;
const QUEUE: usize = 1;
const COUNTS: usize = 2;
const KEEP: usize = 3;
const UPLOADED: usize = 4;

/// Bases the inputs hold, guessed from their sizes (compressed files count 4 bases a byte); `None`
/// for stdin.
fn estimate_bases(sources: &[Source]) -> Option<u64> {
    let mut total = 0u64;
    for s in sources {
        let Source::File(p) = s else { return None };
        let meta = std::fs::metadata(p).ok()?;
        // A named pipe's size is unknown, and opening it would take its writer's data.
        if !meta.is_file() {
            return None;
        }
        let size = meta.len();
        let mut magic = [0u8; 4];
        let n = std::fs::File::open(p).and_then(|mut f| std::io::Read::read(&mut f, &mut magic)).unwrap_or(0);
        let compressed = n >= 2 && (magic[..2] == [0x1f, 0x8b] || magic[..2] == [b'B', b'Z'])
            || n >= 4 && (magic == [0xfd, b'7', b'z', b'X'] || magic == [0x28, 0xb5, 0x2f, 0xfd]);
        total += if compressed { size * 4 } else { size };
    }
    Some(total)
}

/// Launches kernel `$name` on `$stream` of `$gpu` with shape `$config` and the arguments given.
macro_rules! launch_on {
    ($gpu:expr, $stream:expr, $name:expr, $config:expr, $($arg:expr),+ $(,)?) => {{
        let f = $gpu.function($name)?;
        let mut b = $stream.launch_builder(&f);
        $(b.arg($arg);)+
        // SAFETY: every call passes the arguments its kernel in `cuda/build.cu` declares, with
        // arrays of the lengths the kernel's comment asks for.
        unsafe { b.launch($config) }.map_err(GpuError::from)?;
    }};
}

impl<'g> PassBuild<'g> {
    /// Sets up reading on `gpus`. Spill files go to `tmp_dir`; when the inputs' size says that
    /// pairs will not fit the GPUs' and the host's memory, `tmp_dir` must have room for the rest,
    /// checked here.
    pub fn new(
        gpus: &'g [Gpu],
        sources: &[Source],
        params: &SketchParams,
        opts: GpuBuildOptions,
        shard_bits: u32,
        tmp_dir: &Path,
    ) -> Result<Self, GpuError> {
        if gpus.len() > MAX_GPUS {
            return Err(GpuError::TooManyGpus { given: gpus.len(), max: MAX_GPUS });
        }
        let gpus: Vec<&Gpu> = gpus.iter().collect();
        if gpus.len() > 1 {
            crate::gpu::multi::enable_peer_access(&gpus)?;
        }
        let shards = 1usize << shard_bits;
        let (mut senders, mut owners) = (Vec::new(), Vec::new());
        let mut device_budgets = 0u64;
        for g in &gpus {
            let (free, _) = g.memory()?;
            let budget = opts.device_pair_bytes.unwrap_or((free as f64 * DEVICE_PAIR_SHARE) as u64);
            device_budgets += budget;
            let recv = gpus.iter().map(|_| g.ctx.new_stream()).collect::<Result<_, _>>().map_err(GpuError::from)?;
            owners.push(Mutex::new(Owner { blocks: Vec::new(), device_bytes: 0, device_budget: budget, recv }));
            let slots = (0..STAGING_SLOTS)
                .map(|_| Ok(Mutex::new(Slot { staging: None, counts: HostBuffer::new(g, gpus.len())? })))
                .collect::<Result<_, GpuError>>()?;
            senders.push(Sender {
                slots,
                free: Mutex::new((0..STAGING_SLOTS).collect()),
                freed: std::sync::Condvar::new(),
                submit: Mutex::new(()),
                copy: g.ctx.new_stream().map_err(GpuError::from)?,
                split: g.ctx.new_stream().map_err(GpuError::from)?,
                shard_counts: g.stream.alloc_zeros::<u64>(shards).map_err(GpuError::from)?,
            });
        }
        let host_budget = opts.host_pair_bytes.unwrap_or_else(|| {
            crate::resources::available_memory_bytes().map_or(0, |b| (b as f64 * HOST_PAIR_SHARE) as u64)
        });
        check_spill_room(sources, params, device_budgets, host_budget, tmp_dir)?;
        Ok(Self {
            gpus,
            params: *params,
            shard_bits,
            opts,
            senders,
            owners,
            off_gpu: Mutex::new(OffGpu {
                host_bytes: 0,
                host_budget,
                spill_dir: tmp_dir.to_path_buf(),
                spill: None,
                spill_bytes: 0,
                spill_staging: None,
            }),
            next: AtomicUsize::new(0),
            reading: Default::default(),
        })
    }

    /// Adds the time since `t` to reading counter `what`.
    fn count(&self, what: usize, t: Instant) {
        self.reading[what].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Where the reading threads' time in `insert_batch` went (summed over threads), and the bytes
    /// uploaded.
    pub fn reading_report(&self) -> (Vec<(&'static str, Duration)>, u64) {
        let ns = |i: usize| Duration::from_nanos(self.reading[i].load(Ordering::Relaxed));
        let parts = vec![
            ("packing into pinned memory", ns(PACK)),
            ("queueing uploads and kernels", ns(QUEUE)),
            ("waiting for the split's counts", ns(COUNTS)),
            ("keeping pairs", ns(KEEP)),
        ];
        (parts, self.reading[UPLOADED].load(Ordering::Relaxed))
    }

    /// Reading, one batch (from any reading thread): packed into a staging slot of the next GPU in
    /// turn, uploaded, sketched and split; each owner's stretch is kept as a block. Returns once the
    /// blocks are placed. Several threads run this at once: a GPU has `STAGING_SLOTS` batches in
    /// flight, and only the queueing of a batch's upload and kernel is serialized.
    pub fn insert_batch(&self, batch: &[Pending]) -> Result<(), GpuError> {
        let Some(last) = batch.last() else { return Ok(()) };
        // Pairs carry 32-bit global windows, as the CPU build's bins do.
        if last.first_window + self.params.window_count(last.seq.len()) > 1 << 32 {
            return Err(GpuError::TooManyWindows);
        }
        let n = self.gpus.len();
        let g = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let sender = &self.senders[g];
        let i = sender.take();
        let split = self.split_batch(g, sender, i, batch);
        sender.give_back(i);
        let (part, capacity, counts) = split?;
        let t = Instant::now();
        for (d, &count) in counts.iter().enumerate() {
            if count > 0 {
                self.keep(g, d, DevAddr::at(self.gpus[g], &part, d * capacity as usize), count as u64)?;
            }
        }
        self.count(KEEP, t);
        // Freed on `split` once every copy out of it has run (`keep` made `split` wait for them).
        drop(part);
        Ok(())
    }

    /// Packs, uploads and splits `batch` in slot `i` of GPU `g`: the pairs (owner `d`'s stretch at
    /// `d * capacity`), the capacity and each owner's count.
    fn split_batch(
        &self,
        g: usize,
        sender: &Sender,
        i: usize,
        batch: &[Pending],
    ) -> Result<(CudaSlice<u64>, u64, Vec<u32>), GpuError> {
        let (gpu, n) = (self.gpus[g], self.gpus.len());
        let mut slot = sender.slots[i].lock().expect("no GPU batch panicked");
        let slot = &mut *slot;
        let (bases, records) = (batch.iter().map(|p| p.seq.len()).sum::<usize>(), batch.len());
        if !slot.staging.as_ref().is_some_and(|st| st.fits(bases, records)) {
            slot.staging = None;
            slot.staging = Some(Staging::new(gpu, bases.max(BATCH_BASES), records.max(1 << 16))?);
        }
        let staging = slot.staging.as_mut().expect("just made");
        let t = Instant::now();
        staging.pack(batch, &self.params)?;
        self.count(PACK, t);
        self.reading[UPLOADED].fetch_add(bases as u64, Ordering::Relaxed);
        let split = &sender.split;
        let t = Instant::now();
        let (part, capacity, counted) = {
            let _queued_together = sender.submit.lock().expect("no GPU batch panicked");
            let uploaded = staging.upload(&sender.copy)?;
            split.wait(&uploaded).map_err(GpuError::from)?;
            let windows = staging.batch().windows;
            let capacity = (windows * self.params.sketch_size as u64).max(1);
            // SAFETY: the kernel writes each owner's pairs before anything reads them.
            let part = unsafe { split.alloc::<u64>(capacity as usize * n) }.map_err(GpuError::from)?;
            let owner_counts = split.alloc_zeros::<u32>(n).map_err(GpuError::from)?;
            if windows > 0 {
                let args = SplitArgs {
                    pairs: DevAddr::of(gpu, &part),
                    owner_counts: DevAddr::of(gpu, &owner_counts),
                    shard_counts: DevAddr::of(gpu, &sender.shard_counts),
                    global_first: staging.batch().global_first(gpu),
                    capacity,
                    gpus: n as u32,
                    shard_bits: self.shard_bits,
                };
                let (b, p) = (staging.batch().args(gpu), SketchArgs::from(&self.params));
                launch_on!(gpu, split, "sketch_split", launch_config(gpu, windows), &b, &p, &args);
            }
            staging.used_until(split.record_event(None).map_err(GpuError::from)?);
            // SAFETY: the slot's counts hold `n` words; it is read after the event below, and the
            // slot is ours until then.
            unsafe { copy_async(slot.counts.addr(0), DevAddr::of(gpu, &owner_counts), n * 4, split)? };
            (part, capacity, split.record_event(None).map_err(GpuError::from)?)
        };
        self.count(QUEUE, t);
        let t = Instant::now();
        counted.synchronize().map_err(GpuError::from)?;
        self.count(COUNTS, t);
        // SAFETY: the copy into it has finished (the event above).
        let counts = unsafe { slot.counts.as_slice() }.to_vec();
        Ok((part, capacity, counts))
    }

    /// Keeps `count` pairs at `src` (on GPU `g`, written by `g`'s split stream) as a block of
    /// owner `d`: on `d` if its budget allows, else sorted by shard in host memory or the spill
    /// file. When this returns, `g`'s split stream waits for every copy out of `src`.
    fn keep(&self, g: usize, d: usize, src: DevAddr<'_>, count: u64) -> Result<(), GpuError> {
        let bytes = count * 8;
        let split = self.senders[g].split.clone();
        {
            let mut owner = self.owners[d].lock().expect("no GPU batch panicked");
            if owner.device_bytes + bytes <= owner.device_budget {
                let recv = owner.recv[g].clone();
                let done = split.record_event(None).map_err(GpuError::from)?;
                recv.wait(&done).map_err(GpuError::from)?;
                // SAFETY: filled by the copy below before anything reads it.
                let dst = unsafe { recv.alloc::<u64>(count as usize) }.map_err(GpuError::from)?;
                // SAFETY: `src` lives until `split` passes the event recorded next; `dst` is new.
                unsafe { copy_async(DevAddr::of(self.gpus[d], &dst), src, bytes as usize, &recv)? };
                let copied = recv.record_event(None).map_err(GpuError::from)?;
                split.wait(&copied).map_err(GpuError::from)?;
                owner.device_bytes += bytes;
                owner.blocks.push(PairBlock { held: Held::Device(dst), pairs: count, shard_start: Vec::new() });
                return Ok(());
            }
        }
        // Off the GPU: sorted by shard on `g` first.
        let gpu = self.gpus[g];
        let shards = 1usize << self.shard_bits;
        let counts_dev = split.alloc_zeros::<u64>(shards).map_err(GpuError::from)?;
        launch_on!(gpu, split, "count_shards", launch_config(gpu, count), &src, &count, &self.shard_bits, &counts_dev);
        let per_shard = split.clone_dtoh(&counts_dev).map_err(GpuError::from)?;
        let mut shard_start = vec![0u64];
        for c in &per_shard {
            shard_start.push(shard_start.last().unwrap() + c);
        }
        let mut cursors = split.clone_htod(&shard_start[..shards]).map_err(GpuError::from)?;
        // SAFETY: the scatter writes every one of the `count` places.
        let sorted = unsafe { split.alloc::<u64>(count as usize) }.map_err(GpuError::from)?;
        launch_on!(
            gpu,
            split,
            "scatter_by_shard",
            launch_config(gpu, count),
            &src,
            &count,
            &self.shard_bits,
            &mut cursors,
            &sorted
        );
        let mut off = self.off_gpu.lock().expect("no GPU batch panicked");
        let off = &mut *off;
        let held = if off.host_bytes + bytes <= off.host_budget {
            let host = HostBuffer::<u64>::new(gpu, count as usize)?;
            // SAFETY: both hold `count` pairs; the stream is synchronized before either is used.
            unsafe { copy_async(host.addr(0), DevAddr::of(gpu, &sorted), bytes as usize, &split)? };
            split.synchronize().map_err(GpuError::from)?;
            off.host_bytes += bytes;
            Held::Host(host)
        } else {
            Held::Spilled(off.spill(gpu, &split, &sorted, count)?)
        };
        let mut owner = self.owners[d].lock().expect("no GPU batch panicked");
        owner.blocks.push(PairBlock { held, pairs: count, shard_start });
        Ok(())
    }

    /// After the last batch: waits for every GPU and returns the pairs of each shard.
    pub fn finish_reading(&self) -> Result<Vec<u64>, GpuError> {
        let shards = 1usize << self.shard_bits;
        let mut totals = vec![0u64; shards];
        for (g, sender) in self.senders.iter().enumerate() {
            self.gpus[g].ctx.synchronize().map_err(GpuError::from)?;
            let counts = self.gpus[g].stream.clone_dtoh(&sender.shard_counts).map_err(GpuError::from)?;
            for (t, c) in totals.iter_mut().zip(counts) {
                *t += c;
            }
            // The staging buffers are not needed again: their memory goes to the passes.
            for slot in &sender.slots {
                slot.lock().expect("no GPU batch panicked").staging = None;
            }
            self.gpus[g].ctx.synchronize().map_err(GpuError::from)?;
        }
        self.off_gpu.lock().expect("no GPU batch panicked").spill_staging = None;
        Ok(totals)
    }

    /// Where the pairs went.
    /// The GPUs the build runs on.
    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    pub fn placement(&self) -> PairPlacement {
        let off = self.off_gpu.lock().expect("no GPU batch panicked");
        PairPlacement {
            device_bytes: self.owners.iter().map(|o| o.lock().expect("no GPU batch panicked").device_bytes).sum(),
            host_bytes: off.host_bytes,
            spill_bytes: off.spill_bytes,
        }
    }

    /// The passes for shards of `counts` pairs: [`plan_passes`] with each GPU's limit from its
    /// free memory (or `--gpu-pass-values`). A shard larger than its owner's limit is an error.
    fn plan(&self, counts: &[u64]) -> Result<Vec<std::ops::Range<usize>>, GpuError> {
        let n = self.gpus.len();
        let mut limits = Vec::with_capacity(n);
        for g in &self.gpus {
            let (free, _) = g.memory()?;
            let fit = (free as u64).saturating_sub(PASS_RESERVE) / PASS_BYTES_PER_VALUE;
            limits.push(self.opts.pass_values.unwrap_or(fit).min(MAX_PASS_VALUES));
        }
        match plan_passes(counts, &limits) {
            Ok(passes) => Ok(passes),
            Err(s) => {
                let d = owner_of(s, n);
                Err(GpuError::TooLarge {
                    what: format!("shard {s} of the index ({} feature locations)", counts[s]),
                    per_gpu: counts[s] * PASS_BYTES_PER_VALUE + PASS_RESERVE,
                    gpus: n,
                    ordinal: self.gpus[d].ordinal,
                    free: self.gpus[d].memory()?.0 as u64,
                    advice: "build it in parts (--partition) or on the CPU (--gpus none)".into(),
                })
            }
        }
    }

    /// The passes: every shard of `what` laid out on its owner GPU and downloaded, while the
    /// caller's `finish_and_write` (the build's stage 3, which owns the index file) takes the
    /// shards in shard order from the [`ShardArrivals`], finishes each with the
    /// [`ShardFinisher`] and writes it. Returns what `finish_and_write` returned and how the
    /// GPUs' time went. Its error ends the passes and is returned, as are the GPUs' (as `E`).
    ///
    /// Threads: one per GPU runs its passes and downloads each shard, as soon as the pass is
    /// condensed, into one of [`SHARD_BUFFERS`] pinned buffers of that GPU; `threads` more do
    /// the GPUs' share of host work in a pass (the clade features' lists). Finishing a shard gives
    /// its buffer back to its GPU, so a GPU that runs out of buffers waits for the finishing, and
    /// through it for the writing: host memory stays bounded and a slow disk slows the GPUs
    /// rather than filling memory. (No deadlock, as long as the caller waits for a shard only when
    /// it holds none: each GPU downloads its shards in order; `pipeline::run_here_streaming` is
    /// such a caller.) Once `finish_and_write` returns, the queues to and from the GPU threads
    /// close, so that any still running stop before they are joined.
    pub fn run_passes<R, E: From<GpuError> + Send>(
        &self,
        what: ShardsToBuild<'_>,
        threads: usize,
        finish_and_write: impl FnOnce(ShardArrivals<'_>, &ShardFinisher<'_>) -> Result<R, E>,
    ) -> Result<(R, PassReport), E> {
        let ShardsToBuild { counts, first_windows, final_id, layout, numbering, cap, clades } = what;
        let passes = self.plan(counts)?;
        let n = self.gpus.len();
        log::info!(
            "{} pass{} over the {} shards on {} GPU{} ({} pairs)",
            passes.len(),
            if passes.len() == 1 { "" } else { "es" },
            counts.len(),
            n,
            if n == 1 { "" } else { "s" },
            counts.iter().sum::<u64>()
        );
        let first: Vec<u32> = first_windows.iter().map(|&w| u32::try_from(w).expect("checked when read")).collect();
        // The GPU threads' host work gets threads of its own: the caller's may all be busy
        // finishing, or waiting for a GPU's next shard, and a GPU thread waiting on them would
        // deadlock.
        let host = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("kmerdb-gpu-host-{i}"))
            .build()
            .map_err(|e| E::from(GpuError::Threads { threads, reason: e.to_string() }))?;
        let job = PassJob { passes: &passes, counts, first: &first, final_id, layout, cap, clades, host: &host };
        let mut report = PassReport { passes: passes.len(), shard_pairs: counts.to_vec(), ..Default::default() };
        let gpu_times: Vec<Mutex<(Duration, Duration)>> = (0..n).map(|_| Mutex::new(Default::default())).collect();
        let waiting = Mutex::new(Duration::ZERO);
        let (result, finishing) = std::thread::scope(|scope| {
            let (mut pools, mut queues) = (Vec::new(), Vec::new());
            for (d, times) in gpu_times.iter().enumerate() {
                let (free_tx, free) = std::sync::mpsc::channel::<ShardBuffer>();
                for _ in 0..SHARD_BUFFERS {
                    free_tx.send(ShardBuffer::default()).expect("the receiver is alive");
                }
                let (tx, rx) = std::sync::mpsc::channel();
                pools.push(free_tx);
                queues.push(rx);
                let job = &job;
                scope.spawn(move || self.gpu_passes(d, job, free, tx, times));
            }
            let arrivals = ShardArrivals { queues, next: 0, total: counts.len(), waiting: &waiting };
            let finisher = ShardFinisher {
                pools,
                lists: (layout, numbering),
                hash: KeyHash::new(self.shard_bits),
                finishing: Mutex::new(Duration::ZERO),
            };
            // `arrivals` is dropped as this returns; `finisher`, with the buffers' way back, below.
            let result = finish_and_write(arrivals, &finisher);
            (result, finisher.finishing.into_inner().expect("no finishing panicked"))
        });
        let result = result?;
        for t in &gpu_times {
            let (select_insert, condense) = *t.lock().expect("no GPU thread panicked");
            report.select_insert += select_insert;
            report.condense += condense;
        }
        report.waiting_for_gpus = waiting.into_inner().expect("no waiting panicked");
        report.finishing = finishing;
        log::debug!(
            "passes: GPUs select and insert {:.2} s, condense and queue downloads {:.2} s (summed over GPUs); host waits for the GPUs {:.2} s, finishes shards {:.2} s (summed over threads)",
            report.select_insert.as_secs_f64(),
            report.condense.as_secs_f64(),
            report.waiting_for_gpus.as_secs_f64(),
            report.finishing.as_secs_f64(),
        );
        Ok((result, report))
    }

    /// One GPU's passes, on its own thread: each shard it owns goes to `downloaded`, in shard
    /// order, in a buffer from `free` (waiting for one), or as an error.
    fn gpu_passes(
        &self,
        d: usize,
        job: &PassJob<'_>,
        free: std::sync::mpsc::Receiver<ShardBuffer>,
        downloaded: std::sync::mpsc::Sender<Result<Downloaded, GpuError>>,
        times: &Mutex<(Duration, Duration)>,
    ) {
        let gpu = self.gpus[d];
        let result = (|| -> Result<(), GpuError> {
            gpu.ctx.bind_to_thread().map_err(GpuError::from)?;
            let first = gpu.stream.clone_htod(job.first).map_err(GpuError::from)?;
            let windows = WindowsArgs { first: DevAddr::of(gpu, &first), targets: job.first.len() as u32, _pad: 0 };
            let mut staging: Option<HostBuffer<u64>> = None;
            for range in job.passes {
                if !self.gpu_pass(d, range.clone(), job, windows, &mut staging, &free, &downloaded, times)? {
                    return Ok(()); // the build stopped
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = downloaded.send(Err(e));
        }
    }

    /// One pass on GPU `d`: select, insert, condense, and each shard downloaded and sent. False
    /// when the build has stopped (no more buffers or no receiver).
    #[allow(clippy::too_many_arguments)]
    fn gpu_pass(
        &self,
        d: usize,
        range: std::ops::Range<usize>,
        job: &PassJob<'_>,
        windows: WindowsArgs<'_>,
        staging: &mut Option<HostBuffer<u64>>,
        free: &std::sync::mpsc::Receiver<ShardBuffer>,
        downloaded: &std::sync::mpsc::Sender<Result<Downloaded, GpuError>>,
        times: &Mutex<(Duration, Duration)>,
    ) -> Result<bool, GpuError> {
        let (gpu, n) = (self.gpus[d], self.gpus.len());
        let wanted: Vec<usize> = range.clone().filter(|&s| owner_of(s, n) == d).collect();
        let values: u64 = wanted.iter().map(|&s| job.counts[s]).sum();
        if values == 0 {
            for &shard in &wanted {
                if downloaded.send(Ok(Downloaded::Empty(shard))).is_err() {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let t = Instant::now();
        let table = self.select_insert(d, range.clone(), windows, staging, values)?;
        let select_insert = t.elapsed();
        let t = Instant::now();
        let mut dev = crate::gpu::condense::condense_on_device(
            &table,
            gpu,
            job.final_id,
            job.layout,
            (job.cap, job.clades),
            self.shard_bits,
            Some(job.host),
        )?;
        drop(table);
        let (condensed, mut waited) = (t.elapsed(), Duration::ZERO);
        // Each buffer is grown (pinned, `HostBuffer::new`) just before its download, so that the
        // first shards go out at once rather than after every buffer of the pass is pinned.
        let mut pinned = Duration::ZERO;
        let s = &gpu.stream;
        for &shard in &wanted {
            let w = Instant::now();
            let Ok(mut buf) = free.recv() else { return Ok(false) };
            waited += w.elapsed();
            let place = &dev.places[shard];
            let order = place.slots.start..place.left.end;
            let pinning = Instant::now();
            buf = buf.ensure(gpu, order.len(), place.words.len())?;
            pinned += pinning.elapsed();
            // SAFETY: the buffer holds both parts; it is handed over with the event recorded
            // after the copies, and nothing reads it before that event.
            unsafe {
                copy_async(
                    buf.order.as_ref().expect("ensured").addr(0),
                    DevAddr::at(gpu, &dev.order, order.start),
                    order.len() * 8,
                    s,
                )?;
                copy_async(
                    buf.code_bits.as_ref().expect("ensured").addr(0),
                    DevAddr::at(gpu, &dev.code_bits, order.start),
                    order.len() * 4,
                    s,
                )?;
                copy_async(
                    buf.words.as_ref().expect("ensured").addr(0),
                    DevAddr::at(gpu, &dev.words, place.words.start),
                    place.words.len() * 4,
                    s,
                )?;
            }
            let copied = s.record_event(None).map_err(GpuError::from)?;
            let sent = downloaded.send(Ok(Downloaded::Shard(Box::new(DownloadedShard {
                shard,
                gpu: d,
                buf,
                copied,
                slots: place.slots.len(),
                left: place.left.len(),
                words: place.words.len(),
                stats: dev.stats[shard],
                clade_lists: std::mem::take(&mut dev.clade_lists[shard]),
            }))));
            if sent.is_err() {
                return Ok(false);
            }
        }
        // Freed on the stream after the copies out of it.
        drop(dev);
        let condense = t.elapsed();
        log::debug!(
            "GPU {} pass of shards {range:?}: {values} pairs, select and insert {:.3} s, condense and downloads queued {:.3} s (condensed in {:.3} s, buffers pinned in {:.3} s, {:.3} s waiting for free buffers)",
            gpu.ordinal,
            select_insert.as_secs_f64(),
            condense.as_secs_f64(),
            condensed.as_secs_f64(),
            pinned.as_secs_f64(),
            waited.as_secs_f64()
        );
        let mut times = times.lock().expect("no GPU thread panicked");
        times.0 += select_insert;
        times.1 += condense;
        Ok(true)
    }

    /// A pass's pairs on GPU `d` in a bucket-list table sized for them: selected from every block
    /// of the GPU (copied back first for blocks kept off it), and inserted.
    fn select_insert(
        &self,
        d: usize,
        range: std::ops::Range<usize>,
        windows: WindowsArgs<'_>,
        staging: &mut Option<HostBuffer<u64>>,
        values: u64,
    ) -> Result<BucketListTable<'g>, GpuError> {
        let gpu = self.gpus[d];
        let s = &gpu.stream;
        let (lo, hi) = (range.start as u32, range.end as u32);
        // SAFETY: `select_pass` fills the first `values` of each (checked below).
        let (keys, vals) = unsafe { (s.alloc::<u32>(values as usize), s.alloc::<u64>(values as usize)) };
        let (keys, vals) = (keys.map_err(GpuError::from)?, vals.map_err(GpuError::from)?);
        let selected = s.alloc_zeros::<u64>(1).map_err(GpuError::from)?;
        let owner = self.owners[d].lock().expect("no GPU batch panicked");
        for block in &owner.blocks {
            let select = |at: DevAddr<'_>, count: u64| -> Result<(), GpuError> {
                launch_on!(
                    gpu,
                    s,
                    "select_pass",
                    launch_config(gpu, count),
                    &at,
                    &count,
                    &lo,
                    &hi,
                    &self.shard_bits,
                    &windows,
                    &keys,
                    &vals,
                    &selected
                );
                Ok(())
            };
            match &block.held {
                Held::Device(pairs) => select(DevAddr::of(gpu, pairs), block.pairs)?,
                Held::Host(_) | Held::Spilled(_) => {
                    let Some(tmp) = self.copy_in(gpu, block, range.clone(), staging)? else { continue };
                    select(DevAddr::of(gpu, &tmp), tmp.len() as u64)?;
                    // Freed on the stream after the kernel that reads it.
                    drop(tmp);
                }
            }
        }
        drop(owner);
        let got = s.clone_dtoh(&selected).map_err(GpuError::from)?[0];
        assert_eq!(got, values, "a pass selects exactly its shards' pairs");
        let mut config = TableConfig::new(values * 10 / 9 + 1024, 2 * values + 1024);
        if let Some(g) = self.opts.group {
            config.group = g;
        }
        let table = BucketListTable::new(gpu, config)?;
        // SAFETY: `keys` and `vals` hold `values` pairs (checked above) and are dropped below,
        // on the stream, after the insertion.
        unsafe { table.queue_insert(DevAddr::of(gpu, &keys), DevAddr::of(gpu, &vals), values) }?;
        let status = table.status()?;
        if status.is_error() {
            return Err(
                table.full(&status, "the table is sized for every value it gets: this is a bug, please report it")
            );
        }
        drop((keys, vals));
        Ok(table)
    }
}

impl PassBuild<'_> {
    /// The pairs of a block kept off the GPU (in host memory or the spill file, read back
    /// through `staging`) that fall in the shards of `range`, copied to a new device buffer on
    /// the GPU's stream; `None` when the block has none there.
    fn copy_in(
        &self,
        gpu: &Gpu,
        block: &PairBlock,
        range: std::ops::Range<usize>,
        staging: &mut Option<HostBuffer<u64>>,
    ) -> Result<Option<CudaSlice<u64>>, GpuError> {
        let s = &gpu.stream;
        let (a, b) = (block.shard_start[range.start], block.shard_start[range.end]);
        if a == b {
            return Ok(None);
        }
        let len = (b - a) as usize;
        // SAFETY: the copy below fills it before anything reads it.
        let tmp = unsafe { s.alloc::<u64>(len) }.map_err(GpuError::from)?;
        match &block.held {
            // SAFETY: the host block is not written after reading; `tmp` is new.
            Held::Host(host) => unsafe { copy_async(DevAddr::of(gpu, &tmp), host.addr(a as usize), len * 8, s)? },
            Held::Spilled(at) => {
                // The staging buffer is free once the stream has passed its last copy.
                s.synchronize().map_err(GpuError::from)?;
                if staging.as_ref().is_none_or(|b| b.len() < len) {
                    *staging = Some(HostBuffer::new(gpu, len)?);
                }
                let buf = staging.as_mut().expect("just made");
                let off = self.off_gpu.lock().expect("no GPU batch panicked");
                let file = off.spill.as_ref().expect("spilled blocks have a spill file");
                // SAFETY: no copy uses the staging buffer (synchronized above).
                let dst: &mut [u8] = bytemuck::cast_slice_mut(unsafe { &mut buf.as_mut_slice()[..len] });
                file.as_file().read_exact_at(dst, at + a * 8).map_err(|source| GpuError::Output {
                    path: file.path().to_path_buf(),
                    reason: format!("cannot read spilled pairs back: {source}"),
                })?;
                drop(off);
                // SAFETY: the staging buffer holds `len` pairs and is not touched until the
                // stream has passed this copy.
                unsafe { copy_async(DevAddr::of(gpu, &tmp), buf.addr(0), len * 8, s)? };
            }
            Held::Device(_) => unreachable!("copy_in is for blocks off the GPU"),
        }
        Ok(Some(tmp))
    }
}

impl OffGpu {
    /// Appends `count` pairs of `sorted` (on `gpu`, written on `split`) to the spill file, made
    /// at the first spill, through the staging buffer; returns where in the file they start.
    fn spill(&mut self, gpu: &Gpu, split: &CudaStream, sorted: &CudaSlice<u64>, count: u64) -> Result<u64, GpuError> {
        let bytes = count * 8;
        if self.spill_staging.as_ref().is_none_or(|b| b.len() < count as usize) {
            self.spill_staging = Some(HostBuffer::new(gpu, count as usize)?);
        }
        let staging = self.spill_staging.as_mut().expect("just made");
        // SAFETY: both hold `count` pairs; the stream is synchronized before either is used.
        unsafe { copy_async(staging.addr(0), DevAddr::of(gpu, sorted), bytes as usize, split)? };
        split.synchronize().map_err(GpuError::from)?;
        if self.spill.is_none() {
            let file = crate::temp_files::create_scratch(&self.spill_dir)
                .map_err(|source| crate::input::InputError::Io { path: self.spill_dir.clone(), source })?;
            log::info!("pairs beyond the GPUs' and the host's share go to {}", file.path().display());
            self.spill = Some(file);
        }
        let at = self.spill_bytes;
        let file = self.spill.as_ref().expect("just made");
        // SAFETY: the copy into the staging buffer has finished (synchronized above).
        let data: &[u8] = bytemuck::cast_slice(unsafe { &staging.as_slice()[..count as usize] });
        file.as_file().write_all_at(data, at).map_err(|source| GpuError::Output {
            path: file.path().to_path_buf(),
            reason: format!("cannot write spilled pairs: {source}"),
        })?;
        self.spill_bytes += bytes;
        Ok(at)
    }
}

/// Checks that `tmp_dir` has room for the pairs that may be spilled: the most the inputs can give
/// (every window a full sketch), less what the GPUs and host memory keep; says where they may go.
fn check_spill_room(
    sources: &[Source],
    params: &SketchParams,
    device_budgets: u64,
    host_budget: u64,
    tmp_dir: &Path,
) -> Result<(), GpuError> {
    let Some(bases) = estimate_bases(sources) else { return Ok(()) };
    let pair_bytes = (bases / params.stride as u64 + 1) * params.sketch_size as u64 * 8;
    let spill = pair_bytes.saturating_sub(device_budgets + host_budget);
    if spill == 0 {
        return Ok(());
    }
    let free = crate::resources::free_disk_bytes(tmp_dir).unwrap_or(0);
    if free < spill + spill / 10 {
        return Err(GpuError::Output {
            path: tmp_dir.to_path_buf(),
            reason: format!(
                "the inputs (about {:.1} Gbp) give up to {} of (feature, window) pairs; the GPUs keep {} and host memory {}, so up to {} go to spill files here, but it has {} free: give --tmp-dir a folder with room, or build on more GPUs or a machine with more memory",
                bases as f64 / 1e9,
                human_bytes(pair_bytes),
                human_bytes(device_budgets),
                human_bytes(host_budget),
                human_bytes(spill),
                human_bytes(free)
            ),
        });
    }
    log::info!(
        "up to {} of pairs may be spilled to {} (the GPUs keep {}, host memory {})",
        human_bytes(spill),
        tmp_dir.display(),
        human_bytes(device_budgets),
        human_bytes(host_budget)
    );
    Ok(())
}

/// Pinned buffers per GPU for shards between download and finishing. Enough for a GPU to download
/// a pass's shards without waiting (13 each in 3 passes on 2 H200s at 50 Gbp; with 8 the GPUs
/// waited 2 s a pass for the finishing): the finishing stage then has several shards at once to
/// lay out side by side. The finishing stage may hold as many shards as this.
pub const SHARD_BUFFERS: usize = 16;

/// A pinned buffer for one shard: its slot words (slots, then leftover keys), their lists' code
/// bits, and its stream.
#[derive(Default)]
struct ShardBuffer {
    order: Option<HostBuffer<u64>>,
    code_bits: Option<HostBuffer<u32>>,
    words: Option<HostBuffer<u32>>,
}

impl ShardBuffer {
    /// This buffer, or a larger one where it holds fewer than `order` slot words or `words` words
    /// (a fifth more: shards are about the same size, so a buffer grows once or twice at most).
    fn ensure(self, gpu: &Gpu, order: usize, words: usize) -> Result<ShardBuffer, GpuError> {
        let order = match self.order {
            Some(b) if b.len() >= order => b,
            _ => HostBuffer::new(gpu, order + order / 5)?,
        };
        // A code per slot word: as many as the slot words' buffer holds.
        let code_bits = match self.code_bits {
            Some(b) if b.len() >= order.len() => b,
            _ => HostBuffer::new(gpu, order.len())?,
        };
        let words = match self.words {
            Some(b) if b.len() >= words => b,
            _ => HostBuffer::new(gpu, words + words / 5)?,
        };
        Ok(ShardBuffer { order: Some(order), code_bits: Some(code_bits), words: Some(words) })
    }
}

/// What a GPU thread sends for each shard it owns.
enum Downloaded {
    /// A shard without pairs: no key index, the padding words only.
    Empty(usize),
    Shard(Box<DownloadedShard>),
}

/// A shard on its way from the GPU.
struct DownloadedShard {
    shard: usize,
    gpu: usize,
    buf: ShardBuffer,
    /// Recorded after the copies into `buf`.
    copied: cudarc::driver::CudaEvent,
    /// Slot words of the key index and of the leftover keys, and words of the stream.
    slots: usize,
    left: usize,
    words: usize,
    stats: ShardStats,
    clade_lists: CladeLists,
}

/// A shard laid out on a GPU and finished on the host ([`ShardFinisher::finish`]), ready to be
/// written: its block as stored, its checksum, its counts and its clade features' lists.
pub struct FinishedShard {
    pub shard: usize,
    pub stored: StoredShard,
    pub checksum: u64,
    pub stats: ShardStats,
    pub clade_lists: CladeLists,
}

impl Downloaded {
    /// Waits for the copies, places the leftover keys in place, lays the shard out as stored
    /// (`index::stored_shard`) and computes the checksum. Gives back the buffer it came in, with
    /// its GPU, for that GPU's next shard.
    fn finish(
        self,
        (layout, numbering): (&LocationLayout, &GlobalWindows),
        hash: KeyHash,
    ) -> Result<(FinishedShard, Option<(usize, ShardBuffer)>), GpuError> {
        let checksum = |s: &StoredShard| {
            crate::index::format::shard_checksum(bytemuck::cast_slice(s.keys()), bytemuck::cast_slice(s.words()))
        };
        let mut d = match self {
            Downloaded::Empty(shard) => {
                let words = vec![0; crate::index::locations::PAD_WORDS];
                let stored = stored_shard::store_parts(&[], &words, None, layout, numbering, hash)
                    .map_err(|_| crate::gpu::condense::shard_overflow())?;
                let finished = FinishedShard {
                    shard,
                    checksum: checksum(&stored),
                    stored,
                    stats: ShardStats::default(),
                    clade_lists: CladeLists::default(),
                };
                return Ok((finished, None));
            }
            Downloaded::Shard(d) => d,
        };
        let t = Instant::now();
        d.copied.synchronize().map_err(GpuError::from)?;
        let copied = t.elapsed();
        let buf = &mut d.buf;
        let (order_buf, words_buf) = (buf.order.as_mut().expect("ensured"), buf.words.as_ref().expect("ensured"));
        let code_bits_buf = buf.code_bits.as_ref().expect("ensured");
        // SAFETY: the copies into the buffer have finished (the event above).
        let (order, words, code_bits) =
            unsafe { (order_buf.as_mut_slice(), words_buf.as_slice(), code_bits_buf.as_slice()) };
        let order: &mut [crate::index::bcht::Slot] = bytemuck::cast_slice_mut(&mut order[..d.slots + d.left]);
        let (slots, left) = order.split_at_mut(d.slots);
        let (words, code_bits) = (&words[..d.words], &code_bits[..d.slots]);
        let stored =
            crate::gpu::condense::finish_and_store(slots, left, (words, code_bits), (layout, numbering), hash)?;
        let laid_out = t.elapsed();
        let checksum = checksum(&stored);
        log::trace!(
            "shard {} finished: {:.3} s waiting for its copy, {:.3} s placing {} leftover keys and laying it out, {:.3} s checksum",
            d.shard,
            copied.as_secs_f64(),
            (laid_out - copied).as_secs_f64(),
            d.left,
            (t.elapsed() - laid_out).as_secs_f64()
        );
        let finished = FinishedShard { shard: d.shard, checksum, stored, stats: d.stats, clade_lists: d.clade_lists };
        Ok((finished, Some((d.gpu, d.buf))))
    }
}

/// A shard downloaded from its GPU (or one without pairs), for [`ShardFinisher::finish`].
pub struct ArrivedShard(Downloaded);

/// The downloaded shards in shard order, as [`PassBuild::run_passes`]' caller takes them: shard
/// `s` from the queue of its owner GPU.
pub struct ShardArrivals<'a> {
    queues: Vec<std::sync::mpsc::Receiver<Result<Downloaded, GpuError>>>,
    next: usize,
    total: usize,
    /// Time spent waiting for a GPU.
    waiting: &'a Mutex<Duration>,
}

impl ShardArrivals<'_> {
    /// The next shard; waits for it if `wait`, else `None` when it has not arrived yet (the
    /// arrivals of `pipeline::run_here_streaming`). `None` after the last shard.
    pub fn next(&mut self, wait: bool) -> Option<Result<ArrivedShard, GpuError>> {
        use std::sync::mpsc::TryRecvError;
        if self.next == self.total {
            return None;
        }
        let worker = owner_of(self.next, self.queues.len());
        let queue = &self.queues[worker];
        let got = if wait {
            let t = Instant::now();
            let got = queue.recv().ok();
            *self.waiting.lock().expect("no waiting panicked") += t.elapsed();
            got
        } else {
            match queue.try_recv() {
                Ok(got) => Some(got),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => None,
            }
        };
        self.next += 1;
        // A GPU thread that ends early sends its error first.
        Some(got.unwrap_or_else(|| Err(GpuError::WorkerStopped { worker })).map(ArrivedShard))
    }
}

/// Finishes downloaded shards on the host, from any thread, and gives each buffer back to its GPU.
pub struct ShardFinisher<'a> {
    /// Each GPU's free buffers' way back.
    pools: Vec<std::sync::mpsc::Sender<ShardBuffer>>,
    lists: (&'a LocationLayout, &'a GlobalWindows),
    hash: KeyHash,
    /// Time spent finishing, summed over threads.
    finishing: Mutex<Duration>,
}

impl ShardFinisher<'_> {
    /// Waits for the shard's copies, places its leftover keys, lays it out as stored and computes
    /// its checksum. The shard is in host memory then: its buffer goes back to its GPU at once,
    /// so that a GPU waits for the shards being finished, not for the writer too. (A GPU that has
    /// stopped takes no more buffers.)
    pub fn finish(&self, shard: ArrivedShard) -> Result<FinishedShard, GpuError> {
        let t = Instant::now();
        let (done, buf) = shard.0.finish(self.lists, self.hash)?;
        if let Some((gpu, buf)) = buf {
            let _ = self.pools[gpu].send(buf);
        }
        *self.finishing.lock().expect("no finishing panicked") += t.elapsed();
        Ok(done)
    }
}

/// Cuts shards with `counts` pairs into passes: the fewest runs of consecutive shards, taken
/// greedily, in which the pairs of the shards each GPU owns (`owner_of`, for `limits.len()` GPUs)
/// stay within that GPU's limit. `Err(shard)` when one shard alone is over its owner's limit.
pub fn plan_passes(counts: &[u64], limits: &[u64]) -> Result<Vec<std::ops::Range<usize>>, usize> {
    let n = limits.len();
    if let Some(s) = (0..counts.len()).find(|&s| counts[s] > limits[owner_of(s, n)]) {
        return Err(s);
    }
    let mut passes = Vec::new();
    let mut a = 0;
    while a < counts.len() {
        let mut load = vec![0u64; n];
        let mut b = a;
        while b < counts.len() && load[owner_of(b, n)] + counts[b] <= limits[owner_of(b, n)] {
            load[owner_of(b, n)] += counts[b];
            b += 1;
        }
        passes.push(a..b);
        a = b;
    }
    Ok(passes)
}

impl Drop for PassBuild<'_> {
    /// Blocks free their device memory on streams that may still be running kernels of an
    /// interrupted pass: wait for every GPU first.
    fn drop(&mut self) {
        for g in &self.gpus {
            let _ = g.ctx.synchronize();
        }
    }
}

/// What every GPU thread of [`PassBuild::run_passes`] shares.
struct PassJob<'a> {
    passes: &'a [std::ops::Range<usize>],
    counts: &'a [u64],
    first: &'a [u32],
    final_id: &'a [Option<u32>],
    layout: &'a LocationLayout,
    cap: u32,
    clades: &'a crate::index::condensed::Clades,
    /// Threads for the host's share of the GPUs' condense (the clade features' lists).
    host: &'a rayon::ThreadPool,
}

/// Where the passes' time went: the GPUs' (summed over GPUs) and the host's.
#[derive(Debug, Clone, Default)]
pub struct PassReport {
    pub passes: usize,
    /// Pairs of each shard.
    pub shard_pairs: Vec<u64>,
    /// Selecting pairs and inserting them into tables, per GPU, summed.
    pub select_insert: Duration,
    /// Condensing tables and downloading shards, per GPU, summed.
    pub condense: Duration,
    /// The host waiting for the GPUs' downloaded shards.
    pub waiting_for_gpus: Duration,
    /// The host placing leftover keys and computing checksums (summed over threads).
    pub finishing: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_runs_of_shards_within_every_gpus_limit() {
        let counts = [5u64, 5, 5, 5, 5, 5, 5, 5];
        assert_eq!(plan_passes(&counts, &[40]).unwrap(), vec![0..8]);
        assert_eq!(plan_passes(&counts, &[20]).unwrap(), vec![0..4, 4..8]);
        assert_eq!(plan_passes(&counts, &[12]).unwrap(), vec![0..2, 2..4, 4..6, 6..8]);
        // Two GPUs own the even and the odd shards: each counts its own.
        assert_eq!(plan_passes(&counts, &[10, 10]).unwrap(), vec![0..4, 4..8]);
        assert_eq!(plan_passes(&counts, &[10, 5]).unwrap(), vec![0..3, 3..5, 5..7, 7..8]);
        // Empty shards cost nothing; a shard over its owner's limit is named.
        assert_eq!(plan_passes(&[0, 0, 7, 0], &[7]).unwrap(), vec![0..4]);
        assert_eq!(plan_passes(&[1, 9, 1], &[20, 8]).unwrap_err(), 1);
        assert_eq!(plan_passes(&[1, 9, 9], &[8, 20]).unwrap_err(), 2);
    }
}

/// The pair kernels one at a time, for their tests against the CPU (`tests/gpu.rs`).
#[doc(hidden)]
pub mod twins {
    use super::*;

    /// `sketch_split` of one batch for `gpus` owners: each owner's pairs, and each shard's count.
    pub fn split(
        gpu: &Gpu,
        batch: &[Pending],
        params: &SketchParams,
        gpus: usize,
        shard_bits: u32,
    ) -> Result<(Vec<Vec<u64>>, Vec<u64>), GpuError> {
        let dev = crate::gpu::build::DeviceBatch::upload(gpu, batch, params)?;
        let s = &gpu.stream;
        let capacity = (dev.windows * params.sketch_size as u64).max(1);
        let part = s.alloc_zeros::<u64>(capacity as usize * gpus)?;
        let owner_counts = s.alloc_zeros::<u32>(gpus)?;
        let shard_counts = s.alloc_zeros::<u64>(1 << shard_bits)?;
        let args = SplitArgs {
            pairs: DevAddr::of(gpu, &part),
            owner_counts: DevAddr::of(gpu, &owner_counts),
            shard_counts: DevAddr::of(gpu, &shard_counts),
            global_first: dev.global_first(gpu),
            capacity,
            gpus: gpus as u32,
            shard_bits,
        };
        if dev.windows > 0 {
            let (b, p) = (dev.args(gpu), SketchArgs::from(params));
            launch_on!(gpu, s, "sketch_split", launch_config(gpu, dev.windows), &b, &p, &args);
        }
        let (all, owners) = (s.clone_dtoh(&part)?, s.clone_dtoh(&owner_counts)?);
        let per_owner = (0..gpus)
            .map(|d| all[d * capacity as usize..d * capacity as usize + owners[d] as usize].to_vec())
            .collect();
        Ok((per_owner, s.clone_dtoh(&shard_counts)?))
    }

    /// `count_shards` and `scatter_by_shard`: the pairs sorted by shard, and each shard's start.
    pub fn sort_by_shard(gpu: &Gpu, pairs: &[u64], shard_bits: u32) -> Result<(Vec<u64>, Vec<u64>), GpuError> {
        let s = &gpu.stream;
        let n = pairs.len() as u64;
        let src = if pairs.is_empty() { s.alloc_zeros::<u64>(1)? } else { s.clone_htod(pairs)? };
        let counts = s.alloc_zeros::<u64>(1 << shard_bits)?;
        launch_on!(gpu, s, "count_shards", launch_config(gpu, n), &src, &n, &shard_bits, &counts);
        let mut start = vec![0u64];
        for c in s.clone_dtoh(&counts)? {
            start.push(start.last().unwrap() + c);
        }
        let mut cursors = s.clone_htod(&start[..1 << shard_bits])?;
        let out = s.alloc_zeros::<u64>(pairs.len().max(1))?;
        launch_on!(gpu, s, "scatter_by_shard", launch_config(gpu, n), &src, &n, &shard_bits, &mut cursors, &out);
        let mut sorted = s.clone_dtoh(&out)?;
        sorted.truncate(pairs.len());
        Ok((sorted, start))
    }

    /// `select_pass` of the shards `lo..hi`: table keys and values (target << 32 | window).
    pub fn select(
        gpu: &Gpu,
        pairs: &[u64],
        lo: u32,
        hi: u32,
        shard_bits: u32,
        first: &[u32],
    ) -> Result<(Vec<u32>, Vec<u64>), GpuError> {
        let s = &gpu.stream;
        let n = pairs.len() as u64;
        let src = if pairs.is_empty() { s.alloc_zeros::<u64>(1)? } else { s.clone_htod(pairs)? };
        let first_dev = s.clone_htod(first)?;
        let windows = WindowsArgs { first: DevAddr::of(gpu, &first_dev), targets: first.len() as u32, _pad: 0 };
        let (keys, values) = (s.alloc_zeros::<u32>(pairs.len().max(1))?, s.alloc_zeros::<u64>(pairs.len().max(1))?);
        let got = s.alloc_zeros::<u64>(1)?;
        launch_on!(
            gpu,
            s,
            "select_pass",
            launch_config(gpu, n),
            &src,
            &n,
            &lo,
            &hi,
            &shard_bits,
            &windows,
            &keys,
            &values,
            &got
        );
        let m = s.clone_dtoh(&got)?[0] as usize;
        let (mut k, mut v) = (s.clone_dtoh(&keys)?, s.clone_dtoh(&values)?);
        k.truncate(m);
        v.truncate(m);
        Ok((k, v))
    }
}
