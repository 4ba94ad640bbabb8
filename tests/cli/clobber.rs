//! No output replaces an input, the index, or another output (issue 14, part 1): every command
//! checks its files before any work and exits 2 naming both flags, leaving every file as it was.

use crate::{build_data, data, kmerdb, listing};
use std::path::PathBuf;

/// A folder with the index of `data/`, a copy of the single-end reads (`in.fa`) and a symlink to
/// it (`link.fa`).
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        build_data(&dir.path().join("d.db")).arg("-q").assert().success();
        std::fs::copy(data().join("reads/single.fa"), dir.path().join("in.fa")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("in.fa"), dir.path().join("link.fa")).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Every file's bytes, to check that a refused run changed nothing.
    fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        listing(self.dir.path())
            .into_iter()
            .map(|n| {
                let bytes = std::fs::read(self.path(&n)).unwrap_or_default();
                (n, bytes)
            })
            .collect()
    }

    /// `kmerdb ARGS` run in the folder must exit 2, name both flags and leave every file as it was.
    fn refused(&self, args: &[&str], flags: [&str; 2]) {
        let before = self.snapshot();
        let out = kmerdb().current_dir(self.dir.path()).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} must be refused with exit 2: {stderr}");
        for f in flags {
            assert!(stderr.contains(f), "{args:?}: the message does not name {f}: {stderr}");
        }
        assert!(stderr.contains("names the same file"), "{stderr}");
        assert!(self.snapshot() == before, "{args:?}: a refused run changed files");
    }
}

#[test]
fn classify_outputs_never_replace_reads_the_index_or_each_other() {
    let s = Setup::new();
    let dir = s.dir.path().file_name().unwrap().to_str().unwrap().to_owned();
    let spelled = format!("../{dir}/in.fa");
    // The issue's cases: the reads, and the index.
    s.refused(&["classify", "-d", "d.db", "in.fa", "-o", "in.fa"], ["-o/--output", "READS"]);
    s.refused(&["classify", "-d", "d.db", "in.fa", "-o", "d.db"], ["-o/--output", "-d/--db"]);
    // However the same file is spelled: ./, ../dir/, a symlink as the input or as the output.
    s.refused(&["classify", "-d", "./d.db", "in.fa", "-r", "d.db"], ["-r/--report", "-d/--db"]);
    s.refused(&["classify", "-d", "d.db", "in.fa", "--abundance", &spelled], ["--abundance", "READS"]);
    s.refused(&["classify", "-d", "d.db", "link.fa", "--mpa", "in.fa"], ["--mpa", "READS"]);
    s.refused(&["classify", "-d", "d.db", "in.fa", "--cami", "link.fa"], ["--cami", "READS"]);
    // Every output flag, against the reads.
    for flag in ["--krona", "--candidates-out", "--classified-out", "--unclassified-out", "--html"] {
        s.refused(&["classify", "-d", "d.db", "in.fa", flag, "./in.fa"], [flag, "READS"]);
    }
    // Two outputs of one run.
    s.refused(
        &["classify", "-d", "d.db", "in.fa", "-o", "out.txt", "--report", "./out.txt"],
        ["-r/--report", "-o/--output"],
    );
    s.refused(&["classify", "-d", "d.db", "in.fa", "--krona", "k.txt", "--html", "k.txt"], ["--html", "--krona"]);
}

