//! GPU tests: every kernel against its CPU twin, the bucket-list table against a HashMap, and GPU
//! index bytes against CPU index bytes. They need a GPU, so they are ignored in ordinary runs;
//! `scripts/gpu-tests.sh` runs them (from the repository root) on a GPU machine.
#![cfg(feature = "gpu")]

use kmerdb::compute::{GpuBuildOptions, GpuRequest, ProbeGroup};
use kmerdb::gpu::Gpu;
use kmerdb::gpu::build::DeviceBatch;
use kmerdb::gpu::slab::{DeviceSlabTable, Warps};
use kmerdb::gpu::table::{BucketListTable, STATUS_POOL_EXHAUSTED, STATUS_PROBE_LIMIT, TableConfig};
use kmerdb::indexing::{BuildConfig, build};
use kmerdb::sketch::Pending;
use kmerdb::sketch::{NO_FEATURE, SketchParams, Sketcher};
use kmerdb::slab_hash::{SlabConfig, SlabMemory, SlabOp};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::collections::HashMap;
use std::path::PathBuf;

fn gpu() -> Gpu {
    Gpu::open(0).expect("these tests need GPU 0 (run them with scripts/gpu-tests.sh on a GPU machine)")
}

fn random_seq(rng: &mut StdRng, len: usize, alphabet: &[u8]) -> Vec<u8> {
    (0..len).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect()
}

/// All windows' sketches the CPU way, padded like the kernel's output.
fn cpu_sketches(batch: &[Pending], p: &SketchParams) -> Vec<u32> {
    let mut out = Vec::new();
    let mut sk = Sketcher::new(*p);
    for rec in batch {
        let n = p.window_count(rec.seq.len());
        let mut got: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
        sk.sketch_all(&rec.seq, |w, s| got[w as usize] = s.to_vec());
        for s in got {
            out.extend(&s);
            out.extend(std::iter::repeat_n(NO_FEATURE, p.sketch_size as usize - s.len()));
        }
    }
    out
}

fn read_fasta(path: &str) -> Vec<Vec<u8>> {
    let mut r = needletail::parse_fastx_file(path).expect(path);
    let mut out = Vec::new();
    while let Some(rec) = r.next() {
        out.push(rec.unwrap().seq().into_owned());
    }
    out
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_sketches_equal_cpu_sketches() {
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(42);
    let mut batch = Vec::new();
    for (i, len) in [0usize, 5, 15, 16, 17, 127, 128, 1000, 5003, 100_000].into_iter().enumerate() {
        for alphabet in [&b"ACGT"[..], b"acgtACGTNNRY", b"ACGTNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNN"] {
            batch.push(Pending { target: i as u32, first_window: 0, seq: random_seq(&mut rng, len, alphabet) });
        }
    }
    for seq in
        read_fasta("data/genomes/Phage_lambda.fna.gz").into_iter().chain(read_fasta("data/genomes/Sau_COL.fna.gz"))
    {
        batch.push(Pending { target: 99, first_window: 0, seq });
    }
    for (k, w, stride, s) in
        [(16, 127, None, 16), (32, 127, None, 16), (5, 20, Some(3), 4), (31, 64, None, 64), (1, 1, None, 1)]
    {
        let p = SketchParams::new(k, w, stride, s, 0x5eed).unwrap();
        let dev = DeviceBatch::upload(&g, &batch, &p).unwrap();
        let gpu = dev.sketches(&g, &p).unwrap();
        let cpu = cpu_sketches(&batch, &p);
        assert_eq!(gpu.len(), cpu.len(), "k={k} w={w}");
        let first_diff = gpu.iter().zip(&cpu).position(|(a, b)| a != b);
        assert_eq!(first_diff, None, "k={k} w={w} s={s}: GPU and CPU sketches differ");
        println!("sketches equal: k={k} w={w} s={s}, {} windows", dev.windows);
    }
}

/// The build's pair kernels against the CPU: `sketch_split` (every window's features as
/// (feature, global window) pairs, each in its owner's stretch, shards counted) for 1, 2 and 3
/// owners; `count_shards` + `scatter_by_shard` (sorted by shard); `select_pass` (a shard range,
/// global windows back to target and window).
#[test]
#[ignore = "needs a GPU"]
fn gpu_pair_kernels_equal_their_cpu_twins() {
    use kmerdb::gpu::passes::twins;
    use kmerdb::index::format::shard_of;
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(77);
    let p = SketchParams::new(16, 127, None, 16, 0x5eed).unwrap();
    let (mut batch, mut next_window) = (Vec::new(), 1000u64);
    for (i, len) in [0usize, 15, 16, 200, 5003, 100_000, 250_000].into_iter().enumerate() {
        let seq = random_seq(&mut rng, len, b"ACGTACGTACGTN");
        let windows = p.window_count(seq.len());
        batch.push(Pending { target: i as u32, first_window: next_window, seq });
        next_window += windows;
    }
    let mut cpu: Vec<u64> = Vec::new();
    let mut sk = Sketcher::new(p);
    for rec in &batch {
        sk.sketch_all(&rec.seq, |w, sketch| {
            cpu.extend(sketch.iter().map(|&f| f as u64 | (rec.first_window + w) << 32));
        });
    }
    let shard_bits = 6;
    let shard = |pair: u64| shard_of(pair as u32, shard_bits);
    for owners in [1usize, 2, 3] {
        let (mut got, counts) = twins::split(&g, &batch, &p, owners, shard_bits).unwrap();
        for (d, pairs) in got.iter_mut().enumerate() {
            let mut want: Vec<u64> = cpu.iter().copied().filter(|&x| shard(x) % owners == d).collect();
            want.sort_unstable();
            pairs.sort_unstable();
            assert!(*pairs == want, "{owners} owners: owner {d}'s pairs differ");
        }
        for (sh, &c) in counts.iter().enumerate() {
            assert_eq!(c, cpu.iter().filter(|&&x| shard(x) == sh).count() as u64, "shard {sh}'s count");
        }
    }
    let (sorted, start) = twins::sort_by_shard(&g, &cpu, shard_bits).unwrap();
    for sh in 0..1 << shard_bits {
        assert!(sorted[start[sh] as usize..start[sh + 1] as usize].iter().all(|&x| shard(x) == sh), "shard {sh}");
    }
    let (mut a, mut b) = (sorted.clone(), cpu.clone());
    a.sort_unstable();
    b.sort_unstable();
    assert!(a == b, "sorting by shard changed the pairs");
    let first: Vec<u32> = batch.iter().map(|r| r.first_window as u32).collect();
    for (lo, hi) in [(0u32, 64u32), (5, 6), (10, 40)] {
        let (keys, values) = twins::select(&g, &cpu, lo, hi, shard_bits, &first).unwrap();
        let mut got: Vec<(u32, u64)> = keys.into_iter().zip(values).collect();
        let mut want: Vec<(u32, u64)> = cpu
            .iter()
            .filter(|&&x| (lo as usize..hi as usize).contains(&shard(x)))
            .map(|&x| {
                let w = (x >> 32) as u32;
                let t = first.partition_point(|&f| f <= w) - 1;
                (x as u32, (t as u64) << 32 | (w - first[t]) as u64)
            })
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        assert!(got == want, "select_pass {lo}..{hi} differs");
    }
    println!("pair kernels equal their CPU twins: {} pairs", cpu.len());
}

/// Inserts pairs and reads every list back, unsorted, with the table's status.
fn roundtrip(
    g: &Gpu,
    config: TableConfig,
    keys: &[u32],
    values: &[u64],
) -> (HashMap<u32, Vec<u64>>, kmerdb::gpu::table::TableStatus) {
    let mut t = BucketListTable::new(g, config).unwrap();
    let start = std::time::Instant::now();
    t.insert_pairs(keys, values).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let status = t.status().unwrap();
    let (lists, remap) = t.collect(None).unwrap();
    let values_back = t.fill(&lists, &remap, false).unwrap();
    let mut got = HashMap::new();
    let mut at = 0;
    for l in &lists {
        let mut v = values_back[at..at + l.count as usize].to_vec();
        v.sort_unstable();
        at += l.count as usize;
        got.insert(l.key, v);
    }
    println!(
        "  group {:>2}: {} pairs in {:.1} ms ({:.2} G inserts/s), status {:?}",
        config.group,
        keys.len(),
        secs * 1e3,
        keys.len() as f64 / secs / 1e9,
        status
    );
    (got, status)
}

fn reference(keys: &[u32], values: &[u64]) -> HashMap<u32, Vec<u64>> {
    let mut m: HashMap<u32, Vec<u64>> = HashMap::new();
    for (&k, &v) in keys.iter().zip(values) {
        m.entry(k).or_default().push(v);
    }
    m.values_mut().for_each(|v| v.sort_unstable());
    m
}

#[test]
#[ignore = "needs a GPU"]
fn bucket_list_table_equals_a_hashmap() {
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    // Uniform: 2 M pairs over 500 k keys. Skewed: multiplicities from 1 to 100,000.
    let uniform: Vec<u32> = (0..2_000_000).map(|_| rng.random_range(0..500_000u32) * 7919).collect();
    let mut skewed = Vec::new();
    for (i, m) in
        [100_000usize, 30_000, 10_000, 1000, 100, 10].into_iter().chain(std::iter::repeat_n(1, 50_000)).enumerate()
    {
        skewed.extend(std::iter::repeat_n(i as u32 * 104_729 + 3, m));
    }
    for (name, keys) in [("uniform", uniform), ("skewed", skewed)] {
        let values: Vec<u64> = (0..keys.len() as u64).map(|i| (i * 0x9e37_79b9) ^ 0xabc).collect();
        let expected = reference(&keys, &values);
        println!("{name}: {} pairs, {} keys", keys.len(), expected.len());
        for group in ProbeGroup::ALL {
            let mut config = TableConfig::new(expected.len() as u64 * 2, keys.len() as u64 * 3);
            config.group = group;
            let (got, status) = roundtrip(&g, config, &keys, &values);
            assert_eq!(status.bits, 0, "{name} group {group}");
            assert_eq!(got, expected, "{name} group {group}: table contents differ from the HashMap");
        }
    }
}

/// Keys and values that do not pair up are refused with their counts, and nothing is inserted.
#[test]
#[ignore = "needs a GPU"]
fn unpaired_keys_and_values_are_an_error() {
    let g = gpu();
    let mut t = BucketListTable::new(&g, TableConfig::new(64, 64)).unwrap();
    let err = t.insert_pairs(&[1, 2, 3], &[10, 20]).unwrap_err();
    assert!(matches!(err, kmerdb::gpu::GpuError::PairCount { pairs: 3, keys: 3, values: 2 }), "{err}");
    assert_eq!(err.to_string(), "3 pairs to insert, but 3 keys and 2 values given");
    let status = t.status().unwrap();
    assert_eq!((status.bits, status.pool_used, status.lost), (0, 0, 0), "{status:?}");
    println!("unpaired keys and values: {err}");
}

#[test]
#[ignore = "needs a GPU"]
fn tiny_tables_report_what_they_drop() {
    let g = gpu();
    let keys: Vec<u32> = (0..10_000u32).map(|i| i * 31 + 1).collect();
    let values: Vec<u64> = (0..10_000u64).collect();
    // Too few key slots: the probe limit is hit and every lost value is counted.
    let mut config = TableConfig::new(64, 100_000);
    config.max_probes = 64;
    config.pool_chunk = 0;
    let (got, status) = roundtrip(&g, config, &keys, &values);
    let stored: usize = got.values().map(Vec::len).sum();
    assert!(status.bits & STATUS_PROBE_LIMIT != 0, "{status:?}");
    assert_eq!(stored as u64 + status.lost, keys.len() as u64, "values lost without being counted");
    // Too small a pool.
    let many: Vec<u32> = (0..50_000u32).map(|i| i % 100).collect();
    let vals: Vec<u64> = (0..50_000u64).collect();
    let mut small_pool = TableConfig::new(1000, 1000);
    small_pool.pool_chunk = 0;
    let (got, status) = roundtrip(&g, small_pool, &many, &vals);
    let stored: usize = got.values().map(Vec::len).sum();
    assert!(status.bits & STATUS_POOL_EXHAUSTED != 0, "{status:?}");
    assert_eq!(stored as u64 + status.lost, many.len() as u64, "values lost without being counted");
}

fn build_with(
    inputs: &[PathBuf],
    db: &std::path::Path,
    gpus: GpuRequest,
    opts: GpuBuildOptions,
) -> Result<kmerdb::indexing::BuildSummary, String> {
    build_in(inputs, db, gpus, opts, None, Knobs::default())
}

/// What the builds of these tests vary besides the GPU options.
#[derive(Clone, Copy)]
struct Knobs {
    threads: usize,
    cap: u32,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs { threads: 8, cap: 254 }
    }
}

