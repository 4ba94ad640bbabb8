//! Temporary files: every file kmerdb writes is first a hidden temporary file beside its
//! destination (renamed into place when complete), and large scratch data may be spilled to
//! temporary files too. This module names them, registers them and removes them.
//!
//! - **Names** say whose they are: `.NAME.kmerdb-PID-XXXXXX.tmp` beside `NAME`. A run killed
//!   outright (SIGKILL, a crash, a power cut) cannot clean up, so the next run that writes `NAME`
//!   removes such files whose process is gone, with an info line ([`create_beside`]). A file whose
//!   process still runs (two builds of one index at once) is left alone.
//! - **Registration**: while a [`TempFile`] lives, its path is in a process-wide list;
//!   [`remove_all_and_exit`] deletes every listed file. `main` calls it when SIGINT, SIGTERM or SIGHUP
//!   arrives, before exiting, so an interrupted run leaves nothing behind.
//! - Dropping a [`TempFile`] deletes it; [`TempFile::persist`] renames it over its destination.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Paths of the live temporary files, by registration number.
static LIVE: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A registered temporary file; deleted on drop unless persisted.
#[derive(Debug)]
pub struct TempFile {
    /// `None` only inside `persist`, once the file has been handed to the rename.
    inner: Option<tempfile::NamedTempFile>,
    key: u64,
    /// For outputs: where their bytes stand on the way to the disk (see [`WriteBehind`]).
    behind: Option<WriteBehind>,
}

/// An output's bytes handed to the disk as they are written: every [`WRITE_BEHIND_BYTES`] the
/// range just written is queued for writeback (`sync_file_range`, which does not wait), so that
/// the sync before the final rename waits for the last stretch only, not for the whole file (a
/// 2 GB Kraken file left to the page cache took its full write time, seconds, at the end).
#[derive(Debug, Default)]
struct WriteBehind {
    written: u64,
    queued: u64,
}

/// Bytes written between two writeback requests.
const WRITE_BEHIND_BYTES: u64 = 64 << 20;

impl WriteBehind {
    fn wrote(&mut self, file: &File, n: usize) {
        self.written += n as u64;
        if self.written - self.queued >= WRITE_BEHIND_BYTES {
            queue_writeback(file, self.queued, self.written - self.queued);
            self.queued = self.written;
        }
    }
}

/// Starts writing `len` bytes of `file` from `offset` to the disk without waiting. Only a hint:
/// errors show at the final sync.
#[cfg(target_os = "linux")]
fn queue_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on an open descriptor; it reads no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn queue_writeback(_file: &File, _offset: u64, _len: u64) {}

/// The part of a temporary file's name after `.NAME.`: `kmerdb-PID-`.
fn marker(pid: u32) -> String {
    format!("kmerdb-{pid}-")
}

/// Creates a temporary file in `dest`'s folder, named for `dest` and this process, after removing
/// the temporary files of `dest` that runs which no longer exist left behind. Its permissions are
/// those of a file the user creates (0666 less the umask), since it becomes an output.
pub fn create_beside(dest: &Path) -> io::Result<TempFile> {
    if let Some(name) = dest.file_name() {
        remove_stale(folder_of(dest), &name.to_string_lossy());
    }
    create_beside_unswept(dest)
}

/// [`create_beside`] without looking for the stale files of `dest`: for a run that writes many
/// files into one folder (`kmerdb download`), which sweeps it once with [`remove_stale_in`]
/// instead of reading the folder for every file.
pub fn create_beside_unswept(dest: &Path) -> io::Result<TempFile> {
    let name = dest.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("output path {} names no file", dest.display()))
    })?;
    let dir = folder_of(dest);
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    prefix.push(marker(std::process::id()));
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp").rand_bytes(6);
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut temp = register(|| builder.tempfile_in(dir))?;
    temp.behind = Some(WriteBehind::default());
    Ok(temp)
}

/// Creates a scratch file in `dir` (spilled data, never renamed into place), named
/// `.kmerdb-spill.kmerdb-PID-XXXXXX.tmp` so that a later run can tell whose it is.
pub fn create_scratch(dir: &Path) -> io::Result<TempFile> {
    remove_stale(dir, "kmerdb-spill");
    let prefix = format!(".kmerdb-spill.{}", marker(std::process::id()));
    register(|| tempfile::Builder::new().prefix(&prefix).suffix(".tmp").rand_bytes(6).tempfile_in(dir))
}

