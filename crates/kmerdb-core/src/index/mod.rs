//! The persisted index: what `kmerdb build` writes and `kmerdb classify` memory-maps.
//!
//! The index maps each feature (a k-mer hash kept in some window's sketch) to the sorted list of
//! its locations (target, window). Its parts:
//! - [`format`](mod@format): the file layout, header and errors; the one place that defines the bytes;
//! - [`locations`]: how locations are packed and how a feature's list is stored;
//! - [`bcht`]: each shard's static bucketed cuckoo key index, feature → list, as it is built;
//! - [`packed_keys`]: the key index as it is stored, each slot in the bits it needs;
//! - [`stored_shard`]: a shard's lists laid out in slot order, so that slots need no offsets;
//! - [`clade_lists`]: the clade features' locations, for `kmerdb update`;
//! - [`write`](mod@write): the atomic writer; [`Index`] (here): the memory-mapped reader.
//!
//! Opening an index builds nothing: the key index and the location words are used in place from
//! the mapped file. Only the target list and the small pruned taxonomy are decoded.
//!
//! What lookups rely on is checked once, at open: the header's parameters, the sections' bounds
//! and alignment, the shard table, every target's taxon. Positions inside the location words are
//! checked as a list is decoded ([`LocationList::decode`]), so an index whose large sections are
//! damaged and not verified (`Verify::Metadata`) gives wrong answers, never a read outside the
//! file. The fuzz targets `index_open` and `index_open_fixed` (`src/fuzzing.rs`) hold it to that.

pub mod bcht;
pub mod clade_lists;
pub mod condensed;
pub mod format;
pub mod locations;
pub mod packed_keys;
pub mod protein_table;
pub mod stored_shard;
pub mod write;

pub use format::{Header, IndexError, SectionKind, TargetInfo};
pub use locations::{GlobalWindows, ListRef, LocationLayout, LocationList};
pub use write::{IndexFile, IndexWriter, ShardData, write_index};

use crate::mapped::Mapped;
use crate::sketch::Feature;
use crate::taxonomy::{Taxon, TaxonTree};
use format::{FORMAT_VERSION, MAGIC, PREAMBLE_LEN, SHARD_ALIGN, SectionEntry, ShardEntry, bincode_config};
use packed_keys::{KeyCode, PackedKeys};
use std::path::{Path, PathBuf};

/// How much of the file to check against its checksums when opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Every section: reads the whole file once (xxh3 runs at several GB/s on each core, shards in
    /// parallel; I/O dominates).
    All,
    /// The header and the small metadata sections only.
    Metadata,
}

/// An opened, memory-mapped index.
pub struct Index {
    path: PathBuf,
    /// The file `mmap` maps, for reads that should not fault the mapping's pages in
    /// ([`Index::read_shard_data`]).
    file: std::fs::File,
    mmap: Mapped,
    header: Header,
    shards: Vec<ShardEntry>,
    targets: Vec<TargetInfo>,
    /// The targets' global window numbers, which stored lists hold (format 11).
    windows: GlobalWindows,
    taxonomy: TaxonTree,
    /// Absolute offset of the shard data section.
    data_at: usize,
    /// How each shard's key index is packed (from the shard table, checked at open).
    key_codes: Vec<KeyCode>,
    /// Where each shard's block lies in the file (from the shard table, checked at open).
    blocks: Vec<std::ops::Range<usize>>,
}

