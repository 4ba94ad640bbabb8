//! `kmerdb build`: reference genomes to an index file, on the CPU or on GPUs.
//!
//! Three stages, each in its own module:
//! 1. [`sketching`]: read FASTA files in parallel and sketch every window into per-shard bins of
//!    (feature, target, window) triples (the NCBI taxonomy loads on another thread meanwhile);
//! 2. [`targets`]: order targets by name, give them taxa, prune the taxonomy;
//! 3. [`condense`]: per shard, in parallel, sort the triples, make overpopulated features clade features, lay out
//!    location lists and the key index; a writing thread meanwhile writes the shards done so far
//!    into the index file, in shard order (`pipeline::run_here`).
//!
//! Then `IndexWriter::finish` writes the rest and renames the file into place. Peak memory is the
//! bins (8 bytes per location) plus two pool-widths of condensed shards, or, while reading, one
//! input batch per reading thread.
//!
//! On GPUs (`gpu::passes`, which the stages reach through `devices`), stage 1 sketches on the
//! GPUs into (feature, window) pairs kept by the GPU that owns each shard, and stage 3 lays the
//! shards out on the GPUs in passes, writing each one into the index file as soon as it is done;
//! stage 2 is the same.
//!
//! Determinism: targets are numbered by name and every list is sorted, so the index bytes depend
//! on neither the order of the inputs nor the thread count.

pub mod condense;
mod devices;
pub mod error;
pub mod partition;
pub mod protein_table;
pub mod sketching;
pub mod targets;
pub mod update;

pub use error::BuildError;

use crate::compute::{GpuBuildOptions, GpuRequest};
use crate::index::format::{
    Collection, Counts, DEFAULT_SHARD_BITS, Header, IndexError, KeyIndexParams, Provenance, TaxonomySource,
};
use crate::index::{GlobalWindows, IndexFile, IndexWriter, LocationLayout, bcht};
use crate::input::Source;
use crate::pipeline;
use crate::sketch::{HASH_FUNCTION_ID, SketchParams};
use crate::taxonomy::{NcbiTaxonomy, SeqIdMap, TaxonomyError};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Checked settings of one build.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    pub sources: Vec<Source>,
    pub db: PathBuf,
    pub taxonomy: Option<PathBuf>,
    /// GTDB's taxonomy files that `taxonomy` was made from (`--taxonomy-gtdb`), which the
    /// provenance records instead of the temporary folder.
    pub taxonomy_gtdb: Vec<PathBuf>,
    pub seqid_maps: Vec<PathBuf>,
    pub sketch: SketchParams,
    pub max_locations_per_feature: u32,
    pub threads: usize,
    pub strict: bool,
    /// Draw a progress bar (the caller decides: stderr is a terminal and not `--quiet`).
    pub progress: bool,
    pub gpus: GpuRequest,
    pub gpu_options: GpuBuildOptions,
    /// Where a GPU build spills pairs that neither the GPUs nor host memory hold (default: the
    /// index's folder).
    pub tmp_dir: Option<PathBuf>,
    /// `--protein`: the amino-acid table's settings (`None`: no protein section).
    pub protein: Option<crate::protein::ProteinParams>,
    /// `--partition I/N`: the part this build makes (`None`: the whole collection).
    pub part: Option<partition::Part>,
}

impl BuildConfig {
    /// The settings' ranges, named by their flags, as the command checks them: sketch parameters
    /// that `SketchParams::new` accepts, at least one thread and one location a feature, amino-acid
    /// k-mers of 1 to 7 residues sampled one in at least one. `build` calls it first, so that a
    /// library caller's config cannot reach a stage with values no run accepts.
    pub fn validate(&self) -> Result<(), BuildError> {
        let s = &self.sketch;
        crate::sketch::SketchParams::new(s.k, s.window, Some(s.stride), s.sketch_size, s.hash_seed)?;
        let bad = |m: &str| Err(BuildError::Setting(m.to_string()));
        if self.threads == 0 {
            return bad("--threads must be at least 1");
        }
        if self.max_locations_per_feature == 0 {
            return bad("--max-locations-per-feature must be at least 1");
        }
        if let Some(p) = &self.protein {
            if !(1..=7).contains(&p.k) {
                return bad("the amino-acid k-mers must be 1 to 7 residues long");
            }
            if p.sample == 0 {
                return bad("--protein-sample must be at least 1");
            }
        }
        Ok(())
    }

