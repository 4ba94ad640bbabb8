//! Replacing a file by rename, the last step of every output kmerdb writes (`temp_files`): never
//! over something that is not a regular file, never over a file that changed since the run read
//! it, and with the replaced file's permissions.
//!
//! - **Only regular files are replaced.** A rename over a device node or a named pipe would put a
//!   regular file in its place (`-d /dev/null` once replaced the machine's `/dev/null`). Outputs
//!   that stream (`output::create_output`) write into such files directly; an index, which is
//!   written with seeks, refuses them ([`refusal`]) before any work.
//! - **An advisory lock** (`flock`) on the file being replaced, taken just before the rename, or
//!   for a whole run by a command that reads the file it will replace (`update -o` over its own
//!   index: [`Lock::take`]). Two such runs therefore take turns: the second waits, then reads what
//!   the first wrote, so neither's change is lost. The lock is on the old file's inode; a run that
//!   waited for it finds the path naming a new file afterwards and locks that one instead.
//! - **A stamp check.** Under a lock held for the run, the file at the path must still be the one
//!   locked and read (device, inode, size, modification time), or the rename is refused: another
//!   program (`cp`, a tool that ignores the lock) rewrote or replaced it meanwhile.
//! - **Permissions carry over**: replacing a 0600 index leaves a 0600 index.

use std::fs::{File, FileType, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What a file was when a run locked it: enough to tell that it was rewritten or replaced since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Stamp {
    pub(crate) fn of(m: &Metadata) -> Self {
        Self { dev: m.dev(), ino: m.ino(), len: m.len(), mtime: (m.mtime(), m.mtime_nsec()) }
    }

    fn same_file(&self, other: &Stamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// What kind of file `t` is, in words, when it is not a regular file or a folder.
pub(crate) fn special_kind(t: FileType) -> Option<&'static str> {
    if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        None
    }
}

/// Why a file written by rename cannot go to `path`, if it names a device, a pipe or a socket
/// (`None` for a regular file, a folder, a symlink or nothing: their own checks follow).
pub fn refusal(path: &Path) -> Option<String> {
    let kind = special_kind(std::fs::symlink_metadata(path).ok()?.file_type())?;
    Some(format!(
        "it is {kind}, not a file: kmerdb writes a new file beside it and renames it into place, which would replace it; give the path of a file"
    ))
}

/// Whether `a` and `b` name one existing file (however spelled: links, `./`, `..`).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => Stamp::of(&x).same_file(&Stamp::of(&y)),
        _ => false,
    }
}

/// An exclusive advisory lock on the regular file at a path, with the file's stamp when locked.
/// Released when dropped.
#[derive(Debug)]
pub struct Lock {
    /// Held open for its `flock`, which ends when it closes.
    _file: File,
    path: PathBuf,
    stamp: Stamp,
}

/// What [`Lock::take`] found at a path.
#[derive(Debug)]
pub enum Taken {
    Locked(Lock),
    /// Nothing is there (or a folder, which other checks refuse).
    Absent,
    /// A regular file that cannot be locked (a file system without `flock`, a file the user may
    /// replace but not open): it is replaced unlocked, as before locks. Says why.
    Unlockable(String),
}

impl Taken {
    pub fn lock(self) -> Option<Lock> {
        match self {
            Taken::Locked(lock) => Some(lock),
            _ => None,
        }
    }
}

/// The refusal to replace a file that changed since the run locked it: another program rewrote
/// or replaced it meanwhile.
#[derive(Debug, thiserror::Error)]
#[error(
    "it changed while this run read it (another program rewrote or replaced it), so this run's result, made from the old file, was not written: run the command again"
)]
pub(crate) struct Changed;

impl Lock {
    /// Locks the file at `path`, waiting (with an info line) while another kmerdb run holds it.
    /// Errors when `path` is a device, pipe or socket.
    pub fn take(path: &Path) -> io::Result<Taken> {
        loop {
            match std::fs::metadata(path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Taken::Absent),
                Err(e) => return Err(e),
                Ok(m) if !m.is_file() => {
                    return match special_kind(m.file_type()) {
                        Some(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, refusal(path).unwrap_or_default())),
                        None => Ok(Taken::Absent),
                    };
                }
                Ok(_) => {}
            }
            // Read-write where allowed: NFS takes an exclusive lock only on a descriptor open for
            // writing.
            let opened = std::fs::OpenOptions::new().read(true).write(true).open(path).or_else(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => File::open(path),
                _ => Err(e),
            });
            let file = match opened {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Ok(Taken::Unlockable(format!("it cannot be opened ({e})")));
                }
                Err(e) => return Err(e),
            };
            use rustix::fs::{FlockOperation, flock};
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    log::info!("{} is being replaced by another kmerdb run: waiting for it to finish", path.display());
                    flock(&file, FlockOperation::LockExclusive).map_err(io::Error::from)?;
                }
                Err(e) => return Ok(Taken::Unlockable(format!("its file system refuses a lock ({e})"))),
            }
            let stamp = Stamp::of(&file.metadata()?);
            // The path may name a newer file by now (the run that held the lock renamed one over
            // it): lock that one instead.
            if std::fs::metadata(path).is_ok_and(|now| Stamp::of(&now).same_file(&stamp)) {
                return Ok(Taken::Locked(Lock { _file: file, path: path.to_path_buf(), stamp }));
            }
        }
    }

    /// The file as it was when locked.
    #[cfg(test)]
    pub(crate) fn stamp(&self) -> Stamp {
        self.stamp
    }

    /// An error ([`Changed`]) unless the path still names the locked file, unchanged.
    fn check_unchanged(&self) -> io::Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(now) if Stamp::of(&now) == self.stamp => Ok(()),
            _ => Err(io::Error::other(Changed)),
        }
    }
}

