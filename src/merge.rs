//! `kmerdb merge`: joins the `--candidates-out` files of a partitioned index's parts into the
//! outputs one index of all the genomes would give: per-read lines, kreport, abundances.
//!
//! Per read, the parts' candidates are pooled and ranked as one index ranks them (more hits first,
//! then the lower target id, and target ids follow sequence names, so names break ties); the top
//! `max_candidates` go to the same decision. A feature's hit-list taxon is the LCA of its taxa in
//! the parts that hold it. The one difference that can remain is the location cap: a part drops a
//! feature with more than `--max-locations-per-feature` locations in that part, one index drops it
//! when the sum is over the cap; parts built with a cap no feature reaches give identical output.

use crate::classify::candidates::{Candidate, ClassifyParams, Entry, decide_scored, target_nodes, with_confidence};
use crate::classify::evidence::{self, CladeBases, Evidence, is_weak};
use crate::output::candidates::{CandidatesHeader, CandidatesReader, ReadCandidates};
use crate::output::{self, ReadResult};
use crate::pipeline::Pipeline;
use crate::sketch::SketchParams;
use crate::taxonomy::{TaxId, Taxon, TaxonTree};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct MergeConfig {
    /// One candidates file per part (any order).
    pub inputs: Vec<PathBuf>,
    pub kraken: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub abundance: Option<PathBuf>,
    pub abundance_rank: Option<String>,
    pub cami: Option<PathBuf>,
    pub krona: Option<PathBuf>,
    pub mpa: Option<PathBuf>,
    /// The sample's name, for the CAMI profile and the HTML page.
    pub sample: String,
    pub html: Option<PathBuf>,
    pub use_names: bool,
    /// As classify's `--report-zero-counts`.
    pub report_zero_counts: bool,
    /// `--confidence`, as classify's (`candidates::with_confidence`), on the merged hit lists.
    pub confidence: f64,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    #[error("merge needs the candidates files of a partitioned index's parts; none were given")]
    NoParts,
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    #[error("{path}")]
    Candidates { path: String, source: crate::output::candidates::CandidatesError },
    #[error("{a} and {b} were sketched differently ({sketch_a} against {sketch_b}); merge parts of one run")]
    MismatchSketch { a: String, b: String, sketch_a: SketchParams, sketch_b: SketchParams },
    #[error(
        "{a} and {b} were built with different --max-locations-per-feature ({cap_a} against {cap_b}); merge parts of one run"
    )]
    MismatchCap { a: String, b: String, cap_a: u32, cap_b: u32 },
    /// `setting` names the classification setting (a flag) whose values differ.
    #[error(
        "{a} and {b} were classified with different {setting} ({value_a} against {value_b}); merge parts of one run"
    )]
    MismatchSetting { a: String, b: String, setting: &'static str, value_a: String, value_b: String },
    /// Two files of different partitioned builds (or different splits of one collection).
    #[error(
        "{a} and {b} are not parts of one partitioned build (build ids {id_a:016x} and {id_b:016x}): merge takes the parts that `kmerdb build --partition I/N` made of one collection"
    )]
    OtherBuild { a: String, b: String, id_a: u64, id_b: u64 },
    #[error(
        "{a} and {b} were built with different taxonomies (checksums {sum_a:016x} and {sum_b:016x}): build every part with one taxonomy"
    )]
    OtherTaxonomy { a: String, b: String, sum_a: u64, sum_b: u64 },
    /// One part given twice (`whole`: two whole indexes' files, each "part 1 of 1").
    #[error("{a} and {b} are the same part: {}", if *.whole {
        "each is a whole index, not a part: merge joins the parts of one partitioned build"
    } else {
        "give each part once"
    })]
    SamePart { a: String, b: String, whole: bool },
    /// Parts of the build not given: `missing` lists the first few.
    #[error("{} of the build {} missing: merge needs all {parts} parts (given: {given})",
        if *.absent == 1 { format!("part {missing}") } else { format!("parts {missing}") },
        if *.absent == 1 { "is" } else { "are" })]
    MissingParts { missing: String, absent: usize, parts: u32, given: String },
    #[error(
        "target '{target}' is in both {a} and {b}: the parts overlap (a genome added to a part that another part holds?)"
    )]
    Overlap { target: String, a: String, b: String },
    #[error("read {number}: {a} has '{id_a}' but {b} has '{id_b}'; the parts must classify the same reads")]
    Reads { number: u64, a: String, b: String, id_a: String, id_b: String },
    #[error("{path}")]
    Output { path: String, source: std::io::Error },
    #[error("the parts' taxonomies do not join into one tree: {0}")]
    Taxonomy(String),
    /// A setting no run accepts ([`MergeConfig::validate`]).
    #[error("{0}")]
    Setting(String),
}

