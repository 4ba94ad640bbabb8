//! `kmerdb update`: the updated index equals a fresh build of what it now holds, section by
//! section (`kmerdb info --json`), and bad input changes nothing.

use crate::{data, genome_files, kmerdb, shared};
use predicates::prelude::*;
use std::path::{Path, PathBuf};

/// Taxonomy and seqid map arguments for a taxonomy (`Some`): the full NCBI one of
/// `../shared/data` takes the shared refs' map, any other the bundled data's. None: no arguments.
fn taxonomy_args(taxonomy: Option<&Path>) -> Vec<PathBuf> {
    match taxonomy {
        Some(dir) if dir.starts_with(shared()) => {
            vec!["--taxonomy".into(), dir.into(), "--seqid2taxid".into(), shared().join("refs/seqid2taxid.map")]
        }
        Some(dir) => vec!["--taxonomy".into(), dir.into(), "--seqid2taxid".into(), data().join("seqid2taxid.map")],
        None => Vec::new(),
    }
}

/// Builds `files` into `db` with a location cap of `cap`.
fn build(files: &[PathBuf], db: &Path, taxonomy: Option<&Path>, cap: u32) {
    kmerdb()
        .args(["build", "-q", "-t", "2", "--max-locations-per-feature", &cap.to_string(), "-d"])
        .arg(db)
        .args(taxonomy_args(taxonomy))
        .args(files)
        .assert()
        .success();
}

/// `kmerdb update -d old -o new` with `args`.
fn update(old: &Path, new: &Path, args: &[PathBuf]) -> assert_cmd::assert::Assert {
    kmerdb().args(["update", "-q", "-t", "2", "-d"]).arg(old).arg("-o").arg(new).args(args).assert()
}

