//! `build --protein`: the references' amino-acid k-mers (`protein`), read in a second pass over
//! the inputs once the targets are numbered. On the CPU for every backend, so that the section's
//! bytes are the same whoever built the shards.

use crate::index::TargetInfo;
use crate::indexing::error::BuildError;
use crate::input::{SeqReader, Source, first_word};
use crate::protein::{ProteinParams, encode_table, for_each_kmer, six_frames};
use rayon::prelude::*;

/// The protein section's bytes for the records of `sources` that are targets (`targets`, in name
/// order as numbered); records that are not (left out for want of a taxon) are skipped, as the
/// shards skip them.
pub fn build(sources: &[Source], targets: &[TargetInfo], params: ProteinParams) -> Result<Vec<u8>, BuildError> {
    Ok(encode_table(pairs(sources, targets, &params)?, params))
}

/// The (k-mer, target) pairs of the records of `sources` that are targets.
pub fn pairs(
    sources: &[Source],
    targets: &[TargetInfo],
    params: &ProteinParams,
) -> Result<Vec<(u32, u32)>, BuildError> {
    let per_source: Vec<Vec<(u32, u32)>> =
        sources.par_iter().map(|source| pairs_of(source, targets, params)).collect::<Result<_, _>>()?;
    Ok(per_source.into_iter().flatten().collect())
}

/// The updated table: the old index's pairs (`old`, over the cap included) with their targets
/// renumbered (`old_to_new`, `None` for a removed one), and the added genomes' (`added`, whose
/// records are numbered by name among `targets`). The same pairs as a fresh build of the result
/// reads, so the same bytes.
pub fn update(
    old: &crate::protein::ProteinTable,
    old_to_new: &[Option<u32>],
    added: &[Source],
    targets: &[TargetInfo],
) -> Result<Vec<u8>, BuildError> {
    let mut all = pairs(added, targets, &old.params)?;
    all.extend(old.pairs().filter_map(|(k, t)| old_to_new[t as usize].map(|n| (k, n))));
    Ok(encode_table(all, old.params))
}

/// (k-mer, target) of every indexed record of `source`, each record's six frames in parallel.
fn pairs_of(source: &Source, targets: &[TargetInfo], params: &ProteinParams) -> Result<Vec<(u32, u32)>, BuildError> {
    let mut reader = SeqReader::open(source)?;
    let mut pairs = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record?;
        let id = String::from_utf8_lossy(first_word(record.header()));
        let Some(target) = TargetInfo::find(targets, &id) else { continue };
        let frames = six_frames(&record.seq());
        let found: Vec<Vec<u32>> = frames
            .par_iter()
            .map(|frame| {
                let mut codes = Vec::new();
                for_each_kmer(frame, params, params.min_orf as usize, |c| codes.push(c));
                codes.sort_unstable();
                codes.dedup();
                codes
            })
            .collect();
        pairs.extend(found.into_iter().flatten().map(|c| (c, target as u32)));
    }
    Ok(pairs)
}
