//! `kmerdb bracken-prep`: the read distribution file that Bracken re-estimates abundances with
//! (`databaseNmers.kmer_distrib`), made with kmerdb's classifier instead of Kraken 2's.
//!
//! What `bracken-build` does, on kmerdb's index: every read-length stretch of every reference
//! sequence (each start position, or every `step`-th) is classified as a single-end read with
//! classify's default decision, and for each genome taxon the stretches are counted by the taxon
//! they were put on. The file lists, per taxon that stretches were put on (0: unclassified, as
//! Bracken's own files have it), each genome taxon with its count there and its total:
//!
//! ```text
//! mapped_taxid<TAB>genome_taxids:kmers_mapped:total_genome_kmers
//! 562<TAB>562:4711:5023 83334:12:5120
//! ```
//!
//! (Bracken's name, "kmers", means the read-length stretches.) Lines are in ascending taxid order,
//! and so are the genomes within a line, so the file does not depend on thread count or input
//! order. A sequence shorter than the read length is one stretch, of its whole length.

use crate::classify::candidates::{Classifier, ClassifyParams, TargetTables};
use crate::index::{Index, TargetInfo};
use crate::input::{InputError, SeqReader, Source, first_word};
use crate::taxonomy::TaxId;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `kmerdb bracken-prep` is asked for, checked by the caller.
#[derive(Debug, Clone)]
pub struct BrackenConfig {
    /// The index, open.
    pub index_path: PathBuf,
    /// The genomes the index was built from (FASTA files or directories, as `build` takes them).
    pub genomes: Vec<PathBuf>,
    /// Bracken's read length: the stretches' length.
    pub read_length: usize,
    /// Distance between the starts of consecutive stretches (1: every position, as bracken-build).
    pub step: usize,
    /// Where the file goes.
    pub output: PathBuf,
    pub threads: usize,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrackenError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(
        "{file}: record {record} ('{id}') is not a target of the index {index}; give the genomes the index was built from"
    )]
    NotATarget { file: Source, record: u64, id: String, index: String },
    #[error("{file}: record {record} ('{id}') was given before; each reference sequence once")]
    Twice { file: Source, record: u64, id: String },
    #[error(
        "{missing} of the index's {total} targets are not among the genomes given (the first: '{first}'); Bracken needs every genome's stretches"
    )]
    Missing { missing: usize, total: usize, first: String },
    #[error("{path}")]
    Output { path: String, source: std::io::Error },
    #[error("cannot start {threads} threads: {reason}")]
    Threads { threads: usize, reason: String },
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct BrackenSummary {
    pub sequences: u64,
    pub stretches: u64,
    /// Stretches put on their own genome's taxon or below it.
    pub own_taxon: u64,
    pub genome_taxa: usize,
}

/// Counts of stretches: genome taxon → taxon put on → count.
type Distribution = BTreeMap<TaxId, BTreeMap<TaxId, u64>>;

/// Classifies every stretch of every genome and writes the distribution file.
pub fn kmer_distribution(config: &BrackenConfig, index: &Index) -> Result<BrackenSummary, BrackenError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.threads)
        .build()
        .map_err(|e| BrackenError::Threads { threads: config.threads, reason: e.to_string() })?;
    let params = ClassifyParams::defaults(index.header().sketch.sketch_size);
    let targets = TargetTables::new(index);
    let target_taxa = &targets.taxa;
    let tree = index.taxonomy();
    let mut seen = vec![false; target_taxa.len()];
    let mut distribution = Distribution::new();
    let mut summary = BrackenSummary::default();
    for source in crate::input::discover_fasta(&config.genomes)? {
        let mut reader = SeqReader::open(&source)?;
        let mut number = 0;
        while let Some(record) = reader.next_record() {
            let record = record?;
            number += 1;
            let id = String::from_utf8_lossy(first_word(record.header())).into_owned();
            let target = TargetInfo::find(index.targets(), &id).ok_or_else(|| BrackenError::NotATarget {
                file: source.clone(),
                record: number,
                id: id.clone(),
                index: config.index_path.display().to_string(),
            })?;
            if std::mem::replace(&mut seen[target], true) {
                return Err(BrackenError::Twice { file: source.clone(), record: number, id });
            }
            let genome = target_taxa[target];
            let seq = record.seq();
            let counts = pool.install(|| stretch_calls(&params, &targets, &seq, config));
            let row = distribution.entry(genome).or_default();
            for (taxon, n) in counts {
                *row.entry(taxon).or_default() += n;
                summary.stretches += n;
                if taxon != 0 && tree.lca(taxon, genome) == genome {
                    summary.own_taxon += n;
                }
            }
            summary.sequences += 1;
        }
    }
    if let Some(first) = seen.iter().position(|&s| !s) {
        let missing = seen.iter().filter(|&&s| !s).count();
        let first = index.targets()[first].name.clone();
        return Err(BrackenError::Missing { missing, total: seen.len(), first });
    }
    summary.genome_taxa = distribution.len();
    write(&config.output, &distribution)?;
    Ok(summary)
}