/// [`build_with`], spilling to `tmp_dir`, with `knobs`.
fn build_in(
    inputs: &[PathBuf],
    db: &std::path::Path,
    gpus: GpuRequest,
    opts: GpuBuildOptions,
    tmp_dir: Option<&std::path::Path>,
    knobs: Knobs,
) -> Result<kmerdb::indexing::BuildSummary, String> {
    let sources = kmerdb::input::discover_fasta(inputs).map_err(|e| e.to_string())?;
    let tax = PathBuf::from("data/taxonomy");
    // The set's own map: beside its genome files, or in the folder given.
    let folder = if inputs[0].is_dir() { inputs[0].as_path() } else { inputs[0].parent().unwrap() };
    let map = folder.join("seqid2taxid.map");
    let config = BuildConfig {
        protein: None,
        part: None,
        sources,
        db: db.to_path_buf(),
        taxonomy: Some(std::env::var_os("KMERDB_GPU_TEST_TAXONOMY").map(PathBuf::from).unwrap_or(tax)),
        taxonomy_gtdb: Vec::new(),
        seqid_maps: vec![if map.exists() { map } else { PathBuf::from("data/seqid2taxid.map") }],
        sketch: SketchParams::new(16, 127, None, 16, 0).unwrap(),
        max_locations_per_feature: knobs.cap,
        threads: knobs.threads,
        strict: false,
        progress: false,
        gpus,
        gpu_options: opts,
        tmp_dir: tmp_dir.map(PathBuf::from),
    };
    let s = build(&config, &|_, _| {}).map_err(|e| e.to_string())?;
    println!(
        "  {}: {} targets, {} features, {:.2} s{}",
        s.backend,
        s.counts.targets,
        s.counts.features,
        s.elapsed.as_secs_f64(),
        s.passes.as_ref().map(|p| format!(", {} passes", p.passes)).unwrap_or_default()
    );
    assert!(s.without_taxid.is_empty(), "sequences without taxid: {:?}", s.without_taxid);
    Ok(s)
}

/// `data/genomes`, and `$KMERDB_GPU_TEST_REFS` (all of `../shared/data/refs` in
/// `scripts/gpu-tests.sh`) when set.
fn reference_sets() -> Vec<PathBuf> {
    let mut sets = vec![PathBuf::from("data/genomes")];
    sets.extend(std::env::var_os("KMERDB_GPU_TEST_REFS").map(PathBuf::from));
    sets
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_index_bytes_equal_cpu_index_bytes() {
    assert!(std::env::var_os("SOURCE_DATE_EPOCH").is_some(), "set SOURCE_DATE_EPOCH: builds must carry the same date");
    let dir = tempfile::tempdir().unwrap();
    let sets = reference_sets();
    for set in sets {
        let genomes = vec![set.clone()];
        let (cpu, gpu) = (dir.path().join("cpu.db"), dir.path().join("gpu.db"));
        build_with(&genomes, &cpu, GpuRequest::None, GpuBuildOptions::default()).unwrap();
        for group in [1, 4, 32].map(|g| ProbeGroup::new(g).unwrap()) {
            let opts = GpuBuildOptions { group: Some(group), ..Default::default() };
            build_with(&genomes, &gpu, GpuRequest::List(vec![0]), opts).unwrap();
            assert!(
                std::fs::read(&cpu).unwrap() == std::fs::read(&gpu).unwrap(),
                "{}: GPU (group {group}) and CPU index bytes differ",
                set.display()
            );
            println!("identical index bytes: {} (group {group})", set.display());
        }
        // A cap of 2: many clade features, whose whole lists the clade lists section keeps.
        let knobs = Knobs { cap: 2, ..Knobs::default() };
        let s = build_in(&genomes, &cpu, GpuRequest::None, GpuBuildOptions::default(), None, knobs).unwrap();
        assert!(s.counts.clade_features > 1000, "{:?}", s.counts);
        build_in(&genomes, &gpu, GpuRequest::List(vec![0]), GpuBuildOptions::default(), None, knobs).unwrap();
        assert!(bytes(&cpu) == bytes(&gpu), "{}: GPU and CPU index bytes differ at cap 2", set.display());
        println!("identical index bytes: {} (cap 2, {} clade features)", set.display(), s.counts.clade_features);
    }
}

/// A pass limit below one shard's pairs cannot be met: the build stops before any shard is
/// written, naming the shard and what to do.
#[test]
#[ignore = "needs a GPU"]
fn a_shard_larger_than_a_pass_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let opts = GpuBuildOptions { pass_values: Some(10), ..Default::default() };
    let err = build_with(&[PathBuf::from("data/genomes")], &db, GpuRequest::List(vec![0]), opts).unwrap_err();
    assert!(err.contains("shard") && err.contains("--partition"), "{err}");
    assert!(!db.exists());
}

