//! Stage 3 of the GPU build: the bucket-list table to each shard's key index and list stream, on
//! the GPU, with the bytes of the CPU's `ShardAssembler` (its twin; `tests/gpu.rs` compares them).
//!
//! 1. `collect_keys` lists the keys with kept values; `shard_stats` applies the location cap and
//!    counts each shard's keys, which sizes its BCHT exactly as `bcht::initial_buckets` does.
//! 2. Three rounds of `propose_count`, a scan, `propose_scatter` and `accept` run
//!    `bcht::place_rounds` for every shard at once.
//! 3. The host places the keys left over (`bcht::place_stragglers`, about 3% of them), growing a
//!    shard's table as the CPU would if a walk fails, and sends the slots back.
//! 4. `slot_entries` and a scan give every list its place in its shard's stream, and `write_lists`
//!    gathers, renumbers, sorts and bit-packs each list and sets the slot values.
//!
//! Only the finished slots and streams come back to the host.

use crate::build::BuildError;
use crate::build::condense::ShardStats;
use crate::gpu::table::{BucketListTable, DeviceKeys, launch_config, ptr};
use crate::gpu::{Gpu, GpuError};
use crate::index::bcht::{self, BUCKET_SLOTS, EMPTY_SLOT, Slot};
use crate::index::locations::{LocationLayout, PAD_WORDS, ShardOverflow};
use crate::index::write::ShardData;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use rayon::prelude::*;

/// Launches kernel `$name` with shape `$config` and the arguments given, in the order its
/// declaration in `cuda/condense.cuh` has them.
macro_rules! launch {
    ($gpu:expr, $name:expr, $config:expr, $($arg:expr),+ $(,)?) => {{
        let f = $gpu.function($name)?;
        let mut b = $gpu.stream.launch_builder(&f);
        $(b.arg($arg);)+
        // SAFETY: every call passes the arguments its kernel in `cuda/condense.cuh` declares, with
        // arrays of the lengths the kernel's comment asks for.
        unsafe { b.launch($config) }.map_err(GpuError::from)?;
    }};
}

// SAFETY: plain old data: a key and a value, as the kernels' slot words hold them.
unsafe impl DeviceRepr for Slot {}

/// Must match `SCAN_TILE` and `SCAN_THREADS` in `cuda/condense.cuh`.
const SCAN_THREADS: u32 = 256;
const SCAN_TILE: u64 = SCAN_THREADS as u64 * 8;

/// Kernel view of the shards' tables; must match `struct Shards` in `cuda/condense.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ShardsArgs {
    base: u64,
    buckets: u64,
    shard_bits: u32,
    _pad: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for ShardsArgs {}

/// Kernel view of the shards' streams; must match `struct Streams` in `cuda/condense.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct StreamsArgs {
    first_entry: u64,
    first_word: u64,
    entry_bits: u32,
    inline_single: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct.
unsafe impl DeviceRepr for StreamsArgs {}

/// The shards' BCHTs, one after the other on the device.
struct ShardTables {
    /// Buckets of each shard.
    buckets: Vec<u64>,
    /// First bucket of each shard, and the total at the end.
    base: Vec<u64>,
    base_dev: CudaSlice<u64>,
    buckets_dev: CudaSlice<u64>,
}

impl ShardTables {
    fn new(gpu: &Gpu, buckets: Vec<u64>) -> Result<Self, GpuError> {
        let mut base = vec![0u64];
        for b in &buckets {
            base.push(base.last().unwrap() + b);
        }
        let s = &gpu.stream;
        Ok(Self { base_dev: s.clone_htod(&base)?, buckets_dev: s.clone_htod(&buckets)?, buckets, base })
    }

    fn total_buckets(&self) -> u64 {
        *self.base.last().unwrap()
    }

    fn args(&self, gpu: &Gpu, shard_bits: u32) -> ShardsArgs {
        ShardsArgs { base: ptr(gpu, &self.base_dev), buckets: ptr(gpu, &self.buckets_dev), shard_bits, _pad: 0 }
    }

    fn slot_range(&self, shard: usize) -> std::ops::Range<usize> {
        self.base[shard] as usize * BUCKET_SLOTS..self.base[shard + 1] as usize * BUCKET_SLOTS
    }
}

