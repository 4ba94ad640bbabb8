//! Reads as records in blocks, parsed by several threads: the input `classify` uses.
//!
//! A plain regular file is mapped (`Mapped`) and cut into chunks of about `BLOCK_BYTES` at
//! record boundaries, each found and parsed by a task on the thread pool (`Chunk`), after the
//! file's reading thread has read it from the disk where it is not in memory (`FromDisk`); any other
//! input (compressed, a pipe) is read on a thread of its own in blocks that end at a record
//! boundary ([`cut`]), each parsed by a task on the pool. Either way several blocks are parsed at
//! once and come out in file order ([`RecordStream`]). A parsed block ([`Block`]) holds each
//! record's header, sequence and quality as spans of its text. Nothing is allocated per record:
//! a FASTQ record is three spans, and only a FASTA record split over several lines has its
//! sequence copied (once, without the line breaks, to the block's `appended` bytes).
//!
//! Formats: FASTQ (four lines a record; `@`, sequence, `+`, qualities of the same length) and
//! FASTA (`>` header, then sequence lines, empty lines allowed), told apart by the first byte;
//! `\r\n` line ends are taken as `\n`. Errors name the file, the record (counted over the whole
//! file: the blocks are numbered in order) and the line.

use crate::input::{Format, InputError, Source, pair_key};
use crate::mapped::Mapped;
use std::io::Read;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Bytes of a block (more when one record is larger).
pub(crate) const BLOCK_BYTES: usize = 8 << 20;
/// Blocks a file's reader keeps ahead of its consumer (64 MiB). 32 (more than a GPU batch's share
/// of a file) measured no faster on an H100 and raised the CPU path's peak memory from about 100 to
/// 700 MiB (bench/results/HISTORY.md, issue 13).
pub const BLOCKS_AHEAD: usize = 8;

/// The most blocks a stream (a compressed file, a pipe) keeps ahead, whatever its reader asks:
/// each is memory of its own, where a mapped file's are the page cache's (a GPU run asks 128
/// blocks a file, 2 GiB for a pair of compressed files).
const STREAM_BLOCKS_AHEAD: usize = 32;

/// A stretch of a block's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    fn of(start: usize, end: usize) -> Self {
        Span { start: start as u32, len: (end - start) as u32 }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// One record: its header line (without `>`/`@`), its sequence, its qualities (FASTQ).
#[derive(Debug, Clone, Copy)]
pub struct Rec {
    pub header: Span,
    pub seq: Span,
    pub qual: Option<Span>,
    /// `pair_key` of the header, hashed while the parse has it in cache: checking every pair's
    /// names by their headers later read each header from memory again (two cache misses a pair,
    /// nearly half of a paired run's reading time). 0 in a stream opened without pair keys
    /// (`RecordStream::open_ahead`: reads without mates).
    pub pair_key: u64,
}

/// A block's text: bytes read into a buffer of its own, or a stretch of a mapped file.
#[derive(Debug)]
enum Text {
    Owned(Vec<u8>),
    Mapped { map: Arc<Mapped>, range: std::ops::Range<usize> },
}

impl Default for Text {
    fn default() -> Self {
        Text::Owned(Vec::new())
    }
}

impl Text {
    fn bytes(&self) -> &[u8] {
        match self {
            Text::Owned(v) => v,
            Text::Mapped { map, range } => &map[range.clone()],
        }
    }
}

/// A block of a file, parsed: whole records, then possibly an error where parsing stopped.
#[derive(Debug, Default)]
pub struct Block {
    text: Text,
    /// Sequences of FASTA records split over several lines, joined: their spans start at
    /// `text`'s length and count on into these bytes.
    appended: Vec<u8>,
    pub recs: Vec<Rec>,
    /// Lines of the file in this block (for line numbers in errors).
    lines: u64,
    /// Where parsing failed: after `recs.len()` good records.
    error: Option<LocalError>,
    /// Where the block's buffers go when it is dropped: its file's reader, for its next blocks.
    spare: Option<Arc<Spare>>,
}

impl Drop for Block {
    fn drop(&mut self) {
        let text = std::mem::take(&mut self.text);
        // A mapped block's pages leave the resident memory once it is read, which otherwise grew
        // by the size of the input (1 M pairs: 340 MB before the map, 740 MB with it).
        if let Text::Mapped { map, range } = &text {
            map.release(range.clone());
        }
        if let Some(spare) = self.spare.take() {
            // The buffer worth keeping: the text's own, or else the appended bytes'.
            let bytes = match text {
                Text::Owned(v) => v,
                Text::Mapped { .. } => std::mem::take(&mut self.appended),
            };
            spare.put(bytes, std::mem::take(&mut self.recs));
        }
    }
}

/// Buffers of a file's finished blocks, which its reader fills again: memory that is mapped
/// already, where a fresh 8 MiB allocation costs page faults and zeroing, more than half of a
/// reader thread's time (profiled with perf). A mapped file's blocks give back their record
/// lists.
#[derive(Debug, Default)]
struct Spare {
    buffers: std::sync::Mutex<Vec<(Vec<u8>, Vec<Rec>)>>,
}

/// Buffers a file keeps for reuse, at most (more are freed): enough for the blocks of GPU batches.
/// A file never has more blocks at once than its read-ahead and the batches in the pipeline, so
/// this keeps no more than the run had: the GPU's read-ahead (128) and its batches' blocks. With
/// 16, most of a GPU run's blocks had their record lists allocated afresh (3.4% of its CPU time,
/// in page faults under mimalloc's page set-up).
const SPARE_BLOCKS: usize = 192;

