//! Reading reads for classification: single-end files, R1/R2 file pairs, or interleaved pairs, in
//! batches, checking that mates belong together (same count, same name). Files are parsed in
//! blocks by several threads (`input::records`); a batch points into the blocks.

use crate::input::records::{Block, RecordStream};
use crate::input::{InputError, Source, pair_id};
use std::sync::Arc;

/// How a sample's reads are laid out in its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadLayout {
    /// Each file holds single reads; files are read one after another.
    Single(Vec<Source>),
    /// (R1, R2) file pairs, read one pair after another.
    Paired(Vec<(Source, Source)>),
    /// Each file holds mate 1 and mate 2 alternately.
    Interleaved(Vec<Source>),
}

impl ReadLayout {
    pub(crate) fn is_paired(&self) -> bool {
        !matches!(self, ReadLayout::Single(_))
    }

    pub fn sources(&self) -> Vec<&Source> {
        match self {
            ReadLayout::Single(v) | ReadLayout::Interleaved(v) => v.iter().collect(),
            ReadLayout::Paired(v) => v.iter().flat_map(|(a, b)| [a, b]).collect(),
        }
    }
}

/// A batch of reads: each read's mates (one or two) as records of the blocks they were parsed in
/// (`input::records`). Nothing is copied or allocated per read.
#[derive(Default)]
pub struct Batch {
    blocks: Vec<Arc<Block>>,
    /// Per mate: its block (index into `blocks`) and its record in that block.
    mates: Vec<(u32, u32)>,
    /// Mates per read: 1, or 2 for pairs.
    per_read: usize,
}

impl Batch {
    /// Reads in the batch.
    pub fn len(&self) -> usize {
        self.mates.len().checked_div(self.per_read).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.mates.is_empty()
    }

    /// Mates per read (1 or 2).
    pub fn mates_per_read(&self) -> usize {
        self.per_read
    }

    fn mate(&self, r: usize, m: usize) -> (&Block, usize) {
        let (b, rec) = self.mates[r * self.per_read + m];
        (&self.blocks[b as usize], rec as usize)
    }

    /// Mate `m` of read `r`: its header line (without `>`/`@`).
    pub fn header(&self, r: usize, m: usize) -> &[u8] {
        let (b, i) = self.mate(r, m);
        b.header(i)
    }

    pub fn seq(&self, r: usize, m: usize) -> &[u8] {
        let (b, i) = self.mate(r, m);
        b.seq(i)
    }

    pub fn qual(&self, r: usize, m: usize) -> Option<&[u8]> {
        let (b, i) = self.mate(r, m);
        b.qual(i)
    }

    /// The read id: the first header word of its first mate without a trailing `/1` or `/2`
    /// (borrowed unless the header is not UTF-8).
    pub fn id(&self, r: usize) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(crate::output::read_id_bytes(self.header(r, 0), self.per_read == 2))
    }

    /// Read `r`'s sequences, one per mate, into `out`.
    pub fn seqs<'a>(&'a self, r: usize, out: &mut Vec<&'a [u8]>) {
        out.clear();
        out.extend((0..self.per_read).map(|m| self.seq(r, m)));
    }

    /// Lets go of the batch's blocks, so that their buffers can be reused.
    pub fn release(&mut self) {
        self.blocks.clear();
        self.mates.clear();
    }

    fn clear(&mut self, per_read: usize) {
        self.release();
        self.per_read = per_read;
    }

    /// The index of `block` in `blocks`, added if it is not the last one there.
    fn block(&mut self, block: &Arc<Block>) -> u32 {
        if !self.blocks.last().is_some_and(|b| Arc::ptr_eq(b, block)) {
            self.blocks.push(block.clone());
        }
        (self.blocks.len() - 1) as u32
    }
}

/// Mates that do not belong together.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PairingError {
    #[error("{shorter} has fewer reads than {longer}: it ends after {count} reads")]
    Count { shorter: String, longer: String, count: u64 },
    #[error(
        "read {number} of {r1} is '{id1}' but read {number} of {r2} is '{id2}': the files are not mates of each other"
    )]
    Names { r1: String, r2: String, number: u64, id1: String, id2: String },
    #[error("{file} is interleaved but holds an odd number of records ({count})")]
    OddInterleaved { file: String, count: u64 },
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Pairing(#[from] PairingError),
}