/// An input whose pairs cannot fit the GPUs, host memory and the spill folder is refused before
/// any work, with the sizes; with `--gpus all` too (the CPU could not hold it either).
#[test]
#[ignore = "needs a GPU"]
fn spill_space_is_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    // A sparse 8 TB FASTA file (ext4 allows 16 TB): its size says far more than anything holds.
    let genomes = dir.path().join("genomes");
    std::fs::create_dir(&genomes).unwrap();
    let huge = genomes.join("huge.fna");
    std::fs::write(&huge, ">x\nACGT\n").unwrap();
    std::fs::File::options().write(true).open(&huge).unwrap().set_len(8_000_000_000_000).unwrap();
    std::fs::copy("data/seqid2taxid.map", genomes.join("seqid2taxid.map")).unwrap();
    for request in [GpuRequest::List(vec![0]), GpuRequest::All] {
        let err = build_with(std::slice::from_ref(&genomes), &db, request, GpuBuildOptions::default()).unwrap_err();
        println!("{err}");
        assert!(err.contains("spill") && err.contains("--tmp-dir") && err.contains("free"), "{err}");
        assert!(!db.exists());
    }
}

/// The bytes of `path`.
fn bytes(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// The pass limit that cuts shards of `pairs` into exactly `passes` passes on `gpus` GPUs, if one
/// does (the planner is greedy, so not every count can be had).
fn limit_for(pairs: &[u64], gpus: usize, passes: usize) -> Option<u64> {
    let count = |limit: u64| kmerdb::gpu::passes::plan_passes(pairs, &vec![limit; gpus]).map(|p| p.len()).ok();
    let (mut lo, mut hi) = (*pairs.iter().max().unwrap(), pairs.iter().sum::<u64>());
    // The smallest limit with at most `passes` passes.
    while lo < hi {
        let mid = (lo + hi) / 2;
        if count(mid).is_some_and(|n| n <= passes) { hi = mid } else { lo = mid + 1 }
    }
    (count(lo) == Some(passes)).then_some(lo)
}

/// Builds `set` on `gpus` in 2, 3 and 7 passes (a pass limit that forces them), and with pairs
/// kept in host memory and in spill files; each must give `cpu`, the CPU's bytes. Spill files
/// are gone afterwards.
fn passes_give_the_cpu_bytes(set: &std::path::Path, gpus: Vec<usize>, cpu: &[u8], dir: &std::path::Path) {
    let db = dir.join("gpu.db");
    let n = gpus.len();
    let request = GpuRequest::List(gpus);
    let plain = build_with(&[set.to_path_buf()], &db, request.clone(), GpuBuildOptions::default()).unwrap();
    assert!(bytes(&db) == cpu, "{}: GPU and CPU bytes differ", set.display());
    let pairs = plain.passes.expect("a GPU build reports its passes").shard_pairs;
    for want in [2, 3, 7] {
        let limit = limit_for(&pairs, n, want).unwrap_or_else(|| panic!("no limit gives {want} passes"));
        let opts = GpuBuildOptions { pass_values: Some(limit), ..Default::default() };
        let s = build_with(&[set.to_path_buf()], &db, request.clone(), opts).unwrap();
        assert_eq!(s.passes.as_ref().unwrap().passes, want);
        assert!(bytes(&db) == cpu, "{}: {want} passes on {n} GPU(s) changed the bytes", set.display());
        println!("identical index bytes in {want} passes on {n} GPU(s): {}", set.display());
    }
    // Few threads: the shards are finished on the build's pool while the GPUs wait for buffers
    // that only the writer gives back. (When each shard was spawned on the pool, a build on one
    // thread could never end, by reading: the pool's only thread waited for a download while
    // the shards holding the GPU's buffers waited for that thread.)
    let limit = limit_for(&pairs, n, 7).unwrap();
    for threads in [1, 2] {
        let opts = GpuBuildOptions { pass_values: Some(limit), ..Default::default() };
        build_in(&[set.to_path_buf()], &db, request.clone(), opts, None, Knobs { threads, cap: 254 }).unwrap();
        assert!(bytes(&db) == cpu, "{}: 7 passes on {threads} thread(s) changed the bytes", set.display());
        println!("identical index bytes in 7 passes on {n} GPU(s), {threads} thread(s): {}", set.display());
    }
    let limit = limit_for(&pairs, n, 3).unwrap();
    let spill = tempfile::tempdir().unwrap();
    for (what, host) in [("host memory", u64::MAX), ("spill files", 0)] {
        let opts = GpuBuildOptions {
            pass_values: Some(limit),
            device_pair_bytes: Some(0),
            host_pair_bytes: Some(host),
            group: None,
        };
        let s =
            build_in(&[set.to_path_buf()], &db, request.clone(), opts, Some(spill.path()), Knobs::default()).unwrap();
        let p = s.passes.unwrap();
        assert_eq!(p.pairs_on_gpus, 0);
        assert!(if host == 0 { p.pairs_spilled > 0 } else { p.pairs_in_host_memory > 0 }, "{p:?}");
        assert!(bytes(&db) == cpu, "{}: pairs in {what} changed the bytes", set.display());
        assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0, "spill files left behind");
        println!("identical index bytes with pairs in {what} on {n} GPU(s): {}", set.display());
    }
}

#[test]
#[ignore = "needs a GPU"]
fn forced_passes_and_pairs_off_the_gpu_give_the_cpu_bytes() {
    assert!(std::env::var_os("SOURCE_DATE_EPOCH").is_some(), "set SOURCE_DATE_EPOCH: builds must carry the same date");
    let dir = tempfile::tempdir().unwrap();
    for set in reference_sets() {
        let cpu = dir.path().join("cpu.db");
        build_with(std::slice::from_ref(&set), &cpu, GpuRequest::None, GpuBuildOptions::default()).unwrap();
        passes_give_the_cpu_bytes(&set, vec![0], &bytes(&cpu), dir.path());
    }
}

/// The `kmerdb` binary (`$KMERDB_BIN` on the GPU machine, where cargo's path does not exist).
fn kmerdb_bin() -> PathBuf {
    std::env::var_os("KMERDB_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kmerdb")))
}

