//! GPU benchmarks for BENCHMARKS.md, run on a GPU machine by `scripts/gpu-tests.sh`:
//! 1. the hardware limits (random 8-byte CAS, random 128-byte bucket reads), measured in this run;
//! 2. bucket-list inserts, uniform and skewed keys, for each cooperative group size, as fractions
//!    of the CAS rate; the slab table's workloads (`slab.rs`; alone with `--only-slab`);
//! 3. `kmerdb build` end to end from uncompressed FASTA in the page cache (default 2 Gbp), on the
//!    GPUs (also with forced passes: `--e2e-passes P`) against the CPU on every core, with the
//!    host's limits measured in the same run (disk write rate by dd, one core's parse rate) and a
//!    check that every run writes the same bytes;
//! 4. `kmerdb classify` end to end on simulated 150 bp pairs from uncompressed FASTQ in the page
//!    cache (default 20 M pairs), GPU against the CPU on every core, with a check that both write
//!    the same bytes, and the GPU's time by stage.
//!
//! With `--gpu-sets "0 0,1"`, the end-to-end runs are made on each set of GPUs in turn (scaling).
//! With `--scaling`, the limits and then only the device-side scaling runs of `scaling.rs` on 1, 2,
//! 4, ... GPUs (classify: weak `--scaling-pairs-m-per-gpu`, default 2; strong `--scaling-pairs-m`,
//! default 4). The build's scaling is measured end to end (`--gpu-sets "0 0,1"`).
//!
//! Usage: kmerdb-gpu-bench [--e2e-gbp N] [--e2e-files N] [--e2e-passes P] [--pairs-m N]
//! [--gpu-sets LISTS] [--skip-e2e] [--skip-micro] [--skip-classify] [--only-classify] [--only-slab]
//! [--scaling ...]
//! (`KMERDB_BENCH_DIR`: where the end-to-end files go, default the temporary folder).

mod host_memory;
mod scaling;
mod slab;
mod synth;
mod write_rates;

use cudarc::driver::PushKernelArg;
use kmerdb::compute::{GpuBuildOptions, GpuRequest};
use kmerdb::gpu::Gpu;

use kmerdb::gpu::table::{BucketListTable, TableConfig, launch_config};
use kmerdb::sketch::SketchParams;
use std::time::Instant;
use synth::{SynthSpec, generate};

/// The `kmerdb` binary's allocator (Cargo.toml), so that the end-to-end builds here run as the
/// binary's do.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Genomes' sequences, in order.
type Genomes = Vec<Vec<u8>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The benchmarks' flags (see the module documentation).
#[derive(clap::Parser)]
#[command(name = "kmerdb-gpu-bench", about = "GPU benchmarks for BENCHMARKS.md")]
struct Args {
    /// Gbp of synthetic genomes the end-to-end builds index.
    #[arg(long, default_value_t = 2.0)]
    e2e_gbp: f64,
    /// FASTA files the end-to-end genomes are written to.
    #[arg(long, default_value_t = 16)]
    e2e_files: usize,
    /// Also run each GPU build forced into this many passes (0: no such runs).
    #[arg(long, default_value_t = 0)]
    e2e_passes: u64,
    /// Millions of simulated pairs the classify benchmark (or --classify-data) makes.
    #[arg(long, default_value_t = 20.0)]
    pairs_m: f64,
    /// Gzipped samples --classify-data splits the pairs into.
    #[arg(long, default_value_t = 8)]
    samples: usize,
    /// The GPU sets of the end-to-end runs, e.g. "0 0,1" (default "0"), each then the CPU.
    #[arg(long)]
    gpu_sets: Option<String>,
    /// Only write the classify benchmark's data (index, FASTQ, gzipped samples) into this folder.
    #[arg(long)]
    classify_data: Option<std::path::PathBuf>,
    /// Only write the end-to-end builds' synthetic genomes (--e2e-gbp, --e2e-files) into this
    /// folder, as synthNN.fna (for `bench/gpu-update.sh`).
    #[arg(long)]
    synth_data: Option<std::path::PathBuf>,
    /// Only write the classify benchmark at users' scale into this folder (needs no GPU): the
    /// end-to-end builds' collection (--e2e-gbp, --e2e-files) in genomes/, its taxonomy, and
    /// --pairs-m million pairs of its strains, of strains it leaves out and of unrelated species,
    /// with their truth (`synth::scale`; `bench/gpu-scale.sh` runs it).
    #[arg(long)]
    scale_data: Option<std::path::PathBuf>,
    /// --scale-data: share of the pairs from strains the collection leaves out.
    #[arg(long, default_value_t = 0.2)]
    left_out_share: f64,
    /// --scale-data: share of the pairs from species nothing indexed is related to.
    #[arg(long, default_value_t = 0.05)]
    unindexed_share: f64,
    /// --scale-data: the genomes compressed (synthNN.fna.zst), for a disk that cannot hold them
    /// plain beside their reads and index (50 Gbp on a 64 GB disk).
    #[arg(long)]
    zstd_genomes: bool,
    /// --scale-data: the pairs' mean substitution rate.
    #[arg(long, default_value_t = 0.005)]
    error_rate: f64,
    /// The limits, then only the device-side scaling runs on 1, 2, 4, ... GPUs.
    #[arg(long)]
    scaling: bool,
    /// Millions of pairs per GPU of the weak classify scaling.
    #[arg(long, default_value_t = 2.0)]
    scaling_pairs_m_per_gpu: f64,
    /// Millions of pairs of the strong classify scaling.
    #[arg(long, default_value_t = 4.0)]
    scaling_pairs_m: f64,
    #[arg(long)]
    skip_micro: bool,
    #[arg(long)]
    skip_e2e: bool,
    #[arg(long)]
    skip_classify: bool,
    /// Only the classify benchmark (after the limits).
    #[arg(long)]
    only_classify: bool,
    /// Only the slab table's benchmark (after the limits).
    #[arg(long)]
    only_slab: bool,
    /// Only the host memory's rates for the GPU's copies (pinning, faulting in, copies back).
    #[arg(long)]
    host_memory: bool,
    /// Only the rates at which one file in this folder takes shards (needs no GPU).
    #[arg(long)]
    write_rates: Option<std::path::PathBuf>,
    /// --write-rates: GiB written in each way.
    #[arg(long, default_value_t = 4)]
    write_gib: usize,
}