/// Creates a file with `create` and lists it, under the list's lock: a signal that arrives
/// meanwhile waits, so no file is made after [`remove_all_and_exit`] has run.
fn register(create: impl FnOnce() -> io::Result<tempfile::NamedTempFile>) -> io::Result<TempFile> {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let inner = create()?;
    let key = NEXT.fetch_add(1, Ordering::Relaxed);
    live.push((key, inner.path().to_path_buf()));
    Ok(TempFile { inner: Some(inner), key, behind: None })
}

fn unregister(key: u64) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|(k, _)| *k != key);
}

/// Deletes every live temporary file of this process, calls `report` with how many there were,
/// and exits with `code` at once (for the signal-watching thread in `main`). It holds the list's
/// lock to the end, so that no other thread makes a new one meanwhile, and ends with `_exit`:
/// `exit` runs the process's exit handlers, which can wait on locks that busy threads hold (a run
/// starting thousands of threads kept going after SIGTERM).
pub fn remove_all_and_exit(code: i32, report: impl FnOnce(usize)) -> ! {
    // A thread creating a file holds the lock for a moment; one stuck in the file system for
    // longer does not hold up the exit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    let live = loop {
        match LIVE.try_lock() {
            Ok(live) => break Some(live),
            Err(std::sync::TryLockError::Poisoned(e)) => break Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => break None,
        }
    };
    let removed = live.as_ref().map_or(0, |l| l.iter().filter(|(_, p)| std::fs::remove_file(p).is_ok()).count());
    report(removed);
    // SAFETY: `_exit` ends the process without running exit handlers; nothing is left to flush
    // (stderr is not buffered, and flushing it would take its lock, which a busy thread may hold).
    unsafe { libc::_exit(code) }
}

/// Deletes every live temporary file of this process from a signal handler (SIGBUS: `mapped`),
/// where nothing may wait or allocate: the list is only tried, and each path is made a C string
/// on the stack. Returns how many were removed.
pub(crate) fn remove_all_in_signal_handler() -> usize {
    let Ok(live) = LIVE.try_lock() else { return 0 };
    let mut removed = 0;
    let mut c_path = [0u8; 4096];
    for (_, path) in live.iter() {
        let bytes = path.as_os_str().as_encoded_bytes();
        if bytes.len() >= c_path.len() {
            continue;
        }
        c_path[..bytes.len()].copy_from_slice(bytes);
        c_path[bytes.len()] = 0;
        // SAFETY: a NUL-terminated path in a live buffer; unlink(2) is async-signal-safe.
        if unsafe { libc::unlink(c_path.as_ptr().cast()) } == 0 {
            removed += 1;
        }
    }
    removed
}

/// `dest`'s folder (`.` for a bare name).
pub fn folder_of(dest: &Path) -> &Path {
    match dest.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Removes `.NAME.kmerdb-PID-*.tmp` files in `dir` whose process is gone.
fn remove_stale(dir: &Path, name: &str) {
    remove_stale_matching(dir, |file| file.strip_prefix(&format!(".{name}.kmerdb-")).map(str::to_owned));
}

/// Removes the temporary files of any name in `dir` that runs no longer running left behind.
pub fn remove_stale_in(dir: &Path) {
    remove_stale_matching(dir, |file| {
        let rest = file.strip_prefix('.')?;
        rest.rfind(".kmerdb-").map(|at| rest[at + ".kmerdb-".len()..].to_owned())
    });
}

/// Removes the files of `dir` for which `after_marker` gives the rest of the name after
/// `.kmerdb-` (`PID-XXXXXX.tmp`), when process PID is not running.
fn remove_stale_matching(dir: &Path, after_marker: impl Fn(&str) -> Option<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some(rest) = after_marker(file) else { continue };
        let Some(rest) = rest.strip_suffix(".tmp") else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == std::process::id() || process_may_be_running(pid) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            log::info!(
                "removed {}, a temporary file left by an interrupted kmerdb run (process {pid}, no longer running)",
                entry.path().display()
            );
        }
    }
}

/// Whether process `pid` may be a running kmerdb. Where this cannot be told (no `/proc`), it may.
fn process_may_be_running(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        // A live process of another program has the number now: the kmerdb that had it is gone.
        Ok(comm) => comm.trim_end().starts_with("kmerdb"),
        Err(_) => false,
    }
}

impl TempFile {
    fn inner(&self) -> &tempfile::NamedTempFile {
        self.inner.as_ref().expect("a TempFile holds its file until persisted")
    }

    pub fn path(&self) -> &Path {
        self.inner().path()
    }

    pub fn as_file(&self) -> &File {
        self.inner().as_file()
    }