impl Index {
    pub fn open(path: &Path, verify: Verify) -> Result<Self, IndexError> {
        let p = || path.to_path_buf();
        if path.is_dir() {
            let kraken2 = if path.join("hash.k2d").is_file() {
                "; it holds a Kraken 2 database (hash.k2d), which kmerdb does not read: build a kmerdb index from the same genomes"
            } else {
                ""
            };
            return Err(IndexError::Folder { path: p(), kraken2 });
        }
        // Looked at before it is opened: opening a named pipe waits for a writer, and a device
        // cannot be mapped ("No such device").
        if let Ok(m) = std::fs::metadata(path)
            && !m.is_file()
        {
            let kind = crate::replacing::special_kind(m.file_type()).unwrap_or("not a regular file");
            return Err(IndexError::NotAFile { path: p(), kind });
        }
        let file = std::fs::File::open(path).map_err(|source| IndexError::Io { path: p(), source })?;
        // kmerdb never writes an index in place (it writes a new file and renames it), so the mapped
        // bytes do not change under a run unless another program rewrites the file: that raises
        // SIGBUS, which `mapped` turns into an error naming the index.
        let mmap = Mapped::map(&file, path, crate::mapped::Kind::Index)
            .map_err(|source| IndexError::Io { path: p(), source })?;
        let len = mmap.len() as u64;
        if mmap.len() < MAGIC.len() || mmap[..MAGIC.len()] != MAGIC {
            return Err(IndexError::NotAnIndex { path: p() });
        }
        let truncated = |what: &str, needed: u64| IndexError::Truncated { path: p(), what: what.into(), needed, len };
        if mmap.len() < PREAMBLE_LEN {
            return Err(truncated("the preamble", PREAMBLE_LEN as u64));
        }
        let u32_at = |o: usize| u32::from_le_bytes(mmap[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(mmap[o..o + 8].try_into().unwrap());
        let version = u32_at(8);
        if version > FORMAT_VERSION {
            return Err(IndexError::NewerFormat { path: p(), found: version, supported: FORMAT_VERSION });
        }
        if version != FORMAT_VERSION {
            return Err(IndexError::FormatVersion { path: p(), found: version, supported: FORMAT_VERSION });
        }
        // No flag is defined yet: one set means a writer that knows more than this reader.
        let flags = u32_at(12);
        if flags != 0 {
            return Err(IndexError::UnknownFlags { path: p(), flags });
        }
        let header_len = u64_at(16);
        let header_end = (PREAMBLE_LEN as u64).saturating_add(header_len);
        if header_end > len {
            return Err(truncated("the header", header_end));
        }
        let header_bytes = &mmap[PREAMBLE_LEN..header_end as usize];
        if xxhash_rust::xxh3::xxh3_64(header_bytes) != u64_at(24) {
            return Err(IndexError::Checksum { path: p(), what: "header".into() });
        }
        let header: Header = decode(path, "header", header_bytes)?;
        check_header(path, &header)?;
        for kind in SectionKind::ALL {
            let s = header
                .section(kind)
                .ok_or_else(|| IndexError::Corrupt { path: p(), what: format!("no {} section", kind.name()) })?;
            let end = s.offset.saturating_add(s.len);
            if end > len {
                return Err(truncated(&format!("the {} section", kind.name()), end));
            }
            if s.offset % format::SECTION_ALIGN != 0 {
                let what = format!("its {} section starts at {}, not at a multiple of 4 KiB", kind.name(), s.offset);
                return Err(IndexError::Corrupt { path: p(), what });
            }
        }
        let layout = header.layout;
        let mut index = Index {
            path: p(),
            file,
            mmap,
            header,
            shards: Vec::new(),
            targets: Vec::new(),
            windows: GlobalWindows::new([], &layout),
            taxonomy: TaxonTree::new(vec![Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() }])
                .expect("a lone root is a valid tree"),
            data_at: 0,
            key_codes: Vec::new(),
            blocks: Vec::new(),
        };
        for kind in [SectionKind::Shards, SectionKind::Targets, SectionKind::Taxonomy, SectionKind::Provenance] {
            index.verify_section(kind)?;
        }
        index.header.provenance = decode(path, "provenance", index.section_bytes(SectionKind::Provenance))?;
        index.shards = bytemuck::pod_collect_to_vec(index.section_bytes(SectionKind::Shards));
        index.targets = decode(path, "targets", index.section_bytes(SectionKind::Targets))?;
        let taxa: Vec<Taxon> = decode(path, "taxonomy", index.section_bytes(SectionKind::Taxonomy))?;
        index.taxonomy = TaxonTree::new(taxa)
            .map_err(|e| IndexError::Corrupt { path: p(), what: format!("its taxonomy is invalid: {e}") })?;
        index.data_at = index.entry(SectionKind::ShardData).offset as usize;
        if let Some(t) = index.targets.iter().find(|t| !index.taxonomy.contains(t.taxid)) {
            let what = format!("target '{}' has taxid {}, which is not in its taxonomy", t.name, t.taxid);
            return Err(IndexError::Corrupt { path: p(), what });
        }
        index.check_targets()?;
        index.windows = GlobalWindows::new(index.targets.iter().map(|t| t.windows), &index.header.layout);
        index.check_shard_table()?;
        let hash = bcht::KeyHash::new(index.header.shard_bits);
        index.key_codes = index
            .shards
            .iter()
            .map(|s| {
                let codes = s.codes(index.header.layout.stored_bits);
                KeyCode::with_widths(hash, s.buckets, s.tag_bits, codes, s.base_bits).with_line(s.base_line())
            })
            .collect();
        let data_at = index.data_at;
        index.blocks =
            index.shards.iter().map(|s| data_at + s.offset as usize..data_at + (s.offset + s.len()) as usize).collect();
        index.check_protein(Verify::Metadata)?;
        if verify == Verify::All {
            index.verify_data()?;
        }
        Ok(index)
    }

    /// What [`Verify::All`] checks beyond [`Verify::Metadata`]: the large sections, which read the
    /// whole file once. `classify` runs it while the GPUs start and take their copy of the index
    /// (against a 50 Gbp index, 0.3 s of the 1.2 s before the first batch).
    pub fn verify_data(&self) -> Result<(), IndexError> {
        self.check_protein(Verify::All)?;
        self.verify_shards()?;
        // Its checksum and counts only: decompressing it would cost classify, which never reads
        // it, a second or more on a large index (`update` decodes it whole).
        self.check_clade_lists()
    }

    fn entry(&self, kind: SectionKind) -> &SectionEntry {
        self.header.section(kind).expect("sections were checked when opening")
    }

    /// The raw bytes of a section, as stored.
    pub(crate) fn section_bytes(&self, kind: SectionKind) -> &[u8] {
        let s = self.entry(kind);
        &self.mmap[s.offset as usize..(s.offset + s.len) as usize]
    }

    fn verify_section(&self, kind: SectionKind) -> Result<(), IndexError> {
        if xxhash_rust::xxh3::xxh3_64(self.section_bytes(kind)) != self.entry(kind).checksum {
            return Err(IndexError::Checksum { path: self.path.clone(), what: format!("{} section", kind.name()) });
        }
        Ok(())
    }

    /// Checks every section against its checksum.
    pub fn verify_all(&self) -> Result<(), IndexError> {
        for kind in [SectionKind::Shards, SectionKind::Targets, SectionKind::Taxonomy, SectionKind::Provenance] {
            self.verify_section(kind)?;
        }
        self.check_clade_lists()?;
        self.check_protein(Verify::All)?;
        self.verify_shards()
    }

    /// The amino-acid table of an index built with `--protein`.
    pub fn protein(&self) -> Option<protein_table::ProteinTable<'_>> {
        let bytes = self.section_bytes(SectionKind::Protein);
        // Its lengths were checked when the index was opened.
        (!bytes.is_empty()).then(|| protein_table::ProteinTable::parse(bytes).expect("checked"))
    }