    /// The command line that made this index, normalised so that it does not depend on input
    /// order or thread count: it is stored in the index, which must be reproducible.
    pub(crate) fn normalized_command_line(&self) -> Vec<String> {
        let p = &self.sketch;
        let mut args: Vec<String> = ["kmerdb", "build"].map(String::from).to_vec();
        let mut opt = |name: &str, value: String| {
            args.push(name.into());
            args.push(value);
        };
        opt("-k", p.k.to_string());
        opt("--window", p.window.to_string());
        opt("--stride", p.stride.to_string());
        opt("--sketch-size", p.sketch_size.to_string());
        opt("--max-locations-per-feature", self.max_locations_per_feature.to_string());
        if !self.taxonomy_gtdb.is_empty() {
            self.taxonomy_gtdb.iter().for_each(|f| opt("--taxonomy-gtdb", f.display().to_string()));
        } else if let Some(t) = &self.taxonomy {
            opt("--taxonomy", t.display().to_string());
        }
        for m in &self.seqid_maps {
            opt("--seqid2taxid", m.display().to_string());
        }
        if let Some(p) = &self.protein {
            // `--protein` with its one setting.
            opt("--protein-sample", p.sample.to_string());
        }
        if self.strict {
            args.push("--strict".into());
        }
        let mut inputs: Vec<String> = self.sources.iter().map(|s| s.to_string()).collect();
        inputs.sort();
        args.extend(inputs);
        args
    }
}

/// What a build did, for the summary line and for tests.
#[derive(Debug, Clone)]
pub struct BuildSummary {
    pub db: PathBuf,
    pub counts: Counts,
    pub index_bytes: u64,
    pub without_taxid: Vec<String>,
    pub elapsed: Duration,
    pub taxonomy_load: Option<Duration>,
    /// Where stage 1 and 3 ran: `CPU` or the GPU's name.
    pub backend: String,
    /// Wall time of each phase, in order.
    pub phases: Vec<(&'static str, Duration)>,
    /// How a GPU build's passes went.
    pub passes: Option<PassSummary>,
}

/// A GPU build's passes: how many, where the time went, where the pairs were kept.
#[derive(Debug, Clone, Default)]
pub struct PassSummary {
    pub passes: usize,
    pub gpus: usize,
    /// GPU time selecting and inserting, and condensing and downloading, summed over GPUs.
    pub select_insert: Duration,
    pub condense: Duration,
    /// Host time waiting for the GPUs, finishing shards (leftover keys, checksums) and writing.
    pub waiting_for_gpus: Duration,
    pub finishing: Duration,
    pub writing: Duration,
    /// Bytes of pairs kept on the GPUs, in host memory and in spill files between reading and
    /// the passes.
    pub pairs_on_gpus: u64,
    pub pairs_in_host_memory: u64,
    pub pairs_spilled: u64,
    /// (feature, window) pairs of each shard.
    pub shard_pairs: Vec<u64>,
    /// Where the reading threads' time went (parsing, and the GPU's share of each batch), summed
    /// over threads, and the sequence bytes uploaded.
    pub reading: Vec<(&'static str, Duration)>,
    pub uploaded_bytes: u64,
}

/// Checks before any work that the index can be written where asked.
pub fn check_output(db: &std::path::Path) -> Result<(), BuildError> {
    let err = |reason: String| BuildError::Output { path: db.to_path_buf(), reason };
    if db.is_dir() {
        return Err(err("it is a directory".into()));
    }
    // Looked at before opening: opening a named pipe would wait for a writer.
    if let Some(reason) = crate::replacing::refusal(db) {
        return Err(err(reason));
    }
    // A build replaces an older index, never some other file a typo named (a genome, reads).
    if let Some(meta) = std::fs::metadata(db).ok().filter(|m| m.is_file()) {
        let mut start = [0u8; 8];
        let read = std::fs::File::open(db).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut start));
        if meta.is_file() && meta.len() > 0 && (read.is_err() || start != crate::index::format::MAGIC) {
            return Err(err(
                "the file exists and is not a kmerdb index; a build replaces only an index (remove the file, or choose another -d)"
                    .into(),
            ));
        }
    }
    let dir = crate::temp_files::folder_of(db);
    if !dir.is_dir() {
        return Err(err(format!("directory {} does not exist", dir.display())));
    }
    Ok(())
}

