//! Decompressing inputs: the bytes of a file or of stdin, decompressed, as one `std::io::Read`,
//! with the compression detected from the first bytes (never from the name).
//!
//! | input | how it is decoded |
//! |---|---|
//! | plain | passed through (the `File` itself for a regular file) |
//! | BGZF (`bgzip`) | blocks located from their `BC` size field and inflated in parallel on the pool (libdeflate), files and stdin |
//! | gzip whose deflate stream has full-flush points (`pigz -i`) | cut at those points and inflated in parallel on the pool (libdeflate); regular files only |
//! | other gzip (`gzip`, `pigz`, `cat a.gz b.gz`) | one member after another on one thread (flate2 with zlib-rs) |
//! | bzip2, xz, zstd | one thread (bzip2, liblzma and zstd crates, as needletail) |
//!
//! All decoding runs on the caller's thread pool (the run's `--threads`), never on threads of its
//! own, so that decoding counts against the run's threads: parallel formats' parts are pool
//! tasks, and the one-thread decoders run as a chain of pool tasks, each decoding one 1 MiB buffer
//! a few buffers ahead of the reader. No decoding task ever waits for another task or for the
//! reader (each sends into room of its own), so a pool busy with the reader's own work, or of one
//! thread, delays decoding but cannot deadlock it; the reader, which waits for the tasks, must not
//! be one of the pool's threads.
//!
//! Invariants: output comes in order; every gzip member's CRC32 and ISIZE are checked (a BGZF
//! block's by the thread that inflates it; a cut member's from its parts' CRCs combined); memory
//! is bounded by a few pieces of about `PART_BYTES` of input per thread; a truncated or corrupt
//! input is an error naming the file and the member (or block) and its byte offset, never short
//! output. Errors come out of `read` as `io::Error`s that carry an [`InputError`]:
//! [`into_input_error`] takes it back out.
//!
//! `pigz -i` (checked with pigz 2.6) writes ONE gzip member whose deflate blocks are made
//! independent: each block of input ends with an empty stored block on a byte boundary (the bytes
//! `00 00 ff ff`) and the next starts with no dictionary. Those bytes can also occur by chance in
//! compressed data, so the cuts are speculative: a part is accepted only when it inflates on its
//! own and ends exactly at the next cut (a final empty block `03 00` is appended to close it), and
//! the member's CRC32 and ISIZE are checked at its end. A part that fails sends the rest of the
//! file to the one-thread decoder, which resumes at the last accepted cut and reports any real
//! error. Plain `pigz` writes the same markers but carries the dictionary over; a probe at open
//! (the second part must inflate on its own) tells the two apart.

use std::fmt;
use std::io::{self, BufRead, BufReader, Cursor, Read, Seek};
use std::sync::{Arc, Mutex, mpsc};

use super::{InputError, Source};
use crate::mapped::Mapped;
use std::path::Path;

/// Compressed input is cut into parts of about this many bytes for the decoding tasks.
pub(crate) const PART_BYTES: usize = 1 << 20;

/// Sizes of the parallel decoders' parts (small in tests, to make many).
#[derive(Debug, Clone, Copy)]
struct Tuning {
    part_bytes: usize,
    /// A `pigz -i` part longer than this (no flush point found) ends the parallel decoding: the
    /// rest is decoded on one thread, with bounded memory.
    max_part_bytes: usize,
}

const TUNING: Tuning = Tuning { part_bytes: PART_BYTES, max_part_bytes: 16 * PART_BYTES };
/// Bytes looked at to detect the compression (a gzip header's extra field can be 64 KiB).
const HEAD_BYTES: usize = 12 + 65536;
/// Buffer of the one-thread decoders' input.
const READ_BUF: usize = 256 << 10;
/// A BGZF block inflates to at most this (the SAM/BAM specification's limit).
const BGZF_MAX_ISIZE: usize = 1 << 16;
/// The deflate window: back-references reach at most this far.
const WINDOW: usize = 32 << 10;
const HINT: &str = "(is the compressed file truncated or corrupt?)";

/// The compression of an input, as detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    /// gzip decoded one member after another on one thread (single or concatenated members).
    Gzip,
    /// BGZF (bgzip): gzip members of at most 64 KiB with their size in the header, decoded in parallel.
    Bgzf,
    /// gzip with independent deflate blocks at full-flush points (`pigz -i`), decoded in parallel.
    GzipIndependent,
    Bzip2,
    Xz,
    Zstd,
}

impl Compression {
    /// Whether this input is decoded on several threads.
    pub(crate) fn is_parallel(self) -> bool {
        matches!(self, Compression::Bgzf | Compression::GzipIndependent)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Bgzf => "BGZF",
            Compression::GzipIndependent => "gzip with independent blocks (pigz -i)",
            Compression::Bzip2 => "bzip2",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        })
    }
}

/// An opened input: what was detected, and the decompressed bytes.
pub struct Decoded {
    pub compression: Compression,
    pub reader: Box<dyn Read + Send>,
}

impl fmt::Debug for Decoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoded").field("compression", &self.compression).finish_non_exhaustive()
    }
}

/// Opens a file or stdin and detects its compression from the first bytes (stdin's are peeked
/// and given back). Decoding runs on `pool` (see the module's notes): the reader must not be read
/// from one of `pool`'s threads.
///
/// ```no_run
/// use std::io::Read;
/// let source = kmerdb_core::input::Source::File("reads.fq.gz".into());
/// let pool = std::sync::Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
/// let mut decoded = kmerdb_core::input::decompress::open(&source, &pool)?;
/// let mut text = Vec::new();
/// decoded.reader.read_to_end(&mut text).map_err(|e| kmerdb_core::input::decompress::into_input_error(&source, e))?;
/// # Ok::<(), kmerdb_core::input::InputError>(())
/// ```
pub fn open(source: &Source, pool: &Pool) -> Result<Decoded, InputError> {
    open_tuned(source, pool, TUNING)
}

/// The thread pool decoding runs on.
pub(crate) type Pool = Arc<rayon::ThreadPool>;

fn open_tuned(source: &Source, pool: &Pool, tuning: Tuning) -> Result<Decoded, InputError> {
    let io_err = |e: io::Error| match source {
        Source::File(path) if e.kind() == io::ErrorKind::NotFound => InputError::NotFound(path.clone()),
        Source::File(path) => InputError::Io { path: path.clone(), source: e },
        Source::Stdin => InputError::Io { path: "<stdin>".into(), source: e },
    };
    match source {
        Source::File(path) => {
            let mut file = std::fs::File::open(path).map_err(io_err)?;
            // Only a regular file can be mapped or rewound; a named pipe is read as a stream.
            if file.metadata().is_ok_and(|m| m.is_file()) {
                let compression = detect(&read_head(&mut file).map_err(io_err)?);
                if compression == Compression::Gzip
                    && let Some(map) = independent_blocks(&file, path)
                {
                    let reader = Parallel::independent(source.clone(), map, pool, tuning);
                    let reader = Box::new(Sticky { inner: reader, failed: None });
                    return Ok(Decoded { compression: Compression::GzipIndependent, reader });
                }
                file.seek(io::SeekFrom::Start(0)).map_err(io_err)?;
                return Ok(Decoded { compression, reader: decoder(source, compression, Box::new(file), pool, tuning) });
            }
            open_stream(source, Box::new(file), pool, tuning).map_err(io_err)
        }
        Source::Stdin => open_stream(source, Box::new(io::stdin()), pool, tuning).map_err(io_err),
    }
}

/// Detects the compression of a stream that cannot be rewound: the bytes peeked are given back
/// in front of the rest.
fn open_stream(source: &Source, mut r: Box<dyn Read + Send>, pool: &Pool, tuning: Tuning) -> io::Result<Decoded> {
    let head = read_head(&mut r)?;
    let compression = detect(&head);
    let reader = Box::new(Cursor::new(head).chain(r));
    Ok(Decoded { compression, reader: decoder(source, compression, reader, pool, tuning) })
}

/// Reads a whole input, decompressed (tests and small files).
pub(crate) fn read_all(source: &Source, threads: usize) -> Result<(Compression, Vec<u8>), InputError> {
    let mut decoded = open(source, &pool_of(threads))?;
    let mut out = Vec::new();
    decoded.reader.read_to_end(&mut out).map_err(|e| into_input_error(source, e))?;
    Ok((decoded.compression, out))
}

/// The [`InputError`] an error from a [`Decoded::reader`] carries (decompression errors name the
/// file, member and offset), or an I/O error naming the source.
pub fn into_input_error(source: &Source, e: io::Error) -> InputError {
    if e.get_ref().is_some_and(|inner| inner.is::<InputError>()) {
        return *e.into_inner().unwrap().downcast::<InputError>().unwrap();
    }
    let path = match source {
        Source::File(p) => p.clone(),
        Source::Stdin => "<stdin>".into(),
    };
    InputError::Io { path, source: e }
}

