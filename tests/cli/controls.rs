//! Issue 33's negative controls, against Kraken 2 on the same inputs: reads that should stay
//! unclassified, or be called no lower than their nearest indexed relative allows. kmerdb's false
//! positives on them must be at most Kraken 2's (`bench/negative-controls.sh` and
//! `HELDOUT_SET=families bench/heldout.sh` measure the same on simulated reads, with the protein
//! stage too).
//!
//! Both tools index `../shared/data/refs` without four whole families (as `bench/heldout.sh`'s
//! families set): the reads of those families' genomes, cut from them, have no relative in
//! either index below the order, so a call that is not an ancestor of their taxon is false. The
//! mock's reads with their bases shuffled (`classify::shuffled_mock`) should not be called at all.
//! Kraken 2 (Debian's `kraken2`, which `scripts/test-deps.sh` installs) builds its database with
//! `../shared/tools/kraken2_db.sh`, kept under the tests' target folder between runs.

use crate::{kmerdb, shared};
use kmerdb::taxonomy::{NcbiTaxonomy, TaxId};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Helicobacteraceae, Mycobacteriaceae, Filoviridae and Orthomyxoviridae: every genome of each.
const LEFT_OUT: [&str; 13] = [
    "Hpy_Puno120",
    "Hpy_ELS37",
    "Hpy_SJM180",
    "Hpy_Gambia94_24",
    "Hpy_G27",
    "Mtb_H37Rv",
    "Marburg",
    "BDBV",
    "SUDV",
    "IAV_H1N1_PR8",
    "IAV_H2N2_Korea1968",
    "IAV_H3N2_NY392",
    "IBV_Brisbane60",
];

/// Read pairs cut from each left-out genome.
const PAIRS_PER_GENOME: usize = 300;

/// A folder of the refs but the left-out genomes (links), with the refs' seqid-to-taxid map.
fn refs_without_families(dir: &Path) -> PathBuf {
    let refs = shared().join("refs");
    let out = dir.join("refs");
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(&refs).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let genome = name.strip_suffix(".fna.gz");
        if genome.is_some_and(|g| !LEFT_OUT.contains(&g)) || name == "seqid2taxid.map" {
            std::os::unix::fs::symlink(&path, out.join(&name)).unwrap();
        }
    }
    out
}

/// Kraken 2's database of `refs`, built once and kept under the tests' target folder (a build
/// takes about half a minute, the rest of the test a few seconds), under a name that changes with
/// the genomes' names and sizes. Built in a folder of its own and renamed into place, so that a
/// build cut short or two test runs at once never leave a half-built database there.
fn kraken2_db(refs: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut inputs: Vec<(String, u64)> = std::fs::read_dir(refs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::metadata(&p).unwrap().len()))
        .collect();
    inputs.sort();
    let mut hasher = std::hash::DefaultHasher::new();
    inputs.hash(&mut hasher);
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let db = cache.join(format!("kraken2-refs-{:016x}", hasher.finish()));
    if db.join("hash.k2d").is_file() {
        return db;
    }
    // kraken2_db.sh would install Kraken 2 itself (as root); a test should not.
    let found = Command::new("kraken2-build").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "kraken2-build not found: scripts/test-deps.sh installs Kraken 2");
    let building = tempfile::tempdir_in(cache).unwrap();
    let out = Command::new("bash")
        .arg(shared().join("../tools/kraken2_db.sh"))
        .arg(refs)
        .arg(shared().join("taxonomy"))
        .arg(building.path().join("db"))
        .arg("2")
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "kraken2_db.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    // Another run may have put its own there first: either is the same database.
    if std::fs::rename(building.path().join("db"), &db).is_err() {
        assert!(db.join("hash.k2d").is_file(), "no Kraken 2 database at {}", db.display());
    }
    db
}