#[test]
fn paired_reads_outputs_are_checked_mate_by_mate() {
    let s = Setup::new();
    let (r1, r2) = (data().join("reads/sample_R1.fq.gz"), data().join("reads/sample_R2.fq.gz"));
    std::fs::copy(&r1, s.path("c_1.fq.gz")).unwrap();
    std::fs::copy(&r2, s.path("c_2.fq.gz")).unwrap();
    let pairs = ["classify", "-d", "d.db", "-1", "c_1.fq.gz", "-2", "c_2.fq.gz"];
    // `c#.fq.gz` is c_1.fq.gz and c_2.fq.gz for pairs: the reads themselves.
    s.refused(&[&pairs[..], &["--classified-out", "c#.fq.gz"]].concat(), ["--classified-out", "-1"]);
    s.refused(
        &[&pairs[..], &["--classified-out", "o#.fq", "--unclassified-out", "o#.fq"]].concat(),
        ["--unclassified-out", "--classified-out"],
    );
    s.refused(
        &[&pairs[..], &["--unclassified-out", "u#.fq", "-o", "u_2.fq"]].concat(),
        ["-o/--output", "--unclassified-out"],
    );
}

#[test]
fn sample_sheets_outputs_never_meet_an_input_the_sheet_or_another_sample() {
    let s = Setup::new();
    std::fs::copy(s.path("in.fa"), s.path("b.fa")).unwrap();
    // Sample a's output would be sample b's reads.
    std::fs::write(s.path("s.tsv"), "a\tin.fa\nb\tb.fa\n").unwrap();
    s.refused(
        &["classify", "-d", "d.db", "--samples", "s.tsv", "-o", "{sample}.fa"],
        ["-o/--output (sample b)", "(sample b)"],
    );
    // One template, the same file for two samples: `{sample}.r.txt` of a and `{sample}.txt` of a.r.
    std::fs::write(s.path("t.tsv"), "a\tin.fa\na.r\tb.fa\n").unwrap();
    s.refused(
        &["classify", "-d", "d.db", "--samples", "t.tsv", "-o", "{sample}.r.txt", "-r", "{sample}.txt"],
        ["-r/--report (sample a.r)", "-o/--output (sample a)"],
    );
    // An output that is the sheet itself.
    std::fs::write(s.path("u.tsv"), "u\tin.fa\n").unwrap();
    s.refused(
        &["classify", "-d", "d.db", "--samples", "u.tsv", "-r", "{sample}.tsv"],
        ["-r/--report (sample u)", "--samples"],
    );
    // And a good sheet still runs.
    kmerdb()
        .current_dir(s.dir.path())
        .args(["classify", "-q", "-d", "d.db", "--samples", "s.tsv", "-r", "{sample}.kreport"])
        .assert()
        .success();
    assert!(s.path("a.kreport").is_file() && s.path("b.kreport").is_file());
}