    /// The protein section, when there is one: its lengths always (cheap; `protein` relies on
    /// them), and with `Verify::All` its checksum and order too, which read the whole section (as
    /// the shards' are read only then). Lookups in a damaged table opened without verification
    /// give wrong answers, never a crash.
    fn check_protein(&self, verify: Verify) -> Result<(), IndexError> {
        let bytes = self.section_bytes(SectionKind::Protein);
        if bytes.is_empty() {
            return Ok(());
        }
        if verify == Verify::All {
            self.verify_section(SectionKind::Protein)?;
        }
        let table = protein_table::ProteinTable::parse(bytes);
        let checked = table.and_then(|t| if verify == Verify::All { t.check(self.targets.len()) } else { Ok(()) });
        checked.map_err(|e| IndexError::Corrupt {
            path: self.path.clone(),
            what: format!("its protein section is inconsistent: {e}"),
        })
    }

    /// The clade lists section's checksum, and its counts against the header's.
    fn check_clade_lists(&self) -> Result<(), IndexError> {
        self.verify_section(SectionKind::CladeLists)?;
        let (features, locations) =
            clade_lists::CladeLists::counts(self.section_bytes(SectionKind::CladeLists)).map_err(|e| {
                IndexError::Corrupt { path: self.path.clone(), what: format!("its clade lists section: {e}") }
            })?;
        self.check_clade_counts(features, locations)
    }

    fn check_clade_counts(&self, features: u64, locations: u64) -> Result<(), IndexError> {
        let counts = &self.header.counts;
        if (features, locations) != (counts.clade_features, counts.clade_locations) {
            return Err(IndexError::Corrupt {
                path: self.path.clone(),
                what: format!(
                    "its clade lists section holds {features} features and {locations} locations, its header says {} and {}",
                    counts.clade_features, counts.clade_locations
                ),
            });
        }
        Ok(())
    }

    /// The clade features (over the location cap) with all their locations, checked against the
    /// section's checksum and the header's counts. Classification does not need them: opening an
    /// index checks only the section's checksum and counts.
    pub fn clade_lists(&self) -> Result<clade_lists::CladeLists, IndexError> {
        self.check_clade_lists()?;
        let corrupt = |what: String| IndexError::Corrupt { path: self.path.clone(), what };
        let lists = clade_lists::CladeLists::decode(self.section_bytes(SectionKind::CladeLists))
            .map_err(|e| corrupt(format!("its clade lists section is inconsistent: {e}")))?;
        // What it holds is what it says it holds (`decode` checks that), which is the header's.
        Ok(lists)
    }

