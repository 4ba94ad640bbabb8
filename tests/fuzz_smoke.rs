//! The fuzz targets of `kmerdb::fuzzing` on stable Rust, for CI: each target runs its seed corpus
//! (`fuzz/corpus/TARGET/`), then deterministic mutations of it (bit flips, bytes changed, inserted
//! and deleted, runs duplicated, truncations, splices of two seeds, integers overwritten) until
//! its time or mutation budget is spent. A panic fails the test, naming the target and the file
//! the input was saved to. Coverage-guided fuzzing is `cargo fuzz` (README, Fuzzing).
//!
//! `KMERDB_FUZZ_SMOKE_SECS` sets the time per target (default 3 s; at most 3,000 mutations);
//! `KMERDB_FUZZ_SMOKE_KEEP_GOING=1` runs them all and lists every distinct panic at the end.

use kmerdb::fuzzing::TARGETS;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MAX_MUTATIONS: usize = 3000;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no seeds", dir.display());
    files.iter().map(|f| std::fs::read(f).expect("read a seed")).collect()
}

/// Bytes that mean something to some parser.
const BYTES: &[u8] = b"\x00\xff\x80\n\r\t|>@+ 09N.#/";
/// Integers that mean something to some loader (lengths, offsets, counts), written little-endian.
const INTEGERS: &[u64] = &[0, 1, 2, 7, 31, 32, 33, 63, 64, 65, 127, 128, 4096, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];

/// A random position in `0..=len` (`0..len` with `inside`), half the time in the first KiB,
/// where formats keep their headers.
fn position(rng: &mut StdRng, len: usize, inside: bool) -> usize {
    let end = if inside { len } else { len + 1 };
    if end == 0 {
        return 0;
    }
    let end = if rng.random_bool(0.5) { end.min(1024) } else { end };
    rng.random_range(0..end)
}

/// One to four stacked mutations of a random seed.
fn mutate(seeds: &[Vec<u8>], rng: &mut StdRng) -> Vec<u8> {
    let mut data = seeds[rng.random_range(0..seeds.len())].clone();
    for _ in 0..rng.random_range(1..=4) {
        let len = data.len();
        match rng.random_range(0..9) {
            0 if len > 0 => {
                let at = position(rng, len, true);
                data[at] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let at = position(rng, len, true);
                data[at] = BYTES[rng.random_range(0..BYTES.len())];
            }
            2 => {
                let at = position(rng, len, false);
                let n = rng.random_range(1..=8);
                let bytes: Vec<u8> = (0..n)
                    .map(|_| if rng.random_bool(0.5) { rng.random() } else { BYTES[rng.random_range(0..BYTES.len())] })
                    .collect();
                data.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let at = position(rng, len, true);
                let end = (at + rng.random_range(1..=16)).min(len);
                data.drain(at..end);
            }
            4 if len > 0 => {
                let at = position(rng, len, true);
                let end = (at + rng.random_range(1..=64)).min(len);
                let run = data[at..end].to_vec();
                let to = position(rng, len, false);
                data.splice(to..to, run);
            }
            5 => data.truncate(position(rng, len, false)),
            6 => {
                let other = &seeds[rng.random_range(0..seeds.len())];
                let cut = position(rng, len, false);
                data.truncate(cut);
                data.extend_from_slice(&other[position(rng, other.len(), false)..]);
            }
            7 | 8 if len >= 8 => {
                let width = if rng.random_bool(0.5) { 4 } else { 8 };
                let at = position(rng, len - width + 1, true);
                let value = match rng.random_range(0..3) {
                    0 => INTEGERS[rng.random_range(0..INTEGERS.len())],
                    1 => {
                        let mut old = [0u8; 8];
                        old[..width].copy_from_slice(&data[at..at + width]);
                        u64::from_le_bytes(old).wrapping_add(rng.random_range(1..=16))
                    }
                    _ => rng.random(),
                };
                data[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
            }
            _ => {}
        }
    }
    data
}

/// Runs `target` on its seeds and on mutations of them; panics if any input made it panic.
fn smoke(name: &str) {
    let (_, target) = TARGETS.iter().find(|(n, _)| *n == name).expect("a target of kmerdb::fuzzing");
    let seeds = corpus(name);
    let secs = std::env::var("KMERDB_FUZZ_SMOKE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let seed = name.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut rng = StdRng::seed_from_u64(seed);
    let keep_going = std::env::var_os("KMERDB_FUZZ_SMOKE_KEEP_GOING").is_some();
    let mut panics: std::collections::BTreeMap<String, PathBuf> = Default::default();
    let mut run = |input: &[u8], what: &str| -> bool {
        match catch_unwind(AssertUnwindSafe(|| target(input))) {
            Ok(outcome) => outcome.is_ok(),
            Err(payload) => {
                let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-smoke");
                std::fs::create_dir_all(&dir).expect("create the failures folder");
                let saved = dir.join(format!("{name}-{}", what.replace(' ', "-")));
                std::fs::write(&saved, input).expect("save the input");
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                if !keep_going {
                    panic!("{name}: {what} panicked (input saved to {}; cargo fuzz run {name} FILE)", saved.display());
                }
                panics.entry(message).or_insert(saved);
                false
            }
        }
    };
    let accepted_seeds = seeds.iter().enumerate().filter(|(i, s)| run(s, &format!("seed {i}"))).count();
    assert!(accepted_seeds > 0, "{name}: no seed is accepted; the corpus should hold valid inputs");
    let (mut mutations, mut accepted) = (0, 0);
    while mutations < MAX_MUTATIONS && Instant::now() < deadline {
        let input = mutate(&seeds, &mut rng);
        mutations += 1;
        accepted += usize::from(run(&input, &format!("mutation {mutations}")));
    }
    eprintln!("{name}: {} seeds ({accepted_seeds} accepted), {mutations} mutations ({accepted} accepted)", seeds.len());
    let listed: Vec<String> = panics.iter().map(|(m, p)| format!("{m}\n    input: {}", p.display())).collect();
    assert!(listed.is_empty(), "{name}: {} distinct panics:\n{}", listed.len(), listed.join("\n"));
}

macro_rules! smoke_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                smoke(stringify!($name));
            }
        )*

        /// Every target of `kmerdb::fuzzing` has a test here and a libFuzzer binary in `fuzz/`.
        #[test]
        fn every_target_is_smoke_tested_and_fuzzed() {
            let tested = [$(stringify!($name)),*];
            let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
            let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
            for (name, _) in TARGETS {
                assert!(tested.contains(name), "no smoke test for target {name}");
                let source = format!("fuzz_targets/{name}.rs");
                assert!(fuzz.join(&source).is_file() && manifest.contains(&source), "no fuzz binary for {name}");
            }
        }
    };
}

smoke_tests!(
    fastx,
    fastx_compressed,
    taxonomy_nodes,
    taxonomy_names,
    taxonomy_merged,
    seqid_map,
    sample_sheet,
    index_open,
    index_open_fixed,
    merge_candidates,
    merge_candidates_fixed,
);