impl MergeError {
    /// Whether the files given were the wrong ones (exit code 2), not damaged or unreadable.
    pub fn is_usage(&self) -> bool {
        use MergeError::*;
        matches!(
            self,
            MismatchSketch { .. }
                | MismatchCap { .. }
                | MismatchSetting { .. }
                | OtherBuild { .. }
                | OtherTaxonomy { .. }
                | SamePart { .. }
                | MissingParts { .. }
                | Overlap { .. }
                | Setting(_)
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct MergeSummary {
    pub reads: u64,
    pub classified: u64,
}

/// A part's candidates file, decompressed.
type PartReader = CandidatesReader<Box<dyn BufRead + Send>>;

struct Part {
    path: String,
    reader: PartReader,
    header: CandidatesHeader,
    /// This part's target ids → merged target ids.
    targets: Vec<u32>,
}

fn open(path: &Path) -> Result<(PartReader, CandidatesHeader), MergeError> {
    let err = |message: String| MergeError::Input { path: path.display().to_string(), message };
    let mut file = BufReader::new(std::fs::File::open(path).map_err(|e| err(e.to_string()))?);
    let gz = file.fill_buf().map_err(|e| err(e.to_string()))?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead + Send> =
        if gz { Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(file))) } else { Box::new(file) };
    let (reader, header) = CandidatesReader::open(reader)
        .map_err(|source| MergeError::Candidates { path: path.display().to_string(), source })?;
    // The joined tree assumes each part's taxonomy is a tree holding its targets' taxa.
    let tree = TaxonTree::new(header.taxa.clone()).map_err(|e| err(format!("its taxonomy is invalid: {e}")))?;
    if let Some((name, taxid)) = header.targets.iter().find(|(_, taxid)| !tree.contains(*taxid)) {
        return Err(err(format!("target '{name}' has taxid {taxid}, which is not in its taxonomy")));
    }
    Ok((reader, header))
}

/// Reads decoded from every part per batch: the unit the stages pass on.
const BATCH_READS: usize = 4096;

/// Merges the parts; writes the outputs asked for.
///
/// Three stages on the `pipeline`: reading (a batch of records from every
/// part, checked to be the same reads), merging (each read's candidates and hit lists joined and
/// decided, its Kraken line formatted; in parallel over the batch), writing (counts and lines, in
/// order).
impl MergeConfig {
    /// The settings' ranges, named by their flags (`--confidence` between 0 and 1).
    pub fn validate(&self) -> Result<(), MergeError> {
        if !(0.0..=1.0).contains(&self.confidence) {
            return Err(MergeError::Setting("--confidence must be between 0 and 1".into()));
        }
        Ok(())
    }
}

pub fn merge(config: &MergeConfig) -> Result<MergeSummary, MergeError> {
    config.validate()?;
    let mut parts = open_parts(&config.inputs)?;
    check_parts(&parts)?;
    let parts_k = parts[0].header.sketch.k;
    let params = ClassifyParams { confidence: config.confidence, ..shared_params(&parts)? };
    let (target_taxa, tree) = join_targets(&mut parts)?;
    let target_nodes = target_nodes(&target_taxa, &tree);
    let lengths = parts.iter().flat_map(|p| p.header.targets.iter().zip(&p.header.target_lengths));
    let clade_bases = CladeBases::new(&tree, lengths.map(|((_, taxid), &length)| (*taxid, length)));
    let mut kraken = match &config.kraken {
        Some(p) => Some((output::create_output(p).map_err(out_err(p))?, p.clone())),
        None => None,
    };
    let merger = Merger {
        params: &params,
        target_nodes: &target_nodes,
        tree: &tree,
        clade_bases: &clade_bases,
        k: parts_k,
        names: config.use_names.then_some(&tree),
        lines: config.kraken.clone(),
    };
    let mut counts = Tallies::default();
    let mut reader = Reader { parts, reads: 0 };
    std::thread::scope(|scope| {
        let (mut pipeline, read) = Pipeline::source(scope, "reading", 1, || reader.next_batch());
        let merged = pipeline.stage(scope, "merging", 1, read, |batch: Batch| merger.merge(&batch));
        let written = merged.sink(|m: Merged| counts.write(m, &mut kraken));
        let times = pipeline.finish(("writing", written))?;
        log::debug!("merge: {}", crate::pipeline::describe(&times));
        Ok::<(), MergeError>(())
    })?;
    let summaries = output::Summaries {
        report: config.report.clone(),
        abundance: config.abundance.clone(),
        abundance_rank: config.abundance_rank.clone(),
        report_zero_counts: config.report_zero_counts,
        cami: config.cami.clone(),
        krona: config.krona.clone(),
        mpa: config.mpa.clone(),
    };
    summaries
        .write(&tree, &counts.direct, counts.unclassified, &config.sample)
        .map_err(|(p, source)| MergeError::Output { path: p.display().to_string(), source })?;
    if let Some(p) = &config.html {
        let view =
            output::SampleView::new(&config.sample, &tree, &counts.direct, counts.unclassified).map_err(out_err(p))?;
        let mut w = output::create_output(p).map_err(out_err(p))?;
        let settings = output::RunSettings::of_merge(&config.inputs);
        output::write_html(&mut w, &format!("kmerdb merge: {}", config.sample), &settings, &[view])
            .map_err(out_err(p))?;
        w.finish().map_err(out_err(p))?;
    }
    if let Some((w, p)) = kraken {
        w.finish().map_err(out_err(&p))?;
    }
    Ok(MergeSummary { reads: counts.reads, classified: counts.reads - counts.unclassified })
}

/// An output error that names the output's path.
fn out_err(p: &Path) -> impl FnOnce(std::io::Error) -> MergeError {
    let path = p.display().to_string();
    move |source| MergeError::Output { path, source }
}

fn open_parts(inputs: &[PathBuf]) -> Result<Vec<Part>, MergeError> {
    if inputs.is_empty() {
        return Err(MergeError::NoParts);
    }
    inputs
        .iter()
        .map(|p| {
            let (reader, header) = open(p)?;
            Ok(Part { path: p.display().to_string(), reader, header, targets: Vec::new() })
        })
        .collect()
}

/// The parts must be the parts of one partitioned build (one build id, one number of parts, one
/// taxonomy), each once and none missing: merging one part of two classified a third of the reads
/// less, with exit 0, and the same part twice counted it twice.
fn check_parts(parts: &[Part]) -> Result<(), MergeError> {
    let first = &parts[0];
    let c0 = first.header.collection;
    let of = |p: &Part| {
        let c = p.header.collection;
        format!("{} (part {}/{})", p.path, c.part, c.parts)
    };
    for p in &parts[1..] {
        let c = p.header.collection;
        if (c.id, c.parts) != (c0.id, c0.parts) {
            return Err(MergeError::OtherBuild { a: of(first), b: of(p), id_a: c0.id, id_b: c.id });
        }
        if c.taxonomy_checksum != c0.taxonomy_checksum {
            return Err(MergeError::OtherTaxonomy {
                a: first.path.clone(),
                b: p.path.clone(),
                sum_a: c0.taxonomy_checksum,
                sum_b: c.taxonomy_checksum,
            });
        }
    }
    let n = c0.parts;
    // Sorted part numbers, not a table of N: N comes from the files, and may be damaged.
    let mut numbered: Vec<(u32, &Part)> = parts.iter().map(|p| (p.header.collection.part, p)).collect();
    if let Some((i, p)) = numbered.iter().find(|(i, _)| *i == 0 || *i > n) {
        return Err(MergeError::Input {
            path: p.path.clone(),
            message: format!("it names part {i} of {n}: the file is damaged"),
        });
    }
    numbered.sort_by_key(|(i, _)| *i);
    if let Some(w) = numbered.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(MergeError::SamePart { a: of(w[0].1), b: of(w[1].1), whole: n == 1 });
    }
    let absent = n as usize - numbered.len();
    if absent > 0 {
        const SHOWN: usize = 5;
        let mut given = numbered.iter().map(|(i, _)| *i).peekable();
        let mut missing = Vec::new();
        for i in 1..=n {
            if given.next_if_eq(&i).is_none() {
                missing.push(format!("{i}/{n}"));
                if missing.len() == SHOWN {
                    break;
                }
            }
        }
        if absent > SHOWN {
            missing.push(format!("and {} more", absent - SHOWN));
        }
        let given: Vec<String> = parts.iter().map(of).collect();
        return Err(MergeError::MissingParts {
            missing: missing.join(", "),
            absent,
            parts: n,
            given: given.join(", "),
        });
    }
    Ok(())
}

