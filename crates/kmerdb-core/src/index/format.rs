//! The index file format, version [`FORMAT_VERSION`].
//!
//! ```text
//! offset 0     preamble, 64 bytes: magic (8), format version (u32), flags (u32, 0),
//!              header length (u64), header xxh3-64 checksum (u64), 32 zero bytes
//! offset 64    header: bincode (fixed-width integers) of [`Header`]
//! 4 KiB-aligned sections, in this order, each with its xxh3-64 checksum in the header:
//!   shards      per shard a [`ShardEntry`]: offset in the shard data, buckets, words, checksum
//!   shard data  per shard, in shard order, one block at a 128-byte boundary (zeros between):
//!               its key index (buckets of 16 packed slots, `index::packed_keys`), then its
//!               location words (see `index::locations`)
//!   targets     bincode Vec<TargetInfo>, ordered by target id (= sequence name order)
//!   taxonomy    bincode Vec<Taxon>: the lineages of the targets' taxa, ordered by taxid
//!   clade lists the clade features' locations, compressed, for `kmerdb update` (`index::clade_lists`)
//!   protein     the amino-acid k-mer table of `build --protein` (`protein`); empty without it
//!   provenance  bincode [`Provenance`]: how and when the index was made
//! ```
//! Everything is little-endian; the shard data is memory-mapped and cast in place.
//!
//! Each shard's block is whole in itself (format version 3; version 2 kept all key indexes, then
//! all location words): a build writes each shard as soon as it is laid out, at an offset that
//! depends only on the shards before it, so a GPU build writes the file while it still condenses
//! later shards. Each shard has its own xxh3-64 checksum (of its key index bytes, then its words'
//! bytes), so verifying runs on every core; the shard data section's checksum is the xxh3-64 of
//! the shards' checksums, in order, as little-endian u64s. Blocks start at 128-byte boundaries, a
//! cache line, so that a bucket spans as few lines as its size allows, in memory and on the GPU.
//! Features are split into `1 << shard_bits` shards by their low bits ([`shard_of`]). Not by their
//! top bits (format version 1): a sketch keeps each window's smallest hash values, so features
//! crowd the bottom of the hash range and top-bit shards are lopsided (about 10 of 64 shards held
//! nearly every feature); the low bits of the smallest values are as even as any. Several GPUs
//! each take a contiguous group of shards, so even shards mean even shares.

use crate::index::locations::LocationLayout;
use crate::sketch::SketchParams;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[cfg(target_endian = "big")]
compile_error!("kmerdb memory-maps little-endian index files and does not support big-endian hosts");

/// First bytes of every index: a non-ASCII byte, the name, and a CR-LF that text-mode copies break.
pub const MAGIC: [u8; 8] = *b"\x89KMERDB\n";
/// Bumped whenever the bytes of an index change meaning.
/// Version 2: shards by the features' low bits (version 1 used the top bits).
/// Version 3: each shard's key index and words in one block, with its own checksum.
/// Version 4: the dropped section, which `kmerdb update` needs.
/// Version 5: the provenance in its own last section, out of the header: its command line has any
/// length, and in the header it moved every section, so an update and a fresh build of the same
/// genomes (whose command lines differ) laid out the same sections at different offsets.
/// Version 6: the protein section (empty unless built with `--protein`).
/// Version 7: the header's [`Collection`]: which part of which partitioned build, and the
/// taxonomy's checksum, which `kmerdb merge` checks its parts against.
/// Version 8: features over the location cap are kept as clade features (their targets' LCA in
/// the key index, `index::locations`) instead of dropped, and the dropped section became the
/// clade lists section, delta-coded and compressed; a location list starts with a head (its length
/// and whether the rest is delta-coded) and may be a run of gamma-coded differences.
/// Version 9: key index slots packed (`index::packed_keys`): a key's quotient under a permuting hash
/// instead of the key, a value as wide as the shard needs; the shard table records both widths. A
/// delta-coded list's length is a gamma code after its flag bit, not a whole head entry.
/// Version 10: no list offsets (`index::stored_shard`): each shard's lists in slot order, a
/// bucket's base entry before its slots, each slot a tag and a code for its list's kind and size;
/// single locations in the stream, short fixed lists without their head.
/// Version 11: a stored list's locations are global window numbers (`locations::GlobalWindows`:
/// the windows of the targets before, plus the window), in entries of the layout's `stored_bits`;
/// buckets side by side at any bit, not each in whole words; a bucket's base measured from a line
/// through its shard's bases (`packed_keys::BaseLine`, in the shard table).
/// Version 12: lists start at any bit, not at whole entries: a bucket's base is a bit, and a list
/// that says what it is (a delta list mostly) is sized in its shard's unit (`SlotCodes::unit`,
/// [`ShardEntry::unit_bits`]), which the writer picks with the codes; on the GPU benchmark's
/// strain-rich collection delta lists had been padded by 12 bits on average. And a delta list's
/// step of `locations::JUMP` targets or more is a jump: a code and the location itself (50 Gbp
/// strain-rich collection: 0.356 -> 0.251 bytes a base).
/// Version 13: the clade lists section is a run of zstd frames, not one
/// (`clade_lists::FRAME_LOCATIONS`), compressed in parallel: one frame of a 50 Gbp collection's
/// 634 M clade locations took 24 s on one thread at the end of the build.
pub const FORMAT_VERSION: u32 = 13;
pub const PREAMBLE_LEN: usize = 64;
pub(crate) const SECTION_ALIGN: u64 = 4096;
/// Alignment of each shard's block in the shard data: a cache line.
pub(crate) const SHARD_ALIGN: u64 = 128;
/// Features are split into 2^6 = 64 shards.
pub const DEFAULT_SHARD_BITS: u32 = 6;

