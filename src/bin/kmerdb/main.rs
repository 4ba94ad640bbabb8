//! The `kmerdb` command: parses arguments (`args`), validates them into the library's configs
//! (`configs`), runs the library, reports (`report`) and turns errors into messages and exit codes
//! (0 success, 1 any error, 2 bad usage).

mod args;
mod configs;
mod download;
mod man;
mod report;

use anyhow::{Context, Result};
use args::{BrackenPrepArgs, BuildArgs, ClassifyArgs, Cli, Command, InfoArgs, InspectArgs, MergeArgs, UpdateArgs};
use clap::{CommandFactory, Parser};
use configs::UsageError;
use kmerdb::index::{Index, Verify};
use std::io::Write;

/// See Cargo.toml: batch-sized allocations are reused instead of faulted in again.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Whether descriptor 1 was closed when the process started (`>&-`). Rust's runtime opens
/// `/dev/null` on closed descriptors 0 to 2 before `main` runs, so this is looked at earlier, by
/// a constructor in `.init_array`, which the C runtime runs before Rust's.
static STDOUT_WAS_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = {
    extern "C" fn note() {
        // SAFETY: fcntl(F_GETFD) only asks whether descriptor 1 is open.
        if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
            STDOUT_WAS_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    note
};

fn main() {
    // Debug lines carry the time since the start, so that `-v` gives a run's timeline.
    let started = std::time::Instant::now();
    if STDOUT_WAS_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        kmerdb::output::note_stdout_closed();
    }
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => log::LevelFilter::Error,
        (false, 0) => log::LevelFilter::Info,
        (false, 1) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    env_logger::Builder::new()
        .filter_level(level)
        // Messages name files, sequences and samples: their control characters are escaped.
        .format(move |buf, record| {
            let text = record.args().to_string();
            let text = kmerdb::terminal::escape_controls(&text);
            match record.level() {
                log::Level::Info => writeln!(buf, "kmerdb: {text}"),
                l @ (log::Level::Warn | log::Level::Error) => {
                    writeln!(buf, "kmerdb: {}: {text}", l.as_str().to_lowercase())
                }
                l => writeln!(
                    buf,
                    "kmerdb: {}: [{:.2} s] {text}",
                    l.as_str().to_lowercase(),
                    started.elapsed().as_secs_f64()
                ),
            }
        })
        .init();
    remove_temp_files_on_signals();
    if let Err(e) = kmerdb::mapped::install_sigbus_handler() {
        log::warn!("cannot watch for SIGBUS ({e}): an index changed under this run would end it without a message");
    }
    let result = match cli.command {
        Command::Build(args) => run_build(args, cli.quiet),
        Command::Classify(args) => run_classify(*args, cli.quiet),
        Command::Update(args) => run_update(args),
        Command::Info(args) => run_info(args),
        Command::Inspect(args) => run_inspect(args),
        Command::Merge(args) => run_merge(args),
        Command::BrackenPrep(args) => run_bracken_prep(args),
        Command::Download(args) => download::run(args.what, cli.quiet),
        Command::Completions { shell } => kmerdb::output::stdout_closed_error().map_err(Into::into).map(|()| {
            clap_complete::generate(shell, &mut Cli::command(), "kmerdb", &mut std::io::stdout());
        }),
        Command::Manpages { dir } => man::write(&dir),
    };
    if let Err(e) = result {
        // A reader that stopped early (`| head`) closed the output pipe: that ends the run quietly,
        // with the status of a process ended by SIGPIPE (128 + 13), as Kraken 2 and coreutils end,
        // so that `set -o pipefail` sees that the output was cut short.
        let broken_pipe = |c: &(dyn std::error::Error + 'static)| {
            c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        };
        if e.chain().any(broken_pipe) {
            std::process::exit(128 + libc::SIGPIPE);
        }
        // What failed, then each cause (the library's messages do not repeat their causes).
        let message = format!("{e:#}");
        eprintln!("kmerdb: error: {}", kmerdb::terminal::escape_controls(&message));
        // Bad usage (exit 2): flags that contradict each other or values no run accepts (sketch
        // parameters included: `SketchParams::new` is the library's check of the flags).
        let usage = e.downcast_ref::<UsageError>().is_some()
            || e.downcast_ref::<kmerdb::sketch::ParamError>().is_some()
            || e.downcast_ref::<kmerdb::paths::PathClash>().is_some()
            || e.downcast_ref::<kmerdb::merge::MergeError>().is_some_and(|m| m.is_usage());
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
                // Written past stderr's lock, which a thread writing a log line may hold.
                let line = format!("kmerdb: interrupted ({name}); removed {removed} temporary files\n");
                // SAFETY: write(2) on descriptor 2 with a live buffer.
                unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
            });
        }
    });
}

