//! `kmerdb build --partition I/N`: one part of a reference collection, for an index per part
//! (built on different machines by a workflow, then joined per read by `kmerdb merge`).
//!
//! The genome files are sorted by path and cut into N contiguous runs of nearly equal counts; part
//! I (1-based) is the I-th run. A genome file is never split, so each sequence is in one part.

use crate::input::Source;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// 1-based.
    pub part: usize,
    pub parts: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionError {
    #[error("--partition {0}: expected I/N with 1 <= I <= N, such as 2/4")]
    Syntax(String),
    #[error("--partition needs genome files: stdin (-) cannot be partitioned")]
    Stdin,
    #[error("--partition {part}/{parts}: only {files} genome files, so part {part} would be empty")]
    Empty { part: usize, parts: usize, files: usize },
}

impl std::str::FromStr for Partition {
    type Err = PartitionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PartitionError::Syntax(s.to_string());
        let (i, n) = s.split_once('/').ok_or_else(err)?;
        let (part, parts): (usize, usize) =
            (i.trim().parse().map_err(|_| err())?, n.trim().parse().map_err(|_| err())?);
        if part == 0 || part > parts {
            return Err(err());
        }
        Ok(Self { part, parts })
    }
}

/// The part a build makes, as its index records it (`index::format::Collection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// 1-based.
    pub part: u32,
    pub parts: u32,
    /// Shared by the parts of one partitioned build (`collection_id`).
    pub id: u64,
}

impl Partition {
    /// This part's files among `sources`, and the part with its collection's id.
    pub fn select(&self, sources: Vec<Source>) -> Result<(Vec<Source>, Part), PartitionError> {
        let mut files: Vec<PathBuf> = Vec::with_capacity(sources.len());
        for s in sources {
            match s {
                Source::File(p) => files.push(p),
                Source::Stdin => return Err(PartitionError::Stdin),
            }
        }
        files.sort();
        let n = files.len();
        let (start, end) = ((self.part - 1) * n / self.parts, self.part * n / self.parts);
        if start == end {
            return Err(PartitionError::Empty { part: self.part, parts: self.parts, files: n });
        }
        let part = Part { part: self.part as u32, parts: self.parts as u32, id: collection_id(&files, self.parts) };
        Ok((files[start..end].iter().cloned().map(Source::File).collect(), part))
    }
}

/// The id of a partitioned build: xxh3-64 of the number of parts and of every genome file of the
/// whole collection (before a part is chosen), in path order, by file name and size. So the parts
/// of one build, made by separate runs (on other machines, with the folder spelled otherwise),
/// share it, and parts of another collection or another split do not. Never 0 (a whole build's).
pub(crate) fn collection_id(files: &[PathBuf], parts: usize) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(b"kmerdb-partition-1");
    h.update(&(parts as u64).to_le_bytes());
    for f in files {
        let name = f.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name);
        h.update(&std::fs::metadata(f).map(|m| m.len()).unwrap_or(u64::MAX).to_le_bytes());
    }
    h.digest().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_every_file_once() {
        let files: Vec<Source> = (0..7).rev().map(|i| Source::File(format!("g{i}.fa").into())).collect();
        let mut all = Vec::new();
        for part in 1..=3 {
            let p: Partition = format!("{part}/3").parse().unwrap();
            let (got, _) = p.select(files.clone()).unwrap();
            assert!(!got.is_empty());
            all.extend(got);
        }
        let mut expected = files.clone();
        expected.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(all, expected);
    }

    /// The parts of one split share an id; another split, or another collection, has another.
    #[test]
    fn parts_of_one_build_share_its_id() {
        let files: Vec<Source> = (0..4).map(|i| Source::File(format!("g{i}.fa").into())).collect();
        let id = |p: &str, f: &[Source]| p.parse::<Partition>().unwrap().select(f.to_vec()).unwrap().1;
        let (a, b) = (id("1/2", &files), id("2/2", &files));
        assert_eq!((a.part, a.parts, b.part), (1, 2, 2));
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, id("1/3", &files).id);
        assert_ne!(a.id, id("1/2", &files[..3]).id);
        assert_ne!(a.id, 0);
    }

    #[test]
    fn bad_partitions_are_errors() {
        for bad in ["0/2", "3/2", "x", "1/0", "1-2"] {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
        }
        let p: Partition = "1/3".parse().unwrap();
        let one = vec![Source::File("a.fa".into())];
        assert_eq!(p.select(one).unwrap_err(), PartitionError::Empty { part: 1, parts: 3, files: 1 });
        assert_eq!("1/1".parse::<Partition>().unwrap().select(vec![Source::Stdin]).unwrap_err(), PartitionError::Stdin);
    }
}
