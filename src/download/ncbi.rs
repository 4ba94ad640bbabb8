//! NCBI's layout, as genome_updater and ganon read it: which assemblies to take from an
//! `assembly_summary.txt`, where their files are, the downloads, and what they leave for
//! `kmerdb build`.
//!
//! A genomes folder (`--out`) after `kmerdb download genomes`:
//!
//! ```text
//! genomes/GCF_000005845.2_ASM584v2_genomic.fna.gz   one file per assembly, checked against md5checksums.txt
//! seqid2taxid.map                                    each sequence's id and its assembly's taxid
//! assemblies.tsv                                     the assemblies chosen: accession, taxid, species taxid, level, name, file
//! ```
//!
//! A rerun fetches only the files that are missing or whose md5 does not match (a file is
//! written as a temporary file beside its name and renamed once complete), and rewrites the map
//! and the table from every assembly whose file is there.

use super::DownloadError;
use super::fetch::{Fetcher, md5_of_file};
use crate::taxonomy::NcbiTaxonomy;
use crate::taxonomy::TaxId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// NCBI's server; `--mirror` replaces it.
pub const NCBI: &str = "https://ftp.ncbi.nlm.nih.gov";

/// The prefixes of the `ftp_path` column that a mirror replaces.
const NCBI_PREFIXES: [&str; 2] = ["https://ftp.ncbi.nlm.nih.gov", "ftp://ftp.ncbi.nlm.nih.gov"];

/// Assembly levels, from the most complete; taking a level takes those above it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Level {
    /// "Complete Genome".
    Complete,
    /// "Chromosome" and above.
    Chromosome,
    /// "Scaffold" and above.
    Scaffold,
    /// "Contig" and above: every assembly.
    Contig,
}

impl Level {
    /// The level of an `assembly_level` value, if known.
    fn of(value: &str) -> Option<Level> {
        match value {
            "Complete Genome" => Some(Level::Complete),
            "Chromosome" => Some(Level::Chromosome),
            "Scaffold" => Some(Level::Scaffold),
            "Contig" => Some(Level::Contig),
            _ => None,
        }
    }
}

/// One row of an assembly summary, the columns kmerdb uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    pub accession: String,
    pub taxid: TaxId,
    pub species_taxid: TaxId,
    pub organism: String,
    /// "reference genome", "representative genome" or "na".
    pub category: String,
    pub level: Level,
    /// The assembly's folder (NCBI's `ftp_path`).
    pub folder: String,
    /// The same assembly in the other collection (`gbrs_paired_asm`: a GenBank GCA for a RefSeq
    /// GCF), if listed.
    pub paired: Option<String>,
}

impl Assembly {
    /// The name of its genomic FASTA: `<folder's name>_genomic.fna.gz`.
    pub(crate) fn fasta_name(&self) -> String {
        format!("{}_genomic.fna.gz", self.folder.rsplit('/').next().unwrap_or_default())
    }
}

/// The current assemblies (`version_status` latest, with a folder) of an `assembly_summary.txt`
/// read from `url`. Columns are found by the header's names (the line starting `#` that names
/// `assembly_accession`), as NCBI has added columns over the years.
pub fn parse_summary(text: &str, url: &str) -> Result<Vec<Assembly>, DownloadError> {
    let bad = |line: usize, what: String| DownloadError::Format { url: url.to_owned(), line, what };
    let header = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .filter(|l| l.contains("assembly_accession"))
        .last()
        .ok_or_else(|| bad(1, "no header line naming assembly_accession".into()))?;
    let names: Vec<&str> = header.trim_start_matches('#').trim().split('\t').collect();
    let column = |name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| bad(1, format!("the header has no column {name}")))
    };
    let [acc, taxid, species, organism, category, status, level, folder] = [
        "assembly_accession",
        "taxid",
        "species_taxid",
        "organism_name",
        "refseq_category",
        "version_status",
        "assembly_level",
        "ftp_path",
    ]
    .map(column);
    let (acc, taxid, species, organism, category, status, level, folder) =
        (acc?, taxid?, species?, organism?, category?, status?, level?, folder?);
    let paired = column("gbrs_paired_asm").ok();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let get = |c: usize| {
            f.get(c).copied().ok_or_else(|| bad(i + 1, format!("{} columns, fewer than the header's", f.len())))
        };
        let number = |c: usize| -> Result<TaxId, DownloadError> {
            let v = get(c)?;
            v.parse().map_err(|_| bad(i + 1, format!("{:?} is not a taxid", v)))
        };
        if get(status)? != "latest" || get(folder)? == "na" {
            continue;
        }
        let Some(level) = Level::of(get(level)?) else { continue };
        out.push(Assembly {
            accession: get(acc)?.to_owned(),
            taxid: number(taxid)?,
            species_taxid: number(species)?,
            organism: get(organism)?.to_owned(),
            category: get(category)?.to_owned(),
            level,
            folder: get(folder)?.trim_end_matches('/').to_owned(),
            paired: paired.and_then(|c| f.get(c)).filter(|p| p.starts_with("GC")).map(|p| p.to_string()),
        });
    }
    Ok(out)
}

