//! The full NCBI taxonomy, loaded from a `taxdump` directory, and pruning it to what an index needs.
//!
//! Input: `nodes.dmp` and `names.dmp` (required) and `merged.dmp` (optional), each plain or gzip
//! (detected from magic bytes) and each found as `NAME` or `NAME.gz`. Fields are separated by
//! `\t|\t` and lines end with `\t|`. Only names of class `scientific name` are kept.
//!
//! Speed matters (2.6 M taxa, ~250 MB of text once inflated): `nodes.dmp` and `names.dmp` are
//! parsed on two threads, each fed by its own inflate thread when gzipped; fields are split at the
//! byte level, and nothing is allocated per line except the kept name, appended to one shared
//! buffer (UTF-8 checked once at the end). Taxa are stored as parallel arrays in file order
//! ("rows"), reached through a [`TaxIndex`].
//!
//! Invariants checked at load, so that every later walk up the tree terminates: taxid 1 exists and
//! is its own parent, no other taxon is, no taxid is defined twice, every parent is defined, and
//! every taxon reaches the root.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::index::{TaxIndex, TaxidMap};
use super::lines::{find_byte, for_each_line, parse_u32, quote_field};
use super::{ROOT, TaxId, Taxon, TaxonomyError, UNCLASSIFIED};

/// The separator between fields of a `.dmp` line.
const SEP: &[u8] = b"\t|\t";

/// Row sentinel meaning "no scientific name".
const NO_NAME: u32 = u32::MAX;

/// The NCBI taxonomy as read from `nodes.dmp`, `names.dmp` and `merged.dmp`.
pub struct NcbiTaxonomy {
    /// Taxid of each row.
    taxids: Vec<TaxId>,
    /// Row of each row's parent (the root is its own parent).
    parent_rows: Vec<u32>,
    /// Index into `ranks` of each row's rank.
    rank_ids: Vec<u16>,
    /// Distinct rank strings, in order of first appearance.
    ranks: Vec<String>,
    /// Start and length of each row's scientific name in `names`; start [`NO_NAME`] if none.
    name_spans: Vec<(u32, u32)>,
    /// All scientific names, concatenated.
    names: String,
    /// Taxid → row.
    index: TaxIndex,
    /// Retired taxid → its replacement, from `merged.dmp`.
    merged: TaxidMap<TaxId>,
    /// `names.dmp`, when it was not read with the nodes (see [`NcbiTaxonomy::load_dir_without_names`]).
    names_path: Option<PathBuf>,
}

/// A summary: the arrays hold millions of entries.
impl std::fmt::Debug for NcbiTaxonomy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcbiTaxonomy")
            .field("taxa", &self.taxids.len())
            .field("merged", &self.merged.len())
            .field("ranks", &self.ranks.len())
            .finish_non_exhaustive()
    }
}

/// `nodes.dmp` as parsed, before names are attached.
struct Nodes {
    taxids: Vec<TaxId>,
    parent_rows: Vec<u32>,
    rank_ids: Vec<u16>,
    ranks: Vec<String>,
    index: TaxIndex,
}

/// Scientific names as parsed from `names.dmp`, not yet matched to rows.
struct Names {
    path: PathBuf,
    /// `(taxid, start in buffer)` per scientific name, in file order; a name ends where the next
    /// one starts.
    records: Vec<(TaxId, u32)>,
    buffer: String,
}

/// Interns rank strings. Most lines repeat the previous line's rank ("species"), so that is
/// checked first, then a linear scan of the ~50 distinct ranks, cheaper than hashing.
#[derive(Default)]
struct RankTable {
    ranks: Vec<String>,
    last: usize,
}

impl RankTable {
    #[inline]
    fn id(&mut self, rank: &[u8]) -> Result<u16, &'static str> {
        let id = if self.ranks.get(self.last).is_some_and(|r| r.as_bytes() == rank) {
            self.last
        } else if let Some(id) = self.ranks.iter().position(|r| r.as_bytes() == rank) {
            id
        } else {
            // As for names: a tab or a carriage return in a rank would break tab-separated outputs.
            if rank.iter().any(|&b| b == b'\t' || b == b'\r') {
                return Err("the rank holds a tab or a carriage return");
            }
            let text = std::str::from_utf8(rank).map_err(|_| "rank is not valid UTF-8")?;
            self.ranks.push(text.to_owned());
            self.ranks.len() - 1
        };
        self.last = id;
        u16::try_from(id).map_err(|_| "more than 65535 distinct ranks")
    }
}

impl NcbiTaxonomy {
    /// Loads `nodes.dmp`, `names.dmp` and, if present, `merged.dmp` (each plain or `.gz`) from `dir`.
    ///
    /// ```no_run
    /// # use kmerdb_core::taxonomy::NcbiTaxonomy;
    /// let tax = NcbiTaxonomy::load_dir(std::path::Path::new("taxonomy"))?;
    /// assert_eq!(tax.name(562), "Escherichia coli");
    /// # Ok::<(), kmerdb_core::taxonomy::TaxonomyError>(())
    /// ```
    pub fn load_dir(dir: &Path) -> Result<Self, TaxonomyError> {
        Self::load(dir, true)
    }

