//! Reading sequences: finding FASTA/FASTQ files, opening them (plain, gz, bz2, xz or zst, detected
//! from the content; stdin as `-`), and turning parser failures into errors that name the file
//! and the record.
//!
//! Parsing of reference genomes is needletail's; this module adds the paths, record numbers and
//! checks (empty files, wrong format) a user needs to find what is wrong. Reads for `classify`
//! are parsed in blocks by several threads ([`records`]).
//!
//! - [`decompress`]: the decompressed bytes of a file or stdin as one `Read` (compression detected
//!   from the content; BGZF and `pigz -i` gzip inflated on several threads).

pub mod decompress;
pub mod records;

use std::fmt;
use std::path::{Path, PathBuf};

/// Extensions of FASTA files picked up when a directory is given (each optionally compressed).
pub(crate) const FASTA_EXTENSIONS: [&str; 5] = ["fa", "fasta", "fna", "ffn", "fas"];
const COMPRESSED_EXTENSIONS: [&str; 4] = ["gz", "bz2", "xz", "zst"];

/// A place sequences come from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    File(PathBuf),
    Stdin,
}

impl Source {
    /// `-` is stdin, anything else a path.
    pub fn from_arg(arg: &Path) -> Self {
        if arg.as_os_str() == "-" { Source::Stdin } else { Source::File(arg.to_path_buf()) }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Stdin => f.write_str("<stdin>"),
        }
    }
}

/// Sequence formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Fasta,
    Fastq,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Fasta => "FASTA",
            Format::Fastq => "FASTQ",
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    #[error("{0}: no such file or directory")]
    NotFound(PathBuf),
    #[error("{path}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("directory {0} holds no FASTA files (.fa .fasta .fna .ffn .fas, optionally .gz .bz2 .xz .zst)")]
    EmptyDirectory(PathBuf),
    #[error("stdin (-) is given more than once")]
    StdinTwice,
    #[error("{file}: the file is empty (no sequence records)")]
    Empty { file: Source },
    #[error("{file}: not a FASTA or FASTQ file: {detail}")]
    UnknownFormat { file: Source, detail: String },
    #[error("{file}: {what}: {detail}")]
    Parse { file: Source, what: String, detail: String },
    #[error(
        "{file}: its lines end in CR alone (classic Mac OS line endings), which FASTA and FASTQ readers do not take: convert them to LF first, e.g. `tr '\\r' '\\n' < IN > OUT`"
    )]
    CrLineEndings { file: Source },
    #[error("{file}: record {record} ('{id}') is {found}, but {expected} is expected here{hint}")]
    WrongFormat { file: Source, record: u64, id: String, found: Format, expected: Format, hint: &'static str },
}

/// Expands the command-line inputs: files as given, directories searched recursively for FASTA
/// files (sorted by path), `-` as stdin. Each path must exist; a directory must hold FASTA files.
pub fn discover_fasta(args: &[PathBuf]) -> Result<Vec<Source>, InputError> {
    let mut sources = Vec::new();
    for arg in args {
        match Source::from_arg(arg) {
            Source::Stdin => {
                if sources.contains(&Source::Stdin) {
                    return Err(InputError::StdinTwice);
                }
                sources.push(Source::Stdin);
            }
            Source::File(path) => {
                let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => InputError::NotFound(path.clone()),
                    _ => InputError::Io { path: path.clone(), source: e },
                })?;
                if meta.is_dir() {
                    let found = fasta_files_in(&path)?;
                    if found.is_empty() {
                        return Err(InputError::EmptyDirectory(path));
                    }
                    sources.extend(found.into_iter().map(Source::File));
                } else {
                    sources.push(Source::File(path));
                }
            }
        }
    }
    // The same file named twice (directly and through its directory, say) is read once.
    let mut seen = std::collections::HashSet::new();
    sources.retain(|s| match s {
        Source::File(p) => seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())),
        Source::Stdin => true,
    });
    Ok(sources)
}

fn fasta_files_in(dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(true).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            InputError::Io { path, source: e.into() }
        })?;
        if entry.file_type().is_file() && is_fasta_name(entry.path()) {
            files.push(entry.into_path());
        }
    }
    Ok(files)
}

/// Whether a file name ends in a FASTA extension, optionally followed by a compression one.
pub(crate) fn is_fasta_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("").to_ascii_lowercase();
    let mut parts = name.rsplit('.');
    let mut ext = parts.next().unwrap_or("");
    if COMPRESSED_EXTENSIONS.contains(&ext) {
        ext = parts.next().unwrap_or("");
    }
    name.contains('.') && FASTA_EXTENSIONS.contains(&ext)
}