/// Renames `temp` over `dest` under a lock on `dest` (`held`, taken for the run, else one taken
/// now), after the checks of the module's description. On error `dest` is untouched and `temp`
/// is deleted.
pub(crate) fn replace(temp: tempfile::NamedTempFile, dest: &Path, held: Option<&Lock>) -> io::Result<()> {
    let symlink = std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_symlink());
    if let Some(reason) = refusal(dest) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, reason));
    }
    let taken;
    match held {
        Some(lock) => lock.check_unchanged()?,
        // A symlink itself is replaced (as `mv` does); the file it points to is not locked.
        None if symlink => {}
        None => {
            taken = Lock::take(dest)?;
            if let Taken::Unlockable(why) = &taken {
                log::debug!("cannot lock {}: {why}; replacing it without a lock", dest.display());
            }
        }
    }
    // The mode of the file replaced (a symlink's target's), locked or not.
    if let Some(m) = std::fs::metadata(dest).ok().filter(|m| m.is_file()) {
        temp.as_file().set_permissions(std::fs::Permissions::from_mode(m.permissions().mode() & 0o7777))?;
    }
    // The lock (the old file's) is released after the rename, by the caller or when `taken`
    // drops: a run waiting for it then finds the new file at the path.
    temp.persist(dest).map(drop).map_err(|e| e.error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_in(dir: &Path, text: &str) -> tempfile::NamedTempFile {
        let mut t = tempfile::NamedTempFile::new_in(dir).unwrap();
        t.write_all(text.as_bytes()).unwrap();
        t
    }

    #[test]
    fn the_replaced_files_mode_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.db");
        std::fs::write(&dest, "old").unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o600)).unwrap();
        replace(temp_in(dir.path(), "new"), &dest, None).unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert_eq!(std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_fifo_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&dest).status().unwrap().success());
        let err = replace(temp_in(dir.path(), "new"), &dest, None).unwrap_err();
        assert!(err.to_string().contains("named pipe"), "{err}");
        assert!(std::fs::symlink_metadata(&dest).unwrap().file_type().is_fifo());
        assert!(Lock::take(&dest).is_err());
    }

    /// The mode carries over when no lock can be taken too (a file the user cannot open).
    #[test]
    fn an_unlockable_files_mode_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.db");
        std::fs::write(&dest, "old").unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&dest, &link).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o640)).unwrap();
        // Through a symlink no lock is taken: the link is replaced, with its target's mode.
        replace(temp_in(dir.path(), "new"), &link, None).unwrap();
        assert_eq!(std::fs::metadata(&link).unwrap().permissions().mode() & 0o777, 0o640);
        assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    }

    /// A file rewritten in place (as `cp` does) after the run locked it is not replaced.
    #[test]
    fn a_file_changed_under_a_held_lock_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.db");
        std::fs::write(&dest, "old").unwrap();
        let lock = Lock::take(&dest).unwrap().lock().unwrap();
        std::fs::write(&dest, "rewritten by someone else").unwrap();
        let err = replace(temp_in(dir.path(), "new"), &dest, Some(&lock)).unwrap_err();
        assert!(err.to_string().contains("changed while this run read it"), "{err}");
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "rewritten by someone else");
    }

    /// A second lock on the same file waits for the first, then locks the file that replaced it.
    #[test]
    fn a_second_lock_waits_and_then_takes_the_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.db");
        std::fs::write(&dest, "first").unwrap();
        let first = Lock::take(&dest).unwrap().lock().unwrap();
        let waiter = {
            let dest = dest.clone();
            std::thread::spawn(move || {
                let lock = Lock::take(&dest).unwrap().lock().unwrap();
                let text = std::fs::read_to_string(&dest).unwrap();
                (lock.stamp(), text)
            })
        };
        // Until the waiter is blocked on the lock: /proc/locks shows a blocked request as `->`.
        let start = std::time::Instant::now();
        while !std::fs::read_to_string("/proc/locks").unwrap().lines().any(|l| l.contains("->")) {
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "the second lock never waited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        replace(temp_in(dir.path(), "second"), &dest, Some(&first)).unwrap();
        drop(first);
        let (stamp, text) = waiter.join().unwrap();
        assert_eq!(text, "second");
        assert_eq!(stamp, Stamp::of(&std::fs::metadata(&dest).unwrap()));
    }
}