/// The flags, parsed once (a typo is an error).
fn args() -> &'static Args {
    static ARGS: std::sync::OnceLock<Args> = std::sync::OnceLock::new();
    ARGS.get_or_init(<Args as clap::Parser>::parse)
}

/// The GPU sets of the end-to-end runs (`--gpu-sets "0 0,1"`), each named, then the CPU.
fn runs() -> Vec<(String, GpuRequest)> {
    let mut runs: Vec<(String, GpuRequest)> = args()
        .gpu_sets
        .as_deref()
        .unwrap_or("0")
        .split_whitespace()
        .map(|set| {
            let ids: Vec<usize> = set.split(',').map(|i| i.parse().expect("GPU ids")).collect();
            (format!("GPU {set}"), GpuRequest::List(ids))
        })
        .collect();
    runs.push(("CPU".into(), GpuRequest::None));
    runs
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let a = args();
    if let Some(dir) = &a.synth_data {
        // Needs no GPU.
        let files: Vec<std::path::PathBuf> = (0..a.e2e_files).map(|i| dir.join(format!("synth{i:02}.fna"))).collect();
        synth::write_fasta_files(&e2e_spec(a.e2e_gbp), &files)?;
        return Ok(());
    }
    if let Some(dir) = &a.write_rates {
        return write_rates::run(dir, a.write_gib);
    }
    if let Some(dir) = &a.scale_data {
        // Needs no GPU.
        let plan = synth::scale::ReadPlan {
            pairs: (a.pairs_m * 1e6).round() as usize,
            left_out_share: a.left_out_share,
            unindexed_share: a.unindexed_share,
            error_rate: a.error_rate,
            read_len: 150,
            seed: 0x5ca1e,
        };
        let t = Instant::now();
        let w = synth::scale::write(&e2e_spec(a.e2e_gbp), &plan, dir, a.e2e_files, a.zstd_genomes)
            .map_err(|e| format!("--scale-data {}: {e}", dir.display()))?;
        println!(
            "scale data: {:.2} Gbp of genomes, {} pairs of indexed strains, {} of left-out strains, {} of unrelated species, written in {:.1} s",
            w.genome_bases as f64 / 1e9,
            w.pairs[0],
            w.pairs[1],
            w.pairs[2],
            t.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let gpu = Gpu::open(0)?;
    let (free, total) = gpu.memory()?;
    println!(
        "device: GPU 0, {} ({}), {} SMs, {:.1} GiB ({:.1} GiB free)",
        gpu.name,
        gpu.arch,
        gpu.multiprocessors(),
        total as f64 / (1u64 << 30) as f64,
        free as f64 / (1u64 << 30) as f64
    );
    if a.host_memory {
        return host_memory::run(&gpu);
    }
    if let Some(dir) = &a.classify_data {
        drop(gpu);
        return classify_data(dir, (a.pairs_m * 1e6) as usize, a.samples);
    }
    let (cas, reads, pinned) = limits(&gpu)?;
    if a.scaling {
        drop(gpu);
        return scaling_runs();
    }
    if a.only_slab {
        return slab::run(&gpu, cas, reads);
    }
    if !a.only_classify {
        if !a.skip_micro {
            inserts(&gpu, cas)?;
            slab::run(&gpu, cas, reads)?;
        }
        if !a.skip_e2e {
            end_to_end(a.e2e_gbp, pinned)?;
        }
    }
    if !a.skip_classify {
        classify_pairs((a.pairs_m * 1e6) as usize, reads)?;
    }
    println!("(limits for reference: CAS {cas:.2} G/s, bucket reads {reads:.2} G/s)");
    Ok(())
}

/// The device-side scaling runs (`scaling.rs`) on 1, 2, 4, ... of this machine's GPUs.
fn scaling_runs() -> Result<(), Box<dyn std::error::Error>> {
    let count = kmerdb::gpu::device::device_count();
    let gpus = (0..count).map(Gpu::open).collect::<Result<Vec<_>, _>>()?;
    let mut sets: Vec<usize> = (0..).map(|i| 1usize << i).take_while(|&n| n <= count).collect();
    if !sets.contains(&count) {
        sets.push(count);
    }
    println!("scaling: {count} GPUs ({}), sets of {sets:?}", gpus[0].name);
    scaling::cas_together(&gpus)?;
    scaling::peer_bandwidth(&gpus)?;
    let dir = tempfile::tempdir()?;
    let (db, genomes) = classify_refs(dir.path())?;
    let index = kmerdb::index::Index::open(&db, kmerdb::index::Verify::Metadata)?;
    let (per_gpu, total) = ((args().scaling_pairs_m_per_gpu * 1e6) as usize, (args().scaling_pairs_m * 1e6) as usize);
    let t = Instant::now();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> =
        simulate_pairs(&genomes, 0x5eed).take((per_gpu * sets.last().copied().unwrap_or(1)).max(total)).collect();
    println!("scaling, classify: {} simulated pairs made in {:.1} s", pairs.len(), t.elapsed().as_secs_f64());
    scaling::classify_scaling(&gpus, &sets, &index, &pairs, per_gpu, total)?;
    Ok(())
}

/// A kernel of the benchmark's own (`kernels::limits_source`, which `kmerdb` does not carry) on
/// `gpu`: compiled once per GPU.
fn limit_function(gpu: &Gpu, name: &str) -> Result<cudarc::driver::CudaFunction, Box<dyn std::error::Error>> {
    type Modules = Vec<(usize, std::sync::Arc<cudarc::driver::CudaModule>)>;
    static MODULES: std::sync::Mutex<Modules> = std::sync::Mutex::new(Vec::new());
    let mut modules = MODULES.lock().expect("no benchmark panicked");
    let module = match modules.iter().find(|(ordinal, _)| *ordinal == gpu.ordinal) {
        Some((_, m)) => m.clone(),
        None => {
            use kmerdb::gpu::kernels::{compile_source, limits_source};
            let cubin = compile_source(&limits_source(), "limits.cuh", &gpu.arch)?;
            let m = gpu.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
            modules.push((gpu.ordinal, m.clone()));
            m
        }
    };
    Ok(module.load_function(name)?)
}

/// Random 8-byte CAS per second (in G/s) of one launch of `limit_cas` on `array`, each thread
/// doing 256; `run` seeds the addresses.
fn cas_rate(gpu: &Gpu, array: &cudarc::driver::CudaSlice<u64>, run: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let s = &gpu.stream;
    let (n, iters, threads) = (array.len() as u64, 256u32, gpu.multiprocessors() as u64 * 2048);
    let f = limit_function(gpu, "limit_cas")?;
    let mut b = s.launch_builder(&f);
    b.arg(array).arg(&n).arg(&iters).arg(&run);
    s.synchronize()?;
    let t = Instant::now();
    // SAFETY: CAS inside the array.
    unsafe { b.launch(launch_config(gpu, threads)) }?;
    s.synchronize()?;
    Ok((threads * iters as u64) as f64 / t.elapsed().as_secs_f64() / 1e9)
}

/// Random 8-byte CAS and random 128-byte reads on an 8 GiB array.
fn limits(gpu: &Gpu) -> Result<(f64, f64, f64), Box<dyn std::error::Error>> {
    let s = &gpu.stream;
    let n: u64 = 1 << 30; // 8 GiB of u64
    let a = s.alloc_zeros::<u64>(n as usize)?;
    let sink = s.alloc_zeros::<u64>(1)?;
    let threads = gpu.multiprocessors() as u64 * 2048;
    let iters = 256u32;
    let (mut cas, mut reads) = (Vec::new(), Vec::new());
    for run in 0..4u64 {
        let cas_rate = cas_rate(gpu, &a, run)?;
        let f = limit_function(gpu, "limit_bucket_reads")?;
        let lines = n / 16;
        let mut b = s.launch_builder(&f);
        b.arg(&a).arg(&lines).arg(&iters).arg(&run).arg(&sink);
        let t2 = Instant::now();
        // SAFETY: reads inside the array.
        unsafe { b.launch(launch_config(gpu, threads)) }?;
        s.synchronize()?;
        let secs2 = t2.elapsed().as_secs_f64();
        if run > 0 {
            cas.push(cas_rate);
            reads.push((threads / 16 * iters as u64) as f64 / secs2 / 1e9);
        }
    }
    let (cas, reads) = (median(cas), median(reads));
    // Host-to-device copies, the ceiling of the build's uploads: from pinned and pageable memory.
    let bytes = 1usize << 30;
    let mut dev = s.alloc_zeros::<u8>(bytes)?;
    // SAFETY: written below before it is read.
    let mut pinned = unsafe { gpu.ctx.alloc_pinned::<u8>(bytes)? };
    pinned.as_mut_slice()?.fill(1);
    let pageable = vec![1u8; bytes];
    let (mut from_pinned, mut from_pageable) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        s.memcpy_htod(&pinned, &mut dev)?;
        s.synchronize()?;
        from_pinned.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        s.memcpy_htod(&pageable, &mut dev)?;
        s.synchronize()?;
        from_pageable.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let pinned_rate = median(from_pinned);
    println!(
        "limits: host-to-device copy {:.1} GB/s from pinned memory, {:.1} GB/s from pageable memory (1 GiB, median of 3)",
        pinned_rate,
        median(from_pageable)
    );
    println!(
        "limits: random 8-byte CAS {cas:.2} G/s, random 128-byte bucket reads {reads:.2} G/s (8 GiB array, median of 3)"
    );
    Ok((cas, reads, pinned_rate))
}

/// Bucket-list inserts, uniform and skewed, for every group size.
fn inserts(gpu: &Gpu, cas: f64) -> Result<(), Box<dyn std::error::Error>> {
    let n = 200_000_000usize;
    let mut x = 0x1234_5678u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let uniform: Vec<u32> = (0..n).map(|_| (next() % 100_000_000) as u32).collect();
    // Skewed: key i drawn with probability ~ 1/i (Zipf), 1 to about 10^7 values per key.
    let skewed: Vec<u32> = (0..n)
        .map(|_| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            ((1e8f64).powf(u) as u32).wrapping_mul(2_654_435_761)
        })
        .collect();
    let values: Vec<u64> = (0..n as u64).collect();
    let s = &gpu.stream;
    let dv = s.clone_htod(&values)?;
    for (name, keys, distinct) in [("uniform", &uniform, 100_000_000u64), ("skewed", &skewed, 100_000_000)] {
        let dk = s.clone_htod(keys)?;
        for group in kmerdb::compute::ProbeGroup::ALL {
            let mut config = TableConfig::new(distinct * 3 / 2, n as u64 * 2);
            config.group = group;
            let mut table = BucketListTable::new(gpu, config)?;
            s.synchronize()?;
            let t = Instant::now();
            table.insert_device_pairs(&dk, &dv, n as u64)?;
            let secs = t.elapsed().as_secs_f64();
            let status = table.status()?;
            let rate = n as f64 / secs / 1e9;
            println!(
                "inserts {name:>7}, group {group:>2}: {:.2} G/s = {:.0}% of the CAS rate (status {:#x}, lost {})",
                rate,
                100.0 * rate / cas,
                status.bits,
                status.lost
            );
        }
    }
    Ok(())
}

/// The host's limits in this run: the sequential write rate of the disk holding `dir` (`dd`,
/// 8 GiB with fdatasync, as an index is written) and one core's FASTA parse rate on `file`.
fn host_limits(dir: &std::path::Path, file: &std::path::Path) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let test = dir.join("dd.test");
    let count = 8192u64;
    let t = Instant::now();
    let status = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", test.display()))
        .args(["bs=1M", &format!("count={count}"), "conv=fdatasync", "status=none"])
        .status()?;
    let secs = t.elapsed().as_secs_f64();
    std::fs::remove_file(&test)?;
    if !status.success() {
        return Err("dd failed".into());
    }
    let disk = (count << 20) as f64 / secs / 1e9;
    let t = Instant::now();
    let mut reader = kmerdb::input::SeqReader::open(&kmerdb::input::Source::File(file.to_path_buf()))?;
    let mut bases = 0usize;
    while let Some(rec) = reader.next_record() {
        bases += rec?.seq().len();
    }
    let parse = std::fs::metadata(file)?.len() as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!(
        "limits: disk write {disk:.2} GB/s (dd, 8 GiB, conv=fdatasync, {}); FASTA parse {parse:.2} GB/s on one core ({:.2} Gbp, {})",
        dir.display(),
        bases as f64 / 1e9,
        file.display()
    );
    Ok((disk, parse))
}

