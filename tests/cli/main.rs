//! Integration tests: the real `kmerdb` binary on the bundled genomes in `data/`, one module per
//! subcommand.

mod bracken;
mod build;
mod classify;
mod clobber;
mod controls;
mod download;
mod faults;
mod info;
mod install;
mod merge;
mod messages;
mod protein;
mod recipe;
mod report_tools;
mod update;
mod workflows;

use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// The repository's bundled data folder.
pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// `../shared/data` beside the repository (CI puts it there).
pub fn shared() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    assert!(p.join("refs").is_dir(), "these tests need ../shared/data beside the repository");
    p
}

/// `kmerdb` with a fixed build date, so that indexes built in tests are reproducible.
pub fn kmerdb() -> Command {
    let mut cmd = Command::cargo_bin("kmerdb").expect("the kmerdb binary is built");
    cmd.env("SOURCE_DATE_EPOCH", "1700000000").env_remove("KMERDB_DB");
    cmd
}

/// `kmerdb` as a std `Command` (to spawn, signal, or give it open files as stdin and stdout), set
/// up as [`kmerdb`] is.
pub fn kmerdb_process() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kmerdb"));
    c.env("SOURCE_DATE_EPOCH", "1700000000").env_remove("KMERDB_DB");
    c
}

/// `kmerdb build` of the bundled genomes with their taxonomy, to `db`.
pub fn build_data(db: &Path) -> Command {
    build_genomes(db, [data().join("genomes")])
}

/// `kmerdb build` of `genomes` (files or folders of `data/`'s genomes) with the bundled taxonomy,
/// to `db`.
pub fn build_genomes(db: &Path, genomes: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>) -> Command {
    let mut cmd = kmerdb();
    cmd.arg("build")
        .arg("-d")
        .arg(db)
        .arg("--taxonomy")
        .arg(data().join("taxonomy"))
        .arg("--seqid2taxid")
        .arg(data().join("seqid2taxid.map"))
        .args(genomes);
    cmd
}

/// The sections of the index `db` as `kmerdb info --json` lists them, all but the provenance
/// (the one section an update and a fresh build of the same genomes may differ in).
pub fn sections_but_provenance(db: &Path) -> Vec<serde_json::Value> {
    let out = kmerdb().arg("info").arg("--json").arg(db).output().unwrap();
    assert!(out.status.success(), "kmerdb info {}: {}", db.display(), String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = info["sections"].as_array().unwrap();
    assert!(all.iter().any(|s| s["name"] == "provenance"), "{info}");
    all.iter().filter(|s| s["name"] != "provenance").cloned().collect()
}

/// Builds an index of all of `../shared/data/refs` with its taxonomy at `db`, with `extra` flags;
/// panics if the build fails.
pub fn build_refs(db: &Path, extra: &[&str]) {
    build_refs_folder(&shared().join("refs"), db, extra);
}

/// [`build_refs`] of a folder laid out as `../shared/data/refs` (genomes and `seqid2taxid.map`),
/// such as a part of it.
pub fn build_refs_folder(refs: &Path, db: &Path, extra: &[&str]) {
    kmerdb()
        .args(["build", "-q", "-d"])
        .arg(db)
        .arg("--taxonomy")
        .arg(shared().join("taxonomy"))
        .arg("--seqid2taxid")
        .arg(refs.join("seqid2taxid.map"))
        .arg(refs)
        .args(extra)
        .assert()
        .success();
}

/// `kmerdb classify` of the bundled read pairs against `db`.
pub fn classify_pairs(db: &Path) -> Command {
    let reads = data().join("reads");
    let mut cmd = kmerdb();
    cmd.arg("classify").arg("-d").arg(db);
    cmd.arg("-1").arg(reads.join("sample_R1.fq.gz")).arg("-2").arg(reads.join("sample_R2.fq.gz"));
    cmd
}

/// The genome files of `data/genomes`, sorted.
pub fn genome_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(data().join("genomes")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

/// `bytes` as one gzip member.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Decompressed text of a gzipped file.
pub fn gunzip(path: &Path) -> String {
    use std::io::Read;
    let mut s = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap()).read_to_string(&mut s).unwrap();
    s
}

/// Files in `dir`, for checking that a failed command left nothing behind.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}