#[test]
fn build_never_replaces_its_inputs_or_a_file_that_is_not_an_index() {
    let s = Setup::new();
    let genomes = data().join("genomes");
    let genome = crate::genome_files()[0].clone();
    let copy = s.path("g.fna.gz");
    std::fs::copy(&genome, &copy).unwrap();
    std::os::unix::fs::symlink(&copy, s.path("glink.db")).unwrap();
    std::fs::copy(data().join("seqid2taxid.map"), s.path("map.tsv")).unwrap();
    let tax = data().join("taxonomy");
    let (tax, genomes) = (tax.to_str().unwrap(), genomes.to_str().unwrap());
    s.refused(&["build", "-d", "g.fna.gz", "g.fna.gz"], ["-d/--db", "INPUT"]);
    s.refused(&["build", "-d", "glink.db", "g.fna.gz"], ["-d/--db", "INPUT"]);
    s.refused(
        &["build", "-d", "map.tsv", genomes, "--taxonomy", tax, "--seqid2taxid", "map.tsv"],
        ["-d/--db", "--seqid2taxid"],
    );
    let nodes = format!("{tax}/nodes.dmp");
    s.refused(&["build", "-d", &nodes, genomes, "--taxonomy", tax], ["-d/--db", "--taxonomy"]);
    // A genome folder given as input: its files are the inputs.
    std::fs::create_dir(s.path("gdir")).unwrap();
    std::fs::copy(&genome, s.path("gdir/x.fa.gz")).unwrap();
    s.refused(&["build", "-d", "gdir/x.fa.gz", "gdir"], ["-d/--db", "INPUT"]);
    // Not an input, but not an index either: the reads of another run.
    let before = s.snapshot();
    let out = kmerdb().current_dir(s.dir.path()).args(["build", "-d", "in.fa", "g.fna.gz"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in.fa") && stderr.contains("not a kmerdb index"), "{stderr}");
    assert!(s.snapshot() == before);
    // An older index is replaced as before.
    kmerdb().current_dir(s.dir.path()).args(["build", "-q", "-d", "d.db", "g.fna.gz"]).assert().success();
}

#[test]
fn merge_outputs_never_replace_its_candidates_files() {
    let s = Setup::new();
    kmerdb()
        .current_dir(s.dir.path())
        .args(["classify", "-q", "-d", "d.db", "in.fa", "--candidates-out", "p1.cand"])
        .assert()
        .success();
    s.refused(&["merge", "p1.cand", "-o", "p1.cand"], ["-o/--output", "CANDIDATES"]);
    s.refused(&["merge", "p1.cand", "--report", "./p1.cand"], ["--report", "CANDIDATES"]);
    s.refused(&["merge", "p1.cand", "--report", "r.txt", "--mpa", "r.txt"], ["--mpa", "--report"]);
}

/// Outputs that are not regular files (`/dev/null`) may be shared: nothing is replaced.
#[test]
fn outputs_to_dev_null_may_be_shared() {
    let s = Setup::new();
    kmerdb()
        .current_dir(s.dir.path())
        .args(["classify", "-q", "-d", "d.db", "in.fa", "-o", "/dev/null", "-r", "/dev/null", "--mpa", "/dev/null"])
        .assert()
        .success();
}

/// A device node made in the test's folder (never the machine's own `/dev/null`): `mknod` needs
/// root, as CI and the development machines run; elsewhere the named pipe cases still run.
fn device_node(path: &std::path::Path) -> bool {
    let made = std::process::Command::new("mknod").arg(path).args(["c", "1", "3"]).status().unwrap().success();
    if !made {
        eprintln!("mknod {} failed (not root?): the character device case is skipped", path.display());
    }
    made
}

fn is_special(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(path).unwrap().file_type();
    t.is_char_device() || t.is_fifo()
}

/// Issue 30.1: `build -d /dev/null` renamed the index over the device node, and `update -o` and
/// `bracken-prep -o` did the same; a named pipe as `-d` hung the build. An index now refuses them
/// (exit 2, naming the file) and bracken-prep writes into them, as classify does.
#[test]
fn device_nodes_and_pipes_are_never_replaced() {
    let s = Setup::new();
    let mut specials = vec!["pipe"];
    assert!(std::process::Command::new("mkfifo").arg(s.path("pipe")).status().unwrap().success());
    if device_node(&s.path("null")) {
        specials.push("null");
    }
    let genomes = data().join("genomes");
    let genomes = genomes.to_str().unwrap();
    std::fs::write(s.path("remove.txt"), "NC_001416.1\n").unwrap();
    for special in specials {
        for args in [
            vec!["build", "-d", special, genomes],
            vec!["update", "-d", "d.db", "--remove-targets", "remove.txt", "-o", special],
        ] {
            let out = kmerdb()
                .current_dir(s.dir.path())
                .args(&args)
                .timeout(std::time::Duration::from_secs(60))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(special) && stderr.contains("not a file"), "{args:?}: {stderr}");
            assert!(is_special(&s.path(special)), "{args:?} replaced {special}");
        }
    }
    // bracken-prep streams into a device, as classify does.
    if s.path("null").exists() {
        kmerdb()
            .current_dir(s.dir.path())
            .args(["bracken-prep", "-q", "-d", "d.db", "-r", "100", "--step", "50", "-o", "null", genomes])
            .assert()
            .success();
        assert!(is_special(&s.path("null")), "bracken-prep replaced the device");
    }
    assert!(crate::listing(s.dir.path()).iter().all(|n| !n.contains(".kmerdb-")), "temporary files left");
}

/// Issue 30.3: `classify - -o r1.fq < r1.fq` replaced the reads it was reading: stdin is compared
/// by the file it is open on, as any named input (and stdout, when it is a file, with the inputs).
#[test]
fn an_output_over_the_file_on_stdin_is_refused() {
    let s = Setup::new();
    let stdin_file = |name: &str| std::fs::File::open(s.path(name)).unwrap();
    for (args, flags) in [
        (vec!["classify", "-d", "d.db", "-", "-o", "in.fa"], ["-o/--output", "READS"]),
        (vec!["classify", "-d", "d.db", "-", "-o", "link.fa"], ["-o/--output", "READS"]),
        (vec!["build", "-d", "in.fa", "-"], ["-d/--db", "INPUT"]),
    ] {
        let before = s.snapshot();
        let out =
            crate::kmerdb_process().current_dir(s.dir.path()).args(&args).stdin(stdin_file("in.fa")).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(flags.iter().all(|f| stderr.contains(f)), "{args:?}: {stderr}");
        assert!(s.snapshot() == before, "{args:?} changed files");
    }
    // Stdout appending to the reads being read.
    let before = s.snapshot();
    let append = std::fs::OpenOptions::new().append(true).open(s.path("in.fa")).unwrap();
    let out = crate::kmerdb_process()
        .current_dir(s.dir.path())
        .args(["classify", "-d", "d.db", "in.fa"])
        .stdout(append)
        .output();
    assert_eq!(out.unwrap().status.code(), Some(2));
    assert!(s.snapshot() == before);
    // Stdout redirected to a file that is also an output: the rename would unlink the lines.
    let before = s.snapshot();
    let report = std::fs::File::create(s.path("r.kreport")).unwrap();
    let out = crate::kmerdb_process()
        .current_dir(s.dir.path())
        .args(["classify", "-d", "d.db", "in.fa", "-r", "r.kreport"])
        .stdout(report)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("two outputs cannot share a file"));
    std::fs::remove_file(s.path("r.kreport")).unwrap();
    assert!(s.snapshot() == before);
    // Stdin from another file is fine.
    std::fs::copy(s.path("in.fa"), s.path("other.fa")).unwrap();
    let ok = crate::kmerdb_process()
        .current_dir(s.dir.path())
        .args(["classify", "-q", "-d", "d.db", "-", "-o", "in.kraken"])
        .stdin(stdin_file("other.fa"))
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Issue 30.11: rebuilding or updating a 0600 index left a 0644 file; every output keeps the mode
/// of the file it replaces.
#[test]
fn replacing_a_file_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let s = Setup::new();
    let mode = |name: &str| std::fs::metadata(s.path(name)).unwrap().permissions().mode() & 0o777;
    let set = |name: &str, m: u32| std::fs::set_permissions(s.path(name), std::fs::Permissions::from_mode(m)).unwrap();
    set("d.db", 0o600);
    build_data(&s.path("d.db")).arg("-q").assert().success();
    assert_eq!(mode("d.db"), 0o600, "rebuilt");
    std::fs::write(s.path("remove.txt"), "NC_001416.1\n").unwrap();
    set("d.db", 0o640);
    kmerdb()
        .current_dir(s.dir.path())
        .args(["update", "-q", "-d", "d.db", "--remove-targets", "remove.txt"])
        .assert()
        .success();
    assert_eq!(mode("d.db"), 0o640, "updated in place");
    std::fs::write(s.path("r.kreport"), "old").unwrap();
    set("r.kreport", 0o604);
    kmerdb()
        .current_dir(s.dir.path())
        .args(["classify", "-q", "-d", "d.db", "in.fa", "-o", "/dev/null", "-r", "r.kreport"])
        .assert()
        .success();
    assert_eq!(mode("r.kreport"), 0o604, "a classify output");
}
