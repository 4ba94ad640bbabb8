//! Writing an index file (format in `index::format`): a temporary file beside the destination,
//! shard blocks written one by one as the build lays them out, the small sections and the header
//! last, then an atomic rename. An interrupted build leaves no index behind and an older index at
//! the same path intact.
//!
//! The temporary file ([`IndexFile`]) is made when the build starts, so that a folder that cannot
//! be written fails the build before any work, and so that SIGINT/SIGTERM find it to remove
//! (`temp_files`). [`IndexWriter`] places each shard at an offset that depends only on the shards
//! before it (`pwrite`), so a GPU build writes shards while it condenses later ones.

use crate::index::bcht::Slot;
use crate::index::clade_lists::{CladeLists, SectionEncoder};
use crate::index::format::{
    FORMAT_VERSION, Header, IndexError, MAGIC, PREAMBLE_LEN, SectionEntry, SectionKind, ShardEntry, TargetInfo,
    align_up, bincode_config, shard_checksum, shard_data_checksum,
};
use crate::index::stored_shard::StoredShard;
use crate::taxonomy::Taxon;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One shard as built: its key index (whole keys and values, `index::bcht`; the writer packs it)
/// and its location words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardData {
    pub slots: Vec<Slot>,
    pub words: Vec<u32>,
}

/// The index being written: a registered temporary file beside its destination.
#[derive(Debug)]
pub struct IndexFile {
    temp: crate::temp_files::TempFile,
    path: PathBuf,
    /// A lock on the file at `path` that the run holds since it read it (`update` over its own
    /// index): the rename is refused if that file changed meanwhile.
    held: Option<crate::replacing::Lock>,
}

