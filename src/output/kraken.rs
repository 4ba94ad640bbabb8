//! Kraken's per-read output: one tab-separated line per read or pair.
//!
//! ```text
//! C  read1  562  150|148  562:13 561:4 0:1 |:| 562:20
//! ```
//!
//! Columns: `C` (classified) or `U`; the read id; the taxid (0 if unclassified), or with names
//! `Escherichia coli (taxid 562)` / `unclassified (taxid 0)` as `kraken2 --use-names` writes;
//! the length (`len1|len2` for pairs); the hit list, runs of `taxid:count` in read order with `0`
//! for k-mers without a hit. As in Kraken 2: the mates' lists are separated by `|:|`, which is
//! written even when a mate contributed nothing (`|:| 562:3`, `562:3 |:|`, or just `|:|`), and a
//! single read without a single k-mer gets `0:0`.

use std::io::{self, Write};

use super::unknown_taxid;
use crate::taxonomy::{TaxId, TaxonTree, UNCLASSIFIED};

/// What the per-read line needs to know about one classified read or pair.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadResult<'a> {
    /// Read id: the first word of the header, with a trailing `/1` or `/2` removed for pairs
    /// (see [`read_id`]). Borrowed where it can be: a line per read allocates nothing.
    pub id: std::borrow::Cow<'a, str>,
    /// The call; 0 means unclassified.
    pub taxid: TaxId,
    /// Mate lengths; the second is `None` for single-end reads, which is what makes a result
    /// single-end.
    pub lengths: (usize, Option<usize>),
    /// Per mate: runs of `(taxid, count)` in read order, 0 meaning "no hit". The second list is
    /// empty for single-end reads. Adjacent runs of one taxid are merged and runs of count 0
    /// skipped when written, so producers need not coalesce.
    pub hits: [&'a [(TaxId, u32)]; 2],
}

impl ReadResult<'_> {
    /// True if the read (pair) got a taxon.
    pub(crate) fn is_classified(&self) -> bool {
        self.taxid != UNCLASSIFIED
    }

    /// True for a pair (the second mate has a length).
    pub(crate) fn is_paired(&self) -> bool {
        self.lengths.1.is_some()
    }
}

/// The read id Kraken prints for a FASTA/FASTQ header (without its `>`/`@`): its first
/// whitespace-separated word, and for pairs without a trailing `/1` or `/2`, as Kraken 2 does.
///
/// ```
/// # use kmerdb::output::read_id;
/// assert_eq!(read_id(b"SRR1.7/1 length=150", true), "SRR1.7");
/// assert_eq!(read_id(b"SRR1.7/1 length=150", false), "SRR1.7/1");
/// ```
pub fn read_id(header: &[u8], paired: bool) -> String {
    String::from_utf8_lossy(read_id_bytes(header, paired)).into_owned()
}

/// [`read_id`], borrowed from the header: what the classifier writes for every read.
pub fn read_id_bytes(header: &[u8], paired: bool) -> &[u8] {
    let end = header.iter().position(|b| b.is_ascii_whitespace()).unwrap_or(header.len());
    let id = &header[..end];
    // Kraken 2 leaves ids of two characters or fewer alone ("/1" stays "/1").
    if paired && id.len() > 2 && matches!(id, [.., b'/', b'1' | b'2']) { &id[..id.len() - 2] } else { id }
}

/// Writes one Kraken per-read line for `r`, newline-terminated.
///
/// With `names`, the taxid column carries the scientific name as `kraken2 --use-names` prints it.
/// A called taxid missing from `names` is an error of kind `InvalidData`.
pub fn write_kraken_line<W: Write + ?Sized>(w: &mut W, r: &ReadResult, names: Option<&TaxonTree>) -> io::Result<()> {
    write_line_start(w, r, names)?;
    write_hit_list(w, r.hits, r.is_paired())?;
    w.write_all(b"\n")
}

/// [`write_kraken_line`] with the hit-list column given as text, as [`write_hit_list`] writes it
/// (the GPU formats it: `cuda/hit_list.cuh`); `r.hits` is not read.
pub fn write_kraken_line_with_hit_text<W: Write + ?Sized>(
    w: &mut W,
    r: &ReadResult,
    hit_text: &[u8],
    names: Option<&TaxonTree>,
) -> io::Result<()> {
    write_line_start(w, r, names)?;
    w.write_all(hit_text)?;
    w.write_all(b"\n")
}

