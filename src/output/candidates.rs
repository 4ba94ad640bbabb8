//! `kmerdb classify --candidates-out FILE`: each read's candidates against one partition of a
//! partitioned index, in a compact binary form that `kmerdb merge` joins across partitions.
//!
//! ```text
//! magic        18 bytes, "KMERDB-CANDIDATES\n"
//! blocks       each: kind (u8: H header, R records, E end), payload length (u32), xxh3-64 of the
//!              kind, the length and the payload (u64), then the payload
//!   H          bincode [`CandidatesHeader`]; the first block, and the only H
//!   R ...      bincode [`ReadCandidates`], one after another, in input order (a group of reads)
//!   E          the number of records (u64); the last block: nothing may follow it
//! ```
//! Integers are little-endian; the whole file is gzipped when its name ends in `.gz`. The header
//! carries what merging needs to decide as one index would: which part of which partitioned build
//! it comes from ([`Collection`]: merge takes exactly the parts of one build), the partition's
//! targets (name and taxid: targets of the whole collection are numbered by name, so names order
//! candidates the same way), its taxonomy, and the decision's settings.
//!
//! Every block is checked against its checksum before anything in it is decoded, so a damaged
//! file is an error naming the block, never a different answer; a file cut short lacks its end
//! block, and a block of records dropped or repeated changes the count the end block gives.

use crate::index::format::Collection;
use crate::sketch::SketchParams;
use crate::taxonomy::{TaxId, Taxon};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read};

pub(crate) const CANDIDATES_MAGIC: &str = "kmerdb-candidates";
/// The first bytes of every candidates file, before the blocks: checked before anything is
/// decoded, so that another file is refused, not decoded into nonsense sizes.
pub(crate) const FILE_MAGIC: &[u8; 18] = b"KMERDB-CANDIDATES\n";
/// Version 2: the header records the strain margin. Version 3: blocks with checksums, and the
/// header's [`Collection`]. Version 4: each read's clade features' hits. Version 5: the targets'
/// lengths and each read's found features' positions (for the evidence rule of weak calls).
pub(crate) const CANDIDATES_VERSION: u32 = 5;

/// A block's kind, length and checksum, before its payload.
pub(crate) const BLOCK_HEAD: usize = 13;
/// No block may claim more: a damaged length is an error, not a huge allocation.
const MAX_BLOCK: u32 = 1 << 30;

const HEADER: u8 = b'H';
const RECORDS: u8 = b'R';
const END: u8 = b'E';

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CandidatesHeader {
    pub magic: String,
    pub version: u32,
    /// The index's part and taxonomy (see [`Collection`]).
    pub collection: Collection,
    pub sketch: SketchParams,
    pub max_locations_per_feature: u32,
    pub hitmin: u32,
    pub hitdiff: f64,
    pub strain_margin: f64,
    pub max_candidates: u32,
    pub lowest_rank: Option<String>,
    /// The partition's targets: (sequence name, taxid), by target id.
    pub targets: Vec<(String, TaxId)>,
    /// Their lengths in bases, by target id.
    pub target_lengths: Vec<u64>,
    /// The partition's taxonomy (its targets' lineages).
    pub taxa: Vec<Taxon>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReadCandidates {
    pub id: String,
    pub lengths: (u32, Option<u32>),
    /// (target id in this partition, hits), best first, at most `max_candidates`.
    pub candidates: Vec<(u32, u32)>,
    /// The clade features' hits in this partition, (clade's taxid, count) in taxid order.
    pub clades: Vec<(TaxId, u32)>,
    /// Per mate, the taxa of its features' locations in this partition, as (taxid, count) runs
    /// (0: the feature is not in this partition).
    pub hits: [Vec<(TaxId, u32)>; 2],
    /// Per mate, where the features this partition found (a taxon other than 0 in `hits`) start
    /// in the mate, in the same order.
    pub positions: [Vec<u32>; 2],
}

/// Fixed-width little-endian integers; no value may claim more than 1 GiB, so that a damaged file
/// is an error, not an attempt to allocate whatever a corrupt length says.
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_fixed_int_encoding().with_little_endian().with_limit::<{ 1 << 30 }>()
}

