//! The tools that read kmerdb's Kraken reports downstream, run for real: taxpasta and MultiQC,
//! pinned in `scripts/report-tools.txt` and installed by `scripts/test-deps.sh` into a virtualenv
//! of their own (`$KMERDB_REPORT_TOOLS`, default `~/.local/share/kmerdb/report-tools`).

use super::{build_data, build_genomes, classify_pairs, data, genome_files};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tool of the report-tools virtualenv.
pub(super) fn tool(name: &str) -> PathBuf {
    let venv = std::env::var_os("KMERDB_REPORT_TOOLS").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".local/share/kmerdb/report-tools")
    });
    let bin = venv.join("bin").join(name);
    assert!(bin.is_file(), "no {} (bash scripts/test-deps.sh installs it)", bin.display());
    bin
}

/// taxid -> (name, reads assigned directly), from a kreport's columns 5, 6 and 3.
fn kreport_rows(kreport: &str) -> BTreeMap<u32, (String, u64)> {
    kreport
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let name = if f[4] == "0" { "" } else { f[5].trim_start() };
            (f[4].parse().unwrap(), (name.to_string(), f[2].parse().unwrap()))
        })
        .collect()
}

/// The bundled sample's report (every read classified: `root` comes first) and a report with an
/// `unclassified` line (the sample against an index of two of the genomes) are read by
/// `taxpasta standardise -p kraken2` without a schema warning, giving each taxon of the report
/// with its name (from `data/taxonomy`) and its reads; MultiQC's Kraken module finds both
/// samples, named without the `.kreport` extension, with the unclassified share of the report.
#[test]
fn taxpasta_and_multiqc_read_the_kreport() {
    let (taxpasta, multiqc) = (tool("taxpasta"), tool("multiqc"));
    let dir = tempfile::tempdir().unwrap();
    let reports = dir.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    build_data(&dir.path().join("all.db")).arg("-q").assert().success();
    classify_pairs(&dir.path().join("all.db"))
        .arg("-q")
        .arg("--report")
        .arg(reports.join("sample.kreport"))
        .assert()
        .success();
    let two: Vec<PathBuf> = genome_files()
        .into_iter()
        .filter(|g| g.ends_with("Phage_lambda.fna.gz") || g.ends_with("Sau_COL.fna.gz"))
        .collect();
    build_genomes(&dir.path().join("two.db"), &two).arg("-q").assert().success();
    classify_pairs(&dir.path().join("two.db"))
        .arg("-q")
        .arg("--report")
        .arg(reports.join("partial.kreport"))
        .assert()
        .success();

    for sample in ["sample", "partial"] {
        let kreport = std::fs::read_to_string(reports.join(format!("{sample}.kreport"))).unwrap();
        let first = if sample == "sample" { "\tR\t1\troot" } else { "\tU\t0\tunclassified" };
        assert!(kreport.lines().next().unwrap().ends_with(first), "{sample}: first line\n{kreport}");
        let table = dir.path().join(format!("{sample}.tsv"));
        let out = Command::new(&taxpasta)
            .args(["standardise", "-p", "kraken2", "--add-name", "--taxonomy"])
            .arg(data().join("taxonomy"))
            .arg("-o")
            .arg(&table)
            .arg(reports.join(format!("{sample}.kreport")))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("Warning"), "taxpasta on {sample}.kreport:\n{stderr}");
        let table = std::fs::read_to_string(table).unwrap();
        let mut lines = table.lines();
        assert_eq!(lines.next(), Some("taxonomy_id\tname\tcount"));
        let rows: BTreeMap<u32, (String, u64)> = lines
            .map(|line| {
                let f: Vec<&str> = line.split('\t').collect();
                (f[0].parse().unwrap(), (f[1].to_string(), f[2].parse().unwrap()))
            })
            .collect();
        assert_eq!(rows, kreport_rows(&kreport), "taxpasta's table of {sample}.kreport");
        assert_eq!(rows[&10710], ("Lambdavirus lambda".to_string(), if sample == "sample" { 798 } else { 812 }));
    }

    // MultiQC run on `input` with `options`, into `out`: its data's JSON.
    let multiqc_json = |options: &[&str], out: &Path, input: &Path| -> serde_json::Value {
        let run = Command::new(&multiqc).args(["-q", "--no-ansi"]).args(options).arg("-o").arg(out).arg(input).output();
        let run = run.unwrap();
        assert!(run.status.success(), "multiqc:\n{}", String::from_utf8_lossy(&run.stderr));
        serde_json::from_str(&std::fs::read_to_string(out.join("multiqc_data/multiqc_data.json")).unwrap()).unwrap()
    };
    let clean = ["--cl-config", "extra_fn_clean_exts: [\".kreport\"]"];
    let json = multiqc_json(&clean, &dir.path().join("multiqc"), &reports);
    let kraken = &json["report_general_stats_data"]["kraken"];
    assert!(kraken["sample"]["pct_top_n"].as_f64().unwrap() > 99.0, "MultiQC's Kraken stats: {kraken}");
    let unclassified = kraken["partial"]["pct_unclassified"].as_f64().unwrap();
    let kreport = std::fs::read_to_string(reports.join("partial.kreport")).unwrap();
    let expected: f64 = kreport.lines().next().unwrap().split('\t').next().unwrap().trim().parse().unwrap();
    assert!((unclassified - expected).abs() < 0.01, "MultiQC: {unclassified}% unclassified, the report {expected}%");

    // Named as the Nextflow modules name it (`PREFIX.report.txt`), the report's sample is the
    // prefix with MultiQC's default configuration.
    let nextflow = dir.path().join("nextflow");
    std::fs::create_dir(&nextflow).unwrap();
    std::fs::copy(reports.join("sample.kreport"), nextflow.join("sample.report.txt")).unwrap();
    let json = multiqc_json(&[], &dir.path().join("multiqc-default"), &nextflow);
    let samples: Vec<&String> = json["report_general_stats_data"]["kraken"].as_object().unwrap().keys().collect();
    assert_eq!(samples, ["sample"], "MultiQC's sample names with its default configuration");
}

/// `--mpa` is Kraken 2's `--use-mpa-style`, byte for byte (issue 18.2): from the per-taxon counts of
/// Kraken 2.1.2's report of the mock community (`tests/golden/kraken2-mock.kreport`, its database
/// built from `../shared/data/refs`), kmerdb's MPA writer gives Kraken 2's own MPA-style report of
/// the same run (`tests/golden/kraken2-mock.mpa`).
#[test]
fn mpa_table_equals_kraken2_use_mpa_style() {
    use std::collections::HashMap;
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let kreport = std::fs::read_to_string(golden.join("kraken2-mock.kreport")).unwrap();
    let mut direct: HashMap<u32, u64> = HashMap::new();
    for line in kreport.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (own, taxid): (u64, u32) = (f[2].parse().unwrap(), f[4].parse().unwrap());
        if taxid != 0 && own > 0 {
            direct.insert(taxid, own);
        }
    }
    let tax = kmerdb::taxonomy::NcbiTaxonomy::load_dir(&crate::shared().join("taxonomy")).unwrap();
    let keep: Vec<u32> = direct.keys().copied().collect();
    let tree = kmerdb::taxonomy::TaxonTree::new(tax.prune(&keep)).unwrap();
    let mut mpa = Vec::new();
    kmerdb::output::write_mpa(&mut mpa, &tree, &direct).unwrap();
    assert_eq!(String::from_utf8(mpa).unwrap(), std::fs::read_to_string(golden.join("kraken2-mock.mpa")).unwrap());
}
