//! The second stage of the command line: raw flags (`args`) checked and turned into the library's
//! configs before any work starts. Bad usage is a [`UsageError`] (exit code 2).

use crate::args::{BrackenPrepArgs, BuildArgs, ClassifyArgs, ComputeArgs, MergeArgs, TaxaArgs, UpdateArgs};
use anyhow::{Result, bail};
use kmerdb::classify::ClassifyConfig;
use kmerdb::index::Verify;
use kmerdb::indexing::BuildConfig;
use kmerdb::input::discover_fasta;
use kmerdb::sketch::SketchParams;
use std::io::IsTerminal;
use std::path::PathBuf;

/// A command line that cannot run as given: exit code 2, as for clap's own usage errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Returns a [`UsageError`] from the enclosing function.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(UsageError(format!($($arg)*)).into())
    };
}

/// The thread count, validated.
fn compute_threads(args: &ComputeArgs) -> Result<usize> {
    thread_count(args.threads)
}

/// More threads than this many a core are capped: each is a thread the run starts (with its
/// stack), and past a few a core they only wait. `-t 100000` spent 12 minutes starting threads.
const MAX_THREADS_PER_CORE: usize = 8;

/// `--threads`, validated (default: every core; at most [`MAX_THREADS_PER_CORE`] a core, with a
/// warning).
fn thread_count(threads: Option<usize>) -> Result<usize> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    match threads {
        Some(0) => usage!("--threads must be at least 1"),
        Some(n) if n > MAX_THREADS_PER_CORE * cores => {
            let cap = MAX_THREADS_PER_CORE * cores;
            log::warn!(
                "--threads {n} is more than {MAX_THREADS_PER_CORE} times this machine's {cores} cores: using {cap} threads"
            );
            Ok(cap)
        }
        Some(n) => Ok(n),
        None => Ok(cores),
    }
}

/// An index goes to a file: a device, a pipe or a socket as `-d`/`-o` is bad usage (exit 2), as
/// a rename would replace it.
fn refuse_special_index(db: &std::path::Path) -> Result<()> {
    if let Some(reason) = kmerdb::replacing::refusal(db) {
        usage!("cannot write the index to {}: {reason}", db.display());
    }
    Ok(())
}

/// `--taxonomy` is a folder and every `--seqid2taxid` a file (what is in them is read later).
fn check_taxa_inputs(taxa: &TaxaArgs) -> Result<()> {
    if let Some(dir) = &taxa.taxonomy {
        if !dir.is_dir() {
            bail!("--taxonomy {}: not a directory", dir.display());
        }
    }
    for m in &taxa.seqid_maps {
        if !m.is_file() {
            bail!("--seqid2taxid {}: no such file", m.display());
        }
    }
    Ok(())
}

/// `kmerdb update`'s flags as a checked config: something to do, the files present, the genomes
/// to add found, the lists to remove read.
pub fn update(args: UpdateArgs) -> Result<kmerdb::indexing::update::UpdateConfig> {
    use kmerdb::indexing::update::{UpdateConfig, read_target_list, read_taxid_list};
    let threads = compute_threads(&args.compute)?;
    if args.add.is_empty() && args.remove_targets.is_none() && args.remove_taxa.is_none() {
        usage!("nothing to update: give --add, --remove-targets or --remove-taxa");
    }
    check_taxa_inputs(&args.taxa)?;
    let add = if args.add.is_empty() { Vec::new() } else { discover_fasta(&args.add)? };
    let remove_targets = args.remove_targets.as_deref().map(read_target_list).transpose()?.unwrap_or_default();
    let remove_taxa = args.remove_taxa.as_deref().map(read_taxid_list).transpose()?.unwrap_or_default();
    let mut command_line: Vec<String> = ["kmerdb", "update"].map(String::from).to_vec();
    let mut opt = |name: &str, value: &std::path::Path| command_line.extend([name.into(), value.display().to_string()]);
    if let Some(f) = &args.remove_targets {
        opt("--remove-targets", f);
    }
    if let Some(f) = &args.remove_taxa {
        opt("--remove-taxa", f);
    }
    // GTDB's files, not the temporary dump made from them, which `taxonomy` names then.
    if !args.taxa.taxonomy_gtdb.is_empty() {
        args.taxa.taxonomy_gtdb.iter().for_each(|f| opt("--taxonomy-gtdb", f));
    } else if let Some(t) = &args.taxa.taxonomy {
        opt("--taxonomy", t);
    }
    for m in &args.taxa.seqid_maps {
        opt("--seqid2taxid", m);
    }
    if args.skip_absent {
        command_line.push("--skip-absent".into());
    }
    let mut inputs: Vec<String> = add.iter().map(|s| s.to_string()).collect();
    inputs.sort();
    if !inputs.is_empty() {
        command_line.push("--add".into());
        command_line.extend(inputs);
    }
    let db = args.output.unwrap_or_else(|| args.db.clone());
    refuse_special_index(&db)?;
    Ok(UpdateConfig {
        db,
        old: args.db,
        add,
        remove_targets,
        remove_taxa,
        skip_absent: args.skip_absent,
        taxonomy: args.taxa.taxonomy,
        seqid_maps: args.taxa.seqid_maps,
        threads,
        gpus: args.compute.gpus.clone(),
        gpu_pass_values: None,
        strict: args.taxa.strict,
        command_line,
    })
}

