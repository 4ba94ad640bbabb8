//! The GPUs a classification hands its batches to, as `classify` and the pipeline's stages see
//! them: none on the CPU or without GPU support, so that they call the same methods either way
//! (`classify` has no `cfg` of its own for them).
//!
//! [`Gpus`] is what `--gpus` asks of the run (the device choice under `all`); it starts them on a
//! thread while the index is verified ([`Starting`]), and [`Started`] holds their classifiers,
//! which [`Devices`] hands to the stages.
//!
//! The classifiers come lane by lane (`start_gpus`): a lane is one stream of one GPU, the GPUs
//! taking turns (GPU 0's first stream, GPU 1's, ..., then their second streams), and batch `i`
//! goes whole to lane `i % lanes`. Packing, the GPU's stage and the recycling of a batch's results
//! all use the lane the batch was packed for.

use super::{Batch, ClassifyConfig, ClassifyError, ClassifyParams};
use crate::index::Index;

/// The GPUs `--gpus` asks a run for (none: the CPU), opened by [`Gpus::start`]. The classifiers
/// borrow them, so they outlive the run's threads and are closed after them.
pub(super) struct Gpus {
    #[cfg(feature = "gpu")]
    request: crate::compute::GpuRequest,
    /// `--gpus all`: GPUs that cannot take the index leave the run to the CPU.
    #[cfg(feature = "gpu")]
    all: bool,
    #[cfg(feature = "gpu")]
    opened: std::sync::OnceLock<Vec<crate::gpu::device::Gpu>>,
}

impl Gpus {
    /// What `config`'s `--gpus` asks of this run: under `all`, the CPU where it would finish
    /// before the GPUs were ready (`device_choice`), with an info line saying why, judged before
    /// the driver is started where device files show a GPU (starting it is a noticeable part of
    /// a run small enough for the CPU). Without GPU support, naming GPUs is an error.
    pub(super) fn request(config: &ClassifyConfig, index: &Index) -> Result<Self, ClassifyError> {
        #[cfg(feature = "gpu")]
        {
            use crate::compute::GpuRequest;
            let present = || crate::gpu::device::probably_present() || crate::gpu::device::device_count() > 0;
            let request = match &config.gpus {
                GpuRequest::All if present() => match super::device_choice::cpu_is_faster(config, index) {
                    Some(why) => {
                        log::info!("{why}");
                        GpuRequest::None
                    }
                    None => GpuRequest::All,
                },
                _ => config.gpus.clone(),
            };
            Ok(Self { request, all: config.gpus == GpuRequest::All, opened: Default::default() })
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = index;
            match &config.gpus {
                request @ crate::compute::GpuRequest::List(_) => Err(ClassifyError::NoGpuSupport(request.to_string())),
                _ => Ok(Self {}),
            }
        }
    }

    /// Whether GPUs will probably classify: the run asks for them and device files show one.
    pub(super) fn probably_used(&self) -> bool {
        #[cfg(feature = "gpu")]
        return self.request != crate::compute::GpuRequest::None && crate::gpu::device::probably_present();
        #[cfg(not(feature = "gpu"))]
        false
    }

    /// Closes the GPUs (their contexts), after the run's threads and classifiers.
    pub(super) fn close(self) {
        #[cfg(feature = "gpu")]
        drop(self.opened);
    }

    /// Starts the GPUs and copies the index to them on a thread of `scope`, while the caller goes
    /// on ([`Starting::wait`] for them). Without GPUs nothing starts.
    pub(super) fn start<'scope, 'env>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        index: &'env Index,
        params: &'env ClassifyParams,
    ) -> Starting<'scope, 'env> {
        #[cfg(feature = "gpu")]
        return Starting {
            handle: scope.spawn(move || start_gpus(&self.request, &self.opened, index, params)),
            all: self.all,
            opened: &self.opened,
        };
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (scope, index, params);
            Starting { lifetimes: std::marker::PhantomData }
        }
    }
}