/// Reads a sample's reads in batches, file after file; each file is read and parsed ahead, on a
/// thread of its own and the pool (`input::records`).
pub struct ReadStream {
    layout: ReadLayout,
    pool: Arc<rayon::ThreadPool>,
    /// Index of the next file (pair) in the layout.
    next_file: usize,
    current: Option<Vec<RecordStream>>,
    /// Reads delivered from the current file (pair).
    count: u64,
    /// Blocks each file keeps read ahead.
    ahead: usize,
}

impl ReadStream {
    /// Reads `layout`, parsing on `pool`. The first file (pair) opens at once, so that its reading
    /// starts while the caller does other work.
    pub fn new(layout: ReadLayout, pool: Arc<rayon::ThreadPool>) -> Result<Self, ReadError> {
        Self::with_read_ahead(layout, pool, crate::input::records::BLOCKS_AHEAD)
    }

    /// [`ReadStream::new`], each file keeping `ahead` blocks read ahead (a GPU takes a batch's
    /// blocks at once: more than the default, so that they are parsed before they are wanted).
    pub(crate) fn with_read_ahead(
        layout: ReadLayout,
        pool: Arc<rayon::ThreadPool>,
        ahead: usize,
    ) -> Result<Self, ReadError> {
        let mut s = Self { layout, pool, next_file: 0, current: None, count: 0, ahead };
        s.open_next()?;
        Ok(s)
    }

    /// Opens the next file (pair); false when there is none. An empty file holds no reads: a
    /// warning, not an error, so that pipelines can pass empty samples through (and still get
    /// every output).
    fn open_next(&mut self) -> Result<bool, ReadError> {
        loop {
            let sources: Vec<&Source> = match &self.layout {
                ReadLayout::Single(v) | ReadLayout::Interleaved(v) => v.get(self.next_file).into_iter().collect(),
                ReadLayout::Paired(v) => v.get(self.next_file).map(|(a, b)| vec![a, b]).unwrap_or_default(),
            };
            if sources.is_empty() {
                return Ok(false);
            }
            self.next_file += 1;
            let mut streams = Vec::new();
            let mut empty = Vec::new();
            // Mates are checked by the keys their names hash to; single reads need none.
            let pair_keys = !matches!(self.layout, ReadLayout::Single(_));
            for s in &sources {
                match RecordStream::open_ahead(s, self.pool.clone(), self.ahead, pair_keys) {
                    Ok(r) => streams.push(r),
                    Err(InputError::Empty { file }) => empty.push(file),
                    Err(e) => return Err(e.into()),
                }
            }
            for file in &empty {
                log::warn!("{file} holds no reads");
            }
            match (streams.len(), sources.len()) {
                (0, _) => continue,
                (1, 2) => {
                    let mut r = streams.pop().expect("one stream");
                    if r.peek()?.is_none() {
                        continue;
                    }
                    return Err(PairingError::Count {
                        shorter: empty[0].to_string(),
                        longer: r.source().to_string(),
                        count: 0,
                    }
                    .into());
                }
                _ => {}
            }
            self.current = Some(streams);
            self.count = 0;
            return Ok(true);
        }
    }

    /// Up to `max` reads into `batch` (emptied first); an empty batch means the end.
    pub(crate) fn next_batch(&mut self, batch: &mut Batch, max: usize) -> Result<(), ReadError> {
        let per_read = if matches!(self.layout, ReadLayout::Single(_)) { 1 } else { 2 };
        batch.clear(per_read);
        while batch.len() < max {
            if self.current.is_none() && !self.open_next()? {
                break;
            }
            let want = max - batch.len();
            let got = match self.current.as_ref().map(Vec::len) {
                Some(2) => self.next_pairs(batch, want)?,
                _ if per_read == 2 => self.next_interleaved(batch, want)?,
                _ => self.next_single(batch, want)?,
            };
            if got == 0 {
                self.current = None;
            }
            self.count += got as u64;
        }
        Ok(())
    }