/// The shards of the index from the table, renumbering targets by `final_id`.
pub fn condense(
    table: &BucketListTable,
    gpu: &Gpu,
    final_id: &[Option<u32>],
    layout: &LocationLayout,
    cap: u32,
    shard_bits: u32,
) -> Result<Vec<(ShardData, ShardStats)>, BuildError> {
    assert!(shard_bits <= 6, "shard_stats counts at most 64 shards");
    let mut clock = std::time::Instant::now();
    let mut lap = |what: &str| {
        log::debug!("GPU condense: {what} {:.2} s", clock.elapsed().as_secs_f64());
        clock = std::time::Instant::now();
    };
    let s = &gpu.stream;
    let n_shards = 1usize << shard_bits;
    let remap: Vec<u32> = final_id.iter().map(|f| f.unwrap_or(crate::sketch::NO_FEATURE)).collect();
    let keys = table.collect_on_device(Some((&remap, layout.window_bits)))?;
    let n = keys.n;

    // 1. The cap, and each shard's counts.
    let mut state = s.alloc_zeros::<u8>(n.max(1) as usize).map_err(GpuError::from)?;
    let stats_dev = s.alloc_zeros::<u64>(n_shards * 4).map_err(GpuError::from)?;
    launch!(
        gpu,
        "shard_stats",
        launch_config(gpu, n),
        &keys.keys,
        &keys.counts,
        &n,
        &cap,
        &shard_bits,
        &mut state,
        &stats_dev
    );
    let counted = s.clone_dtoh(&stats_dev).map_err(GpuError::from)?;
    let stats: Vec<ShardStats> = counted
        .chunks(4)
        .map(|c| ShardStats { features: c[0], locations: c[1], dropped_features: c[2], dropped_locations: c[3] })
        .collect();
    lap("collect keys and apply the cap");

    // 2. The rounds.
    let buckets = stats.iter().map(|st| bcht::initial_buckets(st.features as usize) as u64).collect();
    let mut tables = ShardTables::new(gpu, buckets)?;
    let slots = place_rounds(gpu, &keys, &mut state, &tables, shard_bits)?;
    lap("key index rounds");

    // 3. The keys left over, on the host.
    let slots = place_stragglers(gpu, &keys, &state, slots, &mut tables, shard_bits)?;
    lap("key index leftovers (host)");

    // 4. The lists.
    let shards = write_lists(gpu, table, &keys, slots, &tables, shard_bits, layout)?;
    lap("list streams and download");
    Ok(shards.into_iter().zip(stats).collect())
}

