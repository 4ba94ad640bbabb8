//! Faults (issue 14, part 3): a full disk, signals, a killed run, two builds of one index at once.
//! Each must end with a clear error or exit code, no temporary file left (but for SIGKILL, whose
//! leftover the next build removes), and older indexes and outputs intact.

use crate::{build_data, data, genome_files, kmerdb, kmerdb_process, listing};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Hidden temporary files kmerdb left in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    listing(dir).into_iter().filter(|n| n.starts_with('.') && n.contains(".kmerdb-")).collect()
}

/// Runs `script` with sh in a private mount namespace (`unshare`), where `$FULL` is a fresh tmpfs
/// of `size` bytes: the disk that fills up. Returns what the script printed.
fn on_small_disk(size: &str, script: &str, dir: &Path) -> String {
    let full = dir.join("full");
    std::fs::create_dir(&full).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_kmerdb")).parent().unwrap();
    let out = Command::new("unshare")
        .args(["--map-root-user", "--mount", "sh", "-c"])
        .arg(format!("mount -t tmpfs -o size={size} tmpfs \"$FULL\" || exit 99\n{script}"))
        .current_dir(dir)
        .env("FULL", &full)
        .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("unshare (util-linux) runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_ne!(out.status.code(), Some(99), "cannot mount a tmpfs in a user namespace: {text}");
    text
}

#[test]
fn a_full_disk_fails_the_build_naming_the_index_and_keeps_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A small older index (phage lambda), then the whole of data/ (14 MB) onto a 2 MB disk.
    let lambda = genome_files().into_iter().find(|p| p.to_string_lossy().contains("lambda")).unwrap();
    kmerdb().arg("build").arg("-q").arg("-d").arg(d.join("old.db")).arg(&lambda).assert().success();
    let script = format!(
        "cp old.db \"$FULL/d.db\"
kmerdb build -d \"$FULL/d.db\" --taxonomy {tax} --seqid2taxid {map} {genomes}
echo \"exit=$?\"
echo \"left: $(ls -A \"$FULL\" | tr '\\n' ' ')\"
cmp -s old.db \"$FULL/d.db\" && echo intact",
        tax = data().join("taxonomy").display(),
        map = data().join("seqid2taxid.map").display(),
        genomes = data().join("genomes").display(),
    );
    let text = on_small_disk("2m", &script, d);
    assert!(text.contains("exit=1"), "{text}");
    assert!(text.contains("full/d.db") && text.contains("No space left on device"), "{text}");
    assert!(text.contains("left: d.db \n"), "temporary files left behind: {text}");
    assert!(text.contains("intact"), "the older index was changed: {text}");
}

#[test]
fn a_full_disk_fails_classify_naming_the_output_and_keeps_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("d.db")).arg("-q").assert().success();
    let script = format!(
        "echo old > \"$FULL/s.kraken\"
kmerdb classify -d d.db -1 {r1} -2 {r2} -o \"$FULL/s.kraken\" -r \"$FULL/s.kreport\"
echo \"exit=$?\"
echo \"left: $(ls -A \"$FULL\" | tr '\\n' ' ')\"
echo \"content: $(cat \"$FULL/s.kraken\")\"",
        r1 = data().join("reads/sample_R1.fq.gz").display(),
        r2 = data().join("reads/sample_R2.fq.gz").display(),
    );
    let text = on_small_disk("64k", &script, d);
    assert!(text.contains("exit=1"), "{text}");
    assert!(text.contains("full/s.kraken") && text.contains("No space left on device"), "{text}");
    assert!(text.contains("left: s.kraken \n"), "temporary files left behind: {text}");
    assert!(text.contains("content: old\n"), "the older output was changed: {text}");
}

/// A named pipe: kmerdb blocks reading it for as long as the test holds it open.
fn fifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Waits (up to a minute) until `dir` holds a kmerdb temporary file.
fn wait_for_temporary(dir: &Path, child: &mut Child) -> Vec<String> {
    let start = Instant::now();
    loop {
        let t = temporaries(dir);
        if !t.is_empty() {
            return t;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("kmerdb ended ({status}) before writing anything");
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no temporary file appeared in {}", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, name: &str) {
    assert!(Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap().success());
}

/// A FASTA record of `n` pseudo-random bases.
fn fasta_record(name: &str, n: usize) -> String {
    let mut x = 88172645463325252u64;
    let seq: String = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"ACGT"[(x % 4) as usize] as char
        })
        .collect();
    format!(">{name}\n{seq}\n")
}

