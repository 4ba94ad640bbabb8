//! Writing an index file: sections streamed to a temporary file in the target directory, the
//! header written last, then an atomic rename. An interrupted build leaves no index behind and an
//! older index at the same path intact.
//!
//! The temporary file ([`IndexFile`]) is made when the build starts, so that a folder that cannot
//! be written fails the build before any work, and so that SIGINT/SIGTERM find it to remove
//! (`temp_files`).

use crate::index::bcht::Slot;
use crate::index::format::{
    FORMAT_VERSION, Header, IndexError, MAGIC, PREAMBLE_LEN, SectionEntry, SectionKind, ShardEntry, TargetInfo,
    align_up, bincode_config,
};
use crate::taxonomy::Taxon;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// One shard as built: its key index and its location words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardData {
    pub slots: Vec<Slot>,
    pub words: Vec<u32>,
}

/// The index being written: a registered temporary file beside its destination.
#[derive(Debug)]
pub struct IndexFile {
    temp: crate::temp_files::TempFile,
    path: std::path::PathBuf,
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
        Ok(Self { temp, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes the index into `file`, renames it into place and returns its size in bytes.
/// `header.sections` is filled in here.
pub fn write_index(
    file: IndexFile,
    mut header: Header,
    shards: &[ShardData],
    targets: &[TargetInfo],
    taxa: &[Taxon],
) -> Result<u64, IndexError> {
    let IndexFile { temp, path } = file;
    let path = path.as_path();
    let io = |source| IndexError::Io { path: path.to_path_buf(), source };
    let targets_bytes = encode(path, "targets", &targets)?;
    let taxa_bytes = encode(path, "taxonomy", &taxa)?;

    let mut table = Vec::with_capacity(shards.len());
    let (mut slots, mut words) = (0u64, 0u64);
    for s in shards {
        table.push(ShardEntry {
            first_bucket: slots / 16,
            buckets: s.slots.len() as u64 / 16,
            first_word: words,
            words: s.words.len() as u64,
        });
        slots += s.slots.len() as u64;
        words += s.words.len() as u64;
    }
    let lens = [
        (SectionKind::Shards, table.len() as u64 * 32),
        (SectionKind::Buckets, slots * 8),
        (SectionKind::Locations, words * 4),
        (SectionKind::Targets, targets_bytes.len() as u64),
        (SectionKind::Taxonomy, taxa_bytes.len() as u64),
    ];
    // Fixed-width encoding: the header's length does not depend on the offsets and checksums.
    header.sections = lens.iter().map(|&(kind, len)| SectionEntry { kind, offset: 0, len, checksum: 0 }).collect();
    let header_len = encode(path, "header", &header)?.len() as u64;
    let mut offset = align_up(PREAMBLE_LEN as u64 + header_len);
    for s in &mut header.sections {
        s.offset = offset;
        offset = align_up(offset + s.len);
    }

    let mut out = BufWriter::with_capacity(1 << 20, temp);

    let mut checksums = Vec::new();
    for section in header.sections.clone() {
        out.seek(SeekFrom::Start(section.offset)).map_err(io)?;
        let mut hasher = Xxh3::new();
        let mut put = |bytes: &[u8]| -> std::io::Result<()> {
            hasher.update(bytes);
            out.write_all(bytes)
        };
        match section.kind {
            SectionKind::Shards => put(bytemuck::cast_slice(&table)),
            SectionKind::Buckets => shards.iter().try_for_each(|s| put(bytemuck::cast_slice(&s.slots))),
            SectionKind::Locations => shards.iter().try_for_each(|s| put(bytemuck::cast_slice(&s.words))),
            SectionKind::Targets => put(&targets_bytes),
            SectionKind::Taxonomy => put(&taxa_bytes),
        }
        .map_err(io)?;
        checksums.push(hasher.digest());
    }
    for (s, c) in header.sections.iter_mut().zip(checksums) {
        s.checksum = c;
    }

    let header_bytes = encode(path, "header", &header)?;
    debug_assert_eq!(header_bytes.len() as u64, header_len);
    let mut preamble = [0u8; PREAMBLE_LEN];
    preamble[0..8].copy_from_slice(&MAGIC);
    preamble[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    preamble[16..24].copy_from_slice(&header_len.to_le_bytes());
    preamble[24..32].copy_from_slice(&xxhash_rust::xxh3::xxh3_64(&header_bytes).to_le_bytes());
    out.seek(SeekFrom::Start(0)).map_err(io)?;
    out.write_all(&preamble).map_err(io)?;
    out.write_all(&header_bytes).map_err(io)?;
    let temp = out.into_inner().map_err(|e| io(e.into_error()))?;
    let size = temp.as_file().metadata().map_err(io)?.len();
    temp.persist(path).map_err(io)?;
    Ok(size)
}

fn encode<T: serde::Serialize>(path: &Path, what: &'static str, value: &T) -> Result<Vec<u8>, IndexError> {
    bincode::serde::encode_to_vec(value, bincode_config()).map_err(|source| IndexError::Encode {
        path: path.to_path_buf(),
        what,
        source,
    })
}
