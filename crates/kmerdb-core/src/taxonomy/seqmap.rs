//! Reference sequence → taxid: header tags and map files.
//!
//! A reference sequence gets its taxid from a tag in its FASTA header (`kraken:taxid|562` or
//! `taxid|562`, see [`taxid_from_header`]) or from a map file keyed by its id (the header's first
//! word), loaded into a [`SeqIdMap`]. Two map formats are read, plain or gzip (magic bytes):
//!
//! * Kraken's `seqid2taxid.map`: two whitespace-separated columns, `seqid taxid`, no header.
//! * NCBI `*.accession2taxid`: header `accession\taccession.version\ttaxid\tgi`, then four
//!   tab-separated columns.
//!
//! Ids are matched with and without a version suffix (`NC_000913.3` ↔ `NC_000913`). Ids given
//! explicitly (a map's seqid, an accession.version) are *firm*: two different taxids for one firm
//! id, in one file or across files, is an error naming both places, because picking either would
//! silently mislabel a genome. The *weak* keys, the accession column of accession2taxid and the
//! version-stripped form of every firm id, are shared by all versions of an accession: if they
//! disagree the key becomes ambiguous and answers nothing, rather than failing the load. A firm
//! key always beats a weak one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::lines::{for_each_line, parse_u32, quote_field};
use super::{TaxId, TaxonomyError, UNCLASSIFIED};

/// The header line of NCBI `*.accession2taxid` files.
const ACCESSION2TAXID_HEADER: &[u8] = b"accession\taccession.version\ttaxid\tgi";

/// The taxid tagged in a FASTA header, e.g. `562` for `>seq1|kraken:taxid|562 E. coli`.
///
/// Recognises `kraken:taxid|N` and `taxid|N` anywhere in the header (id or description), where
/// `taxid` is not part of a longer word and `N` is a run of digits ended by a non-digit or the end.
/// Returns the first such tag; `None` if there is none or it is 0.
///
/// ```
/// # use kmerdb_core::taxonomy::taxid_from_header;
/// assert_eq!(taxid_from_header(">seq1|kraken:taxid|562 E. coli"), Some(562));
/// assert_eq!(taxid_from_header("NC_000913.3 taxid|511145"), Some(511145));
/// assert_eq!(taxid_from_header("NC_000913.3 Escherichia coli"), None);
/// ```
pub fn taxid_from_header(id_and_desc: &str) -> Option<TaxId> {
    const TAG: &str = "taxid|";
    let bytes = id_and_desc.as_bytes();
    let mut from = 0;
    while let Some(p) = id_and_desc[from..].find(TAG) {
        let at = from + p;
        from = at + TAG.len();
        let standalone = at == 0 || {
            let before = bytes[at - 1];
            !(before.is_ascii_alphanumeric() || before == b'_')
        };
        if !standalone {
            continue;
        }
        let digits = bytes[from..].iter().take_while(|b| b.is_ascii_digit()).count();
        match parse_u32(&bytes[from..from + digits]) {
            Some(UNCLASSIFIED) | None => continue,
            Some(taxid) => return Some(taxid),
        }
    }
    None
}

/// How a key entered the map; see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strength {
    /// Given by a weak key that disagrees with another weak key: answers nothing.
    Ambiguous,
    /// A version-stripped id or an accession2taxid accession column.
    Weak,
    /// A seqid or accession.version.
    Firm,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    taxid: TaxId,
    strength: Strength,
    /// Index into `SeqIdMap::files` and 1-based line, for conflict messages.
    file: u32,
    line: u32,
}

/// Sequence id → taxid, loaded from Kraken `seqid2taxid.map` and NCBI `*.accession2taxid` files.
#[derive(Debug, Default)]
pub struct SeqIdMap {
    entries: HashMap<Box<str>, Entry>,
    files: Vec<PathBuf>,
    ambiguous: usize,
}

impl SeqIdMap {
    /// Loads every file in `paths` (formats detected per file; see the module comment).
    pub fn load(paths: &[PathBuf]) -> Result<Self, TaxonomyError> {
        Self::load_filtered(paths, |_| true)
    }