/// One parsed record, borrowed from the reader.
pub struct Record<'a> {
    inner: needletail::parser::SequenceRecord<'a>,
    pub format: Format,
}

impl Record<'_> {
    /// The whole header line after `>` or `@`.
    pub fn header(&self) -> &[u8] {
        self.inner.id()
    }

    /// The sequence id: the header's first whitespace-separated word.
    pub fn id(&self) -> &[u8] {
        first_word(self.inner.id())
    }

    /// The sequence, line breaks removed.
    pub fn seq(&self) -> std::borrow::Cow<'_, [u8]> {
        self.inner.seq()
    }

    pub fn qual(&self) -> Option<&[u8]> {
        self.inner.qual()
    }
}

/// The first whitespace-separated word of a header line.
pub fn first_word(header: &[u8]) -> &[u8] {
    let end = header.iter().position(|b| b.is_ascii_whitespace()).unwrap_or(header.len());
    &header[..end]
}

/// The id two mates share: the header's first word, less a `/1` or `/2` suffix (`name/1` and
/// `name/2` → `name`; the ids the outputs show are `output::read_id`'s).
pub fn pair_id(header: &[u8]) -> &[u8] {
    match first_word(header) {
        [rest @ .., b'/', b'1' | b'2'] => rest,
        id => id,
    }
}

/// A 64-bit hash of [`pair_id`]`(header)`: mates' keys are equal, and records whose pair ids
/// differ have different keys but for a chance of 2^-64.
pub(crate) fn pair_key(header: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(pair_id(header))
}

/// A sequence file being read, counting records so that errors can say where they happened.
pub struct SeqReader {
    source: Source,
    inner: Box<dyn needletail::FastxReader>,
    records: u64,
    last_id: String,
}

/// Plain FASTA files at least this large are read in pieces by several threads at once.
pub(crate) const CHUNKED_FILE_BYTES: u64 = 256 << 20;
/// The size of those pieces (each ends at a record boundary, so pieces differ a little).
pub(crate) const CHUNK_BYTES: u64 = 128 << 20;

/// A piece of a large plain FASTA file: whole records, read on its own ([`SeqReader::open_chunk`]).
#[derive(Clone)]
pub struct Chunk {
    map: std::sync::Arc<crate::mapped::Mapped>,
    range: std::ops::Range<usize>,
    /// Records of the file before this piece.
    pub records_before: u64,
}

impl Chunk {
    /// Its bytes.
    pub fn len(&self) -> u64 {
        self.range.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// The bytes of a chunk, owned (through the map) so that a reader over them lives on its own.
struct ChunkBytes(Chunk);

impl AsRef<[u8]> for ChunkBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0.map[self.0.range.clone()]
    }
}

/// Cuts a plain (uncompressed) FASTA file of at least `CHUNKED_FILE_BYTES` into pieces of about
/// `CHUNK_BYTES` that start at a record (`>` at the start of a line), with the records before
/// each (counted in parallel); `None` for other files, which are read whole by one thread.
pub fn fasta_chunks(path: &Path) -> Result<Option<Vec<Chunk>>, InputError> {
    fasta_chunks_of(path, CHUNKED_FILE_BYTES, CHUNK_BYTES)
}

/// [`fasta_chunks`] with other sizes (tests).
pub(crate) fn fasta_chunks_of(path: &Path, min_file: u64, chunk_bytes: u64) -> Result<Option<Vec<Chunk>>, InputError> {
    let io = |source| InputError::Io { path: path.to_path_buf(), source };
    // Only regular files, looked at without opening them (opening a named pipe would take its
    // writer's data); a file that cannot be read is read whole, which says why.
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() >= min_file && m.len() > 0 => {}
        _ => return Ok(None),
    }
    let Ok(file) = std::fs::File::open(path) else { return Ok(None) };
    // A file changed while kmerdb reads it gives wrong sequences, as for any reader, or SIGBUS
    // (cut short), which `mapped` turns into an error naming it.
    let map = std::sync::Arc::new(crate::mapped::Mapped::map(&file, path, crate::mapped::Kind::Input).map_err(io)?);
    if map.first() != Some(&b'>') {
        return Ok(None); // compressed, FASTQ, or something needletail will explain
    }
    let mut starts = vec![0usize];
    let mut at = chunk_bytes as usize;
    while at < map.len() {
        match memchr::memmem::find(&map[at - 1..], b"\n>") {
            Some(i) => {
                starts.push(at + i);
                at = at + i + chunk_bytes as usize;
            }
            None => break,
        }
    }
    starts.push(map.len());
    starts.dedup();
    use rayon::prelude::*;
    let records: Vec<u64> =
        starts.par_windows(2).map(|w| memchr::memmem::find_iter(&map[w[0]..w[1]], b"\n>").count() as u64 + 1).collect();
    let mut before = 0;
    let mut chunks = Vec::with_capacity(records.len());
    for (w, r) in starts.windows(2).zip(records) {
        // Each piece starts at a record and holds a record per "\n>" in it: the next piece's
        // first ">" lies beyond its end.
        chunks.push(Chunk { map: map.clone(), range: w[0]..w[1], records_before: before });
        before += r;
    }
    Ok(Some(chunks))
}