/// The shard of `feature` among `1 << shard_bits`: its low bits (the device twin is `shard_of_key`
/// in `cuda/common.cuh`).
#[inline]
pub fn shard_of(feature: u32, shard_bits: u32) -> usize {
    (feature & ((1u64 << shard_bits) - 1) as u32) as usize
}

/// bincode settings of the header and metadata sections.
pub fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_fixed_int_encoding().with_little_endian()
}

/// Every parameter that shapes the index, the counts, provenance and the section table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub sketch: SketchParams,
    /// Id of the k-mer hash function (`sketch::HASH_FUNCTION_ID`).
    pub hash_function: u32,
    pub max_locations_per_feature: u32,
    pub shard_bits: u32,
    pub key_index: KeyIndexParams,
    pub layout: LocationLayout,
    pub taxonomy: TaxonomySource,
    pub collection: Collection,
    pub counts: Counts,
    /// Stored in the provenance section, not in the header's bytes (which therefore have the
    /// same length for every index with the same shard count).
    #[serde(skip)]
    pub provenance: Provenance,
    pub sections: Vec<SectionEntry>,
}

impl Header {
    pub fn shard_count(&self) -> usize {
        1 << self.shard_bits
    }

    pub fn section(&self, kind: SectionKind) -> Option<&SectionEntry> {
        self.sections.iter().find(|s| s.kind == kind)
    }
}

/// Shape of each shard's bucketed cuckoo key index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyIndexParams {
    pub bucket_slots: u32,
    pub hash_functions: u32,
    pub seeds: [u32; 3],
}

impl std::fmt::Display for KeyIndexParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seeds: Vec<String> = self.seeds.iter().map(|s| format!("{s:#x}")).collect();
        write!(
            f,
            "buckets of {} slots with {} hash functions (seeds {})",
            self.bucket_slots,
            self.hash_functions,
            seeds.join(", ")
        )
    }
}

/// Where the targets' taxa came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaxonomySource {
    /// An NCBI taxonomy dump, pruned to the targets' lineages.
    Ncbi,
    /// No taxonomy given: every sequence is its own taxon directly under the root.
    PerSequence,
}

/// What an index is a part of: `build --partition I/N` makes part I of N of one collection, a
/// plain build part 1 of 1. The parts of one partitioned build share `id`; `kmerdb merge` takes
/// exactly the N parts of one id, built with one taxonomy (`taxonomy_checksum`), and refuses a
/// part missing, repeated or from elsewhere. `update` keeps part and id (an updated part still
/// merges with the others) and takes the checksum of the taxonomy it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collection {
    /// 1-based.
    pub part: u32,
    pub parts: u32,
    /// 0 for a whole build; for a partitioned one, `indexing::partition::collection_id` of all its
    /// genome files and the number of parts.
    pub id: u64,
    /// [`crate::taxonomy::NcbiTaxonomy::checksum`] of the taxonomy the index was built (or last
    /// updated) with; 0 without one.
    pub taxonomy_checksum: u64,
}