    /// Loads `nodes.dmp` and `merged.dmp` only: a fraction of the memory (names are most of it).
    /// [`NcbiTaxonomy::load_names`] then reads the names of just the taxa that are needed.
    pub fn load_dir_without_names(dir: &Path) -> Result<Self, TaxonomyError> {
        Self::load(dir, false)
    }

    /// Reads the scientific names of `taxids` (others stay unnamed) from the `names.dmp` of a
    /// taxonomy loaded without names; does nothing for one loaded whole.
    pub fn load_names(&mut self, taxids: &[TaxId]) -> Result<(), TaxonomyError> {
        let Some(path) = self.names_path.take() else { return Ok(()) };
        let keep: std::collections::HashSet<TaxId> = taxids.iter().copied().collect();
        let names = parse_names(&path, Some(&keep))?;
        self.attach_names(names, false)?;
        let unnamed = taxids.iter().filter(|&&t| self.contains(t) && self.name(t).is_empty()).count();
        if unnamed > 0 {
            log::warn!("{}: {unnamed} taxa have no scientific name", path.display());
        }
        Ok(())
    }

    fn load(dir: &Path, with_names: bool) -> Result<Self, TaxonomyError> {
        let start = Instant::now();
        let nodes_path = find_dump(dir, "nodes.dmp")?.ok_or_else(|| missing(dir, "nodes.dmp"))?;
        let names_path = find_dump(dir, "names.dmp")?.ok_or_else(|| missing(dir, "names.dmp"))?;
        let merged_path = find_dump(dir, "merged.dmp")?;

        // Each gzip file also gets its own inflate thread (see `lines::open_maybe_gz`).
        let (nodes, names) = std::thread::scope(|scope| {
            let names = scope.spawn(|| {
                if with_names { timed("names", || parse_names(&names_path, None)).map(Some) } else { Ok(None) }
            });
            // nodes.dmp is the smaller file: its thread also reads merged.dmp.
            let nodes = timed("nodes", || parse_nodes(&nodes_path)).and_then(|nodes| {
                let merged = match &merged_path {
                    Some(path) => timed("merged", || parse_merged(path))?,
                    None => TaxidMap::default(),
                };
                Ok((nodes, merged))
            });
            let names = names.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (nodes, names)
        });
        let (nodes, merged) = nodes?;
        let names = names?;

        let mut tax = NcbiTaxonomy {
            name_spans: vec![(NO_NAME, 0); nodes.taxids.len()],
            taxids: nodes.taxids,
            parent_rows: nodes.parent_rows,
            rank_ids: nodes.rank_ids,
            ranks: nodes.ranks,
            names: String::new(),
            index: nodes.index,
            merged,
            names_path: (!with_names).then(|| names_path.clone()),
        };
        if let Some(names) = names {
            tax.attach_names(names, true)?;
        }
        log::info!(
            "loaded {} taxa ({} merged ids) from {} in {:.2} s",
            tax.len(),
            tax.merged.len(),
            dir.display(),
            start.elapsed().as_secs_f64()
        );
        Ok(tax)
    }

    /// A checksum of the tree: every taxon's taxid, parent and rank (in the dump's order) and the
    /// retired taxids with their replacements (by taxid). Names are left out, so that it is the same
    /// whether or not they were loaded. Two indexes built with one dump have the same; `kmerdb
    /// merge` refuses parts whose taxonomies differ.
    pub fn checksum(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(b"kmerdb-ncbi-taxonomy-1");
        // Column by column, each array hashed whole (little-endian hosts only: see `index::format`).
        let parents: Vec<TaxId> = self.parent_rows.iter().map(|&p| self.taxids[p as usize]).collect();
        for column in [bytemuck::cast_slice::<TaxId, u8>(&self.taxids), bytemuck::cast_slice(&parents)] {
            h.update(&(column.len() as u64).to_le_bytes());
            h.update(column);
        }
        h.update(bytemuck::cast_slice::<u16, u8>(&self.rank_ids));
        for rank in &self.ranks {
            h.update(&(rank.len() as u64).to_le_bytes());
            h.update(rank.as_bytes());
        }
        let mut merged: Vec<(TaxId, TaxId)> = self.merged.iter().map(|(&a, &b)| (a, b)).collect();
        merged.sort_unstable();
        for (old, new) in merged {
            h.update(&old.to_le_bytes());
            h.update(&new.to_le_bytes());
        }
        h.digest()
    }

    /// Number of taxa (not counting merged ids).
    pub fn len(&self) -> usize {
        self.taxids.len()
    }

    /// True if no taxa were loaded (never the case after a successful [`NcbiTaxonomy::load_dir`]).
    pub fn is_empty(&self) -> bool {
        self.taxids.is_empty()
    }

    /// True if `taxid` is a current taxon (merged ids are not).
    pub fn contains(&self, taxid: TaxId) -> bool {
        self.index.get(taxid).is_some()
    }

    /// The current taxid for `taxid`: itself if current, its replacement if it was merged into
    /// another taxon (`merged.dmp`), `None` if unknown.
    pub fn resolve(&self, taxid: TaxId) -> Option<TaxId> {
        let mut current = taxid;
        // merged.dmp points at current ids, but follow a short chain in case a dump does not.
        for _ in 0..8 {
            if self.contains(current) {
                return Some(current);
            }
            current = *self.merged.get(&current)?;
        }
        None
    }

