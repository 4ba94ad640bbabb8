//! `kmerdb build --partition`, `classify --candidates-out` and `kmerdb merge`.

use super::{build_data, data, kmerdb, listing, shared};
use predicates::prelude::*;
use std::path::Path;

/// [`crate::build_refs`] with 2 threads and a location cap no feature reaches (so that the parts
/// and one index keep the same features).
fn build_refs(db: &Path, extra: &[&str]) {
    crate::build_refs(db, &[&["-t", "2", "--max-locations-per-feature", "100000"], extra].concat());
}

fn classify_mock(db: &Path, outputs: &[&str], dir: &Path) {
    let s = shared();
    kmerdb()
        .current_dir(dir)
        .args(["classify", "-q", "-t", "2", "-d"])
        .arg(db)
        .arg("-1")
        .arg(s.join("reads/mock_R1.fq.gz"))
        .arg("-2")
        .arg(s.join("reads/mock_R2.fq.gz"))
        .args(outputs)
        .assert()
        .success();
}

/// The test: the parts of `../shared/data/refs`, merged, give exactly the outputs of one
/// index of all of it (per-read lines with hit lists, kreport, abundances). The location cap is
/// set above any feature's count: a cap applies per part, so with the default (64) a feature
/// with more locations in all than in any part can be a clade feature of one index and a list in the parts,
/// which changes hit lists (calls and reports stayed the same on this data).
#[test]
fn merged_parts_equal_one_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_refs(&d.join("all.db"), &[]);
    classify_mock(
        &d.join("all.db"),
        &[
            "-o",
            "all.txt",
            "--report",
            "all.kreport",
            "--abundance",
            "all.tsv",
            "--cami",
            "all.cami",
            "--krona",
            "all.krona",
            "--mpa",
            "all.mpa",
        ],
        d,
    );
    let mut parts = Vec::new();
    for i in 1..=3 {
        let db = d.join(format!("p{i}.db"));
        build_refs(&db, &["--partition", &format!("{i}/3")]);
        let cand = format!("p{i}.cand.gz");
        classify_mock(&db, &["--candidates-out", &cand], d);
        parts.push(cand);
    }
    // The parts in any order.
    parts.reverse();
    kmerdb()
        .current_dir(d)
        .arg("merge")
        .args(&parts)
        .args([
            "-o",
            "m.txt",
            "--report",
            "m.kreport",
            "--abundance",
            "m.tsv",
            "--cami",
            "m.cami",
            "--krona",
            "m.krona",
        ])
        .args(["--mpa", "m.mpa", "--sample", "mock"])
        .assert()
        .success()
        .stderr(predicate::str::contains("merged 3 parts: 39504 reads"));
    for ext in ["txt", "kreport", "tsv", "cami", "krona", "mpa"] {
        let (one, merged) =
            (std::fs::read(d.join(format!("all.{ext}"))).unwrap(), std::fs::read(d.join(format!("m.{ext}"))).unwrap());
        assert!(one == merged, "merged .{ext} differs from one index's");
    }
}

