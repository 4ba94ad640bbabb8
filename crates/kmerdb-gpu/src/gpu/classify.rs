//! `kmerdb classify` on one GPU: the index's key indexes and list streams in device memory, and per
//! batch of reads the kernels of `cuda/classify.cuh`, which give every read the same candidates
//! as `classify::candidates` (their CPU twin; `tests/gpu.rs` compares whole outputs).
//!
//! The host keeps two small jobs: the decision (an LCA over the top candidates) and the rare read
//! with more locations than a block's shared memory holds, which it classifies itself with the
//! same code as the CPU path.

use crate::gpu::address::DevAddr;
use crate::gpu::build::SketchArgs;
use crate::gpu::mates::DeviceMates;
use crate::gpu::pinned::{HostBuffer, Landing, copy_async};
use crate::gpu::table::launch_config;
use crate::gpu::{Gpu, GpuError};
use crate::hits::Candidate;
use crate::index::Index;
use crate::sketch::SketchParams;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use std::time::{Duration, Instant};

/// Locations a block sorts in shared memory: a power of two, as the bitonic sort pads to one (6144
/// was allowed before, and a read of 4097 to 6144 locations sorted 8192 slots, past its room),
/// each as an 8-byte key (`read_candidates`) or a 4-byte one (`read_candidates32`) with a 4-byte
/// best range: 48 KiB, the most a kernel gets without opting in, or 32 KiB.
const SHARED_LOCATIONS: u32 = 4096;
const CANDIDATE_THREADS: u32 = 256;

/// Kernel view of the index; must match `struct DeviceIndex` in `cuda/classify.cuh`. It borrows
/// the per-shard tables ([`IndexTables::args`]); the addresses in those tables are data, see
/// [`IndexTables`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IndexArgs<'a> {
    slot_base: DevAddr<'a>,
    word_base: DevAddr<'a>,
    buckets: DevAddr<'a>,
    shard_words: DevAddr<'a>,
    key_code: DevAddr<'a>,
    /// Per shard: the slope and the bias of its bases' line (`packed_keys::BaseLine`).
    base_line: DevAddr<'a>,
    /// The targets' first global windows, then the total, and the directory of
    /// `index::GlobalWindows`.
    window_starts: DevAddr<'a>,
    window_dir: DevAddr<'a>,
    shard_bits: u32,
    /// A stored stream's entries.
    entry_bits: u32,
    window_bits: u32,
    targets: u32,
    /// `GlobalWindows`' directory: the target of every `2^dir_shift`-th window.
    dir_shift: u32,
    /// Nodes of the index's taxonomy tree: a clade feature's node is below.
    nodes: u32,
    /// Target and window bits: a delta list's jump (`index::locations::JUMP`).
    loc_bits: u32,
    unused: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for IndexArgs<'_> {}
// Kernels read it as `struct DeviceIndex` (cuda/classify.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<IndexArgs>() == 96);

/// Kernel view of the taxonomy; must match `struct DeviceTree` in `cuda/classify.cuh`. It borrows
/// the tree's arrays ([`DeviceTree::args`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TreeArgs<'a> {
    target_nodes: DevAddr<'a>,
    parents: DevAddr<'a>,
    depths: DevAddr<'a>,
    targets: u32,
    enabled: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for TreeArgs<'_> {}
// Kernels read it as `struct DeviceTree` (cuda/classify.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<TreeArgs>() == 32);

/// Must match `struct Candidate` in `cuda/classify.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct DeviceCandidate {
    target: u32,
    hits: u32,
    first_window: u32,
    last_window: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for DeviceCandidate {}
// Kernels read it as `struct Candidate` (cuda/classify.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<DeviceCandidate>() == 16);
// SAFETY: four `u32`s: all zeros is a valid value (the empty candidate).
unsafe impl cudarc::driver::ValidAsZeroBits for DeviceCandidate {}

/// What a batch's hit lists (Kraken's last column) come back as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitLists {
    /// Not at all: no output needs them.
    Off,
    /// Each feature's taxon node, from which the host makes the runs: for the candidates file and
    /// `--confidence`, which read the runs themselves.
    Taxa,
    /// Each read's column as text, formatted on the GPU (`cuda/hit_list.cuh`): for the per-read
    /// lines alone.
    Text,
}

/// Kernel view of a batch's hit lists; must match `struct HitLists` in `cuda/hit_list.cuh`. It
/// borrows the lookups' and the tree's buffers.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct HitListArgs<'a> {
    taxa: DevAddr<'a>,
    feature_count: DevAddr<'a>,
    feature_first: DevAddr<'a>,
    read_mates: DevAddr<'a>,
    node_taxids: DevAddr<'a>,
    reads: u64,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for HitListArgs<'_> {}
const _: () = assert!(std::mem::size_of::<HitListArgs>() == 48);

/// What the GPU found for a batch of reads, in flat arrays (one allocation each, not one per read:
/// the host's threads read it side by side). What the kernels wrote is copied into pinned memory
/// (`pinned::Landing`), which a finished batch keeps for the next (`GpuClassifier::recycle`).
#[derive(Debug, Default)]
pub struct GpuBatch {
    max: usize,
    /// Per read: candidates found, or `u32::MAX` when the read is left to the CPU.
    cand_count: Landing<u32>,
    cands: Landing<DeviceCandidate>,
    /// Per read: its clades (`read_clades`), or `u32::MAX` when it has more than [`MAX_CLADES`];
    /// read `r`'s are `clades[r * MAX_CLADES..]`, each `count << 32 | node`.
    clade_count: Landing<u32>,
    clades: Landing<u64>,
    /// Per mate: features, and (with `HitLists::Taxa` or the amino-acid stage, else empty)
    /// where its room starts in `taxa`.
    feature_count: Landing<u32>,
    feature_first: Vec<u64>,
    /// With `HitLists::Taxa`: each feature's taxon node plus 1 (0: not in the index).
    taxa: Landing<u32>,
    /// With `HitLists::Text`: read `r`'s hit-list column is `text[text_first[r]..text_first[r + 1]]`.
    text_first: Landing<u64>,
    text: Landing<u8>,
    /// First mate of each read (one more: the total), where `feature_first` is kept.
    read_mates: Vec<usize>,
    /// With the amino-acid stage: mate `m`'s amino-acid k-mers are
    /// `amino_codes[amino_first[m]..amino_first[m + 1]]` (`protein::mate_kmers`).
    amino_first: Landing<u64>,
    amino_codes: Landing<u32>,
}

impl StageTimes {
    pub fn add(&mut self, o: &Self) {
        self.batches += o.batches;
        self.reads += o.reads;
        self.upload += o.upload;
        self.kernels += o.kernels;
        self.download += o.download;
    }

    /// The times of every classifier summed; `None` when there are none (the CPU classified).
    pub fn summed(classifiers: &[GpuClassifier]) -> Option<Self> {
        let mut total = classifiers.first().map(|_| Self::default())?;
        for c in classifiers {
            total.add(&c.times());
        }
        Some(total)
    }
}

impl GpuBatch {
    pub fn len(&self) -> usize {
        self.cand_count.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Read `r`'s top candidates, best first, into `out`; false when the read is left to the CPU
    /// (more locations than the GPU's shared memory holds).
    pub fn candidates(&self, r: usize, out: &mut Vec<Candidate>) -> bool {
        out.clear();
        if self.cand_count[r] == u32::MAX {
            return false;
        }
        out.extend(self.cands[r * self.max..][..self.cand_count[r] as usize].iter().map(|c| Candidate {
            target: c.target,
            hits: c.hits,
            first_window: c.first_window,
            last_window: c.last_window,
        }));
        true
    }

    /// Read `r`'s clade features counted per clade, as (taxid, count) in taxid order
    /// (`candidates::count_clades`), into `out`; false when the read is left to the CPU.
    pub fn clades(&self, r: usize, tree: &crate::taxonomy::TaxonTree, out: &mut Vec<(u32, u32)>) -> bool {
        out.clear();
        if self.clade_count[r] == u32::MAX {
            return false;
        }
        let mine = &self.clades[r * MAX_CLADES..][..self.clade_count[r] as usize];
        out.extend(mine.iter().map(|&w| (tree.node_taxid(w as u32), (w >> 32) as u32)));
        true
    }

    /// With hit lists: read `r`'s mates, each as its features' taxon nodes plus 1 (0: absent).
    pub(crate) fn feature_taxa(&self, r: usize) -> impl Iterator<Item = &[u32]> {
        (self.read_mates[r]..self.read_mates[r + 1]).map(|m| {
            let first = self.feature_first[m] as usize;
            self.taxa.get(first..first + self.feature_count[m] as usize).unwrap_or(&[])
        })
    }

    /// With `HitLists::Text`: read `r`'s hit-list column, as `output::write_hit_list` writes it.
    pub fn hit_text(&self, r: usize) -> Option<&[u8]> {
        (!self.text_first.is_empty()).then(|| &self.text[self.text_first[r] as usize..self.text_first[r + 1] as usize])
    }

    /// With the amino-acid stage: read `r`'s mates' amino-acid k-mers, each mate's in
    /// `protein::mate_kmers`' order; `None` when the GPU did not list them.
    pub(crate) fn amino_kmers(&self, r: usize) -> Option<impl Iterator<Item = &[u32]>> {
        (!self.amino_first.is_empty()).then(|| {
            (self.read_mates[r]..self.read_mates[r + 1])
                .map(|m| &self.amino_codes[self.amino_first[m] as usize..self.amino_first[m + 1] as usize])
        })
    }
}

/// What the GPUs found for a batch split over them: part `p` holds reads `p * chunk ..`.
#[derive(Debug, Default)]
pub struct GpuResults {
    parts: Vec<GpuBatch>,
    chunk: usize,
}

impl GpuResults {
    /// See [`GpuBatch::candidates`].
    pub fn candidates(&self, r: usize, out: &mut Vec<Candidate>) -> bool {
        self.parts[r / self.chunk].candidates(r % self.chunk, out)
    }