/// `kmerdb build`'s flags as a checked config: sketch parameters, the taxonomy and maps present,
/// the genome files found (and the partition's share of them), and no output naming an input.
pub fn build(args: BuildArgs, quiet: bool) -> Result<BuildConfig> {
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
    check_taxa_inputs(&args.taxa)?;
    let mut sources = discover_fasta(&args.inputs)?;
    let mut part = None;
    if let Some(p) = &args.partition {
        let (selected, this) = p.select(sources)?;
        (sources, part) = (selected, Some(this));
        log::info!("partition {}/{}: {} genome files", p.part, p.parts, sources.len());
    }
    build_file_plan(&args, &sources).check()?;
    refuse_special_index(&args.db)?;
    kmerdb::indexing::check_output(&args.db)?;
    if args.protein_sample == 0 {
        usage!("--protein-sample must be at least 1");
    }
    let config = BuildConfig {
        sources,
        db: args.db,
        taxonomy: args.taxa.taxonomy,
        taxonomy_gtdb: args.taxa.taxonomy_gtdb,
        seqid_maps: args.taxa.seqid_maps,
        sketch,
        max_locations_per_feature: args.max_locations_per_feature,
        threads,
        strict: args.taxa.strict,
        progress: !quiet && std::io::stderr().is_terminal(),
        gpus: args.compute.gpus.clone(),
        gpu_options: kmerdb::compute::GpuBuildOptions {
            pass_values: args.gpu_pass_values,
            device_pair_bytes: args.gpu_device_pairs,
            host_pair_bytes: args.gpu_host_pairs,
            group: args.gpu_group,
        },
        tmp_dir: args.tmp_dir,
        part,
        protein: args.protein.then_some(kmerdb::protein::ProteinParams {
            sample: args.protein_sample,
            ..kmerdb::protein::ProteinParams::DEFAULT
        }),
    };
    Ok(config)
}

/// What a build reads (genome files, the taxonomy's dump files, the maps) and writes (the index).
fn build_file_plan(args: &BuildArgs, sources: &[kmerdb::input::Source]) -> kmerdb::paths::FilePlan {
    let mut plan = kmerdb::paths::FilePlan::new();
    for s in sources {
        match s {
            kmerdb::input::Source::File(p) => plan.reads("INPUT", p),
            kmerdb::input::Source::Stdin => plan.reads("INPUT", std::path::Path::new("-")),
        };
    }
    if let Some(dir) = &args.taxa.taxonomy {
        for name in ["nodes.dmp", "names.dmp", "merged.dmp"] {
            for ext in ["", ".gz"] {
                plan.reads("--taxonomy", &dir.join(format!("{name}{ext}")));
            }
        }
    }
    for m in &args.taxa.seqid_maps {
        plan.reads("--seqid2taxid", m);
    }
    plan.writes("-d/--db", &args.db);
    plan
}