    /// Checks every shard's block against its checksum, shards in parallel, and the shard data
    /// section's checksum (of the shards' checksums).
    fn verify_shards(&self) -> Result<(), IndexError> {
        use rayon::prelude::*;
        let bad = |what: String| IndexError::Checksum { path: self.path.clone(), what };
        if format::shard_data_checksum(&self.shards) != self.entry(SectionKind::ShardData).checksum {
            return Err(bad("shard table's checksums".into()));
        }
        (0..self.shards.len()).into_par_iter().try_for_each(|s| {
            if format::shard_checksum(bytemuck::cast_slice(self.shard_block(s)), &[]) != self.shards[s].checksum {
                return Err(bad(format!("shard {s}")));
            }
            Ok(())
        })
    }

    /// The targets must be the ones the location layout numbers: as many as its target bits
    /// count, none longer than its window bits, their windows the header's (lists number them).
    fn check_targets(&self) -> Result<(), IndexError> {
        let corrupt = |what: String| IndexError::Corrupt { path: self.path.clone(), what };
        let l = &self.header.layout;
        if self.targets.len() as u64 > 1u64 << l.target_bits {
            return Err(corrupt(format!("{} targets for {} target bits", self.targets.len(), l.target_bits)));
        }
        if let Some(t) = self.targets.iter().find(|t| t.windows > 1u64 << l.window_bits) {
            return Err(corrupt(format!(
                "target '{}' has {} windows, more than {} window bits number",
                t.name, t.windows, l.window_bits
            )));
        }
        let windows = self.targets.iter().map(|t| t.windows).fold(0u64, u64::saturating_add);
        if windows != self.header.counts.windows {
            return Err(corrupt(format!(
                "its targets have {windows} windows, its header says {}",
                self.header.counts.windows
            )));
        }
        Ok(())
    }

    /// The shard table must lay the blocks out one after the other, each at the 128-byte boundary
    /// after the one before, exactly filling the shard data section: a lookup never reads outside
    /// it, and the layout is the one every build writes.
    fn check_shard_table(&self) -> Result<(), IndexError> {
        let corrupt = |what: String| IndexError::Corrupt { path: self.path.clone(), what };
        if self.shards.len() != self.header.shard_count() {
            return Err(corrupt(format!(
                "{} shards listed, {} expected",
                self.shards.len(),
                self.header.shard_count()
            )));
        }
        let mut next = 0u64;
        let hash = bcht::KeyHash::new(self.header.shard_bits);
        for (i, s) in self.shards.iter().enumerate() {
            // The fields a lookup reads must be the ones the builder wrote, and the stream's
            // padding must follow the key index (`packed_keys`).
            let widths = s.tag_bits == packed_keys::tag_bits(hash, s.buckets)
                && s.codes(self.header.layout.stored_bits).valid()
                && s.reserved == 0
                && (1..=32).contains(&s.base_bits)
                && s.words >= locations::PAD_WORDS as u64;
            if !widths {
                return Err(corrupt(format!(
                    "the shard table is inconsistent at shard {i}: slots this reader cannot read"
                )));
            }
            if s.offset != next
                || s.offset % SHARD_ALIGN != 0
                || s.len_checked().and_then(|l| l.checked_add(s.offset)).is_none()
            {
                return Err(corrupt(format!("the shard table is inconsistent at shard {i}")));
            }
            next = s.next_offset();
        }
        if next != self.entry(SectionKind::ShardData).len {
            return Err(corrupt("the shard table does not match the shard data's size".into()));
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn file_size(&self) -> u64 {
        self.mmap.len() as u64
    }

    /// The share of the index's pages in memory (the page cache), 0 to 1: what a run can read
    /// without the disk.
    pub fn resident_fraction(&self) -> f64 {
        self.mmap.resident_fraction()
    }

    pub fn targets(&self) -> &[TargetInfo] {
        &self.targets
    }

    pub fn taxonomy(&self) -> &TaxonTree {
        &self.taxonomy
    }

    pub fn layout(&self) -> &LocationLayout {
        &self.header.layout
    }

    /// The targets' global window numbers, in which stored lists hold locations.
    pub fn windows(&self) -> &GlobalWindows {
        &self.windows
    }

    #[inline]
    pub fn shard_of(&self, feature: Feature) -> usize {
        format::shard_of(feature, self.header.shard_bits)
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Where a shard's block lies in the shard data, with its sizes.
    pub fn shard_entry(&self, shard: usize) -> &ShardEntry {
        &self.shards[shard]
    }

    /// The shard data section (every shard's block; see [`Index::shard_entry`]).
    pub fn shard_data(&self) -> &[u8] {
        self.section_bytes(SectionKind::ShardData)
    }

    /// Reads `into.len()` bytes of the shard data from its byte `at` by `pread`, the bytes
    /// [`Index::shard_data`] maps: a copy of the whole index (to a GPU) that went through the
    /// mapping would map every page, and unmapping 20 GB of pages then takes most of a second.
    pub fn read_shard_data(&self, at: usize, into: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let s = self.entry(SectionKind::ShardData);
        let in_range = at.checked_add(into.len()).is_some_and(|end| end as u64 <= s.len);
        if !in_range {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bytes {at}.. (+{}) are past the shard data's {} bytes", into.len(), s.len),
            ));
        }
        self.file.read_exact_at(into, s.offset + at as u64)
    }

    /// A shard's block (key index and words) as words.
    #[inline]
    fn shard_block(&self, shard: usize) -> &[u32] {
        bytemuck::cast_slice(&self.mmap[self.blocks[shard].clone()])
    }

    /// A shard's key index, read in place.
    #[inline]
    pub fn shard_keys(&self, shard: usize) -> PackedKeys<'_> {
        PackedKeys::new(self.shard_block(shard), self.key_codes[shard], shard)
    }

