//! Stage 3 of `kmerdb update` on a GPU: the shards condensed by the GPU build's condense
//! (`gpu::condense`), with the bytes of the CPU's stage 3 (`tests/gpu.rs` compares them).
//!
//! The old index's locations go in as they are stored, (old target, window), the added genomes'
//! as (provisional id, window) after the old targets; the condense's renumbering (`final_id`,
//! as in a build) gives every kept target its new id and leaves out the removed ones, so a
//! removal costs nothing on the GPU. The shards are cut into passes that fit the GPU's memory, as
//! the build's are (`gpu::passes::plan_passes`). In a pass the old shards' blocks are copied to
//! the GPU as they are stored and expanded there into pairs (`cuda/update.cuh`; the host's twin
//! is the CPU update's `Shards::locations`), the host gathers the clade features' and the
//! added genomes' pairs on every core, the GPU inserts them all into a bucket-list table sized
//! for them and condenses it, and the host writes the shards in order; gathering, the GPU and
//! writing work on three passes at once.
//!
//! Why not the slab table of `cuda/slab_hash.cuh`: an update renumbers the targets by name, so
//! nearly every stored location changes and every shard is laid out again; a dynamic table's
//! deletions and insertions in place would each cost a list walk and save nothing, while the
//! renumbering drops a removed target's locations in the pass that condenses them anyway.

use super::Shards;
use crate::gpu::address::DevAddr;
use crate::gpu::classify::IndexTables;
use crate::gpu::passes::{PASS_BYTES_PER_VALUE, PASS_RESERVE, plan_passes};
use crate::gpu::table::{BucketListTable, TableConfig, launch_config};
use crate::gpu::{Gpu, GpuError};
use crate::index::condensed::{Condensed, ShardStats};
use crate::index::format::ShardEntry;
use crate::index::{Index, IndexWriter, bcht};
use crate::indexing::error::BuildError;
use crate::indexing::sketching::Bin;
use crate::pipeline::Pipeline;
use crate::sketch::Feature;
use cudarc::driver::PushKernelArg;
use rayon::prelude::*;

/// Every shard laid out on `gpu` and written by `writer` in shard order, passes of at most
/// `pass_values` locations if given (else what fits the GPU's free memory). Returns the writer
/// and the shards' counts.
///
/// Three pipeline stages overlap: this thread gathers a pass's pairs on the pool, a thread of its
/// own condenses the pass before on the GPU (and finishes its shards), another writes the shards.
pub(super) fn lay_out(
    shards: &Shards,
    bins: Vec<Bin>,
    writer: IndexWriter,
    gpu: &Gpu,
    pass_values: Option<u64>,
) -> Result<(IndexWriter, ShardStats), BuildError> {
    let counts: Vec<u64> = (0..bins.len()).into_par_iter().map(|s| shards.pair_count(s, &bins[s])).collect();
    let (free, _) = gpu.memory()?;
    let fit = pass_values.unwrap_or((free as u64).saturating_sub(PASS_RESERVE) / PASS_BYTES_PER_VALUE);
    let passes = plan_passes(&counts, &[fit]).map_err(|s| GpuError::TooLarge {
        what: format!("shard {s} of the index ({} feature locations)", counts[s]),
        per_gpu: counts[s] * PASS_BYTES_PER_VALUE + PASS_RESERVE,
        gpus: 1,
        ordinal: gpu.ordinal,
        free: free as u64,
        advice: "update on the CPU (--gpus none)".into(),
    })?;
    log::debug!("update on GPU {}: {} passes for {} locations", gpu.ordinal, passes.len(), counts.iter().sum::<u64>());
    let final_id: Vec<Option<u32>> = shards.new.old_to_new.iter().chain(&shards.new.final_id).copied().collect();
    let header = shards.old.header();
    let (cap, shard_bits, layout) = (header.max_locations_per_feature, header.shard_bits, &shards.layout);
    let mut bins: Vec<Option<Bin>> = bins.into_iter().map(Some).collect();
    let mut passes = passes.into_iter();
    let mut gather = || -> Result<Option<Gathered>, BuildError> {
        let Some(pass) = passes.next() else { return Ok(None) };
        let pass_bins: Vec<Bin> = pass.clone().map(|s| bins[s].take().expect("each shard is in one pass")).collect();
        let host_counts: Vec<u64> = pass.clone().zip(&pass_bins).map(|(s, bin)| shards.host_count(s, bin)).collect();
        Ok(Some(shards.gather(pass, &host_counts, pass_bins)))
    };
    let condense = |pass: Gathered| -> Result<Vec<Condensed>, BuildError> {
        gpu.ctx.bind_to_thread().map_err(GpuError::from)?;
        let range = pass.shards.clone();
        let values: u64 = counts[range.clone()].iter().sum();
        let mut table = BucketListTable::new(gpu, TableConfig::new(values * 10 / 9 + 1024, 2 * values + 1024))?;
        let expanded = expand_old_shards(gpu, shards.old, range.clone(), &mut table)?;
        table.insert_pairs(&pass.keys, &pass.values)?;
        assert_eq!(expanded + pass.keys.len() as u64, values, "pair_count counts every pair of the pass");
        drop(pass);
        let status = table.status()?;
        if status.is_error() {
            let bug = "the table is sized for every value it gets: this is a bug, please report it";
            return Err(table.full(&status, bug).into());
        }
        let lists = (layout, &shards.numbering);
        let all = crate::gpu::condense::condense(&table, gpu, &final_id, lists, (cap, shards.clades), shard_bits)?;
        Ok(all.into_iter().skip(range.start).take(range.len()).collect())
    };
    let (mut writer, mut stats) = (writer, ShardStats::default());
    let write = |pass: Vec<Condensed>| -> Result<(), BuildError> {
        for shard in pass {
            writer.add_shard(&shard.data, None)?;
            writer.add_clade_lists(shard.clade_lists);
            stats += shard.stats;
        }
        Ok(())
    };
    // Gathering stays on this thread, one of the pool's, so that it can use the pool even when
    // the pool has no other thread (`--threads 1`).
    let times = std::thread::scope(|scope| {
        let (mut p, feed, gathered) = Pipeline::fed(1);
        let condensed = p.stage(scope, "condensing on the GPU", 1, gathered, condense);
        p.sink_on_thread(scope, "writing", condensed, write);
        let fed = feed.run(&mut gather);
        p.finish_fed(("gathering", fed))
    })?;
    log::debug!("update on GPU {}: {}", gpu.ordinal, crate::pipeline::describe(&times));
    Ok((writer, stats))
}

