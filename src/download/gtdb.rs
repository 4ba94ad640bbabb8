//! GTDB's taxonomy as a taxonomy kmerdb builds with: its `ar53_taxonomy.tsv.gz` and
//! `bac120_taxonomy.tsv.gz` (each genome's accession, `RS_GCF_...` or `GB_GCA_...`, and its
//! lineage `d__Bacteria;p__...;s__Escherichia coli`) written as an NCBI-format dump, so that
//! `build --taxonomy`, the reports and every tool that reads them take it as they take NCBI's:
//!
//! ```text
//! nodes.dmp, names.dmp   GTDB's taxa with ranks domain, phylum, class, order, family, genus, species
//! accession2taxid.tsv    each genome's accession (without RS_/GB_) and its species' taxid
//! ```
//!
//! GTDB has no taxids. Each taxon's is made from its rank and name (a hash, moved up past any
//! taxid a name sorted before it took, over the names of every file together, whatever order the
//! files come in), so that a taxon keeps its taxid across GTDB releases that keep its name (and
//! the names around it: a collision, rare among a release's ~10^5 names in 2^31, moves one),
//! and an index built with one release can be updated with the next's.

use super::DownloadError;
use crate::taxonomy::TaxId;
use std::collections::{BTreeMap, HashSet};

use std::path::Path;

/// GTDB's latest release; `--mirror` replaces it.
pub const GTDB: &str = "https://data.gtdb.ecogenomic.org/releases/latest";

/// The release's taxonomy files (archaea, bacteria).
pub const FILES: [&str; 2] = ["ar53_taxonomy.tsv.gz", "bac120_taxonomy.tsv.gz"];

/// GTDB's rank prefixes and the ranks they are written as.
const RANKS: [(&str, &str); 7] = [
    ("d__", "domain"),
    ("p__", "phylum"),
    ("c__", "class"),
    ("o__", "order"),
    ("f__", "family"),
    ("g__", "genus"),
    ("s__", "species"),
];

/// One GTDB taxon, keyed by its prefixed name (`g__Escherichia`): GTDB names are unique within
/// a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GtdbTaxon {
    pub taxid: TaxId,
    pub parent: TaxId,
    pub rank: &'static str,
    pub name: String,
}

/// GTDB's taxa and genomes, as read: each prefixed name's parent and rank, each genome's species.
/// Taxids are given to the names of every file together ([`GtdbTaxonomy::resolve`]), so that they do
/// not depend on the order the files were added in.
#[derive(Debug, Default)]
pub struct GtdbTaxonomy {
    /// By prefixed name: its parent's prefixed name (none for a domain) and its rank.
    parents: BTreeMap<String, (Option<String>, &'static str)>,
    /// Each genome's accession (without RS_/GB_) and its species' prefixed name.
    species: BTreeMap<String, String>,
}

/// [`GtdbTaxonomy`] with its taxids: its taxa by prefixed name and its genomes' species taxids.
pub type Resolved = (BTreeMap<String, GtdbTaxon>, BTreeMap<String, TaxId>);

impl GtdbTaxonomy {
    /// Reads the lines of one taxonomy file (`text`, from `url`) and adds them. A lineage must
    /// have GTDB's seven ranks in order, and a name the same parent wherever it appears.
    pub fn add(&mut self, text: &str, url: &str) -> Result<(), DownloadError> {
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = |what: String| DownloadError::Format { url: url.to_owned(), line: i + 1, what };
            let (accession, lineage) = line.split_once('\t').ok_or_else(|| bad("no tab after the accession".into()))?;
            let names: Vec<&str> = lineage.trim().split(';').map(str::trim).collect();
            let ranked = names.len() == RANKS.len()
                && names.iter().zip(RANKS).all(|(n, (prefix, _))| n.starts_with(prefix) && n.len() > prefix.len());
            if !ranked {
                return Err(bad(format!("{lineage:?} is not a lineage d__;p__;c__;o__;f__;g__;s__")));
            }
            for (j, name) in names.iter().enumerate() {
                let parent = (j > 0).then(|| names[j - 1].to_owned());
                match self.parents.get(*name) {
                    Some((Some(p), _)) if Some(p) != parent.as_ref() => {
                        let here = parent.unwrap_or_default();
                        return Err(bad(format!("{name} is under {p} elsewhere, here under {here}")));
                    }
                    _ => {
                        self.parents.insert(name.to_string(), (parent, RANKS[j].1));
                    }
                }
            }
            let accession = accession.trim();
            let accession =
                accession.strip_prefix("RS_").or_else(|| accession.strip_prefix("GB_")).unwrap_or(accession);
            self.species.insert(accession.to_owned(), names[RANKS.len() - 1].to_owned());
        }
        Ok(())
    }

