//! Output destinations: stdout, plain files and gzip files, all buffered, with files written under
//! a temporary name and renamed into place only when complete.
//!
//! An [`Output`] for a file is a hidden temporary file in the destination's own directory (so the
//! final rename stays on one file system and is atomic). [`Output::finish`] flushes, ends the gzip
//! stream, syncs and renames; dropping an `Output` without finishing it deletes the temporary file,
//! so a run that fails part-way leaves nothing under the final name (and an earlier file of that
//! name untouched). Paths that exist but are not regular files (`/dev/null`, a named pipe) are
//! written directly, since they can neither be half-written nor renamed onto.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Stdout, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use crate::temp_files::{self, TempFile};
use crate::terminal::Escaping;
use std::io::IsTerminal;

/// Buffer size for every output: large enough that per-line writes cost little.
const BUFFER: usize = 1 << 17;

/// Whether the process started with stdout closed (see [`note_stdout_closed`]).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Notes that the process started with stdout closed (`>&-`): writing to it is then an error
/// ([`stdout_closed_error`]) instead of output that goes nowhere with exit 0. Only the binary can
/// tell: Rust's runtime opens `/dev/null` on descriptors 0 to 2 found closed before `main`, so
/// `main` looks at descriptor 1 before that (see `kmerdb`'s `main.rs`).
pub fn note_stdout_closed() {
    STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// An error if stdout was closed when the process started.
pub fn stdout_closed_error() -> io::Result<()> {
    if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(io::Error::other(format!(
            "standard output is closed ({})",
            io::Error::from_raw_os_error(libc::EBADF)
        )));
    }
    Ok(())
}

/// A buffered output opened by [`create_output`]; write to it, then call [`Output::finish`].
pub struct Output {
    sink: Sink,
}

enum Sink {
    Stdout(BufWriter<Stdout>),
    /// Stdout on a terminal: control characters escaped (`terminal`).
    Terminal(BufWriter<Escaping<Stdout>>),
    /// An existing non-regular file (device, pipe), written in place.
    Direct(BufWriter<File>),
    Plain(BufWriter<TempFile>, PathBuf),
    /// Boxed: the encoder's state is most of the enum's size otherwise.
    Gzip(Box<BufWriter<GzEncoder<TempFile>>>, PathBuf),
}

/// Opens `path` for writing: `-` is stdout, a name ending in `.gz` is gzip-compressed (default
/// level), anything else is written as is.
///
/// Files go to a hidden temporary file (`.NAME.kmerdb-PID-XXXXXX.tmp`, see `temp_files`) in the
/// same directory until [`Output::finish`]. Errors name the path.
pub fn create_output(path: &Path) -> io::Result<Output> {
    if path.as_os_str() == "-" {
        stdout_closed_error()?;
        let stdout = io::stdout();
        if stdout.is_terminal() {
            return Ok(Output { sink: Sink::Terminal(BufWriter::with_capacity(BUFFER, Escaping::new(stdout))) });
        }
        return Ok(Output { sink: Sink::Stdout(BufWriter::with_capacity(BUFFER, stdout)) });
    }
    let context = |e: io::Error| io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()));
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let file = OpenOptions::new().write(true).open(path).map_err(context)?;
        return Ok(Output { sink: Sink::Direct(BufWriter::with_capacity(BUFFER, file)) });
    }
    let temp = temp_files::create_beside(path).map_err(context)?;
    let sink = if path.extension().is_some_and(|ext| ext == "gz") {
        let encoder = GzEncoder::new(temp, Compression::default());
        Sink::Gzip(Box::new(BufWriter::with_capacity(BUFFER, encoder)), path.to_owned())
    } else {
        Sink::Plain(BufWriter::with_capacity(BUFFER, temp), path.to_owned())
    };
    Ok(Output { sink })
}

impl Output {
    /// Flushes everything, ends the gzip stream, and moves a file to its final name (replacing
    /// any file there). Until this returns `Ok`, the final name is untouched.
    pub fn finish(self) -> io::Result<()> {
        let (temp, path) = match self.sink {
            Sink::Stdout(mut w) => return w.flush(),
            Sink::Terminal(mut w) => return w.flush(),
            Sink::Direct(mut w) => return w.flush(),
            Sink::Plain(w, path) => (w.into_inner().map_err(|e| e.into_error())?, path),
            Sink::Gzip(w, path) => (w.into_inner().map_err(|e| e.into_error())?.finish()?, path),
        };
        temp.persist(&path)
    }

