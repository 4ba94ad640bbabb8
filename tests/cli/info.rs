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
    for flag in ["--threads", "--max-candidates"] {
        let out = kmerdb().args(["classify", "-d", "none.db", flag, "0", "reads.fq"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} 0: {stderr}");
        assert!(stderr.contains(&format!("{flag} must be at least 1")), "{stderr}");
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