/// Runs a whole build. `on_progress` is called about every 100 ms from a helper thread while the
/// inputs are read, with (bases read, bytes of input files finished).
pub fn build(config: &BuildConfig, on_progress: &(dyn Fn(u64, u64) + Sync)) -> Result<BuildSummary, BuildError> {
    config.validate()?;
    let start = Instant::now();
    check_output(&config.db)?;
    // Made now: a folder that cannot be written fails before any work.
    let out = IndexFile::create(&config.db)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.threads)
        .build()
        .map_err(|e| BuildError::Threads { threads: config.threads, reason: e.to_string() })?;
    let gpus = devices::Gpus::select(&config.gpus)?;
    pool.install(|| build_in_pool(config, out, start, on_progress, &pool, &gpus))
}

/// What stage 1 leaves for stage 3.
enum Inserted<'g> {
    Bins(Vec<sketching::Bin>),
    /// The GPU build after reading, with the pairs of each shard (made only with GPU support).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    Gpus(Box<devices::Passes<'g>>, Vec<u64>),
}

fn build_in_pool(
    config: &BuildConfig,
    out: IndexFile,
    start: Instant,
    on_progress: &(dyn Fn(u64, u64) + Sync),
    pool: &rayon::ThreadPool,
    gpus: &devices::Gpus,
) -> Result<BuildSummary, BuildError> {
    let shard_bits = DEFAULT_SHARD_BITS;
    let progress = sketching::Progress::default();
    let read =
        read_while_loading(config, on_progress, &progress, || read_and_sketch(config, shard_bits, &progress, gpus));
    let (taxonomy, seqid_map, sketched) = read;
    // Input errors come first: they are what the user most likely has to fix.
    let (raw_targets, inserted, backend) = sketched?;

    let mut phases = vec![("read and sketch", start.elapsed())];
    let mut mark = Instant::now();
    let rss = || crate::resources::current_rss_bytes().map(crate::resources::human_bytes).unwrap_or_default();
    log::debug!("after reading and sketching: resident {}, peak {}", rss(), peak());
    let mut phase = |name: &'static str| {
        phases.push((name, mark.elapsed()));
        log::debug!("after {name}: resident {}, peak {}", rss(), peak());
        mark = Instant::now();
    };
    let seqid_map = seqid_map?;
    let (taxonomy, taxonomy_load) = match taxonomy? {
        Some((t, d)) => (Some(t), Some(d)),
        None => (None, None),
    };
    let collection = collection_of(config, taxonomy.as_ref());

    let mut resolved = targets::resolve(&raw_targets, &config.sources, taxonomy.as_ref(), &seqid_map, config.strict)?;
    if let Some(t) = resolved.targets.iter().find(|t| t.windows > u32::MAX as u64) {
        return Err(BuildError::SequenceTooLong { id: t.name.clone(), windows: t.windows });
    }
    targets::warn_featureless(&raw_targets, &resolved.final_id, &config.sources, config.sketch.k);
    phase("taxa");
    let max_windows = resolved.targets.iter().map(|t| t.windows).max().unwrap_or(1);
    let clades = crate::index::condensed::Clades::new(&resolved.targets, &resolved.taxa)?;
    let cap = config.max_locations_per_feature;
    let windows = resolved.targets.iter().map(|t| t.windows).sum();
    let layout = LocationLayout::for_counts(resolved.targets.len() as u64, max_windows, windows, cap, clades.nodes());
    let numbering = GlobalWindows::new(resolved.targets.iter().map(|t| t.windows), &layout);
    let job = LayOut {
        config,
        collection,
        raw_targets: &raw_targets,
        resolved: &resolved,
        clades: &clades,
        layout,
        numbering,
        shard_bits,
        progress: &progress,
        pool,
    };
    // Stage 3. The pruned taxa's names are read meanwhile.
    let (named, laid_out) = std::thread::scope(|scope| {
        let names = scope.spawn(|| name_taxa(taxonomy, &resolved.taxa));
        let laid_out = job.run(inserted, out);
        (names.join().expect("the names loader does not panic"), laid_out)
    });
    let (writer, stats, passes) = laid_out?;
    targets::check_not_empty(&stats, config.sketch.k, config.max_locations_per_feature)?;
    resolved.taxa = named?;
    phase(if passes.is_some() { "passes (shards laid out on the GPUs and written)" } else { "condense" });
    let (counts, index_bytes) = write_rest(config, (layout, collection), shard_bits, &resolved, (writer, stats))?;
    phase("write");
    Ok(BuildSummary {
        db: config.db.clone(),
        counts,
        index_bytes,
        without_taxid: resolved.without_taxid,
        elapsed: start.elapsed(),
        taxonomy_load,
        backend,
        phases,
        passes,
    })
}

