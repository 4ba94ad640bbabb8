//! Stage 3 of the CPU build: turn each shard's bin of (feature, target, window) triples into its
//! key index and location lists (HashGraph-style: sort by feature, lay out lists contiguously).
//!
//! Overpopulated features: a feature with more locations than `max_locations_per_feature` is left
//! out of the index whole (its locations are counted as dropped). This is MetaCache's optional
//! policy, chosen because it is deterministic and unbiased: keeping "the first N" would keep
//! whichever targets happen to sort first.

use crate::index::bcht;
use crate::index::dropped::{self, DroppedLists};
use crate::index::locations::{ListWriter, LocationLayout, ShardOverflow};
use crate::index::write::ShardData;
use crate::sketch::Feature;

/// What condensing a shard counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShardStats {
    pub features: u64,
    pub locations: u64,
    pub dropped_features: u64,
    pub dropped_locations: u64,
}

impl std::ops::AddAssign for ShardStats {
    fn add_assign(&mut self, o: Self) {
        self.features += o.features;
        self.locations += o.locations;
        self.dropped_features += o.dropped_features;
        self.dropped_locations += o.dropped_locations;
    }
}

/// Lays out one shard from its features in ascending order, each with its sorted locations: the
/// CPU build's last step, and the reference the GPU condense (`gpu::condense`) matches byte for byte.
///
/// Lists are laid out in the key index's slot order (not key order), so that the GPU can write them
/// as soon as the keys are placed, without sorting the keys (see [`finish`](Self::finish)).
pub struct ShardAssembler {
    cap: u32,
    layout: LocationLayout,
    keys: Vec<Feature>,
    /// Where each key's locations start in `locs` (one more entry than `keys`).
    starts: Vec<usize>,
    locs: Vec<u64>,
    stats: ShardStats,
}

impl ShardAssembler {
    pub fn new(layout: &LocationLayout, cap: u32) -> Self {
        Self { cap, layout: *layout, keys: Vec::new(), starts: vec![0], locs: Vec::new(), stats: ShardStats::default() }
    }

    /// Whether a feature with `count` locations is kept; if not, it is counted as dropped.
    pub fn keeps(&mut self, count: usize) -> bool {
        if count > self.cap as usize {
            self.stats.dropped_features += 1;
            self.stats.dropped_locations += count as u64;
            return false;
        }
        true
    }

    /// Adds a kept feature (see [`keeps`](Self::keeps)), greater than the ones before, with its
    /// sorted, packed locations.
    pub fn add(&mut self, feature: Feature, locs: &[u64]) {
        debug_assert!(self.keys.last().is_none_or(|&k| k < feature));
        self.keys.push(feature);
        self.locs.extend_from_slice(locs);
        self.starts.push(self.locs.len());
        self.stats.features += 1;
        self.stats.locations += locs.len() as u64;
    }

    /// Places the keys (`bcht`'s rounds, then its walk for the keys left over) and writes the
    /// lists: first those of the keys the rounds placed, in slot order, then those of the leftover
    /// keys in key order. The walk moves whole slots, values included, so the streams do not depend
    /// on it, and the GPU can write them before the host walks (see `gpu::condense`).
    pub fn finish(self) -> Result<(ShardData, ShardStats), ShardOverflow> {
        let mut n_buckets = bcht::initial_buckets(self.keys.len());
        loop {
            let (mut slots, mut left) = bcht::place_rounds(&self.keys, n_buckets);
            let mut lists = ListWriter::new(self.layout);
            for slot in slots.iter_mut().chain(left.iter_mut()).filter(|s| s.key != bcht::EMPTY_KEY) {
                let i = slot.value as usize;
                slot.value = lists.add(&self.locs[self.starts[i]..self.starts[i + 1]])?;
            }
            if bcht::place_stragglers(&mut slots, &left) {
                return Ok((ShardData { slots, words: lists.finish() }, self.stats));
            }
            n_buckets = bcht::grown_buckets(n_buckets);
        }
    }
}

/// Turns a global window number of stage 1 into a packed final location: the target is the one
/// whose window range holds it, renumbered by `final_id` (`None`: left out of the index).
pub struct WindowMap {
    /// First global window of each provisional target (increasing).
    starts: Vec<u64>,
    final_id: Vec<Option<u32>>,
}

impl WindowMap {
    pub fn new(targets: &[crate::indexing::sketching::RawTarget], final_id: &[Option<u32>]) -> Self {
        Self { starts: targets.iter().map(|t| t.first_window).collect(), final_id: final_id.to_vec() }
    }