/// How many of `seq`'s stretches were put on each taxon, classified on the current pool.
fn stretch_calls(
    params: &ClassifyParams,
    targets: &TargetTables<'_>,
    seq: &[u8],
    config: &BrackenConfig,
) -> HashMap<TaxId, u64> {
    let len = config.read_length.min(seq.len());
    let stretches = (seq.len() - len) / config.step + 1;
    // Groups of stretches per call, so that one classifier's lookups overlap (classify_group);
    // each group's starts are made where it is classified (a chromosome has millions).
    const GROUP: usize = 256;
    (0..stretches.div_ceil(GROUP))
        .into_par_iter()
        .map_init(
            || Classifier::new(params, targets),
            |classifier, g| {
                let group = (g * GROUP..((g + 1) * GROUP).min(stretches)).map(|i| i * config.step);
                let mates: Vec<[&[u8]; 1]> = group.map(|s| [&seq[s..s + len]]).collect();
                let reads: Vec<&[&[u8]]> = mates.iter().map(|m| &m[..]).collect();
                let mut counts = HashMap::new();
                for call in classifier.classify_group(&reads, false) {
                    *counts.entry(call.taxid).or_default() += 1;
                }
                counts
            },
        )
        .reduce(HashMap::new, |mut a, b| {
            for (t, n) in b {
                *a.entry(t).or_default() += n;
            }
            a
        })
}

/// Writes `distribution` in Bracken's form (module documentation), under a temporary name
/// renamed into place once complete (`output::create_output`).
fn write(path: &Path, distribution: &Distribution) -> Result<(), BrackenError> {
    let err = |source| BrackenError::Output { path: path.display().to_string(), source };
    let totals: BTreeMap<TaxId, u64> = distribution.iter().map(|(&g, row)| (g, row.values().sum())).collect();
    let mut by_mapped: BTreeMap<TaxId, BTreeMap<TaxId, u64>> = BTreeMap::new();
    for (&genome, row) in distribution {
        for (&mapped, &n) in row {
            by_mapped.entry(mapped).or_default().insert(genome, n);
        }
    }
    let mut text = String::from("mapped_taxid\tgenome_taxids:kmers_mapped:total_genome_kmers\n");
    for (mapped, genomes) in &by_mapped {
        text.push_str(&format!("{mapped}\t"));
        for (genome, n) in genomes {
            // Bracken's own files end each entry, the last included, with a space.
            text.push_str(&format!("{genome}:{n}:{} ", totals[genome]));
        }
        text.push('\n');
    }
    // As every text output: a device or a pipe is written into, a file replaced when complete.
    let mut file = crate::output::create_output(path).map_err(err)?;
    file.write_all(text.as_bytes()).map_err(err)?;
    file.finish().map_err(err)
}

/// Bracken's name for the file of read length `read_length`, which `bracken -d FOLDER -r N` looks
/// for in its database folder.
pub fn file_name(read_length: usize) -> String {
    format!("database{read_length}mers.kmer_distrib")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines in taxid order, genomes in taxid order within a line, each total the genome's sum
    /// over every line.
    #[test]
    fn the_file_is_in_brackens_form_and_taxid_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(100));
        let mut d = Distribution::new();
        d.insert(562, BTreeMap::from([(562, 90), (561, 7), (0, 3)]));
        d.insert(28901, BTreeMap::from([(28901, 40), (561, 10)]));
        write(&path, &d).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "mapped_taxid\tgenome_taxids:kmers_mapped:total_genome_kmers\n\
             0\t562:3:100 \n\
             561\t562:7:100 28901:10:50 \n\
             562\t562:90:100 \n\
             28901\t28901:40:50 \n"
        );
    }
}