#[test]
fn bad_partitions_and_candidate_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for bad in ["0/2", "3/2", "two"] {
        build_data(&d.join("x.db"))
            .args(["--partition", bad])
            .assert()
            .failure()
            .stderr(predicate::str::contains("--partition"));
    }
    build_data(&d.join("x.db"))
        .args(["--partition", "1/20"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("would be empty"));
    assert!(listing(d).is_empty(), "a failed build left {:?}", listing(d));

    // Two parts of data/ classified: one with the bundled pairs, one with the single reads.
    build_data(&d.join("p1.db")).args(["-q", "--partition", "1/2"]).assert().success();
    build_data(&d.join("p2.db")).args(["-q", "--partition", "2/2"]).assert().success();
    let reads = data().join("reads");
    kmerdb()
        .args(["classify", "-q", "-d"])
        .arg(d.join("p1.db"))
        .arg("-1")
        .arg(reads.join("sample_R1.fq.gz"))
        .arg("-2")
        .arg(reads.join("sample_R2.fq.gz"))
        .arg("--candidates-out")
        .arg(d.join("pairs.cand"))
        .assert()
        .success();
    kmerdb()
        .args(["classify", "-q", "-d"])
        .arg(d.join("p2.db"))
        .arg(reads.join("single.fa"))
        .arg("--candidates-out")
        .arg(d.join("single.cand"))
        .assert()
        .success();
    kmerdb()
        .arg("merge")
        .arg(d.join("pairs.cand"))
        .arg(d.join("single.cand"))
        .args(["-o"])
        .arg(d.join("m.txt"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("read 1:").and(predicate::str::contains("pairs.cand")));
    assert!(!d.join("m.txt").exists(), "a failed merge left its output");
    // Not a candidates file: the path is named.
    kmerdb()
        .arg("merge")
        .arg(reads.join("single.fa"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("single.fa").and(predicate::str::contains("not a kmerdb candidates file")));
}

/// The candidates of data/'s single reads against each part of data/ split in `parts`, built in
/// `d` as `{tag}{i}.db` and written to `{tag}{i}.cand`.
fn single_read_parts(d: &Path, tag: &str, parts: usize) -> Vec<std::path::PathBuf> {
    (1..=parts)
        .map(|i| {
            let db = d.join(format!("{tag}{i}.db"));
            build_data(&db).args(["-q", "--partition", &format!("{i}/{parts}")]).assert().success();
            let cand = d.join(format!("{tag}{i}.cand"));
            kmerdb()
                .args(["classify", "-q", "-o", "/dev/null", "-d"])
                .arg(&db)
                .arg(data().join("reads/single.fa"))
                .arg("--candidates-out")
                .arg(&cand)
                .assert()
                .success();
            cand
        })
        .collect()
}

/// Issue 30.4: merge took one part of two (137 of 200 reads classified, exit 0), the same part
/// twice, and parts of different builds. Each is now refused with exit 2, naming the parts.
#[test]
fn merge_takes_exactly_the_parts_of_one_build() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let two = single_read_parts(d, "a", 2);
    let three = single_read_parts(d, "b", 3);
    let merge = |parts: &[&std::path::PathBuf]| {
        let out = kmerdb().current_dir(d).arg("merge").args(parts).args(["-o", "m.kraken"]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = merge(&[&two[1], &two[0]]);
    assert_eq!(code, Some(0), "{stderr}");
    // Part 2 classified with another --hitmin: the setting and both values are named.
    let other_hitmin = d.join("a2.hitmin5.cand");
    kmerdb()
        .args(["classify", "-q", "-o", "/dev/null", "--hitmin", "5", "-d"])
        .arg(d.join("a2.db"))
        .arg(data().join("reads/single.fa"))
        .arg("--candidates-out")
        .arg(&other_hitmin)
        .assert()
        .success();
    for (parts, says) in [
        (vec![&two[0], &other_hitmin], "classified with different --hitmin (3 against 5)"),
        (vec![&two[0]], "part 2/2 of the build is missing"),
        (vec![&two[0], &two[0]], "are the same part"),
        (vec![&two[0], &three[1], &three[2]], "not parts of one partitioned build"),
        (vec![&three[0], &three[2]], "part 2/3 of the build is missing"),
    ] {
        std::fs::remove_file(d.join("m.kraken")).ok();
        let (code, stderr) = merge(&parts);
        assert_eq!(code, Some(2), "{parts:?}: {stderr}");
        assert!(stderr.contains(says), "{parts:?}: {stderr}");
        assert!(!d.join("m.kraken").exists(), "{parts:?}: a refused merge wrote its output");
    }
    // A whole index's candidates and a part's: not one build either.
    build_data(&d.join("whole.db")).arg("-q").assert().success();
    kmerdb()
        .current_dir(d)
        .args(["classify", "-q", "-o", "/dev/null", "-d", "whole.db", "--candidates-out", "whole.cand"])
        .arg(data().join("reads/single.fa"))
        .assert()
        .success();
    let (code, stderr) = merge(&[&d.join("whole.cand"), &two[1]]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// Issue 30.5: single-byte flips in a candidates file were merged with exit 0 and a different
/// output, or printed Rust `Debug` dumps. Every block now has a checksum: each flip is an error
/// naming the file (and the block), in words.
#[test]
fn every_damaged_byte_of_a_candidates_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let parts = single_read_parts(d, "p", 2);
    let good = std::fs::read(&parts[0]).unwrap();
    // Bytes spread over the whole file (header, records, end), each flipped alone.
    let step = (good.len() / 60).max(1);
    for at in (0..good.len()).step_by(step).chain([good.len() - 1]) {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(d.join("bad.cand"), &bad).unwrap();
        let out = kmerdb().current_dir(d).arg("merge").arg("bad.cand").arg(&parts[1]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "a flip at byte {at} of {} was merged: {stderr}", good.len());
        assert!(stderr.contains("bad.cand"), "{stderr}");
        assert!(!stderr.contains("kind:") && !stderr.contains(" { "), "Debug text: {stderr}");
    }
    // Cut short, anywhere.
    for len in [20, good.len() / 2, good.len() - 1] {
        std::fs::write(d.join("cut.cand"), &good[..len]).unwrap();
        let out = kmerdb().current_dir(d).arg("merge").arg("cut.cand").arg(&parts[1]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("cut.cand") && stderr.contains("truncated"), "{stderr}");
    }
}
