//! Reading the taxonomy's text inputs line by line, plain or gzip-compressed.
//!
//! Compression is detected from the gzip magic bytes, never from the file name, and
//! multi-member gzip files (as written by `pigz` or `cat a.gz b.gz`) are read to the end.
//! Lines are handed out as byte slices borrowed from one reused buffer, with the line terminator
//! (`\n` or `\r\n`) removed, so that parsers allocate only for what they keep.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

use super::TaxonomyError;

/// Buffer size for both the compressed and the decompressed side; large reads keep inflate busy.
const BUF_SIZE: usize = 1 << 20;

/// Opens `path` for buffered reading, transparently decompressing it if it starts with the gzip
/// magic bytes.
pub(crate) fn open_maybe_gz(path: &Path) -> Result<Box<dyn BufRead + Send>, TaxonomyError> {
    let file = File::open(path).map_err(|e| TaxonomyError::io(path, e))?;
    let mut raw = BufReader::with_capacity(BUF_SIZE, file);
    let head = raw.fill_buf().map_err(|e| TaxonomyError::io(path, e))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            BUF_SIZE,
            MultiGzDecoder::new(raw),
        )))
    } else {
        Ok(Box::new(raw))
    }
}

/// Calls `f(line_number, line)` for every line of `path` (1-based numbers, terminator removed).
///
/// Stops at, and returns, the first error from reading or from `f`.
pub(crate) fn for_each_line(
    path: &Path,
    mut f: impl FnMut(usize, &[u8]) -> Result<(), TaxonomyError>,
) -> Result<(), TaxonomyError> {
    let mut reader = open_maybe_gz(path)?;
    let mut buf = Vec::with_capacity(256);
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| TaxonomyError::io(path, e))?;
        if n == 0 {
            return Ok(());
        }
        line_no += 1;
        f(line_no, trim_eol(&buf))?;
    }
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
    if field.len() > MAX {
        format!("{text:?}...")
    } else {
        format!("{text:?}")
    }
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
    fn trim_eol_handles_crlf() {
        assert_eq!(trim_eol(b"a\r\n"), b"a");
        assert_eq!(trim_eol(b"a\n"), b"a");
        assert_eq!(trim_eol(b"a"), b"a");
    }
}