    /// Like [`SeqIdMap::load`], but keeps only lines whose id passes `keep` (for accession2taxid,
    /// either the accession or the accession.version). Use it to read NCBI's very large
    /// accession2taxid files for just the references being indexed.
    pub fn load_filtered(paths: &[PathBuf], keep: impl Fn(&str) -> bool) -> Result<Self, TaxonomyError> {
        let mut map = SeqIdMap::default();
        for path in paths {
            map.load_file(path, &keep)?;
        }
        if map.ambiguous > 0 {
            log::warn!("{} version-less sequence ids map to several taxids and will match nothing", map.ambiguous);
        }
        Ok(map)
    }

    /// The taxid of `seqid`, trying it as given, then without its version suffix
    /// (`NC_000913.3` → `NC_000913`). A version-less id also finds a versioned entry
    /// (`NC_000913` → `NC_000913.3`) if all its versions agree.
    pub fn get(&self, seqid: &str) -> Option<TaxId> {
        self.lookup(seqid).or_else(|| strip_version(seqid).and_then(|base| self.lookup(base)))
    }

    /// Number of distinct keys (ids as given plus their version-stripped forms).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if no ids were loaded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn lookup(&self, key: &str) -> Option<TaxId> {
        self.entries.get(key).filter(|e| e.strength != Strength::Ambiguous).map(|e| e.taxid)
    }

    fn load_file(&mut self, path: &Path, keep: &impl Fn(&str) -> bool) -> Result<(), TaxonomyError> {
        let file = u32::try_from(self.files.len()).unwrap_or(u32::MAX);
        self.files.push(path.to_path_buf());
        let mut accession2taxid = false;
        let mut ignored_zero = 0usize;
        for_each_line(path, |line_no, line| {
            if line_no == 1 && line == ACCESSION2TAXID_HEADER {
                accession2taxid = true;
                return Ok(());
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            let text = std::str::from_utf8(line)
                .map_err(|_| TaxonomyError::malformed(path, line_no, "line is not valid UTF-8"))?;
            let at = (file, u32::try_from(line_no).unwrap_or(u32::MAX));
            if accession2taxid {
                let mut fields = text.split('\t');
                let (Some(accession), Some(versioned), Some(taxid), Some(_gi), None) =
                    (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
                else {
                    return Err(TaxonomyError::malformed(
                        path,
                        line_no,
                        format!(
                            "expected 4 tab-separated columns (accession, accession.version, \
                             taxid, gi), found {}",
                            text.split('\t').count()
                        ),
                    ));
                };
                let taxid = taxid_field(path, line_no, taxid)?;
                if !(keep(accession) || keep(versioned)) {
                    return Ok(());
                }
                if taxid == UNCLASSIFIED {
                    ignored_zero += 1;
                    return Ok(());
                }
                self.insert(versioned, taxid, Strength::Firm, at)?;
                self.insert(accession, taxid, Strength::Weak, at)?;
                if let Some(base) = strip_version(versioned) {
                    self.insert(base, taxid, Strength::Weak, at)?;
                }
            } else {
                let mut words = text.split_ascii_whitespace();
                let (Some(seqid), Some(taxid), None) = (words.next(), words.next(), words.next()) else {
                    return Err(TaxonomyError::malformed(
                        path,
                        line_no,
                        format!(
                            "expected 2 columns (sequence id, taxid), found {}",
                            text.split_ascii_whitespace().count()
                        ),
                    ));
                };
                let taxid = taxid_field(path, line_no, taxid)?;
                if !keep(seqid) {
                    return Ok(());
                }
                if taxid == UNCLASSIFIED {
                    ignored_zero += 1;
                    return Ok(());
                }
                self.insert(seqid, taxid, Strength::Firm, at)?;
                if let Some(base) = strip_version(seqid) {
                    self.insert(base, taxid, Strength::Weak, at)?;
                }
            }
            Ok(())
        })?;
        if ignored_zero > 0 {
            log::warn!("{}: {ignored_zero} ids with taxid 0 (no taxon) ignored", path.display());
        }
        Ok(())
    }

    /// Adds `key → taxid`, resolving clashes by strength (see the module comment).
    fn insert(
        &mut self,
        key: &str,
        taxid: TaxId,
        strength: Strength,
        (file, line): (u32, u32),
    ) -> Result<(), TaxonomyError> {
        let new = Entry { taxid, strength, file, line };
        let Some(old) = self.entries.get_mut(key) else {
            self.entries.insert(key.into(), new);
            return Ok(());
        };
        match (old.strength, strength) {
            (Strength::Firm, Strength::Firm) if old.taxid != taxid => {
                let place = |f: u32| self.files.get(f as usize).cloned().unwrap_or_default();
                Err(TaxonomyError::ConflictingTaxid {
                    id: key.to_owned(),
                    first_taxid: old.taxid,
                    first_path: place(old.file),
                    first_line: old.line as usize,
                    second_taxid: taxid,
                    second_path: place(file),
                    second_line: line as usize,
                })
            }
            (Strength::Firm, _) => Ok(()),
            (_, Strength::Firm) => {
                *old = new;
                Ok(())
            }
            (Strength::Weak, Strength::Weak) if old.taxid != taxid => {
                old.strength = Strength::Ambiguous;
                self.ambiguous += 1;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

fn taxid_field(path: &Path, line_no: usize, field: &str) -> Result<TaxId, TaxonomyError> {
    parse_u32(field.as_bytes()).ok_or_else(|| {
        TaxonomyError::malformed(
            path,
            line_no,
            format!("expected a numeric taxid, found {}", quote_field(field.as_bytes())),
        )
    })
}

/// `NC_000913` for `NC_000913.3`: the id without a final `.digits`, if it has one.
fn strip_version(id: &str) -> Option<&str> {
    let (base, version) = id.rsplit_once('.')?;
    (!base.is_empty() && !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit())).then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_plain(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write fixture");
        path
    }

    use crate::test_support::write_gz;

    #[test]
    fn header_tags() {
        assert_eq!(taxid_from_header(">seq1|kraken:taxid|562 desc"), Some(562));
        assert_eq!(taxid_from_header("seq1|kraken:taxid|562"), Some(562));
        assert_eq!(taxid_from_header("kraken:taxid|562|NC_000913.3 E. coli"), Some(562));
        assert_eq!(taxid_from_header("taxid|9606"), Some(9606));
        assert_eq!(taxid_from_header("NC_1 some genome taxid|1280 more"), Some(1280));
        assert_eq!(taxid_from_header("x taxid|abc taxid|7"), Some(7));
        assert_eq!(taxid_from_header("mytaxid|5"), None);
        assert_eq!(taxid_from_header("taxid|0"), None);
        assert_eq!(taxid_from_header("taxid|99999999999"), None);
        assert_eq!(taxid_from_header("NC_000913.3 Escherichia coli"), None);
        assert_eq!(taxid_from_header(""), None);
    }

    #[test]
    fn version_stripping() {
        assert_eq!(strip_version("NC_000913.3"), Some("NC_000913"));
        assert_eq!(strip_version("NC_000913"), None);
        assert_eq!(strip_version("contig.a"), None);
        assert_eq!(strip_version("x."), None);
        assert_eq!(strip_version(".3"), None);
    }

    #[test]
    fn kraken_map_plain_and_gz() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_plain(dir.path(), "a.map", "NC_000913.3\t511145\nEcoli_1 562\r\n\n");
        let b = write_gz(dir.path(), "b.map", "NZ_CP016182\t562\n");
        let map = SeqIdMap::load(&[a, b]).expect("load");
        assert_eq!(map.get("NC_000913.3"), Some(511145));
        // Version stripped from the query, and found without one.
        assert_eq!(map.get("NC_000913.2"), Some(511145));
        assert_eq!(map.get("NC_000913"), Some(511145));
        // Unversioned in the map, versioned in the query.
        assert_eq!(map.get("NZ_CP016182.2"), Some(562));
        assert_eq!(map.get("Ecoli_1"), Some(562));
        assert_eq!(map.get("Ecoli"), None);
        assert_eq!(map.get("other"), None);
    }

    #[test]
    fn accession2taxid_maps_both_columns() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_gz(
            dir.path(),
            "nucl_gb.accession2taxid.gz",
            "accession\taccession.version\ttaxid\tgi\n\
             A00001\tA00001.1\t10641\t58418\n\
             NC_1\tNC_1.2\t562\tna\n\
             Z_0\tZ_0.1\t0\t1\n",
        );
        let map = SeqIdMap::load(&[path]).expect("load");
        assert_eq!(map.get("A00001"), Some(10641));
        assert_eq!(map.get("A00001.1"), Some(10641));
        assert_eq!(map.get("NC_1.2"), Some(562));
        assert_eq!(map.get("NC_1.1"), Some(562));
        assert_eq!(map.get("NC_1"), Some(562));
        assert_eq!(map.get("Z_0.1"), None);
        // The header is not an entry.
        assert_eq!(map.get("accession"), None);
    }

    #[test]
    fn filter_keeps_only_wanted_ids() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_plain(
            dir.path(),
            "x.accession2taxid",
            "accession\taccession.version\ttaxid\tgi\nA\tA.1\t5\t1\nB\tB.1\t6\t2\n",
        );
        let map = SeqIdMap::load_filtered(&[path], |id| id == "B.1").expect("load");
        assert_eq!(map.get("A.1"), None);
        assert_eq!(map.get("B.1"), Some(6));
    }

    #[test]
    fn conflicting_taxids_name_both_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_plain(dir.path(), "first.map", "x\t1\nNC_5.1\t562\n");
        let b = write_plain(
            dir.path(),
            "second.accession2taxid",
            "accession\taccession.version\ttaxid\tgi\nNC_5\tNC_5.1\t561\t0\n",
        );
        let err = SeqIdMap::load(&[a, b]).expect_err("conflict");
        let msg = err.to_string();
        assert!(msg.contains("\"NC_5.1\" has taxid 562 in "), "{msg}");
        assert!(msg.contains("first.map line 2 but taxid 561 in "), "{msg}");
        assert!(msg.ends_with("second.accession2taxid line 2"), "{msg}");
        // Within one file too.
        let c = write_plain(dir.path(), "c.map", "s\t1\ns\t2\n");
        assert!(matches!(
            SeqIdMap::load(&[c]),
            Err(TaxonomyError::ConflictingTaxid { first_line: 1, second_line: 2, .. })
        ));
    }

    #[test]
    fn agreeing_duplicates_and_ambiguous_versions() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_plain(dir.path(), "a.map", "s\t1\nV.1\t10\n");
        let b = write_plain(dir.path(), "b.map", "s\t1\nV.2\t20\n");
        let map = SeqIdMap::load(&[a, b]).expect("same taxid twice is fine");
        assert_eq!(map.get("s"), Some(1));
        assert_eq!(map.get("V.1"), Some(10));
        assert_eq!(map.get("V.2"), Some(20));
        // The versions disagree, so the bare accession answers nothing.
        assert_eq!(map.get("V"), None);
        assert_eq!(map.get("V.3"), None);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = write_plain(dir.path(), "a.map", "ok\t1\nbad\tx12\n");
        let msg = SeqIdMap::load(&[a]).expect_err("bad taxid").to_string();
        assert!(msg.ends_with("a.map line 2: expected a numeric taxid, found \"x12\""), "{msg}");
        let b = write_plain(dir.path(), "b.map", "ok\t1\nthree\tcolumns\there\n");
        let msg = SeqIdMap::load(&[b]).expect_err("3 columns").to_string();
        assert!(msg.ends_with("b.map line 2: expected 2 columns (sequence id, taxid), found 3"), "{msg}");
        let c = write_plain(dir.path(), "c.accession2taxid", "accession\taccession.version\ttaxid\tgi\nA\tA.1\t5\n");
        let msg = SeqIdMap::load(&[c]).expect_err("3 columns").to_string();
        assert!(msg.contains("c.accession2taxid line 2: expected 4 tab-separated columns"), "{msg}");
    }

    /// The bundled map (`data/seqid2taxid.map`), always there: versioned accessions, found with
    /// and without their version, and ids that are not accessions.
    #[test]
    fn loads_the_bundled_seqid2taxid_map() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/seqid2taxid.map");
        let map = SeqIdMap::load(&[path]).expect("load");
        assert_eq!(map.get("NC_008253.1"), Some(362663));
        assert_eq!(map.get("NC_002951.2"), Some(93062));
        assert_eq!(map.get("NC_002951"), Some(93062));
        assert_eq!(map.get("Ecoli_K12_MG1655_1"), Some(511145));
        assert_eq!(map.get("NC_999999.1"), None);
    }
}
