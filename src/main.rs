//! The `kmerdb` command: parses arguments, validates them into the library's configs, runs the
//! library and turns errors into messages and exit codes (0 success, 1 any error, 2 bad usage).

use anyhow::{Context, Result, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use kmerdb::build::{BuildConfig, BuildSummary};
use kmerdb::index::{Index, Verify};
use kmerdb::input::discover_fasta;
use kmerdb::resources::{human_bytes, peak_rss_bytes};
use kmerdb::sketch::SketchParams;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "kmerdb", version, about = "GPU-accelerated metagenomic k-mer index and read classifier")]
struct Cli {
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// More detail on stderr (repeat for debug output).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build an index from reference genomes (FASTA, plain or gz/bz2/xz/zst).
    Build(BuildArgs),
    /// Classify reads (FASTA/FASTQ, single, paired or interleaved) against an index.
    Classify(ClassifyArgs),
    /// Describe an index: parameters, targets, sizes; optionally verify its checksums.
    Info(InfoArgs),
    /// Join the --candidates-out files of a partitioned index's parts into one run's outputs.
    Merge(MergeArgs),
    /// Print a shell completion script (e.g. `kmerdb completions bash > ~/.local/share/bash-completion/completions/kmerdb`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (kmerdb.1 and one per subcommand) into a folder (`man/` in the
    /// repository holds them; a test checks that they are current).
    #[command(hide = true)]
    Manpages {
        /// Folder to write into (created if missing).
        dir: PathBuf,
    },
}

