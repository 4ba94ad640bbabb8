//! The files one command reads and writes, checked against each other before any work starts, so
//! that no output can replace an input, the index or another output of the same run.
//!
//! Paths are compared by what they name, not how they are spelled: a file that exists is known by
//! its device and inode (so a symlink, a hard link, `./x` and `../dir/x` all name the same file);
//! a file that does not exist yet by its folder's canonical path and its own name. Standard
//! input and output (`-`) are known by what they are open on (`fstat`): `-o r1.fq < r1.fq` is
//! refused like `-o r1.fq r1.fq`, and `-r rep.txt > rep.txt` like two outputs in one file. Existing files that are
//! not regular files (`/dev/null`, a named pipe, a terminal) are left out: writing to them replaces
//! nothing, and several outputs may share one.

use std::path::{Path, PathBuf};

/// How a command uses a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    Reads,
    Writes,
}

/// One file of a command, with the flag (or argument name) that named it.
#[derive(Debug, Clone)]
struct NamedFile {
    flag: String,
    path: PathBuf,
    usage: Use,
}

/// Two uses of one file that cannot go together: an output that names an input, or two outputs.
#[derive(Debug, thiserror::Error)]
#[error("{out_flag} {out_path} names the same file as {other_flag} {other_path}: {why}")]
pub struct PathClash {
    pub out_flag: String,
    pub out_path: PathBuf,
    pub other_flag: String,
    pub other_path: PathBuf,
    pub why: &'static str,
}

/// The files of one command; [`FilePlan::check`] refuses a plan in which an output names any other
/// file of the plan.
#[derive(Debug, Default)]
pub struct FilePlan {
    files: Vec<NamedFile>,
}

/// What a path names, for comparison.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Identity {
    /// An existing regular file or directory: (device, inode).
    Inode(u64, u64),
    /// A file that does not exist yet: its folder's canonical path joined with its name.
    Path(PathBuf),
}

impl FilePlan {
    pub fn new() -> Self {
        Self::default()
    }

    /// A file the command reads, named by `flag`.
    pub fn reads(&mut self, flag: impl Into<String>, path: &Path) -> &mut Self {
        self.files.push(NamedFile { flag: flag.into(), path: path.to_path_buf(), usage: Use::Reads });
        self
    }

    /// A file the command writes (replaces), named by `flag`.
    pub fn writes(&mut self, flag: impl Into<String>, path: &Path) -> &mut Self {
        self.files.push(NamedFile { flag: flag.into(), path: path.to_path_buf(), usage: Use::Writes });
        self
    }

    /// The first output that names the same file as an input or an earlier output, if any.
    pub fn check(&self) -> Result<(), PathClash> {
        let ids: Vec<Option<Identity>> = self.files.iter().map(|f| identity(&f.path, f.usage)).collect();
        let stdout = |f: &NamedFile| f.usage == Use::Writes && is_stdio(&f.path);
        for (i, out) in self.files.iter().enumerate().filter(|(_, f)| f.usage == Use::Writes) {
            let Some(id) = &ids[i] else { continue };
            // Every input, and every output named before this one (`-` and `-` are one stream, not
            // a clash: what may share stdout is the configs' business).
            let clash = self.files.iter().enumerate().find(|&(j, other)| {
                j != i
                    && ids[j].as_ref() == Some(id)
                    && (other.usage == Use::Reads || (j < i && !(stdout(out) && stdout(other))))
            });
            if let Some((_, other)) = clash {
                let why = match other.usage {
                    Use::Reads => "the run would overwrite what it reads",
                    Use::Writes => "two outputs cannot share a file",
                };
                return Err(PathClash {
                    out_flag: out.flag.clone(),
                    out_path: out.path.clone(),
                    other_flag: other.flag.clone(),
                    other_path: other.path.clone(),
                    why,
                });
            }
        }
        Ok(())
    }
}

fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// What `path` names, or `None` for existing files that are not regular files or directories
/// (devices, pipes, sockets). `-` is stdin or stdout (by `usage`): the regular file it is open
/// on, if any.
fn identity(path: &Path, usage: Use) -> Option<Identity> {
    if is_stdio(path) {
        let st = match usage {
            Use::Reads => rustix::fs::fstat(std::io::stdin()),
            Use::Writes => rustix::fs::fstat(std::io::stdout()),
        };
        return match st {
            Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile => {
                Some(Identity::Inode(st.st_dev, st.st_ino))
            }
            _ => None,
        };
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() || m.is_dir() => Some(inode(&m)),
        Ok(_) => None,
        Err(_) => Some(Identity::Path(resolve_missing(path))),
    }
}