/// Starts `kmerdb ARGS` in `dir` with one input being the pipe `pipe`, writes `first` into the
/// pipe (the rest of the input never comes) and returns the process and the open pipe.
fn start_on_pipe(dir: &Path, args: &[&str], pipe: &Path, first: &str) -> (Child, std::fs::File) {
    let child =
        kmerdb_process().current_dir(dir).args(args).stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    // Opening for writing waits until kmerdb opens the pipe for reading.
    let mut w = std::fs::OpenOptions::new().write(true).open(pipe).unwrap();
    w.write_all(first.as_bytes()).unwrap();
    w.flush().unwrap();
    (child, w)
}

fn stderr_of(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn sigint_and_sigterm_during_classify_remove_its_temporary_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("d.db")).arg("-q").assert().success();
    std::fs::write(d.join("s.kraken"), "old\n").unwrap();
    for (name, code) in [("INT", 130), ("TERM", 143)] {
        let pipe = d.join(format!("reads-{name}.fa"));
        fifo(&pipe);
        let args = ["classify", "-d", "d.db", pipe.to_str().unwrap(), "-o", "s.kraken", "-r", "s.kreport"];
        let (mut child, held) = start_on_pipe(d, &args, &pipe, &fasta_record("r1", 150));
        let seen = wait_for_temporary(d, &mut child);
        assert!(seen.iter().any(|n| n.starts_with(".s.kraken.kmerdb-")), "{seen:?}");
        signal(&child, name);
        let (status, stderr) = stderr_of(child);
        drop(held);
        assert_eq!(status, Some(code), "SIG{name}: {stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
        assert!(temporaries(d).is_empty(), "SIG{name} left {:?}", temporaries(d));
        assert_eq!(std::fs::read_to_string(d.join("s.kraken")).unwrap(), "old\n");
        assert!(!d.join("s.kreport").exists());
    }
}

#[test]
fn sigterm_during_a_build_removes_the_unfinished_index_and_keeps_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lambda = genome_files().into_iter().find(|p| p.to_string_lossy().contains("lambda")).unwrap();
    kmerdb().arg("build").arg("-q").arg("-d").arg(d.join("x.db")).arg(&lambda).assert().success();
    let old = std::fs::read(d.join("x.db")).unwrap();
    for (name, code) in [("TERM", 143), ("INT", 130)] {
        let pipe = d.join(format!("g-{name}.fa"));
        fifo(&pipe);
        let args = ["build", "-d", "x.db", pipe.to_str().unwrap()];
        let (mut child, held) = start_on_pipe(d, &args, &pipe, &fasta_record("g1", 100_000));
        let seen = wait_for_temporary(d, &mut child);
        assert!(seen.iter().all(|n| n.starts_with(".x.db.kmerdb-")), "{seen:?}");
        signal(&child, name);
        let (status, stderr) = stderr_of(child);
        drop(held);
        assert_eq!(status, Some(code), "SIG{name}: {stderr}");
        assert!(temporaries(d).is_empty(), "SIG{name} left {:?}", temporaries(d));
        assert!(std::fs::read(d.join("x.db")).unwrap() == old, "the older index was changed");
    }
}

/// SIGKILL cannot be caught: the unfinished index stays, named for the killed process, and the
/// next build of the same index removes it, saying so.
#[test]
fn the_next_build_removes_what_a_killed_build_left() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pipe = d.join("g.fa");
    fifo(&pipe);
    let (mut child, held) = start_on_pipe(d, &["build", "-d", "x.db", pipe.to_str().unwrap()], &pipe, ">g\nACGT\n");
    let left = wait_for_temporary(d, &mut child);
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    drop(held);
    assert_eq!(temporaries(d), left, "a killed build leaves its file");
    assert!(left[0].starts_with(&format!(".x.db.kmerdb-{pid}-")), "{left:?}");
    let lambda = genome_files().into_iter().find(|p| p.to_string_lossy().contains("lambda")).unwrap();
    let out = kmerdb().current_dir(d).args(["build", "-d", "x.db"]).arg(&lambda).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&left[0]) && stderr.contains("interrupted"), "no info line about the leftover: {stderr}");
    assert!(temporaries(d).is_empty(), "{:?}", temporaries(d));
}