    /// Syncs the file and renames it over `dest` (atomic within one file system), with the checks
    /// of `replacing`: never over a device or pipe, under a lock on `dest`, with the replaced
    /// file's permissions. On error the temporary file is deleted and `dest` is untouched.
    pub fn persist(self, dest: &Path) -> io::Result<()> {
        self.persist_under(dest, None)
    }

    /// [`TempFile::persist`] under `held`, a lock on `dest` the run took before reading it: the
    /// rename is refused if `dest` changed since.
    pub(crate) fn persist_under(mut self, dest: &Path, held: Option<&crate::replacing::Lock>) -> io::Result<()> {
        let context = |e: io::Error| io::Error::new(e.kind(), format!("cannot write {}: {e}", dest.display()));
        self.as_file().sync_all().map_err(context)?;
        let inner = self.inner.take().expect("a TempFile holds its file until persisted");
        // On failure the file is deleted as `inner` drops; `self` unregisters on drop.
        crate::replacing::replace(inner, dest, held).map_err(context)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        unregister(self.key);
        // The inner `NamedTempFile` deletes the file when it drops, right after this.
    }
}

// Through the `File` itself: `NamedTempFile`'s own `Write` adds the temporary path to every
// error, and callers name the destination instead.
impl Write for TempFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let file = self.inner.as_ref().expect("a TempFile holds its file until persisted").as_file();
        let n = (&*file).write(buf)?;
        if let Some(b) = &mut self.behind {
            b.wrote(file, n);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.as_file().flush()
    }
}

impl Seek for TempFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let at = self.as_file().seek(pos)?;
        // Writing goes on from here: the write-behind counts from here too.
        if let Some(b) = &mut self.behind {
            (b.written, b.queued) = (at, at);
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn named_for_the_destination_and_the_process_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let t = create_beside(&dir.path().join("x.db")).unwrap();
        let name = t.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!(".x.db.kmerdb-{}-", std::process::id())) && name.ends_with(".tmp"), "{name}");
        assert!(LIVE.lock().unwrap().iter().any(|(_, p)| p == t.path()));
        let path = t.path().to_path_buf();
        drop(t);
        assert!(!path.exists());
        assert!(!LIVE.lock().unwrap().iter().any(|(_, p)| *p == path));
    }

    #[test]
    fn persist_renames_and_unregisters() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.txt");
        let mut t = create_beside(&dest).unwrap();
        t.write_all(b"done").unwrap();
        let path = t.path().to_path_buf();
        t.persist(&dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"done");
        assert_eq!(names(dir.path()), ["out.txt"]);
        assert!(!LIVE.lock().unwrap().iter().any(|(_, p)| *p == path));
    }

    /// Leftovers of dead processes are removed by the next run writing the same file; those of a
    /// live kmerdb (this test binary is not one, so use our own pid) and of other names are kept.
    #[test]
    fn stale_files_of_the_same_destination_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Pid numbers above the kernel's maximum (4194304) belong to no process.
        std::fs::write(d.join(".x.db.kmerdb-999999999-abcdef.tmp"), "stale").unwrap();
        std::fs::write(d.join(".y.db.kmerdb-999999999-abcdef.tmp"), "other name").unwrap();
        std::fs::write(d.join(format!(".x.db.kmerdb-{}-zzzzzz.tmp", std::process::id())), "ours").unwrap();
        std::fs::write(d.join(".x.db.notours.tmp"), "not kmerdb's").unwrap();
        let t = create_beside(&d.join("x.db")).unwrap();
        let left = names(d);
        assert!(!left.contains(&".x.db.kmerdb-999999999-abcdef.tmp".to_string()), "{left:?}");
        assert!(left.contains(&".y.db.kmerdb-999999999-abcdef.tmp".to_string()), "{left:?}");
        assert!(left.contains(&".x.db.notours.tmp".to_string()), "{left:?}");
        assert!(left.iter().any(|n| n.ends_with("zzzzzz.tmp")), "{left:?}");
        drop(t);
    }

    #[test]
    fn a_sweep_removes_stale_files_of_any_name_and_keeps_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".a.fna.gz.kmerdb-999999999-abcdef.tmp");
        let live = dir.path().join(format!(".b.fna.gz.kmerdb-{}-abcdef.tmp", std::process::id()));
        let other = dir.path().join("c.tmp");
        for f in [&stale, &live, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        remove_stale_in(dir.path());
        assert!(!stale.exists() && live.exists() && other.exists());
        let t = create_beside_unswept(&dir.path().join("d.txt")).unwrap();
        assert!(t.path().file_name().unwrap().to_string_lossy().starts_with(".d.txt.kmerdb-"));
    }
}