/// The profile outputs that classify and merge both write.
#[derive(Args)]
struct ProfileArgs {
    /// CAMI bioboxes taxonomic profile (percent of reads per taxon at each standard rank).
    #[arg(long, value_name = "FILE")]
    cami: Option<PathBuf>,
    /// Krona text input (`ktImportText FILE`): reads per taxon with its lineage.
    #[arg(long, value_name = "FILE")]
    krona: Option<PathBuf>,
    /// MetaPhlAn-style table: reads per clade at standard ranks, as k__|p__|… paths.
    #[arg(long, value_name = "FILE")]
    mpa: Option<PathBuf>,
    /// A self-contained HTML page of the run: each sample's classified fraction and its most
    /// abundant taxa by rank.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

#[derive(Args)]
struct MergeArgs {
    /// Candidates files, one per part (from `kmerdb classify --candidates-out`).
    #[arg(value_name = "CANDIDATES", required = true)]
    inputs: Vec<PathBuf>,
    /// Kraken-format per-read output (`-` for stdout). Default: stdout, unless another output is
    /// asked for.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Kraken report (kreport) for MultiQC, Pavian, Bracken, Krona.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Reads per taxon (TSV).
    #[arg(long, value_name = "FILE")]
    abundance: Option<PathBuf>,
    /// Sum the abundance profile to this rank (e.g. species).
    #[arg(long, value_name = "RANK")]
    abundance_rank: Option<String>,
    #[command(flatten)]
    profiles: ProfileArgs,
    /// The sample's name in the CAMI profile [default: the first file's name].
    #[arg(long)]
    sample: Option<String>,
    /// Taxon names instead of bare taxids in the per-read output.
    #[arg(long)]
    use_names: bool,
}

#[derive(Args)]
struct ClassifyArgs {
    /// Single-end read files (FASTA or FASTQ, plain or compressed), or - for stdin; all one sample.
    #[arg(value_name = "READS")]
    reads: Vec<PathBuf>,
    /// Index to classify against.
    #[arg(short, long, env = "KMERDB_DB", default_value = "kmerdb.db")]
    db: PathBuf,
    /// First mates of paired reads (repeatable, matched in order with -2).
    #[arg(short = '1', value_name = "R1")]
    r1: Vec<PathBuf>,
    /// Second mates of paired reads.
    #[arg(short = '2', value_name = "R2")]
    r2: Vec<PathBuf>,
    /// READS hold mate pairs one after the other.
    #[arg(long)]
    interleaved: bool,
    /// Several samples with one index load: a TSV of `name<TAB>R1[<TAB>R2]` (paths relative to the
    /// sheet). Output names must then contain `{sample}`.
    #[arg(long, value_name = "FILE")]
    samples: Option<PathBuf>,
    /// Kraken-format per-read output (`-` for stdout). Default: stdout, when no other output is given.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Kraken report (kreport) for MultiQC, Pavian, Bracken, Krona.
    #[arg(short, long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Reads and fraction per taxon (TSV).
    #[arg(long, value_name = "FILE")]
    abundance: Option<PathBuf>,
    /// Sum --abundance at this rank (e.g. species, genus).
    #[arg(long, value_name = "RANK")]
    abundance_rank: Option<String>,
    /// Classified reads, in their input format; `#` in the name stands for the mate number.
    #[arg(long, value_name = "FILE")]
    classified_out: Option<PathBuf>,
    /// Unclassified reads, like --classified-out.
    #[arg(long, value_name = "FILE")]
    unclassified_out: Option<PathBuf>,
    /// Each read's candidates against this index, in the binary form `kmerdb merge` joins across
    /// the partitions of a partitioned index.
    #[arg(long, value_name = "FILE")]
    candidates_out: Option<PathBuf>,
    #[command(flatten)]
    profiles: ProfileArgs,
    /// Print taxon names beside taxids in the per-read output.
    #[arg(long)]
    use_names: bool,
    /// Hits the best candidate needs [default: sketch size / 5, at least 1].
    #[arg(long, value_name = "N")]
    hitmin: Option<u32>,
    /// Candidates with at least (1 - hitdiff) x the best candidate's hits join the LCA
    /// (0: only ties with the best).
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    hitdiff: f64,
    /// Candidates (targets) kept per read.
    #[arg(long, default_value_t = 2, value_name = "N")]
    max_candidates: usize,
    /// Largest insert size of read pairs (widens the window range scanned per target).
    #[arg(long, default_value_t = 600, value_name = "BASES")]
    insert_size: usize,
    /// Report no taxon below this rank (e.g. species): lower calls are lifted to it.
    #[arg(long, value_name = "RANK")]
    lowest_rank: Option<String>,
    /// Skip checking the large index sections against their checksums when loading
    /// (the check reads the whole index once).
    #[arg(long)]
    no_verify: bool,
    /// Samples of --samples classified at once (testing; default: half the threads on GPUs, one
    /// on the CPU).
    #[arg(long, hide = true, value_name = "N")]
    samples_at_once: Option<usize>,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct BuildArgs {
    /// FASTA files, directories (searched recursively for .fa .fasta .fna .ffn .fas, optionally
    /// compressed), or - for stdin.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Index file to write.
    #[arg(short, long, env = "KMERDB_DB", default_value = "kmerdb.db")]
    db: PathBuf,
    /// NCBI taxonomy directory (nodes.dmp, names.dmp, optional merged.dmp; plain or .gz). Without
    /// it, every sequence is its own taxon under one root.
    #[arg(long, value_name = "DIR")]
    taxonomy: Option<PathBuf>,
    /// Sequence id to taxid map: `seqid<TAB>taxid` or NCBI *.accession2taxid (plain or .gz).
    /// Repeatable. Header tags (kraken:taxid|N) take precedence.
    #[arg(long = "seqid2taxid", value_name = "FILE")]
    seqid_maps: Vec<PathBuf>,
    /// Make sequences without a taxid an error (default: leave them out with a warning).
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    sketch: SketchArgs,
    /// Features seen in more locations are left out of the index.
    #[arg(long, default_value_t = 254, value_name = "N")]
    max_locations_per_feature: u32,
    /// Index only part I of N of the genome files (sorted by path, cut into N contiguous runs),
    /// for partitioned indexes joined per read by `kmerdb merge`.
    #[arg(long, value_name = "I/N")]
    partition: Option<kmerdb::build::partition::Partition>,
    #[command(flatten)]
    compute: ComputeArgs,
    /// Folder for a GPU build's spill files, when the pairs of a large input fit neither the GPUs'
    /// nor the host's memory [default: the index's folder].
    #[arg(long, value_name = "DIR")]
    tmp_dir: Option<PathBuf>,
    /// At most this many values per GPU in one pass (testing; default: from GPU memory).
    #[arg(long, hide = true)]
    gpu_pass_values: Option<u64>,
    /// Bytes of pairs each GPU keeps while reading (testing; default: from GPU memory).
    #[arg(long, hide = true)]
    gpu_device_pairs: Option<u64>,
    /// Bytes of pairs host memory keeps before spill files (testing; default: from host memory).
    #[arg(long, hide = true)]
    gpu_host_pairs: Option<u64>,
    /// Threads probing the GPU table together: 1, 2, 4, 8, 16 or 32 (default 4).
    #[arg(long, hide = true, value_parser = ["1", "2", "4", "8", "16", "32"])]
    gpu_group: Option<String>,
}

#[derive(Args)]
struct SketchArgs {
    /// k-mer length (1 to 32).
    #[arg(short, default_value_t = 16)]
    k: u32,
    /// Window length in bases.
    #[arg(short, long, default_value_t = 127)]
    window: u32,
    /// Distance between window starts [default: window - k + 1].
    #[arg(long)]
    stride: Option<u32>,
    /// Features kept per window.
    #[arg(short, long, default_value_t = 16)]
    sketch_size: u32,
}

#[derive(Args)]
struct ComputeArgs {
    /// Worker threads [default: all cores].
    #[arg(short, long)]
    threads: Option<usize>,
    /// GPUs to use: `all` (every visible GPU, else the CPU), `none`, or a list such as `0,1`.
    #[arg(long, default_value = "all", value_name = "all|none|LIST")]
    gpus: kmerdb::compute::GpuRequest,
}

#[derive(Args)]
struct InfoArgs {
    /// Index file.
    #[arg(env = "KMERDB_DB", default_value = "kmerdb.db")]
    db: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Check every section against its checksum (reads the whole file).
    #[arg(long)]
    verify: bool,
}

/// A command line that cannot run as given: exit code 2, as for clap's own usage errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

/// Returns a [`UsageError`] from the enclosing function.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(UsageError(format!($($arg)*)).into())
    };
}

