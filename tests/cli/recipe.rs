//! The bioconda recipe in `recipe/`, built as conda-build would build it (conda cannot be
//! installed here): its `build.sh` run on a clean checkout with the variables conda-build sets,
//! then its test commands run against the installed binary.

use std::path::Path;
use std::process::Command;

/// The recipe's version (`{% set version = "..." %}`) and its `test: commands:`.
fn recipe(meta_yaml: &str) -> (String, Vec<String>) {
    let version = meta_yaml
        .lines()
        .find_map(|l| l.strip_prefix("{% set version = \"")?.strip_suffix("\" %}"))
        .expect("meta.yaml sets the version");
    let test = meta_yaml.split("\ntest:\n  commands:\n").nth(1).expect("meta.yaml has test: commands:");
    let commands = test.lines().map_while(|l| l.strip_prefix("    - ")).map(String::from).collect();
    (version.to_string(), commands)
}

/// The files a clean checkout has: those git tracks, copied from the working tree to `to`.
fn clean_checkout(repo: &Path, to: &Path) {
    let out = Command::new("git").args(["ls-files", "-z"]).current_dir(repo).output().expect("git runs");
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    for name in out.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = std::str::from_utf8(name).unwrap();
        let from = repo.join(name);
        if from.is_file() {
            std::fs::create_dir_all(to.join(name).parent().unwrap()).unwrap();
            std::fs::copy(&from, to.join(name)).unwrap();
        }
    }
}

/// `recipe/build.sh` on a copy of the tracked files, with `PREFIX`, `SRC_DIR`, `RECIPE_DIR`,
/// `PKG_NAME`, `PKG_VERSION` and `CPU_COUNT` as conda-build sets them, installs `kmerdb` (and
/// nothing else) into `$PREFIX/bin` and writes the third-party licences the recipe ships; every
/// command of the recipe's `test:` then succeeds with that binary first on the PATH, and its
/// `--version` is the recipe's version, which is this crate's. The copy builds in a target
/// folder kept beside the tests' (`<target>/recipe`), so that only kmerdb itself is rebuilt
/// after the first run.
#[test]
fn bioconda_recipe_builds_and_passes_its_tests() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let meta_yaml = std::fs::read_to_string(repo.join("recipe/meta.yaml")).unwrap();
    let (version, commands) = recipe(&meta_yaml);
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "recipe/meta.yaml's version");
    assert!(!commands.is_empty(), "the recipe tests nothing");

    let target = Path::new(env!("CARGO_BIN_EXE_kmerdb")).parent().unwrap().parent().unwrap().join("recipe");
    let src = target.join("src");
    if src.exists() {
        std::fs::remove_dir_all(&src).unwrap();
    }
    clean_checkout(repo, &src);
    let prefix = tempfile::tempdir().unwrap();
    let mut build = Command::new("bash");
    build.arg(src.join("recipe/build.sh")).current_dir(&src);
    // The test runs under cargo, which sets CARGO_* variables of its own for this crate.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" {
            build.env_remove(&*key);
        }
    }
    let out = build
        .env("PREFIX", prefix.path())
        .env("SRC_DIR", &src)
        .env("RECIPE_DIR", src.join("recipe"))
        .env("PKG_NAME", "kmerdb")
        .env("PKG_VERSION", &version)
        .env("CPU_COUNT", "2")
        .env("CARGO_TARGET_DIR", target.join("build"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "recipe/build.sh failed (scripts/test-deps.sh installs cargo-bundle-licenses):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut installed: Vec<String> = walkdir::WalkDir::new(prefix.path())
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| p.is_file())
        .map(|p| p.strip_prefix(prefix.path()).unwrap().display().to_string())
        .collect();
    installed.sort();
    let mut expected: Vec<String> = std::fs::read_dir(repo.join("man"))
        .unwrap()
        .map(|e| format!("share/man/man1/{}", e.unwrap().file_name().to_string_lossy()))
        .chain(
            [
                "bin/kmerdb",
                "share/bash-completion/completions/kmerdb",
                "share/zsh/site-functions/_kmerdb",
                "share/fish/vendor_completions.d/kmerdb.fish",
            ]
            .map(String::from),
        )
        .collect();
    expected.sort();
    assert_eq!(installed, expected, "what build.sh installs: the binary, its man pages and completions");
    let licences = std::fs::read_to_string(src.join("THIRDPARTY.yml")).unwrap();
    assert!(licences.starts_with("root_name: kmerdb\n") && licences.contains("package_name: needletail"));
    // Every license_file is in the source (the project's own licence, as Cargo.toml names it,
    // and the crates' that build.sh gathered).
    let meta = std::fs::read_to_string(repo.join("recipe/meta.yaml")).unwrap();
    let files: Vec<&str> = meta
        .split("license_file:\n")
        .nth(1)
        .expect("meta.yaml lists license_file")
        .lines()
        .map_while(|l| l.strip_prefix("    - "))
        .collect();
    assert!(files.contains(&"LICENSE"), "{files:?}");
    for f in &files {
        assert!(src.join(f).is_file(), "license_file {f} is not in the source");
    }
    let own = std::fs::read_to_string(src.join("LICENSE")).unwrap();
    assert!(own.starts_with("MIT License") && meta.contains("license: MIT"), "LICENSE and meta.yaml differ");

    let path = format!("{}:{}", prefix.path().join("bin").display(), std::env::var("PATH").unwrap_or_default());
    for command in &commands {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", command])
            .env("PATH", &path)
            .env("PREFIX", prefix.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "recipe test `{command}`: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new(prefix.path().join("bin/kmerdb")).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("kmerdb {version}\n"));
}