/// The first bytes, as many as [`detect`] needs (at most [`HEAD_BYTES`]; fewer at the end of the
/// input). Reads no further than that, so that a pipe delivering slowly is not waited for.
fn read_head(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = vec![0u8; HEAD_BYTES];
    let mut n = 0;
    while n < HEAD_BYTES {
        match r.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let decided = match &head[..n] {
            b if b.len() < 6 => false,
            b if b.starts_with(&[0x1f, 0x8b]) => !matches!(gzip_header(b), Err(HeaderError::Incomplete(_))),
            _ => true,
        };
        if decided {
            break;
        }
    }
    head.truncate(n);
    Ok(head)
}

/// The compression given by magic bytes.
pub fn detect(head: &[u8]) -> Compression {
    if head.starts_with(&[0x1f, 0x8b]) {
        match gzip_header(head) {
            Ok(h) if h.block_size.is_some() => Compression::Bgzf,
            _ => Compression::Gzip,
        }
    } else if head.starts_with(b"BZh") {
        Compression::Bzip2
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Compression::Xz
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        || (head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18])
    {
        Compression::Zstd // a frame, or a skippable frame
    } else {
        Compression::None
    }
}

/// A pool of `threads` threads (at least 1), for tests and benchmarks.
pub fn pool_of(threads: usize) -> Pool {
    Arc::new(rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build().expect("cannot start a thread pool"))
}

fn decoder(
    source: &Source,
    compression: Compression,
    r: Box<dyn Read + Send>,
    pool: &Pool,
    tuning: Tuning,
) -> Box<dyn Read + Send> {
    let s = source.clone();
    let inner: Box<dyn Read + Send> = match compression {
        Compression::None => return r,
        Compression::Gzip | Compression::GzipIndependent => {
            Box::new(GzipMembers::new(s, Box::new(BufReader::with_capacity(READ_BUF, r))))
        }
        Compression::Bgzf => Box::new(Parallel::bgzf(s, r, pool, tuning)),
        Compression::Bzip2 => {
            let inner = bzip2::bufread::MultiBzDecoder::new(BufReader::with_capacity(READ_BUF, r));
            Box::new(NamingReader { source: s, what: "bzip2", inner })
        }
        Compression::Xz => {
            let inner = liblzma::bufread::XzDecoder::new_multi_decoder(BufReader::with_capacity(READ_BUF, r));
            Box::new(NamingReader { source: s, what: "xz", inner })
        }
        Compression::Zstd => match zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(READ_BUF, r)) {
            Ok(inner) => Box::new(NamingReader { source: s, what: "zstd", inner }),
            Err(e) => return Box::new(Sticky { inner: io::empty(), failed: Some((e.kind(), e.to_string())) }),
        },
    };
    let inner = if compression.is_parallel() { inner } else { ReadAhead::start(inner, pool) };
    Box::new(Sticky { inner, failed: None })
}

/// A one-thread decoder run a few buffers ahead of the reader, as a chain of tasks on the pool:
/// each task decodes one buffer and, while fewer than [`ReadAhead::AHEAD`] wait for the reader,
/// starts the next; the reader starts the chain again when it takes a buffer from a full queue.
/// A task waits for nothing but its input's I/O (never for another task or the reader), so
/// decoding shares the pool's threads without tying one up.
struct ReadAhead {
    shared: Arc<Ahead>,
    buf: Vec<u8>,
    at: usize,
    done: bool,
}

struct Ahead {
    state: Mutex<AheadState>,
    /// Signalled when a buffer (or the end) is queued.
    queued: std::sync::Condvar,
    pool: Pool,
}

struct AheadState {
    /// Decoded buffers for the reader, in order; an error ends them.
    full: std::collections::VecDeque<io::Result<Vec<u8>>>,
    /// Buffers the reader is done with.
    empty: Vec<Vec<u8>>,
    /// The decoder, while no task holds it; `None` for good once it has ended.
    inner: Option<Box<dyn Read + Send>>,
    /// A task is queued or running.
    running: bool,
    /// The decoder reached its end or failed: nothing more will be queued.
    ended: bool,
    /// The reader has gone: no more tasks.
    closed: bool,
}

impl ReadAhead {
    const BUF: usize = 1 << 20;
    const AHEAD: usize = 3;

    fn start(inner: Box<dyn Read + Send>, pool: &Pool) -> Box<dyn Read + Send> {
        let state = AheadState {
            full: Default::default(),
            empty: Vec::new(),
            inner: Some(inner),
            running: true,
            ended: false,
            closed: false,
        };
        let shared = Arc::new(Ahead { state: Mutex::new(state), queued: Default::default(), pool: pool.clone() });
        shared.schedule();
        Box::new(ReadAhead { shared, buf: Vec::new(), at: 0, done: false })
    }
}

impl Ahead {
    fn lock(&self) -> std::sync::MutexGuard<'_, AheadState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a task on the pool (the caller has marked it `running`).
    fn schedule(self: &Arc<Self>) {
        let task = self.clone();
        self.pool.spawn(move || task.decode_one());
    }

    /// Decodes one buffer, queues it and starts the next task if there is room.
    fn decode_one(self: Arc<Self>) {
        let (mut inner, mut buf) = {
            let mut st = self.lock();
            match st.inner.take() {
                Some(inner) if !st.closed => (inner, st.empty.pop().unwrap_or_default()),
                other => {
                    st.inner = other;
                    st.running = false;
                    return;
                }
            }
        };
        buf.resize(ReadAhead::BUF, 0);
        let mut n = 0;
        let result = loop {
            match inner.read(&mut buf[n..]) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    n += k;
                    if n == buf.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        buf.truncate(n);
        let end = n == 0 || result.is_err();
        let mut st = self.lock();
        if n > 0 {
            st.full.push_back(Ok(buf));
        }
        if let Err(e) = result {
            st.full.push_back(Err(e));
        }
        if end {
            st.ended = true;
        } else {
            st.inner = Some(inner);
        }
        st.running = !end && !st.closed && st.full.len() < ReadAhead::AHEAD;
        if st.running {
            self.schedule();
        }
        drop(st);
        self.queued.notify_all();
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.at == self.buf.len() {
            if self.done {
                return Ok(0);
            }
            let mut st = self.shared.lock();
            let next = loop {
                if let Some(next) = st.full.pop_front() {
                    break Some(next);
                }
                if st.ended {
                    break None;
                }
                st = self.shared.queued.wait(st).unwrap_or_else(|p| p.into_inner());
            };
            // Room again: restart the chain if it stopped for want of it.
            if !st.running && !st.ended && st.inner.is_some() {
                st.running = true;
                self.shared.schedule();
            }
            match next {
                Some(Ok(next)) => {
                    let used = std::mem::replace(&mut self.buf, next);
                    if st.empty.len() < ReadAhead::AHEAD + 2 {
                        st.empty.push(used);
                    }
                    self.at = 0;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                None => self.done = true,
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // A running task finishes its buffer and starts no other.
        self.shared.lock().closed = true;
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

fn input_error(source: &Source, what: String, detail: impl fmt::Display) -> InputError {
    InputError::Parse { file: source.clone(), what, detail: format!("{detail} {HINT}") }
}

fn corrupt(source: &Source, what: String, detail: impl fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, input_error(source, what, detail))
}

fn truncated(source: &Source, what: String, detail: impl fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, input_error(source, what, detail))
}

/// A reader whose errors name the file (bzip2, xz and zstd).
struct NamingReader<R> {
    source: Source,
    what: &'static str,
    inner: R,
}

impl<R: Read> Read for NamingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            if e.get_ref().is_some_and(|inner| inner.is::<InputError>()) {
                return e;
            }
            let kind = e.kind();
            let detail = format!("{e} {HINT}");
            let error = InputError::Parse { file: self.source.clone(), what: format!("{} data", self.what), detail };
            io::Error::new(kind, error)
        })
    }
}

/// A reader that, once it has failed, fails again on every later read (the decoders' state
/// after an error is not meant to be read on).
struct Sticky<R> {
    inner: R,
    failed: Option<(io::ErrorKind, String)>,
}

impl<R: Read> Read for Sticky<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((kind, msg)) = &self.failed {
            return Err(io::Error::new(*kind, msg.clone()));
        }
        self.inner.read(buf).inspect_err(|e| self.failed = Some((e.kind(), e.to_string())))
    }
}

// ---------------------------------------------------------------------------------------------
// gzip headers

