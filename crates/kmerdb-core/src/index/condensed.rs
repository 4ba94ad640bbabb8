//! A shard laid out by a build's condense step, on the CPU (`indexing::condense`) or a GPU
//! (`gpu::condense`): its stored bytes, its counts and its clade features' lists, and what names a
//! clade feature's clade. Below both builders, so that neither imports the other's types.

use crate::index::TargetInfo;
use crate::index::bcht;
use crate::index::clade_lists::CladeLists;
use crate::index::locations::{ListWriter, LocationLayout, ShardOverflow};
use crate::index::stored_shard::StoredShard;
use crate::index::write::ShardData;
use crate::sketch::Feature;
use crate::taxonomy::{Taxon, TaxonTree, TaxonomyError};

/// What names a clade feature's clade: each final target's node in the index's taxonomy tree
/// (nodes are the taxa in taxid order, as the index stores them), and the tree.
#[derive(Debug, Clone)]
pub struct Clades {
    tree: TaxonTree,
    target_nodes: Vec<u32>,
}

impl Clades {
    /// For an index of `targets` (numbered) and `taxa` (its pruned taxonomy).
    pub fn new(targets: &[TargetInfo], taxa: &[Taxon]) -> Result<Self, TaxonomyError> {
        let tree = TaxonTree::new(taxa.to_vec())?;
        let target_nodes = targets
            .iter()
            .map(|t| tree.node(t.taxid).ok_or(TaxonomyError::UnknownTaxid { taxid: t.taxid }))
            .collect::<Result<_, _>>()?;
        Ok(Self { tree, target_nodes })
    }

    /// The LCA node of the targets of packed `locations` (sorted: each target's run counts once).
    pub fn lca(&self, locations: impl IntoIterator<Item = u64>, layout: &LocationLayout) -> u32 {
        let mut node: Option<u32> = None;
        let mut last = None;
        for l in locations {
            let target = layout.unpack(l).0;
            if last != Some(target) {
                last = Some(target);
                let n = self.target_nodes[target as usize];
                node = Some(node.map_or(n, |m| self.tree.lca_node(m, n)));
            }
        }
        node.expect("a clade feature has locations")
    }

    /// Each final target's tree node.
    pub fn target_nodes(&self) -> &[u32] {
        &self.target_nodes
    }

    pub fn tree(&self) -> &TaxonTree {
        &self.tree
    }

    /// Nodes of the tree (what a clade entry must be able to number).
    pub fn nodes(&self) -> u64 {
        self.tree.taxa().len() as u64
    }
}

/// What condensing a shard counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShardStats {
    pub features: u64,
    pub locations: u64,
    pub clade_features: u64,
    pub clade_locations: u64,
}

impl std::ops::AddAssign for ShardStats {
    fn add_assign(&mut self, o: Self) {
        self.features += o.features;
        self.locations += o.locations;
        self.clade_features += o.clade_features;
        self.clade_locations += o.clade_locations;
    }
}

/// One shard laid out: its bytes as stored, its counts and its clade features' lists, whole.
pub struct Condensed {
    pub data: StoredShard,
    pub stats: ShardStats,
    pub clade_lists: CladeLists,
}

/// Lays out one shard from its features in ascending order, each with its sorted locations: the
/// CPU build's last step, and the reference the GPU condense (`gpu::condense`) matches byte for byte.
///
/// Lists are laid out in the key index's slot order (not key order), so that the GPU can write them
/// as soon as the keys are placed, without sorting the keys (see [`finish`](Self::finish)).
pub struct ShardAssembler {
    layout: LocationLayout,
    hash: bcht::KeyHash,
    keys: Vec<Feature>,
    /// Where each key's locations start in `locs` (one more entry than `keys`).
    starts: Vec<usize>,
    locs: Vec<u64>,
    /// Each key's clade node, [`NOT_A_CLADE`] for a feature with a list.
    clades: Vec<u32>,
    stats: ShardStats,
}

/// [`ShardAssembler`]'s mark of a key with a list.
const NOT_A_CLADE: u32 = u32::MAX;

impl ShardAssembler {
    pub fn new(layout: &LocationLayout, hash: bcht::KeyHash) -> Self {
        Self {
            layout: *layout,
            hash,
            keys: Vec::new(),
            starts: vec![0],
            locs: Vec::new(),
            clades: Vec::new(),
            stats: ShardStats::default(),
        }
    }

    /// Adds a feature, greater than the ones before, with its sorted, packed locations.
    pub fn add(&mut self, feature: Feature, locs: &[u64]) {
        debug_assert!(self.keys.last().is_none_or(|&k| k < feature));
        self.keys.push(feature);
        self.locs.extend_from_slice(locs);
        self.starts.push(self.locs.len());
        self.clades.push(NOT_A_CLADE);
        self.stats.features += 1;
        self.stats.locations += locs.len() as u64;
    }

    /// Adds a clade feature, greater than the ones before, whose `locations` locations' targets
    /// have their LCA at tree node `node`.
    pub fn add_clade(&mut self, feature: Feature, node: u32, locations: usize) {
        debug_assert!(self.keys.last().is_none_or(|&k| k < feature));
        self.keys.push(feature);
        self.starts.push(self.locs.len());
        self.clades.push(node);
        self.stats.features += 1;
        self.stats.clade_features += 1;
        self.stats.clade_locations += locations as u64;
    }

    /// Places the keys (`bcht`'s rounds, then its walk for the keys left over) and writes the
    /// lists: first those of the keys the rounds placed, in slot order, then those of the leftover
    /// keys in key order. The walk moves whole slots, values included, so the streams do not depend
    /// on it, and the GPU can write them before the host walks (see `gpu::condense`).
    pub fn finish(self) -> Result<(ShardData, ShardStats), ShardOverflow> {
        let mut n_buckets = bcht::initial_buckets(self.keys.len());
        loop {
            let (mut slots, mut left) = bcht::place_rounds(&self.keys, n_buckets, self.hash);
            let mut lists = ListWriter::new(self.layout);
            for slot in slots.iter_mut().chain(left.iter_mut()).filter(|s| s.key != bcht::EMPTY_KEY) {
                let i = slot.value as usize;
                slot.value = match self.clades[i] {
                    NOT_A_CLADE => lists.add(&self.locs[self.starts[i]..self.starts[i + 1]])?,
                    node => lists.add_clade(node)?,
                };
            }
            if bcht::place_stragglers(&mut slots, &left, self.hash) {
                return Ok((ShardData { slots, words: lists.finish() }, self.stats));
            }
            n_buckets = bcht::grown_buckets(n_buckets);
        }
    }
}