    /// See [`GpuBatch::clades`].
    pub fn clades(&self, r: usize, tree: &crate::taxonomy::TaxonTree, out: &mut Vec<(u32, u32)>) -> bool {
        self.parts[r / self.chunk].clades(r % self.chunk, tree, out)
    }

    /// See `GpuBatch::feature_taxa`.
    pub fn feature_taxa(&self, r: usize) -> impl Iterator<Item = &[u32]> {
        self.parts[r / self.chunk].feature_taxa(r % self.chunk)
    }

    /// See [`GpuBatch::hit_text`].
    pub fn hit_text(&self, r: usize) -> Option<&[u8]> {
        self.parts[r / self.chunk].hit_text(r % self.chunk)
    }

    /// See `GpuBatch::amino_kmers`.
    pub fn amino_kmers(&self, r: usize) -> Option<impl Iterator<Item = &[u32]>> {
        self.parts[r / self.chunk].amino_kmers(r % self.chunk)
    }

    /// Hands each part back to its GPU's classifier (see [`GpuClassifier::recycle`]).
    pub fn recycle(self, classifiers: &[GpuClassifier]) {
        for (c, part) in classifiers.iter().zip(self.parts) {
            c.recycle(part);
        }
    }
}

/// Classifies `reads` on every GPU at once, each taking a contiguous share: every share is packed
/// into its GPU's pinned memory here, mates copied by the calling thread's pool, then each GPU
/// uploads and classifies its share on a thread of its own.
pub fn classify_on(
    classifiers: &[GpuClassifier],
    reads: &[&[&[u8]]],
    hit_lists: HitLists,
) -> Result<GpuResults, GpuError> {
    run_on(classifiers, pack_on(classifiers, reads)?, hit_lists)
}

/// A batch packed for every GPU (see [`pack_on`]).
pub struct PackedBatch {
    parts: Vec<Packed>,
    chunk: usize,
}

/// A batch's reads as the packer takes them: read `r`'s mate `m`, each read with the same
/// number of mates (one, or two for pairs).
pub trait Reads: Sync {
    /// Reads in the batch.
    fn count(&self) -> usize;
    /// Mates per read.
    fn mates_per_read(&self) -> usize;
    fn mate(&self, r: usize, m: usize) -> &[u8];
}

/// Reads given as their mates' slices (tests and benchmarks).
impl Reads for [&[&[u8]]] {
    fn count(&self) -> usize {
        self.len()
    }

    fn mates_per_read(&self) -> usize {
        self.first().map_or(1, |r| r.len())
    }

    fn mate(&self, r: usize, m: usize) -> &[u8] {
        self[r][m]
    }
}

/// Packs `reads` for every GPU, each a contiguous share, into its pinned memory, on the calling
/// thread's pool: the reading side of a pipeline does this, so that the GPU's side only uploads
/// and runs kernels.
pub fn pack_on<R: Reads + Sync + ?Sized>(classifiers: &[GpuClassifier], reads: &R) -> Result<PackedBatch, GpuError> {
    use rayon::prelude::*;
    let n = reads.count();
    let chunk = n.div_ceil(classifiers.len()).max(1);
    // A GPU whose share would be empty gets no part (the parts are found by read / chunk). The
    // shares are packed at once: one after the other, packing was the slowest stage on two GPUs.
    let parts: Vec<Packed> = classifiers
        .par_iter()
        .enumerate()
        .take(n.div_ceil(chunk))
        .map(|(i, c)| c.pack(reads, i * chunk..((i + 1) * chunk).min(n)))
        .collect::<Result<_, _>>()?;
    Ok(PackedBatch { parts, chunk })
}

/// Uploads and classifies a packed batch, each GPU its share on a thread of its own.
pub fn run_on(classifiers: &[GpuClassifier], packed: PackedBatch, hit_lists: HitLists) -> Result<GpuResults, GpuError> {
    let PackedBatch { parts, chunk } = packed;
    // One GPU: on this thread.
    if let ([c], 1) = (classifiers, parts.len()) {
        let part = parts.into_iter().next().expect("one part");
        return Ok(GpuResults { parts: vec![c.run(part, hit_lists)?], chunk });
    }
    let parts = std::thread::scope(|scope| {
        let jobs: Vec<_> =
            classifiers.iter().zip(parts).map(|(c, p)| scope.spawn(move || c.run(p, hit_lists))).collect();
        jobs.into_iter().map(|j| j.join().expect("a GPU batch does not panic")).collect::<Result<Vec<_>, _>>()
    })?;
    Ok(GpuResults { parts, chunk })
}

/// A share of a batch packed for one GPU: the mates' bases back to back in pinned memory, with
/// where each mate starts, its length and the room for its features.
pub struct Packed {
    staging: HostBuffer<u8>,
    /// Where the tables lie in `staging`, after the bases.
    tables: StagedTables,
    bases: usize,
    mates: usize,
    reads: usize,
    /// The mates' room for features, summed (the last of `feature_first`).
    features: u64,
    /// How long packing this share took. Each GPU's share is timed on its own: the stage times
    /// are summed over GPUs, and adding the whole batch's packing to each share counted it once
    /// per GPU (on 2 GPUs, 10.1 s of "packing and upload" against 5.1 s on one).
    packing: Duration,
}

/// Where a packed share's tables lie in its staging memory, after the bases, each from an 8-byte
/// boundary: per mate where its bases start (u64), where its features start (u64, one more: the
/// total), per read where its features start and its first mate (u64, one more each), per mate
/// its length (u32), per read its candidate range (u32). All are copied from pinned memory:
/// copies from the heap are staged by the driver, which waits for the stream first.
#[derive(Debug, Clone, Copy)]
struct StagedTables {
    offset: usize,
    feature_first: usize,
    first_feature: usize,
    first_mate: usize,
    len: usize,
    range: usize,
    /// The bytes the staging memory needs.
    end: usize,
}

impl StagedTables {
    fn new(bases: usize, mates: usize, reads: usize) -> Self {
        let mut at = bases.next_multiple_of(8);
        let mut take = |bytes: usize| {
            let start = at;
            at = (at + bytes).next_multiple_of(8);
            start
        };
        let (offset, feature_first) = (take(mates * 8), take((mates + 1) * 8));
        let (first_feature, first_mate) = (take((reads + 1) * 8), take((reads + 1) * 8));
        let (len, range) = (take(mates * 4), take(reads * 4));
        Self { offset, feature_first, first_feature, first_mate, len, range, end: at }
    }

    /// The bases and each table as slices of `staged` (at least `end` bytes, from an 8-byte
    /// boundary), for `mates` mates of `reads` reads: packing writes them in place.
    fn slices<'a>(&self, staged: &'a mut [u8], mates: usize, reads: usize) -> TableSlices<'a> {
        // Cuts `bytes` at `start` off the front of `rest`, which begins at `at`.
        fn cut<'a>(rest: &mut &'a mut [u8], at: &mut usize, start: usize, bytes: usize) -> &'a mut [u8] {
            let (_, from) = std::mem::take(rest).split_at_mut(start - *at);
            let (mine, after) = from.split_at_mut(bytes);
            (*rest, *at) = (after, start + bytes);
            mine
        }
        let (mut rest, mut at) = (&mut staged[..self.end], 0);
        let bases = self.offset.min(self.end);
        let bases = &mut cut(&mut rest, &mut at, 0, bases)[..];
        let mut words =
            |start, n: usize| -> &'a mut [u64] { bytemuck::cast_slice_mut(cut(&mut rest, &mut at, start, n * 8)) };
        let offset = words(self.offset, mates);
        let feature_first = words(self.feature_first, mates + 1);
        let first_feature = words(self.first_feature, reads + 1);
        let first_mate = words(self.first_mate, reads + 1);
        let len = bytemuck::cast_slice_mut(cut(&mut rest, &mut at, self.len, mates * 4));
        let range = bytemuck::cast_slice_mut(cut(&mut rest, &mut at, self.range, reads * 4));
        TableSlices { bases, offset, feature_first, first_feature, first_mate, len, range }
    }
}