/// Spill files go with the build: removed after an input error and after Ctrl-C.
#[test]
#[ignore = "needs a GPU"]
fn spill_files_are_removed_on_error_and_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let (spill, db) = (dir.path().join("spill"), dir.path().join("x.db"));
    std::fs::create_dir(&spill).unwrap();
    // An input error after other files' pairs were spilled.
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    for f in std::fs::read_dir("data/genomes").unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, bad.join(f.file_name().unwrap())).unwrap();
    }
    std::fs::write(bad.join("zz_reads.fa"), "@r1\nACGT\n+\nIIII\n").unwrap();
    std::fs::copy("data/seqid2taxid.map", bad.join("seqid2taxid.map")).unwrap();
    let opts = GpuBuildOptions { device_pair_bytes: Some(0), host_pair_bytes: Some(0), ..Default::default() };
    let err = build_in(&[bad], &db, GpuRequest::List(vec![0]), opts, Some(&spill), Knobs::default()).unwrap_err();
    assert!(err.contains("zz_reads.fa"), "{err}");
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0, "spill files left after an error");
    assert!(!db.exists());

    // Ctrl-C while one input (a pipe) is still being read and the others are spilled.
    let pipe = dir.path().join("more.fa");
    assert!(std::process::Command::new("mkfifo").arg(&pipe).status().unwrap().success());
    let mut child = std::process::Command::new(kmerdb_bin())
        .args(["build", "--gpus", "0", "--gpu-device-pairs", "0", "--gpu-host-pairs", "0", "--tmp-dir"])
        .arg(&spill)
        .arg("-d")
        .arg(&db)
        .arg("data/genomes")
        .arg(&pipe)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = std::fs::OpenOptions::new().write(true).open(&pipe).unwrap();
    std::io::Write::write_all(&mut w, b">more\nACGTACGTACGTACGTACGTACGT\n").unwrap();
    let start = std::time::Instant::now();
    while std::fs::read_dir(&spill).unwrap().count() == 0 {
        assert!(start.elapsed().as_secs() < 120, "no spill file appeared");
        assert!(child.try_wait().unwrap().is_none(), "the build ended early");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    drop(w);
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0, "spill files left after Ctrl-C");
    assert!(!db.exists());
    println!("spill files removed after an error and after SIGINT");
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_scan_equals_a_prefix_sum() {
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    // One tile, its edges, and enough tiles for the scan of tile sums to recurse twice.
    for n in [1usize, 2047, 2048, 2049, 100_000, 5_000_000] {
        let input: Vec<u64> = (0..n).map(|_| rng.random_range(0..300)).collect();
        let dev = g.stream.clone_htod(&input).unwrap();
        let mut out = g.stream.alloc_zeros::<u64>(n).unwrap();
        kmerdb::gpu::condense::exclusive_scan(&g, &dev, n as u64, &mut out).unwrap();
        let got = g.stream.clone_dtoh(&out).unwrap();
        let mut run = 0u64;
        for (i, (&x, &y)) in input.iter().zip(&got).enumerate() {
            assert_eq!(y, run, "n = {n}: item {i}");
            run += x;
        }
    }
}

/// The GPU condense against its CPU twin on a table of random lists: targets renumbered or left
/// out, lists over the cap dropped, enough keys per shard that the rounds leave keys to the host.
#[test]
#[ignore = "needs a GPU"]
fn gpu_condense_equals_the_cpu_assembler() {
    use kmerdb::index::LocationLayout;
    use kmerdb::indexing::condense::condense_all;
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(12);
    let (targets, windows, cap) = (40u32, 1000u32, 20u32);
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for _ in 0..600_000 {
        let key = rng.random_range(0..NO_FEATURE);
        let m = if rng.random_bool(0.6) { 1 } else { rng.random_range(1..=cap + 5) };
        for _ in 0..m {
            keys.push(key);
            values.push((rng.random_range(0..targets) as u64) << 32 | rng.random_range(0..windows) as u64);
        }
    }
    // Provisional target t becomes final target t / 2 when t % 3 != 0; the others are left out.
    let final_id: Vec<Option<u32>> = (0..targets).map(|t| (t % 3 != 0).then_some(t / 2)).collect();
    // Final target f is strain 1000 + f of species 100 + f % 4, in genus 10 + f % 2: clade
    // features name species, genera and the root.
    let taxon =
        |taxid, parent, rank: &str| kmerdb::taxonomy::Taxon { taxid, parent, rank: rank.into(), name: String::new() };
    let mut taxa = vec![taxon(1, 1, "no rank"), taxon(10, 1, "genus"), taxon(11, 1, "genus")];
    taxa.extend((0..4).map(|s| taxon(100 + s, 10 + s % 2, "species")));
    let finals = targets / 2;
    taxa.extend((0..finals).map(|f| taxon(1000 + f, 100 + f % 4, "strain")));
    let infos: Vec<kmerdb::index::TargetInfo> = (0..finals)
        .map(|f| kmerdb::index::TargetInfo { name: format!("t{f}"), taxid: 1000 + f, length: 1000, windows: 10 })
        .collect();
    let clades = kmerdb::index::condensed::Clades::new(&infos, &taxa).unwrap();
    let layout =
        LocationLayout::for_counts(finals as u64, windows as u64, (finals * windows) as u64, cap, clades.nodes());
    let numbering = kmerdb::index::GlobalWindows::new(std::iter::repeat_n(windows as u64, finals as usize), &layout);
    let shard_bits = 6;

    let mut per_shard: Vec<Vec<(u32, u64)>> = vec![Vec::new(); 1 << shard_bits];
    for (&k, &v) in keys.iter().zip(&values) {
        if let Some(f) = final_id[(v >> 32) as usize] {
            per_shard[kmerdb::index::format::shard_of(k, shard_bits)].push((k, layout.pack(f, v as u32)));
        }
    }
    let expected: Vec<_> = per_shard
        .into_iter()
        .map(|p| {
            condense_all(p, (&layout, &numbering), kmerdb::index::bcht::KeyHash::new(shard_bits), cap, &clades).unwrap()
        })
        .collect();

    let mut t = BucketListTable::new(&g, TableConfig::new(keys.len() as u64, keys.len() as u64 * 3)).unwrap();
    t.insert_pairs(&keys, &values).unwrap();
    assert_eq!(t.status().unwrap().bits, 0);
    let got =
        kmerdb::gpu::condense::condense(&t, &g, &final_id, (&layout, &numbering), (cap, &clades), shard_bits).unwrap();
    assert_eq!(got.len(), expected.len());
    let over: usize = expected.iter().map(|c| c.clade_lists.len()).sum();
    assert!(over > 100, "lists over the cap: {over}");
    for (sh, (g, c)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(format!("{:?}", g.stats), format!("{:?}", c.stats), "shard {sh}: stats differ");
        assert!(g.data.keys() == c.data.keys() && g.data.code() == c.data.code(), "shard {sh}: key index differs");
        assert!(g.data.words() == c.data.words(), "shard {sh}: list stream differs");
        assert!(g.clade_lists == c.clade_lists, "shard {sh}: clade lists differ");
    }
    println!("GPU condense equals the CPU's: every shard, {over} clade features");
}

/// Classifies `reads` with the index `db` on `gpus`; returns the Kraken lines, the report and the
/// abundance profile.
fn classify_with(db: &std::path::Path, reads: kmerdb::classify::ReadLayout, gpus: GpuRequest) -> [Vec<u8>; 3] {
    classify_with_options(db, reads, gpus, 0.0, true)
}

/// [`classify_with`] with `--confidence` and with or without the Kraken lines (without them the
/// GPU downloads the features' taxa for the confidence alone; the lines come back empty).
fn classify_with_options(
    db: &std::path::Path,
    reads: kmerdb::classify::ReadLayout,
    gpus: GpuRequest,
    confidence: f64,
    lines: bool,
) -> [Vec<u8>; 3] {
    use kmerdb::classify::{ClassifyConfig, Sample, SampleOutputs, classify};
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| Some(dir.path().join(name));
    let config = ClassifyConfig {
        db: db.to_path_buf(),
        verify: kmerdb::index::Verify::All,
        threads: 8,
        hitmin: None,
        hitdiff: 0.0,
        strain_margin: kmerdb::classify::candidates::DEFAULT_STRAIN_MARGIN,
        protein_hitmin: kmerdb::classify::candidates::DEFAULT_PROTEIN_HITMIN,
        confidence,
        max_candidates: 3,
        insert_size: 600,
        lowest_rank: None,
        abundance_rank: None,
        use_names: false,
        report_zero_counts: false,
        samples: vec![Sample {
            name: "s".into(),
            reads,
            outputs: SampleOutputs {
                kraken: if lines { out("k.txt") } else { None },
                report: out("k.kreport"),
                abundance: out("a.tsv"),
                classified: None,
                unclassified: None,
                candidates: None,
                cami: None,
                krona: None,
                mpa: None,
            },
        }],
        gpus: gpus.clone(),
        html: None,
        progress: None,
        samples_at_once: None,
    };
    let start = std::time::Instant::now();
    let summary = classify(&config, &mut |_| {}).unwrap();
    let s = &summary.samples[0];
    println!(
        "  {}: {} reads, {} classified, {:.2} s",
        summary.device.as_ref().map_or("CPU".to_string(), |d| d.0.clone()),
        s.reads,
        s.classified,
        start.elapsed().as_secs_f64()
    );
    assert_eq!(summary.device.is_some(), gpus != GpuRequest::None, "the GPU was not used");
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    [if lines { read("k.txt") } else { Vec::new() }, read("k.kreport"), read("a.tsv")]
}