/// The classification settings every part was made with; an error names two parts that differ.
fn shared_params(parts: &[Part]) -> Result<ClassifyParams, MergeError> {
    let first = &parts[0];
    for p in &parts[1..] {
        let (a, b) = (&first.header, &p.header);
        let (pa, pb) = (first.path.clone(), p.path.clone());
        if a.sketch != b.sketch {
            return Err(MergeError::MismatchSketch { a: pa, b: pb, sketch_a: a.sketch, sketch_b: b.sketch });
        }
        if a.max_locations_per_feature != b.max_locations_per_feature {
            let (cap_a, cap_b) = (a.max_locations_per_feature, b.max_locations_per_feature);
            return Err(MergeError::MismatchCap { a: pa, b: pb, cap_a, cap_b });
        }
        let rank = |r: &Option<String>| r.clone().unwrap_or_else(|| "none".into());
        let settings: [(&'static str, String, String); 5] = [
            ("--hitmin", a.hitmin.to_string(), b.hitmin.to_string()),
            ("--max-candidates", a.max_candidates.to_string(), b.max_candidates.to_string()),
            ("--lowest-rank", rank(&a.lowest_rank), rank(&b.lowest_rank)),
            ("--hitdiff", a.hitdiff.to_string(), b.hitdiff.to_string()),
            ("--strain-margin", a.strain_margin.to_string(), b.strain_margin.to_string()),
        ];
        if let Some((setting, value_a, value_b)) = settings.into_iter().find(|(_, x, y)| x != y) {
            return Err(MergeError::MismatchSetting { a: pa, b: pb, setting, value_a, value_b });
        }
    }
    Ok(ClassifyParams {
        hitmin: first.header.hitmin,
        hitdiff: first.header.hitdiff,
        strain_margin: first.header.strain_margin,
        // The candidates carry no amino-acid evidence (classify refuses to write them with it).
        protein_hitmin: 0,
        max_candidates: first.header.max_candidates as usize,
        insert_size: 0,
        lowest_rank: first.header.lowest_rank.clone(),
        confidence: 0.0,
    })
}

/// Numbers the targets of all parts by name, as one index would number them (each part's
/// `targets` maps its ids to these), and joins the parts' taxonomies into one tree. Returns each
/// merged target's taxid, and the tree.
fn join_targets(parts: &mut [Part]) -> Result<(Vec<TaxId>, TaxonTree), MergeError> {
    let mut names: BTreeMap<&str, (TaxId, &str)> = BTreeMap::new();
    for p in parts.iter() {
        for (name, taxid) in &p.header.targets {
            if let Some((_, other)) = names.insert(name, (*taxid, &p.path)) {
                return Err(MergeError::Overlap { target: name.clone(), a: other.to_string(), b: p.path.clone() });
            }
        }
    }
    let order: HashMap<&str, u32> = names.keys().enumerate().map(|(i, n)| (*n, i as u32)).collect();
    let target_taxa: Vec<TaxId> = names.values().map(|&(taxid, _)| taxid).collect();
    let mapped: Vec<Vec<u32>> =
        parts.iter().map(|p| p.header.targets.iter().map(|(n, _)| order[n.as_str()]).collect()).collect();
    for (p, m) in parts.iter_mut().zip(mapped) {
        p.targets = m;
    }
    let mut taxa: BTreeMap<TaxId, Taxon> = BTreeMap::new();
    for p in parts.iter() {
        for t in &p.header.taxa {
            taxa.entry(t.taxid).or_insert_with(|| t.clone());
        }
    }
    let tree = TaxonTree::new(taxa.into_values().collect()).map_err(|e| MergeError::Taxonomy(e.to_string()))?;
    Ok((target_taxa, tree))
}

/// Up to [`BATCH_READS`] reads, each as its record in every part: read `r`'s record of part `p`
/// is `records[r * parts + p]`, with each part's target ids already mapped to the merged ones.
struct Batch {
    parts: usize,
    records: Vec<ReadCandidates>,
}

/// The reading stage: the parts' records, read in step.
struct Reader {
    parts: Vec<Part>,
    /// Reads read so far, for the messages.
    reads: u64,
}

impl Reader {
    /// The next batch; `None` when every part has ended together.
    fn next_batch(&mut self) -> Result<Option<Batch>, MergeError> {
        let mut batch = Batch { parts: self.parts.len(), records: Vec::with_capacity(BATCH_READS * self.parts.len()) };
        while batch.records.len() < BATCH_READS * batch.parts {
            let at = batch.records.len();
            if !self.next_read(&mut batch.records)? {
                batch.records.truncate(at);
                break;
            }
        }
        Ok((!batch.records.is_empty()).then_some(batch))
    }

    /// Appends the next read's record of every part to `records`; false when every part has
    /// ended. A part that ends before the others, or records of different reads, are errors.
    fn next_read(&mut self, records: &mut Vec<ReadCandidates>) -> Result<bool, MergeError> {
        let first = records.len();
        let mut ended = Vec::new();
        for (i, p) in self.parts.iter_mut().enumerate() {
            let (targets, taxa) = (p.targets.len(), &p.header.taxa);
            let next = p.reader.next_record().map_err(|e| crate::errors::chain(&e));
            match next.and_then(|rec| rec.map(|rec| check_record(rec, targets, taxa)).transpose()) {
                Ok(Some(mut rec)) => {
                    for c in &mut rec.candidates {
                        c.0 = p.targets[c.0 as usize];
                    }
                    records.push(rec);
                }
                Ok(None) => ended.push(i),
                Err(e) => {
                    let message = format!("read {}: {e}", self.reads + 1);
                    return Err(MergeError::Input { path: p.path.clone(), message });
                }
            }
        }
        if ended.len() == self.parts.len() {
            return Ok(false);
        }
        if let Some(&short) = ended.first() {
            let reads = self.reads;
            return Err(MergeError::Input {
                path: self.parts[short].path.clone(),
                message: format!(
                    "ends after {reads} reads, but other parts have more: the parts must classify the same reads"
                ),
            });
        }
        let read = &records[first..];
        for (i, r) in read.iter().enumerate().skip(1) {
            if r.id != read[0].id || r.lengths != read[0].lengths {
                return Err(MergeError::Reads {
                    number: self.reads + 1,
                    a: self.parts[0].path.clone(),
                    b: self.parts[i].path.clone(),
                    id_a: read[0].id.clone(),
                    id_b: r.id.clone(),
                });
            }
        }
        self.reads += 1;
        Ok(true)
    }
}

/// The merging stage's settings.
struct Merger<'a> {
    params: &'a ClassifyParams,
    /// Each target's tree node (the decision's).
    target_nodes: &'a [u32],
    tree: &'a TaxonTree,
    /// The bases under each taxon and k, for the evidence rule of weak calls.
    clade_bases: &'a CladeBases,
    k: u32,
    /// With `--use-names`, the tree the Kraken lines take names from.
    names: Option<&'a TaxonTree>,
    /// Where the Kraken lines go, if anywhere (for the messages).
    lines: Option<PathBuf>,
}

