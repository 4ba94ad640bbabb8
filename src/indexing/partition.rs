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

impl Partition {
    /// This part's files among `sources`.
    pub fn select(&self, sources: Vec<Source>) -> Result<Vec<Source>, PartitionError> {
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
        Ok(files[start..end].iter().cloned().map(Source::File).collect())
    }
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
            let got = p.select(files.clone()).unwrap();
            assert!(!got.is_empty());
            all.extend(got);
        }
        let mut expected = files.clone();
        expected.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(all, expected);
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
