//! `kmerdb build`: real genomes, determinism, and every kind of bad input.

use crate::{build_data, data, genome_files, gunzip, kmerdb, listing};
use predicates::prelude::*;
use std::path::Path;

#[test]
fn builds_the_bundled_genomes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    build_data(&db)
        .assert()
        .success()
        .stderr(predicate::str::contains("built").and(predicate::str::contains("7 targets")));
    let info = kmerdb().args(["info", "--json"]).arg(&db).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(json["header"]["counts"]["targets"], 7);
    assert_eq!(json["header"]["sketch"]["k"], 16);
    let taxids: Vec<u64> = json["targets"].as_array().unwrap().iter().map(|t| t["taxid"].as_u64().unwrap()).collect();
    assert!(taxids.contains(&10710) && taxids.contains(&93062), "{taxids:?}");
}

/// Regression: shards by the features' top bits (format version 1) were lopsided, because sketches
/// keep each window's smallest hash values; on 4 GPUs one GPU got every feature. Shards by the low
/// bits hold even shares.
#[test]
fn shards_hold_even_shares_of_the_features() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    build_data(&db).assert().success();
    let index = kmerdb::index::Index::open(&db, kmerdb::index::Verify::Metadata).unwrap();
    let per_shard: Vec<usize> = (0..index.shard_count()).map(|s| index.shard_keys(s).slots().count()).collect();
    let mean = per_shard.iter().sum::<usize>() as f64 / per_shard.len() as f64;
    let (min, max) = (*per_shard.iter().min().unwrap() as f64, *per_shard.iter().max().unwrap() as f64);
    assert!(mean > 500.0, "too few features to judge: {per_shard:?}");
    assert!(max < 1.2 * mean && min > 0.8 * mean, "features per shard: {per_shard:?}");
}

#[test]
fn same_bytes_for_any_thread_count_and_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = genome_files();
    let build = |name: &str, threads: &str, files: &[std::path::PathBuf]| {
        let db = dir.path().join(name);
        kmerdb()
            .args(["build", "-t", threads, "--taxonomy"])
            .arg(data().join("taxonomy"))
            .arg("--seqid2taxid")
            .arg(data().join("seqid2taxid.map"))
            .arg("-d")
            .arg(&db)
            .args(files)
            .assert()
            .success();
        std::fs::read(db).unwrap()
    };
    let one = build("a.db", "1", &files);
    files.reverse();
    let two = build("b.db", "2", &files);
    files.rotate_left(3);
    let three = build("c.db", "3", &files);
    assert!(one == two && two == three, "index bytes differ between runs");
}

#[test]
fn bare_genomes_without_taxonomy_are_their_own_taxa() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bare.db");
    kmerdb()
        .arg("build")
        .arg("-d")
        .arg(&db)
        .arg(data().join("genomes/Phage_lambda.fna.gz"))
        .assert()
        .success()
        .stderr(predicate::str::contains("warn: no --taxonomy"));
    let out = kmerdb().args(["info", "--json"]).arg(&db).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["header"]["taxonomy"], "PerSequence");
    assert_eq!(json["targets"][0]["taxid"], 3_000_000_000u64);
    // Classify says so too, once per run.
    let reads = data().join("reads/single.fa");
    let out = kmerdb().args(["classify", "-o", "/dev/null", "-d"]).arg(&db).arg(reads).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("was built without a taxonomy").count(), 1, "{stderr}");
}

#[test]
fn reads_fasta_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stdin.db");
    let fasta = gunzip(&data().join("genomes/Phage_lambda.fna.gz"));
    kmerdb().arg("build").arg("-d").arg(&db).arg("-").write_stdin(fasta).assert().success();
    assert!(db.exists());
}

#[test]
fn db_defaults_to_kmerdb_db_or_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let lambda = data().join("genomes/Phage_lambda.fna.gz");
    kmerdb().current_dir(dir.path()).arg("build").arg(&lambda).assert().success();
    assert!(dir.path().join("kmerdb.db").exists());
    kmerdb().current_dir(dir.path()).env("KMERDB_DB", "env.db").arg("build").arg(&lambda).assert().success();
    assert!(dir.path().join("env.db").exists());
}