/// A share's bases and tables in its staging memory (`StagedTables::slices`).
struct TableSlices<'a> {
    bases: &'a mut [u8],
    offset: &'a mut [u64],
    feature_first: &'a mut [u64],
    first_feature: &'a mut [u64],
    first_mate: &'a mut [u64],
    len: &'a mut [u32],
    range: &'a mut [u32],
}

/// How many features a mate of `len` bases has room for: every window's sketch for long mates,
/// for short ones the sketch's share of the k-mers they hold (`Sketcher::read_features`).
fn feature_room(p: &SketchParams, len: usize) -> u64 {
    let per_window = (p.window - p.k + 1) as u64;
    let kmers = (len as u64 + 1).saturating_sub(p.k as u64);
    if kmers > 2 * per_window {
        p.window_count(len) * p.sketch_size as u64
    } else {
        ((p.sketch_size as u64 * kmers + per_window / 2) / per_window).max(1)
    }
}

/// A group of reads' share of a packed batch (or, summed, where a group starts).
#[derive(Debug, Clone, Copy, Default)]
struct GroupSize {
    mates: usize,
    bases: usize,
    room: u64,
}

/// Streams (classifiers) a GPU classifies on: with one, the GPU idles while its host thread waits
/// between a batch's kernels (a quarter of the stage's time against a 20 Gbp index: 28 ms a batch
/// host-timed, 20.4 ms of kernels); with two, one batch's kernels run in the other's waits and
/// copies. `kmerdb classify` gives whole batches to the streams in turn (lanes, each on a host
/// thread of its own): splitting each batch over them and joining the halves left the GPU idle
/// at every join. `KMERDB_GPU_STREAMS` (hidden) sets it, for benchmarks that compare.
pub fn streams_per_gpu() -> usize {
    std::env::var("KMERDB_GPU_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(2).clamp(1, 8)
}

/// The index on one GPU, ready for batches of reads.
pub struct GpuClassifier<'g> {
    gpu: &'g Gpu,
    /// The index, shared by the classifiers of all GPUs (its per-shard tables point into it).
    shards: std::sync::Arc<DeviceShards>,
    index: IndexTables,
    tree: DeviceTree,
    sketch: SketchParams,
    max_candidates: usize,
    insert_size: usize,
    /// Copying the index to the device.
    pub load_time: Duration,
    times: std::sync::Mutex<StageTimes>,
    /// Pinned memory the batches' bases are packed into, grown as needed (one per batch in
    /// flight: several samples may classify at once). `HostBuffer`s, not the driver's pinned
    /// allocations: those pin about 2 GB/s under a lock of the whole process, and the first
    /// batches of a 2-GPU run (a 98 MB buffer for each of 8 batches in flight) waited for them.
    staging: std::sync::Mutex<Vec<HostBuffer<u8>>>,
    /// Finished batches, for their vectors (a few: batches overlap in the pipeline's stages).
    recycled: std::sync::Mutex<Vec<GpuBatch>>,
    /// With the amino-acid stage: the k-mers' settings, to list every mate's k-mers.
    protein: Option<crate::protein::ProteinParams>,
}

impl Drop for GpuClassifier<'_> {
    /// The index's device buffers are freed by whichever thread drops the classifier (the run's
    /// main thread, which never made the GPU's context current): bind it first, else every free
    /// fails with an invalid context and the memory stays allocated until the process ends
    /// (compute-sanitizer counted 9 such frees a classification).
    fn drop(&mut self) {
        let _ = self.gpu.ctx.bind_to_thread();
    }
}

/// The index's per-shard tables on one GPU, which [`IndexArgs`] points to, with the index's
/// shape. The tables hold each shard's slot and word addresses as data (bare `u64`s, no lifetime):
/// they point into buffers that the tables' owner keeps alive as long as it uses them (a
/// [`DeviceShards`] for the classifier, the old shards' copy for the GPU update).
pub struct IndexTables {
    slot_base: CudaSlice<u64>,
    word_base: CudaSlice<u64>,
    buckets: CudaSlice<u64>,
    shard_words: CudaSlice<u64>,
    /// Per shard: its slots' tag bits, code bits << 8, fixed codes << 16, its lists' unit << 24
    /// and its buckets' base bits << 32 (`struct DeviceIndex`).
    key_code: CudaSlice<u64>,
    base_line: CudaSlice<u64>,
    window_starts: CudaSlice<u64>,
    /// Never empty (a kernel's argument is a buffer's address).
    window_dir: CudaSlice<u32>,
    shard_bits: u32,
    entry_bits: u32,
    window_bits: u32,
    targets: u32,
    dir_shift: u32,
    nodes: u32,
    loc_bits: u32,
}

impl IndexTables {
    /// Uploads the per-shard tables of `index` (in this order): the device address of each
    /// shard's key index and of its stream's first word, its buckets and its words; the widths of
    /// its slots come from the index.
    pub fn upload(
        gpu: &Gpu,
        index: &Index,
        slot_base: &[u64],
        word_base: &[u64],
        buckets: &[u64],
        shard_words: &[u64],
    ) -> Result<Self, GpuError> {
        let s = &gpu.stream;
        let layout = index.layout();
        let key_code: Vec<u64> = (0..index.shard_count())
            .map(|sh| index.shard_entry(sh))
            .map(|e| {
                e.tag_bits as u64
                    | (e.code_bits as u64) << 8
                    | (e.fixed_codes as u64) << 16
                    | (e.unit_bits as u64) << 24
                    | (e.base_bits as u64) << 32
            })
            .collect();
        let base_line: Vec<u64> = (0..index.shard_count())
            .map(|sh| index.shard_entry(sh))
            .flat_map(|e| [e.base_slope, e.base_bias])
            .collect();
        let (starts, dir, dir_shift) = index.windows().tables();
        Ok(Self {
            slot_base: s.clone_htod(slot_base)?,
            word_base: s.clone_htod(word_base)?,
            buckets: s.clone_htod(buckets)?,
            shard_words: s.clone_htod(shard_words)?,
            key_code: s.clone_htod(&key_code)?,
            base_line: s.clone_htod(&base_line)?,
            window_starts: s.clone_htod(starts)?,
            window_dir: s.clone_htod(if dir.is_empty() { &[0u32][..] } else { dir })?,
            shard_bits: index.header().shard_bits,
            entry_bits: layout.stored_bits,
            window_bits: layout.window_bits,
            targets: index.targets().len() as u32,
            dir_shift,
            nodes: index.taxonomy().taxa().len() as u32,
            loc_bits: layout.bits(),
        })
    }

    /// Whether every location of a target the index has, `target << window_bits | window`, is
    /// below `u32::MAX`, so that 32-bit keys sort them (`u32::MAX` standing for NOT_FOUND).
    pub(crate) fn locations_fit_u32(&self) -> bool {
        (u64::from(self.targets) << self.window_bits) <= u64::from(u32::MAX)
    }

    /// The kernels' view of the index, borrowing the tables.
    pub fn args(&self, gpu: &Gpu) -> IndexArgs<'_> {
        IndexArgs {
            slot_base: DevAddr::of(gpu, &self.slot_base),
            word_base: DevAddr::of(gpu, &self.word_base),
            buckets: DevAddr::of(gpu, &self.buckets),
            shard_words: DevAddr::of(gpu, &self.shard_words),
            key_code: DevAddr::of(gpu, &self.key_code),
            base_line: DevAddr::of(gpu, &self.base_line),
            window_starts: DevAddr::of(gpu, &self.window_starts),
            window_dir: DevAddr::of(gpu, &self.window_dir),
            shard_bits: self.shard_bits,
            entry_bits: self.entry_bits,
            window_bits: self.window_bits,
            targets: self.targets,
            dir_shift: self.dir_shift,
            nodes: self.nodes,
            loc_bits: self.loc_bits,
            unused: 0,
        }
    }
}

/// The taxonomy on one GPU: each target's node, each node's parent and depth.
struct DeviceTree {
    target_nodes: CudaSlice<u32>,
    parents: CudaSlice<u32>,
    depths: CudaSlice<u32>,
    /// Each node's taxid, for the hit lists' text.
    node_taxids: CudaSlice<u32>,
    targets: u32,
}

impl DeviceTree {
    /// The kernels' view of the tree, borrowing its arrays; `enabled` for hit lists.
    fn args(&self, gpu: &Gpu, enabled: bool) -> TreeArgs<'_> {
        TreeArgs {
            target_nodes: DevAddr::of(gpu, &self.target_nodes),
            parents: DevAddr::of(gpu, &self.parents),
            depths: DevAddr::of(gpu, &self.depths),
            targets: self.targets,
            enabled: enabled as u32,
        }
    }
}

/// What `read_lookups` gives, on the device: per feature its list, where its locations are found,
/// how many there are and its clade; per mate its feature count.
struct Lookups {
    features: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    found: CudaSlice<u64>,
    lengths: CudaSlice<u64>,
    clades: CudaSlice<u32>,
}

/// Finished batches kept for their vectors, per GPU: as many as a sample's pipeline has in flight
/// after the GPU's stage (queued, finishing, queued), plus one.
const RECYCLED_BATCHES: usize = 4;

