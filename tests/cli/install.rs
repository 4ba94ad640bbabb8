//! What packagers and shells use: the man pages in `man/` and the completion scripts, both made
//! from the same definitions as `--help`.

use crate::{kmerdb, listing};
use std::path::Path;

/// `man/` holds exactly what `kmerdb manpages` writes now: a changed flag or help text must come
/// with regenerated pages (`cargo run --release -- manpages man`).
#[test]
fn man_pages_are_current() {
    let dir = tempfile::tempdir().unwrap();
    kmerdb().arg("manpages").arg(dir.path()).assert().success();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let made = listing(dir.path());
    assert_eq!(listing(&repo), made, "man/ does not hold the pages kmerdb makes: cargo run --release -- manpages man");
    for name in &made {
        let (now, checked_in) =
            (std::fs::read(dir.path().join(name)).unwrap(), std::fs::read(repo.join(name)).unwrap());
        assert!(now == checked_in, "man/{name} is out of date: cargo run --release -- manpages man");
    }
    for page in ["kmerdb.1", "kmerdb-build.1", "kmerdb-classify.1", "kmerdb-merge.1", "kmerdb-info.1"] {
        assert!(made.iter().any(|m| m == page), "no {page}: {made:?}");
    }
    let classify = std::fs::read_to_string(repo.join("kmerdb-classify.1")).unwrap();
    assert!(classify.contains("\\-\\-samples") && classify.contains(".TH KMERDB-CLASSIFY 1"), "{classify}");
}

/// Every shell's script names the subcommands and their flags; bash's parses (`bash -n`) and,
/// sourced, completes `kmerdb cl` to `classify`.
#[test]
fn completion_scripts_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = kmerdb().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["classify", "build", "merge", "samples", "seqid2taxid"] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmerdb.bash");
    std::fs::write(&path, kmerdb().args(["completions", "bash"]).output().unwrap().stdout).unwrap();
    let check = format!(
        "source {}; COMP_WORDS=(kmerdb cl); COMP_CWORD=1; COMP_LINE='kmerdb cl'; COMP_POINT=9; _kmerdb kmerdb cl kmerdb; echo \"${{COMPREPLY[@]}}\"",
        path.display()
    );
    let out = std::process::Command::new("bash").args(["-c", &check]).output().unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && words.split_whitespace().any(|w| w == "classify"),
        "{words} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(kmerdb().args(["completions", "tcsh"]).assert().get_output().status.code() == Some(2));
}
