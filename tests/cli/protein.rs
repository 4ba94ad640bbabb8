//! `build --protein` and classify's protein stage: reads whose DNA the index does not share but
//! whose proteins it does are placed at genus; the stage changes nothing else.

use super::*;
use predicates::prelude::*;
use predicates::str::contains;
use std::path::Path;

/// Phage lambda with every third base (positions 2, 5, 8...) changed by a transition (A<->G,
/// C<->T): most of its 16-mers are gone, while genes read in that frame keep most of their
/// amino acids (a transition at a codon's third base is mostly synonymous).
fn mutated_lambda() -> Vec<u8> {
    let text = gunzip(&data().join("genomes/Phage_lambda.fna.gz"));
    let seq: Vec<u8> = text.lines().skip(1).flat_map(|l| l.trim().bytes()).collect();
    seq.iter()
        .enumerate()
        .map(|(i, &b)| {
            if i % 3 == 2 {
                match b {
                    b'A' => b'G',
                    b'G' => b'A',
                    b'C' => b'T',
                    b'T' => b'C',
                    x => x,
                }
            } else {
                b
            }
        })
        .collect()
}

/// Single-end reads of 150 bases every 50 bases of `seq`, as FASTA.
fn write_reads(seq: &[u8], path: &Path) {
    let mut fasta = String::new();
    for (n, start) in (0..seq.len() - 150).step_by(50).enumerate() {
        fasta.push_str(&format!(">m{n}\n{}\n", String::from_utf8_lossy(&seq[start..start + 150])));
    }
    std::fs::write(path, fasta).unwrap();
}

/// Taxids of the reads' calls, in order (0: unclassified).
fn calls(db: &Path, reads: &Path, extra: &[&str]) -> Vec<u32> {
    let out = kmerdb().arg("classify").arg("-q").arg("-d").arg(db).args(extra).arg(reads).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.split('\t').nth(2).unwrap().parse().unwrap()).collect()
}

#[test]
fn divergent_reads_are_placed_at_genus_by_their_proteins() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, protein) = (dir.path().join("plain.db"), dir.path().join("protein.db"));
    build_data(&plain).assert().success();
    build_data(&protein).arg("--protein").assert().success();
    let reads = dir.path().join("mutated.fa");
    write_reads(&mutated_lambda(), &reads);
    let without = calls(&plain, &reads, &[]);
    let with = calls(&protein, &reads, &[]);
    let off = calls(&protein, &reads, &["--protein-hitmin", "0"]);
    assert_eq!(without, off, "with the stage off, the protein index classifies as the plain one");
    // Lambdavirus, the genus of phage lambda (10710) in the bundled taxonomy.
    let genus = 186765;
    let dna = without.iter().filter(|&&t| t != 0).count();
    let placed = with.iter().zip(&without).filter(|&(&w, &d)| w == genus && d == 0).count();
    // Lambda-like prophages of the E. coli genomes carry relatives of lambda's proteins: a read
    // may go to Escherichia (561), or to the root when it ties the two. Nothing else.
    let elsewhere: Vec<u32> =
        with.iter().zip(&without).filter(|&(&w, &d)| w != d && ![genus, 561, 1].contains(&w)).map(|x| *x.0).collect();
    assert!(dna * 10 < without.len(), "the mutations hide the DNA: {dna} of {} reads classified", without.len());
    assert!(placed * 10 > without.len(), "the protein stage places {placed} of {} reads", without.len());
    assert!(elsewhere.is_empty(), "the protein stage placed reads on {elsewhere:?}");
    // Reads the DNA stage classifies are as they were.
    let sample = data().join("reads/single.fa");
    assert_eq!(calls(&plain, &sample, &[]), calls(&protein, &sample, &[]));
}