fn block_checksum(kind: u8, payload: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&[kind]);
    h.update(&(payload.len() as u32).to_le_bytes());
    h.update(payload);
    h.digest()
}

/// Fills in the head of the block whose head starts at `at` and whose payload is the rest of `out`.
fn seal(kind: u8, at: usize, out: &mut [u8]) {
    let payload = &out[at + BLOCK_HEAD..];
    let (len, sum) = ((payload.len() as u32).to_le_bytes(), block_checksum(kind, payload).to_le_bytes());
    out[at] = kind;
    out[at + 1..at + 5].copy_from_slice(&len);
    out[at + 5..at + BLOCK_HEAD].copy_from_slice(&sum);
}

/// Writes the start of a candidates file: the magic bytes and the header's block.
pub(crate) fn encode_header(header: &CandidatesHeader, out: &mut Vec<u8>) {
    out.extend_from_slice(FILE_MAGIC);
    let at = out.len();
    out.extend_from_slice(&[0; BLOCK_HEAD]);
    bincode::serde::encode_into_std_write(header, out, config()).expect("writing to memory cannot fail");
    seal(HEADER, at, out);
}

/// Reads a block of records holds at most (the last block of a file fewer), and bytes past which a
/// block ends early (reads with long hit lists): both fixed, so that a file's bytes depend on its
/// records only, not on how the reads were grouped (threads, GPUs, batch sizes).
pub(crate) const BLOCK_READS: usize = 4096;
pub(crate) const BLOCK_BYTES: usize = 64 << 20;

/// The encoded records of a group of reads, with where each ends, for a [`BlockWriter`].
#[derive(Debug, Default)]
pub(crate) struct EncodedRecords {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl EncodedRecords {
    /// Appends one read's record.
    pub(crate) fn push(&mut self, record: &ReadCandidates) {
        bincode::serde::encode_into_std_write(record, &mut self.bytes, config())
            .expect("writing to memory cannot fail");
        self.ends.push(self.bytes.len());
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

/// Writes the records of a file's groups of reads, in order, as blocks of [`BLOCK_READS`] reads,
/// then the end block ([`BlockWriter::finish`]).
#[derive(Debug)]
pub(crate) struct BlockWriter {
    /// The block being filled: its head's room, then its records.
    block: Vec<u8>,
    in_block: usize,
    records: u64,
}

impl Default for BlockWriter {
    fn default() -> Self {
        Self { block: vec![0; BLOCK_HEAD], in_block: 0, records: 0 }
    }
}

impl BlockWriter {
    /// Adds a group's records, writing every block they complete to `out`.
    pub(crate) fn add(&mut self, group: &EncodedRecords, out: &mut impl std::io::Write) -> std::io::Result<()> {
        // Records are copied in runs: `copied` is where the run not yet in the block starts.
        let (mut copied, mut prev) = (0, 0);
        let mut payload = self.block.len() - BLOCK_HEAD;
        for &end in &group.ends {
            let size = end - prev;
            if self.in_block == BLOCK_READS || (self.in_block > 0 && payload + size > BLOCK_BYTES) {
                self.block.extend_from_slice(&group.bytes[copied..prev]);
                copied = prev;
                self.write_block(out)?;
                payload = 0;
            }
            (self.in_block, self.records, payload, prev) = (self.in_block + 1, self.records + 1, payload + size, end);
        }
        self.block.extend_from_slice(&group.bytes[copied..prev]);
        Ok(())
    }

    fn write_block(&mut self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        if self.block.len() - BLOCK_HEAD >= MAX_BLOCK as usize {
            return Err(std::io::Error::other("one read's candidates record is larger than a block may hold (1 GiB)"));
        }
        seal(RECORDS, 0, &mut self.block);
        out.write_all(&self.block)?;
        self.block.truncate(BLOCK_HEAD);
        self.in_block = 0;
        Ok(())
    }

    /// Writes the last, partly filled block and the end block.
    pub(crate) fn finish(mut self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        if self.in_block > 0 {
            self.write_block(out)?;
        }
        let mut end = Vec::new();
        encode_end(self.records, &mut end);
        out.write_all(&end)
    }
}

/// The end block of a file of `records` records.
pub(crate) fn encode_end(records: u64, out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(&[0; BLOCK_HEAD]);
    out.extend_from_slice(&records.to_le_bytes());
    seal(END, at, out);
}

/// A whole candidates file of `header` and `records` (tests and fuzzing seeds).
#[cfg(test)]
pub(crate) fn encode_file(header: &CandidatesHeader, records: &[ReadCandidates]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_header(header, &mut out);
    let mut group = EncodedRecords::default();
    for r in records {
        group.push(r);
    }
    let mut blocks = BlockWriter::default();
    blocks.add(&group, &mut out).expect("writing to memory cannot fail");
    blocks.finish(&mut out).expect("writing to memory cannot fail");
    out
}

/// Recomputes the checksum of every block of a plain candidates file in place, as far as its
/// blocks can be walked (for the fuzz target that mutates the blocks' contents).
pub(crate) fn fix_checksums(file: &mut [u8]) {
    if !file.starts_with(FILE_MAGIC) {
        return;
    }
    let mut at = FILE_MAGIC.len();
    while at + BLOCK_HEAD <= file.len() {
        let len = u32::from_le_bytes(file[at + 1..at + 5].try_into().expect("4 bytes")) as usize;
        let Some(end) = (at + BLOCK_HEAD).checked_add(len).filter(|&e| e <= file.len()) else { return };
        let sum = block_checksum(file[at], &file[at + BLOCK_HEAD..end]);
        file[at + 5..at + BLOCK_HEAD].copy_from_slice(&sum.to_le_bytes());
        at = end;
    }
}

/// What is wrong with a candidates file (the caller names the file).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CandidatesError {
    #[error("not a kmerdb candidates file")]
    NotCandidates,
    #[error(
        "candidates format {found} (this kmerdb reads {CANDIDATES_VERSION}): classify the reads again with this kmerdb"
    )]
    Version { found: u32 },
    #[error("the file ends inside block {block}: it is truncated")]
    EndsInside { block: u64 },
    #[error("the file ends after block {block} without its end block: it is truncated")]
    NoEnd { block: u64 },
    #[error("block {block} is damaged: {what}")]
    Damaged { block: u64, what: &'static str },
    #[error(
        "block {block} passed its checksum but its {what} does not decode ({detail}): it was written by another kmerdb version"
    )]
    Undecodable { block: u64, what: &'static str, detail: String },
    #[error("its end block counts {said} reads but its blocks hold {held}: blocks are missing or repeated")]
    Count { said: u64, held: u64 },
    #[error("cannot read block {block}")]
    Io { block: u64, source: std::io::Error },
}