/// Two builds of different genomes into one `-d` at once: the index is always one of the two
/// builds' whole, byte for byte, never a mix, and nothing is left behind.
#[test]
fn two_builds_of_one_index_at_once_leave_one_of_them_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = genome_files();
    let (a, b): (Vec<PathBuf>, Vec<PathBuf>) = (files[..3].to_vec(), files[3..].to_vec());
    let build = |db: &Path, inputs: &[PathBuf]| {
        let mut c = kmerdb_process();
        c.current_dir(d).args(["build", "-q", "-t", "1", "-d"]).arg(db).args(inputs);
        c
    };
    assert!(build(&d.join("a.db"), &a).status().unwrap().success());
    assert!(build(&d.join("b.db"), &b).status().unwrap().success());
    let (ref_a, ref_b) = (std::fs::read(d.join("a.db")).unwrap(), std::fs::read(d.join("b.db")).unwrap());
    assert!(ref_a != ref_b);
    for round in 0..4 {
        let (mut first, mut second) = (build(&d.join("x.db"), &a), build(&d.join("x.db"), &b));
        let (p, q) = (first.spawn().unwrap(), second.spawn().unwrap());
        let (p, q) = (p.wait_with_output().unwrap(), q.wait_with_output().unwrap());
        assert!(p.status.success() && q.status.success(), "round {round}");
        let got = std::fs::read(d.join("x.db")).unwrap();
        assert!(got == ref_a || got == ref_b, "round {round}: the index is neither build's");
        assert!(temporaries(d).is_empty(), "round {round}: {:?}", temporaries(d));
    }
}

