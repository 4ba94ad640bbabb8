//! Messages that say what is wrong (issue 30.9): each case gave a misleading message before.

use crate::{build_data, genome_files, kmerdb, kmerdb_process};
use std::path::Path;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The first 3,000 bases of phage lambda as FASTA.
fn lambda_head(dir: &Path) -> std::path::PathBuf {
    let lambda = genome_files().into_iter().find(|p| p.to_string_lossy().contains("lambda")).unwrap();
    let text = crate::gunzip(&lambda);
    let seq: String = text.lines().skip(1).collect::<String>().chars().take(3000).collect();
    let path = dir.join("lambda.fa");
    std::fs::write(&path, format!(">lambda\n{seq}\n")).unwrap();
    path
}

/// A bz2 or zstd genome cut to a few bytes said "the file is empty" in build (classify said
/// truncated). Every codec cut short is now named truncated or corrupt, in both.
#[test]
fn a_compressed_file_cut_short_is_truncated_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fa = lambda_head(d);
    build_data(&d.join("x.db")).arg("-q").assert().success();
    for (codec, tool) in [("gz", "gzip"), ("bz2", "bzip2"), ("xz", "xz"), ("zst", "zstd")] {
        let packed = std::process::Command::new(tool).arg("-c").arg(&fa).output().unwrap().stdout;
        let cut = d.join(format!("cut.fa.{codec}"));
        std::fs::write(&cut, &packed[..30.min(packed.len() - 1)]).unwrap();
        for cmd in [["build", "-d", "y.db"], ["classify", "-d", "x.db"]] {
            let out = kmerdb().current_dir(d).args(cmd).arg(&cut).output().unwrap();
            let stderr = stderr_of(&out);
            assert_eq!(out.status.code(), Some(1), "{codec} {cmd:?}: {stderr}");
            assert!(
                stderr.contains("truncated or corrupt") && !stderr.contains("is empty"),
                "{codec} {cmd:?}: {stderr}"
            );
        }
    }
}

/// Classic Mac OS line endings (CR alone) gave "ends in the middle of a record" in build, and in
/// classify one read holding the whole file, unclassified, with exit 0.
#[test]
fn cr_only_line_endings_are_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fa = std::fs::read_to_string(lambda_head(d)).unwrap();
    std::fs::write(d.join("mac.fa"), fa.replace('\n', "\r")).unwrap();
    std::fs::write(d.join("mac.fq"), "@r1\rACGTACGTACGTACGTACGT\r+\rIIIIIIIIIIIIIIIIIIII\r").unwrap();
    build_data(&d.join("x.db")).arg("-q").assert().success();
    for args in [
        vec!["build", "-d", "y.db", "mac.fa"],
        vec!["classify", "-d", "x.db", "mac.fa"],
        vec!["classify", "-d", "x.db", "mac.fq"],
    ] {
        let out = kmerdb().current_dir(d).args(&args).output().unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("CR alone (classic Mac OS line endings)") && stderr.contains("tr '\\r' '\\n'"),
            "{stderr}"
        );
    }
}

/// A named pipe as the index hung `info` (opening it waited for a writer), and a device gave "No
/// such device (os error 19)".
#[test]
fn a_pipe_or_a_device_as_the_index_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(std::process::Command::new("mkfifo").arg(d.join("pipe.db")).status().unwrap().success());
    for (index, kind) in [("pipe.db", "a named pipe (FIFO)"), ("/dev/null", "a character device")] {
        for cmd in [vec!["info", index], vec!["classify", "-d", index, "x.fa"]] {
            let out = kmerdb().current_dir(d).args(&cmd).timeout(std::time::Duration::from_secs(20)).output().unwrap();
            let stderr = stderr_of(&out);
            assert_eq!(out.status.code(), Some(1), "{cmd:?}: {stderr}");
            assert!(stderr.contains(&format!("{index} is {kind}, not an index file")), "{cmd:?}: {stderr}");
        }
    }
}

/// An index of a newer format said "rebuild it with this version"; the preamble's flags word was
/// never checked.
#[test]
fn a_newer_index_says_upgrade_kmerdb() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("x.db")).arg("-q").assert().success();
    let good = std::fs::read(d.join("x.db")).unwrap();
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(d.join("newer.db"), newer).unwrap();
    let mut flagged = good;
    flagged[12] = 1;
    std::fs::write(d.join("flagged.db"), flagged).unwrap();
    for (db, says) in
        [("newer.db", "format version 99, made by a newer kmerdb"), ("flagged.db", "preamble flags 0x00000001")]
    {
        let out = kmerdb().current_dir(d).args(["info", db]).output().unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(says) && stderr.contains("upgrade kmerdb"), "{stderr}");
        assert!(!stderr.contains("rebuild"), "{stderr}");
    }
}

