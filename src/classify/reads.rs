//! Reading reads for classification: single-end files, R1/R2 file pairs, or interleaved pairs, in
//! batches, checking that mates belong together (same count, same name).

use crate::input::{InputError, SeqReader, Source, first_word};

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
    pub fn is_paired(&self) -> bool {
        !matches!(self, ReadLayout::Single(_))
    }

    pub fn sources(&self) -> Vec<&Source> {
        match self {
            ReadLayout::Single(v) | ReadLayout::Interleaved(v) => v.iter().collect(),
            ReadLayout::Paired(v) => v.iter().flat_map(|(a, b)| [a, b]).collect(),
        }
    }
}

/// One mate as read.
#[derive(Debug, Clone, Default)]
pub struct Mate {
    pub header: Vec<u8>,
    pub seq: Vec<u8>,
    pub qual: Option<Vec<u8>>,
}

/// A read or read pair: one or two mates.
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub mates: Vec<Mate>,
}

impl Read {
    /// The read id: the first header word without a trailing `/1` or `/2`.
    pub fn id(&self) -> String {
        String::from_utf8_lossy(strip_mate_suffix(first_word(&self.mates[0].header))).into_owned()
    }
}

/// `name/1` and `name/2` → `name`.
pub fn strip_mate_suffix(id: &[u8]) -> &[u8] {
    match id {
        [rest @ .., b'/', b'1' | b'2'] => rest,
        _ => id,
    }
}

/// Mates that do not belong together.
#[derive(Debug, thiserror::Error)]
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
pub enum ReadError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Pairing(#[from] PairingError),
}

/// Reads a sample's reads in batches, file after file.
pub struct ReadStream {
    layout: ReadLayout,
    /// Index of the current file (pair) in the layout.
    next_file: usize,
    current: Option<Vec<SeqReader>>,
    /// Reads delivered from the current file (pair).
    count: u64,
    /// Mates 2 of a batch of pairs, read beside mates 1 (see `next_pairs`).
    second: Vec<Mate>,
}

impl ReadStream {
    pub fn new(layout: ReadLayout) -> Self {
        Self { layout, next_file: 0, current: None, count: 0, second: Vec::new() }
    }

