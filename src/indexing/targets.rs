//! Stage 2 of the CPU build: order the targets, give each a taxon, and prune the taxonomy.
//!
//! Targets are numbered in the order of their sequence names (duplicates are an error), so the
//! index does not depend on the order of the inputs or of the threads that read them.
//!
//! Taxids come from a header tag (`kraken:taxid|N`, `taxid|N`) first, then from the
//! `--seqid2taxid` maps. With an NCBI taxonomy, retired taxids follow `merged.dmp`, an unknown taxid
//! is an error, and a sequence with no taxid at all is left out of the index (a warning with the
//! count and the first ids; an error with `--strict`). Without a taxonomy every sequence without a
//! taxid becomes its own taxon (`SYNTHETIC_TAXID_BASE` + its target id) directly under the root,
//! and tagged or mapped taxids are kept as flat taxa under the root.

use crate::index::TargetInfo;
use crate::indexing::error::BuildError;
use crate::indexing::sketching::RawTarget;
use crate::input::Source;
use crate::taxonomy::{NcbiTaxonomy, SeqIdMap, TaxId, Taxon, taxid_from_header};

/// First taxid given to sequences that are their own taxon (no taxonomy, no taxid).
pub(crate) const SYNTHETIC_TAXID_BASE: TaxId = 3_000_000_000;
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
    let order = name_order(raw, sources)?;
    let taxids = given_taxids(raw, &order, sources, taxonomy, seqid_map)?;
    let without_taxid = left_out(raw, &order, &taxids, taxonomy.is_some(), strict)?;
    let named = order.iter().zip(&taxids).map(|(&i, &taxid)| Unnumbered {
        name: &raw[i].name,
        taxid,
        length: raw[i].length,
        windows: raw[i].windows,
    });
    let (targets, ids) = number(named, taxonomy.is_some())?;
    let mut final_id = vec![None; raw.len()];
    for (&i, id) in order.iter().zip(ids) {
        final_id[i] = id;
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
    let taxa = taxa_of(&targets, taxonomy);
    Ok(Resolved { targets, final_id, taxa, without_taxid })
}

/// Warns of the indexed sequences (those `final_id` keeps) that hold no k-mer of valid bases and
/// so give the index no features: the first few by name, file and record, then a count.
pub(crate) fn warn_featureless(raw: &[RawTarget], final_id: &[Option<u32>], sources: &[Source], k: u32) {
    let none: Vec<&RawTarget> =
        raw.iter().zip(final_id).filter(|(t, id)| id.is_some() && !t.has_kmer).map(|p| p.0).collect();
    if none.is_empty() {
        return;
    }
    const SHOWN: usize = 5;
    let mut list: Vec<String> = none
        .iter()
        .take(SHOWN)
        .map(|t| format!("'{}' ({} record {}, {} bases)", t.name, sources[t.source], t.record, t.length))
        .collect();
    if none.len() > SHOWN {
        list.push(format!("and {} more", none.len() - SHOWN));
    }
    let (n, one) = (none.len(), none.len() == 1);
    log::warn!(
        "{n} {} the index no features (no {k} valid bases, A, C, G or T, in a row), so no read will be called as {}: {}",
        if one { "sequence gives" } else { "sequences give" },
        if one { "it" } else { "them" },
        list.join(", ")
    );
}

/// An error if the index would have no features with locations: no read could be classified
/// against it, or (every feature a clade feature, over the cap) only by features that every
/// sequence shares.
pub(crate) fn check_not_empty(stats: &crate::index::condensed::ShardStats, k: u32, cap: u32) -> Result<(), BuildError> {
    if stats.features > stats.clade_features {
        return Ok(());
    }
    let reason = if stats.clade_features > 0 {
        format!(
            "all {} features are in more than --max-locations-per-feature ({cap}) locations, so none would tell a sequence from another (is -k {k} too short to tell the sequences apart?)",
            stats.clade_features
        )
    } else {
        format!(
            "no sequence holds {k} valid bases (A, C, G, T) in a row: the index would have no features (are the sequences blank, N, or shorter than -k {k}?)"
        )
    };
    Err(BuildError::NothingToIndex { reason })
}

/// The sequences' indexes in name order (ties, an error, by file and record).
pub(crate) fn name_order(raw: &[RawTarget], sources: &[Source]) -> Result<Vec<usize>, BuildError> {
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
    Ok(order)
}

/// Each sequence's taxid (in `order`): from its header tag, else from the seqid maps, resolved
/// through the taxonomy's merged taxids when there is one (an unknown taxid is an error).
pub(crate) fn given_taxids(
    raw: &[RawTarget],
    order: &[usize],
    sources: &[Source],
    taxonomy: Option<&NcbiTaxonomy>,
    seqid_map: &SeqIdMap,
) -> Result<Vec<Option<TaxId>>, BuildError> {
    let mut taxids: Vec<Option<TaxId>> = Vec::with_capacity(raw.len());
    for &i in order {
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
    Ok(taxids)
}

/// The names of the sequences a taxonomy leaves out for having no taxid; an error with `strict`.
pub(crate) fn left_out(
    raw: &[RawTarget],
    order: &[usize],
    taxids: &[Option<TaxId>],
    with_taxonomy: bool,
    strict: bool,
) -> Result<Vec<String>, BuildError> {
    if !with_taxonomy {
        return Ok(Vec::new());
    }
    let without: Vec<String> =
        order.iter().zip(taxids).filter(|(_, t)| t.is_none()).map(|(&i, _)| raw[i].name.clone()).collect();
    if !without.is_empty() && strict {
        return Err(BuildError::MissingTaxids { count: without.len(), examples: examples(&without) });
    }
    Ok(without)
}

/// A sequence before numbering: its name, the taxid it was given (resolved), its size.
pub struct Unnumbered<'a> {
    pub name: &'a str,
    pub taxid: Option<TaxId>,
    pub length: u64,
    pub windows: u64,
}

/// Numbers sequences given in name order: each gets the next id, but one without a taxid is
/// left out when there is a taxonomy, and becomes its own taxon (`SYNTHETIC_TAXID_BASE` + its
/// id) when there is none. Returns the targets and each sequence's id. (`kmerdb update` numbers
/// the old targets and the added ones together here, as a build of them all would.)
pub fn number<'a>(
    named: impl Iterator<Item = Unnumbered<'a>>,
    with_taxonomy: bool,
) -> Result<(Vec<TargetInfo>, Vec<Option<u32>>), BuildError> {
    let (mut targets, mut ids) = (Vec::new(), Vec::new());
    for t in named {
        let id = targets.len() as u32;
        let taxid = match t.taxid {
            Some(taxid) => taxid,
            None if with_taxonomy => {
                ids.push(None);
                continue;
            }
            None => SYNTHETIC_TAXID_BASE.checked_add(id).filter(|&t| t < u32::MAX).ok_or(BuildError::TooManyTargets)?,
        };
        ids.push(Some(id));
        targets.push(TargetInfo { name: t.name.to_string(), taxid, length: t.length, windows: t.windows });
    }
    Ok((targets, ids))
}

/// The index's taxa for `targets`: with a taxonomy, the union of their lineages; without, a flat
/// tree (see [`flat_taxa`]).
pub(crate) fn taxa_of(targets: &[TargetInfo], taxonomy: Option<&NcbiTaxonomy>) -> Vec<Taxon> {
    match taxonomy {
        Some(tax) => {
            let mut keep: Vec<TaxId> = targets.iter().map(|t| t.taxid).collect();
            keep.sort_unstable();
            keep.dedup();
            tax.prune(&keep)
        }
        None => flat_taxa(targets),
    }
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