fn main() {
    // Debug lines carry the time since the start, so that `-v` gives a run's timeline.
    let started = std::time::Instant::now();
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => log::LevelFilter::Error,
        (false, 0) => log::LevelFilter::Info,
        (false, 1) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    env_logger::Builder::new()
        .filter_level(level)
        .format(move |buf, record| match record.level() {
            log::Level::Info => writeln!(buf, "kmerdb: {}", record.args()),
            l @ (log::Level::Warn | log::Level::Error) => {
                writeln!(buf, "kmerdb: {}: {}", l.as_str().to_lowercase(), record.args())
            }
            l => writeln!(
                buf,
                "kmerdb: {}: [{:.2} s] {}",
                l.as_str().to_lowercase(),
                started.elapsed().as_secs_f64(),
                record.args()
            ),
        })
        .init();
    remove_temp_files_on_signals();
    let result = match cli.command {
        Command::Build(args) => run_build(args, cli.quiet),
        Command::Classify(args) => run_classify(args, cli.quiet),
        Command::Info(args) => run_info(args),
        Command::Merge(args) => run_merge(args, cli.quiet),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "kmerdb", &mut std::io::stdout());
            Ok(())
        }
        Command::Manpages { dir } => write_man_pages(&dir),
    };
    if let Err(e) = result {
        // The library's messages already quote their causes; add only what they do not say.
        let mut message = e.to_string();
        for cause in e.chain().skip(1).map(|c| c.to_string()) {
            if !message.contains(&cause) {
                message = format!("{message}: {cause}");
            }
        }
        eprintln!("kmerdb: error: {message}");
        let usage = e.downcast_ref::<UsageError>().is_some() || e.downcast_ref::<kmerdb::paths::PathClash>().is_some();
        std::process::exit(if usage { 2 } else { 1 });
    }
}

/// SIGINT, SIGTERM and SIGHUP end the run without leaving temporary files: a thread waits for
/// them, removes every temporary file the run is writing (older outputs and indexes stay as they
/// were) and exits with 128 + the signal's number, as shells report a signal.
fn remove_temp_files_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("cannot watch for Ctrl-C ({e}): an interrupted run may leave temporary files");
            return;
        }
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let name = match signal {
                SIGINT => "SIGINT",
                SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            kmerdb::temp_files::remove_all_and_exit(128 + signal, |removed| {
                eprintln!("kmerdb: interrupted ({name}); removed {removed} temporary files");
            });
        }
    });
}