impl Collection {
    /// A whole (unpartitioned) index.
    pub fn whole(taxonomy_checksum: u64) -> Self {
        Self { part: 1, parts: 1, id: 0, taxonomy_checksum }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub targets: u64,
    pub taxa: u64,
    pub bases: u64,
    pub windows: u64,
    /// Distinct features kept in the index.
    pub features: u64,
    pub locations: u64,
    /// Features with more locations than the cap, kept as their targets' LCA (clade features;
    /// counted in `features`, their locations not in `locations`).
    pub clade_features: u64,
    pub clade_locations: u64,
    pub buckets: u64,
}

/// How the index was made. The command line is the normalised one (inputs sorted, no
/// `--threads`), and the date honours `SOURCE_DATE_EPOCH`, so rebuilding is reproducible.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    #[serde(deserialize_with = "crate::checked_str::string")]
    pub kmerdb_version: String,
    pub created_unix: i64,
    #[serde(deserialize_with = "crate::checked_str::strings")]
    pub command_line: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SectionKind {
    Shards,
    ShardData,
    Targets,
    Taxonomy,
    CladeLists,
    Protein,
    Provenance,
}

impl SectionKind {
    pub const ALL: [SectionKind; 7] = [
        SectionKind::Shards,
        SectionKind::ShardData,
        SectionKind::Targets,
        SectionKind::Taxonomy,
        SectionKind::CladeLists,
        SectionKind::Protein,
        SectionKind::Provenance,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            SectionKind::Shards => "shards",
            SectionKind::ShardData => "shard data",
            SectionKind::Targets => "targets",
            SectionKind::Taxonomy => "taxonomy",
            SectionKind::CladeLists => "clade lists",
            SectionKind::Protein => "protein",
            SectionKind::Provenance => "provenance",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionEntry {
    pub kind: SectionKind,
    pub offset: u64,
    pub len: u64,
    pub checksum: u64,
}

/// One reference sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInfo {
    #[serde(deserialize_with = "crate::checked_str::string")]
    pub name: String,
    pub taxid: u32,
    pub length: u64,
    pub windows: u64,
}

impl TargetInfo {
    /// The id of the target named `name` among `targets` (an index's, which are in name order).
    pub fn find(targets: &[TargetInfo], name: &str) -> Option<usize> {
        targets.binary_search_by(|t| t.name.as_str().cmp(name)).ok()
    }
}

/// Where one shard's block lies in the shard data section, its sizes and its checksum.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ShardEntry {
    /// Bytes from the start of the shard data section (a multiple of `SHARD_ALIGN`).
    pub offset: u64,
    /// Buckets of the key index, at `offset`.
    pub buckets: u64,
    /// Location words (4 bytes each), right after the key index.
    pub words: u64,
    /// xxh3-64 of the key index bytes followed by the words' bytes.
    pub checksum: u64,
    /// Width of a slot's tag (`index::packed_keys::tag_bits` of the buckets: checked at open).
    pub tag_bits: u32,
    /// Width of a slot's code (`index::packed_keys::SlotCodes`).
    pub code_bits: u32,
    /// How many codes name fixed lists by their length (`SlotCodes::fixed`).
    pub fixed_codes: u32,
    /// Width of a bucket's base field, its distance from the line below (where its lists start).
    pub base_bits: u32,
    /// The line the bases are measured from (`index::packed_keys::BaseLine`).
    pub base_slope: u64,
    pub base_bias: u64,
    /// Bits of the unit a described list's size is counted in (`SlotCodes::unit`, format 12).
    pub unit_bits: u32,
    /// Zero (the entry's size stays a multiple of 8).
    pub reserved: u32,
}

impl ShardEntry {
    /// The line its buckets' bases are measured from.
    pub(crate) fn base_line(&self) -> crate::index::packed_keys::BaseLine {
        crate::index::packed_keys::BaseLine { slope: self.base_slope, bias: self.base_bias }
    }

