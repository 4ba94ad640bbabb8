//! Sample sheets for `kmerdb classify --samples`: one sample a line, `name<TAB>R1[<TAB>R2]`, `#`
//! comments and blank lines skipped, paths relative to the sheet's folder.
//!
//! Parsing (`parse_sample_sheet`) is separate from reading the file so that it can be tested and
//! fuzzed on bytes alone.

use crate::classify::ReadLayout;
use crate::input::Source;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SampleSheetError {
    #[error("{sheet}")]
    Io { sheet: PathBuf, source: std::io::Error },
    #[error("{sheet}: not UTF-8 text (line {line})")]
    NotText { sheet: PathBuf, line: usize },
    #[error("{sheet} line {line}: expected name<TAB>R1[<TAB>R2], found {fields} fields")]
    Fields { sheet: PathBuf, line: usize, fields: usize },
    #[error("{sheet} line {line}: the sample name must be non-empty and contain no '/'")]
    BadName { sheet: PathBuf, line: usize },
    #[error("{sheet} line {line}: an empty path")]
    EmptyPath { sheet: PathBuf, line: usize },
    #[error("{sheet} line {line}: sample '{name}' is listed twice")]
    Duplicate { sheet: PathBuf, line: usize, name: String },
    #[error("{sheet}: no samples listed")]
    NoSamples { sheet: PathBuf },
}

/// Reads and parses the sheet at `sheet` (see [`parse_sample_sheet`]).
pub(crate) fn read_sample_sheet(
    sheet: &Path,
    interleaved: bool,
) -> Result<Vec<(String, ReadLayout)>, SampleSheetError> {
    let bytes = std::fs::read(sheet).map_err(|source| SampleSheetError::Io { sheet: sheet.to_path_buf(), source })?;
    let base = sheet.parent().unwrap_or(Path::new("."));
    parse_sample_sheet(&bytes, sheet, base, interleaved)
}

/// Parses a sheet's bytes: `name<TAB>R1[<TAB>R2]` per line (a trailing `\r` is ignored), paths
/// joined to `base`; two fields are single-end reads (or interleaved pairs with `interleaved`),
/// three are R1 and R2. Errors name `sheet` and the line.
pub(crate) fn parse_sample_sheet(
    bytes: &[u8],
    sheet: &Path,
    base: &Path,
    interleaved: bool,
) -> Result<Vec<(String, ReadLayout)>, SampleSheetError> {
    let sheet_buf = || sheet.to_path_buf();
    let mut samples: Vec<(String, ReadLayout)> = Vec::new();
    let mut first = true;
    for (n, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = n + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = std::str::from_utf8(raw).map_err(|_| SampleSheetError::NotText { sheet: sheet_buf(), line })?;
        if text.trim().is_empty() || text.starts_with('#') {
            continue;
        }
        let mut fields: Vec<&str> = text.split('\t').collect();
        // The workflows' header row (`sample r1 r2`, or nf-core's `fastq_1 fastq_2`) may come first.
        if std::mem::take(&mut first) && is_header(&fields) {
            continue;
        }
        // An empty third column is a single-end sample, as the workflows' sheets write it.
        if fields.len() == 3 && fields[2].is_empty() && !fields[1].is_empty() {
            fields.pop();
        }
        if fields[1..].iter().any(|f| f.is_empty()) && fields.len() <= 3 {
            return Err(SampleSheetError::EmptyPath { sheet: sheet_buf(), line });
        }
        let path = |f: &str| Source::File(base.join(f));
        let layout = match fields[..] {
            [_, r1] if interleaved => ReadLayout::Interleaved(vec![path(r1)]),
            [_, r1] => ReadLayout::Single(vec![path(r1)]),
            [_, r1, r2] => ReadLayout::Paired(vec![(path(r1), path(r2))]),
            _ => return Err(SampleSheetError::Fields { sheet: sheet_buf(), line, fields: fields.len() }),
        };
        let name = fields[0].to_string();
        if name.is_empty() || name.contains('/') {
            return Err(SampleSheetError::BadName { sheet: sheet_buf(), line });
        }
        if samples.iter().any(|(s, _)| *s == name) {
            return Err(SampleSheetError::Duplicate { sheet: sheet_buf(), line, name });
        }
        samples.push((name, layout));
    }
    if samples.is_empty() {
        return Err(SampleSheetError::NoSamples { sheet: sheet_buf() });
    }
    Ok(samples)
}

/// Whether `fields` are the sample sheet's optional header row.
fn is_header(fields: &[&str]) -> bool {
    let is = |i: usize, names: &[&str]| fields.get(i).is_some_and(|f| names.iter().any(|n| f.eq_ignore_ascii_case(n)));
    is(0, &["sample"]) && is(1, &["r1", "fastq_1"]) && (fields.len() == 2 || is(2, &["r2", "fastq_2"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<(String, ReadLayout)>, SampleSheetError> {
        parse_sample_sheet(text.as_bytes(), Path::new("s.tsv"), Path::new("/base"), false)
    }

    #[test]
    fn single_and_paired_lines_with_comments_and_crlf() {
        let got = parse("# sheet\r\na\tr.fq\r\n\nb\t1.fq\t2.fq\n").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, ReadLayout::Single(vec![Source::File("/base/r.fq".into())]));
        assert_eq!(
            got[1].1,
            ReadLayout::Paired(vec![(Source::File("/base/1.fq".into()), Source::File("/base/2.fq".into()))])
        );
    }

    /// The workflows' sheet: a header row, and single-end samples with an empty R2 column.
    #[test]
    fn the_workflows_header_and_empty_r2_are_read() {
        let got = parse("sample\tr1\tr2\na\t1.fq\t2.fq\nb\tb.fq\t\n").unwrap();
        assert_eq!(got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(got[1].1, ReadLayout::Single(vec![Source::File("/base/b.fq".into())]));
        // Only as the first line: later, `sample` is a sample's name.
        let got = parse("x\tx.fq\nsample\tr1\n").unwrap();
        assert_eq!(got[1].0, "sample");
    }

    #[test]
    fn errors_name_the_sheet_and_line() {
        for (text, want) in [
            ("a\n", "s.tsv line 1: expected name<TAB>R1"),
            ("a\tx\na\ty\n", "s.tsv line 2: sample 'a' is listed twice"),
            ("x/y\tr.fq\n", "s.tsv line 1: the sample name"),
            ("a\t\n", "s.tsv line 1: an empty path"),
            ("# only\n", "s.tsv: no samples listed"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        let err = parse_sample_sheet(b"a\t\xff\n", Path::new("s.tsv"), Path::new("."), false).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }
}
