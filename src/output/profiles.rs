//! More views of a sample's read counts, for the tools that read them:
//!
//! - [`write_cami`]: a CAMI bioboxes taxonomic profile (format 0.9.1), which OPAL and the CAMI
//!   challenges score: per standard rank, each taxon's share of the sample's reads in percent;
//! - [`write_krona`]: Krona's text input (`ktImportText`): reads assigned to each taxon, with its
//!   lineage of names, and the unclassified reads;
//! - [`write_mpa`]: the MetaPhlAn-style table of Kraken 2's `--use-mpa-style`, byte for byte: each
//!   taxon at a standard rank as its `d__…|p__…` path, with the reads in its clade.
//!
//! All three come from the same counts as the kreport, so they agree with it.

use crate::output::kreport::clade_counts;
use crate::taxonomy::{TaxId, TaxonTree};
use std::collections::HashMap;
use std::io::{self, Write};

/// The ranks CAMI profiles use, top down.
const CAMI_RANKS: [&str; 8] = ["superkingdom", "phylum", "class", "order", "family", "genus", "species", "strain"];
/// The ranks of MPA-style tables, with their prefixes, as Kraken 2 writes them (`rank_of` maps
/// "domain" to "superkingdom").
const MPA_RANKS: [(&str, &str); 8] = [
    ("superkingdom", "d"),
    ("kingdom", "k"),
    ("phylum", "p"),
    ("class", "c"),
    ("order", "o"),
    ("family", "f"),
    ("genus", "g"),
    ("species", "s"),
];

/// NCBI renamed "superkingdom" to "domain"; both count as the top rank.
fn rank_of(tree: &TaxonTree, taxid: TaxId) -> &str {
    match tree.get(taxid).map(|t| t.rank.as_str()) {
        Some("domain") => "superkingdom",
        Some(r) => r,
        None => "",
    }
}

