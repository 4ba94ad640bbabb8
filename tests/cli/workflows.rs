//! The workflows in `workflows/`, run for real on `data/`.

use super::{data, kmerdb};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `workflows/snakemake` with Snakemake (from PyPI; CI installs it), 2 cores, 2 index parts, on
/// the bundled samples: `snakemake --lint` finds nothing, every output is made, the merged parts
/// give what one index of all the genomes gives, and the final MultiQC report (MultiQC from the
/// report-tools virtualenv, as in `report_tools`) names both samples. The rules' conda
/// environments pin this version of kmerdb and the MultiQC of `scripts/report-tools.txt`.
#[test]
fn snakemake_workflow_runs_on_the_bundled_data() {
    let found = Command::new("snakemake").arg("--version").output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "this test runs Snakemake: pip install snakemake (.ci/run does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
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
    let lint = snakemake(d, &[]).arg("--lint").output().unwrap();
    assert!(
        lint.status.success(),
        "snakemake --lint:\n{}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    run_snakemake(d, &[]);
    let out = d.join("results");
    for f in [
        "index/part1.db",
        "index/part2.db",
        "reports/bundled.kreport",
        "reports/single.kreport",
        "merged/bundled.kraken.gz",
        "merged/single.abundance.tsv",
        "logs/merge.bundled.log",
        "multiqc/multiqc_report.html",
        "logs/multiqc.log",
    ] {
        assert!(out.join(f).is_file(), "the workflow did not make {f}");
    }
    let json = std::fs::read_to_string(out.join("multiqc/multiqc_data/multiqc_data.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let kraken = json["report_general_stats_data"]["kraken"].as_object().expect("MultiQC's Kraken stats");
    assert_eq!(kraken.keys().collect::<Vec<_>>(), ["bundled", "single"], "MultiQC's samples");
    let html = std::fs::read_to_string(out.join("multiqc/multiqc_report.html")).unwrap();
    assert!(html.contains("bundled") && html.contains("single"), "the MultiQC report names the samples");
    let envs = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/snakemake/envs");
    let kmerdb_env = std::fs::read_to_string(envs.join("kmerdb.yaml")).unwrap();
    assert!(kmerdb_env.contains(&format!("- kmerdb ={}\n", env!("CARGO_PKG_VERSION"))), "envs/kmerdb.yaml: pin");
    let pins = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/report-tools.txt")).unwrap();
    let tested = pins.lines().find_map(|l| l.strip_prefix("multiqc==")).expect("report-tools.txt pins MultiQC");
    let multiqc_env = std::fs::read_to_string(envs.join("multiqc.yaml")).unwrap();
    assert!(multiqc_env.contains(&format!("- multiqc ={tested}\n")), "envs/multiqc.yaml: pin MultiQC {tested}");
    // One index of all the genomes, for comparison.
    super::build_data(&d.join("one.db")).arg("-q").assert().success();
    super::classify_pairs(&d.join("one.db"))
        .arg("-q")
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

/// Snakemake on `workflows/snakemake` in `d`, on the bundled genomes with `d/samples.tsv`, with
/// `configfiles` after the workflow's own; MultiQC (from the report-tools virtualenv) is on the
/// PATH after everything else.
fn snakemake(d: &Path, configfiles: &[PathBuf]) -> Command {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let multiqc = super::report_tools::tool("multiqc");
    let mut cmd = Command::new("snakemake");
    cmd.arg("-s").arg(repo.join("workflows/snakemake/Snakefile")).arg("--directory").arg(d);
    if !configfiles.is_empty() {
        cmd.arg("--configfile").args(configfiles);
    }
    cmd.arg("--config")
        .arg(format!("genomes={}", data().join("genomes").display()))
        .arg(format!("taxonomy={}", data().join("taxonomy").display()))
        .arg(format!("seqid2taxid={}", data().join("seqid2taxid.map").display()))
        .arg(format!("samples={}", d.join("samples.tsv").display()))
        .arg(format!("kmerdb={}", env!("CARGO_BIN_EXE_kmerdb")))
        .arg("outdir=results")
        .env("PATH", format!("{}:{}", std::env::var("PATH").unwrap_or_default(), multiqc.parent().unwrap().display()))
        .env("SOURCE_DATE_EPOCH", "1700000000");
    cmd
}

/// A sample sheet of the bundled read pairs (sample `bundled`) at `d/samples.tsv`.
fn write_bundled_sheet(d: &Path) {
    let reads = data().join("reads");
    let (r1, r2) = (reads.join("sample_R1.fq.gz"), reads.join("sample_R2.fq.gz"));
    std::fs::write(d.join("samples.tsv"), format!("sample\tr1\tr2\nbundled\t{}\t{}\n", r1.display(), r2.display()))
        .unwrap();
}

/// On a machine with only Snakemake (no MultiQC on the PATH, no --use-conda) the README's command
/// runs: the default `multiqc: auto` leaves the MultiQC report out and says why; `multiqc: true`
/// asks for it and fails without MultiQC.
#[test]
fn snakemake_workflow_runs_without_multiqc() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_bundled_sheet(d);
    // The PATH without MultiQC: Snakemake's own folder and the system's.
    let snakemake_bin = Command::new("sh").args(["-c", "command -v snakemake"]).output().unwrap();
    let snakemake_bin = PathBuf::from(String::from_utf8(snakemake_bin.stdout).unwrap().trim());
    let path = format!("{}:/usr/bin:/bin", snakemake_bin.parent().unwrap().display());
    let which = Command::new("sh").args(["-c", "command -v multiqc"]).env("PATH", &path).output().unwrap();
    assert!(!which.status.success(), "multiqc is on {path}: this test needs a PATH without it");
    let out = snakemake(d, &[]).args(["--cores", "2", "--quiet"]).env("PATH", &path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "snakemake without MultiQC failed:\n{stderr}");
    assert!(stderr.contains("without a MultiQC report"), "{stderr}");
    assert!(d.join("results/reports/bundled.kreport").is_file() && !d.join("results/multiqc").exists());
    // (A second --config would replace the first: the setting goes in a config file.)
    let forced_config = d.join("multiqc.yaml");
    std::fs::write(&forced_config, "multiqc: true\n").unwrap();
    let forced = snakemake(d, &[forced_config]).args(["--cores", "2", "--quiet"]).env("PATH", &path).output().unwrap();
    let stderr = String::from_utf8_lossy(&forced.stderr);
    assert!(!forced.status.success(), "multiqc: true without MultiQC succeeded");
    assert!(stderr.contains("multiqc --force"), "not the MultiQC step that failed: {stderr}");
}

/// Runs [`snakemake`] with 2 cores; panics if it fails.
fn run_snakemake(d: &Path, configfiles: &[PathBuf]) {
    let status = snakemake(d, configfiles).args(["--cores", "2", "--quiet"]).status().unwrap();
    assert!(status.success(), "snakemake failed");
}

/// The workflow's update step: phage lambda removed from the part that holds it and a new
/// genome (VDV1's sequence under lambda's taxid) added to the last part; merged, the updated
/// parts give what one index of the resulting genomes gives.
#[test]
fn snakemake_workflow_updates_the_parts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_bundled_sheet(d);
    let vdv1 = super::gunzip(&data().join("genomes/VDV1.fna.gz"));
    let sequence: String = vdv1.lines().skip(1).collect();
    let added = d.join("added.fa");
    std::fs::write(&added, format!(">VDV1_as_lambda kraken:taxid|10710\n{sequence}\n")).unwrap();
    std::fs::write(d.join("removed.txt"), "NC_001416.1\n").unwrap();
    let config = d.join("update.yaml");
    std::fs::write(
        &config,
        format!("update:\n  add: {}\n  remove_targets: {}\n", added.display(), d.join("removed.txt").display()),
    )
    .unwrap();
    run_snakemake(d, &[config]);
    let out = d.join("results");
    for f in ["index/part1.updated.db", "index/part2.updated.db", "logs/update.part2.log"] {
        assert!(out.join(f).is_file(), "the workflow did not make {f}");
    }
    let removed: String =
        (1..=2).map(|p| std::fs::read_to_string(out.join(format!("index/part{p}.removed.txt"))).unwrap()).collect();
    assert_eq!(removed, "NC_001416.1\n", "lambda is removed from exactly one part");

    let one = one_index_report(d, added);
    assert_eq!(std::fs::read_to_string(out.join("reports/bundled.kreport")).unwrap(), one);
    let targets = |p: u32| {
        let info = kmerdb().arg("info").arg(out.join(format!("index/part{p}.updated.db"))).output().unwrap();
        String::from_utf8(info.stdout).unwrap()
    };
    assert!(targets(2).contains("VDV1_as_lambda\t10710"), "the last part takes the added genome");
    assert!(!targets(1).contains("NC_001416.1") && !targets(2).contains("NC_001416.1"), "lambda is gone");
}

/// A process's script or stub block from a Nextflow module, rendered: `${expr}` from `vars` (any
/// other expression fails the test), Groovy's `\\` as `\`.
fn render(module: &str, block: Block, vars: &[(&str, &str)]) -> String {
    let label = match block {
        Block::Script => "\n    script:",
        Block::Stub => "\n    stub:",
    };
    let start = module.find(label).unwrap_or_else(|| panic!("a{label} block"));
    let block_text = &module[start..];
    let conventions: &[&str] = match block {
        Block::Script => &["def args = task.ext.args ?: ''", "def prefix = task.ext.prefix ?: \"${meta.id}\""],
        Block::Stub => &["def prefix = task.ext.prefix ?: \"${meta.id}\""],
    };
    for convention in conventions {
        assert!(block_text.contains(convention), "the{label} block lacks `{convention}`");
    }
    let open = block_text.find("\"\"\"").expect("a script template") + 3;
    let close = open + block_text[open..].find("\"\"\"").expect("the template's end");
    let mut t = &block_text[open..close];
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

#[derive(Clone, Copy)]
enum Block {
    Script,
    Stub,
}

/// `PATH` with the tested kmerdb first.
fn path_with_kmerdb() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_kmerdb")).parent().unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs a rendered script with bash in `work` (a process's work directory), kmerdb on the PATH.
fn run_script(script: &str, work: &Path) {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(work)
        .env("PATH", path_with_kmerdb())
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap();
    assert!(out.status.success(), "script failed:\n{script}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// The nf-core modules in `workflows/nextflow/modules/kmerdb`, run as Nextflow would run them
/// (Nextflow and nf-test cannot be installed here): a task's inputs are staged as links in a new
/// work directory, its script block (or stub block) is rendered with the task's `ext.args`,
/// `ext.prefix` and inputs, and run with bash against the real binary.
struct NfCore {
    dir: tempfile::TempDir,
    tasks: usize,
    /// The tests of each module's `tests/main.nf.test`: name, process, meta map, work directory.
    tests: serde_json::Map<String, serde_json::Value>,
}

impl NfCore {
    fn module(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/nextflow/modules/kmerdb").join(name);
        std::fs::read_to_string(path.join("main.nf")).unwrap()
    }

    /// Runs module `name`'s `block` with `staged` inputs; returns its work directory.
    fn task(&mut self, name: &str, block: Block, staged: &[(&str, PathBuf)], vars: &[(&str, &str)]) -> PathBuf {
        self.tasks += 1;
        let work = self.dir.path().join(format!("{name}-{}", self.tasks));
        std::fs::create_dir(&work).unwrap();
        for (staged_name, target) in staged {
            std::os::unix::fs::symlink(target, work.join(staged_name)).unwrap();
        }
        run_script(&render(&Self::module(name), block, vars), &work);
        work
    }

    /// Runs the nf-test test `test` of module `name` (a stub block for a test named `... - stub`,
    /// as nf-core names them), whose outputs its snapshot records.
    fn test(
        &mut self,
        name: &str,
        test: &str,
        meta: &serde_json::Value,
        staged: &[(&str, PathBuf)],
        vars: &[(&str, &str)],
    ) -> PathBuf {
        let block = if test.ends_with(" - stub") { Block::Stub } else { Block::Script };
        let work = self.task(name, block, staged, vars);
        let process = format!("KMERDB_{}", name.to_uppercase());
        let run = serde_json::json!({ "test": test, "process": process, "work": work, "meta": meta });
        self.tests.entry(name).or_insert_with(|| serde_json::json!([])).as_array_mut().unwrap().push(run);
        work
    }

    /// Pairs of work directories: a test's and its stub test's.
    fn stub_pairs(&self) -> Vec<(PathBuf, PathBuf)> {
        let work = |t: &serde_json::Value| PathBuf::from(t["work"].as_str().unwrap());
        let all: Vec<&serde_json::Value> = self.tests.values().flat_map(|v| v.as_array().unwrap()).collect();
        all.iter()
            .filter_map(|stub| {
                let name = stub["test"].as_str().unwrap().strip_suffix(" - stub")?;
                let script = all.iter().find(|t| t["test"] == name && t["process"] == stub["process"]);
                Some((work(script.expect("a stub test has its test")), work(stub)))
            })
            .collect()
    }
}

/// The files a task made (its staged inputs are links).
fn made(work: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(work)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_type().unwrap().is_symlink())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// What KMERDB_CLASSIFY's script and stub blocks compute (their Groovy `def`s) for a task on the
/// staged `reads` (one file for single-end reads) against `db`, with ext.prefix `prefix`, no
/// ext.args or ext.gpus and no accelerator directive (so `--gpus none`).
fn classify_vars(
    db: &str,
    reads: &[&str],
    prefix: &str,
    save_candidates: bool,
    save_reads: bool,
) -> Vec<(&'static str, String)> {
    let single = reads.len() == 1;
    let input = if single { reads[0].to_string() } else { format!("-1 {} -2 {}", reads[0], reads[1]) };
    let fasta = regex::Regex::new(r"\.(fa|fasta|fna|fas)(\.(gz|bz2|xz|zst))?$").unwrap();
    let format = if reads.iter().all(|r| fasta.is_match(r)) { "fasta" } else { "fastq" };
    let (mate, mates): (&str, &[&str]) = if single { ("", &[""]) } else { ("#", &["_1", "_2"]) };
    let candidates = if save_candidates { format!("--candidates-out {prefix}.cand.gz") } else { String::new() };
    let reads_out = if save_reads {
        format!(
            "--classified-out {prefix}.classified{mate}.{format}.gz --unclassified-out {prefix}.unclassified{mate}.{format}.gz"
        )
    } else {
        String::new()
    };
    let mut gzipped = vec![format!("{prefix}.kraken.gz")];
    if save_candidates {
        gzipped.push(format!("{prefix}.cand.gz"));
    }
    if save_reads {
        for kind in ["classified", "unclassified"] {
            gzipped.extend(mates.iter().map(|m| format!("{prefix}.{kind}{m}.{format}.gz")));
        }
    }
    vec![
        ("db", db.to_string()),
        ("input", input),
        ("prefix", prefix.to_string()),
        ("args", String::new()),
        ("task.cpus", "2".to_string()),
        ("candidates", candidates),
        ("reads_out", reads_out),
        ("gpus", "none".to_string()),
        ("gzipped", gzipped.join(" ")),
    ]
}

/// `vars` as [`NfCore::task`] takes them.
fn borrowed<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The reads of a FASTQ or FASTA file (gzipped) that `--classified-out` wrote: (name without a
/// `/1` or `/2` mate suffix, call).
fn saved_reads(path: &Path) -> Vec<(String, String)> {
    let text = super::gunzip(path);
    let step = if text.starts_with('@') { 4 } else { 2 };
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(step)
        .map(|record| {
            let (header, call) = record[0][1..].rsplit_once(" kraken:taxid|").expect("a kraken:taxid call");
            let name = header.split(' ').next().unwrap();
            (name.strip_suffix("/1").or_else(|| name.strip_suffix("/2")).unwrap_or(name).to_string(), call.to_string())
        })
        .collect()
}

/// The nf-core modules in `workflows/nextflow/modules/kmerdb`: every test of each module's
/// `tests/main.nf.test` is run as Nextflow would run it (see [`NfCore`]), on `data/`: an index of
/// the genomes, a paired-end and a single-end sample classified against it (with the candidates,
/// without them, and with the classified and unclassified reads, which must be the per-read
/// output's), and the paired sample classified against the two parts of a partitioned index and
/// merged (which gives the one index's report). Each stub block makes the same file names as its script block. Then
/// `workflows/nextflow/nf_test_snapshot.py` checks that each module's meta.yml declares main.nf's
/// inputs and outputs, that every declared output was made, and that the checked-in
/// `main.nf.test.snap` holds these outputs' md5s as nf-test would record them
/// (`KMERDB_UPDATE_SNAPSHOTS=1` rewrites the snapshots instead). Each module's versions command
/// prints this version, and its environment.yml pins it.
#[test]
fn nextflow_modules_run_their_commands() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = repo.join("workflows/nextflow/modules/kmerdb");
    for name in ["build", "classify", "merge", "update"] {
        let m = NfCore::module(name);
        for needed in
            ["tuple val(meta)", "topic: versions", "stub:", "task.ext.when", "conda \"${moduleDir}/environment.yml\""]
        {
            assert!(m.contains(needed), "{name}: no `{needed}`");
        }
        let eval = m.split("eval('").nth(1).and_then(|s| s.split("')").next()).expect("a versions eval");
        let out = Command::new("bash").args(["-c", eval]).env("PATH", path_with_kmerdb()).output().unwrap();
        let version = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success() && version.trim() == env!("CARGO_PKG_VERSION"), "{name}: version '{version}'");
        let environment = std::fs::read_to_string(modules.join(name).join("environment.yml")).unwrap();
        let pin = format!("- bioconda::kmerdb={}\n", env!("CARGO_PKG_VERSION"));
        assert!(
            environment.contains(&pin),
            "{name}: environment.yml does not pin kmerdb {}",
            env!("CARGO_PKG_VERSION")
        );
    }

    // What the rendering below cannot evaluate (see classify_vars): KMERDB_CLASSIFY's GPUs come
    // from ext.gpus or the accelerator directive, and its optional outputs are declared so.
    let classify = NfCore::module("classify");
    for needed in ["task.ext.gpus != null", "task.accelerator", "--gpus ${gpus}", "emit: candidates, optional: true"] {
        assert!(classify.contains(needed), "classify: no `{needed}`");
    }

    let mut nf = NfCore { dir: tempfile::tempdir().unwrap(), tasks: 0, tests: serde_json::Map::new() };
    let reads = data().join("reads");
    let genomes = [
        ("genomes", data().join("genomes")),
        ("taxonomy", data().join("taxonomy")),
        ("seqid2taxid.map", data().join("seqid2taxid.map")),
    ];
    let build_vars = |args: &'static str, prefix: &'static str| {
        [
            ("genomes", "genomes"),
            ("taxonomy", "taxonomy"),
            ("seqid2taxid", "seqid2taxid.map"),
            ("prefix", prefix),
            ("args", args),
            ("task.cpus", "2"),
        ]
    };
    let paired_reads = |db_name: &'static str, db: PathBuf| {
        [
            ("sample_R1.fq.gz", reads.join("sample_R1.fq.gz")),
            ("sample_R2.fq.gz", reads.join("sample_R2.fq.gz")),
            (db_name, db),
        ]
    };
    let paired_input = ["sample_R1.fq.gz", "sample_R2.fq.gz"];
    let index = serde_json::json!({ "id": "test" });
    let paired = serde_json::json!({ "id": "test", "single_end": false });
    let single = serde_json::json!({ "id": "test", "single_end": true });

    // build/tests/main.nf.test
    let test = "data - genomes, taxonomy, seqid2taxid";
    let built = nf.test("build", test, &index, &genomes, &build_vars("", "test"));
    nf.test("build", &format!("{test} - stub"), &index, &genomes, &build_vars("", "test"));

    // classify/tests/main.nf.test, against the index its setup builds (the one above): with the
    // candidates (save_candidates true, save_reads false), without them, and with the reads.
    let db = built.join("test.db");
    let staged = paired_reads("test.db", db.clone());
    let single_staged = [("single.fa", reads.join("single.fa")), ("test.db", db)];
    let vars = classify_vars("test.db", &paired_input, "test", true, false);
    let test = "data - fastq.gz - paired-end";
    let classified = nf.test("classify", test, &paired, &staged, &borrowed(&vars));
    nf.test("classify", &format!("{test} - stub"), &paired, &staged, &borrowed(&vars));
    let vars = classify_vars("test.db", &["single.fa"], "test", true, false);
    nf.test("classify", "data - fasta - single-end", &single, &single_staged, &borrowed(&vars));
    let vars = classify_vars("test.db", &paired_input, "test", false, false);
    let without = nf.test("classify", &format!("{test} - candidates off"), &paired, &staged, &borrowed(&vars));
    assert!(!made(&without).iter().any(|f| f.ends_with(".cand.gz")), "candidates made without save_candidates");
    let vars = classify_vars("test.db", &paired_input, "test", false, true);
    let test = "data - fastq.gz - paired-end - reads saved";
    let with_reads = nf.test("classify", test, &paired, &staged, &borrowed(&vars));
    nf.test("classify", &format!("{test} - stub"), &paired, &staged, &borrowed(&vars));
    let vars = classify_vars("test.db", &["single.fa"], "test", false, true);
    let single_reads =
        nf.test("classify", "data - fasta - single-end - reads saved", &single, &single_staged, &borrowed(&vars));

    // The saved reads are the per-read output's classified and unclassified reads, in order
    // between them, each mate with the read's call; FASTA reads stay FASTA.
    let kraken = super::gunzip(&with_reads.join("test.kraken.gz"));
    let calls: Vec<(String, String)> = kraken
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1].to_string(), if f[0] == "C" { f[2].to_string() } else { "0".to_string() })
        })
        .collect();
    for mate in ["_1", "_2"] {
        let saved = |kind: &str| saved_reads(&with_reads.join(format!("test.{kind}{mate}.fastq.gz")));
        let (c, u) = (saved("classified"), saved("unclassified"));
        let (expected_c, expected_u): (Vec<_>, Vec<_>) = calls.iter().cloned().partition(|(_, t)| t != "0");
        assert!(c == expected_c, "classified{mate}: {} reads, the per-read output {}", c.len(), expected_c.len());
        assert!(u == expected_u, "unclassified{mate}: {} reads, the per-read output {}", u.len(), expected_u.len());
    }
    assert_eq!(
        made(&single_reads).iter().filter(|f| f.contains("classified")).collect::<Vec<_>>(),
        ["test.classified.fasta.gz", "test.unclassified.fasta.gz"]
    );
    let fasta = super::gunzip(&single_reads.join("test.classified.fasta.gz"));
    assert!(fasta.starts_with('>') && fasta.contains(" kraken:taxid|"), "single-end FASTA reads saved as FASTA");

    // merge/tests/main.nf.test: its setup builds 2 parts (ext.args '--partition I/2', ext.prefix
    // 'partI') and classifies the paired sample against each (ext.prefix '<id>.partI').
    let mut candidates = Vec::new();
    for (args, prefix, db, cand_prefix) in
        [("--partition 1/2", "part1", "part1.db", "test.part1"), ("--partition 2/2", "part2", "part2.db", "test.part2")]
    {
        let built = nf.task("build", Block::Script, &genomes, &build_vars(args, prefix));
        let staged = paired_reads(db, built.join(db));
        let vars = classify_vars(db, &paired_input, cand_prefix, true, false);
        let work = nf.task("classify", Block::Script, &staged, &borrowed(&vars));
        let name = format!("{cand_prefix}.cand.gz");
        candidates.push((work.join(&name), name));
    }
    let staged: Vec<(&str, PathBuf)> = candidates.iter().map(|(path, name)| (name.as_str(), path.clone())).collect();
    let vars = [
        ("candidates", "test.part1.cand.gz test.part2.cand.gz"),
        ("meta.id", "test"),
        ("prefix", "test"),
        ("args", ""),
    ];
    let test = "data - fastq.gz - paired-end - 2 parts";
    let merged = nf.test("merge", test, &paired, &staged, &vars);
    nf.test("merge", &format!("{test} - stub"), &paired, &staged, &vars);

    // update/tests/main.nf.test: its setup builds data/ (the build test's index); the test removes
    // phage lambda and adds it back (ext.prefix '<id>.updated').
    let staged = [
        ("test.db", built.join("test.db")),
        ("Phage_lambda.fna.gz", data().join("genomes/Phage_lambda.fna.gz")),
        ("remove_targets.txt", data().join("remove_targets.txt")),
        ("taxonomy", data().join("taxonomy")),
        ("seqid2taxid.map", data().join("seqid2taxid.map")),
    ];
    let vars = [
        ("db", "test.db"),
        ("prefix", "test.updated"),
        ("add", "--add Phage_lambda.fna.gz"),
        ("remove", "--remove-targets remove_targets.txt"),
        ("taxonomy", "taxonomy"),
        ("seqid2taxid", "seqid2taxid.map"),
        ("task.cpus", "2"),
        ("args", ""),
    ];
    let test = "data - index, lambda removed and added back";
    let updated = nf.test("update", test, &index, &staged, &vars);
    nf.test("update", &format!("{test} - stub"), &index, &staged, &vars);
    assert_eq!(
        super::sections_but_provenance(&updated.join("test.updated.db")),
        super::sections_but_provenance(&built.join("test.db")),
        "removing and adding back lambda does not give the index back"
    );

    for (script, stub) in nf.stub_pairs() {
        assert_eq!(made(&stub), made(&script), "the stub block of {} makes other files", script.display());
    }
    assert_eq!(
        std::fs::read_to_string(merged.join("test.report.txt")).unwrap(),
        std::fs::read_to_string(classified.join("test.report.txt")).unwrap(),
        "the merged parts do not give the one index's report"
    );

    let runs = nf.dir.path().join("runs.json");
    std::fs::write(&runs, serde_json::to_string_pretty(&nf.tests).unwrap()).unwrap();
    let mode = if std::env::var_os("KMERDB_UPDATE_SNAPSHOTS").is_some() { "write" } else { "check" };
    let out = Command::new("python3")
        .arg(repo.join("workflows/nextflow/nf_test_snapshot.py"))
        .arg(mode)
        .arg(&runs)
        .env("PATH", path_with_kmerdb())
        .output()
        .expect("python3 runs the snapshot check");
    assert!(
        out.status.success(),
        "nf_test_snapshot.py {mode} (KMERDB_UPDATE_SNAPSHOTS=1 rewrites the snapshots when outputs are meant to change):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Nextflow pipeline's update step (`workflows/nextflow/main.nf` with `--add` and
/// `--remove_targets`), its tasks run as Nextflow would run them (see [`NfCore`]): 2 parts
/// built, each updated with the whole removal list (phage lambda, which one part holds) and
/// nextflow.config's ext.args `--skip-absent`, the last part also with the added genome (VDV1's
/// sequence under lambda's taxid); classified and merged, the updated parts give what one index
/// of the resulting genomes gives, as in [`snakemake_workflow_updates_the_parts`].
#[test]
fn nextflow_pipeline_updates_the_parts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pipeline = std::fs::read_to_string(repo.join("workflows/nextflow/main.nf")).unwrap();
    for needed in [
        "KMERDB_UPDATE(",
        "samples.combine(dbs)",
        "params.add = null",
        "params.remove_targets = null",
        "KMERDB_CLASSIFY(pairs.reads, pairs.db, true, false)",
    ] {
        assert!(pipeline.contains(needed), "main.nf: no `{needed}`");
    }
    let config = std::fs::read_to_string(repo.join("workflows/nextflow/nextflow.config")).unwrap();
    let update =
        config.split("withName: ").find(|b| b.starts_with("'KMERDB_UPDATE'")).expect("KMERDB_UPDATE's settings");
    for needed in ["ext.args = '--skip-absent'", "ext.prefix = { \"${meta.id}.updated\" }"] {
        assert!(update.contains(needed), "nextflow.config: KMERDB_UPDATE has no `{needed}`");
    }

    let mut nf = NfCore { dir: tempfile::tempdir().unwrap(), tasks: 0, tests: serde_json::Map::new() };
    let d = nf.dir.path().to_path_buf();
    let vdv1 = super::gunzip(&data().join("genomes/VDV1.fna.gz"));
    let sequence: String = vdv1.lines().skip(1).collect();
    let added = d.join("added.fa");
    std::fs::write(&added, format!(">VDV1_as_lambda kraken:taxid|10710\n{sequence}\n")).unwrap();
    std::fs::write(d.join("removed.txt"), "NC_001416.1\n").unwrap();
    let reads = data().join("reads");
    let mut candidates = Vec::new();
    let mut holding_lambda = 0;
    for part in 1..=2 {
        let (id, cand) = (format!("part{part}"), format!("test.part{part}"));
        let db = format!("{id}.db");
        let genomes = [
            ("genomes", data().join("genomes")),
            ("taxonomy", data().join("taxonomy")),
            ("seqid2taxid.map", data().join("seqid2taxid.map")),
        ];
        let partition = format!("--partition {part}/2");
        let build_vars = [
            ("genomes", "genomes"),
            ("taxonomy", "taxonomy"),
            ("seqid2taxid", "seqid2taxid.map"),
            ("prefix", &id),
            ("args", &partition),
            ("task.cpus", "2"),
        ];
        let built = nf.task("build", Block::Script, &genomes, &build_vars).join(&db);
        let targets = info(&built)["targets"].as_array().unwrap().clone();
        holding_lambda += targets.iter().filter(|t| t["name"] == "NC_001416.1").count();

        // The last part takes the added genomes; the others get `[]`, which stages nothing.
        let last = part == 2;
        let mut staged = vec![
            (db.as_str(), built),
            ("removed.txt", d.join("removed.txt")),
            ("taxonomy", data().join("taxonomy")),
            ("seqid2taxid.map", data().join("seqid2taxid.map")),
        ];
        if last {
            staged.push(("added.fa", added.clone()));
        }
        let prefix = format!("{id}.updated");
        let update_vars = [
            ("db", db.as_str()),
            ("prefix", &prefix),
            ("add", if last { "--add added.fa" } else { "" }),
            ("remove", "--remove-targets removed.txt"),
            ("taxonomy", "taxonomy"),
            ("seqid2taxid", "seqid2taxid.map"),
            ("task.cpus", "2"),
            ("args", "--skip-absent"),
        ];
        let updated_db = format!("{prefix}.db");
        let updated = nf.task("update", Block::Script, &staged, &update_vars).join(&updated_db);

        let staged = [
            ("sample_R1.fq.gz", reads.join("sample_R1.fq.gz")),
            ("sample_R2.fq.gz", reads.join("sample_R2.fq.gz")),
            (updated_db.as_str(), updated),
        ];
        let vars = classify_vars(&updated_db, &["sample_R1.fq.gz", "sample_R2.fq.gz"], &cand, true, false);
        let work = nf.task("classify", Block::Script, &staged, &borrowed(&vars));
        candidates.push((work.join(format!("{cand}.cand.gz")), format!("{cand}.cand.gz")));
    }
    assert_eq!(holding_lambda, 1, "lambda is in one part, so the other skips it");
    let staged: Vec<(&str, PathBuf)> = candidates.iter().map(|(path, name)| (name.as_str(), path.clone())).collect();
    let vars = [
        ("candidates", "test.part1.cand.gz test.part2.cand.gz"),
        ("meta.id", "test"),
        ("prefix", "test"),
        ("args", ""),
    ];
    let merged = nf.task("merge", Block::Script, &staged, &vars);

    assert_eq!(
        std::fs::read_to_string(merged.join("test.report.txt")).unwrap(),
        one_index_report(&d, added),
        "the updated parts, merged, do not give the one index's report"
    );
}