#[cfg(unix)]
fn inode(m: &std::fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    Identity::Inode(m.dev(), m.ino())
}

#[cfg(not(unix))]
fn inode(_m: &std::fs::Metadata) -> Identity {
    unreachable!("kmerdb runs on Unix")
}

/// A path that does not exist (or cannot be read), made absolute: its nearest existing ancestor
/// canonicalised (symlinks followed), the rest appended with `.` and `..` resolved lexically.
fn resolve_missing(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(path)).unwrap_or_else(|_| path.to_path_buf())
    };
    let mut rest = Vec::new();
    let mut base = absolute.as_path();
    let canonical = loop {
        if let Ok(c) = std::fs::canonicalize(base) {
            break c;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            // `..` or `.` at the end: resolved below with the rest.
            (Some(parent), None) => {
                rest.push(base.components().next_back().map(|c| c.as_os_str().to_os_string()).unwrap_or_default());
                base = parent;
            }
            (None, _) => break base.to_path_buf(),
        }
    };
    let mut out = canonical;
    for part in rest.iter().rev() {
        match part.to_str() {
            Some(".") | Some("") => {}
            Some("..") => {
                out.pop();
            }
            _ => out.push(part),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(files: &[(Use, &str, &Path)]) -> FilePlan {
        let mut p = FilePlan::new();
        for &(u, flag, path) in files {
            match u {
                Use::Reads => p.reads(flag, path),
                Use::Writes => p.writes(flag, path),
            };
        }
        p
    }

    #[test]
    fn an_output_over_an_input_is_refused_however_it_is_spelled() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("in.fa"), ">a\nACGT\n").unwrap();
        std::os::unix::fs::symlink(d.join("in.fa"), d.join("link.fa")).unwrap();
        std::fs::hard_link(d.join("in.fa"), d.join("hard.fa")).unwrap();
        for spelled in
            [d.join("in.fa"), d.join("sub/../in.fa"), d.join("./in.fa"), d.join("link.fa"), d.join("hard.fa")]
        {
            let err =
                plan(&[(Use::Reads, "READS", &d.join("in.fa")), (Use::Writes, "-o", &spelled)]).check().unwrap_err();
            assert_eq!((err.out_flag.as_str(), err.other_flag.as_str()), ("-o", "READS"), "{spelled:?}");
            assert!(err.to_string().contains("overwrite what it reads"), "{err}");
        }
    }

    #[test]
    fn two_outputs_that_do_not_exist_yet_clash_by_resolved_path() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        let err =
            plan(&[(Use::Writes, "-o", &d.join("out.txt")), (Use::Writes, "--report", &d.join("sub/../out.txt"))])
                .check()
                .unwrap_err();
        assert_eq!((err.out_flag.as_str(), err.other_flag.as_str()), ("--report", "-o"));
        // Outputs in a folder that does not exist yet are still compared.
        let err = plan(&[(Use::Writes, "-o", &d.join("new/x")), (Use::Writes, "-r", &d.join("new/./x"))])
            .check()
            .unwrap_err();
        assert_eq!(err.other_flag, "-o");
    }

    #[test]
    fn distinct_files_stdio_and_devices_pass() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("in.fa"), ">a\nACGT\n").unwrap();
        plan(&[
            (Use::Reads, "READS", &d.join("in.fa")),
            (Use::Reads, "READS", Path::new("-")),
            (Use::Writes, "-o", Path::new("-")),
            (Use::Writes, "--report", Path::new("/dev/null")),
            (Use::Writes, "--abundance", Path::new("/dev/null")),
            (Use::Writes, "--mpa", &d.join("out.mpa")),
            (Use::Writes, "--cami", &d.join("out.cami")),
        ])
        .check()
        .unwrap();
        // Two inputs may be one file.
        plan(&[(Use::Reads, "-1", &d.join("in.fa")), (Use::Reads, "-2", &d.join("in.fa"))]).check().unwrap();
    }
}