/// A GPU's memory pool keeping what a batch frees for the next batch, while the classifiers
/// last. Every batch allocates its arrays (stream-ordered, `cuMemAllocAsync`, from the device's
/// default pool) and frees them; at the pool's default release threshold (0) each synchronize
/// handed the freed memory back to the driver and the next batch mapped it again: with the
/// threshold raised, the kernels' phase of a batch took 20-30% less time (2 H200s, 50 Gbp,
/// bench/results/HISTORY.md, "Twentieth session"). Dropped, it lowers the threshold again and
/// gives the pool's memory back, so that a build later in the process sees the GPU's memory free.
struct KeptFreedMemory {
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    pool: cudarc::driver::sys::CUmemoryPool,
}

// SAFETY: the pool handle is the device's default pool, valid for the process; the driver's
// calls on it are thread-safe.
unsafe impl Send for KeptFreedMemory {}
// SAFETY: as for `Send`: nothing here is touched but through the driver.
unsafe impl Sync for KeptFreedMemory {}

impl KeptFreedMemory {
    /// `None` where the GPU has no stream-ordered allocator (every allocation is then the
    /// driver's anyway).
    fn on(gpu: &Gpu) -> Result<Option<Self>, GpuError> {
        if !gpu.ctx.has_async_alloc() {
            return Ok(None);
        }
        gpu.ctx.bind_to_thread()?;
        let mut pool: cudarc::driver::sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: the device is this context's.
        unsafe { cudarc::driver::sys::cuDeviceGetDefaultMemPool(&mut pool, gpu.ctx.cu_device()).result()? };
        let kept = Self { ctx: gpu.ctx.clone(), pool };
        kept.release_threshold(u64::MAX)?;
        Ok(Some(kept))
    }

    fn release_threshold(&self, bytes: u64) -> Result<(), GpuError> {
        let mut bytes = bytes;
        // SAFETY: the attribute takes a u64.
        unsafe {
            cudarc::driver::sys::cuMemPoolSetAttribute(
                self.pool,
                cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut bytes as *mut u64).cast(),
            )
            .result()?;
        }
        Ok(())
    }
}

impl Drop for KeptFreedMemory {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _ = self.release_threshold(0);
        // SAFETY: trims only memory the pool holds unused.
        let _ = unsafe { cudarc::driver::sys::cuMemPoolTrimTo(self.pool, 0) }.result();
    }
}

/// Where the GPU classifier's time went, summed over batches (and over GPUs, with several).
#[derive(Debug, Clone, Copy, Default)]
pub struct StageTimes {
    pub batches: u64,
    pub reads: u64,
    /// Packing mates on the host and queuing their copy to the device.
    pub upload: Duration,
    /// The copies to the device and the kernels, with the totals read back.
    pub kernels: Duration,
    /// Candidates and hit-list taxa back to the host.
    pub download: Duration,
}

/// What `hit_list_text` reads, on the device: each feature's taxon node + 1, each mate's feature
/// count and where its features start, each read's first mate (one more item than reads), each
/// node's taxid.
struct HitSources<'a> {
    taxa: &'a CudaSlice<u32>,
    counts: &'a CudaSlice<u32>,
    feature_first: &'a CudaSlice<u64>,
    read_mates: &'a CudaSlice<u64>,
    node_taxids: &'a CudaSlice<u32>,
}

/// Each read's hit-list column as text (`hit_list_text`, twice around a scan). Returns where each
/// read's text starts (one more item than reads: the total), and the text.
fn hit_text(gpu: &Gpu, src: HitSources) -> Result<(CudaSlice<u64>, CudaSlice<u8>), GpuError> {
    let s = &gpu.stream;
    let n = src.read_mates.len() as u64 - 1;
    let args = HitListArgs {
        taxa: DevAddr::of(gpu, src.taxa),
        feature_count: DevAddr::of(gpu, src.counts),
        feature_first: DevAddr::of(gpu, src.feature_first),
        read_mates: DevAddr::of(gpu, src.read_mates),
        node_taxids: DevAddr::of(gpu, src.node_taxids),
        reads: n,
    };
    let f = gpu.function("hit_list_text")?;
    let (config, null) = (launch_config(gpu, n), 0u64);
    crate::gpu::condense::placed_lists(
        gpu,
        n,
        |lengths| {
            let mut b = s.launch_builder(&f);
            b.arg(&args).arg(&null).arg(&null).arg(lengths);
            // SAFETY: with `first` null, read r writes lengths[r] only; the buffers `args` points
            // to live until `placed_lists` synchronizes the stream.
            unsafe { b.launch(config) }?;
            Ok(())
        },
        |first, text| {
            let mut b = s.launch_builder(&f);
            b.arg(&args).arg(first).arg(text).arg(&null);
            // SAFETY: read r writes its text's counted bytes from first[r], within the total;
            // with `first` given it writes no length.
            unsafe { b.launch(config) }?;
            Ok(())
        },
    )
}

/// Set by [`twins::wide_location_keys`]: every read's locations sorted as 64-bit keys, also where
/// 32-bit ones hold them (the tests' indexes are small).
static WIDE_LOCATION_KEYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Entry points for the tests that compare the kernels with their CPU twins.
pub mod twins {
    use super::*;