/// A reader that stops early (`kmerdb classify ... | head`) ends the run quietly, with exit 141
/// (128 + SIGPIPE, as Kraken 2 and coreutils), so that `set -o pipefail` sees the output was cut
/// short (issue 30.10; it was 0).
#[test]
fn a_reader_that_stops_early_ends_classify_quietly() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    build_data(&db).assert().success();
    let reads = data().join("reads");
    let mut child = kmerdb_process()
        .args(["classify", "--gpus", "none", "-d"])
        .arg(&db)
        .arg("-1")
        .arg(reads.join("sample_R1.fq.gz"))
        .arg("-2")
        .arg(reads.join("sample_R2.fq.gz"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The pipe closes here, with most of the lines unread.
    let (code, stderr) = stderr_of(child);
    assert_eq!(code, Some(141), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
}

/// Issue 30.10: with stdout closed (`>&-`), the per-read lines went nowhere and the run exited 0.
/// Writing to a closed stdout is now an error, with exit 1; `> /dev/null` still discards them.
#[test]
fn a_closed_stdout_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("x.db")).arg("-q").assert().success();
    let bin = env!("CARGO_BIN_EXE_kmerdb");
    let reads = data().join("reads/single.fa");
    let run = |redirect: &str, args: &str| {
        let script = format!("'{bin}' {args} {redirect}");
        let out = Command::new("sh").arg("-c").arg(&script).current_dir(d).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for args in [format!("classify -q -d x.db '{}'", reads.display()), "info x.db".to_string()] {
        let (code, stderr) = run(">&-", &args);
        assert_eq!(code, Some(1), "{args}: {stderr}");
        assert!(stderr.contains("standard output is closed"), "{args}: {stderr}");
        let (code, stderr) = run("> /dev/null", &args);
        assert_eq!(code, Some(0), "{args}: {stderr}");
    }
    // Outputs to files need no stdout.
    let (code, stderr) = run(">&-", &format!("classify -q -d x.db '{}' -o out.kraken", reads.display()));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(d.join("out.kraken").is_file());
}

/// An index of `data/genomes` without a taxonomy (every sequence its own taxon, so genomes can be
/// added without one), and `big.fa`, a random genome that takes an update a second or more to add
/// on one thread: the window in which a second run meets the first.
fn slow_update_setup(d: &Path) {
    kmerdb().current_dir(d).args(["build", "-q", "-d", "old.db"]).arg(data().join("genomes")).assert().success();
    std::fs::write(d.join("big.fa"), fasta_record("big", 6_000_000)).unwrap();
}

fn target_names(d: &Path, db: &str) -> Vec<String> {
    let out = kmerdb().current_dir(d).args(["info", "--json", db]).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    info["targets"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// Issue 30.2: two `update`s of one index in place at once, each removing a different target, both
/// said "1 removed" and the index lost one removal. The second now waits for the first and reads
/// its result: the index lacks both targets.
#[test]
fn two_updates_of_one_index_at_once_both_count() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    slow_update_setup(d);
    std::fs::write(d.join("ra.txt"), "NC_001416.1\n").unwrap();
    std::fs::write(d.join("rb.txt"), "NC_006494.1\n").unwrap();
    let update = |args: &[&str]| {
        let mut c = kmerdb_process();
        c.current_dir(d).args(["update", "-q", "-t", "1", "-d", "x.db"]).args(args).stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    std::fs::copy(d.join("old.db"), d.join("x.db")).unwrap();
    let all = target_names(d, "x.db");
    // The second starts once the first has read the index and is writing its own.
    let mut a = update(&["--remove-targets", "ra.txt", "--add", "big.fa"]);
    wait_for_temporary(d, &mut a);
    let b = update(&["--remove-targets", "rb.txt"]);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let left = target_names(d, "x.db");
    assert_eq!(left.len(), all.len() - 1, "{left:?}");
    assert!(!left.iter().any(|t| t == "NC_001416.1" || t == "NC_006494.1"), "a removal was lost: {left:?}");
    assert!(left.iter().any(|t| t == "big"), "the addition was lost: {left:?}");
    assert!(temporaries(d).is_empty(), "{:?}", temporaries(d));
}

/// Issue 30.2: a build to the `-d` that an update is rewriting in place. The update's result, made
/// from the index it read, must not replace the new build: the build waits for the update and
/// then replaces its result.
#[test]
fn a_build_during_an_update_of_its_index_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    slow_update_setup(d);
    let lambda = genome_files().into_iter().find(|p| p.to_string_lossy().contains("lambda")).unwrap();
    let build = |db: &str| kmerdb().current_dir(d).args(["build", "-q", "-t", "1", "-d", db]).arg(&lambda).assert();
    build("b.db").success();
    std::fs::copy(d.join("old.db"), d.join("x.db")).unwrap();
    let mut u = kmerdb_process();
    u.current_dir(d).args(["update", "-q", "-t", "1", "-d", "x.db", "--add", "big.fa"]).stderr(Stdio::piped());
    let mut u = u.spawn().unwrap();
    wait_for_temporary(d, &mut u);
    build("x.db").success();
    let u = u.wait_with_output().unwrap();
    assert!(u.status.success(), "{}", String::from_utf8_lossy(&u.stderr));
    assert!(std::fs::read(d.join("x.db")).unwrap() == std::fs::read(d.join("b.db")).unwrap(), "the build was lost");
    assert!(temporaries(d).is_empty(), "{:?}", temporaries(d));
}

/// Issue 30.7: an index truncated or copied over while classify read it ended the run with "Bus
/// error" (exit 135, SIGBUS) and left a temporary output behind. It is now an error naming the
/// index and saying why, with exit 1, and the temporary outputs are removed.
#[test]
fn an_index_changed_under_a_run_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("x.db")).arg("-q").assert().success();
    let pipe = d.join("reads.fa");
    fifo(&pipe);
    let args = ["classify", "--gpus", "none", "-d", "x.db", pipe.to_str().unwrap(), "-o", "out.kraken"];
    let (mut child, mut held) = start_on_pipe(d, &args, &pipe, &fasta_record("r0", 150));
    wait_for_temporary(d, &mut child);
    // As `cp other.db x.db` does first: the file cut short in place.
    std::fs::OpenOptions::new().write(true).open(d.join("x.db")).unwrap().set_len(4096).unwrap();
    // The run may end (of the fault) before it has read all of this: the pipe then breaks.
    for i in 1..2000 {
        if held.write_all(fasta_record(&format!("r{i}"), 150).as_bytes()).is_err() {
            break;
        }
    }
    drop(held);
    let (status, stderr) = stderr_of(child);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("x.db: the index changed while this run read it"), "{stderr}");
    assert!(stderr.contains("replace indexes by rename"), "{stderr}");
    assert!(temporaries(d).is_empty(), "{:?}", temporaries(d));
    assert!(!d.join("out.kraken").exists());
}

