//! Sequence outputs for `--classified-out` / `--unclassified-out`: the reads themselves, as FASTQ
//! when they have qualities and FASTA otherwise, one file per mate.
//!
//! For paired reads the file name must contain exactly one `#`, which becomes `_1` and `_2`, as in
//! Kraken 2 (`out#.fq` → `out_1.fq`, `out_2.fq`). For single reads a `#` is an ordinary character.
//! Each file is an [`Output`], so a `.gz` name is compressed and nothing appears under the final
//! names until [`ReadsWriter::finish`].

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::file::{Output, create_output};
use crate::taxonomy::TaxId;

/// One [`Output`] per mate for the reads that a run sends to a file, with the mate's path (which
/// its errors name: for pairs not the template's).
#[derive(Debug)]
pub struct ReadsWriter {
    mates: Vec<(Output, PathBuf)>,
}

impl ReadsWriter {
    /// Opens the output(s) for `template`: one file for single reads, two for pairs (`#` → `_1`,
    /// `_2`). A paired template without exactly one `#` is an `InvalidInput` error.
    pub fn create(template: &Path, paired: bool) -> io::Result<Self> {
        let paths = if paired { mate_paths(template)?.to_vec() } else { vec![template.to_path_buf()] };
        let mates = paths.into_iter().map(|p| Ok((create_output(&p)?, p))).collect::<io::Result<_>>()?;
        Ok(ReadsWriter { mates })
    }

    /// Number of mates written (1 or 2).
    pub fn mates(&self) -> usize {
        self.mates.len()
    }

    /// The file mate `mate`'s records go to (the template's for single reads).
    pub fn path(&self, mate: usize) -> Option<&Path> {
        self.mates.get(mate).map(|(_, p)| p.as_path())
    }

    /// Writes one record to mate `mate` (0 for the first or only mate, 1 for the second):
    /// `@header kraken:taxid|N`, sequence, `+`, qualities when `qual` is given, else `>header
    /// kraken:taxid|N` and sequence. `header` is the whole header line without its `>`/`@`; the
    /// call is appended as Kraken 2 appends it (KrakenTools reads it there).
    pub fn write(
        &mut self,
        mate: usize,
        header: &[u8],
        taxid: TaxId,
        seq: &[u8],
        qual: Option<&[u8]>,
    ) -> io::Result<()> {
        let mates = self.mates.len();
        let (w, _) = self.mates.get_mut(mate).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("mate {mate} written to a {mates}-mate reads output"))
        })?;
        w.write_all(if qual.is_some() { b"@" } else { b">" })?;
        w.write_all(header)?;
        w.write_all(b" kraken:taxid|")?;
        w.write_all(itoa::Buffer::new().format(taxid).as_bytes())?;
        w.write_all(b"\n")?;
        w.write_all(seq)?;
        if let Some(qual) = qual {
            w.write_all(b"\n+\n")?;
            w.write_all(qual)?;
        }
        w.write_all(b"\n")
    }

    /// Finishes every mate's file (see [`Output::finish`]); an error comes with the mate's path.
    pub fn finish(self) -> Result<(), (PathBuf, io::Error)> {
        for (out, path) in self.mates {
            out.finish().map_err(|e| (path, e))?;
        }
        Ok(())
    }
}

/// The two mates' paths for a paired template: its single `#` replaced by `_1` and `_2`.
pub fn mate_paths(template: &Path) -> io::Result<[PathBuf; 2]> {
    let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {why}", template.display()));
    let text = template.to_str().ok_or_else(|| invalid("a paired reads output name must be valid UTF-8"))?;
    let mut parts = text.split('#');
    let (Some(before), Some(after), None) = (parts.next(), parts.next(), parts.next()) else {
        let why = if text.contains('#') { "has more than one '#'" } else { "has no '#'" };
        return Err(invalid(&format!(
            "{why}; for paired reads the output file name must contain one '#', which becomes _1 and _2"
        )));
    };
    Ok([format!("{before}_1{after}").into(), format!("{before}_2{after}").into()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn paired_needs_exactly_one_hash() {
        let dir = tempfile::tempdir().unwrap();
        let err = ReadsWriter::create(&dir.path().join("classified.fq"), true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("must contain one '#'"), "{err}");
        assert!(err.to_string().contains("classified.fq"), "{err}");
        let err = ReadsWriter::create(&dir.path().join("a#b#.fq"), true).unwrap_err();
        assert!(err.to_string().contains("more than one '#'"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn paired_fastq_goes_to_underscore_1_and_2() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ReadsWriter::create(&dir.path().join("cl#.fq"), true).unwrap();
        assert_eq!(w.mates(), 2);
        w.write(0, b"r1/1 x", 562, b"ACGT", Some(b"IIII")).unwrap();
        w.write(1, b"r1/2 x", 562, b"TTGCA", Some(b"IIIII")).unwrap();
        assert!(w.write(2, b"r1", 562, b"A", None).is_err());
        assert!(!dir.path().join("cl_1.fq").exists(), "not before finish");
        w.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cl_1.fq")).unwrap(),
            "@r1/1 x kraken:taxid|562\nACGT\n+\nIIII\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cl_2.fq")).unwrap(),
            "@r1/2 x kraken:taxid|562\nTTGCA\n+\nIIIII\n"
        );
    }

    #[test]
    fn single_fasta_keeps_a_literal_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("un#.fa");
        let mut w = ReadsWriter::create(&path, false).unwrap();
        assert_eq!(w.mates(), 1);
        w.write(0, b"r1", 562, b"ACGT", None).unwrap();
        w.write(0, b"r2 desc", 562, b"GG", None).unwrap();
        assert!(w.write(1, b"r1", 562, b"A", None).is_err());
        w.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            ">r1 kraken:taxid|562\nACGT\n>r2 desc kraken:taxid|562\nGG\n"
        );
    }

    #[test]
    fn gzip_mates() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ReadsWriter::create(&dir.path().join("out#.fq.gz"), true).unwrap();
        w.write(0, b"a", 562, b"AC", Some(b"!!")).unwrap();
        w.write(1, b"a", 562, b"GT", Some(b"##")).unwrap();
        w.finish().unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(dir.path().join("out_2.fq.gz")).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "@a kraken:taxid|562\nGT\n+\n##\n");
    }

    #[test]
    fn dropped_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ReadsWriter::create(&dir.path().join("x#.fq"), true).unwrap();
        w.write(0, b"a", 562, b"AC", Some(b"!!")).unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