    /// The parent of `taxid`; `None` for the root (whose stored parent is itself) and for unknown
    /// taxids.
    pub fn parent(&self, taxid: TaxId) -> Option<TaxId> {
        let row = self.index.get(taxid)? as usize;
        let parent = self.taxids[self.parent_rows[row] as usize];
        (parent != taxid).then_some(parent)
    }

    /// The rank of `taxid` (`"species"`, `"no rank"`, ...); `""` if unknown.
    pub fn rank(&self, taxid: TaxId) -> &str {
        match self.index.get(taxid) {
            Some(row) => &self.ranks[self.rank_ids[row as usize] as usize],
            None => "",
        }
    }

    /// The scientific name of `taxid`; `""` if unknown or if `names.dmp` gives it none.
    pub fn name(&self, taxid: TaxId) -> &str {
        match self.index.get(taxid) {
            Some(row) => self.row_name(row as usize),
            None => "",
        }
    }

    /// `taxid` as a [`Taxon`], if known.
    pub fn taxon(&self, taxid: TaxId) -> Option<Taxon> {
        self.index.get(taxid).map(|row| self.row_taxon(row as usize))
    }

    /// The taxids from `taxid` up to the root, root first; empty if unknown.
    pub fn lineage(&self, taxid: TaxId) -> Vec<TaxId> {
        let mut out = Vec::new();
        if let Some(mut row) = self.index.get(taxid).map(|r| r as usize) {
            loop {
                out.push(self.taxids[row]);
                let parent = self.parent_rows[row] as usize;
                if parent == row {
                    break;
                }
                row = parent;
            }
        }
        out.reverse();
        out
    }

    /// The union of the lineages of `keep` (up to and including the root, taxid 1, whose parent is
    /// 1), sorted by taxid. The root is always included, so the result is a valid input to
    /// [`super::TaxonTree::new`] even for an empty `keep`.
    ///
    /// `keep` should hold current taxids (see [`NcbiTaxonomy::resolve`]); unknown ones are skipped
    /// with a warning. Use `NcbiTaxonomy::try_prune` to have them rejected instead.
    pub fn prune(&self, keep: &[TaxId]) -> Vec<Taxon> {
        let mut unknown = 0usize;
        let rows = self.lineage_rows(keep, |taxid| {
            if unknown < 5 {
                log::warn!("prune: taxid {taxid} is not in the taxonomy; skipped");
            }
            unknown += 1;
        });
        if unknown > 0 {
            log::warn!("prune: {unknown} taxids not in the taxonomy were skipped");
        }
        rows.into_iter().map(|row| self.row_taxon(row)).collect()
    }

    /// Rows of the union of the lineages of `keep`, sorted by taxid.
    fn lineage_rows(&self, keep: &[TaxId], mut on_unknown: impl FnMut(TaxId)) -> Vec<usize> {
        let root = self.index.get(ROOT).map(|r| r as usize);
        let mut seen: TaxidMap<()> = TaxidMap::default();
        let mut rows = Vec::new();
        for &row in root.iter() {
            seen.insert(row as u32, ());
            rows.push(row);
        }
        for &taxid in keep {
            let Some(mut row) = self.index.get(taxid).map(|r| r as usize) else {
                on_unknown(taxid);
                continue;
            };
            // Stops at the first row already collected; the root is collected up front.
            while seen.insert(row as u32, ()).is_none() {
                rows.push(row);
                row = self.parent_rows[row] as usize;
            }
        }
        rows.sort_unstable_by_key(|&row| self.taxids[row]);
        rows
    }

    fn row_name(&self, row: usize) -> &str {
        let (start, len) = self.name_spans[row];
        if start == NO_NAME {
            return "";
        }
        &self.names[start as usize..(start + len) as usize]
    }

    fn row_taxon(&self, row: usize) -> Taxon {
        Taxon {
            taxid: self.taxids[row],
            parent: self.taxids[self.parent_rows[row] as usize],
            rank: self.ranks[self.rank_ids[row] as usize].clone(),
            name: self.row_name(row).to_owned(),
        }
    }

    /// Matches parsed scientific names to rows. A taxid named twice is an error; names of taxids
    /// absent from `nodes.dmp` are counted and reported as a warning.
    fn attach_names(&mut self, names: Names, warn_unnamed: bool) -> Result<(), TaxonomyError> {
        let mut orphans = 0usize;
        let ends = names.records.iter().skip(1).map(|&(_, start)| start).chain([names.buffer.len() as u32]);
        for (&(taxid, start), end) in names.records.iter().zip(ends) {
            let Some(row) = self.index.get(taxid) else {
                orphans += 1;
                continue;
            };
            let span = &mut self.name_spans[row as usize];
            if span.0 != NO_NAME {
                return Err(second_name_error(&names.path, taxid));
            }
            *span = (start, end - start);
        }
        self.names = names.buffer;
        if orphans > 0 {
            log::warn!("{}: {orphans} scientific names belong to taxids absent from nodes.dmp", names.path.display());
        }
        let unnamed = self.name_spans.iter().filter(|s| s.0 == NO_NAME).count();
        if warn_unnamed && unnamed > 0 {
            log::warn!("{}: {unnamed} taxa have no scientific name", names.path.display());
        }
        Ok(())
    }
}

