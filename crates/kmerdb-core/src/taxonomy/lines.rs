//! Reading the taxonomy's text inputs line by line, plain or gzip-compressed.
//!
//! Compression is detected from the gzip magic bytes, never from the file name, and
//! multi-member gzip files (as written by `pigz` or `cat a.gz b.gz`) are read to the end.
//! Lines are handed out as byte slices borrowed from the reader's buffer, with the line
//! terminator (`\n` or `\r\n`) removed, so that parsers allocate only for what they keep.
//! Gzip input is inflated on a helper thread, one chunk ahead of the parser. A truncated or
//! corrupt gzip stream is an I/O error, never a silently shorter file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};
use std::thread::JoinHandle;

use flate2::bufread::MultiGzDecoder;

use super::TaxonomyError;

/// Buffer size for both the compressed and the decompressed side; large reads keep inflate busy.
const BUF_SIZE: usize = 1 << 20;

/// Opens `path` for buffered reading, transparently decompressing it if it starts with the gzip
/// magic bytes. Decompression runs ahead on its own thread (see [`Prefetched`]), so inflating
/// and parsing one file use two cores.
pub(crate) fn open_maybe_gz(path: &Path) -> Result<Box<dyn BufRead + Send>, TaxonomyError> {
    let file = File::open(path).map_err(|e| TaxonomyError::io(path, e))?;
    let mut raw = BufReader::with_capacity(BUF_SIZE, file);
    let head = raw.fill_buf().map_err(|e| TaxonomyError::io(path, e))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let reader = Prefetched::spawn(MultiGzDecoder::new(raw)).map_err(|e| TaxonomyError::io(path, e))?;
        Ok(Box::new(reader))
    } else {
        Ok(Box::new(raw))
    }
}

/// A `BufRead` over chunks that a background thread reads from an inner reader.
///
/// The thread fills `BUF_SIZE` buffers and sends them over a short bounded channel; spent buffers
/// come back on another channel for reuse. A reader dropped early (at a parse error, say) closes
/// the channel, so that the thread's next send fails, and waits for it to exit: no thread outlives
/// its reader. A panic on the thread is reported as an I/O error, never as a short file.
struct Prefetched {
    chunks: Receiver<io::Result<Vec<u8>>>,
    spent: Sender<Vec<u8>>,
    worker: Option<JoinHandle<()>>,
    current: Vec<u8>,
    pos: usize,
}

impl Prefetched {
    fn spawn(mut inner: impl Read + Send + 'static) -> io::Result<Self> {
        let (chunk_tx, chunks) = sync_channel::<io::Result<Vec<u8>>>(2);
        let (spent, spent_rx) = channel::<Vec<u8>>();
        let worker = std::thread::Builder::new().name("kmerdb-inflate".into()).spawn(move || {
            loop {
                let mut buf = spent_rx.try_recv().unwrap_or_default();
                buf.resize(BUF_SIZE, 0);
                let mut filled = 0;
                while filled < buf.len() {
                    match inner.read(&mut buf[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = chunk_tx.send(Err(e));
                            return;
                        }
                    }
                }
                if filled == 0 {
                    return;
                }
                buf.truncate(filled);
                if chunk_tx.send(Ok(buf)).is_err() {
                    return;
                }
            }
        })?;
        Ok(Prefetched { chunks, spent, worker: Some(worker), current: Vec::new(), pos: 0 })
    }
}

impl Drop for Prefetched {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            // Without a receiver, the worker's next send fails (after at most one more chunk).
            let (_, closed) = sync_channel(0);
            drop(std::mem::replace(&mut self.chunks, closed));
            // Its panic, if any, no longer matters: nothing reads what it would have sent.
            let _ = worker.join();
        }
    }
}

