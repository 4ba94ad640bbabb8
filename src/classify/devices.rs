//! The GPUs a classification hands its batches to, as the pipeline's stages see them: none on the
//! CPU or without GPU support, so that the stages call the same methods either way.
//!
//! The classifiers come lane by lane (`start_gpus`): a lane is one stream of every GPU, and batch
//! `i` goes to lane `i % lanes`, whose GPUs take a share each. Packing, the GPU's stage and the
//! recycling of a batch's results all use the lane the batch was packed for.

use super::{Batch, ClassifyError};

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
    pub fn candidates(&self, _r: usize, _out: &mut Vec<super::Candidate>) -> bool {
        match *self {}
    }

    pub fn clades(&self, _r: usize, _tree: &crate::taxonomy::TaxonTree, _out: &mut Vec<(u32, u32)>) -> bool {
        match *self {}
    }

    pub fn hit_text(&self, _r: usize) -> Option<&[u8]> {
        match *self {}
    }

    pub fn feature_taxa(&self, _r: usize) -> std::iter::Empty<&[u32]> {
        match *self {}
    }

    pub fn amino_kmers(&self, _r: usize) -> Option<std::iter::Empty<&[u32]>> {
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
    lanes: usize,
}

impl<'a> Devices<'a> {
    /// No GPU: every batch is classified on the CPU.
    #[cfg_attr(feature = "gpu", allow(dead_code))]
    pub fn none() -> Self {
        Self { classifiers: Default::default(), lanes: 1 }
    }

    /// The classifiers `start_gpus` made, lane by lane (empty: the CPU).
    #[cfg(feature = "gpu")]
    pub fn gpus(classifiers: &'a [crate::gpu::classify::GpuClassifier<'a>]) -> Self {
        Self { classifiers, lanes: crate::gpu::classify::lanes(classifiers) }
    }

    pub fn on_gpus(&self) -> bool {
        #[cfg(feature = "gpu")]
        return !self.classifiers.is_empty();
        #[cfg(not(feature = "gpu"))]
        false
    }

    /// Lanes the batches go to in turn: one on the CPU.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// Reads a batch: on GPUs each GPU of the batch's lane takes a share as large as one GPU's
    /// batch, which keeps the per-batch costs (allocations, launches, waits) as small a part;
    /// `on_cpu` on the CPU.
    pub fn batch_reads(&self, on_cpu: usize) -> usize {
        #[cfg(feature = "gpu")]
        if self.on_gpus() {
            return GPU_BATCH_READS * self.lane(0).len();
        }
        on_cpu
    }

    /// Lane `lane`'s classifiers, one a GPU, each on a stream of its own.
    #[cfg(feature = "gpu")]
    fn lane(&self, lane: usize) -> &'a [crate::gpu::classify::GpuClassifier<'a>] {
        let per_lane = self.classifiers.len() / self.lanes;
        &self.classifiers[lane * per_lane..(lane + 1) * per_lane]
    }

    /// A batch's mates packed into lane `lane`'s pinned memory (`None` on the CPU): done as the
    /// batch is read, so that the GPU's stage only uploads and runs kernels.
    pub fn pack(&self, batch: &Batch, lane: usize) -> Result<Option<Packed>, ClassifyError> {
        #[cfg(feature = "gpu")]
        if self.on_gpus() && !batch.is_empty() {
            return Ok(Some(crate::gpu::classify::pack_on(self.lane(lane), batch)?));
        }
        let _ = (batch, lane);
        Ok(None)
    }

    /// The GPU's part of a packed batch on lane `lane`: candidates and, as `want` needs them, the
    /// hit lists (`None` on the CPU).
    pub fn run(
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
    pub fn recycle(&self, found: Option<Found>, lane: usize) {
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