/// A merged batch: each read's taxid and, when asked for, the batch's Kraken lines.
struct Merged {
    taxids: Vec<TaxId>,
    lines: Vec<u8>,
}

impl Merger<'_> {
    /// Merges a batch, in parallel over groups of reads; the lines come out in read order.
    fn merge(&self, batch: &Batch) -> Result<Merged, MergeError> {
        use rayon::prelude::*;
        const GROUP: usize = 256;
        let groups: Vec<(Vec<TaxId>, Vec<u8>)> = batch
            .records
            .par_chunks(GROUP * batch.parts)
            .map(|group| {
                let (mut taxids, mut lines) = (Vec::with_capacity(GROUP), Vec::new());
                let mut scratch = Scratch::default();
                for read in group.chunks(batch.parts) {
                    let taxid = self.merge_read(read, &mut scratch, &mut lines)?;
                    taxids.push(taxid);
                }
                Ok((taxids, lines))
            })
            .collect::<Result<_, MergeError>>()?;
        let mut merged = Merged { taxids: Vec::with_capacity(batch.records.len() / batch.parts), lines: Vec::new() };
        for (taxids, lines) in groups {
            merged.taxids.extend(taxids);
            merged.lines.extend(lines);
        }
        Ok(merged)
    }

    /// One read, given as its record in every part: its taxid, and its Kraken line appended to
    /// `lines` when lines are asked for.
    fn merge_read(&self, read: &[ReadCandidates], s: &mut Scratch, lines: &mut Vec<u8>) -> Result<TaxId, MergeError> {
        // Candidates: all parts' pooled, best first, ties to the lower merged target id.
        s.pooled.clear();
        for r in read {
            s.pooled.extend_from_slice(&r.candidates);
        }
        s.pooled.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        s.candidates.clear();
        s.candidates.extend(s.pooled.iter().take(self.params.max_candidates).map(|&(target, hits)| Candidate {
            target,
            hits,
            first_window: 0,
            last_window: 0,
        }));
        // Clade features: each part's counts per clade, summed (a feature is in one part only).
        s.clades.clear();
        for r in read {
            s.clades.extend_from_slice(&r.clades);
        }
        s.clades.sort_unstable();
        s.clades.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        let (taxid, top) =
            decide_scored(&s.candidates, &s.clades, self.params, self.target_nodes, self.tree, &mut s.entries);
        let weak = is_weak(taxid, top, self.params.hitmin);
        if self.lines.is_none() && self.params.confidence <= 0.0 && !weak {
            return Ok(taxid);
        }
        // Hit lists: feature by feature, the LCA of the parts' taxa.
        let mut hits: [Vec<(TaxId, u32)>; 2] = Default::default();
        for (m, runs) in hits.iter_mut().enumerate() {
            for r in read {
                join_runs(runs, &r.hits[m], self.tree, &mut s.joined);
                std::mem::swap(runs, &mut s.joined);
            }
        }
        let taxid = match weak {
            true => self.with_evidence(taxid, read, &hits, s),
            false => taxid,
        };
        let taxid = with_confidence(taxid, [&hits[0], &hits[1]], self.params.confidence, self.tree);
        let Some(path) = &self.lines else { return Ok(taxid) };
        let rec = &read[0];
        let result = ReadResult {
            id: rec.id.as_str().into(),
            taxid,
            lengths: (rec.lengths.0 as usize, rec.lengths.1.map(|l| l as usize)),
            hits: [&hits[0], &hits[1]],
        };
        output::write_kraken_line(lines, &result, self.names).map_err(out_err(path))?;
        Ok(taxid)
    }
}