fn file_source(p: &str) -> kmerdb::input::Source {
    kmerdb::input::Source::File(PathBuf::from(p))
}

fn assert_same_outputs(what: &str, cpu: &[Vec<u8>; 3], gpu: &[Vec<u8>; 3]) {
    for (name, (c, g)) in ["per-read output", "kreport", "abundance"].iter().zip(cpu.iter().zip(gpu)) {
        if c != g {
            let (cl, gl) = (String::from_utf8_lossy(c), String::from_utf8_lossy(g));
            let diff = cl.lines().zip(gl.lines()).find(|(a, b)| a != b);
            panic!("{what}: GPU and CPU {name} differ; first difference:\n CPU {diff:?}");
        }
    }
    println!("identical outputs: {what}");
}

/// GPU classification gives the CPU's bytes: on the bundled pairs and single reads, and on the mock
/// community against `../shared/data/refs` when `KMERDB_GPU_TEST_READS` names its reads.
#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_output_equals_cpu_output() {
    use kmerdb::classify::ReadLayout;
    let dir = tempfile::tempdir().unwrap();
    let mut cases = vec![(
        PathBuf::from("data/genomes"),
        vec![
            ReadLayout::Paired(vec![(
                file_source("data/reads/sample_R1.fq.gz"),
                file_source("data/reads/sample_R2.fq.gz"),
            )]),
            ReadLayout::Single(vec![file_source("data/reads/single.fa")]),
        ],
    )];
    if let (Some(refs), Some(reads)) =
        (std::env::var_os("KMERDB_GPU_TEST_REFS"), std::env::var_os("KMERDB_GPU_TEST_READS"))
    {
        let r = PathBuf::from(reads);
        cases.push((
            PathBuf::from(refs),
            vec![ReadLayout::Paired(vec![(
                kmerdb::input::Source::File(r.join("mock_R1.fq.gz")),
                kmerdb::input::Source::File(r.join("mock_R2.fq.gz")),
            )])],
        ));
    }
    for (genomes, layouts) in cases {
        let db = dir.path().join("x.db");
        build_with(std::slice::from_ref(&genomes), &db, GpuRequest::None, GpuBuildOptions::default()).unwrap();
        for layout in layouts {
            let what = format!("{} with {layout:?}", genomes.display());
            let cpu = classify_with(&db, layout.clone(), GpuRequest::None);
            let gpu = classify_with(&db, layout.clone(), GpuRequest::List(vec![0]));
            assert_same_outputs(&what, &cpu, &gpu);
            // --confidence, with the lines and with the report alone.
            for lines in [true, false] {
                let cpu = classify_with_options(&db, layout.clone(), GpuRequest::None, 0.3, lines);
                let gpu = classify_with_options(&db, layout.clone(), GpuRequest::List(vec![0]), 0.3, lines);
                assert_same_outputs(&format!("{what}, --confidence 0.3, lines {lines}"), &cpu, &gpu);
            }
        }
    }
}

/// With an index built with `--protein`, the protein stage gives the same calls after the GPU's
/// candidates as after the CPU's: reads of phage lambda with every third base changed (its DNA
/// hidden, its proteins mostly kept) and the bundled pairs.
/// Hit lists of every shape (mates without features, runs of one taxon, unknown features, long
/// taxids), for pairs and single reads: `hit_list_text` writes exactly `output::write_hit_list` of
/// the runs the CPU makes (`hits::push_run` over the features' taxids).
#[test]
#[ignore = "needs a GPU"]
fn gpu_hit_list_text_equals_its_cpu_twin() {
    use kmerdb::hits::push_run;
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(23);
    let node_taxids: Vec<u32> = (0..50).map(|i| if i == 0 { 1 } else { rng.random_range(2..u32::MAX) }).collect();
    let mut mate_taxa: Vec<Vec<u32>> = vec![Vec::new(), Vec::new(), vec![0], vec![0, 0, 0], vec![3; 40], Vec::new()];
    for _ in 0..5000 {
        let n = rng.random_range(0..90);
        // Few taxa, so that runs are long; 0 is a feature not in the index.
        let pool: Vec<u32> = (0..rng.random_range(1..4)).map(|_| rng.random_range(0..=50)).collect();
        mate_taxa.push((0..n).map(|_| pool[rng.random_range(0..pool.len())]).collect());
    }
    let mut checked = 0;
    for mates_per_read in [2usize, 1] {
        let read_mates: Vec<usize> = (0..=mate_taxa.len() / mates_per_read).map(|r| r * mates_per_read).collect();
        let got = kmerdb::gpu::classify::twins::hit_text(&g, &mate_taxa, &read_mates, &node_taxids).unwrap();
        assert_eq!(got.len(), read_mates.len() - 1);
        for (r, text) in got.iter().enumerate() {
            let runs: Vec<Vec<(u32, u32)>> = (read_mates[r]..read_mates[r + 1])
                .map(|m| {
                    let mut runs = Vec::new();
                    for &t in &mate_taxa[m] {
                        push_run(&mut runs, if t == 0 { 0 } else { node_taxids[t as usize - 1] });
                    }
                    runs
                })
                .collect();
            let empty = Vec::new();
            let hits = [&runs[0][..], runs.get(1).unwrap_or(&empty)];
            let mut want = Vec::new();
            kmerdb::output::write_hit_list(&mut want, hits, mates_per_read == 2).unwrap();
            assert!(
                *text == want,
                "read {r} ({mates_per_read} mates): GPU {:?}, CPU {:?}",
                String::from_utf8_lossy(text),
                String::from_utf8_lossy(&want)
            );
            checked += want.len();
        }
    }
    assert!(checked > 100_000, "only {checked} bytes of hit lists: the test checks too little");
    println!("hit-list text equals its CPU twin: {} mates, {checked} bytes", mate_taxa.len());
}