/// Keeps the assemblies that GTDB holds (`genomes`: accession → GTDB species taxid, from
/// [`super::gtdb::read_genomes`]; an assembly is found by its accession or its paired one) and
/// gives each its GTDB species as taxon and species.
pub fn with_gtdb(all: Vec<Assembly>, genomes: &HashMap<String, TaxId>) -> Vec<Assembly> {
    all.into_iter()
        .filter_map(|mut a| {
            let taxid = genomes.get(&a.accession).or_else(|| a.paired.as_ref().and_then(|p| genomes.get(p)))?;
            (a.taxid, a.species_taxid) = (*taxid, *taxid);
            Some(a)
        })
        .collect()
}

/// Which assemblies to take.
#[derive(Debug, Clone)]
pub struct Selection<'t> {
    pub level: Level,
    /// Only assemblies whose taxon lies in one of these clades (with the taxonomy that says so).
    pub clades: Option<(&'t [TaxId], &'t NcbiTaxonomy)>,
    /// At most this many assemblies a species: reference genomes first, then representative
    /// ones, the more complete first, then by accession.
    pub per_species: Option<usize>,
}

/// The assemblies `selection` takes from `all`, by accession.
pub fn select(all: &[Assembly], selection: &Selection) -> Vec<Assembly> {
    let in_clades = |a: &Assembly| match selection.clades {
        None => true,
        Some((clades, taxonomy)) => {
            let lineage = taxonomy.lineage(taxonomy.resolve(a.taxid).unwrap_or(a.taxid));
            clades.iter().any(|c| lineage.contains(&taxonomy.resolve(*c).unwrap_or(*c)))
        }
    };
    let mut chosen: Vec<&Assembly> = all.iter().filter(|a| a.level <= selection.level && in_clades(a)).collect();
    // Each once, if `all` lists one twice (a group given twice, `--group bacteria,bacteria`).
    chosen.sort_by(|a, b| a.accession.cmp(&b.accession));
    chosen.dedup_by(|a, b| a.accession == b.accession);
    if let Some(cap) = selection.per_species {
        let rank = |c: &str| match c {
            "reference genome" => 0,
            "representative genome" => 1,
            _ => 2,
        };
        chosen.sort_by(|a, b| {
            (a.species_taxid, rank(&a.category), a.level, &a.accession).cmp(&(
                b.species_taxid,
                rank(&b.category),
                b.level,
                &b.accession,
            ))
        });
        let mut taken: HashMap<TaxId, usize> = HashMap::new();
        chosen.retain(|a| {
            let n = taken.entry(a.species_taxid).or_default();
            *n += 1;
            *n <= cap
        });
    }
    chosen.sort_by(|a, b| a.accession.cmp(&b.accession));
    chosen.into_iter().cloned().collect()
}

/// `folder` (an `ftp_path`) on `mirror` instead of NCBI's server.
pub(crate) fn on_mirror(folder: &str, mirror: &str) -> String {
    let mirror = mirror.trim_end_matches('/');
    NCBI_PREFIXES
        .iter()
        .find_map(|p| folder.strip_prefix(p))
        .map_or_else(|| folder.to_owned(), |rest| format!("{mirror}{rest}"))
}