/// The columns before the hit list, each followed by its tab.
fn write_line_start<W: Write + ?Sized>(w: &mut W, r: &ReadResult, names: Option<&TaxonTree>) -> io::Result<()> {
    debug_assert!(r.is_paired() || r.hits[1].is_empty(), "single-end read {} has hits on a second mate", r.id);
    // Integers through itoa: `write!` is most of a line's cost at millions of lines a second.
    let mut num = itoa::Buffer::new();
    w.write_all(if r.is_classified() { b"C\t" } else { b"U\t" })?;
    w.write_all(r.id.as_bytes())?;
    w.write_all(b"\t")?;
    match names {
        None => w.write_all(num.format(r.taxid).as_bytes())?,
        Some(_) if r.taxid == UNCLASSIFIED => write!(w, "unclassified (taxid 0)")?,
        Some(tree) => {
            let taxon = tree.get(r.taxid).ok_or_else(|| unknown_taxid(r.taxid, &format!("read {}", r.id)))?;
            write!(w, "{} (taxid {})", taxon.name, r.taxid)?;
        }
    }
    w.write_all(b"\t")?;
    w.write_all(num.format(r.lengths.0).as_bytes())?;
    if let Some(len2) = r.lengths.1 {
        w.write_all(b"|")?;
        w.write_all(num.format(len2).as_bytes())?;
    }
    w.write_all(b"\t")
}

/// The hit-list column of a read (`paired`: of a pair) whose mates have the runs `hits`: the
/// CPU twin of the `hit_list_text` kernel.
pub fn write_hit_list<W: Write + ?Sized>(w: &mut W, hits: [&[(TaxId, u32)]; 2], paired: bool) -> io::Result<()> {
    if paired {
        let wrote = write_runs(w, hits[0])?;
        w.write_all(if wrote { b" |:|" } else { b"|:|" })?;
        if has_runs(hits[1]) {
            w.write_all(b" ")?;
            write_runs(w, hits[1])?;
        }
    } else if !write_runs(w, hits[0])? {
        w.write_all(b"0:0")?;
    }
    Ok(())
}

/// The runs of a hit-list column as [`write_hit_list`] writes it (a mate's runs, then `|:|` and
/// the second mate's), into `out` (cleared first); `None` for text it does not write. Runs of one
/// taxid that the column merged stay merged: a mate's features are the runs' counts in order.
pub fn parse_hit_list(text: &[u8], out: &mut [Vec<(TaxId, u32)>; 2]) -> Option<()> {
    out.iter_mut().for_each(Vec::clear);
    let mut mate = 0;
    for token in text.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if token == b"|:|" {
            mate += 1;
            continue;
        }
        let colon = token.iter().position(|&b| b == b':')?;
        let number = |bytes: &[u8]| std::str::from_utf8(bytes).ok()?.parse::<u32>().ok();
        let run = (number(&token[..colon])?, number(&token[colon + 1..])?);
        out.get_mut(mate)?.push(run);
    }
    Some(())
}

fn has_runs(runs: &[(TaxId, u32)]) -> bool {
    runs.iter().any(|&(_, n)| n > 0)
}

