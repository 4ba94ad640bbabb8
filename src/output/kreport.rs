//! The Kraken report ("kreport"), as Kraken 2 writes it without `--report-minimizer-data`.
//!
//! Six tab-separated columns: percentage of all reads in the clade (`%6.2f`), reads in the clade,
//! reads assigned directly, rank code ([`TaxonTree::kreport_rank_code`]), taxid, and the scientific
//! name indented two spaces per level below the root:
//!
//! ```text
//!  16.67  3   3  U   0       unclassified
//!  83.33  15  1  R   1       root
//!  77.78  14  0  R1  131567    cellular organisms
//! ```
//!
//! (columns separated by single tabs, shown here aligned; the name's indentation is spaces).
//!
//! Order, as Kraken 2: the `unclassified` line first, then a depth-first walk from the root with
//! children by descending clade count, omitting taxa with no reads in their clade. Where kmerdb
//! differs from Kraken 2:
//! - ties between siblings are broken by ascending taxid, so the report is deterministic;
//! - with no reads at all, Kraken 2 writes an empty file, which MultiQC does not recognise as a
//!   report; kmerdb writes the `unclassified` and `root` lines with zero counts and `0.00`
//!   (where Kraken 2 would divide by zero), so one of the first two lines always matches MultiQC's
//!   detection pattern and Bracken still finds the root.
//!
//! Otherwise the `unclassified` line appears only when some read is unclassified, as in Kraken 2:
//! the first line is then `root`, which MultiQC also accepts.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::io::{self, Write};

use super::unknown_taxid;
use crate::taxonomy::{ROOT, TaxId, TaxonTree, UNCLASSIFIED};

/// Reads in each clade: every taxon's direct count plus those of all its descendants.
///
/// Holds only taxa with at least one read in their clade. A taxid in `direct` that is not in
/// `tree` is an error of kind `InvalidData` naming it (a classifier bug, never to be dropped).
pub fn clade_counts(tree: &TaxonTree, direct: &HashMap<TaxId, u64>) -> io::Result<HashMap<TaxId, u64>> {
    let mut clades: HashMap<TaxId, u64> = HashMap::with_capacity(direct.len() * 4);
    for (&taxid, &count) in direct {
        if !tree.contains(taxid) {
            return Err(unknown_taxid(taxid, "read counts"));
        }
        if count == 0 {
            continue;
        }
        let mut t = Some(taxid);
        while let Some(id) = t {
            *clades.entry(id).or_default() += count;
            t = tree.parent(id);
        }
    }
    Ok(clades)
}

