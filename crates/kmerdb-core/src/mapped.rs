//! Memory-mapped files, and what happens when one changes under a run.
//!
//! kmerdb maps its index (`Index::open`) and some inputs (large plain FASTA, `pigz -i` files)
//! instead of reading them. If such a file is truncated or rewritten in place while it is mapped
//! (`cp other.db idx.db`, `truncate`), touching a page past its new end raises SIGBUS, which
//! kills the process ("Bus error", exit 135) and leaves its temporary outputs behind. kmerdb's
//! own build and update replace an index by rename, which is safe: the run keeps the old file.
//!
//! Every map is made through `Mapped::map`, which lists its address range with the file's path
//! while it lives. [`install_sigbus_handler`] (called by `main`) installs a handler that names the
//! file whose map was hit, removes the run's temporary files (`temp_files`) and exits with code 1.
//! The handler only does what is safe in a signal handler: `try_lock`s (never waits), `write(2)`,
//! `unlink(2)` and `_exit(2)`, with no allocation.

use std::ffi::CString;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a mapped file is to the run, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Index,
    Input,
}

struct Region {
    key: u64,
    start: usize,
    len: usize,
    path: CString,
    kind: Kind,
}

static REGIONS: Mutex<Vec<Region>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);
/// Set by the first fault's handler: threads that fault after it (every thread reading a cut index
/// does, at once) wait for it to end the process, rather than find the list locked by it and
/// print a second, vaguer message over the first.
static HANDLING: AtomicBool = AtomicBool::new(false);

/// A read-only map of a whole file, listed for the SIGBUS handler while it lives.
pub(crate) struct Mapped {
    map: memmap2::Mmap,
    key: u64,
}

impl Mapped {
    /// The share of the mapping's pages in memory (`mincore`), 0 to 1; 1 where it cannot be told.
    pub(crate) fn resident_fraction(&self) -> f64 {
        let page = page_size();
        let pages = self.map.len().div_ceil(page);
        if pages == 0 {
            return 1.0;
        }
        // A large mapping is judged from samples: `mincore` over 20 GB took 0.18 s, on the way to
        // the GPU. SAMPLES stretches of RUN pages, evenly spread, or every page of a small file.
        const SAMPLES: usize = 4096;
        const RUN: usize = 16;
        let stretches: Vec<(usize, usize)> = if pages <= SAMPLES * RUN {
            vec![(0, pages)]
        } else {
            (0..SAMPLES).map(|i| (i * (pages - RUN) / (SAMPLES - 1), RUN)).collect()
        };
        let (mut resident, mut seen) = (0usize, 0usize);
        for (first, n) in stretches {
            let range = first * page..((first + n) * page).min(self.map.len());
            let Some(pages) = self.in_memory(range) else { return 1.0 };
            resident += pages.iter().filter(|&&f| f).count();
            seen += pages.len();
        }
        resident as f64 / seen.max(1) as f64
    }

    /// Whether every page that holds `range` is in memory (`mincore`: in the page cache, mapped
    /// here yet or not); true where it cannot be told.
    pub(crate) fn resident(&self, range: std::ops::Range<usize>) -> bool {
        self.in_memory(range).is_none_or(|pages| pages.iter().all(|&f| f))
    }

    /// For each page that holds `range`, whether it is in memory (`mincore`); `None` where the
    /// call fails.
    fn in_memory(&self, range: std::ops::Range<usize>) -> Option<Vec<bool>> {
        assert!(range.end <= self.map.len(), "range past the mapping's end");
        let page = page_size();
        let first = range.start / page * page;
        let mut bytes = vec![0u8; range.end.saturating_sub(first).div_ceil(page)];
        if !bytes.is_empty() {
            // SAFETY: `first..range.end` lies in this mapping and starts at a page boundary (mmap
            // returns page-aligned memory), and `bytes` has a byte for each of its pages.
            let r = unsafe {
                libc::mincore(self.map.as_ptr().add(first) as *mut libc::c_void, range.end - first, bytes.as_mut_ptr())
            };
            if r != 0 {
                return None;
            }
        }
        Some(bytes.iter().map(|&b| b & 1 != 0).collect())
    }

    /// Maps in the pages that hold `range` of the mapping now (`MADV_POPULATE_READ`: read from
    /// the disk where they are not in memory), rather than page by page as they are read. The
    /// error is the call's: `EFAULT` where the file is shorter than the range now.
    pub(crate) fn populate(&self, range: std::ops::Range<usize>) -> std::io::Result<()> {
        self.advise(range, libc::MADV_POPULATE_READ)
    }