    /// What its slots' codes mean, in a stream of `entry_bits`-bit entries (the layout's stored
    /// entries).
    pub(crate) fn codes(&self, entry_bits: u32) -> crate::index::packed_keys::SlotCodes {
        let (bits, fixed, unit) = (self.code_bits, self.fixed_codes, self.unit_bits);
        crate::index::packed_keys::SlotCodes { bits, fixed, entry: entry_bits, unit }
    }

    /// Bits of one bucket (`packed_keys::KeyCode::bucket_bits`).
    pub(crate) fn bucket_bits(&self) -> u64 {
        crate::index::packed_keys::bucket_bits(self.base_bits, self.tag_bits, self.code_bits)
    }

    /// Bytes of the key index (whole words).
    pub fn key_bytes(&self) -> u64 {
        crate::index::packed_keys::key_words(self.buckets, self.bucket_bits()) * 4
    }

    /// Bytes of the key index and the words (the block without its padding).
    pub(crate) fn len(&self) -> u64 {
        self.key_bytes() + self.words * 4
    }

    /// `Self::len`, or `None` where a damaged entry's sizes overflow.
    pub fn len_checked(&self) -> Option<u64> {
        let key_words = crate::index::packed_keys::key_words_checked(self.buckets, self.bucket_bits())?;
        key_words.checked_mul(4)?.checked_add(self.words.checked_mul(4)?)
    }

    /// Where the next shard's block starts.
    pub(crate) fn next_offset(&self) -> u64 {
        (self.offset + self.len()).div_ceil(SHARD_ALIGN) * SHARD_ALIGN
    }
}

/// The shard data section's checksum: xxh3-64 of the shards' checksums in order.
pub fn shard_data_checksum(entries: &[ShardEntry]) -> u64 {
    let sums: Vec<u8> = entries.iter().flat_map(|e| e.checksum.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64(&sums)
}

/// A shard's checksum: xxh3-64 of its slots' bytes, then its words' bytes.
pub fn shard_checksum(slots: &[u8], words: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(slots);
    h.update(words);
    h.digest()
}

/// Errors reading or writing an index. Every one names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    #[error("{path}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a kmerdb index (its first bytes are not the kmerdb magic)")]
    NotAnIndex { path: PathBuf },
    #[error("{path} is a folder, not a kmerdb index (a file made by `kmerdb build -d FILE`){kraken2}")]
    Folder { path: PathBuf, kraken2: &'static str },
    #[error(
        "{path} is a kmerdb index of format version {found}, but this kmerdb reads version {supported}; rebuild it with this version"
    )]
    FormatVersion { path: PathBuf, found: u32, supported: u32 },
    #[error(
        "{path} is a kmerdb index of format version {found}, made by a newer kmerdb than this one (which reads version {supported}): upgrade kmerdb"
    )]
    NewerFormat { path: PathBuf, found: u32, supported: u32 },
    #[error(
        "{path} sets preamble flags {flags:#010x}, which this kmerdb does not know: it was made by a newer kmerdb (upgrade kmerdb) or is damaged"
    )]
    UnknownFlags { path: PathBuf, flags: u32 },
    #[error(
        "{path} is {kind}, not an index file: an index is a file made by `kmerdb build -d FILE`, which kmerdb maps"
    )]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("{path} is truncated: {what} needs {needed} bytes but the file has {len}")]
    Truncated { path: PathBuf, what: String, needed: u64, len: u64 },
    #[error("{path} is corrupted: the checksum of its {what} does not match (rebuild or re-copy the index)")]
    Checksum { path: PathBuf, what: String },
    #[error("{path} is corrupted: {what}")]
    Corrupt { path: PathBuf, what: String },
    #[error(
        "{path} uses k-mer hash function {found}, which this kmerdb does not read (it reads {supported}); rebuild it with this version"
    )]
    UnsupportedHash { path: PathBuf, found: u32, supported: u32 },
    #[error(
        "{path} uses a key index of {found}, which this kmerdb does not read (it reads {supported}); rebuild it with this version"
    )]
    UnsupportedKeyIndex { path: PathBuf, found: KeyIndexParams, supported: KeyIndexParams },
    #[error("{path}: cannot encode the {what}")]
    Encode { path: PathBuf, what: &'static str, source: bincode::error::EncodeError },
    #[error("{path}")]
    ShardOverflow { path: PathBuf, source: crate::index::locations::ShardOverflow },
}