/// Read pairs cut without errors from the left-out genomes (seeded: the same reads every run),
/// written under `dir`, with each pair's taxon.
fn family_reads(dir: &Path) -> ([PathBuf; 2], Vec<TaxId>) {
    let map: HashMap<String, TaxId> = std::fs::read_to_string(shared().join("refs/seqid2taxid.map"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(id, taxid)| (id.to_owned(), taxid.trim().parse().unwrap()))
        .collect();
    let paths = [dir.join("families_R1.fq"), dir.join("families_R2.fq")];
    let mut files = paths.clone().map(|p| std::io::BufWriter::new(std::fs::File::create(p).unwrap()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    let mut taxa = Vec::new();
    for genome in LEFT_OUT {
        let mut reader = needletail::parse_fastx_file(shared().join(format!("refs/{genome}.fna.gz"))).unwrap();
        let mut sequences = Vec::new();
        while let Some(record) = reader.next() {
            let record = record.unwrap();
            let id = String::from_utf8_lossy(record.id()).split(' ').next().unwrap().to_owned();
            let seq = record.seq().to_ascii_uppercase();
            if seq.len() >= 400 {
                sequences.push((map[&id], seq));
            }
        }
        for _ in 0..PAIRS_PER_GENOME {
            let (taxon, seq) = &sequences[rng.random_range(0..sequences.len())];
            let insert = rng.random_range(250..=350);
            let start = rng.random_range(0..=seq.len() - insert);
            let mut fragment = seq[start..start + insert].to_vec();
            if rng.random_bool(0.5) {
                fragment = reverse_complement(&fragment);
            }
            let mates = [fragment[..150].to_vec(), reverse_complement(&fragment)[..150].to_vec()];
            for (m, (file, mate)) in files.iter_mut().zip(&mates).enumerate() {
                let quality = "I".repeat(mate.len());
                writeln!(file, "@f{}/{}\n{}\n+\n{quality}", taxa.len(), m + 1, String::from_utf8_lossy(mate)).unwrap();
            }
            taxa.push(*taxon);
        }
    }
    files.iter_mut().for_each(|f| f.flush().unwrap());
    (paths, taxa)
}

fn reverse_complement(seq: &[u8]) -> Vec<u8> {
    let complement = |b: &u8| match b {
        b'A' => b'T',
        b'C' => b'G',
        b'G' => b'C',
        b'T' => b'A',
        _ => b'N',
    };
    seq.iter().rev().map(complement).collect()
}

/// The calls of a Kraken-format output (kmerdb's or Kraken 2's), in read order: 0 unclassified.
fn calls(kraken_lines: &str) -> Vec<TaxId> {
    let call = |l: &str| if l.starts_with("C\t") { l.split('\t').nth(2).unwrap().parse().unwrap() } else { 0 };
    kraken_lines.lines().map(call).collect()
}

fn kmerdb_calls(db: &Path, [r1, r2]: &[PathBuf; 2]) -> Vec<TaxId> {
    let out = kmerdb()
        .args(["classify", "-q", "-t", "2", "-d"])
        .arg(db)
        .arg("-1")
        .arg(r1)
        .arg("-2")
        .arg(r2)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    calls(&String::from_utf8(out.stdout).unwrap())
}

fn kraken2_calls(db: &Path, [r1, r2]: &[PathBuf; 2]) -> Vec<TaxId> {
    let out = Command::new("kraken2")
        .arg("--db")
        .arg(db)
        // Per-read lines go to stdout by default (`--output -` would drop them).
        .args(["--threads", "2", "--paired"])
        .arg(r1)
        .arg(r2)
        .output()
        .expect("kraken2 not found: scripts/test-deps.sh installs it");
    assert!(out.status.success(), "kraken2: {}", String::from_utf8_lossy(&out.stderr));
    calls(&String::from_utf8(out.stdout).unwrap())
}

/// The calls that are not an ancestor of the read's taxon (a call above its family is right,
/// if vague; one on another lineage is a false positive).
fn false_calls(calls: &[TaxId], truth: &[TaxId], taxonomy: &NcbiTaxonomy) -> usize {
    assert_eq!(calls.len(), truth.len());
    calls.iter().zip(truth).filter(|&(&c, &t)| c != 0 && !taxonomy.lineage(t).contains(&c)).count()
}

#[test]
fn negative_controls_are_called_no_more_than_by_kraken2() {
    let dir = tempfile::tempdir().unwrap();
    let refs = refs_without_families(dir.path());
    let db = dir.path().join("refs.db");
    crate::build_refs_folder(&refs, &db, &["-t", "2"]);
    let kraken = kraken2_db(&refs);
    let taxonomy = NcbiTaxonomy::load_dir_without_names(&shared().join("taxonomy")).unwrap();

    let (reads, truth) = family_reads(dir.path());
    let ours = false_calls(&kmerdb_calls(&db, &reads), &truth, &taxonomy);
    let theirs = false_calls(&kraken2_calls(&kraken, &reads), &truth, &taxonomy);
    eprintln!("left-out families: {} pairs, false calls kmerdb {ours}, Kraken 2 {theirs}", truth.len());
    assert!(ours <= theirs, "left-out families' reads: kmerdb {ours} false calls, Kraken 2 {theirs}");

    let shuffled = crate::classify::shuffled_mock(dir.path());
    let called = |calls: Vec<TaxId>| calls.iter().filter(|&&c| c != 0).count();
    let (ours, theirs) = (called(kmerdb_calls(&db, &shuffled)), called(kraken2_calls(&kraken, &shuffled)));
    eprintln!("the mock shuffled: calls kmerdb {ours}, Kraken 2 {theirs}");
    assert!(ours <= theirs, "shuffled reads: kmerdb called {ours}, Kraken 2 {theirs}");
}