    /// Makes `read_candidates` sort 64-bit keys on every index (`on`), or 32-bit ones where the
    /// index's locations fit (the default), so that a test checks both kernels on a small index.
    pub fn wide_location_keys(on: bool) {
        WIDE_LOCATION_KEYS.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The hit-list columns `hit_list_text` writes for reads whose mates' features have the taxa
    /// `mate_taxa` (each a node + 1, or 0), read r's mates starting at `read_mates[r]`, with the
    /// nodes' taxids `node_taxids` (`output::write_hit_list` on the CPU).
    pub fn hit_text(
        gpu: &Gpu,
        mate_taxa: &[Vec<u32>],
        read_mates: &[usize],
        node_taxids: &[u32],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let s = &gpu.stream;
        let counts: Vec<u32> = mate_taxa.iter().map(|t| t.len() as u32).collect();
        let mut feature_first = vec![0u64];
        for t in mate_taxa {
            feature_first.push(feature_first.last().unwrap() + t.len() as u64);
        }
        let upload = |v: &[u32]| if v.is_empty() { s.alloc_zeros::<u32>(1) } else { s.clone_htod(v) };
        let (taxa, counts, nodes) = (upload(&mate_taxa.concat())?, upload(&counts)?, upload(node_taxids)?);
        let feature_first = s.clone_htod(&feature_first)?;
        let read_mates = s.clone_htod(&read_mates.iter().map(|&m| m as u64).collect::<Vec<_>>())?;
        let src = HitSources {
            taxa: &taxa,
            counts: &counts,
            feature_first: &feature_first,
            read_mates: &read_mates,
            node_taxids: &nodes,
        };
        let (first, text) = super::hit_text(gpu, src)?;
        let (first, text) = (s.clone_dtoh(&first)?, s.clone_dtoh(&text)?);
        Ok(first.windows(2).map(|w| text[w[0] as usize..w[1] as usize].to_vec()).collect())
    }
}

/// Copies the shard data's bytes `range` to the device through two pinned staging buffers, so
/// that filling one chunk overlaps the copy of the one before. The bytes are read from the file
/// (`Index::read_shard_data`, from the page cache when it holds them), not through the index's
/// mapping: mapping every page of a 20 GB index, then unmapping them at the end, cost most of a
/// second of a run.
fn upload_pinned(gpu: &Gpu, index: &Index, range: std::ops::Range<usize>) -> Result<CudaSlice<u8>, GpuError> {
    const CHUNK: usize = 64 << 20;
    // Each thread reads this much at a time: reading from the page cache is a copy that one
    // thread does at a few GB/s.
    const PIECE: usize = 1 << 20;
    let s = &gpu.stream;
    let len = range.len();
    let mut dev = s.alloc_zeros::<u8>(len.max(1))?;
    // Pinned by registering (`HostBuffer`): the driver's own pinned allocation of these 128 MiB
    // took about 0.06 s of the load. Two chunks take turns; an index of one chunk or less needs
    // one, of its size.
    let chunks = len.div_ceil(CHUNK).clamp(1, 2);
    let mut staging =
        (0..chunks).map(|_| HostBuffer::<u8>::new(gpu, CHUNK.min(len).max(1))).collect::<Result<Vec<_>, _>>()?;
    let mut done: [Option<cudarc::driver::CudaEvent>; 2] = [None, None];
    for (i, at) in (0..len).step_by(CHUNK).enumerate() {
        let n = CHUNK.min(len - at);
        let b = i % chunks;
        if let Some(e) = done[b].take() {
            e.synchronize()?;
        }
        // SAFETY: the buffer's last copy has finished (the event above).
        let host = &mut unsafe { staging[b].as_mut_slice() }[..n];
        use rayon::prelude::*;
        host.par_chunks_mut(PIECE)
            .enumerate()
            .try_for_each(|(j, piece)| index.read_shard_data(range.start + at + j * PIECE, piece))
            .map_err(|source| GpuError::IndexRead { path: index.path().display().to_string(), source })?;
        s.memcpy_htod(&*host, &mut dev.slice_mut(at..at + n))?;
        done[b] = Some(s.record_event(None)?);
    }
    s.synchronize()?;
    drop(staging);
    Ok(dev)
}

/// The index's shards in the memory of one or more GPUs. Where every GPU has room for the whole
/// index, each holds a copy (the first from the host, the others from the first, GPU to GPU), and
/// each GPU's lookups stay in its own memory. Otherwise GPU `d` of `n` holds the shards `s` with
/// `s * n / shards == d` (contiguous in the file, so one copy each), and every GPU reads the
/// others' shards through peer access: on 2 H200s against a 20 GB index that held two GPUs to the
/// rate of one (bench/results/HISTORY.md, issue 32).
pub struct DeviceShards {
    /// Each GPU's slots and words (kept alive here).
    _buffers: Vec<CudaSlice<u8>>,
    /// Per copy of the index (one per GPU, or one spread over them all), per shard: the device
    /// address of its first slot and of its stream's first word, in `_buffers` (bare addresses:
    /// they become data in each classifier's [`IndexTables`]; the classifier holds this value,
    /// and so its buffers, in an `Arc`).
    bases: Vec<ShardBases>,
    buckets: Vec<u64>,
    shard_words: Vec<u64>,
    /// The copy from the host as (bytes, seconds), for the next `--gpus all` to judge the copy
    /// rate by (`classify::device_choice`): only a copy from memory (not a read from the disk)
    /// with no copies between GPUs, which are not timed apart.
    timed_upload: Option<(u64, f64)>,
    /// The GPUs' pools keeping the batches' freed memory; after `_buffers`, so that the index's
    /// memory goes back to the driver too when these drop.
    _kept: Vec<KeptFreedMemory>,
}

/// The device buffers a copy made, where each copy's shards start in them, and the bytes copied
/// from the host.
type Copies = (Vec<CudaSlice<u8>>, Vec<ShardBases>, u64);

/// Where each shard of one copy of the index starts on the device.
struct ShardBases {
    slot_base: Vec<u64>,
    word_base: Vec<u64>,
}

/// A GPU's free memory, capped by `KMERDB_GPU_MEMORY_LIMIT` (bytes) where set: a hidden setting
/// with which a test makes an index larger than one GPU without one that large.
fn free_memory(gpu: &Gpu) -> Result<usize, GpuError> {
    let (free, _) = gpu.memory()?;
    let limit = std::env::var("KMERDB_GPU_MEMORY_LIMIT").ok().and_then(|l| l.parse::<usize>().ok());
    Ok(limit.map_or(free, |l| l.min(free)))
}

/// Device memory a GPU needs for `share` bytes of the index: the share, plus room for batches of
/// reads (a quarter of it, at least 2 GiB).
fn with_working_space(share: u64) -> u64 {
    share + (share / 4).max(2 << 30)
}

impl DeviceShards {
    /// Copies the index to `gpus`: whole to each where every one has room for it (and working
    /// space), else spread over them; a GPU without room for its share is a `TooLarge` error that
    /// says how many GPUs would hold it.
    pub fn upload(gpus: &[&Gpu], index: &Index) -> Result<Self, GpuError> {
        let data = index.shard_data();
        let shards = index.shard_count();
        let entries: Vec<_> = (0..shards).map(|sh| *index.shard_entry(sh)).collect();
        // Where shard `sh`'s block starts in the shard data; `starts[shards]` is its end.
        let starts: Vec<u64> = entries.iter().map(|e| e.offset).chain([data.len() as u64]).collect();
        let total = data.len() as u64;
        let mut free = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            free.push(free_memory(gpu)? as u64);
        }
        let whole_on_each = gpus.len() > 1 && free.iter().all(|&f| with_working_space(total) <= f);
        if gpus.len() > 1 {
            crate::gpu::multi::enable_peer_access(gpus)?;
        }
        // Timed for the next device choice only when it is a copy, not a read from the disk.
        let in_memory = index.resident_fraction() > 0.9;
        let started = Instant::now();
        let (buffers, bases, copied) = if whole_on_each {
            Self::copy_to_each(gpus, index, data, &starts, &entries)?
        } else {
            Self::spread(gpus, &free, index, data, &starts, &entries)?
        };
        let seconds = started.elapsed().as_secs_f64();
        Ok(Self {
            _buffers: buffers,
            bases,
            buckets: entries.iter().map(|e| e.buckets).collect(),
            shard_words: entries.iter().map(|e| e.words).collect(),
            timed_upload: (in_memory && !whole_on_each).then_some((copied, seconds)),
            _kept: Vec::new(),
        })
    }

    /// The whole index on every GPU: from the host to the first, then from the first to the
    /// others (GPU to GPU, over NVLink or PCIe, not again through the host's pinned buffers).
    fn copy_to_each(
        gpus: &[&Gpu],
        index: &Index,
        data: &[u8],
        starts: &[u64],
        entries: &[crate::index::format::ShardEntry],
    ) -> Result<Copies, GpuError> {
        let first = upload_pinned(gpus[0], index, 0..data.len())?;
        let mut buffers = vec![first];
        for gpu in &gpus[1..] {
            gpu.ctx.bind_to_thread()?;
            let copy = gpu.stream.alloc_zeros::<u8>(data.len().max(1))?;
            // SAFETY: both buffers hold `data.len()` bytes and live until the stream is
            // synchronized below; the first copy is finished (`upload_pinned` synchronized).
            unsafe {
                crate::gpu::multi::queue_peer_copy(
                    gpu,
                    DevAddr::of(gpu, &copy),
                    gpus[0],
                    DevAddr::of(gpus[0], &buffers[0]),
                    data.len(),
                    &gpu.stream,
                )?;
            }
            gpu.stream.synchronize()?;
            buffers.push(copy);
        }
        let bases = gpus
            .iter()
            .zip(&buffers)
            .map(|(gpu, dev)| {
                let slot_base: Vec<u64> =
                    (0..entries.len()).map(|sh| DevAddr::at(gpu, dev, starts[sh] as usize).raw()).collect();
                let word_base = slot_base.iter().zip(entries).map(|(b, e)| b + e.key_bytes()).collect();
                ShardBases { slot_base, word_base }
            })
            .collect();
        Ok((buffers, bases, data.len() as u64))
    }

    /// GPU `d` of `n` holds the shards `multi::owned_shards(d, n, shards)`, one stretch of the
    /// file each; one table of bases serves every GPU (peer access reads the others').
    fn spread(
        gpus: &[&Gpu],
        free: &[u64],
        index: &Index,
        data: &[u8],
        starts: &[u64],
        entries: &[crate::index::format::ShardEntry],
    ) -> Result<Copies, GpuError> {
        let (shards, n, total) = (entries.len(), gpus.len(), data.len() as u64);
        let (mut slot_base, mut word_base, mut buffers) = (vec![0u64; shards], vec![0u64; shards], Vec::new());
        let mut copied = 0u64;
        for (d, gpu) in gpus.iter().enumerate() {
            let mine = crate::gpu::multi::owned_shards(d, n, shards);
            let (lo, hi) = (mine.start, mine.end.max(mine.start));
            // The GPU's shards are one stretch of the file: one copy.
            let bytes = &data[starts[lo] as usize..starts[hi] as usize];
            let needed = bytes.len() as u64;
            if with_working_space(needed) > free[d] {
                // The fewest GPUs with this much free memory whose shares would fit.
                let would = (n..=shards).find(|&m| with_working_space(total.div_ceil(m as u64)) <= free[d]);
                let advice = match would {
                    Some(m) => format!(
                        "it would fit on {m} GPUs with as much free memory; or classify on the CPU (--gpus none), which memory-maps the index"
                    ),
                    None => "classify on the CPU (--gpus none), which memory-maps the index".into(),
                };
                return Err(GpuError::TooLarge {
                    what: format!("the index ({})", crate::resources::human_bytes(total)),
                    per_gpu: with_working_space(needed),
                    gpus: n,
                    ordinal: gpu.ordinal,
                    free: free[d],
                    advice,
                });
            }
            let dev = upload_pinned(gpu, index, starts[lo] as usize..starts[hi] as usize)?;
            copied += needed;
            for sh in mine {
                slot_base[sh] = DevAddr::at(gpu, &dev, (starts[sh] - starts[lo]) as usize).raw();
                word_base[sh] = slot_base[sh] + entries[sh].key_bytes();
            }
            buffers.push(dev);
        }
        Ok((buffers, vec![ShardBases { slot_base, word_base }], copied))
    }

    /// The bases GPU `d` (its place among the run's GPUs) reads: its own copy, or the one spread.
    fn bases_for(&self, d: usize) -> &ShardBases {
        &self.bases[d.min(self.bases.len() - 1)]
    }
}