/// The GPUs starting ([`Gpus::start`]).
pub(super) struct Starting<'scope, 'env> {
    #[cfg(feature = "gpu")]
    handle: std::thread::ScopedJoinHandle<
        'scope,
        Result<Vec<crate::gpu::classify::GpuClassifier<'env>>, crate::gpu::GpuError>,
    >,
    #[cfg(feature = "gpu")]
    all: bool,
    #[cfg(feature = "gpu")]
    opened: &'env std::sync::OnceLock<Vec<crate::gpu::device::Gpu>>,
    #[cfg(not(feature = "gpu"))]
    lifetimes: std::marker::PhantomData<(&'scope (), &'env ())>,
}

impl<'env> Starting<'_, 'env> {
    /// Waits until the GPUs hold the index. Under `--gpus all`, GPUs that cannot take it (an
    /// index larger than their memory) leave the run to the CPU, with the reason.
    pub(super) fn wait(self) -> Result<Started<'env>, ClassifyError> {
        #[cfg(feature = "gpu")]
        {
            let classifiers = match self.handle.join().expect("starting the GPUs does not panic") {
                Ok(c) => c,
                Err(e) if self.all => {
                    log::info!("{}; classifying on the CPU", crate::errors::chain(&e));
                    Vec::new()
                }
                Err(e) => return Err(e.into()),
            };
            let gpus = self.opened.get().map_or(&[][..], Vec::as_slice);
            Ok(Started { classifiers, gpus })
        }
        #[cfg(not(feature = "gpu"))]
        Ok(Started { env: std::marker::PhantomData })
    }
}

/// The GPUs that classify, holding the index (none: the CPU).
pub(super) struct Started<'env> {
    /// The classifiers, lane by lane (`start_gpus`).
    #[cfg(feature = "gpu")]
    classifiers: Vec<crate::gpu::classify::GpuClassifier<'env>>,
    #[cfg(feature = "gpu")]
    gpus: &'env [crate::gpu::device::Gpu],
    #[cfg(not(feature = "gpu"))]
    env: std::marker::PhantomData<&'env ()>,
}

impl Started<'_> {
    /// What the pipeline's stages hand their batches to.
    pub(super) fn devices(&self) -> Devices<'_> {
        #[cfg(feature = "gpu")]
        return Devices::gpus(&self.classifiers);
        #[cfg(not(feature = "gpu"))]
        Devices::none()
    }

    /// The GPUs that classify and how long the index's copy to them took (`None`: the CPU).
    pub(super) fn device(&self) -> Option<(String, std::time::Duration)> {
        #[cfg(feature = "gpu")]
        return self.classifiers.first().map(|c| (crate::gpu::device::describe(self.gpus), c.load_time));
        #[cfg(not(feature = "gpu"))]
        None
    }

    /// The GPU classifiers' time by stage, summed (`None`: the CPU).
    #[cfg(feature = "gpu")]
    pub(super) fn gpu_times(&self) -> Option<crate::gpu::classify::StageTimes> {
        crate::gpu::classify::StageTimes::summed(&self.classifiers)
    }

    /// Frees the GPUs' index copies and buffers, logging what that costs after the last sample
    /// (their memory, pinned host memory and the index's maps are large at users' scale).
    pub(super) fn close(self) {
        #[cfg(feature = "gpu")]
        if !self.classifiers.is_empty() {
            let clock = std::time::Instant::now();
            drop(self.classifiers);
            log::debug!("the GPUs' index copies and buffers freed in {:.2} s", clock.elapsed().as_secs_f64());
        }
    }
}