/// A bincode decoding error in words: bincode's own `Display` prints its `Debug` form
/// (`UnexpectedEnd { additional: 3 }`), which no message of kmerdb's may show.
pub fn decode_error_text(e: &bincode::error::DecodeError) -> String {
    use bincode::error::DecodeError as E;
    match e {
        E::UnexpectedEnd { additional } => format!("the data ends {additional} bytes early"),
        E::LimitExceeded => "a length is larger than any this format allows".into(),
        E::UnexpectedVariant { found, .. } => format!("an unknown variant ({found})"),
        E::Utf8 { .. } => "a text field is not UTF-8".into(),
        E::InvalidBooleanValue(b) => format!("a true/false field holds {b}"),
        E::OutsideUsizeRange(n) => format!("a length ({n}) larger than this machine addresses"),
        E::Io { inner, .. } => format!("cannot read it: {inner}"),
        E::Other(text) => (*text).into(),
        E::OtherString(text) => text.clone(),
        _ => "a field holds a value that is not allowed".into(),
    }
}

pub(crate) fn align_up(x: u64) -> u64 {
    x.div_ceil(SECTION_ALIGN) * SECTION_ALIGN
}

/// `data` with the checksums of its header and sections recomputed (where the preamble and the
/// header can be read at all), for tests and fuzz targets that damage an index on purpose.
#[doc(hidden)]
pub fn fix_checksums(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let Some(len) = out.get(16..24).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))) else {
        return out;
    };
    let Some(end) = (PREAMBLE_LEN as u64).checked_add(len).filter(|&e| e <= out.len() as u64) else {
        return out;
    };
    let end = end as usize;
    let decoded: Result<(Header, usize), _> =
        bincode::serde::decode_from_slice(&out[PREAMBLE_LEN..end], bincode_config());
    if let Ok((mut header, used)) = decoded {
        let range_of =
            |s: &SectionEntry| usize::try_from(s.offset).ok().and_then(|o| Some(o..o.checked_add(s.len as usize)?));
        // Format 3: each shard's block has its checksum in the shard table, and the shard data
        // section's checksum is that of the shards' checksums.
        let data = header.section(SectionKind::ShardData).and_then(range_of);
        let table = header.section(SectionKind::Shards).and_then(range_of).filter(|r| r.end <= out.len());
        let mut shard_sums = None;
        if let (Some(data), Some(table)) = (data, table) {
            if table.len() % std::mem::size_of::<ShardEntry>() == 0 {
                let mut entries: Vec<ShardEntry> = bytemuck::pod_collect_to_vec(&out[table.clone()]);
                for e in &mut entries {
                    let block = usize::try_from(e.offset)
                        .ok()
                        .and_then(|o| data.start.checked_add(o))
                        .and_then(|start| Some(start..start.checked_add(usize::try_from(e.len_checked()?).ok()?)?));
                    if let Some(bytes) = block.and_then(|r| out.get(r)) {
                        e.checksum = shard_checksum(bytes, &[]);
                    }
                }
                out[table].copy_from_slice(bytemuck::cast_slice(&entries));
                shard_sums = Some(shard_data_checksum(&entries));
            }
        }
        for s in &mut header.sections {
            if s.kind == SectionKind::ShardData {
                if let Some(sum) = shard_sums {
                    s.checksum = sum;
                }
            } else if let Some(bytes) = range_of(s).and_then(|r| out.get(r)) {
                s.checksum = xxhash_rust::xxh3::xxh3_64(bytes);
            }
        }
        if let Ok(bytes) = bincode::serde::encode_to_vec(&header, bincode_config()) {
            if bytes.len() == used {
                out[PREAMBLE_LEN..PREAMBLE_LEN + used].copy_from_slice(&bytes);
            }
        }
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&out[PREAMBLE_LEN..end]);
    out[24..32].copy_from_slice(&sum.to_le_bytes());
    out
}