impl<'g> GpuClassifier<'g> {
    /// A classifier on `gpu`, the `d`th of the GPUs `shards` was copied to, for the index whose
    /// shards `shards` holds (on this GPU or others).
    pub fn new(
        gpu: &'g Gpu,
        d: usize,
        index: &Index,
        shards: std::sync::Arc<DeviceShards>,
        max_candidates: usize,
        insert_size: usize,
    ) -> Result<Self, GpuError> {
        let start = Instant::now();
        let s = &gpu.stream;
        let bases = shards.bases_for(d);
        let tables =
            IndexTables::upload(gpu, index, &bases.slot_base, &bases.word_base, &shards.buckets, &shards.shard_words)?;
        let t = index.taxonomy();
        let target_nodes: Vec<u32> = index
            .targets()
            .iter()
            .map(|target| t.node(target.taxid).expect("every target's taxon is in the index's tree"))
            .collect();
        let upload = |v: &[u32]| if v.is_empty() { s.alloc_zeros::<u32>(1) } else { s.clone_htod(v) };
        let tree = DeviceTree {
            target_nodes: upload(&target_nodes)?,
            parents: upload(t.parents())?,
            depths: upload(t.depths())?,
            node_taxids: upload(&t.taxa().iter().map(|taxon| taxon.taxid).collect::<Vec<u32>>())?,
            targets: target_nodes.len() as u32,
        };
        s.synchronize()?;
        Ok(Self {
            gpu,
            shards,
            index: tables,
            tree,
            sketch: index.header().sketch,
            max_candidates,
            insert_size,
            load_time: start.elapsed(),
            times: Default::default(),
            staging: Default::default(),
            recycled: Default::default(),
            protein: None,
        })
    }

    /// One classifier per GPU, for the index spread over all of them; `load_time` of the first
    /// includes copying the index.
    ///
    /// `gpus` may hold several handles of one GPU, each with a stream of its own
    /// ([`Gpu::with_own_stream`], [`streams_per_gpu`]): their classifiers share that GPU's copy
    /// of the index, and their batches' kernels and copies overlap on it.
    pub fn on_gpus(
        gpus: &'g [Gpu],
        index: &Index,
        max_candidates: usize,
        insert_size: usize,
    ) -> Result<Vec<Self>, GpuError> {
        let start = Instant::now();
        let mut distinct: Vec<&Gpu> = Vec::new();
        for g in gpus {
            if !distinct.iter().any(|d| d.ordinal == g.ordinal) {
                distinct.push(g);
            }
        }
        let kept = distinct.iter().filter_map(|g| KeptFreedMemory::on(g).transpose()).collect::<Result<_, _>>()?;
        let shards = std::sync::Arc::new(DeviceShards { _kept: kept, ..DeviceShards::upload(&distinct, index)? });
        let mut all = gpus
            .iter()
            .map(|g| {
                let d = distinct.iter().position(|x| x.ordinal == g.ordinal).expect("every handle's GPU is listed");
                Self::new(g, d, index, shards.clone(), max_candidates, insert_size)
            })
            .collect::<Result<Vec<_>, _>>()?;
        all[0].load_time = start.elapsed();
        Ok(all)
    }

    /// `DeviceShards::timed_upload` of the index this classifier reads.
    pub fn timed_upload(&self) -> Option<(u64, f64)> {
        self.shards.timed_upload
    }

    /// Lists every mate's amino-acid k-mers with `params` (the index's table's) from now on, for
    /// the amino-acid stage.
    pub fn list_amino_kmers(&mut self, params: crate::protein::ProteinParams) {
        self.protein = Some(params);
    }

    /// Hands back a finished batch, whose vectors the next batch's results then fill.
    pub fn recycle(&self, batch: GpuBatch) {
        let mut recycled = self.recycled.lock().expect("no batch panicked");
        if recycled.len() < RECYCLED_BATCHES {
            recycled.push(batch);
        }
    }

    /// The time spent so far, by stage.
    pub fn times(&self) -> StageTimes {
        *self.times.lock().expect("no batch panicked")
    }

    /// The candidates (and the hit lists `hit_lists` asks for) of each read, given as its mates.
    pub fn classify(&self, reads: &[&[&[u8]]], hit_lists: HitLists) -> Result<GpuBatch, GpuError> {
        let packed = self.pack(reads, 0..reads.len())?;
        self.run(packed, hit_lists)
    }

    /// Packs reads `range` of `reads` into this GPU's pinned staging memory: per mate where its
    /// bases start, its length and its room for features (see `Sketcher::read_features`), per
    /// read its mates and candidate range, and the bases. The groups of reads are sized here,
    /// then each fills its own stretch of every array in one parallel pass on the calling
    /// thread's pool. A pass that waits for the pool waits for the blocks being parsed there
    /// (milliseconds each): packing on one thread, or in several parallel passes, held the
    /// packing stage to 35-40 ms a batch on an H100 host.
    pub fn pack<R: Reads + ?Sized>(&self, reads: &R, range: std::ops::Range<usize>) -> Result<Packed, GpuError> {
        let started = Instant::now();
        use rayon::prelude::*;
        const GROUP: usize = 4096;
        let p = &self.sketch;
        let per = reads.mates_per_read();
        // Each group's reads, mates, bases and feature room; summed, where each group starts.
        let mut groups = Vec::with_capacity(range.len().div_ceil(GROUP));
        let mut total = GroupSize::default();
        let mut last = (usize::MAX, 0u64);
        for first in range.clone().step_by(GROUP) {
            let group = first..(first + GROUP).min(range.end);
            let start = total;
            for r in group.clone() {
                for m in 0..per {
                    let len = reads.mate(r, m).len();
                    // Reads mostly have one length: its room is worked out once.
                    if last.0 != len {
                        last = (len, feature_room(p, len));
                    }
                    total.bases += len;
                    total.room += last.1;
                }
            }
            total.mates += group.len() * per;
            groups.push((group, start));
        }
        let bases = total.bases;
        let tables = StagedTables::new(bases, total.mates, range.len());
        let spare = {
            let mut pool = self.staging.lock().expect("no batch panicked");
            let fits = pool.iter().position(|st| st.len() >= tables.end);
            fits.map(|i| pool.swap_remove(i))
        };
        let mut staging = match spare {
            Some(st) => st,
            // Cached, not write-combined (as `HostBuffer`s are): mates are copied in at odd
            // offsets, which write-combined memory turns into partial-line flushes.
            _ => HostBuffer::new(self.gpu, (tables.end + tables.end / 4).max(1 << 20))?,
        };
        {
            // SAFETY: no copy from it is in flight: the buffer is new, or `upload` gave it back
            // after its stream was synchronized.
            let all = tables.slices(unsafe { staging.as_mut_slice() }, total.mates, range.len());
            // The tables' leading 0s; each group fills its stretch of every table after them
            // (`feature_first`, `first_feature` and `first_mate` hold ends).
            (all.feature_first[0], all.first_feature[0], all.first_mate[0]) = (0, 0, 0);
            let mut rest = (
                all.bases,
                all.offset,
                all.len,
                &mut all.feature_first[1..],
                &mut all.first_feature[1..],
                &mut all.first_mate[1..],
                all.range,
            );
            let mut jobs = Vec::with_capacity(groups.len());
            for (i, (group, start)) in groups.iter().enumerate() {
                let end = groups.get(i + 1).map_or(total, |g| g.1);
                let mates = end.mates - start.mates;
                let (b, o, l, f, rf, rm, r) = rest;
                let (b, b_rest) = b.split_at_mut(end.bases - start.bases);
                let (o, o_rest) = o.split_at_mut(mates);
                let (l, l_rest) = l.split_at_mut(mates);
                let (f, f_rest) = f.split_at_mut(mates);
                let (rf, rf_rest) = rf.split_at_mut(group.len());
                let (rm, rm_rest) = rm.split_at_mut(group.len());
                let (r, r_rest) = r.split_at_mut(group.len());
                rest = (b_rest, o_rest, l_rest, f_rest, rf_rest, rm_rest, r_rest);
                jobs.push((group.clone(), *start, (b, o, l, f, rf, rm, r)));
            }
            jobs.into_par_iter().for_each(|(group, start, (b, o, l, f, rf, rm, r))| {
                // The job's time is the packing's wherever it runs (`cpu_time`, for `-vv`).
                let _cpu = kmerdb_core::cpu_time::start(kmerdb_core::cpu_time::Work::Pack);
                let (mut m, mut at, mut features) = (0, 0, start.room);
                for (j, read) in group.enumerate() {
                    let mut read_len = 0;
                    for mate in (0..per).map(|k| reads.mate(read, k)) {
                        o[m] = (start.bases + at) as u64;
                        l[m] = mate.len() as u32;
                        b[at..at + mate.len()].copy_from_slice(mate);
                        at += mate.len();
                        read_len += mate.len();
                        features += feature_room(p, mate.len());
                        f[m] = features;
                        m += 1;
                    }
                    rf[j] = features;
                    rm[j] = (start.mates + m) as u64;
                    r[j] = (2 + read_len.max(self.insert_size) / p.stride as usize) as u32;
                }
            });
        }
        let (mates, reads, features) = (total.mates, range.len(), total.room);
        Ok(Packed { staging, tables, bases, mates, reads, features, packing: started.elapsed() })
    }