impl SeqReader {
    /// Opens a source. An empty file or one that is neither FASTA nor FASTQ is an error here.
    pub fn open(source: &Source) -> Result<Self, InputError> {
        let opened = match source {
            Source::File(path) => {
                let file = std::fs::File::open(path).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => InputError::NotFound(path.clone()),
                    _ => InputError::Io { path: path.clone(), source: e },
                })?;
                needletail::parse_fastx_reader(file)
            }
            Source::Stdin => needletail::parse_fastx_reader(std::io::stdin()),
        };
        let inner = opened.map_err(|e| open_error(source, e))?;
        Ok(Self { source: source.clone(), inner, records: 0, last_id: String::new() })
    }

    /// Opens a piece of a large FASTA file (see [`fasta_chunks`]); record numbers in errors and
    /// [`SeqReader::records`] count from the start of the file.
    pub fn open_chunk(source: &Source, chunk: &Chunk) -> Result<Self, InputError> {
        let reader = std::io::Cursor::new(ChunkBytes(chunk.clone()));
        let inner = needletail::parse_fastx_reader(reader).map_err(|e| open_error(source, e))?;
        Ok(Self { source: source.clone(), inner, records: chunk.records_before, last_id: String::new() })
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The next record, `None` at the end of the input.
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, InputError>> {
        let source = &self.source;
        let records = self.records;
        let last_id = &self.last_id;
        match self.inner.next()? {
            Err(e) => Some(Err(record_error(source, records, last_id, e))),
            // needletail takes a CR as the end of a CRLF line only: a CR inside a header is a
            // file of CR-only lines read as one.
            Ok(rec) if rec.id().contains(&b'\r') => Some(Err(InputError::CrLineEndings { file: source.clone() })),
            Ok(rec) => {
                self.records += 1;
                self.last_id.clear();
                self.last_id.push_str(&String::from_utf8_lossy(first_word(rec.id())));
                let format = match rec.format() {
                    needletail::parser::Format::Fasta => Format::Fasta,
                    needletail::parser::Format::Fastq => Format::Fastq,
                };
                Some(Ok(Record { inner: rec, format }))
            }
        }
    }

    /// An error for the record just read, naming it.
    pub fn wrong_format(&self, found: Format, expected: Format, hint: &'static str) -> InputError {
        InputError::WrongFormat {
            file: self.source.clone(),
            record: self.records,
            id: self.last_id.clone(),
            found,
            expected,
            hint,
        }
    }
}

/// Whether `head`, a file's first bytes (decompressed), has classic Mac OS line endings: a CR
/// followed by something else than LF, and no LF at all.
pub(crate) fn cr_only(head: &[u8]) -> bool {
    !head.contains(&b'\n') && head.windows(2).any(|w| w[0] == b'\r' && w[1] != b'\n')
}

/// A regular file's path: one that can be opened again to explain an error (not stdin, a named
/// pipe or `<(...)`, whose bytes are gone once read, and whose opening may wait for a writer).
fn rereadable(source: &Source) -> Option<&Path> {
    match source {
        Source::File(path) if std::fs::metadata(path).is_ok_and(|m| m.is_file()) => Some(path),
        _ => None,
    }
}

/// The first 64 KiB of a regular file, decompressed (`None` for one that cannot be read again or
/// decoded): for explaining an error after needletail's.
fn decoded_head(source: &Source) -> Option<Vec<u8>> {
    use std::io::Read;
    rereadable(source)?;
    let decoded = decompress::open(source, &decompress::pool_of(1)).ok()?;
    let mut head = Vec::new();
    decoded.reader.take(1 << 16).read_to_end(&mut head).ok()?;
    Some(head)
}