/// Sequence ids and taxon names with terminal escape sequences reached the terminal raw through
/// `info`, error messages and `-r -`. Everything printed for a human now escapes them; files get
/// the bytes as they are.
#[test]
fn control_characters_are_escaped_for_humans() {
    const EVIL: &str = "evil\x1b]0;pwned\x07\x1b[2J";
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let seq: String = std::fs::read_to_string(lambda_head(d)).unwrap().lines().nth(1).unwrap().to_string();
    // A taxonomy of one species named with escape sequences, and a genome of it.
    std::fs::create_dir(d.join("tax")).unwrap();
    std::fs::write(d.join("tax/nodes.dmp"), "1\t|\t1\t|\tno rank\t|\n2\t|\t1\t|\tspecies\t|\n").unwrap();
    std::fs::write(
        d.join("tax/names.dmp"),
        format!("1\t|\troot\t|\t\t|\tscientific name\t|\n2\t|\t{EVIL}\t|\t\t|\tscientific name\t|\n"),
    )
    .unwrap();
    std::fs::write(d.join("g.fa"), format!(">{EVIL}|kraken:taxid|2\n{seq}\n")).unwrap();
    kmerdb().current_dir(d).args(["build", "-q", "-d", "x.db", "--taxonomy", "tax", "g.fa"]).assert().success();
    std::fs::write(d.join("r.fa"), format!(">r1\n{}\n>r2\n{}\n", &seq[..150], &seq[1000..1150])).unwrap();
    let raw = |text: &str| text.contains('\x1b') || text.contains('\x07');
    // info, as text.
    let out = kmerdb().current_dir(d).args(["info", "x.db"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!raw(&text) && text.contains("evil\\x1b]0;pwned\\x07"), "{text}");
    // An error message naming the sequence (added again: already in the index).
    let out = kmerdb().current_dir(d).args(["update", "-d", "x.db", "--add", "g.fa", "--taxonomy", "tax"]).output();
    let stderr = stderr_of(&out.unwrap());
    assert!(stderr.contains("evil\\x1b]0;pwned") && !raw(&stderr), "{stderr}");
    // The report on a terminal (`script` gives the run one).
    let cmd = format!("{} classify -q -d x.db r.fa -o /dev/null -r -", env!("CARGO_BIN_EXE_kmerdb"));
    let out = std::process::Command::new("script").args(["-qec", &cmd, "/dev/null"]).current_dir(d).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("evil\\x1b]0;pwned\\x07") && !raw(&text), "{text:?}");
    // To a file, the report keeps the name's bytes.
    let out = kmerdb_process()
        .current_dir(d)
        .args(["classify", "-q", "-d", "x.db", "r.fa", "-o", "/dev/null", "-r", "-"])
        .output();
    assert!(String::from_utf8_lossy(&out.unwrap().stdout).contains(EVIL));
}

/// Review of the truncation message: explaining an error opened the input again, and a named pipe
/// (or `<(...)`) opened again waits for a writer that is gone: build hung where it had said
/// "empty". Only regular files are opened again.
#[test]
fn an_error_in_a_piped_genome_does_not_hang() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pipe = d.join("g.fa.bz2");
    assert!(std::process::Command::new("mkfifo").arg(&pipe).status().unwrap().success());
    let child = kmerdb_process()
        .current_dir(d)
        .args(["build", "-d", "y.db", "g.fa.bz2"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A bzip2 header and nothing else, then the writer is gone.
    std::fs::OpenOptions::new().write(true).open(&pipe).unwrap().write_all(b"BZh9").unwrap();
    let start = std::time::Instant::now();
    let waited = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waited.is_finished() {
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "build hangs on a piped genome's error");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = waited.join().unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("g.fa.bz2"), "{stderr}");
}

/// A write that failed while reads were being sent to `--classified-out` (its buffer filled
/// mid-run) named "classified/unclassified reads", not the file.
#[test]
fn a_failed_reads_output_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("x.db")).arg("-q").assert().success();
    // The bundled pairs' first mates: more than the output's buffer, so the write fails mid-run.
    let reads = crate::data().join("reads/sample_R1.fq.gz");
    let out = kmerdb()
        .current_dir(d)
        .args(["classify", "-q", "-d", "x.db", "-o", "/dev/null", "--classified-out", "/dev/full"])
        .arg(&reads)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/dev/full: No space left on device"), "{stderr}");
}
