//! Text printed for a human: control characters escaped.
//!
//! Sequence ids, taxon names and sample names come from files kmerdb does not control (FASTA
//! headers, `names.dmp`, sample sheets). A control character in one (an escape sequence above
//! all) reached the terminal raw through `kmerdb info`, error messages and `-r -`, where it can
//! rewrite the screen or the window title. Everything kmerdb prints for a human goes through
//! [`escape_controls`] (messages, logs, `info`), and outputs written to a terminal through
//! [`Escaping`]. Files and pipes get the bytes as they are: tools read them.
//!
//! Escaped: C0 controls but tab and newline, DEL, C1 controls (U+0080 to U+009F), as `\x1b` or
//! `\u{9b}`; in bytes, also any byte that is not part of valid UTF-8, as `\xff`.

use std::borrow::Cow;
use std::io::{self, Write};

fn escaped(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

fn push_escape(c: char, out: &mut String) {
    use std::fmt::Write;
    let n = c as u32;
    let _ = if n < 0x80 { write!(out, "\\x{n:02x}") } else { write!(out, "\\u{{{n:x}}}") };
}

/// `s` with its control characters (but tab and newline) escaped; borrowed when there are none.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if escaped(c) {
            push_escape(c, &mut out);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Appends `bytes` to `out` with control characters escaped as [`escape_controls`] does, and
/// bytes that are not valid UTF-8 as `\xNN`.
pub(crate) fn escape_bytes(mut bytes: &[u8], out: &mut Vec<u8>) {
    while !bytes.is_empty() {
        let (valid, rest) = match std::str::from_utf8(bytes) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (ok, bad) = bytes.split_at(e.valid_up_to());
                (std::str::from_utf8(ok).expect("valid up to here"), bad)
            }
        };
        out.extend_from_slice(escape_controls(valid).as_bytes());
        bytes = match rest.split_first() {
            Some((&b, tail)) => {
                out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                tail
            }
            None => rest,
        };
    }
}

/// A writer that escapes what it is given before passing it on (for outputs to a terminal). Its
/// input is cut anywhere by buffering: the bytes of an unfinished UTF-8 character wait for the
/// next write.
pub struct Escaping<W: Write> {
    inner: W,
    pending: Vec<u8>,
    scratch: Vec<u8>,
}

impl<W: Write> Escaping<W> {
    pub fn new(inner: W) -> Self {
        Self { inner, pending: Vec::new(), scratch: Vec::new() }
    }
}

/// How many bytes at the end of `bytes` start a UTF-8 character that is not complete yet.
fn unfinished_tail(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0xc0 != 0x80 {
            let need = match b {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => return 0,
            };
            return if need > back { back } else { 0 };
        }
    }
    0
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        let keep = unfinished_tail(&self.pending);
        let ready = self.pending.len() - keep;
        self.scratch.clear();
        escape_bytes(&self.pending[..ready], &mut self.scratch);
        self.inner.write_all(&self.scratch)?;
        self.pending.drain(..ready);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.scratch.clear();
            escape_bytes(&self.pending, &mut self.scratch);
            self.inner.write_all(&self.scratch)?;
            self.pending.clear();
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_text_kept() {
        assert_eq!(escape_controls("Escherichia coli\t562\n"), "Escherichia coli\t562\n");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(escape_controls("a\x1b]0;pwned\x07b\r"), "a\\x1b]0;pwned\\x07b\\x0d");
        assert_eq!(escape_controls("csi \u{9b}31m é"), "csi \\u{9b}31m é");
    }

    #[test]
    fn bytes_cut_anywhere_are_escaped_alike() {
        let text = "x\x1b[2J é \u{9b}1m\n".as_bytes().iter().copied().chain([0xff, b'!']).collect::<Vec<u8>>();
        let mut whole = Vec::new();
        escape_bytes(&text, &mut whole);
        assert_eq!(String::from_utf8(whole.clone()).unwrap(), "x\\x1b[2J é \\u{9b}1m\n\\xff!");
        for cut in 0..text.len() {
            let mut w = Escaping::new(Vec::new());
            w.write_all(&text[..cut]).unwrap();
            w.write_all(&text[cut..]).unwrap();
            w.flush().unwrap();
            assert_eq!(w.inner, whole, "cut at {cut}");
        }
    }
}