    /// Uploads a packed share, runs the kernels and downloads the results.
    pub fn run(&self, packed: Packed, hit_lists: HitLists) -> Result<GpuBatch, GpuError> {
        let s = &self.gpu.stream;
        let Packed { staging, tables, bases, mates, reads, features: n_features, packing } = packed;
        let n_reads = reads as u64;
        if n_reads == 0 {
            self.staging.lock().expect("no batch panicked").push(staging);
            return Ok(GpuBatch::default());
        }
        let clock = Instant::now();
        let staging = Staged { buffer: Some(staging), pool: &self.staging, stream: s };
        let (mates, per_read) = self.upload(staging.buffer(), &tables, bases, mates, reads)?;
        let uploaded = clock.elapsed() + packing;
        let clock = Instant::now();
        let hit_list = hit_lists != HitLists::Off;
        let lookups = self.look_up(&mates, n_features)?;
        let found = self.candidates(&lookups, &per_read, n_features, hit_list)?;
        let amino = self.protein.map(|p| crate::gpu::protein::amino_kmers(self.gpu, &mates, &p)).transpose()?;
        let text = match hit_lists {
            HitLists::Text => Some(hit_text(
                self.gpu,
                HitSources {
                    taxa: &found.taxa,
                    counts: &lookups.counts,
                    feature_first: &mates.feature_first,
                    read_mates: &per_read.first_mate,
                    node_taxids: &self.tree.node_taxids,
                },
            )?),
            _ => None,
        };
        s.synchronize()?;
        let computed = clock.elapsed();
        let clock = Instant::now();
        // Into the pinned memory of a finished batch when there is one.
        let mut out = self.recycled.lock().expect("no batch panicked").pop().unwrap_or_default();
        // The tables the host reads each read's features and amino-acid k-mers by, only where
        // it reads them.
        out.feature_first.clear();
        out.read_mates.clear();
        if hit_lists == HitLists::Taxa || amino.is_some() {
            // SAFETY: the stream is synchronized: no copy from the staging memory is in flight.
            let staged = unsafe { staging.buffer().as_slice() };
            let table = |at: usize, n: usize| -> &[u64] { bytemuck::cast_slice(&staged[at..at + n * 8]) };
            out.feature_first.extend_from_slice(table(tables.feature_first, mates.count as usize + 1));
            out.read_mates.extend(table(tables.first_mate, reads + 1).iter().map(|&m| m as usize));
        }
        // The copies from it are done: the next batch may be packed into it.
        drop(staging);
        let results = Results { found: &found, counts: &lookups.counts, text: text.as_ref(), amino: amino.as_ref() };
        // SAFETY: `out` is read once the stream is synchronized below, and everything copied
        // lives until this function returns.
        let queued = unsafe { results.queue_into(self.gpu, &mut out, hit_lists) };
        if let Err(e) = s.synchronize() {
            // Copies may still be in flight into `out`'s memory: it is never freed.
            std::mem::forget(out);
            return Err(e.into());
        }
        queued?;
        {
            let mut t = self.times.lock().expect("no batch panicked");
            t.batches += 1;
            t.reads += n_reads;
            t.upload += uploaded;
            t.kernels += computed;
            t.download += clock.elapsed();
        }
        out.max = self.max_candidates;
        Ok(out)
    }

    /// Queues the copies of a batch's bases and tables (`StagedTables`) from its staging memory
    /// to the device, `mates` mates of `reads` reads. Waits for none of them: the staging memory
    /// is the caller's until the stream has passed the copies.
    fn upload(
        &self,
        staging: &HostBuffer<u8>,
        tables: &StagedTables,
        bases: usize,
        mates: usize,
        reads: usize,
    ) -> Result<(DeviceMates, PerRead), GpuError> {
        let gpu = self.gpu;
        let per_read = PerRead {
            first_feature: staged_copy(gpu, staging, tables.first_feature, reads + 1)?,
            first_mate: staged_copy(gpu, staging, tables.first_mate, reads + 1)?,
            range: staged_copy(gpu, staging, tables.range, reads)?,
        };
        let mates = DeviceMates {
            seq: staged_copy(gpu, staging, 0, bases)?,
            offset: staged_copy(gpu, staging, tables.offset, mates)?,
            len: staged_copy(gpu, staging, tables.len, mates)?,
            feature_first: staged_copy(gpu, staging, tables.feature_first, mates + 1)?,
            count: mates as u64,
        };
        Ok((mates, per_read))
    }

    /// The `read_lookups` kernel: every mate's features sketched and looked up in the index.
    fn look_up(&self, mates: &DeviceMates, n_features: u64) -> Result<Lookups, GpuError> {
        let (gpu, s) = (self.gpu, &self.gpu.stream);
        let nf = n_features.max(1) as usize;
        let mut l = Lookups {
            features: s.alloc_zeros::<u32>(nf)?,
            counts: s.alloc_zeros::<u32>(mates.count as usize)?,
            found: s.alloc_zeros::<u64>(nf)?,
            // One more length than features, always 0, so that the scan's last item is the total.
            lengths: s.alloc_zeros::<u64>(n_features as usize + 1)?,
            clades: s.alloc_zeros::<u32>(nf)?,
        };
        let (margs, index) = (mates.args(gpu), self.index.args(gpu));
        let sk = SketchArgs::from(&self.sketch);
        let f = gpu.function("read_lookups")?;
        let mut b = s.launch_builder(&f);
        b.arg(&margs).arg(&sk).arg(&index);
        b.arg(&mut l.features).arg(&mut l.counts).arg(&mut l.found).arg(&mut l.lengths).arg(&mut l.clades);
        // SAFETY: mate m writes features, found, lengths and clades within its room
        // [feature_first[m], feature_first[m + 1]), and counts[m]; `mates` holds the buffers
        // its arguments point to until the stream is synchronized.
        unsafe { b.launch(launch_config(gpu, mates.count)) }?;
        Ok(l)
    }

    /// Gathers each read's locations and ranks its candidates (`read_candidates`), and counts its
    /// clade features per clade (`read_clades`); with `hit_list`, the features' hit-list taxa
    /// (`gather_locations`, which decodes every list anyway). Waits only for the locations'
    /// total, to size their buffer: what the kernels read is freed in the stream's order.
    fn candidates(
        &self,
        l: &Lookups,
        per_read: &PerRead,
        n_features: u64,
        hit_list: bool,
    ) -> Result<ReadsFound, GpuError> {
        let (gpu, s) = (self.gpu, &self.gpu.stream);
        let n_reads = per_read.first_feature.len() as u64 - 1;
        let mut first = s.alloc_zeros::<u64>(n_features as usize + 1)?;
        crate::gpu::condense::exclusive_scan(gpu, &l.lengths, n_features + 1, &mut first)?;
        let (at_dev, n_at) = (&per_read.first_feature, n_reads + 1);
        let mut read_first_dev = s.alloc_zeros::<u64>(n_at as usize)?;
        let f = gpu.function("gather_u64")?;
        let mut b = s.launch_builder(&f);
        b.arg(&first).arg(at_dev).arg(&n_at).arg(&mut read_first_dev);
        // SAFETY: reads `first` at the given indexes (each at most n_features), writes n_at items.
        unsafe { b.launch(launch_config(gpu, n_at)) }?;
        let total = s.clone_dtoh(&read_first_dev.slice(n_at as usize - 1..))?[0];
        let mut locations = s.alloc_zeros::<u64>(total.max(1) as usize)?;
        let mut taxa = s.alloc_zeros::<u32>(if hit_list { n_features.max(1) as usize } else { 1 })?;
        let (index, tree) = (self.index.args(gpu), self.tree.args(gpu, hit_list));
        let f = gpu.function("gather_locations")?;
        let mut b = s.launch_builder(&f);
        b.arg(&index)
            .arg(&tree)
            .arg(&l.features)
            .arg(&l.found)
            .arg(&first)
            .arg(&n_features)
            .arg(&mut locations)
            .arg(&mut taxa);
        // SAFETY: feature f writes lengths[f] locations from first[f], within `total`, and with
        // the tree enabled taxa[f] (`taxa` has a slot a feature then).
        unsafe { b.launch(launch_config(gpu, n_features)) }?;

        let max = self.max_candidates as u32;
        let mut cands = s.alloc_zeros::<DeviceCandidate>((n_reads * max as u64).max(1) as usize)?;
        let mut cand_count = s.alloc_zeros::<u32>(n_reads as usize)?;
        // Locations sorted as 32-bit keys where every location of the index is below u32::MAX
        // (`read_candidates32`: half the shared memory's traffic), else as 64-bit ones.
        let narrow = self.index.locations_fit_u32() && !WIDE_LOCATION_KEYS.load(std::sync::atomic::Ordering::Relaxed);
        let (kernel, key_bytes) = match narrow {
            true => ("read_candidates32", 4),
            false => ("read_candidates", 8),
        };
        let f = gpu.function(kernel)?;
        let config = LaunchConfig {
            grid_dim: (n_reads.min(gpu.multiprocessors() as u64 * 16) as u32, 1, 1),
            block_dim: (CANDIDATE_THREADS, 1, 1),
            shared_mem_bytes: SHARED_LOCATIONS * (key_bytes + 4),
        };
        let (capacity, window_bits) = (SHARED_LOCATIONS, self.index.window_bits);
        let mut b = s.launch_builder(&f);
        b.arg(&locations).arg(&read_first_dev).arg(&per_read.range).arg(&n_reads).arg(&capacity).arg(&window_bits);
        b.arg(&max).arg(&mut cands).arg(&mut cand_count);
        // SAFETY: read r writes max candidates from r * max and count[r].
        unsafe { b.launch(config) }?;

        let mut clades = s.alloc_zeros::<u64>((n_reads as usize * MAX_CLADES).max(1))?;
        let mut clade_count = s.alloc_zeros::<u32>(n_reads as usize)?;
        let f = gpu.function("read_clades")?;
        let mut b = s.launch_builder(&f);
        b.arg(&l.clades).arg(at_dev).arg(&n_reads).arg(&mut clades).arg(&mut clade_count);
        // SAFETY: read r reads its features' clades [at[r], at[r + 1]) and writes at most
        // MAX_CLADES pairs from r * MAX_CLADES, and clade_count[r].
        unsafe { b.launch(launch_config(gpu, n_reads)) }?;
        // No wait here: `first`, `read_first_dev` and `locations` are freed on this stream (the
        // pool's stream-ordered frees, or cudarc's synchronizing ones without it), after the
        // kernels that read them.
        Ok(ReadsFound { cands, cand_count, clades, clade_count, taxa })
    }
}