    /// Opens the next file (pair). An empty file holds no reads: a warning, not an error, so that
    /// pipelines can pass empty samples through (and still get every output).
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
            let mut readers = Vec::new();
            let mut empty = Vec::new();
            for s in &sources {
                match SeqReader::open(s) {
                    Ok(r) => readers.push(r),
                    Err(InputError::Empty { file }) => empty.push(file),
                    Err(e) => return Err(e.into()),
                }
            }
            for file in &empty {
                log::warn!("{file} holds no reads");
            }
            match (readers.len(), sources.len()) {
                (0, _) => continue,
                (1, 2) => {
                    let mut r = readers.pop().expect("one reader");
                    if r.next_record().is_none() {
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
            self.current = Some(readers);
            self.count = 0;
            return Ok(true);
        }
    }

    /// Up to `max` reads into `batch`; an empty batch means the end. The batch's reads and their
    /// buffers are reused, so a steady stream of batches allocates nothing.
    pub fn next_batch(&mut self, batch: &mut Vec<Read>, max: usize) -> Result<(), ReadError> {
        let mut n = 0;
        if matches!(self.layout, ReadLayout::Paired(_)) && batch.len() < max {
            batch.resize_with(max, Read::default);
        }
        while n < max {
            if self.current.is_none() && !self.open_next()? {
                break;
            }
            if self.current.as_ref().is_some_and(|r| r.len() == 2) {
                n += self.next_pairs(&mut batch[..], n, max - n)?;
                continue;
            }
            if n == batch.len() {
                batch.push(Read::default());
            }
            if self.next_read(&mut batch[n])? {
                n += 1;
            } else {
                self.current = None;
            }
        }
        batch.truncate(n);
        Ok(())
    }

    /// Up to `want` pairs of the current file pair into `batch[at..]`: the two files are parsed
    /// side by side, on two threads, then checked against each other. Errors are those reading
    /// pair after pair would give, in the same order. Returns the pairs read; fewer than `want`
    /// means the file pair is finished.
    fn next_pairs(&mut self, batch: &mut [Read], at: usize, want: usize) -> Result<usize, ReadError> {
        let readers = self.current.as_mut().expect("a file pair is open");
        let (a, b) = readers.split_at_mut(1);
        let (r1, r2) = (&mut a[0], &mut b[0]);
        self.second.resize_with(want, Mate::default);
        let reads = &mut batch[at..at + want];
        let second = &mut self.second[..want];
        let fill = |r: &mut SeqReader, mates: Vec<&mut Mate>| -> (usize, Option<InputError>) {
            for (i, mate) in mates.into_iter().enumerate() {
                match read_mate(r, mate) {
                    Ok(true) => {}
                    Ok(false) => return (i, None),
                    Err(e) => return (i, Some(e)),
                }
            }
            (want, None)
        };
        let firsts: Vec<&mut Mate> = reads
            .iter_mut()
            .map(|read| {
                read.mates.resize_with(2, Mate::default);
                &mut read.mates[0]
            })
            .collect();
        let seconds: Vec<&mut Mate> = second.iter_mut().collect();
        let ((n1, e1), (n2, e2)) = rayon::join(|| fill(r1, firsts), || fill(r2, seconds));
        for (i, read) in reads.iter_mut().enumerate().take(n1.min(n2)) {
            std::mem::swap(&mut read.mates[1], &mut second[i]);
            check_names(&read.mates[0], &read.mates[1], r1, r2, self.count + i as u64 + 1)?;
        }
        let both = n1.min(n2);
        // Where the first file stops or fails: pair after pair, mate 1 is read before mate 2.
        if n1 == both {
            if let Some(e) = e1 {
                return Err(e.into());
            }
        }
        if n2 == both {
            if let Some(e) = e2 {
                return Err(e.into());
            }
        }
        if n1 != n2 {
            let (shorter, longer) = if n1 < n2 { (&*r1, &*r2) } else { (&*r2, &*r1) };
            return Err(PairingError::Count {
                shorter: shorter.source().to_string(),
                longer: longer.source().to_string(),
                count: self.count + both as u64,
            }
            .into());
        }
        self.count += both as u64;
        if both < want {
            self.current = None;
        }
        Ok(both)
    }

    /// Reads the next read or pair into `read`; false at the end of the current file (pair).
    fn next_read(&mut self, read: &mut Read) -> Result<bool, ReadError> {
        let interleaved = matches!(self.layout, ReadLayout::Interleaved(_));
        let readers = self.current.as_mut().expect("a file is open");
        let mates = if readers.len() == 2 || interleaved { 2 } else { 1 };
        read.mates.resize_with(mates, Mate::default);
        let [m1, rest @ ..] = read.mates.as_mut_slice() else { unreachable!("at least one mate") };
        if readers.len() == 2 {
            let (a, b) = readers.split_at_mut(1);
            let got1 = read_mate(&mut a[0], m1)?;
            let got2 = read_mate(&mut b[0], &mut rest[0])?;
            match (got1, got2) {
                (false, false) => return Ok(false),
                (true, false) | (false, true) => {
                    let (r1, r2) = (&a[0], &b[0]);
                    let (shorter, longer) = if r1.records() < r2.records() { (r1, r2) } else { (r2, r1) };
                    return Err(PairingError::Count {
                        shorter: shorter.source().to_string(),
                        longer: longer.source().to_string(),
                        count: shorter.records(),
                    }
                    .into());
                }
                (true, true) => check_names(m1, &rest[0], &a[0], &b[0], self.count + 1)?,
            }
        } else {
            let r = &mut readers[0];
            if !read_mate(r, m1)? {
                return Ok(false);
            }
            if interleaved {
                if !read_mate(r, &mut rest[0])? {
                    return Err(
                        PairingError::OddInterleaved { file: r.source().to_string(), count: r.records() }.into()
                    );
                }
                check_names(m1, &rest[0], r, r, self.count + 1)?;
            }
        }
        self.count += 1;
        Ok(true)
    }
}

/// Reads the next record into `mate`, reusing its buffers; false at the end of the input.
fn read_mate(r: &mut SeqReader, mate: &mut Mate) -> Result<bool, InputError> {
    match r.next_record() {
        None => Ok(false),
        Some(Err(e)) => Err(e),
        Some(Ok(rec)) => {
            mate.header.clear();
            mate.header.extend_from_slice(rec.header());
            mate.seq.clear();
            mate.seq.extend_from_slice(&rec.seq());
            match rec.qual() {
                Some(q) => {
                    let qual = mate.qual.get_or_insert_with(Vec::new);
                    qual.clear();
                    qual.extend_from_slice(q);
                }
                None => mate.qual = None,
            }
            Ok(true)
        }
    }
}

fn check_names(m1: &Mate, m2: &Mate, r1: &SeqReader, r2: &SeqReader, number: u64) -> Result<(), PairingError> {
    let id1 = strip_mate_suffix(first_word(&m1.header));
    let id2 = strip_mate_suffix(first_word(&m2.header));
    if id1 != id2 {
        return Err(PairingError::Names {
            r1: r1.source().to_string(),
            r2: r2.source().to_string(),
            number,
            id1: String::from_utf8_lossy(id1).into_owned(),
            id2: String::from_utf8_lossy(id2).into_owned(),
        });
    }
    Ok(())
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

    fn all(layout: ReadLayout) -> Result<Vec<Read>, ReadError> {
        let mut s = ReadStream::new(layout);
        let mut out = Vec::new();
        let mut batch = Vec::new();
        loop {
            s.next_batch(&mut batch, 2)?;
            if batch.is_empty() {
                return Ok(out);
            }
            out.append(&mut batch);
        }
    }

    #[test]
    fn pairs_interleaved_and_single() {
        let d = tempfile::tempdir().unwrap();
        let r1 = write(d.path(), "r1.fq", "@a/1\nACGT\n+\nIIII\n@b/1\nGG\n+\nII\n@c/1\nT\n+\nI\n");
        let r2 = write(d.path(), "r2.fq", "@a/2\nTTTT\n+\nIIII\n@b/2\nCC\n+\nII\n@c/2\nA\n+\nI\n");
        let reads = all(ReadLayout::Paired(vec![(r1.clone(), r2)])).unwrap();
        assert_eq!(reads.iter().map(Read::id).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(reads[1].mates[1].seq, b"CC");
        let il = write(d.path(), "il.fa", ">x 1:N\nAC\n>x 2:N\nGT\n>y\nAA\n>y\nCC\n");
        let reads = all(ReadLayout::Interleaved(vec![il])).unwrap();
        assert_eq!(reads.len(), 2);
        assert_eq!(reads[1].mates[1].seq, b"CC");
        let reads = all(ReadLayout::Single(vec![r1.clone(), r1])).unwrap();
        assert_eq!(reads.len(), 6);
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
        let odd = write(d.path(), "odd.fa", ">a\nAC\n>a\nGT\n>b\nAA\n");
        let err = all(ReadLayout::Interleaved(vec![odd])).err().unwrap().to_string();
        assert!(err.contains("odd number"), "{err}");
    }
}
