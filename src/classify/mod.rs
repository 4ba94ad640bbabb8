//! `kmerdb classify`: reads to taxa, with Kraken-style outputs, on the CPU or a GPU.
//!
//! - [`reads`]: single, paired and interleaved input, mate checks, batches;
//! - [`candidates`]: the method for one read (the specification the GPU path follows);
//! - [`evidence`]: the rule that weak calls must pass (chance matches);
//! - [`samples`]: `--samples` sheets;
//! - [`plan`]: the run's samples and their outputs' names, from the command line's reads and names;
//! - here: opening the index once (and copying it to the GPU if there is one, `gpu::classify`),
//!   then for each sample a pipeline in which the next batch is read while the current one is
//!   classified; results are written in input order, so the output depends neither on the thread
//!   count nor on the device.
//!
//! Every output is written under a temporary name and renamed only when the sample is complete.

pub mod candidates;
#[cfg(feature = "gpu")]
pub mod device_choice;
mod devices;
pub mod evidence;
pub mod plan;
pub mod reads;
pub mod samples;

pub use candidates::{Call, Candidate, Classifier, ClassifyParams};
pub use reads::{Batch, ReadLayout, ReadStream};

use crate::cpu_time::{self, Work};
use crate::index::{Index, IndexError, Verify};
use crate::output::{self, Output, ReadResult, ReadsWriter};
use crate::pipeline::{self, Pipeline};
use crate::taxonomy::{TaxId, TaxidMap};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Which per-read outputs a sample writes.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    lines: bool,
    candidates: bool,
    /// `--confidence` is checked, on the hit list.
    confidence: bool,
}

impl Wanted {
    /// Whether each read's hit list is needed: both outputs carry it, and `--confidence` reads it.
    fn hit_list(self) -> bool {
        self.lines || self.candidates || self.confidence
    }
}

/// Reads classified per batch: large enough to spread over threads, small enough to stay in cache.
const BATCH_READS: usize = 4096;
/// Batches each stage may run ahead of the next (see `pipeline`).
const QUEUE_DEPTH: usize = 1;
/// Reads whose lookups are overlapped in memory (see `Classifier::classify_group`).
const GROUP_READS: usize = 4;
/// Reads a finishing task takes (several groups on the CPU), into one set of output buffers.
const TASK_READS: usize = 32;

/// Where one sample's results go. `None` = not written.
#[derive(Debug, Clone, Default)]
pub struct SampleOutputs {
    pub kraken: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub abundance: Option<PathBuf>,
    pub classified: Option<PathBuf>,
    pub unclassified: Option<PathBuf>,
    /// Each read's candidates, for `kmerdb merge` (see `output::candidates`).
    pub candidates: Option<PathBuf>,
    /// CAMI profile, Krona text, MPA-style table (see `output::profiles`).
    pub cami: Option<PathBuf>,
    pub krona: Option<PathBuf>,
    pub mpa: Option<PathBuf>,
}