/// A pass's pairs gathered on the host (see [`Shards::host_pairs`]).
struct Gathered {
    shards: std::ops::Range<usize>,
    keys: Vec<Feature>,
    values: Vec<u64>,
}

impl Shards<'_> {
    /// How many pairs shard `shard` has: its stored locations, which the GPU expands, and
    /// [`Shards::host_count`].
    fn pair_count(&self, shard: usize, bin: &Bin) -> u64 {
        let old = self.old;
        let stored: u64 = old.shard_keys(shard).slots().map(|slot| old.list(shard, slot.list).len() as u64).sum();
        stored + self.host_count(shard, bin)
    }

    /// How many pairs [`Shards::host_pairs`] gives for shard `shard`.
    fn host_count(&self, shard: usize, bin: &Bin) -> u64 {
        let clades: u64 = self.clade_lists[shard].iter().map(|(_, list)| list.len() as u64).sum();
        let added: u64 = bin.iter().map(|chunk| chunk.len() as u64).sum();
        clades + added
    }

    /// The host's pairs of the shards of `pass` (`counts` of each, in pass order), each shard's
    /// written on the pool straight into its stretch of the pass's arrays.
    fn gather(&self, pass: std::ops::Range<usize>, counts: &[u64], bins: Vec<Bin>) -> Gathered {
        let n: u64 = counts.iter().sum();
        let (mut keys, mut values) = (vec![0; n as usize], vec![0; n as usize]);
        let mut stretches = Vec::with_capacity(pass.len());
        let (mut k, mut v): (&mut [Feature], &mut [u64]) = (&mut keys, &mut values);
        for (i, s) in pass.clone().enumerate() {
            let (ks, rest_k) = k.split_at_mut(counts[i] as usize);
            let (vs, rest_v) = v.split_at_mut(counts[i] as usize);
            stretches.push((s, ks, vs));
            (k, v) = (rest_k, rest_v);
        }
        stretches.into_par_iter().zip(bins).for_each(|((s, ks, vs), bin)| self.host_pairs(s, bin, ks, vs));
        Gathered { shards: pass, keys, values }
    }

    /// Shard `shard`'s pairs that the host gathers into `keys` and `values` (exactly
    /// [`Shards::host_count`] long), as the GPU condense takes them: (feature, provisional target
    /// << 32 | window), the clade features' by their old target ids, the added sequences' after
    /// the old targets. Removed and left-out targets are in it; the condense's renumbering leaves
    /// them out.
    fn host_pairs(&self, shard: usize, bin: Bin, keys: &mut [Feature], values: &mut [u64]) {
        let old = self.old;
        let mut at = 0;
        let mut push = |key: Feature, value: u64| {
            keys[at] = key;
            values[at] = value;
            at += 1;
        };
        for &(feature, list) in &self.clade_lists[shard] {
            list.iter().for_each(|&l| push(feature, l));
        }
        let first_added = old.targets().len() as u64;
        for chunk in bin {
            for p in chunk {
                let w = p.window as u64;
                let provisional = self.raw.partition_point(|t| t.first_window <= w) - 1;
                push(p.feature, (first_added + provisional as u64) << 32 | (w - self.raw[provisional].first_window));
            }
        }
        assert_eq!(at, keys.len(), "host_count counts what host_pairs gives");
    }
}

