//! Stage 3 of `kmerdb update` on a GPU: the shards condensed by the GPU build's condense
//! (`gpu::condense`), with the bytes of the CPU's stage 3 (`tests/gpu.rs` compares them).
//!
//! The old index's locations go in as they are stored, (old target, window), the added genomes'
//! as (provisional id, window) after the old targets; the condense's renumbering (`final_id`,
//! as in a build) gives every kept target its new id and leaves out the removed ones, so a
//! removal costs nothing on the GPU. The shards are cut into passes that fit the GPU's memory, as
//! the build's are (`gpu::passes::plan_passes`); in a pass the host gathers the shards' pairs on
//! every core, the GPU inserts them into a bucket-list table sized for them and condenses it, and
//! the host writes the shards in order.
//!
//! Why not the slab table of `cuda/slab_hash.cuh`: an update renumbers the targets by name, so
//! nearly every stored location changes and every shard is laid out again; a dynamic table's
//! deletions and insertions in place would each cost a list walk and save nothing, while the
//! renumbering drops a removed target's locations in the pass that condenses them anyway.

use super::Shards;
use crate::gpu::passes::{PASS_BYTES_PER_VALUE, PASS_RESERVE, plan_passes};
use crate::gpu::table::{BucketListTable, TableConfig};
use crate::gpu::{Gpu, GpuError};
use crate::index::{IndexWriter, bcht};
use crate::indexing::condense::ShardStats;
use crate::indexing::error::BuildError;
use crate::indexing::sketching::Bin;
use crate::sketch::Feature;
use rayon::prelude::*;

/// Every shard laid out on `gpu` and written by `writer` in shard order, passes of at most
/// `pass_values` locations if given (else what fits the GPU's free memory). Returns the writer
/// and the shards' counts.
pub(super) fn lay_out(
    shards: &Shards,
    bins: Vec<Bin>,
    mut writer: IndexWriter,
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
    let mut bins: Vec<Option<Bin>> = bins.into_iter().map(Some).collect();
    let mut stats = ShardStats::default();
    for pass in passes {
        let pass_bins: Vec<(usize, Bin)> =
            pass.clone().map(|s| (s, bins[s].take().expect("each shard is in one pass"))).collect();
        let gathered: Vec<(Vec<Feature>, Vec<u64>)> =
            pass_bins.into_par_iter().map(|(s, bin)| shards.provisional_pairs(s, bin)).collect();
        let (keys, values): (Vec<Feature>, Vec<u64>) =
            gathered.into_iter().fold((Vec::new(), Vec::new()), |(mut k, mut v), (sk, sv)| {
                k.extend(sk);
                v.extend(sv);
                (k, v)
            });
        let n = keys.len() as u64;
        let mut table = BucketListTable::new(gpu, TableConfig::new(n * 10 / 9 + 1024, 2 * n + 1024))?;
        table.insert_pairs(&keys, &values)?;
        drop((keys, values));
        let status = table.status()?;
        if status.is_error() {
            let bug = "the table is sized for every value it gets: this is a bug, please report it";
            return Err(table.full(&status, bug).into());
        }
        let cap = header.max_locations_per_feature;
        let condensed =
            crate::gpu::condense::condense(&table, gpu, &final_id, &shards.new.layout, cap, header.shard_bits)?;
        for shard in condensed.into_iter().skip(pass.start).take(pass.len()) {
            writer.add_shard(&shard.data.slots, &shard.data.words, None)?;
            writer.add_dropped(shard.dropped);
            stats += shard.stats;
        }
    }
    Ok((writer, stats))
}

impl Shards<'_> {
    /// How many pairs [`Shards::provisional_pairs`] gives for shard `shard`.
    fn pair_count(&self, shard: usize, bin: &Bin) -> u64 {
        let old = self.old;
        let kept = old.shard_slots(shard).iter().filter(|s| s.key != bcht::EMPTY_KEY);
        let stored: u64 = kept.map(|slot| old.list(shard, slot.value).len() as u64).sum();
        let dropped: u64 = self.dropped[shard].iter().map(|(_, list)| list.len() as u64).sum();
        let added: u64 = bin.iter().map(|chunk| chunk.len() as u64).sum();
        stored + dropped + added
    }

    /// Shard `shard`'s pairs as the GPU condense takes them: (feature, provisional target << 32 |
    /// window), the old targets by their old ids, the added sequences after them. Removed and
    /// left-out targets are in it; the condense's renumbering leaves them out.
    fn provisional_pairs(&self, shard: usize, bin: Bin) -> (Vec<Feature>, Vec<u64>) {
        let old = self.old;
        let layout = old.layout();
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for slot in old.shard_slots(shard).iter().filter(|s| s.key != bcht::EMPTY_KEY) {
            for l in old.list(shard, slot.value).iter() {
                let (t, w) = layout.unpack(l);
                keys.push(slot.key);
                values.push((t as u64) << 32 | w as u64);
            }
        }
        for &(feature, list) in &self.dropped[shard] {
            keys.extend(std::iter::repeat_n(feature, list.len()));
            values.extend_from_slice(list);
        }
        let first_added = old.targets().len() as u64;
        for chunk in bin {
            for p in chunk {
                let w = p.window as u64;
                let provisional = self.raw.partition_point(|t| t.first_window <= w) - 1;
                keys.push(p.feature);
                values.push((first_added + provisional as u64) << 32 | (w - self.raw[provisional].first_window));
            }
        }
        (keys, values)
    }
}