#[test]
fn the_protein_section_is_deterministic_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = |threads: &str| {
        let db = dir.path().join(format!("t{threads}.db"));
        build_data(&db).args(["--protein", "-t", threads]).assert().success();
        std::fs::read(&db).unwrap()
    };
    let one = bytes("1");
    assert!(one == bytes("2"), "the same index on 1 and 2 threads");
    let db = dir.path().join("t1.db");
    let info = kmerdb().arg("info").arg("--json").arg(&db).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let protein = json["sections"].as_array().unwrap().iter().find(|s| s["name"] == "protein").unwrap().clone();
    assert!(protein["bytes"].as_u64().unwrap() > 1000, "{protein}");
    assert_eq!(json["protein"]["k"], 7);
    assert!(json["protein"]["entries"].as_u64().unwrap() >= json["protein"]["kmers"].as_u64().unwrap());
    kmerdb().arg("info").arg(&db).assert().success().stdout(contains("amino-acid 7-mers"));
    kmerdb().args(["info", "--verify"]).arg(&db).assert().success();
    // A damaged table: opening reads only its lengths; --verify reads it all and names it.
    let damaged = dir.path().join("damaged.db");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[protein["offset"].as_u64().unwrap() as usize + 100] ^= 0x55;
    std::fs::write(&damaged, bytes).unwrap();
    kmerdb().arg("info").arg(&damaged).assert().success();
    kmerdb().args(["info", "--verify"]).arg(&damaged).assert().code(1).stderr(contains("protein section"));
    let plain = dir.path().join("plain.db");
    build_data(&plain).assert().success();
    let info = kmerdb().arg("info").arg("--json").arg(&plain).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let empty = json["sections"].as_array().unwrap().iter().find(|s| s["name"] == "protein").unwrap().clone();
    assert_eq!(empty["bytes"], 0, "{empty}");
    assert!(json["protein"].is_null());
}

#[test]
fn partitioned_runs_refuse_the_protein_stage_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("protein.db");
    build_data(&db).arg("--protein").assert().success();
    // Partitioned runs: merge cannot redo the stage.
    classify_pairs(&db)
        .arg("--candidates-out")
        .arg(dir.path().join("c.cand"))
        .assert()
        .code(1)
        .stderr(contains("amino-acid table").and(contains("--protein-hitmin 0")));
    assert!(!dir.path().join("c.cand").exists());
    classify_pairs(&db)
        .args(["--protein-hitmin", "0", "-o", "/dev/null", "--candidates-out"])
        .arg(dir.path().join("c.cand"))
        .assert()
        .success();
    kmerdb()
        .args(["build", "--protein-sample", "0", "--protein", "-d"])
        .arg(dir.path().join("x.db"))
        .arg(data().join("genomes"))
        .assert()
        .code(2);
}

/// `update` carries the amino-acid table: removing phage lambda, then adding it back, gives the
/// sections of fresh `--protein` builds (only the provenance differs), the protein section
/// included.
#[test]
fn update_carries_the_protein_table_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let without_lambda: Vec<_> = genome_files().into_iter().filter(|f| !f.ends_with("Phage_lambda.fna.gz")).collect();
    let fresh_all = dir.path().join("all.db");
    build_data(&fresh_all).arg("--protein").assert().success();
    let fresh_without = dir.path().join("without.db");
    build_genomes(&fresh_without, &without_lambda).arg("--protein").assert().success();
    let removed = dir.path().join("removed.db");
    let mut cmd = kmerdb();
    cmd.arg("update").arg("-d").arg(&fresh_all).arg("--remove-targets").arg(data().join("remove_targets.txt"));
    cmd.arg("-o").arg(&removed).assert().success();
    let added = dir.path().join("added.db");
    let mut cmd = kmerdb();
    cmd.arg("update").arg("-d").arg(&removed).arg("--add").arg(data().join("genomes/Phage_lambda.fna.gz"));
    cmd.arg("--taxonomy").arg(data().join("taxonomy")).arg("--seqid2taxid").arg(data().join("seqid2taxid.map"));
    cmd.arg("-o").arg(&added).assert().success();
    let sections = sections_but_provenance;
    assert_eq!(sections(&removed), sections(&fresh_without), "removing lambda equals a fresh build without it");
    assert_eq!(sections(&added), sections(&fresh_all), "adding it back equals a fresh build of all");
    let protein = |db: &Path| sections(db).into_iter().find(|s| s["name"] == "protein").unwrap();
    assert_ne!(protein(&removed), protein(&fresh_all), "the protein section changed with the targets");
}