/// Issue 30.8: `-t 100000` started threads for 12 minutes and ignored SIGTERM meanwhile. More
/// than 8 threads a core are now capped with a warning.
#[test]
fn a_huge_thread_count_is_capped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let out =
        build_data(&dir.path().join("x.db")).args(["-t", "100000"]).timeout(Duration::from_secs(120)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("--threads 100000 is more than 8 times this machine's"), "{stderr}");
}

/// Issue 30.8: SIGINT and SIGTERM end every command within a second at any point: sent after
/// delays from 0 to 1.5 s into a build (starting threads, loading the full NCBI taxonomy, reading
/// and sketching) and into a classify, each run ends within a second with 128 + the signal's
/// number, leaving no temporary file.
#[test]
fn signals_end_every_run_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build_data(&d.join("data.db")).arg("-q").assert().success();
    let s = crate::shared();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = (8 * cores).to_string();
    let build = {
        let mut c = kmerdb_process();
        c.current_dir(d).args(["build", "-t", &threads, "-d", "refs.db", "--taxonomy"]).arg(s.join("taxonomy"));
        c.arg("--seqid2taxid").arg(s.join("refs/seqid2taxid.map")).arg(s.join("refs"));
        c
    };
    let classify = {
        let mut c = kmerdb_process();
        c.current_dir(d).args(["classify", "-t", &threads, "-d", "data.db", "-o", "out.kraken", "-1"]);
        c.arg(s.join("reads/mock_R1.fq.gz")).arg("-2").arg(s.join("reads/mock_R2.fq.gz"));
        c
    };
    let mut took_all = Vec::new();
    for (what, mut cmd) in [("build", build), ("classify", classify)] {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        for (delay_ms, (name, code)) in
            [0u64, 30, 150, 400, 800, 1500].into_iter().zip([("TERM", 143), ("INT", 130)].into_iter().cycle())
        {
            let child = cmd.spawn().unwrap();
            std::thread::sleep(Duration::from_millis(delay_ms));
            let sent = Instant::now();
            signal(&child, name);
            let out = child.wait_with_output().unwrap();
            let took = sent.elapsed();
            let stderr = String::from_utf8_lossy(&out.stderr);
            // A run may finish before the signal comes, or be ended by it before its handler is
            // in place (which the shell reports as the same 128 + N); else it exits with that code.
            use std::os::unix::process::ExitStatusExt;
            if out.status.code() != Some(0) && out.status.signal().is_none() {
                assert_eq!(out.status.code(), Some(code), "{what}, SIG{name} after {delay_ms} ms: {stderr}");
            }
            if let Some(signal) = out.status.signal() {
                assert_eq!(128 + signal, code, "{what}, SIG{name} after {delay_ms} ms");
            }
            // A loaded test machine (CI runs tests in parallel) may be slow to schedule the
            // signal's thread: each run within 2 s, and most within the second.
            assert!(took < Duration::from_secs(2), "{what}: SIG{name} after {delay_ms} ms took {took:?} to end it");
            took_all.push(took);
            assert!(temporaries(d).is_empty(), "{what}, SIG{name} after {delay_ms} ms left {:?}", temporaries(d));
        }
    }
    took_all.sort();
    let median = took_all[took_all.len() / 2];
    assert!(median < Duration::from_secs(1), "median time to end a run: {median:?} ({took_all:?})");
}