/// The xxh3-64 of a file, read in 8 MiB pieces.
fn hash_file(path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 8 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.digest());
        }
        h.update(&buf[..n]);
    }
}

/// The end-to-end builds' synthetic collection of `gbp` Gbp: species of 5 Mbp in 5 strains each.
fn e2e_spec(gbp: f64) -> SynthSpec {
    let genome_len = 5_000_000;
    SynthSpec {
        species: ((gbp * 1e9) / (5.0 * genome_len as f64)).ceil() as usize,
        genome_len,
        strains: 5,
        divergence: 0.01,
        seed: 11,
    }
}

/// `kmerdb build` end to end from synthetic FASTA in the page cache (`--e2e-files` files, 16 by
/// default), on each GPU set of `--gpu-sets`, with forced passes when `--e2e-passes P` is given
/// (each GPU's pass limit set to a P-th of its pairs), and on the CPU with every core. Each index
/// is hashed and deleted before the next build (the disk holds one at a time); all hashes must
/// be equal. The limits of the same run (disk, parse, copies) come first.
fn end_to_end(gbp: f64, copy_rate: f64) -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::var_os("KMERDB_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let spec = e2e_spec(gbp);
    // One file per genome is how references come (RefSeq, GTDB); fewer, larger files here.
    let n_files = args().e2e_files;
    let files: Vec<std::path::PathBuf> = (0..n_files).map(|i| dir.path().join(format!("synth{i:02}.fna"))).collect();
    let t = Instant::now();
    synth::write_fasta_files(&spec, &files)?;
    println!(
        "end to end: {:.2} Gbp of synthetic genomes in {n_files} FASTA files written in {:.1} s",
        spec.total_bases() as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    std::thread::scope(|scope| {
        for f in &files {
            scope.spawn(move || std::fs::read(f).map(drop)); // into the page cache
        }
    });
    host_limits(dir.path(), &files[0])?;
    let threads = std::thread::available_parallelism()?.get();
    let runs = end_to_end_runs(&spec, args().e2e_passes);
    let mut hashes = Vec::new();
    for (name, gpus, gpu_options) in runs {
        let db = dir.path().join("e2e.db");
        let config = kmerdb::indexing::BuildConfig {
            protein: None,
            part: None,
            sources: files.iter().cloned().map(kmerdb::input::Source::File).collect(),
            db: db.clone(),
            taxonomy: None,
            taxonomy_gtdb: Vec::new(),
            seqid_maps: Vec::new(),
            sketch: SketchParams::new(16, 127, None, 16, 0)?,
            max_locations_per_feature: 254,
            threads,
            strict: false,
            progress: false,
            gpus,
            gpu_options,
            tmp_dir: None,
        };
        let s = kmerdb::indexing::build(&config, &|_, _| {})?;
        let phases: Vec<String> = s.phases.iter().map(|(n, d)| format!("{n} {:.2} s", d.as_secs_f64())).collect();
        let gbps = spec.total_bases() as f64 / 1e9;
        println!(
            "end to end {name}: {gbps:.2} Gbp ({n_files} FASTA files) in {:.2} s = {:.2} Gbp/s ({threads} threads); {}; index {:.2} GB",
            s.elapsed.as_secs_f64(),
            gbps / s.elapsed.as_secs_f64(),
            phases.join(", "),
            s.index_bytes as f64 / 1e9
        );
        if let Some(p) = &s.passes {
            print_passes(&name, &s, p, copy_rate);
        }
        hashes.push(hash_file(&db)?);
        std::fs::remove_file(&db)?;
    }
    let same = hashes.iter().all(|h| *h == hashes[0]);
    println!(
        "end to end: index bytes of every run {} (xxh3 {:016x})",
        if same { "identical" } else { "DIFFER" },
        hashes[0]
    );
    if !same {
        return Err("index bytes differ between runs".into());
    }
    Ok(())
}

/// The pass build's lines of an end-to-end run: where the passes' time went, where the pairs
/// were kept, and the reading threads' time.
fn print_passes(name: &str, s: &kmerdb::indexing::BuildSummary, p: &kmerdb::indexing::PassSummary, copy_rate: f64) {
    let secs = |d: std::time::Duration| d.as_secs_f64();
    println!(
        "end to end {name}: {} passes on {} GPU(s); GPUs: select+insert {:.2} s, condense+download {:.2} s (summed over GPUs); host: waiting {:.2} s, finishing {:.2} s, writing {:.2} s = {:.2} GB/s; pairs {:.1} GB on the GPUs, {:.1} GB in host memory, {:.1} GB spilled",
        p.passes,
        p.gpus,
        secs(p.select_insert),
        secs(p.condense),
        secs(p.waiting_for_gpus),
        secs(p.finishing),
        secs(p.writing),
        s.index_bytes as f64 / 1e9 / secs(p.writing).max(1e-9),
        p.pairs_on_gpus as f64 / 1e9,
        p.pairs_in_host_memory as f64 / 1e9,
        p.pairs_spilled as f64 / 1e9,
    );
    let parts: Vec<String> = p.reading.iter().map(|(n, d)| format!("{n} {:.2} s", secs(*d))).collect();
    let read = s.phases.first().map(|(_, d)| secs(*d)).unwrap_or(0.0);
    println!(
        "end to end {name}: reading threads (summed over threads): {}; uploads {:.1} GB = {:.2} s at the pinned copy rate, {:.0}% of the read phase",
        parts.join(", "),
        p.uploaded_bytes as f64 / 1e9,
        p.uploaded_bytes as f64 / 1e9 / copy_rate,
        100.0 * p.uploaded_bytes as f64 / 1e9 / copy_rate / read.max(1e-9)
    );
}

/// The end-to-end runs: each of `runs()`, and before each GPU run the same forced into `passes`
/// passes (when not 0), with their names.
fn end_to_end_runs(spec: &SynthSpec, passes: u64) -> Vec<(String, GpuRequest, GpuBuildOptions)> {
    let mut runs: Vec<(String, GpuRequest, GpuBuildOptions)> = Vec::new();
    for (name, gpus) in crate::runs() {
        if let (GpuRequest::List(ids), true) = (&gpus, passes > 0) {
            // A P-th of each GPU's pairs: windows (bases / 112) x 16 features, shared by the GPUs.
            let pairs = spec.total_bases() / 112 * 16 / ids.len() as u64;
            let opts = GpuBuildOptions { pass_values: Some(pairs.div_ceil(passes)), ..Default::default() };
            runs.push((format!("{name}, forced {passes} passes"), gpus.clone(), opts));
        }
        runs.push((name, gpus, GpuBuildOptions::default()));
    }
    runs
}

/// The reference set of the classify benchmarks: 200 synthetic species x 2 strains (2 Mbp each),
/// indexed on GPU 0 into `dir`. Returns the index and the genomes.
fn classify_refs(dir: &std::path::Path) -> Result<(std::path::PathBuf, Genomes), Box<dyn std::error::Error>> {
    use std::io::Write;
    let spec = SynthSpec { species: 200, genome_len: 2_000_000, strains: 2, divergence: 0.01, seed: 5 };
    let fasta = dir.join("refs.fna");
    let mut genomes: Vec<Vec<u8>> = Vec::new();
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&fasta)?);
        let mut result = Ok(());
        generate(&spec, |name, seq| {
            genomes.push(seq.to_vec());
            if result.is_ok() {
                result = writeln!(out, ">{name}").and_then(|_| out.write_all(seq)).and_then(|_| writeln!(out));
            }
        });
        result?;
        out.flush()?;
    }
    let db = dir.join("refs.db");
    let config = kmerdb::indexing::BuildConfig {
        protein: None,
        part: None,
        sources: vec![kmerdb::input::Source::File(fasta)],
        db: db.clone(),
        taxonomy: None,
        taxonomy_gtdb: Vec::new(),
        seqid_maps: Vec::new(),
        sketch: SketchParams::new(16, 127, None, 16, 0)?,
        max_locations_per_feature: 254,
        threads: std::thread::available_parallelism()?.get(),
        strict: false,
        progress: false,
        gpus: GpuRequest::List(vec![0]),
        gpu_options: GpuBuildOptions::default(),
        tmp_dir: None,
    };
    kmerdb::indexing::build(&config, &|_, _| {})?;
    Ok((db, genomes))
}