impl SampleOutputs {
    /// Each output with the flag that names it.
    pub(crate) fn by_flag(&self) -> [(&'static str, &Option<PathBuf>); 9] {
        [
            ("-o/--output", &self.kraken),
            ("-r/--report", &self.report),
            ("--abundance", &self.abundance),
            ("--candidates-out", &self.candidates),
            ("--cami", &self.cami),
            ("--krona", &self.krona),
            ("--mpa", &self.mpa),
            ("--classified-out", &self.classified),
            ("--unclassified-out", &self.unclassified),
        ]
    }

    /// These names as templates, with `{sample}` replaced by `name`.
    pub(crate) fn for_sample(&self, name: &str) -> Self {
        let fill =
            |t: &Option<PathBuf>| t.as_ref().map(|p| PathBuf::from(p.to_string_lossy().replace("{sample}", name)));
        Self {
            kraken: fill(&self.kraken),
            report: fill(&self.report),
            abundance: fill(&self.abundance),
            classified: fill(&self.classified),
            unclassified: fill(&self.unclassified),
            candidates: fill(&self.candidates),
            cami: fill(&self.cami),
            krona: fill(&self.krona),
            mpa: fill(&self.mpa),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub reads: ReadLayout,
    pub outputs: SampleOutputs,
}

/// Settings of one classify run; [`classify`] checks them ([`ClassifyConfig::validate`]) before
/// any work, as the command's flags are checked.
#[derive(Debug, Clone)]
pub struct ClassifyConfig {
    pub db: PathBuf,
    pub verify: Verify,
    pub threads: usize,
    /// `None`: the default for the index's sketch size.
    pub hitmin: Option<u32>,
    pub hitdiff: f64,
    /// `--strain-margin`: see `candidates::decide`.
    pub strain_margin: f64,
    /// `--protein-hitmin`: see `candidates::with_protein` (0: no protein stage).
    pub protein_hitmin: u32,
    /// `--confidence`: see `candidates::with_confidence`.
    pub confidence: f64,
    pub max_candidates: usize,
    pub insert_size: usize,
    pub lowest_rank: Option<String>,
    pub abundance_rank: Option<String>,
    pub use_names: bool,
    /// `--report-zero-counts`: the report lists every taxon of the index, also those without reads.
    pub report_zero_counts: bool,
    pub samples: Vec<Sample>,
    /// `all`: a GPU if one is there and the index fits it, else the CPU; a list: that GPU or an error.
    pub gpus: crate::compute::GpuRequest,
    /// One HTML page for the run (every sample).
    pub html: Option<PathBuf>,
    /// Counts the reads (pairs) classified so far, for a progress display.
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Samples classified at once; `None`: a quarter of the threads on GPUs (where the host's
    /// share is what takes the time: a gzipped sample's two files decompress on a thread each,
    /// so that half the cores inflate while the pool parses and finishes; half the threads, the
    /// earlier default, was slower in each of eight H100 runs, bench/results/HISTORY.md), one on the CPU
    /// (whose classification uses every thread).
    pub samples_at_once: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClassifyError {
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Reads(#[from] reads::ReadError),
    #[error("{path}")]
    Output { path: String, source: std::io::Error },
    #[error("--lowest-rank / --abundance-rank {0}: no taxon of the index has this rank")]
    UnknownRank(String),
    #[error("cannot start {threads} threads: {reason}")]
    Threads { threads: usize, reason: String },
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error("--gpus {0}: this kmerdb was built without GPU support (cargo feature `gpu`)")]
    NoGpuSupport(String),
    #[error(
        "{0} has an amino-acid table (build --protein), whose stage `kmerdb merge` cannot redo: give --protein-hitmin 0 with --candidates-out"
    )]
    ProteinPartitions(String),
    /// A setting no run accepts ([`ClassifyConfig::validate`]).
    #[error("{0}")]
    Setting(String),
}

/// What classifying one sample did.
#[derive(Debug, Clone)]
pub struct SampleSummary {
    pub name: String,
    pub reads: u64,
    pub classified: u64,
    pub elapsed: Duration,
    /// What `--html` shows of the sample.
    pub view: output::SampleView,
}

#[derive(Debug, Clone)]
pub struct ClassifySummary {
    /// Opening (and verifying) the index, and copying it to the GPU when one is used.
    pub index_load: Duration,
    /// The GPU that classified, if one did, and how long its copy of the index took.
    pub device: Option<(String, Duration)>,
    /// The GPU classifier's time by stage, when a GPU classified.
    #[cfg(feature = "gpu")]
    pub gpu_times: Option<crate::gpu::classify::StageTimes>,
    pub samples: Vec<SampleSummary>,
}

/// Says that an index built without `--taxonomy` gives reports without ranks: every sequence is
/// its own taxon under the root, so a report looks flat and the CAMI and MPA profiles are empty.
fn warn_without_taxonomy(index: &Index) {
    log::debug!("index opened");
    if index.header().taxonomy == crate::index::format::TaxonomySource::PerSequence {
        log::warn!(
            "{} was built without a taxonomy: every sequence is its own taxon under the root, so the report has no ranks and CAMI and MPA profiles stay empty (rebuild it with --taxonomy)",
            index.path().display()
        );
    }
}

impl ClassifyConfig {
    /// The settings' ranges, named by their flags: shares between 0 and 1, at least one thread,
    /// candidate and sample at once. The command reports a failure as bad usage.
    pub fn validate(&self) -> Result<(), ClassifyError> {
        let bad = |m: &str| Err(ClassifyError::Setting(m.to_string()));
        for (flag, share) in
            [("--confidence", self.confidence), ("--strain-margin", self.strain_margin), ("--hitdiff", self.hitdiff)]
        {
            if !(0.0..=1.0).contains(&share) {
                return Err(ClassifyError::Setting(format!("{flag} must be between 0 and 1")));
            }
        }
        if self.threads == 0 {
            return bad("--threads must be at least 1");
        }
        if self.max_candidates == 0 {
            return bad("--max-candidates must be at least 1");
        }
        if self.hitmin == Some(0) {
            return bad("--hitmin must be at least 1");
        }
        if self.samples_at_once == Some(0) {
            return bad("--samples-at-once must be at least 1");
        }
        Ok(())
    }
}

/// Opens the index once and classifies every sample. `on_sample` is called after each sample.
pub fn classify(
    config: &ClassifyConfig,
    on_sample: &mut (dyn FnMut(&SampleSummary) + Send),
) -> Result<ClassifySummary, ClassifyError> {
    config.validate()?;
    let start = Instant::now();
    // The large sections are verified below, while the GPUs start.
    let index = Index::open(&config.db, Verify::Metadata)?;
    warn_without_taxonomy(&index);
    let params = decision_params(config, &index)?;
    let pool = std::sync::Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(config.threads)
            .build()
            .map_err(|e| ClassifyError::Threads { threads: config.threads, reason: e.to_string() })?,
    );
    let targets = candidates::TargetTables::new(&index);
    // What `--gpus` asks of this run (under `all`, the CPU where it would finish first).
    let gpus = devices::Gpus::request(config, &index)?;
    let result = std::thread::scope(|scope| -> Result<ClassifySummary, ClassifyError> {
        // The GPUs start and the index goes to them while the index is verified and then the
        // first sample's files start being read: starting a GPU alone takes about 0.3 s.
        let starting = gpus.start(scope, &index, &params);
        // A damaged index is reported before anything about the reads.
        if config.verify == Verify::All {
            index.verify_data()?;
            log::debug!("index verified");
        }
        let ahead = read_ahead(gpus.probably_used());
        let first = match config.samples.first() {
            Some(s) => Some(ReadStream::with_read_ahead(s.reads.clone(), pool.clone(), ahead)?),
            None => None,
        };
        if params.protein_hitmin > 0 {
            // Made once, with the run's threads, before any read needs it (and after the
            // protein section was verified).
            pool.install(|| targets.protein_chance());
        }
        let started = starting.wait()?;
        let index_load = start.elapsed();
        log::debug!("index ready");
        let run =
            Run { index: &index, params: &params, targets: &targets, config, pool: &pool, devices: started.devices() };
        // On GPUs the host's share (reading, decompressing, finishing) is what takes the time:
        // several samples at once keep every core busy.
        let at_once = config
            .samples_at_once
            .unwrap_or(if run.devices.on_gpus() { config.threads / 4 } else { 1 })
            .clamp(1, config.samples.len().max(1));
        let (cpu_before, left_before) = (cpu_time::totals(), LEFT_TO_CPU.counts());
        let samples = run.samples(first, at_once, on_sample)?;
        log::debug!("host CPU time by work: {}", cpu_time::describe(cpu_before));
        if run.devices.on_gpus() {
            log::debug!("{}", LEFT_TO_CPU.describe(left_before));
        }
        write_html(config, &index, &samples)?;
        let summary = ClassifySummary {
            index_load,
            device: started.device(),
            #[cfg(feature = "gpu")]
            gpu_times: started.gpu_times(),
            samples,
        };
        started.close();
        Ok(summary)
    });
    let clock = Instant::now();
    gpus.close();
    drop(pool);
    drop(index);
    log::debug!("threads, index and GPUs closed in {:.2} s", clock.elapsed().as_secs_f64());
    result
}

/// The decision's settings for this index: `--hitmin` or the index's default, and ranks that the
/// index's taxonomy has.
fn decision_params(config: &ClassifyConfig, index: &Index) -> Result<ClassifyParams, ClassifyError> {
    let tree = index.taxonomy();
    let protein = index.protein().is_some() && config.protein_hitmin > 0;
    if protein && config.samples.iter().any(|s| s.outputs.candidates.is_some()) {
        return Err(ClassifyError::ProteinPartitions(config.db.display().to_string()));
    }
    for rank in config.lowest_rank.iter().chain(&config.abundance_rank) {
        if !tree.taxa().iter().any(|t| t.rank == *rank) {
            return Err(ClassifyError::UnknownRank(rank.clone()));
        }
    }
    Ok(ClassifyParams {
        hitmin: config.hitmin.unwrap_or(ClassifyParams::default_hitmin(index.header().sketch.sketch_size)),
        hitdiff: config.hitdiff,
        max_candidates: config.max_candidates,
        insert_size: config.insert_size,
        lowest_rank: config.lowest_rank.clone(),
        confidence: config.confidence,
        strain_margin: config.strain_margin,
        protein_hitmin: config.protein_hitmin,
    })
}

/// The run's HTML page (`--html`), once every sample is done.
fn write_html(config: &ClassifyConfig, index: &Index, samples: &[SampleSummary]) -> Result<(), ClassifyError> {
    if let Some(p) = &config.html {
        let views: Vec<output::SampleView> = samples.iter().map(|s| s.view.clone()).collect();
        let title = format!("kmerdb classify: {}", config.db.display());
        let settings = output::RunSettings::of_run(&config.db, index);
        let mut w = output::create_output(p).map_err(out_err(p))?;
        output::write_html(&mut w, &title, &settings, &views).map_err(out_err(p))?;
        w.finish().map_err(out_err(p))?;
    }
    Ok(())
}

/// Blocks each input file keeps read and parsed ahead: on GPUs, whose batches take about ten
/// 8 MiB blocks a file at once, a GiB a file, most of which the run's threads parse while the GPUs
/// start and take the index (idle otherwise: 0.5-0.9 s). 32 blocks, three batches' worth, was
/// 4.93 s against 4.57 s for 20 M pairs at 50 Gbp on one H200, 4.18 s against 3.98 s on two
/// (medians of 3, `bench/results/gpu-scale-ab-2xh200-2026-11-27-50gbp-lanes.log`). A compressed
/// file or a pipe keeps fewer (`records::STREAM_BLOCKS_AHEAD`: its blocks are memory of their
/// own). On the CPU the default, which keeps memory low.
fn read_ahead(on_gpus: bool) -> usize {
    if on_gpus { 128 } else { crate::input::records::BLOCKS_AHEAD }
}

/// Reads of GPU batches whose GPU results the host could not use, by why (the GPU's counts
/// overflowed: more locations than its shared memory sorts, more clades than it counts), and weak
/// calls whose evidence the host checked: for `-vv`, beside `cpu_time`'s line.
struct LeftToCpu {
    locations: std::sync::atomic::AtomicU64,
    clades: std::sync::atomic::AtomicU64,
    weak: std::sync::atomic::AtomicU64,
}

static LEFT_TO_CPU: LeftToCpu = LeftToCpu {
    locations: std::sync::atomic::AtomicU64::new(0),
    clades: std::sync::atomic::AtomicU64::new(0),
    weak: std::sync::atomic::AtomicU64::new(0),
};

impl LeftToCpu {
    /// The counts so far (the process's: a run's are the difference).
    fn counts(&self) -> [u64; 3] {
        [&self.locations, &self.clades, &self.weak].map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The counts since `since` (a [`LeftToCpu::counts`]).
    fn describe(&self, since: [u64; 3]) -> String {
        let now = self.counts();
        let [locations, clades, weak] = std::array::from_fn(|i| now[i] - since[i]);
        format!(
            "reads the GPU left to the CPU: {locations} (more locations than it sorts), {clades} (more clades than it counts); weak calls checked on the host: {weak}"
        )
    }
}

/// The reads per taxid of `taxids`, by taxid, counted in `sorted` (a buffer): a task's calls
/// sorted and run-length counted. (Counted in a map with the standard hasher, a task's calls
/// were 8% of the host's CPU time of a GPU run against the 50 Gbp index.)
fn count_sorted(taxids: &[TaxId], sorted: &mut Vec<TaxId>) -> Vec<(TaxId, u64)> {
    sorted.clear();
    sorted.extend_from_slice(taxids);
    sorted.sort_unstable();
    sorted.chunk_by(|a, b| a == b).map(|run| (run[0], run.len() as u64)).collect()
}

/// A finished batch: each read's taxid, the reads per taxid (0: unclassified), the Kraken lines
/// (or the first error formatting them) and the `--candidates-out` records, a buffer per
/// finishing task.
struct FinishedBatch {
    taxids: Vec<TaxId>,
    /// Each task's [`Finished::counts`], merged by the writer.
    counts: Vec<Vec<(TaxId, u64)>>,
    lines: std::io::Result<Vec<Vec<u8>>>,
    candidates: Vec<output::candidates::EncodedRecords>,
}

/// One finishing thread's buffers.
struct Scratch<'i> {
    classifier: Classifier<'i>,
    /// A read's candidates, clade counts and hit runs from the GPU's results.
    candidates: Vec<Candidate>,
    clades: Vec<(TaxId, u32)>,
    /// The decision's entries (`candidates::decide_scored`).
    entries: Vec<candidates::Entry>,
    runs: [Vec<(TaxId, u32)>; 2],
    /// A weak call's hit runs, for its evidence.
    weak_runs: [Vec<(TaxId, u32)>; 2],
    /// A task's calls sorted, to count them.
    sorted: Vec<TaxId>,
}

/// A read's top candidates as (target, hits) and its clade features' counts as (clade, count).
type ReadFound<'a> = (&'a [(u32, u32)], &'a [(TaxId, u32)]);

/// What every group of a batch is finished with: the batch, the GPU's results for it (`None`:
/// the CPU classifies) and the outputs wanted.
#[derive(Clone, Copy)]
struct Finishing<'b> {
    batch: &'b Batch,
    found: Option<&'b devices::Found>,
    want: Wanted,
}

/// A finishing task's reads: their taxids and counts, Kraken lines (or the error formatting
/// them) and `--candidates-out` records.
struct Finished {
    taxids: Vec<TaxId>,
    /// Reads per taxid (0: unclassified), by taxid.
    counts: Vec<(TaxId, u64)>,
    lines: std::io::Result<Vec<u8>>,
    candidates: output::candidates::EncodedRecords,
}

struct Run<'a> {
    index: &'a Index,
    params: &'a ClassifyParams,
    /// The index's targets' taxa, tree nodes and clades' bases, shared by the run's classifiers.
    targets: &'a candidates::TargetTables<'a>,
    config: &'a ClassifyConfig,
    /// The run's threads: reads are parsed and classified on them.
    pool: &'a std::sync::Arc<rayon::ThreadPool>,
    /// The GPUs' classifiers, lane by lane; none on the CPU.
    devices: devices::Devices<'a>,
}

