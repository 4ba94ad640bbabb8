//! What can go wrong in a build. In a module of its own, below the CPU stages that return it. The
//! GPU's stages (`gpu::passes`, `gpu::condense`) return the GPU's error (`gpu::GpuError`) instead,
//! so that `gpu` never imports `indexing`; the build's `From` turns the build's errors they meet
//! back into this type's own variants.

use crate::index::IndexError;
use crate::input::InputError;
use crate::taxonomy::TaxonomyError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Taxonomy(#[from] TaxonomyError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("sequence id '{id}' appears twice: {first} and {second}; sequence ids must be unique")]
    DuplicateSequence { id: String, first: String, second: String },
    #[error("{file} record {record} ('{id}'): taxid {taxid} is not in the taxonomy (nor in merged.dmp)")]
    UnknownTaxid { file: String, record: u64, id: String, taxid: u32 },
    #[error("{count} sequences have no taxid (from a header tag or --seqid2taxid): {examples}")]
    MissingTaxids { count: usize, examples: String },
    #[error("nothing to index: {reason}")]
    NothingToIndex { reason: String },
    #[error("more than 2^32 - 1 sequences")]
    TooManyTargets,
    #[error(
        "the inputs hold more than 2^32 windows (about 480 Gbp with the default stride), more than one index numbers; build it in parts (--partition I/N, joined by kmerdb merge) or with a larger --stride"
    )]
    TooManyWindows,
    #[error("sequence '{id}' has {windows} windows; at most 2^32 fit a location")]
    SequenceTooLong { id: String, windows: u64 },
    #[error("{path} line {line}: {reason}")]
    List { path: PathBuf, line: usize, reason: String },
    #[error("{index} holds no {what}")]
    NotInIndex { index: PathBuf, what: String },
    #[error(
        "{file} record {record}: sequence id '{id}' is in {index} already; remove it first (--remove-targets) to replace it"
    )]
    AlreadyInIndex { id: String, file: String, record: u64, index: PathBuf },
    #[error("cannot update {index}: {reason}")]
    CannotUpdate { index: PathBuf, reason: String },
    #[error("cannot write the index to {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("cannot start {threads} threads: {reason}")]
    Threads { threads: usize, reason: String },
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(crate::gpu::GpuError),
    #[error("--gpus {0}: this kmerdb was built without GPU support (cargo feature `gpu`)")]
    NoGpuSupport(String),
    /// A setting out of its range, named by its flag (`BuildConfig::validate`).
    #[error("{0}")]
    Setting(String),
    #[error(transparent)]
    Sketch(#[from] crate::sketch::ParamError),
}

impl BuildError {
    /// Names `db` in a shard overflow that the GPU's stages, which do not know the index's path,
    /// reported without one.
    pub fn naming_index(self, db: &std::path::Path) -> Self {
        match self {
            BuildError::Index(IndexError::ShardOverflow { path, source }) if path.as_os_str().is_empty() => {
                BuildError::Index(IndexError::ShardOverflow { path: db.to_path_buf(), source })
            }
            other => other,
        }
    }
}

/// A GPU's error. The build's errors that the GPU passes meet come back as the build's own (a
/// shard that overflowed the location layout is the index's, as on the CPU, so that the build's
/// driver names the index in it: [`BuildError::naming_index`]).
#[cfg(feature = "gpu")]
impl From<crate::gpu::GpuError> for BuildError {
    fn from(e: crate::gpu::GpuError) -> Self {
        use crate::gpu::GpuError;
        match e {
            GpuError::ShardOverflow(source) => {
                BuildError::Index(IndexError::ShardOverflow { path: PathBuf::new(), source })
            }
            GpuError::TooManyWindows => BuildError::TooManyWindows,
            GpuError::Threads { threads, reason } => BuildError::Threads { threads, reason },
            GpuError::Output { path, reason } => BuildError::Output { path, reason },
            GpuError::Input(e) => BuildError::Input(e),
            other => BuildError::Gpu(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_names_the_index_of_a_gpu_shard_overflow() {
        let overflow = |path: &str| {
            BuildError::Index(IndexError::ShardOverflow {
                path: PathBuf::from(path),
                source: crate::index::locations::ShardOverflow,
            })
        };
        let named = overflow("").naming_index(std::path::Path::new("out.db")).to_string();
        assert!(named.starts_with("out.db"), "{named}");
        // A path already given stays.
        let kept = overflow("a.db").naming_index(std::path::Path::new("out.db")).to_string();
        assert!(kept.starts_with("a.db"), "{kept}");
        // A GPU's overflow becomes the index's, and is named the same way.
        #[cfg(feature = "gpu")]
        {
            let gpu = crate::gpu::GpuError::from(crate::index::locations::ShardOverflow);
            let named = BuildError::from(gpu).naming_index(std::path::Path::new("out.db")).to_string();
            assert_eq!(named, overflow("out.db").to_string());
        }
    }

    /// The build's errors the GPU passes meet read as the CPU build's; a GPU's own stays the GPU's.
    #[cfg(feature = "gpu")]
    #[test]
    fn the_gpus_build_errors_read_as_the_builds() {
        use crate::gpu::GpuError;
        let cases = [
            (GpuError::TooManyWindows, BuildError::TooManyWindows),
            (
                GpuError::Threads { threads: 4, reason: "no".into() },
                BuildError::Threads { threads: 4, reason: "no".into() },
            ),
            (
                GpuError::Output { path: "spill".into(), reason: "full".into() },
                BuildError::Output { path: "spill".into(), reason: "full".into() },
            ),
        ];
        for (gpu, build) in cases {
            let want = build.to_string();
            let got = BuildError::from(gpu);
            assert!(!matches!(got, BuildError::Gpu(_)), "{got}");
            assert_eq!(got.to_string(), want);
        }
        let own = BuildError::from(GpuError::WorkerStopped { worker: 1 });
        assert!(matches!(own, BuildError::Gpu(GpuError::WorkerStopped { worker: 1 })), "{own}");
    }
}