/// A batch's staging memory while the copy from it may be in flight: dropped (done, or on an
/// error), it waits for the stream, then goes back to the classifier's pool.
struct Staged<'a> {
    buffer: Option<HostBuffer<u8>>,
    pool: &'a std::sync::Mutex<Vec<HostBuffer<u8>>>,
    stream: &'a cudarc::driver::CudaStream,
}

impl Staged<'_> {
    fn buffer(&self) -> &HostBuffer<u8> {
        self.buffer.as_ref().expect("held until dropped")
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        // A stream that fails to synchronize is broken: the buffer is then not reused (nor
        // freed, which could free memory a copy still reads).
        match self.stream.synchronize() {
            Ok(()) => self.pool.lock().unwrap_or_else(|p| p.into_inner()).extend(self.buffer.take()),
            Err(_) => std::mem::forget(self.buffer.take()),
        }
    }
}

/// A batch's results on the device, which `run` copies back.
struct Results<'a> {
    found: &'a ReadsFound,
    /// Per mate: its features.
    counts: &'a CudaSlice<u32>,
    text: Option<&'a (CudaSlice<u64>, CudaSlice<u8>)>,
    amino: Option<&'a crate::gpu::protein::DeviceAminoKmers>,
}

impl Results<'_> {
    /// Queues the copies into `out`'s pinned memory; empties what `hit_lists` and the amino-acid
    /// stage do not give.
    ///
    /// # Safety
    /// `out` is not read, and these buffers not freed, until the stream has passed the copies.
    unsafe fn queue_into(&self, gpu: &Gpu, out: &mut GpuBatch, hit_lists: HitLists) -> Result<(), GpuError> {
        let f = self.found;
        // SAFETY: each copy is under the caller's contract.
        unsafe {
            out.cands.queue_copy(gpu, &f.cands)?;
            out.cand_count.queue_copy(gpu, &f.cand_count)?;
            out.clades.queue_copy(gpu, &f.clades)?;
            out.clade_count.queue_copy(gpu, &f.clade_count)?;
            out.feature_count.queue_copy(gpu, self.counts)?;
            match hit_lists {
                HitLists::Taxa => out.taxa.queue_copy(gpu, &f.taxa)?,
                _ => out.taxa.clear(),
            }
            match self.text {
                Some((first, text)) => {
                    out.text_first.queue_copy(gpu, first)?;
                    out.text.queue_copy(gpu, text)?;
                }
                None => {
                    out.text_first.clear();
                    out.text.clear();
                }
            }
            match self.amino {
                Some(a) => {
                    out.amino_first.queue_copy(gpu, &a.first)?;
                    out.amino_codes.queue_copy(gpu, &a.codes)?;
                }
                None => {
                    out.amino_first.clear();
                    out.amino_codes.clear();
                }
            }
        }
        Ok(())
    }
}

/// `n` items of `T` from byte `at` of `staging`, in a new device buffer (at least one item): the
/// copy is queued on `gpu`'s stream, not waited for.
fn staged_copy<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    staging: &HostBuffer<u8>,
    at: usize,
    n: usize,
) -> Result<CudaSlice<T>, GpuError> {
    let dst = gpu.stream.alloc_zeros::<T>(n.max(1))?;
    let bytes = n * std::mem::size_of::<T>();
    assert!(at + bytes <= staging.len(), "a staged table past its buffer");
    // SAFETY: `bytes` fit both; `run` keeps the staging memory from the pool, and the device
    // buffer lives, until the stream has passed the copy.
    unsafe { copy_async(DevAddr::of(gpu, &dst), staging.addr(at), bytes, &gpu.stream) }?;
    Ok(dst)
}

/// What the kernels after the lookups read per read, on the device: where its features start
/// (one more item than reads: the total), its first mate (one more item: the total), the windows
/// of its candidate range.
struct PerRead {
    first_feature: CudaSlice<u64>,
    first_mate: CudaSlice<u64>,
    range: CudaSlice<u32>,
}

/// Must match `MAX_CLADES` in `cuda/classify.cuh`: the most clades a read's counts hold on the
/// GPU (a read with more is classified by the host; reads of a species hit one or two).
pub(crate) const MAX_CLADES: usize = 4;

/// What the GPU found per read: its top candidates and its clade features' counts; per feature,
/// with hit lists, its taxon.
struct ReadsFound {
    cands: CudaSlice<DeviceCandidate>,
    cand_count: CudaSlice<u32>,
    clades: CudaSlice<u64>,
    clade_count: CudaSlice<u32>,
    /// With hit lists: each feature's taxon node + 1 (0: not in the index).
    taxa: CudaSlice<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The staged tables follow the bases, each from an 8-byte boundary, in the order listed,
    /// with room for its items and no overlap, and `end` covers the last: whatever the bases'
    /// length and the mates and reads (one mate a read, two, none).
    #[test]
    fn staged_tables_follow_the_bases_without_overlap() {
        for bases in [0, 1, 7, 8, 150, 1 << 20] {
            for (mates, reads) in [(0, 0), (1, 1), (2, 1), (3, 3), (524_288, 262_144)] {
                let t = StagedTables::new(bases, mates, reads);
                let regions = [
                    (t.offset, mates * 8),
                    (t.feature_first, (mates + 1) * 8),
                    (t.first_feature, (reads + 1) * 8),
                    (t.first_mate, (reads + 1) * 8),
                    (t.len, mates * 4),
                    (t.range, reads * 4),
                ];
                let mut at = bases;
                for (start, bytes) in regions {
                    assert_eq!(start % 8, 0, "{bases} bases, {mates} mates, {reads} reads");
                    assert!(start >= at, "{bases} bases, {mates} mates, {reads} reads: overlap");
                    at = start + bytes;
                }
                assert!(t.end >= at && t.end < at + 8, "{bases} bases, {mates} mates, {reads} reads: end");
            }
        }
    }

    /// `StagedTables::slices` hands out each table where `StagedTables` puts it, of its length,
    /// and the bases before the first: what packing writes is what `upload` copies.
    #[test]
    fn table_slices_lie_where_the_tables_do() {
        for bases in [0, 1, 7, 150, 4096] {
            for (mates, reads) in [(0, 0), (1, 1), (2, 1), (6, 3), (1000, 500)] {
                let t = StagedTables::new(bases, mates, reads);
                // u64s, for the 8-byte alignment pinned memory has.
                let mut memory = vec![0u64; t.end.div_ceil(8)];
                let staged: &mut [u8] = bytemuck::cast_slice_mut(&mut memory);
                let base = staged.as_ptr() as usize;
                let at = |p: *const u8| p as usize - base;
                let s = t.slices(staged, mates, reads);
                let case = format!("{bases} bases, {mates} mates, {reads} reads");
                assert!(s.bases.len() >= bases && s.bases.len() <= t.offset, "{case}: bases");
                assert_eq!(at(s.bases.as_ptr()), 0, "{case}");
                let tables = [
                    (at(s.offset.as_ptr().cast()), s.offset.len(), t.offset, mates),
                    (at(s.feature_first.as_ptr().cast()), s.feature_first.len(), t.feature_first, mates + 1),
                    (at(s.first_feature.as_ptr().cast()), s.first_feature.len(), t.first_feature, reads + 1),
                    (at(s.first_mate.as_ptr().cast()), s.first_mate.len(), t.first_mate, reads + 1),
                    (at(s.len.as_ptr().cast()), s.len.len(), t.len, mates),
                    (at(s.range.as_ptr().cast()), s.range.len(), t.range, reads),
                ];
                for (i, (start, len, want_start, want_len)) in tables.into_iter().enumerate() {
                    assert_eq!((start, len), (want_start, want_len), "{case}: table {i}");
                }
            }
        }
    }
}
