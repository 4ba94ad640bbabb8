//! Stage 3 of the CPU build: turn each shard's bin of (feature, target, window) triples into its
//! key index and location lists (HashGraph-style: sort by feature, lay out lists contiguously).
//!
//! Overpopulated features: a feature with more locations than `max_locations_per_feature` is kept
//! as a *clade feature*: the key index stores the lowest common ancestor of its targets' taxa
//! instead of its list (`index::locations`), and its whole list goes to the clade lists section
//! for `kmerdb update`. In a strain-dense collection these are the species' core features: a list
//! of every strain tells a read no more than the species does, and dropping them (MetaCache's
//! option, and kmerdb's policy up to format 7) left reads of a new strain with few features.
//! MetaCache's default, keeping "the first N", would keep whichever targets sort first.

use crate::index::bcht;
use crate::index::clade_lists::{self, CladeLists};
use crate::index::condensed::{Clades, Condensed, ShardAssembler};
use crate::index::locations::{GlobalWindows, LocationLayout, ShardOverflow};
use crate::index::stored_shard;
use crate::sketch::Feature;

/// Turns a global window number of stage 1 into a packed final location: the target is the one
/// whose window range holds it, renumbered by `final_id` (`None`: left out of the index).
pub(crate) struct WindowMap {
    /// First global window of each provisional target (increasing).
    starts: Vec<u64>,
    final_id: Vec<Option<u32>>,
}

impl WindowMap {
    pub(crate) fn new(targets: &[crate::indexing::sketching::RawTarget], final_id: &[Option<u32>]) -> Self {
        Self { starts: targets.iter().map(|t| t.first_window).collect(), final_id: final_id.to_vec() }
    }

    /// The packed location of global window `w`, if its target is kept.
    #[inline]
    pub(crate) fn locate(&self, w: u32, layout: &LocationLayout) -> Option<u64> {
        let w = w as u64;
        let provisional = self.starts.partition_point(|&s| s <= w) - 1;
        let target = self.final_id[provisional]?;
        Some(layout.pack(target, (w - self.starts[provisional]) as u32))
    }
}

/// Condenses one shard from its bin.
pub(crate) fn condense_bin(
    bin: crate::indexing::sketching::Bin,
    windows: &WindowMap,
    lists: (&LocationLayout, &GlobalWindows),
    hash: bcht::KeyHash,
    cap: u32,
    clades: &Clades,
) -> Result<Condensed, ShardOverflow> {
    let mut located: Vec<(Feature, u64)> = Vec::with_capacity(bin.iter().map(Vec::len).sum());
    for chunk in bin {
        located.extend(chunk.iter().filter_map(|p| windows.locate(p.window, lists.0).map(|loc| (p.feature, loc))));
    }
    condense_all(located, lists, hash, cap, clades)
}

/// Condenses one shard from (feature, packed final location) pairs in any order; the clade
/// features' lists come back whole, unpacked.
pub fn condense_all(
    mut located: Vec<(Feature, u64)>,
    (layout, numbering): (&LocationLayout, &GlobalWindows),
    hash: bcht::KeyHash,
    cap: u32,
    clades: &Clades,
) -> Result<Condensed, ShardOverflow> {
    // Sorting by (feature, location) groups features and orders each list.
    located.sort_unstable();
    let mut shard = ShardAssembler::new(layout, hash);
    let mut clade_lists = CladeLists::default();
    let mut locs = Vec::new();
    for group in located.chunk_by(|a, b| a.0 == b.0) {
        let (feature, packed) = (group[0].0, group.iter().map(|&(_, loc)| loc));
        if group.len() <= cap as usize {
            locs.clear();
            locs.extend(packed);
            shard.add(feature, &locs);
        } else {
            shard.add_clade(feature, clades.lca(packed.clone(), layout), group.len());
            clade_lists.push(feature, packed.map(|l| layout.unpack(l)).map(|(t, w)| clade_lists::location(t, w)));
        }
    }
    drop(located);
    let (built, stats) = shard.finish()?;
    let data = stored_shard::store(&built, layout, numbering, hash)?;
    Ok(Condensed { data, stats, clade_lists })
}

