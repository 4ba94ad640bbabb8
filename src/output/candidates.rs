//! `kmerdb classify --candidates-out FILE`: each read's candidates against one partition of a
//! partitioned index, in a compact binary form that `kmerdb merge` joins across partitions.
//!
//! A file is a [`CandidatesHeader`] then one [`ReadCandidates`] per read, in input order, all
//! bincode (fixed-width integers, little-endian), gzipped when the name ends in `.gz`. The header
//! carries what merging needs to decide as one index would: the partition's targets (name and
//! taxid: targets of the whole collection are numbered by name, so names order candidates the
//! same way), its taxonomy, and the decision's settings.

use crate::sketch::SketchParams;
use crate::taxonomy::{TaxId, Taxon};
use serde::{Deserialize, Serialize};

pub const CANDIDATES_MAGIC: &str = "kmerdb-candidates";
/// The first bytes of every candidates file, before the bincode header: checked before anything
/// is decoded, so that another file is refused, not decoded into nonsense sizes.
pub const FILE_MAGIC: &[u8; 18] = b"KMERDB-CANDIDATES\n";
/// Version 2: the header records the strain margin.
pub const CANDIDATES_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidatesHeader {
    pub magic: String,
    pub version: u32,
    pub sketch: SketchParams,
    pub max_locations_per_feature: u32,
    pub hitmin: u32,
    pub hitdiff: f64,
    pub strain_margin: f64,
    pub max_candidates: u32,
    pub lowest_rank: Option<String>,
    /// The partition's targets: (sequence name, taxid), by target id.
    pub targets: Vec<(String, TaxId)>,
    /// The partition's taxonomy (its targets' lineages).
    pub taxa: Vec<Taxon>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadCandidates {
    pub id: String,
    pub lengths: (u32, Option<u32>),
    /// (target id in this partition, hits), best first, at most `max_candidates`.
    pub candidates: Vec<(u32, u32)>,
    /// Per mate, the taxa of its features' locations in this partition, as (taxid, count) runs
    /// (0: the feature is not in this partition).
    pub hits: [Vec<(TaxId, u32)>; 2],
}

/// Fixed-width little-endian integers; no value may claim more than 1 GiB, so that a damaged file
/// is an error, not an attempt to allocate whatever a corrupt length says.
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_fixed_int_encoding().with_little_endian().with_limit::<{ 1 << 30 }>()
}

/// Writes the start of a candidates file: the magic bytes and the header.
pub fn encode_header(header: &CandidatesHeader, out: &mut Vec<u8>) {
    out.extend_from_slice(FILE_MAGIC);
    encode_into(header, out);
}

/// Reads the start of a candidates file; an error names what is wrong.
pub fn decode_header(r: &mut impl std::io::BufRead) -> Result<CandidatesHeader, String> {
    let mut magic = [0u8; FILE_MAGIC.len()];
    if r.read_exact(&mut magic).is_err() || &magic != FILE_MAGIC {
        return Err("not a kmerdb candidates file".into());
    }
    let header: CandidatesHeader =
        decode_from(r)?.ok_or_else(|| "not a kmerdb candidates file (no header)".to_string())?;
    if header.magic != CANDIDATES_MAGIC {
        return Err("not a kmerdb candidates file".into());
    }
    if header.version != CANDIDATES_VERSION {
        return Err(format!("candidates format {} (this kmerdb reads {CANDIDATES_VERSION})", header.version));
    }
    Ok(header)
}

/// Appends one value's encoding to `out`.
pub fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) {
    bincode::serde::encode_into_std_write(value, out, config()).expect("writing to memory cannot fail");
}

/// Reads the next value; `Ok(None)` at a clean end of the stream.
pub fn decode_from<T: for<'de> Deserialize<'de>>(r: &mut impl std::io::BufRead) -> Result<Option<T>, String> {
    if r.fill_buf().map_err(|e| e.to_string())?.is_empty() {
        return Ok(None);
    }
    bincode::serde::decode_from_std_read(r, config()).map(Some).map_err(|e| e.to_string())
}