/// Opens the GPUs `request` names (none: the CPU) into `opened` and copies the index to them.
#[cfg(feature = "gpu")]
fn start_gpus<'g>(
    request: &crate::compute::GpuRequest,
    opened: &'g std::sync::OnceLock<Vec<crate::gpu::device::Gpu>>,
    index: &Index,
    params: &ClassifyParams,
) -> Result<Vec<crate::gpu::classify::GpuClassifier<'g>>, crate::gpu::GpuError> {
    let selected = crate::gpu::device::select(request)?;
    log::debug!("{} GPU(s) started", selected.len());
    // Each GPU classifies on several streams (one classifier each), so that its batches overlap:
    // the handles lane by lane, a lane being one stream of one GPU, the GPUs in turn (`Devices`).
    let lanes = crate::gpu::classify::streams_per_gpu();
    let mut more = selected
        .iter()
        .map(|gpu| (1..lanes).map(|_| gpu.with_own_stream()).collect::<Result<Vec<_>, _>>().map(Vec::into_iter))
        .collect::<Result<Vec<_>, _>>()?;
    let mut handles = selected;
    for _ in 1..lanes {
        handles.extend(more.iter_mut().filter_map(Iterator::next));
    }
    let gpus = opened.get_or_init(|| handles);
    if gpus.is_empty() {
        return Ok(Vec::new());
    }
    let mut classifiers =
        crate::gpu::classify::GpuClassifier::on_gpus(gpus, index, params.max_candidates, params.insert_size)?;
    // The next `--gpus all` judges the copy from the host by this one.
    if let Some((bytes, seconds)) = classifiers.first().and_then(|c| c.timed_upload()) {
        super::device_choice::record_upload(bytes, seconds);
    }
    // The amino-acid stage's translation and k-mers run on the GPUs too; the host looks them up.
    if let Some(table) = index.protein().filter(|_| params.protein_hitmin > 0) {
        for c in &mut classifiers {
            c.list_amino_kmers(table.params);
        }
    }
    Ok(classifiers)
}

/// The packer reads a batch's mates where they were parsed.
#[cfg(feature = "gpu")]
impl crate::gpu::classify::Reads for Batch {
    fn count(&self) -> usize {
        self.len()
    }

    fn mates_per_read(&self) -> usize {
        Batch::mates_per_read(self)
    }

    fn mate(&self, r: usize, m: usize) -> &[u8] {
        self.seq(r, m)
    }
}

/// A batch packed into a lane's pinned memory.
#[cfg(feature = "gpu")]
pub(super) type Packed = crate::gpu::classify::PackedBatch;
/// What a lane's GPUs found for a batch.
#[cfg(feature = "gpu")]
pub(super) type Found = crate::gpu::classify::GpuResults;

/// Never made without GPU support.
#[cfg(not(feature = "gpu"))]
pub(super) enum Packed {}
/// Never made without GPU support.
#[cfg(not(feature = "gpu"))]
pub(super) enum Found {}

/// What the finishing stage reads of a GPU's results, which never exist without GPU support.
#[cfg(not(feature = "gpu"))]
impl Found {
    pub(super) fn candidates(&self, _r: usize, _out: &mut Vec<super::Candidate>) -> bool {
        match *self {}
    }

    pub(super) fn clades(&self, _r: usize, _tree: &crate::taxonomy::TaxonTree, _out: &mut Vec<(u32, u32)>) -> bool {
        match *self {}
    }

    pub(super) fn hit_text(&self, _r: usize) -> Option<&[u8]> {
        match *self {}
    }

    pub(super) fn feature_taxa(&self, _r: usize) -> std::iter::Empty<&[u32]> {
        match *self {}
    }

    pub(super) fn amino_kmers(&self, _r: usize) -> Option<std::iter::Empty<&[u32]>> {
        match *self {}
    }
}

/// How the GPU gives the hit lists: as text when only the per-read lines read them.
#[cfg(feature = "gpu")]
fn hit_lists(want: super::Wanted) -> crate::gpu::classify::HitLists {
    use crate::gpu::classify::HitLists;
    if !want.hit_list() {
        HitLists::Off
    } else if want.candidates || want.confidence {
        HitLists::Taxa
    } else {
        HitLists::Text
    }
}

/// Reads per batch on a GPU: enough to fill it.
#[cfg(feature = "gpu")]
const GPU_BATCH_READS: usize = 1 << 18;

/// The classifiers of a run's GPUs, lane by lane; none on the CPU.
pub(super) struct Devices<'a> {
    #[cfg(feature = "gpu")]
    classifiers: &'a [crate::gpu::classify::GpuClassifier<'a>],
    #[cfg(not(feature = "gpu"))]
    classifiers: std::marker::PhantomData<&'a ()>,
}