impl IndexFile {
    /// Creates the temporary file for the index at `path` (removing what interrupted builds of
    /// `path` left behind). Errors name the folder.
    pub fn create(path: &Path) -> Result<Self, IndexError> {
        let dir = crate::temp_files::folder_of(path);
        let temp = crate::temp_files::create_beside(path).map_err(|source| IndexError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(source.kind(), format!("directory is not writable ({source})")),
        })?;
        Ok(Self { temp, path: path.to_path_buf(), held: None })
    }

    /// Replaces the index at the end only if the file `lock` holds is still there, unchanged.
    pub fn holding(mut self, lock: Option<crate::replacing::Lock>) -> Self {
        self.held = lock;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes an index shard by shard: [`IndexWriter::add_shard`] for shards 0, 1, ... in order (from
/// any one thread), then [`IndexWriter::finish`].
#[derive(Debug)]
pub struct IndexWriter {
    file: IndexFile,
    header_len: u64,
    shard_count: usize,
    /// Absolute offsets of the shard table and of the shard data.
    table_at: u64,
    data_at: u64,
    entries: Vec<ShardEntry>,
    /// Bytes of shard data written (each block, with the padding before the next).
    data_len: u64,
    /// The shards' clade features' lists so far, in shard order, being encoded.
    clade_lists: SectionEncoder,
    /// The protein section's bytes (`protein::encode_table`), empty without one.
    protein: Vec<u8>,
    writeback: Writeback,
}

/// Threads that compress the clade lists as shards arrive (`clade_lists::SectionEncoder`).
const CLADE_LIST_THREADS: usize = 4;

/// The section entries a header has before its offsets and checksums are known: enough to fix
/// the header's encoded length (every field is fixed-width; the provenance's strings are not in it).
fn placeholder_sections() -> Vec<SectionEntry> {
    SectionKind::ALL.iter().map(|&kind| SectionEntry { kind, offset: 0, len: 0, checksum: 0 }).collect()
}

impl IndexWriter {
    /// Starts the index in `file`. `template` is the header as far as it is known (its counts,
    /// layout, provenance and sections may change; its shard count may not), which fixes where
    /// the sections go.
    pub fn new(file: IndexFile, template: &Header) -> Result<Self, IndexError> {
        let mut h = template.clone();
        h.sections = placeholder_sections();
        let header_len = encode(&file.path, "header", &h)?.len() as u64;
        let shard_count = template.shard_count();
        let table_at = align_up(PREAMBLE_LEN as u64 + header_len);
        let data_at = align_up(table_at + shard_count as u64 * std::mem::size_of::<ShardEntry>() as u64);
        let writeback = Writeback::start(file.temp.as_file());
        Ok(Self {
            writeback,
            file,
            header_len,
            shard_count,
            table_at,
            data_at,
            entries: Vec::new(),
            data_len: 0,
            // Beside the build's threads, which lay out later shards meanwhile: a few.
            clade_lists: SectionEncoder::new(rayon::current_num_threads().min(CLADE_LIST_THREADS)),
            protein: Vec::new(),
        })
    }

    fn io(&self) -> impl Fn(std::io::Error) -> IndexError + '_ {
        |source| IndexError::Io { path: self.file.path.clone(), source }
    }

    /// Shards written so far.
    pub fn shards_written(&self) -> usize {
        self.entries.len()
    }

    /// Buckets of the key indexes written so far.
    pub fn buckets_written(&self) -> u64 {
        self.entries.iter().map(|e| e.buckets).sum()
    }

    /// Sets the protein section (`protein::encode_table`'s bytes).
    pub fn set_protein(&mut self, bytes: Vec<u8>) {
        self.protein = bytes;
    }

    /// Adds the clade features' lists of the shard just written (see `index::clade_lists`).
    pub fn add_clade_lists(&mut self, lists: CladeLists) {
        self.clade_lists.append(lists);
    }

    /// Writes the next shard's block (`index::stored_shard`). `checksum` is [`shard_checksum`] of
    /// its bytes if the caller has it (computed on other threads); otherwise it is computed here.
    pub fn add_shard(&mut self, shard: &StoredShard, checksum: Option<u64>) -> Result<(), IndexError> {
        let (keys, code, words) = (shard.keys(), shard.code(), shard.words());
        assert!(self.entries.len() < self.shard_count, "more shards than the header says");
        assert!(words.len() >= crate::index::locations::PAD_WORDS, "a stream ends in its padding");
        let (slot_bytes, word_bytes): (&[u8], &[u8]) = (bytemuck::cast_slice(keys), bytemuck::cast_slice(words));
        let entry = ShardEntry {
            offset: self.data_len,
            buckets: code.buckets,
            words: words.len() as u64,
            checksum: checksum.unwrap_or_else(|| shard_checksum(slot_bytes, word_bytes)),
            tag_bits: code.tag_bits,
            code_bits: code.codes.bits,
            fixed_codes: code.codes.fixed,
            base_bits: code.base_bits,
            base_slope: code.line.slope,
            base_bias: code.line.bias,
            unit_bits: code.codes.unit,
            reserved: 0,
        };
        debug_assert_eq!(entry.checksum, shard_checksum(slot_bytes, word_bytes));
        debug_assert_eq!(entry.key_bytes(), slot_bytes.len() as u64);
        let at = self.data_at + entry.offset;
        let file = self.file.temp.as_file();
        file.write_all_at(slot_bytes, at).map_err(self.io())?;
        file.write_all_at(word_bytes, at + slot_bytes.len() as u64).map_err(self.io())?;
        self.writeback.request(at, entry.len());
        self.data_len = entry.next_offset();
        self.entries.push(entry);
        Ok(())
    }

    /// Writes the shard table, the targets, the taxonomy, the clade lists, the protein
    /// table, the provenance and `header` (its
    /// sections filled in here), renames the file into place and returns its size in bytes.
    pub fn finish(self, mut header: Header, targets: &[TargetInfo], taxa: &[Taxon]) -> Result<u64, IndexError> {
        let path = self.file.path.clone();
        let io = |source| IndexError::Io { path: path.clone(), source };
        assert_eq!(self.entries.len(), self.shard_count, "every shard is written before the index is finished");
        let clock = std::time::Instant::now();
        let targets_bytes = encode(&path, "targets", &targets)?;
        let taxa_bytes = encode(&path, "taxonomy", &taxa)?;
        let clade_bytes = self.clade_lists.finish();
        let encoded = clock.elapsed();
        let provenance_bytes = encode(&path, "provenance", &header.provenance)?;
        let table: &[u8] = bytemuck::cast_slice(&self.entries);
        let targets_at = align_up(self.data_at + self.data_len);
        let taxonomy_at = align_up(targets_at + targets_bytes.len() as u64);
        let clade_lists_at = align_up(taxonomy_at + taxa_bytes.len() as u64);
        let protein_at = align_up(clade_lists_at + clade_bytes.len() as u64);
        let provenance_at = align_up(protein_at + self.protein.len() as u64);
        let xxh3 = xxhash_rust::xxh3::xxh3_64;
        header.sections = vec![
            SectionEntry {
                kind: SectionKind::Shards,
                offset: self.table_at,
                len: table.len() as u64,
                checksum: xxh3(table),
            },
            SectionEntry {
                kind: SectionKind::ShardData,
                offset: self.data_at,
                len: self.data_len,
                checksum: shard_data_checksum(&self.entries),
            },
            SectionEntry {
                kind: SectionKind::Targets,
                offset: targets_at,
                len: targets_bytes.len() as u64,
                checksum: xxh3(&targets_bytes),
            },
            SectionEntry {
                kind: SectionKind::Taxonomy,
                offset: taxonomy_at,
                len: taxa_bytes.len() as u64,
                checksum: xxh3(&taxa_bytes),
            },
            SectionEntry {
                kind: SectionKind::CladeLists,
                offset: clade_lists_at,
                len: clade_bytes.len() as u64,
                checksum: xxh3(&clade_bytes),
            },
            SectionEntry {
                kind: SectionKind::Protein,
                offset: protein_at,
                len: self.protein.len() as u64,
                checksum: xxh3(&self.protein),
            },
            SectionEntry {
                kind: SectionKind::Provenance,
                offset: provenance_at,
                len: provenance_bytes.len() as u64,
                checksum: xxh3(&provenance_bytes),
            },
        ];
        let header_bytes = encode(&path, "header", &header)?;
        assert_eq!(header_bytes.len() as u64, self.header_len, "the header's length changed while writing");
        let mut preamble = [0u8; PREAMBLE_LEN];
        preamble[0..8].copy_from_slice(&MAGIC);
        preamble[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        preamble[16..24].copy_from_slice(&self.header_len.to_le_bytes());
        preamble[24..32].copy_from_slice(&xxh3(&header_bytes).to_le_bytes());
        let file = self.file.temp.as_file();
        for (bytes, at) in [
            (table, self.table_at),
            (&targets_bytes[..], targets_at),
            (&taxa_bytes[..], taxonomy_at),
            (&clade_bytes[..], clade_lists_at),
            (&self.protein[..], protein_at),
            (&provenance_bytes[..], provenance_at),
            (&header_bytes[..], PREAMBLE_LEN as u64),
            (&preamble[..], 0),
        ] {
            file.write_all_at(bytes, at).map_err(io)?;
        }
        let size = file.metadata().map_err(io)?.len();
        let written = clock.elapsed();
        drop(self.writeback);
        self.file.temp.persist_under(&path, self.file.held.as_ref()).map_err(io)?;
        log::trace!(
            "index finished: sections encoded in {:.3} s (clade lists {:.2} MB), written in {:.3} s, synced and renamed in {:.3} s",
            encoded.as_secs_f64(),
            clade_bytes.len() as f64 / 1e6,
            (written - encoded).as_secs_f64(),
            (clock.elapsed() - written).as_secs_f64()
        );
        Ok(size)
    }
}

/// Starts the disk writing the shards written so far, on a thread of its own: the disk then works
/// while the build lays out later shards, and the `fsync` before the rename has only the tail
/// left. (Left to itself the kernel starts when a tenth of memory is dirty.) Not on the writer's
/// thread: asking for a range's writeback waits while the disk's queue is full, and there it
/// halved the writer's rate into the page cache (a 2-H200 host, 200 MB pieces into one ext4 file:
/// 2.0 GB/s against 3.9 GB/s without; `bench/results/HISTORY.md`).
#[derive(Debug)]
struct Writeback {
    ranges: Option<std::sync::mpsc::Sender<(u64, u64)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writeback {
    /// The thread for `file`'s writeback; without one (no descriptor or thread to spare), the
    /// ranges are left to the kernel, which changes nothing but speed.
    fn start(file: &std::fs::File) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<(u64, u64)>();
        let thread = file.try_clone().ok().and_then(|file| {
            std::thread::Builder::new()
                .name("kmerdb-writeback".into())
                .spawn(move || rx.iter().for_each(|(at, len)| start_writeback(&file, at, len)))
                .ok()
        });
        Writeback { ranges: thread.is_some().then_some(tx), thread }
    }

    /// Asks for `len` bytes at `at` to be written back.
    fn request(&self, at: u64, len: u64) {
        if let Some(ranges) = &self.ranges {
            let _ = ranges.send((at, len));
        }
    }
}

impl Drop for Writeback {
    /// Waits for the requests made: the `fsync` after it then waits for the disk alone.
    fn drop(&mut self) {
        drop(self.ranges.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Asks the kernel to start writing `len` bytes at `at` to the disk now, without waiting for it.
/// A hint: failure changes nothing but speed.
fn start_writeback(file: &std::fs::File, at: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on an open descriptor; it reads no memory of ours.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                at as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, at, len);
}

/// Writes a whole index from shards in memory (the CPU build) and returns its size in bytes.
pub fn write_index(
    file: IndexFile,
    header: Header,
    shards: &[StoredShard],
    targets: &[TargetInfo],
    taxa: &[Taxon],
    clade_lists: &CladeLists,
) -> Result<u64, IndexError> {
    let mut w = IndexWriter::new(file, &header)?;
    for s in shards {
        w.add_shard(s, None)?;
    }
    w.add_clade_lists(clade_lists.clone());
    w.finish(header, targets, taxa)
}

fn encode<T: serde::Serialize>(path: &Path, what: &'static str, value: &T) -> Result<Vec<u8>, IndexError> {
    bincode::serde::encode_to_vec(value, bincode_config()).map_err(|source| IndexError::Encode {
        path: path.to_path_buf(),
        what,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::format::{Counts, KeyIndexParams, Provenance, SHARD_ALIGN, TaxonomySource};
    use crate::index::{Index, LocationLayout, Verify};

    fn header(shard_bits: u32) -> Header {
        Header {
            sketch: crate::sketch::SketchParams::new(16, 127, None, 16, 0).unwrap(),
            hash_function: crate::sketch::HASH_FUNCTION_ID,
            max_locations_per_feature: 254,
            shard_bits,
            key_index: KeyIndexParams { bucket_slots: 16, hash_functions: 3, seeds: crate::index::bcht::BUCKET_SEEDS },
            layout: LocationLayout::uniform(10, 1000, 254, 20),
            taxonomy: TaxonomySource::PerSequence,
            collection: crate::index::format::Collection::whole(0),
            counts: Counts::default(),
            provenance: Provenance { kmerdb_version: "test".into(), created_unix: 0, command_line: vec!["x".into()] },
            sections: Vec::new(),
        }
    }

    /// Shard `s` of `1 << shard_bits` as stored: `keys` of its keys, each with a list of one to
    /// `longest` locations.
    fn shard(shard_bits: u32, s: u32, keys: u32, longest: u32) -> StoredShard {
        let layout = header(shard_bits).layout;
        let lists: Vec<(u32, Vec<u64>)> = (0..keys)
            .map(|i| ((1000 + i) << shard_bits | s, (0..i % longest + 1).map(|t| layout.pack(t, i ^ s)).collect()))
            .collect();
        let hash = crate::index::bcht::KeyHash::new(shard_bits);
        let numbering = crate::index::GlobalWindows::uniform(10, 1000, &layout);
        crate::index::stored_shard::store(
            &crate::index::stored_shard::built(&layout, hash, &lists),
            &layout,
            &numbering,
            hash,
        )
        .unwrap()
    }

    /// Shards of odd sizes (empty ones too), written one by one, read back in place: each block
    /// at a 128-byte boundary, every shard's checksum verified, a flipped byte found in its shard.
    #[test]
    fn shards_written_one_by_one_read_back_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let h = header(3);
        let shards: Vec<StoredShard> = (0..8u32).map(|s| shard(3, s, (s % 3) * 16, 1 + s * 7 % 5)).collect();
        let mut w = IndexWriter::new(IndexFile::create(&path).unwrap(), &h).unwrap();
        for s in &shards {
            w.add_shard(s, None).unwrap();
        }
        let counts = Counts { targets: 1, windows: 1, ..Default::default() };
        let mut final_header = h.clone();
        final_header.counts = counts;
        let targets = vec![TargetInfo { name: "t".into(), taxid: 2, length: 10, windows: 1 }];
        let taxa = vec![
            Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() },
            Taxon { taxid: 2, parent: 1, rank: "species".into(), name: "t".into() },
        ];
        w.finish(final_header.clone(), &targets, &taxa).unwrap();
        let index = Index::open(&path, Verify::All).unwrap();
        assert_eq!(index.header().counts.targets, 1);
        for (i, s) in shards.iter().enumerate() {
            let stored = s.packed_keys(i);
            assert_eq!(index.shard_keys(i).slots().collect::<Vec<_>>(), stored.slots().collect::<Vec<_>>());
            assert_eq!(index.shard_words(i), s.words(), "shard {i}");
            assert_eq!(index.shard_entry(i).offset % SHARD_ALIGN, 0);
        }
        // Flip a byte of shard 4's words: only a full verification sees it, and names the shard.
        let mut bytes = std::fs::read(&path).unwrap();
        let data_at = index.header().section(SectionKind::ShardData).unwrap().offset;
        let e = *index.shard_entry(4);
        bytes[(data_at + e.offset + e.key_bytes()) as usize] ^= 1;
        drop(index);
        std::fs::write(&path, &bytes).unwrap();
        assert!(Index::open(&path, Verify::Metadata).is_ok());
        let err = Index::open(&path, Verify::All).err().unwrap().to_string();
        assert!(err.contains("shard 4"), "{err}");
    }

    /// The provenance changes no section's place or bytes: an index whose command line is longer
    /// than a page (an update of many genomes) and one whose command line is short lay out every
    /// other section at the same offsets with the same bytes, and each reads its own back.
    #[test]
    fn provenance_of_any_length_moves_no_section() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, command_line: Vec<String>| {
            let path = dir.path().join(name);
            let mut h = header(2);
            h.provenance.command_line = command_line;
            h.counts.windows = 1;
            let shards: Vec<StoredShard> = (0..4).map(|s| shard(2, s, 20, 3)).collect();
            let targets = vec![TargetInfo { name: "t".into(), taxid: 1, length: 10, windows: 1 }];
            let taxa = vec![Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() }];
            let file = IndexFile::create(&path).unwrap();
            write_index(file, h, &shards, &targets, &taxa, &CladeLists::default()).unwrap();
            Index::open(&path, Verify::All).unwrap()
        };
        let long: Vec<String> = (0..200).map(|i| format!("/a/long/path/to/genome_{i:04}.fna.gz")).collect();
        let (short, long_one) = (write("short.db", vec!["x".into()]), write("long.db", long.clone()));
        assert_eq!(long_one.header().provenance.command_line, long);
        assert_eq!(short.header().provenance.command_line, ["x"]);
        let others = |i: &Index| -> Vec<(SectionEntry, Vec<u8>)> {
            let kinds = SectionKind::ALL.into_iter().filter(|&k| k != SectionKind::Provenance);
            kinds.map(|k| (*i.header().section(k).unwrap(), i.section_bytes(k).to_vec())).collect()
        };
        assert_eq!(others(&short), others(&long_one));
    }
}
