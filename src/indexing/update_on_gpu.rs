//! Stage 3 of `kmerdb update` on a GPU: the shards condensed by the GPU build's condense
//! (`gpu::condense`), with the bytes of the CPU's stage 3 (`tests/gpu.rs` compares them).
//!
//! The old index's locations go in as they are stored, (old target, window), the added genomes'
//! as (provisional id, window) after the old targets; the condense's renumbering (`final_id`,
//! as in a build) gives every kept target its new id and leaves out the removed ones, so a
//! removal costs nothing on the GPU. The shards are cut into passes that fit the GPU's memory, as
//! the build's are (`gpu::passes::plan_passes`); in a pass the host gathers the shards' pairs on
//! every core, the GPU inserts them into a bucket-list table sized for them and condenses it, and
//! the host writes the shards in order, the three stages working on three passes at once.
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
use crate::indexing::condense::{Condensed, ShardStats};
use crate::indexing::error::BuildError;
use crate::indexing::sketching::Bin;
use crate::sketch::Feature;
use rayon::prelude::*;

/// Every shard laid out on `gpu` and written by `writer` in shard order, passes of at most
/// `pass_values` locations if given (else what fits the GPU's free memory). Returns the writer
/// and the shards' counts.
///
/// Three stages overlap: this thread gathers a pass's pairs on the pool, a thread of its own
/// condenses the pass before on the GPU (and finishes its shards), another writes the shards.
/// Gathering stays on this thread, one of the pool's, so that it can use the pool even when the
/// pool has no other thread (`--threads 1`).
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
    let (cap, shard_bits, layout) = (header.max_locations_per_feature, header.shard_bits, &shards.new.layout);
    let mut bins: Vec<Option<Bin>> = bins.into_iter().map(Some).collect();
    std::thread::scope(|scope| {
        let (to_gpu, gpu_in) = std::sync::mpsc::sync_channel::<Gathered>(1);
        let (to_writer, writer_in) = std::sync::mpsc::sync_channel::<Vec<Condensed>>(1);
        let condensing = scope.spawn(move || -> Result<(), BuildError> {
            gpu.ctx.bind_to_thread().map_err(GpuError::from)?;
            for pass in gpu_in {
                let mut table =
                    BucketListTable::new(gpu, TableConfig::new(pass.len() * 10 / 9 + 1024, 2 * pass.len() + 1024))?;
                table.insert_pairs(&pass.keys, &pass.values)?;
                let range = pass.shards.clone();
                drop(pass);
                let status = table.status()?;
                if status.is_error() {
                    let bug = "the table is sized for every value it gets: this is a bug, please report it";
                    return Err(table.full(&status, bug).into());
                }
                let all = crate::gpu::condense::condense(&table, gpu, &final_id, layout, cap, shard_bits)?;
                if to_writer.send(all.into_iter().skip(range.start).take(range.len()).collect()).is_err() {
                    break; // the writer failed: its error is the run's
                }
            }
            Ok(())
        });
        let writing = scope.spawn(move || -> Result<(IndexWriter, ShardStats), BuildError> {
            let (mut writer, mut stats) = (writer, ShardStats::default());
            for pass in writer_in {
                for shard in pass {
                    writer.add_shard(&shard.data.slots, &shard.data.words, None)?;
                    writer.add_dropped(shard.dropped);
                    stats += shard.stats;
                }
            }
            Ok((writer, stats))
        });
        for pass in passes {
            let pass_bins: Vec<Bin> =
                pass.clone().map(|s| bins[s].take().expect("each shard is in one pass")).collect();
            let gathered = shards.gather(pass, &counts, pass_bins);
            if to_gpu.send(gathered).is_err() {
                break; // the GPU stage failed: its error is the run's
            }
        }
        drop(to_gpu);
        let condensed = condensing.join().expect("the GPU stage does not panic");
        let written = writing.join().expect("the writing stage does not panic");
        condensed?;
        written
    })
}

/// A pass's pairs, as the GPU condense takes them (see [`Shards::provisional_pairs`]).
struct Gathered {
    shards: std::ops::Range<usize>,
    keys: Vec<Feature>,
    values: Vec<u64>,
}

impl Gathered {
    fn len(&self) -> u64 {
        self.keys.len() as u64
    }
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

    /// The pairs of the shards of `pass` (`counts` of each), each shard's written on the pool
    /// straight into its stretch of the pass's arrays.
    fn gather(&self, pass: std::ops::Range<usize>, counts: &[u64], bins: Vec<Bin>) -> Gathered {
        let n: u64 = counts[pass.clone()].iter().sum();
        let (mut keys, mut values) = (vec![0; n as usize], vec![0; n as usize]);
        let mut stretches = Vec::with_capacity(pass.len());
        let (mut k, mut v): (&mut [Feature], &mut [u64]) = (&mut keys, &mut values);
        for s in pass.clone() {
            let (ks, rest_k) = k.split_at_mut(counts[s] as usize);
            let (vs, rest_v) = v.split_at_mut(counts[s] as usize);
            stretches.push((s, ks, vs));
            (k, v) = (rest_k, rest_v);
        }
        stretches.into_par_iter().zip(bins).for_each(|((s, ks, vs), bin)| self.provisional_pairs(s, bin, ks, vs));
        Gathered { shards: pass, keys, values }
    }

    /// Shard `shard`'s pairs into `keys` and `values` (exactly [`Shards::pair_count`] long), as
    /// the GPU condense takes them: (feature, provisional target << 32 | window), the old targets
    /// by their old ids, the added sequences after them. Removed and left-out targets are in it;
    /// the condense's renumbering leaves them out.
    fn provisional_pairs(&self, shard: usize, bin: Bin, keys: &mut [Feature], values: &mut [u64]) {
        let old = self.old;
        let layout = old.layout();
        let mut at = 0;
        let mut push = |key: Feature, value: u64| {
            keys[at] = key;
            values[at] = value;
            at += 1;
        };
        for slot in old.shard_slots(shard).iter().filter(|s| s.key != bcht::EMPTY_KEY) {
            for l in old.list(shard, slot.value).iter() {
                let (t, w) = layout.unpack(l);
                push(slot.key, (t as u64) << 32 | w as u64);
            }
        }
        for &(feature, list) in &self.dropped[shard] {
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
        assert_eq!(at, keys.len(), "pair_count counts what provisional_pairs gives");
    }
}
