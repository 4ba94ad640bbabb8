//! `kmerdb inspect`: the index's taxa as `kraken2-inspect` shows a Kraken 2 database's, a Kraken
//! report whose counts are features instead of reads. A feature counts for the taxon its
//! locations name: the lowest common ancestor of its targets' taxa, or, for a clade feature (over
//! the location cap), the clade it is stored with. The clade column then says how many of the
//! index's features lie in each clade: a taxon with few is one that reads will rarely reach.

use crate::index::Index;
use crate::taxonomy::TaxId;
use std::collections::HashMap;

/// Per taxon, the index's features whose taxon it is (the report's "direct" column).
pub fn features_per_taxon(index: &Index) -> HashMap<TaxId, u64> {
    use rayon::prelude::*;
    let tree = index.taxonomy();
    let layout = *index.layout();
    let target_taxa: Vec<TaxId> = index.targets().iter().map(|t| t.taxid).collect();
    let nodes = tree.taxa().len();
    (0..index.shard_count())
        .into_par_iter()
        .map(|shard| {
            let mut direct: HashMap<TaxId, u64> = HashMap::new();
            for slot in index.shard_keys(shard).slots() {
                let list = index.list(shard, slot.list);
                let taxon = match list.clade() {
                    // A node past the tree comes only from a damaged index opened unverified.
                    Some(node) => ((node as usize) < nodes).then(|| tree.node_taxid(node)),
                    None => list
                        .iter()
                        .filter_map(|loc| target_taxa.get(layout.unpack(loc).0 as usize).copied())
                        .reduce(|a, b| tree.lca(a, b)),
                };
                if let Some(taxon) = taxon {
                    *direct.entry(taxon).or_default() += 1;
                }
            }
            direct
        })
        .reduce(HashMap::new, |mut a, b| {
            for (taxon, n) in b {
                *a.entry(taxon).or_default() += n;
            }
            a
        })
}

/// One taxon of the report, for `--json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaxonFeatures {
    pub taxid: TaxId,
    pub name: String,
    pub rank: String,
    /// Features in the taxon's clade, and the share of all the index's features they are.
    pub clade_features: u64,
    pub percent: f64,
    /// Features whose taxon is this one.
    pub features: u64,
}

/// The taxa with features in their clade, in the report's order (depth first, larger clades
/// first), for `--json`.
pub fn taxa_with_features(index: &Index, direct: &HashMap<TaxId, u64>) -> std::io::Result<Vec<TaxonFeatures>> {
    let tree = index.taxonomy();
    let mut text = Vec::new();
    crate::output::write_kreport(&mut text, tree, direct, 0, false)?;
    let text = String::from_utf8_lossy(&text);
    let total: u64 = direct.values().sum();
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(6, '\t').collect();
            let taxid: TaxId = f.get(4)?.parse().ok()?;
            let taxon = tree.get(taxid)?;
            let clade_features: u64 = f[1].parse().ok()?;
            Some(TaxonFeatures {
                taxid,
                name: taxon.name.clone(),
                rank: taxon.rank.clone(),
                clade_features,
                percent: 100.0 * clade_features as f64 / total.max(1) as f64,
                features: f[2].parse().ok()?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed index (two small genomes): every feature is counted once, under a taxon of the index's tree, and
    /// the clade of the root holds them all.
    #[test]
    fn every_feature_counts_once_for_a_taxon_of_the_tree() {
        let index = crate::index::test_index::open_fixed(&crate::index::test_index::seed(), crate::index::Verify::All)
            .expect("open");
        let direct = features_per_taxon(&index);
        let features: u64 = (0..index.shard_count()).map(|s| index.shard_keys(s).slots().count() as u64).sum();
        assert!(features > 0);
        assert_eq!(direct.values().sum::<u64>(), features);
        assert!(direct.keys().all(|&t| index.taxonomy().contains(t)));
        let taxa = taxa_with_features(&index, &direct).unwrap();
        assert_eq!(taxa[0].taxid, crate::taxonomy::ROOT);
        assert_eq!(taxa[0].clade_features, features);
        assert!((taxa[0].percent - 100.0).abs() < 1e-9);
    }
}