/// One merging thread's buffers.
#[derive(Default)]
struct Scratch {
    pooled: Vec<(u32, u32)>,
    candidates: Vec<Candidate>,
    clades: Vec<(TaxId, u32)>,
    entries: Vec<Entry>,
    joined: Vec<(TaxId, u32)>,
    found: Vec<(u64, u32)>,
    spots: Vec<evidence::Spot>,
}

/// The writing stage's tallies.
#[derive(Default)]
struct Tallies {
    direct: HashMap<TaxId, u64>,
    reads: u64,
    unclassified: u64,
}

impl Tallies {
    /// Counts a merged batch and writes its lines.
    fn write(&mut self, m: Merged, kraken: &mut Option<(output::Output, PathBuf)>) -> Result<(), MergeError> {
        for taxid in m.taxids {
            self.reads += 1;
            if taxid == 0 {
                self.unclassified += 1;
            } else {
                *self.direct.entry(taxid).or_default() += 1;
            }
        }
        if let Some((w, p)) = kraken {
            w.write_all(&m.lines).map_err(out_err(p))?;
        }
        Ok(())
    }
}

impl Merger<'_> {
    /// The evidence rule ([`Evidence::check`]) for a weak `call` of a read (`read`: its record in
    /// every part) whose joined hit runs are `hits`: its spots are the joined runs' found
    /// features, at the positions the parts that found them recorded.
    fn with_evidence(
        &self,
        call: TaxId,
        read: &[ReadCandidates],
        hits: &[Vec<(TaxId, u32)>; 2],
        s: &mut Scratch,
    ) -> TaxId {
        s.spots.clear();
        for (m, runs) in hits.iter().enumerate() {
            s.found.clear();
            for r in read {
                evidence::found_features(&r.hits[m], &r.positions[m], &mut s.found);
            }
            s.found.sort_unstable();
            s.found.dedup_by_key(|f| f.0);
            evidence::spots_of(m as u8, runs, &s.found, &mut s.spots);
        }
        let features = hits.iter().flatten().map(|&(_, n)| u64::from(n)).sum();
        let ev = Evidence { tree: self.tree, bases: self.clade_bases, hitmin: self.params.hitmin, k: self.k };
        ev.check(call, &mut s.spots, features)
    }
}