/// What became of one assembly.
#[derive(Debug)]
pub enum Outcome {
    /// Downloaded now, this many bytes.
    Fetched(u64),
    /// Already there with the right md5.
    Present,
    Failed(DownloadError),
}

/// The md5 that an assembly folder's `md5checksums.txt` lists for `file`.
fn listed_md5(list: &str, file: &str, url: &str) -> Result<String, DownloadError> {
    list.lines()
        .filter_map(|l| l.split_once(char::is_whitespace))
        .find(|(_, name)| name.trim().trim_start_matches("./") == file)
        .map(|(md5, _)| md5.trim().to_ascii_lowercase())
        .ok_or_else(|| DownloadError::NoChecksum { url: url.to_owned(), file: file.to_owned() })
}

/// Brings `assembly`'s genomic FASTA into `dir`, unless a file with the listed md5 is there.
pub fn fetch_assembly(fetcher: &Fetcher, mirror: &str, assembly: &Assembly, dir: &Path) -> Outcome {
    let run = || -> Result<Outcome, DownloadError> {
        let folder = on_mirror(&assembly.folder, mirror);
        let name = assembly.fasta_name();
        let list_url = format!("{folder}/md5checksums.txt");
        let md5 = listed_md5(&fetcher.text(&list_url)?, &name, &list_url)?;
        let dest = dir.join(&name);
        if dest.is_file() && md5_of_file(&dest)? == md5 {
            return Ok(Outcome::Present);
        }
        Ok(Outcome::Fetched(fetcher.file(&format!("{folder}/{name}"), &dest, Some(&md5))?))
    };
    run().unwrap_or_else(Outcome::Failed)
}

/// Each sequence id of the FASTA at `path` (plain or compressed), as `kmerdb build` reads it: the
/// header's first word.
pub fn sequence_ids(path: &Path) -> Result<Vec<String>, DownloadError> {
    let mut reader = crate::input::SeqReader::open(&crate::input::Source::File(path.to_owned()))?;
    let mut ids = Vec::new();
    while let Some(record) = reader.next_record() {
        ids.push(String::from_utf8_lossy(record?.id()).into_owned());
    }
    Ok(ids)
}

/// Writes `out/seqid2taxid.map` and `out/assemblies.tsv` for the `assemblies` whose files are
/// in `out/genomes`, each through a temporary file renamed when complete. Returns the number of
/// sequences mapped.
pub fn write_maps(out: &Path, assemblies: &[&Assembly]) -> Result<usize, DownloadError> {
    let genomes = out.join("genomes");
    let mut map = String::new();
    let mut table = String::from("accession\ttaxid\tspecies_taxid\tassembly_level\torganism\tfile\n");
    let mut sequences = 0;
    for a in assemblies {
        let file = genomes.join(a.fasta_name());
        for id in sequence_ids(&file)? {
            map.push_str(&format!("{id}\t{}\n", a.taxid));
            sequences += 1;
        }
        let level = format!("{:?}", a.level).to_lowercase();
        table.push_str(&format!(
            "{}\t{}\t{}\t{level}\t{}\tgenomes/{}\n",
            a.accession,
            a.taxid,
            a.species_taxid,
            a.organism,
            a.fasta_name()
        ));
    }
    super::fetch::write_file(&out.join("seqid2taxid.map"), map.as_bytes())?;
    super::fetch::write_file(&out.join("assemblies.tsv"), table.as_bytes())?;
    Ok(sequences)
}

