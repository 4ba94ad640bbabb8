//! Writing an index file: sections streamed to a temporary file in the target directory, the
//! header written last, then an atomic rename. An interrupted build leaves no index behind and an
//! older index at the same path intact.

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

/// Writes the index to `path` and returns its size in bytes. `header.sections` is filled in here.
pub fn write_index(
    path: &Path,
    mut header: Header,
    shards: &[ShardData],
    targets: &[TargetInfo],
    taxa: &[Taxon],
) -> Result<u64, IndexError> {
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

    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", path.file_name().and_then(|n| n.to_str()).unwrap_or("kmerdb")))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|source| IndexError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(source.kind(), format!("cannot create a file in this directory: {source}")),
        })?;
    let mut out = BufWriter::with_capacity(1 << 20, tmp);

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
    let tmp = out.into_inner().map_err(|e| io(e.into_error()))?;
    tmp.as_file().sync_all().map_err(io)?;
    let size = tmp.as_file().metadata().map_err(io)?.len();
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(size)
}

fn encode<T: serde::Serialize>(path: &Path, what: &'static str, value: &T) -> Result<Vec<u8>, IndexError> {
    bincode::serde::encode_to_vec(value, bincode_config()).map_err(|source| IndexError::Encode {
        path: path.to_path_buf(),
        what,
        source,
    })
}