/// Writes `runs` as space-separated `taxid:count`, merging adjacent runs of one taxid and
/// skipping empty ones; returns whether anything was written.
fn write_runs<W: Write + ?Sized>(w: &mut W, runs: &[(TaxId, u32)]) -> io::Result<bool> {
    let mut current: Option<(TaxId, u64)> = None;
    let mut wrote = false;
    let mut num = itoa::Buffer::new();
    let mut emit = |w: &mut W, (taxid, n): (TaxId, u64)| -> io::Result<()> {
        if wrote {
            w.write_all(b" ")?;
        }
        wrote = true;
        w.write_all(num.format(taxid).as_bytes())?;
        w.write_all(b":")?;
        w.write_all(num.format(n).as_bytes())
    };
    for &(taxid, n) in runs.iter().filter(|&&(_, n)| n > 0) {
        current = match current {
            Some((t, m)) if t == taxid => Some((t, m + u64::from(n))),
            Some(run) => {
                emit(w, run)?;
                Some((taxid, u64::from(n)))
            }
            None => Some((taxid, u64::from(n))),
        };
    }
    if let Some(run) = current {
        emit(w, run)?;
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests {
    /// A column parses back to runs with the same features, taxon for taxon, for single reads and
    /// pairs, empty mates included.
    #[test]
    fn hit_lists_parse_back_to_their_runs() {
        let cases: [[&[(u32, u32)]; 2]; 5] = [
            [&[(0, 3), (562, 2), (562, 1), (0, 0), (1, 4)], &[(9606, 1)]],
            [&[], &[(2, 5)]],
            [&[(2, 5)], &[]],
            [&[], &[]],
            [&[(0, 0)], &[(0, 2)]],
        ];
        let expand = |runs: &[(u32, u32)]| -> Vec<u32> {
            runs.iter().flat_map(|&(t, n)| std::iter::repeat_n(t, n as usize)).collect()
        };
        for paired in [false, true] {
            for hits in cases {
                let hits = if paired { hits } else { [hits[0], &[][..]] };
                let mut text = Vec::new();
                super::write_hit_list(&mut text, hits, paired).unwrap();
                let mut runs = [Vec::new(), Vec::new()];
                super::parse_hit_list(&text, &mut runs).unwrap();
                for m in 0..2 {
                    assert_eq!(expand(&runs[m]), expand(hits[m]), "{}", String::from_utf8_lossy(&text));
                }
            }
        }
        assert!(super::parse_hit_list(b"12:x", &mut [Vec::new(), Vec::new()]).is_none());
    }

    use super::*;
    use crate::output::test_tree::tree;

    fn line(r: &ReadResult, names: Option<&TaxonTree>) -> String {
        let mut out = Vec::new();
        write_kraken_line(&mut out, r, names).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn single(taxid: TaxId, hits: &[(TaxId, u32)]) -> ReadResult<'_> {
        ReadResult { id: "r1".into(), taxid, lengths: (150, None), hits: [hits, &[]] }
    }

    fn pair<'a>(taxid: TaxId, h1: &'a [(TaxId, u32)], h2: &'a [(TaxId, u32)]) -> ReadResult<'a> {
        ReadResult { id: "p1".into(), taxid, lengths: (150, Some(148)), hits: [h1, h2] }
    }

    #[test]
    fn single_end_lines() {
        let r = single(562, &[(562, 13), (561, 4), (0, 1)]);
        assert_eq!(line(&r, None), "C\tr1\t562\t150\t562:13 561:4 0:1\n");
        let r = single(0, &[(0, 120)]);
        assert_eq!(line(&r, None), "U\tr1\t0\t150\t0:120\n");
    }

    #[test]
    fn read_without_kmers_gets_0_0() {
        // Kraken 2 prints `0:0` when a read yields no k-mer at all (shorter than k).
        let r = ReadResult { lengths: (20, None), ..single(0, &[]) };
        assert_eq!(line(&r, None), "U\tr1\t0\t20\t0:0\n");
    }

    #[test]
    fn runs_are_merged_and_empty_runs_skipped() {
        let r = single(562, &[(562, 3), (562, 2), (0, 0), (561, 1), (0, 0), (561, 1)]);
        assert_eq!(line(&r, None), "C\tr1\t562\t150\t562:5 561:2\n");
    }

    #[test]
    fn pairs_use_bar_lengths_and_mate_separator() {
        let r = pair(562, &[(562, 13), (0, 2)], &[(561, 4), (562, 20)]);
        assert_eq!(line(&r, None), "C\tp1\t562\t150|148\t562:13 0:2 |:| 561:4 562:20\n");
        // Runs never merge across the mate boundary.
        let r = pair(562, &[(562, 1)], &[(562, 1)]);
        assert_eq!(line(&r, None), "C\tp1\t562\t150|148\t562:1 |:| 562:1\n");
    }

    #[test]
    fn pair_with_an_empty_mate_keeps_the_separator() {
        let r = pair(562, &[], &[(562, 3)]);
        assert_eq!(line(&r, None), "C\tp1\t562\t150|148\t|:| 562:3\n");
        let r = pair(562, &[(562, 3)], &[]);
        assert_eq!(line(&r, None), "C\tp1\t562\t150|148\t562:3 |:|\n");
        let r = pair(0, &[], &[]);
        assert_eq!(line(&r, None), "U\tp1\t0\t150|148\t|:|\n");
    }

    #[test]
    fn names_as_kraken2_use_names() {
        let tree = tree();
        let r = single(562, &[(562, 13)]);
        assert_eq!(line(&r, Some(&tree)), "C\tr1\tEscherichia coli (taxid 562)\t150\t562:13\n");
        let r = single(0, &[(0, 5)]);
        assert_eq!(line(&r, Some(&tree)), "U\tr1\tunclassified (taxid 0)\t150\t0:5\n");
    }

    #[test]
    fn unknown_taxid_with_names_is_invalid_data() {
        let tree = tree();
        let err = write_kraken_line(&mut Vec::new(), &single(999, &[]), Some(&tree)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("999"), "{err}");
    }

    #[test]
    fn read_ids() {
        assert_eq!(read_id(b"r1/1", true), "r1");
        assert_eq!(read_id(b"r1/2\tx", true), "r1");
        assert_eq!(read_id(b"r1/3", true), "r1/3");
        assert_eq!(read_id(b"r1/1", false), "r1/1");
        assert_eq!(read_id(b"/1", true), "/1");
        assert_eq!(read_id(b"abc def", false), "abc");
        assert_eq!(read_id(b"", false), "");
    }

    #[test]
    fn writes_through_dyn_write() {
        let mut out = Vec::new();
        let w: &mut dyn Write = &mut out;
        write_kraken_line(w, &single(562, &[(562, 1)]), None).unwrap();
        assert_eq!(out, b"C\tr1\t562\t150\t562:1\n");
    }
}