impl Spare {
    fn put(&self, bytes: Vec<u8>, recs: Vec<Rec>) {
        // A block grown for one huge record is not kept.
        if bytes.capacity() > 2 * BLOCK_BYTES {
            return;
        }
        let mut b = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() < SPARE_BLOCKS {
            b.push((bytes, recs));
        }
    }

    fn take(&self) -> (Vec<u8>, Vec<Rec>) {
        self.buffers.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default()
    }
}

impl Block {
    pub fn header(&self, r: usize) -> &[u8] {
        self.span(self.recs[r].header)
    }

    pub fn seq(&self, r: usize) -> &[u8] {
        self.span(self.recs[r].seq)
    }

    pub fn qual(&self, r: usize) -> Option<&[u8]> {
        self.recs[r].qual.map(|q| self.span(q))
    }

    /// The bytes of `s`: in the text, or past its end in the appended bytes.
    #[inline]
    fn span(&self, s: Span) -> &[u8] {
        let text = self.text.bytes();
        match (s.start as usize).checked_sub(text.len()) {
            Some(at) => &self.appended[at..at + s.len as usize],
            None => &text[s.range()],
        }
    }
}

/// A parse error within a block, before it is placed in the file.
#[derive(Debug, Clone)]
struct LocalError {
    /// Line of the block (from 1) where it was found.
    line: u64,
    detail: String,
}

/// What a file holds, from its first byte.
fn format_of(first: u8) -> Option<Format> {
    match first {
        b'@' => Some(Format::Fastq),
        b'>' => Some(Format::Fasta),
        _ => None,
    }
}

/// The lines of `bytes` from `at`: (start, end without the line break, next start).
struct Lines<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Lines<'_> {
    /// The next line, or `None` at the end; the last line needs no line break.
    fn next(&mut self) -> Option<(usize, usize)> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let start = self.at;
        let end = memchr::memchr(b'\n', &self.bytes[start..]).map_or(self.bytes.len(), |i| start + i);
        self.at = (end + 1).min(self.bytes.len() + 1);
        let trimmed = if end > start && self.bytes[end - 1] == b'\r' { end - 1 } else { end };
        Some((start, trimmed))
    }
}

/// Where the block must be cut so that it ends at a record boundary: the start of the last record
/// that may be incomplete (everything before it is whole records), or `None` when no record
/// boundary is in `bytes` (the block must grow). At the end of the file, every byte is whole.
pub fn cut(bytes: &[u8], format: Format) -> Option<usize> {
    let mut end = bytes.len();
    loop {
        // The last line start (after a '\n') that begins with the record mark, before `end`.
        let mark = if format == Format::Fastq { b'@' } else { b'>' };
        let i = memchr::memrchr(b'\n', &bytes[..end])?;
        end = i;
        if bytes.get(i + 1) != Some(&mark) {
            continue;
        }
        let start = i + 1;
        if format == Format::Fasta {
            return Some(start);
        }
        // FASTQ: '@' also begins quality lines. A record starts here if the line two further
        // on begins with '+' (a quality line is followed by a header and a sequence).
        let mut lines = Lines { bytes, at: start };
        let (_, _, plus) = (lines.next(), lines.next(), lines.next());
        match plus {
            Some((p, _)) if lines.at <= bytes.len() && bytes.get(p) == Some(&b'+') => return Some(start),
            // Not enough lines after it to tell: an earlier record start will do.
            _ => continue,
        }
    }
}

/// How a stream's blocks are parsed: their format, and whether each record's [`Rec::pair_key`]
/// is made (only mates are checked by it: reads without mates skip the hash).
#[derive(Debug, Clone, Copy)]
struct Parsing {
    format: Format,
    pair_keys: bool,
}

/// Parses a block of whole records (the file's first block, or one that starts at a record).
#[cfg(test)]
fn parse(bytes: Vec<u8>, format: Format) -> Block {
    parse_into(Text::Owned(bytes), Vec::new(), Vec::new(), Parsing { format, pair_keys: true })
}

/// [`parse`] of `text`, the records into `recs` and joined FASTA sequences into `appended`
/// (both emptied first: spare buffers).
fn parse_into(text: Text, mut appended: Vec<u8>, mut recs: Vec<Rec>, parsing: Parsing) -> Block {
    let bytes = text.bytes();
    recs.clear();
    appended.clear();
    // Room for the records of short reads (a 150-base FASTQ record is about 330 bytes) at once:
    // grown by doubling, each block's list was copied into fresh memory a dozen times.
    recs.reserve(bytes.len() / 256);
    let mut line_no = 0u64;
    let key = if parsing.pair_keys { pair_key } else { |_: &[u8]| 0 };
    let err = match parsing.format {
        Format::Fastq => parse_fastq(bytes, &mut recs, &mut line_no, key),
        Format::Fasta => parse_fasta(bytes, &mut recs, &mut appended, &mut line_no, key),
    };
    // Without an error every line was read: the block's line breaks are its lines, less a last
    // line without one (a second scan that counted them was 4% of a GPU classify's CPU time).
    let unterminated = bytes.last().is_some_and(|&b| b != b'\n') as u64;
    let lines = if err.is_some() { line_no } else { line_no - unterminated };
    Block { text, appended, recs, lines, error: err, spare: None }
}