    /// A shard's location words.
    pub(crate) fn shard_words(&self, shard: usize) -> &[u32] {
        let s = &self.shards[shard];
        &self.shard_block(shard)[(s.key_bytes() / 4) as usize..]
    }

    /// Asks the CPU to start loading the first bucket `feature` would be looked up in, so that
    /// many lookups can wait for memory at once.
    #[inline(always)]
    pub fn prefetch(&self, feature: Feature) {
        self.prefetch_bucket(feature, 0);
    }

    /// Like [`Index::prefetch`], for `feature`'s `j`-th candidate bucket (see [`Index::probe`]).
    #[inline]
    pub fn prefetch_bucket(&self, feature: Feature, j: usize) {
        let Some(ends) = self.shard_keys(self.shard_of(feature)).bucket_ends(feature, j) else {
            return;
        };
        // Tags first, values last: the bucket's one or two cache lines.
        ends.into_iter().for_each(prefetch_word);
    }

    /// What `feature`'s `j`-th candidate bucket says of it (`packed_keys::PackedKeys::probe`):
    /// probing buckets 0, 1, ... until one is not `Full` gives [`Index::lookup_value`]'s answer.
    #[inline]
    pub fn probe(&self, feature: Feature, j: usize) -> packed_keys::Probe {
        self.shard_keys(self.shard_of(feature)).probe(feature, j)
    }

    /// Where `feature`'s list is: its shard and the list's place, if the index holds it.
    #[inline]
    pub fn lookup_value(&self, feature: Feature) -> Option<(usize, ListRef)> {
        let shard = self.shard_of(feature);
        self.shard_keys(shard).lookup(feature).map(|v| (shard, v))
    }

    /// The list at `list` of shard `shard`.
    #[inline]
    pub fn list(&self, shard: usize, list: ListRef) -> LocationList<'_> {
        LocationList::at(list, self.shard_words(shard), &self.header.layout, &self.windows)
    }

    /// Like [`Index::prefetch`], for the start of the list at `list`.
    #[inline]
    pub fn prefetch_list(&self, shard: usize, list: ListRef) {
        let words = self.shard_words(shard);
        let w = (list.start() / 32) as usize;
        if let Some(word) = words.get(w) {
            prefetch_word(word);
        }
    }

    /// The locations of `feature`, if the index holds it.
    #[inline]
    pub fn lookup(&self, feature: Feature) -> Option<LocationList<'_>> {
        let (shard, list) = self.lookup_value(feature)?;
        Some(self.list(shard, list))
    }
}