/// A parsed gzip member header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    /// Bytes of the header.
    len: usize,
    /// The whole member's size from a BGZF `BC` subfield.
    block_size: Option<usize>,
}

#[derive(Debug, PartialEq, Eq)]
enum HeaderError {
    /// At least this many bytes are needed.
    Incomplete(usize),
    Invalid(&'static str),
}

/// Parses the gzip member header at the start of `b` (RFC 1952).
fn gzip_header(b: &[u8]) -> Result<Header, HeaderError> {
    use HeaderError::*;
    let need = |n: usize| if b.len() < n { Err(Incomplete(n)) } else { Ok(()) };
    need(2)?;
    if b[..2] != [0x1f, 0x8b] {
        return Err(Invalid("not a gzip member (no 1f 8b magic)"));
    }
    need(10)?;
    if b[2] != 8 {
        return Err(Invalid("a gzip member compressed with a method other than deflate"));
    }
    let flags = b[3];
    if flags & 0xe0 != 0 {
        return Err(Invalid("a gzip header with reserved flags set"));
    }
    let mut pos = 10;
    let mut block_size = None;
    if flags & 0x04 != 0 {
        need(pos + 2)?;
        let xlen = u16::from_le_bytes([b[pos], b[pos + 1]]) as usize;
        need(pos + 2 + xlen)?;
        let extra = &b[pos + 2..pos + 2 + xlen];
        let mut i = 0;
        while i + 4 <= extra.len() {
            let len = u16::from_le_bytes([extra[i + 2], extra[i + 3]]) as usize;
            if extra[i..i + 2] == *b"BC" && len == 2 && i + 6 <= extra.len() {
                block_size = Some(u16::from_le_bytes([extra[i + 4], extra[i + 5]]) as usize + 1);
            }
            i += 4 + len;
        }
        pos += 2 + xlen;
    }
    for flag in [0x08, 0x10] {
        // file name, comment: zero-terminated
        if flags & flag != 0 {
            match memchr::memchr(0, &b[pos..]) {
                Some(z) => pos += z + 1,
                None => return Err(Incomplete(b.len() + 1)),
            }
        }
    }
    if flags & 0x02 != 0 {
        need(pos + 2)?;
        let crc16 = u16::from_le_bytes([b[pos], b[pos + 1]]);
        if crc32fast::hash(&b[..pos]) as u16 != crc16 {
            return Err(Invalid("a gzip header whose CRC16 does not match"));
        }
        pos += 2;
    }
    Ok(Header { len: pos, block_size })
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().unwrap())
}

// ---------------------------------------------------------------------------------------------
// One thread: gzip members one after another

/// Counts the bytes consumed, for offsets in messages.
struct Counting {
    inner: Box<dyn BufRead + Send>,
    pos: u64,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl BufRead for Counting {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, n: usize) {
        self.pos += n as u64;
        self.inner.consume(n)
    }
}

enum State {
    Header,
    Body,
    Trailer,
    Done,
}

/// Where a member stands, so that one-thread decoding can take over in the middle of a member
/// (after the parallel decoder's last accepted cut, a deflate block boundary).
#[derive(Clone)]
struct MemberState {
    /// 1-based number of the member.
    number: u64,
    /// Byte offset of its header.
    at: u64,
    crc: crc32fast::Hasher,
    len: u64,
}

/// gzip members decoded one after another (flate2, zlib-rs), each checked against its trailer.
struct GzipMembers {
    source: Source,
    r: Counting,
    inflate: flate2::Decompress,
    state: State,
    member: MemberState,
    /// Name for messages: "gzip member" or "BGZF block".
    unit: &'static str,
}

impl GzipMembers {
    fn new(source: Source, r: Box<dyn BufRead + Send>) -> Self {
        let member = MemberState { number: 0, at: 0, crc: crc32fast::Hasher::new(), len: 0 };
        Self::resume(source, r, 0, member, State::Header, "gzip member")
    }

    /// Continues at byte `pos` of the input, which `r` starts at: a member's header (`Header`)
    /// or, inside `member`, the start of a deflate block (`Body`; the caller sets the history).
    fn resume(
        source: Source,
        r: Box<dyn BufRead + Send>,
        pos: u64,
        member: MemberState,
        state: State,
        unit: &'static str,
    ) -> Self {
        let inflate = flate2::Decompress::new(false);
        GzipMembers { source, r: Counting { inner: r, pos }, inflate, state, member, unit }
    }

    fn what(&self) -> String {
        format!("{} {} at byte {}", self.unit, self.member.number, self.member.at)
    }

    fn header(&mut self) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(32);
        let mut need = 10;
        loop {
            while bytes.len() < need {
                let avail = self.r.fill_buf()?;
                if avail.is_empty() {
                    return Err(truncated(&self.source, self.what(), "the file ends inside the member's header"));
                }
                let n = avail.len().min(need - bytes.len());
                bytes.extend_from_slice(&avail[..n]);
                self.r.consume(n);
            }
            match gzip_header(&bytes) {
                Ok(_) => return Ok(()),
                Err(HeaderError::Incomplete(n)) => need = n,
                Err(HeaderError::Invalid(why)) => {
                    let why = if self.member.number > 1 && why.starts_with("not a gzip member") {
                        "bytes after the previous member that are not a gzip member"
                    } else {
                        why
                    };
                    return Err(corrupt(&self.source, self.what(), why));
                }
            }
        }
    }

    /// Inflates into `buf`; 0 at the end of the member's deflate data.
    fn body(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let input = self.r.fill_buf()?;
            let eof = input.is_empty();
            let (in0, out0) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self
                .inflate
                .decompress(input, buf, flate2::FlushDecompress::None)
                .map_err(|e| corrupt(&self.source, self.what(), format!("corrupt deflate data ({e})")))?;
            let consumed = (self.inflate.total_in() - in0) as usize;
            let produced = (self.inflate.total_out() - out0) as usize;
            self.r.consume(consumed);
            self.member.crc.update(&buf[..produced]);
            self.member.len += produced as u64;
            if status == flate2::Status::StreamEnd {
                self.state = State::Trailer;
                return Ok(produced);
            }
            if produced > 0 {
                return Ok(produced);
            }
            if eof {
                return Err(truncated(&self.source, self.what(), "the file ends inside the member's deflate data"));
            }
            if consumed == 0 {
                return Err(corrupt(&self.source, self.what(), "deflate data that makes no progress"));
            }
        }
    }

    fn trailer(&mut self) -> io::Result<()> {
        let mut t = [0u8; 8];
        self.r.read_exact(&mut t).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                truncated(&self.source, self.what(), "the file ends inside the member's CRC32 and size")
            }
            _ => e,
        })?;
        let crc = std::mem::take(&mut self.member.crc).finalize();
        if crc != le32(&t) {
            let detail = format!("CRC32 mismatch: the data gives {crc:08x}, the trailer says {:08x}", le32(&t));
            return Err(corrupt(&self.source, self.what(), detail));
        }
        if self.member.len as u32 != le32(&t[4..]) {
            let detail = format!(
                "size mismatch: {} bytes decoded, the trailer says {} (mod 2^32)",
                self.member.len,
                le32(&t[4..])
            );
            return Err(corrupt(&self.source, self.what(), detail));
        }
        Ok(())
    }
}