/// Why a file that needletail found empty is empty: a compressed file cut short decompresses to
/// nothing, which is an error of its own (the decoder's, naming the file), not an empty file.
fn empty_or_damaged(source: &Source) -> InputError {
    let empty = InputError::Empty { file: source.clone() };
    let Some(path) = rereadable(source) else { return empty };
    let mut head = [0u8; 8];
    let n = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head)).unwrap_or(0);
    if decompress::detect(&head[..n]) == decompress::Compression::None {
        return empty;
    }
    match decompress::read_all(source, 1) {
        Err(e) => e,
        Ok(_) => empty,
    }
}

fn open_error(source: &Source, e: needletail::errors::ParseError) -> InputError {
    use needletail::errors::ParseErrorKind as K;
    match e.kind {
        K::EmptyFile => empty_or_damaged(source),
        K::UnknownFormat => InputError::UnknownFormat { file: source.clone(), detail: e.msg },
        _ => InputError::Parse {
            file: source.clone(),
            what: "cannot read the start of the file".into(),
            detail: io_hint(&e),
        },
    }
}

fn record_error(source: &Source, records: u64, last_id: &str, e: needletail::errors::ParseError) -> InputError {
    use needletail::errors::ParseErrorKind as K;
    if !matches!(e.kind, K::Io) && decoded_head(source).is_some_and(|h| cr_only(&h)) {
        return InputError::CrLineEndings { file: source.clone() };
    }
    let line = e.position.line;
    let what =
        if records == 0 { "in the first record".to_string() } else { format!("after record {records} ('{last_id}')") };
    let what = if matches!(e.kind, K::Io) { what } else { format!("{what}, line {line}") };
    let detail = match e.kind {
        K::UnexpectedEnd => "the file ends in the middle of a record".to_string(),
        K::InvalidSeparator => format!("malformed FASTQ record: {}", e.msg),
        K::UnequalLengths => format!("malformed FASTQ record: {}", e.msg),
        K::InvalidStart => format!("malformed record: {}", e.msg),
        _ => io_hint(&e),
    };
    InputError::Parse { file: source.clone(), what, detail }
}