/// Runs `f`, logging how long it took at debug level.
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    log::debug!("{what}.dmp read in {:.3} s", start.elapsed().as_secs_f64());
    out
}

/// `dir/name` if it exists, else `dir/name.gz` if it exists, else `None`.
fn find_dump(dir: &Path, name: &str) -> Result<Option<PathBuf>, TaxonomyError> {
    for candidate in [dir.join(name), dir.join(format!("{name}.gz"))] {
        match candidate.try_exists() {
            Ok(true) => return Ok(Some(candidate)),
            Ok(false) => {}
            Err(e) => return Err(TaxonomyError::io(candidate, e)),
        }
    }
    Ok(None)
}

fn missing(dir: &Path, name: &str) -> TaxonomyError {
    TaxonomyError::MissingFile { dir: dir.to_path_buf(), name: name.to_owned() }
}

/// Removes the `\t|` that ends every `.dmp` line (the line terminator is already gone).
fn strip_dmp_end(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\t|").unwrap_or(line)
}

/// Splits the first `N` fields off a `.dmp` line; `Err(found)` if it has fewer.
#[inline]
fn leading_fields<const N: usize>(line: &[u8]) -> Result<[&[u8]; N], usize> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut rest = line;
    for (i, slot) in out.iter_mut().enumerate() {
        match find_sep(rest) {
            Some(at) => {
                *slot = &rest[..at];
                rest = &rest[at + SEP.len()..];
            }
            None if i + 1 == N => {
                *slot = rest;
            }
            None => return Err(i + 1),
        }
    }
    Ok(out)
}