impl Read for GzipMembers {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.state {
                State::Header => {
                    if self.r.fill_buf()?.is_empty() {
                        self.state = State::Done;
                        continue;
                    }
                    self.member =
                        MemberState { number: self.member.number + 1, at: self.r.pos, crc: Default::default(), len: 0 };
                    self.header()?;
                    self.inflate.reset(false);
                    self.state = State::Body;
                }
                State::Body => {
                    let n = self.body(buf)?;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                State::Trailer => {
                    self.trailer()?;
                    self.state = State::Header;
                }
                State::Done => return Ok(0),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// libdeflate

/// A libdeflate decompressor (one per pool thread that decodes parts).
struct Inflater(std::ptr::NonNull<libdeflate_sys::libdeflate_decompressor>);

// SAFETY: a libdeflate decompressor is plain memory used by one call at a time (`&mut self`).
unsafe impl Send for Inflater {}

#[derive(Debug, PartialEq, Eq)]
enum InflateError {
    BadData,
    TooLarge,
}

impl Inflater {
    fn new() -> Self {
        // SAFETY: allocation only; NULL (out of memory) is checked.
        let p = unsafe { libdeflate_sys::libdeflate_alloc_decompressor() };
        Inflater(std::ptr::NonNull::new(p).expect("libdeflate_alloc_decompressor: out of memory"))
    }

    /// Inflates the raw deflate stream at the start of `input` (up to its final block), appending
    /// to `out`, which grows as needed up to `max_out` bytes; returns the input bytes consumed.
    fn raw(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        size_hint: usize,
        max_out: usize,
    ) -> Result<usize, InflateError> {
        let mut avail = size_hint.max(1024);
        loop {
            out.reserve(avail);
            let avail_now = out.capacity() - out.len();
            let (mut consumed, mut produced) = (0usize, 0usize);
            // SAFETY: `input` is valid for its length; the output pointer is `out`'s spare
            // capacity, `avail_now` bytes; libdeflate writes at most that and reports how much.
            let ret = unsafe {
                libdeflate_sys::libdeflate_deflate_decompress_ex(
                    self.0.as_ptr(),
                    input.as_ptr().cast(),
                    input.len(),
                    out.as_mut_ptr().add(out.len()).cast(),
                    avail_now,
                    &mut consumed,
                    &mut produced,
                )
            };
            match ret {
                libdeflate_sys::libdeflate_result_LIBDEFLATE_SUCCESS => {
                    // SAFETY: libdeflate initialized `produced` bytes of the spare capacity.
                    unsafe { out.set_len(out.len() + produced) };
                    return Ok(consumed);
                }
                libdeflate_sys::libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE if avail_now < max_out => {
                    avail = (avail_now * 2).min(max_out);
                }
                libdeflate_sys::libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE => return Err(InflateError::TooLarge),
                _ => return Err(InflateError::BadData),
            }
        }
    }
}

impl Drop for Inflater {
    fn drop(&mut self) {
        // SAFETY: allocated by libdeflate_alloc_decompressor, freed once.
        unsafe { libdeflate_sys::libdeflate_free_decompressor(self.0.as_ptr()) }
    }
}

// ---------------------------------------------------------------------------------------------
// Several threads

/// Decoded bytes of one part of the input, in order.
struct Piece {
    data: Vec<u8>,
    /// For `pigz -i` parts: the deflate segments in the part (see [`decode_part`]).
    segments: Vec<Segment>,
}

/// The output of one stretch of deflate data inside a part, and how it ended.
struct Segment {
    len: u64,
    crc: crc32fast::Hasher,
    /// The member's trailer (CRC32, ISIZE) when its final block ended in this part.
    trailer: Option<(u32, u32)>,
    /// The byte after the trailer (where the next member's header starts).
    end: u64,
}

/// What a decoding task gives back: a piece, an error (BGZF: the file is corrupt), or, for
/// speculative parts, a failure that hands the rest to the one-thread decoder.
enum Outcome {
    Piece(Piece),
    Error(InputError),
    Speculation(String),
}

type Job = Box<dyn FnOnce(&mut Inflater) -> Outcome + Send>;

/// What the cutting thread sends the reader, in input order.
enum Next {
    Piece(mpsc::Receiver<Outcome>),
    /// Decode the rest on one thread: the input from `pos` on, at a member's header.
    Rest {
        reader: Box<dyn BufRead + Send>,
        pos: u64,
        blocks: u64,
    },
    /// Decode the rest of a `pigz -i` file on one thread from the end of the last part.
    Resume,
    Error(InputError),
}

thread_local! {
    /// Each pool thread's libdeflate decompressor, made at its first part.
    static INFLATER: std::cell::RefCell<Option<Inflater>> = const { std::cell::RefCell::new(None) };
}

/// Sends a part's result's receiver to the reader, in order, then has the part decoded on the
/// pool (into a channel of its own, so the task never waits); false once the reader is gone.
fn submit(sink: &JobSink, job: Job) -> bool {
    let (tx, rx) = mpsc::sync_channel(1);
    if sink.order.send(Next::Piece(rx)).is_err() {
        return false;
    }
    sink.pool.spawn(move || {
        let outcome = INFLATER.with(|cell| job(cell.borrow_mut().get_or_insert_with(Inflater::new)));
        let _ = tx.send(outcome);
    });
    true
}

enum Mode {
    Bgzf,
    /// `pigz -i`: the mapped file and the state of the member being decoded.
    Independent {
        map: Arc<Mapped>,
        member: MemberState,
        /// Where the next part starts.
        pos: u64,
        /// The last output (at least 32 KiB of it when there is): the deflate history at `pos`.
        history: Vec<u8>,
    },
}

/// The reader side of the parallel decoders: pieces in order, checked, then served.
struct Parallel {
    source: Source,
    order: Option<mpsc::Receiver<Next>>,
    mode: Mode,
    piece: Vec<u8>,
    at: usize,
    /// One-thread decoding of the rest, once the parallel decoding has handed over.
    rest: Option<GzipMembers>,
}

impl Parallel {
    fn with(source: Source, mode: Mode, pool: &Pool, cutter: impl FnOnce(JobSink) + Send + 'static) -> Self {
        // Parts in flight: enough to keep every thread of the pool busy.
        let (order_tx, order_rx) = mpsc::sync_channel(2 * pool.current_num_threads());
        let pool = pool.clone();
        std::thread::Builder::new()
            .name("kmerdb-cut".into())
            .spawn(move || cutter(JobSink { pool, order: order_tx }))
            .expect("cannot start the input cutting thread");
        Parallel { source, order: Some(order_rx), mode, piece: Vec::new(), at: 0, rest: None }
    }

    fn bgzf(source: Source, r: Box<dyn Read + Send>, pool: &Pool, tuning: Tuning) -> Self {
        let s = source.clone();
        Self::with(source, Mode::Bgzf, pool, move |sink| cut_bgzf(s, r, sink, tuning))
    }

    fn independent(source: Source, map: Arc<Mapped>, pool: &Pool, tuning: Tuning) -> Self {
        let member = MemberState { number: 1, at: 0, crc: crc32fast::Hasher::new(), len: 0 };
        let mode = Mode::Independent { map: map.clone(), member, pos: 0, history: Vec::new() };
        Self::with(source, mode, pool, move |sink| cut_independent(map, sink, tuning))
    }

    /// The next piece of output; false at the end.
    fn next_piece(&mut self) -> io::Result<bool> {
        let Some(order) = &self.order else { return Ok(false) };
        let next = match order.recv() {
            Ok(next) => next,
            Err(_) => {
                self.order = None;
                if let Mode::Independent { member, .. } = &self.mode
                    && member.len > 0
                {
                    return self.resume("the parts end inside a member");
                }
                return Ok(false);
            }
        };
        match next {
            Next::Piece(rx) => match rx.recv() {
                Ok(Outcome::Piece(piece)) => self.accept(piece),
                Ok(Outcome::Error(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                Ok(Outcome::Speculation(why)) => self.resume(&why),
                Err(_) => Err(io::Error::other("a decoding task stopped")),
            },
            Next::Rest { reader, pos, blocks } => {
                self.order = None;
                let member = MemberState { number: blocks, at: pos, crc: Default::default(), len: 0 };
                self.rest =
                    Some(GzipMembers::resume(self.source.clone(), reader, pos, member, State::Header, "gzip member"));
                Ok(true)
            }
            Next::Resume => self.resume("no flush point within the part size limit"),
            Next::Error(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Takes a decoded piece; for `pigz -i`, checks each member that ends in it.
    fn accept(&mut self, piece: Piece) -> io::Result<bool> {
        if let Mode::Independent { member, pos, history, .. } = &mut self.mode {
            let mut state = member.clone();
            for seg in &piece.segments {
                state.crc.combine(&seg.crc);
                state.len += seg.len;
                if let Some((crc, isize)) = seg.trailer {
                    if state.crc.clone().finalize() != crc || state.len as u32 != isize {
                        // Wrong cut or corrupt member: the one-thread decoder decides which.
                        return self.resume("a member's CRC32 or size does not match its parts");
                    }
                    state = MemberState { number: state.number + 1, at: seg.end, crc: Default::default(), len: 0 };
                }
                *pos = seg.end;
            }
            *member = state;
            // Only the last 32 KiB are kept (a copy of all output would cost as much as a memcpy).
            let tail = &piece.data[piece.data.len().saturating_sub(WINDOW)..];
            if history.len() + tail.len() > 2 * WINDOW {
                history.drain(..history.len().saturating_sub(WINDOW - tail.len()));
            }
            history.extend_from_slice(tail);
        }
        self.piece = piece.data;
        self.at = 0;
        Ok(true)
    }

    /// Hands the rest of a `pigz -i` file to the one-thread decoder, from the end of the last
    /// accepted part.
    fn resume(&mut self, why: &str) -> io::Result<bool> {
        let Mode::Independent { map, member, pos, history } = &self.mode else {
            return Err(io::Error::other(format!("internal: {why}")));
        };
        log::debug!("{}: decoding on one thread from byte {pos}: {why}", self.source);
        #[cfg(test)]
        tests::RESUMES.with(|r| r.set(r.get() + 1));
        self.order = None; // stops the cutting thread and the tasks it starts
        let rest = Cursor::new(MapBytes(map.clone()));
        let mut rest = BufReader::with_capacity(READ_BUF, rest);
        rest.seek(io::SeekFrom::Start(*pos))?;
        // At the end of a member a header follows. Inside one, a raw inflater carries on with the
        // member's CRC and size so far and the last 32 KiB of its output as the dictionary (a
        // part boundary is a block boundary, but a sync flush, unlike a full one, keeps the history).
        let state = if member.len == 0 && *pos == member.at { State::Header } else { State::Body };
        let member = if matches!(state, State::Header) {
            MemberState { number: member.number - 1, ..member.clone() }
        } else {
            member.clone()
        };
        let window = (member.len as usize).min(WINDOW).min(history.len());
        let mut rest = GzipMembers::resume(self.source.clone(), Box::new(rest), *pos, member, state, "gzip member");
        if window > 0 {
            rest.inflate
                .set_dictionary(&history[history.len() - window..])
                .map_err(|e| io::Error::other(format!("cannot set the deflate history: {e}")))?;
        }
        self.rest = Some(rest);
        Ok(true)
    }
}

impl Read for Parallel {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(rest) = &mut self.rest {
                return rest.read(buf);
            }
            if self.at < self.piece.len() {
                let n = buf.len().min(self.piece.len() - self.at);
                buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            match self.next_piece() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => {
                    self.order = None;
                    return Err(e);
                }
            }
        }
    }
}

struct MapBytes(Arc<Mapped>);

impl AsRef<[u8]> for MapBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The cutting thread's way to the decoding tasks and the reader.
struct JobSink {
    pool: Pool,
    order: mpsc::SyncSender<Next>,
}

// ---------------------------------------------------------------------------------------------
// BGZF

/// One BGZF block inside a batch.
struct BgzfBlock {
    range: std::ops::Range<usize>,
    number: u64,
    at: u64,
}

/// Reads BGZF blocks (located from their `BC` size, nothing inflated) in batches of about
/// [`PART_BYTES`] and has them decoded. A member without `BC` sends the rest to the one-thread
/// decoder.
fn cut_bgzf(source: Source, r: Box<dyn Read + Send>, sink: JobSink, tuning: Tuning) {
    let mut r = BufReader::with_capacity(READ_BUF, r);
    let mut pos = 0u64;
    let mut number = 0u64;
    loop {
        let mut batch = Vec::with_capacity(tuning.part_bytes + (64 << 10));
        let mut blocks = Vec::new();
        let mut rest = None;
        let mut not_bgzf = None;
        while batch.len() < tuning.part_bytes {
            let start = batch.len();
            let at = pos;
            match read_bgzf_block(&mut r, &mut batch) {
                Ok(BlockRead::End) => break,
                Ok(BlockRead::Block) => {
                    number += 1;
                    pos += (batch.len() - start) as u64;
                    blocks.push(BgzfBlock { range: start..batch.len(), number, at });
                }
                Ok(BlockRead::NotBgzf) => {
                    not_bgzf = Some(batch.split_off(start));
                    break;
                }
                Err(e) => {
                    let what = format!("BGZF block {} at byte {at}", number + 1);
                    let e = match e.kind() {
                        io::ErrorKind::UnexpectedEof => input_error(&source, what, "the file ends inside the block"),
                        io::ErrorKind::InvalidData => input_error(&source, what, e),
                        _ => into_input_error(&source, e),
                    };
                    rest = Some(Next::Error(e));
                    break;
                }
            }
        }
        let last = rest.is_some() || not_bgzf.is_some() || batch.len() < tuning.part_bytes;
        if !blocks.is_empty() {
            let s = source.clone();
            if !submit(&sink, Box::new(move |inf: &mut Inflater| decode_bgzf(&s, &batch, &blocks, inf))) {
                return;
            }
        }
        if let Some(rest) = rest {
            let _ = sink.order.send(rest);
            return;
        }
        if let Some(prefix) = not_bgzf {
            let reader = Box::new(BufReader::with_capacity(READ_BUF, Cursor::new(prefix).chain(r)));
            let _ = sink.order.send(Next::Rest { reader, pos, blocks: number });
            return;
        }
        if last {
            return;
        }
    }
}

enum BlockRead {
    Block,
    End,
    NotBgzf,
}

/// Appends the next BGZF block to `batch`: `End` at the end of the input, `NotBgzf` (with what
/// was read appended) for a member without a block size.
fn read_bgzf_block(r: &mut impl BufRead, batch: &mut Vec<u8>) -> io::Result<BlockRead> {
    let start = batch.len();
    if r.fill_buf()?.is_empty() {
        return Ok(BlockRead::End);
    }
    let mut need = 12; // the fixed header and XLEN
    loop {
        let have = batch.len() - start;
        if have < need {
            batch.resize(start + need, 0);
            r.read_exact(&mut batch[start + have..])?;
        }
        match gzip_header(&batch[start..]) {
            Ok(Header { block_size: Some(size), len }) => {
                if size < len + 8 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a BGZF block size smaller than its header",
                    ));
                }
                let have = batch.len() - start;
                if size < have {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a BGZF block size smaller than its header",
                    ));
                }
                batch.resize(start + size, 0);
                r.read_exact(&mut batch[start + have..])?;
                return Ok(BlockRead::Block);
            }
            Ok(_) => return Ok(BlockRead::NotBgzf),
            Err(HeaderError::Incomplete(n)) if n > need => need = n,
            Err(HeaderError::Incomplete(_)) => return Ok(BlockRead::NotBgzf), // no FEXTRA: XLEN is data
            Err(HeaderError::Invalid(_)) => return Ok(BlockRead::NotBgzf),
        }
    }
}

/// Inflates a batch of BGZF blocks, checking each one's CRC32 and size.
fn decode_bgzf(source: &Source, batch: &[u8], blocks: &[BgzfBlock], inf: &mut Inflater) -> Outcome {
    let mut data = Vec::with_capacity(blocks.len() * BGZF_MAX_ISIZE);
    for b in blocks {
        let block = &batch[b.range.clone()];
        let what = || format!("BGZF block {} at byte {}", b.number, b.at);
        let Ok(header) = gzip_header(block) else { unreachable!("checked when cut") };
        let body = &block[header.len..block.len() - 8];
        let (crc, isize) = (le32(&block[block.len() - 8..]), le32(&block[block.len() - 4..]) as usize);
        if isize > BGZF_MAX_ISIZE {
            return Outcome::Error(input_error(
                source,
                what(),
                format!("a block size of {isize} bytes (at most 64 KiB)"),
            ));
        }
        let start = data.len();
        match inf.raw(body, &mut data, isize, isize) {
            Ok(consumed) if consumed == body.len() => {}
            Ok(_) => return Outcome::Error(input_error(source, what(), "bytes after the block's deflate data")),
            Err(InflateError::TooLarge) => {
                return Outcome::Error(input_error(
                    source,
                    what(),
                    format!("more than the {isize} bytes the trailer says"),
                ));
            }
            Err(InflateError::BadData) => return Outcome::Error(input_error(source, what(), "corrupt deflate data")),
        }
        let out = &data[start..];
        if out.len() != isize {
            let detail = format!("size mismatch: {} bytes decoded, the trailer says {isize}", out.len());
            return Outcome::Error(input_error(source, what(), detail));
        }
        let got = crc32fast::hash(out);
        if got != crc {
            let detail = format!("CRC32 mismatch: the data gives {got:08x}, the trailer says {crc:08x}");
            return Outcome::Error(input_error(source, what(), detail));
        }
    }
    Outcome::Piece(Piece { data, segments: Vec::new() })
}

// ---------------------------------------------------------------------------------------------
// pigz -i: independent deflate blocks at full-flush points

const FLUSH: &[u8] = &[0, 0, 0xff, 0xff];
/// A final empty block with fixed codes: closes a part's deflate data at a flush point.
const CLOSE: [u8; 2] = [0x03, 0x00];

/// The first candidate cut (the byte after `00 00 ff ff`) at or after `from`.
fn next_flush(map: &[u8], from: usize) -> Option<usize> {
    let search = from.saturating_sub(4);
    memchr::memmem::find(map.get(search..)?, FLUSH).map(|i| search + i + 4)
}

/// Maps a gzip file whose deflate data has independent blocks: the second part (between two
/// flush points at least 4 KiB apart within the first 4 MiB) must inflate on its own.
fn independent_blocks(file: &std::fs::File, path: &Path) -> Option<Arc<Mapped>> {
    // A file changed while it is read gives errors (the CRCs are checked) or SIGBUS (cut short),
    // which `mapped` turns into an error naming it.
    let map = Mapped::map(file, path, crate::mapped::Kind::Input).ok()?;
    let probe = &map[..map.len().min(4 << 20)];
    let a = next_flush(probe, 0)?;
    let b = next_flush(probe, a + 4096)?;
    let mut part = probe[a..b].to_vec();
    part.extend_from_slice(&CLOSE);
    let mut out = Vec::new();
    match Inflater::new().raw(&part, &mut out, 4 * part.len(), 1 << 30) {
        Ok(consumed) if consumed == part.len() && !out.is_empty() => Some(Arc::new(map)),
        _ => None,
    }
}

/// Cuts a mapped `pigz -i` file at flush points about [`PART_BYTES`] apart and has the parts
/// decoded.
fn cut_independent(map: Arc<Mapped>, sink: JobSink, tuning: Tuning) {
    let mut start = 0;
    while start < map.len() {
        let from = (start + tuning.part_bytes).min(map.len());
        let end = next_flush(&map, from).filter(|&e| e < map.len()).unwrap_or(map.len());
        if end - start > tuning.max_part_bytes {
            let _ = sink.order.send(Next::Resume);
            return;
        }
        let m = map.clone();
        let job = Box::new(move |inf: &mut Inflater| decode_part(&m, start, end, inf));
        if !submit(&sink, job) {
            return;
        }
        start = end;
    }
}

/// Inflates `map[start..end]`: a part that begins at the file's start (a gzip header) or at a
/// flush point, and ends at a flush point (then closed with [`CLOSE`]) or at the end of the file.
/// Members that end inside the part are followed by their trailer and the next member's header.
fn decode_part(map: &[u8], start: usize, end: usize, inf: &mut Inflater) -> Outcome {
    let last = end == map.len();
    let mut input = Vec::with_capacity(end - start + CLOSE.len());
    input.extend_from_slice(&map[start..end]);
    if !last {
        input.extend_from_slice(&CLOSE);
    }
    let part_len = end - start;
    let mut pos = 0;
    if start == 0 {
        match gzip_header(&input[..part_len]) {
            Ok(h) => pos = h.len,
            Err(_) => return Outcome::Speculation("the first member's header".into()),
        }
    }
    // Reserved generously (untouched pages cost nothing): a retry with more room inflates again.
    let mut data = Vec::new();
    let mut segments = Vec::new();
    loop {
        let out0 = data.len();
        let consumed = match inf.raw(&input[pos..], &mut data, 8 * (input.len() - pos), usize::MAX / 2) {
            Ok(n) => n,
            Err(_) => return Outcome::Speculation(format!("part at byte {start} does not inflate on its own")),
        };
        let mut crc = crc32fast::Hasher::new();
        crc.update(&data[out0..]);
        let len = (data.len() - out0) as u64;
        pos += consumed;
        if !last && pos == input.len() {
            // Closed by CLOSE: the deflate data goes on in the next part.
            segments.push(Segment { len, crc, trailer: None, end: end as u64 });
            break;
        }
        if pos + 8 > part_len {
            return Outcome::Speculation(format!("part at byte {start}: a member's end does not fit"));
        }
        let trailer = Some((le32(&input[pos..]), le32(&input[pos + 4..])));
        pos += 8;
        segments.push(Segment { len, crc, trailer, end: (start + pos) as u64 });
        if pos == part_len {
            if last {
                break;
            }
            return Outcome::Speculation(format!("part at byte {start}: a member ends at the cut"));
        }
        match gzip_header(&input[pos..part_len]) {
            Ok(h) => pos += h.len,
            Err(_) => return Outcome::Speculation(format!("part at byte {start}: no member header after a member")),
        }
    }
    Outcome::Piece(Piece { data, segments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::{Path, PathBuf};

    thread_local! {
        /// Hand-overs of `pigz -i` decoding to one thread, on this thread (the reader's).
        pub(super) static RESUMES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// FASTQ-like text that compresses about as well as reads do (pseudo-random bases).
    fn fastq(records: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        for r in 0..records {
            let len = 100 + (next() % 51) as usize;
            writeln!(out, "@s{seed}_r{r} len={len}").unwrap();
            out.extend((0..len).map(|_| b"ACGT"[(next() % 4) as usize]));
            out.extend_from_slice(b"\n+\n");
            out.extend((0..len).map(|_| b"#FFF:FFFFFFFF"[(next() % 13) as usize]));
            out.push(b'\n');
        }
        out
    }

    use crate::test_support::gzip;

    /// A gzip member with every optional header field (extra, name, comment, header CRC).
    fn gzip_full_header(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::GzBuilder::new()
            .extra(b"XY\x03\x00abc".to_vec())
            .filename("reads.fq")
            .comment("a comment")
            .write(Vec::new(), flate2::Compression::new(1));
        enc.write_all(data).unwrap();
        let mut out = enc.finish().unwrap();
        // flate2 writes no header CRC: set FHCRC and insert it.
        let hlen = gzip_header(&out).unwrap().len;
        out[3] |= 0x02;
        let crc16 = (crc32fast::hash(&out[..hlen]) as u16).to_le_bytes();
        out.splice(hlen..hlen, crc16);
        out
    }

    fn raw_deflate(data: &[u8], level: u32) -> Vec<u8> {
        let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn trailer(data: &[u8]) -> [u8; 8] {
        let mut t = [0; 8];
        t[..4].copy_from_slice(&crc32fast::hash(data).to_le_bytes());
        t[4..].copy_from_slice(&(data.len() as u32).to_le_bytes());
        t
    }

    /// BGZF as bgzip writes it: blocks of at most 65280 input bytes, optionally the EOF block.
    fn bgzf(data: &[u8], block: usize, eof: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in data.chunks(block) {
            let body = raw_deflate(chunk, 6);
            let bsize = (18 + body.len() + 8 - 1) as u16;
            out.extend_from_slice(&[0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 6, 0, b'B', b'C', 2, 0]);
            out.extend_from_slice(&bsize.to_le_bytes());
            out.extend_from_slice(&body);
            out.extend_from_slice(&trailer(chunk));
        }
        if eof {
            out.extend_from_slice(&BGZF_EOF);
        }
        out
    }

    const BGZF_EOF: [u8; 28] =
        [0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 6, 0, 0x42, 0x43, 2, 0, 0x1b, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0];

    /// One gzip member whose deflate data is cut every `block` input bytes by a full flush (no
    /// dictionary carried over), as `pigz -i` writes it; `sync` uses sync flushes instead (the
    /// dictionary carried over, as plain `pigz`).
    fn flushed(data: &[u8], block: usize, sync: bool) -> Vec<u8> {
        let mut c = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut body = Vec::with_capacity(data.len());
        let chunks: Vec<&[u8]> = data.chunks(block).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let flush = if i + 1 == chunks.len() {
                flate2::FlushCompress::Finish
            } else if sync {
                flate2::FlushCompress::Sync
            } else {
                flate2::FlushCompress::Full
            };
            let mut input = *chunk;
            loop {
                body.reserve(input.len() + 1024);
                let before = c.total_in();
                let status = c.compress_vec(input, &mut body, flush).unwrap();
                input = &input[(c.total_in() - before) as usize..];
                let done = match flush {
                    flate2::FlushCompress::Finish => status == flate2::Status::StreamEnd,
                    _ => input.is_empty() && body.capacity() > body.len(),
                };
                if done {
                    break;
                }
            }
        }
        let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        out.extend_from_slice(&body);
        out.extend_from_slice(&trailer(data));
        out
    }

    /// zstd with a content checksum, as the zstd command writes by default (without one, a
    /// changed byte can go unnoticed: the format has nothing to check it against).
    fn zstd_checked(data: &[u8]) -> Vec<u8> {
        let mut enc = zstd::Encoder::new(Vec::new(), 3).unwrap();
        enc.include_checksum(true).unwrap();
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn small() -> Tuning {
        Tuning { part_bytes: 4096, max_part_bytes: 1 << 20 }
    }

    fn read_tuned(path: &Path, threads: usize, tuning: Tuning) -> Result<(Compression, Vec<u8>), InputError> {
        let source = Source::File(path.to_path_buf());
        let mut d = open_tuned(&source, &pool_of(threads), tuning)?;
        let mut out = Vec::new();
        d.reader.read_to_end(&mut out).map_err(|e| into_input_error(&source, e))?;
        Ok((d.compression, out))
    }

    /// Reads with buffers of changing odd sizes.
    fn read_odd(r: &mut dyn Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let sizes = [1usize, 7, 4096, 3, 65536, 13, 100_000];
        let mut buf = vec![0; 100_000];
        for i in 0.. {
            let n = r.read(&mut buf[..sizes[i % sizes.len()]])?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
        unreachable!()
    }

    /// A reader that hands out its bytes a few at a time.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.step = self.step % 5 + 1;
            let n = buf.len().min(self.step).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn detects_formats_by_magic() {
        let text = fastq(50, 1);
        assert_eq!(detect(&text), Compression::None);
        assert_eq!(detect(&gzip(&text)), Compression::Gzip);
        assert_eq!(detect(&gzip_full_header(&text)), Compression::Gzip);
        assert_eq!(detect(&bgzf(&text, 65280, true)), Compression::Bgzf);
        assert_eq!(detect(&BGZF_EOF), Compression::Bgzf);
        assert_eq!(detect(b"BZh91AY&SY"), Compression::Bzip2);
        assert_eq!(detect(&[0xfd, b'7', b'z', b'X', b'Z', 0, 0, 4]), Compression::Xz);
        assert_eq!(detect(&zstd::encode_all(&text[..], 3).unwrap()), Compression::Zstd);
        assert_eq!(detect(&[0x5e, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]), Compression::Zstd);
        assert_eq!(detect(&[0x1f]), Compression::None);
        assert_eq!(detect(b""), Compression::None);
    }

    #[test]
    fn round_trips_each_format() {
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(3000, 2);
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(6));
        bz.write_all(&text).unwrap();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 3);
        xz.write_all(&text).unwrap();
        let cases = [
            ("plain.fq", text.clone(), Compression::None),
            ("gzip.fq.gz", gzip(&text), Compression::Gzip),
            ("header.fq.gz", gzip_full_header(&text), Compression::Gzip),
            ("bgzf.fq.gz", bgzf(&text, 65280, true), Compression::Bgzf),
            ("pigzi.fq.gz", flushed(&text, 32 << 10, false), Compression::GzipIndependent),
            ("pigz.fq.gz", flushed(&text, 32 << 10, true), Compression::Gzip),
            ("bz.fq.bz2", bz.finish().unwrap(), Compression::Bzip2),
            ("xz.fq.xz", xz.finish().unwrap(), Compression::Xz),
            ("zst.fq.zst", zstd::encode_all(&text[..], 3).unwrap(), Compression::Zstd),
        ];
        for (name, bytes, expected) in cases {
            let path = write(dir.path(), name, &bytes);
            for threads in [1, 2, 3] {
                let (found, out) = read_all(&Source::File(path.clone()), threads).unwrap();
                assert_eq!(found, expected, "{name}");
                assert!(out == text, "{name}, {threads} threads: {} bytes, {} expected", out.len(), text.len());
                let (_, out) = read_tuned(&path, threads, small()).unwrap();
                assert!(out == text, "{name}, {threads} threads, small parts");
            }
        }
        // Multi-frame/multi-stream bzip2, xz and zstd read to the end of the last.
        let mut two = zstd::encode_all(&text[..100], 1).unwrap();
        two.extend(zstd::encode_all(&text[100..], 1).unwrap());
        let path = write(dir.path(), "two.zst", &two);
        assert!(read_all(&Source::File(path), 1).unwrap().1 == text);
    }

    #[test]
    fn plain_files_pass_through_and_empty_files_read_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "x.fq", b"@r\nACGT\n+\nIIII\n");
        let mut d = open(&Source::File(path.clone()), &pool_of(2)).unwrap();
        let mut s = String::new();
        d.reader.read_to_string(&mut s).unwrap();
        assert_eq!((d.compression, s.as_str()), (Compression::None, "@r\nACGT\n+\nIIII\n"));
        let empty = write(dir.path(), "e.fq", b"");
        assert_eq!(read_all(&Source::File(empty), 2).unwrap(), (Compression::None, vec![]));
        let missing = open(&Source::File(dir.path().join("nope.fq")), &pool_of(1)).unwrap_err();
        assert!(matches!(missing, InputError::NotFound(_)), "{missing}");
    }

    /// Members of every length from 0 to 40 bytes of text and some larger ones, read through
    /// buffers of 1 to 64 bytes and from a reader that gives a few bytes at a time: every member
    /// boundary falls at every position relative to the read buffer.
    #[test]
    fn multi_member_gzip_at_every_buffer_boundary() {
        let text = fastq(40, 3);
        let mut members = Vec::new();
        let mut expected = Vec::new();
        let mut at = 0;
        for len in (0..=40).chain([200, 1000, 3000]) {
            let part = &text[at..at + len];
            at += len;
            members.extend(if len % 3 == 0 { gzip_full_header(part) } else { gzip(part) });
            expected.extend_from_slice(part);
        }
        for cap in [1, 2, 3, 5, 8, 13, 21, 64, 1 << 16] {
            let r = BufReader::with_capacity(cap, Trickle { data: members.clone(), at: 0, step: cap });
            let mut g = GzipMembers::new(Source::Stdin, Box::new(r));
            let out = read_odd(&mut g).unwrap();
            assert!(out == expected, "buffer {cap}: {} bytes, {} expected", out.len(), expected.len());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "cat.fq.gz", &members);
        let (c, out) = read_all(&Source::File(path), 2).unwrap();
        assert_eq!(c, Compression::Gzip);
        assert!(out == expected);
    }

    #[test]
    fn bgzf_blocks_decode_in_order_on_several_threads() {
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(20_000, 4); // about 5 MB: several parts of 1 MiB
        for (eof, block) in [(true, 65280), (false, 65280), (true, 1000), (true, 1)] {
            let text = if block == 1 { &text[..3000] } else { &text[..] };
            let bytes = bgzf(text, block, eof);
            let path = write(dir.path(), "b.fq.gz", &bytes);
            for threads in [1, 2, 4] {
                for tuning in [TUNING, small()] {
                    let source = Source::File(path.clone());
                    let mut d = open_tuned(&source, &pool_of(threads), tuning).unwrap();
                    assert_eq!(d.compression, Compression::Bgzf);
                    let out = read_odd(&mut d.reader).unwrap();
                    assert!(out == text, "block {block}, eof {eof}, {threads} threads: {} bytes", out.len());
                }
            }
        }
        // Just the EOF block: empty.
        let path = write(dir.path(), "eof.gz", &BGZF_EOF);
        assert_eq!(read_all(&Source::File(path), 2).unwrap(), (Compression::Bgzf, vec![]));
    }

    /// BGZF followed by members without a block size (`cat x.bgz y.gz`): the rest is decoded on
    /// one thread, whole.
    #[test]
    fn bgzf_followed_by_plain_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(4000, 5);
        let (a, b) = text.split_at(300_000);
        let mut bytes = bgzf(a, 65280, false);
        bytes.extend(gzip(&b[..1000]));
        bytes.extend(bgzf(&b[1000..], 65280, true));
        let path = write(dir.path(), "mixed.gz", &bytes);
        for threads in [1, 2] {
            let (c, out) = read_tuned(&path, threads, small()).unwrap();
            assert_eq!(c, Compression::Bgzf);
            assert!(out == text, "{threads} threads");
        }
    }

    #[test]
    fn independent_blocks_decode_in_parallel() {
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(40_000, 6); // about 10 MB
        let one = flushed(&text, 128 << 10, false);
        let mut two = flushed(&text[..3_000_000], 100_000, false);
        two.extend(flushed(&text[3_000_000..], 128 << 10, false));
        for (name, bytes) in [("one", &one), ("two", &two)] {
            let path = write(dir.path(), &format!("{name}.fq.gz"), bytes);
            for threads in [1, 2, 3] {
                for tuning in [TUNING, small()] {
                    RESUMES.set(0);
                    let (c, out) = read_tuned(&path, threads, tuning).unwrap();
                    assert_eq!(c, Compression::GzipIndependent, "{name}");
                    assert!(out == text, "{name}, {threads} threads, {tuning:?}: {} bytes", out.len());
                    assert_eq!(RESUMES.get(), 0, "{name}: every part decoded in parallel");
                }
            }
        }
        // A sync-flushed stream (plain pigz) is not taken for independent blocks.
        let path = write(dir.path(), "sync.fq.gz", &flushed(&text, 128 << 10, true));
        let (c, out) = read_all(&Source::File(path), 2).unwrap();
        assert_eq!(c, Compression::Gzip);
        assert!(out == text);
    }

    /// Parts that do not decode on their own (dependent blocks after independent ones, a part
    /// longer than the limit) send the rest to the one-thread decoder, which gives every byte.
    #[test]
    fn independent_blocks_hand_over_to_one_thread() {
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(8000, 7); // about 2 MB
        let (a, b) = text.split_at(1_000_000);
        // Member 1: independent blocks; member 2: sync-flushed blocks (dictionary carried over).
        let mut bytes = flushed(a, 64 << 10, false);
        bytes.extend(flushed(b, 64 << 10, true));
        let path = write(dir.path(), "mixed.fq.gz", &bytes);
        for threads in [1, 2] {
            RESUMES.set(0);
            let (c, out) = read_tuned(&path, threads, small()).unwrap();
            assert_eq!(c, Compression::GzipIndependent);
            assert!(out == text, "{threads} threads: {} bytes", out.len());
            assert_eq!(RESUMES.get(), 1);
        }
        // Member 2 without flush points and longer than the part limit.
        let mut bytes = flushed(a, 64 << 10, false);
        bytes.extend(gzip(b));
        let path = write(dir.path(), "long.fq.gz", &bytes);
        let tuning = Tuning { part_bytes: 4096, max_part_bytes: 100_000 };
        RESUMES.set(0);
        let (c, out) = read_tuned(&path, 2, tuning).unwrap();
        assert_eq!(c, Compression::GzipIndependent);
        assert!(out == text);
        assert_eq!(RESUMES.get(), 1);
    }

    /// Truncated and corrupted inputs of every kind: an error that names the file (and for gzip
    /// the member or block and its offset), never short output, never a panic.
    #[test]
    fn truncated_and_corrupt_inputs_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(6000, 8);
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(6));
        bz.write_all(&text).unwrap();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 3);
        xz.write_all(&text).unwrap();
        let mut two_members = gzip(&text[..500_000]);
        let second = two_members.len();
        two_members.extend(gzip(&text[500_000..]));
        let cases = [
            ("gzip", gzip(&text)),
            ("members", two_members),
            ("bgzf", bgzf(&text, 65280, true)),
            ("pigzi", flushed(&text, 64 << 10, false)),
            ("bzip2", bz.finish().unwrap()),
            ("xz", xz.finish().unwrap()),
            ("zstd", zstd_checked(&text)),
        ];
        for (name, bytes) in &cases {
            let mut damaged = Vec::new();
            for cut in [bytes.len() - 1, bytes.len() - 5, bytes.len() - 9, bytes.len() * 2 / 3, bytes.len() / 3, 30] {
                damaged.push((format!("cut at {cut}"), bytes[..cut].to_vec()));
            }
            for at in [bytes.len() / 2, bytes.len() * 3 / 4, bytes.len() - 6] {
                let mut b = bytes.clone();
                b[at] ^= 0x55;
                damaged.push((format!("byte {at} changed"), b));
            }
            let mut garbage = bytes.clone();
            garbage.extend_from_slice(b"not compressed");
            if !["bzip2", "xz", "zstd"].contains(name) {
                damaged.push(("trailing garbage".into(), garbage));
            }
            for (how, b) in damaged {
                let file = format!("{name}-damaged.gz");
                let path = write(dir.path(), &file, &b);
                for threads in [1, 2] {
                    for tuning in [TUNING, small()] {
                        let result = read_tuned(&path, threads, tuning);
                        let Err(e) = result else {
                            let out = result.unwrap().1;
                            panic!("{name}, {how}, {threads} threads: no error, {} bytes read", out.len());
                        };
                        let msg = e.to_string();
                        assert!(msg.contains(&file), "{name}, {how}: {msg}");
                        if ["gzip", "members", "pigzi"].contains(name) {
                            assert!(msg.contains("gzip member") && msg.contains("at byte"), "{name}, {how}: {msg}");
                        }
                        if *name == "bgzf" {
                            assert!(msg.contains("BGZF block") || msg.contains("gzip member"), "{name}, {how}: {msg}");
                        }
                    }
                }
            }
        }
        // A corrupt second member is named as such, with its offset.
        let mut b = cases[1].1.clone();
        let at = second + (b.len() - second) / 2;
        b[at] ^= 0xff;
        let path = write(dir.path(), "second.fq.gz", &b);
        let msg = read_all(&Source::File(path), 1).unwrap_err().to_string();
        assert!(msg.contains(&format!("gzip member 2 at byte {second}")), "{msg}");
        assert!(msg.contains("(is the compressed file truncated or corrupt?)"), "{msg}");
        // A BGZF block's CRC, named by block number and offset.
        let mut b = bgzf(&text, 65280, true);
        let first_len = u16::from_le_bytes([b[16], b[17]]) as usize + 1;
        let second_len = u16::from_le_bytes([b[first_len + 16], b[first_len + 17]]) as usize + 1;
        b[first_len + second_len - 8] ^= 1;
        let path = write(dir.path(), "crc.bgzf.gz", &b);
        let msg = read_all(&Source::File(path), 2).unwrap_err().to_string();
        assert!(msg.contains(&format!("BGZF block 2 at byte {first_len}: CRC32 mismatch")), "{msg}");
    }

    /// Stdin: the test binary runs itself with a file on its standard input.
    #[test]
    fn stdin_is_detected_without_losing_bytes() {
        if let Ok(expected) = std::env::var("KMERDB_DECOMPRESS_STDIN_CHILD") {
            let (c, out) = read_all(&Source::Stdin, 2).unwrap();
            assert_eq!(format!("{c:?} {}", crc32fast::hash(&out)), expected);
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let text = fastq(5000, 9);
        let crc = crc32fast::hash(&text);
        let cases = [
            ("None", text.clone()),
            ("Gzip", gzip(&text)),
            ("Bgzf", bgzf(&text, 65280, true)),
            ("Gzip", flushed(&text, 64 << 10, false)), // stdin cannot be mapped: one thread
            ("Zstd", zstd::encode_all(&text[..], 3).unwrap()),
        ];
        for (c, bytes) in cases {
            let path = write(dir.path(), "in", &bytes);
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "input::decompress::tests::stdin_is_detected_without_losing_bytes",
                    "--test-threads=1",
                ])
                .env("KMERDB_DECOMPRESS_STDIN_CHILD", format!("{c} {crc}"))
                .stdin(std::fs::File::open(&path).unwrap())
                .output()
                .unwrap();
            let log = String::from_utf8_lossy(&status.stdout);
            assert!(status.status.success() && log.contains("1 passed"), "{c}: {log}");
        }
        // The peek-and-give-back path with a stream that gives a few bytes at a time.
        let bytes = bgzf(&text, 1000, true);
        let r = Box::new(Trickle { data: bytes, at: 0, step: 1 });
        let mut d = open_stream(&Source::Stdin, r, &pool_of(2), small()).unwrap();
        assert_eq!(d.compression, Compression::Bgzf);
        assert!(read_odd(&mut d.reader).unwrap() == text);
    }

    /// A named pipe is read as a stream (no mapping, no rewinding).
    #[test]
    fn named_pipes_are_read_as_streams() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("reads.fq.gz");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let text = fastq(3000, 10);
        let bytes = flushed(&text, 64 << 10, false);
        let f = fifo.clone();
        let writer = std::thread::spawn(move || std::fs::write(f, bytes).unwrap());
        let (c, out) = read_all(&Source::File(fifo), 2).unwrap();
        writer.join().unwrap();
        assert_eq!(c, Compression::Gzip);
        assert!(out == text);
    }

    /// Found by `tests/cli/merge.rs` (a small gzipped file with a flush point in its first 4 KiB):
    /// looking for the second flush point past the end of the probe sliced out of range.
    #[test]
    fn regression_no_flush_point_past_the_end() {
        let map = [0u8, 0, 0xff, 0xff, 1, 2, 3];
        assert_eq!(next_flush(&map, 0), Some(4));
        assert_eq!(next_flush(&map, 4 + 4096), None);
    }

    #[test]
    fn gzip_headers_parse_and_refuse() {
        let text = b"ACGT";
        assert_eq!(gzip_header(&gzip(text)).unwrap(), Header { len: 10, block_size: None });
        let full = gzip_full_header(text);
        let h = gzip_header(&full).unwrap();
        assert_eq!(h.len, 10 + 2 + 7 + 9 + 10 + 2);
        for n in 0..h.len {
            assert!(matches!(gzip_header(&full[..n]), Err(HeaderError::Incomplete(k)) if k > n), "{n}");
        }
        let mut bad = full.clone();
        bad[12] ^= 1; // in the extra field: the header CRC no longer matches
        assert!(matches!(gzip_header(&bad), Err(HeaderError::Invalid(m)) if m.contains("CRC16")));
        let mut bad = full;
        bad[2] = 7;
        assert!(matches!(gzip_header(&bad), Err(HeaderError::Invalid(m)) if m.contains("deflate")));
        assert_eq!(gzip_header(&BGZF_EOF).unwrap(), Header { len: 18, block_size: Some(28) });
    }
}