/// Reads a candidates file block by block, each checked against its checksum before it is
/// decoded. Errors are messages for a line naming the file (the caller adds its name).
pub(crate) struct CandidatesReader<R: BufRead> {
    r: R,
    /// Blocks read so far (the header's is block 1).
    blocks: u64,
    /// The current block's payload, and how far its records have been read.
    payload: Vec<u8>,
    at: usize,
    records: u64,
    ended: bool,
}

impl<R: BufRead> CandidatesReader<R> {
    /// Checks the magic bytes and reads the header's block.
    pub(crate) fn open(mut r: R) -> Result<(Self, CandidatesHeader), CandidatesError> {
        let mut magic = [0u8; FILE_MAGIC.len()];
        if r.read_exact(&mut magic).is_err() || &magic != FILE_MAGIC {
            return Err(CandidatesError::NotCandidates);
        }
        let mut reader = Self { r, blocks: 0, payload: Vec::new(), at: 0, records: 0, ended: false };
        let kind = reader.next_block()?.ok_or(CandidatesError::EndsInside { block: 1 })?;
        if kind != HEADER {
            return Err(CandidatesError::Damaged { block: 1, what: "it is not the header" });
        }
        let header: CandidatesHeader =
            bincode::serde::decode_from_slice(&reader.payload, config()).map(|(h, _)| h).map_err(|e| {
                let detail = crate::index::format::decode_error_text(&e);
                CandidatesError::Undecodable { block: 1, what: "header", detail }
            })?;
        if header.magic != CANDIDATES_MAGIC {
            return Err(CandidatesError::NotCandidates);
        }
        if header.version != CANDIDATES_VERSION {
            return Err(CandidatesError::Version { found: header.version });
        }
        reader.at = reader.payload.len();
        Ok((reader, header))
    }