/// What stage 1 gives: the targets read, the sketches where they wait for stage 3, and where it ran.
type Sketched<'g> = Result<(Vec<sketching::RawTarget>, Inserted<'g>, String), BuildError>;

/// A loaded taxonomy and how long it took, if one was given.
type LoadedTaxonomy = Result<Option<(NcbiTaxonomy, Duration)>, TaxonomyError>;

/// Runs `stage1` (reading and sketching) while other threads load the taxonomy and the seqid
/// maps and report `progress` to `on_progress` every 100 ms.
fn read_while_loading<'g>(
    config: &BuildConfig,
    on_progress: &(dyn Fn(u64, u64) + Sync),
    progress: &sketching::Progress,
    stage1: impl FnOnce() -> Sketched<'g>,
) -> (LoadedTaxonomy, Result<SeqIdMap, TaxonomyError>, Sketched<'g>) {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let taxonomy = scope.spawn(|| {
            config.taxonomy.as_ref().map(|dir| {
                let t = Instant::now();
                // Names are read later, for the pruned taxa only: they are most of the dump's memory.
                NcbiTaxonomy::load_dir_without_names(dir).map(|tax| (tax, t.elapsed()))
            })
        });
        let seqid_map = scope.spawn(|| SeqIdMap::load(&config.seqid_maps));
        let done = &done;
        let ticker = scope.spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                on_progress(
                    progress.bases.load(std::sync::atomic::Ordering::Relaxed),
                    progress.file_bytes_done.load(std::sync::atomic::Ordering::Relaxed),
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let sketched = stage1();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = ticker.join();
        let taxonomy = taxonomy.join().expect("the taxonomy loader does not panic").transpose();
        let seqid_map = seqid_map.join().expect("the seqid map loader does not panic");
        (taxonomy, seqid_map, sketched)
    })
}

/// Stage 1: reads every input and sketches it, on the GPUs when there are any (the pairs stay
/// with the GPU that owns each shard), otherwise into the CPU's bins.
fn read_and_sketch<'g>(
    config: &BuildConfig,
    shard_bits: u32,
    progress: &sketching::Progress,
    gpus: &'g devices::Gpus,
) -> Sketched<'g> {
    if let Some(sketched) = gpus.read_and_sketch(config, shard_bits, progress) {
        return sketched;
    }
    let s = sketching::sketch_sources(&config.sources, &config.sketch, shard_bits, progress)?;
    Ok((s.targets, Inserted::Bins(s.bins), "CPU".to_string()))
}

/// The pruned taxa with their scientific names, read from the taxonomy's names file now that
/// only these are needed (without a taxonomy, the taxa as they are).
pub(crate) fn name_taxa(
    taxonomy: Option<NcbiTaxonomy>,
    taxa: &[crate::taxonomy::Taxon],
) -> Result<Vec<crate::taxonomy::Taxon>, TaxonomyError> {
    let Some(mut tax) = taxonomy else { return Ok(taxa.to_vec()) };
    let ids: Vec<u32> = taxa.iter().map(|t| t.taxid).collect();
    tax.load_names(&ids)?;
    Ok(taxa.iter().map(|t| crate::taxonomy::Taxon { name: tax.name(t.taxid).to_string(), ..t.clone() }).collect())
}

/// Stage 3's inputs: the targets as read and as numbered, and the layout of location lists.
struct LayOut<'a> {
    config: &'a BuildConfig,
    collection: Collection,
    raw_targets: &'a [sketching::RawTarget],
    resolved: &'a targets::Resolved,
    /// The clade of each feature over the cap is named in this tree.
    clades: &'a crate::index::condensed::Clades,
    layout: LocationLayout,
    /// The targets' global window numbers, which stored lists hold.
    numbering: GlobalWindows,
    shard_bits: u32,
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    progress: &'a sketching::Progress,
    pool: &'a rayon::ThreadPool,
}