/// Writes a CAMI profile of `direct` and `unclassified` reads for `sample`.
pub fn write_cami<W: Write + ?Sized>(
    w: &mut W,
    tree: &TaxonTree,
    direct: &HashMap<TaxId, u64>,
    unclassified: u64,
    sample: &str,
) -> io::Result<()> {
    let clades = clade_counts(tree, direct)?;
    let total = (direct.values().sum::<u64>() + unclassified).max(1) as f64;
    writeln!(w, "# Taxonomic Profiling Output")?;
    writeln!(w, "@SampleID:{sample}")?;
    writeln!(w, "@Version:0.9.1")?;
    writeln!(w, "@Ranks:{}", CAMI_RANKS.join("|"))?;
    writeln!(w, "@TaxonomyID:ncbi-taxonomy")?;
    writeln!(w, "@__program__:kmerdb {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(w, "@@TAXID\tRANK\tTAXPATH\tTAXPATHSN\tPERCENTAGE")?;
    for rank in CAMI_RANKS {
        let mut rows: Vec<(TaxId, u64)> =
            clades.iter().filter(|&(&t, _)| rank_of(tree, t) == rank).map(|(&t, &n)| (t, n)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (taxid, reads) in rows {
            let path: Vec<TaxId> =
                tree.lineage(taxid).into_iter().filter(|&t| CAMI_RANKS.contains(&rank_of(tree, t))).collect();
            let ids: Vec<String> = path.iter().map(|t| t.to_string()).collect();
            let names: Vec<&str> = path.iter().map(|&t| tree.get(t).map_or("", |x| x.name.as_str())).collect();
            writeln!(
                w,
                "{taxid}\t{rank}\t{}\t{}\t{:.6}",
                ids.join("|"),
                names.join("|"),
                100.0 * reads as f64 / total
            )?;
        }
    }
    Ok(())
}

/// Writes Krona's text input: per taxon with reads assigned to it, the count and its lineage of
/// names (the root left out), then the unclassified reads.
pub fn write_krona<W: Write + ?Sized>(
    w: &mut W,
    tree: &TaxonTree,
    direct: &HashMap<TaxId, u64>,
    unclassified: u64,
) -> io::Result<()> {
    clade_counts(tree, direct)?; // checks every taxid
    let mut rows: Vec<(TaxId, u64)> = direct.iter().filter(|&(_, &n)| n > 0).map(|(&t, &n)| (t, n)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (taxid, reads) in rows {
        let names: Vec<&str> =
            tree.lineage(taxid).iter().skip(1).map(|&t| tree.get(t).map_or("", |x| x.name.as_str())).collect();
        write!(w, "{reads}")?;
        for n in &names {
            write!(w, "\t{n}")?;
        }
        if names.is_empty() {
            write!(w, "\troot")?;
        }
        writeln!(w)?;
    }
    if unclassified > 0 {
        writeln!(w, "{unclassified}\tUnclassified")?;
    }
    Ok(())
}

/// Writes the MPA-style table of Kraken 2's `--use-mpa-style`: the kreport's walk (depth first,
/// children by descending clade, ties by taxid), one line for each taxon at a rank of
/// `MPA_RANKS` with reads in its clade: its path of `x__Name` parts (names as they are, spaces
/// included) and the clade's reads. Checked against Kraken 2.1.2's own output of the same counts
/// (`tests/golden/kraken2-mock.mpa`, test `mpa_table_equals_kraken2_use_mpa_style`).
pub fn write_mpa<W: Write + ?Sized>(w: &mut W, tree: &TaxonTree, direct: &HashMap<TaxId, u64>) -> io::Result<()> {
    let clades = clade_counts(tree, direct)?;
    if !clades.contains_key(&crate::taxonomy::ROOT) {
        return Ok(());
    }
    // (taxid, depth of the path when it was pushed): a stack, children in reverse order.
    let mut stack = vec![(crate::taxonomy::ROOT, 0usize)];
    let mut path: Vec<String> = Vec::new();
    let mut kids: Vec<(TaxId, u64)> = Vec::new();
    while let Some((taxid, depth)) = stack.pop() {
        path.truncate(depth);
        if let Some((_, prefix)) = MPA_RANKS.iter().find(|(r, _)| *r == rank_of(tree, taxid)) {
            let name = tree.get(taxid).map_or("", |t| t.name.as_str());
            path.push(format!("{prefix}__{name}"));
            writeln!(w, "{}\t{}", path.join("|"), clades[&taxid])?;
        }
        kids.clear();
        kids.extend(tree.children(taxid).iter().filter_map(|&c| clades.get(&c).map(|&n| (c, n))));
        kids.sort_unstable_by_key(|&(c, n)| (std::cmp::Reverse(n), c));
        stack.extend(kids.iter().rev().map(|&(c, _)| (c, path.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::Taxon;

    fn tree() -> TaxonTree {
        let t = |taxid, parent, rank: &str, name: &str| Taxon { taxid, parent, rank: rank.into(), name: name.into() };
        TaxonTree::new(vec![
            t(1, 1, "no rank", "root"),
            t(2, 1, "domain", "Bacteria"),
            t(1224, 2, "phylum", "Pseudomonadota"),
            t(561, 1224, "genus", "Escherichia"),
            t(562, 561, "species", "Escherichia coli"),
            t(83333, 562, "strain", "Escherichia coli K-12"),
        ])
        .unwrap()
    }

    fn counts() -> HashMap<TaxId, u64> {
        HashMap::from([(562, 6), (83333, 2), (561, 1), (1, 1)])
    }

    #[test]
    fn cami_profile() {
        let mut out = Vec::new();
        write_cami(&mut out, &tree(), &counts(), 10, "s1").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("# Taxonomic Profiling Output\n@SampleID:s1\n@Version:0.9.1\n"), "{text}");
        // 9 of 20 reads are in the genus, 8 in the species, 2 in the strain.
        assert!(text.contains("\n561\tgenus\t2|1224|561\tBacteria|Pseudomonadota|Escherichia\t45.000000\n"), "{text}");
        assert!(text.contains("\n562\tspecies\t2|1224|561|562\t"), "{text}");
        assert!(
            text.contains("\t40.000000\n") && text.contains("\n83333\tstrain\t") && text.contains("\t10.000000\n"),
            "{text}"
        );
        assert!(text.contains("\n2\tsuperkingdom\t2\tBacteria\t45.000000\n"), "{text}");
    }

    #[test]
    fn krona_text() {
        let mut out = Vec::new();
        write_krona(&mut out, &tree(), &counts(), 10).unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected = [
            "6\tBacteria\tPseudomonadota\tEscherichia\tEscherichia coli",
            "2\tBacteria\tPseudomonadota\tEscherichia\tEscherichia coli\tEscherichia coli K-12",
            "1\troot",
            "1\tBacteria\tPseudomonadota\tEscherichia",
            "10\tUnclassified",
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn mpa_table() {
        let mut out = Vec::new();
        write_mpa(&mut out, &tree(), &counts()).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "d__Bacteria\t9\nd__Bacteria|p__Pseudomonadota\t9\nd__Bacteria|p__Pseudomonadota|g__Escherichia\t9\n\
             d__Bacteria|p__Pseudomonadota|g__Escherichia|s__Escherichia coli\t8\n"
        );
    }

    #[test]
    fn unknown_taxids_are_errors() {
        let bad = HashMap::from([(999, 1)]);
        assert!(write_cami(&mut Vec::new(), &tree(), &bad, 0, "s").is_err());
        assert!(write_krona(&mut Vec::new(), &tree(), &bad, 0).is_err());
        assert!(write_mpa(&mut Vec::new(), &tree(), &bad).is_err());
    }
}