    /// True if this output is the process's standard output.
    pub fn is_stdout(&self) -> bool {
        matches!(self.sink, Sink::Stdout(_) | Sink::Terminal(_))
    }
}

impl Write for Output {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Stdout(w) => w.write(buf),
            Sink::Terminal(w) => w.write(buf),
            Sink::Direct(w) => w.write(buf),
            Sink::Plain(w, _) => w.write(buf),
            Sink::Gzip(w, _) => w.write(buf),
        }
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(w) => w.write_all(buf),
            Sink::Terminal(w) => w.write_all(buf),
            Sink::Direct(w) => w.write_all(buf),
            Sink::Plain(w, _) => w.write_all(buf),
            Sink::Gzip(w, _) => w.write_all(buf),
        }
    }

    /// Flushes the buffer (and, for gzip, pending compressed data) to the temporary file; the
    /// final name still appears only at [`Output::finish`].
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(w) => w.flush(),
            Sink::Terminal(w) => w.flush(),
            Sink::Direct(w) => w.flush(),
            Sink::Plain(w, _) => w.flush(),
            Sink::Gzip(w, _) => w.flush(),
        }
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.sink {
            Sink::Stdout(_) | Sink::Terminal(_) => f.write_str("Output(stdout)"),
            Sink::Direct(_) => f.write_str("Output(direct)"),
            Sink::Plain(_, p) => write!(f, "Output({})", p.display()),
            Sink::Gzip(_, p) => write!(f, "Output({}, gzip)", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn plain_file_appears_only_on_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.tsv");
        let mut out = create_output(&path).unwrap();
        out.write_all(b"hello\n").unwrap();
        out.flush().unwrap();
        assert!(!path.exists());
        let hidden = entries(dir.path());
        assert_eq!(hidden.len(), 1);
        assert!(hidden[0].starts_with(".out.tsv."), "{hidden:?}");
        out.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello\n");
        assert_eq!(entries(dir.path()), ["out.tsv"]);
    }

    #[test]
    fn gzip_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reads.kraken.gz");
        let mut out = create_output(&path).unwrap();
        let text: String = (0..10_000).map(|i| format!("C\tread{i}\t562\t150\t562:{i}\n")).collect();
        out.write_all(text.as_bytes()).unwrap();
        out.finish().unwrap();
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(&raw[..2], &[0x1f, 0x8b], "gzip magic");
        let mut back = String::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_string(&mut back).unwrap();
        assert_eq!(back, text);
        assert_eq!(entries(dir.path()), ["reads.kraken.gz"]);
    }

    #[test]
    fn drop_without_finish_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["half.tsv", "half.tsv.gz"] {
            let mut out = create_output(&dir.path().join(name)).unwrap();
            out.write_all(&[b'x'; 1 << 20]).unwrap();
            drop(out);
        }
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn failed_run_keeps_the_previous_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.txt");
        std::fs::write(&path, "old").unwrap();
        let mut out = create_output(&path).unwrap();
        out.write_all(b"new, but unfinished").unwrap();
        drop(out);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        let mut out = create_output(&path).unwrap();
        out.write_all(b"new").unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }

    #[cfg(unix)]
    #[test]
    fn files_get_ordinary_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        create_output(&path).unwrap().finish().unwrap();
        let ordinary = dir.path().join("ordinary.txt");
        File::create(&ordinary).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&path), mode(&ordinary), "same mode as File::create under this umask");
    }

    #[cfg(unix)]
    #[test]
    fn dev_null_is_written_in_place() {
        let mut out = create_output(Path::new("/dev/null")).unwrap();
        out.write_all(b"discarded").unwrap();
        out.finish().unwrap();
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/out.txt");
        let err = create_output(&path).unwrap_err();
        assert!(err.to_string().contains("no/such/dir/out.txt"), "{err}");
        assert!(create_output(Path::new("-")).unwrap().is_stdout());
    }
}
