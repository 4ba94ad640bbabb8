//! The persisted index: what `kmerdb build` writes and `kmerdb classify` memory-maps.
//!
//! The index maps each feature (a k-mer hash kept in some window's sketch) to the sorted list of
//! its locations (target, window). Its parts:
//! - [`format`]: the file layout, header and errors; the one place that defines the bytes;
//! - [`locations`]: how locations are packed and how a feature's list is stored;
//! - [`bcht`]: each shard's static bucketed cuckoo key index, feature → list;
//! - [`write`]: the atomic writer; [`Index`] (here): the memory-mapped reader.
//!
//! Opening an index builds nothing: the key index and the location words are used in place from
//! the mapped file. Only the target list and the small pruned taxonomy are decoded.

pub mod bcht;
pub mod format;
pub mod locations;
pub mod write;

pub use format::{Header, IndexError, SectionKind, TargetInfo};
pub use locations::{LocationLayout, LocationList};
pub use write::{IndexFile, IndexWriter, ShardData, write_index};

use crate::sketch::Feature;
use crate::taxonomy::{Taxon, TaxonTree};
use bcht::Slot;
use format::{FORMAT_VERSION, MAGIC, PREAMBLE_LEN, SHARD_ALIGN, SectionEntry, ShardEntry, bincode_config};
use memmap2::Mmap;
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
    mmap: Mmap,
    header: Header,
    shards: Vec<ShardEntry>,
    targets: Vec<TargetInfo>,
    taxonomy: TaxonTree,
    /// Absolute offset of the shard data section.
    data_at: usize,
}

impl Index {
    pub fn open(path: &Path, verify: Verify) -> Result<Self, IndexError> {
        let p = || path.to_path_buf();
        let file = std::fs::File::open(path).map_err(|source| IndexError::Io { path: p(), source })?;
        // SAFETY: the map is read-only; kmerdb never writes an index in place (it writes a new file
        // and renames it), so the mapped bytes do not change under us unless another program
        // truncates the file, which is outside what any index reader can guard against.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|source| IndexError::Io { path: p(), source })?;
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
        if version != FORMAT_VERSION {
            return Err(IndexError::FormatVersion { path: p(), found: version, supported: FORMAT_VERSION });
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
        for kind in SectionKind::ALL {
            let s = header
                .section(kind)
                .ok_or_else(|| IndexError::Corrupt { path: p(), what: format!("no {} section", kind.name()) })?;
            if s.offset.saturating_add(s.len) > len {
                return Err(truncated(&format!("the {} section", kind.name()), s.offset.saturating_add(s.len)));
            }
            if s.offset % format::SECTION_ALIGN != 0 {
                return Err(IndexError::Corrupt {
                    path: p(),
                    what: format!("its {} section is misplaced", kind.name()),
                });
            }
        }
        let mut index = Index {
            path: p(),
            mmap,
            header,
            shards: Vec::new(),
            targets: Vec::new(),
            taxonomy: TaxonTree::new(vec![Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() }])
                .expect("a lone root is a valid tree"),
            data_at: 0,
        };
        for kind in [SectionKind::Shards, SectionKind::Targets, SectionKind::Taxonomy] {
            index.verify_section(kind)?;
        }
        index.shards = bytemuck::pod_collect_to_vec(index.section_bytes(SectionKind::Shards));
        index.targets = decode(path, "targets", index.section_bytes(SectionKind::Targets))?;
        let taxa: Vec<Taxon> = decode(path, "taxonomy", index.section_bytes(SectionKind::Taxonomy))?;
        index.taxonomy = TaxonTree::new(taxa)
            .map_err(|e| IndexError::Corrupt { path: p(), what: format!("its taxonomy is invalid: {e}") })?;
        index.data_at = index.entry(SectionKind::ShardData).offset as usize;
        index.check_shard_table()?;
        if verify == Verify::All {
            index.verify_shards()?;
        }
        Ok(index)
    }

    fn entry(&self, kind: SectionKind) -> &SectionEntry {
        self.header.section(kind).expect("sections were checked when opening")
    }