/// The amino-acid k-mers of mates of every kind (empty, shorter than a k-mer, stop-free coding
/// stretches in either strand, N, lowercase, U) with several settings: the kernels list exactly
/// `protein::mate_kmers`, in its order.
#[test]
#[ignore = "needs a GPU"]
fn gpu_amino_acid_kmers_equal_their_cpu_twin() {
    use kmerdb::protein::{ProteinParams, mate_kmers};
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(17);
    // Codons without a stop (TAA, TAG, TGA): their run is stop-free in frame 0.
    let codons: Vec<[u8; 3]> = (0..64)
        .map(|i| [b"TCAG"[i / 16], b"TCAG"[i / 4 % 4], b"TCAG"[i % 4]])
        .filter(|c| !matches!(c, b"TAA" | b"TAG" | b"TGA"))
        .collect();
    let coding = |rng: &mut StdRng, n: usize| -> Vec<u8> {
        (0..n).flat_map(|_| codons[rng.random_range(0..codons.len())]).collect()
    };
    let mut mates: Vec<Vec<u8>> = vec![Vec::new(), b"ACG".to_vec(), b"ACGTACGTACGTACGTACGTA".to_vec()];
    for len in [2usize, 20, 21, 22, 150, 151, 152, 301, 1000] {
        mates.push(random_seq(&mut rng, len, b"ACGT"));
        mates.push(random_seq(&mut rng, len, b"ACGTACGTACGTacgtNU"));
    }
    for n in [7usize, 30, 50, 100, 400] {
        let c = coding(&mut rng, n);
        let reverse: Vec<u8> =
            c.iter().rev().map(|&b| b"TGCA"[b"ACGT".iter().position(|&x| x == b).unwrap()]).collect();
        let mut shifted = random_seq(&mut rng, 1 + n % 2, b"ACGT");
        shifted.extend_from_slice(&c);
        let mut with_n = c.clone();
        with_n[c.len() / 2] = b'N';
        mates.extend([c, reverse, shifted, with_n]);
    }
    for _ in 0..2000 {
        let n = rng.random_range(30..60);
        mates.push(coding(&mut rng, n));
    }
    let refs: Vec<&[u8]> = mates.iter().map(|m| m.as_slice()).collect();
    let mut listed = 0;
    for (k, sample) in [(7, 2), (7, 1), (5, 3), (1, 1), (3, 2)] {
        let params = ProteinParams { k, sample, ..ProteinParams::DEFAULT };
        let got = kmerdb::gpu::protein::twins::mate_kmers(&g, &refs, &params).unwrap();
        assert_eq!(got.len(), refs.len());
        for (i, m) in refs.iter().enumerate() {
            let mut want = Vec::new();
            mate_kmers(m, &params, &mut want);
            assert_eq!(got[i], want, "k {k}, sample {sample}: mate {i} ({} bases)", m.len());
            listed += want.len();
        }
    }
    assert!(listed > 100_000, "the mates gave only {listed} k-mers: the test checks too little");
    println!("amino-acid k-mers equal their CPU twin: {} mates, {listed} k-mers", refs.len());
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_with_the_protein_stage_equals_cpu() {
    use kmerdb::classify::ReadLayout;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("protein.db");
    let built = std::process::Command::new(kmerdb_bin())
        .args(["build", "-q", "--protein", "--gpus", "none", "--taxonomy", "data/taxonomy"])
        .args(["--seqid2taxid", "data/seqid2taxid.map", "-d"])
        .arg(&db)
        .arg("data/genomes")
        .status()
        .unwrap();
    assert!(built.success());
    let lambda: Vec<u8> = read_fasta("data/genomes/Phage_lambda.fna.gz").concat();
    let swap = |b: u8| match b {
        b'A' => b'G',
        b'G' => b'A',
        b'C' => b'T',
        b'T' => b'C',
        x => x,
    };
    let mutated: Vec<u8> = lambda.iter().enumerate().map(|(i, &b)| if i % 3 == 2 { swap(b) } else { b }).collect();
    let mut fasta = String::new();
    for (n, start) in (0..mutated.len() - 150).step_by(50).enumerate() {
        fasta.push_str(&format!(">m{n}\n{}\n", String::from_utf8_lossy(&mutated[start..start + 150])));
    }
    let reads = dir.path().join("mutated.fa");
    std::fs::write(&reads, fasta).unwrap();
    let layouts = [
        ReadLayout::Single(vec![kmerdb::input::Source::File(reads)]),
        ReadLayout::Paired(vec![(
            file_source("data/reads/sample_R1.fq.gz"),
            file_source("data/reads/sample_R2.fq.gz"),
        )]),
    ];
    for layout in layouts {
        let cpu = classify_with(&db, layout.clone(), GpuRequest::None);
        let gpu = classify_with(&db, layout.clone(), GpuRequest::List(vec![0]));
        assert_same_outputs(&format!("protein index, {layout:?}"), &cpu, &gpu);
    }
}

/// Awkward reads give the CPU's answers on the GPU: all N, shorter than k, longer than 100 kb,
/// random (features absent), lowercase and IUPAC codes, and, with an index that drops every
/// feature found in more than 2 places, reads whose features are overpopulated.
#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_awkward_reads() {
    let dir = tempfile::tempdir().unwrap();
    let genomes = read_fasta("data/genomes/Ecoli_K12_MG1655.fna.gz");
    let ecoli = &genomes[0];
    let mut rng = StdRng::seed_from_u64(21);
    let mut reads: Vec<(String, Vec<u8>)> = vec![
        ("all_n".into(), vec![b'N'; 150]),
        ("shorter_than_k".into(), ecoli[1000..1010].to_vec()),
        ("one_base".into(), b"A".to_vec()),
        ("random".into(), random_seq(&mut rng, 150, b"ACGT")),
        (
            "lower_iupac".into(),
            ecoli[5000..5150].to_ascii_lowercase().iter().map(|&b| if b == b'g' { b'R' } else { b }).collect(),
        ),
        ("long_150kb".into(), ecoli[200_000..350_000].to_vec()),
        ("long_random_120kb".into(), random_seq(&mut rng, 120_000, b"ACGTN")),
    ];
    for i in 0..2000 {
        let at = rng.random_range(0..ecoli.len() - 300);
        let len = rng.random_range(20..300);
        reads.push((format!("ecoli_{i}"), ecoli[at..at + len].to_vec()));
    }
    let fasta = dir.path().join("awkward.fa");
    let mut text = Vec::new();
    for (name, seq) in &reads {
        text.extend_from_slice(format!(">{name}\n").as_bytes());
        text.extend_from_slice(seq);
        text.push(b'\n');
    }
    std::fs::write(&fasta, text).unwrap();
    let layout = kmerdb::classify::ReadLayout::Single(vec![kmerdb::input::Source::File(fasta)]);
    for cap in [254, 2] {
        let db = dir.path().join(format!("cap{cap}.db"));
        let sources = kmerdb::input::discover_fasta(&[PathBuf::from("data/genomes")]).unwrap();
        let config = BuildConfig {
            protein: None,
            part: None,
            sources,
            db: db.clone(),
            taxonomy: Some(PathBuf::from("data/taxonomy")),
            taxonomy_gtdb: Vec::new(),
            seqid_maps: vec![PathBuf::from("data/seqid2taxid.map")],
            sketch: SketchParams::new(16, 127, None, 16, 0).unwrap(),
            max_locations_per_feature: cap,
            threads: 8,
            strict: false,
            progress: false,
            gpus: GpuRequest::None,
            gpu_options: GpuBuildOptions::default(),
            tmp_dir: None,
        };
        build(&config, &|_, _| {}).unwrap();
        let cpu = classify_with(&db, layout.clone(), GpuRequest::None);
        let gpu = classify_with(&db, layout.clone(), GpuRequest::List(vec![0]));
        assert_same_outputs(&format!("awkward reads, location cap {cap}"), &cpu, &gpu);
        // The same with the locations sorted as 64-bit keys, as on an index whose locations
        // outgrow 32 bits (this one's fit, so the 32-bit kernel ran above).
        kmerdb::gpu::classify::twins::wide_location_keys(true);
        let wide = classify_with(&db, layout.clone(), GpuRequest::List(vec![0]));
        kmerdb::gpu::classify::twins::wide_location_keys(false);
        assert_same_outputs(&format!("awkward reads, location cap {cap}, 64-bit keys"), &cpu, &wide);
    }
}

/// Several GPUs (run by `scripts/gpu-tests.sh` on a machine with 2 or more): an index sharded by
/// feature hash range over 2, then all GPUs, has the bytes of the CPU's and of one GPU's.
#[test]
#[ignore = "needs 2 or more GPUs"]
fn multi_gpu_index_bytes_equal_cpu_index_bytes() {
    assert!(std::env::var_os("SOURCE_DATE_EPOCH").is_some(), "set SOURCE_DATE_EPOCH: builds must carry the same date");
    let count = kmerdb::gpu::device::device_count();
    assert!(count >= 2, "this test needs 2 or more GPUs, found {count}");
    let dir = tempfile::tempdir().unwrap();
    for set in reference_sets() {
        let genomes = vec![set.clone()];
        let (cpu, one, many) = (dir.path().join("cpu.db"), dir.path().join("one.db"), dir.path().join("many.db"));
        build_with(&genomes, &cpu, GpuRequest::None, GpuBuildOptions::default()).unwrap();
        build_with(&genomes, &one, GpuRequest::List(vec![0]), GpuBuildOptions::default()).unwrap();
        let cpu_bytes = std::fs::read(&cpu).unwrap();
        assert!(cpu_bytes == std::fs::read(&one).unwrap(), "{}: 1 GPU and CPU differ", set.display());
        let mut requests = vec![GpuRequest::List(vec![0, 1])];
        if count > 2 {
            requests.push(GpuRequest::All);
        }
        for request in requests {
            let backend = build_with(&genomes, &many, request.clone(), GpuBuildOptions::default()).unwrap().backend;
            assert!(backend.starts_with("GPUs"), "{backend}");
            assert!(cpu_bytes == std::fs::read(&many).unwrap(), "{}: {backend} and CPU differ", set.display());
            println!("identical index bytes: {} on {backend}", set.display());
        }
    }
}

