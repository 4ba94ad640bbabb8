//! Stage 3 of the GPU build: the bucket-list table to each shard's key index and list stream, on
//! the GPU, with the bytes of the CPU's `ShardAssembler` (its twin; `tests/gpu.rs` compares them).
//!
//! 1. `collect_keys` lists the keys with kept values; `shard_stats` counts each shard's keys, which
//!    sizes its BCHT exactly as `bcht::initial_buckets` does, and applies the location cap: the
//!    keys over it (`list_clades`) are downloaded with their lists, the host names each one's clade
//!    (`condense::Clades::lca`, the CPU's own function) and `set_clades` marks them.
//! 2. Three rounds of `propose_count`, a scan, `propose_scatter` and `accept` run
//!    `bcht::place_rounds` for every shard at once.
//! 3. `assemble_order` lines up each shard's slots, then the keys the rounds left over (in key
//!    order); `slot_entries` and a scan give every list its place in its shard's stream, and
//!    `write_lists` gathers, renumbers, sorts and bit-packs each list and sets the slot values
//!    (`sort_lists` also gives each delta list's code bits, which spare the host's layout a walk
//!    over its codes to find where it ends).
//! 4. The result stays on the device ([`DeviceShards`]): the build downloads it shard by shard
//!    into pinned buffers (`gpu::passes`), and on the host, while the GPU works on,
//!    `finish_and_store` places each shard's leftover keys, about 3% of them, by
//!    `bcht::place_stragglers`, in place (a walk moves slots with their values, so the streams
//!    stay as they are). A shard whose walk fails is rolled back and rebuilt on the host at a
//!    larger size, as the CPU would.

use crate::gpu::address::DevAddr;
use crate::gpu::table::{BucketListTable, DeviceKeys, KeyList, launch_config};
use crate::gpu::{Gpu, GpuError};
use crate::index::bcht::{self, BUCKET_SLOTS, EMPTY_SLOT, KeyHash, Slot};
use crate::index::clade_lists::CladeLists;
use crate::index::condensed::{Clades, Condensed, ShardStats};
use crate::index::locations::{GlobalWindows, LocationLayout, PAD_WORDS, ShardOverflow};
use crate::index::stored_shard::{self, StoredShard};
use crate::index::write::ShardData;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

/// Launches kernel `$name` with shape `$config` and the arguments given, in the order its
/// declaration in `cuda/condense.cuh` has them.
macro_rules! launch {
    ($gpu:expr, $name:expr, $config:expr, $($arg:expr),+ $(,)?) => {{
        let f = $gpu.function($name)?;
        let mut b = $gpu.stream.launch_builder(&f);
        $(b.arg($arg);)+
        // SAFETY: every call passes the arguments its kernel in `cuda/condense.cuh` declares, with
        // arrays of the lengths the kernel's comment asks for.
        unsafe { b.launch($config) }?;
    }};
}

/// Must match `SCAN_TILE` and `SCAN_THREADS` in `cuda/condense.cuh`.
const SCAN_THREADS: u32 = 256;
const SCAN_TILE: u64 = SCAN_THREADS as u64 * 8;

/// Kernel view of the shards' tables; must match `struct Shards` in `cuda/condense.cuh`. It
/// borrows the tables ([`ShardTables::args`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ShardsArgs<'a> {
    base: DevAddr<'a>,
    buckets: DevAddr<'a>,
    shard_bits: u32,
    _pad: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for ShardsArgs<'_> {}
// Kernels read it as `struct Shards` (cuda/condense.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<ShardsArgs>() == 24);

/// Kernel view of the shards' streams; must match `struct Streams` in `cuda/condense.cuh`. It
/// borrows the arrays of each shard's first entry and first word.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct StreamsArgs<'a> {
    first_entry: DevAddr<'a>,
    first_word: DevAddr<'a>,
    entry_bits: u32,
    inline_single: u32,
}
// SAFETY: plain old data with the layout of the CUDA struct (`DevAddr` is a `u64`).
unsafe impl DeviceRepr for StreamsArgs<'_> {}
// Kernels read it as `struct Streams` (cuda/condense.cuh), which asserts the same size.
const _: () = assert!(std::mem::size_of::<StreamsArgs>() == 24);