#[test]
fn sequences_without_taxid_are_left_out_with_a_warning_or_refused_with_strict() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let fasta = dir.path().join("g.fa");
    std::fs::write(
        &fasta,
        ">tagged|kraken:taxid|10710\nACGTACGTTGCAACGTAGCTAGCTAGGATCGATCG\n>untagged\nACGATCGATCGGGATCGATTACG\n",
    )
    .unwrap();
    let base = || {
        let mut c = kmerdb();
        c.arg("build").arg("-d").arg(&db).arg("--taxonomy").arg(data().join("taxonomy")).arg(&fasta);
        c
    };
    base()
        .assert()
        .success()
        .stderr(predicate::str::contains("1 sequences have no taxid").and(predicate::str::contains("untagged")));
    std::fs::remove_file(&db).unwrap();
    base().arg("--strict").assert().failure().stderr(predicate::str::contains("untagged"));
    assert!(!db.exists());
}

#[test]
fn accession2taxid_maps_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("nucl.accession2taxid");
    std::fs::write(&map, "accession\taccession.version\ttaxid\tgi\nNC_001416\tNC_001416.1\t10710\t9626243\n").unwrap();
    let db = dir.path().join("x.db");
    kmerdb()
        .arg("build")
        .arg("-d")
        .arg(&db)
        .arg("--strict")
        .arg("--taxonomy")
        .arg(data().join("taxonomy"))
        .arg("--seqid2taxid")
        .arg(&map)
        .arg(data().join("genomes/Phage_lambda.fna.gz"))
        .assert()
        .success();
}

/// Runs a build that must fail: exit `code` (2: bad usage, 1: bad input or a failed write), a
/// message containing each of `expect`, and no index (nor temporary file) left in `dir`.
fn fails(dir: &Path, code: i32, args: &[&std::ffi::OsStr], expect: &[&str]) {
    let before = listing(dir);
    let out = kmerdb().current_dir(dir).arg("build").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "message lacks {e:?}: {stderr}");
    }
    assert_eq!(listing(dir), before, "a failed build left files behind");
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn bad_inputs_fail_clearly_and_leave_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let lambda = data().join("genomes/Phage_lambda.fna.gz");
    let empty = write("empty.fa", b"");
    let text = write("notes.fa", b"these are not sequences\n");
    let fastq = write("reads.fq", b"@r1\nACGTACGTACGTACGTACGT\n+\nIIIIIIIIIIIIIIIIIIII\n");
    let dup_a = write("dup_a.fa", b">same_id\nACGTACGTACGTACGTACGTAAA\n");
    let dup_b = write("dup_b.fa", b">other\nACGTACGTACGTAAAAAGGG\n>same_id\nACGTACGTACGTACGTACGT\n");
    let bad_taxid = write("badtaxid.fa", b">x|kraken:taxid|99999999\nACGTACGTACGTACGTACGT\n");
    let gz = std::fs::read(&lambda).unwrap();
    let truncated = write("cut.fna.gz", &gz[..gz.len() / 2]);
    std::fs::create_dir(d.join("tax")).unwrap();
    std::fs::copy(data().join("taxonomy/names.dmp"), d.join("tax/names.dmp")).unwrap();
    let mut nodes = std::fs::read_to_string(data().join("taxonomy/nodes.dmp")).unwrap();
    nodes.push_str("12345\t|\tnot-a-number\t|\tspecies\t|\n");
    std::fs::write(d.join("tax/nodes.dmp"), nodes).unwrap();
    std::fs::create_dir(d.join("readonly")).unwrap();

    fails(d, 1, &[os("nope.fa")], &["nope.fa", "no such file"]);
    fails(d, 1, &[empty.as_os_str()], &["empty.fa", "empty"]);
    fails(d, 1, &[text.as_os_str()], &["notes.fa", "not a FASTA"]);
    fails(d, 1, &[truncated.as_os_str()], &["cut.fna.gz", "truncated"]);
    fails(d, 1, &[fastq.as_os_str()], &["reads.fq", "record 1", "'r1'", "FASTQ"]);
    fails(d, 1, &[dup_a.as_os_str(), dup_b.as_os_str()], &["same_id", "dup_a.fa record 1", "dup_b.fa record 2"]);
    let tax = data().join("taxonomy");
    fails(d, 1, &[os("--taxonomy"), tax.as_os_str(), bad_taxid.as_os_str()], &["badtaxid.fa", "record 1", "99999999"]);
    let badtax = d.join("tax");
    fails(d, 1, &[os("--taxonomy"), badtax.as_os_str(), lambda.as_os_str()], &["nodes.dmp", "line"]);
    fails(d, 2, &[os("-k"), os("33"), lambda.as_os_str()], &["k must be between 1 and 32"]);
    fails(
        d,
        2,
        &[os("-k"), os("20"), os("-w"), os("19"), lambda.as_os_str()],
        &["window (19) must be at least k (20)"],
    );
    fails(d, 1, &[os("-d"), os("missing/dir/x.db"), lambda.as_os_str()], &["missing/dir", "does not exist"]);

    // An unwritable directory (permissions do not bind root, so only check as a normal user).
    let ro = d.join("readonly");
    let mut perms = std::fs::metadata(&ro).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&ro, perms).unwrap();
    if tempfile::tempfile_in(&ro).is_err() {
        let target = ro.join("x.db");
        fails(d, 1, &[os("-d"), target.as_os_str(), lambda.as_os_str()], &["readonly", "not writable"]);
    }
}