/// Several GPUs: an index larger than one GPU's memory (here a limit on each GPU's free memory,
/// `KMERDB_GPU_MEMORY_LIMIT`) is spread over two, each holding half its shards: `--gpus 0` says how
/// many GPUs would hold it, `--gpus 0,1` and the default give the CPU's outputs.
#[test]
#[ignore = "needs 2 or more GPUs"]
fn multi_gpu_index_larger_than_one_gpu_is_spread_over_two() {
    let count = kmerdb::gpu::device::device_count();
    assert!(count >= 2, "this test needs 2 or more GPUs, found {count}");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    let run = |args: &[&str], limit: Option<u64>| {
        let mut c = std::process::Command::new(kmerdb_bin());
        c.args(args);
        if let Some(l) = limit {
            c.env("KMERDB_GPU_MEMORY_LIMIT", l.to_string());
        }
        c.output().unwrap()
    };
    let built = run(
        &[
            "build",
            "-q",
            "--gpus",
            "none",
            "data/genomes",
            "--taxonomy",
            "data/taxonomy",
            "--seqid2taxid",
            "data/seqid2taxid.map",
            "-d",
            db.to_str().unwrap(),
        ],
        None,
    );
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    // A GPU needs the index's share and 2 GiB for batches: room for half the index, not all of it.
    let size = std::fs::metadata(&db).unwrap().len();
    let limit = (2u64 << 30) + size * 3 / 4;
    let classify = |gpus: &str, name: &str| {
        let out = dir.path().join(name);
        let args = [
            "classify",
            "-v",
            "--gpus",
            gpus,
            "-d",
            db.to_str().unwrap(),
            "-1",
            "data/reads/sample_R1.fq.gz",
            "-2",
            "data/reads/sample_R2.fq.gz",
            "-o",
            out.to_str().unwrap(),
        ];
        let o = run(&args, Some(limit));
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned(), std::fs::read(&out).unwrap_or_default())
    };
    let (ok, _, cpu) = classify("none", "cpu.kraken");
    assert!(ok && !cpu.is_empty());
    let (ok, err, _) = classify("0", "one.kraken");
    assert!(!ok && err.contains("would fit on 2 GPUs"), "one GPU under the limit: {err}");
    let (ok, err, two) = classify("0,1", "two.kraken");
    assert!(ok, "{err}");
    assert!(err.contains("classified on GPUs 0,1"), "{err}");
    assert!(two == cpu, "2 GPUs holding half the index each: outputs differ from the CPU's");
    let (ok, err, default) = classify("all", "all.kraken");
    assert!(ok && default == cpu, "the default under the limit: {err}");
    println!("an index of {size} bytes over 2 GPUs of {limit} bytes each: the CPU's outputs");
}

/// Several GPUs: an index built on any number of GPUs loads on any other number, and on the CPU.
/// The shards spread over the GPUs (each reading the others' through peer access), each GPU
/// classifying its share of every batch; the outputs are the CPU's, from the CPU's index.
#[test]
#[ignore = "needs 2 or more GPUs"]
fn multi_gpu_classify_output_equals_cpu_output() {
    use kmerdb::classify::ReadLayout;
    let count = kmerdb::gpu::device::device_count();
    assert!(count >= 2, "this test needs 2 or more GPUs, found {count}");
    let dir = tempfile::tempdir().unwrap();
    let (cpu_db, gpu_db) = (dir.path().join("cpu.db"), dir.path().join("gpu.db"));
    let mut cases = vec![(
        PathBuf::from("data/genomes"),
        ReadLayout::Paired(vec![(
            file_source("data/reads/sample_R1.fq.gz"),
            file_source("data/reads/sample_R2.fq.gz"),
        )]),
    )];
    if let (Some(refs), Some(reads)) =
        (std::env::var_os("KMERDB_GPU_TEST_REFS"), std::env::var_os("KMERDB_GPU_TEST_READS"))
    {
        let r = PathBuf::from(reads);
        cases.push((
            PathBuf::from(refs),
            ReadLayout::Paired(vec![(
                kmerdb::input::Source::File(r.join("mock_R1.fq.gz")),
                kmerdb::input::Source::File(r.join("mock_R2.fq.gz")),
            )]),
        ));
    }
    let mut sets = vec![GpuRequest::List(vec![0, 1])];
    if count > 2 {
        sets.push(GpuRequest::All);
    }
    for (genomes, layout) in cases {
        build_with(std::slice::from_ref(&genomes), &cpu_db, GpuRequest::None, GpuBuildOptions::default()).unwrap();
        let cpu = classify_with(&cpu_db, layout.clone(), GpuRequest::None);
        for built_on in &sets {
            let backend =
                build_with(std::slice::from_ref(&genomes), &gpu_db, built_on.clone(), GpuBuildOptions::default())
                    .unwrap()
                    .backend;
            let mut loads = vec![GpuRequest::None, GpuRequest::List(vec![0])];
            loads.extend(sets.iter().cloned());
            for load_on in loads {
                let out = classify_with(&gpu_db, layout.clone(), load_on.clone());
                let what = format!("{}: index built on {backend}, classified on {load_on:?}", genomes.display());
                assert_same_outputs(&what, &cpu, &out);
                println!("identical outputs: {what}");
            }
        }
    }
}

/// Several GPUs in 2, 3 and 7 passes, and with pairs in host memory and spill files: the CPU's
/// bytes.
#[test]
#[ignore = "needs 2 or more GPUs"]
fn multi_gpu_forced_passes_and_pairs_off_the_gpus_give_the_cpu_bytes() {
    assert!(std::env::var_os("SOURCE_DATE_EPOCH").is_some(), "set SOURCE_DATE_EPOCH: builds must carry the same date");
    let count = kmerdb::gpu::device::device_count();
    assert!(count >= 2, "this test needs 2 or more GPUs, found {count}");
    let dir = tempfile::tempdir().unwrap();
    for set in reference_sets() {
        let cpu = dir.path().join("cpu.db");
        build_with(std::slice::from_ref(&set), &cpu, GpuRequest::None, GpuBuildOptions::default()).unwrap();
        passes_give_the_cpu_bytes(&set, vec![0, 1], &bytes(&cpu), dir.path());
    }
}

/// Random slab-table operations on few keys: inserts (repeated pairs too), deletions of present
/// and absent pairs, searches.
fn random_slab_ops(rng: &mut StdRng, n: usize, keys: u32) -> Vec<SlabOp> {
    (0..n)
        .map(|_| {
            let (key, value) = (rng.random_range(0..keys) * 2_654_435_761u32, rng.random_range(0..40u32));
            match rng.random_range(0..10) {
                0..6 => SlabOp::Insert { key, value },
                6..8 => SlabOp::Delete { key, value },
                _ => SlabOp::Search { key },
            }
        })
        .collect()
}

/// One warp does a batch's operations in order, as the CPU twin does: the same results and the
/// same words, every slab, bitmap and the status, batch after batch; up to a full pool (the
/// tables of one block run out in their third or fourth batch).
#[test]
#[ignore = "needs a GPU"]
fn slab_table_one_warp_equals_its_cpu_twin() {
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    for (buckets, blocks, keys) in [(1u32, 1u32, 50u32), (13, 2, 2000), (500, 1, 20_000), (2, 1, 100_000)] {
        let config = SlabConfig { buckets, blocks, seed: 0x1234 ^ buckets };
        let mut device = DeviceSlabTable::new(&g, config).unwrap();
        let mut twin = SlabMemory::new(config);
        for batch in 0..4 {
            let ops = random_slab_ops(&mut rng, 8000, keys);
            let got = device.apply(&ops, Warps::One).unwrap();
            assert_eq!(got, twin.apply(&ops), "{buckets} buckets, batch {batch}: results differ");
            assert!(device.download().unwrap() == twin, "{buckets} buckets, batch {batch}: table words differ");
        }
        twin.check().unwrap();
        println!(
            "slab twin: {buckets} buckets, {blocks} blocks: {} live pairs, {} pool slabs, status {}",
            twin.live_pairs().len(),
            twin.pool_slabs_taken(),
            twin.status
        );
    }
}