/// Position of the next `\t|\t` in `bytes`.
#[inline]
fn find_sep(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = find_byte(&bytes[from..], b'\t') {
        let at = from + p;
        if bytes[at..].starts_with(SEP) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

fn too_few_fields(path: &Path, line: usize, expected: usize, found: usize) -> TaxonomyError {
    TaxonomyError::malformed(
        path,
        line,
        format!("expected at least {expected} fields separated by \"\\t|\\t\", found {found}"),
    )
}

fn number_field(path: &Path, line: usize, what: &str, field: &[u8]) -> Result<TaxId, TaxonomyError> {
    parse_u32(field).ok_or_else(|| {
        TaxonomyError::malformed(path, line, format!("expected a numeric {what}, found {}", quote_field(field)))
    })
}

/// Parses `nodes.dmp` (fields: taxid, parent taxid, rank, ...) and validates the tree shape.
/// Every line is a taxon, so row `i` is line `i + 1`.
fn parse_nodes(path: &Path) -> Result<Nodes, TaxonomyError> {
    let mut taxids = Vec::with_capacity(1 << 16);
    let mut parents = Vec::with_capacity(1 << 16);
    let mut rank_ids = Vec::with_capacity(1 << 16);
    let mut ranks = RankTable::default();
    for_each_line(path, |line_no, line| {
        let [taxid, parent, rank] =
            leading_fields::<3>(strip_dmp_end(line)).map_err(|found| too_few_fields(path, line_no, 3, found))?;
        let taxid = number_field(path, line_no, "taxid", taxid)?;
        if taxid == UNCLASSIFIED {
            return Err(TaxonomyError::malformed(path, line_no, "taxid 0 is reserved for unclassified reads"));
        }
        taxids.push(taxid);
        parents.push(number_field(path, line_no, "parent taxid", parent)?);
        rank_ids.push(ranks.id(rank).map_err(|reason| TaxonomyError::malformed(path, line_no, reason))?);
        Ok(())
    })?;
    let ranks = ranks.ranks;

    let index = TaxIndex::build(&taxids).map_err(|row| {
        TaxonomyError::malformed(path, row + 1, format!("taxid {} is defined a second time", taxids[row]))
    })?;
    let mut parent_rows = Vec::with_capacity(taxids.len());
    for (row, (&taxid, &parent)) in taxids.iter().zip(&parents).enumerate() {
        let Some(parent_row) = index.get(parent) else {
            return Err(TaxonomyError::malformed(
                path,
                row + 1,
                format!("parent taxid {parent} of taxid {taxid} is not defined in this file"),
            ));
        };
        if parent == taxid && taxid != ROOT {
            return Err(TaxonomyError::malformed(
                path,
                row + 1,
                format!("taxid {taxid} is its own parent, but only the root (taxid 1) may be"),
            ));
        }
        parent_rows.push(parent_row);
    }
    match index.get(ROOT) {
        Some(row) if parents[row as usize] == ROOT => {}
        Some(row) => {
            return Err(TaxonomyError::malformed(path, row as usize + 1, "the root, taxid 1, must be its own parent"));
        }
        None => {
            return Err(TaxonomyError::malformed(path, taxids.len(), "no root: taxid 1 is not defined"));
        }
    }
    if let Some(row) = find_cycle(&parent_rows) {
        return Err(TaxonomyError::malformed(
            path,
            row + 1,
            format!("taxid {} does not reach the root: its parents form a cycle", taxids[row]),
        ));
    }
    Ok(Nodes { taxids, parent_rows, rank_ids, ranks, index })
}

/// Returns a row whose chain of parents loops without reaching a self-parented row, if any.
/// Linear time: each row is walked over at most once before being marked done.
fn find_cycle(parent_rows: &[u32]) -> Option<usize> {
    const UNSEEN: u8 = 0;
    const ON_PATH: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![UNSEEN; parent_rows.len()];
    let mut path = Vec::new();
    for start in 0..parent_rows.len() {
        let mut row = start;
        while state[row] == UNSEEN {
            state[row] = ON_PATH;
            path.push(row);
            let parent = parent_rows[row] as usize;
            if parent == row {
                break;
            }
            row = parent;
        }
        if state[row] == ON_PATH && parent_rows[row] as usize != row {
            return Some(row);
        }
        for &r in &path {
            state[r] = DONE;
        }
        path.clear();
    }
    None
}

/// Parses `names.dmp` (fields: taxid, name, unique name, name class), keeping scientific names.
fn parse_names(path: &Path, keep: Option<&std::collections::HashSet<TaxId>>) -> Result<Names, TaxonomyError> {
    let mut records = Vec::with_capacity(1 << 16);
    // Bytes for now: UTF-8 is checked once over the whole buffer, much faster than per name.
    let mut buffer: Vec<u8> = Vec::with_capacity(1 << 20);
    for_each_line(path, |line_no, line| {
        let [taxid, name, _unique, class] =
            leading_fields::<4>(strip_dmp_end(line)).map_err(|found| too_few_fields(path, line_no, 4, found))?;
        let taxid = number_field(path, line_no, "taxid", taxid)?;
        if class != b"scientific name" || keep.is_some_and(|k| !k.contains(&taxid)) {
            return Ok(());
        }
        // A tab or a carriage return (a line break is the line's end) would break every
        // tab-separated report that prints the name.
        if name.iter().any(|&b| b == b'\t' || b == b'\r') {
            return Err(TaxonomyError::malformed(
                path,
                line_no,
                format!("the scientific name of taxid {taxid} holds a tab or a carriage return"),
            ));
        }
        let start = u32::try_from(buffer.len())
            .ok()
            .filter(|s| s.checked_add(name.len() as u32).is_some())
            .ok_or_else(|| TaxonomyError::malformed(path, line_no, "scientific names exceed 4 GiB in total"))?;
        buffer.extend_from_slice(name);
        records.push((taxid, start));
        Ok(())
    })?;
    let buffer = String::from_utf8(buffer).map_err(|_| invalid_utf8_error(path))?;
    // Valid as a whole is not enough: each name must also start on a character boundary (two
    // broken names could join into valid UTF-8), or slicing it out later would panic.
    if !records.iter().all(|&(_, start)| buffer.is_char_boundary(start as usize)) {
        return Err(invalid_utf8_error(path));
    }
    Ok(Names { path: path.to_path_buf(), records, buffer })
}

/// The error for a scientific name that is not UTF-8, found by reading the file again (rare path).
fn invalid_utf8_error(path: &Path) -> TaxonomyError {
    let search = for_each_line(path, |line_no, line| {
        if let Ok([_, name, _, class]) = leading_fields::<4>(strip_dmp_end(line)) {
            if class == b"scientific name" && std::str::from_utf8(name).is_err() {
                return Err(TaxonomyError::malformed(path, line_no, "name is not valid UTF-8"));
            }
        }
        Ok(())
    });
    match search {
        Err(e) => e,
        Ok(()) => TaxonomyError::malformed(path, 0, "a name is not valid UTF-8"),
    }
}

/// The error for a taxid with two scientific names. Line numbers are not kept while parsing (they
/// would double the memory of the name records), so this rare path reads the file again to find
/// the second one.
fn second_name_error(path: &Path, taxid: TaxId) -> TaxonomyError {
    let mut seen = 0;
    let mut second_line = 0;
    let search = for_each_line(path, |line_no, line| {
        if let Ok([id, _, _, class]) = leading_fields::<4>(strip_dmp_end(line)) {
            if class == b"scientific name" && parse_u32(id) == Some(taxid) {
                seen += 1;
                if seen == 2 {
                    second_line = line_no;
                    // Stop reading: any error ends the walk.
                    return Err(TaxonomyError::UnknownTaxid { taxid });
                }
            }
        }
        Ok(())
    });
    match search {
        Err(TaxonomyError::UnknownTaxid { .. }) if second_line > 0 => {
            TaxonomyError::malformed(path, second_line, format!("second scientific name for taxid {taxid}"))
        }
        Err(other) => other,
        Ok(()) => TaxonomyError::malformed(
            path,
            0,
            format!("second scientific name for taxid {taxid} (file changed while reading)"),
        ),
    }
}

/// Parses `merged.dmp` (fields: old taxid, new taxid).
fn parse_merged(path: &Path) -> Result<TaxidMap<TaxId>, TaxonomyError> {
    let mut merged = TaxidMap::default();
    for_each_line(path, |line_no, line| {
        let [old, new] =
            leading_fields::<2>(strip_dmp_end(line)).map_err(|found| too_few_fields(path, line_no, 2, found))?;
        let old = number_field(path, line_no, "old taxid", old)?;
        let new = number_field(path, line_no, "new taxid", new)?;
        merged.insert(old, new);
        Ok(())
    })?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// root → cellular organisms → Bacteria → Pseudomonadota → Gammaproteobacteria
    /// → Enterobacterales → Enterobacteriaceae → Escherichia → E. coli → K-12 → MG1655,
    /// plus Salmonella and Viruses.
    const NODES: &str = "\
1\t|\t1\t|\tno rank\t|\t\t|\t8\t|\t0\t|\t1\t|\t0\t|\t0\t|\t0\t|\t0\t|\t0\t|\t\t|
131567\t|\t1\t|\tno rank\t|\t\t|\t8\t|\t0\t|\t1\t|\t0\t|\t0\t|\t0\t|\t0\t|\t0\t|\t\t|
2\t|\t131567\t|\tsuperkingdom\t|\t\t|\t0\t|\t0\t|\t11\t|\t0\t|\t0\t|\t0\t|\t0\t|\t0\t|\t\t|
1224\t|\t2\t|\tphylum\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
1236\t|\t1224\t|\tclass\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
91347\t|\t1236\t|\torder\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
543\t|\t91347\t|\tfamily\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
561\t|\t543\t|\tgenus\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
562\t|\t561\t|\tspecies\t|\tEC\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t1\t|\t0\t|\t\t|
83333\t|\t562\t|\tstrain\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t1\t|\t0\t|\t\t|
511145\t|\t83333\t|\tstrain\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t1\t|\t0\t|\t\t|
590\t|\t543\t|\tgenus\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
28901\t|\t590\t|\tspecies\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|
10239\t|\t1\t|\tsuperkingdom\t|\t\t|\t9\t|\t0\t|\t1\t|\t0\t|\t0\t|\t0\t|\t0\t|\t0\t|\t\t|
";

    const NAMES: &str = "\
1\t|\tall\t|\t\t|\tsynonym\t|
1\t|\troot\t|\t\t|\tscientific name\t|
131567\t|\tcellular organisms\t|\t\t|\tscientific name\t|
2\t|\tBacteria\t|\tBacteria <bacteria>\t|\tscientific name\t|
2\t|\teubacteria\t|\t\t|\tgenbank common name\t|
1224\t|\tPseudomonadota\t|\t\t|\tscientific name\t|
1236\t|\tGammaproteobacteria\t|\t\t|\tscientific name\t|
91347\t|\tEnterobacterales\t|\t\t|\tscientific name\t|
543\t|\tEnterobacteriaceae\t|\t\t|\tscientific name\t|
561\t|\tEscherichia\t|\t\t|\tscientific name\t|
562\t|\tEscherichia coli\t|\t\t|\tscientific name\t|
562\t|\tBacillus coli\t|\t\t|\tsynonym\t|
83333\t|\tEscherichia coli K-12\t|\t\t|\tscientific name\t|
511145\t|\tEscherichia coli str. K-12 substr. MG1655\t|\t\t|\tscientific name\t|
590\t|\tSalmonella\t|\t\t|\tscientific name\t|
28901\t|\tSalmonella enterica\t|\t\t|\tscientific name\t|
10239\t|\tViruses\t|\t\t|\tscientific name\t|
";

    const MERGED: &str = "12\t|\t562\t|\n13\t|\t12\t|\n";

    fn write_plain(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("write fixture");
    }

    fn write_gz(dir: &Path, name: &str, text: &str) {
        crate::test_support::write_gz(dir, name, text);
    }

    fn check_fixture(tax: &NcbiTaxonomy) {
        assert_eq!(tax.len(), 14);
        assert_eq!(tax.name(562), "Escherichia coli");
        assert_eq!(tax.rank(562), "species");
        assert_eq!(tax.parent(562), Some(561));
        assert_eq!(tax.name(1), "root");
        assert_eq!(tax.parent(1), None);
        assert_eq!(tax.name(2), "Bacteria");
        assert_eq!(tax.rank(83333), "strain");
        assert!(tax.contains(10239));
        assert!(!tax.contains(12));
        assert_eq!(tax.name(999), "");
        assert_eq!(tax.rank(999), "");
        assert_eq!(tax.parent(999), None);
        assert_eq!(tax.lineage(562), vec![1, 131567, 2, 1224, 1236, 91347, 543, 561, 562]);
    }

    #[test]
    fn loads_plain_dump() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", NODES);
        write_plain(dir.path(), "names.dmp", NAMES);
        let tax = NcbiTaxonomy::load_dir(dir.path()).expect("load");
        check_fixture(&tax);
        // No merged.dmp: retired ids are unknown.
        assert_eq!(tax.resolve(12), None);
        assert_eq!(tax.resolve(562), Some(562));
    }

    #[test]
    fn loads_gz_dump_detected_by_magic_bytes() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_gz(dir.path(), "nodes.dmp.gz", NODES);
        // Compressed content under a plain name is still detected.
        write_gz(dir.path(), "names.dmp", NAMES);
        write_gz(dir.path(), "merged.dmp.gz", MERGED);
        let tax = NcbiTaxonomy::load_dir(dir.path()).expect("load");
        check_fixture(&tax);
        assert_eq!(tax.resolve(12), Some(562));
    }

    #[test]
    fn reads_multi_member_gzip() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (first, second) = NODES.split_at(NODES.find("562\t").expect("fixture line"));
        write_gz(dir.path(), "a.gz", first);
        write_gz(dir.path(), "b.gz", second);
        let mut both = std::fs::read(dir.path().join("a.gz")).expect("read");
        both.extend(std::fs::read(dir.path().join("b.gz")).expect("read"));
        std::fs::write(dir.path().join("nodes.dmp.gz"), both).expect("write");
        write_plain(dir.path(), "names.dmp", NAMES);
        let tax = NcbiTaxonomy::load_dir(dir.path()).expect("load");
        check_fixture(&tax);
    }

    #[test]
    fn merged_ids_resolve_to_current_taxa() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", NODES);
        write_plain(dir.path(), "names.dmp", NAMES);
        write_plain(dir.path(), "merged.dmp", MERGED);
        let tax = NcbiTaxonomy::load_dir(dir.path()).expect("load");
        assert_eq!(tax.resolve(12), Some(562));
        // A chain of merges is followed.
        assert_eq!(tax.resolve(13), Some(562));
        assert_eq!(tax.resolve(14), None);
        assert_eq!(tax.resolve(2), Some(2));
    }

    #[test]
    fn malformed_nodes_line_names_file_and_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bad = NODES.replacen(
            "1224\t|\t2\t|\tphylum\t|\t\t|\t0\t|\t1\t|\t11\t|\t1\t|\t0\t|\t1\t|\t0\t|\t0\t|\t\t|",
            "1224 2 phylum",
            1,
        );
        write_gz(dir.path(), "nodes.dmp.gz", &bad);
        write_plain(dir.path(), "names.dmp", NAMES);
        let err = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail");
        let msg = err.to_string();
        assert!(
            msg.ends_with("nodes.dmp.gz line 4: expected at least 3 fields separated by \"\\t|\\t\", found 1"),
            "{msg}"
        );
        assert!(matches!(err, TaxonomyError::Malformed { line: 4, .. }));
    }

    #[test]
    fn non_numeric_parent_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bad = NODES.replacen("561\t|\t543\t|", "561\t|\tx543\t|", 1);
        write_plain(dir.path(), "nodes.dmp", &bad);
        write_plain(dir.path(), "names.dmp", NAMES);
        let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
        assert!(msg.ends_with("nodes.dmp line 8: expected a numeric parent taxid, found \"x543\""), "{msg}");
    }

    #[test]
    fn malformed_names_line_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", NODES);
        write_plain(dir.path(), "names.dmp", &format!("{NAMES}562\t|\tE. coli\t|\n"));
        let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
        assert!(
            msg.ends_with("names.dmp line 18: expected at least 4 fields separated by \"\\t|\\t\", found 2"),
            "{msg}"
        );
    }

    #[test]
    fn tree_shape_errors_name_the_line() {
        let cases = [
            // Dangling parent.
            (
                NODES.replacen("561\t|\t543\t|", "561\t|\t544\t|", 1),
                "line 8: parent taxid 544 of taxid 561 is not defined",
            ),
            // Duplicate taxid.
            (format!("{NODES}562\t|\t561\t|\tspecies\t|\n"), "line 15: taxid 562 is defined a second time"),
            // Cycle: 543 → 561 → 543.
            (NODES.replacen("543\t|\t91347\t|", "543\t|\t561\t|", 1), "does not reach the root"),
            // A second self-parented taxon.
            (NODES.replacen("10239\t|\t1\t|", "10239\t|\t10239\t|", 1), "line 14: taxid 10239 is its own parent"),
        ];
        for (nodes, expected) in cases {
            let dir = tempfile::tempdir().expect("temp dir");
            write_plain(dir.path(), "nodes.dmp", &nodes);
            write_plain(dir.path(), "names.dmp", NAMES);
            let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
            assert!(msg.contains(expected), "{msg} should contain {expected}");
        }
    }

    /// Fuzzing (taxonomy_nodes): a taxon numbered 0 was loaded, and the tree pruned from the
    /// taxonomy was refused afterwards, in a message naming neither file nor line.
    #[test]
    fn regression_taxid_zero_in_nodes_is_malformed() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", &format!("{NODES}0\t|\t562\t|\tstrain\t|\n"));
        write_plain(dir.path(), "names.dmp", NAMES);
        let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
        assert!(msg.ends_with("nodes.dmp line 15: taxid 0 is reserved for unclassified reads"), "{msg}");
    }

    #[test]
    fn second_scientific_name_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", NODES);
        write_plain(dir.path(), "names.dmp", &format!("{NAMES}562\t|\tE. coli\t|\t\t|\tscientific name\t|\n"));
        let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
        assert!(msg.ends_with("names.dmp line 18: second scientific name for taxid 562"), "{msg}");
    }

    #[test]
    fn invalid_utf8_name_names_the_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", NODES);
        let mut names = NAMES.as_bytes().to_vec();
        names.extend_from_slice(b"590\t|\tSalmonella \xff\t|\t\t|\tsynonym\t|\n");
        names.extend_from_slice(b"9\t|\tBad \xff name\t|\t\t|\tscientific name\t|\n");
        std::fs::write(dir.path().join("names.dmp"), names).expect("write");
        let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
        assert!(msg.ends_with("names.dmp line 19: name is not valid UTF-8"), "{msg}");
        // Two broken names that happen to join into valid UTF-8 ("\xc3" + "\xa9" is "é").
        let mut names = NAMES.as_bytes().to_vec();
        names.extend_from_slice(b"8\t|\tBroken \xc3\t|\t\t|\tscientific name\t|\n");
        names.extend_from_slice(b"9\t|\t\xa9 broken\t|\t\t|\tscientific name\t|\n");
        std::fs::write(dir.path().join("names.dmp"), names).expect("write");
        let msg = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail").to_string();
        assert!(msg.ends_with("names.dmp line 18: name is not valid UTF-8"), "{msg}");
    }

    #[test]
    fn missing_dump_is_reported() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "names.dmp", NAMES);
        let err = NcbiTaxonomy::load_dir(dir.path()).expect_err("must fail");
        assert!(matches!(&err, TaxonomyError::MissingFile { name, .. } if name == "nodes.dmp"));
        assert!(err.to_string().starts_with("no nodes.dmp or nodes.dmp.gz in "));
    }

    #[test]
    fn minimal_three_field_nodes_lines_are_accepted() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", "1\t|\t1\t|\tno rank\t|\n5\t|\t1\t|\tspecies\t|\n");
        write_plain(
            dir.path(),
            "names.dmp",
            "1\t|\troot\t|\t\t|\tscientific name\t|\r\n5\t|\tfive\t|\t\t|\tscientific name\t|\r\n",
        );
        let tax = NcbiTaxonomy::load_dir(dir.path()).expect("load");
        assert_eq!(tax.rank(5), "species");
        assert_eq!(tax.name(5), "five");
        assert_eq!(tax.parent(5), Some(1));
    }

    #[test]
    fn prune_is_the_sorted_union_of_lineages() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_plain(dir.path(), "nodes.dmp", NODES);
        write_plain(dir.path(), "names.dmp", NAMES);
        let tax = NcbiTaxonomy::load_dir(dir.path()).expect("load");
        let taxa = tax.prune(&[511145, 28901, 562, 28901]);
        let ids: Vec<TaxId> = taxa.iter().map(|t| t.taxid).collect();
        assert_eq!(ids, vec![1, 2, 543, 561, 562, 590, 1224, 1236, 28901, 83333, 91347, 131567, 511145]);
        // Closed under parent, root is its own parent.
        for t in &taxa {
            assert!(ids.binary_search(&t.parent).is_ok(), "{t:?}");
        }
        assert_eq!(taxa[0], Taxon { taxid: 1, parent: 1, rank: "no rank".into(), name: "root".into() });
        // Deterministic regardless of input order.
        assert_eq!(tax.prune(&[562, 28901, 511145]), taxa);
        // Root only for nothing; unknown ids skipped.
        assert_eq!(tax.prune(&[]).len(), 1);
        assert_eq!(tax.prune(&[999, 562]).len(), 9);
        // The pruned set forms a valid tree.
        let tree = crate::taxonomy::TaxonTree::new(taxa).expect("valid tree");
        assert_eq!(tree.lca(511145, 28901), 543);
        assert_eq!(tree.kreport_rank_code(511145), "S2");
    }

    /// Loads the bundled dump (`data/taxonomy`: NCBI's files, pruned to the bundled genomes'
    /// lineages), which is always there, unlike a full dump.
    #[test]
    fn loads_the_bundled_ncbi_dump() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/taxonomy");
        let tax = NcbiTaxonomy::load_dir(&dir).expect("load the bundled dump");
        assert_eq!(tax.len(), 37);
        assert_eq!(tax.name(562), "Escherichia coli");
        assert_eq!(tax.rank(562), "species");
        assert_eq!(tax.parent(562), Some(561));
        let lineage = tax.lineage(562);
        assert_eq!(lineage.first(), Some(&1));
        assert!(lineage.contains(&2), "{lineage:?}");
        let taxa = tax.prune(&[562, 511145, 1280, 10239]);
        let tree = crate::taxonomy::TaxonTree::new(taxa).expect("valid tree");
        assert_eq!(tree.kreport_rank_code(562), "S");
        assert_eq!(tree.kreport_rank_code(2), "D");
        assert_eq!(tree.kreport_rank_code(1), "R");
        assert_eq!(tree.lca(562, 1280), 2);
    }

    #[test]
    fn names_can_be_loaded_later_for_chosen_taxa() {
        let dir = std::env::temp_dir().join(format!("kmerdb-names-later-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("nodes.dmp"),
            "1\t|\t1\t|\tno rank\t|\n2\t|\t1\t|\tsuperkingdom\t|\n562\t|\t2\t|\tspecies\t|\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("names.dmp"),
            "1\t|\troot\t|\t\t|\tscientific name\t|\n2\t|\tBacteria\t|\t\t|\tscientific name\t|\n562\t|\tEscherichia coli\t|\t\t|\tscientific name\t|\n",
        )
        .unwrap();
        let mut tax = NcbiTaxonomy::load_dir_without_names(&dir).unwrap();
        assert_eq!(tax.parent(562), Some(2));
        assert_eq!(tax.name(562), "");
        tax.load_names(&[562, 1]).unwrap();
        assert_eq!((tax.name(562), tax.name(1), tax.name(2)), ("Escherichia coli", "root", ""));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