/// What a build and an update must agree on: the header and every section but the provenance
/// (whose place is the same: it is the last section).
fn contents(db: &Path) -> serde_json::Value {
    let out = kmerdb().arg("info").arg("--json").arg(db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = info["header"]["sections"].as_array().unwrap();
    assert!(all.iter().any(|s| s["kind"] == "Provenance"), "{info}");
    let mut header = info["header"].clone();
    header["sections"] = all.iter().filter(|s| s["kind"] != "Provenance").cloned().collect();
    serde_json::json!({ "header": header, "sections": super::sections_but_provenance(db) })
}

/// The command line that made `db`, from its provenance.
fn command_line(db: &Path) -> Vec<String> {
    let out = kmerdb().arg("info").arg("--json").arg(db).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let words = info["provenance"]["command_line"].as_array().unwrap();
    words.iter().map(|w| w.as_str().unwrap().to_string()).collect()
}

/// The names of `db`'s targets.
fn target_names(db: &Path) -> Vec<String> {
    let out = kmerdb().arg("info").arg("--json").arg(db).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    info["targets"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// A file listing `lines`.
fn list(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// Random splits of the bundled genomes into an index and genomes to add: adding them gives the
/// full build's contents, removing them from the full build gives the part's, and adding then
/// removing gives the part back. With and without a taxonomy, with a cap of 2 so that many
/// features become clade features, come back under the cap and change clades.
#[test]
fn adding_and_removing_equal_a_fresh_build() {
    let tax = data().join("taxonomy");
    let runs = [(1u64, Some(tax.as_path()), 2), (2, None, 2), (3, Some(tax.as_path()), 2)];
    splits_equal_fresh_builds(&genome_files(), &runs);
}

/// As [`adding_and_removing_equal_a_fresh_build`], on the 58 genomes of `../shared/data/refs`
/// (related strains and species) with the full NCBI taxonomy.
#[test]
fn adding_and_removing_shared_refs_equal_a_fresh_build() {
    let tax = shared().join("taxonomy");
    let mut files: Vec<PathBuf> = std::fs::read_dir(shared().join("refs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(".fna.gz"))
        .collect();
    files.sort();
    splits_equal_fresh_builds(&files, &[(4, Some(tax.as_path()), 8), (5, Some(tax.as_path()), 254)]);
}

/// For each (seed, taxonomy, cap): `files` split at random, then added and removed.
fn splits_equal_fresh_builds(files: &[PathBuf], runs: &[(u64, Option<&Path>, u32)]) {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    for &(seed, taxonomy, cap) in runs {
        // A split from a small LCG: at least one genome on each side.
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut added = Vec::new();
        let mut kept = Vec::new();
        for (i, f) in files.iter().enumerate() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let add = if i == 0 {
                true
            } else if i == 1 {
                false
            } else {
                state >> 63 == 1
            };
            if add { added.push(f.clone()) } else { kept.push(f.clone()) }
        }
        build(files, &d("full.db"), taxonomy, cap);
        build(&kept, &d("part.db"), taxonomy, cap);
        let mut args = taxonomy_args(taxonomy);
        args.push("--add".into());
        args.extend(added.iter().cloned());
        update(&d("part.db"), &d("grown.db"), &args).success();
        assert_eq!(contents(&d("grown.db")), contents(&d("full.db")), "seed {seed}: adding {added:?}");
        assert_eq!(command_line(&d("grown.db"))[..2], ["kmerdb", "update"], "the provenance records the update");

        let part_names = target_names(&d("part.db"));
        let gone: Vec<String> = target_names(&d("full.db")).into_iter().filter(|n| !part_names.contains(n)).collect();
        let remove = vec!["--remove-targets".into(), list(dir.path(), "gone.txt", &gone)];
        update(&d("full.db"), &d("shrunk.db"), &remove).success();
        assert_eq!(contents(&d("shrunk.db")), contents(&d("part.db")), "seed {seed}: removing {gone:?}");
        update(&d("grown.db"), &d("back.db"), &remove).success();
        assert_eq!(contents(&d("back.db")), contents(&d("part.db")), "seed {seed}: adding, then removing");
    }
}

/// `--remove-taxa` removes the targets of a taxon's subtree: the species E. coli (562) takes both
/// strains.
#[test]
fn removing_a_species_removes_its_strains() {
    let dir = tempfile::tempdir().unwrap();
    let tax = data().join("taxonomy");
    let files = genome_files();
    let others: Vec<PathBuf> = files.iter().filter(|f| !f.to_str().unwrap().contains("Ecoli")).cloned().collect();
    assert_eq!(others.len() + 2, files.len());
    build(&files, &dir.path().join("full.db"), Some(&tax), 254);
    build(&others, &dir.path().join("others.db"), Some(&tax), 254);
    let taxa = list(dir.path(), "taxa.txt", &["# E. coli".into(), "562".into()]);
    update(&dir.path().join("full.db"), &dir.path().join("out.db"), &["--remove-taxa".into(), taxa])
        .success()
        .stderr(predicate::str::is_empty());
    assert_eq!(contents(&dir.path().join("out.db")), contents(&dir.path().join("others.db")));
}

/// `--skip-absent`, for the parts of a partitioned index (each holds only some of the targets to
/// remove): the names and taxa the index does not hold are skipped, with a line that counts them,
/// and the result equals removing only those it holds; a list of none it holds leaves its contents
/// as they were. Without the flag they stay an error (`bad_updates_fail_clearly_and_change_nothing`).
#[test]
fn skip_absent_removes_what_the_index_holds_and_skips_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let tax = data().join("taxonomy");
    build(&genome_files(), &d("full.db"), Some(&tax), 2);
    let names = target_names(&d("full.db"));
    let held = vec![names[0].clone(), names[names.len() - 1].clone()];
    let absent: Vec<String> = vec!["NOPE_1".into(), "NOPE_2".into(), "NOPE_3".into()];
    let mixed = [absent[..1].to_vec(), held[..1].to_vec(), absent[1..].to_vec(), held[1..].to_vec()].concat();
    let skipping = |args: Vec<PathBuf>, out: &str| {
        kmerdb()
            .args(["update", "-t", "2", "--skip-absent", "-d"])
            .arg(d("full.db"))
            .arg("-o")
            .arg(d(out))
            .args(args)
            .assert()
            .success()
    };

    let targets = |name: &str, lines: &[String]| vec!["--remove-targets".into(), list(dir.path(), name, lines)];
    update(&d("full.db"), &d("held.db"), &targets("held.txt", &held)).success();
    skipping(targets("mixed.txt", &mixed), "mixed.db").stderr(predicate::str::contains(format!(
        "3 of 5 targets to remove are not in {}: skipped (--skip-absent)",
        d("full.db").display()
    )));
    assert_eq!(contents(&d("mixed.db")), contents(&d("held.db")), "removing {mixed:?}, skipping the absent");
    skipping(targets("absent.txt", &absent), "same.db");
    assert_eq!(contents(&d("same.db")), contents(&d("full.db")), "a part that holds none of {absent:?}");

    // E. coli (562) with a taxon the taxonomy lacks.
    let taxa = |name: &str, lines: &[&str]| {
        let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        vec!["--remove-taxa".into(), list(dir.path(), name, &lines)]
    };
    update(&d("full.db"), &d("no-coli.db"), &taxa("562.txt", &["562"])).success();
    skipping(taxa("taxa.txt", &["12345678", "562"]), "no-coli-skipping.db").stderr(predicate::str::contains(format!(
        "1 of 2 taxa to remove is not in the taxonomy of {}: skipped",
        d("full.db").display()
    )));
    assert_eq!(contents(&d("no-coli-skipping.db")), contents(&d("no-coli.db")));

    // Without the flag, the same lists fail and write nothing.
    update(&d("full.db"), &d("failed.db"), &targets("mixed.txt", &mixed))
        .code(1)
        .stderr(predicate::str::contains("holds no target 'NOPE_1'"));
    update(&d("full.db"), &d("failed.db"), &taxa("taxa.txt", &["12345678", "562"]))
        .code(1)
        .stderr(predicate::str::contains("holds no taxon 12345678"));
    assert!(!d("failed.db").exists());
}

/// The bundled taxonomy with phage lambda's taxid 10710 merged into a new 4000000001, and a new
/// species 4000000002 under the root.
fn newer_taxonomy(dir: &Path) -> PathBuf {
    let tax = dir.join("newer-taxonomy");
    std::fs::create_dir_all(&tax).unwrap();
    let nodes = std::fs::read_to_string(data().join("taxonomy/nodes.dmp")).unwrap();
    let mut nodes: String = nodes.lines().filter(|l| !l.starts_with("10710\t")).map(|l| format!("{l}\n")).collect();
    nodes.push_str("4000000001\t|\t186765\t|\tspecies\t|\t\t|\t3\t|\n4000000002\t|\t1\t|\tspecies\t|\t\t|\t0\t|\n");
    std::fs::write(tax.join("nodes.dmp"), nodes).unwrap();
    let mut names = std::fs::read_to_string(data().join("taxonomy/names.dmp")).unwrap();
    names.push_str("4000000001\t|\tLambdavirus renamed\t|\t\t|\tscientific name\t|\n");
    names.push_str("4000000002\t|\tNovel species\t|\t\t|\tscientific name\t|\n");
    std::fs::write(tax.join("names.dmp"), names).unwrap();
    std::fs::write(tax.join("merged.dmp"), "10710\t|\t4000000001\t|\n").unwrap();
    tax
}

/// An update given a newer taxonomy equals a build with it: the old targets' taxids follow its
/// merged.dmp, and an added genome may have a taxid the old taxonomy lacked.
#[test]
fn a_newer_taxonomy_moves_merged_taxids_and_brings_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let newer = newer_taxonomy(dir.path());
    let novel = dir.path().join("novel.fa");
    let mut state = 7u64;
    let seq: String = (0..6000)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            b"ACGT"[(state >> 62) as usize] as char
        })
        .collect();
    std::fs::write(&novel, format!(">novel_1 kraken:taxid|4000000002\n{seq}\n")).unwrap();
    let files = genome_files();
    build(&files, &dir.path().join("old.db"), Some(&data().join("taxonomy")), 254);
    let mut all = files.clone();
    all.push(novel.clone());
    build(&all, &dir.path().join("fresh.db"), Some(&newer), 254);
    let mut args = taxonomy_args(Some(&newer));
    args.extend(["--add".into(), novel]);
    update(&dir.path().join("old.db"), &dir.path().join("updated.db"), &args).success();
    assert_eq!(contents(&dir.path().join("updated.db")), contents(&dir.path().join("fresh.db")));
    let info =
        String::from_utf8(kmerdb().arg("info").arg(dir.path().join("updated.db")).output().unwrap().stdout).unwrap();
    assert!(info.contains("NC_001416.1\t4000000001"), "lambda moved to its new taxid:\n{info}");
}

/// Bad input: a clear error naming what is wrong, a non-zero exit, the old index unchanged and no
/// new one.
#[test]
fn bad_updates_fail_clearly_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let tax = data().join("taxonomy");
    let files = genome_files();
    build(&files[1..], &d("old.db"), Some(&tax), 254);
    let before = std::fs::read(d("old.db")).unwrap();
    let with_tax = |mut args: Vec<PathBuf>| {
        args.extend(taxonomy_args(Some(&tax)));
        args
    };
    let cases: Vec<(Vec<PathBuf>, &str)> = vec![
        (vec!["--remove-targets".into(), list(dir.path(), "nope.txt", &["NOPE_1".into()])], "holds no target 'NOPE_1'"),
        (vec!["--remove-taxa".into(), list(dir.path(), "t.txt", &["12345678".into()])], "holds no taxon 12345678"),
        (
            vec!["--remove-taxa".into(), list(dir.path(), "bad.txt", &["562".into(), "E. coli".into()])],
            "bad.txt line 2",
        ),
        (with_tax(vec!["--add".into(), files[1].clone()]), "is in"),
        (vec!["--add".into(), files[0].clone()], "give it (--taxonomy) to add genomes"),
    ];
    // A GPU that is not there (CI machines have none; a GPU machine runs tests/gpu.rs instead).
    let no_gpu = !Path::new("/dev/nvidia0").exists();
    let gpu_case = (with_tax(vec!["--gpus".into(), "7".into(), "--add".into(), files[0].clone()]), "GPU 7");
    let cases = cases.into_iter().chain(no_gpu.then_some(gpu_case));
    for (args, expect) in cases {
        // In place (no -o): a failure must leave the index as it was.
        kmerdb()
            .args(["update", "-q", "-d"])
            .arg(d("old.db"))
            .args(&args)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(expect));
        assert!(std::fs::read(d("old.db")).unwrap() == before, "{args:?} changed the index");
        update(&d("old.db"), &d("new.db"), &args).code(1);
        assert!(!d("new.db").exists(), "{args:?} left an index behind");
    }
    kmerdb()
        .args(["update", "-d"])
        .arg(d("old.db"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing to update"));
    // An index of another format version names the version and says to rebuild.
    let mut old_format = before.clone();
    old_format[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(d("v3.db"), old_format).unwrap();
    update(&d("v3.db"), &d("new.db"), &with_tax(vec!["--add".into(), files[0].clone()]))
        .code(1)
        .stderr(predicate::str::contains("format version 3").and(predicate::str::contains("rebuild")));
    // In place and successful: the index is replaced.
    kmerdb()
        .args(["update", "-q", "-d"])
        .arg(d("old.db"))
        .args(with_tax(vec!["--add".into(), files[0].clone()]))
        .assert()
        .success();
    build(&files, &d("fresh.db"), Some(&tax), 254);
    assert_eq!(contents(&d("old.db")), contents(&d("fresh.db")));
}