/// The thread count, validated.
fn compute_threads(args: &ComputeArgs) -> Result<usize> {
    match args.threads {
        Some(0) => usage!("--threads must be at least 1"),
        Some(n) => Ok(n),
        None => Ok(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
    }
}

fn run_build(args: BuildArgs, quiet: bool) -> Result<()> {
    let threads = compute_threads(&args.compute)?;
    let sketch = SketchParams::new(
        args.sketch.k,
        args.sketch.window,
        args.sketch.stride,
        args.sketch.sketch_size,
        kmerdb::sketch::DEFAULT_HASH_SEED,
    )?;
    if args.max_locations_per_feature == 0 {
        usage!("--max-locations-per-feature must be at least 1");
    }
    if let Some(dir) = &args.taxonomy {
        if !dir.is_dir() {
            bail!("--taxonomy {}: not a directory", dir.display());
        }
    }
    for m in &args.seqid_maps {
        if !m.is_file() {
            bail!("--seqid2taxid {}: no such file", m.display());
        }
    }
    let mut sources = discover_fasta(&args.inputs)?;
    if let Some(p) = &args.partition {
        sources = p.select(sources)?;
        log::info!("partition {}/{}: {} genome files", p.part, p.parts, sources.len());
    }
    build_file_plan(&args, &sources).check()?;
    kmerdb::build::check_output(&args.db)?;
    let config = BuildConfig {
        sources,
        db: args.db,
        taxonomy: args.taxonomy,
        seqid_maps: args.seqid_maps,
        sketch,
        max_locations_per_feature: args.max_locations_per_feature,
        threads,
        strict: args.strict,
        progress: !quiet && std::io::stderr().is_terminal(),
        gpus: args.compute.gpus.clone(),
        gpu_options: kmerdb::compute::GpuBuildOptions {
            pass_values: args.gpu_pass_values,
            device_pair_bytes: args.gpu_device_pairs,
            host_pair_bytes: args.gpu_host_pairs,
            group: args.gpu_group.map(|g| g.parse().expect("validated by clap")),
        },
        tmp_dir: args.tmp_dir,
    };
    let bar = progress_bar(&config);
    let summary = kmerdb::build::build(&config, &|bases, bytes| {
        if let Some(bar) = &bar {
            bar.set_position(bytes);
            bar.set_message(format!("{} bases", human_count(bases)));
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let summary = summary?;
    report_build(&summary);
    Ok(())
}

/// What a build reads (genome files, the taxonomy's dump files, the maps) and writes (the index).
fn build_file_plan(args: &BuildArgs, sources: &[kmerdb::input::Source]) -> kmerdb::paths::FilePlan {
    let mut plan = kmerdb::paths::FilePlan::new();
    for s in sources {
        if let kmerdb::input::Source::File(p) = s {
            plan.reads("INPUT", p);
        }
    }
    if let Some(dir) = &args.taxonomy {
        for name in ["nodes.dmp", "names.dmp", "merged.dmp"] {
            for ext in ["", ".gz"] {
                plan.reads("--taxonomy", &dir.join(format!("{name}{ext}")));
            }
        }
    }
    for m in &args.seqid_maps {
        plan.reads("--seqid2taxid", m);
    }
    plan.writes("-d/--db", &args.db);
    plan
}

/// A bar over the input files' on-disk bytes (known up front even when compressed), with the bases
/// read as its message.
fn progress_bar(config: &BuildConfig) -> Option<indicatif::ProgressBar> {
    if !config.progress {
        return None;
    }
    let total: u64 = config
        .sources
        .iter()
        .filter_map(|s| match s {
            kmerdb::input::Source::File(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            kmerdb::input::Source::Stdin => None,
        })
        .sum();
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} of input ({bytes_per_sec}, {eta} left) {msg}",
        )
        .expect("the template is valid"),
    );
    Some(bar)
}

fn report_build(s: &BuildSummary) {
    let c = &s.counts;
    if !s.without_taxid.is_empty() {
        log::warn!(
            "{} sequences have no taxid and were left out of the index: {} (give --seqid2taxid, or --strict to make this an error)",
            s.without_taxid.len(),
            kmerdb::build::targets::examples(&s.without_taxid)
        );
    }
    if let Some(t) = s.taxonomy_load {
        log::debug!("taxonomy loaded in {:.2} s", t.as_secs_f64());
    }
    let phases: Vec<String> = s.phases.iter().map(|(n, d)| format!("{n} {:.2} s", d.as_secs_f64())).collect();
    log::debug!("phases: {}", phases.join(", "));
    log::info!(
        "built {} on the {}: {} targets, {} bases, {} features, {} locations, {} overpopulated features dropped ({} locations), {} ({:.3} bytes per base), {:.2} s, peak memory {}",
        s.db.display(),
        s.backend,
        c.targets,
        c.bases,
        c.features,
        c.locations,
        c.dropped_features,
        c.dropped_locations,
        human_bytes(s.index_bytes),
        s.index_bytes as f64 / c.bases.max(1) as f64,
        s.elapsed.as_secs_f64(),
        peak_rss_bytes().map(human_bytes).unwrap_or_else(|| "unknown".into()),
    );
}

fn human_count(n: u64) -> String {
    match n {
        0..1_000_000 => n.to_string(),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} G", n as f64 / 1e9),
    }
}

fn run_classify(args: ClassifyArgs, quiet: bool) -> Result<()> {
    use kmerdb::classify::plan::{self, OutputNames, PlanError, ReadsGiven};
    use kmerdb::classify::{ClassifyConfig, SampleOutputs};
    let threads = compute_threads(&args.compute)?;
    if args.max_candidates == 0 {
        usage!("--max-candidates must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.hitdiff) {
        usage!("--hitdiff must be between 0 and 1");
    }
    let usage = |e: PlanError| -> anyhow::Error {
        match e {
            PlanError::Usage(m) => UsageError(m).into(),
            e => e.into(),
        }
    };
    let given = ReadsGiven::from_flags(args.reads, args.r1, args.r2, args.samples, args.interleaved).map_err(usage)?;
    let names = OutputNames {
        per_sample: SampleOutputs {
            kraken: args.output,
            report: args.report,
            abundance: args.abundance,
            classified: args.classified_out,
            unclassified: args.unclassified_out,
            candidates: args.candidates_out,
            cami: args.profiles.cami,
            krona: args.profiles.krona,
            mpa: args.profiles.mpa,
        },
        html: args.profiles.html,
    };
    let samples = plan::samples(&given, &names).map_err(usage)?;
    plan::file_plan(&args.db, &given, &samples, names.html.as_deref()).map_err(usage)?.check()?;
    let config = ClassifyConfig {
        db: args.db,
        verify: if args.no_verify { Verify::Metadata } else { Verify::All },
        threads,
        hitmin: args.hitmin,
        hitdiff: args.hitdiff,
        max_candidates: args.max_candidates,
        insert_size: args.insert_size,
        lowest_rank: args.lowest_rank,
        abundance_rank: args.abundance_rank,
        use_names: args.use_names,
        samples,
        gpus: args.compute.gpus.clone(),
        html: names.html,
        samples_at_once: args.samples_at_once,
    };
    let summary = kmerdb::classify::classify(&config, &mut |s| {
        if !quiet {
            let secs = s.elapsed.as_secs_f64().max(1e-9);
            log::info!(
                "{}: {} reads, {} classified ({:.2}%), {:.0} reads/s",
                s.name,
                s.reads,
                s.classified,
                100.0 * s.classified as f64 / s.reads.max(1) as f64,
                s.reads as f64 / secs
            );
        }
    })?;
    if !quiet {
        match &summary.device {
            Some((device, copy)) => log::info!(
                "classified on {device}; index loaded in {:.2} s ({:.2} s of it copying to the GPU)",
                summary.index_load.as_secs_f64(),
                copy.as_secs_f64()
            ),
            None => log::info!("classified on the CPU; index loaded in {:.2} s", summary.index_load.as_secs_f64()),
        }
    }
    #[cfg(feature = "gpu")]
    if let Some(t) = &summary.gpu_times {
        log::debug!(
            "GPU stages (summed over GPUs and batches): {} batches of {} reads; packing and upload {:.2} s, kernels {:.2} s, download {:.2} s",
            t.batches,
            t.reads,
            t.upload.as_secs_f64(),
            t.kernels.as_secs_f64(),
            t.download.as_secs_f64()
        );
        // What follows is the process's exit: freeing GPU and pinned memory.
        log::debug!("classify finished");
    }
    Ok(())
}

fn run_merge(args: MergeArgs, quiet: bool) -> Result<()> {
    let outputs = [
        &args.output,
        &args.report,
        &args.abundance,
        &args.profiles.cami,
        &args.profiles.krona,
        &args.profiles.mpa,
        &args.profiles.html,
    ];
    let nothing_asked = outputs.iter().all(|o| o.is_none());
    if outputs.iter().filter(|o| o.as_ref().is_some_and(|p| p.as_os_str() == "-")).count() > 1 {
        usage!("only one output can go to stdout (-)");
    }
    let mut plan = kmerdb::paths::FilePlan::new();
    for input in &args.inputs {
        plan.reads("CANDIDATES", input);
    }
    let flags = ["-o/--output", "--report", "--abundance", "--cami", "--krona", "--mpa", "--html"];
    for (flag, path) in flags.iter().zip(outputs) {
        if let Some(p) = path {
            plan.writes(*flag, p);
        }
    }
    plan.check()?;
    let sample = args.sample.clone().unwrap_or_else(|| {
        let first = args.inputs[0].file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        first.split('.').next().unwrap_or("sample").to_string()
    });
    let config = kmerdb::merge::MergeConfig {
        inputs: args.inputs,
        kraken: if nothing_asked { Some(PathBuf::from("-")) } else { args.output },
        report: args.report,
        abundance: args.abundance,
        abundance_rank: args.abundance_rank,
        cami: args.profiles.cami,
        krona: args.profiles.krona,
        mpa: args.profiles.mpa,
        sample,
        html: args.profiles.html,
        use_names: args.use_names,
    };
    let s = kmerdb::merge::merge(&config)?;
    if !quiet {
        log::info!(
            "merged {} parts: {} reads, {} classified ({:.2}%)",
            config.inputs.len(),
            s.reads,
            s.classified,
            100.0 * s.classified as f64 / s.reads.max(1) as f64
        );
    }
    Ok(())
}

/// The man pages of the visible commands, from the same definitions as `--help`.
fn write_man_pages(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    let page = |cmd: clap::Command, name: String, extra: &str| -> Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut roff = Vec::new();
        clap_mangen::Man::new(cmd).title(name.to_uppercase()).render(&mut roff)?;
        roff.extend_from_slice(extra.as_bytes());
        std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))
    };
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let name = format!("kmerdb-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).bin_name(name.replace('-', " ")).version(env!("CARGO_PKG_VERSION"));
        page(sub, name, "")?;
    }
    page(cmd.clone(), "kmerdb".into(), MAN_EXTRA)
}