    /// Up to `want` single reads of the current file; 0 at its end.
    fn next_single(&mut self, batch: &mut Batch, want: usize) -> Result<usize, ReadError> {
        let s = &mut self.current.as_mut().expect("a file is open")[0];
        let Some((block, i)) = s.peek()? else { return Ok(0) };
        let block = block.clone();
        let k = (block.recs.len() - i).min(want);
        let b = batch.block(&block);
        batch.mates.extend((i..i + k).map(|r| (b, r as u32)));
        s.advance(k);
        Ok(k)
    }

    /// Up to `want` pairs of the current file pair, checked against each other; 0 at their end.
    /// Errors come in pair order: a bad record of R2 before a name mismatch of a later pair, and
    /// R1's error before R2's for the same pair.
    fn next_pairs(&mut self, batch: &mut Batch, want: usize) -> Result<usize, ReadError> {
        let [r1, r2] = self.current.as_mut().expect("a file pair is open").as_mut_slice() else {
            unreachable!("two streams")
        };
        let first = r1.peek()?.map(|(b, i)| (b.clone(), i));
        let second = r2.peek()?.map(|(b, i)| (b.clone(), i));
        let ((b1, i1), (b2, i2)) = match (first, second) {
            (None, None) => return Ok(0),
            (Some(a), Some(b)) => (a, b),
            (a, _) => {
                let (shorter, longer) = if a.is_none() { (&*r1, &*r2) } else { (&*r2, &*r1) };
                return Err(PairingError::Count {
                    shorter: shorter.source().to_string(),
                    longer: longer.source().to_string(),
                    count: self.count,
                }
                .into());
            }
        };
        let k = (b1.recs.len() - i1).min(b2.recs.len() - i2).min(want);
        // By the keys the parse hashed the names to: the headers stay where they are.
        let (keys1, keys2) = (&b1.recs[i1..i1 + k], &b2.recs[i2..i2 + k]);
        let mismatch = keys1.iter().zip(keys2).position(|(a, b)| a.pair_key != b.pair_key);
        if let Some(j) = mismatch {
            let (id1, id2) = (pair_id(b1.header(i1 + j)), pair_id(b2.header(i2 + j)));
            return Err(PairingError::Names {
                r1: r1.source().to_string(),
                r2: r2.source().to_string(),
                number: self.count + j as u64 + 1,
                id1: String::from_utf8_lossy(id1).into_owned(),
                id2: String::from_utf8_lossy(id2).into_owned(),
            }
            .into());
        }
        let (a, b) = (batch.block(&b1), batch.block(&b2));
        for j in 0..k {
            batch.mates.push((a, (i1 + j) as u32));
            batch.mates.push((b, (i2 + j) as u32));
        }
        r1.advance(k);
        r2.advance(k);
        Ok(k)
    }