impl LayOut<'_> {
    /// Stage 3: every shard condensed (sorted, overpopulated features made clade features, lists and
    /// key index laid out) and written into `out` in shard order: on the CPU, shards on every
    /// thread of the pool at once while the one before is written; on the GPUs in passes (with
    /// the passes' summary). Returns the writer, with the shards' counts.
    fn run(
        &self,
        inserted: Inserted<'_>,
        out: IndexFile,
    ) -> Result<(IndexWriter, crate::index::condensed::ShardStats, Option<PassSummary>), BuildError> {
        match inserted {
            Inserted::Bins(bins) => {
                let (writer, stats) = self.on_cpu(bins, out)?;
                Ok((writer, stats, None))
            }
            Inserted::Gpus(passes, counts) => devices::lay_out(self, &passes, &counts, out),
        }
    }

    /// The index writer, with a header that says what the shards need (the final one comes last).
    fn writer(&self, out: IndexFile) -> Result<IndexWriter, BuildError> {
        let targets = Counts { targets: self.resolved.targets.len() as u64, ..Counts::default() };
        let header = make_header(self.config, (self.layout, self.collection), targets, self.shard_bits);
        Ok(IndexWriter::new(out, &header)?)
    }

    fn on_cpu(
        &self,
        bins: Vec<sketching::Bin>,
        out: IndexFile,
    ) -> Result<(IndexWriter, crate::index::condensed::ShardStats), BuildError> {
        let cap = self.config.max_locations_per_feature;
        let windows = condense::WindowMap::new(self.raw_targets, &self.resolved.final_id);
        let mut writer = self.writer(out)?;
        let mut stats = crate::index::condensed::ShardStats::default();
        let condense = |bin| {
            let lists = (&self.layout, &self.numbering);
            condense::condense_bin(bin, &windows, lists, bcht::KeyHash::new(self.shard_bits), cap, self.clades)
                .map_err(|source| BuildError::from(IndexError::ShardOverflow { path: self.config.db.clone(), source }))
        };
        // This thread is one of the pool's: it condenses, and a thread of its own writes.
        let mut condensed = pipeline::in_order_windows(self.pool, bins, condense);
        let mut write = |shard: crate::index::condensed::Condensed| {
            writer.add_shard(&shard.data, None)?;
            writer.add_clade_lists(shard.clade_lists);
            stats += shard.stats;
            Ok(())
        };
        let width = self.pool.current_num_threads();
        let times = pipeline::run_here(("condensing", &mut condensed), width, ("writing", &mut write))?;
        log::debug!("shards: {}", crate::pipeline::describe(&times));
        Ok((writer, stats))
    }
}

/// Writes the targets, taxa and header after the shards; returns the index's counts and size.
fn write_rest(
    config: &BuildConfig,
    (layout, collection): (LocationLayout, Collection),
    shard_bits: u32,
    resolved: &targets::Resolved,
    (mut writer, stats): (IndexWriter, crate::index::condensed::ShardStats),
) -> Result<(Counts, u64), BuildError> {
    let (targets, taxa) = (&resolved.targets, &resolved.taxa);
    let counts = counts_of(targets, taxa, &stats, writer.buckets_written());
    if let Some(params) = config.protein {
        let started = std::time::Instant::now();
        writer.set_protein(protein_table::build(&config.sources, targets, params)?);
        log::debug!("protein table in {:.2} s", started.elapsed().as_secs_f64());
    }
    let header = make_header(config, (layout, collection), counts.clone(), shard_bits);
    let index_bytes = writer.finish(header, targets, taxa)?;
    Ok((counts, index_bytes))
}

/// An index's counts, from its targets, taxa and shards.
pub(crate) fn counts_of(
    targets: &[crate::index::TargetInfo],
    taxa: &[crate::taxonomy::Taxon],
    stats: &crate::index::condensed::ShardStats,
    buckets: u64,
) -> Counts {
    Counts {
        targets: targets.len() as u64,
        taxa: taxa.len() as u64,
        bases: targets.iter().map(|t| t.length).sum(),
        windows: targets.iter().map(|t| t.windows).sum(),
        features: stats.features,
        locations: stats.locations,
        clade_features: stats.clade_features,
        clade_locations: stats.clade_locations,
        buckets,
    }
}

/// What the index is a part of (see `Collection`): the partition asked for and the taxonomy's checksum.
fn collection_of(config: &BuildConfig, taxonomy: Option<&NcbiTaxonomy>) -> Collection {
    let taxonomy_checksum = taxonomy.map_or(0, |t| t.checksum());
    match config.part {
        Some(p) => Collection { part: p.part, parts: p.parts, id: p.id, taxonomy_checksum },
        None => Collection::whole(taxonomy_checksum),
    }
}