/// A sample's calls: reads per taxon (0 left out), reads, unclassified reads.
struct SampleCounts {
    direct: HashMap<TaxId, u64>,
    total: u64,
    unclassified: u64,
}

/// A sample's open outputs.
struct Outputs {
    kraken: Option<(Output, String)>,
    classified: Option<ReadsWriter>,
    unclassified: Option<ReadsWriter>,
    candidates: Option<(Output, String)>,
}

fn out_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ClassifyError + '_ {
    move |source| ClassifyError::Output { path: path.display().to_string(), source }
}

impl Run<'_> {
    /// Every sample, `at_once` at a time (each on a thread of its own, its work on the pool; one
    /// at a time is the same with one such thread);
    /// `first` is the first sample's stream, already reading. Summaries in sample order;
    /// `on_sample` is called as each finishes. After an error no new sample starts.
    fn samples(
        &self,
        first: Option<ReadStream>,
        at_once: usize,
        on_sample: &mut (dyn FnMut(&SampleSummary) + Send),
    ) -> Result<Vec<SampleSummary>, ClassifyError> {
        use std::sync::Mutex;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
        let samples = &self.config.samples;
        let next = AtomicUsize::new(0);
        let first = Mutex::new(first);
        let results: Vec<Mutex<Option<Result<SampleSummary, ClassifyError>>>> =
            samples.iter().map(|_| Mutex::new(None)).collect();
        let failed = AtomicBool::new(false);
        let on_sample = Mutex::new(on_sample);
        std::thread::scope(|scope| {
            for _ in 0..at_once {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Relaxed);
                        if i >= samples.len() || failed.load(Relaxed) {
                            return;
                        }
                        let stream = if i == 0 { first.lock().expect("no sample panicked").take() } else { None };
                        let result = self.sample(&samples[i], stream);
                        match &result {
                            Ok(summary) => (on_sample.lock().expect("no sample panicked"))(summary),
                            Err(_) => failed.store(true, Relaxed),
                        }
                        *results[i].lock().expect("no sample panicked") = Some(result);
                    }
                });
            }
        });
        // The first error in sample order, else every summary.
        let mut out = Vec::new();
        for r in results {
            match r.into_inner().expect("no sample panicked") {
                Some(Ok(s)) => out.push(s),
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        Ok(out)
    }

    /// One sample; `stream` is its reads' stream if it was opened already.
    fn sample(&self, sample: &Sample, stream: Option<ReadStream>) -> Result<SampleSummary, ClassifyError> {
        let start = Instant::now();
        let o = &sample.outputs;
        let mut outs = self.open_outputs(o, sample.reads.is_paired())?;
        let stream = match stream {
            Some(s) => s,
            None => ReadStream::with_read_ahead(
                sample.reads.clone(),
                self.pool.clone(),
                read_ahead(self.devices.on_gpus()),
            )?,
        };
        let SampleCounts { direct, total, unclassified } = self.batches(&sample.name, stream, &mut outs)?;
        let finishing_outputs = Instant::now();
        let tree = self.index.taxonomy();
        let summaries = output::Summaries {
            report: o.report.clone(),
            abundance: o.abundance.clone(),
            abundance_rank: self.config.abundance_rank.clone(),
            report_zero_counts: self.config.report_zero_counts,
            cami: o.cami.clone(),
            krona: o.krona.clone(),
            mpa: o.mpa.clone(),
        };
        summaries
            .write(tree, &direct, unclassified, &sample.name)
            .map_err(|(p, source)| ClassifyError::Output { path: p.display().to_string(), source })?;
        for (w, p) in [outs.kraken, outs.candidates].into_iter().flatten() {
            w.finish().map_err(|source| ClassifyError::Output { path: p, source })?;
        }
        for w in [outs.classified, outs.unclassified].into_iter().flatten() {
            w.finish().map_err(|(p, source)| ClassifyError::Output { path: p.display().to_string(), source })?;
        }
        log::debug!(
            "{}: outputs completed (reports, then each file synced and renamed) in {:.2} s",
            sample.name,
            finishing_outputs.elapsed().as_secs_f64()
        );
        let clock = Instant::now();
        let view = output::SampleView::new(&sample.name, tree, &direct, unclassified).map_err(|source| {
            // The view is made for every sample; only --html writes it.
            let path = match &self.config.html {
                Some(p) => p.display().to_string(),
                None => format!("sample {}'s summary", sample.name),
            };
            ClassifyError::Output { path, source }
        })?;
        log::debug!("{}: summary made in {:.2} s", sample.name, clock.elapsed().as_secs_f64());
        Ok(SampleSummary {
            view,
            name: sample.name.clone(),
            reads: total,
            classified: total - unclassified,
            elapsed: start.elapsed(),
        })
    }

    /// Opens a sample's per-read outputs (their temporary files) and writes the candidates
    /// file's header.
    fn open_outputs(&self, o: &SampleOutputs, paired: bool) -> Result<Outputs, ClassifyError> {
        let mut outs = Outputs {
            kraken: o
                .kraken
                .as_ref()
                .map(|p| output::create_output(p).map(|w| (w, p.display().to_string())).map_err(out_err(p)))
                .transpose()?,
            classified: o
                .classified
                .as_ref()
                .map(|p| ReadsWriter::create(p, paired).map_err(out_err(p)))
                .transpose()?,
            unclassified: o
                .unclassified
                .as_ref()
                .map(|p| ReadsWriter::create(p, paired).map_err(out_err(p)))
                .transpose()?,
            candidates: None,
        };
        if let Some(p) = &o.candidates {
            let mut w = output::create_output(p).map_err(out_err(p))?;
            let header = self.candidates_header();
            let mut bytes = Vec::new();
            output::candidates::encode_header(&header, &mut bytes);
            use std::io::Write;
            w.write_all(&bytes).map_err(out_err(p))?;
            outs.candidates = Some((w, p.display().to_string()));
        }
        Ok(outs)
    }

    /// Classifies a sample's reads batch by batch through the pipeline's stages, writing the
    /// per-read outputs into `outs`; returns the counts.
    fn batches(&self, name: &str, mut stream: ReadStream, outs: &mut Outputs) -> Result<SampleCounts, ClassifyError> {
        let want = Wanted {
            lines: outs.kraken.is_some(),
            candidates: outs.candidates.is_some(),
            confidence: self.params.confidence > 0.0,
        };
        // Keyed by taxid with a folded-multiply hash (`U32Hasher`): each batch's tasks add their
        // counts here, an entry for each taxon a task called.
        let mut direct = TaxidMap::<u64>::default();
        let (mut total, mut unclassified) = (0u64, 0u64);
        let batch_reads = self.batch_reads();
        // Batches the writer is done with go back to the reader, their blocks released.
        let (free_tx, free_rx) = std::sync::mpsc::channel::<Batch>();
        let (mut kraken, mut candidates_out) = (outs.kraken.take(), outs.candidates.take());
        // The candidates' records go into blocks of a fixed number of reads, whatever the groups.
        let mut blocks = output::candidates::BlockWriter::default();
        let times = std::thread::scope(|scope| {
            // Reading: the next batch.
            let (mut pipeline, read) = Pipeline::<ClassifyError>::source(scope, "reading", QUEUE_DEPTH, move || {
                let mut batch = free_rx.try_recv().unwrap_or_default();
                cpu_time::charge(Work::Batch, || stream.next_batch(&mut batch, batch_reads))?;
                Ok((!batch.is_empty()).then_some(batch))
            });
            // Packing it into the pinned memory of the GPUs' lane that takes it (nothing on the
            // CPU): batch i goes to lane i % lanes, packed by that lane's worker. A worker a lane,
            // not one for all: each batch's packing is a pass on the pool, queued there behind
            // the finishing's tasks, and with one worker on two GPUs packing was busy the whole
            // run and the GPUs waited for it.
            let lanes = self.devices.lanes();
            let packed = pipeline.stage_in_turn(scope, "packing", QUEUE_DEPTH, read, lanes, |lane, batch| {
                let packed = self.pool.install(|| cpu_time::charge(Work::Pack, || self.devices.pack(&batch, lane)))?;
                Ok((batch, packed, lane))
            });
            // The GPU's lookups and candidates (nothing on the CPU), each lane's batches on a
            // thread of its own, so that one lane's copies and waits overlap another's kernels.
            let looked_up =
                pipeline.stage_in_turn(scope, "GPU", QUEUE_DEPTH, packed, lanes, |worker, (batch, packed, lane)| {
                    // Both count batches in order: the packing's lane is this worker's.
                    debug_assert_eq!(worker, lane, "a batch on another lane than it was packed for");
                    Ok((batch, cpu_time::charge(Work::Gpu, || self.devices.run(packed, lane, want))?, lane))
                });
            // The decision (after the GPU's candidates, or the whole method on the CPU) and the
            // per-read lines: on GPUs a worker a lane, as packing, so that one batch's last tasks
            // and its merging overlap the next batch's (one worker was busy the whole run on two
            // GPUs); on the CPU one, each batch a pass over the whole pool.
            let finished =
                pipeline.stage_in_turn(scope, "finishing", QUEUE_DEPTH, looked_up, lanes, |_, (batch, found, lane)| {
                    let done = self.pool.install(|| {
                        cpu_time::charge(Work::Finish, || self.finish_batch(&batch, found.as_ref(), want))
                    })?;
                    self.devices.recycle(found, lane);
                    Ok((batch, done))
                });
            // Writing, on this thread: lines and records in input order, the counts, the reads.
            let written = finished.sink(|(mut batch, done)| {
                let _cpu = cpu_time::start(Work::Write);
                use std::io::Write;
                let lines = done.lines.map_err(|source| {
                    let path = kraken.as_ref().map_or_else(|| "the per-read lines".to_owned(), |(_, p)| p.clone());
                    ClassifyError::Output { path, source }
                })?;
                if let Some((w, path)) = &mut kraken {
                    for c in lines {
                        w.write_all(&c).map_err(|source| ClassifyError::Output { path: path.clone(), source })?;
                    }
                }
                if let Some((w, path)) = &mut candidates_out {
                    for group in &done.candidates {
                        blocks.add(group, w).map_err(|source| ClassifyError::Output { path: path.clone(), source })?;
                    }
                }
                total += done.taxids.len() as u64;
                for (taxid, n) in done.counts.into_iter().flatten() {
                    match taxid {
                        0 => unclassified += n,
                        _ => *direct.entry(taxid).or_default() += n,
                    }
                }
                if outs.classified.is_some() || outs.unclassified.is_some() {
                    for (r, &taxid) in done.taxids.iter().enumerate() {
                        self.write_reads(outs, &batch, r, taxid)?;
                    }
                }
                batch.release();
                // The reader may have finished and gone: then the batch is simply dropped.
                let _ = free_tx.send(batch);
                Ok(())
            });
            pipeline.finish(("writing", written))
        })?;
        if let Some((w, path)) = &mut candidates_out {
            blocks.finish(w).map_err(|source| ClassifyError::Output { path: path.clone(), source })?;
        }
        (outs.kraken, outs.candidates) = (kraken, candidates_out);
        log::debug!("{name}: {}; each stage on a thread of its own", pipeline::describe(&times));
        Ok(SampleCounts { direct: direct.into_iter().collect(), total, unclassified })
    }

    fn batch_reads(&self) -> usize {
        self.devices.batch_reads(BATCH_READS)
    }

    /// The header of a `--candidates-out` file for this index and run.
    fn candidates_header(&self) -> output::candidates::CandidatesHeader {
        let header = self.index.header();
        output::candidates::CandidatesHeader {
            magic: output::candidates::CANDIDATES_MAGIC.into(),
            version: output::candidates::CANDIDATES_VERSION,
            collection: header.collection,
            sketch: header.sketch,
            max_locations_per_feature: header.max_locations_per_feature,
            hitmin: self.params.hitmin,
            hitdiff: self.params.hitdiff,
            strain_margin: self.params.strain_margin,
            max_candidates: self.params.max_candidates as u32,
            lowest_rank: self.params.lowest_rank.clone(),
            targets: self.index.targets().iter().map(|t| (t.name.clone(), t.taxid)).collect(),
            target_lengths: self.index.targets().iter().map(|t| t.length).collect(),
            taxa: self.index.taxonomy().taxa().to_vec(),
        }
    }

    /// Finishes a batch in parallel: from the GPU's candidates (`found`), or wholly on the CPU;
    /// with the outputs `want`ed, also formats its Kraken lines (and `--candidates-out` records), so that
    /// only a copy of bytes is left to the writing thread. Each task's reads (a group on the GPU's
    /// path, several on the CPU's) are classified, formatted and counted by one thread, with that
    /// thread's buffers: nothing is allocated per read on the GPU's path.
    fn finish_batch(
        &self,
        batch: &Batch,
        found: Option<&devices::Found>,
        want: Wanted,
    ) -> Result<FinishedBatch, ClassifyError> {
        use rayon::prelude::*;
        if let Some(progress) = &self.config.progress {
            progress.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        // GPU batches are large: bigger groups, fewer tasks. One parallel pass: each task lists
        // its reads' mates, classifies, formats and counts them (a pass that waits for the pool
        // waits for the blocks being parsed there).
        let group_reads = if self.batch_reads() > BATCH_READS { 1024 } else { GROUP_READS };
        // A task takes several of the CPU's small groups, into one set of buffers: a task a group
        // made a line buffer, a count table and two vectors per four reads, and zeroing the fresh
        // pages they took was 8% of a strain-dense classification on 2 threads (3% now).
        let span = group_reads.max(TASK_READS);
        let tasks: Vec<Finished> = (0..batch.len().div_ceil(span))
            .into_par_iter()
            .map_init(
                || {
                    let mut classifier = Classifier::new(self.params, self.targets);
                    classifier.keep_candidates = want.candidates;
                    Scratch {
                        classifier,
                        candidates: Vec::new(),
                        clades: Vec::new(),
                        entries: Vec::new(),
                        runs: [Vec::new(), Vec::new()],
                        weak_runs: [Vec::new(), Vec::new()],
                        sorted: Vec::new(),
                    }
                },
                |sc, t| {
                    let _cpu = cpu_time::start(Work::Finish);
                    let reads = t * span..((t + 1) * span).min(batch.len());
                    let mut f = Finished {
                        taxids: Vec::with_capacity(reads.len()),
                        counts: Vec::new(),
                        lines: Ok(Vec::new()),
                        candidates: Default::default(),
                    };
                    let per = batch.mates_per_read();
                    let mates: Vec<&[u8]> =
                        reads.clone().flat_map(|r| (0..per).map(move |m| batch.seq(r, m))).collect();
                    let mates: Vec<&[&[u8]]> = mates.chunks(per).collect();
                    for (g, group) in mates.chunks(group_reads).enumerate() {
                        let on = Finishing { batch, found, want };
                        self.finish_group(on, reads.start + g * group_reads, group, sc, &mut f);
                    }
                    f.counts = count_sorted(&f.taxids, &mut sc.sorted);
                    f
                },
            )
            .collect();
        // Each task's bytes stay in their own buffers: the writer writes them in order.
        let mut done = FinishedBatch {
            taxids: Vec::with_capacity(batch.len()),
            lines: Ok(Vec::with_capacity(tasks.len())),
            candidates: Vec::with_capacity(tasks.len()),
            counts: Vec::with_capacity(tasks.len()),
        };
        for f in tasks {
            done.taxids.extend(f.taxids);
            done.counts.push(f.counts);
            if !f.candidates.is_empty() {
                done.candidates.push(f.candidates);
            }
            match (f.lines, &mut done.lines) {
                (Ok(l), Ok(lines)) if !l.is_empty() => lines.push(l),
                (Err(e), Ok(_)) => done.lines = Err(e),
                _ => {}
            }
        }
        Ok(done)
    }

    /// Finishes one group of reads (`group`, read `first` of the batch on), with one thread's
    /// buffers `sc`, into `done` (its calls, lines and records after those already there).
    fn finish_group<'i>(
        &'i self,
        on: Finishing<'_>,
        first: usize,
        group: &[&[&[u8]]],
        sc: &mut Scratch<'i>,
        done: &mut Finished,
    ) {
        let Finishing { batch, found, want } = on;
        let hit_list = want.hit_list();
        let names = self.config.use_names.then(|| self.index.taxonomy());
        let paired = batch.mates_per_read() == 2;
        // One read's result, as lines and candidates records.
        let tree = self.index.taxonomy();
        // For the candidates' positions of found features.
        let mut sketcher = crate::sketch::Sketcher::new(self.index.header().sketch);
        // `text`: the hit-list column formatted by the GPU, in place of `runs` (then empty).
        let mut emit = |r: usize,
                        taxid: TaxId,
                        (cands, clades): ReadFound<'_>,
                        runs: [&[(TaxId, u32)]; 2],
                        text: Option<&[u8]>| {
            let taxid = candidates::with_confidence(taxid, runs, self.params.confidence, tree);
            done.taxids.push(taxid);
            let lengths = (batch.seq(r, 0).len(), paired.then(|| batch.seq(r, 1).len()));
            if want.candidates {
                let mut positions = |m: usize| match m < batch.mates_per_read() {
                    true => evidence::found_positions(&mut sketcher, batch.seq(r, m), runs[m]),
                    false => Vec::new(),
                };
                let record = output::candidates::ReadCandidates {
                    id: batch.id(r).into_owned(),
                    lengths: (lengths.0 as u32, lengths.1.map(|l| l as u32)),
                    candidates: cands.to_vec(),
                    clades: clades.to_vec(),
                    hits: [runs[0].to_vec(), runs[1].to_vec()],
                    positions: [positions(0), positions(1)],
                };
                done.candidates.push(&record);
            }
            if want.lines
                && let Ok(lines) = &mut done.lines
            {
                let result = ReadResult { id: batch.id(r), taxid, lengths, hits: runs };
                let written = match text {
                    Some(text) => output::write_kraken_line_with_hit_text(lines, &result, text, names),
                    None => output::write_kraken_line(lines, &result, names),
                };
                if let Err(e) = written {
                    done.lines = Err(e);
                }
            }
        };
        if let Some(found) = found {
            for (j, mates) in group.iter().enumerate() {
                let r = first + j;
                let on_gpu = match (found.candidates(r, &mut sc.candidates), found.clades(r, tree, &mut sc.clades)) {
                    (true, true) => true,
                    (cands, _) => {
                        let why = if cands { &LEFT_TO_CPU.clades } else { &LEFT_TO_CPU.locations };
                        why.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        false
                    }
                };
                let decided = on_gpu.then(|| {
                    let (cands, clades) = (&sc.candidates, &sc.clades);
                    candidates::decide_scored(cands, clades, self.params, self.targets.nodes(), tree, &mut sc.entries)
                });
                // A weak call's evidence rule reads every feature's taxon: from the GPU's hit lists
                // where it made them.
                let checked = match decided {
                    Some((t, top)) if evidence::is_weak(t, top, self.params.hitmin) => {
                        match gpu_runs(found, r, tree, hit_list, &mut sc.weak_runs) {
                            true => {
                                let [a, b] = &sc.weak_runs;
                                LEFT_TO_CPU.weak.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                Some(cpu_time::charge(Work::Evidence, || {
                                    sc.classifier.with_evidence_of_runs(t, mates, [a, b])
                                }))
                            }
                            false => None,
                        }
                    }
                    other => other.map(|(t, _)| t),
                };
                let Some(taxid) = checked else {
                    // More locations than the GPU's shared memory, more clades than it counts, or
                    // a weak call without hit lists: the CPU's code.
                    let call = cpu_time::charge(Work::Fallback, || sc.classifier.classify(mates, hit_list));
                    let found = (&call.candidates[..], &call.clades[..]);
                    emit(r, call.taxid, found, [&call.hit_runs[0], &call.hit_runs[1]], None);
                    continue;
                };
                let taxid = match found.amino_kmers(r) {
                    Some(kmers) => sc.classifier.with_protein_kmers(taxid, kmers),
                    None => sc.classifier.with_protein(taxid, mates),
                };
                let cands: Vec<(u32, u32)> = if want.candidates {
                    sc.candidates.iter().map(|c| (c.target, c.hits)).collect()
                } else {
                    Vec::new()
                };
                let [a, b] = &mut sc.runs;
                a.clear();
                b.clear();
                let text = found.hit_text(r);
                if hit_list && text.is_none() {
                    for (m, taxa) in found.feature_taxa(r).enumerate() {
                        let runs = if m == 0 { &mut *a } else { &mut *b };
                        for &t in taxa {
                            let taxon = if t == 0 { 0 } else { tree.node_taxid(t - 1) };
                            candidates::push_run(runs, taxon);
                        }
                    }
                }
                let clades: &[(TaxId, u32)] = if want.candidates { &sc.clades } else { &[] };
                emit(r, taxid, (&cands, clades), [a, b], text);
            }
            return;
        }
        for (j, call) in sc.classifier.classify_group(group, hit_list).into_iter().enumerate() {
            let found = (&call.candidates[..], &call.clades[..]);
            emit(first + j, call.taxid, found, [&call.hit_runs[0], &call.hit_runs[1]], None);
        }
    }

    /// Writes read `r` of `batch` to the classified or unclassified reads output, if asked for.
    fn write_reads(&self, outs: &mut Outputs, batch: &Batch, r: usize, taxid: TaxId) -> Result<(), ClassifyError> {
        let reads_out = if taxid != 0 { &mut outs.classified } else { &mut outs.unclassified };
        if let Some(w) = reads_out {
            for m in 0..batch.mates_per_read() {
                if let Err(source) = w.write(m, batch.header(r, m), taxid, batch.seq(r, m), batch.qual(r, m)) {
                    let path =
                        w.path(m).map_or_else(|| format!("reads output, mate {}", m + 1), |p| p.display().to_string());
                    return Err(ClassifyError::Output { path, source });
                }
            }
        }
        Ok(())
    }
}