    /// Taxa (without the root) and genomes read so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.parents.len(), self.species.len())
    }

    /// The taxa with their taxids, given in name order over every file added, and the genomes'.
    pub fn resolve(&self) -> Resolved {
        let mut taken = HashSet::new();
        let ids: BTreeMap<&String, TaxId> = self.parents.keys().map(|n| (n, taxid_for(n, &mut taken))).collect();
        let taxa = self
            .parents
            .iter()
            .map(|(name, (parent, rank))| {
                let parent = parent.as_ref().map_or(1, |p| ids[p]);
                (name.clone(), GtdbTaxon { taxid: ids[name], parent, rank, name: name[3..].to_owned() })
            })
            .collect();
        let genomes = self.species.iter().map(|(a, s)| (a.clone(), ids[s])).collect();
        (taxa, genomes)
    }

    /// Writes `nodes.dmp`, `names.dmp` (with the root, taxid 1) and `accession2taxid.tsv` into
    /// `dir`, each through a temporary file renamed when complete, and removes an NCBI dump's
    /// `merged.dmp` and `delnodes.dmp` there.
    pub fn write(&self, dir: &Path) -> Result<(), DownloadError> {
        let (taxa, genomes) = self.resolve();
        let mut nodes = String::from("1\t|\t1\t|\tno rank\t|\n");
        let mut names = String::from("1\t|\troot\t|\t\t|\tscientific name\t|\n");
        let mut taxa: Vec<&GtdbTaxon> = taxa.values().collect();
        taxa.sort_by_key(|t| t.taxid);
        for t in taxa {
            nodes.push_str(&format!("{}\t|\t{}\t|\t{}\t|\n", t.taxid, t.parent, t.rank));
            names.push_str(&format!("{}\t|\t{}\t|\t\t|\tscientific name\t|\n", t.taxid, t.name));
        }
        let genomes: String = genomes.iter().map(|(a, t)| format!("{a}\t{t}\n")).collect();
        for (file, text) in [("nodes.dmp", nodes), ("names.dmp", names), ("accession2taxid.tsv", genomes)] {
            super::fetch::write_file(&dir.join(file), text.as_bytes())?;
        }
        // An NCBI dump's merges and deletions, left from a download into the same folder, would be
        // read with these taxa (the taxonomy reads `merged.dmp` where there is one).
        for file in ["merged.dmp", "delnodes.dmp"] {
            match std::fs::remove_file(dir.join(file)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(DownloadError::Io { path: dir.join(file), source: e });
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A taxid for the prefixed GTDB name `name`: a hash of it in 2..2^31, moved up past taxids
/// already `taken`.
fn taxid_for(name: &str, taken: &mut HashSet<TaxId>) -> TaxId {
    const SPAN: u64 = (1 << 31) - 2;
    let mut id = (xxhash_rust::xxh3::xxh3_64(name.as_bytes()) % SPAN) as TaxId + 2;
    while !taken.insert(id) {
        id = if u64::from(id) > SPAN { 2 } else { id + 1 };
    }
    id
}

/// Reads `accession2taxid.tsv` (written by [`GtdbTaxonomy::write`]) from `dir`.
pub fn read_genomes(dir: &Path) -> Result<std::collections::HashMap<String, TaxId>, DownloadError> {
    let path = dir.join("accession2taxid.tsv");
    let text = std::fs::read_to_string(&path).map_err(|source| DownloadError::Io { path: path.clone(), source })?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let bad = || DownloadError::Format { url: path.display().to_string(), line: i + 1, what: format!("{l:?}") };
            let (a, t) = l.split_once('\t').ok_or_else(bad)?;
            Ok((a.to_owned(), t.trim().parse().map_err(|_| bad())?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAC: &str = "RS_GCF_000005845.2\td__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;g__Escherichia;s__Escherichia coli
GB_GCA_000001.1\td__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;g__Escherichia;s__Escherichia coli
RS_GCF_000013425.1\td__Bacteria;p__Bacillota;c__Bacilli;o__Staphylococcales;f__Staphylococcaceae;g__Staphylococcus;s__Staphylococcus aureus
";

    #[test]
    fn lineages_become_a_tree_with_stable_taxids() {
        let mut gtdb = GtdbTaxonomy::default();
        gtdb.add(BAC, "bac").unwrap();
        let (taxa, genomes) = gtdb.resolve();
        // 1 domain, 2 phyla, 2 classes, 2 orders, 2 families, 2 genera, 2 species.
        assert_eq!(taxa.len(), 13);
        let coli = &taxa["s__Escherichia coli"];
        assert_eq!((coli.rank, coli.name.as_str()), ("species", "Escherichia coli"));
        assert_eq!(coli.parent, taxa["g__Escherichia"].taxid);
        assert_eq!(taxa["d__Bacteria"].parent, 1);
        assert_eq!(genomes["GCF_000005845.2"], coli.taxid);
        assert_eq!(genomes["GCA_000001.1"], coli.taxid);
        // The same names give the same taxids, whatever else is in the release.
        let mut other = GtdbTaxonomy::default();
        other.add(BAC.lines().nth(2).unwrap(), "bac").unwrap();
        assert_eq!(other.resolve().0["s__Staphylococcus aureus"].taxid, taxa["s__Staphylococcus aureus"].taxid);
        // Archaea added after keep the bacteria's taxids.
        let before = taxa["s__Escherichia coli"].taxid;
        gtdb.add("GB_GCA_2.1\td__Archaea;p__A;c__B;o__C;f__D;g__E;s__E f\n", "ar").unwrap();
        let (taxa, _) = gtdb.resolve();
        assert_eq!(taxa["s__Escherichia coli"].taxid, before);
        assert_eq!(taxa.len(), 20);
    }

    /// Review: taxids taken in the order the files came in gave the archaea's and the bacteria's
    /// files different taxids for a colliding name depending on which came first (download reads
    /// archaea first; build takes the files as given). Now every order gives the same.
    #[test]
    fn taxids_do_not_depend_on_the_order_of_the_files() {
        let ar = "GB_GCA_2.1\td__Archaea;p__A;c__B;o__C;f__D;g__E;s__E f\n";
        let (mut one, mut two) = (GtdbTaxonomy::default(), GtdbTaxonomy::default());
        one.add(BAC, "bac").unwrap();
        one.add(ar, "ar").unwrap();
        two.add(ar, "ar").unwrap();
        two.add(BAC, "bac").unwrap();
        assert_eq!(one.resolve(), two.resolve());
        // A name whose hash is taken moves up to the next free taxid.
        let mut taken = HashSet::new();
        let a = taxid_for("s__A", &mut taken);
        assert_ne!(taxid_for("s__A", &mut taken), a, "a taken taxid moves up");
    }

    #[test]
    fn bad_lineages_name_the_file_and_line() {
        let mut gtdb = GtdbTaxonomy::default();
        let err = gtdb.add("RS_GCF_1.1\td__Bacteria;p__X;g__Y\n", "the url").unwrap_err().to_string();
        assert!(err.contains("the url: line 1") && err.contains("not a lineage"), "{err}");
        let moved = format!(
            "{BAC}RS_GCF_9.1\td__Bacteria;p__Bacillota;c__Bacilli;o__Staphylococcales;f__Enterobacteriaceae;g__Q;s__Q r\n"
        );
        let err = gtdb.add(&moved, "u").unwrap_err().to_string();
        assert!(err.contains("line 4") && err.contains("f__Enterobacteriaceae is under o__Enterobacterales"), "{err}");
    }

    #[test]
    fn taxids_collide_onto_the_next_free_one() {
        let mut taken = HashSet::new();
        let a = taxid_for("s__A", &mut taken);
        taken.insert(a + 1);
        // With its own taxid and the next taken, the name gets the one after.
        assert_eq!(taxid_for("s__A", &mut taken), a + 2);
        assert!((2..1 << 31).contains(&a));
    }
}