/// What merging assumes of a record beyond what decoding checks: its id is a read id (a header's
/// first word, so one Kraken line stays one line), its candidates are among the file's
/// `targets`, its clades among its `taxa` (ordered by taxid, as a header holds them), and a single
/// read has no second mate's hits.
fn check_record(rec: ReadCandidates, targets: usize, taxa: &[Taxon]) -> Result<ReadCandidates, String> {
    if rec.id.bytes().any(|b| b.is_ascii_whitespace()) {
        return Err(format!("{:?} is not a read id: it holds whitespace", rec.id));
    }
    if let Some((target, _)) = rec.candidates.iter().find(|&&(t, _)| t as usize >= targets) {
        return Err(format!("'{}' has candidate target {target}, but the file lists {targets} targets", rec.id));
    }
    let known = |taxid: TaxId| taxa.binary_search_by_key(&taxid, |t| t.taxid).is_ok();
    if let Some((clade, _)) = rec.clades.iter().find(|&&(c, _)| !known(c)) {
        return Err(format!("'{}' has clade {clade}, which is not in the file's taxonomy", rec.id));
    }
    if rec.lengths.1.is_none() && !rec.hits[1].is_empty() {
        return Err(format!("'{}' is a single read but has hits on a second mate", rec.id));
    }
    for (m, (runs, positions)) in rec.hits.iter().zip(&rec.positions).enumerate() {
        let found: u64 = runs.iter().filter(|r| r.0 != 0).map(|r| u64::from(r.1)).sum();
        if found != positions.len() as u64 {
            return Err(format!(
                "'{}' has {found} found features on mate {} but {} positions for them",
                rec.id,
                m + 1,
                positions.len()
            ));
        }
    }
    Ok(rec)
}