/// Read `r`'s hit runs, a mate's each, from the GPU's hit lists (its column's text, or its
/// features' taxa) into `out`; false where the GPU made none (no output needed them).
fn gpu_runs(
    found: &devices::Found,
    r: usize,
    tree: &crate::taxonomy::TaxonTree,
    hit_list: bool,
    out: &mut [Vec<(TaxId, u32)>; 2],
) -> bool {
    if !hit_list {
        return false;
    }
    if let Some(text) = found.hit_text(r) {
        return output::parse_hit_list(text, out).is_some();
    }
    out.iter_mut().for_each(Vec::clear);
    for (runs, taxa) in out.iter_mut().zip(found.feature_taxa(r)) {
        for &t in taxa {
            candidates::push_run(runs, if t == 0 { 0 } else { tree.node_taxid(t - 1) });
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's counts are each taxid's reads, once, in taxid order, whatever the calls' order.
    #[test]
    fn calls_are_counted_by_taxid() {
        let mut sorted = vec![7]; // a buffer left over from another task
        assert_eq!(count_sorted(&[], &mut sorted), vec![]);
        let calls = [562, 0, 562, 1, 0, 562, 83333, 1];
        assert_eq!(count_sorted(&calls, &mut sorted), vec![(0, 2), (1, 2), (562, 3), (83333, 1)]);
        let mut rng = 12345u64;
        let calls: Vec<TaxId> = (0..5000)
            .map(|_| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                (rng >> 40) as TaxId % 300
            })
            .collect();
        let mut want: Vec<(TaxId, u64)> = calls
            .iter()
            .fold(HashMap::<TaxId, u64>::new(), |mut m, &t| {
                *m.entry(t).or_default() += 1;
                m
            })
            .into_iter()
            .collect();
        want.sort_unstable();
        assert_eq!(count_sorted(&calls, &mut sorted), want);
    }
}