/// Simulated 150 bp pairs from random places of random genomes (insert 270-330, 0.5%
/// substitutions), mate 2 reverse-complemented; the same pairs for the same seed.
fn simulate_pairs(genomes: &[Vec<u8>], seed: u64) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> + '_ {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let comp = |b: u8| match b {
        b'A' => b'T',
        b'C' => b'G',
        b'G' => b'C',
        _ => b'A',
    };
    std::iter::repeat(()).map(move |_| {
        let g = &genomes[(next() % genomes.len() as u64) as usize];
        let at = (next() % (g.len() - 400) as u64) as usize;
        let insert = 270 + (next() % 60) as usize;
        let mut m1 = g[at..at + 150].to_vec();
        let mut m2: Vec<u8> = g[at + insert - 150..at + insert].iter().rev().map(|&b| comp(b)).collect();
        for m in [&mut m1, &mut m2] {
            for b in m.iter_mut() {
                if next() % 200 == 0 {
                    *b = b"ACGT"[(next() % 4) as usize];
                }
            }
        }
        (m1, m2)
    })
}

/// The inputs of `bench/gpu-classify.sh`, which times the `kmerdb` binary on them: in `dir`, the
/// `classify_refs` index (`refs.db`), `pairs` simulated pairs as plain FASTQ (`r1.fq`, `r2.fq`),
/// the same pairs cut into `samples` samples as gzip (level 1, one member a file, as most tools
/// write it: `sN_R1.fq.gz`, `sN_R2.fq.gz`) and their sheet (`samples.tsv`). Samples are made on
/// all cores, each from its own seed.
fn classify_data(dir: &std::path::Path, pairs: usize, samples: usize) -> Result<(), Box<dyn std::error::Error>> {
    use rayon::prelude::*;
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let t = Instant::now();
    let (_db, genomes) = classify_refs(dir)?;
    println!("classify data: refs.db built in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let per = pairs.div_ceil(samples.max(1));
    let qual = [b'I'; 150];
    let fastq: Vec<[Vec<u8>; 2]> = (0..samples)
        .into_par_iter()
        .map(|s| {
            let n = per.min(pairs - (s * per).min(pairs));
            let mut mates = [Vec::with_capacity(n * 330), Vec::with_capacity(n * 330)];
            for (i, (m1, m2)) in simulate_pairs(&genomes, 0x5eed + s as u64).take(n).enumerate() {
                for (w, m, mate) in [(0, &m1, 1), (1, &m2, 2)] {
                    let w = &mut mates[w];
                    writeln!(w, "@s{s}p{i}/{mate}").expect("writing to memory");
                    w.extend_from_slice(m);
                    w.extend_from_slice(b"\n+\n");
                    w.extend_from_slice(&qual);
                    w.push(b'\n');
                }
            }
            mates
        })
        .collect();
    let compressed: Vec<Vec<u8>> = (0..samples * 2)
        .into_par_iter()
        .map(|j| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
            e.write_all(&fastq[j / 2][j % 2]).expect("compressing in memory");
            e.finish().expect("compressing in memory")
        })
        .collect();
    let mut sheet = String::new();
    for s in 0..samples {
        for m in 0..2 {
            std::fs::write(dir.join(format!("s{s}_R{}.fq.gz", m + 1)), &compressed[s * 2 + m])?;
        }
        sheet.push_str(&format!("s{s}\ts{s}_R1.fq.gz\ts{s}_R2.fq.gz\n"));
    }
    std::fs::write(dir.join("samples.tsv"), sheet)?;
    for m in 0..2 {
        let mut w =
            std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(dir.join(format!("r{}.fq", m + 1)))?);
        for f in &fastq {
            w.write_all(&f[m])?;
        }
        w.flush()?;
    }
    let plain: usize = fastq.iter().map(|f| f[0].len() + f[1].len()).sum();
    let gz: usize = compressed.iter().map(Vec::len).sum();
    println!(
        "classify data: {pairs} pairs of 150 bp, {:.2} GB of FASTQ, {samples} gzipped samples of {:.2} GB in all, made in {:.1} s",
        plain as f64 / 1e9,
        gz as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `pairs` simulated pairs of 150 bp from `genomes` as `r1.fq` and `r2.fq` in `dir`, read once
/// into the page cache.
fn write_pairs(
    dir: &std::path::Path,
    genomes: &Genomes,
    pairs: usize,
) -> Result<(std::path::PathBuf, std::path::PathBuf), Box<dyn std::error::Error>> {
    use std::io::Write;
    let t = Instant::now();
    let (r1, r2) = (dir.join("r1.fq"), dir.join("r2.fq"));
    let mut w1 = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(&r1)?);
    let mut w2 = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(&r2)?);
    let qual = [b'I'; 150];
    for (i, (m1, m2)) in simulate_pairs(genomes, 0x5eed).take(pairs).enumerate() {
        for (w, m, mate) in [(&mut w1, &m1, 1), (&mut w2, &m2, 2)] {
            writeln!(w, "@p{i}/{mate}")?;
            w.write_all(m)?;
            w.write_all(b"\n+\n")?;
            w.write_all(&qual)?;
            w.write_all(b"\n")?;
        }
    }
    w1.flush()?;
    w2.flush()?;
    drop((w1, w2));
    let size = std::fs::metadata(&r1)?.len() + std::fs::metadata(&r2)?.len();
    let _ = (std::fs::read(&r1)?, std::fs::read(&r2)?); // into the page cache
    println!(
        "classify: {pairs} simulated pairs of 150 bp ({:.1} GB of FASTQ) made in {:.1} s",
        size as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    Ok((r1, r2))
}

