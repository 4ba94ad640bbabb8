//! A plain abundance table: reads per taxon, as a TSV for spreadsheets and scripts.
//!
//! ```text
//! taxid  name                   rank     reads  fraction
//! 0      unclassified           -        3      0.166667
//! 1      unresolved at species  -        2      0.111111
//! 562    Escherichia coli       species  7      0.388889
//! ```
//!
//! (columns separated by single tabs, shown here aligned).
//!
//! Conventions:
//! - `fraction` is of *all* reads, classified and unclassified, written with six decimals
//!   (`0.000000` when there are no reads), so the column sums to 1 over the whole table;
//! - the first data row is always `unclassified` (taxid 0, rank `-`), even with no unclassified
//!   reads;
//! - without a rank, each taxon's row holds the reads assigned to it directly (a read counts once,
//!   at its call), with the taxon's own rank;
//! - with a rank (say `species`), each row is a taxon at that rank holding every read assigned to
//!   it or below it (strains roll up into their species). Reads that are classified but have no
//!   ancestor at that rank (assigned above it, like a genus-level call, or on a lineage without
//!   that rank) are counted in the second row, `unresolved at species`, given the root's taxid 1
//!   (they are known only to lie somewhere in the tree) and rank `-`; it is written even when
//!   zero. `domain` and `superkingdom` name the same rank. This is the split Bracken users expect
//!   to see (reads at the rank versus reads above it), without Bracken's redistribution;
//! - the remaining rows are sorted by reads, descending, then taxid, ascending; taxa with no
//!   reads are left out.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::io::{self, Write};

use super::unknown_taxid;
use crate::taxonomy::{ROOT, TaxId, TaxonTree};

/// Writes the abundance table for `direct` (reads assigned to each taxon) and `unclassified`
/// reads, per taxon or summed to `rank`; see the module documentation for the conventions.
///
/// A taxid in `direct` that is not in `tree` is an error of kind `InvalidData`, found before
/// anything is written.
pub fn write_abundance<W: Write + ?Sized>(
    w: &mut W,
    tree: &TaxonTree,
    direct: &HashMap<TaxId, u64>,
    unclassified: u64,
    rank: Option<&str>,
) -> io::Result<()> {
    let mut per_taxon: HashMap<TaxId, u64> = HashMap::with_capacity(direct.len());
    let mut unresolved = 0u64;
    let mut classified = 0u64;
    for (&taxid, &count) in direct {
        if !tree.contains(taxid) {
            return Err(unknown_taxid(taxid, "read counts"));
        }
        if count == 0 {
            continue;
        }
        classified += count;
        match rank {
            None => *per_taxon.entry(taxid).or_default() += count,
            Some(rank) => match tree.ancestor_at_rank(taxid, rank) {
                Some(at_rank) => *per_taxon.entry(at_rank).or_default() += count,
                None => unresolved += count,
            },
        }
    }
    let total = classified + unclassified;
    let fraction = |reads: u64| if total == 0 { 0.0 } else { reads as f64 / total as f64 };

    writeln!(w, "taxid\tname\trank\treads\tfraction")?;
    writeln!(w, "0\tunclassified\t-\t{unclassified}\t{:.6}", fraction(unclassified))?;
    if let Some(rank) = rank {
        writeln!(w, "{ROOT}\tunresolved at {rank}\t-\t{unresolved}\t{:.6}", fraction(unresolved))?;
    }
    let mut rows: Vec<(TaxId, u64)> = per_taxon.into_iter().collect();
    rows.sort_unstable_by_key(|&(taxid, reads)| (Reverse(reads), taxid));
    for (taxid, reads) in rows {
        let taxon = tree.get(taxid).expect("taxid checked against the tree");
        writeln!(w, "{taxid}\t{}\t{}\t{reads}\t{:.6}", taxon.name, taxon.rank, fraction(reads))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::test_tree::tree;

    fn table(direct: &[(TaxId, u64)], unclassified: u64, rank: Option<&str>) -> String {
        let direct: HashMap<TaxId, u64> = direct.iter().copied().collect();
        let mut out = Vec::new();
        write_abundance(&mut out, &tree(), &direct, unclassified, rank).unwrap();
        String::from_utf8(out).unwrap()
    }

    const COUNTS: [(TaxId, u64); 7] = [(1, 1), (561, 1), (562, 5), (83333, 2), (28901, 3), (623, 3), (10239, 0)];

    #[test]
    fn per_taxon_direct_counts() {
        let expected = concat!(
            "taxid\tname\trank\treads\tfraction\n",
            "0\tunclassified\t-\t3\t0.166667\n",
            "562\tEscherichia coli\tspecies\t5\t0.277778\n",
            "623\tShigella flexneri\tspecies\t3\t0.166667\n",
            "28901\tSalmonella enterica\tspecies\t3\t0.166667\n",
            "83333\tEscherichia coli K-12\tstrain\t2\t0.111111\n",
            "1\troot\tno rank\t1\t0.055556\n",
            "561\tEscherichia\tgenus\t1\t0.055556\n",
        );
        assert_eq!(table(&COUNTS, 3, None), expected);
    }

    #[test]
    fn summed_to_species() {
        let expected = concat!(
            "taxid\tname\trank\treads\tfraction\n",
            "0\tunclassified\t-\t3\t0.166667\n",
            "1\tunresolved at species\t-\t2\t0.111111\n",
            "562\tEscherichia coli\tspecies\t7\t0.388889\n",
            "623\tShigella flexneri\tspecies\t3\t0.166667\n",
            "28901\tSalmonella enterica\tspecies\t3\t0.166667\n",
        );
        assert_eq!(table(&COUNTS, 3, Some("species")), expected);
    }

    #[test]
    fn summed_to_genus_and_domain() {
        let got = table(&COUNTS, 0, Some("genus"));
        assert!(got.contains("\n1\tunresolved at genus\t-\t1\t0.066667\n"), "{got}");
        assert!(got.contains("\n561\tEscherichia\tgenus\t8\t0.533333\n"), "{got}");
        // The tree says superkingdom; asking for domain finds it.
        let got = table(&COUNTS, 0, Some("domain"));
        assert!(
            got.ends_with("1\tunresolved at domain\t-\t1\t0.066667\n2\tBacteria\tsuperkingdom\t14\t0.933333\n"),
            "{got}"
        );
    }

    #[test]
    fn no_reads() {
        assert_eq!(table(&[], 0, None), "taxid\tname\trank\treads\tfraction\n0\tunclassified\t-\t0\t0.000000\n");
        assert_eq!(
            table(&[], 0, Some("species")),
            "taxid\tname\trank\treads\tfraction\n0\tunclassified\t-\t0\t0.000000\n1\tunresolved at species\t-\t0\t0.000000\n"
        );
    }

    #[test]
    fn unknown_taxid_is_invalid_data() {
        let direct: HashMap<TaxId, u64> = [(31337, 1)].into_iter().collect();
        let mut out = Vec::new();
        let err = write_abundance(&mut out, &tree(), &direct, 0, Some("species")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("31337"), "{err}");
        assert!(out.is_empty());
    }
}