/// Joins a part's hit runs (`part`) into those of the parts before it (`acc`), feature by feature:
/// the LCA of the two taxa where both have the feature, the one taxon where only one has it (as
/// `lca(0, t)` is `t`); into `out`, adjacent runs of one taxon joined. It walks runs, never
/// features one by one: a run's count is whatever the file says, up to 2^32 - 1.
fn join_runs(acc: &[(TaxId, u32)], part: &[(TaxId, u32)], tree: &TaxonTree, out: &mut Vec<(TaxId, u32)>) {
    out.clear();
    let mut push = |taxon: TaxId, n: u32| match out.last_mut() {
        Some((t, m)) if *t == taxon && m.checked_add(n).is_some() => *m += n,
        _ => out.push((taxon, n)),
    };
    let (mut a, mut b) = (acc.iter().copied().filter(|r| r.1 > 0), part.iter().copied().filter(|r| r.1 > 0));
    let (mut x, mut y) = (a.next(), b.next());
    loop {
        match (&mut x, &mut y) {
            (None, None) => return,
            (Some((t, n)), None) => {
                push(*t, *n);
                x = a.next();
            }
            (None, Some((t, n))) => {
                push(*t, *n);
                y = b.next();
            }
            (Some((s, n)), Some((t, m))) => {
                let k = (*n).min(*m);
                push(tree.lca(*s, *t), k);
                (*n, *m) = (*n - k, *m - k);
                if *n == 0 {
                    x = a.next();
                }
                if *m == 0 {
                    y = b.next();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::format::Collection;
    use crate::output::candidates::encode_file;

    /// A seed of the merge fuzz target (`fuzz/make_corpus.sh`): the candidates of four read pairs
    /// against the first half of a two-part index, as its header and its records; the header made
    /// that of a whole index, so that the part merges alone.
    fn seed() -> (CandidatesHeader, Vec<ReadCandidates>) {
        let bytes =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/merge_candidates/pairs_part1.cand"))
                .expect("seed candidates file");
        let (mut reader, mut header) = CandidatesReader::open(&bytes[..]).expect("seed header");
        let mut records = Vec::new();
        while let Some(r) = reader.next_record().expect("seed records") {
            records.push(r);
        }
        header.collection = Collection::whole(header.collection.taxonomy_checksum);
        (header, records)
    }

    fn write_part(dir: &Path, name: &str, header: &CandidatesHeader, records: &[ReadCandidates]) -> PathBuf {
        let part = dir.join(name);
        std::fs::write(&part, encode_file(header, records)).expect("write");
        part
    }

    /// Merges one part made of `header` and `records`; the error's message.
    fn merge_error(header: &CandidatesHeader, records: &[ReadCandidates]) -> String {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = write_part(dir.path(), "part.cand", header, records);
        let config =
            MergeConfig { inputs: vec![part], kraken: Some(dir.path().join("m.kraken")), ..Default::default() };
        merge(&config).expect_err("a damaged part must be refused").to_string()
    }

    /// [`merge_error`] of a part of the seed's header and one read, `record`.
    fn record_error(record: &ReadCandidates) -> String {
        let (header, _) = seed();
        merge_error(&header, std::slice::from_ref(record))
    }

    #[test]
    fn the_seed_merges() {
        let (header, records) = seed();
        let dir = tempfile::tempdir().expect("temp dir");
        let part = write_part(dir.path(), "part.cand", &header, &records);
        let summary = merge(&MergeConfig { inputs: vec![part], ..Default::default() }).expect("merge");
        assert_eq!(summary.reads, 4);
    }

    /// Issue 30.4: one part of two, the same part twice, parts of two builds, of two taxonomies or
    /// that overlap were merged with exit 0. Each is refused, naming the parts.
    #[test]
    fn only_the_parts_of_one_build_merge_each_once() {
        let (whole, records) = seed();
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let part = |i: u32, id: u64| {
            let mut h = whole.clone();
            h.collection = Collection { part: i, parts: 2, id, ..whole.collection };
            // Part 2 holds other targets (with the same taxa).
            if i == 2 {
                h.targets.iter_mut().for_each(|t| t.0.push_str("_2"));
            }
            h
        };
        let p1 = write_part(d, "p1.cand", &part(1, 7), &records);
        let p2 = write_part(d, "p2.cand", &part(2, 7), &records);
        let run = |inputs: &[&PathBuf]| {
            merge(&MergeConfig { inputs: inputs.iter().map(|p| p.to_path_buf()).collect(), ..Default::default() })
        };
        assert_eq!(run(&[&p2, &p1]).expect("both parts").reads, 4);
        let refused = |inputs: &[&PathBuf], says: &str| {
            let e = run(inputs).expect_err(says);
            assert!(e.is_usage() && e.to_string().contains(says), "{e}");
        };
        refused(&[&p1], "part 2/2 of the build is missing");
        refused(&[&p1, &p1], "are the same part");
        let other_build = write_part(d, "o2.cand", &part(2, 8), &records);
        refused(&[&p1, &other_build], "not parts of one partitioned build");
        let mut h = part(2, 7);
        h.collection.taxonomy_checksum ^= 1;
        let other_taxonomy = write_part(d, "t2.cand", &h, &records);
        refused(&[&p1, &other_taxonomy], "different taxonomies");
        let mut h = part(2, 7);
        h.targets = whole.targets.clone();
        let overlapping = write_part(d, "v2.cand", &h, &records);
        refused(&[&p1, &overlapping], "the parts overlap");
        let whole_a = write_part(d, "a.cand", &whole, &records);
        refused(&[&whole_a, &whole_a.clone()], "each is a whole index");
    }

    /// Fuzzing (merge_candidates_fixed, a timeout): a part claiming to be one of 33,554,434 had
    /// every missing part listed in the message, 600 MB of it (and a table of N entries made).
    #[test]
    fn regression_a_huge_number_of_parts_is_listed_briefly() {
        let (mut header, records) = seed();
        header.collection = Collection { part: 2, parts: 33_554_434, id: 9, ..header.collection };
        let message = merge_error(&header, &records);
        assert!(message.starts_with("parts 1/33554434, 3/33554434, 4/33554434, 5/33554434, 6/33554434, and 33554428 more of the build are missing"), "{message}");
        header.collection.parts = u32::MAX;
        assert!(merge_error(&header, &records).len() < 300);
    }

    /// Fuzzing (merge_candidates_fixed): a taxon named with a line break, written by `--use-names`,
    /// split a Kraken line in two.
    #[test]
    fn regression_a_taxon_name_with_a_line_break_is_refused() {
        let (mut header, records) = seed();
        let last = header.taxa.len() - 1;
        header.taxa[last].name.push_str("\nC\tr9\t1");
        let message = merge_error(&header, &records);
        assert!(message.contains("holds a tab or a line break"), "{message}");
    }

    /// Fuzzing (merge_candidates): a target whose taxid is not in the part's taxonomy was merged,
    /// and the call on it failed late, as an output error blaming the Kraken file.
    #[test]
    fn regression_target_taxid_outside_the_taxonomy_names_the_part() {
        let (mut header, records) = seed();
        header.targets[0].1 = 198119;
        let message = merge_error(&header, &records);
        assert!(
            message.contains("part.cand: target '")
                && message.ends_with("has taxid 198119, which is not in its taxonomy"),
            "{message}"
        );
    }

    /// Fuzzing (merge_candidates, a timeout): a hit run of 2^32 - 1 features was expanded into one
    /// LCA per feature, billions of them (16 GiB for two such runs), before being counted again.
    #[test]
    fn regression_huge_hit_runs_are_joined_as_runs() {
        let (header, _) = seed();
        let record = ReadCandidates {
            id: "r1".into(),
            lengths: (150, Some(150)),
            candidates: vec![],
            clades: vec![],
            hits: [vec![(0, u32::MAX), (1, 3)], vec![(0, u32::MAX)]],
            positions: [vec![1, 2, 3], vec![]],
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let mut parts = Vec::new();
        for i in 1..=2 {
            let mut h = header.clone();
            h.collection = Collection { part: i, parts: 2, id: 5, ..header.collection };
            h.targets.iter_mut().for_each(|t| t.0.push_str(&format!("_{i}")));
            parts.push(write_part(dir.path(), &format!("p{i}.cand"), &h, std::slice::from_ref(&record)));
        }
        let kraken = dir.path().join("m.kraken");
        let config = MergeConfig { inputs: parts, kraken: Some(kraken.clone()), ..Default::default() };
        assert_eq!(merge(&config).expect("merge").reads, 1);
        let line = std::fs::read_to_string(kraken).expect("kraken");
        assert_eq!(line, "U\tr1\t0\t150|150\t0:4294967295 1:3 |:| 0:4294967295\n");
    }

    #[test]
    fn no_parts_is_an_error_not_a_panic() {
        let err = merge(&MergeConfig::default()).unwrap_err();
        assert!(matches!(err, MergeError::NoParts), "{err}");
    }

    #[test]
    fn hit_runs_join_feature_by_feature() {
        let tree = TaxonTree::new(vec![
            Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() },
            Taxon { taxid: 2, parent: 1, rank: "genus".into(), name: "G".into() },
            Taxon { taxid: 3, parent: 2, rank: "species".into(), name: "G a".into() },
            Taxon { taxid: 4, parent: 2, rank: "species".into(), name: "G b".into() },
        ])
        .expect("tree");
        let expand = |runs: &[(TaxId, u32)]| -> Vec<TaxId> {
            runs.iter().flat_map(|&(t, n)| std::iter::repeat_n(t, n as usize)).collect()
        };
        let (a, b) = (vec![(3, 2), (0, 1), (4, 3), (0, 0)], vec![(0, 1), (4, 2), (3, 4), (1, 2)]);
        let mut out = Vec::new();
        join_runs(&a, &b, &tree, &mut out);
        let (ea, eb) = (expand(&a), expand(&b));
        let want: Vec<TaxId> =
            (0..ea.len().max(eb.len())).map(|i| tree.lca(*ea.get(i).unwrap_or(&0), *eb.get(i).unwrap_or(&0))).collect();
        assert_eq!(expand(&out), want);
        assert!(out.windows(2).all(|w| w[0].0 != w[1].0), "adjacent runs of one taxon are joined: {out:?}");
    }

    /// Fuzzing (merge_candidates): a single read (no second length) with hits on a second mate
    /// was passed on to the Kraken writer, whose debug assertion then failed.
    #[test]
    fn regression_single_read_with_second_mate_hits_is_an_input_error() {
        let record = ReadCandidates {
            id: "r1".into(),
            lengths: (150, None),
            candidates: vec![],
            clades: vec![],
            hits: [vec![], vec![(1, 3)]],
            positions: [vec![], vec![1, 2, 3]],
        };
        let message = record_error(&record);
        assert!(
            message.ends_with("part.cand: read 1: 'r1' is a single read but has hits on a second mate"),
            "{message}"
        );
    }

    /// The evidence rule reads a position for each found feature: a record without them is
    /// refused, not decided on made-up positions.
    #[test]
    fn found_features_without_positions_are_an_input_error() {
        let record = ReadCandidates {
            id: "r1".into(),
            lengths: (150, Some(150)),
            candidates: vec![],
            clades: vec![],
            hits: [vec![(0, 4), (1, 2)], vec![]],
            positions: [vec![5], vec![]],
        };
        let message = record_error(&record);
        assert!(message.ends_with("'r1' has 2 found features on mate 1 but 1 positions for them"), "{message}");
    }

    /// Fuzzing (merge_candidates): a candidate target past the file's list of targets indexed
    /// the part's target map out of bounds.
    #[test]
    fn regression_candidate_target_outside_the_file_is_an_input_error() {
        let record = ReadCandidates {
            id: "r1".into(),
            lengths: (150, Some(150)),
            candidates: vec![(0, 5), (198, 3)],
            clades: vec![],
            hits: Default::default(),
            positions: Default::default(),
        };
        let message = record_error(&record);
        assert!(
            message.ends_with("part.cand: read 1: 'r1' has candidate target 198, but the file lists 1 targets"),
            "{message}"
        );
    }

    /// Review, with the merge fuzz target's property (one Kraken line per read) on a seed whose
    /// read id was edited to hold a line break: the id was written as it was, splitting the line.
    #[test]
    fn regression_read_id_with_whitespace_is_an_input_error() {
        let record = ReadCandidates {
            id: "p\n0".into(),
            lengths: (150, Some(150)),
            candidates: vec![],
            clades: vec![],
            hits: Default::default(),
            positions: Default::default(),
        };
        let message = record_error(&record);
        assert!(message.ends_with("part.cand: read 1: \"p\\n0\" is not a read id: it holds whitespace"), "{message}");
    }
}
