//! The workflows in `workflows/`, run for real on `data/`.

use super::{data, kmerdb};
use std::path::Path;
use std::process::Command;

/// `workflows/snakemake` with Snakemake (from PyPI; CI installs it), 2 cores, 2 index parts, on
/// the bundled samples: every output is made, and the merged parts give what one index of all
/// the genomes gives.
#[test]
fn snakemake_workflow_runs_on_the_bundled_data() {
    let found = Command::new("snakemake").arg("--version").output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "this test runs Snakemake: pip install snakemake (.ci/run does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let reads = data().join("reads");
    std::fs::write(
        d.join("samples.tsv"),
        format!(
            "sample\tr1\tr2\nbundled\t{}\t{}\nsingle\t{}\t\n",
            reads.join("sample_R1.fq.gz").display(),
            reads.join("sample_R2.fq.gz").display(),
            reads.join("single.fa").display()
        ),
    )
    .unwrap();
    let status = Command::new("snakemake")
        .arg("-s")
        .arg(repo.join("workflows/snakemake/Snakefile"))
        .arg("--directory")
        .arg(d)
        .args(["--cores", "2", "--quiet", "--config"])
        .arg(format!("genomes={}", data().join("genomes").display()))
        .arg(format!("taxonomy={}", data().join("taxonomy").display()))
        .arg(format!("seqid2taxid={}", data().join("seqid2taxid.map").display()))
        .arg(format!("samples={}", d.join("samples.tsv").display()))
        .arg(format!("kmerdb={}", env!("CARGO_BIN_EXE_kmerdb")))
        .arg("outdir=results")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .status()
        .unwrap();
    assert!(status.success(), "snakemake failed");
    let out = d.join("results");
    for f in [
        "index/part1.db",
        "index/part2.db",
        "reports/bundled.kreport",
        "reports/single.kreport",
        "merged/bundled.kraken.gz",
        "merged/single.abundance.tsv",
        "logs/merge.bundled.log",
    ] {
        assert!(out.join(f).is_file(), "the workflow did not make {f}");
    }
    // One index of all the genomes, for comparison.
    super::build_data(&d.join("one.db")).arg("-q").assert().success();
    kmerdb()
        .args(["classify", "-q", "-d"])
        .arg(d.join("one.db"))
        .arg("-1")
        .arg(reads.join("sample_R1.fq.gz"))
        .arg("-2")
        .arg(reads.join("sample_R2.fq.gz"))
        .arg("--report")
        .arg(d.join("one.kreport"))
        .arg("-o")
        .arg(d.join("one.kraken"))
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(out.join("reports/bundled.kreport")).unwrap(),
        std::fs::read_to_string(d.join("one.kreport")).unwrap()
    );
    assert_eq!(
        super::gunzip(&out.join("merged/bundled.kraken.gz")),
        std::fs::read_to_string(d.join("one.kraken")).unwrap()
    );
}