/// The shards' BCHTs, one after the other on the device.
struct ShardTables {
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
        Ok(Self { base_dev: s.clone_htod(&base)?, buckets_dev: s.clone_htod(&buckets)?, base })
    }

    fn total_buckets(&self) -> u64 {
        *self.base.last().unwrap()
    }

    /// The kernels' view of the tables, borrowing their arrays.
    fn args(&self, gpu: &Gpu, shard_bits: u32) -> ShardsArgs<'_> {
        ShardsArgs {
            base: DevAddr::of(gpu, &self.base_dev),
            buckets: DevAddr::of(gpu, &self.buckets_dev),
            shard_bits,
            _pad: 0,
        }
    }

    fn slot_range(&self, shard: usize) -> std::ops::Range<usize> {
        self.base[shard] as usize * BUCKET_SLOTS..self.base[shard + 1] as usize * BUCKET_SLOTS
    }
}

/// The shards of the index from the table, renumbering targets by `final_id`: every shard, walked
/// and owned (the test twin of the CPU's assembler; the build downloads `condense_on_device`'s
/// result shard by shard).
pub fn condense(
    table: &BucketListTable,
    gpu: &Gpu,
    final_id: &[Option<u32>],
    (layout, numbering): (&LocationLayout, &GlobalWindows),
    (cap, clades): (u32, &Clades),
    shard_bits: u32,
) -> Result<Vec<Condensed>, GpuError> {
    let mut dev = condense_on_device(table, gpu, final_id, layout, (cap, clades), shard_bits, None)?;
    let s = &gpu.stream;
    let mut out = Vec::with_capacity(dev.places.len());
    for ((place, stats), clade_lists) in dev.places.iter().zip(&dev.stats).zip(std::mem::take(&mut dev.clade_lists)) {
        let download = |range: std::ops::Range<usize>| -> Result<Vec<Slot>, GpuError> {
            if range.is_empty() {
                return Ok(Vec::new());
            }
            let words: Vec<u64> = s.clone_dtoh(&dev.order.slice(range))?;
            Ok(words.iter().map(|&w| Slot { key: w as u32, value: (w >> 32) as u32 }).collect())
        };
        let mut slots = download(place.slots.clone())?;
        let left = download(place.left.clone())?;
        let words = s.clone_dtoh(&dev.words.slice(place.words.clone()))?;
        let code_bits = match place.slots.is_empty() {
            true => Vec::new(),
            false => s.clone_dtoh(&dev.code_bits.slice(place.slots.clone()))?,
        };
        // The twin's check of the GPU's code bits: the layout trusts them.
        assert_eq!(code_bits, stored_shard::walked_code_bits(&slots, &words, layout), "the GPU's code bits");
        let data =
            finish_and_store(&mut slots, &left, (&words, &code_bits), (layout, numbering), KeyHash::new(shard_bits))?;
        out.push(Condensed { data, stats: *stats, clade_lists });
    }
    Ok(out)
}

/// Where one shard lies in a [`DeviceShards`]: its slots, its leftover keys (slot words, in
/// `order`) and its stream's words.
#[derive(Debug, Clone)]
pub struct ShardPlace {
    pub slots: std::ops::Range<usize>,
    pub left: std::ops::Range<usize>,
    pub words: std::ops::Range<usize>,
}