/// Many warps at once (the hardware's order) against a HashMap: a bulk load with repeated keys and
/// pairs, then a mixed batch of inserts, deletions of pairs present before it, and searches of
/// keys it leaves alone; then a pool too small, where every insertion is stored or reported.
#[test]
#[ignore = "needs a GPU"]
fn slab_table_many_warps_equals_a_hashmap() {
    let g = gpu();
    let mut rng = StdRng::seed_from_u64(12);
    let n = 2_000_000usize;
    let bulk: Vec<(u32, u32)> =
        (0..n).map(|_| (rng.random_range(0..400_000u32) * 7919, rng.random_range(0..8u32))).collect();
    let config = SlabConfig::for_pairs(2 * n as u64, 1.5, 2.0);
    let mut t = DeviceSlabTable::new(&g, config).unwrap();
    let ops: Vec<SlabOp> = bulk.iter().map(|&(key, value)| SlabOp::Insert { key, value }).collect();
    assert!(t.apply(&ops, Warps::All).unwrap().iter().all(|&r| r == 1));
    let mut expected = bulk.clone();
    expected.sort_unstable();
    let memory = t.download().unwrap();
    memory.check().unwrap();
    assert_eq!(memory.live_pairs(), expected, "after the bulk load");
    assert_eq!(memory.status, 0);

    // The mixed batch: keys below 200,000 * 7919 are updated (inserted or deleted), the others
    // searched.
    let touched = |k: u32| k / 7919 < 200_000;
    let mut mixed = Vec::new();
    let mut deleted = Vec::new();
    for &(key, value) in bulk.iter().filter(|(k, _)| touched(*k)).step_by(3) {
        mixed.push(SlabOp::Delete { key, value });
        deleted.push((key, value));
    }
    let inserted: Vec<(u32, u32)> =
        (0..n / 2).map(|_| (rng.random_range(0..200_000u32) * 7919, rng.random_range(0..8u32))).collect();
    mixed.extend(inserted.iter().map(|&(key, value)| SlabOp::Insert { key, value }));
    let searched: Vec<u32> = (0..n / 2).map(|_| (200_000 + rng.random_range(0..200_000u32)) * 7919).collect();
    mixed.extend(searched.iter().map(|&key| SlabOp::Search { key }));
    // Shuffled, so that every warp has a mix.
    for i in (1..mixed.len()).rev() {
        mixed.swap(i, rng.random_range(0..=i));
    }
    let results = t.apply(&mixed, Warps::All).unwrap();
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for &(k, _) in &bulk {
        *counts.entry(k).or_default() += 1;
    }
    for (op, r) in mixed.iter().zip(&results) {
        match *op {
            SlabOp::Search { key } => assert_eq!(*r, counts.get(&key).copied().unwrap_or(0), "search {key}"),
            _ => assert_eq!(*r, 1, "{op:?}"),
        }
    }
    let mut after: HashMap<(u32, u32), i64> = HashMap::new();
    for &p in expected.iter().chain(&inserted) {
        *after.entry(p).or_default() += 1;
    }
    for p in &deleted {
        *after.get_mut(p).unwrap() -= 1;
    }
    let mut expected_after: Vec<(u32, u32)> =
        after.into_iter().flat_map(|(p, c)| std::iter::repeat_n(p, c as usize)).collect();
    expected_after.sort_unstable();
    let memory = t.download().unwrap();
    memory.check().unwrap();
    assert_eq!(memory.live_pairs(), expected_after, "after the mixed batch");
    println!(
        "slab table, many warps: {} pairs, {} mixed operations, memory utilization {:.2}",
        n,
        mixed.len(),
        memory.memory_utilization()
    );

    // A pool of one block for 100,000 pairs in 10 buckets.
    let mut small = DeviceSlabTable::new(&g, SlabConfig { buckets: 10, blocks: 1, seed: 3 }).unwrap();
    let ops: Vec<SlabOp> = (0..100_000u32).map(|i| SlabOp::Insert { key: i, value: i % 1000 }).collect();
    let results = small.apply(&ops, Warps::All).unwrap();
    let stored: Vec<(u32, u32)> = ops
        .iter()
        .zip(&results)
        .filter(|(_, r)| **r == 1)
        .map(|(op, _)| match *op {
            SlabOp::Insert { key, value } => (key, value),
            _ => unreachable!(),
        })
        .collect();
    let memory = small.download().unwrap();
    assert_eq!(memory.status, kmerdb::slab_hash::STATUS_SLAB_POOL_EXHAUSTED);
    assert_eq!(memory.live_pairs(), stored, "the pairs reported stored are the table's");
    // Each bucket has more insertions than the whole table holds, so every slab in use is full.
    let taken = memory.pool_slabs_taken() as usize;
    assert_eq!(stored.len(), 15 * (10 + taken), "every slab in use is full");
    assert!(taken > 1000, "{taken} of 1024 pool slabs taken");
}

/// `kmerdb update` with its stage 3 on the GPU writes the CPU update's bytes (which equal a fresh
/// build's: `tests/cli/update.rs`): on each reference set, the first half of the genome files
/// built, then the second half added and every third target removed; at the default cap and
/// at a cap of 2 (many dropped features, some back under the cap after the removal), in one pass
/// and in several.
#[test]
#[ignore = "needs a GPU"]
fn gpu_update_equals_cpu_update() {
    use kmerdb::indexing::update::{UpdateConfig, update};
    let dir = tempfile::tempdir().unwrap();
    for set in reference_sets() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&set)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_str().unwrap().contains(".f"))
            .collect();
        files.sort();
        let (kept, added) = files.split_at(files.len() / 2);
        for cap in [254, 2] {
            let old = dir.path().join("old.db");
            let knobs = Knobs { threads: 8, cap };
            build_in(kept, &old, GpuRequest::None, GpuBuildOptions::default(), None, knobs).unwrap();
            let index = kmerdb::index::Index::open(&old, kmerdb::index::Verify::Metadata).unwrap();
            let remove: Vec<String> = index.targets().iter().step_by(3).map(|t| t.name.clone()).collect();
            drop(index);
            let run = |gpus: GpuRequest, pass_values: Option<u64>, name: &str| {
                let map = set.join("seqid2taxid.map");
                let config = UpdateConfig {
                    old: old.clone(),
                    db: dir.path().join(name),
                    add: kmerdb::input::discover_fasta(added).unwrap(),
                    remove_targets: remove.clone(),
                    remove_taxa: Vec::new(),
                    skip_absent: false,
                    taxonomy: Some(
                        std::env::var_os("KMERDB_GPU_TEST_TAXONOMY")
                            .map(PathBuf::from)
                            .unwrap_or("data/taxonomy".into()),
                    ),
                    seqid_maps: vec![if map.exists() { map } else { PathBuf::from("data/seqid2taxid.map") }],
                    threads: 8,
                    gpus,
                    gpu_pass_values: pass_values,
                    strict: false,
                    command_line: vec!["kmerdb".into(), "update".into()],
                };
                let s = update(&config).unwrap();
                println!(
                    "  update on the {}: {} targets, {:.2} s",
                    s.backend,
                    s.counts.targets,
                    s.elapsed.as_secs_f64()
                );
                bytes(&config.db)
            };
            let cpu = run(GpuRequest::None, None, "cpu.db");
            assert!(
                run(GpuRequest::List(vec![0]), None, "gpu.db") == cpu,
                "{}: cap {cap}: bytes differ",
                set.display()
            );
            let total = kmerdb::index::Index::open(&dir.path().join("cpu.db"), kmerdb::index::Verify::Metadata)
                .unwrap()
                .header()
                .counts
                .locations;
            let passes = run(GpuRequest::List(vec![0]), Some(total / 5 + 1), "gpu-passes.db");
            assert!(passes == cpu, "{}: cap {cap}, in passes: bytes differ", set.display());
            println!(
                "identical index bytes: GPU update of {} (cap {cap}, {} targets removed), in one pass and in passes",
                set.display(),
                remove.len()
            );
        }
    }
}