/// `out[i] = input[0] + ... + input[i - 1]` for the first `n` items.
pub fn exclusive_scan(gpu: &Gpu, input: &CudaSlice<u64>, n: u64, out: &mut CudaSlice<u64>) -> Result<(), GpuError> {
    let tiles = n.div_ceil(SCAN_TILE).max(1);
    let grid = LaunchConfig {
        grid_dim: (u32::try_from(tiles).expect("fewer than 2^32 scan tiles"), 1, 1),
        block_dim: (SCAN_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut sums = gpu.stream.alloc_zeros::<u64>(tiles as usize)?;
    launch!(gpu, "scan_tiles", grid, input, &n, &mut *out, &mut sums);
    if tiles > 1 {
        let mut offsets = gpu.stream.alloc_zeros::<u64>(tiles as usize)?;
        exclusive_scan(gpu, &sums, tiles, &mut offsets)?;
        launch!(gpu, "scan_add", grid, &mut *out, &n, &offsets);
    }
    Ok(())
}

/// Phase 1 of `bcht::build` for every shard: the slots as (key, key index) words.
fn place_rounds(
    gpu: &Gpu,
    keys: &DeviceKeys,
    state: &mut CudaSlice<u8>,
    tables: &ShardTables,
    shard_bits: u32,
) -> Result<CudaSlice<u64>, GpuError> {
    let s = &gpu.stream;
    let (n, nb) = (keys.n, tables.total_buckets());
    let n_slots = nb * BUCKET_SLOTS as u64;
    let mut slots = s.alloc_zeros::<u64>(n_slots.max(1) as usize)?;
    let empty = slot_word(EMPTY_SLOT);
    launch!(gpu, "fill_u64", launch_config(gpu, n_slots), &mut slots, &n_slots, &empty);
    let mut fill = s.alloc_zeros::<u32>(nb.max(1) as usize)?;
    // One more counter than buckets, always 0, so that the scan's last item is the total.
    let mut proposals = s.alloc_zeros::<u64>(nb as usize + 1)?;
    let mut first = s.alloc_zeros::<u64>(nb as usize + 1)?;
    let mut proposers = s.alloc_zeros::<u32>(n.max(1) as usize)?;
    let sh = tables.args(gpu, shard_bits);
    for j in 0..bcht::HASH_FUNCTIONS as i32 {
        launch!(gpu, "propose_count", launch_config(gpu, n), &keys.keys, &*state, &n, &sh, &j, &mut proposals);
        exclusive_scan(gpu, &proposals, nb + 1, &mut first)?;
        launch!(
            gpu,
            "propose_scatter",
            launch_config(gpu, n),
            &keys.keys,
            &*state,
            &n,
            &sh,
            &j,
            &first,
            &mut proposals,
            &mut proposers
        );
        launch!(
            gpu,
            "accept",
            launch_config(gpu, nb),
            &keys.keys,
            &mut *state,
            &nb,
            &first,
            &mut proposers,
            &mut fill,
            &mut slots
        );
    }
    Ok(slots)
}

/// A slot as the kernels hold it: the key in the low half, the value in the high half, which is
/// also `Slot`'s layout in memory.
fn slot_word(s: Slot) -> u64 {
    s.key as u64 | (s.value as u64) << 32
}

/// Phase 2 of `bcht::build`: the keys the rounds left, placed on the host shard by shard. A shard
/// whose walk fails is placed again from scratch at the sizes the CPU would try.
fn place_stragglers(
    gpu: &Gpu,
    keys: &DeviceKeys,
    state: &CudaSlice<u8>,
    mut slots: CudaSlice<u64>,
    tables: &mut ShardTables,
    shard_bits: u32,
) -> Result<CudaSlice<u64>, GpuError> {
    let s = &gpu.stream;
    let n = keys.n;
    let mut left = s.alloc_zeros::<u64>(n.max(1) as usize)?;
    let found = s.alloc_zeros::<u64>(1)?;
    launch!(gpu, "collect_stragglers", launch_config(gpu, n), &keys.keys, state, &n, &mut left, &found);
    let m = s.clone_dtoh(&found)?[0] as usize;
    if m == 0 {
        return Ok(slots);
    }
    let mut left: Vec<u64> = s.clone_dtoh(&left.slice(..m))?;
    left.sort_unstable_by_key(|&w| w as u32);
    let left: &[Slot] = bytemuck::cast_slice(&left);
    // The whole table comes over once, each shard's walk works in place, and it goes back once.
    let mut all: Vec<u64> = s.clone_dtoh(&slots)?;
    let table: &mut [Slot] = bytemuck::cast_slice_mut(&mut all);
    let n_shards = 1usize << shard_bits;
    let shard_of = |key: u32| ((key as u64) << shard_bits >> 32) as usize;
    let bounds: Vec<usize> = (0..=n_shards).map(|sh| left.partition_point(|w| shard_of(w.key) < sh)).collect();
    let mut per_shard: Vec<&mut [Slot]> = Vec::with_capacity(n_shards);
    let mut rest = &mut table[..tables.slot_range(n_shards - 1).end];
    for sh in 0..n_shards {
        let (this, next) = rest.split_at_mut(tables.slot_range(sh).len());
        per_shard.push(this);
        rest = next;
    }
    // A shard whose walk fails is placed again from scratch, as the CPU would, at a larger size.
    let regrown: Vec<Option<Vec<Slot>>> = per_shard
        .into_par_iter()
        .enumerate()
        .map(|(sh, table)| {
            let stragglers = &left[bounds[sh]..bounds[sh + 1]];
            if bcht::place_stragglers(table, stragglers) {
                return None;
            }
            let mut entries: Vec<Slot> =
                table.iter().chain(stragglers).filter(|s| s.key != bcht::EMPTY_KEY).copied().collect();
            entries.sort_unstable_by_key(|s| s.key);
            let sorted: Vec<u32> = entries.iter().map(|s| s.key).collect();
            let mut grown = bcht::place(&sorted);
            for slot in grown.iter_mut().filter(|s| s.key != bcht::EMPTY_KEY) {
                slot.value = entries[slot.value as usize].value;
            }
            Some(grown)
        })
        .collect();
    if regrown.iter().all(Option::is_none) {
        s.memcpy_htod(&all, &mut slots)?;
        return Ok(slots);
    }
    drop(slots);
    let table: &[Slot] = bytemuck::cast_slice(&all);
    let mut joined: Vec<Slot> = Vec::with_capacity(table.len());
    for (sh, grown) in regrown.iter().enumerate() {
        joined.extend_from_slice(grown.as_deref().unwrap_or(&table[tables.slot_range(sh)]));
    }
    *tables = ShardTables::new(
        gpu,
        regrown
            .iter()
            .enumerate()
            .map(|(sh, g)| match g {
                Some(g) => (g.len() / BUCKET_SLOTS) as u64,
                None => tables.buckets[sh],
            })
            .collect(),
    )?;
    let words: &[u64] = if joined.is_empty() { &[0] } else { bytemuck::cast_slice(&joined) };
    Ok(s.clone_htod(words)?)
}

/// Writes every list into its shard's stream and sets the slot values; returns the finished shards.
fn write_lists(
    gpu: &Gpu,
    table: &BucketListTable,
    keys: &DeviceKeys,
    mut slots: CudaSlice<u64>,
    tables: &ShardTables,
    shard_bits: u32,
    layout: &LocationLayout,
) -> Result<Vec<ShardData>, BuildError> {
    let s = &gpu.stream;
    let n_shards = 1usize << shard_bits;
    let n_slots = tables.total_buckets() * BUCKET_SLOTS as u64;
    let inline_single = layout.inline_single() as u32;
    let mut entries = s.alloc_zeros::<u64>(n_slots as usize + 1).map_err(GpuError::from)?;
    launch!(
        gpu,
        "slot_entries",
        launch_config(gpu, n_slots),
        &slots,
        &n_slots,
        &keys.counts,
        &inline_single,
        &mut entries
    );
    let mut entry_start = s.alloc_zeros::<u64>(n_slots as usize + 1).map_err(GpuError::from)?;
    exclusive_scan(gpu, &entries, n_slots + 1, &mut entry_start)?;
    drop(entries);

    // Each shard's first entry, and its stream's words.
    let at: Vec<u64> = tables.base.iter().map(|b| b * BUCKET_SLOTS as u64).collect();
    let at_dev = s.clone_htod(&at).map_err(GpuError::from)?;
    let mut first_entry_dev = s.alloc_zeros::<u64>(at.len()).map_err(GpuError::from)?;
    let count = at.len() as u64;
    launch!(gpu, "gather_u64", launch_config(gpu, count), &entry_start, &at_dev, &count, &mut first_entry_dev);
    let first_entry = s.clone_dtoh(&first_entry_dev).map_err(GpuError::from)?;
    let eb = layout.entry_bits as u64;
    let mut first_word = vec![0u64];
    for sh in 0..n_shards {
        let entries = first_entry[sh + 1] - first_entry[sh];
        first_word.push(first_word[sh] + (entries * eb).div_ceil(32) + PAD_WORDS as u64);
    }
    let total_entries = first_entry[n_shards];
    let total_words = first_word[n_shards];
    let first_word_dev = s.clone_htod(&first_word).map_err(GpuError::from)?;
    let mut scratch = s.alloc_zeros::<u64>(total_entries.max(1) as usize).map_err(GpuError::from)?;
    let mut words = s.alloc_zeros::<u32>(total_words.max(1) as usize).map_err(GpuError::from)?;
    let mut overflow = s.alloc_zeros::<u32>(1).map_err(GpuError::from)?;
    let sh = tables.args(gpu, shard_bits);
    let st = StreamsArgs {
        first_entry: ptr(gpu, &first_entry_dev),
        first_word: ptr(gpu, &first_word_dev),
        entry_bits: layout.entry_bits,
        inline_single,
    };
    let (targs, margs) = (table.args(), keys.margs);
    launch!(
        gpu,
        "write_lists",
        launch_config(gpu, n_slots),
        &targs,
        &margs,
        &keys.table_slots,
        &keys.counts,
        &mut slots,
        &n_slots,
        &entry_start,
        &sh,
        &st,
        &mut scratch,
        &mut words,
        &mut overflow
    );
    if s.clone_dtoh(&overflow).map_err(GpuError::from)?[0] != 0 {
        return Err(BuildError::Index(crate::index::IndexError::ShardOverflow {
            path: "<gpu build>".into(),
            source: ShardOverflow,
        }));
    }
    drop(scratch);
    // Straight into each shard's own vectors: one copy, no intermediate.
    let mut shards = Vec::with_capacity(n_shards);
    for sh in 0..n_shards {
        let range = tables.slot_range(sh);
        let mut shard_slots = vec![EMPTY_SLOT; range.len()];
        if !range.is_empty() {
            let view = slots.slice(range);
            // SAFETY: a slot word is a `Slot` in memory (see `slot_word`).
            let view = unsafe { view.transmute::<Slot>(view.len()) }.expect("same size");
            s.memcpy_dtoh(&view, &mut shard_slots).map_err(GpuError::from)?;
        }
        let (w0, w1) = (first_word[sh] as usize, first_word[sh + 1] as usize);
        let mut shard_words = vec![0u32; w1 - w0];
        s.memcpy_dtoh(&words.slice(w0..w1), &mut shard_words).map_err(GpuError::from)?;
        shards.push(ShardData { slots: shard_slots, words: shard_words });
    }
    Ok(shards)
}