/// `kmerdb classify` on `pairs` simulated pairs (`simulate_pairs`) of the `classify_refs` set, on
/// each GPU set and the CPU on every core.
fn classify_pairs(pairs: usize, reads_limit: f64) -> Result<(), Box<dyn std::error::Error>> {
    use kmerdb::classify::{ClassifyConfig, ReadLayout, Sample, SampleOutputs, classify};
    let dir = tempfile::tempdir()?;
    let (db, genomes) = classify_refs(dir.path())?;
    let threads = std::thread::available_parallelism()?.get();
    let (r1, r2) = write_pairs(dir.path(), &genomes, pairs)?;
    let mut outputs = Vec::new();
    for (name, gpus) in runs() {
        let out = |f: &str| Some(dir.path().join(format!("{}.{f}", outputs.len())));
        let config = ClassifyConfig {
            db: db.clone(),
            verify: kmerdb::index::Verify::Metadata,
            threads,
            hitmin: None,
            hitdiff: 0.0,
            strain_margin: kmerdb::classify::candidates::DEFAULT_STRAIN_MARGIN,
            protein_hitmin: kmerdb::classify::candidates::DEFAULT_PROTEIN_HITMIN,
            confidence: 0.0,
            max_candidates: 3,
            insert_size: 600,
            lowest_rank: None,
            abundance_rank: None,
            use_names: false,
            report_zero_counts: false,
            samples: vec![Sample {
                name: "bench".into(),
                reads: ReadLayout::Paired(vec![(
                    kmerdb::input::Source::File(r1.clone()),
                    kmerdb::input::Source::File(r2.clone()),
                )]),
                outputs: SampleOutputs {
                    kraken: out("kraken"),
                    report: out("kreport"),
                    abundance: None,
                    classified: None,
                    unclassified: None,
                    candidates: None,
                    cami: None,
                    krona: None,
                    mpa: None,
                },
            }],
            gpus,
            html: None,
            progress: None,
            samples_at_once: None,
        };
        let summary = classify(&config, &mut |_| {})?;
        let s = &summary.samples[0];
        let secs = s.elapsed.as_secs_f64();
        println!(
            "classify end to end {name}: {} pairs in {secs:.2} s = {:.2} M pairs/s ({:.1}% classified; index load {:.2} s, {threads} threads)",
            s.reads,
            s.reads as f64 / secs / 1e6,
            100.0 * s.classified as f64 / s.reads.max(1) as f64,
            summary.index_load.as_secs_f64()
        );
        if let Some(t) = summary.gpu_times {
            let gpu_secs = (t.upload + t.kernels + t.download).as_secs_f64();
            println!(
                "classify GPU stages (summed over GPUs): {} batches; upload {:.2} s, kernels {:.2} s, download {:.2} s; GPU stages alone {:.2} M pairs/s, kernels alone {:.2} M pairs/s (limit for reference: {reads_limit:.2} G random bucket reads/s); the rest ({:.2} s) is parsing, the decision and writing",
                t.batches,
                t.upload.as_secs_f64(),
                t.kernels.as_secs_f64(),
                t.download.as_secs_f64(),
                t.reads as f64 / gpu_secs / 1e6,
                t.reads as f64 / t.kernels.as_secs_f64() / 1e6,
                secs - gpu_secs
            );
        }
        outputs.push(std::fs::read(dir.path().join(format!("{}.kraken", outputs.len())))?);
    }
    println!(
        "classify: GPU and CPU per-read outputs {}",
        if outputs.iter().all(|o| *o == outputs[0]) { "identical" } else { "DIFFER" }
    );
    Ok(())
}