/// Asks the CPU to start loading the cache line of `word` (a hint: it never faults).
#[inline(always)]
fn prefetch_word(word: &u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint that never faults, and `word` is a live reference.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((word as *const u32).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = word;
}

/// What the reader assumes of a header, checked once at open so that lookups need not: the one
/// hash function and key-index shape this reader implements, sketch parameters a build accepts,
/// shards that a feature's bits can number, and a location layout whose fields fit its entries.
fn check_header(path: &Path, h: &Header) -> Result<(), IndexError> {
    let corrupt = |what: String| IndexError::Corrupt { path: path.to_path_buf(), what };
    if h.hash_function != crate::sketch::HASH_FUNCTION_ID {
        let (found, supported) = (h.hash_function, crate::sketch::HASH_FUNCTION_ID);
        return Err(IndexError::UnsupportedHash { path: path.to_path_buf(), found, supported });
    }
    let supported = format::KeyIndexParams {
        bucket_slots: bcht::BUCKET_SLOTS as u32,
        hash_functions: bcht::HASH_FUNCTIONS as u32,
        seeds: bcht::BUCKET_SEEDS,
    };
    if h.key_index != supported {
        return Err(IndexError::UnsupportedKeyIndex { path: path.to_path_buf(), found: h.key_index, supported });
    }
    let p = h.sketch;
    if let Err(e) = crate::sketch::SketchParams::new(p.k, p.window, Some(p.stride), p.sketch_size, p.hash_seed) {
        return Err(corrupt(format!("its sketch parameters are invalid: {e}")));
    }
    if h.shard_bits > 31 {
        return Err(corrupt(format!("{} shard bits, but features have 32 and a shard's keys need one", h.shard_bits)));
    }
    let l = h.layout;
    if l.target_bits == 0 || l.target_bits > 32 || l.window_bits == 0 || l.window_bits > 32 {
        return Err(corrupt(format!("locations of {} target and {} window bits", l.target_bits, l.window_bits)));
    }
    if l.entry_bits < l.bits() || l.entry_bits > 64 {
        return Err(corrupt(format!("{}-bit list entries for {}-bit locations", l.entry_bits, l.bits())));
    }
    let windows = h.counts.windows;
    if l.stored_bits < locations::bits_for(windows) || l.stored_bits > 64 {
        return Err(corrupt(format!("{}-bit stored list entries for {windows} windows", l.stored_bits)));
    }
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<T, IndexError> {
    bincode::serde::decode_from_slice(bytes, bincode_config()).map(|(v, _)| v).map_err(|e| IndexError::Corrupt {
        path: path.to_path_buf(),
        what: format!("cannot decode its {what}: {}", format::decode_error_text(&e)),
    })
}

/// Damaged copies of a real index, for tests here and in the stages that read an index (the
/// feature `test-helpers`, which the `kmerdb` crate's tests turn on).
#[cfg(any(test, feature = "test-helpers"))]
#[doc(hidden)]
pub mod test_index {
    use super::*;
    use crate::index::format::fix_checksums;

    /// The fuzz targets' seed index (`fuzz/make_corpus.sh`): two small genomes with the bundled
    /// taxonomy, default parameters.
    pub fn seed() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/index_open/tiny.db")).expect("seed index")
    }

    /// Opens `bytes` as an index file, with its checksums made to match first.
    pub fn open_fixed(bytes: &[u8], verify: Verify) -> Result<Index, IndexError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("damaged.db");
        std::fs::write(&path, fix_checksums(bytes)).expect("write");
        Index::open(&path, verify)
    }

    /// `bytes` with its header changed by `f` (which must keep the header's length).
    pub fn with_header(bytes: &[u8], f: impl FnOnce(&mut Header)) -> Vec<u8> {
        let (mut header, used): (Header, usize) =
            bincode::serde::decode_from_slice(&bytes[PREAMBLE_LEN..], bincode_config()).expect("header");
        f(&mut header);
        let encoded = bincode::serde::encode_to_vec(&header, bincode_config()).expect("encode");
        assert_eq!(encoded.len(), used, "the change keeps the header's length");
        let mut out = bytes.to_vec();
        out[PREAMBLE_LEN..PREAMBLE_LEN + used].copy_from_slice(&encoded);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::test_index::{open_fixed, seed, with_header};
    use super::*;

    /// A change to a header, for the tests that open what it makes.
    type HeaderChange = fn(&mut Header);

    /// Where a section lies in the seed index.
    fn section(bytes: &[u8], kind: SectionKind) -> std::ops::Range<usize> {
        let (header, _): (Header, usize) =
            bincode::serde::decode_from_slice(&bytes[PREAMBLE_LEN..], bincode_config()).expect("header");
        let s = header.section(kind).expect("section");
        s.offset as usize..(s.offset + s.len) as usize
    }

    fn corrupt(result: Result<Index, IndexError>) -> String {
        match result {
            Err(e @ IndexError::Corrupt { .. }) => e.to_string(),
            Err(e) => panic!("expected a corrupt index, got {e}"),
            Ok(_) => panic!("a damaged index was accepted"),
        }
    }

    #[test]
    fn the_seed_index_opens() {
        let index = open_fixed(&seed(), Verify::All).expect("open");
        assert_eq!(index.targets().len(), 2);
    }

    /// Probing features bucket by bucket (as the classifier does: `Index::probe` of bucket `j`
    /// after its prefetch) gives `lookup_value`'s answer, for every stored key and for keys the
    /// index lacks.
    #[test]
    fn bucket_by_bucket_probes_find_what_lookups_find() {
        use packed_keys::Probe;
        let index = open_fixed(&seed(), Verify::All).expect("open");
        let placed_lookup = |f: Feature| {
            for j in 0..bcht::HASH_FUNCTIONS {
                index.prefetch_bucket(f, j);
                match index.probe(f, j) {
                    Probe::Found(list) => return Some((index.shard_of(f), list)),
                    Probe::Absent => return None,
                    Probe::Full => {}
                }
            }
            None
        };
        let stored: Vec<Feature> = (0..index.shard_count())
            .flat_map(|s| index.shard_keys(s).slots().map(|slot| slot.key).collect::<Vec<_>>())
            .collect();
        assert!(!stored.is_empty());
        let mut rng = 0x9e37_79b9_u32;
        let absent = (0..20_000).map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng
        });
        for f in stored.iter().copied().chain(absent) {
            assert_eq!(placed_lookup(f), index.lookup_value(f), "feature {f}");
        }
        assert!(stored.iter().all(|&f| placed_lookup(f).is_some()));
    }

    /// The GPU's copy reads the shard data from the file: the same bytes as the mapping, from any
    /// byte, and a read past the section's end is an error, not bytes of the next section.
    #[test]
    fn shard_data_read_from_the_file_equals_the_mapping() {
        let index = open_fixed(&seed(), Verify::All).expect("open");
        let data = index.shard_data().to_vec();
        assert!(!data.is_empty());
        for at in [0, 1, data.len() / 2, data.len() - 1] {
            let mut got = vec![0u8; data.len() - at];
            index.read_shard_data(at, &mut got).expect("read");
            assert_eq!(got, data[at..], "from byte {at}");
        }
        let mut past = vec![0u8; 2];
        assert!(index.read_shard_data(data.len() - 1, &mut past).is_err());
        assert!(index.resident_fraction() > 0.0 && index.resident_fraction() <= 1.0);
    }

    /// Fuzzing (index_open_fixed): a string length of 2^62 in the header made bincode allocate
    /// that much before finding the bytes missing, and the failed allocation aborted the process.
    /// (The string, the kmerdb version, is now in the provenance section.)
    #[test]
    fn regression_huge_string_length_is_an_error_not_an_allocation() {
        let mut bytes = seed();
        let version = env!("CARGO_PKG_VERSION").as_bytes();
        let mut pattern = (version.len() as u64).to_le_bytes().to_vec();
        pattern.extend_from_slice(version);
        let at = bytes.windows(pattern.len()).position(|w| w == pattern).expect("the version string");
        bytes[at..at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
        let message = corrupt(open_fixed(&bytes, Verify::Metadata));
        assert!(message.contains("cannot decode its provenance"), "{message}");
    }

    /// Fuzzing (index_open_fixed): a target whose taxid is not in the index's taxonomy was
    /// accepted, and the classifier panicked mapping targets to taxa.
    #[test]
    fn regression_target_taxid_outside_the_taxonomy_is_corrupt() {
        let mut bytes = seed();
        let range = section(&bytes, SectionKind::Targets);
        let mut targets: Vec<TargetInfo> =
            bincode::serde::decode_from_slice(&bytes[range.clone()], bincode_config()).expect("targets").0;
        targets[1].taxid = 7;
        let encoded = bincode::serde::encode_to_vec(&targets, bincode_config()).expect("encode");
        bytes[range.start..range.start + encoded.len()].copy_from_slice(&encoded);
        let message = corrupt(open_fixed(&bytes, Verify::Metadata));
        assert!(message.ends_with("target 'NC_004830.2' has taxid 7, which is not in its taxonomy"), "{message}");
    }

    /// Fuzzing (index_open_fixed): sketch parameters no build accepts (here a stride past the
    /// window) were used as they were, and sketching a read sliced past its end.
    #[test]
    fn regression_invalid_sketch_parameters_are_corrupt() {
        let cases: [(&str, HeaderChange); 4] = [
            ("the stride must be between 1 and window - k + 1", |h| h.sketch.stride = h.sketch.window + 5),
            ("k must be between 1 and 32, got 0", |h| h.sketch.k = 0),
            ("k must be between 1 and 32, got 33", |h| h.sketch.k = 33),
            ("the sketch size must be between 1 and 64, got 0", |h| h.sketch.sketch_size = 0),
        ];
        for (expected, change) in cases {
            let message = corrupt(open_fixed(&with_header(&seed(), change), Verify::Metadata));
            assert!(message.contains("its sketch parameters are invalid") && message.contains(expected), "{message}");
        }
    }

    /// Found while validating the header for the cases above (review, not a fuzzer crash): a
    /// location layout whose entries cannot hold its locations, or whose shifts pass 64 bits,
    /// made list decoding divide by zero or shift out of range.
    #[test]
    fn regression_impossible_location_layout_is_corrupt() {
        let cases: [(&str, HeaderChange); 4] = [
            ("0-bit list entries", |h| h.layout.entry_bits = 0),
            ("65-bit list entries", |h| h.layout.entry_bits = 65),
            ("locations of 7 target and 64 window bits", |h| (h.layout.target_bits, h.layout.window_bits) = (7, 64)),
            ("locations of 0 target", |h| h.layout.target_bits = 0),
        ];
        for (expected, change) in cases {
            let message = corrupt(open_fixed(&with_header(&seed(), change), Verify::Metadata));
            assert!(message.contains(expected), "{message}");
        }
    }

    /// Review: 64 or more shard bits overflowed the shard count's shift.
    #[test]
    fn regression_too_many_shard_bits_is_corrupt() {
        let message = corrupt(open_fixed(&with_header(&seed(), |h| h.shard_bits = 64), Verify::Metadata));
        assert!(message.ends_with("64 shard bits, but features have 32 and a shard's keys need one"), "{message}");
    }

    /// Review: a section at an offset that is not a multiple of 4 (here 4 KiB + 2) made casting
    /// the mapped bytes to slots or words panic on misalignment.
    #[test]
    fn regression_misaligned_section_is_corrupt() {
        let bytes = with_header(&seed(), |h| {
            let data = h.sections.iter_mut().find(|s| s.kind == SectionKind::ShardData).expect("shard data");
            data.offset += 2;
        });
        let message = corrupt(open_fixed(&bytes, Verify::Metadata));
        assert!(message.contains("its shard data section starts at") && message.contains("not at a multiple of 4 KiB"));
    }

    /// Review: a section whose offset and length overflow 64 bits overflowed the size in the
    /// truncation error (a wrapped `needed` in release builds).
    #[test]
    fn regression_section_end_past_u64_is_truncated_without_overflow() {
        let bytes = with_header(&seed(), |h| {
            let taxa = h.sections.iter_mut().find(|s| s.kind == SectionKind::Taxonomy).expect("taxonomy");
            (taxa.offset, taxa.len) = (u64::MAX - 4095, 8192);
        });
        match open_fixed(&bytes, Verify::Metadata) {
            Err(IndexError::Truncated { needed, .. }) => assert_eq!(needed, u64::MAX),
            other => panic!("expected a truncated index, got {:?}", other.err()),
        }
    }

    /// Review: shard sizes that overflow 64 bits (times 128 bytes a bucket) must not wrap around to
    /// a size that passes the shard table check.
    #[test]
    fn regression_shard_sizes_that_wrap_are_corrupt() {
        let mut bytes = seed();
        let range = section(&bytes, SectionKind::Shards);
        let mut table: Vec<ShardEntry> = bytemuck::pod_collect_to_vec(&bytes[range.clone()]);
        table[0].buckets += 1 << 57;
        // With the tag width those buckets have, so that the sizes are what is checked.
        table[0].tag_bits = packed_keys::tag_bits(bcht::KeyHash::new(6), table[0].buckets);
        bytes[range].copy_from_slice(bytemuck::cast_slice(&table));
        let message = corrupt(open_fixed(&bytes, Verify::All));
        assert!(message.contains("the shard table"), "{message}");
    }

    /// Review: the hash function id and the key index's shape were never compared with what this
    /// reader implements, so an index of another hash function would give wrong answers.
    #[test]
    fn regression_other_hash_function_or_key_index_is_unsupported() {
        let cases: [(&str, HeaderChange); 2] = [
            ("uses k-mer hash function 2", |h| h.hash_function = 2),
            ("uses a key index of buckets of 8 slots", |h| h.key_index.bucket_slots = 8),
        ];
        for (expected, change) in cases {
            match open_fixed(&with_header(&seed(), change), Verify::Metadata) {
                Err(e @ (IndexError::UnsupportedHash { .. } | IndexError::UnsupportedKeyIndex { .. })) => {
                    assert!(e.to_string().contains(expected), "{e}")
                }
                other => panic!("expected an unsupported index, got {:?}", other.err()),
            }
        }
    }

    /// Fuzzing (index_open_fixed, after format 8): opening with `Verify::All` checks the clade
    /// lists' checksum and counts, not their code (classify never reads them, and decoding a large
    /// index's took a second), so `verify_all` must check the same; `update`, which decodes them,
    /// finds a frame that does not decode and says so.
    #[test]
    fn regression_clade_lists_are_decoded_by_update_only() {
        let mut bytes = seed();
        let range = section(&bytes, SectionKind::CladeLists);
        let last = range.end - 1;
        bytes[last] ^= 0xff;
        let index = open_fixed(&bytes, Verify::All).expect("checksum and counts hold");
        index.verify_all().expect("verify_all checks what opening checks");
        match index.clade_lists() {
            Err(e @ IndexError::Corrupt { .. }) => assert!(e.to_string().contains("clade lists"), "{e}"),
            other => panic!("a frame that does not decode was accepted: {:?}", other.map(|l| l.len())),
        }
    }
}
