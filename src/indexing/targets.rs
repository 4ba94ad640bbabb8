//! Stage 2 of the CPU build: order the targets, give each a taxon, and prune the taxonomy.
//!
//! Targets are numbered in the order of their sequence names (duplicates are an error), so the
//! index does not depend on the order of the inputs or of the threads that read them.
//!
//! Taxids come from a header tag (`kraken:taxid|N`, `taxid|N`) first, then from the
//! `--seqid2taxid` maps. With an NCBI taxonomy, retired taxids follow `merged.dmp`, an unknown taxid
//! is an error, and a sequence with no taxid at all is left out of the index (a warning with the
//! count and the first ids; an error with `--strict`). Without a taxonomy every sequence without a
//! taxid becomes its own taxon ([`SYNTHETIC_TAXID_BASE`] + its target id) directly under the root,
//! and tagged or mapped taxids are kept as flat taxa under the root.

use crate::index::TargetInfo;
use crate::indexing::error::BuildError;
use crate::indexing::sketching::RawTarget;
use crate::input::Source;
use crate::taxonomy::{NcbiTaxonomy, SeqIdMap, TaxId, Taxon, taxid_from_header};

/// First taxid given to sequences that are their own taxon (no taxonomy, no taxid).
pub const SYNTHETIC_TAXID_BASE: TaxId = 3_000_000_000;
/// How many ids of sequences without a taxid the warning lists.
const EXAMPLES: usize = 5;

/// The ordered targets, the map from provisional to final ids, and the pruned taxa.
pub struct Resolved {
    pub targets: Vec<TargetInfo>,
    /// `final_id[provisional]`, or `None` for a target left out of the index.
    pub final_id: Vec<Option<u32>>,
    pub taxa: Vec<Taxon>,
    /// Ids of sequences left out because they had no taxid.
    pub without_taxid: Vec<String>,
}

pub fn resolve(
    raw: &[RawTarget],
    sources: &[Source],
    taxonomy: Option<&NcbiTaxonomy>,
    seqid_map: &SeqIdMap,
    strict: bool,
) -> Result<Resolved, BuildError> {
    let mut order: Vec<usize> = (0..raw.len()).collect();
    order.sort_by(|&a, &b| {
        raw[a].name.cmp(&raw[b].name).then((raw[a].source, raw[a].record).cmp(&(raw[b].source, raw[b].record)))
    });
    for pair in order.windows(2) {
        let (a, b) = (&raw[pair[0]], &raw[pair[1]]);
        if a.name == b.name {
            return Err(BuildError::DuplicateSequence {
                id: a.name.clone(),
                first: format!("{} record {}", sources[a.source], a.record),
                second: format!("{} record {}", sources[b.source], b.record),
            });
        }
    }

    let mut taxids: Vec<Option<TaxId>> = Vec::with_capacity(raw.len());
    for &i in &order {
        let t = &raw[i];
        let given = taxid_from_header(&t.header).or_else(|| seqid_map.get(&t.name));
        let taxid = match (given, taxonomy) {
            (Some(taxid), Some(tax)) => Some(tax.resolve(taxid).ok_or_else(|| BuildError::UnknownTaxid {
                file: sources[t.source].to_string(),
                record: t.record,
                id: t.name.clone(),
                taxid,
            })?),
            (given, _) => given,
        };
        taxids.push(taxid);
    }

    let mut without_taxid = Vec::new();
    if taxonomy.is_some() {
        without_taxid =
            order.iter().zip(&taxids).filter(|(_, t)| t.is_none()).map(|(&i, _)| raw[i].name.clone()).collect();
        if !without_taxid.is_empty() && strict {
            return Err(BuildError::MissingTaxids { count: without_taxid.len(), examples: examples(&without_taxid) });
        }
    }

    let mut final_id = vec![None; raw.len()];
    let mut targets = Vec::new();
    for (&i, taxid) in order.iter().zip(&taxids) {
        let id = targets.len() as u32;
        let taxid = match (taxid, taxonomy) {
            (Some(t), _) => *t,
            (None, Some(_)) => continue,
            (None, None) => {
                SYNTHETIC_TAXID_BASE.checked_add(id).filter(|&t| t < u32::MAX).ok_or(BuildError::TooManyTargets)?
            }
        };
        final_id[i] = Some(id);
        let t = &raw[i];
        targets.push(TargetInfo { name: t.name.clone(), taxid, length: t.length, windows: t.windows });
    }
    if targets.is_empty() {
        return Err(BuildError::NothingToIndex {
            reason: if raw.is_empty() {
                "the inputs hold no sequences".into()
            } else {
                "no sequence has a taxid".into()
            },
        });
    }

    let taxa = match taxonomy {
        Some(tax) => {
            let mut keep: Vec<TaxId> = targets.iter().map(|t| t.taxid).collect();
            keep.sort_unstable();
            keep.dedup();
            tax.prune(&keep)
        }
        None => flat_taxa(&targets),
    };
    Ok(Resolved { targets, final_id, taxa, without_taxid })
}

/// A root with one child per distinct taxid, named after its first target (or `taxid N`).
fn flat_taxa(targets: &[TargetInfo]) -> Vec<Taxon> {
    let mut taxa = vec![Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() }];
    let mut seen = std::collections::BTreeMap::new();
    for t in targets.iter().filter(|t| t.taxid != 1) {
        seen.entry(t.taxid).or_insert_with(|| {
            if t.taxid >= SYNTHETIC_TAXID_BASE { t.name.clone() } else { format!("taxid {}", t.taxid) }
        });
    }
    taxa.extend(seen.into_iter().map(|(taxid, name)| Taxon {
        taxid,
        parent: 1,
        rank: if taxid >= SYNTHETIC_TAXID_BASE { "sequence".into() } else { "no rank".into() },
        name,
    }));
    taxa
}

/// The first few ids, for messages.
pub fn examples(ids: &[String]) -> String {
    let mut s = ids.iter().take(EXAMPLES).map(String::as_str).collect::<Vec<_>>().join(", ");
    if ids.len() > EXAMPLES {
        s.push_str(", ...");
    }
    s
}