/// Condensed shards on the device, before their leftover keys are placed: every shard's slots
/// then leftover keys in `order` (slot words: `Slot`'s layout), its words in `words`.
pub struct DeviceShards {
    pub order: CudaSlice<u64>,
    pub words: CudaSlice<u32>,
    /// Per item of `order`: its delta list's codes' bits, or [`stored_shard::UNKNOWN_CODE_BITS`].
    pub code_bits: CudaSlice<u32>,
    /// Per shard of the index.
    pub places: Vec<ShardPlace>,
    pub stats: Vec<ShardStats>,
    /// Per shard, the clade features (over the cap) with all their locations (downloaded).
    pub clade_lists: Vec<CladeLists>,
}

/// Condenses the table into every shard's key index and stream, on the device, renumbering
/// targets by `final_id`. The host's share (the clade features' lists) runs on `host`, or without
/// one on the calling thread alone.
pub(crate) fn condense_on_device(
    table: &BucketListTable,
    gpu: &Gpu,
    final_id: &[Option<u32>],
    layout: &LocationLayout,
    (cap, clades): (u32, &Clades),
    shard_bits: u32,
    host: Option<&rayon::ThreadPool>,
) -> Result<DeviceShards, GpuError> {
    assert!(shard_bits <= 6, "shard_stats counts at most 64 shards");
    let mut clock = std::time::Instant::now();
    let mut lap = |what: &str| {
        log::trace!("GPU {} condense: {what} {:.3} s", gpu.ordinal, clock.elapsed().as_secs_f64());
        clock = std::time::Instant::now();
    };
    let s = &gpu.stream;
    let n_shards = 1usize << shard_bits;
    let remap: Vec<u32> = final_id.iter().map(|f| f.unwrap_or(crate::sketch::NO_FEATURE)).collect();
    let keys = table.collect_on_device(Some((&remap, layout.window_bits)))?;
    let n = keys.n;

    // 1. The cap, and each shard's counts.
    let mut state = s.alloc_zeros::<u8>(n.max(1) as usize)?;
    let stats_dev = s.alloc_zeros::<u64>(n_shards * 4)?;
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
    let counted = s.clone_dtoh(&stats_dev)?;
    let stats: Vec<ShardStats> = counted
        .chunks(4)
        .map(|c| ShardStats { features: c[0], locations: c[1], clade_features: c[2], clade_locations: c[3] })
        .collect();
    let (clade_lists, clade) =
        clade_feature_lists(gpu, table, &keys, (cap, clades), &stats, (layout, shard_bits), host)?;
    lap("collect keys, apply the cap, download the clade features' lists");

    // 2. The rounds.
    let buckets = stats.iter().map(|st| bcht::initial_buckets(st.features as usize) as u64).collect();
    let tables = ShardTables::new(gpu, buckets)?;
    let slots = place_rounds(gpu, &keys, &mut state, &tables, shard_bits)?;
    lap("key index rounds");

    // 3. The lists, in slot order then the leftover keys.
    let order = list_order(gpu, &keys, &state, slots, &tables, shard_bits)?;
    let (order, words, code_bits, places) =
        write_lists(gpu, table, (&keys, &clade), order, &tables, shard_bits, layout)?;
    lap("list streams");
    Ok(DeviceShards { order, words, code_bits, places, stats, clade_lists })
}