impl Read for Prefetched {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Prefetched {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.current.len() {
            if self.worker.is_none() {
                // End of input (or an error already returned).
                break;
            }
            match self.chunks.recv() {
                Ok(Ok(chunk)) => {
                    let spent = std::mem::replace(&mut self.current, chunk);
                    // The worker may have finished; then the buffer is simply dropped.
                    let _ = self.spent.send(spent);
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    // The worker stops after sending its error: wait for it, as `drop` does.
                    if let Some(worker) = self.worker.take() {
                        let _ = worker.join();
                    }
                    return Err(e);
                }
                Err(_) => {
                    // Channel closed: the worker is done; a panic there is an error here.
                    if let Some(worker) = self.worker.take() {
                        if worker.join().is_err() {
                            return Err(io::Error::other("decompression thread panicked"));
                        }
                    }
                }
            }
        }
        Ok(&self.current[self.pos..])
    }

    fn consume(&mut self, amount: usize) {
        self.pos = (self.pos + amount).min(self.current.len());
    }
}

/// Calls `f(line_number, line)` for every line of `path` (1-based numbers, terminator removed).
///
/// Lines are cut straight out of the reader's buffer; only a line that straddles two buffer
/// refills is copied. Stops at, and returns, the first error from reading or from `f`.
pub(crate) fn for_each_line(
    path: &Path,
    mut f: impl FnMut(usize, &[u8]) -> Result<(), TaxonomyError>,
) -> Result<(), TaxonomyError> {
    let mut reader = open_maybe_gz(path)?;
    // The start of a line whose end is not yet in the buffer.
    let mut partial: Vec<u8> = Vec::new();
    let mut line_no = 0usize;
    loop {
        let chunk = reader.fill_buf().map_err(|e| TaxonomyError::io(path, e))?;
        if chunk.is_empty() {
            if !partial.is_empty() {
                f(line_no + 1, trim_eol(&partial))?;
            }
            return Ok(());
        }
        let mut rest = chunk;
        if !partial.is_empty() {
            match find_byte(rest, b'\n') {
                Some(end) => {
                    partial.extend_from_slice(&rest[..end]);
                    line_no += 1;
                    f(line_no, trim_eol(&partial))?;
                    partial.clear();
                    rest = &rest[end + 1..];
                }
                None => {
                    partial.extend_from_slice(rest);
                    rest = &[];
                }
            }
        }
        while let Some(end) = find_byte(rest, b'\n') {
            line_no += 1;
            f(line_no, trim_eol(&rest[..end]))?;
            rest = &rest[end + 1..];
        }
        // No newline in what is left: keep it for the next refill.
        partial.extend_from_slice(rest);
        let consumed = chunk.len();
        reader.consume(consumed);
    }
}

/// Position of the first `needle` in `haystack`, eight bytes at a time.
#[inline]
pub(crate) fn find_byte(haystack: &[u8], needle: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    let mut words = haystack.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let x = u64::from_le_bytes(bytes) ^ pattern;
        // The lowest set bit marks the first zero byte of x (borrows only propagate upwards).
        let found = x.wrapping_sub(LO) & !x & HI;
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words.remainder().iter().position(|&b| b == needle).map(|p| offset + p)
}

/// Removes a trailing `\n` or `\r\n`.
pub(crate) fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Parses a non-empty run of ASCII digits as a `u32`; `None` on anything else or on overflow.
#[inline]
pub(crate) fn parse_u32(field: &[u8]) -> Option<u32> {
    if field.is_empty() || field.len() > 10 {
        return None;
    }
    let mut value: u32 = 0;
    for &b in field {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u32::from(digit))?;
    }
    Some(value)
}

