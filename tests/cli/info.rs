//! `kmerdb info`: text, JSON, checksum verification and damaged files.

use crate::{build_data, kmerdb};
use predicates::prelude::*;

#[test]
fn text_and_json_describe_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("i.db");
    build_data(&db).assert().success();
    kmerdb()
        .arg("info")
        .arg(&db)
        .arg("--verify")
        .assert()
        .success()
        .stdout(predicate::str::contains("k=16 window=127 stride=112 sketch-size=16"))
        .stdout(predicate::str::contains("all sections verified"))
        .stdout(predicate::str::contains("bytes per reference base"));
    let out = kmerdb().arg("info").arg("--json").arg(&db).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sections: Vec<&str> =
        json["sections"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(sections, ["shards", "shard data", "targets", "taxonomy", "clade lists", "protein", "provenance"]);
    assert_eq!(json["provenance"]["command_line"][1], "build");
    for s in json["sections"].as_array().unwrap() {
        assert_eq!(s["offset"].as_u64().unwrap() % 4096, 0, "sections are 4 KiB-aligned");
    }
    let lf = json["key_index_load_factor"].as_f64().unwrap();
    assert!(lf > 0.9 && lf <= 1.0, "{lf}");
}

#[test]
fn verify_finds_a_flipped_byte_and_other_damage() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("i.db");
    build_data(&db).assert().success();
    let good = std::fs::read(&db).unwrap();

    let mut flipped = good.clone();
    let at = good.len() / 2;
    flipped[at] ^= 0x40;
    std::fs::write(&db, &flipped).unwrap();
    kmerdb()
        .arg("info")
        .arg(&db)
        .arg("--verify")
        .assert()
        .failure()
        .stderr(predicate::str::contains("corrupted").and(predicate::str::contains("shard")));

    let mut header = good.clone();
    header[70] ^= 1;
    std::fs::write(&db, &header).unwrap();
    kmerdb().arg("info").arg(&db).assert().failure().stderr(predicate::str::contains("checksum of its header"));

    std::fs::write(&db, &good[..good.len() - 100]).unwrap();
    kmerdb().arg("info").arg(&db).assert().failure().stderr(predicate::str::contains("truncated"));

    let mut version = good.clone();
    version[8] = 99;
    std::fs::write(&db, &version).unwrap();
    kmerdb().arg("info").arg(&db).assert().failure().stderr(predicate::str::contains("format version 99"));

    std::fs::write(&db, b"just some text, not an index").unwrap();
    kmerdb().arg("info").arg(&db).assert().failure().stderr(predicate::str::contains("not a kmerdb index"));

    kmerdb()
        .arg("info")
        .arg(dir.path().join("missing.db"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("missing.db"));
}

#[test]
fn version_is_one_parseable_line() {
    kmerdb().arg("--version").assert().success().stdout(predicate::str::is_match(r"^kmerdb \d+\.\d+\.\d+\n$").unwrap());
}

/// The error edge (issue 19): a missing index is named once with its cause, exit 1; flags that
/// must be at least 1 are usage errors, exit 2, as README says, before any file is opened.
#[test]
fn errors_name_their_cause_once_and_usage_errors_exit_2() {
    let out = kmerdb().args(["info", "nope.db"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("nope.db").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("No such file").count(), 1, "{stderr}");
    for flag in ["--threads", "--max-candidates", "--hitmin"] {
        let out = kmerdb().args(["classify", "-d", "none.db", flag, "0", "reads.fq"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} 0: {stderr}");
        assert!(stderr.contains(&format!("{flag} must be at least 1")), "{stderr}");
    }
    // Shares are checked by the library's `ClassifyConfig::validate` and `MergeConfig::validate`,
    // which the command calls: the same message and exit 2.
    for (command, flag) in [("classify", "--confidence"), ("classify", "--strain-margin"), ("merge", "--confidence")] {
        let out = kmerdb().args([command, flag, "1.5", "-o", "out.kraken", "reads.fq"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command} {flag} 1.5: {stderr}");
        assert!(stderr.contains(&format!("{flag} must be between 0 and 1")), "{stderr}");
    }
}

/// A folder given as the index, a Kraken 2 database's above all, gets a message saying what it
/// is (issue 18), not the system's "No such device".
#[test]
fn a_folder_or_a_kraken2_database_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let k2 = dir.path().join("k2db");
    std::fs::create_dir(&k2).unwrap();
    let out = kmerdb().arg("info").arg(&k2).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is a folder, not a kmerdb index") && !stderr.contains("Kraken 2"), "{stderr}");
    std::fs::write(k2.join("hash.k2d"), b"").unwrap();
    let out = kmerdb().arg("info").arg(&k2).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Kraken 2 database") && !stderr.contains("No such device"), "{stderr}");
}

/// `kmerdb inspect` (as kraken2-inspect): a Kraken report of the index's features. The root's
/// clade holds every feature `info` counts; every line is a taxon of the index's tree; E. coli's
/// clade holds the features of its strains; `--skip-counts` lists the whole tree with zeros;
/// `--json` gives the same counts; a missing index is an error naming it.
#[test]
fn inspect_reports_the_features_of_each_taxon() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("i.db");
    build_data(&db).assert().success();
    let info = kmerdb().arg("info").arg("--json").arg(&db).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let features = info["header"]["counts"]["features"].as_u64().expect("info's feature count");
    let out = kmerdb().arg("inspect").arg(&db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 6), "{text}");
    assert_eq!((rows[0][1], rows[0][4]), (features.to_string().as_str(), "1"), "the root's clade: {text}");
    let count = |taxid: &str, column: usize| -> u64 {
        rows.iter().find(|r| r[4] == taxid).map_or(0, |r| r[column].parse().unwrap())
    };
    // E. coli (562): its own features and those of its two strains in the bundled genomes.
    assert_eq!(count("562", 1), count("562", 2) + count("362663", 1) + count("83333", 1));
    let direct_sum: u64 = rows.iter().map(|r| r[2].parse::<u64>().unwrap()).sum();
    assert_eq!(direct_sum, features);

    let skip = kmerdb().arg("inspect").arg("--skip-counts").arg(&db).output().unwrap();
    let skip = String::from_utf8(skip.stdout).unwrap();
    assert!(skip.lines().count() > rows.len() && skip.lines().all(|l| l.split('\t').nth(1) == Some("0")), "{skip}");

    let json = kmerdb().arg("inspect").arg("--json").arg(&db).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let taxa = json.as_array().unwrap();
    assert_eq!(taxa.len(), rows.len());
    assert_eq!(taxa[0]["clade_features"].as_u64(), Some(features));
    assert_eq!(taxa[0]["percent"].as_f64(), Some(100.0));

    kmerdb()
        .arg("inspect")
        .arg(dir.path().join("missing.db"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("missing.db"));
}