/// `kmerdb classify`'s flags as a checked config: the decision's settings in range, the samples
/// and their outputs' names (`classify::plan`), and no output naming an input or another output.
pub fn classify(args: ClassifyArgs) -> Result<ClassifyConfig> {
    use kmerdb::classify::plan::{self, OutputNames, PlanError, ReadsGiven};
    use kmerdb::classify::{ClassifyConfig, SampleOutputs};
    let threads = compute_threads(&args.compute)?;
    let usage = |e: PlanError| -> anyhow::Error {
        match e {
            PlanError::Usage(m) => UsageError(m).into(),
            e => e.into(),
        }
    };
    let (mut reads, mut r1, mut r2) = (args.reads, args.r1, args.r2);
    if args.paired {
        if reads.len() != 2 || !r1.is_empty() || args.interleaved || args.samples.is_some() {
            usage!(
                "--paired takes exactly two READS files, R1 then R2 (as Kraken 2's --paired), and no -1/-2, --interleaved or --samples"
            );
        }
        r2.push(reads.pop().expect("two files"));
        r1.push(reads.pop().expect("two files"));
    }
    let given = ReadsGiven::from_flags(reads, r1, r2, args.samples, args.interleaved).map_err(usage)?;
    let (mut report, mut mpa) = (args.report, args.profiles.mpa);
    if args.use_mpa_style {
        if report.is_none() || mpa.is_some() {
            usage!("--use-mpa-style makes --report an MPA-style table (as Kraken 2's): give --report, and no --mpa");
        }
        mpa = report.take();
    }
    let names = OutputNames {
        per_sample: SampleOutputs {
            kraken: args.output,
            report,
            abundance: args.abundance,
            classified: args.classified_out,
            unclassified: args.unclassified_out,
            candidates: args.candidates_out,
            cami: args.profiles.cami,
            krona: args.profiles.krona,
            mpa,
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
        strain_margin: args.strain_margin,
        protein_hitmin: args.protein_hitmin,
        confidence: args.confidence,
        max_candidates: args.max_candidates,
        insert_size: args.insert_size,
        lowest_rank: args.lowest_rank,
        abundance_rank: args.abundance_rank,
        use_names: args.use_names,
        report_zero_counts: args.report_zero_counts,
        samples,
        gpus: args.compute.gpus.clone(),
        html: names.html,
        progress: None,
        samples_at_once: args.samples_at_once,
    };
    // The library's own check of its settings: bad usage here.
    config.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(config)
}

/// `kmerdb merge`'s flags as a checked config: at most one output to stdout (the per-read lines
/// when nothing else is asked for), none naming an input, and the sample's name.
pub fn merge(args: MergeArgs) -> Result<kmerdb::merge::MergeConfig> {
    let outputs = [
        &args.output,
        &args.report,
        &args.abundance,
        &args.profiles.cami,
        &args.profiles.krona,
        &args.profiles.mpa,
        &args.profiles.html,
    ];
    let stdout_taken = outputs.iter().filter(|o| o.as_ref().is_some_and(|p| p.as_os_str() == "-")).count();
    if stdout_taken > 1 {
        usage!("only one output can go to stdout (-)");
    }
    // As classify (and Kraken 2): the per-read lines go to stdout unless -o names a file or
    // another output takes stdout.
    let kraken = args.output.clone().or_else(|| (stdout_taken == 0).then(|| PathBuf::from("-")));
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
        kraken,
        report: args.report,
        abundance: args.abundance,
        abundance_rank: args.abundance_rank,
        cami: args.profiles.cami,
        krona: args.profiles.krona,
        mpa: args.profiles.mpa,
        sample,
        html: args.profiles.html,
        use_names: args.use_names,
        report_zero_counts: args.report_zero_counts,
        confidence: args.confidence,
    };
    config.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(config)
}

/// `kmerdb bracken-prep`'s flags as a checked config: a read length a k-mer fits in, a step of at
/// least 1, and an output (by default Bracken's file name beside the index) that names no input.
pub fn bracken_prep(args: BrackenPrepArgs, k: u32) -> Result<kmerdb::bracken::BrackenConfig> {
    if args.read_length < k as usize {
        usage!("--read-length must be at least the index's k-mer length ({k})");
    }
    if args.step == 0 {
        usage!("--step must be at least 1");
    }
    let output = args
        .output
        .unwrap_or_else(|| kmerdb::temp_files::folder_of(&args.db).join(kmerdb::bracken::file_name(args.read_length)));
    let mut plan = kmerdb::paths::FilePlan::new();
    plan.reads("-d/--db", &args.db);
    for g in &args.genomes {
        plan.reads("GENOMES", g);
    }
    plan.writes("-o/--output", &output);
    plan.check()?;
    Ok(kmerdb::bracken::BrackenConfig {
        index_path: args.db,
        genomes: args.genomes,
        read_length: args.read_length,
        step: args.step,
        output,
        threads: thread_count(args.threads)?,
    })
}
