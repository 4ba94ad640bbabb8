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

/// A process's script block from a Nextflow module, rendered: `${expr}` from `vars` (any other
/// expression fails the test), Groovy's `\\` as `\`.
fn render_script(module: &str, vars: &[(&str, &str)]) -> String {
    let start = module.find("\n    script:").expect("a script: block");
    let block = &module[start..];
    for convention in ["def args = task.ext.args ?: ''", "def prefix = task.ext.prefix ?: \"${meta.id}\""] {
        assert!(block.contains(convention), "the script block lacks `{convention}`");
    }
    let open = block.find("\"\"\"").expect("a script template") + 3;
    let close = open + block[open..].find("\"\"\"").expect("the template's end");
    let mut t = &block[open..close];
    let mut out = String::new();
    while let Some(i) = t.find("${") {
        out.push_str(&t[..i]);
        let j = t[i..].find('}').expect("a closed ${...}");
        let expr = &t[i + 2..i + j];
        let value = vars.iter().find(|(k, _)| *k == expr).unwrap_or_else(|| panic!("no value for ${{{expr}}}")).1;
        out.push_str(value);
        t = &t[i + j + 1..];
    }
    out.push_str(t);
    out.replace("\\\\", "\\")
}

/// Runs a rendered script with bash in `work` (a process's work directory), kmerdb on the PATH.
fn run_script(script: &str, work: &Path) {
    let bin = Path::new(env!("CARGO_BIN_EXE_kmerdb")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(work)
        .env("PATH", path)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap();
    assert!(out.status.success(), "script failed:\n{script}\n{}", String::from_utf8_lossy(&out.stderr));
}

fn stage(work: &Path, name: &str, target: &Path) {
    std::os::unix::fs::symlink(target, work.join(name)).unwrap();
}

/// The nf-core-style modules in `workflows/nextflow/modules/kmerdb` (Nextflow itself cannot be
/// installed here): each process's script block is rendered for `data/` inputs as Nextflow would
/// stage them, and run with bash against the real binary, building a 2-part index, classifying
/// a paired and a single-end sample against both parts and merging them; the merge gives one
/// index's report. Each module's versions command prints one version.
#[test]
fn nextflow_modules_run_their_commands() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/nextflow/modules/kmerdb");
    let module = |name: &str| std::fs::read_to_string(repo.join(name).join("main.nf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reads = data().join("reads");
    for name in ["build", "classify", "merge"] {
        let m = module(name);
        for needed in ["tuple val(meta)", "topic: versions", "stub:", "task.ext.when"] {
            assert!(m.contains(needed), "{name}: no `{needed}`");
        }
        let eval = m.split("eval('").nth(1).and_then(|s| s.split("')").next()).expect("a versions eval");
        let work = dir.path().join(format!("versions-{name}"));
        std::fs::create_dir(&work).unwrap();
        let bin = Path::new(env!("CARGO_BIN_EXE_kmerdb")).parent().unwrap();
        let out = Command::new("bash")
            .args(["-c", eval])
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .output()
            .unwrap();
        let version = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success() && version.trim() == env!("CARGO_PKG_VERSION"), "{name}: version '{version}'");
    }
    for part in 1..=2 {
        let work = dir.path().join(format!("build{part}"));
        std::fs::create_dir(&work).unwrap();
        stage(&work, "genomes", &data().join("genomes"));
        stage(&work, "taxonomy", &data().join("taxonomy"));
        stage(&work, "seqid2taxid.map", &data().join("seqid2taxid.map"));
        let (prefix, args) = (format!("part{part}"), format!("--partition {part}/2"));
        let script = render_script(
            &module("build"),
            &[
                ("genomes", "genomes"),
                ("taxonomy", "taxonomy"),
                ("seqid2taxid", "seqid2taxid.map"),
                ("prefix", &prefix),
                ("args", &args),
                ("task.cpus", "2"),
            ],
        );
        run_script(&script, &work);
        assert!(work.join(format!("part{part}.db")).is_file());
    }
    for (sample, files, input) in [
        ("bundled", vec!["sample_R1.fq.gz", "sample_R2.fq.gz"], "-1 sample_R1.fq.gz -2 sample_R2.fq.gz"),
        ("single", vec!["single.fa"], "single.fa"),
    ] {
        let mut candidates = Vec::new();
        for part in 1..=2 {
            let work = dir.path().join(format!("classify-{sample}-{part}"));
            std::fs::create_dir(&work).unwrap();
            for f in &files {
                stage(&work, f, &reads.join(f));
            }
            stage(&work, "part.db", &dir.path().join(format!("build{part}/part{part}.db")));
            let prefix = format!("{sample}.part{part}");
            let script = render_script(
                &module("classify"),
                &[("db", "part.db"), ("input", input), ("prefix", &prefix), ("args", ""), ("task.cpus", "2")],
            );
            run_script(&script, &work);
            for ext in ["kraken.gz", "kreport", "abundance.tsv", "cand.gz"] {
                assert!(work.join(format!("{prefix}.{ext}")).is_file(), "classify made no .{ext}");
            }
            candidates.push(work.join(format!("{prefix}.cand.gz")));
        }
        let work = dir.path().join(format!("merge-{sample}"));
        std::fs::create_dir(&work).unwrap();
        let names: Vec<String> = (1..=2).map(|p| format!("{sample}.part{p}.cand.gz")).collect();
        for (n, c) in names.iter().zip(&candidates) {
            stage(&work, n, c);
        }
        let joined = names.join(" ");
        let script = render_script(
            &module("merge"),
            &[("candidates", &joined), ("meta.id", sample), ("prefix", sample), ("args", "")],
        );
        run_script(&script, &work);
        for ext in ["kraken.gz", "kreport", "abundance.tsv", "cami"] {
            assert!(work.join(format!("{sample}.{ext}")).is_file(), "merge made no .{ext}");
        }
        if sample == "bundled" {
            super::build_data(&dir.path().join("one.db")).arg("-q").assert().success();
            kmerdb()
                .args(["classify", "-q", "-d"])
                .arg(dir.path().join("one.db"))
                .arg("-1")
                .arg(reads.join("sample_R1.fq.gz"))
                .arg("-2")
                .arg(reads.join("sample_R2.fq.gz"))
                .arg("--report")
                .arg(dir.path().join("one.kreport"))
                .assert()
                .success();
            assert_eq!(
                std::fs::read_to_string(work.join("bundled.kreport")).unwrap(),
                std::fs::read_to_string(dir.path().join("one.kreport")).unwrap()
            );
        }
    }
}