/// The FASTQ records of `bytes` into `recs`, each header's `key` beside it; `line_no` counts the
/// lines read. The first malformed record's error, if any, ends the parse.
fn parse_fastq(bytes: &[u8], recs: &mut Vec<Rec>, line_no: &mut u64, key: fn(&[u8]) -> u64) -> Option<LocalError> {
    let error = |line: u64, detail: String| Some(LocalError { line, detail });
    let mut lines = Lines { bytes, at: 0 };
    while let Some((h0, h1)) = lines.next() {
        *line_no += 1;
        if h1 == h0 {
            continue; // an empty line between records
        }
        if bytes[h0] != b'@' {
            return error(*line_no, "malformed record: a FASTQ record starts with '@'".into());
        }
        let (Some((s0, s1)), Some((p0, _)), Some((q0, q1))) = (lines.next(), lines.next(), lines.next()) else {
            return error(*line_no, "the file ends in the middle of a record".into());
        };
        *line_no += 3;
        if bytes.get(p0) != Some(&b'+') {
            return error(*line_no - 1, "malformed FASTQ record: the third line of a record starts with '+'".into());
        }
        if q1 - q0 != s1 - s0 {
            return error(
                *line_no,
                format!(
                    "malformed FASTQ record: {} quality values for {} bases (the quality line must be as long as the sequence)",
                    q1 - q0,
                    s1 - s0
                ),
            );
        }
        let (header, pair_key) = (Span::of(h0 + 1, h1), key(&bytes[h0 + 1..h1]));
        recs.push(Rec { header, seq: Span::of(s0, s1), qual: Some(Span::of(q0, q1)), pair_key });
    }
    None
}

/// The FASTA records of `bytes` into `recs`; a sequence on several lines is copied, without its
/// line breaks, to `appended` (its span then counts from the end of `bytes`, where `appended`
/// goes), each header's `key` beside it. `line_no` counts the lines read; the first malformed
/// record's error ends the parse.
fn parse_fasta(
    bytes: &[u8],
    recs: &mut Vec<Rec>,
    appended: &mut Vec<u8>,
    line_no: &mut u64,
    key: fn(&[u8]) -> u64,
) -> Option<LocalError> {
    let mut lines = Lines { bytes, at: 0 };
    let mut current: Option<(Span, Vec<(usize, usize)>)> = None;
    let mut finish = |rec: Option<(Span, Vec<(usize, usize)>)>, recs: &mut Vec<Rec>| {
        let Some((header, parts)) = rec else { return };
        let seq = match parts.as_slice() {
            [] => Span::default(),
            [(a, b)] => Span::of(*a, *b),
            _ => {
                let start = appended.len();
                for &(a, b) in &parts {
                    appended.extend_from_slice(&bytes[a..b]);
                }
                Span { start: (bytes.len() + start) as u32, len: (appended.len() - start) as u32 }
            }
        };
        let pair_key = key(&bytes[header.start as usize..(header.start + header.len) as usize]);
        recs.push(Rec { header, seq, qual: None, pair_key });
    };
    while let Some((a, b)) = lines.next() {
        *line_no += 1;
        if a < b && bytes[a] == b'>' {
            finish(current.take(), recs);
            current = Some((Span::of(a + 1, b), Vec::new()));
        } else if a < b {
            match &mut current {
                Some((_, parts)) => parts.push((a, b)),
                None => {
                    return Some(LocalError {
                        line: *line_no,
                        detail: "malformed record: a FASTA record starts with '>'".into(),
                    });
                }
            }
        }
    }
    finish(current.take(), recs);
    None
}

fn io_error(source: &Source, e: std::io::Error) -> InputError {
    // Decompression errors carry the file, member and offset already.
    if e.get_ref().is_some_and(|inner| inner.is::<InputError>()) {
        return super::decompress::into_input_error(source, e);
    }
    let detail = e.to_string();
    let lower = detail.to_lowercase();
    let compressed = ["unexpected end of file", "incomplete", "deflate", "corrupt", "invalid", "stream"];
    let detail = if compressed.iter().any(|m| lower.contains(m)) {
        format!("{detail} (is the compressed file truncated or corrupt?)")
    } else {
        detail
    };
    match source {
        Source::File(p) => InputError::Io { path: p.clone(), source: std::io::Error::new(e.kind(), detail) },
        Source::Stdin => InputError::Parse { file: Source::Stdin, what: "reading".into(), detail },
    }
}

/// A block on its way: its bytes until someone parses them, then the parse. A task on the pool
/// parses it ahead; a consumer that needs it first parses it itself rather than wait, so that a
/// pool busy with the consumer's own work (or of one thread) cannot stall it.
struct Job {
    /// The block's bytes (or where to read them) until it is parsed.
    raw: std::sync::Mutex<Option<Raw>>,
    parsing: Parsing,
    spare: Option<Arc<Spare>>,
    done: std::sync::Mutex<Option<Result<Block, InputError>>>,
    ready: std::sync::Condvar,
}

impl Job {
    fn new(raw: Raw, parsing: Parsing, spare: Arc<Spare>) -> Arc<Self> {
        Arc::new(Self {
            raw: std::sync::Mutex::new(Some(raw)),
            parsing,
            spare: Some(spare),
            done: std::sync::Mutex::new(None),
            ready: std::sync::Condvar::new(),
        })
    }

    fn failed(e: InputError) -> Arc<Self> {
        Arc::new(Self {
            raw: std::sync::Mutex::new(None),
            parsing: Parsing { format: Format::Fasta, pair_keys: false },
            spare: None,
            done: std::sync::Mutex::new(Some(Err(e))),
            ready: std::sync::Condvar::new(),
        })
    }