/// Writes the Kraken report for `direct` (reads assigned to each taxon) and `unclassified`
/// reads. With `zero_counts` (Kraken 2's `--report-zero-counts`) every taxon of the tree is
/// listed, those without reads after their siblings with reads, and the `unclassified` line always.
///
/// Percentages are of all reads, classified and unclassified. Fails with `InvalidData` if
/// `direct` names a taxid that is not in `tree`, before writing anything.
pub fn write_kreport<W: Write + ?Sized>(
    w: &mut W,
    tree: &TaxonTree,
    direct: &HashMap<TaxId, u64>,
    unclassified: u64,
    zero_counts: bool,
) -> io::Result<()> {
    let clades = clade_counts(tree, direct)?;
    let classified = clades.get(&ROOT).copied().unwrap_or(0);
    let total = classified + unclassified;
    let line = |w: &mut W, clade: u64, own: u64, rank: &str, taxid: TaxId, depth: u32, name: &str| {
        let pct = if total == 0 { 0.0 } else { 100.0 * clade as f64 / total as f64 };
        let indent = depth as usize * 2;
        writeln!(w, "{pct:6.2}\t{clade}\t{own}\t{rank}\t{taxid}\t{:indent$}{name}", "")
    };

    if unclassified > 0 || total == 0 || zero_counts {
        line(w, unclassified, unclassified, "U", UNCLASSIFIED, 0, "unclassified")?;
    }
    if total == 0 && !zero_counts {
        let root = tree.get(ROOT).expect("a TaxonTree always holds the root");
        return line(w, 0, 0, "R", ROOT, 0, &root.name);
    }

    // Depth-first with an explicit stack (synthetic trees can be arbitrarily deep); children are
    // pushed in reverse of the order they are to be written.
    let mut stack = if classified > 0 || zero_counts { vec![ROOT] } else { Vec::new() };
    let mut kids: Vec<(TaxId, u64)> = Vec::new();
    while let Some(taxid) = stack.pop() {
        let taxon = tree.get(taxid).expect("walk stays inside the tree");
        let depth = tree.depth(taxid).expect("walk stays inside the tree");
        let own = direct.get(&taxid).copied().unwrap_or(0);
        let clade = clades.get(&taxid).copied().unwrap_or(0);
        line(w, clade, own, &tree.kreport_rank_code(taxid), taxid, depth, &taxon.name)?;

        kids.clear();
        let counted = |&c: &TaxId| clades.get(&c).copied().or(zero_counts.then_some(0)).map(|n| (c, n));
        kids.extend(tree.children(taxid).iter().filter_map(counted));
        kids.sort_unstable_by_key(|&(c, n)| (Reverse(n), c));
        stack.extend(kids.iter().rev().map(|&(c, _)| c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::test_tree::tree;

    fn report(direct: &[(TaxId, u64)], unclassified: u64) -> String {
        let direct: HashMap<TaxId, u64> = direct.iter().copied().collect();
        let mut out = Vec::new();
        write_kreport(&mut out, &tree(), &direct, unclassified, false).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// MultiQC's detection pattern from REFERENCE.md §4, checked by hand:
    /// `^\s{0,2}(\d{1,3}\.\d{1,2})\t(\d+)\t(\d+)\t((\d+)\t(\d+)\t)?([URDKPCOFGS-]\d{0,2})\t(\d+)(\s+)[root|unclassified]`
    /// (the last part is a character class: the name must start with one of those letters).
    fn multiqc_matches(line: &str) -> bool {
        let digits =
            |s: &str, min: usize, max: usize| (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
        let pct = line.trim_start_matches(' ');
        if line.len() - pct.len() > 2 {
            return false;
        }
        let f: Vec<&str> = pct.splitn(6, '\t').collect();
        let [pct, clade, own, rank, taxid, name] = f[..] else { return false };
        let pct_ok = pct.split_once('.').is_some_and(|(a, b)| digits(a, 1, 3) && digits(b, 1, 2));
        let rank_ok = rank.chars().next().is_some_and(|c| "URDKPCOFGS-".contains(c)) && digits(&rank[1..], 0, 2);
        // `(\s+)` after the taxid: the tab, then any indentation.
        let name = name.trim_start();
        let name_ok = name.chars().next().is_some_and(|c| "root|unclassified".contains(c));
        pct_ok && digits(clade, 1, 20) && digits(own, 1, 20) && rank_ok && digits(taxid, 1, 20) && name_ok
    }

    fn multiqc_recognises(report: &str) -> bool {
        report.lines().take(2).any(multiqc_matches)
    }

    /// `--report-zero-counts`: every taxon of the tree, each once, the ones with reads as in the
    /// plain report and in its order, the others after their siblings with reads; and the
    /// unclassified line even with no unclassified reads.
    #[test]
    fn zero_counts_list_every_taxon() {
        let direct: HashMap<TaxId, u64> = [(562, 5), (623, 3)].into_iter().collect();
        let (mut plain, mut all) = (Vec::new(), Vec::new());
        write_kreport(&mut plain, &tree(), &direct, 0, false).unwrap();
        write_kreport(&mut all, &tree(), &direct, 0, true).unwrap();
        let (plain, all) = (String::from_utf8(plain).unwrap(), String::from_utf8(all).unwrap());
        let taxid = |l: &str| l.split('\t').nth(4).unwrap().parse::<u32>().unwrap();
        let listed: Vec<u32> = all.lines().map(taxid).collect();
        assert_eq!(listed.len(), tree().taxa().len() + 1, "{all}");
        assert!(all.lines().next().unwrap().ends_with("\tunclassified"), "{all}");
        let with_reads: Vec<&str> = all.lines().skip(1).filter(|l| l.split('\t').nth(1) != Some("0")).collect();
        assert_eq!(with_reads, plain.lines().collect::<Vec<_>>());
        let viruses = all.lines().position(|l| taxid(l) == 10239).unwrap();
        let bacteria = all.lines().position(|l| taxid(l) == 131567).unwrap();
        assert!(bacteria < viruses, "the clade without reads comes after its sibling with reads:\n{all}");
    }

    #[test]
    fn small_report_exact_bytes() {
        let got = report(&[(1, 1), (561, 1), (562, 5), (83333, 2), (28901, 3), (623, 3), (10239, 0)], 3);
        let expected = concat!(
            " 16.67\t3\t3\tU\t0\tunclassified\n",
            " 83.33\t15\t1\tR\t1\troot\n",
            " 77.78\t14\t0\tR1\t131567\t  cellular organisms\n",
            " 77.78\t14\t0\tD\t2\t    Bacteria\n",
            " 77.78\t14\t0\tP\t1224\t      Pseudomonadota\n",
            " 77.78\t14\t0\tC\t1236\t        Gammaproteobacteria\n",
            " 77.78\t14\t0\tO\t91347\t          Enterobacterales\n",
            " 77.78\t14\t0\tF\t543\t            Enterobacteriaceae\n",
            " 44.44\t8\t1\tG\t561\t              Escherichia\n",
            " 38.89\t7\t5\tS\t562\t                Escherichia coli\n",
            " 11.11\t2\t2\tS1\t83333\t                  Escherichia coli K-12\n",
            // Salmonella and Shigella tie at 3: ascending taxid.
            " 16.67\t3\t0\tG\t590\t              Salmonella\n",
            " 16.67\t3\t3\tS\t28901\t                Salmonella enterica\n",
            " 16.67\t3\t0\tG\t620\t              Shigella\n",
            " 16.67\t3\t3\tS\t623\t                Shigella flexneri\n",
        );
        assert_eq!(got, expected);
        assert!(multiqc_recognises(&got));
    }

    #[test]
    fn children_by_descending_clade_count() {
        let got = report(&[(28901, 1), (623, 5), (562, 3)], 0);
        let genera: Vec<&str> =
            got.lines().filter(|l| l.split('\t').nth(3) == Some("G")).map(|l| l.split('\t').nth(4).unwrap()).collect();
        assert_eq!(genera, ["620", "561", "590"]);
    }

    #[test]
    fn all_classified_starts_at_root() {
        // As Kraken 2: no `unclassified` line when nothing is unclassified.
        let got = report(&[(562, 4)], 0);
        assert!(got.starts_with("100.00\t4\t0\tR\t1\troot\n"), "{got}");
        assert!(!got.contains("unclassified"));
        assert!(multiqc_recognises(&got));
    }

    #[test]
    fn all_unclassified_is_one_line() {
        let got = report(&[], 7);
        assert_eq!(got, "100.00\t7\t7\tU\t0\tunclassified\n");
        assert!(multiqc_recognises(&got));
    }

    #[test]
    fn zero_reads_still_recognised() {
        let got = report(&[], 0);
        assert_eq!(got, "  0.00\t0\t0\tU\t0\tunclassified\n  0.00\t0\t0\tR\t1\troot\n");
        assert!(multiqc_recognises(&got));
        // Zero counts in the map are no reads.
        assert_eq!(report(&[(562, 0)], 0), got);
    }

    #[test]
    fn multiqc_check_rejects_non_reports() {
        assert!(!multiqc_matches("taxid\tname\trank\treads\tfraction"));
        assert!(!multiqc_matches(" 77.78\t14\t0\tD\t2\t    Bacteria"));
        assert!(!multiqc_matches("   1.00\t1\t1\tU\t0\tunclassified"));
        assert!(multiqc_matches("  0.00\t0\t0\tU\t0\tunclassified"));
    }

    #[test]
    fn percentages_round_like_printf() {
        // 1/160 = 0.625% exactly: C's %6.2f rounds the tie to even, and so does Rust.
        let got = report(&[(562, 1)], 159);
        assert!(got.lines().any(|l| l.starts_with("  0.62\t1\t0\tR\t1\troot")), "{got}");
    }

    #[test]
    fn unknown_taxid_is_invalid_data() {
        let direct: HashMap<TaxId, u64> = [(562, 1), (4242, 2)].into_iter().collect();
        let mut out = Vec::new();
        let err = write_kreport(&mut out, &tree(), &direct, 0, false).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("4242"), "{err}");
        assert!(out.is_empty(), "nothing written before the check");
        let direct: HashMap<TaxId, u64> = [(0, 1)].into_iter().collect();
        assert_eq!(clade_counts(&tree(), &direct).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn clade_counts_sum_up_the_lineage() {
        let direct: HashMap<TaxId, u64> = [(83333, 2), (562, 5), (28901, 3), (10239, 0)].into_iter().collect();
        let clades = clade_counts(&tree(), &direct).unwrap();
        assert_eq!(clades[&83333], 2);
        assert_eq!(clades[&562], 7);
        assert_eq!(clades[&543], 10);
        assert_eq!(clades[&1], 10);
        assert!(!clades.contains_key(&10239));
        assert!(!clades.contains_key(&620));
    }
}