    /// Up to `want` pairs of the current interleaved file (a pair may span two blocks); 0 at its
    /// end.
    fn next_interleaved(&mut self, batch: &mut Batch, want: usize) -> Result<usize, ReadError> {
        let s = &mut self.current.as_mut().expect("a file is open")[0];
        let mut got = 0;
        while got < want {
            let Some((b1, i1)) = s.peek()?.map(|(b, i)| (b.clone(), i)) else { break };
            s.advance(1);
            let Some((b2, i2)) = s.peek()?.map(|(b, i)| (b.clone(), i)) else {
                return Err(PairingError::OddInterleaved { file: s.source().to_string(), count: s.records() }.into());
            };
            s.advance(1);
            if b1.recs[i1].pair_key != b2.recs[i2].pair_key {
                let (id1, id2) = (pair_id(b1.header(i1)), pair_id(b2.header(i2)));
                let name = s.source().to_string();
                return Err(PairingError::Names {
                    r1: name.clone(),
                    r2: name,
                    number: self.count + got as u64 + 1,
                    id1: String::from_utf8_lossy(id1).into_owned(),
                    id2: String::from_utf8_lossy(id2).into_owned(),
                }
                .into());
            }
            let (a, b) = (batch.block(&b1), batch.block(&b2));
            batch.mates.push((a, i1 as u32));
            batch.mates.push((b, i2 as u32));
            got += 1;
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write(dir: &std::path::Path, name: &str, text: &str) -> Source {
        let p: PathBuf = dir.join(name);
        std::fs::write(&p, text).unwrap();
        Source::File(p)
    }

    /// Reads as ids with each mate's sequence.
    type Reads = Vec<(String, Vec<Vec<u8>>)>;

    /// Every read: its id and each mate's sequence.
    fn all(layout: ReadLayout) -> Result<Reads, ReadError> {
        let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
        let mut s = ReadStream::new(layout, pool)?;
        let mut out = Vec::new();
        let mut batch = Batch::default();
        loop {
            s.next_batch(&mut batch, 2)?;
            if batch.is_empty() {
                return Ok(out);
            }
            for r in 0..batch.len() {
                out.push((
                    batch.id(r).into_owned(),
                    (0..batch.mates_per_read()).map(|m| batch.seq(r, m).to_vec()).collect(),
                ));
            }
        }
    }

    #[test]
    fn pairs_interleaved_and_single() {
        let d = tempfile::tempdir().unwrap();
        let r1 = write(d.path(), "r1.fq", "@a/1\nACGT\n+\nIIII\n@b/1\nGG\n+\nII\n@c/1\nT\n+\nI\n");
        let r2 = write(d.path(), "r2.fq", "@a/2\nTTTT\n+\nIIII\n@b/2\nCC\n+\nII\n@c/2\nA\n+\nI\n");
        let reads = all(ReadLayout::Paired(vec![(r1.clone(), r2)])).unwrap();
        assert_eq!(reads.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(reads[1].1[1], b"CC");
        let il = write(d.path(), "il.fa", ">x 1:N\nAC\n>x 2:N\nGT\n>y\nAA\n>y\nCC\n");
        let reads = all(ReadLayout::Interleaved(vec![il])).unwrap();
        assert_eq!(reads.len(), 2);
        assert_eq!(reads[1].1[1], b"CC");
        let reads = all(ReadLayout::Single(vec![r1.clone(), r1])).unwrap();
        assert_eq!(reads.len(), 6);
        // A single read keeps its `/1` (as Kraken 2 writes it); only pairs lose it.
        assert_eq!(reads[0].0, "a/1");
    }

    #[test]
    fn mismatched_mates_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let r1 = write(d.path(), "r1.fa", ">a/1\nACGT\n>b/1\nGG\n");
        let short = write(d.path(), "short.fa", ">a/2\nACGT\n");
        let err = all(ReadLayout::Paired(vec![(r1.clone(), short)])).err().unwrap().to_string();
        assert!(err.contains("short.fa has fewer reads than") && err.contains("after 1 reads"), "{err}");
        let other = write(d.path(), "other.fa", ">a/2\nACGT\n>zz/2\nGG\n");
        let err = all(ReadLayout::Paired(vec![(r1, other)])).err().unwrap().to_string();
        assert!(err.contains("read 2 of") && err.contains("'b'") && err.contains("'zz'"), "{err}");
        // Mates are parsed side by side, but errors come in pair order: the bad record of R2
        // (pair 2) before the name mismatch of pair 3.
        let r1 = write(d.path(), "r1.fq", "@a/1\nAC\n+\nII\n@b/1\nGG\n+\nII\n@c/1\nTT\n+\nII\n");
        let bad = write(d.path(), "bad.fq", "@a/2\nAC\n+\nII\n@b/2\nGG\nII\n@z/2\nTT\n+\nII\n");
        let err = all(ReadLayout::Paired(vec![(r1, bad)])).err().unwrap().to_string();
        assert!(err.contains("bad.fq") && !err.contains("'z'"), "{err}");
        // Interleaved mates are checked by name too, the /1 and /2 suffixes and the words after
        // the id aside.
        let swapped = write(d.path(), "swapped.fa", ">a/1 x\nAC\n>a/2 y\nGT\n>b/1\nAA\n>c/2\nTT\n");
        let err = all(ReadLayout::Interleaved(vec![swapped])).err().unwrap().to_string();
        assert!(err.contains("read 2 of") && err.contains("'b'") && err.contains("'c'"), "{err}");
        let odd = write(d.path(), "odd.fa", ">a\nAC\n>a\nGT\n>b\nAA\n");
        let err = all(ReadLayout::Interleaved(vec![odd])).err().unwrap().to_string();
        assert!(err.contains("odd number"), "{err}");
    }
}
