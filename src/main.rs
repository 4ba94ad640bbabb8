//! The `kmerdb` command: parses arguments, validates them into the library's configs, runs the
//! library and turns errors into messages and exit codes (0 success, 1 any error, 2 bad usage).

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
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
    /// Describe an index: parameters, targets, sizes; optionally verify its checksums.
    Info(InfoArgs),
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
    #[command(flatten)]
    compute: ComputeArgs,
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
    gpus: String,
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

fn main() {
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => log::LevelFilter::Error,
        (false, 0) => log::LevelFilter::Info,
        (false, 1) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    env_logger::Builder::new()
        .filter_level(level)
        .format(|buf, record| match record.level() {
            log::Level::Info => writeln!(buf, "kmerdb: {}", record.args()),
            l => writeln!(buf, "kmerdb: {}: {}", l.as_str().to_lowercase(), record.args()),
        })
        .init();
    let result = match cli.command {
        Command::Build(args) => run_build(args, cli.quiet),
        Command::Info(args) => run_info(args),
    };
    if let Err(e) = result {
        eprintln!("kmerdb: error: {e:#}");
        std::process::exit(1);
    }
}

/// Threads and GPU choice, validated. GPU support is not built yet: `all` means the CPU.
fn compute_threads(args: &ComputeArgs) -> Result<usize> {
    match args.gpus.as_str() {
        "none" => {}
        "all" => log::debug!("this kmerdb has no GPU backend yet; running on the CPU"),
        list => bail!("--gpus {list}: this kmerdb has no GPU backend yet; use --gpus none or all"),
    }
    match args.threads {
        Some(0) => bail!("--threads must be at least 1"),
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
        bail!("--max-locations-per-feature must be at least 1");
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
    let sources = discover_fasta(&args.inputs)?;
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
    log::info!(
        "built {}: {} targets, {} bases, {} features, {} locations, {} overpopulated features dropped ({} locations), {} ({:.3} bytes per base), {:.2} s, peak memory {}",
        s.db.display(),
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