    /// The next record; `Ok(None)` after the end block, once the file has been checked to end there
    /// with the count it gives.
    pub(crate) fn next_record(&mut self) -> Result<Option<ReadCandidates>, CandidatesError> {
        while self.at == self.payload.len() {
            if self.ended {
                return Ok(None);
            }
            match self.next_block()? {
                Some(RECORDS) => self.at = 0,
                Some(END) => return self.end().map(|()| None),
                Some(_) => return Err(CandidatesError::Damaged { block: self.blocks, what: "its kind is unknown" }),
                None => return Err(CandidatesError::NoEnd { block: self.blocks }),
            }
        }
        let (record, used): (ReadCandidates, usize) =
            bincode::serde::decode_from_slice(&self.payload[self.at..], config()).map_err(|e| {
                let detail = crate::index::format::decode_error_text(&e);
                CandidatesError::Undecodable { block: self.blocks, what: "record", detail }
            })?;
        self.at += used;
        self.records += 1;
        Ok(Some(record))
    }

    /// Checks the end block's count and that nothing follows it.
    fn end(&mut self) -> Result<(), CandidatesError> {
        self.ended = true;
        let count = <[u8; 8]>::try_from(&self.payload[..])
            .map(u64::from_le_bytes)
            .map_err(|_| CandidatesError::Damaged { block: self.blocks, what: "the end block is not 8 bytes" })?;
        if count != self.records {
            return Err(CandidatesError::Count { said: count, held: self.records });
        }
        let next = self.blocks + 1;
        if !self.r.fill_buf().map_err(|e| io_error(next, e))?.is_empty() {
            return Err(CandidatesError::Damaged { block: self.blocks, what: "data follows the end block" });
        }
        self.at = self.payload.len();
        Ok(())
    }

    /// Reads the next block into `payload`, checked; its kind, or `None` at a clean end of the file.
    fn next_block(&mut self) -> Result<Option<u8>, CandidatesError> {
        let n = self.blocks + 1;
        if self.r.fill_buf().map_err(|e| io_error(n, e))?.is_empty() {
            return Ok(None);
        }
        let mut head = [0u8; BLOCK_HEAD];
        self.r.read_exact(&mut head).map_err(|e| io_error(n, e))?;
        let kind = head[0];
        let len = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes"));
        let sum = u64::from_le_bytes(head[5..].try_into().expect("8 bytes"));
        if len >= MAX_BLOCK {
            return Err(CandidatesError::Damaged { block: n, what: "it claims more than 1 GiB" });
        }
        self.payload.clear();
        let got = (&mut self.r).take(len as u64).read_to_end(&mut self.payload);
        let got = got.map_err(|e| io_error(n, e))?;
        if got < len as usize {
            return Err(CandidatesError::EndsInside { block: n });
        }
        if block_checksum(kind, &self.payload) != sum {
            return Err(CandidatesError::Damaged { block: n, what: "its checksum does not match" });
        }
        self.blocks = n;
        Ok(Some(kind))
    }
}