/// The keys over the cap (clade features), each with all its kept values, per shard in ascending
/// key order with each list sorted and unpacked: the index's clade lists section, as
/// `condense::condense_all` gives it on the CPU; and on the device, each key's clade (node + 1, 0
/// for the keys with lists), named here by the CPU's `Clades::lca`. Few keys are over the cap, so
/// they are listed on the GPU (`list_clades`), then downloaded with their lists (`fill_lists`).
fn clade_feature_lists(
    gpu: &Gpu,
    table: &BucketListTable,
    keys: &DeviceKeys,
    (cap, clades): (u32, &Clades),
    stats: &[ShardStats],
    (layout, shard_bits): (&LocationLayout, u32),
    host: Option<&rayon::ThreadPool>,
) -> Result<(Vec<CladeLists>, CudaSlice<u32>), GpuError> {
    let s = &gpu.stream;
    let mut per_shard = vec![CladeLists::default(); stats.len()];
    let mut clade = s.alloc_zeros::<u32>(keys.n.max(1) as usize)?;
    let n_clades: u64 = stats.iter().map(|st| st.clade_features).sum();
    if n_clades == 0 {
        return Ok((per_shard, clade));
    }
    let alloc = || s.alloc_zeros::<u32>(n_clades as usize).map_err(GpuError::from);
    let (mut out_keys, mut out_slots, mut out_counts, mut out_index) = (alloc()?, alloc()?, alloc()?, alloc()?);
    let found = s.alloc_zeros::<u64>(1)?;
    let n = keys.n;
    launch!(
        gpu,
        "list_clades",
        launch_config(gpu, n),
        &keys.keys,
        &keys.table_slots,
        &keys.counts,
        &n,
        &cap,
        &mut out_keys,
        &mut out_slots,
        &mut out_counts,
        &mut out_index,
        &found
    );
    assert_eq!(s.clone_dtoh(&found)?[0], n_clades, "every clade key is listed once");
    let download = |v: &CudaSlice<u32>| s.clone_dtoh(v).map_err(GpuError::from);
    let (k, sl, c, ix) = (download(&out_keys)?, download(&out_slots)?, download(&out_counts)?, download(&out_index)?);
    let mut order: Vec<usize> = (0..k.len()).collect();
    order.sort_unstable_by_key(|&i| k[i]);
    let lists: Vec<KeyList> = order.iter().map(|&i| KeyList { key: k[i], slot: sl[i], count: c[i] }).collect();
    let values = table.fill(&lists, &keys.remap, false)?;
    // Each list sorted, its clade named and its locations unpacked on the host's threads: a
    // 50 Gbp collection has some 600 k clade features in each GPU's pass, 45 M locations, which
    // on this GPU's thread alone held its passes for seconds.
    let mut starts = Vec::with_capacity(lists.len());
    let mut at = 0;
    for l in &lists {
        starts.push(at);
        at += l.count as usize;
    }
    let name = |(l, &at): (&KeyList, &usize)| -> (u32, Vec<u64>) {
        let mut list = values[at..at + l.count as usize].to_vec();
        list.sort_unstable();
        let node = clades.lca(list.iter().copied(), layout);
        for v in &mut list {
            let (t, w) = layout.unpack(*v);
            *v = crate::index::clade_lists::location(t, w);
        }
        (node, list)
    };
    let named: Vec<(u32, Vec<u64>)> = match host {
        Some(pool) => {
            use rayon::prelude::*;
            pool.install(|| lists.par_iter().zip(&starts).map(name).collect())
        }
        None => lists.iter().zip(&starts).map(name).collect(),
    };
    let mut nodes = Vec::with_capacity(lists.len());
    for (l, (node, locations)) in lists.iter().zip(named) {
        nodes.push(node);
        per_shard[crate::index::format::shard_of(l.key, shard_bits)].push(l.key, locations);
    }
    let index: Vec<u32> = order.iter().map(|&i| ix[i]).collect();
    let (index_dev, nodes_dev) = (s.clone_htod(&index)?, s.clone_htod(&nodes)?);
    let m = index.len() as u64;
    launch!(gpu, "set_clades", launch_config(gpu, m), &index_dev, &nodes_dev, &m, &mut clade);
    Ok((per_shard, clade))
}