fn io_hint(e: &needletail::errors::ParseError) -> String {
    let msg = e.msg.to_lowercase();
    let compressed = ["unexpected end of file", "incomplete", "deflate", "corrupt", "invalid", "stream"];
    if compressed.iter().any(|m| msg.contains(m)) {
        format!("{} (is the compressed file truncated or corrupt?)", e.msg)
    } else {
        e.msg.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mates' headers give one key: the first word without its /1 or /2; other ids other keys.
    #[test]
    fn mates_share_a_pair_key() {
        assert_eq!(pair_id(b"r7/1 1:N:0:ACGT"), b"r7");
        assert_eq!(pair_key(b"r7/1 1:N:0:ACGT"), pair_key(b"r7/2\tother"));
        assert_eq!(pair_key(b"r7"), pair_key(b"r7/2"));
        for other in [&b"r8/1"[..], b"r7/3", b"r7/", b"", b"r7x"] {
            assert_ne!(pair_key(b"r7/1"), pair_key(other), "{:?}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn fasta_names() {
        for ok in ["a.fa", "b.FASTA", "c.fna.gz", "d.ffn.zst", "e.fas.xz", "f.fa.bz2"] {
            assert!(is_fasta_name(Path::new(ok)), "{ok}");
        }
        for no in ["a.fq", "b.txt", "fa", "c.gz", "d.fa.zip", "seqid2taxid.map"] {
            assert!(!is_fasta_name(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn first_word_splits_on_any_whitespace() {
        assert_eq!(first_word(b"NC_1.1 Escherichia coli"), b"NC_1.1");
        assert_eq!(first_word(b"x\ty"), b"x");
        assert_eq!(first_word(b"lone"), b"lone");
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn errors_name_file_and_record() {
        let dir = tempfile::tempdir().unwrap();
        let empty = write(dir.path(), "empty.fa", b"");
        let err = SeqReader::open(&Source::File(empty)).err().unwrap();
        assert!(err.to_string().contains("empty.fa: the file is empty"), "{err}");

        let text = write(dir.path(), "notes.fa", b"hello world\n");
        let err = SeqReader::open(&Source::File(text)).err().unwrap();
        assert!(err.to_string().contains("notes.fa: not a FASTA or FASTQ file"), "{err}");

        let bad = write(dir.path(), "bad.fq", b"@r1\nACGT\n+\nIIII\n@r2\nACGT\n+\nII\n");
        let mut r = SeqReader::open(&Source::File(bad)).unwrap();
        assert!(r.next_record().unwrap().is_ok());
        let err = r.next_record().unwrap().err().unwrap().to_string();
        assert!(err.contains("bad.fq: after record 1 ('r1')") && err.contains("quality"), "{err}");
    }

    #[test]
    fn truncated_gzip_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..2000).map(|i| format!(">s{i}\n{}\n", "ACGTTGCA".repeat(20))).collect();
        let bytes = crate::test_support::gzip(text.as_bytes());
        let p = write(dir.path(), "cut.fa.gz", &bytes[..bytes.len() / 2]);
        let mut r = SeqReader::open(&Source::File(p)).unwrap();
        let err = loop {
            match r.next_record() {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break crate::errors::chain(&e),
                None => panic!("a truncated file must not read as complete"),
            }
        };
        assert!(err.contains("cut.fa.gz") && err.contains("truncated"), "{err}");
    }

    /// A large file read in pieces gives the records of reading it whole, with the same record
    /// numbers: multi-line records, CRLF, empty lines, '>' inside headers, cuts anywhere.
    #[test]
    fn pieces_of_a_file_hold_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        let mut x = 7u64;
        for r in 0..300 {
            let len = (r * 37 % 500) + (r % 3) * 1000;
            let eol = if r % 4 == 0 { "\r\n" } else { "\n" };
            text.push_str(&format!(">rec{r} a > b{eol}"));
            let seq: String = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    b"ACGTN"[(x % 5) as usize] as char
                })
                .collect();
            for line in seq.as_bytes().chunks(61) {
                text.push_str(std::str::from_utf8(line).unwrap());
                text.push_str(eol);
            }
            if r % 7 == 0 {
                text.push_str(eol);
            }
        }
        let path = write(dir.path(), "big.fa", text.as_bytes());
        let source = Source::File(path.clone());
        let read = |mut r: SeqReader| {
            let mut out = Vec::new();
            while let Some(rec) = r.next_record() {
                let rec = rec.unwrap();
                out.push((String::from_utf8_lossy(rec.id()).into_owned(), rec.seq().into_owned()));
                let number = r.records();
                out.last_mut().unwrap().0.push_str(&format!("#{number}"));
            }
            out
        };
        let whole = read(SeqReader::open(&source).unwrap());
        assert_eq!(whole.len(), 300);
        for chunk in [1u64, 100, 1000, 4096, 50_000] {
            let chunks = fasta_chunks_of(&path, 0, chunk).unwrap().unwrap();
            assert!(chunk > 10_000 || chunks.len() > 10, "{chunk}: {} pieces", chunks.len());
            let pieces: Vec<_> = chunks.iter().flat_map(|c| read(SeqReader::open_chunk(&source, c).unwrap())).collect();
            assert_eq!(pieces, whole, "pieces of {chunk} bytes");
        }
        // Small files, and files that do not start with '>', are read whole.
        assert!(fasta_chunks_of(&path, 1 << 40, 100).unwrap().is_none());
        let fq = write(dir.path(), "r.fq", b"@r\nACGT\n+\nIIII\n");
        assert!(fasta_chunks_of(&fq, 0, 1).unwrap().is_none());
    }

    #[test]
    fn directories_are_searched_recursively_and_sorted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        write(dir.path(), "b.fa", b">b\nACGT\n");
        write(&dir.path().join("sub"), "a.fna.gz", b"");
        write(dir.path(), "readme.txt", b"");
        let found = discover_fasta(&[dir.path().to_path_buf(), dir.path().join("b.fa")]).unwrap();
        let names: Vec<String> = found.iter().map(|s| s.to_string()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names[0].ends_with("b.fa") && names[1].ends_with("sub/a.fna.gz"), "{names:?}");
        let missing = discover_fasta(&[dir.path().join("nope")]).err().unwrap();
        assert!(matches!(missing, InputError::NotFound(_)));
        let empty_dir = tempfile::tempdir().unwrap();
        assert!(matches!(discover_fasta(&[empty_dir.path().into()]), Err(InputError::EmptyDirectory(_))));
    }
}