/// Sections of kmerdb.1 that clap's definitions do not hold (roff).
const MAN_EXTRA: &str = r#".SH "EXIT STATUS"
0 on success; 1 on any error (the message names the file and record); 2 on bad usage, such as an
output that names an input or another output; 128 + N when signal N ended the run (130 after
Ctrl\-C), after removing the run's temporary files.
.SH ENVIRONMENT
.TP
\fBKMERDB_DB\fR
The index when \fB\-d\fR is not given (default kmerdb.db).
.TP
\fBKMERDB_CACHE_DIR\fR
Where compiled GPU kernels are cached (default ~/.cache/kmerdb).
.TP
\fBSOURCE_DATE_EPOCH\fR
The build date recorded in an index, for reproducible builds.
.SH "SEE ALSO"
\fBkmerdb\-build\fR(1), \fBkmerdb\-classify\fR(1), \fBkmerdb\-merge\fR(1), \fBkmerdb\-info\fR(1)
"#;

fn run_info(args: InfoArgs) -> Result<()> {
    let index = Index::open(&args.db, Verify::Metadata)?;
    let verified = if args.verify {
        index.verify_all()?;
        Some(true)
    } else {
        None
    };
    let info = kmerdb::info::describe(&index, verified);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &info).context("writing JSON")?;
        writeln!(out)?;
    } else {
        out.write_all(kmerdb::info::render_text(&info).as_bytes())?;
    }
    Ok(())
}