#[cfg(test)]
mod tests {
    /// One shard.
    const H: crate::index::bcht::KeyHash = crate::index::bcht::KeyHash::new(0);
    use super::*;
    use crate::index::TargetInfo;
    use crate::taxonomy::Taxon;

    /// Final targets 0, 1, 2 of taxa 1000 and 1001 (strains of species 100) and 200 (a species of
    /// another genus).
    fn clades() -> Clades {
        let taxon = |taxid, parent, rank: &str| Taxon { taxid, parent, rank: rank.into(), name: String::new() };
        let taxa = [
            taxon(1, 1, "no rank"),
            taxon(10, 1, "genus"),
            taxon(20, 1, "genus"),
            taxon(100, 10, "species"),
            taxon(200, 20, "species"),
            taxon(1000, 100, "strain"),
            taxon(1001, 100, "strain"),
        ];
        let target = |name: &str, taxid| TargetInfo { name: name.into(), taxid, length: 1000, windows: 10 };
        Clades::new(&[target("a", 1000), target("b", 1001), target("c", 200)], &taxa).unwrap()
    }

    #[test]
    fn lists_are_sorted_capped_and_renumbered() {
        use crate::indexing::sketching::{Pair, RawTarget};
        let clades = clades();
        let layout = LocationLayout::uniform(4, 100, 254, clades.nodes());
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
        let numbering = GlobalWindows::uniform(3, 10, &layout);
        let p = |feature, target: u32, window: u32| Pair { feature, window: target * 10 + window };
        let bin = vec![
            vec![p(7, 0, 3), p(5, 2, 1), p(7, 2, 9)],
            vec![p(5, 1, 4), p(9, 0, 1), p(9, 2, 1), p(9, 3, 1), p(7, 3, 0)],
        ];
        let Condensed { data: shard, stats, clade_lists } =
            condense_bin(bin, &windows, (&layout, &numbering), H, 2, &clades).unwrap();
        assert_eq!((stats.features, stats.locations, stats.clade_features, stats.clade_locations), (3, 1, 2, 6));
        // The clade features keep every location, renumbered and sorted, unpacked, for updates.
        let mut expected = CladeLists::default();
        let l = clade_lists::location;
        expected.push(7, [l(0, 9), l(1, 3), l(2, 0)]);
        expected.push(9, [l(0, 1), l(1, 1), l(2, 1)]);
        assert_eq!(clade_lists, expected);
        let list = shard.lookup(5, 0, &layout, &numbering).unwrap();
        assert_eq!(list.iter().map(|l| layout.unpack(l)).collect::<Vec<_>>(), vec![(0, 1)]);
        // Over the cap: both features name their targets' LCA, the root (strains of species 100
        // and a species of another genus), and hold no locations.
        let root = clades.tree().node(1).unwrap();
        for f in [7, 9] {
            let list = shard.lookup(f, 0, &layout, &numbering).unwrap();
            assert_eq!((list.clade(), list.len()), (Some(root), 0));
        }
        // Two strains of one species: their species.
        let bin = vec![vec![p(7, 0, 3), p(7, 2, 9), p(7, 2, 5)]];
        let shard = condense_bin(bin, &windows, (&layout, &numbering), H, 2, &clades).unwrap().data;
        let list = shard.lookup(7, 0, &layout, &numbering).unwrap();
        assert_eq!(list.clade(), clades.tree().node(100));

        let bin = vec![vec![p(7, 0, 3), p(7, 2, 9), p(7, 3, 0)]];
        let shard = condense_bin(bin, &windows, (&layout, &numbering), H, 254, &clades).unwrap().data;
        let list = shard.lookup(7, 0, &layout, &numbering).unwrap();
        assert_eq!(list.iter().map(|l| layout.unpack(l)).collect::<Vec<_>>(), vec![(0, 9), (1, 3), (2, 0)]);
    }
}
