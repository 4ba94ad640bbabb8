//! `kmerdb bracken-prep`: Bracken's read distribution file from the index and its genomes.

use super::*;
use predicates::prelude::*;
use predicates::str::contains;
use std::collections::BTreeMap;

/// The file's rows: mapped taxid → [(genome taxid, count, total)].
fn rows(text: &str) -> BTreeMap<u32, Vec<(u32, u64, u64)>> {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("mapped_taxid\tgenome_taxids:kmers_mapped:total_genome_kmers"));
    lines
        .map(|l| {
            let (mapped, genomes) = l.split_once('\t').expect("two columns");
            assert!(genomes.ends_with(' '), "entries end with a space, as Bracken's own files: {l:?}");
            let entries = genomes
                .split_whitespace()
                .map(|e| {
                    let v: Vec<u64> = e.split(':').map(|x| x.parse().unwrap()).collect();
                    (v[0] as u32, v[1], v[2])
                })
                .collect();
            (mapped.parse().unwrap(), entries)
        })
        .collect()
}

/// Each genome taxon's stretches, counted from the genomes' sequence lengths: (L - N) / step + 1
/// per sequence (one for a sequence shorter than N).
fn expected_totals(read_length: u64, step: u64) -> BTreeMap<u32, u64> {
    let taxids: BTreeMap<String, u32> = std::fs::read_to_string(data().join("seqid2taxid.map"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            (f.next().unwrap().to_string(), f.next().unwrap().parse().unwrap())
        })
        .collect();
    let mut totals = BTreeMap::new();
    for file in genome_files() {
        let text = gunzip(&file);
        for record in text.split('>').skip(1) {
            let (header, seq) = record.split_once('\n').unwrap();
            let len = seq.bytes().filter(|b| !b.is_ascii_whitespace()).count() as u64;
            let id = header.split_whitespace().next().unwrap();
            let n = if len < read_length { 1 } else { (len - read_length) / step + 1 };
            *totals.entry(taxids[id]).or_default() += n;
        }
    }
    totals
}

#[test]
fn the_distribution_counts_every_stretch_and_does_not_depend_on_threads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    build_data(&db).assert().success();
    let prep = |threads: &str, out: &str| {
        kmerdb()
            .args(["bracken-prep", "-r", "150", "--step", "7", "-t", threads, "-o", out, "-d"])
            .arg(&db)
            .arg(data().join("genomes"))
            .current_dir(dir.path())
            .assert()
            .success()
            .stderr(contains("put on their own taxon"));
        std::fs::read_to_string(dir.path().join(out)).unwrap()
    };
    let one = prep("1", "one.kmer_distrib");
    assert_eq!(one, prep("2", "two.kmer_distrib"), "the same file on 1 and 2 threads");
    let rows = rows(&one);
    // Every genome's counts sum to its total, and the total is its number of stretches.
    let mut sums: BTreeMap<u32, u64> = BTreeMap::new();
    for entries in rows.values() {
        for &(genome, n, total) in entries {
            *sums.entry(genome).or_default() += n;
            assert_eq!(total, expected_totals(150, 7)[&genome], "genome {genome}'s total");
        }
    }
    assert_eq!(sums, expected_totals(150, 7));
    // Most of a genome's stretches are put on its own taxon (the index holds it).
    for (&genome, &total) in &sums {
        let own = rows.get(&genome).and_then(|e| e.iter().find(|x| x.0 == genome)).map_or(0, |x| x.1);
        assert!(own * 2 > total, "genome {genome}: {own} of {total} stretches on itself");
    }
    // By default the file goes beside the index under Bracken's name.
    kmerdb()
        .args(["bracken-prep", "-q", "-r", "100", "--step", "50", "-d"])
        .arg(&db)
        .arg(data().join("genomes"))
        .assert()
        .success();
    assert!(dir.path().join("database100mers.kmer_distrib").is_file());
}

#[test]
fn genomes_that_do_not_match_the_index_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    build_data(&db).assert().success();
    let out = dir.path().join("d.kmer_distrib");
    let prep_of = |read_length: &str| {
        let mut cmd = kmerdb();
        cmd.args(["bracken-prep", "-r", read_length, "--step", "25", "-o"]).arg(&out).arg("-d").arg(&db);
        cmd
    };
    let prep = || prep_of("150");
    // A sequence the index does not hold: named with its file and record.
    let stranger = dir.path().join("stranger.fa");
    std::fs::write(&stranger, ">not_in_index\nACGTACGTACGTACGTACGTACGTACGTACGTACGT\n").unwrap();
    prep().arg(data().join("genomes")).arg(&stranger).assert().code(1).stderr(
        contains("stranger.fa: record 1 ('not_in_index') is not a target of the index").and(contains("data.db")),
    );
    // Some genomes left out.
    prep()
        .arg(&genome_files()[0])
        .assert()
        .code(1)
        .stderr(contains("of the index's").and(contains("targets are not among the genomes")));
    // The same sequence twice (a file is read once however often it is named; a copy is not).
    let copy = dir.path().join("copy.fna.gz");
    std::fs::copy(&genome_files()[0], &copy).unwrap();
    prep().arg(data().join("genomes")).arg(&copy).assert().code(1).stderr(contains("was given before"));
    // A read length no k-mer fits in is bad usage.
    prep_of("5").arg(data().join("genomes")).assert().code(2).stderr(contains("--read-length must be at least"));
    assert!(!out.exists(), "no file is left by a failed run");
}