impl<'a> Devices<'a> {
    /// No GPU: every batch is classified on the CPU.
    #[cfg_attr(feature = "gpu", allow(dead_code))]
    pub(super) fn none() -> Self {
        Self { classifiers: Default::default() }
    }

    /// The classifiers `start_gpus` made, a lane each (empty: the CPU). Each GPU stream takes
    /// whole batches: a lane of one stream of every GPU, each taking a share of the batch, held
    /// the batch to its slower share and two H200s to 1.15x one (bench/results/HISTORY.md).
    #[cfg(feature = "gpu")]
    pub(super) fn gpus(classifiers: &'a [crate::gpu::classify::GpuClassifier<'a>]) -> Self {
        Self { classifiers }
    }

    pub(super) fn on_gpus(&self) -> bool {
        #[cfg(feature = "gpu")]
        return !self.classifiers.is_empty();
        #[cfg(not(feature = "gpu"))]
        false
    }

    /// Lanes the batches go to in turn: one on the CPU.
    pub(super) fn lanes(&self) -> usize {
        #[cfg(feature = "gpu")]
        return self.classifiers.len().max(1);
        #[cfg(not(feature = "gpu"))]
        1
    }

    /// Reads a batch: on GPUs enough to fill one, which keeps the per-batch costs (allocations,
    /// launches, waits) as small a part; `on_cpu` on the CPU.
    pub(super) fn batch_reads(&self, on_cpu: usize) -> usize {
        #[cfg(feature = "gpu")]
        if self.on_gpus() {
            return GPU_BATCH_READS;
        }
        on_cpu
    }

    /// Lane `lane`'s classifier (one stream of one GPU), as the slice `gpu::classify` takes.
    #[cfg(feature = "gpu")]
    fn lane(&self, lane: usize) -> &'a [crate::gpu::classify::GpuClassifier<'a>] {
        &self.classifiers[lane..lane + 1]
    }

    /// A batch's mates packed into lane `lane`'s pinned memory (`None` on the CPU): done as the
    /// batch is read, so that the GPU's stage only uploads and runs kernels.
    pub(super) fn pack(&self, batch: &Batch, lane: usize) -> Result<Option<Packed>, ClassifyError> {
        #[cfg(feature = "gpu")]
        if self.on_gpus() && !batch.is_empty() {
            return Ok(Some(crate::gpu::classify::pack_on(self.lane(lane), batch)?));
        }
        let _ = (batch, lane);
        Ok(None)
    }

    /// The GPU's part of a packed batch on lane `lane`: candidates and, as `want` needs them, the
    /// hit lists (`None` on the CPU).
    pub(super) fn run(
        &self,
        packed: Option<Packed>,
        lane: usize,
        want: super::Wanted,
    ) -> Result<Option<Found>, ClassifyError> {
        #[cfg(feature = "gpu")]
        if let Some(packed) = packed {
            return Ok(Some(crate::gpu::classify::run_on(self.lane(lane), packed, hit_lists(want))?));
        }
        let _ = (packed, lane, want);
        Ok(None)
    }

    /// Hands a finished batch's results back to lane `lane`, for their memory.
    pub(super) fn recycle(&self, found: Option<Found>, lane: usize) {
        #[cfg(feature = "gpu")]
        if let Some(found) = found {
            found.recycle(self.lane(lane));
        }
        #[cfg(not(feature = "gpu"))]
        let _ = (found, lane);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No GPU: one lane, the CPU's batch size, nothing packed, run or recycled, whatever the lane.
    #[test]
    fn no_devices_leave_every_batch_to_the_cpu() {
        let none = Devices::none();
        assert!(!none.on_gpus());
        assert_eq!(none.lanes(), 1);
        assert_eq!(none.batch_reads(4096), 4096);
        let batch = Batch::default();
        for lane in [0, 1] {
            assert!(none.pack(&batch, lane).unwrap().is_none());
            let want = crate::classify::Wanted { lines: true, candidates: false, confidence: false };
            assert!(none.run(None, lane, want).unwrap().is_none());
            none.recycle(None, lane);
        }
    }
}
