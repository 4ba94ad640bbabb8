//! `kmerdb merge`: joins the `--candidates-out` files of a partitioned index's parts into the
//! outputs one index of all the genomes would give: per-read lines, kreport, abundances.
//!
//! Per read, the parts' candidates are pooled and ranked as one index ranks them (more hits first,
//! then the lower target id, and target ids follow sequence names, so names break ties); the top
//! `max_candidates` go to the same decision. A feature's hit-list taxon is the LCA of its taxa in
//! the parts that hold it. The one difference that can remain is the location cap: a part drops a
//! feature with more than `--max-locations-per-feature` locations in that part, one index drops it
//! when the sum is over the cap; parts built with a cap no feature reaches give identical output.

use crate::classify::candidates::{Candidate, ClassifyParams, decide, push_run};
use crate::output::candidates::{CandidatesHeader, ReadCandidates, decode_from};
use crate::output::{self, ReadResult};
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
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    #[error("{a} and {b} were not made with the same settings ({what}); merge parts of one run")]
    Mismatch { a: String, b: String, what: &'static str },
    #[error("read {number}: {a} has '{id_a}' but {b} has '{id_b}'; the parts must classify the same reads")]
    Reads { number: u64, a: String, b: String, id_a: String, id_b: String },
    #[error("{path}: {source}")]
    Output { path: String, source: std::io::Error },
    #[error("the parts' taxonomies do not join into one tree: {0}")]
    Taxonomy(String),
}

#[derive(Debug, Clone, Default)]
pub struct MergeSummary {
    pub reads: u64,
    pub classified: u64,
}

struct Part {
    path: String,
    reader: Box<dyn BufRead>,
    header: CandidatesHeader,
    /// This part's target ids → merged target ids.
    targets: Vec<u32>,
}

fn open(path: &Path) -> Result<(Box<dyn BufRead>, CandidatesHeader), MergeError> {
    let err = |message: String| MergeError::Input { path: path.display().to_string(), message };
    let mut file = BufReader::new(std::fs::File::open(path).map_err(|e| err(e.to_string()))?);
    let gz = file.fill_buf().map_err(|e| err(e.to_string()))?.starts_with(&[0x1f, 0x8b]);
    let mut reader: Box<dyn BufRead> =
        if gz { Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(file))) } else { Box::new(file) };
    let header = crate::output::candidates::decode_header(&mut reader).map_err(err)?;
    Ok((reader, header))
}