    /// Parses the block if nobody has started to.
    fn run(&self) {
        crate::cpu_time::charge(crate::cpu_time::Work::Parse, || self.parse());
    }

    fn parse(&self) {
        let Some(raw) = self.raw.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let parsed = match raw {
            Raw::Bytes(bytes, recs) => Ok(parse_into(Text::Owned(bytes), Vec::new(), recs, self.parsing)),
            Raw::At(chunk) => {
                let (appended, recs) = self.spare.as_ref().map(|s| s.take()).unwrap_or_default();
                chunk.text(self.parsing.format).map(|text| parse_into(text, appended, recs, self.parsing))
            }
        };
        let parsed = parsed.map(|mut block| {
            block.spare = self.spare.clone();
            block
        });
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(parsed);
        self.ready.notify_all();
    }

    /// The parse: made here if no task has started it, else waited for.
    fn take(&self) -> Result<Block, InputError> {
        self.run();
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = done.take() {
                return r;
            }
            done = self.ready.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// What a file's reader thread sends for each block, in order.
type Pending = Arc<Job>;

/// A block's bytes as a job gets them: read already (from a stream), or a chunk of a mapped file
/// that the job finds itself.
enum Raw {
    Bytes(Vec<u8>, Vec<Rec>),
    At(Chunk),
}

/// Chunk `number` of a mapped file: the records that start in its bytes `number * size ..
/// (number + 1) * size`. Each chunk finds its own first and last record (see
/// [`record_start_in`]), so that chunks are found and parsed side by side, on the pool's threads,
/// not one after another on the file's reading thread (whose copying from the page cache held a
/// GPU run to about 2 GB/s a file on an H100 host). The map is read in place: copying it into
/// buffers of the process's own cost a small sample's run a tenth of its time, most of it the
/// kernel zeroing the buffers' fresh pages (perf, bench/results/HISTORY.md).
struct Chunk {
    source: Source,
    map: Arc<Mapped>,
    number: usize,
    /// Bytes a chunk ([`BLOCK_BYTES`]; less in tests).
    size: usize,
}

impl Chunk {
    /// The chunk's text, its pages mapped in (read from the disk if they are not in memory).
    fn text(&self, format: Format) -> Result<Text, InputError> {
        let at = |n: usize| n.saturating_mul(self.size).min(self.map.len());
        let (from, to) = (at(self.number), at(self.number + 1));
        let populate = |range| populate(&self.map, range).map_err(|e| io_error(&self.source, e));
        // The chunk's own bytes first (and the byte before, where its first record is found);
        // its last record, which ends in the next chunk, once that end is known.
        populate(from.saturating_sub(1)..to)?;
        let start = record_start_in(&self.map, from, format);
        let end = record_start_in(&self.map, to, format);
        populate(to..end)?;
        Ok(Text::Mapped { map: self.map.clone(), range: start..end })
    }
}

/// Maps in the pages of `range` of `map` at once (`MADV_POPULATE_READ`), here on the pool's
/// thread rather than page by page where the records are read. A file cut short since it was
/// mapped, or a read that failed, is an error here instead of a SIGBUS later; a kernel without the
/// call (before Linux 5.14) leaves the pages to be faulted in as they are read.
fn populate(map: &Mapped, range: std::ops::Range<usize>) -> std::io::Result<()> {
    match map.populate(range) {
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(std::io::Error::other(
            "it could not be read while mapped: it was cut short or rewritten, or the device failed",
        )),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EIO | libc::EHWPOISON)) => Err(e),
        _ => Ok(()),
    }
}

/// Where the first record at or after `x` starts in `bytes` (their length when none does): a line
/// start where a record begins, by the rule of [`cut`] (a `>` line for FASTA; an `@` line two
/// lines before a `+` line for FASTQ, which no quality line starting with `@` is). Every chunk
/// applies it to both its ends, so chunks meet exactly and cover the file.
fn record_start_in(bytes: &[u8], x: usize, format: Format) -> usize {
    if x == 0 || x >= bytes.len() {
        return x.min(bytes.len());
    }
    let mark = if format == Format::Fastq { b'@' } else { b'>' };
    // From the byte before `x`: a line starts at `x` if that byte ends a line.
    let from = &bytes[x - 1..];
    for nl in memchr::memchr_iter(b'\n', from) {
        let start = nl + 1;
        if start >= from.len() {
            break;
        }
        if from[start] != mark {
            continue;
        }
        if format == Format::Fasta {
            return x - 1 + start;
        }
        let mut lines = Lines { bytes: from, at: start };
        let (_, _, plus) = (lines.next(), lines.next(), lines.next());
        if let Some((p, _)) = plus
            && from.get(p) == Some(&b'+')
        {
            return x - 1 + start;
        }
    }
    bytes.len()
}

/// A file's records, block after block, in order.
pub struct RecordStream {
    source: Source,
    blocks: Receiver<Pending>,
    current: Option<Arc<Block>>,
    /// The next record of `current`.
    next: usize,
    /// Records and lines of the file before `current`.
    records_before: u64,
    lines_before: u64,
    /// The id of the last record delivered (for errors).
    last_id: String,
    done: bool,
}

