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
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Stamp {
    pub fn of(m: &Metadata) -> Self {
        Self { dev: m.dev(), ino: m.ino(), len: m.len(), mtime: (m.mtime(), m.mtime_nsec()) }
    }

    fn same_file(&self, other: &Stamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// What kind of file `t` is, in words, when it is not a regular file or a folder.
pub fn special_kind(t: FileType) -> Option<&'static str> {
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
    mode: u32,
}

impl Lock {
    /// Locks the file at `path`, waiting (with an info line) while another kmerdb run holds it;
    /// `None` when nothing is there. Errors when `path` is a device, pipe or socket.
    pub fn take(path: &Path) -> io::Result<Option<Lock>> {
        loop {
            match std::fs::metadata(path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
                Ok(m) if !m.is_file() => {
                    return match special_kind(m.file_type()) {
                        Some(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, refusal(path).unwrap_or_default())),
                        None => Ok(None),
                    };
                }
                Ok(_) => {}
            }
            let file = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                // A file the user may replace but not read (mode 0200): replaced unlocked, as
                // before locks.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
                Err(e) => return Err(e),
            };
            use rustix::fs::{FlockOperation, flock};
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    log::info!("{} is being replaced by another kmerdb run: waiting for it to finish", path.display());
                    flock(&file, FlockOperation::LockExclusive).map_err(io::Error::from)?;
                }
                // A file system without locks: the file is replaced unlocked, as before locks.
                Err(e) => {
                    log::debug!("cannot lock {} ({e}): replacing it without a lock", path.display());
                    return Ok(None);
                }
            }
            let locked = file.metadata()?;
            let stamp = Stamp::of(&locked);
            // The path may name a newer file by now (the run that held the lock renamed one over
            // it): lock that one instead.
            if std::fs::metadata(path).is_ok_and(|now| Stamp::of(&now).same_file(&stamp)) {
                let mode = locked.permissions().mode() & 0o7777;
                return Ok(Some(Lock { _file: file, path: path.to_path_buf(), stamp, mode }));
            }
        }
    }

    /// The file as it was when locked.
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }

    /// An error unless the path still names the locked file, unchanged.
    fn check_unchanged(&self) -> io::Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(now) if Stamp::of(&now) == self.stamp => Ok(()),
            _ => Err(io::Error::other(
                "it changed while this run read it (another program rewrote or replaced it), so this run's result, made from the old file, was not written: run the command again",
            )),
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
    let lock = match held {
        Some(lock) => {
            lock.check_unchanged()?;
            Some(lock)
        }
        // A symlink itself is replaced (as `mv` does); the file it points to is not locked.
        None if symlink => None,
        None => {
            taken = Lock::take(dest)?;
            taken.as_ref()
        }
    };
    if let Some(lock) = lock {
        temp.as_file().set_permissions(std::fs::Permissions::from_mode(lock.mode))?;
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

    /// A file rewritten in place (as `cp` does) after the run locked it is not replaced.
    #[test]
    fn a_file_changed_under_a_held_lock_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.db");
        std::fs::write(&dest, "old").unwrap();
        let lock = Lock::take(&dest).unwrap().unwrap();
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
        let first = Lock::take(&dest).unwrap().unwrap();
        let waiter = {
            let dest = dest.clone();
            std::thread::spawn(move || {
                let lock = Lock::take(&dest).unwrap().unwrap();
                let text = std::fs::read_to_string(&dest).unwrap();
                (lock.stamp(), text)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        replace(temp_in(dir.path(), "second"), &dest, Some(&first)).unwrap();
        drop(first);
        let (stamp, text) = waiter.join().unwrap();
        assert_eq!(text, "second");
        assert_eq!(stamp, Stamp::of(&std::fs::metadata(&dest).unwrap()));
    }
}