/// Removes from `out/genomes` the genome files (`*_genomic.fna.gz`) of assemblies this run did not
/// choose: an earlier run's with other choices, or an assembly's older version. `build
/// out/genomes` reads every file there, and the map names only this run's sequences. Returns how
/// many it removed.
pub fn remove_unchosen(out: &Path, chosen: &[Assembly]) -> Result<usize, DownloadError> {
    let genomes = out.join("genomes");
    let keep: std::collections::HashSet<String> = chosen.iter().map(Assembly::fasta_name).collect();
    let io = |path: &Path, source| DownloadError::Io { path: path.to_path_buf(), source };
    let entries = match std::fs::read_dir(&genomes) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        entries => entries.map_err(|e| io(&genomes, e))?,
    };
    let mut removed = 0;
    for entry in entries {
        let path = entry.map_err(|e| io(&genomes, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with("_genomic.fna.gz") && !keep.contains(name) && path.is_file() {
            std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The files of NCBI's taxonomy dump that kmerdb reads.
pub(crate) const TAXDUMP_FILES: [&str; 4] = ["nodes.dmp", "names.dmp", "merged.dmp", "delnodes.dmp"];

/// Brings NCBI's taxonomy dump into `out` (`taxdump.tar.gz`, checked against its `.md5`; kept, so
/// that a rerun fetches it only if it changed or is damaged) and extracts `TAXDUMP_FILES`.
/// Returns whether the archive was downloaded now, and the files written.
pub fn fetch_taxonomy(fetcher: &Fetcher, mirror: &str, out: &Path) -> Result<(bool, Vec<&'static str>), DownloadError> {
    crate::temp_files::remove_stale_in(out);
    let url = format!("{}/pub/taxonomy/taxdump.tar.gz", mirror.trim_end_matches('/'));
    let md5_url = format!("{url}.md5");
    let md5 = listed_md5(&fetcher.text(&md5_url)?, "taxdump.tar.gz", &md5_url)?;
    let archive = out.join("taxdump.tar.gz");
    let fetched = !(archive.is_file() && md5_of_file(&archive)? == md5);
    if fetched {
        fetcher.file(&url, &archive, Some(&md5))?;
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| DownloadError::Io { path, source }
    };
    let file = std::fs::File::open(&archive).map_err(io(&archive))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut found = Vec::new();
    for entry in tar.entries().map_err(io(&archive))? {
        let mut entry = entry.map_err(io(&archive))?;
        let name = entry.path().map_err(io(&archive))?.to_string_lossy().into_owned();
        if let Some(keep) = TAXDUMP_FILES.iter().find(|f| **f == name) {
            let dest: PathBuf = out.join(keep);
            let temp = crate::temp_files::create_beside(&dest).map_err(io(&dest))?;
            std::io::copy(&mut entry, &mut temp.as_file()).map_err(io(&archive))?;
            temp.persist(&dest).map_err(io(&dest))?;
            found.push(*keep);
        }
    }
    for needed in ["nodes.dmp", "names.dmp"] {
        if !found.contains(&needed) {
            return Err(DownloadError::Format { url, line: 0, what: format!("the archive holds no {needed}") });
        }
    }
    Ok((fetched, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "\
##   See ftp://ftp.ncbi.nlm.nih.gov/genomes/README_assembly_summary.txt for a description of the columns
#assembly_accession\tbioproject\ttaxid\tspecies_taxid\torganism_name\trefseq_category\tversion_status\tassembly_level\tftp_path
GCF_3.1\tPRJ1\t562\t562\tEscherichia coli B\tna\tlatest\tComplete Genome\thttps://ftp.ncbi.nlm.nih.gov/genomes/all/GCF/000/000/003/GCF_3.1_B
GCF_1.1\tPRJ1\t511145\t562\tEscherichia coli K-12\treference genome\tlatest\tComplete Genome\thttps://ftp.ncbi.nlm.nih.gov/genomes/all/GCF/000/000/001/GCF_1.1_K12
GCF_2.1\tPRJ2\t562\t562\tEscherichia coli A\tna\tlatest\tContig\thttps://ftp.ncbi.nlm.nih.gov/genomes/all/GCF/000/000/002/GCF_2.1_A
GCF_4.1\tPRJ3\t1280\t1280\tStaphylococcus aureus\tna\treplaced\tComplete Genome\thttps://ftp.ncbi.nlm.nih.gov/genomes/all/GCF/000/000/004/GCF_4.1_S
GCF_5.1\tPRJ3\t1280\t1280\tStaphylococcus aureus\tna\tlatest\tChromosome\tna
GCF_6.1\tPRJ3\t1280\t1280\tStaphylococcus aureus X\tna\tlatest\tChromosome\tftp://ftp.ncbi.nlm.nih.gov/genomes/all/GCF/000/000/006/GCF_6.1_X/
";

    /// Review: a rerun with other choices left the earlier run's genome files beside the new ones,
    /// which `build out/genomes` read (their sequences dropped for want of a taxid, or an older
    /// version indexed beside the newer). Only the chosen ones' files and other files stay.
    #[test]
    fn genome_files_of_assemblies_no_longer_chosen_are_removed() {
        let all = parse_summary(SUMMARY, "summary").unwrap();
        let out = tempfile::tempdir().unwrap();
        let genomes = out.path().join("genomes");
        std::fs::create_dir(&genomes).unwrap();
        for a in &all {
            std::fs::write(genomes.join(a.fasta_name()), "x").unwrap();
        }
        std::fs::write(genomes.join("mine.fa"), ">a\nACGT\n").unwrap();
        let chosen: Vec<Assembly> = all.iter().filter(|a| a.species_taxid == 562).cloned().collect();
        assert_eq!(remove_unchosen(out.path(), &chosen).unwrap(), all.len() - chosen.len());
        let mut left: Vec<String> =
            std::fs::read_dir(&genomes).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        let mut expected: Vec<String> = chosen.iter().map(Assembly::fasta_name).chain(["mine.fa".into()]).collect();
        expected.sort();
        assert_eq!(left, expected);
        assert_eq!(remove_unchosen(out.path(), &chosen).unwrap(), 0);
    }

    #[test]
    fn the_summary_keeps_current_assemblies_with_a_folder() {
        let all = parse_summary(SUMMARY, "u").unwrap();
        let acc: Vec<&str> = all.iter().map(|a| a.accession.as_str()).collect();
        assert_eq!(acc, ["GCF_3.1", "GCF_1.1", "GCF_2.1", "GCF_6.1"]);
        assert_eq!(all[1].taxid, 511145);
        assert_eq!(all[1].species_taxid, 562);
        assert_eq!(all[2].level, Level::Contig);
        assert_eq!(all[3].fasta_name(), "GCF_6.1_X_genomic.fna.gz");
        let err = parse_summary("#x\ty\n", "u").unwrap_err().to_string();
        assert!(err.contains("assembly_accession"), "{err}");
        let bad = SUMMARY.replace("\t511145\t", "\tE. coli\t");
        let err = parse_summary(&bad, "the url").unwrap_err().to_string();
        assert!(err.contains("the url: line 4") && err.contains("not a taxid"), "{err}");
    }

    #[test]
    fn selection_takes_levels_and_caps_species_reference_first() {
        let all = parse_summary(SUMMARY, "u").unwrap();
        let pick = |level, per_species| {
            select(&all, &Selection { level, clades: None, per_species })
                .iter()
                .map(|a| a.accession.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(Level::Complete, None), ["GCF_1.1", "GCF_3.1"]);
        assert_eq!(pick(Level::Chromosome, None), ["GCF_1.1", "GCF_3.1", "GCF_6.1"]);
        assert_eq!(pick(Level::Contig, None), ["GCF_1.1", "GCF_2.1", "GCF_3.1", "GCF_6.1"]);
        // One a species: E. coli's reference genome, then S. aureus's only one.
        assert_eq!(pick(Level::Contig, Some(1)), ["GCF_1.1", "GCF_6.1"]);
        // Two: the complete one before the contigs.
        assert_eq!(pick(Level::Contig, Some(2)), ["GCF_1.1", "GCF_3.1", "GCF_6.1"]);
    }

    #[test]
    fn folders_move_to_the_mirror_and_checksums_are_found_by_name() {
        let f = "https://ftp.ncbi.nlm.nih.gov/genomes/all/GCF/000/000/001/GCF_1.1_K12";
        assert_eq!(
            on_mirror(f, "http://127.0.0.1:8000/"),
            "http://127.0.0.1:8000/genomes/all/GCF/000/000/001/GCF_1.1_K12"
        );
        assert_eq!(on_mirror("ftp://ftp.ncbi.nlm.nih.gov/x", "http://m"), "http://m/x");
        let list = "0123abcd  ./GCF_1.1_K12_genomic.gbff.gz\nABCDEF01  ./GCF_1.1_K12_genomic.fna.gz\n";
        assert_eq!(listed_md5(list, "GCF_1.1_K12_genomic.fna.gz", "u").unwrap(), "abcdef01");
        let err = listed_md5(list, "other.fna.gz", "the list").unwrap_err().to_string();
        assert!(err.contains("the list") && err.contains("other.fna.gz"), "{err}");
    }
}