/// The index header for `config` with `layout`, `collection` and `counts` (sections are filled in
/// when written).
fn make_header(
    config: &BuildConfig,
    (layout, collection): (LocationLayout, Collection),
    counts: Counts,
    shard_bits: u32,
) -> Header {
    Header {
        sketch: config.sketch,
        hash_function: HASH_FUNCTION_ID,
        max_locations_per_feature: config.max_locations_per_feature,
        shard_bits,
        key_index: KeyIndexParams {
            bucket_slots: bcht::BUCKET_SLOTS as u32,
            hash_functions: bcht::HASH_FUNCTIONS as u32,
            seeds: bcht::BUCKET_SEEDS,
        },
        layout,
        taxonomy: if config.taxonomy.is_some() { TaxonomySource::Ncbi } else { TaxonomySource::PerSequence },
        collection,
        counts,
        provenance: Provenance {
            kmerdb_version: env!("CARGO_PKG_VERSION").into(),
            created_unix: creation_time(),
            command_line: config.normalized_command_line(),
        },
        sections: Vec::new(),
    }
}

/// Seconds since the epoch, or `SOURCE_DATE_EPOCH` when set (reproducible builds).
fn peak() -> String {
    crate::resources::peak_rss_bytes().map(crate::resources::human_bytes).unwrap_or_default()
}

pub(crate) fn creation_time() -> i64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| chrono::Utc::now().timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config the command would make for `dir/x.db` from the bundled genomes.
    fn config(dir: &std::path::Path) -> BuildConfig {
        let genome = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data/genomes"));
        BuildConfig {
            protein: None,
            part: None,
            sources: vec![Source::File(genome)],
            db: dir.join("x.db"),
            taxonomy: None,
            taxonomy_gtdb: Vec::new(),
            seqid_maps: Vec::new(),
            sketch: SketchParams::new(16, 127, None, 16, 0).unwrap(),
            max_locations_per_feature: 254,
            threads: 1,
            strict: false,
            progress: false,
            gpus: GpuRequest::None,
            gpu_options: Default::default(),
            tmp_dir: None,
        }
    }

    /// Values the command refuses are refused by the library too, before any file is made.
    #[test]
    fn a_config_out_of_range_is_refused_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        assert!(config(dir.path()).validate().is_ok());
        use crate::protein::ProteinParams;
        // Each case: what the error names, and the change to a good config.
        type Case = (&'static str, fn(&mut BuildConfig));
        let cases: [Case; 7] = [
            ("--threads", |c| c.threads = 0),
            ("--max-locations-per-feature", |c| c.max_locations_per_feature = 0),
            ("--protein-sample", |c| c.protein = Some(ProteinParams { sample: 0, ..ProteinParams::DEFAULT })),
            ("amino-acid k-mers", |c| c.protein = Some(ProteinParams { k: 8, ..ProteinParams::DEFAULT })),
            ("the window", |c| c.sketch.window = 8),
            ("the stride", |c| c.sketch.stride = 0),
            ("the sketch size", |c| c.sketch.sketch_size = 0),
        ];
        for (what, change) in cases {
            let mut c = config(dir.path());
            change(&mut c);
            let e = build(&c, &|_, _| {}).expect_err(what);
            assert!(e.to_string().contains(what), "{what}: {e}");
            assert!(matches!(e, BuildError::Setting(_) | BuildError::Sketch(_)), "{what}: {e:?}");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{what}: a file was made");
        }
    }

    /// An update's settings out of range are refused before its index is opened.
    #[test]
    fn an_update_config_out_of_range_is_refused_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        let good = update::UpdateConfig {
            old: dir.path().join("absent.db"),
            db: dir.path().join("new.db"),
            add: Vec::new(),
            remove_targets: vec!["x".into()],
            remove_taxa: Vec::new(),
            skip_absent: false,
            taxonomy: None,
            seqid_maps: Vec::new(),
            threads: 1,
            gpus: GpuRequest::None,
            gpu_pass_values: None,
            strict: false,
            command_line: Vec::new(),
        };
        assert!(good.validate().is_ok());
        for (what, c) in [
            ("--threads", update::UpdateConfig { threads: 0, ..good.clone() }),
            ("gpu_pass_values", update::UpdateConfig { gpu_pass_values: Some(0), ..good.clone() }),
        ] {
            // The index does not exist: an error about it would mean the settings were not checked first.
            let e = update::update(&c).expect_err(what);
            assert!(matches!(&e, BuildError::Setting(m) if m.contains(what)), "{what}: {e}");
        }
    }
}