/// A read error inside block `block` (decompression errors included).
fn io_error(block: u64, e: std::io::Error) -> CandidatesError {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => CandidatesError::EndsInside { block },
        _ => CandidatesError::Io { block, source: e },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> CandidatesHeader {
        CandidatesHeader {
            magic: CANDIDATES_MAGIC.into(),
            version: CANDIDATES_VERSION,
            collection: Collection::whole(0),
            sketch: SketchParams::new(16, 127, None, 16, 0).unwrap(),
            max_locations_per_feature: 254,
            hitmin: 3,
            hitdiff: 0.0,
            strain_margin: 0.1,
            max_candidates: 3,
            lowest_rank: None,
            targets: vec![("t1".into(), 1)],
            target_lengths: vec![1000],
            taxa: vec![Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() }],
        }
    }

    fn records(n: usize) -> Vec<ReadCandidates> {
        (0..n)
            .map(|i| ReadCandidates {
                id: format!("r{i}"),
                lengths: (150, Some(150)),
                candidates: vec![(0, i as u32)],
                clades: if i % 3 == 0 { vec![(1, 2)] } else { vec![] },
                hits: [vec![(1, 3)], vec![]],
                positions: [vec![0, 20, 40], vec![]],
            })
            .collect()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<ReadCandidates>, String> {
        let (mut r, _) = CandidatesReader::open(bytes).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().map_err(|e| e.to_string())? {
            out.push(rec);
        }
        Ok(out)
    }

    #[test]
    fn a_file_reads_back() {
        let file = encode_file(&header(), &records(5));
        assert_eq!(read_all(&file).unwrap(), records(5));
        assert_eq!(read_all(&encode_file(&header(), &[])).unwrap(), vec![]);
    }

    /// Every single-byte change is an error (issue 30.5: 62 of 120 flips gave a different output).
    #[test]
    fn every_flipped_byte_is_an_error() {
        let file = encode_file(&header(), &records(3));
        for at in 0..file.len() {
            for bit in [0x01, 0x80] {
                let mut bad = file.clone();
                bad[at] ^= bit;
                let err = read_all(&bad).expect_err(&format!("a flip at byte {at} was read"));
                assert!(!err.contains("Error {") && !err.contains("kind:"), "Debug text: {err}");
            }
        }
    }

    /// Cut anywhere, the file is an error saying it is truncated (or not a candidates file).
    #[test]
    fn every_truncation_is_an_error() {
        let file = encode_file(&header(), &records(3));
        for len in 0..file.len() {
            let err = read_all(&file[..len]).expect_err(&format!("a file cut at {len} was read"));
            assert!(err.contains("truncated") || err.contains("not a kmerdb candidates file"), "{len}: {err}");
        }
    }

    #[test]
    fn a_repeated_block_is_an_error() {
        let mut group = EncodedRecords::default();
        for r in records(2) {
            group.push(&r);
        }
        let mut blocks = Vec::new();
        let mut w = BlockWriter::default();
        w.add(&group, &mut blocks).unwrap();
        w.finish(&mut blocks).unwrap();
        let records_block = &blocks[..blocks.len() - BLOCK_HEAD - 8];
        let mut file = Vec::new();
        encode_header(&header(), &mut file);
        file.extend_from_slice(records_block);
        file.extend_from_slice(records_block);
        encode_end(2, &mut file);
        assert!(read_all(&file).unwrap_err().contains("blocks are missing or repeated"));
    }

    /// A file of `all`, written as the classifier's threads write it: in groups of `group_size`.
    fn encode_in_groups(all: &[ReadCandidates], group_size: usize) -> Vec<u8> {
        let mut file = Vec::new();
        encode_header(&header(), &mut file);
        let mut w = BlockWriter::default();
        for chunk in all.chunks(group_size) {
            let mut g = EncodedRecords::default();
            chunk.iter().for_each(|r| g.push(r));
            w.add(&g, &mut file).unwrap();
        }
        w.finish(&mut file).unwrap();
        file
    }

    /// The file's bytes do not depend on how its reads were grouped.
    #[test]
    fn blocks_hold_a_fixed_number_of_reads_whatever_the_groups() {
        let all = records(2 * BLOCK_READS + 17);
        let whole = encode_file(&header(), &all);
        for group_size in [1, 5, 1000, BLOCK_READS, BLOCK_READS + 3, all.len()] {
            assert!(encode_in_groups(&all, group_size) == whole, "groups of {group_size}");
        }
        assert_eq!(read_all(&whole).unwrap(), all);
    }

    /// Reads with long hit lists end blocks early, at the same records whatever the groups.
    #[test]
    fn large_records_end_blocks_by_bytes() {
        let mut all = records(40);
        for r in &mut all {
            r.hits[0] = vec![(1, 1); 1 << 20]; // 8 MiB a record
        }
        let whole = encode_file(&header(), &all);
        let (mut reader, _) = CandidatesReader::open(&whole[..]).unwrap();
        while reader.next_record().unwrap().is_some() {}
        assert!(reader.blocks > 1 + 40 / 8, "{} blocks", reader.blocks);
        for group_size in [1, 3, 40] {
            assert!(encode_in_groups(&all, group_size) == whole, "groups of {group_size}");
        }
    }
}