impl RecordStream {
    /// Starts reading `source` on a thread of its own, blocks parsed on `pool`. An empty input
    /// gives an `Empty` error here; one that is neither FASTA nor FASTQ an `UnknownFormat`.
    #[cfg(test)]
    pub(crate) fn open(source: &Source, pool: Arc<rayon::ThreadPool>) -> Result<Self, InputError> {
        Self::open_ahead(source, pool, BLOCKS_AHEAD, true)
    }

    /// `RecordStream::open`, keeping `ahead` blocks read and parsed ahead of the consumer
    /// instead of [`BLOCKS_AHEAD`]; with `pair_keys`, each record's [`Rec::pair_key`] is made
    /// (else it is 0), for a stream whose records are checked against their mates.
    pub fn open_ahead(
        source: &Source,
        pool: Arc<rayon::ThreadPool>,
        ahead: usize,
        pair_keys: bool,
    ) -> Result<Self, InputError> {
        // Decompression runs on the same pool as parsing (its threads are the run's threads).
        let decoded = super::decompress::open(source, &pool)?;
        let plain = decoded.compression == super::decompress::Compression::None;
        let mut reader = decoded.reader;
        // The first bytes, to know the format before the thread starts: read only until one is
        // not blank, so that a pipe delivering slowly does not hold up the caller.
        let mut first = vec![0u8; 1 << 16];
        let n = read_until_nonblank(&mut reader, &mut first).map_err(|e| io_error(source, e))?;
        first.truncate(n);
        let start = first.iter().position(|b| !b.is_ascii_whitespace());
        let Some(start) = start else { return Err(InputError::Empty { file: source.clone() }) };
        if super::cr_only(&first) {
            return Err(InputError::CrLineEndings { file: source.clone() });
        }
        let Some(format) = format_of(first[start]) else {
            return Err(InputError::UnknownFormat {
                file: source.clone(),
                detail: format!("it starts with {:?}, not '>' (FASTA) or '@' (FASTQ)", first[start] as char),
            });
        };
        let (src, parsing) = (source.clone(), Parsing { format, pair_keys });
        // A plain regular file is mapped and read in chunks by the pool's threads; one that
        // cannot be mapped is read as a stream.
        let mapped = match source {
            Source::File(p) if plain => {
                let file = std::fs::File::open(p).map_err(|e| io_error(source, e))?;
                let meta = file.metadata().map_err(|e| io_error(source, e))?;
                if meta.is_file() {
                    Mapped::map(&file, p, crate::mapped::Kind::Input).ok().map(|map| (map, file))
                } else {
                    None
                }
            }
            _ => None,
        };
        // A mapped file's blocks ahead are pages of the page cache; a stream's are buffers of
        // their own (8 MiB each), so a stream reads at most STREAM_BLOCKS_AHEAD ahead.
        let ahead = if mapped.is_some() { ahead } else { ahead.min(STREAM_BLOCKS_AHEAD) };
        let (tx, blocks) = sync_channel::<Pending>(ahead.max(1));
        let thread = std::thread::Builder::new().name("kmerdb-read".into());
        let started = match mapped {
            Some((map, file)) => {
                thread.spawn(move || read_chunks(src, Arc::new(map), FromDisk::new(file), parsing, tx, pool))
            }
            None => thread.spawn(move || read_blocks(src, reader, first, parsing, tx, pool)),
        };
        started.map_err(|e| InputError::Io { path: std::path::PathBuf::from(source.to_string()), source: e })?;
        Ok(Self {
            source: source.clone(),
            blocks,
            current: None,
            next: 0,
            records_before: 0,
            lines_before: 0,
            last_id: String::new(),
            done: false,
        })
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Records delivered so far.
    pub fn records(&self) -> u64 {
        self.records_before + self.next as u64
    }

    /// The block holding the next record, and that record's index in it; `None` at the end of
    /// the file. An error of the file comes once the records before it are delivered.
    pub fn peek(&mut self) -> Result<Option<(&Arc<Block>, usize)>, InputError> {
        loop {
            if let Some(b) = &self.current {
                if self.next < b.recs.len() {
                    break;
                }
                if let Some(e) = &b.error {
                    let what = if self.records() == 0 {
                        "in the first record".to_string()
                    } else {
                        format!("after record {} ('{}')", self.records(), self.last_id)
                    };
                    return Err(InputError::Parse {
                        file: self.source.clone(),
                        what: format!("{what}, line {}", self.lines_before + e.line),
                        detail: e.detail.clone(),
                    });
                }
                self.records_before += b.recs.len() as u64;
                self.lines_before += b.lines;
                self.current = None;
                self.next = 0;
            }
            if self.done {
                return Ok(None);
            }
            let Ok(pending) = self.blocks.recv() else {
                self.done = true;
                continue;
            };
            self.current = Some(Arc::new(pending.take()?));
        }
        Ok(self.current.as_ref().map(|b| (b, self.next)))
    }

    /// Takes `n` records of the current block (after [`RecordStream::peek`]).
    pub fn advance(&mut self, n: usize) {
        let b = self.current.as_ref().expect("peek found a block");
        self.next += n;
        assert!(self.next <= b.recs.len());
        if n > 0 {
            let id = crate::input::first_word(b.header(self.next - 1));
            self.last_id.clear();
            self.last_id.push_str(&String::from_utf8_lossy(id));
        }
    }
}

/// `read` until `buf` is full or the input ends; the bytes read.
/// Reads into `buf` until it holds a byte that is not whitespace, is full, or the input ends.
fn read_until_nonblank(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if buf[n - k..n].iter().any(|b| !b.is_ascii_whitespace()) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The reading thread of a plain file: a job per chunk (see [`Chunk`]), each parsed by a task on
/// `pool`, sent to `tx` in order. A chunk not in memory is read from the disk here first (see
/// [`FromDisk`]).
fn read_chunks(
    source: Source,
    map: Arc<Mapped>,
    mut disk: FromDisk,
    parsing: Parsing,
    tx: SyncSender<Pending>,
    pool: Arc<rayon::ThreadPool>,
) {
    let spare = Arc::new(Spare::default());
    for number in 0..map.len().div_ceil(BLOCK_BYTES) {
        let from = number * BLOCK_BYTES;
        disk.fetch(&map, from..(from + BLOCK_BYTES).min(map.len()));
        let chunk = Chunk { source: source.clone(), map: map.clone(), number, size: BLOCK_BYTES };
        let job = Job::new(Raw::At(chunk), parsing, spare.clone());
        let ahead = job.clone();
        pool.spawn(move || ahead.run());
        if tx.send(job).is_err() {
            return;
        }
    }
}

/// A mapped file's reading from the disk, done by its reading thread, in order, before a chunk's
/// job is queued, so that the pool's threads find their chunks' pages in memory. When the jobs
/// faulted their pages in themselves, a chunk came from the disk in small reads one after another,
/// the pool's threads waited on the disk, and the pool's other work (a GPU batch's packing, the
/// output) queued behind them: with the reads on the disk a GPU run took 1.3-1.4x the time `cat`
/// took to read them (bench/results/HISTORY.md, twenty-first session). Read through a small buffer
/// as `cat` does, the kernel reads ahead of the thread in order. A chunk in the page cache already
/// is left to its job (`mincore` tells).
struct FromDisk {
    file: std::fs::File,
    /// Where the reads land, to be dropped: the pages in the page cache are what is wanted.
    scratch: Vec<u8>,
}

impl FromDisk {
    /// Bytes a read: small enough to stay in the core's cache, large enough to cost few calls.
    const READ: usize = 1 << 20;

    fn new(file: std::fs::File) -> Self {
        use std::os::fd::AsRawFd;
        // The file is read once, start to end: a larger read-ahead window (advice only).
        // SAFETY: posix_fadvise on an open descriptor has no other effect.
        let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
        Self { file, scratch: Vec::new() }
    }

    /// Brings `range` of the file into the page cache unless all of it is there. A failed read is
    /// left to the chunk's job, whose mapping of the same pages reports it with the record.
    fn fetch(&mut self, map: &Mapped, range: std::ops::Range<usize>) {
        use std::os::unix::fs::FileExt;
        if map.resident(range.clone()) {
            return;
        }
        self.scratch.resize(Self::READ, 0);
        let mut at = range.start;
        while at < range.end {
            let n = (range.end - at).min(Self::READ);
            match self.file.read_at(&mut self.scratch[..n], at as u64) {
                Ok(0) => return,
                Ok(k) => at += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }
}

/// The reader thread of one file: blocks cut at record boundaries, each parsed by a task on
/// `pool`; a receiver for each block's parse goes to `tx`, in order.
fn read_blocks(
    source: Source,
    mut reader: Box<dyn Read + Send>,
    mut carry: Vec<u8>,
    parsing: Parsing,
    tx: SyncSender<Pending>,
    pool: Arc<rayon::ThreadPool>,
) {
    let mut size = BLOCK_BYTES;
    let spare = Arc::new(Spare::default());
    loop {
        // A spare buffer keeps its length: only what lies beyond it is zeroed here.
        let (mut buf, recs) = spare.take();
        let have = carry.len();
        buf.resize(have.max(size), 0);
        buf[..have].copy_from_slice(&carry);
        carry.clear();
        if carry.capacity() > BLOCK_BYTES {
            carry = Vec::new(); // it held a huge record
        }
        let read = match read_full(&mut reader, &mut buf[have..]) {
            Ok(n) => n,
            Err(e) => {
                let _ = tx.send(Job::failed(io_error(&source, e)));
                return;
            }
        };
        buf.truncate(have + read);
        let at_end = have + read < size.max(have);
        if at_end {
            if buf.iter().all(|b| b.is_ascii_whitespace()) {
                return;
            }
        } else {
            match cut(&buf, parsing.format).filter(|&c| c > 0) {
                Some(c) => {
                    size = BLOCK_BYTES;
                    carry.extend_from_slice(&buf[c..]);
                    buf.truncate(c);
                }
                None => {
                    // No record boundary in the whole buffer: one record is larger; read more.
                    size = (buf.len() * 2).max(BLOCK_BYTES);
                    carry = buf;
                    spare.put(Vec::new(), recs);
                    continue;
                }
            }
        }
        let job = Job::new(Raw::Bytes(buf, recs), parsing, spare.clone());
        let ahead = job.clone();
        pool.spawn(move || ahead.run());
        if tx.send(job).is_err() || at_end {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Arc<rayon::ThreadPool> {
        Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap())
    }

    /// A file read in chunks of every size from 1 byte to the whole file gives the records (and
    /// the first error, at the same line) of parsing it whole: the chunks' ends meet.
    #[test]
    fn chunks_of_any_size_give_the_records_of_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let fastq =
            "\n@r1 x\r\nACGT\r\n+\r\nIIII\r\n@r2\nGG\n+r2\n@@\n@@r3\nT\n+\n@\n@r4\n\n+\n\n@r5\nAAAA\n+\nII#I\n\n";
        let fasta = ">a one\nACGT\nTT\n\n>b\n>c\nG\r\nC\r\n>d>x\nAAAA\n";
        let bad = "@r1\nACGT\n+\nIIII\n@r2\nGG\n+\nI\n@r3\nT\n+\nI\n";
        let truncated = "@r1\nACGT\n+\nIIII\n@r2\nGG\n";
        for (text, format) in
            [(fastq, Format::Fastq), (fasta, Format::Fasta), (bad, Format::Fastq), (truncated, Format::Fastq)]
        {
            let path = dir.path().join("x");
            std::fs::write(&path, text).unwrap();
            let file = std::fs::File::open(&path).unwrap();
            let map = Arc::new(Mapped::map(&file, &path, crate::mapped::Kind::Input).unwrap());
            let whole = parse(text.as_bytes().to_vec(), format);
            let records = |b: &Block| -> Vec<(Vec<u8>, Vec<u8>)> {
                (0..b.recs.len()).map(|i| (b.header(i).to_vec(), b.seq(i).to_vec())).collect()
            };
            for size in 1..=text.len() {
                let (mut got, mut lines, mut error) = (Vec::new(), 0, None);
                for number in 0..text.len().div_ceil(size) {
                    let chunk = Chunk { source: Source::File(path.clone()), map: map.clone(), number, size };
                    let parsing = Parsing { format, pair_keys: true };
                    let b = parse_into(chunk.text(format).unwrap(), Vec::new(), Vec::new(), parsing);
                    got.extend(records(&b));
                    if let Some(e) = &b.error {
                        error = Some(lines + e.line);
                        break;
                    }
                    lines += b.lines;
                }
                assert_eq!(got, records(&whole), "{text:?} in chunks of {size}");
                assert_eq!(error, whole.error.as_ref().map(|e| e.line), "{text:?} in chunks of {size}");
            }
        }
    }

    /// A file cut short after it was mapped is an error naming it, not a SIGBUS.
    #[test]
    fn a_file_cut_after_it_was_mapped_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.fq");
        let text: String = (0..20_000).map(|i| format!("@r{i}\nACGTACGTAC\n+\nIIIIIIIIII\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let map = Arc::new(Mapped::map(&file, &path, crate::mapped::Kind::Input).unwrap());
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
        let chunk = Chunk { source: Source::File(path.clone()), map, number: 1, size: 1 << 16 };
        let err = crate::errors::chain(&chunk.text(Format::Fastq).expect_err("an error"));
        assert!(err.contains("cut.fq") && err.contains("cut short"), "{err}");
    }

    /// Every record of a stream: (header, seq, qual).
    fn all(s: &mut RecordStream) -> Result<Vec<(String, String, Option<String>)>, InputError> {
        let mut out = Vec::new();
        while let Some((b, i)) = s.peek()? {
            let text = |x: &[u8]| String::from_utf8(x.to_vec()).unwrap();
            out.push((text(b.header(i)), text(b.seq(i)), b.qual(i).map(text)));
            s.advance(1);
        }
        Ok(out)
    }

    fn stream(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Result<RecordStream, InputError> {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        RecordStream::open(&Source::File(p), pool())
    }

    /// The records of a file are those of parsing it whole, wherever a block is cut: every cut
    /// point of the text is tried through `cut` and `parse` directly.
    #[test]
    fn blocks_cut_anywhere_give_the_same_records() {
        let fastq = "@r1 x\r\nACGT\r\n+\r\nIIII\r\n@r2\nGG\n+r2\n@@\n@@r3\nT\n+\n@\n@r4\n\n+\n\n@r5\nAAAA\n+\nII#I\n";
        let fasta = ">a one\nACGT\nTT\n\n>b\n>c\nG\r\nC\r\n>d>x\nAAAA\n";
        for (text, format) in [(fastq, Format::Fastq), (fasta, Format::Fasta)] {
            let whole = parse(text.as_bytes().to_vec(), format);
            assert!(whole.error.is_none(), "{:?}", whole.error);
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                (0..whole.recs.len()).map(|i| (whole.header(i).to_vec(), whole.seq(i).to_vec())).collect();
            for at in 0..=text.len() {
                // As the reader does: the first `at` bytes, cut at the last boundary in them.
                let head = &text.as_bytes()[..at];
                let c = if at == text.len() { Some(at) } else { cut(head, format) };
                let Some(c) = c.filter(|&c| c > 0) else { continue };
                let (a, b) =
                    (parse(text.as_bytes()[..c].to_vec(), format), parse(text.as_bytes()[c..].to_vec(), format));
                assert!(a.error.is_none() && b.error.is_none(), "cut at {c} of {at}: {:?} {:?}", a.error, b.error);
                let got: Vec<(Vec<u8>, Vec<u8>)> = (0..a.recs.len())
                    .map(|i| (a.header(i).to_vec(), a.seq(i).to_vec()))
                    .chain((0..b.recs.len()).map(|i| (b.header(i).to_vec(), b.seq(i).to_vec())))
                    .collect();
                assert_eq!(got, want, "{format:?} cut at {c} (of the first {at} bytes)");
            }
        }
        let q = parse(fastq.as_bytes().to_vec(), Format::Fastq);
        assert_eq!(q.header(0), b"r1 x");
        assert_eq!(q.qual(1), Some(&b"@@"[..]));
        assert_eq!(q.seq(3), b"");
        let a = parse(fasta.as_bytes().to_vec(), Format::Fasta);
        assert_eq!((a.seq(0), a.seq(1), a.seq(2), a.header(3)), (&b"ACGTTT"[..], &b""[..], &b"GC"[..], &b"d>x"[..]));
    }

    /// Through the whole stream (reader thread, pool, blocks in order): many blocks, gzip with
    /// several members, records and line numbers in errors counted over the whole file.
    #[test]
    fn streams_deliver_every_record_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..300_000 {
            text.push_str(&format!("@read{i}\n{}\n+\n{}\n", "ACGT".repeat(i % 40), "I".repeat((i % 40) * 4)));
        }
        let mut s = stream(dir.path(), "many.fq", text.as_bytes()).unwrap();
        let got = all(&mut s).unwrap();
        assert_eq!(got.len(), 300_000);
        assert!(got.iter().enumerate().all(|(i, r)| r.0 == format!("read{i}")));
        // Two gzip members, as `cat a.gz b.gz` makes.
        let mut gz = Vec::new();
        for part in [&text[..text.len() / 2 - 7], &text[text.len() / 2 - 7..]] {
            gz.extend(crate::test_support::gzip(part.as_bytes()));
        }
        let mut s = stream(dir.path(), "many.fq.gz", &gz).unwrap();
        assert_eq!(all(&mut s).unwrap(), got);
        // A bad record far in: the records before it come first, then the error.
        text.push_str("@bad\nACGT\n+\nII\n");
        let mut s = stream(dir.path(), "late.fq", text.as_bytes()).unwrap();
        let mut n = 0;
        let err = loop {
            match s.peek() {
                Ok(Some(_)) => {
                    s.advance(1);
                    n += 1
                }
                Ok(None) => panic!("no error"),
                Err(e) => break crate::errors::chain(&e),
            }
        };
        assert_eq!(n, 300_000);
        assert!(
            err.contains("late.fq: after record 300000 ('read299999'), line 1200004") && err.contains("quality"),
            "{err}"
        );
    }

    /// Drops `path`'s pages from the page cache (where the file system lets them go).
    fn uncache(path: &std::path::Path) {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: advice on an open descriptor.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }

    /// A file whose pages are not in memory is read by its reading thread (`FromDisk`), which
    /// leaves each chunk in the page cache, and gives the records the cached file gives.
    #[test]
    fn a_file_read_from_the_disk_gives_the_same_records() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..200_000)
            .map(|i| {
                format!(
                    "@read{i}
{}
+
{}
",
                    "ACGT".repeat(i % 50),
                    "I".repeat((i % 50) * 4)
                )
            })
            .collect();
        let path = dir.path().join("cold.fq");
        std::fs::write(&path, &text).unwrap();
        let want = all(&mut RecordStream::open(&Source::File(path.clone()), pool()).unwrap()).unwrap();
        assert_eq!(want.len(), 200_000);
        // The reading thread's fetch, on its own: a chunk out of memory is in memory after it.
        uncache(&path);
        let file = std::fs::File::open(&path).unwrap();
        let map = Mapped::map(&file, &path, crate::mapped::Kind::Input).unwrap();
        let chunk = BLOCK_BYTES..(2 * BLOCK_BYTES).min(map.len());
        let evicted = !map.resident(chunk.clone());
        FromDisk::new(file.try_clone().unwrap()).fetch(&map, chunk.clone());
        assert!(map.resident(chunk), "fetched chunk not in memory (evicted before: {evicted})");
        // The whole stream from the disk.
        uncache(&path);
        let got = all(&mut RecordStream::open(&Source::File(path.clone()), pool()).unwrap()).unwrap();
        assert!(got == want, "records differ when read from the disk");
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(stream(dir.path(), "e.fq", b""), Err(InputError::Empty { .. })));
        assert!(matches!(stream(dir.path(), "w.fq", b"\n\n  \n"), Err(InputError::Empty { .. })));
        let err = stream(dir.path(), "t.txt", b"hello").err().unwrap().to_string();
        assert!(err.contains("t.txt: not a FASTA or FASTQ file"), "{err}");
        for (name, text, want) in [
            ("noplus.fq", &b"@a\nACGT\nIIII\n"[..], "in the first record, line 1: the file ends"),
            ("cut.fq", b"@a\nAC\n+\nII\n@b\nAC\n", "after record 1 ('a'), line 5: the file ends in the middle"),
            ("sep.fq", b"@a\nAC\n-\nII\n", "line 3: malformed FASTQ record"),
            ("short.fq", b"@a\nACGT\n+\nII\n", "line 4: malformed FASTQ record: 2 quality values for 4 bases"),
            ("nohead.fa", b">a\nAC\n", ""),
        ] {
            let mut s = stream(dir.path(), name, text).unwrap();
            match all(&mut s) {
                Ok(_) => assert!(want.is_empty(), "{name}: no error"),
                Err(e) => assert!(!want.is_empty() && e.to_string().contains(want), "{name}: {e}"),
            }
        }
        // A truncated gzip file is an error, not a short file.
        let text: String = (0..20_000).map(|i| format!("@r{i}\nACGTACGTAC\n+\nIIIIIIIIII\n")).collect();
        let gz = crate::test_support::gzip(text.as_bytes());
        let mut s = stream(dir.path(), "cut.fq.gz", &gz[..gz.len() / 2]).unwrap();
        let err = all(&mut s).unwrap_err().to_string();
        assert!(err.contains("cut.fq.gz") && err.contains("truncated"), "{err}");
    }
}