/// A field quoted for an error message, cut short if long.
pub(crate) fn quote_field(field: &[u8]) -> String {
    const MAX: usize = 40;
    let text = String::from_utf8_lossy(&field[..field.len().min(MAX)]);
    if field.len() > MAX { format!("{text:?}...") } else { format!("{text:?}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_u32_accepts_digits_only() {
        assert_eq!(parse_u32(b"0"), Some(0));
        assert_eq!(parse_u32(b"562"), Some(562));
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"12a"), None);
        assert_eq!(parse_u32(b" 12"), None);
        assert_eq!(parse_u32(b"-1"), None);
    }

    #[test]
    fn find_byte_matches_position() {
        let text = b"0123456789abcdef\tghij\nklmnopqrstuvwxyz\n";
        for start in 0..text.len() {
            for needle in [b'\n', b'\t', b'a', b'z', b'!'] {
                let hay = &text[start..];
                assert_eq!(find_byte(hay, needle), hay.iter().position(|&b| b == needle));
            }
        }
        // Bytes with the high bit set must not cause false matches.
        assert_eq!(find_byte(&[0x8a, 0x0b, 0xff, 0x0a], b'\n'), Some(3));
    }

    #[test]
    fn lines_survive_buffer_refills() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("long.txt");
        // Lines longer than and not aligned with the 1 MiB buffer, CRLF, a blank line, no final \n.
        let long = "x".repeat(BUF_SIZE + 17);
        let text = format!("a\r\n{long}\n\nb\n{long}y\nlast");
        std::fs::write(&path, &text).expect("write");
        let mut seen = Vec::new();
        for_each_line(&path, |n, line| {
            seen.push((n, String::from_utf8_lossy(line).into_owned()));
            Ok(())
        })
        .expect("read");
        let expected: Vec<(usize, String)> = ["a", &long, "", "b", &format!("{long}y"), "last"]
            .iter()
            .enumerate()
            .map(|(i, l)| (i + 1, l.to_string()))
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn truncated_gzip_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cut.gz");
        let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let full = crate::test_support::gzip(text.as_bytes());
        let mut lines = 0;
        std::fs::write(&path, &full).expect("write");
        for_each_line(&path, |_, _| {
            lines += 1;
            Ok(())
        })
        .expect("whole file reads");
        assert_eq!(lines, 20_000);
        std::fs::write(&path, &full[..full.len() / 2]).expect("write");
        let err = for_each_line(&path, |_, _| Ok(())).expect_err("truncated");
        assert!(matches!(err, TaxonomyError::Io { .. }), "{err:?}");
    }

    /// Input for [`Prefetched`]: endless, slow, failing after `chunks` reads if asked to, and
    /// slow to let go of, so that a test can tell whether the thread that owns it has finished.
    struct Slow {
        chunks: Option<usize>,
        released: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Read for Slow {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(std::time::Duration::from_millis(5));
            match &mut self.chunks {
                Some(0) => Err(io::Error::other("corrupt deflate stream")),
                Some(n) => {
                    *n -= 1;
                    out.fill(b'x');
                    Ok(out.len())
                }
                None => {
                    out.fill(b'x');
                    Ok(out.len())
                }
            }
        }
    }

    impl Drop for Slow {
        fn drop(&mut self) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.released.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn slow(chunks: Option<usize>) -> (Slow, std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        (Slow { chunks, released: released.clone() }, released)
    }

    /// Fuzzing (taxonomy_nodes, taxonomy_names; LeakSanitizer): a gzipped dump with an error
    /// early on left its inflate thread running after the load had returned, until its next send
    /// failed; LeakSanitizer reported the live thread's allocations as leaks.
    #[test]
    fn regression_a_reader_dropped_early_joins_its_inflate_thread() {
        let (input, released) = slow(None);
        let mut reader = Prefetched::spawn(input).expect("spawn");
        assert!(!reader.fill_buf().expect("first chunk").is_empty());
        drop(reader);
        assert!(released.load(std::sync::atomic::Ordering::SeqCst), "the inflate thread outlived its reader");
    }

    /// Fuzzing (taxonomy_names, LeakSanitizer, after the fix above): a corrupt gzip stream's
    /// error came back while the inflate thread that sent it was still exiting, unjoined.
    #[test]
    fn regression_a_read_error_joins_the_inflate_thread() {
        let (input, released) = slow(Some(1));
        let mut reader = Prefetched::spawn(input).expect("spawn");
        assert!(!reader.fill_buf().expect("first chunk").is_empty());
        let len = reader.current.len();
        reader.consume(len);
        let err = reader.fill_buf().expect_err("the input fails after one chunk");
        assert_eq!(err.to_string(), "corrupt deflate stream");
        assert!(released.load(std::sync::atomic::Ordering::SeqCst), "the inflate thread outlived its error");
    }

    #[test]
    fn trim_eol_handles_crlf() {
        assert_eq!(trim_eol(b"a\r\n"), b"a");
        assert_eq!(trim_eol(b"a\n"), b"a");
        assert_eq!(trim_eol(b"a"), b"a");
    }
}