    /// The packed location of global window `w`, if its target is kept.
    #[inline]
    pub fn locate(&self, w: u32, layout: &LocationLayout) -> Option<u64> {
        let w = w as u64;
        let provisional = self.starts.partition_point(|&s| s <= w) - 1;
        let target = self.final_id[provisional]?;
        Some(layout.pack(target, (w - self.starts[provisional]) as u32))
    }
}

/// One shard laid out: its bytes, its counts and its dropped features, whole.
pub struct Condensed {
    pub data: ShardData,
    pub stats: ShardStats,
    pub dropped: DroppedLists,
}

/// Condenses one shard from its bin.
pub fn condense_bin(
    bin: crate::indexing::sketching::Bin,
    windows: &WindowMap,
    layout: &LocationLayout,
    cap: u32,
) -> Result<Condensed, ShardOverflow> {
    let mut located: Vec<(Feature, u64)> = Vec::with_capacity(bin.iter().map(Vec::len).sum());
    for chunk in bin {
        located.extend(chunk.iter().filter_map(|p| windows.locate(p.window, layout).map(|loc| (p.feature, loc))));
    }
    condense_all(located, layout, cap)
}

/// Condenses one shard from (feature, packed final location) pairs in any order; the features
/// over the cap come back whole, unpacked.
pub fn condense_all(
    mut located: Vec<(Feature, u64)>,
    layout: &LocationLayout,
    cap: u32,
) -> Result<Condensed, ShardOverflow> {
    // Sorting by (feature, location) groups features and orders each list.
    located.sort_unstable();
    let mut shard = ShardAssembler::new(layout, cap);
    let mut dropped = DroppedLists::default();
    let mut locs = Vec::new();
    for group in located.chunk_by(|a, b| a.0 == b.0) {
        if shard.keeps(group.len()) {
            locs.clear();
            locs.extend(group.iter().map(|&(_, loc)| loc));
            shard.add(group[0].0, &locs);
        } else {
            let unpacked = group.iter().map(|&(_, loc)| layout.unpack(loc)).map(|(t, w)| dropped::location(t, w));
            dropped.push(group[0].0, unpacked);
        }
    }
    drop(located);
    let (data, stats) = shard.finish()?;
    Ok(Condensed { data, stats, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::locations::LocationList;

    #[test]
    fn lists_are_sorted_capped_and_renumbered() {
        use crate::indexing::sketching::{Pair, RawTarget};
        let layout = LocationLayout::for_counts(4, 100, 254);
        // Provisional targets 0..4 with 10 windows each: global windows 0-9, 10-19, 20-29, 30-39.
        let raw: Vec<RawTarget> = (0..4)
            .map(|i| RawTarget {
                name: format!("t{i}"),
                header: String::new(),
                length: 1000,
                windows: 10,
                first_window: 10 * i,
                source: 0,
                record: i + 1,
                has_kmer: true,
            })
            .collect();
        // Provisional target 2 becomes 0, 0 becomes 1, 1 is left out, 3 becomes 2.
        let windows = WindowMap::new(&raw, &[Some(1), None, Some(0), Some(2)]);
        let p = |feature, target: u32, window: u32| Pair { feature, window: target * 10 + window };
        let bin = vec![
            vec![p(7, 0, 3), p(5, 2, 1), p(7, 2, 9)],
            vec![p(5, 1, 4), p(9, 0, 1), p(9, 2, 1), p(9, 3, 1), p(7, 3, 0)],
        ];
        let Condensed { data: shard, stats, dropped } = condense_bin(bin, &windows, &layout, 2).unwrap();
        assert_eq!((stats.features, stats.locations, stats.dropped_features, stats.dropped_locations), (1, 1, 2, 6));
        // The dropped features keep every location, renumbered and sorted, unpacked.
        let mut expected = DroppedLists::default();
        let l = dropped::location;
        expected.push(7, [l(0, 9), l(1, 3), l(2, 0)]);
        expected.push(9, [l(0, 1), l(1, 1), l(2, 1)]);
        assert_eq!(dropped, expected);
        let value = bcht::lookup(&shard.slots, 5).unwrap();
        let list = LocationList::decode(value, &shard.words, &layout);
        assert_eq!(list.iter().map(|l| layout.unpack(l)).collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(bcht::lookup(&shard.slots, 7), None);
        assert_eq!(bcht::lookup(&shard.slots, 9), None);

        let bin = vec![vec![p(7, 0, 3), p(7, 2, 9), p(7, 3, 0)]];
        let shard = condense_bin(bin, &windows, &layout, 254).unwrap().data;
        let list = LocationList::decode(bcht::lookup(&shard.slots, 7).unwrap(), &shard.words, &layout);
        assert_eq!(list.iter().map(|l| layout.unpack(l)).collect::<Vec<_>>(), vec![(0, 9), (1, 3), (2, 0)]);
    }
}