#[test]
fn a_failed_build_keeps_the_older_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keep.db");
    build_data(&db).assert().success();
    let before = std::fs::read(&db).unwrap();
    let bad = dir.path().join("bad.fa");
    std::fs::write(&bad, b"not fasta").unwrap();
    kmerdb().arg("build").arg("-d").arg(&db).arg(&bad).assert().failure();
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(listing(dir.path()), vec!["bad.fa", "keep.db"]);
}

/// Issue 30.6: blank sequences (0 bases), an all-N genome and `-k 1` (every feature over the
/// location cap) built indexes of "0 features" with exit 0, which classify nothing. Such a build
/// is now an error that says why, and leaves no index; a sequence that gives no features beside
/// others that do is a warning naming it (the first few, then a count).
#[test]
fn an_index_that_could_classify_nothing_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("blank.fa"), ">a\n\n>b\n\n").unwrap();
    std::fs::write(d.join("n.fa"), format!(">n\n{}\n", "N".repeat(500))).unwrap();
    let lambda = genome_files().into_iter().find(|p| p.to_string_lossy().contains("lambda")).unwrap();
    for (args, says) in [
        (vec!["blank.fa"], "no sequence holds 16 valid bases"),
        (vec!["n.fa"], "no sequence holds 16 valid bases"),
        (vec!["-k", "1", lambda.to_str().unwrap()], "all 2 features are in more than --max-locations-per-feature"),
    ] {
        let out = kmerdb().current_dir(d).args(["build", "-d", "x.db"]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("nothing to index") && stderr.contains(says), "{args:?}: {stderr}");
        assert!(!d.join("x.db").exists() && !listing(d).iter().any(|n| n.contains(".kmerdb-")), "{:?}", listing(d));
    }
    // Six featureless sequences among real ones: built, with a warning naming five and counting one.
    let mut some = String::new();
    for i in 0..6 {
        some.push_str(&format!(">empty{i}\nACGTNACGT\n"));
    }
    std::fs::write(d.join("some.fa"), some).unwrap();
    let out = kmerdb().current_dir(d).args(["build", "-d", "x.db", "some.fa"]).arg(&lambda).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("6 sequences give the index no features"), "{stderr}");
    assert!(stderr.contains("'empty0' (some.fa record 1, 9 bases)") && stderr.contains("and 1 more"), "{stderr}");
    assert!(!stderr.contains("empty5"), "{stderr}");
}