/// The kreport of the bundled pairs against one index of `data/`'s genomes with lambda
/// replaced by `added` (what an update of the parts must give), built in `d`.
fn one_index_report(d: &Path, added: PathBuf) -> String {
    let mut genomes: Vec<PathBuf> =
        super::genome_files().into_iter().filter(|f| !f.to_str().unwrap().contains("lambda")).collect();
    genomes.push(added);
    super::build_genomes(&d.join("one.db"), &genomes).arg("-q").assert().success();
    super::classify_pairs(&d.join("one.db")).arg("-q").arg("--report").arg(d.join("one.kreport")).assert().success();
    std::fs::read_to_string(d.join("one.kreport")).unwrap()
}

/// `kmerdb info --json` of an index.
fn info(db: &Path) -> serde_json::Value {
    let out = kmerdb().arg("info").arg(db).arg("--json").output().unwrap();
    assert!(out.status.success(), "kmerdb info {}", db.display());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The Snakemake wrappers in `workflows/snakemake/wrappers/bio/kmerdb` (the layout of
/// snakemake-wrappers), each run by its `test/Snakefile` as snakemake-wrappers' tests run them
/// (`--wrapper-prefix` a folder whose `master` is the wrappers' folder), against the real binary
/// on `data/`: the build wrapper makes the index of `data/` (and, with a list of genomes and
/// `--partition` in `params.extra`, one genome per part), the classify wrapper the golden report
/// of the paired sample and the single-end sample's outputs with its `extra`; each wrapper's
/// environment.yaml pins this version and its meta.yaml names every output the wrapper writes.
#[test]
fn snakemake_wrappers_run_their_tests() {
    let wrappers = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/snakemake/wrappers");
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&wrappers, dir.path().join("master")).unwrap();
    let run = |wrapper: &str, targets: &[&str]| {
        let work = dir.path().join(wrapper);
        std::fs::create_dir(&work).unwrap();
        std::os::unix::fs::symlink(data(), work.join("data")).unwrap();
        let out = Command::new("snakemake")
            .arg("-s")
            .arg(wrappers.join("bio/kmerdb").join(wrapper).join("test/Snakefile"))
            .args(["--cores", "2", "--quiet", "--wrapper-prefix"])
            .arg(format!("file://{}/", dir.path().display()))
            .args(targets)
            .current_dir(&work)
            .env("PATH", path_with_kmerdb())
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .output()
            .expect("snakemake runs (pip install snakemake; scripts/test-deps.sh does)");
        assert!(out.status.success(), "{wrapper}'s test failed:\n{}", String::from_utf8_lossy(&out.stderr));
        work
    };

    let build = run("build", &["index/data.db", "index/part1.db", "index/part2.db"]);
    super::build_data(&dir.path().join("one.db")).arg("-q").assert().success();
    let counts = |db: &Path| info(db)["header"]["counts"].clone();
    assert_eq!(counts(&build.join("index/data.db"))["targets"], 7);
    assert_eq!(counts(&build.join("index/data.db")), counts(&dir.path().join("one.db")));
    for part in ["part1", "part2"] {
        assert_eq!(counts(&build.join(format!("index/{part}.db")))["targets"], 1, "{part} holds one genome");
    }
    assert!(build.join("logs/kmerdb_build.log").is_file());

    let classify = run("classify", &["classified/sample.kreport", "classified/single.kreport"]);
    let out = classify.join("classified");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/sample.kreport");
    assert_eq!(std::fs::read_to_string(out.join("sample.kreport")).unwrap(), std::fs::read_to_string(golden).unwrap());
    assert_eq!(super::gunzip(&out.join("sample.kraken.gz")).lines().count(), 2965);
    assert!(std::fs::read_to_string(out.join("sample.abundance.tsv")).unwrap().contains("Escherichia coli"));
    let single = std::fs::read_to_string(out.join("single.kreport")).unwrap();
    assert!(single.contains("\tS\t562\t") && !single.contains("\tS1\t"), "--lowest-rank species in extra:\n{single}");
    assert!(std::fs::read_to_string(out.join("single.cami")).unwrap().contains("@SampleID:single"));
    assert!(std::fs::read_to_string(classify.join("logs/kmerdb_classify/single.log")).unwrap().contains("200 reads"));

    let options = regex::Regex::new(r#""(\w+)": "--"#).unwrap();
    for wrapper in ["build", "classify"] {
        let at = wrappers.join("bio/kmerdb").join(wrapper);
        let environment = std::fs::read_to_string(at.join("environment.yaml")).unwrap();
        assert!(environment.contains(&format!("- kmerdb ={}\n", env!("CARGO_PKG_VERSION"))), "{wrapper}: pin");
        let meta = std::fs::read_to_string(at.join("meta.yaml")).unwrap();
        let code = std::fs::read_to_string(at.join("wrapper.py")).unwrap();
        for name in options.captures_iter(&code).map(|c| c[1].to_string()) {
            assert!(meta.contains(&format!("\n  - {name}: ")), "{wrapper}: meta.yaml does not name output {name}");
        }
    }
}