/// Merges the parts; writes the outputs asked for.
pub fn merge(config: &MergeConfig) -> Result<MergeSummary, MergeError> {
    let mut parts = Vec::new();
    for p in &config.inputs {
        let (reader, header) = open(p)?;
        parts.push(Part { path: p.display().to_string(), reader, header, targets: Vec::new() });
    }
    let first = &parts[0];
    for p in &parts[1..] {
        let (a, b) = (&first.header, &p.header);
        let same = |what| MergeError::Mismatch { a: first.path.clone(), b: p.path.clone(), what };
        if a.sketch != b.sketch {
            return Err(same("sketch parameters"));
        }
        if (a.hitmin, a.max_candidates, &a.lowest_rank) != (b.hitmin, b.max_candidates, &b.lowest_rank)
            || a.hitdiff != b.hitdiff
        {
            return Err(same("classification settings"));
        }
    }
    let params = ClassifyParams {
        hitmin: first.header.hitmin,
        hitdiff: first.header.hitdiff,
        max_candidates: first.header.max_candidates as usize,
        insert_size: 0,
        lowest_rank: first.header.lowest_rank.clone(),
    };

    // Targets of all parts, numbered by name as one index would number them.
    let mut names: BTreeMap<&str, TaxId> = BTreeMap::new();
    for p in &parts {
        for (name, taxid) in &p.header.targets {
            names.insert(name, *taxid);
        }
    }
    let order: HashMap<&str, u32> = names.keys().enumerate().map(|(i, n)| (*n, i as u32)).collect();
    let target_taxa: Vec<TaxId> = names.values().copied().collect();
    let mapped: Vec<Vec<u32>> =
        parts.iter().map(|p| p.header.targets.iter().map(|(n, _)| order[n.as_str()]).collect()).collect();
    for (p, m) in parts.iter_mut().zip(mapped) {
        p.targets = m;
    }
    let mut taxa: BTreeMap<TaxId, Taxon> = BTreeMap::new();
    for p in &parts {
        for t in &p.header.taxa {
            taxa.entry(t.taxid).or_insert_with(|| t.clone());
        }
    }
    let tree = TaxonTree::new(taxa.into_values().collect()).map_err(|e| MergeError::Taxonomy(e.to_string()))?;

    let out_err = |p: &Path| {
        let path = p.display().to_string();
        move |source| MergeError::Output { path, source }
    };
    let mut kraken = match &config.kraken {
        Some(p) => Some((output::create_output(p).map_err(out_err(p))?, p.clone())),
        None => None,
    };
    let names_tree = config.use_names.then_some(&tree);
    let mut direct: HashMap<TaxId, u64> = HashMap::new();
    let (mut reads, mut unclassified) = (0u64, 0u64);
    let mut records: Vec<ReadCandidates> = vec![ReadCandidates::default(); parts.len()];
    let mut pooled: Vec<(u32, u32)> = Vec::new();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut features: Vec<TaxId> = Vec::new();
    let mut line = Vec::new();
    loop {
        let mut ended = Vec::new();
        for (i, (p, r)) in parts.iter_mut().zip(records.iter_mut()).enumerate() {
            match decode_from::<ReadCandidates>(&mut p.reader) {
                Ok(Some(rec)) => *r = rec,
                Ok(None) => ended.push(i),
                Err(e) => {
                    return Err(MergeError::Input {
                        path: p.path.clone(),
                        message: format!("read {}: {e}", reads + 1),
                    });
                }
            }
        }
        if ended.len() == parts.len() {
            break;
        }
        let number = reads + 1;
        if let Some(&short) = ended.first() {
            return Err(MergeError::Input {
                path: parts[short].path.clone(),
                message: format!(
                    "ends after {reads} reads, but other parts have more: the parts must classify the same reads"
                ),
            });
        }
        for (i, r) in records.iter().enumerate().skip(1) {
            if r.id != records[0].id || r.lengths != records[0].lengths {
                return Err(MergeError::Reads {
                    number,
                    a: parts[0].path.clone(),
                    b: parts[i].path.clone(),
                    id_a: records[0].id.clone(),
                    id_b: r.id.clone(),
                });
            }
        }
        // Candidates: all parts' pooled, best first, ties to the lower merged target id.
        pooled.clear();
        for (p, r) in parts.iter().zip(&records) {
            pooled.extend(r.candidates.iter().map(|&(t, hits)| (p.targets[t as usize], hits)));
        }
        pooled.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        candidates.clear();
        candidates.extend(pooled.iter().take(params.max_candidates).map(|&(target, hits)| Candidate {
            target,
            hits,
            first_window: 0,
            last_window: 0,
        }));
        let taxid = decide(&candidates, &params, &target_taxa, &tree);
        // Hit lists: feature by feature, the LCA of the parts' taxa.
        let mut hits: [Vec<(TaxId, u32)>; 2] = Default::default();
        for (m, runs) in hits.iter_mut().enumerate() {
            features.clear();
            for r in &records {
                let mut at = 0usize;
                for &(taxon, count) in &r.hits[m] {
                    for _ in 0..count {
                        if at == features.len() {
                            features.push(0);
                        }
                        features[at] = tree.lca(features[at], taxon);
                        at += 1;
                    }
                }
            }
            for &f in &features {
                push_run(runs, f);
            }
        }
        let rec = &records[0];
        reads += 1;
        if taxid == 0 {
            unclassified += 1;
        } else {
            *direct.entry(taxid).or_default() += 1;
        }
        if let Some((w, p)) = &mut kraken {
            line.clear();
            let result = ReadResult {
                id: rec.id.as_str().into(),
                taxid,
                lengths: (rec.lengths.0 as usize, rec.lengths.1.map(|l| l as usize)),
                hits: [&hits[0], &hits[1]],
            };
            output::write_kraken_line(&mut line, &result, names_tree).map_err(out_err(p))?;
            w.write_all(&line).map_err(out_err(p))?;
        }
    }
    let summaries = output::Summaries {
        report: config.report.clone(),
        abundance: config.abundance.clone(),
        abundance_rank: config.abundance_rank.clone(),
        cami: config.cami.clone(),
        krona: config.krona.clone(),
        mpa: config.mpa.clone(),
    };
    summaries
        .write(&tree, &direct, unclassified, &config.sample)
        .map_err(|(p, source)| MergeError::Output { path: p.display().to_string(), source })?;
    if let Some(p) = &config.html {
        let view = output::SampleView::new(&config.sample, &tree, &direct, unclassified).map_err(out_err(p))?;
        let mut w = output::create_output(p).map_err(out_err(p))?;
        output::write_html(&mut w, &format!("kmerdb merge: {}", config.sample), &[view]).map_err(out_err(p))?;
        w.finish().map_err(out_err(p))?;
    }
    if let Some((w, p)) = kraken {
        w.finish().map_err(out_err(&p))?;
    }
    Ok(MergeSummary { reads, classified: reads - unclassified })
}