    /// The raw bytes of a section, as stored.
    pub fn section_bytes(&self, kind: SectionKind) -> &[u8] {
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
        for kind in [SectionKind::Shards, SectionKind::Targets, SectionKind::Taxonomy] {
            self.verify_section(kind)?;
        }
        self.verify_shards()
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
            let (slots, words) = (self.shard_slots(s), self.shard_words(s));
            if format::shard_checksum(bytemuck::cast_slice(slots), bytemuck::cast_slice(words))
                != self.shards[s].checksum
            {
                return Err(bad(format!("shard {s}")));
            }
            Ok(())
        })
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
        for (i, s) in self.shards.iter().enumerate() {
            let len = s.buckets.checked_mul(128).zip(s.words.checked_mul(4)).and_then(|(b, w)| b.checked_add(w));
            if s.offset != next || s.offset % SHARD_ALIGN != 0 || len.and_then(|l| l.checked_add(s.offset)).is_none() {
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

    pub fn targets(&self) -> &[TargetInfo] {
        &self.targets
    }

    pub fn taxonomy(&self) -> &TaxonTree {
        &self.taxonomy
    }

    pub fn layout(&self) -> &LocationLayout {
        &self.header.layout
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

    /// A shard's key index, whole buckets of 16 slots.
    pub fn shard_slots(&self, shard: usize) -> &[Slot] {
        let s = &self.shards[shard];
        let at = self.data_at + s.offset as usize;
        bytemuck::cast_slice(&self.mmap[at..at + s.buckets as usize * 128])
    }

    /// A shard's location words.
    pub fn shard_words(&self, shard: usize) -> &[u32] {
        let s = &self.shards[shard];
        let at = self.data_at + (s.offset + s.buckets * 128) as usize;
        bytemuck::cast_slice(&self.mmap[at..at + s.words as usize * 4])
    }

    /// Asks the CPU to start loading the first bucket `feature` would be looked up in, so that
    /// many lookups can wait for memory at once.
    #[inline]
    pub fn prefetch(&self, feature: Feature) {
        let slots = self.shard_slots(self.shard_of(feature));
        let buckets = slots.len() / bcht::BUCKET_SLOTS;
        if buckets == 0 {
            return;
        }
        // A bucket is 128 bytes: two cache lines.
        let first = bcht::bucket_of(feature, 0, buckets) * bcht::BUCKET_SLOTS;
        for slot in [&slots[first], &slots[first + bcht::BUCKET_SLOTS / 2]] {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: prefetching is a hint that never faults; the address is inside the mapped index.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T0>((slot as *const bcht::Slot).cast());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = slot;
        }
    }

    /// Where `feature`'s list is: its shard and slot value, if the index holds it.
    #[inline]
    pub fn lookup_value(&self, feature: Feature) -> Option<(usize, u32)> {
        let shard = self.shard_of(feature);
        bcht::lookup(self.shard_slots(shard), feature).map(|v| (shard, v))
    }

    /// The list a slot value points to.
    #[inline]
    pub fn list(&self, shard: usize, value: u32) -> LocationList<'_> {
        LocationList::decode(value, self.shard_words(shard), &self.header.layout)
    }

    /// Like [`Index::prefetch`], for the start of the list a slot value points to.
    #[inline]
    pub fn prefetch_list(&self, shard: usize, value: u32) {
        if value & locations::INLINE_FLAG != 0 && self.header.layout.inline_single() {
            return;
        }
        let words = self.shard_words(shard);
        let w = (value as u64 * self.header.layout.entry_bits as u64 / 32) as usize;
        if let Some(word) = words.get(w) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch hint never faults; the address is inside the mapped index.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T0>((word as *const u32).cast());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = word;
        }
    }

    /// The locations of `feature`, if the index holds it.
    #[inline]
    pub fn lookup(&self, feature: Feature) -> Option<LocationList<'_>> {
        let shard = self.shard_of(feature);
        let value = bcht::lookup(self.shard_slots(shard), feature)?;
        Some(LocationList::decode(value, self.shard_words(shard), &self.header.layout))
    }
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<T, IndexError> {
    bincode::serde::decode_from_slice(bytes, bincode_config())
        .map(|(v, _)| v)
        .map_err(|e| IndexError::Corrupt { path: path.to_path_buf(), what: format!("cannot decode its {what}: {e}") })
}
