//! The GPUs a build runs on, as its stages see them: none on the CPU or without GPU support, so
//! that `build` calls the same functions either way.
//!
//! On GPUs (`gpu::passes`) stage 1 sketches into (feature, window) pairs kept by the GPU that owns
//! each shard, and stage 3 lays the shards out there in passes. Without GPU support the passes
//! are a type with no values: the stage-3 branch that takes them compiles and is never reached.

use super::{BuildConfig, BuildError, LayOut, PassSummary, Sketched, sketching};
use crate::compute::GpuRequest;
use crate::index::condensed::ShardStats;
use crate::index::{IndexFile, IndexWriter};

/// The GPUs of a build (none: the CPU).
pub(super) struct Gpus {
    #[cfg(feature = "gpu")]
    list: Vec<crate::gpu::Gpu>,
}

/// The GPU build's passes after reading, holding each shard's pairs.
#[cfg(feature = "gpu")]
pub(super) type Passes<'g> = crate::gpu::passes::PassBuild<'g>;
/// Without GPU support: no passes, ever (a pair holding a type with no values).
#[cfg(not(feature = "gpu"))]
pub(super) type Passes<'g> = (NoPasses, std::marker::PhantomData<&'g ()>);
/// Never made.
#[cfg(not(feature = "gpu"))]
pub(super) enum NoPasses {}

impl Gpus {
    /// The GPUs `request` names (none: the CPU); without GPU support, naming GPUs is an error.
    pub(super) fn select(request: &GpuRequest) -> Result<Self, BuildError> {
        #[cfg(feature = "gpu")]
        return Ok(Self { list: crate::gpu::device::select(request)? });
        #[cfg(not(feature = "gpu"))]
        match request {
            GpuRequest::List(_) => Err(BuildError::NoGpuSupport(request.to_string())),
            _ => Ok(Self {}),
        }
    }

    /// Stage 1 on the GPUs: every input read and sketched into the passes. `None` where the CPU
    /// is to do it: no GPUs, or, with `--gpus all`, GPUs that cannot start the build (an input too
    /// large for the machine is too large for the CPU as well: that stays an error).
    pub(super) fn read_and_sketch<'g>(
        &'g self,
        config: &BuildConfig,
        shard_bits: u32,
        progress: &sketching::Progress,
    ) -> Option<Sketched<'g>> {
        #[cfg(feature = "gpu")]
        if !self.list.is_empty() {
            let gpus = &self.list[..];
            let tmp_dir =
                config.tmp_dir.clone().unwrap_or_else(|| crate::temp_files::folder_of(&config.db).to_path_buf());
            let options = config.gpu_options;
            let started = crate::gpu::passes::PassBuild::new(
                gpus,
                &config.sources,
                &config.sketch,
                options,
                shard_bits,
                &tmp_dir,
            );
            match started.map_err(BuildError::from) {
                Ok(pb) => {
                    let read = || -> Sketched<'g> {
                        let targets = sketching::read_sources(
                            &config.sources,
                            &config.sketch,
                            crate::gpu::build::BATCH_BASES,
                            progress,
                            &|batch| Ok(pb.insert_batch(batch)?),
                        )?;
                        let counts = pb.finish_reading()?;
                        let name = crate::gpu::device::describe(gpus);
                        Ok((targets, super::Inserted::Gpus(Box::new(pb), counts), name))
                    };
                    return Some(read());
                }
                Err(BuildError::Gpu(e)) if config.gpus == GpuRequest::All => {
                    log::warn!("GPU build: {}; building on the CPU", crate::errors::chain(&e));
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let _ = (config, shard_bits, progress);
        None
    }
}

/// Threads a GPU-built shard's finishing has to itself (`pipeline::Lanes`): about 2
/// thread-seconds of a device host's per 5 M-slot shard, 0.2-0.3 s of it on one thread (leftover
/// keys, checksum), so lanes of 4 finish a shard in under a second and several lanes keep up with
/// two GPUs.
#[cfg(feature = "gpu")]
const FINISHING_LANE_THREADS: usize = 4;

/// Stage 3 on the GPUs: the shards laid out in passes on the GPUs' threads, while this stage
/// takes them in shard order, finishes them side by side in lanes of a few threads
/// (`pipeline::run_here_streaming`) and writes each into `out` on a thread of its own, as the CPU
/// build's stage 3 does with its condensed shards.
/// Returns the writer, the shards' counts and the passes' summary.
pub(super) fn lay_out(
    job: &LayOut<'_>,
    passes: &Passes<'_>,
    counts: &[u64],
    out: IndexFile,
) -> Result<(IndexWriter, ShardStats, Option<PassSummary>), BuildError> {
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (job, counts, out);
        match passes.0 {}
    }
    #[cfg(feature = "gpu")]
    {
        use crate::gpu::passes::{ArrivedShard, FinishedShard, SHARD_BUFFERS, ShardArrivals, ShardFinisher};
        let pb = passes;
        let mut writer = job.writer(out)?;
        let first: Vec<u64> = job.raw_targets.iter().map(|t| t.first_window).collect();
        let what = crate::gpu::passes::ShardsToBuild {
            counts,
            first_windows: &first,
            final_id: &job.resolved.final_id,
            layout: &job.layout,
            numbering: &job.numbering,
            cap: job.config.max_locations_per_feature,
            clades: job.clades,
        };
        let threads = job.pool.current_num_threads();
        let lanes = crate::pipeline::Lanes::new(threads, FINISHING_LANE_THREADS, "kmerdb-finish")
            .map_err(|e| BuildError::Threads { threads, reason: e.to_string() })?;
        // The writing stage: the shards come in shard order, each written at its offset.
        let mut stats = ShardStats::default();
        let mut write = |f: FinishedShard| -> Result<(), BuildError> {
            debug_assert_eq!(f.shard, writer.shards_written(), "shards reach the writer in shard order");
            writer.add_shard(&f.stored, Some(f.checksum))?;
            writer.add_clade_lists(f.clade_lists);
            stats += f.stats;
            Ok(())
        };
        let finish_and_write = |mut arrivals: ShardArrivals<'_>, finisher: &ShardFinisher<'_>| {
            let mut next = move |wait: bool| arrivals.next(wait);
            let finish = |shard: Result<ArrivedShard, crate::gpu::GpuError>| Ok(finisher.finish(shard?)?);
            crate::pipeline::run_here_streaming(
                &lanes,
                ("finishing", &mut next),
                &finish,
                SHARD_BUFFERS,
                ("writing", &mut write),
            )
        };
        let (times, report) =
            pb.run_passes(what, threads, finish_and_write).map_err(|e| e.naming_index(&job.config.db))?;
        log::debug!("shards: {}", crate::pipeline::describe(&times));
        let placed = pb.placement();
        let (mut reading, uploaded_bytes) = pb.reading_report();
        let parsing = job.progress.parse_nanos.load(std::sync::atomic::Ordering::Relaxed);
        reading.insert(0, ("parsing", std::time::Duration::from_nanos(parsing)));
        let passes = PassSummary {
            passes: report.passes,
            gpus: pb.gpu_count(),
            select_insert: report.select_insert,
            condense: report.condense,
            waiting_for_gpus: report.waiting_for_gpus,
            finishing: report.finishing,
            writing: times[1].1.busy,
            pairs_on_gpus: placed.device_bytes,
            pairs_in_host_memory: placed.host_bytes,
            pairs_spilled: placed.spill_bytes,
            shard_pairs: report.shard_pairs,
            reading,
            uploaded_bytes,
        };
        Ok((writer, stats, Some(passes)))
    }
}
