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