/// Lists of varying lengths, one per item of `n`, placed back to back on the device in two
/// launches: `count` has each item's length written into its `lengths` (`n + 1` zeros: the last
/// stays 0, so that the scan's last item is the total), a scan turns the lengths into where each
/// list starts, and `write` has item `i`'s list written from `first[i]` into `items` (room for the
/// total, at least one). Waits for the total and for `write`. Returns `first` and `items`.
pub(crate) fn placed_lists<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    n: u64,
    count: impl FnOnce(&mut CudaSlice<u64>) -> Result<(), GpuError>,
    write: impl FnOnce(&CudaSlice<u64>, &mut CudaSlice<T>) -> Result<(), GpuError>,
) -> Result<(CudaSlice<u64>, CudaSlice<T>), GpuError> {
    let s = &gpu.stream;
    let mut lengths = s.alloc_zeros::<u64>(n as usize + 1)?;
    let mut first = s.alloc_zeros::<u64>(n as usize + 1)?;
    if n > 0 {
        count(&mut lengths)?;
    }
    exclusive_scan(gpu, &lengths, n + 1, &mut first)?;
    let total = s.clone_dtoh(&first.slice(n as usize..))?[0];
    let mut items = s.alloc_zeros::<T>(total.max(1) as usize)?;
    if total > 0 {
        write(&first, &mut items)?;
    }
    s.synchronize()?;
    Ok((first, items))
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

/// The order lists are written in, on the device: each shard's slots, then the keys its rounds
/// left over, in key order (as `ShardAssembler::finish` writes them).
struct ListOrder {
    /// (key, key index) words; their values become slot values in `write_lists`.
    order: CudaSlice<u64>,
    /// Where each shard starts in `order`, and the total at the end.
    start: Vec<u64>,
}

fn list_order(
    gpu: &Gpu,
    keys: &DeviceKeys,
    state: &CudaSlice<u8>,
    slots: CudaSlice<u64>,
    tables: &ShardTables,
    shard_bits: u32,
) -> Result<ListOrder, GpuError> {
    let s = &gpu.stream;
    let n = keys.n;
    let mut left = s.alloc_zeros::<u64>(n.max(1) as usize)?;
    let found = s.alloc_zeros::<u64>(1)?;
    launch!(gpu, "collect_stragglers", launch_config(gpu, n), &keys.keys, state, &n, &mut left, &found);
    let m = s.clone_dtoh(&found)?[0] as usize;
    let mut sorted: Vec<u64> = if m == 0 { Vec::new() } else { s.clone_dtoh(&left.slice(..m))? };
    // By shard, then key: each shard's leftover keys in key order, shard after shard.
    let shard_of = |key: u32| crate::index::format::shard_of(key, shard_bits);
    sorted.sort_unstable_by_key(|&w| (shard_of(w as u32), w as u32));
    if m > 0 {
        s.memcpy_htod(&sorted, &mut left)?;
    }
    let n_shards = 1usize << shard_bits;
    let left_first: Vec<u64> =
        (0..=n_shards).map(|sh| sorted.partition_point(|&w| shard_of(w as u32) < sh) as u64).collect();
    let start: Vec<u64> = (0..=n_shards).map(|sh| tables.base[sh] * BUCKET_SLOTS as u64 + left_first[sh]).collect();
    let n_slots = tables.total_buckets() * BUCKET_SLOTS as u64;
    let total = n_slots + m as u64;
    let mut order = s.alloc_zeros::<u64>(total.max(1) as usize)?;
    let left_first_dev = s.clone_htod(&left_first)?;
    let (sh, m) = (tables.args(gpu, shard_bits), m as u64);
    launch!(
        gpu,
        "assemble_order",
        launch_config(gpu, total),
        &slots,
        &n_slots,
        &left,
        &m,
        &sh,
        &left_first_dev,
        &mut order
    );
    Ok(ListOrder { order, start })
}

/// Writes every list into its shard's stream and sets the slot values: the slot words (each
/// shard's slots, then its leftover keys), the streams, and where each shard's parts are.
#[allow(clippy::type_complexity)]
fn write_lists(
    gpu: &Gpu,
    table: &BucketListTable,
    (keys, clade): (&DeviceKeys, &CudaSlice<u32>),
    lists: ListOrder,
    tables: &ShardTables,
    shard_bits: u32,
    layout: &LocationLayout,
) -> Result<(CudaSlice<u64>, CudaSlice<u32>, CudaSlice<u32>, Vec<ShardPlace>), GpuError> {
    let s = &gpu.stream;
    let n_shards = 1usize << shard_bits;
    let ListOrder { mut order, start } = lists;
    let total = start[n_shards];
    let inline_single = layout.inline_single() as u32;
    // Each list sorted in a room of its own, then its entries counted (fixed or delta-coded, which
    // depends on the sorted list), then written.
    let mut room = s.alloc_zeros::<u64>(total as usize + 1)?;
    launch!(
        gpu,
        "slot_room",
        launch_config(gpu, total),
        &order,
        &total,
        &keys.counts,
        clade,
        &inline_single,
        &mut room
    );
    let mut room_start = s.alloc_zeros::<u64>(total as usize + 1)?;
    exclusive_scan(gpu, &room, total + 1, &mut room_start)?;
    drop(room);
    let rooms = s.clone_dtoh(&room_start.slice(total as usize..))?[0];
    let mut scratch = s.alloc_zeros::<u64>(rooms.max(1) as usize)?;
    let mut entries = s.alloc_zeros::<u64>(total as usize + 1)?;
    // 4 bytes a key at the pass's peak (counted in `passes::PASS_BYTES_PER_VALUE`).
    let mut code_bits = s.alloc_zeros::<u32>(total.max(1) as usize)?;
    let (targs, margs) = (table.args(), keys.remap.args(gpu));
    let (entry_bits, window_bits, loc_bits) = (layout.entry_bits, layout.window_bits, layout.bits());
    launch!(
        gpu,
        "sort_lists",
        launch_config(gpu, total),
        &targs,
        &margs,
        &keys.table_slots,
        &keys.counts,
        clade,
        &order,
        &total,
        &room_start,
        &inline_single,
        &entry_bits,
        &window_bits,
        &loc_bits,
        &mut scratch,
        &mut entries,
        &mut code_bits
    );
    let mut entry_start = s.alloc_zeros::<u64>(total as usize + 1)?;
    exclusive_scan(gpu, &entries, total + 1, &mut entry_start)?;
    drop(entries);

    // Each shard's first entry, and its stream's words.
    let at_dev = s.clone_htod(&start)?;
    let mut first_entry_dev = s.alloc_zeros::<u64>(start.len())?;
    let count = start.len() as u64;
    launch!(gpu, "gather_u64", launch_config(gpu, count), &entry_start, &at_dev, &count, &mut first_entry_dev);
    let first_entry = s.clone_dtoh(&first_entry_dev)?;
    let eb = layout.entry_bits as u64;
    let mut first_word = vec![0u64];
    for sh in 0..n_shards {
        let entries = first_entry[sh + 1] - first_entry[sh];
        first_word.push(first_word[sh] + (entries * eb).div_ceil(32) + PAD_WORDS as u64);
    }
    let total_words = first_word[n_shards];
    let first_word_dev = s.clone_htod(&first_word)?;
    let mut words = s.alloc_zeros::<u32>(total_words.max(1) as usize)?;
    let mut overflow = s.alloc_zeros::<u32>(1)?;
    let sh = tables.args(gpu, shard_bits);
    let st = StreamsArgs {
        first_entry: DevAddr::of(gpu, &first_entry_dev),
        first_word: DevAddr::of(gpu, &first_word_dev),
        entry_bits: layout.entry_bits,
        inline_single,
    };
    launch!(
        gpu,
        "write_lists",
        launch_config(gpu, total),
        &targs,
        &margs,
        &keys.table_slots,
        &keys.counts,
        clade,
        &mut order,
        &total,
        &room_start,
        &entry_start,
        &sh,
        &st,
        &window_bits,
        &loc_bits,
        &scratch,
        &mut words,
        &mut overflow
    );
    if s.clone_dtoh(&overflow)?[0] != 0 {
        return Err(shard_overflow());
    }
    drop(scratch);

    let places = (0..n_shards)
        .map(|sh| {
            let slots_end = start[sh] as usize + tables.slot_range(sh).len();
            ShardPlace {
                slots: start[sh] as usize..slots_end,
                left: slots_end..start[sh + 1] as usize,
                words: first_word[sh] as usize..first_word[sh + 1] as usize,
            }
        })
        .collect();
    Ok((order, words, code_bits, places))
}

/// Places a shard's leftover keys `left` in its `slots` by the walk, in place: `None` when that
/// worked. If the walk fails, the slots are rolled back to what they were (a failed walk has moved
/// slots and holds one evicted key in hand) and the shard is laid out again as the CPU would
/// (`rebuild`), at a larger size: `Some(rebuilt)`.
///
/// `undo` gets every slot the walk wrote, with what it held before.
fn walk_in_place(
    slots: &mut [Slot],
    left: &[Slot],
    words: &[u32],
    layout: &LocationLayout,
    hash: KeyHash,
    undo: &mut Vec<(usize, Slot)>,
) -> Result<Option<ShardData>, ShardOverflow> {
    if bcht::place_stragglers_logged(slots, left, hash, undo) {
        return Ok(None);
    }
    bcht::undo_walk(slots, undo);
    let before = ShardData { slots: slots.to_vec(), words: words.to_vec() };
    rebuild(&before, left, layout, hash).map(Some)
}

/// [`walk_in_place`] on an owned shard (the unit tests').
#[cfg(test)]
fn walk_or_rebuild(mut shard: ShardData, left: &[Slot], layout: &LocationLayout) -> Result<ShardData, ShardOverflow> {
    let words = shard.words.clone();
    match walk_in_place(&mut shard.slots, left, &words, layout, tests::H, &mut Vec::new())? {
        None => Ok(shard),
        Some(rebuilt) => Ok(rebuilt),
    }
}

/// Places a shard's leftover keys `left` in its `slots` (downloaded, in place; see
/// [`walk_in_place`]), then lays the shard out as the index stores it (`index::stored_shard`).
/// `code_bits` are the slots' lists' code bits as the GPU wrote them (`DeviceShards::code_bits`),
/// which spare the layout walking each list to find its end; the slots the walk moved walk theirs.
pub(crate) fn finish_and_store(
    slots: &mut [Slot],
    left: &[Slot],
    (words, code_bits): (&[u32], &[u32]),
    (layout, numbering): (&LocationLayout, &GlobalWindows),
    hash: KeyHash,
) -> Result<StoredShard, GpuError> {
    debug_assert_eq!(code_bits.len(), slots.len());
    let t = std::time::Instant::now();
    let mut undo = Vec::new();
    let walked = walk_in_place(slots, left, words, layout, hash, &mut undo).map_err(|_| shard_overflow())?;
    log::trace!("{} leftover keys placed in {:.3} s", left.len(), t.elapsed().as_secs_f64());
    let stored = match walked {
        None => {
            let mut known = code_bits.to_vec();
            for &(at, _) in &undo {
                known[at] = stored_shard::UNKNOWN_CODE_BITS;
            }
            stored_shard::store_parts(slots, words, Some(&known), layout, numbering, hash)
        }
        Some(rebuilt) => stored_shard::store(&rebuilt, layout, numbering, hash),
    };
    stored.map_err(|_| shard_overflow())
}

/// A shard that does not fit the location layout (the build names the index in it:
/// `indexing::error::BuildError`'s `From<GpuError>`).
pub(crate) fn shard_overflow() -> GpuError {
    GpuError::ShardOverflow(ShardOverflow)
}

/// A shard laid out again by the CPU's `ShardAssembler` from its keys and their lists (the rare
/// shard whose leftover keys did not fit by cuckoo walks: the CPU grows its table and starts again).
fn rebuild(
    shard: &ShardData,
    left: &[Slot],
    layout: &LocationLayout,
    hash: KeyHash,
) -> Result<ShardData, ShardOverflow> {
    use crate::index::locations::LocationList;
    let mut entries: Vec<Slot> = shard.slots.iter().chain(left).filter(|s| s.key != bcht::EMPTY_KEY).copied().collect();
    entries.sort_unstable_by_key(|s| s.key);
    let mut assembler = crate::index::condensed::ShardAssembler::new(layout, hash);
    let mut locs = Vec::new();
    for e in entries {
        let list = LocationList::decode(e.value, &shard.words, layout);
        if let Some(node) = list.clade() {
            // The counts are not kept: only the bytes are.
            assembler.add_clade(e.key, node, 0);
            continue;
        }
        locs.clear();
        list.append_to(&mut locs);
        assembler.add(e.key, &locs);
    }
    Ok(assembler.finish()?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::condensed::ShardAssembler;

    /// One shard.
    pub(super) const H: KeyHash = KeyHash::new(0);

    /// The fallback for a shard whose walk fails: laying a shard out again from its own slots and
    /// lists gives the CPU's bytes.
    #[test]
    fn rebuilding_a_shard_from_its_lists_gives_the_same_bytes() {
        let layout = LocationLayout::uniform(50, 1000, 254, 60);
        let mut assembler = ShardAssembler::new(&layout, H);
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for key in (0..20_000u32).map(|i| i * 7 + 3) {
            let mut locs: Vec<u64> =
                (0..1 + next() % 4).map(|_| layout.pack((next() % 50) as u32, (next() % 1000) as u32)).collect();
            locs.sort_unstable();
            locs.dedup();
            match next() % 10 {
                0 => assembler.add_clade(key, (next() % 60) as u32, 300),
                _ => assembler.add(key, &locs),
            }
        }
        let (shard, _) = assembler.finish().unwrap();
        let again = rebuild(&shard, &[], &layout, H).unwrap();
        assert!(again == shard);
    }

    /// Regression: a shard whose walk failed was rebuilt from the slots the failed walk had
    /// moved (one key lost in hand, placed leftovers counted twice), so it differed from the
    /// CPU's. Here the GPU's state before the walk is made on the CPU (lists in slot order, then
    /// the leftover keys'), for keys whose walk fails at the first size.
    #[test]
    fn a_shard_whose_walk_fails_gets_the_cpu_bytes() {
        use crate::index::locations::ListWriter;
        let layout = LocationLayout::uniform(50, 1000, 254, 60);
        let mut x = 99u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut tried = 0;
        loop {
            tried += 1;
            assert!(tried < 2000, "no key set whose walk fails found");
            let mut keys: Vec<u32> = (0..7300).map(|_| (next() % (u32::MAX as u64)) as u32).collect();
            keys.sort_unstable();
            keys.dedup();
            let (mut slots, mut left) = bcht::place_rounds(&keys, bcht::initial_buckets(keys.len()), H);
            if bcht::place_stragglers(&mut slots.clone(), &left, H) {
                continue;
            }
            let lists: Vec<Vec<u64>> =
                keys.iter().map(|_| vec![layout.pack((next() % 50) as u32, (next() % 1000) as u32)]).collect();
            let mut writer = ListWriter::new(layout);
            for slot in slots.iter_mut().chain(left.iter_mut()).filter(|s| s.key != bcht::EMPTY_KEY) {
                slot.value = writer.add(&lists[slot.value as usize]).unwrap();
            }
            let before = ShardData { slots, words: writer.finish() };
            let got = walk_or_rebuild(before, &left, &layout).unwrap();
            let mut assembler = ShardAssembler::new(&layout, H);
            for (k, l) in keys.iter().zip(&lists) {
                assembler.add(*k, l);
            }
            let (expected, _) = assembler.finish().unwrap();
            assert!(got == expected, "the rebuilt shard differs from the CPU's");
            return;
        }
    }
}