    /// Lets go of the pages that hold `range` (`MADV_DONTNEED`): they stay in the page cache but
    /// leave the process's resident memory; the mapping is private and never written, so a page
    /// touched again is mapped in again with the same bytes. Advice only: nothing to report.
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        let _ = self.advise(range, libc::MADV_DONTNEED);
    }

    /// `madvise(advice)` on the pages that hold `range` (from the page of `range.start`; the call
    /// rounds the end up to a page).
    fn advise(&self, range: std::ops::Range<usize>, advice: libc::c_int) -> std::io::Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        assert!(range.end <= self.map.len(), "advice past the mapping's end");
        let first = range.start / page_size() * page_size();
        // SAFETY: `first..range.end` lies within the mapping, whose start is page-aligned (mmap's),
        // and `first` is a page boundary; the two advices used (populate, drop pages of this private
        // read-only mapping) never change what it reads.
        let r = unsafe { libc::madvise(self.map.as_ptr().add(first) as *mut libc::c_void, range.end - first, advice) };
        if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    }

    /// Maps `file` (at `path`, for messages).
    pub(crate) fn map(file: &std::fs::File, path: &Path, kind: Kind) -> std::io::Result<Self> {
        // SAFETY: read-only, and never written by kmerdb while mapped (it replaces files by
        // rename). Another program that truncates or rewrites the file meanwhile gives wrong bytes
        // or SIGBUS, which the handler below turns into an error naming the file.
        let map = unsafe { memmap2::Mmap::map(file)? };
        let key = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default();
        let region = Region { key, start: map.as_ptr() as usize, len: map.len(), path, kind };
        REGIONS.lock().unwrap_or_else(|e| e.into_inner()).push(region);
        Ok(Self { map, key })
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    // Inlined: every lookup in the index goes through it (`Index::shard_slots`).
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        REGIONS.lock().unwrap_or_else(|e| e.into_inner()).retain(|r| r.key != self.key);
    }
}

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapped").field("len", &self.map.len()).finish_non_exhaustive()
    }
}

/// The host's page size (a mapping's unit).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize
}

/// Installs the SIGBUS handler (see the module's description). Without it, SIGBUS kills the
/// process as before.
pub fn install_sigbus_handler() -> std::io::Result<()> {
    // SAFETY: a plain sigaction call with a handler that is async-signal-safe (see `on_sigbus`).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes `bytes` to stderr (a signal handler's way: no locks, no allocation).
fn say(bytes: &[u8]) {
    // SAFETY: write(2) on fd 2 with a valid buffer; async-signal-safe.
    unsafe {
        libc::write(2, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Writes `bytes` to stderr with control bytes escaped as `\xNN` (a path: see `terminal`).
fn say_escaped(bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for chunk in bytes.split_inclusive(|&b| b < 0x20 || b == 0x7f) {
        match chunk.split_last() {
            Some((&b, head)) if b < 0x20 || b == 0x7f => {
                say(head);
                say(&[b'\\', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
            }
            _ => say(chunk),
        }
    }
}

extern "C" fn on_sigbus(_signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    if HANDLING.swap(true, Ordering::SeqCst) {
        loop {
            // SAFETY: pause(2) is async-signal-safe; the first handler's _exit ends this thread.
            unsafe { libc::pause() };
        }
    }
    // Never wait: the thread that holds the list may be the one interrupted.
    match REGIONS.try_lock() {
        Ok(regions) => {
            let Some(r) = regions.iter().find(|r| addr >= r.start && addr < r.start + r.len) else {
                // Not a file kmerdb mapped: a bug. Let it end the process as SIGBUS does (with a
                // core dump where enabled): the fault comes again once this returns.
                // SAFETY: signal(2) is async-signal-safe.
                unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
                HANDLING.store(false, Ordering::SeqCst);
                return;
            };
            say(b"kmerdb: error: ");
            say_escaped(r.path.as_bytes());
            say(match r.kind {
                Kind::Index => b": the index changed while this run read it (it is memory-mapped; replace indexes by rename, as kmerdb does, not by copying over them or truncating them)",
                Kind::Input => b": the file changed while this run read it (it is memory-mapped: do not rewrite an input while kmerdb reads it)",
            });
        }
        Err(_) => {
            say(b"kmerdb: error: a memory-mapped file changed or could not be read while this run read it (bus error)")
        }
    }
    let removed = crate::temp_files::remove_all_in_signal_handler();
    if removed > 0 {
        let mut n = itoa::Buffer::new();
        say(b"; removed ");
        say(n.format(removed).as_bytes());
        say(b" temporary files");
    }
    say(b"\n");
    // SAFETY: _exit is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file past the sampled size: the share judged from samples follows the share read. The
    /// file is sparse (its holes cost no disk) and its first half is read into the page cache.
    #[test]
    fn resident_fraction_of_a_large_file_is_sampled_right() {
        use std::io::Read;
        let dir = tempfile::tempdir().expect("temporary folder");
        let path = dir.path().join("sparse");
        let len = 512u64 << 20;
        std::fs::File::create(&path).and_then(|f| f.set_len(len)).expect("sparse file");
        let file = std::fs::File::open(&path).expect("open");
        let mapped = Mapped::map(&file, &path, Kind::Input).expect("map");
        let before = mapped.resident_fraction();
        let mut half = vec![0u8; (len / 2) as usize];
        (&file).read_exact(&mut half).expect("read the first half");
        let after = mapped.resident_fraction();
        // Some file systems keep no pages for holes read; there the share stays where it was.
        if after > before {
            assert!((after - 0.5).abs() < 0.05, "half read: {after}");
        }
        assert!((0.0..=1.0).contains(&before) && (0.0..=1.0).contains(&after));
    }
}