fn run_build(mut args: BuildArgs, quiet: bool) -> Result<()> {
    let _gtdb = download::gtdb_taxonomy_dir(&mut args.taxa)?;
    let config = configs::build(args, quiet)?;
    if config.taxonomy.is_none() {
        log::warn!(
            "no --taxonomy: every sequence becomes its own taxon under the root, so reports will have no ranks and CAMI and MPA profiles will be empty; give --taxonomy DIR (an NCBI taxdump) for taxa"
        );
    }
    let bar = report::progress_bar(&config);
    let summary = kmerdb::indexing::build(&config, &|bases, bytes| {
        if let Some(bar) = &bar {
            bar.set_position(bytes);
            bar.set_message(format!("{} bases", report::human_count(bases)));
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let summary = summary?;
    report::build(&summary);
    Ok(())
}

fn run_update(mut args: UpdateArgs) -> Result<()> {
    let _gtdb = download::gtdb_taxonomy_dir(&mut args.taxa)?;
    let config = configs::update(args)?;
    let summary = kmerdb::indexing::update::update(&config)?;
    report::update(&summary);
    Ok(())
}

fn run_classify(args: ClassifyArgs, quiet: bool) -> Result<()> {
    let mut config = configs::classify(args)?;
    let progress = (!quiet).then(report::ClassifyProgress::start).flatten();
    config.progress = progress.as_ref().map(|p| p.reads.clone());
    let summary = kmerdb::classify::classify(&config, &mut |s| match &progress {
        Some(p) => p.bar.suspend(|| report::sample(s)),
        None => report::sample(s),
    });
    drop(progress);
    report::classify(&summary?);
    Ok(())
}

fn run_merge(args: MergeArgs) -> Result<()> {
    let config = configs::merge(args)?;
    let s = kmerdb::merge::merge(&config)?;
    report::merge(config.inputs.len(), &s);
    Ok(())
}

fn run_bracken_prep(args: BrackenPrepArgs) -> Result<()> {
    let index = Index::open(&args.db, Verify::Metadata)?;
    let config = configs::bracken_prep(args, index.header().sketch.k)?;
    let s = kmerdb::bracken::kmer_distribution(&config, &index)?;
    report::bracken_prep(&config, &s);
    Ok(())
}

fn run_inspect(args: InspectArgs) -> Result<()> {
    let index = Index::open(&args.db, Verify::Metadata)?;
    let tree = index.taxonomy();
    let direct = if args.skip_counts { Default::default() } else { kmerdb::inspect::features_per_taxon(&index) };
    kmerdb::output::stdout_closed_error()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        let taxa = kmerdb::inspect::taxa_with_features(&index, &direct).context("the report")?;
        serde_json::to_writer_pretty(&mut out, &taxa).context("writing JSON")?;
        writeln!(out)?;
    } else {
        kmerdb::output::write_kreport(&mut out, tree, &direct, 0, args.skip_counts)?;
    }
    out.flush()?;
    Ok(())
}

fn run_info(args: InfoArgs) -> Result<()> {
    let index = Index::open(&args.db, Verify::Metadata)?;
    if args.verify {
        index.verify_all()?;
    }
    let info = kmerdb::info::describe(&index, args.verify);
    kmerdb::output::stdout_closed_error()?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &info).context("writing JSON")?;
        writeln!(out)?;
    } else {
        out.write_all(kmerdb::terminal::escape_controls(&kmerdb::info::render_text(&info)).as_bytes())?;
    }
    Ok(())
}
