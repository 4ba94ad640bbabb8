//! Stage 3 of the CPU build: turn each shard's bin of (feature, target, window) triples into its
//! key index and location lists (HashGraph-style: sort by feature, lay out lists contiguously).
//!
//! Overpopulated features: a feature with more locations than `max_locations_per_feature` is left
//! out of the index whole (its locations are counted as dropped). This is MetaCache's optional
//! policy, chosen because it is deterministic and unbiased: keeping "the first N" would keep
//! whichever targets happen to sort first.

use crate::build::sketching::Pair;
use crate::index::bcht::{self, Slot};
use crate::index::locations::{ListWriter, LocationLayout, ShardOverflow};
use crate::index::write::ShardData;

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

/// Condenses one shard. `final_id[provisional]` renumbers targets; `None` drops their pairs.
pub fn condense_shard(
    mut pairs: Vec<Pair>,
    final_id: &[Option<u32>],
    layout: &LocationLayout,
    cap: u32,
) -> Result<(ShardData, ShardStats), ShardOverflow> {
    pairs.retain_mut(|p| match final_id[p.target as usize] {
        Some(id) => {
            p.target = id;
            true
        }
        None => false,
    });
    // Field order (feature, target, window) makes this sort group features and order each list.
    pairs.sort_unstable();
    let mut stats = ShardStats::default();
    let mut entries = Vec::new();
    let mut lists = ListWriter::new(*layout);
    let mut locs = Vec::new();
    for group in pairs.chunk_by(|a, b| a.feature == b.feature) {
        if group.len() > cap as usize {
            stats.dropped_features += 1;
            stats.dropped_locations += group.len() as u64;
            continue;
        }
        locs.clear();
        locs.extend(group.iter().map(|p| layout.pack(p.target, p.window)));
        let value = lists.add(&locs)?;
        entries.push(Slot { key: group[0].feature, value });
        stats.features += 1;
        stats.locations += group.len() as u64;
    }
    drop(pairs);
    let slots = bcht::build(&entries);
    Ok((ShardData { slots, words: lists.finish() }, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::locations::LocationList;

    #[test]
    fn lists_are_sorted_capped_and_renumbered() {
        let layout = LocationLayout::for_counts(4, 100, 254);
        let p = |feature, target, window| Pair { feature, target, window };
        // Provisional target 2 becomes 0, 0 becomes 1, 1 is left out, 3 becomes 2.
        let final_id = [Some(1), None, Some(0), Some(2)];
        let pairs =
            vec![p(7, 0, 3), p(5, 2, 1), p(7, 2, 9), p(5, 1, 4), p(9, 0, 1), p(9, 2, 1), p(9, 3, 1), p(7, 3, 0)];
        let (shard, stats) = condense_shard(pairs, &final_id, &layout, 2).unwrap();
        assert_eq!((stats.features, stats.locations, stats.dropped_features, stats.dropped_locations), (1, 1, 2, 6));
        let value = bcht::lookup(&shard.slots, 5).unwrap();
        let list = LocationList::decode(value, &shard.words, &layout);
        assert_eq!(list.iter().map(|l| layout.unpack(l)).collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(bcht::lookup(&shard.slots, 7), None);
        assert_eq!(bcht::lookup(&shard.slots, 9), None);

        let pairs = vec![p(7, 0, 3), p(7, 2, 9), p(7, 3, 0)];
        let (shard, _) = condense_shard(pairs, &final_id, &layout, 254).unwrap();
        let list = LocationList::decode(bcht::lookup(&shard.slots, 7).unwrap(), &shard.words, &layout);
        assert_eq!(list.iter().map(|l| layout.unpack(l)).collect::<Vec<_>>(), vec![(0, 9), (1, 3), (2, 0)]);
    }
}