/// Copies the old index's shards of `pass` to the GPU as they are stored (one stretch of the
/// file), expands their lists there into (feature, old target << 32 | window) pairs, shard by
/// shard, and inserts them into `table`. Returns the pairs inserted.
fn expand_old_shards(
    gpu: &Gpu,
    old: &Index,
    pass: std::ops::Range<usize>,
    table: &mut BucketListTable,
) -> Result<u64, GpuError> {
    let s = &gpu.stream;
    let data = old.shard_data();
    let entries: Vec<ShardEntry> = (0..old.shard_count()).map(|sh| *old.shard_entry(sh)).collect();
    let start = entries[pass.start].offset;
    let end = entries.get(pass.end).map_or(data.len() as u64, |e| e.offset);
    if end == start {
        return Ok(0);
    }
    let blocks = s.clone_htod(&data[start as usize..end as usize])?;
    // Bare addresses into `blocks`, stored as data in the index's tables: `blocks` lives to the
    // end of this function, after the stream's last use of them (see the launches below).
    let (mut slot_base, mut word_base) = (vec![0u64; entries.len()], vec![0u64; entries.len()]);
    for sh in pass.clone() {
        slot_base[sh] = DevAddr::at(gpu, &blocks, (entries[sh].offset - start) as usize).raw();
        word_base[sh] = slot_base[sh] + entries[sh].key_bytes();
    }
    let buckets: Vec<u64> = entries.iter().map(|e| e.buckets).collect();
    let words: Vec<u64> = entries.iter().map(|e| e.words).collect();
    let tables = IndexTables::upload(gpu, old, &slot_base, &word_base, &buckets, &words)?;
    let ix = tables.args(gpu);
    let mut total = 0;
    for sh in pass {
        let slots = entries[sh].buckets * bcht::BUCKET_SLOTS as u64;
        if slots == 0 {
            continue;
        }
        let shard = sh as u32;
        let mut lens = s.alloc_zeros::<u64>(slots as usize)?;
        let f = gpu.function("old_list_lengths")?;
        let mut b = s.launch_builder(&f);
        b.arg(&ix).arg(&shard).arg(&slots).arg(&mut lens);
        // SAFETY: `old_list_lengths` takes (DeviceIndex, shard, n, lens[n]); the index's buffers
        // above live until the end of this function, after the stream's last use of them (the
        // insertion below waits for the stream).
        unsafe { b.launch(launch_config(gpu, slots)) }?;
        let mut first = s.alloc_zeros::<u64>(slots as usize)?;
        crate::gpu::condense::exclusive_scan(gpu, &lens, slots, &mut first)?;
        let last = slots as usize - 1;
        let pairs = s.clone_dtoh(&first.slice(last..))?[0] + s.clone_dtoh(&lens.slice(last..))?[0];
        if pairs == 0 {
            continue;
        }
        let mut keys = s.alloc_zeros::<u32>(pairs as usize)?;
        let mut values = s.alloc_zeros::<u64>(pairs as usize)?;
        let f = gpu.function("expand_old_lists")?;
        let mut b = s.launch_builder(&f);
        b.arg(&ix).arg(&shard).arg(&slots).arg(&first).arg(&mut keys).arg(&mut values);
        // SAFETY: `expand_old_lists` takes (DeviceIndex, shard, n, first[n], keys, values), the
        // last two with room for every pair (the scan's total); the buffers live as above.
        unsafe { b.launch(launch_config(gpu, slots)) }?;
        table.insert_device_pairs(&keys, &values, pairs)?;
        total += pairs;
    }
    Ok(total)
}
